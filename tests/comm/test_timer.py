"""dist_timer: a barrier before the clock starts, every rank's time gathered,
max / mean / min the same on every rank and equal to what the ranks' own
times give; outside a spawn, the lecture's own time; a stop without a start
is an error at its line.

No assertion depends on how fast this machine is: the ordering checks rest
on the barrier (a rank cannot start before the late rank 0 arrives) and on
nanosleep sleeping at least as long as asked.

    /usr/bin/python3 tests/comm/test_timer.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

TIMER = tracecheck.Fixture("timer_fixture")
NUM = r"([-0-9.e+]+)"


class Timer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.p = TIMER.run(cls.tmp.name, timeout=180)
        cls.t = tracecheck.validate(os.path.join(cls.tmp.name, "timer_fixture.failed.json"))
        cls.texts = tracecheck.texts(cls.t)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def ranks(self):
        out = {}
        pat = re.compile(r"rank (\d) started %s seconds %s max %s mean %s min %s world (\d) returned %s" % ((NUM,) * 5 + (NUM,)))
        for x in self.texts:
            m = pat.fullmatch(x)
            if m:
                r = int(m.group(1))
                out[r] = dict(started=float(m.group(2)), seconds=float(m.group(3)), max=float(m.group(4)),
                              mean=float(m.group(5)), min=float(m.group(6)), world=int(m.group(7)),
                              returned=float(m.group(8)))
        return out

    def test_figures_over_the_ranks(self):
        rs = self.ranks()
        self.assertEqual(sorted(rs), [0, 1, 2], self.texts)
        secs = [rs[r]["seconds"] for r in range(3)]
        # The ranks' times travel as float32: 2^-24 of each, far below 1e-6 relative.
        for r in range(3):
            self.assertEqual(rs[r]["world"], 3)
            self.assertAlmostEqual(rs[r]["max"], max(secs), delta=1e-6 * max(secs))
            self.assertAlmostEqual(rs[r]["min"], min(secs), delta=1e-6 * max(secs))
            self.assertAlmostEqual(rs[r]["mean"], sum(secs) / 3, delta=1e-6 * max(secs))
            self.assertEqual(rs[r]["returned"], rs[r]["max"])
            self.assertGreaterEqual(rs[r]["seconds"], 0.04 * (r + 1))   # nanosleep sleeps at least that long
        # Every rank sees the same figures.
        self.assertEqual(len({(rs[r]["max"], rs[r]["mean"], rs[r]["min"]) for r in range(3)}), 1)

    def test_barrier_before_the_clock(self):
        rs = self.ranks()
        late = [float(m.group(1)) for m in (re.fullmatch(r"rank 0 starts the timer at %s" % NUM, x) for x in self.texts) if m]
        self.assertEqual(len(late), 1)
        # Without the barrier ranks 1 and 2 would start about 0.2 s before rank 0 arrives.
        for r in (1, 2):
            self.assertGreaterEqual(rs[r]["started"], late[0])

    def test_outside_spawn_and_misuse(self):
        m = [re.fullmatch(r"lecture seconds %s max %s mean %s min %s world 1" % ((NUM,) * 4), x) for x in self.texts]
        m = [x for x in m if x]
        self.assertEqual(len(m), 1, self.texts)
        secs, mx, mean, mn = (float(m[0].group(i)) for i in range(1, 5))
        self.assertGreaterEqual(secs, 0.01)
        self.assertEqual((mx, mean, mn), (secs, secs, secs))
        self.assertEqual(self.p.returncode, 1, tracecheck.why(self.p))
        errs = [(s, r["data"]) for s in self.t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertEqual(len(errs), 1, errs)
        self.assertIn("dist_timer_stop: the timer was not started", errs[0][1])
        src = self.t["files"]["tests/fixtures/timer_fixture.c"].split("\n")
        self.assertIn("dist_timer_stop(&never)", src[errs[0][0]["stack"][-1]["line"] - 1])


if __name__ == "__main__":
    unittest.main()
