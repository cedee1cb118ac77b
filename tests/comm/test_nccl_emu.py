"""The NCCL backend's logic (runtime/comm/comm_nccl.c) run on the NCCL
emulator (runtime/comm/nccl_emu.c), on this machine's CPUs: LECTERN_BACKEND=nccl
with LECTERN_NCCL_EMULATE=1.

The emulator keeps NCCL's ordering rules at their strictest (a send ends
only when its receive runs, however small; a stream runs one operation
after another; a group starts and ends as one; a communicator runs its
operations in the order they were queued): tests/comm/test_nccl_emu.c checks
each rule. Here the real backend runs on it:

  - every point-to-point program of tests/comm/test_p2p_order.py, at 1,000 and
    4 M floats, with the sums worked out there; the three programs that
    deadlocked the earlier design (a send held across a host wait, a
    request completed only with its group, an acknowledgement waited for
    beside a pending receive) must finish well inside the timeout;
  - lecture_08 whole (its ring, DDP, ZeRO, tensor- and pipeline-parallel
    sections on emulated NCCL), with every check of the lecture passing;
  - homework_08's solution, every exercise and the deadlock exercise;
  - test_groups.py's every group collective and all-to-all on 2 to 8 ranks,
    and dist_test;
  - the communicators destroyed in one order on every rank (the pool ends at once);
  - the switch itself: refused values, and no effect without LECTERN_BACKEND=nccl.

make mutate plants reorderings in comm_nccl.c (every send and receive on the
collectives' stream; a sendrecv that waits for its send before queueing its
receive) that these tests find.
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import test_groups as groups  # noqa: E402
import test_p2p_order as p2p  # noqa: E402
import tracecheck  # noqa: E402
from tracecheck import FixtureTest  # noqa: E402

EMULATED = {"LECTERN_BACKEND": "nccl", "LECTERN_NCCL_EMULATE": "1"}
# The programs that deadlocked the earlier design: each must end long
# before the parent's deadlock watch (LIMIT s without progress) could stop
# it. Here a run takes 0.3 to 2 s on the loaded 2-core machine; a deadlock
# takes LIMIT s at least.
DEADLOCKED_BEFORE = ("mirror", "group", "three")


class EmulatedP2P(p2p.P2POrder):
    ENV = EMULATED
    LIMIT = 60

    def want_backend(self):
        return "nccl"

    def run_case(self, case, n, **extra):
        got = super().run_case(case, n, **extra)
        self.assertIn("NCCL emulator", self.spawns[0]["reason"])
        if case in DEADLOCKED_BEFORE:
            self.assertLess(self.seconds, self.LIMIT / 3,
                            "%s %s took %.1f s: a deadlock broken only by the watch?" % (case, extra, self.seconds))
        return got


class EmulatedTestComm(unittest.TestCase):
    """tests/comm/test_comm.c with every spawn on the emulated NCCL: every
    collective and op, blocking and async, sends and receives, a 1 MiB
    all-reduce and the barrier, on 1 to 4 ranks, against sums the test
    computes (its overlap case skips: the emulator shares the CPU's cores)."""

    def test_every_collective_on_1_to_4_ranks(self):
        env = dict(os.environ, **EMULATED)
        p = subprocess.run([tracecheck.built("tests", "comm", "test_comm")], env=env, capture_output=True, text=True,
                           timeout=600)
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out[-3000:])
        self.assertNotIn("[  FAILED  ]", out)
        passed = sum(int(n) for n in re.findall(r"^\[  PASSED  \] (\d+) test", out, re.M))
        # 11 cases on each of 4 world sizes, but send/recv at world size 1
        self.assertGreaterEqual(passed, 4 * 11 - 1, out[-2000:])


class EmulatedGroups(groups.Values):
    """Every group collective, blocking and async, and all-to-all (NCCL's
    group communicators, each on a stream of its own; all-to-all, scatter and
    gather as grouped sends and receives) on 2, 3, 4, 5 and 8 ranks, against
    the values test_groups.py computes."""

    def test_every_group_collective_on_2_to_8_ranks(self):
        self.assertGreater(self.run_values([2, 3, 4, 5, 8], EMULATED), 1000)

    test_the_staged_path_in_small_chunks = None  # (test_groups.py's, not the emulator's)


