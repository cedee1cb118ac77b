"""lecture_ddp (distributed data parallel): run it with --quick and check its trace.

Every number the lecture claims is read back from the trace and judged here:
the data-parallel gradients against one device (and one device against a
float64 run), averaging parameters against averaging gradients, the initial
broadcast, the order of the bucketed all-reduces, accumulation with no_sync,
the bucket-size sweep and the straggler's skew; the lecture's own checks
and predictions, and a planted bug for each check (a copy of the lecture,
tests/lib/planted.py). The trace must validate
against the schema with every stack line accurate; so must the committed
traces/lecture_ddp.json, made from the current source.

    /usr/bin/python3 tests/lectures/test_lecture_ddp.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402
import tracecheck  # noqa: E402
from tracecheck import U  # noqa: E402

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
        # the model note's own arguments (lecture_ddp.c, one_device), read by name
        f = self.figures("c.layers", "c.width", "c.batch", "(double)c.lr", "(double)ADAM_LR")
        return {"layers": f["c.layers"], "width": f["c.width"], "batch": f["c.batch"], "lr": f["(double)c.lr"],
                "adam_lr": f["(double)ADAM_LR"]}

    def grad_tol(self):
        """Two float32 summation orders of this model's gradients agree to
        2 (layers + 1) max(batch, width) u of the largest gradient: each
        gradient goes through one sum per layer plus one for the weight
        gradient, each of at most max(batch, width) terms, and a float32 sum
        of n terms in any order is exact to n u of the terms' size. Derived
        here from the model's configuration, not read from the lecture."""
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
        rows = self.noted("step", "loss", kind="text")   # lecture_ddp.c, one_device: a line a step
        self.assertTrue(rows)
        self.assertEqual([f["step"] for _, _, f in rows], list(range(len(rows))))
        return [f["loss"] for _, _, f in rows]

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
        # each rank's line (lecture_ddp.c, gradient_main), its figures by name
        rows = self.per_rank_noted("rank", "loss", "diff", "size", world=4)
        for f in rows:
            self.assertGreater(f["size"], 0)
            # the tolerance is the rule's, recomputed from the model's configuration: the rule's factor is exact in
            # a double, so the product rounds once, here as in the lecture
            self.assertTrue(tracecheck.same_double(f["gradient_tolerance(c) * size"], self.grad_tol() * f["size"]),
                            f)
            self.assertLessEqual(f["diff"], f["gradient_tolerance(c) * size"])
        # The shards are equal in size, so the mean of their mean losses is
        # the whole batch's: one device's step-0 loss. The losses are the
        # lecture's own floats (no printed digits): what differs is the float32
        # sum of batch x width squares taken in another order, whose error
        # grows as sqrt(n) u (about 4e-6 relative for n = 4096; 0 seen on
        # x86-64 with OpenBLAS): 2e-5 is five times that.
        mean = sum(f["loss"] for f in rows) / 4
        first = self.one_device_losses()[0]
        self.assertLessEqual(abs(mean - first), 2e-5 * first, (mean, first))

    def test_averaging_parameters_agrees_after_one_sgd_step_only(self):
        # rank 0's lines (lecture_ddp.c, sgd_one_step and local_sgd), their figures by name
        one = self.figures("diff", "tol", kind="text")
        self.assertLessEqual(one["diff"], one["tol"])
        c = self.config()
        # The tolerance is lr times the gradients' rounding plus a few float32
        # roundings of weights of size about 1: well under 1e-3 of a weight.
        self.assertLess(one["tol"], 1e-3)
        grads = self.figures("LOCAL_STEPS", "by_grads", kind="text")
        self.assertGreater(grads["LOCAL_STEPS"], 1)
        self.assertLessEqual(grads["by_grads"], grads["tol"])
        local = self.figures("LOCAL_STEPS", "by_params", kind="text")
        self.assertEqual(local["LOCAL_STEPS"], grads["LOCAL_STEPS"])
        # Local SGD is another algorithm: its weights are off by far more than
        # rounding (the drift is of the order of lr^2 steps^2 times the
        # gradients' change, thousands of times the tolerance here).
        self.assertGreater(local["by_params"], 10 * grads["tol"])
        self.assertGreater(local["by_params / tol"], 10)
        self.assertGreater(c["lr"], 0)

    def adam_rows(self):
        """rank 0's AdamW table (lecture_ddp.c, adam_table): {averaged: row}."""
        table = self.table(r"^AdamW, one step on 4 ranks: rank 0 against one device")
        return {r["averaged"]: r for r in self.row_dicts(table)}

    def test_adamw_needs_averaged_gradients(self):
        c = self.config()
        rows = self.adam_rows()
        self.assertEqual(sorted(rows), ["gradients", "parameters"])
        share, diff = "share of parameters more than lr/2 away", "max |rank 0 - one device|"
        # Averaged gradients: only a gradient within rounding of zero can flip
        # sign and move its parameter (by up to 2 lr); that is a tiny share.
        self.assertLess(rows["gradients"][share], 0.001)
        # the weights are float32: 2 lr, and 1% for their rounding near a weight of about 1
        self.assertLessEqual(rows["gradients"][diff], 2 * c["adam_lr"] * 1.01)
        # Averaged parameters: wherever the 4 shards' gradients disagree in
        # sign, the ~lr sign steps cancel: a large share is off by over lr/2.
        self.assertGreater(rows["parameters"][share], 0.05)
        self.assertGreater(rows["parameters"][diff], c["adam_lr"] / 2)

    # ---- DDP's design ----

    def test_broadcast_makes_every_rank_rank0s_initial_weights(self):
        # the lines of lecture_ddp.c, broadcast_main, their figures by name
        m = self.figures("before", "after", kind="text")
        self.assertGreater(m["before"], 0.1)   # started from different random weights
        self.assertEqual(m["after"], 0)
        for row in self.per_rank_noted("rank", "from_rank0", world=4):
            self.assertEqual(row["from_rank0"], 0)

    def test_buckets_start_in_reverse_order_during_backward(self):
        m = self.figures("c->layers", "m->buckets", "m->log", kind="text")   # lecture_ddp.c, bucketed_step
        layers, buckets = m["c->layers"], m["m->buckets"]
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
        self.assertEqual(m["m->log"].split(", "), expected)

    def test_bucketed_ddp_equals_one_device_and_ranks_agree(self):
        # each rank's line (lecture_ddp.c, bucketed_step), its figures by name; not no_sync's lines
        tol = "gradient_tolerance(c) * size"
        for m in self.per_rank_noted("rank", "diff", tol, world=4, unless=("loss", "MICRO_BATCHES")):
            self.assertGreater(m[tol], 0)
            self.assertLessEqual(m["diff"], m[tol])
        spread = self.figures("c->steps", "spread", kind="text")
        self.assertGreater(spread["c->steps"], 1)
        self.assertEqual(spread["spread"], 0)   # the same averaged gradient, bit for bit

    def test_no_sync_accumulation_equals_one_device_with_one_all_reduce_per_bucket(self):
        buckets = self.figures("c->layers", "m->buckets", "m->log", kind="text")["m->buckets"]
        # each rank's line (lecture_ddp.c, no_sync_step), its figures by name
        tol = "gradient_tolerance(c) * size"
        for m in self.per_rank_noted("rank", "MICRO_BATCHES", "diff", tol, world=4):
            self.assertGreater(m["MICRO_BATCHES"], 1)
            self.assertEqual(m["m->buckets"], buckets)
            self.assertEqual(m["m->all_reduces - before"], buckets)   # only the last micro-batch communicates
            self.assertGreater(m[tol], 0)
            self.assertLessEqual(m["diff"], m[tol])

    # ---- the lecture's own checks and questions ----

    # Every check the lecture makes of its own results, by the start of its
    # text, and on how many ranks (the sweep's and overlap's checks are the
    # lecture's, counted once). Each is shown failing on a plant below.
    OWN_CHECKS = {
        "averaged gradients equal the one-device gradient of the whole batch": 4,
        "SGD, 1 step: averaged parameters equal one device's step": 1,
        "SGD, 4 steps: gradients averaged every step equal one device's steps": 1,
        "SGD, 4 local steps: averaging parameters at the end is not one device's steps": 1,
        "AdamW, 1 step: averaged gradients give one device's step": 1,
        "AdamW, 1 step: averaging parameters is not one device's step": 1,
        "broadcast: every rank holds rank 0's initial weights": 4,
        "bucketed DDP: the gradients equal the one-device gradient": 4,
        "bucketed DDP: after 4 steps every rank holds the same weights": 4,
        "bucketed DDP against one all-reduce per parameter": 4,
        "buckets: 4 layers' gradients sent once": 4,
        "no_sync: 4 micro-batches made one all-reduce per bucket": 4,
    }

    def test_own_checks_all_made_and_passed(self):
        passes = tracecheck.check_passes(self.trace)
        for start, ranks in self.OWN_CHECKS.items():
            made = [(rank, ok) for rank, what, ok in passes if what.startswith(start)]
            self.assertEqual(sorted(r for r, _ in made), list(range(ranks)), start)
            self.assertTrue(all(ok for _, ok in made), start)
        self.assertEqual(self.trace["meta"]["checks"]["failed"], 0)

    def test_predictions_hold_what_follows(self):
        """Two questions (predict()): each hidden value is a number of the
        table right after it, and each follows from what the test computes
        on its own."""
        asked = self.renderings("predict")
        self.assertEqual(len(asked), 2, [r["question"] for _, r in asked])
        steps = self.trace["steps"]
        (s_adam, adam), = [(s, r) for s, r in asked if "AdamW" in r["question"]]
        (s_bytes, by), = [(s, r) for s, r in asked if "buckets" in r["question"]]
        # AdamW with averaged parameters: the share rank 0's table gives next (lecture_ddp.c, adam_table)
        (s_table, _), = self.tables(r"^AdamW, one step on 4 ranks")
        self.assertTrue(tracecheck.same_double(adam["value"],
                                               self.adam_rows()["parameters"]["share of parameters more than lr/2 away"]))
        self.assertEqual(adam["unit"], "")
        self.assertLess(steps.index(s_adam), steps.index(s_table))
        self.assertTrue(0.05 < adam["value"] < 1, adam)   # the shards disagree in sign on a large share
        # bytes: buckets send what one all-reduce per parameter sends, the
        # ring's formula 2 (p - 1) / p of the float32 gradients, from the
        # model's size; in fewer calls (lecture_ddp.c, buckets_against_per_parameter)
        (s_table, table), = self.tables(r"^One DDP step of 4 layers on 4 ranks: rank 0's gradient all-reduces")
        rows = {r["gradients"]: r for r in self.row_dicts(table)}
        c = self.config()
        formula = 2 * (4 - 1) / 4 * c["layers"] * c["width"] * c["width"] * 4
        self.assertEqual([rows[k]["bytes sent, formula"] for k in ("in buckets", "one per parameter")],
                         [formula, formula])
        self.assertEqual(rows["one per parameter"]["all-reduce calls"], c["layers"])
        self.assertLess(rows["in buckets"]["all-reduce calls"], c["layers"])
        self.assertGreater(rows["in buckets"]["all-reduce calls"], 1)
        self.assertEqual((by["value"], by["unit"]), (formula, "bytes"))
        self.assertIn("per parameter sends %d bytes" % formula, by["question"])   # the question gives the other row
        self.assertLess(steps.index(s_bytes), steps.index(s_table))
        self.assertEqual(s_bytes["rank"], 0)

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
        # the sweep's notes (lecture_ddp.c, bucket_sweep and note_sweep), their figures by name
        m = self.figures("a.cfg.layers", "SWEEP_WORLD")
        layers, width = m["a.cfg.layers"], m["a.cfg.width"]
        modelled_layers = self.figures("MODELLED_LAYERS", "md->comm_ms")["MODELLED_LAYERS"]
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
        said = self.figures("n_best", "model_ms[best]")   # the same doubles as the table's
        self.assertEqual((said["n_best"], said["model_ms[best]"]), (model[best]["buckets"], steps[best]))
        self.assertEqual((said["b->over_longer"], said["b->speedup"]),
                         (model[best]["modelled: during / max(compute, communication)"],
                          model[best]["modelled: speed-up (after / during)"]))
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
        # the note under the table (lecture_ddp.c, overlap_main): the table's own doubles, by name
        m = self.figures("modelled.over_longer", "modelled.speedup", "real.speedup")
        self.assertEqual((m["modelled.over_longer"], m["modelled.speedup"], m["real.speedup"]),
                         (md["during / max(compute, communication)"], md["speed-up (after / during)"],
                          rows["real"]["speed-up (after / during)"]))

    def test_straggler_makes_every_rank_wait(self):
        m = self.figures("STRAGGLER", "STRAGGLER_WORLD", "a.delay_ms")   # lecture_ddp.c, stragglers
        straggler, world, delay = m["STRAGGLER"], m["STRAGGLER_WORLD"], m["a.delay_ms"]
        # each rank's line (lecture_ddp.c, straggler_main), its figures by name
        for rank, m in enumerate(self.per_rank_noted("rank", "role", "compute_ms", world=world)):
            compute, reduce, step = m["compute_ms"], m["reduce_ms"], m["step_ms"]
            self.assertEqual(m["role"], " (straggler)" if rank == straggler else "")
            # Every rank's step lasts at least most of the straggler's delay:
            # the all-reduce ends only once the straggler joins. Half the delay
            # leaves room for the ranks leaving the barrier at different times
            # on a busy machine (a late start shortens a step, never the wait
            # for a rank that sleeps).
            self.assertGreaterEqual(step, 0.5 * delay, m)
            if rank == straggler:
                self.assertGreaterEqual(compute, delay * 0.99, m)   # it slept that long
            else:
                # The fast ranks spend the difference inside the all-reduce.
                self.assertGreaterEqual(reduce, 0.5 * delay, m)



