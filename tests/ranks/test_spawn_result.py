"""spawn_return() / spawn_result(): values from the ranks to the lecture
(tests/fixtures/spawn_result.c).

Each rank's bytes must arrive whole (an 8 MB array included, its sum
checked against the formula), a rank that returned nothing reads as 0
bytes, the values are those of the latest spawn only, and every misuse is
an error step at its line.

LECTERN_BUILD picks the build folder (build, or build-asan).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, line_of  # noqa: E402

SRC = os.path.join(tracecheck.ROOT, "tests", "fixtures", "spawn_result.c")
WHERE = "tests/fixtures/spawn_result.c"
BIG = 1000000


class SpawnResult(FixtureTest):
    def run_case(self, case, want_rc):
        return self.run_traced("spawn_result", {"SPAWN_RESULT": case}, want_rc)[0]

    @staticmethod
    def notes(t):
        return [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "markdown"]

    def test_values_arrive_whole(self):
        t = self.run_case("values", 0)
        notes = self.notes(t)
        for r in range(3):
            self.assertIn("rank %d returned 16 bytes: rank %d of 4, square %d" % (r, r, r * r), notes)
        # the last rank returned nothing: 0 bytes, out left as it was
        self.assertIn("rank 3 returned 0 bytes: rank -1 of -1, square -1", notes)
        self.assertIn("size only: 16", notes)
        for r in range(2):
            # sum of i + r for i < BIG, exact in double (below 2^53)
            want = BIG * (BIG - 1) // 2 + r * BIG
            self.assertIn("big: rank %d returned %d bytes, sum %.1f" % (r, 8 * BIG, want), notes)
        self.assertIn("after a spawn that returned nothing: 0", notes)
        self.assertEqual([s for s in t["steps"] for r in s["renderings"] if r["type"] == "error"], [])

    def test_misuse_is_an_error_at_its_line(self):
        t = self.run_case("errors", 1)
        errs = [(s, r["data"]) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]

        def one(marker, words, rank=None, count=1):
            line = line_of(SRC, marker)
            got = [(s, m) for s, m in errs if s["stack"][-1]["line"] == line]
            self.assertEqual(len(got), count, "%s: %s" % (marker, errs))
            for s, m in got:
                self.assertIn(words, m)
                self.assertTrue(m.startswith("%s:%d: " % (WHERE, line)), m)
                if rank is not None:
                    self.assertIsNotNone(s["rank"])
        one("MARK:no-spawn", "spawn_result(0): no spawn has run yet")
        one("MARK:in-lecture", "spawn_return() outside a spawned rank")
        one("MARK:twice", "called a second time", rank=True, count=2)
        one("MARK:bad-rank", "spawn_result(2): the last spawn had ranks 0 to 1")
        one("MARK:small", "rank 0 returned 16 bytes, more than the 4 of out: nothing copied")
        one("MARK:too-big", "16777217 bytes exceed the limit of 16777216 bytes", rank=True)
        notes = self.notes(t)
        self.assertIn("twice: kept 4 bytes, value 1", notes)   # the first value stays
        self.assertIn("small: 16", notes)                      # the size, nothing copied
        self.assertIn("too big: 0", notes)                     # nothing returned
        self.assertIn("done", notes)                           # errors do not stop the lecture
        self.assertEqual(len(errs), 7)


if __name__ == "__main__":
    unittest.main()
