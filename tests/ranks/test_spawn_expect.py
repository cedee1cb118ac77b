"""spawn_expect_failure(): a spawn whose failure is the lesson
(tests/fixtures/spawn_expect.c).

A deadlock, a crash, ranks that disagree: each is recorded with the ranks'
error steps marked "expected", the lecture goes on, the run exits 0 and the
pool serves the normal spawns after it. A spawn that unexpectedly succeeds
is an error at the lecture's line and fails the run.

LECTERN_BUILD picks the build folder (build, or build-asan).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, line_of  # noqa: E402

SRC = os.path.join(tracecheck.ROOT, "tests", "fixtures", "spawn_expect.c")
WHERE = "tests/fixtures/spawn_expect.c"
CASES = "tests/fixtures/spawn_cases.h"   # the rank functions spawn_fail.c shares


class ExpectFailure(FixtureTest):
    def run_case(self, case, env=None, want_rc=0):
        t, err = self.run_traced("spawn_expect", dict({"SPAWN_EXPECT": case}, **(env or {})), want_rc,
                                 ranks_gone=True)
        # only the trace of how it ended
        self.assertFalse(os.path.exists(os.path.join(self.out, "spawn_expect.json" if want_rc else
                                                     "spawn_expect.failed.json")))
        return t, err

    @staticmethod
    def errors(t, spawn=None):
        return [(s, r) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "error" and (spawn is None or s["spawn"] == spawn)]

    @staticmethod
    def texts(t):
        return [r.get("data") for s in t["steps"] for r in s["renderings"]]

    def fine_sums(self, t, spawn, world, expected_failure=False):
        """Each rank of a normal spawn `spawn` of `world` ranks holds
        sum over ranks of (rank + 1) = world (world + 1) / 2."""
        want = world * (world + 1) // 2
        got = sorted(s["rank"] for s in t["steps"] if s["spawn"] == spawn for r in s["renderings"]
                     if r["type"] == "markdown" and r["data"].startswith("fine: rank %d of %d has tensor([%d., %d.]"
                                                                          % (s["rank"], world, want, want)))
        self.assertEqual(got, list(range(world)), "spawn %d: %s" % (spawn, self.texts(t)))
        self.assertEqual(t["spawns"][spawn]["status"], "ok")
        self.assertEqual(t["spawns"][spawn].get("expect_failure", False), expected_failure)

    def test_deadlock_caught_three_times_and_the_pool_serves_the_next_spawn(self):
        t, err = self.run_case("deadlock")
        self.assertEqual(t["meta"]["status"], "ok")
        line = line_of(os.path.join(tracecheck.ROOT, CASES), "MARK:deadlock")
        for i in range(3):
            k = 2 * i   # spawns alternate: the expected failure, then a normal one
            sp = t["spawns"][k]
            self.assertEqual((sp["status"], sp.get("expect_failure")), ("failed", True))
            self.assertEqual(sp["stack"][-1]["line"], line_of(SRC, "MARK:expect-deadlock"))
            errs = self.errors(t, k)
            self.assertEqual(sorted(s["rank"] for s, _ in errs), [0, 1], errs)
            for s, r in errs:
                self.assertIs(r.get("expected"), True)
                self.assertEqual((s["stack"][-1]["path"], s["stack"][-1]["line"]), (CASES, line))
                # named from the status board, before any timeout
                self.assertIn("%s:%d: deadlock: rank %d of 2 waits in dist_recv() in both_receive() for rank %d "
                              "to send" % (CASES, line, s["rank"], 1 - s["rank"]), r["data"])
            self.assertIn("round %d: caught 1" % i, self.texts(t))
            self.fine_sums(t, k + 1, 2 + i)
        self.assertEqual(len(self.errors(t)), 6)
        self.assertIn("after the spawns", self.texts(t))

    def test_the_timeout_is_set_by_lectern_expect_timeout(self):
        """A hang the board cannot prove (a buffered send too large to
        buffer, its receiver in a barrier) is left to the timeout."""
        t, err = self.run_case("stuck", {"LECTERN_EXPECT_TIMEOUT": "1.5"})
        errs = self.errors(t)
        self.assertEqual(len(errs), 2, errs)
        for s, r in errs:
            self.assertIn("made no progress for 1.5 s", r["data"])
        send = [s for s, r in errs if s["rank"] == 0][0]
        self.assertEqual(send["stack"][-1]["line"], line_of(SRC, "MARK:stuck-send"))
        # never longer than LECTERN_TIMEOUT
        t, err = self.run_case("stuck", {"LECTERN_EXPECT_TIMEOUT": "30", "LECTERN_TIMEOUT": "2"})
        errs = self.errors(t)
        self.assertEqual(len(errs), 2, errs)
        for _, r in errs:
            self.assertIn("made no progress for 2 s", r["data"])

    def test_a_crash_is_caught(self):
        t, err = self.run_case("crash")
        errs = self.errors(t, 0)
        self.assertEqual(len(errs), 1, errs)
        s, r = errs[0]
        self.assertEqual((s["rank"], s["stack"][-1]["path"], s["stack"][-1]["line"]),
                         (1, CASES, line_of(os.path.join(tracecheck.ROOT, CASES), "MARK:segv")))
        self.assertIn("died with SIGSEGV", r["data"])
        self.assertIs(r.get("expected"), True)
        self.assertIn("caught 1", self.texts(t))
        self.fine_sums(t, 1, 4)

    def test_ranks_that_disagree_are_caught(self):
        t, err = self.run_case("counts")
        self.fine_sums(t, 0, 3)
        errs = self.errors(t, 1)
        for _, r in errs:
            self.assertIs(r.get("expected"), True)
        errs = [(s, r) for s, r in errs if "made different calls" in r["data"]]
        self.assertEqual(sorted(s["rank"] for s, _ in errs), [0, 1, 2], errs)
        # The console says the errors are the lesson, not a failure.
        for rank in (0, 1, 2):
            self.assertIn("lectern: rank %d: error, as the lecture expects (spawn_expect_failure): %s:"
                          % (rank, WHERE), err)
        self.assertNotRegex(err, r"lectern: rank \d: error: ")
        for s, r in errs:
            self.assertEqual(s["stack"][-1]["line"], line_of(SRC, "MARK:four" if s["rank"] == 0 else "MARK:six"))
        self.assertFalse([x for x in self.texts(t) if x and "has a result" in x])
        self.fine_sums(t, 2, 3)

    def test_a_spawn_that_succeeds_is_the_lectures_error(self):
        t, err = self.run_case("succeeds", want_rc=1)
        self.assertEqual(t["meta"]["status"], "failed")
        errs = self.errors(t)
        self.assertEqual(len(errs), 1, errs)
        s, r = errs[0]
        line = line_of(SRC, "MARK:succeeds")
        self.assertIsNone(s["rank"])
        self.assertEqual(s["stack"][-1]["line"], line)
        self.assertNotIn("expected", r)
        self.assertTrue(r["data"].startswith("%s:%d: spawn_expect_failure(): the spawn of 2 ranks succeeded, but it "
                                             "was expected to fail" % (WHERE, line)), r["data"])
        self.assertEqual((t["spawns"][0]["status"], t["spawns"][0]["expect_failure"]), ("ok", True))
        self.assertIn("caught 0", self.texts(t))
        self.fine_sums(t, 0, 2, expected_failure=True)
        self.fine_sums(t, 1, 2)
        self.assertIn("after the spawns", self.texts(t))   # the lecture went on

    def test_bad_arguments_are_errors_as_for_spawn(self):
        t, err = self.run_case("bad", want_rc=1)
        errs = self.errors(t)
        self.assertEqual(len(errs), 1, errs)
        self.assertEqual(errs[0][0]["stack"][-1]["line"], line_of(SRC, "MARK:bad"))
        self.assertIn("spawn_expect_failure(): world_size 0 is out of range", errs[0][1]["data"])


if __name__ == "__main__":
    unittest.main()
