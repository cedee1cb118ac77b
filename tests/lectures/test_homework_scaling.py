"""lectures/homework_scaling.c: the starter fails exactly its checks (every
exercise's, on every rank, and nothing else), the instructor's solution
(tests/fixtures/homework_scaling_solution.c) passes them all, each wrong
method (tests/fixtures/homework_scaling_wrong_*.c: right numbers by a way the
exercise does not ask for) fails exactly its method's check on every rank,
with a message that says what was seen, and each other method the text
allows (homework_scaling_alt_*.c) passes.

The ring's method is an order of events, read when the given attend_block()
runs: the next block's bytes issued to and asked from the neighbours, and
its dist_isend / dist_irecv not yet waited for (dist_traffic's waited counts
the point-to-point waits). A blocking dist_sendrecv between the computes, or
the non-blocking pair waited for at once, fails it; the receive first, or K
and V as two messages each, passes.

--grade's weights (30, 40, 30) and --variant's sizes are checked here too:
the solution under three seeds passes every check with the same test names,
the values in the ranges the source declares, and the checks' texts count
the variant's sizes. LECTERN_HOMEWORK_REPEAT=N runs each case N times.

    /usr/bin/python3 tests/lectures/test_homework_scaling.py   (LECTERN_BUILD picks the build)
"""
import json
import math
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

SOLUTION = tracecheck.fixture("homework_scaling_solution")
WORLD = 4
RING_DH, MOE_D = 16, 8   # the homework's head width and token width

SP_DA = "exercise 1: da, this rank's columns of dL/dA"
SP_DB = "exercise 1: db, this rank's rows of dL/dB"
SP_DX = "exercise 1: dx, this rank's rows of dL/dx"
SP_CALLS = "exercise 1: the conjugate collectives, an all-gather of dy and a reduce-scatter of dx"
RING_OUT = "exercise 2: attention over the whole sequence"
RING_BYTES = "exercise 2: K/V round the ring, w - 1 blocks each way"
RING_OVERLAP = "exercise 2: the next block on its way while this one computes"
MOE_COUNTS = "exercise 3: counts, the real rows from each rank"
MOE_ROWS = "exercise 3: the kept tokens' rows, from each rank in token order"
MOE_CALLS = "exercise 3: counts then payload, two all-to-alls of capacity-sized pieces"
EXERCISE = {1: [SP_DA, SP_DB, SP_DX, SP_CALLS], 2: [RING_OUT, RING_BYTES, RING_OVERLAP],
            3: [MOE_COUNTS, MOE_ROWS, MOE_CALLS]}
EXERCISES = EXERCISE[1] + EXERCISE[2] + EXERCISE[3]
WEIGHTS = {1: 30, 2: 40, 3: 30}

NAMES = tracecheck.CheckNames(EXERCISES)
check_texts = NAMES.check_texts


def notes(trace):
    return [r["data"] for s in trace["steps"] for r in s["renderings"] if r["type"] == "markdown"]


def declared():
    """{name: (lo, hi, default)} of the homework's variant_int calls, read
    from its source (not from the runtime)."""
    with open(os.path.join(tracecheck.ROOT, "lectures", "homework_scaling.c")) as f:
        src = f.read()
    return {n: (int(lo), int(hi), int(d))
            for n, lo, hi, d in re.findall(r'variant_int\("([^"]+)", (\d+), (\d+), (\d+)\)', src)}