class EmulatedDistTest(groups.Test):
    """dist_test says in flight, then done, on the emulated NCCL."""

    def run_fixture(self, name, env=None, timeout=120):
        return super().run_fixture(name, dict(env or {}, **EMULATED), timeout)


class LecturesOnTheEmulator(FixtureTest):
    def run_binary(self, binary, *args):
        env = dict(os.environ)
        env.update(EMULATED)
        env["LECTERN_TIMEOUT"] = "60"
        p = subprocess.run([binary, "--quiet", "--out", self.out] + list(args), env=env, capture_output=True,
                           text=True, timeout=600)
        return p

    def all_checks_pass(self, trace_name, p):
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        t = tracecheck.load(os.path.join(self.out, trace_name + ".json"))
        self.assertTrue(t["spawns"], "no spawn ran")
        self.assertEqual({s["backend"] for s in t["spawns"]}, {"nccl"})
        for s in t["spawns"]:
            self.assertIn("NCCL emulator", s["reason"])
        checks = tracecheck.check_passes(t)
        failed = [what for _, what, passed in checks if not passed]
        self.assertEqual(failed, [])
        errors = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertEqual(errors, [])
        return checks

    def test_lecture_08_whole(self):
        # the ring all-reduce by hand, the collectives, DDP (blocking and
        # bucketed async), ZeRO-3, tensor and pipeline parallelism (GPipe
        # and 1F1B) on emulated NCCL, every check of the lecture passing
        p = self.run_binary(tracecheck.built("lectures", "lecture_08"))
        checks = self.all_checks_pass("lecture_08", p)
        self.assertGreaterEqual(len(checks), 40)

    def test_homework_08_solution(self):
        p = self.run_binary(tracecheck.built("tests", "fixtures", "homework_08_solution"), "--deadlock")
        checks = self.all_checks_pass("homework_08", p)
        names = {what.split(":")[0] for _, what, _ in checks}
        self.assertTrue({"exercise 1", "exercise 2", "exercise 3", "exercise 4"} <= names, names)


class Release(FixtureTest):
    """The communicators kept for later spawns are destroyed when the pool
    ends, by every rank in the same order: the emulator's destroy waits for
    the communicator's other ranks, as NCCL's may, so ranks that destroy in
    different orders (each by peer: rank a's a->b before its b->a, rank b's
    the other way) wait for each other until the pool's end gives up on
    them after 10 s (pool.c), and kills them. A 3-rank ring on the emulator
    then ends in about 1 s here; 8 s is far from both."""

    def test_the_pool_ends_at_once(self):
        rc, out, err = self.run_fixture("p2p_order_fixture", dict(EMULATED, P2P_CASE="ring", P2P_RANKS="3",
                                                                  LECTERN_TIMEOUT="30"))
        self.assertEqual(rc, 0, err)
        self.assertLess(self.seconds, 8, "the pool took %.1f s to end: ranks waiting in ncclCommDestroy?" % self.seconds)


class TheSwitch(FixtureTest):
    def test_a_bad_value_is_refused(self):
        self.refused("p2p_order_fixture", {"LECTERN_BACKEND": "nccl", "LECTERN_NCCL_EMULATE": "yes"},
                     "LECTERN_NCCL_EMULATE='yes': expected 0 or 1")

    def test_without_the_forced_backend_open_mpi_runs(self):
        rc, out, err = self.run_fixture("p2p_order_fixture", {"LECTERN_NCCL_EMULATE": "1", "LECTERN_BACKEND": ""})
        self.assertEqual(rc, 0, err)
        t = tracecheck.load(os.path.join(self.out, "p2p_order_fixture.json"))
        self.assertEqual([s["backend"] for s in t["spawns"]], ["mpi"])


if __name__ == "__main__":
    unittest.main()
