"""Process groups and all-to-all (tests/fixtures/groups_fixture.c).

Values: every group collective, blocking and async, on 2 to 8 ranks, over
groups of 1 to n ranks, disjoint (pairs, singletons) and overlapping (the
rows and columns of a mesh: each rank in a "TP" and a "DP" group), each
compared with what this test computes from the fixture's inputs (the same
formula, written again here); all-to-all against a transpose computed here.
Once on Open MPI, once on the staged pipeline (LECTERN_STAGE_TEST=1, the
code path of ranks sharing a GPU, with memcpy for the copies) in chunks of
2 floats, and once through the shared-GPU protocol over shared memory
(LECTERN_SHARED_IPC_CPU=1, runtime/comm/shared_ipc.c) in chunks of 2.

Mistakes: lists that disagree, a list without the caller, a rank listed
twice or out of range, the ranks of a group making different calls, a freed
group, a rank waiting in a group call for a rank that
returned: each an error at the right line naming the ranks and the group.
LECTERN_BUILD picks the build folder.
"""
import math
import os
import re
import sys
import tempfile
import shutil
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, line_of  # noqa: E402

SRC = os.path.join(tracecheck.ROOT, "tests", "fixtures", "groups_fixture.c")
WHERE = "tests/fixtures/groups_fixture.c"
N = 3


def v(rank, i):
    return float((i * 7 + rank * 13) % 17 - 8)