class HomeworkScaling(tracecheck.HomeworkTest):
    HOMEWORK = "homework_scaling"
    NAMES = NAMES

    def test_starter_fails_exactly_the_exercises(self):
        p, t = self.starter_fails_every_check()
        for text in check_texts(t, SP_CALLS):
            self.assertIn("sp_backward made no calls", text)
        for text in check_texts(t, RING_OVERLAP):
            self.assertIn("attend_block was called 0 times for 4 blocks", text)
        for text in check_texts(t, MOE_CALLS):
            self.assertIn("moe_dispatch made no calls", text)

    def test_solution_passes_every_check(self):
        for _ in range(self.REPEAT):
            p, t = self.solution_passes_every_check()
            for text in check_texts(t, SP_CALLS):
                self.assertIn("sp_backward made 1 dist_reduce_scatter call, 1 dist_all_gather call", text)
                self.assertIn("(1.00x)", text)
            # Blocks of 2 x 8 rows of 16 floats: 1024 bytes. Before block j
            # computes, j + 1 blocks have been sent and asked for and the
            # pair is open; the last computes with 3 sent, nothing open.
            for text in check_texts(t, RING_OVERLAP):
                self.assertIn("block 0: 1024 sent, 1024 asked for, 1/1 open; block 1: 2048 sent, 2048 asked for, "
                              "1/1 open; block 2: 3072 sent, 3072 asked for, 1/1 open; block 3: 3072 sent, 3072 "
                              "asked for, 0/0 open", text)
            for text in check_texts(t, MOE_CALLS):
                self.assertIn("moe_dispatch made 2 dist_all_to_all calls", text)
            # The gate's bias makes some experts drop: 2 choices of 16 tokens
            # on 4 ranks are 128 pairs, the capacity ceil(1.25 * 16 * 2 / 4) = 10.
            drop = [n for n in notes(t) if n.startswith("The gate sent")]
            self.assertEqual(len(drop), 1)
            m = re.search(r"sent (\d+) token-expert pairs of (\d+) tokens to 4 experts of capacity (\d+) per rank: "
                          r"(\d+) kept, (\d+) dropped \(([\d.]+)%\)", drop[0])
            routed, tokens, cap, kept, dropped, share = m.groups()
            self.assertEqual((int(routed), int(tokens), int(cap)), (128, 64, 10))
            self.assertEqual(int(kept) + int(dropped), 128)
            self.assertGreater(int(dropped), 0)
            self.assertAlmostEqual(float(share), 100 * int(dropped) / 128, delta=0.05)

    # ---- wrong methods: right numbers, wrong way ----

    def test_sp_all_reduce_then_slice_fails_its_method(self):
        # The partial dx all-reduced whole and this rank's rows cut out: the
        # all-reduce sends twice a reduce-scatter's bytes (nominal: 3 parts
        # of 2 where the two collectives send 2).
        self.wrong("wrong_sp_all_reduce", {SP_CALLS: ["sp_backward made 1 dist_all_reduce call, 1 dist_all_gather "
                                                      "call", "6144 bytes sent (nominal)", "9216 bytes (1.50x)"]})

    def test_ring_blocking_sendrecv_fails_the_overlap(self):
        # The same bytes round the same ring, sent after each compute.
        self.wrong("wrong_ring_blocking", {RING_OVERLAP: [
            "when block 0 computed, block 1 had not been sent and asked for", "block 0: 0 sent, 0 asked for"]})

    def test_ring_waited_at_once_fails_the_overlap(self):
        # Issued before the compute, waited for before it too.
        self.wrong("wrong_ring_wait_at_once", {RING_OVERLAP: [
            "when block 0 computed, block 1's receive had been waited for already",
            "block 0: 1024 sent, 1024 asked for, 0/0 open"]})

    def test_moe_all_gather_fails_its_method(self):
        # Every token to every rank, the capacity applied at the receiver.
        self.wrong("wrong_moe_all_gather", {MOE_CALLS: ["moe_dispatch made 2 dist_all_gather calls"]})

    def test_moe_buffers_of_every_token_fail_on_their_bytes(self):
        # Capacity applied, but pieces of 16 rows instead of 10: 4 + 4 x 16
        # x 8 = 516 floats where 4 + 4 x 10 x 8 = 324.
        self.wrong("wrong_moe_pad_tokens", {MOE_CALLS: ["324 floats in all",
                                                        "moe_dispatch made 2 dist_all_to_all calls of 516 floats"]})

    # ---- other methods the text allows ----

    def test_sp_async_collectives_pass(self):
        self.wrong("alt_sp_async", {}, status=0)

    def test_ring_receive_first_in_two_messages_passes(self):
        # dist_irecv before dist_isend, K and V as two messages each: the
        # bytes and the order of events are the text's.
        _, t = self.wrong("alt_ring_recv_first", {}, status=0)
        for text in check_texts(t, RING_OVERLAP):
            self.assertIn("block 0: 1024 sent, 1024 asked for, 2/2 open", text)

    def test_moe_expert_major_packing_and_async_all_to_all_pass(self):
        self.wrong("alt_moe_expert_major", {}, status=0)

    # ---- a mistake ----

    def test_reading_the_block_still_received_names_the_students_call(self):
        # attend_block(spare) before the receive into spare is waited for:
        # the read is in the course's attend_block(); the error is at the
        # student's call and names the receive's line. It costs exercise
        # 2's checks only.
        p, t = self.outcome("ring_read_early", 1)
        self.only_not_reached(p, t, EXERCISE[2])
        self.assertEqual([sp["status"] for sp in t["spawns"]], ["ok", "failed", "ok"])
        fixture = "tests/fixtures/homework_scaling_ring_read_early.c"
        call = tracecheck.line_of(os.path.join(tracecheck.ROOT, fixture), "attend_block(spare)")
        recv = tracecheck.line_of(os.path.join(tracecheck.ROOT, fixture), "dist_irecv(spare")
        errs = [(s["stack"][-1], r["data"]) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"
                and "attend_block" in r["data"]]
        self.assertEqual(len(errs), WORLD)
        for frame, data in errs:
            self.assertEqual((frame["path"], frame["line"], frame["function"]), (fixture, call, "ring_attention"))
            self.assertTrue(data.startswith("%s:%d: attend_block: reads a tensor that dist_irecv at %s:%d is still "
                                            "writing into" % (fixture, call, fixture, recv)), data)

    # ---- the grade and the variants ----

    def graded(self, binary, status, *args):
        results = os.path.join(self.out, "results.json")
        p = tracecheck.run(binary, self.out, "--grade", results, *args)
        self.assertEqual(p.returncode, status, tracecheck.why(p))
        with open(results) as f:
            return json.load(f)

    def test_grade_weights(self):
        # 30, 40 and 30 points over each exercise's checks on 4 ranks. The
        # scores are written rounded (a test's 40 / 12 as 3.33333, the
        # run's 86.667): within 1e-3.
        r = self.graded(SOLUTION, 0)
        self.assertEqual((r["score"], r["max_score"]), (100, 100))
        for k, names in EXERCISE.items():
            tests = [x for x in r["tests"] if x["name"].split(": ", 1)[1] in names]
            self.assertEqual(len(tests), WORLD * len(names))
            self.assertAlmostEqual(sum(x["max_score"] for x in tests), WEIGHTS[k], delta=1e-3)
        r = self.graded(tracecheck.fixture("homework_scaling_wrong_ring_blocking"), 1)
        self.assertAlmostEqual(r["score"], 100 - 40 / 3, delta=1e-3)   # 4 of exercise 2's 12 checks
        r = self.graded(tracecheck.lecture("homework_scaling"), 1)
        self.assertEqual((r["score"], r["max_score"]), (0, 100))

    def test_solution_under_three_seeds(self):
        ranges = declared()
        self.assertEqual(sorted(ranges), ["rows of each rank's sequence shard", "rows of each ring block",
                                          "tokens per rank"])
        base = sorted(x["name"] for x in self.graded(SOLUTION, 0)["tests"])
        picked = []
        for seed in (1, 2, 3):
            r = self.graded(SOLUTION, 0, "--variant", str(seed))
            self.assertEqual((r["score"], r["max_score"]), (100, 100))
            self.assertEqual(sorted(x["name"] for x in r["tests"]), base)
            values = r["extra_data"]["variant"]["values"]
            self.assertEqual(sorted(values), sorted(ranges))
            for n, v in values.items():
                self.assertTrue(ranges[n][0] <= v <= ranges[n][1], (n, v))
            picked.append(tuple(sorted(values.items())))
            out = {x["name"].split(": ", 1)[1]: x["output"] for x in r["tests"] if x["name"].startswith("rank 0:")}
            # The sizes reach the ranks: dy's floats, the ring's blocks, the capacity.
            s, t, tokens = (values["rows of each rank's sequence shard"], values["rows of each ring block"],
                            values["tokens per rank"])
            self.assertIn("dy (%d floats in all)" % (s * WORLD * 32), out[SP_CALLS])
            self.assertIn("3 blocks of %d bytes" % (2 * t * RING_DH * 4), out[RING_BYTES])
            cap = math.ceil(1.25 * tokens * 2 / WORLD)
            self.assertIn("(4 pieces of %d x %d), %d floats in all" % (cap, MOE_D, 4 + 4 * cap * MOE_D),
                          out[MOE_CALLS])
        self.assertEqual(len(set(picked)), 3)


if __name__ == "__main__":
    unittest.main()
