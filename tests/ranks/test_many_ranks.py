"""A world of 32 ranks (LECTERN_MAX_WORLD is 64): tests/fixtures/many_ranks.c.

Every rank all-reduces rank+1 and must get 1 + 2 + ... + 32 = 528, passes its
rank round a ring with dist_sendrecv and must get its left neighbour's,
all-gathers the ranks in order, and counts at least the 4 bytes it sent to
its right neighbour (the per-peer traffic counters at rank 31). The trace
validates (schema, line accuracy).

32 ranks on the 2-core machine take 15-25 s to start (their MPI_Init on
shared cores; bench/bench_world.c measures it), so `make test` (the quick
scope) skips this and `make test-all` runs it. Alone:
    python3 tests/ranks/test_many_ranks.py -v
"""
import os
import re
import subprocess
import sys
import tempfile
import shutil
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

FIXTURE = tracecheck.built("tests", "fixtures", "many_ranks")
NOTE = re.compile(r"^rank (\d+)/(\d+): sum (\S+) (\S+) (\S+) (\S+), from the left (\S+), gathered in order (\d), "
                  r"to the right (\d+) bytes$")


@unittest.skipIf(os.environ.get("LECTERN_TEST_SCOPE") == "quick",
                 "32 ranks take 15-25 s to start on 2 cores: make test-all runs it")
class ManyRanks(unittest.TestCase):
    def test_thirty_two_ranks(self):
        if not os.path.exists(FIXTURE):
            self.skipTest("%s is not built (make)" % FIXTURE)
        out = tempfile.mkdtemp(prefix="lectern-test-many-ranks-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        env = dict(os.environ, MANY_RANKS="32")
        t0 = time.monotonic()
        p = subprocess.run([FIXTURE, "--out", out, "--quiet"], env=env, capture_output=True, text=True,
                           timeout=300)
        seconds = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        trace = tracecheck.validate(os.path.join(out, "many_ranks.json"))
        seen = {}
        for s in trace["steps"]:
            for r in s["renderings"]:
                m = NOTE.match(r.get("data") or "")
                if not m:
                    continue
                rank, world = int(m.group(1)), int(m.group(2))
                self.assertEqual(world, 32)
                self.assertEqual(s["rank"], rank)
                self.assertEqual([float(m.group(i)) for i in range(3, 7)], [528.0] * 4, m.group(0))
                self.assertEqual(float(m.group(7)), float((rank - 1) % 32), m.group(0))
                self.assertEqual(m.group(8), "1", m.group(0))
                self.assertGreaterEqual(int(m.group(9)), 4, m.group(0))
                seen[rank] = True
        self.assertEqual(sorted(seen), list(range(32)))
        self.assertEqual([(s["world_size"], s["status"]) for s in trace["spawns"]], [(32, "ok")])
        sys.stderr.write("[32 ranks: %.1f s, start-up %.1f s] " % (seconds, trace["spawns"][0].get("startup_s", 0)))


if __name__ == "__main__":
    unittest.main()
