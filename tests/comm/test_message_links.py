"""Message links (docs/trace-format.md, spawns[i].messages and
.collectives), checked against the calls tests/fixtures/links_fixture.c
made: for every message, the sender's and the receiver's rank, line (found
by the fixture's MARK comments), step (the note() the rank made just before
the call) and the bytes, which the fixture makes different for each k so a
send matched with the wrong receive shows; for the collectives, their
members, and the order of arrival a planted 200 ms delay makes.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

F = tracecheck.Fixture("links_fixture")
N = 8  # the fixture's N floats
FLOAT = 4
ENV = {"LECTERN_TIMEOUT": "30", "LECTERN_BACKEND": "", "LECTERN_NCCL_EMULATE": ""}


def line(mark):
    return F.line_of("MARK " + mark)


def expand(spawn):
    """The spawn with each link side [rank, site, step, start, end] spelled
    out as a dict, its site's call, path, line and function in it (a
    collective's times named arrive and leave)."""
    sites = spawn["link_sites"]

    def side(x, t0="start", t1="end"):
        rank, site, step, a, b = x
        d = dict(sites[site]) if site is not None else {}
        d.update({"rank": rank, "step": step, t0: a, t1: b})
        return d
    for m in spawn["messages"]:
        m["from"], m["to"] = side(m["from"]), side(m["to"])
    for c in spawn["collectives"]:
        c["calls"] = [side(x, "arrive", "leave") for x in c["calls"]]
    return spawn


class Talk(tracecheck.FixtureTest):
    ENV = ENV
    BACKEND = "mpi"

    @classmethod
    def setUpClass(cls):
        import tempfile
        import shutil
        out = tempfile.mkdtemp(prefix="lectern-links-")
        try:
            p = F.run(out, env=cls.ENV, timeout=180)
            assert p.returncode == 0, p.stderr
            cls.trace = tracecheck.validate(os.path.join(out, "links_fixture.json"))
        finally:
            shutil.rmtree(out, ignore_errors=True)
        cls.spawn = expand(cls.trace["spawns"][0])

    def test_backend(self):
        self.assertEqual(self.spawn["backend"], self.BACKEND)

    def step_line(self, side):
        """The line of the step a link side names (its rank's last step before the call)."""
        s = self.trace["steps"][side["step"]]
        self.assertEqual(s["rank"], side["rank"])
        self.assertEqual(s["spawn"], 0)
        return s["stack"][-1]["line"]

    def messages(self, send_line):
        return [m for m in self.spawn["messages"] if m["from"]["line"] == send_line]

    def test_nothing_left_over(self):
        for k in ("links_unmatched", "links_dropped", "links_missing"):
            self.assertNotIn(k, self.spawn)
        self.assertEqual(len(self.spawn["messages"]), 9 + 4 + 4 + 2)

    def test_pipeline_kth_send_meets_kth_receive(self):
        got = self.messages(line("pipe send"))
        self.assertEqual(len(got), 9)
        for a in range(3):
            pair = [m for m in got if m["from"]["rank"] == a]
            pair.sort(key=lambda m: m["from"]["start"])
            self.assertEqual([m["bytes"] for m in pair], [k * N * FLOAT for k in (1, 2, 3)])
            for m in pair:
                self.assertEqual(m["to"]["rank"], a + 1)
                self.assertEqual((m["from"]["call"], m["to"]["call"]), ("send", "recv"))
                self.assertEqual(m["to"]["line"], line("pipe recv"))
                self.assertEqual(self.step_line(m["from"]), line("note pipeline"))
                self.assertEqual(self.step_line(m["to"]), line("note pipeline"))
                self.assertEqual(m["from"]["function"], "pipeline")
                self.assertEqual(m["from"]["path"], F.rel)
            # the k-th: the receive of the k-th message started before the
            # (k+1)-th was sent, and a message is received after it was sent
            for m in pair:
                self.assertLessEqual(m["from"]["start"], m["to"]["end"])

    def test_ring_isend_meets_recv_from_left(self):
        got = self.messages(line("ring isend"))
        self.assertEqual(sorted((m["from"]["rank"], m["to"]["rank"]) for m in got), [(0, 1), (1, 2), (2, 3), (3, 0)])
        for m in got:
            self.assertEqual(m["kind"], "isend")
            self.assertEqual(m["to"]["call"], "recv")
            self.assertEqual(m["to"]["line"], line("ring recv"))
            self.assertEqual(m["bytes"], (m["from"]["rank"] + 1) * N * FLOAT)
            self.assertEqual(self.step_line(m["from"]), line("note ring"))

    def test_sendrecv_both_halves(self):
        got = self.messages(line("sendrecv"))
        self.assertEqual(sorted((m["from"]["rank"], m["to"]["rank"]) for m in got), [(0, 1), (1, 2), (2, 3), (3, 0)])
        for m in got:
            self.assertEqual((m["from"]["call"], m["to"]["call"]), ("sendrecv", "sendrecv"))
            self.assertEqual(m["to"]["line"], line("sendrecv"))
            self.assertEqual(m["bytes"], (m["from"]["rank"] + 1) * N * FLOAT)
            self.assertEqual(self.step_line(m["to"]), line("note sendrecv"))

    def test_waits_out_of_order_keep_posting_order(self):
        a = self.messages(line("ooo isend a"))
        b = self.messages(line("ooo isend b"))
        self.assertEqual(len(a), 1)
        self.assertEqual(len(b), 1)
        a, b = a[0], b[0]
        self.assertEqual((a["to"]["line"], a["bytes"]), (line("ooo irecv a"), N * FLOAT))
        self.assertEqual((b["to"]["line"], b["bytes"]), (line("ooo irecv b"), 2 * N * FLOAT))
        self.assertEqual((a["to"]["call"], a["from"]["call"]), ("irecv", "isend"))
        # an async call ends when its wait returned: rank 1 waited for b first
        self.assertLessEqual(b["to"]["end"], a["to"]["end"])
        self.assertEqual(self.step_line(a["to"]), line("note out of order"))

    def test_group_all_reduce_the_delayed_rank_arrives_last(self):
        got = [c for c in self.spawn["collectives"] if c["op"] == "all_reduce"]
        self.assertEqual(len(got), 1)
        c = got[0]
        self.assertEqual(c["group"], [0, 1, 2])
        self.assertNotIn("world", c)
        self.assertEqual(c["bytes"], 4 * N * FLOAT)
        self.assertEqual(sorted(x["rank"] for x in c["calls"]), [0, 1, 2])
        self.assertEqual(c["last"], 1)
        arrive = {x["rank"]: x["arrive"] for x in c["calls"]}
        leave = {x["rank"]: x["leave"] for x in c["calls"]}
        # rank 1 slept 200 ms before its call: it arrives at least 150 ms
        # after the others (the sleep, less a loaded machine's scheduling
        # slack the others' own arrivals may have had), and they leave only
        # after it arrived
        for r in (0, 2):
            self.assertGreater(arrive[1] - arrive[r], 0.15)
            self.assertGreaterEqual(leave[r], arrive[1])
        for x in c["calls"]:
            self.assertEqual(x["line"], line("group all_reduce"))
            self.assertEqual(self.step_line(x), line("note group"))

    def test_world_broadcast(self):
        got = [c for c in self.spawn["collectives"] if c["op"] == "broadcast"]
        self.assertEqual(len(got), 1)
        c = got[0]
        self.assertEqual((c["group"], c.get("world")), ([0, 1, 2, 3], True))
        self.assertEqual(c["bytes"], 5 * N * FLOAT)
        self.assertEqual(sorted(x["rank"] for x in c["calls"]), [0, 1, 2, 3])
        for x in c["calls"]:
            self.assertEqual(x["line"], line("broadcast"))
            self.assertEqual(self.step_line(x), line("note broadcast"))
            self.assertLessEqual(x["arrive"], x["leave"])
        self.assertEqual(c["last"], max(c["calls"], key=lambda x: x["arrive"])["rank"])


