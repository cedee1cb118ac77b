"""lectures/homework_08.c: the starter fails exactly the checks it should
(every exercise's, on every rank, and nothing else), the instructor's
solution (tests/fixtures/homework_08_solution.c) passes them all, the
deadlock exercise is stopped with each rank's line in exchange(), each
wrong method (tests/fixtures/homework_08_wrong_*.c: right numbers by a way
the exercise does not ask for) fails exactly its method's check on every
rank, with a message that says what was expected and what was seen, and
each other method the text allows (homework_08_alt_*.c) passes, or, where
the text forbids it, fails saying which rule.

Each exercise runs in a spawn of its own: a crash, a deadlock or a loop that
never ends in one (homework_08_crash, _ring_deadlock, _loop, _zero1_alias)
costs that exercise's checks only, the others still run and pass, and the
console's last line counts the checks not reached. The messages point at
the mistake: which chunk of a ring holds what (_ring_chunk_off_by_one), a
constant factor named (_ddp_no_world), make run SAN=1 suggested on a
segfault, where each rank was when an exercise ran past its time limit, and
a rank's printf is not lost when it is stopped.

    /usr/bin/python3 tests/lectures/test_homework.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

BUILD = tracecheck.BUILD
STARTER = os.path.join(BUILD, "lectures", "homework_08")
SOLUTION = tracecheck.fixture("homework_08_solution")
SANITIZED = os.path.basename(BUILD) == "build-asan"
WORLD = 4
# Each check's name (check_named's, or check_close's text): the same in every run.
RING_VALUES = "exercise 1: the sum over the ranks"
RING_CALLS = "exercise 1: sends and receives only"
RING_BYTES = "exercise 1: a ring's traffic, one chunk a step to the next rank"
GRADS = ["exercise 2: gradient 0 (3x4)", "exercise 2: gradient 1 (5)", "exercise 2: gradient 2 (2x6)"]
BUCKET_CALLS = "exercise 2: one all-reduce of the whole bucket"
ZERO1_VALUES = "exercise 3: parameters after a ZeRO-1 step"
ZERO1_TINY = "exercise 3: parameters after a ZeRO-1 step with gradients near AdamW's eps"
ZERO1_CALLS = "exercise 3: a reduce-scatter and an all-gather, nothing else"
EXERCISE = {1: [RING_VALUES, RING_CALLS, RING_BYTES], 2: GRADS + [BUCKET_CALLS],
            3: [ZERO1_VALUES, ZERO1_TINY, ZERO1_CALLS]}
EXERCISES = EXERCISE[1] + EXERCISE[2] + EXERCISE[3]
DEADLOCK = "exercise 4: the peer's tensor arrived"


NAMES = tracecheck.CheckNames(EXERCISES, [DEADLOCK])
name, checks, check_texts = NAMES.name, NAMES.checks, NAMES.check_texts
run, troubles, last_line = tracecheck.run, tracecheck.troubles, tracecheck.last_line


class Homework(tracecheck.HomeworkTest):
    HOMEWORK = "homework_08"
    NAMES = NAMES

    def test_starter_fails_exactly_the_exercises(self):
        p, t = self.starter_fails_every_check()
        self.assertEqual(t["meta"]["checks"], {"passed": 0, "failed": WORLD * len(EXERCISES), "not_reached": 0})
        # One spawn per exercise, each naming it.
        self.assertEqual([sp.get("exercise") for sp in t["spawns"]], ["exercise 1:", "exercise 2:", "exercise 3:"])

    def test_solution_passes_every_check(self):
        p, t = self.outcome(SOLUTION, 0, "--deadlock")
        want = sorted((r, w, True) for r in range(WORLD) for w in EXERCISES + [DEADLOCK])
        self.assertEqual(checks(t), want)
        self.assertEqual(last_line(p), "checks: %d passed, 0 failed, 0 not reached" % len(want))
        self.assertFalse(troubles(t))
        self.assertEqual([(sp["status"], sp["checks"]) for sp in t["spawns"]],
                         [("ok", {"passed": n * WORLD, "failed": 0}) for n in (3, 4, 3, 1)])

    def test_solution_with_another_size(self):
        p, _ = self.outcome(SOLUTION, 0, "--n=4096")
        self.assertEqual(last_line(p), "checks: %d passed, 0 failed, 0 not reached" % (WORLD * len(EXERCISES)))

    def test_passes_fold_by_check_not_by_line(self):
        # The three gradients of exercise 2 are checked at one line, in a
        # loop: each is a folded step of its own, not one step for all three.
        _, t = self.outcome(SOLUTION, 0)
        folded = [r for s in t["steps"] for r in s["renderings"] if r["type"] == "check" and "folded" in r]
        grads = [r for r in folded if name(r["what"]) in GRADS]
        self.assertEqual(sorted(name(r["what"]) for r in grads), sorted(GRADS))
        for r in grads:
            self.assertEqual((r["folded"], sorted(r["ranks"])), (WORLD, list(range(WORLD))))
            self.assertEqual({name(e["what"]) for e in r["each"]}, {name(r["what"])})
        # Each folded step is rank 0's (the column it is shown in).
        self.assertEqual({s["rank"] for s in t["steps"] for r in s["renderings"] if r.get("folded")}, {0})

    def test_ring_that_calls_all_reduce_fails_its_method(self):
        # Right sums, from the library's collective: named, and the bytes
        # per peer are no ring's either.
        self.wrong("wrong_ring_collective", {
            RING_CALLS: ["ring_all_reduce made 1 dist_all_reduce call; the exercise allows only sends and receives"],
            RING_BYTES: ["6000 bytes each way"]})

    def test_ring_that_sends_whole_tensors_fails_its_bytes(self):
        # (w - 1) whole tensors of n/w * w floats: 3 x 1000 floats = 12000
        # bytes to the next rank where a ring sends 6 chunks of 250 floats.
        self.wrong("wrong_ring_whole", {RING_BYTES: ["6000 bytes each way", "sent 12000 bytes to rank", "received 12000"]})

    def test_one_all_reduce_per_gradient_fails_its_method(self):
        self.wrong("wrong_bucket_per_grad", {BUCKET_CALLS: ["(29 floats)", "ddp_sync made 3 dist_all_reduce calls"]})

    def test_zero1_with_a_sum_fails_near_eps(self):
        # The ordinary gradients pass (AdamW's step is scale-invariant there);
        # the ones near eps do not.
        self.wrong("wrong_zero1_sum", {ZERO1_TINY: []})

    def test_zero1_with_an_all_reduce_fails_its_method(self):
        self.wrong("wrong_zero1_all_reduce",
                   {ZERO1_CALLS: ["zero1_step made 1 dist_all_reduce call, 1 dist_all_gather call"]})

    # ---- other methods the text allows, or forbids ----

    def test_ring_with_its_chunks_rotated_passes(self):
        # dist_irecv, dist_send, dist_wait and another chunk order: the text
        # prescribes neither.
        self.wrong("alt_ring_rotated", {}, status=0)

    def test_zero1_sum_then_scale_passes(self):
        # "Average the gradient": a sum and a division by the world size is an average.
        self.wrong("alt_zero1_sum_scale", {}, status=0)

    def test_ring_the_other_way_round_is_refused_saying_which_rule(self):
        # The text: "each rank sends one chunk to the next rank and adds the
        # chunk it receives from the previous one". Right sums, a ring's
        # bytes, the other direction: only the traffic check fails, saying so.
        _, t = self.wrong("alt_ring_reversed", {RING_BYTES: [
            "it goes round the other way",
            "the exercise's ring sends to the next rank (rank + 1) and receives from the previous one"]})
        for text in check_texts(t, RING_BYTES):
            rank = int(re.search(r"to the next rank \((\d)\)", text).group(1)) - 1
            self.assertIn("(to rank %d, from rank %d)" % ((rank - 1) % WORLD, (rank + 1) % WORLD), text)

    # ---- messages that point at the mistake ----

    def test_a_chunk_bug_says_which_chunks_hold_what(self):
        # The all-gather sends chunk (rank - step) where the finished one is
        # (rank + 1 - step): every chunk ends up holding one rank's starting
        # values. The checker knows every rank's input: it says so per chunk.
        _, t = self.wrong("ring_chunk_off_by_one", {RING_VALUES: ["4 of 4 chunks wrong",
                                                                  "only this rank's own values, as it started"]})
        for rank, what, passed in tracecheck.check_passes(t):
            if name(what) != RING_VALUES:
                continue
            for c in range(WORLD):
                if c != rank:
                    self.assertIn("chunk %d holds only rank %d's own values: a chunk passed round before the "
                                  "reduce-scatter had added the others to it" % (c, c), what)

    def test_a_missing_division_names_the_factor(self):
        # check_close's line (its "data", as on the console) says it.
        _, t = self.wrong("ddp_no_world", {g: [] for g in GRADS})
        failed = [r for s in t["steps"] for r in s["renderings"] if r["type"] == "check" and not r["passed"]]
        self.assertEqual(len(failed), 3 * WORLD)
        for r in failed:
            self.assertIn("actual is 4.00x the expected at every element: the world size?", r["data"])
            self.assertAlmostEqual(r["ratio"], 4.0, places=3)   # read where |expected| is largest: float32-exact

    def test_the_starter_says_no_ratio(self):
        # Zeros, or values that are no multiple of the sum: no ratio claimed.
        _, t = self.outcome(STARTER, 1)
        self.assertFalse([r for s in t["steps"] for r in s["renderings"] if "ratio" in r])

    # ---- each exercise on ranks of its own ----

    def isolated(self, fixture, lost, *args):
        """Exercise `lost` stops with an error; the others still run and pass."""
        p, t = self.outcome(fixture, 1, *args)
        others = [w for k, ws in EXERCISE.items() if k != lost for w in ws] + ([DEADLOCK] if args else [])
        self.assertEqual(checks(t), sorted((r, w, True) for r in range(WORLD) for w in others))
        missing = WORLD * len(EXERCISE[lost])
        self.assertEqual(last_line(p), "checks: %d passed, 0 failed, %d not reached" % (WORLD * len(others), missing))
        self.assertEqual(t["meta"]["checks"], {"passed": WORLD * len(others), "failed": 0, "not_reached": missing})
        statuses = {sp["exercise"]: sp["status"] for sp in t["spawns"]}
        self.assertEqual(statuses.pop("exercise %d:" % lost), "failed")
        self.assertEqual(set(statuses.values()), {"ok"})
        self.assertIn("lectern: exercise %d: spawn of 4 ranks" % lost, p.stderr)
        self.assertIn("the lecture goes on", p.stderr)
        return p, t

    def test_a_crash_costs_its_exercise_only(self):
        p, t = self.isolated("crash", 1)
        err = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        if SANITIZED:
            # AddressSanitizer's report ends the rank (with _exit): its death
            # callback says so, at the line, instead of "too abruptly to say how".
            self.assertTrue(any("rank 2 of 4 was stopped by a sanitizer's report" in e and "in ring_all_reduce()" in e
                                for e in err), err)
        else:
            self.assertTrue(any("rank 2 of 4 died with SIGSEGV" in e for e in err), err)
        # The sanitizer build names the bad access: said where this build is not it.
        hint = "`make run SAN=1 LECTURE=homework_08` runs it built with AddressSanitizer and UBSan"
        self.assertEqual(any(hint in e for e in err), not SANITIZED, err)

    def test_a_deadlock_costs_its_exercise_only(self):
        p, t = self.isolated("ring_deadlock", 1)
        self.assertIn("deadlock: rank 0 of 4 waits in dist_send() in ring_all_reduce()", p.stderr)

    def test_an_error_costs_its_exercise_only_and_the_next_still_runs(self):
        # Exercise 3 stops at an error (the all-gather's input inside its
        # output); exercise 4, after it, runs and passes.
        p, _ = self.isolated("zero1_alias", 3, "--deadlock")
        self.assertIn("dist_all_gather(): output and input are the same memory", p.stderr)

    def test_a_loop_that_never_ends_is_named_at_the_time_limit(self):
        # homework_08_loop gives each exercise 4 s; rank 0 loops in its ring,
        # the others wait for it in their all-reduce.
        p, t = self.isolated("loop", 1)
        sp = [s for s in t["spawns"] if s["exercise"] == "exercise 1:"][0]
        self.assertEqual(sp["time_limit_s"], 4)
        # Stopped at its limit: not before, and (on a loaded machine) not long after.
        self.assertGreaterEqual(sp["seconds"], 4)
        self.assertLess(sp["seconds"], 4 + 15)
        err = {s["rank"]: (r["data"], s["stack"][-1]) for s in t["steps"] for r in s["renderings"]
               if r["type"] == "error"}
        self.assertEqual(sorted(err), list(range(WORLD)))
        src = t["files"]["tests/fixtures/homework_08_loop.c"].split("\n")
        data, frame = err[0]
        self.assertRegex(data, r"exercise 1 ran past its time limit of 4 s: rank 0 of 4 has been working in "
                               r"ring_all_reduce\(\) for [0-9.]+ s: a loop that never ends\?")
        self.assertIn("for (volatile", src[frame["line"] - 1])   # the loop's own line, asked of the rank
        seconds = float(re.search(r"for ([0-9.]+) s", data).group(1))
        self.assertTrue(2 <= seconds <= 4 + 15, data)           # since its last step or call, at the start
        for r in (1, 2, 3):
            data, frame = err[r]
            self.assertIn("rank %d of 4 has been waiting in dist_all_reduce() in ring_all_reduce() for every rank"
                          % r, data)
            self.assertIn("dist_all_reduce(t", src[frame["line"] - 1])
        # What rank 0 printed before it looped reached the console, although
        # stdout is a pipe here and the rank was killed.
        self.assertIn("rank 0 starts its ring on 1000 floats\n", p.stdout)

    def test_starter_deadlock_is_found_in_exchange(self):
        # Named from the status board, long before the default timeout;
        # exercises 1 to 3 run (and fail) before it.
        p, t = self.outcome(STARTER, 1, "--deadlock")
        src = t["files"]["lectures/homework_08.c"].split("\n")
        stuck = [(s["rank"], s["stack"][-1]) for s in t["steps"] for r in s["renderings"]
                 if r["type"] == "error" and s["rank"] is not None and ": deadlock: rank " in r["data"]]
        self.assertEqual(sorted(r for r, _ in stuck), list(range(WORLD)))
        for _, f in stuck:
            self.assertEqual(f["function"], "exchange")
            self.assertIn("dist_send(", src[f["line"] - 1])
        self.assertEqual(last_line(p), "checks: 0 passed, %d failed, %d not reached" % (WORLD * len(EXERCISES), WORLD))
        sp = [s for s in t["spawns"] if s["exercise"] == "exercise 4:"][0]
        self.assertLess(sp["seconds"], 10)   # named in about a second (docs/homework.md)

    def test_help_says_the_deadlock_is_named_not_waited_for(self):
        p = subprocess.run([STARTER, "--help"], capture_output=True, text=True, timeout=60)
        self.assertIn("its deadlock is named in about a second", p.stdout + p.stderr)
        self.assertNotIn("hangs", p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
