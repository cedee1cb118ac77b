"""lecture_checkpoints: run it with --quick (the same sizes: they are small already) and check its trace.

Every figure is read from the trace's structured values (tables, note arguments): the shard's bytes against the
formula recomputed here from the model's sizes and the header's layout; the interrupted-and-resumed loss equal to the
uninterrupted one at every step; the crash named at its rank; the 2 resharded ranks' loaded state bit for bit the 4
ranks' state in memory at that step, every row of every layer compared; the resharded weights within AdamW's rounding
bound, recomputed here; both damaged shards refused, each named; nothing left in the output folder. Four planted bugs
(the manifest written before the shards, the checksum not checked, AdamW's moments not restored, a resharded band's
shards loaded in reverse order) each fail their check.

    /usr/bin/python3 tests/lectures/test_lecture_checkpoints.py
"""
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402
import tracecheck  # noqa: E402

WORLD, RESHARD, STEPS, EVERY, CRASH_RANK, CRASH_STEP = 4, 2, 6, 2, 2, 4
HEADER = 8 + 6 * 4  # the shard header: 8 magic bytes, six int32 (rank, world, layers, width, rows, step)


def adamw_bound(lr, steps, beta1=0.9, beta2=0.999):
    """lib/mlp.h's adamw_rounding_bound, written again: sum over steps of 2 lr R_t."""
    total = 0.0
    for t in range(1, steps + 1):
        a = [(1 - beta1) * beta1 ** (t - i) for i in range(1, t + 1)]
        b = [(1 - beta2) * beta2 ** (t - i) for i in range(1, t + 1)]
        total += 2 * lr * math.sqrt(sum(x * x / y for x, y in zip(a, b))) * math.sqrt(sum(b)) / sum(a)
    return total


class Lecture(tracecheck.LectureRun, tracecheck.ValidTrace, unittest.TestCase):
    NAME = "lecture_checkpoints"
    SECTIONS = ["# Checkpoints and failures", "## A sharded checkpoint", "## A rank dies; the run resumes",
                "## Resharding: 2 ranks load a 4-rank checkpoint", "## Damaged shards are refused"]

    def model(self):
        return self.figures("c.layers", "c.width", "c.batch", "c.lr", "c.steps")

    def test_every_check_passed(self):
        checks = planted.checks(self.trace)
        self.assertEqual(len(checks), 9)
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
                         [(4, "ok", False), (4, "failed", True), (4, "ok", False), (2, "ok", False)])
        errs = tracecheck.errors(self.trace)
        self.assertEqual(len(errs), 1)
        step, message = errs[0]
        self.assertIn("rank %d of %d died with SIGABRT" % (CRASH_RANK, WORLD), message)
        self.assertEqual(step["renderings"][0].get("expected"), True)
        self.assertEqual(step["stack"][-1]["function"], "write_atomically")

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
        row = self.row_dicts(self.table(r"^Trained weights: 2 ranks resumed from a 4-rank checkpoint"))[0]
        bound = adamw_bound(m["c.lr"], m["c.steps"])
        self.assertAlmostEqual(row["AdamW rounding bound"], bound, delta=1e-9 * bound)  # the same formula, in double
        self.assertLessEqual(row["largest difference"], bound)
        self.assertGreater(row["largest difference"], 0)  # 2 ranks do sum in another order: not the same run

    def test_reshard_loads_every_row_bit_for_bit(self):
        m = self.model()
        f = self.figures("(long long)differ", "(long long)compared")
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

    def test_nothing_left_in_the_output_folder(self):
        self.assertEqual(sorted(os.listdir(self.out.name)), ["lecture_checkpoints.js", "lecture_checkpoints.json"])


class Planted(unittest.TestCase):
    def failed(self, find, replace):
        with planted.binary("lecture_checkpoints", find, replace) as exe, tempfile.TemporaryDirectory() as out:
            p, _ = tracecheck.run_quick(exe, out)
            self.assertNotEqual(p.returncode, 0)
            with open(os.path.join(out, "lecture_checkpoints.failed.json")) as f:
                return planted.failed_checks(json.load(f))

    def test_manifest_before_the_shards(self):
        # the shard's write moved after the manifest's: the crash leaves a manifest naming a shard never written
        with open(os.path.join(tracecheck.ROOT, "lectures", "lecture_checkpoints.c")) as f:
            src = f.read()
        start = src.index("    write_atomically(path, bytes, (size_t)n,")
        end = src.index("    tensor_free(in);\n", start)
        block = src[start:end]
        first = block.split("\n")
        shard_lines = "\n".join(first[:3]) + "\n"  # write_atomically, the figures, free
        self.assertIn("free(bytes);", shard_lines)
        got = self.failed(block, block[len(shard_lines):] + shard_lines)
        self.assertEqual(len(got), 1, got)
        self.assertIn("the crash left no manifest for step 4", got[0])

    def test_checksum_not_checked(self):
        got = self.failed("    else if (XXH64(bytes, (size_t)n, 0) != m->hash[k])",
                          "    else if (0 && XXH64(bytes, (size_t)n, 0) != m->hash[k])")
        self.assertEqual(len(got), 1, got)
        self.assertIn("one flipped bit is refused", got[0])

    def test_moments_not_restored(self):
        got = self.failed("        for (int j = 0; j < 3; j++) {\n            tensor *t = tensor_from(",
                          "        for (int j = 0; j < 1; j++) {\n            tensor *t = tensor_from(")
        self.assertIn("the resumed run's loss equals the uninterrupted run's at every step, bit for bit", got)

    def test_reshard_band_reversed(self):
        # each 2-rank band takes its two 4-rank shards in reverse order: the loss table is not touched (the
        # resumed run there has 4 ranks), the load-time comparison sees every row moved
        got = self.failed("(size_t)(lo - s->first) * (size_t)c->width,",
                          "(size_t)(s->first + s->rows - hi) * (size_t)c->width,")
        self.assertIn("the 2 ranks loaded, bit for bit, the rows and moments the 4 ranks held at step 4: 576 of 576 "
                      "rows differ", got)


if __name__ == "__main__":
    unittest.main()
