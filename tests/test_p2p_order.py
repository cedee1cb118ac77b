"""Point-to-point in flight across a collective, the pattern MPI allows and
a deferring backend deadlocks on (tests/lectures/p2p_order_fixture.c):

  rank 0:  isend(to 1); all_reduce; wait
  rank 1:  all_reduce; recv(from 0)

and both directions in flight across an async all-reduce, waited out of
order. Each case runs at 1,000 floats (every transport buffers it) and at
4 M floats (16 MiB: none does), under LECTERN_TIMEOUT=30 and a hard
timeout, and must finish with the sums the test works out itself. On a
machine whose build links NCCL and that has two GPUs, the same spawn runs
on NCCL (the test checks that it did); elsewhere on Open MPI.
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tracecheck  # noqa: E402
from test_spawn import Base, fixture, links, machine_gpus  # noqa: E402

SIZES = (1000, 4 * 1024 * 1024)


def notes(t):
    return [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "markdown"]


class P2POrder(Base):
    def run_case(self, case, n):
        # 30 s without progress is a deadlock (the parent stops it); the
        # subprocess timeout (120 s) is the backstop should that fail too.
        # Both are far above the run's time here (about 2 s on 2 cores).
        rc, out, err = self.run_fixture("p2p_order_fixture",
                                        {"P2P_CASE": case, "P2P_FLOATS": str(n), "LECTERN_TIMEOUT": "30"},
                                        timeout=120)
        self.assertEqual(rc, 0, "%s at %d floats: %s" % (case, n, err[-2000:]))
        t = tracecheck.validate(os.path.join(self.out, "p2p_order_fixture.json"))
        binary = fixture("p2p_order_fixture")
        forced = os.environ.get("LECTERN_BACKEND")
        want = forced or ("nccl" if links(binary, "libnccl") and machine_gpus() >= 2 else "mpi")
        self.assertEqual([s["backend"] for s in t["spawns"]], [want])
        got = {}
        for line in notes(t):
            m = re.fullmatch(r"rank (\d) (all_reduce|received) (\S+)", line)
            if m:
                got[(int(m.group(1)), m.group(2))] = float(m.group(3))
        return got

    def test_isend_across_all_reduce(self):
        for n in SIZES:
            with self.subTest(floats=n):
                got = self.run_case("isend", n)
                # every element is 1 + 2 after the sum; rank 0 sent 7s
                self.assertEqual(got, {(0, "all_reduce"): 3.0 * n, (1, "all_reduce"): 3.0 * n,
                                       (1, "received"): 7.0 * n})

    def test_both_ways_across_async_all_reduce(self):
        for n in SIZES:
            with self.subTest(floats=n):
                got = self.run_case("both_ways", n)
                # rank r sends 10 (r + 1) per element
                self.assertEqual(got, {(0, "all_reduce"): 3.0 * n, (1, "all_reduce"): 3.0 * n,
                                       (0, "received"): 20.0 * n, (1, "received"): 10.0 * n})


if __name__ == "__main__":
    unittest.main()
