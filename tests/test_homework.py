"""lectures/homework_08.c: the starter fails exactly the checks it should
(every exercise's, on every rank, and nothing else), the instructor's
solution (tests/lectures/homework_08_solution.c) passes them all, the
deadlock exercise is stopped with each rank's line in exchange(), and each
wrong method (tests/lectures/homework_08_wrong_*.c: right numbers by a way
the exercise does not ask for) fails exactly its method's check on every
rank, with a message that says what was expected and what was seen.

    /usr/bin/python3 tests/test_homework.py        (LECTERN_BUILD picks the build)
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD
STARTER = os.path.join(BUILD, "lectures", "homework_08")
SOLUTION = os.path.join(BUILD, "tests", "lectures", "homework_08_solution")
WORLD = 4
RING_VALUES = "exercise 1: ring all-reduce"
RING_CALLS = "exercise 1: ring_all_reduce used sends and receives only"   # (a prefix: the passing text)
RING_BYTES = "exercise 1: a ring sends 2(w-1) = 6 chunks"
BUCKET_CALLS = "exercise 2: expected 1 all-reduce per step"
ZERO1_VALUES = "exercise 3: parameters after a ZeRO-1 step"
ZERO1_TINY = "exercise 3: parameters after a ZeRO-1 step with gradients near AdamW's eps"
ZERO1_CALLS = "exercise 3: expected 1 dist_reduce_scatter and 1 dist_all_gather"
EXERCISES = [RING_VALUES, RING_CALLS, RING_BYTES, "exercise 2: gradient 0 (3x4)", "exercise 2: gradient 1 (5)",
             "exercise 2: gradient 2 (2x6)", BUCKET_CALLS, ZERO1_VALUES, ZERO1_TINY, ZERO1_CALLS]
DEADLOCK = "exercise 4: the peer's tensor arrived"


def run(binary, out, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([binary, "--quiet", "--out", out] + list(args), env=e, capture_output=True, text=True,
                          timeout=300)


def name(what):
    """The check's name: its text up to the first ':' after 'exercise N:' and
    the detail that varies (the method checks' texts say what was seen)."""
    for known in sorted(EXERCISES + [DEADLOCK], key=len, reverse=True):
        if what.startswith(known):
            return known
    if what.startswith("exercise 1: ring_all_reduce"):   # the method check's failing texts
        return RING_CALLS
    return what


def checks(trace):
    return sorted((rank, name(what), passed) for rank, what, passed in tracecheck.check_passes(trace))


def check_texts(trace, named):
    return [what for _, what, _ in tracecheck.check_passes(trace) if name(what) == named]


class Homework(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_starter_fails_exactly_the_exercises(self):
        p = run(STARTER, self.out)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "homework_08.failed.json"))
        want = sorted((r, w, False) for r in range(WORLD) for w in EXERCISES)
        self.assertEqual(checks(t), want)
        self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: 0 passed, %d failed" % len(want))
        # Nothing else went wrong: no error step, no leak warning.
        self.assertFalse([r for s in t["steps"] for r in s["renderings"] if r["type"] in ("error", "warning")])

    def test_solution_passes_every_check(self):
        p = run(SOLUTION, self.out, "--deadlock")
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "homework_08.json"))
        want = sorted((r, w, True) for r in range(WORLD) for w in EXERCISES + [DEADLOCK])
        self.assertEqual(checks(t), want)
        self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: %d passed, 0 failed" % len(want))
        self.assertFalse([r for s in t["steps"] for r in s["renderings"] if r["type"] in ("error", "warning")])

    def test_solution_with_another_size(self):
        p = run(SOLUTION, self.out, "--n=4096")
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1],
                         "checks: %d passed, 0 failed" % (WORLD * len(EXERCISES)))

    def wrong(self, fixture, says):
        """A wrong method fails exactly the checks named by `says` on every
        rank, each failed text holding every string listed for it; nothing
        else fails and nothing goes wrong."""
        failing = list(says)
        binary = os.path.join(BUILD, "tests", "lectures", "homework_08_wrong_" + fixture)
        p = run(binary, self.out)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "homework_08.failed.json"))
        want = sorted((r, w, w not in failing) for r in range(WORLD) for w in EXERCISES)
        self.assertEqual(checks(t), want)
        for w in failing:
            texts = check_texts(t, w)
            self.assertEqual(len(texts), WORLD)
            for text in texts:
                for part in says[w]:
                    self.assertIn(part, text)
        self.assertFalse([r for s in t["steps"] for r in s["renderings"] if r["type"] in ("error", "warning")])

    def test_ring_that_calls_all_reduce_fails_its_method(self):
        # Right sums, from the library's collective: named, and the bytes
        # per peer are no ring's either.
        self.wrong("ring_collective", {
            RING_CALLS: ["ring_all_reduce made 1 dist_all_reduce call; the exercise allows only sends and receives"],
            RING_BYTES: ["6000 bytes each way"]})

    def test_ring_that_sends_whole_tensors_fails_its_bytes(self):
        # (w - 1) whole tensors of n/w * w floats: 3 x 1000 floats = 12000
        # bytes to the next rank where a ring sends 6 chunks of 250 floats.
        self.wrong("ring_whole", {RING_BYTES: ["6000 bytes each way", "sent 12000 bytes to rank", "received 12000"]})

    def test_one_all_reduce_per_gradient_fails_its_method(self):
        self.wrong("bucket_per_grad", {BUCKET_CALLS: ["(29 floats)", "ddp_sync made 3 dist_all_reduce calls"]})

    def test_zero1_with_a_sum_fails_near_eps(self):
        # The ordinary gradients pass (AdamW's step is scale-invariant there);
        # the ones near eps do not.
        self.wrong("zero1_sum", {ZERO1_TINY: []})

    def test_zero1_with_an_all_reduce_fails_its_method(self):
        self.wrong("zero1_all_reduce", {ZERO1_CALLS: ["zero1_step made 1 dist_all_reduce call, 1 dist_all_gather call"]})

    def test_starter_deadlock_is_found_in_exchange(self):
        # Named from the status board, long before the default timeout.
        p = run(STARTER, self.out, "--deadlock")
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "homework_08.failed.json"))
        src = t["files"]["lectures/homework_08.c"].split("\n")
        stuck = [(s["rank"], s["stack"][-1]) for s in t["steps"] for r in s["renderings"]
                 if r["type"] == "error" and s["rank"] is not None and ": deadlock: rank " in r["data"]]
        self.assertEqual(sorted(r for r, _ in stuck), list(range(WORLD)))
        for _, f in stuck:
            self.assertEqual(f["function"], "exchange")
            self.assertIn("dist_send(", src[f["line"] - 1])


if __name__ == "__main__":
    unittest.main()
