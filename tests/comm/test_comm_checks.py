"""Collectives the ranks disagree on, requests never waited for, ranks that
wait for ranks that returned, and a rank that computes for longer than
LECTERN_TIMEOUT (tests/fixtures/comm_checks.c).

Each case runs the fixture with COMM_CASE set and reads its trace: the error
steps must name the right ranks and lecture lines, and no rank may record a
result after a mismatch. LECTERN_BUILD picks the build folder.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, line_of  # noqa: E402

SRC = os.path.join(tracecheck.ROOT, "tests", "fixtures", "comm_checks.c")
WHERE = "tests/fixtures/comm_checks.c"


class CommChecks(FixtureTest):
    def run_case(self, case, env=None, want_rc=1):
        # No rank left running, whichever way the spawn ended.
        return self.run_traced("comm_checks", dict({"COMM_CASE": case}, **(env or {})), want_rc, ranks_gone=True)

    errors = staticmethod(tracecheck.errors)

    @staticmethod
    def texts(t):
        return [r["data"] for s in t["steps"] for r in s["renderings"]]

    def test_different_counts_name_both_lines_on_every_rank(self):
        t, err = self.run_case("counts")
        four, six = line_of(SRC, "MARK:four"), line_of(SRC, "MARK:six")
        errs = self.errors(t)
        for rank in range(4):
            own = six if rank == 2 else four
            msg = self.one_error(errs, rank, "made different calls", own)
            self.assertIn("rank %d: dist_all_reduce of %d floats (sum) at %s:%d"
                          % (rank, 6 if rank == 2 else 4, WHERE, own), msg)
            # The other line named: rank 2's for everyone else, a 4-float rank's for rank 2.
            if rank == 2:
                self.assertRegex(msg, r"; rank [013]: dist_all_reduce of 4 floats \(sum\) at %s:%d"
                                 % (WHERE, four))
            else:
                self.assertIn("; rank 2: dist_all_reduce of 6 floats (sum) at %s:%d" % (WHERE, six), msg)
        # No rank recorded a result after the mismatch, and the lecture stopped.
        self.assertFalse([x for x in self.texts(t) if "has a result" in x])
        self.assertNotIn("after the spawn", self.texts(t))
        self.assertEqual(t["spawns"][0]["status"], "failed")

    def test_different_roots(self):
        t, err = self.run_case("roots")
        line = line_of(SRC, "MARK:root")
        for rank in (0, 1):
            msgs = [m for s, m in self.errors(t) if s.get("rank") == rank and "made different calls" in m]
            self.assertEqual(len(msgs), 1, self.errors(t))
            self.assertIn("rank %d: dist_broadcast of 4 floats from rank %d at %s:%d" % (rank, rank, WHERE, line),
                          msgs[0])
            self.assertIn("rank %d: dist_broadcast of 4 floats from rank %d" % (1 - rank, 1 - rank), msgs[0])
        self.assertFalse([x for x in self.texts(t) if "has a result" in x])

    def test_send_and_receive_of_different_sizes(self):
        t, err = self.run_case("p2p")
        send, recv = line_of(SRC, "MARK:send6"), line_of(SRC, "MARK:recv4")
        msgs = [m for s, m in self.errors(t) if s.get("rank") == 1 and "do not match" in m]
        self.assertEqual(len(msgs), 1, self.errors(t))
        self.assertIn("rank 1: dist_recv of 4 floats from rank 0 at %s:%d" % (WHERE, recv), msgs[0])
        self.assertIn("rank 0: dist_send of 6 floats to rank 1 at %s:%d" % (WHERE, send), msgs[0])
        # The receiver, where a wrong result would land, records none.
        self.assertNotIn("rank 1 has a result", self.texts(t))
        self.check_sender_step(t, "dist_send of 6 floats to rank 1", send, "dist_recv of 4 floats from rank 0", recv)

    def check_sender_step(self, t, send_call, send, recv_call, recv):
        """The sender has its own error step, at its line, naming both."""
        steps = [(s, m) for s, m in self.errors(t) if s.get("rank") == 0 and "do not match" in m]
        self.assertEqual(len(steps), 1, self.errors(t))
        step, msg = steps[0]
        self.assertEqual(step["stack"][-1]["line"], send, msg)
        self.assertTrue(msg.startswith("%s:%d: the send and the receive do not match: rank 0: %s at %s:%d; "
                                       "rank 1: %s at %s:%d" % (WHERE, send, send_call, WHERE, send, recv_call,
                                                                WHERE, recv)), msg)

    def test_a_blocked_isend_of_the_wrong_size_gets_its_error_step(self):
        t, err = self.run_case("p2p-big")
        send, recv = line_of(SRC, "MARK:isend-big"), line_of(SRC, "MARK:irecv-big")
        n = (1 << 20)
        msgs = [m for s, m in self.errors(t) if s.get("rank") == 1 and "do not match" in m]
        self.assertEqual(len(msgs), 1, self.errors(t))
        self.assertIn("rank 1: dist_irecv of %d floats from rank 0 at %s:%d" % (n, WHERE, recv), msgs[0])
        self.check_sender_step(t, "dist_isend of %d floats to rank 1" % (n + 1), send,
                               "dist_irecv of %d floats from rank 0" % n, recv)
        # The receiver records nothing of the mismatched transfer. The sender
        # may have gone on: its isend completes once the rank's progress
        # thread has handed the bytes over, before the receiver's check at
        # its wait (as a small send the library buffers always did).
        self.assertNotIn("rank 1 has a result", self.texts(t))

    def test_a_request_never_waited_for_is_an_error_at_its_line(self):
        t, err = self.run_case("forgotten")
        line = line_of(SRC, "MARK:forgotten")
        for rank in (0, 1):
            msg = self.one_error(self.errors(t), rank, "", line)
            self.assertTrue(msg.startswith("%s:%d: " % (WHERE, line)), msg)
            self.assertIn("dist_all_reduce_async", msg)
            self.assertIn("never waited for", msg)
        # The spawn itself completed (the request was finished for the peers).
        self.assertIn("after the spawn", self.texts(t))

    def check_straggler(self, case, marker, waiting_in, returned):
        # Without the straggler report, LECTERN_TIMEOUT would call it a
        # deadlock after 20 s: the test tells the two apart.
        t, err = self.run_case(case, {"LECTERN_TIMEOUT": "20"})
        line = line_of(SRC, marker)
        # Reported soon, not after LECTERN_TIMEOUT (120 s by default). The
        # bound includes starting the pool, which takes seconds on a busy
        # 2-core machine; the report itself comes 1.5 s after the wait.
        self.assertLess(self.seconds, 60)
        msg = self.one_error(self.errors(t), 0, "", line)
        self.assertIn("rank 0 of", msg)
        self.assertIn("waits in %s()" % waiting_in, msg)
        self.assertIn(returned + ", which returned", msg)
        self.assertIn("returned from the function while rank 0 waits in %s at %s:%d" % (waiting_in, WHERE, line),
                      err)
        self.assertNotIn("made no progress", err)

    def touched(self, how):
        t, err = self.run_case("touch", {"TOUCH": how})
        self.assertEqual(t["spawns"][0]["status"], "failed")
        return t, self.errors(t)

    def error_at(self, errs, rank, words, marker):
        """The one error of `rank` holding `words`, at the line of `marker`."""
        return self.one_error(errs, rank, words, line_of(SRC, marker))

    def test_changing_an_isends_tensor_before_wait_is_an_error_at_that_line(self):
        t, errs = self.touched("send")
        msg = self.error_at(errs, 0, "add_scalar_", "MARK:touch-send")
        self.assertIn("changes a tensor that dist_isend at %s:%d is still sending"
                      % (WHERE, line_of(SRC, "MARK:touch-isend")), msg)
        self.assertIn("dist_wait", msg)
        self.assertFalse([x for x in self.texts(t) if "rank 0 has a result" in x])

    def test_a_change_through_data_is_caught_at_the_wait(self):
        t, errs = self.touched("raw")
        msg = self.error_at(errs, 0, "changed before this wait", "MARK:touch-wait")
        self.assertIn("dist_isend at %s:%d" % (WHERE, line_of(SRC, "MARK:touch-isend")), msg)

    def test_a_change_through_data_in_a_timed_region_is_not_hashed(self):
        """A timed region times the library without the runtime's checks: a
        send's buffer is not hashed there (lectern.h, dist_timed_begin), so
        the same change goes unnoticed and the spawn ends well; a runtime
        that still hashed would name it at the wait, as above."""
        t, err = self.run_case("touch", {"TOUCH": "raw-timed"}, want_rc=0)
        self.assertEqual(t["spawns"][0]["status"], "ok", self.errors(t))
        self.assertEqual(self.errors(t), [])
        self.assertEqual(sorted(x for x in self.texts(t) if "has a result" in x),
                         ["rank 0 has a result", "rank 1 has a result"])

    def test_reading_an_irecvs_tensor_before_wait_is_an_error(self):
        t, errs = self.touched("recv")
        msg = self.error_at(errs, 1, "item", "MARK:touch-recv")
        self.assertIn("reads a tensor that dist_irecv at %s:%d is still writing into"
                      % (WHERE, line_of(SRC, "MARK:touch-irecv")), msg)
        self.assertFalse([x for x in self.texts(t) if "early:" in x])

    def test_reading_an_async_all_reduces_tensor_before_wait_is_an_error(self):
        t, errs = self.touched("async")
        for rank in (0, 1):
            msg = self.error_at(errs, rank, "item", "MARK:touch-async-read")
            self.assertIn("dist_all_reduce_async at %s:%d" % (WHERE, line_of(SRC, "MARK:touch-async")), msg)

    def test_freeing_an_isends_tensor_before_wait_is_an_error(self):
        t, errs = self.touched("free")
        self.error_at(errs, 0, "tensor_free", "MARK:touch-free")

    def test_the_same_calls_waited_first_run_clean(self):
        # The control: waiting before touching is fine, including two isends
        # of one tensor in flight at once (both only read it).
        rc, out, err = self.run_fixture("comm_checks", {"COMM_CASE": "touch-ok"})
        self.assertEqual(rc, 0, err)
        t = tracecheck.validate(os.path.join(self.out, "comm_checks.json"))
        self.assertEqual(self.errors(t), [])
        self.assertIn("rank 1 got 3 3", self.texts(t))

    def test_one_extra_collective_is_reported_at_once(self):
        self.check_straggler("extra", "MARK:extra", "dist_all_reduce", "ranks 1, 2 and 3")

    def test_a_receive_from_a_rank_that_returned(self):
        self.check_straggler("nosend", "MARK:nosend", "dist_recv", "rank 1")

    def test_the_librarys_error_reaches_the_trace(self):
        t, err = self.run_case("mpierror")
        msg = self.error_at(self.errors(t), None, "MPI error", "MARK:mpierror")
        # Open MPI's own words for a negative count, and the call.
        self.assertIn("MPI_ERR_COUNT", msg)
        self.assertIn("MPI_Bcast", msg)

    def test_a_computing_rank_is_not_deadlocked(self):
        # Rank 0 computes for 3 s under LECTERN_TIMEOUT=1 while rank 1 waits.
        t, err = self.run_case("compute", {"COMM_TIMEOUT": "1"}, want_rc=0)
        self.assertIn("rank 0 passed the barrier", self.texts(t))
        self.assertIn("rank 1 passed the barrier", self.texts(t))
        self.assertEqual(self.errors(t), [])


if __name__ == "__main__":
    unittest.main()
