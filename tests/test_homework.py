"""lectures/homework_08.c: the starter fails exactly the checks it should
(every exercise's, on every rank, and nothing else), the instructor's
solution (tests/lectures/homework_08_solution.c) passes them all, and the
deadlock exercise is stopped with each rank's line in exchange().

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
BUILD = os.path.join(ROOT, os.environ.get("LECTERN_BUILD", "build"))
STARTER = os.path.join(BUILD, "lectures", "homework_08")
SOLUTION = os.path.join(BUILD, "tests", "lectures", "homework_08_solution")
WORLD = 4
EXERCISES = ["exercise 1: ring all-reduce", "exercise 2: gradient 0 (3x4)", "exercise 2: gradient 1 (5)",
             "exercise 2: gradient 2 (2x6)", "exercise 3: parameters after a ZeRO-1 step"]
DEADLOCK = "exercise 4: the peer's tensor arrived"


def run(binary, out, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([binary, "--quiet", "--out", out] + list(args), env=e, capture_output=True, text=True,
                          timeout=300)


def checks(trace):
    return sorted((s["rank"], r["what"], r["passed"]) for s in trace["steps"] for r in s["renderings"]
                  if r["type"] == "check")


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
        self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: 20 passed, 0 failed")

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
