"""Deadlocks proven from the status board, named within seconds
(tests/fixtures/deadlock_fixture.c).

Both ranks send first: at 1,000 floats (which the transport would buffer)
and at 4 M floats the spawn fails within 5 s with both ranks' lines; the
same swap made with dist_sendrecv, or with the receive posted first, passes,
and so does the small swap with dist_buffered_sends(1). Both ranks
receiving first, a collective one rank never reaches, and a ring of 4 ranks
that all send first are named the same way. A rank that computes for 7 s
under LECTERN_TIMEOUT=5 is not called a deadlock. Ctrl-C (SIGINT) while
the ranks are busy says where each rank is and keeps the trace.

LECTERN_DEADLOCK_REPEAT=N runs the detection cases N times each (a soak).
LECTERN_BUILD picks the build folder (build, or build-asan).
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, fixture, line_of, rank_processes  # noqa: E402

SRC = os.path.join(tracecheck.ROOT, "tests", "fixtures", "deadlock_fixture.c")
WHERE = "tests/fixtures/deadlock_fixture.c"
REPEAT = int(os.environ.get("LECTERN_DEADLOCK_REPEAT", "1"))
# Slower builds (AddressSanitizer) start the pool more slowly; the deadlock
# itself is named in well under a second after it forms.
SLACK = 3.0 if "asan" in os.environ.get("LECTERN_BUILD", "") else 0.0


LATENCIES = []


def errors(t):
    return [(s, r) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]


class Deadlock(FixtureTest):
    def case(self, case, floats=None, env=None):
        e = {"DEADLOCK_CASE": case}
        if floats:
            e["DEADLOCK_FLOATS"] = str(floats)
        e.update(env or {})
        rc, out, err = self.run_fixture("deadlock_fixture", e, timeout=180)
        name = "deadlock_fixture.failed.json" if rc else "deadlock_fixture.json"
        t = tracecheck.validate(os.path.join(self.out, name))
        deadline = time.monotonic() + 5
        while rank_processes(fixture("deadlock_fixture")) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(rank_processes(fixture("deadlock_fixture")), [], "ranks left running")
        return rc, t, err

    def spawn_seconds(self, t):
        """From the moment the ranks had their work (the pool's start, which
        a loaded machine can stretch, not counted) to the spawn's end."""
        sp = t["spawns"][0]
        LATENCIES.append(sp["seconds"] - sp.get("startup_s", 0))
        return sp["seconds"] - sp.get("startup_s", 0)

    def ranks_named(self, case, ranks, floats=None):
        """Runs `case`, which must fail within 5 s of its spawn (the pool's
        start included); the ranks' error steps, which must be one for each
        of `ranks`, as (step, rendering); and its stderr."""
        rc, t, err = self.case(case, floats)
        self.assertEqual(rc, 1, err)
        self.assertEqual(t["spawns"][0]["status"], "failed")
        self.assertLess(self.spawn_seconds(t), 5.0 + SLACK, err)
        errs = [(s, r) for s, r in errors(t) if s["rank"] is not None]
        self.assertEqual(sorted(s["rank"] for s, _ in errs), ranks, errs)
        return errs, err

    def assert_swap_deadlock(self, floats):
        line = line_of(SRC, "MARK:send-first")
        for i in range(REPEAT):
            errs, err = self.ranks_named("swap", [0, 1], floats)
            for s, r in errs:
                other = 1 - s["rank"]
                self.assertEqual(s["stack"][-1]["line"], line)
                self.assertIn("%s:%d: deadlock: rank %d of 2 waits in dist_send() in swap_send_first() for rank %d "
                              "to post the receive of this send; rank %d waits in dist_send() at %s:%d"
                              % (WHERE, line, s["rank"], other, other, WHERE, line), r["data"])
                self.assertIn("dist_sendrecv", r["data"])
            self.assertIn("deadlock, 2 ranks waiting for each other", err)
            # the verdict line, after the error too
            self.assertEqual(err.rstrip().splitlines()[-1], "checks: 1 passed, 0 failed")
            self.assertNotIn("made no progress", err)

    def test_small_swap_that_buffering_would_hide_fails_at_its_lines(self):
        self.assert_swap_deadlock(1000)

    def test_large_swap_fails_at_its_lines(self):
        self.assert_swap_deadlock(4 * 1000 * 1000)

    def assert_passes(self, case, floats, env=None):
        for i in range(REPEAT):
            rc, t, err = self.case(case, floats, env)
            self.assertEqual(rc, 0, err)
            got = sorted(r["data"] for s in t["steps"] for r in s["renderings"]
                         if s["rank"] is not None and r["data"].startswith("rank "))
            self.assertEqual(got, ["rank 0 got 1", "rank 1 got 0"])
            self.assertEqual(errors(t), [])

    def test_sendrecv_swap_passes(self):
        self.assert_passes("sendrecv", 1000)
        self.assert_passes("sendrecv", 4 * 1000 * 1000)

    def test_swap_with_the_receive_posted_first_passes(self):
        self.assert_passes("irecv", 1000)
        self.assert_passes("irecv", 4 * 1000 * 1000)

    def test_buffered_sends_let_the_small_swap_rely_on_the_transport(self):
        self.assert_passes("buffered", 1000)

    def test_both_receive_first(self):
        line = line_of(SRC, "MARK:recv-first")
        for i in range(REPEAT):
            errs, _ = self.ranks_named("recv", [0, 1])
            for s, r in errs:
                self.assertEqual(s["stack"][-1]["line"], line)
                self.assertIn("waits in dist_recv() in both_receive() for rank %d to send" % (1 - s["rank"]),
                              r["data"])
                self.assertIn("both receive first", r["data"])

    def test_a_collective_one_rank_never_reaches(self):
        allreduce, recv = line_of(SRC, "MARK:allreduce"), line_of(SRC, "MARK:recv-from-0")
        for i in range(REPEAT):
            errs, _ = self.ranks_named("collective", [0, 1])
            by_rank = {s["rank"]: (s, r) for s, r in errs}
            s0, r0 = by_rank[0]
            s1, r1 = by_rank[1]
            self.assertEqual((s0["stack"][-1]["line"], s1["stack"][-1]["line"]), (allreduce, recv))
            self.assertIn("rank 0 of 2 waits in dist_all_reduce() in collective_missed() for rank 1 to reach "
                          "this collective; rank 1 waits in dist_recv() at %s:%d for rank 0 to send"
                          % (WHERE, recv), r0["data"].replace(", which every rank must call", ""))
            self.assertIn("rank 1 of 2 waits in dist_recv()", r1["data"])

    def test_ring_of_four_that_all_send_first(self):
        line = line_of(SRC, "MARK:ring-send")
        for i in range(REPEAT):
            errs, _ = self.ranks_named("ring", [0, 1, 2, 3])
            for s, r in errs:
                self.assertEqual(s["stack"][-1]["line"], line)
                self.assertIn("for rank %d to post the receive of this send" % ((s["rank"] + 1) % 4), r["data"])
                self.assertIn("None of them can go on", r["data"])

    def test_slow_compute_is_not_a_deadlock(self):
        """Rank 1 computes for 7 s while rank 0 waits for its result, under
        a 5 s timeout: slow, not stuck. (The timeout bounds the pool's start
        too, so it stays at 5 s, which a loaded machine's start keeps under;
        the compute outlasts it by 2 s, time enough for a detector that
        took the working rank for a waiting one to fire.)"""
        rc, t, err = self.case("slow", env={"LECTERN_TIMEOUT": "5", "DEADLOCK_COMPUTE": "7"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(errors(t), [])
        self.assertGreater(self.spawn_seconds(t), 6.5)
        got = sorted(r["data"] for s in t["steps"] for r in s["renderings"]
                     if s["rank"] is not None and r["data"].startswith("rank "))
        self.assertEqual(got, ["rank 0 done: 5", "rank 1 done: 5"])


class Interrupt(FixtureTest):
    def test_ctrl_c_names_each_rank_and_keeps_the_trace(self):
        """SIGINT to the lecture while rank 0 waits for rank 1 and rank 1
        computes: each rank's place is an error step, the trace is written
        as failed, and no rank is left running."""
        e = dict(os.environ)
        ready = os.path.join(self.out, "ready")
        e.update({"DEADLOCK_CASE": "slow", "DEADLOCK_COMPUTE": "60", "DEADLOCK_READY": ready})
        p = subprocess.Popen([fixture("deadlock_fixture"), "--out", self.out, "--quiet"], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Wait until both ranks are at their marked lines (each makes a file
        # there; a loaded machine may take many seconds to start the pool),
        # then a moment for rank 0 to enter dist_recv.
        deadline = time.monotonic() + 120
        while not all(os.path.exists("%s.%d" % (ready, r)) for r in (0, 1)):
            self.assertIsNone(p.poll(), "the lecture ended before its ranks were ready")
            self.assertLess(time.monotonic(), deadline, "the ranks did not reach their lines within 120 s")
            time.sleep(0.05)
        time.sleep(0.5 + SLACK)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertLess(time.monotonic() - t0, 5.0, err)
        self.assertEqual(p.returncode, -signal.SIGINT, err)
        path = os.path.join(self.out, "deadlock_fixture.failed.json")
        t = tracecheck.validate(path)
        self.assertEqual(t["meta"]["status"], "failed")
        self.assertEqual(t["spawns"][0]["status"], "failed")
        by_rank = {s["rank"]: (s, r) for s, r in errors(t) if s["rank"] is not None}
        self.assertEqual(sorted(by_rank), [0, 1], errors(t))
        s0, r0 = by_rank[0]
        self.assertEqual(s0["stack"][-1]["line"], line_of(SRC, "MARK:waits-for-slow"))
        self.assertIn("SIGINT (interrupted): rank 0 of 2 was waiting in dist_recv() in slow_compute() for rank 1",
                      r0["data"])
        s1, r1 = by_rank[1]
        # rank 1 is inside spin(), called from the marked line
        self.assertEqual([f["line"] for f in s1["stack"] if f["function"] == "slow_compute"],
                         [line_of(SRC, "MARK:computes")])
        self.assertIn("rank 1 of 2 was working in spin()", r1["data"])
        self.assertIn("rank 0 of 2 was waiting in dist_recv()", err)
        self.assertIn("the trace so far is in", err)
        deadline = time.monotonic() + 5
        while rank_processes(fixture("deadlock_fixture")) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(rank_processes(fixture("deadlock_fixture")), [], "ranks left running")


def tearDownModule():
    if REPEAT > 1 and LATENCIES:
        xs = sorted(LATENCIES)
        print("spawn seconds after start-up, %d runs: median %.2f, max %.2f" % (len(xs), xs[len(xs) // 2], xs[-1]),
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
