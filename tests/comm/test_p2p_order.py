"""Point-to-point programs MPI completes, in the orders that trip a backend
which holds operations back or makes them wait for each other
(tests/fixtures/p2p_order_fixture.c):

  isend       rank 0: isend(to 1); all_reduce; wait / rank 1: all_reduce; recv
  mirror      rank 0: isend(to 1); <host wait>; wait / rank 1: recv; <host wait>,
              the host wait an all-reduce, a barrier, an async all-reduce,
              dist_new_group or dist_timer
  both_ways   both directions in flight across an async all-reduce
  group       rank 0: irecv; send; barrier; wait / rank 1: recv; barrier; send
  three       a send's acknowledgement waited for while another peer's
              receive is pending (3 ranks)
  ring        isend(right); recv(left); wait, on 2, 3 and 4 ranks
  sendrecv    the same ring, each step one dist_sendrecv
  send_first  both ranks isend, irecv, barrier, then wait
  pipeline    3 stages, 4 micro-batches: blocking recv, isend, waits at the end
  slow_peer   a receive waiting 4 s, twice LECTERN_TIMEOUT, for a rank that
              computes: not a deadlock

Each case runs at 1,000 floats (every transport buffers it) and at 4 M
floats (16 MiB: none does), under LECTERN_TIMEOUT=30 and a hard timeout,
and must finish with the sums the test works out itself. This file runs
them on the backend the machine picks: Open MPI here; NCCL where the build
has NCCL and each rank a GPU (the test checks the spawn's backend).
tests/comm/test_nccl_emu.py runs the same cases on the NCCL emulator.
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, machine_gpus  # noqa: E402

SIZES = (1000, 4 * 1024 * 1024)


def notes(t):
    return [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "markdown"]


def message(rank, k):
    """Each element of the k-th message rank `rank` sends (the fixture's rule)."""
    return 10.0 * (rank + 1) + k


def expected(case, n, ranks=4):
    """{(rank, "received" | "all_reduce"): sum}, worked out from the
    fixture's rule, not from its run."""
    if case in ("isend", "mirror"):
        return {(0, "all_reduce"): 3.0 * n, (1, "all_reduce"): 3.0 * n, (1, "received"): message(0, 0) * n}
    if case == "both_ways":
        return {(0, "all_reduce"): 3.0 * n, (1, "all_reduce"): 3.0 * n,
                (0, "received"): message(1, 0) * n, (1, "received"): message(0, 0) * n}
    if case in ("group", "send_first"):
        return {(0, "received"): message(1, 0) * n, (1, "received"): message(0, 0) * n}
    if case == "three":
        return {(0, "received"): message(2, 0) * n, (1, "received"): (message(2, 0) + message(0, 0)) * n,
                (2, "received"): 0.0}
    if case in ("ring", "sendrecv"):
        return {(r, "received"): sum(message((r - 1) % ranks, k) for k in range(3)) * n for r in range(ranks)}
    if case == "slow_peer":
        return {(0, "received"): 2 * message(1, 0) * n, (1, "received"): 0.0}
    if case == "pipeline":
        return {(s, "received"): (sum(message(s - 1, m) for m in range(4)) * n if s else 0.0) for s in range(3)}
    raise ValueError(case)


def nccl_loads():
    """The build has NCCL support and its library loads here
    (tests/tools/nccl_probe, the check a spawn makes)."""
    p = subprocess.run([tracecheck.built("tests", "tools", "nccl_probe")], capture_output=True, text=True)
    return p.returncode == 0


MIRROR_WAITS = ("all_reduce", "barrier", "all_reduce_async", "new_group", "timer")


class P2POrder(FixtureTest):
    ENV = {}          # what the spawns run on (tests/comm/test_nccl_emu.py sets the emulator)
    LIMIT = 30        # LECTERN_TIMEOUT: seconds without progress that the parent calls a deadlock

    def want_backend(self):
        forced = os.environ.get("LECTERN_BACKEND")
        return forced or ("nccl" if machine_gpus() >= 2 and nccl_loads() else "mpi")

    def run_case(self, case, n, **extra):
        # 30 s without progress is a deadlock (the parent stops it); the
        # subprocess timeout (120 s) is the backstop should that fail too.
        # Both are far above the run's time here (about 0.5 s on 2 cores).
        env = {"P2P_CASE": case, "P2P_FLOATS": str(n), "LECTERN_TIMEOUT": str(self.LIMIT)}
        env.update(self.ENV)
        env.update(extra)
        rc, out, err = self.run_fixture("p2p_order_fixture", env, timeout=120)
        self.assertEqual(rc, 0, "%s %s at %d floats: %s" % (case, extra, n, err[-2000:]))
        t = tracecheck.validate(os.path.join(self.out, "p2p_order_fixture.json"))
        self.assertEqual([s["backend"] for s in t["spawns"]], [self.want_backend()])
        self.spawns = t["spawns"]
        got = {}
        for line in notes(t):
            m = re.fullmatch(r"rank (\d) (all_reduce|received) (\S+)", line)
            if m:
                got[(int(m.group(1)), m.group(2))] = float(m.group(3))
        return got

    def check(self, case, sizes=SIZES, **extra):
        ranks = int(extra.get("P2P_RANKS", 4))
        for n in sizes:
            with self.subTest(floats=n, **extra):
                self.assertEqual(self.run_case(case, n, **extra), expected(case, n, ranks))

    def test_isend_across_all_reduce(self):
        self.check("isend")

    def test_send_held_across_each_host_wait(self):
        # the mirror: the receiver receives first, the sender's send is in
        # flight while it waits on the host in a collective call
        for wait in MIRROR_WAITS:
            self.check("mirror", P2P_WAIT=wait)

    def test_both_ways_across_async_all_reduce(self):
        self.check("both_ways")

    def test_request_completes_alone(self):
        self.check("group")

    def test_acknowledgement_beside_a_pending_receive(self):
        self.check("three")

    def test_ring_steps(self):
        for ranks in (2, 3, 4):
            self.check("ring", sizes=(1000,), P2P_RANKS=str(ranks))
        self.check("ring", sizes=(SIZES[1],), P2P_RANKS="4")

    def test_sendrecv_ring(self):
        for ranks in (2, 3):
            self.check("sendrecv", sizes=(1000,), P2P_RANKS=str(ranks))
        self.check("sendrecv", sizes=(SIZES[1],), P2P_RANKS="4")

    def test_both_send_first(self):
        self.check("send_first")

    def test_pipeline(self):
        self.check("pipeline")

    def test_a_wait_while_the_peer_computes_is_not_a_timeout(self):
        # rank 1 computes for 4 s with LECTERN_TIMEOUT=2 before its send,
        # which rank 0 waits for in the backend (a timed region skips the
        # agreement's wait): the parent's watch sees a working rank, and the
        # backend's own wait must count that as progress too (comm_nccl.c)
        self.LIMIT = 2
        self.check("slow_peer", sizes=(1000,), P2P_SLOW_MS="4000")


if __name__ == "__main__":
    unittest.main()
