"""check() and check_close(): a step per check with the numbers that decided
it, a failed check fails the run without stopping it, ranks' checks count,
and the console's last line counts them.

    /usr/bin/python3 tests/trace/test_checks.py        (LECTERN_BUILD picks the build)
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

CHECKS = tracecheck.Fixture("check_fixture")
SRC = CHECKS.source


def run(out, case):
    return CHECKS.run(out, case=case, timeout=180)


def checks(trace):
    return [(s, r) for s in trace["steps"] for r in s["renderings"] if r["type"] == "check"]


def src_lines():
    with open(SRC) as f:
        return f.read().split("\n")


class Checks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.p = run(cls.tmp.name, "all")
        cls.trace = tracecheck.validate(os.path.join(cls.tmp.name, "check_fixture.failed.json"))
        cls.by_what = {r["what"]: (s, r) for s, r in checks(cls.trace) if s["rank"] is None}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_failed_checks_fail_the_run_but_do_not_stop_it(self):
        self.assertEqual(self.p.returncode, 1, tracecheck.why(self.p))
        self.assertEqual(self.trace["meta"]["status"], "failed")
        last = self.trace["steps"][-1]["renderings"][0]
        self.assertEqual(last.get("data"), "after")     # the lecture went on to its end
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "check_fixture.json")))

    def test_counts_on_console_and_in_meta(self):
        # Lecture: 3 pass, 4 fail; ranks: 2 all-reduce checks pass, rank 1's false check fails.
        self.assertEqual(self.p.stderr.rstrip("\n").split("\n")[-1], "checks: 5 passed, 5 failed")
        self.assertEqual(self.trace["meta"]["checks"], {"passed": 5, "failed": 5})
        # the two ranks' passes at one line are one step standing for both ("folded": 2)
        self.assertEqual(sum(r.get("folded", 1) for _, r in checks(self.trace) if r["passed"]), 5)

    def test_each_check_is_at_its_line(self):
        lines = src_lines()
        for s, r in checks(self.trace):
            code = lines[s["stack"][-1]["line"] - 1]
            self.assertRegex(code, r"\bcheck(_close)?\(", r["what"])

    def test_numbers_of_a_failed_check_close(self):
        # six against six_off: only element [1, 2] differs, 5 against 5.5.
        s, r = self.by_what["one element off"]
        self.assertFalse(r["passed"])
        self.assertEqual(r["max_abs"], 0.5)
        self.assertEqual(r["max_abs_at"], [1, 2])
        self.assertAlmostEqual(r["max_rel"], 0.5 / 5.5, places=12)   # computed in double from exact floats
        self.assertEqual(r["max_rel_at"], [1, 2])
        self.assertEqual((r["bad"], r["numel"], r["first_bad_at"]), (1, 6, [1, 2]))
        # the values at the worst element, and which elements are wrong
        self.assertEqual((r["actual_at_max"], r["expected_at_max"]), (5, 5.5))
        self.assertEqual((r["bad_ranges"], r["bad_runs"]), ([[5, 5]], 1))
        self.assertIn("(actual 5, expected 5.5)", r["data"])
        self.assertIn("wrong elements (flat indices): 5", r["data"])
        self.assertIn("max abs diff 0.5 at [1, 2]", r["data"])
        self.assertIn("tests/fixtures/check_fixture.c:%d: FAIL: one element off" % s["stack"][-1]["line"],
                      self.p.stderr)

    def test_tolerance_is_rtol_times_expected(self):
        # 5.00001f against 5: |d| = float32(5.00001) - 5, within 1e-5 * 5.
        s, r = self.by_what["within rtol"]
        self.assertTrue(r["passed"])
        import struct
        d = struct.unpack("f", struct.pack("f", 5.00001))[0] - 5
        self.assertEqual(r["max_abs"], d)
        self.assertLessEqual(d, 1e-5 * 5)

    def test_shapes_and_nan(self):
        _, r = self.by_what["shapes differ"]
        self.assertFalse(r["passed"])
        self.assertIn("actual 6, expected 2x3", r["reason"])
        _, r = self.by_what["a NaN"]
        # The NaN is outside any tolerance, however wide.
        self.assertFalse(r["passed"])
        self.assertEqual((r["nonfinite"], r["first_bad_at"]), (1, [0, 2]))

    def test_check_with_format(self):
        _, r = self.by_what["two and two make 5"]
        self.assertFalse(r["passed"])
        _, r = self.by_what["one and one make 2"]
        self.assertTrue(r["passed"])

    def test_ranks_checks(self):
        # Two ranks pass "all-reduce sum" at one line: one step, folded (docs/trace-format.md).
        ranked = [(r["what"], r["passed"], sorted(r.get("ranks", [s["rank"]])))
                  for s, r in checks(self.trace) if s["rank"] is not None]
        self.assertCountEqual(ranked, [("all-reduce sum", True, [0, 1]), ("rank 1 is rank 0", False, [1])])
        self.assertIn("rank 1: check failed: tests/fixtures/check_fixture.c:", self.p.stderr)

    def test_all_passing_is_status_ok(self):
        with tempfile.TemporaryDirectory() as out:
            p = run(out, "pass")
            self.assertEqual(p.returncode, 0, tracecheck.why(p))
            self.assertEqual(p.stderr.rstrip("\n").split("\n")[-1], "checks: 5 passed, 0 failed")
            t = tracecheck.validate(os.path.join(out, "check_fixture.json"))
            self.assertEqual(t["meta"]["checks"], {"passed": 5, "failed": 0})


class Folded(unittest.TestCase):
    """A spawn's passing checks at one place make one step; a failing rank's
    check stays a step of its own, with its rank and its numbers."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.p = run(cls.tmp.name, "fold")
        cls.trace = tracecheck.validate(os.path.join(cls.tmp.name, "check_fixture.failed.json"))
        cls.checks = checks(cls.trace)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def by_what(self, prefix):
        return [(s, r) for s, r in self.checks if r["what"].startswith(prefix)]

    def test_every_check_still_counts(self):
        # 4 ranks x (1 check_close + 2 in the loop + 1 value check) = 16; rank 2's value check fails.
        self.assertEqual(self.p.returncode, 1, tracecheck.why(self.p))
        self.assertEqual(self.trace["meta"]["checks"], {"passed": 15, "failed": 1})
        self.assertEqual(self.p.stderr.rstrip("\n").split("\n")[-1], "checks: 15 passed, 1 failed")

    def test_one_step_per_place_with_the_worst_numbers(self):
        (s, r), = self.by_what("within 0.01")
        self.assertTrue(r["passed"])
        self.assertEqual(sorted(r["ranks"]), [0, 1, 2, 3])
        self.assertEqual(r["folded"], 4)
        self.assertTrue(r["data"].startswith("PASS on 4 ranks: "), r["data"])
        # rank 3's difference, 3e-4 as float32 rounds it near 2.0: the largest of the four
        self.assertAlmostEqual(r["max_abs"], 3e-4, delta=1e-6)

    def test_a_loop_folds_turn_by_turn(self):
        # A check in a loop makes one step per turn, each rank's k-th check
        # at the line joining the others' k-th: "step 1" does not hide
        # behind "step 0". Each is rank 0's step, the column it is shown in.
        steps = self.by_what("step ")
        self.assertEqual(sorted(r["what"] for _, r in steps), ["step 0 of 2", "step 1 of 2"])
        for s, r in steps:
            self.assertEqual((sorted(r["ranks"]), r["folded"], s["rank"]), ([0, 1, 2, 3], 4, 0))
            self.assertEqual({p["what"] for p in r["each"]}, {r["what"]})
            self.assertEqual(r["data"], "PASS on 4 ranks: " + r["what"])

    def test_the_failing_rank_stands_alone(self):
        values = self.by_what("value ")
        passed = [(s, r) for s, r in values if r["passed"]]
        failed = [(s, r) for s, r in values if not r["passed"]]
        self.assertEqual(len(passed), 1)
        self.assertEqual(sorted(passed[0][1]["ranks"]), [0, 1, 3])
        self.assertEqual(passed[0][1]["data"], "PASS on 3 ranks: value 0.1 <= 0.5")
        self.assertEqual(len(failed), 1)
        s, r = failed[0]
        self.assertEqual(s["rank"], 2)
        self.assertNotIn("ranks", r)
        self.assertEqual(r["data"], "FAIL: value 1.0 <= 0.5")


if __name__ == "__main__":
    unittest.main()
