"""lectures/homework_parallel.c: the starter fails exactly its checks (every
exercise's, on every rank, and nothing else), the instructor's solution
(tests/lectures/homework_parallel_solution.c) passes them all, and each
wrong method (tests/lectures/homework_parallel_wrong_*.c: right numbers by
a way the exercise does not ask for) fails exactly its method's check on
every rank, with a message that says what was seen.

Exercise 2's bubble check times a schedule that sleeps 20 and 40 ms per
operation (about 0.7 s); its bounds are in the homework, with their reasons.
LECTERN_HOMEWORK_REPEAT=N runs each case N times (the timing is meant to hold
on a loaded 2-core machine).

    /usr/bin/python3 tests/test_homework_parallel.py   (LECTERN_BUILD picks the build)
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tracecheck  # noqa: E402

BUILD = tracecheck.BUILD
STARTER = os.path.join(BUILD, "lectures", "homework_parallel")
SOLUTION = os.path.join(BUILD, "tests", "lectures", "homework_parallel_solution")
WORLD = 4
REPEAT = int(os.environ.get("LECTERN_HOMEWORK_REPEAT", "1"))

TP_DA = "exercise 1: da, this rank's columns of dL/dA"
TP_DB = "exercise 1: db, this rank's rows of dL/dB"
TP_DX = "exercise 1: dx, the whole input gradient"
TP_CALLS = "exercise 1: the backward needs exactly 1 all-reduce"
PIPE_ORDER = "exercise 2: stage"                        # "stage N's order runs each micro-batch's ..."
PIPE_TOGETHER = "exercise 2: the stages' orders run together"
PIPE_IN_FLIGHT = "exercise 2: at most p - s"
PIPE_BUBBLE = "exercise 2: measured bubble"
Z3_OUTPUT = "exercise 3: the output after 4 layers"
Z3_CALLS = "exercise 3: one dist_all_gather per layer"
Z3_PREFETCH = "exercise 3: layer i+1's all-gather was on its way"
EXERCISES = [TP_DA, TP_DB, TP_DX, TP_CALLS, PIPE_ORDER, PIPE_TOGETHER, PIPE_IN_FLIGHT, PIPE_BUBBLE, Z3_OUTPUT,
             Z3_CALLS, Z3_PREFETCH]


def run(binary, out):
    return subprocess.run([binary, "--quiet", "--out", out], capture_output=True, text=True, timeout=300)


def name(what):
    """The check's name: the start of its text (the rest says what was seen)."""
    for known in sorted(EXERCISES, key=len, reverse=True):
        if what.startswith(known):
            return known
    return what


def checks(trace):
    return sorted((rank, name(what), passed) for rank, what, passed in tracecheck.check_passes(trace))


def check_texts(trace, named):
    return [what for _, what, _ in tracecheck.check_passes(trace) if name(what) == named]


def troubles(trace):
    return [r for s in trace["steps"] for r in s["renderings"] if r["type"] in ("error", "warning")]


class HomeworkParallel(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def outcome(self, binary, status, trace_name):
        p = run(binary, self.out)
        self.assertEqual(p.returncode, status, tracecheck.why(p))
        return p, tracecheck.validate(os.path.join(self.out, trace_name))

    def test_starter_fails_exactly_the_exercises(self):
        p, t = self.outcome(STARTER, 1, "homework_parallel.failed.json")
        want = sorted((r, w, False) for r in range(WORLD) for w in EXERCISES)
        self.assertEqual(checks(t), want)
        self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: 0 passed, %d failed" % len(want))
        self.assertFalse(troubles(t))   # no error step, no leak warning
        # The starter's schedule is never run: each later check says why.
        self.assertIn("op 0 is not set", check_texts(t, PIPE_ORDER)[0])
        for text in check_texts(t, PIPE_BUBBLE):
            self.assertIn("not run, the orders break a rule above", text)
        for text in check_texts(t, Z3_OUTPUT):
            self.assertIn("zero3_forward returned NULL", text)

    def test_solution_passes_every_check(self):
        for _ in range(REPEAT):
            p, t = self.outcome(SOLUTION, 0, "homework_parallel.json")
            want = sorted((r, w, True) for r in range(WORLD) for w in EXERCISES)
            self.assertEqual(checks(t), want)
            self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: %d passed, 0 failed" % len(want))
            self.assertFalse(troubles(t))
            for text in check_texts(t, TP_CALLS):
                self.assertIn("megatron_backward made 1 dist_all_reduce call", text)
            for text in check_texts(t, Z3_PREFETCH):
                self.assertIn("layer 0: 2 started, 1.0 waited; layer 1: 3 started, 2.0 waited", text)

    def wrong(self, fixture, says):
        """A wrong method fails exactly the checks named by `says` on every
        rank, each failed text holding every string listed for it; nothing
        else fails and nothing goes wrong."""
        binary = os.path.join(BUILD, "tests", "lectures", "homework_parallel_wrong_" + fixture)
        for _ in range(REPEAT):
            p, t = self.outcome(binary, 1, "homework_parallel.failed.json")
            want = sorted((r, w, w not in says) for r in range(WORLD) for w in EXERCISES)
            self.assertEqual(checks(t), want)
            for w in says:
                texts = check_texts(t, w)
                self.assertEqual(len(texts), WORLD)
                for text in texts:
                    for part in says[w]:
                        self.assertIn(part, text)
            self.assertFalse(troubles(t))

    def test_dx_by_all_gather_fails_its_method(self):
        # Right gradients; every rank's partial dx gathered and added up
        # locally, where one all-reduce of dx is the method.
        self.wrong("tp_all_gather", {TP_CALLS: ["of dx (256 floats)", "megatron_backward made 1 dist_all_gather call"]})

    def test_gpipe_order_fails_the_in_flight_rule(self):
        # GPipe keeps every rule but the memory one, and its bubble is 1F1B's.
        self.wrong("gpipe", {PIPE_IN_FLIGHT: ["its order holds 8 at once with 8 micro-batches"]})

    def test_one_micro_batch_at_a_time_fails_the_bubble(self):
        # Keeps every rule (one micro-batch in flight), but leaves a bubble
        # of about 1 - 1/p = 0.75.
        self.wrong("serial", {PIPE_BUBBLE: ["0.750 with no cost to pass a message"]})

    def test_blocking_gather_fails_the_prefetch(self):
        # One gather started when each layer computes: the next was not.
        self.wrong("blocking_gather", {Z3_PREFETCH: ["layer 0: 1 started", "layer 2: 3 started"]})

    def test_gather_waited_at_once_fails_the_prefetch(self):
        # Started ahead, but waited before the compute: its bytes are already
        # counted when the layer runs.
        self.wrong("wait_at_once", {Z3_PREFETCH: ["layer 0: 2 started, 2.0 waited"]})


if __name__ == "__main__":
    unittest.main()
