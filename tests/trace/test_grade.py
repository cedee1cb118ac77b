"""--grade FILE: the results.json a course's autograder reads (Gradescope's
format), read back after a passing run, a failing one, a rank that crashes,
a deadlock, an exercise past its time limit and an autograder's SIGTERM
(sent as GNU timeout sends it: to the lecture, then to its whole process
group); a FILE that cannot be written; `make grade`'s table
(scripts/grade.sh); test names that stay the same from run to run; and the
autograder's script (scripts/run_autograder) on a solved submission of each
homework with its own default options, one that changes the checking code,
one that hides a #define in an exercise, one that does not compile, one run
with an option the homework does not take, and one that loops for ever.

Each total is worked out here from homework_08's weights (30, 30, 30 and 10
points over 3, 4, 3 and 1 checks per rank on 4 ranks) and the checks the
trace says passed, not read from the file it is compared with.

LECTERN_GRADE_REPEAT=N repeats the SIGTERM case N times (a race lost the
report of where each rank was in 4 runs of 5 before the lecture ignored
GNU timeout's repeated signal).

    /usr/bin/python3 tests/trace/test_grade.py        (LECTERN_BUILD picks the build)
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD
STARTER = os.path.join(BUILD, "lectures", "homework_08")
SPIN = os.path.join(BUILD, "tests", "fixtures", "homework_08_spin")
FIXTURES = os.path.join(BUILD, "tests", "fixtures")
WORLD = 4
REPEAT = int(os.environ.get("LECTERN_GRADE_REPEAT", "1"))
SANITIZED = os.path.basename(BUILD) == "build-asan"
# exercise -> (points, checks per rank)
WEIGHTS = {"exercise 1": (30, 3), "exercise 2": (30, 4), "exercise 3": (30, 3), "exercise 4": (10, 1)}
# Gradescope's /autograder/submission_metadata.json, the fields its
# documentation lists (gradescope-autograders.readthedocs.io,
# "Submission Metadata"), for a group of two.
METADATA = {"id": 123456, "created_at": "2026-11-29T14:22:32.365935-07:00",
            "assignment": {"id": 25828, "course_id": 1234, "title": "Homework 08", "group_size": 2,
                           "group_submission": True, "due_date": "2026-12-06T23:00:00.000000-07:00",
                           "late_due_date": None, "release_date": "2026-11-29T00:00:00.000000-07:00",
                           "total_points": "100.0"},
            "submission_method": "upload",
            "users": [{"email": "b@example.com", "id": 5678, "name": "B"},
                      {"email": "a@example.com", "id": 1234, "name": "A"}],
            "previous_submissions": []}


def metadata_seed(assignment, users):
    """The seed docs/homework.md says run_autograder derives: SHA-256's first
    32 bits of "lectern variant|ASSIGNMENT|ID,ID" (ids sorted as text)."""
    text = "lectern variant|%s|%s" % (assignment, ",".join(sorted(str(u) for u in users)))
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


run = tracecheck.run


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
        """Every check of the trace as (rank, name, passed, frame): its name
        is check_named's, else its text. A folded PASS (docs/trace-format.md)
        stands for each rank's pass at its place: unfolded."""
        t = tracecheck.validate(os.path.join(self.out, name))
        return [(p["rank"], p.get("name", p["what"]), r["passed"], s["stack"][-1]) for s in t["steps"]
                for r in s["renderings"] if r["type"] == "check"
                for p in r.get("each", [{"rank": s["rank"], "what": r["what"], **({"name": r["name"]} if "name" in r
                                                                                   else {})}])], t

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
            self.assertRegex(src, r"check(_close|_named)?\(")
        # The console's last line is in the run's output, and its counts head it.
        self.assertIn("\nchecks: 44 passed, 0 failed, 0 not reached\n", r["output"])
        self.assertTrue(r["output"].startswith("homework_08: 100 of 100 points; checks: 44 passed, 0 failed, "
                                               "0 not reached\n"), r["output"][:200])

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
            # The name is the check's alone; what was seen is in the output.
            self.assertRegex(t["name"], r"^rank \d: exercise 2: one all-reduce of the whole bucket$")
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
        checks, _ = self.trace_checks("homework_08.failed.json")
        # Exercise 1 crashed on rank 2 before any check: its checks are
        # listed as not reached, worth 0, saying why; exercises 2 and 3, in
        # spawns of their own, ran and scored.
        self.assertAlmostEqual(r["score"], self.expected_score(checks, WEIGHTS), places=2)
        self.assertAlmostEqual(r["score"], 60, places=2)
        self.assertAlmostEqual(r["max_score"], 90, places=2)
        # (Built with the sanitizers, AddressSanitizer's report stops the rank first.)
        died = "rank 2 of 4 was stopped by a sanitizer's report" if SANITIZED else "rank 2 of 4 died with SIGSEGV"
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 1: checks not reached"])
        self.assertEqual((missed[0]["score"], missed[0]["max_score"]), (0, 30))
        self.assertIn("12 of 12 checks not reached", missed[0]["output"])
        self.assertIn(died, missed[0]["output"])
        self.assertIn(died, r["output"])
        self.assertTrue(all(t["status"] == "passed" for t in r["tests"] if t not in missed))
        self.assertTrue(r["output"].startswith("homework_08: 60 of 90 points; checks: 28 passed, 0 failed, "
                                               "12 not reached; the run failed\n"), r["output"][:200])

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
        self.assertEqual([t["name"] for t in missed], ["exercise 4: checks not reached"])
        self.assertEqual(missed[0]["max_score"], 10)
        self.assertIn("4 of 4 checks not reached", missed[0]["output"])
        self.assertIn("deadlock", missed[0]["output"])
        self.assertRegex(missed[0]["output"], r"homework_08\.c:\d+")

    def test_a_later_exercise_still_scores_after_an_error(self):
        # Exercise 3 stops at an error; exercise 4 (--deadlock), after it,
        # still runs and scores: 100 less exercise 3's 30. The reason given
        # for exercise 3 is its own spawn's error, not another exercise's.
        p = run(os.path.join(FIXTURES, "homework_08_zero1_alias"), self.out, "--deadlock", "--grade", self.results)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        r = self.read()
        self.assertAlmostEqual(r["score"], 70, places=2)
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 3: checks not reached"])
        self.assertIn("output and input are the same memory", missed[0]["output"])
        self.assertEqual(len([t for t in r["tests"] if t["name"].endswith("exercise 4: the peer's tensor arrived") and
                              t["status"] == "passed"]), WORLD)

    def test_a_loop_past_its_time_limit(self):
        # homework_08_loop: exercise 1 (4 s in this copy) loops on rank 0; it
        # is stopped at its limit, the others run, and the line rank 0
        # printed before its loop is in the output's console tail.
        p = run(os.path.join(FIXTURES, "homework_08_loop"), self.out, "--grade", self.results)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        r = self.read()
        self.assertAlmostEqual(r["score"], 60, places=2)
        missed = [t for t in r["tests"] if "not reached" in t["name"]][0]
        self.assertEqual(missed["name"], "exercise 1: checks not reached")
        self.assertIn("exercise 1 ran past its time limit of 4 s: rank 0 of 4 has been working in ring_all_reduce()",
                      missed["output"])
        tail = r["output"].split("Console (last lines):\n", 1)[1]
        self.assertIn("rank 0 starts its ring on 1000 floats\n", tail)

    def test_names_stay_the_same_from_run_to_run(self):
        # Two runs of homework_parallel's solution (its bubble check measures
        # a time: its text differs from run to run), and a failing method:
        # the same tests, by name. No name says what was measured.
        names = []
        for binary in ("homework_parallel_solution", "homework_parallel_solution", "homework_parallel_wrong_serial"):
            p = run(os.path.join(FIXTURES, binary), self.out, "--grade", self.results)
            self.assertIn(p.returncode, (0, 1), tracecheck.why(p))
            r = self.read()
            names.append(sorted(t["name"] for t in r["tests"]))
            bubble = [t for t in r["tests"] if "the measured bubble" in t["name"]]
            self.assertEqual(len(bubble), WORLD)
            for t in bubble:
                self.assertRegex(t["name"], r"^rank \d: exercise 2: the measured bubble$")
                self.assertRegex(t["output"], r"within \[-0\.05, \+0\.35\] of \(p-1\)/\(m\+p-1\) = 0\.273: "
                                              r"[0-9.]+ \(\d+ ms")
        self.assertEqual(names[0], names[1])
        self.assertEqual(names[0], names[2])
        self.assertEqual(len(names[0]), 48)
        self.assertLess(max(len(n) for n in names[0]), 100)

    def test_autograder_sigterm(self):
        # The autograder's own time limit, as GNU timeout gives it: SIGTERM to
        # the lecture, then to its whole process group, while a rank loops
        # for ever in exercise 1 (computing: never called deadlocked, and
        # before the exercise's own 30 s limit). The report says where each
        # rank was, every time.
        for attempt in range(REPEAT):
            with self.subTest(attempt=attempt):
                self.sigterm_once()

    def sigterm_once(self):
        if os.path.exists(self.results):
            os.unlink(self.results)
        env = dict(os.environ, LECTERN_TIMEOUT="600")
        p = subprocess.run(["timeout", "-s", "TERM", "8", "nice", "-n", "5", SPIN, "--quiet", "--out", self.out,
                            "--grade", self.results], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 124, p.stderr[-2000:])   # timeout's: it had to stop it
        trace = os.path.join(self.out, "homework_08.failed.json")   # the lecture is the homework it includes
        self.assertTrue(os.path.exists(trace))
        r = self.read()
        self.assertEqual(r["score"], 0)
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 1: checks not reached", "exercise 2: checks not reached",
                                                       "exercise 3: checks not reached"])
        reached = [t for t in r["tests"] if "not reached" not in t["name"]]
        unreached = sum(int(t["output"].split(" of ")[0]) for t in missed)
        self.assertEqual(len(reached) + unreached, 40)     # every check either reached or counted missing
        # Where each rank was: rank 2 working at its loop, the others
        # waiting for it in their all-reduce.
        why = missed[0]["output"]
        self.assertRegex(why, r"rank 2: tests/fixtures/homework_08_spin\.c:\d+: SIGTERM \(terminated\): rank 2 of 4 "
                              r"was working in ring_all_reduce\(\)\n")
        for k in (0, 1, 3):
            self.assertIn("SIGTERM (terminated): rank %d of 4 was waiting in dist_all_reduce() in ring_all_reduce()"
                          % k, why)
        self.assertTrue(r["output"].startswith("homework_08: 0 of 90 points; checks: 0 passed, 0 failed, "
                                               "40 not reached; the run failed\n"), r["output"][:200])

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
        src = t["files"]["tests/fixtures/grade_misuse.c"].split("\n")
        bad = sorted(i for i, line in enumerate(src, 1) if "/* BAD" in line)
        errors = sorted(s["stack"][-1]["line"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error")
        self.assertEqual(errors, bad)
        # The one good declaration still weighs its check: 10 points over 2
        # checks, one of which the lecture never makes.
        r = self.read()
        self.assertEqual([(x["name"], x["score"], x["max_score"]) for x in r["tests"]],
                         [("part A: the one check", 5, 5), ("part A: checks not reached", 0, 5)])
        self.assertIn("1 of 2 checks not reached", r["tests"][1]["output"])

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

    def autograder(self, exercises, edit_outside=None, homework="homework_08", env=None, metadata=METADATA):
        """Runs scripts/run_autograder on the course's `homework`.c with its
        exercise part replaced by `exercises` (and `edit_outside` applied to
        the rest), with Gradescope's submission_metadata.json holding
        `metadata` (a dict, or a string written as it is; None: no file);
        returns the results and the course copy's text after."""
        root = os.path.join(self.out, "autograder")
        source = os.path.join(root, "source")
        os.makedirs(os.path.join(source, "lectures"))
        os.makedirs(os.path.join(root, "submission"))
        if metadata is not None:
            with open(os.path.join(root, "submission_metadata.json"), "w") as f:
                f.write(metadata if isinstance(metadata, str) else json.dumps(metadata))
        for name in ("Makefile", "runtime", "scripts", os.path.basename(BUILD)):   # lectern, built
            os.symlink(os.path.join(ROOT, name), os.path.join(source, name))
        os.symlink(os.path.join(ROOT, "lectures", "lib"), os.path.join(source, "lectures", "lib"))
        with open(os.path.join(ROOT, "lectures", homework + ".c")) as f:
            course = f.read()
        with open(os.path.join(source, "lectures", homework + ".c"), "w") as f:
            f.write(course)
        start = course.index("#ifndef HOMEWORK_SOLUTION\n") + len("#ifndef HOMEWORK_SOLUTION\n")
        end = course.index("#else\n", start)
        text = course[:start] + exercises + course[end:]
        if edit_outside:
            text = edit_outside(text)
        with open(os.path.join(root, "submission", homework + ".c"), "w") as f:
            f.write(text)
        e = dict(os.environ, AUTOGRADER=root, LECTERN_SOURCE=source, LECTERN_TIMEOUT="20")
        if homework != "homework_08":
            e["HOMEWORK"] = homework
        e.update(env if env is not None else {"HOMEWORK_ARGS": ""})
        if BUILD != os.path.join(ROOT, "build"):
            e["BUILD"] = os.path.basename(BUILD)
            if os.path.basename(BUILD) == "build-asan":
                e["SAN"] = "1"     # the submission is built as the library was
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_autograder")], env=e, capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.results = os.path.join(root, "results", "results.json")
        with open(os.path.join(source, "lectures", homework + ".c")) as f:
            after = f.read()
        self.assertEqual(after, course)    # the course's copy is put back
        return self.read()

    def solution_exercises(self, homework="homework_08"):
        with open(os.path.join(ROOT, "tests", "fixtures", homework + "_solution.h")) as f:
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

    def test_autograder_defaults_per_homework(self):
        # Without HOMEWORK_ARGS each homework gets its own options: homework_08
        # its exercise 4 (--deadlock), homework_parallel and homework_scaling
        # none (they take no --deadlock: a default that scored every
        # submission 0).
        r = self.autograder(self.solution_exercises(), env={})
        self.assertAlmostEqual((r["score"], r["max_score"]), (100, 100))
        self.assertEqual(len(r["tests"]), 44)
        shutil.rmtree(os.path.join(self.out, "autograder"))
        r = self.autograder(self.solution_exercises("homework_parallel"), homework="homework_parallel", env={})
        self.assertAlmostEqual((r["score"], r["max_score"]), (100, 100))
        self.assertEqual(len(r["tests"]), 48)
        shutil.rmtree(os.path.join(self.out, "autograder"))
        r = self.autograder(self.solution_exercises("homework_scaling"), homework="homework_scaling", env={})
        self.assertAlmostEqual((r["score"], r["max_score"]), (100, 100))
        self.assertEqual(len(r["tests"]), 40)

    def test_autograder_option_the_homework_does_not_take(self):
        # The run cannot start: no results of its own. Its words are the reason.
        r = self.autograder(self.solution_exercises(), env={"HOMEWORK_ARGS": "--nonsense"})
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("ended without writing its results: exit status 2", r["output"])
        self.assertIn("--nonsense", r["output"])
        self.assertRegex(r["output"], r"unknown option")

    def test_autograder_time_limit(self):
        # A submission whose ring loops for ever on one rank, under a
        # TIME_LIMIT shorter than the exercise's own 30 s: the script's
        # SIGTERM, and still results, saying where each rank was.
        solved = self.solution_exercises()
        start = solved.index("void ring_all_reduce(tensor *t) {")
        end = solved.index("\n}\n", start) + 3
        loop = ("void ring_all_reduce(tensor *t) {\n    if (dist_rank() == 1)\n        for (volatile int i = 1; i != 0; "
                "i |= 1) {}\n    dist_all_reduce(t, DIST_SUM);\n}\n")
        r = self.autograder(solved[:start] + loop + solved[end:], env={"HOMEWORK_ARGS": "", "TIME_LIMIT": "8"})
        self.assertEqual(r["score"], 0)
        self.assertIn("SIGTERM (terminated): rank 1 of 4 was working in ring_all_reduce()", r["output"])
        # Its default is under Gradescope's usual 600 s for the whole job, with room for the build.
        with open(os.path.join(ROOT, "scripts", "run_autograder")) as f:
            default = int(re.search(r"LIMIT=\$\{TIME_LIMIT:-(\d+)\}", f.read()).group(1))
        self.assertLessEqual(default + 20 + 60, 600)   # its limit, the SIGKILL grace, a build

    def test_autograder_submission_that_does_not_compile(self):
        r = self.autograder("void ring_all_reduce(tensor *t) { t->nonsense = 1; }\n")
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("does not compile", r["output"])
        self.assertIn("nonsense", r["output"])

    # ---- run_autograder end to end: the variant from the metadata, and each kind of submission ----
    # (a passing and an over-time one are above: test_autograder_solved_submission, _time_limit)

    @staticmethod
    def with_function(solved, signature, function):
        """The solved exercises with the function that starts at `signature` replaced."""
        start = solved.index(signature)
        end = solved.index("\n}\n", start) + 3
        return solved[:start] + function + solved[end:]

    def test_autograder_variant_from_the_metadata(self):
        # The seed is the group's (ids sorted: the order Gradescope lists
        # them in does not matter), and the sizes it picked reach the ranks:
        # the ring check's bytes and the ZeRO-1 check's element count are
        # the variant's.
        r = self.autograder(self.solution_exercises())
        self.assertAlmostEqual((r["score"], r["max_score"]), (90, 90))
        seed = metadata_seed(25828, [5678, 1234])
        v = r["extra_data"]["variant"]
        self.assertEqual(v["seed"], seed)
        chunk, shard = v["values"]["floats per ring chunk"], v["values"]["floats per ZeRO-1 shard"]
        self.assertEqual(sorted(v["values"]), ["floats per ZeRO-1 shard", "floats per ring chunk",
                                               "micro-batches accumulated"])
        lines = r["output"].split("\n")
        self.assertEqual(lines[1], "Variant %d: floats per ring chunk = %d, micro-batches accumulated = %d, floats per "
                                   "ZeRO-1 shard = %d" % (seed, chunk, v["values"]["micro-batches accumulated"], shard))
        self.assertEqual(lines[2], "The variant's seed: the seed of assignment 25828 and users 1234, 5678 "
                                   "(submission_metadata.json).")
        ring = [t for t in r["tests"] if t["name"].endswith(": exercise 1: a ring's traffic, one chunk a step to the "
                                                             "next rank")]
        self.assertEqual(len(ring), WORLD)
        self.assertTrue(all("chunks of %d bytes" % (4 * chunk) in t["output"] for t in ring), ring[0]["output"])
        zero1 = [t for t in r["tests"] if t["name"].endswith(": exercise 3: parameters after a ZeRO-1 step")]
        self.assertTrue(all("0 of %d elements outside" % (WORLD * shard) in t["output"] for t in zero1),
                        zero1[0]["output"])
        # Another student of the same assignment: another seed, other sizes.
        shutil.rmtree(os.path.join(self.out, "autograder"))
        other = dict(METADATA, users=[{"email": "c@example.com", "id": 91011, "name": "C"}])
        r2 = self.autograder(self.solution_exercises(), metadata=other)
        self.assertAlmostEqual(r2["score"], 90)
        self.assertEqual(r2["extra_data"]["variant"]["seed"], metadata_seed(25828, [91011]))
        self.assertNotEqual(r2["extra_data"]["variant"]["values"], v["values"])

    def test_autograder_variant_without_metadata(self):
        # A missing file, and one that is not JSON: the fixed seed 0, said so.
        for metadata, why in ((None, "no such file"), ("{not json", "JSONDecodeError"),
                              (json.dumps(dict(METADATA, users=[])), "ValueError: no users")):
            with self.subTest(why=why):
                if os.path.exists(os.path.join(self.out, "autograder")):
                    shutil.rmtree(os.path.join(self.out, "autograder"))
                r = self.autograder(self.solution_exercises(), metadata=metadata)
                self.assertAlmostEqual(r["score"], 90)
                self.assertEqual(r["extra_data"]["variant"]["seed"], 0)
                self.assertRegex(r["output"], r"\nThe variant's seed: the fixed seed 0: \S+/submission_metadata\.json "
                                              r"could not be read \(%s" % re.escape(why))

    def test_autograder_variant_set_or_off(self):
        # VARIANT=SEED wins over the metadata; VARIANT=none runs the defaults.
        r = self.autograder(self.solution_exercises(), env={"HOMEWORK_ARGS": "", "VARIANT": "42"})
        self.assertAlmostEqual(r["score"], 90)
        self.assertEqual(r["extra_data"]["variant"]["seed"], 42)
        self.assertEqual(r["output"].split("\n")[2], "The variant's seed: the seed VARIANT gave.")
        shutil.rmtree(os.path.join(self.out, "autograder"))
        r = self.autograder(self.solution_exercises(), env={"HOMEWORK_ARGS": "", "VARIANT": "none"})
        self.assertAlmostEqual(r["score"], 90)
        self.assertNotIn("extra_data", r)
        self.assertNotIn("Variant", r["output"])
        ring = [t for t in r["tests"] if t["name"].endswith("one chunk a step to the next rank")]
        self.assertTrue(all("chunks of 1000 bytes" in t["output"] for t in ring))   # the default 250 floats

    def test_autograder_wrong_numbers(self):
        # ddp_sync divides by the micro-batches but not by the ranks: exercise
        # 2's three gradients are 4 times too large on every rank, which each
        # failed test says; its one-all-reduce check passes.
        solved = self.solution_exercises()
        wrong = ("void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {\n"
                 "    bucket_copy(grads, n, bucket, 1);\n    dist_all_reduce(bucket, DIST_SUM);\n"
                 "    scale_(bucket, 1.0f / (float)accum);\n    bucket_copy(grads, n, bucket, 0);\n}\n")
        r = self.autograder(self.with_function(solved, "void ddp_sync(", wrong))
        self.assertAlmostEqual(r["score"], 90 - 3 * WORLD * 30 / 16, places=2)
        failed = [t for t in r["tests"] if t["status"] == "failed"]
        self.assertEqual(sorted(t["name"] for t in failed),
                         sorted("rank %d: exercise 2: gradient %s" % (k, g) for k in range(WORLD)
                                for g in ("0 (3x4)", "1 (5)", "2 (2x6)")))
        for t in failed:
            self.assertEqual(t["score"], 0)
            self.assertIn("FAIL", t["output"])
            self.assertIn("4.00x the expected at every element: the world size?", t["output"])
            self.assertIn("at lectures/homework_08.c:", t["output"])
        self.assertRegex(r["output"], r"^homework_08: 67\.5 of 90 points; checks: 28 passed, 12 failed, 0 not reached")

    def test_autograder_crashing_submission(self):
        # Rank 2 writes through NULL in exercise 1: that exercise's 30 points
        # are lost, saying where; exercises 2 and 3 score.
        solved = self.solution_exercises()
        crash = ("void ring_all_reduce(tensor *t) {\n    if (dist_rank() == 2) *(volatile float *)NULL = 1;\n"
                 "    dist_all_reduce(t, DIST_SUM);\n}\n")
        r = self.autograder(self.with_function(solved, "void ring_all_reduce(", crash))
        self.assertAlmostEqual((r["score"], r["max_score"]), (60, 90))
        died = "rank 2 of 4 was stopped by a sanitizer's report" if SANITIZED else "rank 2 of 4 died with SIGSEGV"
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 1: checks not reached"])
        self.assertIn("12 of 12 checks not reached", missed[0]["output"])
        self.assertIn(died, missed[0]["output"])
        self.assertRegex(missed[0]["output"], r"lectures/homework_08\.c:\d+: ")
        self.assertTrue(all(t["status"] == "passed" for t in r["tests"] if t not in missed))
        self.assertRegex(r["output"], r"^homework_08: 60 of 90 points; checks: 28 passed, 0 failed, 12 not reached; "
                                      r"the run failed\n")

    def test_autograder_deadlocking_submission(self):
        # A ring whose ranks all receive first: no send ever meets its
        # receive. The runtime proves it (long before LECTERN_TIMEOUT's 20 s)
        # and names each rank's dist_recv line; exercises 2 and 3 score.
        solved = self.solution_exercises()
        ring = ("void ring_all_reduce(tensor *t) {\n    int rank = dist_rank(), w = dist_world_size();\n"
                "    tensor *in = empty(t->numel, 0, t->device);\n"
                "    dist_recv(in, (rank + w - 1) % w); /* every rank waits here */\n"
                "    dist_send(t, (rank + 1) % w);\n    tensor_free(in);\n}\n")
        started = time.monotonic()
        r = self.autograder(self.with_function(solved, "void ring_all_reduce(", ring))
        self.assertAlmostEqual((r["score"], r["max_score"]), (60, 90))
        missed = [t for t in r["tests"] if "not reached" in t["name"]]
        self.assertEqual([t["name"] for t in missed], ["exercise 1: checks not reached"])
        self.assertIn("deadlock", missed[0]["output"])
        with open(os.path.join(ROOT, "lectures", "homework_08.c")) as f:
            course = f.read()
        start = course.index("#ifndef HOMEWORK_SOLUTION\n") + len("#ifndef HOMEWORK_SOLUTION\n")
        text = course[:start] + self.with_function(solved, "void ring_all_reduce(", ring)
        line = text[:text.index("dist_recv(in,")].count("\n") + 1
        for k in range(WORLD):
            self.assertRegex(missed[0]["output"], r"rank %d: lectures/homework_08\.c:%d: " % (k, line))
        self.assertLess(time.monotonic() - started, 20 + 60)   # not the exercise's 30 s: LECTERN_TIMEOUT at most

    def test_autograder_refuses_a_deleted_check(self):
        # The course's lines, one check call deleted (exercise 1's method
        # check): refused, the deleted line shown.
        call = "    check_ring_method(&d, rank, world, t->numel);\n"
        r = self.autograder(self.solution_exercises(), lambda text: text.replace(call, "", 1) if call in text else None)
        self.assertEqual((r["score"], r["tests"]), (0, []))
        self.assertIn("Only the exercise functions may change", r["output"])
        self.assertRegex(r["output"], r"\n\d+d\d+\n<\s+" + re.escape(call.strip()) + "\n")


if __name__ == "__main__":
    unittest.main()
