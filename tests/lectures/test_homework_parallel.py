"""lectures/homework_parallel.c: the starter fails exactly its checks (every
exercise's, on every rank, and nothing else), the instructor's solution
(tests/fixtures/homework_parallel_solution.c) passes them all, each wrong
method (tests/fixtures/homework_parallel_wrong_*.c: right numbers by a way
the exercise does not ask for) fails exactly its method's check on every
rank, with a message that says what was seen, and each other method the
text allows (homework_parallel_alt_*.c) passes, or, where the text forbids
it, fails saying which rule.

Each exercise runs on ranks of its own: an error in exercise 1
(homework_parallel_tp_shape) costs its checks only. The messages point at
the mistake: a 1F1B order that writes past its end or names a micro-batch
that does not exist, the in-flight bound of the number of micro-batches
where it fails, the student's call of the given zero3_layer() where a read
inside it is early, and x freed where the text says never.

Exercise 2's bubble check times a schedule that sleeps 20 and 40 ms per
operation (about 0.7 s); its bounds are in the homework, with their reasons.
LECTERN_HOMEWORK_REPEAT=N runs each case N times (the timing is meant to hold
on a loaded 2-core machine, and the ZeRO-3 order of events in every run).

    /usr/bin/python3 tests/lectures/test_homework_parallel.py   (LECTERN_BUILD picks the build)
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

WORLD = 4

TP_DA = "exercise 1: da, this rank's columns of dL/dA"
TP_DB = "exercise 1: db, this rank's rows of dL/dB"
TP_DX = "exercise 1: dx, the whole input gradient"
TP_CALLS = "exercise 1: exactly one all-reduce, of dx"
PIPE_ORDER = "exercise 2: every forward and backward once, in order"
PIPE_TOGETHER = "exercise 2: the stages' orders run together"
PIPE_IN_FLIGHT = "exercise 2: at most min(p - s, m) micro-batches in flight"
PIPE_BUBBLE = "exercise 2: the measured bubble"
Z3_OUTPUT = "exercise 3: the output after 4 layers"
Z3_CALLS = "exercise 3: one dist_all_gather per layer, nothing else"
Z3_PREFETCH = "exercise 3: layer i+1's gather in flight while layer i computes"
Z3_OWN = "exercise 3: x, the pieces and the buffers left alive"
EXERCISE = {1: [TP_DA, TP_DB, TP_DX, TP_CALLS], 2: [PIPE_ORDER, PIPE_TOGETHER, PIPE_IN_FLIGHT, PIPE_BUBBLE],
            3: [Z3_OUTPUT, Z3_CALLS, Z3_PREFETCH, Z3_OWN]}
EXERCISES = EXERCISE[1] + EXERCISE[2] + EXERCISE[3]


NAMES = tracecheck.CheckNames(EXERCISES)
name, check_texts = NAMES.name, NAMES.check_texts
troubles = tracecheck.troubles


class HomeworkParallel(tracecheck.HomeworkTest):
    HOMEWORK = "homework_parallel"
    NAMES = NAMES

    def test_starter_fails_exactly_the_exercises(self):
        p, t = self.starter_fails_every_check()
        # The starter's schedule is never run: each later check says why.
        self.assertIn("op 0 is not set", check_texts(t, PIPE_ORDER)[0])
        for text in check_texts(t, PIPE_BUBBLE):
            self.assertIn("not run, the orders break a rule above", text)
        for named in (Z3_OUTPUT, Z3_OWN):
            for text in check_texts(t, named):
                self.assertIn("zero3_forward returned NULL", text)

    def test_solution_passes_every_check(self):
        for _ in range(self.REPEAT):
            p, t = self.solution_passes_every_check()
            for text in check_texts(t, TP_CALLS):
                self.assertIn("megatron_backward made 1 dist_all_reduce call", text)
            for text in check_texts(t, Z3_PREFETCH):
                self.assertIn("layer 0: 2 started, 1 waited, full[0]; layer 1: 3 started, 2 waited, full[1]; "
                              "layer 2: 4 started, 3 waited, full[0]; layer 3: 4 started, 4 waited, full[1]", text)

    def test_dx_by_all_gather_fails_its_method(self):
        # Right gradients; every rank's partial dx gathered and added up
        # locally, where one all-reduce of dx is the method.
        self.wrong("wrong_tp_all_gather",
                   {TP_CALLS: ["of dx (256 floats)", "megatron_backward made 1 dist_all_gather call"]})

    def test_gpipe_order_fails_the_in_flight_rule(self):
        # GPipe keeps every rule but the memory one, and its bubble is
        # 1F1B's. The message gives the bound of the number of micro-batches
        # where it fails, and what the order holds beyond it.
        _, t = self.wrong("wrong_gpipe", {PIPE_IN_FLIGHT: ["its order holds 8 at once", "with 8 micro-batches"]})
        for rank, what, _ in tracecheck.check_passes(t):
            if name(what) == PIPE_IN_FLIGHT:
                m = re.search(r"at most min\((\d) - (\d), (\d)\) = (\d); its order holds (\d) at once", what)
                p, s, mb, allowed, held = map(int, m.groups())
                self.assertEqual((p, s, mb), (WORLD, rank, 8))
                self.assertEqual(allowed, min(p - s, mb))
                self.assertGreater(held, allowed)   # a failure says more than is allowed

    def test_one_micro_batch_at_a_time_fails_the_bubble(self):
        # Keeps every rule (one micro-batch in flight), but leaves a bubble
        # of about 1 - 1/p = 0.75.
        self.wrong("wrong_serial", {PIPE_BUBBLE: ["0.750 with no cost to pass a message"]})

    def test_blocking_gather_fails_the_prefetch(self):
        # One gather started when each layer computes: the next was not.
        self.wrong("wrong_blocking_gather", {Z3_PREFETCH: ["when layer 0 computed, layer 1's gather had not started",
                                                           "layer 0: 1 started"]})

    def test_gather_waited_at_once_fails_the_prefetch(self):
        # Started ahead, but waited for before the layer computes: nothing moves meanwhile.
        self.wrong("wrong_wait_at_once", {Z3_PREFETCH: [
            "when layer 0 computed, layer 1's gather had been waited for already", "layer 0: 2 started, 2 waited"]})

    # ---- other methods the text allows, or forbids ----

    def test_gather_started_before_the_previous_wait_passes(self):
        # Start layer i+1's gather, then wait for layer i's, then compute
        # layer i: the text's rule holds, with more overlap. Passes every
        # time (the order of events is read, not bytes a wait was charged).
        self.wrong("alt_start_before_wait", {}, status=0)

    def test_prefetch_two_ahead_is_refused_saying_which_rule(self):
        # A third buffer of its own: the text asks for full[0] and full[1],
        # only the next layer's gather in flight.
        self.wrong("alt_two_ahead", {Z3_PREFETCH: [
            "when layer 0 computed, 3 gathers had started, layer 2's and later ones: only the next layer's may be "
            "on its way (two buffers, full[0] and full[1])", "layer 2: 4 started, 3 waited, another weight"]})

    # ---- mistakes, and what is said ----

    def test_an_error_in_exercise_1_costs_its_checks_only(self):
        p, t = self.outcome("tp_shape", 1)
        self.only_not_reached(p, t, EXERCISE[1])
        self.assertIn("matmul: cannot compute op(a) op(b) into c", p.stderr)
        self.assertEqual([sp["status"] for sp in t["spawns"]], ["failed", "ok", "ok"])

    def test_1f1b_writing_past_its_end_is_named(self):
        # No cap on the warm-up: with 2 micro-batches stage 0 writes 5 ops.
        p, t = self.outcome("1f1b_no_cap", 1)
        mine = [w for r, w, ok in tracecheck.check_passes(t) if name(w) == PIPE_ORDER and r == 0]
        self.assertEqual(len(mine), 1)
        self.assertIn("with 2 micro-batches it writes past the end of the order: ops[4] = BWD(1), where the order of "
                      "2 micro-batches is ops[0] to ops[3]", mine[0])
        self.assertEqual([ok for r, w, ok in sorted(tracecheck.check_passes(t)) if name(w) == PIPE_ORDER],
                         [False, True, True, True])
        self.assertFalse(troubles(t))

    def test_1f1b_forward_of_a_micro_batch_that_does_not_exist_is_named(self):
        p, t = self.outcome("1f1b_phantom", 1)
        mine = [w for r, w, ok in tracecheck.check_passes(t) if name(w) == PIPE_ORDER and r == 0]
        self.assertIn("with 2 micro-batches op 2 is FWD(2), the forward of micro-batch 2, but there are only 2 "
                      "(0 to 1)", mine[0])
        self.assertFalse(troubles(t))

    def test_an_early_read_in_given_code_names_the_students_call(self):
        # The layer computes before its gather is waited for: the read is in
        # zero3_layer() (the course's code); the error is at the student's
        # call of it, and names the gather's line and the read's.
        p, t = self.outcome("z3_read_early", 1)
        fixture = "tests/fixtures/homework_parallel_z3_read_early.c"
        src = t["files"][fixture].split("\n")
        call = tracecheck.line_of(os.path.join(tracecheck.ROOT, fixture), "zero3_layer(i, full")
        gather = tracecheck.line_of(os.path.join(tracecheck.ROOT, fixture), "dist_all_gather_async(")
        errs = [(s["stack"][-1], r["data"]) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"
                and "zero3_layer" in r["data"]]
        self.assertTrue(errs)
        for frame, data in errs:
            self.assertEqual((frame["path"], frame["line"], frame["function"]), (fixture, call, "zero3_forward"))
            self.assertIn("zero3_layer(i, full", src[frame["line"] - 1])
            self.assertTrue(data.startswith("%s:%d: zero3_layer: reads a tensor that dist_all_gather_async at %s:%d "
                                            "is still writing into: this call runs zero3_layer(), whose matmul at "
                                            % (fixture, call, fixture, gather)), data)
            self.assertRegex(data, r"whose matmul at [^ ]*homework_parallel\.c:\d+ reads it")

    def test_freeing_x_fails_its_rule_not_the_run(self):
        # The text: "free the ones in between, never x". The output is right;
        # the ownership check fails on every rank, and the checker does not
        # free x a second time (no error: the run's score is its checks').
        self.wrong("frees_x", {Z3_OWN: ["it freed x, its input"]})


if __name__ == "__main__":
    unittest.main()