class TalkOnNcclEmulator(Talk):
    """The same calls through NCCL's logic (comm_nccl.c) on the CPU emulator:
    the links are recorded where every backend's calls pass."""
    ENV = dict(ENV, LECTERN_BACKEND="nccl", LECTERN_NCCL_EMULATE="1")
    BACKEND = "nccl"


class Unmatched(tracecheck.FixtureTest):
    def test_a_rank_stopped_before_its_record_is_said(self):
        """Rank 0 sends twice, rank 1 receives once: rank 0 is stopped in its
        second send (a send its peer never matches), so its record never
        reaches the lecture; rank 1's receive is listed as unmatched with
        that reason, and the first spawn's links are all there."""
        env = dict(ENV, LINKS_CASE="unmatched")
        rc, _, err = self.run_fixture("links_fixture", env, timeout=180)
        self.assertEqual(rc, 0, err)  # spawn_expect_failure: the failure is the lesson
        t = tracecheck.validate(os.path.join(self.out, "links_fixture.json"))
        s = t["spawns"][1]
        self.assertEqual(s["status"], "failed")
        self.assertEqual(s["links_missing"], [0])
        left = s["links_unmatched"]
        self.assertEqual(len(left), 1, left)
        self.assertEqual((left[0]["rank"], left[0]["call"], left[0]["line"]), (1, "recv", line("short recv")))
        self.assertIn("rank 0's calls were not recorded", left[0]["why"])
        self.assertEqual(len(t["spawns"][0]["messages"]), 19)
        self.assertEqual(len(t["spawns"][1]["messages"]), 0)
        self.assertNotIn("links_unmatched", t["spawns"][0])

    def test_past_the_cap_calls_are_counted_and_the_rest_matched(self):
        """4,100 messages: each rank keeps its first 4,096 calls, drops 4 and
        says so; the kept ones all match (both ranks drop the same tail)."""
        env = dict(ENV, LINKS_CASE="many")
        rc, _, err = self.run_fixture("links_fixture", env, timeout=180)
        self.assertEqual(rc, 0, err)
        t = tracecheck.validate(os.path.join(self.out, "links_fixture.json"))
        s = t["spawns"][1]
        self.assertEqual(s["links_dropped"], [4100 - 4096, 4100 - 4096])
        self.assertEqual(len(s["messages"]), 4096)
        self.assertNotIn("links_unmatched", s)
        self.assertNotIn("links_dropped", t["spawns"][0])
        sites = s["link_sites"]
        self.assertEqual({sites[m["from"][1]]["line"] for m in s["messages"]}, {line("many send")})


if __name__ == "__main__":
    unittest.main()
