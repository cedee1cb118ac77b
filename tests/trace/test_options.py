"""A lecture's own options: declared with LECTURE_OPTIONS, listed by --help,
read with lecture_flag() and lecture_option() in the lecture and its ranks;
an undeclared option is bad usage; reading an undeclared name is an error
at its line; `make run ARGS=...` passes them.

    /usr/bin/python3 tests/trace/test_options.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
OPTIONS = tracecheck.Fixture("options_fixture")
FIXTURE = OPTIONS.binary
texts = tracecheck.texts


class Options(tracecheck.FixtureTest):
    def run_fixture(self, *args, case=""):
        return OPTIONS.run(self.out, *args, case=case, timeout=180)

    def test_help_lists_declared_options(self):
        p = subprocess.run([FIXTURE, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertIn("Options of this lecture:", p.stdout)
        self.assertRegex(p.stdout, r"\n  --naive +use the naive ring\n")
        self.assertRegex(p.stdout, r"\n  --n=N +elements per rank \(default 8\)\n")
        self.assertRegex(p.stdout, r"\n  --label=TEXT +a word to print\n")

    def test_values_reach_lecture_and_ranks(self):
        p = self.run_fixture("--naive", "--n=32", "--label=a b=c")
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "options_fixture.json"))
        got = texts(t)
        self.assertIn("lecture: naive=1 n=32 label=a b=c", got)
        self.assertCountEqual([x for x in got if x.startswith("rank")], ["rank 0: naive=1 n=32", "rank 1: naive=1 n=32"])

    def test_fallbacks_when_not_given(self):
        p = self.run_fixture()
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        got = texts(tracecheck.validate(os.path.join(self.out, "options_fixture.json")))
        self.assertIn("lecture: naive=0 n=8 label=(none)", got)
        self.assertIn("rank 1: naive=0 n=8", got)

    def test_bad_usage_is_said_before_the_lecture_runs(self):
        cases = {
            ("--nave",): "unknown option '--nave' (this lecture reads --naive, --n=N, --label=TEXT)",
            ("--naive=3",): "option --naive is a flag and takes no value (got '--naive=3')",
            ("--n",): "option --n needs a value: --n=N",
            ("8",): "unknown argument '8'",
        }
        for args, words in cases.items():
            with self.subTest(args=args):
                p = self.run_fixture(*args)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(words, p.stderr)
                self.assertEqual(os.listdir(self.out), [])   # nothing ran, nothing written

    def test_reading_an_undeclared_option_is_an_error_at_its_line(self):
        p = self.run_fixture(case="undeclared")
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "options_fixture.failed.json"))
        errs = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertEqual(len(errs), 3, errs)
        src = t["files"]["tests/fixtures/options_fixture.c"].split("\n")
        for e, call, words in zip(errs, ("lecture_flag", "lecture_option", "lecture_flag"),
                                  ("--fast is not declared", "--naive is declared as a flag",
                                   "--n is declared with a value")):
            m = re.match(r"tests/fixtures/options_fixture\.c:(\d+): ", e)
            self.assertTrue(m, e)
            self.assertIn(call + "(", src[int(m.group(1)) - 1])
            self.assertIn(words, e)
        self.assertEqual(t["steps"][-1]["renderings"][0]["data"], "after")

    def test_make_run_passes_args(self):
        p = subprocess.run(["make", "-n", "--no-print-directory", "run", "LECTURE=lecture_00",
                            "ARGS=--naive --n=8"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        line = [x for x in p.stdout.split("\n") if "run-lecture.sh" in x]
        self.assertTrue(line, p.stdout)
        self.assertTrue(line[0].rstrip().endswith("lectures/lecture_00 --naive --n=8"), line[0])


if __name__ == "__main__":
    unittest.main()
