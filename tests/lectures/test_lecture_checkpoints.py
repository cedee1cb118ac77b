"""lecture_checkpoints: run it with --quick (the same sizes: they are small already) and check its trace.

Every figure is read from the trace's structured values (tables, note arguments): the shard's bytes against the
formula recomputed here from the model's sizes and the header's layout; the interrupted-and-resumed loss equal to the
uninterrupted one at every step; the crash named at its rank; the 2 resharded ranks' loaded state bit for bit the 4
ranks' state in memory at that step, every row of every layer compared; the resharded weights within AdamW's rounding
bound, recomputed here; both damaged shards refused, each named; the run resumed from the fallback checkpoint after
the newest was damaged equal to the uninterrupted one, and the shard it wrote again the same bytes; the asynchronous
checkpoint: a crash of the background writer named in that writer's frames and leaving no manifest, the timing
table's figures consistent with the sentence beside it, every shard equal to the blocking run's; the 8-rank load row
by row; a straggler (modelled) slowing every rank; nothing left in the output folder. Nine planted bugs (the manifest
written before the shards, the checksum not checked, AdamW's moments not restored, a resharded band's shards loaded in
reverse order, the offset inside an old shard ignored, the asynchronous manifest written before the background writes
finished, the asynchronous snapshot taken after the next step, the straggler not slowed) each fail their check.

    /usr/bin/python3 tests/lectures/test_lecture_checkpoints.py
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402
import tracecheck  # noqa: E402

WORLD, RESHARD, STEPS, EVERY, CRASH_RANK, CRASH_STEP, TIMED, GROW = 4, 2, 6, 2, 2, 4, 40, 8
HEADER = 8 + 6 * 4  # the shard header: 8 magic bytes, six int32 (rank, world, layers, width, rows, step)




class Lecture(tracecheck.LectureRun, tracecheck.ValidTrace, unittest.TestCase):
    NAME = "lecture_checkpoints"
    SECTIONS = ["# Checkpoints and failures", "## A sharded checkpoint", "## A rank dies; the run resumes",
                "## Resharding: 2 ranks load a 4-rank checkpoint", "## And on 8 ranks",
                "## When a rank does not come back: elastic training (described, not run)", "## Damaged shards are refused",
                "## Training on from the previous checkpoint", "## An asynchronous checkpoint", "## A straggler"]

    def model(self):
        return self.figures("c.layers", "c.width", "c.batch", "c.lr", "c.steps")

    def test_every_check_passed(self):
        checks = planted.checks(self.trace)
        self.assertEqual(len(checks), 18)
        self.assertEqual(planted.failed_checks(self.trace), [])

    def test_bytes_per_rank_is_the_formula(self):
        m = self.model()
        layers, width = m["c.layers"], m["c.width"]
        expected = HEADER + 3 * layers * (width // WORLD) * width * 4
        cols = self.columns(self.table(r"^The step-2 checkpoint, rank by rank"))
        self.assertEqual(cols["rank"], list(range(WORLD)))
        self.assertEqual(cols["shard"], [expected] * WORLD)
        self.assertTrue(all(s > 0 for s in cols["write"]))
        f = self.figures("(long long)header", "(long long)formula")
        self.assertEqual((f["(long long)header"], f["(long long)formula"]), (HEADER, expected))

    def test_crash_named_and_caught(self):
        spawns = self.trace["spawns"]
        self.assertEqual([(s["world_size"], s["status"], s.get("expect_failure", False)) for s in spawns],
                         [(4, "ok", False), (4, "failed", True), (4, "ok", False), (2, "ok", False), (8, "ok", False), (4, "ok", False),
                          (4, "failed", True), (4, "ok", False), (4, "ok", False), (4, "ok", False), (4, "ok", False)])
        errs = tracecheck.errors(self.trace)
        self.assertEqual(len(errs), 2)
        for (step, message), writer in zip(errs, ["save_checkpoint", "write_in_background"]):
            self.assertIn("rank %d of %d died with SIGABRT" % (CRASH_RANK, WORLD), message)
            self.assertEqual(step["renderings"][0].get("expected"), True)
            # the frames of the thread that died: the training thread's blocking write, then the writer thread's
            self.assertEqual([f["function"] for f in step["stack"][-2:]], [writer, "write_atomically"])

    def test_resume_equals_uninterrupted_bit_for_bit(self):
        rows = self.row_dicts(self.table(r"^The loss, uninterrupted and interrupted at step 4 then resumed"))
        self.assertEqual([r["step"] for r in rows], list(range(STEPS)))
        for r in rows:
            # printed with %.9g (enough to tell float32s apart); the trace's JSON number is the double itself
            self.assertEqual(r["uninterrupted"], r["interrupted, resumed"], r)
            self.assertEqual(r["from"], "the checkpoint's log" if r["step"] < CRASH_STEP - EVERY else "the resumed run")
        self.assertLess(rows[-1]["uninterrupted"], rows[0]["uninterrupted"])  # it trains at all

    def test_reshard_equals_one_device(self):
        m = self.model()
        bound = tracecheck.adamw_rounding_bound(m["c.lr"], m["c.steps"])
        for world in (RESHARD, GROW):
            row = self.row_dicts(self.table(r"^Trained weights: %d ranks resumed from a 4-rank checkpoint" % world))[0]
            # the same formula, in double
            self.assertAlmostEqual(row["AdamW rounding bound"], bound, delta=1e-9 * bound)
            self.assertLessEqual(row["largest difference"], bound)
            self.assertGreater(row["largest difference"], 0)  # other ranks sum in another order: not the same run

    def test_reshard_loads_every_row_bit_for_bit(self):
        m = self.model()
        found = [a for _, _, a in self.noted("(long long)differ", "(long long)compared", "world")]
        self.assertEqual([a["world"] for a in found], [RESHARD, GROW])
        for f in found:
            # every row of the rows, first and second moments of every layer
            self.assertEqual(f["(long long)compared"], 3 * m["c.layers"] * m["c.width"])
            self.assertEqual(f["(long long)differ"], 0)

    def test_damaged_shards_refused_and_named(self):
        whys = [a["why"] for _, _, a in self.noted("why", kind="text")]
        self.assertEqual(len(whys), 2)
        m = self.model()
        full = HEADER + 3 * m["c.layers"] * (m["c.width"] // WORLD) * m["c.width"] * 4
        self.assertRegex(whys[0], r"uninterrupted/step-4/rank-1\.shard \(shard 1 of 4\): %d bytes, the manifest says "
                         r"%d: truncated$" % (full // 2, full))
        self.assertRegex(whys[1], r"uninterrupted/step-4/rank-3\.shard \(shard 3 of 4\): xxh64 [0-9a-f]{16}, the "
                         r"manifest says [0-9a-f]{16}: corrupted$")
        got, said = whys[1].split("xxh64 ")[1].split(", the manifest says ")
        self.assertNotEqual(got, said[:16])

    def test_training_on_after_damage_equals_uninterrupted(self):
        rows = self.row_dicts(self.table(r"^The loss, uninterrupted and resumed from step 2 after step 4 was refused"))
        self.assertEqual([r["step"] for r in rows], list(range(STEPS)))
        for r in rows:
            self.assertEqual(r["uninterrupted"], r["resumed after damage"], r)
        f = self.figures("after", "before")
        self.assertRegex(f["before"], "^[0-9a-f]{16}$")
        self.assertEqual(f["after"], f["before"])

    def test_async_timing_agrees_with_its_sentence(self):
        rows = self.row_dicts(self.table(r"^A checkpoint every 2 steps, blocking and asynchronous"))
        self.assertEqual([r["rank"] for r in rows], list(range(WORLD)))
        for r in rows:
            self.assertGreater(r["blocking"], 0)
            self.assertGreater(r["async"], 0)
            self.assertGreater(r["shard write, on its thread"], 0)
            # the table's own difference; 1e-9 ms: the two columns' doubles subtracted again here
            self.assertAlmostEqual(r["hidden"], r["blocking"] - r["async"], delta=1e-9)
        f = self.figures("blocked_ms", "stalled_ms", "hidden_ms", "written_ms", "cores")
        medians = self.row_dicts(self.table(r"^The same, medians over the 4 ranks"))[0]

        def median(v):
            v = sorted(v)
            return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2

        # the sentence's figures are the medians table's, which are the medians over the ranks of the first table's
        # (exact up to double rounding)
        for expr, col in [("blocked_ms", "blocking"), ("stalled_ms", "async"), ("hidden_ms", "hidden"),
                          ("written_ms", "shard write, on its thread")]:
            self.assertEqual(f[expr], medians[col])
            self.assertAlmostEqual(f[expr], median([r[col] for r in rows]), delta=1e-9 * max(abs(f[expr]), 1e-9))
        self.assertEqual(f['hidden_ms > 0 ? "time the asynchronous checkpoint hid" : "no time hidden here"'],
                         "time the asynchronous checkpoint hid" if f["hidden_ms"] > 0 else "no time hidden here")
        self.assertEqual(f["cores"], os.cpu_count())

    def test_async_shards_equal_blocking(self):
        f = self.figures("same", "compared")
        self.assertEqual(f["compared"], WORLD * ((TIMED - 1) // EVERY))  # every rank's shard of every checkpoint
        self.assertEqual(f["same"], f["compared"])

    def test_straggler_slows_every_rank(self):
        slow_steps, slow_ms = 12, 20
        rows = self.row_dicts(self.table(r"^12 steps on every rank, without and with rank 3's device 20 ms slower"))
        self.assertEqual([r["rank"] for r in rows], list(range(WORLD)))
        for r in rows:
            # every step waits for rank 3's modelled 20 ms; one step's worth spared for the ranks leaving the
            # starting barrier apart
            self.assertGreaterEqual(r["rank 3 slower (modelled)"], (slow_steps - 1) * slow_ms)
        # the delay is modelled, on rank 3 alone, once a step, and the trace says so
        spans = self.trace["modelled"]
        self.assertEqual([(m["rank"], m["ms"]) for m in spans], [(3, slow_ms)] * slow_steps)
        self.assertTrue(all(m["end"] - m["start"] >= slow_ms / 1e3 for m in spans))
        self.assertTrue(self.trace["meta"]["modelled_compute"])

    def test_nothing_left_in_the_output_folder(self):
        self.assertEqual(sorted(os.listdir(self.out.name)), ["lecture_checkpoints.js", "lecture_checkpoints.json"])


class Planted(unittest.TestCase):
    def failed(self, find, replace, also=()):
        with planted.binary("lecture_checkpoints", find, replace, also=also) as exe, tempfile.TemporaryDirectory() as out:
            p, _ = tracecheck.run_quick(exe, out)
            self.assertNotEqual(p.returncode, 0)
            with open(os.path.join(out, "lecture_checkpoints.failed.json")) as f:
                return planted.failed_checks(json.load(f))

    def test_manifest_before_the_shards(self):
        # the shard's write moved after the manifest's: the crash leaves a manifest naming a shard never written
        with open(os.path.join(tracecheck.ROOT, "lectures", "lecture_checkpoints.c")) as f:
            src = f.read()
        start = src.index("    write_atomically(path, bytes, (size_t)n,")
        end = src.index("    free(text);\n    return f;\n", start)
        block = src[start:end]
        first = block.split("\n")
        shard_lines = "\n".join(first[:3]) + "\n"  # write_atomically, the figures, free
        self.assertIn("free(bytes);", shard_lines)
        got = self.failed(block, block[len(shard_lines):] + shard_lines)
        self.assertEqual(len(got), 1, got)
        self.assertIn("the crash left no manifest for step 4", got[0])

    def test_grow_offset_in_shard_ignored(self):
        # each new band read from the start of its old shard: no matter for 2 ranks (their bands are whole old
        # shards), half of the 8 ranks (the odd ones, their band the second half of an old shard) load wrong rows
        got = self.failed("(size_t)(lo - k * old_rows) * (size_t)c->width,", "(size_t)0 * (size_t)c->width,")
        self.assertIn("the 8 ranks loaded, bit for bit, the rows and moments the 4 ranks held at step 4: 288 of 576 "
                      "rows differ", got)
        self.assertEqual([g for g in got if g.startswith("the 2 ranks loaded")], [])

    def test_straggler_not_slowed(self):
        got = self.failed("if (a->slow_ms > 0 && rank == SLOW_RANK)", "if (a->slow_ms < 0 && rank == SLOW_RANK)")
        self.assertEqual(len(got), 1, got)
        self.assertIn("every rank's 12 steps took at least 11 x 20 ms with rank 3 slow", got[0])

    def test_async_manifest_before_the_writes_finished(self):
        # the checkpoint finished (agreed, its manifest written) as soon as its writer thread started, unjoined
        got = self.failed("    return previous;\n}", "    return bg->shard.running = 0, finish_async(bg, loss), previous;\n}")
        self.assertIn("the crash during the background write left no manifest for step 4", got)

    def test_async_snapshot_after_the_next_step(self):
        # the snapshot of the step-k checkpoint taken once step k + 1 has run: the shard holds the wrong state
        got = self.failed("        if (due && a->async) {", "        if (a->async && (done - 1) % every == 0 && done > 1) {",
                          also=[("            double previous = save_async(&bg, c, &s, a->run, done, r.loss, a->crash);",
                                 "            double previous = save_async(&bg, c, &s, a->run, done - 1, r.loss, a->crash);")])
        self.assertIn("every asynchronous checkpoint's shard equals the blocking one's: 0 of 76", got)

    def test_checksum_not_checked(self):
        got = self.failed("    else if (XXH64(bytes, (size_t)n, 0) != m->hash[k])",
                          "    else if (0 && XXH64(bytes, (size_t)n, 0) != m->hash[k])")
        # the flipped bit goes unseen: refused nowhere, so nothing falls back and the resumed run is a different one
        self.assertEqual(got, ["a shard 3 with one flipped bit is refused, named, and step 2 used instead (got step 4)",
                               "with shard 3 damaged, the newest good checkpoint is step 4 (expected 2)",
                               "the rewritten step-4 shard 3 is the uninterrupted run's, byte for byte"])

    def test_moments_not_restored(self):
        got = self.failed("        for (int j = 0; j < 3; j++) {\n            tensor *t = tensor_from(",
                          "        for (int j = 0; j < 1; j++) {\n            tensor *t = tensor_from(")
        self.assertIn("the resumed run's loss equals the uninterrupted run's at every step, bit for bit", got)
        self.assertIn("the run resumed from the fallback checkpoint has the uninterrupted run's loss at every step, bit "
                      "for bit", got)

    def test_reshard_band_reversed(self):
        # each 2-rank band takes its two 4-rank shards in reverse order: the loss table is not touched (the
        # resumed run there has 4 ranks), the load-time comparison sees every row moved
        got = self.failed("(size_t)(lo - s->first) * (size_t)c->width,",
                          "(size_t)(s->first + s->rows - hi) * (size_t)c->width,")
        self.assertIn("the 2 ranks loaded, bit for bit, the rows and moments the 4 ranks held at step 4: 576 of 576 "
                      "rows differ", got)


if __name__ == "__main__":
    unittest.main()
