"""--grade FILE: the results.json a course's autograder reads (Gradescope's
format), read back after a passing run, a failing one, a rank that crashes,
a deadlock stopped by LECTERN_TIMEOUT and an autograder's SIGTERM; a FILE
that cannot be written; `make grade`'s table (scripts/grade.sh); and the
autograder's script (scripts/run_autograder) on a solved submission, one that
changes the checking code, one that hides a #define in an exercise, and one
that does not compile.

Each total is worked out here from homework_08's weights (30, 30, 30 and 10
points over 3, 4, 3 and 1 checks per rank on 4 ranks) and the checks the
trace says passed, not read from the file it is compared with.

    /usr/bin/python3 tests/test_grade.py        (LECTERN_BUILD picks the build)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD
STARTER = os.path.join(BUILD, "lectures", "homework_08")
SPIN = os.path.join(BUILD, "tests", "lectures", "homework_08_spin")
FIXTURES = os.path.join(BUILD, "tests", "lectures")
WORLD = 4
# exercise -> (points, checks per rank)
WEIGHTS = {"exercise 1": (30, 3), "exercise 2": (30, 4), "exercise 3": (30, 3), "exercise 4": (10, 1)}


def run(binary, out, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([binary, "--quiet", "--out", out] + list(args), env=e, capture_output=True, text=True,
                          timeout=300)


def exercise(name):
    for ex in WEIGHTS:
        if name.startswith(ex + ":") or (": " + ex + ":") in name:
            return ex
    return None


class Grade(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name
        self.results = os.path.join(self.out, "results.json")

    def tearDown(self):
        self.tmp.cleanup()

    def read(self):
        """The results, checked for the shape Gradescope reads."""
        with open(self.results) as f:
            r = json.load(f)
        self.assertIsInstance(r["score"], (int, float))
        self.assertIsInstance(r["output"], str)
        self.assertIsInstance(r["tests"], list)
        for t in r["tests"]:
            self.assertEqual(set(t) >= {"name", "score", "max_score", "output", "status"}, True, t)
            self.assertIn(t["status"], ("passed", "failed"))
            self.assertTrue(0 <= t["score"] <= t["max_score"] + 1e-9, t)
        self.assertAlmostEqual(r["score"], sum(t["score"] for t in r["tests"]), places=2)
        return r

    def trace_checks(self, name):
        t = tracecheck.validate(os.path.join(self.out, name))
        # A folded PASS (docs/trace-format.md) stands for each rank's pass at its place: unfold it.
        return [(p["rank"], p["what"], r["passed"], s["stack"][-1]) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "check" for p in r.get("each", [{"rank": s["rank"], "what": r["what"]}])], t

    def expected_score(self, checks, exercises):
        return sum(WEIGHTS[exercise(what)][0] / (WEIGHTS[exercise(what)][1] * WORLD)
                   for _, what, passed, _ in checks if passed and exercise(what) in exercises)

    def test_passing_run(self):
        p = run(os.path.join(FIXTURES, "homework_08_solution"), self.out, "--deadlock", "--grade", self.results)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        r = self.read()
        checks, trace = self.trace_checks("homework_08.json")
        self.assertEqual(len(r["tests"]), len(checks))
        self.assertAlmostEqual(r["score"], 100, places=2)
        self.assertAlmostEqual(r["max_score"], 100, places=2)
        self.assertTrue(all(t["status"] == "passed" and t["score"] == t["max_score"] for t in r["tests"]))
        # Each test names its check and rank, and its output the line that made it.
        names = sorted(t["name"] for t in r["tests"])
        self.assertEqual(names, sorted("rank %d: %s" % (rank, what) for rank, what, _, _ in checks))
        for t in r["tests"]:
            rank, what = int(t["name"].split(":")[0][5:]), t["name"].split(": ", 1)[1]
            frame = [f for k, w, _, f in checks if k == rank and w == what][0]
            self.assertIn("at %s:%d" % (frame["path"], frame["line"]), t["output"])
            src = trace["files"][frame["path"]].split("\n")[frame["line"] - 1]
            self.assertRegex(src, r"check(_close)?\(")
        # The console's last line is in the run's output.
        self.assertIn("checks: 44 passed, 0 failed", r["output"])

    def test_failing_run(self):
        p = run(os.path.join(FIXTURES, "homework_08_wrong_bucket_per_grad"), self.out, "--grade", self.results)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        r = self.read()
        checks, _ = self.trace_checks("homework_08.failed.json")
        self.assertEqual(len(r["tests"]), len(checks))
        self.assertAlmostEqual(r["score"], self.expected_score(checks, WEIGHTS), places=2)
        self.assertAlmostEqual(r["score"], 90 - WORLD * 30 / 16, places=2)   # 4 checks of exercise 2 lost
        failed = [t for t in r["tests"] if t["status"] == "failed"]
        self.assertEqual(len(failed), WORLD)
        for t in failed:
            self.assertEqual(t["score"], 0)
            self.assertIn("exercise 2: expected 1 all-reduce per step", t["name"])
            self.assertIn("FAIL", t["output"])
            self.assertIn("ddp_sync made 3 dist_all_reduce calls", t["output"])
        # A check_close's output has the numbers that decided it.
        values = [t for t in r["tests"] if "gradient 0 (3x4)" in t["name"]]
        self.assertEqual(len(values), WORLD)
        self.assertTrue(all("0 of 12 elements outside" in t["output"] for t in values))

    def test_crashing_run(self):
        p = run(os.path.join(FIXTURES, "homework_08_crash"), self.out, "--grade", self.results)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        r = self.read()
        self.assertEqual(r["score"], 0)
        self.assertAlmostEqual(r["max_score"], 90, places=2)
        self.assertIn("SIGSEGV", r["output"])
        # Exercise 1 crashed on rank 2 before any check: every exercise's
        # checks are listed as not reached, with their points, and why.
        missed = {t["name"]: t for t in r["tests"] if "not reached" in t["name"]}
        self.assertEqual(sorted(missed), ["exercise 1: 12 of 12 checks not reached",
                                          "exercise 2: 16 of 16 checks not reached",
                                          "exercise 3: 12 of 12 checks not reached"])
        for t in missed.values():
            self.assertEqual((t["score"], t["max_score"]), (0, 30))
            self.assertIn("rank 2 of 4 died with SIGSEGV", t["output"])

    def test_deadlock_named(self):
        # Exercise 4 of the starter: both ranks of each pair send first. The
        # runtime proves the deadlock from the ranks' places (within seconds,
        # long before LECTERN_TIMEOUT) and the grade says where.
        p = run(STARTER, self.out, "--deadlock", "--grade", self.results, env={"LECTERN_TIMEOUT": "60"})
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        r = self.read()
        checks, _ = self.trace_checks("homework_08.failed.json")
        self.assertEqual(len(checks), 40)                 # exercises 1 to 3 ran (and failed)
        self.assertEqual(r["score"], 0)
        self.assertAlmostEqual(r["max_score"], 100, places=2)
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 4: 4 of 4 checks not reached"])
        self.assertEqual(missed[0]["max_score"], 10)
        self.assertIn("deadlock", missed[0]["output"])
        self.assertRegex(missed[0]["output"], r"homework_08\.c:\d+")

    def test_autograder_sigterm(self):
        # The autograder's own time limit: SIGTERM while a rank loops for ever
        # in exercise 1 (computing: never called deadlocked, and no
        # LECTERN_TIMEOUT stop before it).
        env = dict(os.environ, LECTERN_TIMEOUT="600")
        proc = subprocess.Popen([SPIN, "--quiet", "--out", self.out, "--grade", self.results],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        trace = os.path.join(self.out, "homework_08.failed.json")   # the lecture is the homework it includes
        deadline = time.time() + 120
        # Wait until the ranks are in exercise 1: a grade file is only
        # written at the end, so wait a fixed time after the pool is up.
        time.sleep(8)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=max(5, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.fail("the lecture did not stop on SIGTERM")
        self.assertNotEqual(proc.returncode, 0)
        self.assertTrue(os.path.exists(trace))
        r = self.read()
        self.assertEqual(r["score"], 0)
        self.assertIn("SIGTERM", r["output"])
        self.assertTrue([t for t in r["tests"] if t["name"].startswith("exercise 1:") and "not reached" in t["name"]],
                        [t["name"] for t in r["tests"]])
        reached = [t for t in r["tests"] if "not reached" not in t["name"]]
        missed = sum(int(t["name"].split(": ")[1].split(" ")[0]) for t in r["tests"] if "not reached" in t["name"])
        self.assertEqual(len(reached) + missed, 40)     # every check either reached or counted missing

    def test_unwritable_grade_file(self):
        bad = os.path.join(self.out, "no", "such", "folder", "results.json")
        p = run(STARTER, self.out, "--grade", bad)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot write the grade to '%s'" % bad, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "homework_08.failed.json")))

    def test_grade_without_a_file(self):
        for args in (["--grade"], ["--grade="]):
            p = run(STARTER, self.out, *args)
            self.assertEqual(p.returncode, 2)
            self.assertIn("--grade needs the results file", p.stderr)

    def test_grade_exercise_misuse_is_an_error_at_its_line(self):
        p = run(os.path.join(FIXTURES, "grade_misuse"), self.out, "--grade", self.results)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "grade_misuse.failed.json"))
        src = t["files"]["tests/lectures/grade_misuse.c"].split("\n")
        bad = sorted(i for i, line in enumerate(src, 1) if "/* BAD" in line)
        errors = sorted(s["stack"][-1]["line"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error")
        self.assertEqual(errors, bad)
        # The one good declaration still weighs its check: 10 points over 2
        # checks, one of which the lecture never makes.
        r = self.read()
        self.assertEqual([(x["name"], x["score"], x["max_score"]) for x in r["tests"]],
                         [("part A: the one check", 5, 5), ("part A: 1 of 2 checks not reached", 0, 5)])

    def test_make_grade_table(self):
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "grade.sh"),
                            os.path.join(FIXTURES, "homework_08_wrong_bucket_per_grad")],
                           env=dict(os.environ, LECTERN_GRADE_OUT=self.out), capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        r = self.read()
        lines = p.stdout.rstrip("\n").split("\n")
        self.assertEqual(len(lines), len(r["tests"]) + 2)   # a heading, one line per test, the total
        self.assertEqual(lines[-1].split(), ["total", "%g/%g" % (r["score"], r["max_score"])])
        self.assertEqual(sum(line.endswith("FAILED") for line in lines), WORLD)


    # ---- scripts/run_autograder, in Gradescope's layout under a temporary root ----

    def autograder(self, exercises, edit_outside=None):
        """Runs scripts/run_autograder on the course's homework_08.c with its
        exercise part replaced by `exercises` (and `edit_outside` applied to
        the rest); returns the results and the course copy's text after."""
        root = os.path.join(self.out, "autograder")
        source = os.path.join(root, "source")
        os.makedirs(os.path.join(source, "lectures"))
        os.makedirs(os.path.join(root, "submission"))
        for name in ("Makefile", "runtime", "scripts", os.path.basename(BUILD)):   # lectern, built
            os.symlink(os.path.join(ROOT, name), os.path.join(source, name))
        os.symlink(os.path.join(ROOT, "lectures", "lib"), os.path.join(source, "lectures", "lib"))
        with open(os.path.join(ROOT, "lectures", "homework_08.c")) as f:
            course = f.read()
        with open(os.path.join(source, "lectures", "homework_08.c"), "w") as f:
            f.write(course)
        start = course.index("#ifndef HOMEWORK_SOLUTION\n") + len("#ifndef HOMEWORK_SOLUTION\n")
        end = course.index("#else\n", start)
        text = course[:start] + exercises + course[end:]
        if edit_outside:
            text = edit_outside(text)
        with open(os.path.join(root, "submission", "homework_08.c"), "w") as f:
            f.write(text)
        env = dict(os.environ, AUTOGRADER=root, LECTERN_SOURCE=source, HOMEWORK_ARGS="", LECTERN_TIMEOUT="20")
        if BUILD != os.path.join(ROOT, "build"):
            env["BUILD"] = os.path.basename(BUILD)
            if os.path.basename(BUILD) == "build-asan":
                env["SAN"] = "1"     # the submission is built as the library was
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_autograder")], env=env, capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.results = os.path.join(root, "results", "results.json")
        with open(os.path.join(source, "lectures", "homework_08.c")) as f:
            after = f.read()
        self.assertEqual(after, course)    # the course's copy is put back
        return self.read()

    def solution_exercises(self):
        with open(os.path.join(ROOT, "tests", "lectures", "homework_08_solution.h")) as f:
            return "".join(line for line in f if not line.lstrip().startswith("#"))

    def test_autograder_solved_submission(self):
        r = self.autograder(self.solution_exercises())
        self.assertAlmostEqual(r["score"], 90, places=2)    # exercises 1 to 3 (no --deadlock here)
        self.assertEqual(len(r["tests"]), 40)
        self.assertTrue(all(t["status"] == "passed" for t in r["tests"]))
        self.assertTrue(all("at lectures/homework_08.c:" in t["output"] for t in r["tests"]))

    def test_autograder_refuses_changed_checks(self):
        r = self.autograder(self.solution_exercises(),
                            lambda text: text.replace("#define SUM_ATOL 1e-5", "#define SUM_ATOL 1e9"))
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("Only the exercise functions may change", r["output"])
        self.assertIn("#define SUM_ATOL 1e9", r["output"])

    def test_autograder_refuses_a_define_in_the_exercises(self):
        r = self.autograder("#define check_close(...) 1\n" + self.solution_exercises())
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("may not hold preprocessor lines", r["output"])
        self.assertIn("#define check_close", r["output"])

    def test_autograder_submission_that_does_not_compile(self):
        r = self.autograder("void ring_all_reduce(tensor *t) { t->nonsense = 1; }\n")
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("does not compile", r["output"])
        self.assertIn("nonsense", r["output"])


if __name__ == "__main__":
    unittest.main()