def partitions(world, rank):
    """{partition: the list of the group `rank` is in}, as the fixture makes them."""
    first = rank - rank % 2
    pair = [first, first + 1] if first + 1 < world else [first]
    p = {"world": list(range(world)), "null": list(range(world)), "self": [rank],
         "pairs": pair, "reversed": pair[::-1]}
    if world % 2 == 0:
        w = world // 2
        p["tp"] = p["tp2"] = [(rank // w) * w + i for i in range(w)]
        p["dp"] = [rank % w, rank % w + w]
    return p


def expected(call, g, k):
    """What rank g[k] holds after `call` on group g (world ranks, in order)."""
    p = len(g)
    red = {"sum": sum, "avg": lambda xs: sum(xs) / p, "max": max, "min": min}
    if call.startswith("all_reduce_") or call == "async_all_reduce_avg":
        f = red[call.rsplit("_", 1)[1]]
        return [f([v(q, i) for q in g]) for i in range(N)]
    if call.endswith("reduce_scatter_sum"):
        return [sum(v(q, k * N + i) for q in g) for i in range(N)]
    if call.endswith("all_gather"):
        return [v(q, i) for q in g for i in range(N)]
    if call == "broadcast_last":
        return [v(g[-1], i) for i in range(N)]
    if call == "async_broadcast_first":
        return [v(g[0], i) for i in range(N)]
    if call.endswith("all_to_all"):
        # Piece j comes from group rank j: its piece k.
        return [v(g[j], k * N + i) for j in range(p) for i in range(N)]
    raise AssertionError("unknown call " + call)


CALLS = ["all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_reduce_min", "reduce_scatter_sum",
         "all_gather", "broadcast_last", "all_to_all", "async_all_reduce_avg", "async_reduce_scatter_sum",
         "async_all_gather", "async_broadcast_first", "async_all_to_all"]


class Values(FixtureTest):
    def run_values(self, worlds, env=None):
        d = tempfile.mkdtemp(prefix="lectern-test-groups-")
        self.addCleanup(shutil.rmtree, d, True)
        e = {"GROUPS_CASE": "values", "GROUPS_DIR": d, "GROUPS_WORLDS": ",".join(map(str, worlds))}
        e.update(env or {})
        rc, out, err = self.run_fixture("groups_fixture", e, timeout=300)
        self.assertEqual(rc, 0, err)
        checked = 0
        for world in worlds:
            for rank in range(world):
                with open(os.path.join(d, "w%d_r%d.txt" % (world, rank))) as f:
                    lines = [ln.split() for ln in f.read().splitlines()]
                parts = partitions(world, rank)
                seen = set()
                for ln in lines:
                    where = "world %d rank %d: %s %s" % (world, rank, ln[0], ln[1])
                    if ln[0] == "big":
                        self.assertEqual(ln[4], "0", where + ": elements of the world all-to-all wrong")
                        seen.add(("big", ln[1]))
                        continue
                    part, call, members, grank = ln[0], ln[1], [int(x) for x in ln[2].split(",")], int(ln[3])
                    self.assertEqual(members, parts[part], where)
                    self.assertEqual(grank, members.index(rank), where + ": dist_group_rank")
                    got = [float(x) for x in ln[4:]]
                    want = expected(call, members, grank)
                    self.assertEqual(len(got), len(want), where)
                    for a, b in zip(got, want):
                        # Integers are exact in float; AVG is one float division (rounding only).
                        self.assertTrue(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), "%s: %s != %s" % (where, got, want))
                    seen.add((part, call))
                    checked += 1
                want_seen = {(p, c) for p in parts for c in CALLS} | {("big", "all_to_all")}
                self.assertEqual(seen, want_seen, "world %d rank %d: calls missing" % (world, rank))
        return checked

    def test_every_group_collective_on_2_to_8_ranks(self):
        n = self.run_values([2, 3, 4, 5, 8])
        self.assertGreater(n, 1000)

    def test_the_staged_path_in_small_chunks(self):
        # The pipeline ranks sharing a GPU use, with memcpy for copies:
        # chunks of 2 floats cut every piece of 3.
        self.run_values([2, 4], {"LECTERN_STAGE_TEST": "1", "LECTERN_STAGE_CHUNK": "2"})

    def test_the_shared_gpu_protocol_in_small_chunks(self):
        # The protocol of ranks sharing a GPU (runtime/comm/shared_ipc.c) over
        # shared memory, on 2 to 4 ranks: group calls map group ranks to the
        # world's windows; chunks of 2 floats cut every piece of 3.
        self.run_values([2, 3, 4], {"LECTERN_STAGE_TEST": "1", "LECTERN_SHARED_IPC_CPU": "1", "LECTERN_STAGE_CHUNK": "2"})
        t = tracecheck.validate(os.path.join(self.out, "groups_fixture.json"))
        reasons = [s.get("reason", "") for s in t["spawns"]]
        self.assertTrue(reasons and all("shared-GPU protocol over shared memory" in r for r in reasons), reasons)
        texts = [r["data"] for s in t["steps"] for r in s["renderings"] if isinstance(r.get("data"), str)]
        self.assertFalse([x for x in texts if "cannot run on the device" in x], "the protocol's probe failed")


class Test(FixtureTest):
    def test_dist_test_says_in_flight_then_done(self):
        rc, out, err = self.run_fixture("groups_fixture", {"GROUPS_CASE": "test"})
        self.assertEqual(rc, 0, err)
        t = tracecheck.validate(os.path.join(self.out, "groups_fixture.json"))
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        # Rank 0 cannot have sent: it sends after a barrier rank 1 enters after this test.
        self.assertIn("rank 1: test before the send 0", texts)
        self.assertIn("rank 1: test after polling 1", texts)
        self.assertIn("rank 1: received 1 2 3 4", texts)
        self.assertTrue(any(x.startswith("rank 0: isend done after") for x in texts), texts)
        for rank in (0, 1):
            self.assertIn("rank %d: all-reduce test 1" % rank, texts)
            self.assertIn("rank %d: all-reduce 3 20 -2" % rank, texts)


class TimedRegion(FixtureTest):
    def test_group_calls_agreed_before_skip_their_check(self):
        # In the region each rank skips 10 row all-to-alls, 10 column
        # all-reduces, 10 world all-reduces and 5 all-reduces on a pair made
        # there (after its first, checked), and checks the two calls new to
        # their group: 2 made, 35 skipped. The pair, freed inside the region,
        # compares what it skipped then; the region's end the rest.
        e = {"GROUPS_CASE": "timed"}
        rc, out, err = self.run_fixture("groups_fixture", e)
        self.assertEqual(rc, 0, err)
        t = tracecheck.validate(os.path.join(self.out, "groups_fixture.json"))
        got = {}
        for s in t["steps"]:
            for r in s["renderings"]:
                m = re.match(r"^result rank (\d) made (\d+) skipped (\d+) wide (\S+) (\S+)$", r.get("data") or "")
                if m:
                    got[int(m.group(1))] = tuple(float(x) for x in m.groups()[1:])
        self.assertEqual(sorted(got), [0, 1, 2, 3])
        for rank, (made, skipped, first, last) in got.items():
            self.assertEqual((made, skipped), (2, 35), "rank %d" % rank)
            # the column's sum of the ranks' own inputs, computed here
            col = [rank % 2, rank % 2 + 2]
            self.assertEqual((first, last), (sum(v(q, 0) for q in col), sum(v(q, 2 * N - 1) for q in col)))

    def test_a_mismatch_in_a_group_is_named_at_the_regions_end(self):
        self.named_at("timed_mismatch", "MARK:timed_end")

    def test_a_mismatch_in_a_group_freed_in_the_region_is_named_where_it_is_freed(self):
        self.named_at("freed_mismatch", "MARK:free_in_region")

    def named_at(self, case, marker):
        """Ranks 0 and 2 (group {0,2}) each have an error at the marked line,
        ranks 1 and 3 none."""
        t, err = self.run_traced("groups_fixture", {"GROUPS_CASE": case}, 1)
        line = line_of(SRC, marker)
        errs = [(s.get("rank"), s["stack"][-1]["line"], r["data"]) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "error"]
        named = {rank for rank, ln, m in errs if ln == line and "the ranks of group {0,2} made different "
                 "collective calls on it inside the timed region" in m}
        self.assertEqual(named, {0, 2}, errs)
        self.assertFalse([m for rank, _, m in errs if rank in (1, 3)], errs)


class Mistakes(FixtureTest):
    def run_case(self, case, env=None):
        return self.run_traced("groups_fixture", dict({"GROUPS_CASE": case}, **(env or {})), 1)

    errors = staticmethod(tracecheck.errors)

    def at_line(self, case, text, ranks):
        """Run `case`: each rank of `ranks` has an error step containing `text`
        at the line marked MARK:case."""
        t, _ = self.run_case(case)
        line = line_of(SRC, "MARK:" + case)
        for rank in ranks:
            msg = self.one_error(self.errors(t), rank, text, line)
            self.assertTrue(msg.startswith("%s:%d: " % (WHERE, line)), msg)
        # Nobody went on to use a group after the error.
        self.assertFalse([s for s in t["steps"] for r in s["renderings"] if "made a group" in str(r.get("data"))])

    def test_lists_that_disagree_name_both_ranks(self):
        self.at_line("disagree", "dist_new_group(): ranks 1 and 0 disagree: rank 1 says its group is "
                     "{0, 1}, rank 0 says {0, 2}", range(4))

    def test_a_list_without_the_caller(self):
        self.at_line("without", "dist_new_group(): rank 1's list {0} does not hold rank 1", range(2))

    def test_a_rank_listed_twice(self):
        self.at_line("twice", "dist_new_group(): rank 1's list {0, 1, 1} holds rank 1 twice", range(3))

    def test_a_rank_out_of_range(self):
        self.at_line("range", "dist_new_group(): rank 0's list {0, 5} holds 5, which is not a rank of "
                     "this world (0 to 1)", range(2))

    def test_a_group_whose_ranks_make_different_calls(self):
        t, _ = self.run_case("mismatch")
        six, four = line_of(SRC, "MARK:g6"), line_of(SRC, "MARK:g4")
        errs = self.errors(t)
        for rank, own, other, n_own, n_other in ((0, four, six, 4, 6), (2, six, four, 6, 4)):
            msg = self.one_error(errs, rank, "made different calls", own)
            self.assertIn("the ranks of group {0,2} made different calls", msg)
            self.assertIn("rank %d: dist_all_reduce_in of %d floats (sum) at %s:%d" % (rank, n_own, WHERE, own), msg)
            self.assertIn("rank %d: dist_all_reduce_in of %d floats (sum) at %s:%d"
                          % (2 - rank, n_other, WHERE, other), msg)
        # Ranks 1 and 3, the other group, agreed: no error of theirs.
        self.assertFalse([m for s, m in errs if s.get("rank") in (1, 3) and "different calls" in m])

    def test_a_freed_group(self):
        self.at_line("freed", "dist_all_reduce_in(): this group is not one of this spawn's", [0])

    def test_a_request_tested_after_its_wait(self):
        self.at_line("tested", "dist_test(): this request is not one this spawn made, or it was waited "
                     "for already", [0, 1])

    def test_a_rank_waiting_in_a_group_call_names_the_group(self):
        t, err = self.run_case("waits", {"LECTERN_TIMEOUT": "20"})
        line = line_of(SRC, "MARK:waits")
        self.assertLess(self.seconds, 60)
        msg = self.one_error(self.errors(t), 0, "", line)
        self.assertIn("waits in dist_all_reduce_in(group {0,1})", msg)
        self.assertNotIn("{0,1})()", msg)
        self.assertIn("rank 1, which returned", msg)


if __name__ == "__main__":
    unittest.main()