class PlantedDDP(unittest.TestCase):
    """Each of lecture_ddp's own checks fails on the bug it is there for,
    planted in a copy of the lecture (tests/lib/planted.py) run with --quick;
    the run fails. The copies skip the bucket sweep and the stragglers (no
    check there is planted against here: they are timed sections, checked by
    the tests above), to keep each run short."""
    SKIP_TIMED = [("    bucket_size();\n    stragglers();\n", "    if (0) bucket_size();\n    if (0) stragglers();\n")]

    def failed(self, find, replace, count=1):
        with planted.binary("lecture_ddp", find, replace, count, also=self.SKIP_TIMED) as exe, \
                tempfile.TemporaryDirectory() as out:
            p, trace = tracecheck.run_quick(exe, out)
            path = os.path.join(out, "lecture_ddp.failed.json")
            if trace is None and os.path.exists(path):
                trace = tracecheck.load(path)   # a failed run writes NAME.failed.json
        self.assertIsNotNone(trace, "the planted copy wrote no trace: %s" % tracecheck.why(p))
        return p, {what for _, what, ok in tracecheck.check_passes(trace) if not ok}

    def assert_fail(self, find, replace, starts, count=1):
        p, failed = self.failed(find, replace, count)
        for start in starts:
            self.assertTrue(any(w.startswith(start) for w in failed), "%r -> %r: %r did not fail; failed: %r" %
                            (find, replace, start, sorted(failed)))
        self.assertNotEqual(p.returncode, 0, "a failed check must fail the run")

    def test_unplanted_copy_passes(self):
        # the skip alone: every check the copy makes passes, and the run passes
        p, failed = self.failed("    bucket_size();\n", "    bucket_size();\n")
        self.assertEqual(failed, set())
        self.assertEqual(p.returncode, 0, tracecheck.why(p))

    def test_summed_not_averaged(self):
        # the all-reduce sums the ranks' gradients (and weights) without dividing by the world size
        self.assert_fail("        dist_all_reduce(ts[i], DIST_AVG);", "        dist_all_reduce(ts[i], DIST_SUM);",
                         ["averaged gradients equal the one-device gradient",
                          "SGD, 1 step: averaged parameters equal one device's step",
                          "SGD, 4 steps: gradients averaged every step equal one device's steps"])

    def test_gradients_averaged_where_parameters_should_be(self):
        # local SGD and AdamW averaging parameters made to average gradients too: the lessons' contrasts vanish
        self.assert_fail("if (average_grads) average_all(grads, c->layers);",
                         "if (1) average_all(grads, c->layers);",
                         ["SGD, 4 local steps: averaging parameters at the end is not one device's steps",
                          "AdamW, 1 step: averaging parameters is not one device's step"], count=2)

    def test_adamw_on_a_rank_gradient(self):
        # the AdamW step on averaged gradients takes rank 0's own gradient instead
        self.assert_fail("    if (average_grads) average_all(grads, c->layers);\n    for (int i = 0; i < c->layers; i++) {\n"
                         "        adamw *opt",
                         "    if (0) average_all(grads, c->layers);\n    for (int i = 0; i < c->layers; i++) {\n"
                         "        adamw *opt",
                         ["AdamW, 1 step: averaged gradients give one device's step"])

    def test_bucket_misses_a_row(self):
        # every bucket one row short: that row is never all-reduced
        self.assert_fail("m->bucket[b] = row_slice(m->flat, (int64_t)first * c->width, (int64_t)end * c->width);",
                         "m->bucket[b] = row_slice(m->flat, (int64_t)first * c->width, (int64_t)end * c->width - 1);",
                         ["bucketed DDP: the gradients equal the one-device gradient",
                          "bucketed DDP: after 4 steps every rank holds the same weights",
                          "bucketed DDP against one all-reduce per parameter",
                          "buckets: 4 layers' gradients sent once",
                          "no_sync: 4 micro-batches made one all-reduce per bucket"])

    def test_broadcast_from_the_wrong_rank(self):
        # layer 0 broadcast from rank 1: the ranks agree, but not on rank 0's weights
        self.assert_fail("        dist_broadcast(m->w[i], 0);", "        dist_broadcast(m->w[i], i == 0);",
                         ["broadcast: every rank holds rank 0's initial weights"])

    def test_no_sync_ignored(self):
        # every micro-batch all-reduces: the gradient is still right, the calls are not
        self.assert_fail("        m->sync = k == MICRO_BATCHES - 1;", "        m->sync = 1;",
                         ["no_sync: 4 micro-batches made one all-reduce per bucket"])


if __name__ == "__main__":
    unittest.main()
