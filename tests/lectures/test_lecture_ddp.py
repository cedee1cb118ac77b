"""lecture_ddp (distributed data parallel): run it with --quick and check its trace.

Every number the lecture claims is read back from the trace and judged here:
the data-parallel gradients against one device (and one device against a
float64 run), averaging parameters against averaging gradients, the initial
broadcast, the order of the bucketed all-reduces, accumulation with no_sync,
the bucket-size sweep and the straggler's skew. The trace must validate
against the schema with every stack line accurate; so must the committed
traces/lecture_ddp.json, made from the current source.

    /usr/bin/python3 tests/lectures/test_lecture_ddp.py
"""
import json
import math
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import NUM, U  # noqa: E402

ROOT = tracecheck.ROOT

SECTIONS = [
    "# Distributed data parallel training",
    "## The plan",
    "## SGD on one device",
    "## Data parallelism",
    "## DDP's design",
    "## Step time against bucket size",
    "## Stragglers",
    "## Summary",
]


class LectureDDP(tracecheck.LectureRun, tracecheck.WholeTrace, unittest.TestCase):
    NAME = "lecture_ddp"
    SECTIONS = SECTIONS

    # ---- helpers over the trace ----

    def config(self):
        pat = (r"The model is the one lecture_08 trains: (\d+) layers, each a (\d+) x \d+ matrix.*one data set "
               r"of (\d+) examples\. SGD's learning rate is %s; AdamW's is %s\." % (NUM, NUM))
        m = [re.search(pat, md, re.S) for md in self.markdown()]
        m = [x for x in m if x][0]
        return {"layers": int(m.group(1)), "width": int(m.group(2)), "batch": int(m.group(3)),
                "lr": float(m.group(4)), "adam_lr": float(m.group(5))}

    def grad_tol(self):
        """Two float32 summation orders of this model's gradients agree to
        2 (layers + 1) max(batch, width) u of the largest gradient: each
        gradient goes through one sum per layer plus one for the weight
        gradient, each of at most max(batch, width) terms, and a float32 sum
        of n terms in any order is exact to n u of the terms' size. Derived
        here from the printed configuration, not read from the lecture."""
        c = self.config()
        return 2 * (c["layers"] + 1) * max(c["batch"], c["width"]) * U

    # ---- the trace as a whole ----

    def test_diagrams_and_references(self):
        local = {r["src"] for _, r in self.renderings("image") if not r["remote"]}
        for name in ("buckets", "overlap"):
            src = "assets/lecture_ddp_%s.svg" % name
            self.assertIn(src, local)
            self.assertTrue(os.path.exists(os.path.join(ROOT, src)), src)
        links = {r["url"] for _, r in self.renderings("link")}
        self.assertIn("https://arxiv.org/abs/2006.15704", links)

    # ---- one device ----

    def one_device_losses(self):
        rows = self.texts(r"^One device, SGD: step = (\d+), loss = %s$" % NUM)
        self.assertTrue(rows)
        self.assertEqual([int(m.group(1)) for _, m in rows], list(range(len(rows))))
        return [float(m.group(2)) for _, m in rows]

    def test_one_device_loss_matches_float64_and_falls(self):
        c = self.config()
        tool = tracecheck.built("tests", "tools", "mlp_reference")
        out = subprocess.run([tool, str(c["batch"]), str(c["width"]), str(c["layers"]), "1", "0.001"],
                             capture_output=True, text=True, timeout=600, check=True)
        ref = json.loads(out.stdout)["losses"][0]   # the loss before any update
        losses = self.one_device_losses()
        # The output is exact to 2 layers max(batch, width) u of its size; the
        # loss, a mean of its squares, to twice that, relatively.
        tol = 2 * 2 * c["layers"] * max(c["batch"], c["width"]) * U
        self.assertLessEqual(abs(losses[0] - ref), tol * ref, (losses[0], ref))
        for a, b in zip(losses, losses[1:]):
            self.assertLess(b, a)   # SGD makes progress every step

    # ---- data parallelism ----

    def test_averaged_gradients_equal_one_device(self):
        rows = self.per_rank(r"^Rank (\d): shard loss = %s; averaged gradients: max \|rank - one device\| = %s "
                             r"\(largest gradient %s, tolerance %s\)$" % (NUM, NUM, NUM, NUM), 4)
        for m in rows:
            self.assertGreater(float(m.group(4)), 0)
            self.assert_scaled(m.group(5), m.group(4), self.grad_tol(), "averaged gradients")
            self.assertLessEqual(float(m.group(3)), float(m.group(5)))
        # The shards are equal in size, so the mean of their mean losses is
        # the whole batch's: one device's step-0 loss. Shard losses are
        # printed with 6 digits (rounding 5e-6 relative each); float32 adds
        # under 1e-6 more.
        mean = sum(float(m.group(2)) for m in rows) / 4
        first = self.one_device_losses()[0]
        self.assertLessEqual(abs(mean - first), 2e-5 * first, (mean, first))

    def test_averaging_parameters_agrees_after_one_sgd_step_only(self):
        one = self.one(r"^SGD, 1 step, averaged parameters: max \|rank 0 - one device\| = %s \(tolerance %s\)$"
                       % (NUM, NUM))
        self.assertLessEqual(float(one.group(1)), float(one.group(2)))
        c = self.config()
        # The tolerance is lr times the gradients' rounding plus a few float32
        # roundings of weights of size about 1: well under 1e-3 of a weight.
        self.assertLess(float(one.group(2)), 1e-3)
        grads = self.one(r"^SGD, (\d+) steps, gradients averaged every step: max \|rank 0 - one device\| = %s "
                         r"\(tolerance %s\)$" % (NUM, NUM))
        self.assertGreater(int(grads.group(1)), 1)
        self.assertLessEqual(float(grads.group(2)), float(grads.group(3)))
        local = self.one(r"^SGD, (\d+) local steps, parameters averaged at the end: max \|rank 0 - one device\| "
                         r"= %s \(%s times the tolerance\)$" % (NUM, NUM))
        self.assertEqual(local.group(1), grads.group(1))
        # Local SGD is another algorithm: its weights are off by far more than
        # rounding (the drift is of the order of lr^2 steps^2 times the
        # gradients' change, thousands of times the tolerance here).
        self.assertGreater(float(local.group(2)), 10 * float(grads.group(3)))
        self.assertGreater(float(local.group(3)), 10)
        self.assertGreater(c["lr"], 0)

    def test_adamw_needs_averaged_gradients(self):
        c = self.config()
        rows = {m.group(1): m for _, m in self.texts(
            r"^AdamW, 1 step, (gradients|parameters) averaged: max \|rank 0 - one device\| = %s; "
            r"share of parameters more than lr/2 away: %s$" % (NUM, NUM))}
        self.assertEqual(sorted(rows), ["gradients", "parameters"])
        # Averaged gradients: only a gradient within rounding of zero can flip
        # sign and move its parameter (by up to 2 lr); that is a tiny share.
        self.assertLess(float(rows["gradients"].group(3)), 0.001)
        self.assertLessEqual(float(rows["gradients"].group(2)), 2 * c["adam_lr"] * 1.01)
        # Averaged parameters: wherever the 4 shards' gradients disagree in
        # sign, the ~lr sign steps cancel: a large share is off by over lr/2.
        self.assertGreater(float(rows["parameters"].group(3)), 0.05)
        self.assertGreater(float(rows["parameters"].group(2)), c["adam_lr"] / 2)

    # ---- DDP's design ----

    def test_broadcast_makes_every_rank_rank0s_initial_weights(self):
        m = self.one(r"^Initial parameters: max spread over ranks before broadcast = %s, after = %s$" % (NUM, NUM))
        self.assertGreater(float(m.group(1)), 0.1)   # started from different random weights
        self.assertEqual(float(m.group(2)), 0)
        for row in self.per_rank(r"^Rank (\d): after broadcast, max \|weights - rank 0's initial weights\| = %s$"
                                 % NUM, 4):
            self.assertEqual(float(row.group(2)), 0)

    def test_buckets_start_in_reverse_order_during_backward(self):
        m = self.one(r"^Rank 0, step 0, (\d+) layers in (\d+) buckets, in order: (.*)$")
        layers, buckets = int(m.group(1)), int(m.group(2))
        self.assertGreater(buckets, 1)
        self.assertLess(buckets, layers)
        per = -(-layers // buckets)
        # Expected, built here: gradients from the last layer down; a bucket
        # holds `per` consecutive layers from the top and starts right after
        # its lowest layer's gradient, before the layers below; every wait
        # comes after the whole backward pass.
        expected = []
        for i in range(layers - 1, -1, -1):
            expected.append("grad %d" % i)
            position = layers - 1 - i
            if position % per == per - 1 or i == 0:
                expected.append("start bucket %d" % (position // per))
        expected += ["wait bucket %d" % b for b in range(buckets)]
        self.assertEqual(m.group(3).split(", "), expected)

    def test_bucketed_ddp_equals_one_device_and_ranks_agree(self):
        for m in self.per_rank(r"^Rank (\d): bucketed DDP gradients: max \|rank - one device\| = %s "
                               r"\(tolerance %s\)$" % (NUM, NUM), 4):
            self.assertGreater(float(m.group(3)), 0)
            self.assertLessEqual(float(m.group(2)), float(m.group(3)))
        spread = self.one(r"^After (\d+) DDP steps: max spread of the weights over ranks = %s$" % NUM)
        self.assertGreater(int(spread.group(1)), 1)
        self.assertEqual(float(spread.group(2)), 0)   # the same averaged gradient, bit for bit

    def test_no_sync_accumulation_equals_one_device_with_one_all_reduce_per_bucket(self):
        buckets = int(self.one(r"^Rank 0, step 0, (\d+) layers in (\d+) buckets")
                      .group(2))
        for m in self.per_rank(r"^Rank (\d): (\d+) micro-batches with no_sync, (\d+) all-reduces \((\d+) buckets\): "
                               r"max \|rank - one device\| = %s \(tolerance %s\)$" % (NUM, NUM), 4):
            self.assertGreater(int(m.group(2)), 1)
            self.assertEqual(int(m.group(4)), buckets)
            self.assertEqual(int(m.group(3)), buckets)   # only the last micro-batch communicates
            self.assertGreater(float(m.group(6)), 0)
            self.assertLessEqual(float(m.group(5)), float(m.group(6)))

    # ---- measurements ----

    def test_bucket_sweep(self):
        """The real sweep and the modelled one in one table and one chart; the
        modelled one shows both halves of the trade with its fastest step
        inside the sweep, and the overlap's bounds there (each checked by the
        lecture too)."""
        table = self.table(r"^DDP step against bucket size: the real model, and modelled compute \(each layer")
        self.assertEqual([(c["name"], c.get("unit")) for c in table["columns"]], [
            ("buckets", None), ("real: layers per bucket", None), ("real: bucket size", "MB"), ("real: step", "ms"),
            ("real: waiting for buckets", "ms"), ("modelled: layers per bucket", None), ("modelled: step", "ms"),
            ("modelled: all-reduce after backward", "ms"), ("modelled: compute alone", "ms"),
            ("modelled: communication alone", "ms"), ("modelled: speed-up (after / during)", None),
            ("modelled: during / max(compute, communication)", None)])
        rows = self.row_dicts(table)
        m = re.search(r"\*\*Real\*\*: a bigger model for timing, (\d+) layers of (\d+) x", self.markdown_text())
        layers, width = int(m.group(1)), int(m.group(2))
        m = re.search(r"The modelled sweep: (\d+) layers of 256 KiB", self.markdown_text())
        modelled_layers = int(m.group(1))
        real = [r for r in rows if r["real: step"] is not None]
        model = [r for r in rows if r["modelled: step"] is not None]
        # real: per parameter, a few, one for all; modelled: one bucket to a bucket a layer
        self.assertEqual(sorted(r["real: layers per bucket"] for r in real), [1, 2, 4, layers])
        self.assertEqual([r["buckets"] for r in model], [1, 4, 8, 16, 64])
        for r in real:
            per = r["real: layers per bucket"]
            self.assertEqual(r["buckets"], -(-layers // per))
            self.assertTrue(math.isclose(r["real: bucket size"], per * width * width * 4 / 1e6, rel_tol=1e-12))
            self.assertGreater(r["real: step"], 0)
            self.assertGreaterEqual(r["real: waiting for buckets"], 0)
            # Waiting is part of the step (both the slowest rank's medians,
            # possibly of different ranks, each as float32 over the ranks).
            self.assertLessEqual(r["real: waiting for buckets"], r["real: step"] * (1 + 1e-6))
        for r in model:
            self.assertEqual(r["modelled: layers per bucket"] * r["buckets"], modelled_layers)
        steps = [r["modelled: step"] for r in model]
        best = steps.index(min(steps))
        self.assertTrue(0 < best < len(steps) - 1, "the fastest step is at an end of the sweep: %r" % steps)
        checks = [r for _, r in self.renderings("check") if r["what"].startswith("modelled sweep")]
        self.assertEqual([r["passed"] for r in checks], [True])
        said = re.search(r"and (\d+) buckets, between the two, are the fastest \(([0-9.]+) ms", self.markdown_text())
        self.assertEqual((int(said.group(1)), said.group(2)), (model[best]["buckets"], "%.2f" % steps[best]))
        spec = self.one_plot()
        self.assertEqual((spec["encoding"]["x"]["title"], spec["encoding"]["y"]["title"]), ("buckets", "step (ms)"))
        # the chart plots the table's values
        points = {(p["series"], p["x"]): p["y"] for p in spec["data"]["values"]}
        self.assertEqual(points, dict([(("real", r["buckets"]), r["real: step"]) for r in real] +
                                      [(("modelled compute", r["buckets"]), r["modelled: step"]) for r in model]))
        self.assertIs(self.trace["meta"]["modelled_compute"], True)

    def test_overlap_real_and_modelled(self):
        """One DDP step four ways, real and modelled in one table; the
        modelled row within the lesson's bounds, each also a check of the
        lecture."""
        table = self.table(r"^Overlap: one DDP step on 4 ranks ")
        rows = {r["compute"]: r for r in self.row_dicts(table)}
        self.assertEqual(sorted(rows), ["modelled", "real"])
        self.assertEqual((rows["real"]["buckets"], rows["modelled"]["buckets"]), (4, 16))
        for row in rows.values():
            for k in ("compute alone", "communication alone", "all-reduce after backward",
                      "async all-reduce during backward", "speed-up (after / during)",
                      "during / max(compute, communication)"):
                self.assertTrue(math.isfinite(row[k]) and row[k] > 0, row)
        md = rows["modelled"]
        self.assertLessEqual(md["during / max(compute, communication)"], 1.15)
        self.assertGreaterEqual(md["speed-up (after / during)"], 1.3)
        checks = [r for _, r in self.renderings("check") if r["what"].startswith("modelled DDP step")]
        self.assertEqual([r["passed"] for r in checks], [True, True])
        m = re.search(r"What each row proves\. Modelled: .* \(([0-9.]+) x the longer\), ([0-9.]+) times faster .* "
                      r"speed-up ([0-9.]+)\.", self.markdown_text())
        self.assertEqual(m.groups(), ("%.2f" % md["during / max(compute, communication)"],
                                      "%.2f" % md["speed-up (after / during)"],
                                      "%.2f" % rows["real"]["speed-up (after / during)"]))

    def test_straggler_makes_every_rank_wait(self):
        m = re.search(r"Here rank (\d) of (\d) sleeps (\d+) ms more", self.markdown_text())
        straggler, world, delay = int(m.group(1)), int(m.group(2)), float(m.group(3))
        rows = self.per_rank(r"^Rank (\d)( \(straggler\))?: compute %s ms, all-reduce %s ms, step %s ms$"
                             % (NUM, NUM, NUM), world)
        for m in rows:
            rank = int(m.group(1))
            compute, reduce, step = float(m.group(3)), float(m.group(4)), float(m.group(5))
            self.assertEqual(m.group(2) is not None, rank == straggler)
            # Every rank's step lasts at least most of the straggler's delay:
            # the all-reduce ends only once the straggler joins. Half the delay
            # leaves room for the ranks leaving the barrier at different times
            # on a busy machine (a late start shortens a step, never the wait
            # for a rank that sleeps).
            self.assertGreaterEqual(step, 0.5 * delay, m.group(0))
            if rank == straggler:
                self.assertGreaterEqual(compute, delay * 0.99, m.group(0))   # it slept that long
            else:
                # The fast ranks spend the difference inside the all-reduce.
                self.assertGreaterEqual(reduce, 0.5 * delay, m.group(0))



if __name__ == "__main__":
    unittest.main()
