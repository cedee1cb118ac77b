"""grade_visibility() and grade_leaderboard() in --grade's results.json
(Gradescope's test "visibility" and top-level "leaderboard").

tests/fixtures/grade_visibility.c makes checks on 2 ranks and in the lecture,
each carrying a marker of its own in its message ("SECRET-COUNT-4243"); its
source says which prefix has which visibility and which checks fail (rank 1
fails the two hidden ones, the lecture its "failing" one). What is expected
here is worked out from that source, not read from the file under test:
- results.json gives every test the visibility of the longest prefix its
  check's name starts with, and keeps the whole message of every check in
  its output, hidden or not;
- a check that is not visible says its name and verdict on the console and
  in the trace, never its message: no marker of a hidden check is in the
  console (stdout and stderr), the results' run output (the console's
  tail), or the trace's steps (the trace embeds the fixture's source, whose
  format strings hold the markers' stems, so the steps are searched, with
  the numbers the markers end in);
- the leaderboard lists rank 0's entry once though both ranks entered one
  (each rank enters 0.25 + rank), and the lecture's, in order of arrival;
- bad calls (tests/fixtures/grade_visibility_misuse.c, lines marked BAD)
  are error steps at their lines with messages naming the problem.
The homeworks' own: homework_08's after-due ZeRO-1 check and
homework_parallel's hidden db check carry their visibility in results.json,
the solutions still score 90 (homework_08 without --deadlock) and 100 and
enter one leaderboard number each, and the starter's after-due check fails
on the console by name only while results.json keeps its numbers.

    /usr/bin/python3 tests/trace/test_grade_visibility.py      (LECTERN_BUILD picks the build)
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

FIXTURES = os.path.join(tracecheck.BUILD, "tests", "fixtures")
# The sanitizer pass (scripts/test.sh) runs the fixtures' cases; the
# homeworks' timed bubble is not for a sanitized build.
SANITIZED = os.path.basename(tracecheck.BUILD) == "build-asan"
WORLD = 2

# From the fixture's source: prefix -> visibility, and each check's name
# with the marker its message carries on each rank (None: the lecture's).
PREFIXES = {"part A: hidden": "hidden", "part A: after": "after_due_date", "part B:": "after_published",
            "part B: the lecture's own": "visible"}
RANK_CHECKS = {"part A: seen": lambda r: "SHOWN-%d" % (100 + r),
               "part A: hidden count": lambda r: "SECRET-COUNT-%d" % (4242 + r),
               "part A: hidden close": None,
               "part A: after the due date": lambda r: "SECRET-LATER-%d" % (7 + r)}
OWN_CHECKS = {"part B: the lecture's own": "SECRET-OWN-31", "part B: the lecture's failing": "SECRET-OWN-FAIL-32"}
FAILING = {"rank 1: part A: hidden count", "rank 1: part A: hidden close", "part B: the lecture's failing"}


def visibility(name):
    best = ""
    for prefix in PREFIXES:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return PREFIXES.get(best, "visible")


class Visibility(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = cls.tmp.name
        results = os.path.join(cls.out, "results.json")
        cls.p = tracecheck.run(os.path.join(FIXTURES, "grade_visibility"), cls.out, "--grade", results)
        with open(results) as f:
            cls.r = json.load(f)
        cls.trace = tracecheck.validate(os.path.join(cls.out, "grade_visibility.failed.json"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def markers(self):
        """(test name, marker, visible) for every check that carries one."""
        out = []
        for name, marker in RANK_CHECKS.items():
            for rank in range(WORLD):
                if marker:
                    out.append(("rank %d: %s" % (rank, name), marker(rank), visibility(name) == "visible"))
        for name, marker in OWN_CHECKS.items():
            out.append((name, marker, visibility(name) == "visible"))
        return out

    def test_each_test_has_its_visibility(self):
        self.assertEqual(self.p.returncode, 1, tracecheck.why(self.p))
        tests = {t["name"]: t for t in self.r["tests"]}
        expected = ["rank %d: %s" % (rank, name) for name in RANK_CHECKS for rank in range(WORLD)] + list(OWN_CHECKS)
        self.assertEqual(sorted(tests), sorted(expected))
        for name, t in tests.items():
            check = name.split(": ", 1)[1] if name.startswith("rank ") else name
            self.assertEqual(t["visibility"], visibility(check), name)
            self.assertEqual(t["status"], "failed" if name in FAILING else "passed", name)
        # Not every test is visible (else the test above would prove nothing).
        self.assertEqual({t["visibility"] for t in tests.values()},
                         {"visible", "hidden", "after_due_date", "after_published"})

    def test_results_keep_every_message(self):
        tests = {t["name"]: t for t in self.r["tests"]}
        for name, marker, _ in self.markers():
            self.assertIn(marker, tests[name]["output"], name)
        # A hidden check_close keeps its numbers for the grader.
        self.assertIn("actual 1.5, expected 1", tests["rank 1: part A: hidden close"]["output"])

    def test_the_student_sees_no_hidden_message(self):
        console = self.p.stdout + self.p.stderr
        steps = json.dumps(self.trace["steps"])
        shown = self.r["output"]          # the run's output: the console's tail
        for name, marker, visible in self.markers():
            if visible:
                self.assertIn(marker, steps, name)     # the search can find what is there
            else:
                for where, text in (("console", console), ("trace", steps), ("results' output", shown)):
                    self.assertNotIn(marker, text, "%s: %s in the %s" % (name, marker, where))
        for leaked in ("actual 1.5", "max abs diff 0.5"):
            self.assertNotIn(leaked, console)
            self.assertNotIn(leaked, steps)
        # The failures are still said, by name and line, with their verdict.
        src = self.trace["files"]["tests/fixtures/grade_visibility.c"].split("\n")
        for name in ("part A: hidden count", "part A: hidden close"):
            line = next(i for i, s in enumerate(src, 1) if '"%s' % name in s)
            self.assertRegex(console, r"rank 1: check failed: tests/fixtures/grade_visibility\.c:%d: FAIL: %s "
                             r"\(a hidden check: what it saw is for the grader only\)" % (line, name))
        hidden = [r for s in self.trace["steps"] for r in s["renderings"]
                  if r["type"] == "check" and r.get("visibility") == "hidden"]
        self.assertEqual(sorted((r["what"], r["passed"]) for r in hidden),
                         [("part A: hidden close", False), ("part A: hidden close", True),
                          ("part A: hidden count", False), ("part A: hidden count", True)])
        for r in hidden:
            self.assertNotIn("withheld", r)
            self.assertEqual(set(r) - {"ranks", "folded", "each"},
                             {"type", "passed", "what", "visibility", "data"} | ({"name"} if "name" in r else set()))
        # The counts still count them.
        self.assertEqual(self.trace["meta"]["checks"], {"passed": 7, "failed": 3, "not_reached": 0})

    def test_leaderboard(self):
        self.assertEqual(self.r["leaderboard"], [{"name": "time of part A (s)", "value": 0.25, "order": "asc"},
                                                 {"name": "bandwidth (GB/s)", "value": 3.5, "order": "desc"}])
        notes = [(s.get("rank"), r["leaderboard"]) for s in self.trace["steps"] for r in s["renderings"]
                 if "leaderboard" in r]
        self.assertEqual([rank for rank, _ in notes], [0, None])


class Misuse(unittest.TestCase):
    def test_bad_calls_are_errors_at_their_lines(self):
        with tempfile.TemporaryDirectory() as out:
            results = os.path.join(out, "results.json")
            p = tracecheck.run(os.path.join(FIXTURES, "grade_visibility_misuse"), out, "--grade", results)
            self.assertEqual(p.returncode, 1, tracecheck.why(p))
            t = tracecheck.validate(os.path.join(out, "grade_visibility_misuse.failed.json"))
            with open(results) as f:
                r = json.load(f)
        src = t["files"]["tests/fixtures/grade_visibility_misuse.c"].split("\n")
        bad = {i: line for i, line in enumerate(src, 1) if "/* BAD" in line}
        errors = [(s["stack"][-1]["line"], r["data"]) for s in t["steps"] for r in s["renderings"]
                  if r["type"] == "error"]
        # Each BAD line once, the NaN in the ranks once per rank.
        lines = sorted(line for line, _ in errors)
        self.assertEqual(lines, sorted(list(bad) + [i for i, s in bad.items() if "both ranks" in s]))
        said = {line: msg for line, msg in errors}
        why = {"rank": "inside a spawned rank", "NaN": "the value is nan", "no such exercise": "does not start with "
               "the prefix of an exercise", "visibility": 'the visibility must be "visible", "hidden"',
               "NULL visibility": "NULL): the visibility must be", "empty prefix": "prefix is NULL or empty",
               "twice": "has a visibility already", "empty name": "name is NULL or empty",
               "infinite": "the value is inf", "order": 'the order is "up"', "NULL order": "the order is NULL"}
        for line, text in bad.items():
            what = text.split("/* BAD: ")[1].split(",")[0].split(" */")[0]
            self.assertIn(why[what], said[line], text)
            self.assertTrue(said[line].startswith("tests/fixtures/grade_visibility_misuse.c:%d: " % line), said[line])
        # The good declaration holds; the bad ones set nothing; nothing entered.
        self.assertEqual({x["name"]: x["visibility"] for x in r["tests"]},
                         {"part A: one": "hidden", "rank 0: part A: the ranks' check": "visible",
                          "rank 1: part A: the ranks' check": "visible"})
        self.assertNotIn("leaderboard", r)


@unittest.skipIf(SANITIZED, "the homeworks' timed checks run on the normal build")
class Homeworks(unittest.TestCase):
    """The two homeworks' own visibilities and leaderboard entries: the
    instructor's solutions still score everything and enter one number
    each; the starter's after-due check fails saying nothing of what it saw
    where the student reads, and everything in results.json."""
    ZERO1_TINY = "exercise 3: parameters after a ZeRO-1 step with gradients near AdamW's eps"
    TP_DB = "exercise 1: db, this rank's rows of dL/dB"

    def grade(self, binary, *args):
        with tempfile.TemporaryDirectory() as out:
            results = os.path.join(out, "results.json")
            p = tracecheck.run(binary, out, "--grade", results, *args)
            with open(results) as f:
                r = json.load(f)
            name = os.path.basename(binary).replace("_solution", "")
            t = tracecheck.validate(os.path.join(out, name + (".failed" if p.returncode else "") + ".json"))
        return p, r, t

    def withheld(self, r, prefix, visibility):
        tests = [x for x in r["tests"] if x["name"].split(": ", 1)[1].startswith(prefix)]
        self.assertEqual(len(tests), 4)
        self.assertEqual({x["visibility"] for x in tests}, {visibility})
        self.assertEqual({x["visibility"] for x in r["tests"] if x not in tests}, {"visible"})
        return tests

    def solution_entry(self, homework, score, prefix, visibility, board):
        """The instructor's solution of `homework`, graded: it passes, scores
        `score` of `score`, its four `prefix` checks have `visibility`, and
        it enters one number, `board` = (name, order): that entry."""
        p, r, _ = self.grade(os.path.join(FIXTURES, homework + "_solution"))
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        self.assertEqual((r["score"], r["max_score"]), (score, score))
        self.withheld(r, prefix, visibility)
        [entry] = r["leaderboard"]
        self.assertEqual((entry["name"], entry["order"]), board)
        return entry

    def test_homework_08(self):
        entry = self.solution_entry("homework_08", 90, self.ZERO1_TINY, "after_due_date",
                                    ("exercise 1: ring all-reduce bus bandwidth (GB/s)", "desc"))
        self.assertGreater(entry["value"], 0)

    def test_homework_08_starter_withholds_the_after_due_check(self):
        p, r, t = self.grade(os.path.join(tracecheck.BUILD, "lectures", "homework_08"))
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        tests = self.withheld(r, self.ZERO1_TINY, "after_due_date")
        for x in tests:   # the grader reads the numbers
            self.assertEqual(x["status"], "failed")
            self.assertIn("elements outside the tolerance", x["output"])
        said = [line for line in p.stderr.split("\n") if self.ZERO1_TINY in line]
        self.assertEqual(len(said), 4, p.stderr[-3000:])
        for line in said:
            self.assertTrue(line.endswith("(a check shown after the due date: what it saw is for the grader only)"), line)
        steps = [r for s in t["steps"] for r in s["renderings"] if r["type"] == "check" and
                 r["what"].startswith(self.ZERO1_TINY)]
        self.assertEqual(len(steps), 4)
        self.assertTrue(all(set(x) == {"type", "passed", "what", "visibility", "data"} for x in steps), steps)
        # Its visible twin still shows its numbers (and inspects its tensors).
        self.assertRegex(p.stderr, r"FAIL: exercise 3: parameters after a ZeRO-1 step: max abs diff")
        self.assertNotIn("leaderboard", r)   # the starter's ring sums nothing

    def test_homework_parallel(self):
        entry = self.solution_entry("homework_parallel", 100, self.TP_DB, "hidden",
                                    ("exercise 2: 1F1B bubble, measured", "asc"))
        # Entered only when the bubble check accepts it: within -0.05 and
        # +0.35 of (p-1)/(m+p-1) = 3/11 (homework_parallel.c's bounds).
        self.assertTrue(3 / 11 - 0.05 <= entry["value"] <= 3 / 11 + 0.35, entry)


if __name__ == "__main__":
    unittest.main()
