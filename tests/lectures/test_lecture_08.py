"""lecture_08 (distributed training): run it with --quick and check its trace.

Every number the lecture claims is read back from the trace and checked here:
the collective examples, the bandwidth arithmetic, and the agreement of DDP,
ZeRO-3, tensor and pipeline parallelism with the one-device run. The trace
must also validate against the schema with every stack line accurate.

    /usr/bin/python3 tests/lectures/test_lecture_08.py
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import NUM, half_unit  # noqa: E402

ROOT = tracecheck.ROOT

# The pipeline section's model is this many times as deep as the rest of the
# lecture's (pipeline_config() in lectures/lecture_08/pipeline.c): a stage's work long
# against its messages, which stay the same size.
PIPELINE_DEPTH = 2

COLLECTIVES = ["broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter", "all_reduce"]

# Headings in the order the lecture must give them.
SECTIONS = [
    "# Distributed training",
    "## Part 1 (first sitting): the building blocks of distributed communication",
    "## One GPU",
    "## Many GPUs, many nodes: PCIe and Ethernet",
    "## InfiniBand and RDMA",
    "## NVLink and NVSwitch",
    "## SHARP: reducing inside the switch",
    "## Our hardware",
    "## Collective operations",
    "### Broadcast",
    "### Scatter",
    "### Gather",
    "### Reduce",
    "### All-gather",
    "### Reduce-scatter",
    "### All-reduce = reduce-scatter + all-gather",
    "## Collectives in this runtime (our `torch.distributed`)",
    "## NCCL: the NVIDIA Collective Communication Library",
    "## Examples",
    "### All-reduce",
    "### Reduce-scatter",
    "### All-gather",
    "## Benchmarking",
    "### 2 ranks",
    "### 4 ranks",
    "## CUDA streams",
    "## Part 2 (second sitting): distributed training",
    "## One device first",
    "## Distributed data parallel (DDP)",
    "## Distributed data parallel with ZeRO stage 3",
    "## Tensor parallelism",
    "## Pipeline parallelism",
    "## Summary",
    "## Further reading",
]

# lectures/lecture_08/pipeline.c: the modelled runs' shapes, {stages, micro-batches, schedule}, and a forward's ms
MODELLED_SHAPES = [(2, 8, "GPipe"), (2, 8, "1F1B"), (4, 8, "GPipe"), (4, 8, "1F1B"), (4, 32, "GPipe"), (4, 32, "1F1B")]
MODELLED_F_MS = 20.0


def numbers(text):
    """The floats inside tensor([...]) in text, one list per tensor."""
    return [[float(v) for v in inner.replace(",", " ").split()]
            for inner in re.findall(r"tensor\(\[([^\]]*)\]", text)]


class Run(tracecheck.LectureRun):
    """Runs lecture_08 --quick once per class, with the environment the class
    adds (ENV), and offers helpers over its trace."""
    NAME = "lecture_08"

    # ---- helpers over the trace ----

    def by_spawn(self, function):
        """Spawn ids whose rank steps run in `function`, in order."""
        ids = []
        for step in self.trace["steps"]:
            if step["spawn"] is not None and any(f["function"] == function for f in step["stack"]):
                if step["spawn"] not in ids:
                    ids.append(step["spawn"])
        return ids

    def results(self, caption):
        """What every rank of a strategy's spawn handed back (spawn_return), as
        the lecture showed it after the spawn (lectures/lecture_08/train.c,
        results_table and its kin): the one table whose caption matches, as
        {column key: value} per row, a row per rank in rank order."""
        rows = self.row_dicts(self.table(caption))
        self.assertEqual([r["rank"] for r in rows], list(range(len(rows))), caption)
        return rows

    @staticmethod
    def losses(row):
        """A results row's loss at each step: its "losses" cell, "[l0, l1, ...]"."""
        return [float(v) for v in row["losses"].strip("[]").split(", ")]

    def rank_rows(self, spawn_id, caption):
        """The rows of the one table rank 0 of a spawn showed whose caption
        matches (a pipeline's, lectures/lecture_08/pipeline.c), as {column
        name: value} per row; and the caption."""
        found = [(s, r) for s, r in self.tables(caption) if s["spawn"] == spawn_id]
        self.assertEqual(len(found), 1, caption)
        step, r = found[0]
        self.assertEqual(step["rank"], 0)
        return self.row_dicts(r), r["caption"]

    def spawn_texts(self, spawn_id, pattern):
        """(rank, match) of the text renderings of one spawn matching a regex."""
        return [(step["rank"], m) for step, m in self.texts(pattern) if step["spawn"] == spawn_id]


class Numbers:
    """lecture_08's numbers from its training strategies, judged against a
    float64 run of the same training and against one device."""

    # ---- training ----
    #
    # What "equal to one device" can mean in float32, derived here from the
    # configuration the lecture prints (not read from lectures/lib/mlp.c):
    #   - a gradient passes through (layers + 1) sums of at most
    #     max(batch, width) terms; a float32 sum of n terms in any order is
    #     exact to n u of the terms' size (u = 2^-24), so two summation orders
    #     differ by at most 2 (layers + 1) max(batch, width) u of the largest
    #     gradient (GRAD_TOL); the output likewise by 2 layers max(batch, width) u
    #     of its largest element (OUT_TOL), and the loss, a mean of squares, by
    #     twice that relatively;
    #   - AdamW's parameters are not compared tightly: see adamw_bound().

    def config(self):
        # the model note's own arguments (lecture_08.c, its mlp_config c), read by name
        f = self.figures("c.layers", "c.width", "c.lr", "c.batch", "c.steps")
        return {k: f["c." + k] for k in ("layers", "width", "lr", "batch", "steps")}

    def grad_tol(self, layers=None):
        c = self.config()
        return 2 * ((layers or c["layers"]) + 1) * max(c["batch"], c["width"]) * 2.0 ** -24

    def out_tol(self):
        c = self.config()
        return 2 * c["layers"] * max(c["batch"], c["width"]) * 2.0 ** -24

    def adamw_bound(self):
        """How far AdamW can carry a parameter apart in two runs whose
        gradients differ by rounding: at most 2 lr R_t in step t, R_t the
        Cauchy-Schwarz bound on |m_hat| / sqrt(v_hat) for betas 0.9, 0.999."""
        c = self.config()
        bound = 0
        for t in range(1, c["steps"] + 1):
            a = [0.1 * 0.9 ** (t - i) for i in range(1, t + 1)]
            b = [0.001 * 0.999 ** (t - i) for i in range(1, t + 1)]
            r = math.sqrt(sum(x * x / y for x, y in zip(a, b))) * math.sqrt(sum(b)) / sum(a)
            bound += 2 * c["lr"] * r
        return bound

    def reference_losses(self):
        """The whole-batch loss at every step of the same training in float64
        (tests/tools/mlp_reference: plain loops, no code shared with the
        lecture's model but the starting numbers)."""
        if not hasattr(type(self), "_reference"):
            c = self.config()
            tool = tracecheck.built("tests", "tools", "mlp_reference")
            out = subprocess.run([tool, str(c["batch"]), str(c["width"]), str(c["layers"]), str(c["steps"]),
                                  repr(c["lr"])], capture_output=True, text=True, timeout=600, check=True)
            type(self)._reference = json.loads(out.stdout)["losses"]
        return type(self)._reference

    def assert_loss(self, loss, step, what):
        ref = self.reference_losses()[step]
        self.assertLessEqual(abs(loss - ref), 2 * self.out_tol() * ref,
                             "%s: loss %r at step %d, float64 reference %r" % (what, loss, step, ref))

    def assert_within(self, m, diff, printed_tol, scale, tol, what):
        """diff <= the printed tolerance, and the printed tolerance is
        tol * scale: both printed with 3 digits, so compared as intervals."""
        self.assert_scaled(m.group(printed_tol), m.group(scale), tol, what)
        self.assertLessEqual(float(m.group(diff)), float(m.group(printed_tol)), what)

    def assert_grad_tol(self, row):
        """A results row's recorded gradient tolerance is the float32 rule
        worked out here (grad_tol) times one device's largest gradient, which
        the rank recorded beside it (grad_max: positive, and far below 1 for
        this loss): the same arithmetic, so equal to 12 digits."""
        self.assertTrue(0 < row["grad_max"] < 1, row)
        self.assertTrue(math.isclose(row["grad_tol"], self.grad_tol() * row["grad_max"], rel_tol=1e-12), row)

    def one_device(self):
        cols = self.columns(self.table(r"^One device: the whole batch, step by step$"))
        self.assertTrue(cols["step"])
        return list(zip(cols["step"], cols["loss"], cols["params after the step"]))

    def test_every_strategy_checks_itself_against_one_device(self):
        """Each printed comparison with one device comes with a check() step:
        one per rank of every DDP world size, DDP with buckets, ZeRO-3 (per
        layer), both TPs (output and gradients) and the pipelines; none
        failed. The count is what the lecture's spawns imply, worked out
        here from the trace's own rank steps, not a constant."""
        checks = tracecheck.check_passes(self.trace)   # a folded PASS counts each rank's pass
        self.assertTrue(checks, "lecture_08 records no check step")
        failed = [c for c in checks if not c[2]]
        self.assertEqual(failed, [])
        self.assertEqual(self.trace["meta"]["checks"], {"passed": len(checks), "failed": 0})
        # every comparison shown: a line "... one device| = ..." or a table cell under a column
        # "... - one device|" or a strategy's results column *_diff (a row per rank)
        compared = len(self.texts(r"one device\| = "))
        for _, r in self.tables(r""):
            compared += sum(len(r["rows"]) for c in r["columns"]
                            if c["name"].endswith("one device|") or c["name"].endswith("_diff"))
        # the modelled runs' checks are of their timing bounds, not against one device (their own tests)
        against_one_device = [c for c in checks if not c[1].startswith("modelled ")]
        self.assertEqual(len(against_one_device), compared,
                         "a comparison with one device shown without its check (or a check without one)")

    def test_one_device_trains_like_float64(self):
        one = self.one_device()
        self.assertEqual([s for s, _, _ in one], list(range(self.config()["steps"])))
        for step, loss, _ in one:
            self.assert_loss(loss, step, "one device")
        self.assertLess(one[-1][1], one[0][1])   # it learns

    def test_ddp_matches_one_device_for_every_world_size(self):
        one = self.one_device()
        steps = len(one)
        spawns = self.by_spawn("ddp_main")
        self.assertEqual(len(spawns), 3)
        for sid, world in zip(spawns, [1, 2, 4]):
            # the lecture's table of what each rank handed back: a row per rank, its loss at every step
            rows = self.results(r"^DDP on %d ranks?$" % world)
            self.assertEqual(len(rows), world)
            losses = [self.losses(r) for r in rows]
            for step in range(steps):
                self.assertTrue(all(len(l) == steps for l in losses))
                # the mean of the ranks' slice losses is the whole batch's loss
                mean = sum(l[step] for l in losses) / world
                self.assert_loss(mean, step, "DDP on %d ranks" % world)
            for r in rows:
                # the recorded tolerance is grad_tol times the largest gradient; the bound AdamW's, worked out here
                self.assert_grad_tol(r)
                self.assertTrue(math.isclose(r["trained_bound"], self.adamw_bound(), rel_tol=5e-3), r)
                self.assertLessEqual(r["grad_diff"], r["grad_tol"])
                self.assertLessEqual(r["trained_diff"], r["trained_bound"])
                self.assertEqual((r["first_row"], r["rows"]), (0, self.config()["width"]))   # the whole model
            # every rank holds the same parameters, bit for bit: the spread over ranks is 0
            # (lecture_08.c: rank 0's line, its figures by name)
            spread = self.noted("spread", "world_size", kind="text", spawn=sid)
            self.assertEqual(len(spread), 1)
            f = spread[0][2]
            self.assertEqual((f["world_size"], f["spread"]), (world, 0.0), "ranks disagree within one run")
            # and trained: after more than one step they are not the one device's after step 0
            if steps > 1:
                self.assertIsNotNone(f["summaries(w, c->layers, buf, sizeof buf)"])
                self.assertNotEqual(f["summaries(w, c->layers, buf, sizeof buf)"], one[0][2])
        # on 2 ranks each rank shows its layer-0 gradient before and after the all-reduce: different, then equal
        sid = spawns[1]
        shown = [(s["rank"], r["data"]) for s, r in self.renderings("inspect") if s["spawn"] == sid]
        self.assertEqual(sorted(r for r, _ in shown), [0, 0, 1, 1])
        after = {r: d for r, d in shown}   # each rank's last: after the average
        self.assertEqual(after[0], after[1])
        first = {}
        for r, d in shown:
            first.setdefault(r, d)
        self.assertNotEqual(first[0], first[1])

    def test_ddp_buckets_and_no_sync_accumulation(self):
        one = self.one_device()
        c = self.config()
        spawns = self.by_spawn("ddp_buckets_main")
        self.assertEqual(len(spawns), 1)
        sid = spawns[0]
        order = self.noted("g->n", "g->order", kind="text", spawn=sid)   # lecture_08.c: rank 0's line
        self.assertEqual(len(order), 1)
        n_buckets = order[0][2]["g->n"]
        # buckets of 2 layers, the last layers first
        want = ["layers %d-%d" % (hi - 1, hi) for hi in range(c["layers"] - 1, 0, -2)]
        self.assertEqual(order[0][2]["g->order"].split(", "), want)
        self.assertEqual(n_buckets, len(want))
        rows = self.results(r"^DDP with buckets, 2 micro-batches$")
        self.assertEqual(len(rows), 4)
        for r in rows:
            self.assert_grad_tol(r)
            # no communication while accumulating; one all-reduce per bucket at the end
            self.assertEqual((r["calls_mb0"], r["calls_mb1"]), (0, n_buckets), r)
            self.assertLessEqual(r["grad_diff"], r["grad_tol"])
        # the loss at each step it runs (2 at most) is the float64 run's: the
        # averaged, accumulated gradient trained the model as one device does
        losses = [self.losses(r) for r in rows]
        steps = min(2, len(one))
        self.assertTrue(all(len(l) == steps for l in losses))
        for step in range(steps):
            self.assert_loss(sum(l[step] for l in losses) / 4, step, "DDP with buckets")

    def test_zero3_trains_like_one_device(self):
        one = self.one_device()
        c = self.config()
        spawns = self.by_spawn("zero3_main")
        self.assertEqual(len(spawns), 1)
        rows = self.results(r"^ZeRO-3 on 4 ranks$")
        self.assertEqual(len(rows), 4)
        # rank r holds rows [r w/4, (r+1) w/4) of every layer
        self.assertEqual([(r["first_row"], r["rows"]) for r in rows],
                         [(k * c["width"] // 4, c["width"] // 4) for k in range(4)])
        for r in rows:
            self.assert_grad_tol(r)
            self.assertTrue(math.isclose(r["trained_bound"], self.adamw_bound(), rel_tol=5e-3), r)
        losses = [self.losses(r) for r in rows]
        self.assertTrue(all(len(l) == len(one) for l in losses))
        for step in range(len(one)):
            self.assert_loss(sum(l[step] for l in losses) / 4, step, "ZeRO-3")
        for r in rows:   # every rank checks its piece of every layer, after the backward loop
            self.assertLessEqual(r["grad_diff"], r["grad_tol"])
            self.assertLessEqual(r["trained_diff"], r["trained_bound"])

    def test_zero_memory_table_and_bytes_held(self):
        c = self.config()
        P = c["layers"] * c["width"] ** 2
        # fp32 + AdamW: weights 4P, gradients 4P, two moments 8P; stage s divides
        # the first s of (moments, gradients, weights) by the 4 ranks
        want = {"DDP": (4 * P, 4 * P, 8 * P), "ZeRO-1": (4 * P, 4 * P, 2 * P),
                "ZeRO-2": (4 * P, P, 2 * P), "ZeRO-3": (P, P, 2 * P)}
        r = self.table(r"^model state per rank, 4 ranks$")
        cols = self.columns(r)
        self.assertEqual([(c["name"], c.get("unit")) for c in r["columns"]],
                         [("method", None), ("weights", "MB"), ("gradients", "MB"), ("AdamW state", "MB"),
                          ("total", "MB")])
        got = {row[0]: row[1:] for row in r["rows"]}
        self.assertEqual(sorted(got), sorted(want))
        for name, parts in want.items():
            for value, expected in zip(got[name], list(parts) + [sum(parts)]):
                self.assertTrue(math.isclose(value, expected / 1e6, rel_tol=1e-12), (name, value, expected))
        # what the ranks really hold, added up from their tensors
        for world in [1, 2, 4]:
            rows = self.results(r"^DDP on %d ranks?$" % world)
            self.assertEqual([r["state_bytes"] for r in rows], [16 * P] * world)
        rows = self.results(r"^ZeRO-3 on 4 ranks$")
        self.assertEqual([r["state_bytes"] for r in rows], [4 * P] * 4)

    def test_zero3_communicates_more_than_ddp(self):
        # Bytes each rank sent in one step, counted by the runtime, against the
        # ring's count worked out here for 4 ranks and layers of W = 4 width^2
        # bytes: DDP all-reduces every gradient (2 (p-1)/p W each); ZeRO-3
        # all-gathers every layer forward, every layer but 0 backward, and
        # reduce-scatters every gradient ((p-1)/p W each).
        c = self.config()
        W, L = 4 * c["width"] ** 2, c["layers"]
        ddp = self.results(r"^DDP on 4 ranks$")
        zero3 = self.results(r"^ZeRO-3 on 4 ranks$")
        for r in ddp:
            self.assertEqual((r["bytes"], r["calls"]), (L * 3 * W // 2, L))
        for r in zero3:
            self.assertEqual((r["bytes"], r["calls"]), ((3 * L - 1) * 3 * W // 4, 3 * L - 1))
        ratio = zero3[0]["bytes"] / ddp[0]["bytes"]
        self.assertAlmostEqual(ratio, (3 * L - 1) / (2 * L))
        self.assertTrue(1.3 <= ratio <= 1.5, ratio)   # about 1.5, as FSDP's 3 against DDP's 2
        # DDP on 1 rank sends nothing
        one = self.results(r"^DDP on 1 rank$")
        self.assertEqual(one[0]["bytes"], 0)
        note = [m for m in self.markdown() if m.startswith("The price is communication.")]
        self.assertEqual(len(note), 1)
        self.assertIn("%.3f times DDP's" % ratio, note[0])

    def tp_rows(self, function, name):
        """A tensor-parallel spawn's table of what its ranks handed back, each
        comparison with one device beside its recorded tolerance."""
        self.assertEqual(len(self.by_spawn(function)), 1)
        rows = self.results(r"^%s on 4 ranks " % re.escape(name))
        self.assertEqual(len(rows), 4)
        one = self.one_device()
        for r in rows:
            self.assertEqual(r["one_loss"], one[0][1])   # the one device's loss the ranks were given
            self.assertLessEqual(r["out_tol"], self.out_tol() * 10)   # the output's elements are O(1)
            self.assert_grad_tol(r)
            self.assert_loss(r["loss"], 0, name + " forward")
            self.assertLessEqual(r["out_diff"], r["out_tol"])
            self.assertLessEqual(r["grad_diff"], r["grad_tol"])
        return rows

    def test_tensor_parallel_forward_and_backward(self):
        rows = self.tp_rows("tensor_parallel_main", "column-only TP")
        width = self.config()["width"]
        self.assertEqual([r["first_col"] for r in rows], [k * width // 4 for k in range(4)])

    def test_megatron_matches_one_device_and_sends_less(self):
        c = self.config()
        rows = self.tp_rows("megatron_main", "Megatron TP")
        w = c["width"]
        self.assertEqual([r["first_col"] for r in rows], [k * w // 4 for k in range(4)])
        # Bytes each rank sent in one step, counted by the runtime, against the
        # ring's count worked out here: an activation is b = batch x width
        # floats; all-gather sends (p-1)/p b, all-reduce 2(p-1)/p b (p = 4).
        b, L = c["batch"] * c["width"] * 4, c["layers"]
        want = {"column-only TP": ("tensor_parallel_main", L * 3 * b // 4 + (L - 1) * 3 * b // 2, 2 * L - 1),
                "Megatron TP": ("megatron_main", (L - 1) * 3 * b // 2, L - 1)}
        for name, (function, nbytes, calls) in want.items():
            self.assertEqual(len(self.by_spawn(function)), 1)
            for r in self.results(r"^%s on 4 ranks " % name):
                self.assertEqual((r["bytes"], r["calls"]), (nbytes, calls), name)
        self.assertLess(want["Megatron TP"][1], want["column-only TP"][1])

    def test_pipeline_parallel_forward_backward_and_bubble(self):
        c = self.config()
        spawns = self.by_spawn("pipeline_main")   # the spawns whose ranks made steps: the real runs'
        runs = [("GPipe", 2), ("GPipe", 4), ("1F1B", 4)]
        self.assertEqual(len(spawns), len(runs))
        # the modelled runs make no step of their own (their figures come back to the lecture): their spawns
        modelled = [s for s in self.trace["spawns"] if any(f["function"] == "run_modelled_pipelines" for f in s["stack"])]
        # a shape is spawned again while its quickest pass misses the bound, at most 3 times (the table's
        # "modelled: spawns"), and only then
        pairs = self.pipeline_pairs()
        spawned = [pairs[(sch, p, m)]["modelled: spawns"] for p, m, sch in MODELLED_SHAPES]
        self.assertTrue(all(1 <= n <= 3 for n in spawned), spawned)
        self.assertEqual([s["world_size"] for s in modelled],
                         [p for (p, _, _), n in zip(MODELLED_SHAPES, spawned) for _ in range(n)])
        for sid, (schedule, world) in zip(spawns, runs):
            # lecture_08.c, pipeline_rank: the last stage's line, its figures by name
            loss = self.noted("s->loss", "a->first_loss", kind="text", spawn=sid)
            self.assertEqual(len(loss), 1)
            # the timeline shows each forward and backward: no note per micro-batch
            self.assertEqual(self.spawn_texts(sid, r"^Rank \d: %s: (forward|backward) of micro-batch" % schedule), [])
            step, _, f = loss[0]
            self.assertEqual((step["rank"], f["rank"], f["SCHEDULE_NAMES[a->schedule]"], f["s->m"]),
                             (world - 1, world - 1, schedule, 8))
            # the pipeline's own batch (see pipeline_config()): its loss is the mean over the
            # micro-batches, one device's over the whole batch; float32 sums in two orders
            self.assertTrue(math.isclose(f["s->loss"], f["a->first_loss"], rel_tol=1e-5), f)
            self.assertLessEqual(f["s->out_diff"], f["output_tolerance(c) * largest(s->expected)"])
            # rank 0's table: a row per stage, its layers and its gradients against one device's
            rows, _ = self.rank_rows(sid, r"^%s on %d stages" % (schedule, world))
            layers = []
            for r in rows:
                got = re.match(r"^layers? (\d)(?:-(\d))?$", r["layers"])
                layers += range(int(got.group(1)), int(got.group(2) or got.group(1)) + 1)
                self.assertLessEqual(r["gradients over the micro-batches: max |PP - one device|"], r["tolerance"])
                self.assertTrue(0 < r["tolerance"] <= self.grad_tol(PIPELINE_DEPTH * c["layers"]))
            self.assertEqual(layers, list(range(PIPELINE_DEPTH * c["layers"])))
        # both conventions, worked out here
        table = self.table(r"^the bubble two ways")
        self.assertEqual([c["name"] for c in table["columns"]],
                         ["stages p", "micro-batches m", "of the total (p - 1) / (m + p - 1)", "of the ideal (p - 1) / m"])
        self.assertEqual([row[:2] for row in table["rows"]], [[2, 8], [4, 8], [4, 32]])
        for p, m, total, ideal in table["rows"]:
            self.assertTrue(math.isclose(total, (p - 1) / (m + p - 1), rel_tol=1e-12))
            self.assertTrue(math.isclose(ideal, (p - 1) / m, rel_tol=1e-12))
        self.assertTrue(any("Megatron" in t and "Playbook" in t for t in self.markdown()))
        headings = [m for m in self.markdown() if m.startswith(("### GPipe, ", "### 1F1B, "))]
        self.assertEqual(headings, ["### GPipe, 2 stages, 8 micro-batches: bubble 11.1% of the total",
                                    "### GPipe, 4 stages, 8 micro-batches: bubble 27.3% of the total",
                                    "### 1F1B, 4 stages, 8 micro-batches: bubble 27.3% of the total"])

    def test_pipeline_timelines(self):
        """The timeline each schedule plots, its real run beside its modelled
        twin: the stamps obey the data's dependencies, the order is the
        schedule's, the modelled spans are marked as such, and the bubble
        printed is the one these stamps give."""
        m = 8
        plots = {r["spec"]["title"]: r["spec"] for _, r in self.renderings("plot")
                 if "timeline" in r["spec"].get("title", "")}
        self.assertEqual(sorted(plots), sorted(["%s timeline, %d stages, 8 micro-batches: real and modelled compute"
                                                % run for run in (("GPipe", 2), ("GPipe", 4), ("1F1B", 4))]))
        pairs = self.pipeline_pairs()
        for title, spec in plots.items():
            schedule, p = title.split()[0], int(title.split()[2])
            self.assertIn("vega-lite/v6", spec["$schema"])
            self.assertEqual(spec["encoding"]["x"]["title"], "time (ms, from each pass's first start)")
            for twin in ("real", "modelled"):
                values = [v for v in spec["data"]["values"] if v["row"].startswith(twin + ": ")]
                # modelled compute is marked: the flag and the chart's encoding
                self.assertTrue(all(v.get("modelled", False) == (twin == "modelled") for v in values), title)
                self.assertEqual({v["compute"] for v in values}, {"modelled" if twin == "modelled" else "measured"})
                ev = [{"stage": int(v["row"].split()[-1]), "pass": v["series"],
                       "micro_batch": int(v["label"].split()[1]), "start_ms": v["start"], "end_ms": v["end"]}
                      for v in values]
                idle, busy, span = self.check_timeline(ev, schedule, p, m, (title, twin))
                if twin == "real":
                    found = [r for _, r in self.tables(r"^%s on %d stages \(quickest of \d+ runs\): span " % (schedule, p))]
                    self.assertEqual(len(found), 1)
                    table = found[0]
                    self.assertEqual([row[0] for row in table["rows"]], list(range(p)))
                    for row, want in zip(table["rows"], idle):
                        self.assertAlmostEqual(row[1], want, delta=1e-4)   # float32 stamps
                    # the caption's figures by the lecture's names (lecture_08/pipeline.c, pipeline_run's res)
                    f = tracecheck.named(table)
                    self.assertEqual((f["SCHEDULE_NAMES[schedule]"], f["s->world"]), (schedule, p))
                    # the bubble: the busiest stage's idle fraction, from the stamps (float32 in the trace)
                    self.assertAlmostEqual(f["res.bubble"], 1 - max(busy) / span, delta=1e-4)
                    self.assertAlmostEqual(f["res.formula"], (p - 1) / (m + p - 1), places=12)
                    self.assertAlmostEqual(f["res.mean"], sum(idle) / p, delta=1e-4)
                    self.assertLessEqual(f["res.bubble"], f["res.mean"] + 1e-9)
                    # the replay's share: the bubble less the replayed bubble
                    self.assertAlmostEqual(f["res.bubble - res.replayed"], f["res.bubble"] - f["res.replayed"],
                                           places=12)
                    # activations held at once: all m in GPipe, at most p - r in 1F1B
                    counts = [row[2] for row in table["rows"]]
                    self.assertEqual(counts, [m] * p if schedule == "GPipe" else [min(m, p - r) for r in range(p)])
                # the pairs table's figure for this run is the one these stamps give
                row = pairs[(schedule, p, m)]
                self.assertAlmostEqual(row[twin + ": measured bubble"], 1 - max(busy) / span, delta=1e-4)

    def check_timeline(self, ev, schedule, p, m, what):
        """Dependencies and order of one run's stamps; (each stage's idle fraction, busy time, span)."""
        self.assertEqual(len(ev), 2 * m * p, what)
        at = {(e["stage"], e["pass"], e["micro_batch"]): e for e in ev}
        self.assertEqual(len(at), 2 * m * p)   # each pass of each micro-batch once per stage
        # Stamps come from one clock (CLOCK_MONOTONIC, shared by the ranks'
        # processes); stored as float32 ms, they are exact to well under
        # 0.01 ms at these magnitudes (a modelled pass lasts 2 s at most).
        eps = 0.01
        for r in range(p):
            for k in range(m):
                f, b = at[(r, "forward", k)], at[(r, "backward", k)]
                self.assertLessEqual(f["start_ms"], f["end_ms"])
                self.assertLessEqual(f["end_ms"], b["start_ms"] + eps)    # backward after its forward
                if r > 0:   # a stage starts a forward after the stage before finished it
                    self.assertGreaterEqual(f["start_ms"] + eps, at[(r - 1, "forward", k)]["end_ms"], what)
                if r < p - 1:   # and a backward after the stage after finished it
                    self.assertGreaterEqual(b["start_ms"] + eps, at[(r + 1, "backward", k)]["end_ms"], what)
            order = [(e["pass"][0], e["micro_batch"]) for e in sorted((e for e in ev if e["stage"] == r),
                                                                       key=lambda e: e["start_ms"])]
            if schedule == "GPipe":
                want = [("f", k) for k in range(m)] + [("b", k) for k in reversed(range(m))]
            else:
                warm = min(p - r - 1, m)
                want = [("f", k) for k in range(warm)]
                for k in range(warm, m):
                    want += [("f", k), ("b", k - warm)]
                want += [("b", k) for k in range(m - warm, m)]
            self.assertEqual(order, want, (what, r))
        span = max(e["end_ms"] for e in ev) - min(e["start_ms"] for e in ev)
        busy = [sum(e["end_ms"] - e["start_ms"] for e in ev if e["stage"] == r) for r in range(p)]
        idle = [1 - b / span for b in busy]
        self.assertTrue(0 < sum(idle) / p < 1)
        return idle, busy, span

    def pipeline_pairs(self):
        """{(schedule, p, m): row} of the table of real and modelled bubbles."""
        table = self.table(r"^Pipeline bubbles, real and modelled compute")
        return {(r["schedule"], r["stages p"], r["micro-batches m"]): r for r in self.row_dicts(table)}

    def test_modelled_pipelines_show_the_schedule(self):
        """Six modelled runs (GPipe and 1F1B on 2 and 4 stages with 8
        micro-batches, on 4 with 32): each bubble within 10% of the formula,
        1F1B's stage 0 holding p activations where GPipe's holds m, each
        checked by the lecture; the real runs beside them."""
        pairs = self.pipeline_pairs()
        self.assertEqual(sorted(pairs), sorted((s, p, m) for p, m, s in MODELLED_SHAPES))
        lateness = {}
        for (schedule, p, m), row in pairs.items():
            self.assertAlmostEqual(row["formula (p - 1) / (m + p - 1)"], (p - 1) / (m + p - 1), delta=1e-12)
            # within 10% of the formula, plus the pass's lateness over its span (lectures/lecture_08/pipeline.h): the bound
            # recomputed here from the row's own figures
            formula, bubble = row["formula (p - 1) / (m + p - 1)"], row["modelled: measured bubble"]
            late, span = row["modelled: late beyond 0.5 ms, summed"], row["modelled: span"]
            self.assertGreaterEqual(late, 0)
            upper, lower = 1.1 * formula + late / span, 0.9 * formula - late / span
            self.assertAlmostEqual(row["modelled: bound, (1 + 0.1) formula + late / span"], upper, delta=1e-9)
            self.assertAlmostEqual(row["modelled: lower bound, (1 - 0.1) formula - late / span"], lower, delta=1e-9)
            self.assertGreaterEqual(bubble, lower)
            self.assertLessEqual(bubble, upper)
            lateness[(schedule, p, m)] = late
            self.assertAlmostEqual(row["modelled / formula - 1"],
                                   row["modelled: measured bubble"] / row["formula (p - 1) / (m + p - 1)"] - 1,
                                   delta=1e-9)
            self.assertEqual(row["modelled: stage 0's activations held"], m if schedule == "GPipe" else p)
            real = (schedule, p) in (("GPipe", 2), ("GPipe", 4), ("1F1B", 4)) and m == 8
            self.assertEqual(row["real: measured bubble"] is not None, real, (schedule, p, m))
        checks = [r for _, r in self.renderings("check") if r["what"].startswith("modelled ") and
                  ("bubble" in r["what"] or "p - s" in r["what"])]
        self.assertEqual(len(checks), len(MODELLED_SHAPES) + 3)   # a bubble each, the held activations of each 1F1B
        self.assertTrue(all(r["passed"] for r in checks), [r["data"] for r in checks if not r["passed"]])
        self.assertIs(self.trace["meta"]["modelled_compute"], True)
        # each modelled run's spans are in the trace: 2 m operations a stage, the asked times
        # (not the run recorded for the replay at more stages, lecture_08/at_scale.c: its spawn has a pipeline twin)
        replayed = {sp["id"] for sp in self.trace["spawns"]
                    if any(t.get("rule") == "pipeline" for t in sp.get("twin", {}).values())}
        spans = [x for x in self.trace["modelled"]
                 if x.get("function") in ("stage_forward", "stage_backward") and x["spawn"] not in replayed]
        pairs = self.pipeline_pairs()
        per_pass = sum(2 * m * p * pairs[(sch, p, m)]["modelled: spawns"] for p, m, sch in MODELLED_SHAPES)
        passes = len(spans) // per_pass
        self.assertGreaterEqual(passes, 1)
        self.assertEqual(len(spans), passes * per_pass)
        self.assertEqual({x["ms"] for x in spans}, {MODELLED_F_MS, 2 * MODELLED_F_MS})
        # a pass's lateness, recomputed from the modelled half of each charted timeline (the quickest pass of the
        # 8-micro-batch twins): each operation's time beyond its asked time, and its start beyond the end of its
        # stage's previous operation and of the operation it waits for on the neighbouring stage, each beyond 0.5 ms
        # each pipeline's timeline (lecture_08/pipeline.c, pipelines_chart), named by its title's arguments
        for _, r, f in self.noted("schedule", "real->stages", "real->m", kind="plot"):
            spec = r["spec"]
            sch, p, m = f["schedule"], f["real->stages"], f["real->m"]
            ops = {}
            for v in spec["data"]["values"]:
                if v["row"].startswith("modelled: stage "):
                    st = int(v["row"].split()[-1])
                    ops.setdefault(st, []).append((v["start"], v["end"], v["series"] == "backward",
                                                   int(v["label"].split()[-1])))
            done = {(st, bw, k): e for st, lst in ops.items() for _, e, bw, k in lst}
            late = 0.0
            for st, lst in ops.items():
                lst.sort()
                for i, (start, end, bw, k) in enumerate(lst):
                    ready = lst[i - 1][1] if i else start
                    if not bw and st > 0:
                        ready = max(ready, done[(st - 1, False, k)])
                    if bw and st < p - 1:
                        ready = max(ready, done[(st + 1, True, k)])
                    late += max(0.0, start - ready - 0.5)
                    late += max(0.0, end - start - (2 if bw else 1) * MODELLED_F_MS - 0.5)
            # the chart's times are the stamps as floats, from each pass's first start: a few ulps of 2 s each
            self.assertAlmostEqual(lateness[(sch, p, m)], late, delta=0.01 + 1e-4 * 4 * m * p, msg=(sch, p, m))


class CommittedPipeline(unittest.TestCase):
    """The pipeline as the committed trace (traces/lecture_08.json) shows it:
    stages overlap, 1F1B saves memory on stage 0, and each bubble sentence
    agrees with the numbers beside it, and the gap to the formula is split
    by a replay of the schedule with the measured times (recomputed here from
    the timelines)."""

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "traces", "lecture_08.json")) as f:
            cls.trace = json.load(f)
        cls.rend = [r for s in cls.trace["steps"] for r in s["renderings"]]

    def timelines(self):
        """{title: the real run's spans, rows named "stage r"}: the chart's real half."""
        return {r["spec"]["title"]: [dict(v, row=v["row"][len("real: "):]) for v in r["spec"]["data"]["values"]
                                     if v["row"].startswith("real: ")]
                for r in self.rend if r["type"] == "plot" and "timeline" in r["spec"].get("title", "")}

    def test_modelled_stages_compute_at_once(self):
        """In every modelled twin of a committed timeline, stage 1 starts
        micro-batch 0 while stage 0 computes micro-batch 1: the schedule, where
        each stage has a device of its own."""
        plots = [r["spec"]["data"]["values"] for r in self.rend
                 if r["type"] == "plot" and "timeline" in r["spec"].get("title", "")]
        self.assertEqual(len(plots), 3)
        for values in plots:
            at = {(v["row"], v["series"], v["label"]): v for v in values}
            f1_on_0 = at[("modelled: stage 0", "forward", "micro-batch 1")]
            f0_on_1 = at[("modelled: stage 1", "forward", "micro-batch 0")]
            self.assertLess(f0_on_1["start"], f1_on_0["end"])
            self.assertLess(f1_on_0["start"], f0_on_1["end"])

    def test_1f1b_holds_p_on_stage_0_where_gpipe_holds_m(self):
        held = {}
        # each real pipeline's table (lecture_08/pipeline.c), named by its caption's own arguments
        for _, r, a in tracecheck.with_args([(None, r) for r in self.rend], "SCHEDULE_NAMES[schedule]", "s->world"):
            held[(a["SCHEDULE_NAMES[schedule]"], a["s->world"])] = r["rows"][0][2]
        self.assertEqual(held, {("GPipe", 2): 8, ("GPipe", 4): 8, ("1F1B", 4): 4})

    def test_bubble_sentences_agree_with_their_numbers(self):
        # each bubble note's figures by the lecture's own names (lecture_08.c, say_bubble)
        said = tracecheck.with_args([(None, r) for r in self.rend], "r.bubble", "r.formula", "r.together_ms")
        self.assertEqual(len(said), 3)
        for _, r, a in said:
            text = r["data"]
            schedule, p = a["SCHEDULE_NAMES[schedule]"], a["stages"]
            measured, formula = a["r.bubble"], a["r.formula"]
            self.assertAlmostEqual(formula, (p - 1) / (8 + p - 1), places=12)
            load, cores = a["r.load"], a["r.cores"]
            off = measured / formula - 1
            slack = 1e-9   # the figures are the lecture's own doubles: its choice of words used the same
            within = "Within 15% of the formula" in text
            if p > cores:   # said whatever the figure: both idle and busy times are this machine's there
                self.assertIn("ranks outnumber the cores", text)
            if abs(off) < 0.15 - slack:
                self.assertTrue(within, text)
            if abs(off) > 0.15 + slack:
                self.assertFalse(within, text)
                self.assertIn("Larger than the formula" if off > 0 else "Smaller than the formula", text)
                if p > cores:
                    self.assertIn("ranks outnumber the cores", text)
                elif off < 0:
                    self.assertIn("the stage that set the pace was the slower", text)
                elif load > cores + p:
                    self.assertIn("busy with other work", text)
                else:
                    self.assertIn("the replay below splits the gap", text)
            # Whether stages 0 and 1 computed at once, and for how long, is measured, not assumed (on a machine
            # whose ranks outnumber its cores they may take turns): the sentence says what the timeline shows.
            title = [t for t in self.timelines() if t.startswith("%s timeline, %d stages" % (schedule, p))][0]
            values = self.timelines()[title]
            s0 = [v for v in values if v["row"] == "stage 0"]
            s1 = [v for v in values if v["row"] == "stage 1"]
            both = sum(max(0, min(a["end"], b["end"]) - max(a["start"], b["start"])) for a in s0 for b in s1)
            # the timeline's times are rounded to 1 us in the trace, the lecture's are the stamps themselves
            self.assertAlmostEqual(a["r.together_ms"], both, delta=0.01 + 0.001 * both)
            self.assertAlmostEqual(a["r.together_ms / r.busy0_ms"], both / sum(v["end"] - v["start"] for v in s0),
                                   delta=0.001)
            self.assertAlmostEqual(a["(m - 1.0) / m"], 7 / 8, places=12)
            first1 = min(v["start"] for v in s1 if v["series"] == "forward")
            last0 = max(v["end"] for v in s0 if v["series"] == "forward")
            self.assertIn("began its first forward before" if first1 < last0 else "began only after", text)

    @staticmethod
    def replay(values, stages):
        """The schedule replayed with each operation's measured time and no
        time between operations: each stage in the order it ran its
        operations; a forward waits for the previous stage's forward of its
        micro-batch, a backward for the next stage's backward."""
        rows = {r: sorted([v for v in values if v["row"] == "stage %d" % r], key=lambda v: v["start"])
                for r in range(stages)}
        done, free, busy = {}, [0.0] * stages, [0.0] * stages
        nxt = [0] * stages
        while any(nxt[r] < len(rows[r]) for r in range(stages)):
            moved = False
            for r in range(stages):
                while nxt[r] < len(rows[r]):
                    v = rows[r][nxt[r]]
                    b, k = v["series"] == "backward", v["label"]
                    src = r + 1 if b else r - 1
                    if 0 <= src < stages and (src, b, k) not in done:
                        break
                    start = max(free[r], done.get((src, b, k), 0.0))
                    free[r] = done[(r, b, k)] = start + (v["end"] - v["start"])
                    busy[r] += v["end"] - v["start"]
                    nxt[r] += 1
                    moved = True
            assert moved, "no stage could go on"
        span = max(free)
        return 1 - max(busy) / span, sum(1 - x / span for x in busy) / stages

    @staticmethod
    def idle(values, stages):
        """The busiest stage's idle fraction and the mean over the stages, as measured."""
        span = max(v["end"] for v in values) - min(v["start"] for v in values)
        busy = [sum(v["end"] - v["start"] for v in values if v["row"] == "stage %d" % r) for r in range(stages)]
        return 1 - max(busy) / span, sum(1 - b / span for b in busy) / stages

    def test_the_gap_to_the_formula_is_split_by_a_replay(self):
        # the replay notes' and the bubble notes' figures by the lecture's own names (lecture_08/pipeline.c,
        # note_replay; lecture_08.c, say_bubble)
        rend = [(None, r) for r in self.rend]
        said = tracecheck.with_args(rend, "r->replayed", "r->bubble - r->replayed", "r->op_ms[0][0]")
        bubbles = tracecheck.with_args(rend, "r.bubble", "r.formula", "r.together_ms")
        plots = list(self.timelines().items())
        self.assertEqual((len(said), len(bubbles), len(plots)), (3, 3, 3))
        for (_, r, a), (_, _, b), (title, values) in zip(said, bubbles, plots):
            stages = a["r->stages"]
            self.assertEqual(title.split(",")[1].strip(), "%d stages" % stages)
            measured = b["r.bubble"]
            replayed, replayed_mean = self.replay(values, stages)
            busiest, mean = self.idle(values, stages)
            # the timeline's times are rounded to 1 us in the trace: far below 0.001 of a span of tens of ms
            self.assertAlmostEqual(a["r->replayed"], replayed, delta=0.001, msg=(title, r["data"]))
            self.assertAlmostEqual(a["r->bubble - r->replayed"], measured - replayed, delta=0.001)
            self.assertEqual(a["r->bubble"], measured)   # the same double in both notes
            self.assertAlmostEqual(measured, busiest, delta=0.001)   # the bubble is the busiest stage's idle time
            self.assertAlmostEqual(a["r->mean"], mean, delta=0.001)
            self.assertAlmostEqual(a["r->replayed_mean"], replayed_mean, delta=0.001)
            # Nothing between operations can only shorten the span: the replay
            # is never above what was measured, in either measure.
            self.assertLessEqual(replayed, measured + 0.001, (title, replayed, measured))
            self.assertLessEqual(replayed_mean, mean + 0.001, (title, replayed_mean, mean))
            # the stages' mean operation times, said after the replay, are the timeline's (whose times are rounded
            # to 1 us)
            self.assertEqual(a["r->stages - 1"], stages - 1)
            for name, (row, series) in [("r->op_ms[0][0]", ("stage 0", "forward")),
                                        ("r->op_ms[0][1]", ("stage 0", "backward")),
                                        ("r->op_ms[1][0]", ("stage %d" % (stages - 1), "forward")),
                                        ("r->op_ms[1][1]", ("stage %d" % (stages - 1), "backward"))]:
                d = [v["end"] - v["start"] for v in values if v["row"] == row and v["series"] == series]
                self.assertAlmostEqual(a[name], sum(d) / len(d), delta=0.002)


def note_lines(text):
    """The 0-based numbers of the lines of C source `text` that are the text of
    a note(), note_verbatim() or see() call: from the call's name to its
    closing parenthesis, with strings, character constants and comments read
    as such (as scripts/note_share.py reads note() calls)."""
    lines, i, n = set(), 0, len(text)
    call = re.compile(r"(?<![A-Za-z0-9_])(note|note_verbatim|see)\s*\(")

    def skip_quoted(i):
        q, i = text[i], i + 1
        while i < n and text[i] != q:
            i += 2 if text[i] == "\\" else 1
        return i + 1

    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] in "\"'":
            i = skip_quoted(i)
        else:
            m = call.match(text, i)
            if not m or (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
                i += 1
                continue
            j, depth = m.end(), 1
            while j < n and depth:
                if text[j] in "\"'":
                    j = skip_quoted(j)
                    continue
                if text.startswith("/*", j):
                    j = text.find("*/", j) + 2
                    continue
                depth += text[j] == "("
                depth -= text[j] == ")"
                j += 1
            lines.update(range(text.count("\n", 0, i), text.count("\n", 0, j) + 1))
            i = j
    return lines


class LessonShare(unittest.TestCase):
    """lecture_08.c holds its lesson, not plumbing: at most 1200 lines, at
    least 40% of them the text of notes (timing loops, tables of results and
    the one-device run live in lectures/lecture_08 and lectures/lib); and its committed trace stays
    one sitting, at most 350 steps."""

    def test_counter_counts_calls_not_mentions(self):
        src = ('int x;\n/* note("no") */\nnote("a %d",\n     1);\nchar *s = "see(";\n'
               'note_verbatim("b");\nsee("u",\n    "t");\nkeynote(1);\n')
        self.assertEqual(sorted(note_lines(src)), [2, 3, 5, 6, 7])

    def test_lines_and_their_share_of_notes(self):
        with open(os.path.join(ROOT, "lectures", "lecture_08.c")) as f:
            text = f.read()
        total, notes = text.count("\n"), len(note_lines(text))
        self.assertLessEqual(total, 1200, "lecture_08.c has %d lines" % total)
        self.assertGreaterEqual(notes / total, 0.40, "%d of %d lines are notes" % (notes, total))

    def test_committed_trace_is_one_sitting(self):
        with open(os.path.join(ROOT, "traces", "lecture_08.json")) as f:
            steps = len(json.load(f)["steps"])
        self.assertLessEqual(steps, 350, "traces/lecture_08.json has %d steps" % steps)


class Lecture08(Run, tracecheck.WholeTrace, Numbers, unittest.TestCase):
    """The lecture as this machine's BLAS runs it: everything."""
    SECTIONS = SECTIONS

    # ---- the trace as a whole ----

    def test_library_sources_shown(self):
        # The model lives in lectures/lib/mlp.c; no stack names it (it never
        # calls note()), yet the viewer must be able to show it, as it is on disk;
        # so must the lecture's own folder's code (lectures/lecture_08/).
        for path in ("lectures/lib/mlp.c", "lectures/lib/mlp.h", "lectures/lecture_08.c",
                     "lectures/lecture_08/train.c", "lectures/lecture_08/train.h"):
            self.assertIn(path, self.trace["files"])
            with open(os.path.join(ROOT, path)) as f:
                self.assertEqual(self.trace["files"][path], f.read(), path)
        self.assertFalse(any(p.startswith("runtime/") for p in self.trace["files"]))

    def test_corrected_sentences(self):
        text = self.markdown_text()
        self.assertIn("SPMD programs (single program, multiple data)", text)
        self.assertNotIn("SIMD", text)
        # 900 GB/s is both directions of NVLink together; busbw compares with one
        self.assertIn("900 GB/s in total, counting both directions, so 450 GB/s each way", text)
        self.assertNotIn("~200 MB/s", text)
        self.assertIn("The ring meets that bound exactly", text)
        self.assertIn("among algorithms that only move data between ranks", text)
        self.assertIn("In-network reduction (SHARP, above) does better", text)
        self.assertNotIn("accumulation steps", text.replace("gradient_accumulation_steps", ""))
        self.assertIn("no devices ship with it yet", text)
        self.assertIn("HDR InfiniBand", text)
        self.assertNotIn("nearest thing a CPU has to a second queue", text)
        for api in ("dist_isend", "dist_irecv", "dist_wait", "dist_barrier"):
            self.assertIn("`%s`" % api, text.split("## NCCL")[0])
        self.assertNotIn("equally good implementations reach the same busbw", text)
        self.assertNotIn("then one optimizer step", text)
        self.assertIn("all m of them, the whole batch's activations", text)
        self.assertIn("*Interleaved* 1F1B", text)
        self.assertIn("twice per layer per step", text)
        # sizes from the benchmark tables are MiB, never "MB" for 2^20 bytes
        self.assertIsNone(re.search(r"\d MB\b", "\n".join(m for m in self.markdown() if "busbw" in m)))
        every = text + "\n".join(m.string for _, m in self.texts())
        self.assertNotIn("(s)", every)           # "1 layer(s)", "rank(s)"
        self.assertIsNone(re.search(r"layers (\d+)-\1\b", every))   # "layers 0-0"

    def test_diagrams_and_original_figures(self):
        images = [r for _, r in self.renderings("image")]
        local = {r["src"] for r in images if not r["remote"]}
        for name in COLLECTIVES + ["ring_vs_tree", "memory_hierarchy", "parallelism",
                                   "zero_stages", "pipeline", "gpu", "pcie_ethernet", "rdma",
                                   "nvlink_generations", "nvswitch", "sharp", "streams"]:
            src = "assets/lecture_08_%s.svg" % name
            self.assertIn(src, local)
            self.assertTrue(os.path.exists(os.path.join(ROOT, src)), src)
        # Nothing is hot-linked: every figure is ours, drawn in assets/ (an offline
        # reader sees it); the originals stay as titled links.
        self.assertEqual([r["src"] for r in images if r["remote"]], [])
        for src in local:
            with open(os.path.join(ROOT, src)) as f:
                svg = f.read()
            self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"), src)
            self.assertNotIn("http://", svg.replace("http://www.w3.org/2000/svg", ""), src)
        titled = {r["url"]: r.get("title") for _, r in self.renderings("link")}
        for host in ("miro.medium.com", "media.springernature.com", "lambdalabs.com"):
            self.assertTrue(any(host in u and t for u, t in titled.items()), host)
        self.assertEqual(sum(1 for u, t in titled.items() if "developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink"
                             in u and t), 3)
        links = {r["url"] for _, r in self.renderings("link")}
        for fig in ["broadcast", "scatter", "gather", "reduce", "all_gather", "all_reduce"]:
            self.assertIn("https://pytorch.org/tutorials/_images/%s.png" % fig, links)
        self.assertIn("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/_images/reducescatter.png",
                      links)

    def test_further_reading_points_into_the_series(self):
        """The reading list: the series' deeper lectures named, and every
        outside source a titled link (one step each)."""
        text = self.markdown_text()
        after = text.split("## Further reading", 1)[1]
        for lecture in ("lecture_collectives", "lecture_ddp", "lecture_scaling", "lecture_gpu"):
            self.assertIn(lecture, after)
        titled = {r["url"]: r.get("title") for _, r in self.renderings("link")}
        for url in ("https://arxiv.org/pdf/2304.11277.pdf", "https://github.com/NVIDIA/Megatron-LM",
                    "https://github.com/EleutherAI/gpt-neox", "https://github.com/stanford-crfm/levanter",
                    "https://pytorch.org/tutorials/intermediate/dist_tuto.html",
                    "https://en.wikipedia.org/wiki/InfiniBand"):
            self.assertTrue(titled.get(url), url)

    def test_our_hardware(self):
        commands = [r.get("command", "") for _, r in self.renderings("text")]
        if self.trace["meta"]["gpus"] > 0:
            self.assertTrue(any("nvidia-smi topo -m" in c for c in commands))
        else:
            self.assertTrue(any("lstopo" in c for c in commands), commands)

    # ---- collectives on 4 ranks ----

    def examples(self, label):
        """rank -> list of tensors printed on the `label` line, for every rank."""
        found = {}
        for step, m in self.texts(r"^Rank \d \[%s\]" % re.escape(label), 4):
            self.assertEqual(int(m.string[5]), step["rank"])
            found[step["rank"]] = numbers(m.string)
        self.assertEqual(sorted(found), [0, 1, 2, 3], label)
        return found

    def test_all_reduce_example(self):
        before = self.examples("before all-reduce")
        after = self.examples("after all-reduce")
        total = [sum(before[r][0][i] for r in range(4)) for i in range(4)]
        self.assertEqual(total, [6, 10, 14, 18])
        for r in range(4):
            self.assertEqual(before[r][0], [r + i for i in range(4)])
            self.assertEqual(after[r][0], total)
        line = [m.string for _, m in self.texts(r"^Rank 0 \[after all-reduce\]", 4)][0]
        self.assertIn("tensor([ 6., 10., 14., 18.]", line)

    def test_reduce_scatter_and_all_gather_example(self):
        before = self.examples("before reduce-scatter")
        after = self.examples("after reduce-scatter")
        for r in range(4):
            self.assertEqual(before[r], [[r + i for i in range(4)], [0.0]])
            self.assertEqual(after[r][0], before[r][0])           # the input is untouched
            self.assertEqual(after[r][1], [[6, 10, 14, 18][r]])    # rank r keeps piece r of the sum
        gather_before = self.examples("before all-gather")
        gather_after = self.examples("after all-gather")
        for r in range(4):
            self.assertEqual(gather_before[r], [[[6, 10, 14, 18][r]], [0, 0, 0, 0]])
            self.assertEqual(gather_after[r], [[[6, 10, 14, 18][r]], [6, 10, 14, 18]])
        ring = self.examples("after ring all-reduce")
        for r in range(4):
            self.assertEqual(ring[r], [[6, 10, 14, 18]])

    # ---- benchmarking ----

    def test_predictions_hold_what_follows(self):
        """Three questions (predict()): each one's hidden value is the number the
        table or note after it states, read from there, not from the question."""
        asked = [(s, r) for s, r in self.renderings("predict") if "simulated" not in r["question"].lower()]
        self.assertEqual(len(asked), 3, [r["question"][:60] for _, r in asked])
        by_unit = {r["unit"]: (s, r) for s, r in asked}
        self.assertEqual(sorted(by_unit), ["", "GB/s", "bytes"])
        # busbw: the last row of the 2-rank all-reduce table, in the same spawn
        step, r = by_unit["GB/s"]
        self.assertEqual((step["rank"], step["world_size"]), (0, 2))
        cols = self.columns(self.table(r"^all-reduce on 2 ranks$"))
        self.assertTrue(tracecheck.same_double(r["value"], cols["busbw"][-1]), (r["value"], cols["busbw"][-1]))
        self.assertIn("%g MiB" % cols["size"][-1], r["question"])
        # ZeRO-3's bytes: rank 0's count in the table after its spawn; 11 calls of (p - 1) / p of a 1 MiB layer
        step, r = by_unit["bytes"]
        spawn = [x for x in self.trace["spawns"] if x["id"] == step["spawn"]]
        self.assertEqual(spawn[0]["stack"][-1]["function"], "ddp_zero3")   # asked inside ZeRO-3's spawn
        rows = self.results(r"^ZeRO-3 on 4 ranks$")
        self.assertEqual(r["value"], rows[0]["bytes"])
        p, layers, width = map(int, re.search(r"\((\d) ranks, (\d) layers of (\d+) x \d+ floats\)",
                                              r["question"]).group(1, 2, 3))
        self.assertEqual((p, layers, width), (4, self.config()["layers"], self.config()["width"]))
        # The hint describes the code's calls, and its arithmetic gives the answer: gathers of every layer
        # forward and of every layer but layer 0 backward, a reduce-scatter per layer: 3 L - 1 calls, each
        # (p - 1) / p of a layer; the table's count of calls says the same.
        self.assertIn("The forward makes %d all-gathers (every layer, each freed after use); the backward %d "
                      "all-gathers (every layer but layer 0, again) and %d reduce-scatters (every layer's gradient)."
                      % (layers, layers - 1, layers), r["question"])
        self.assertEqual(r["value"], (layers + (layers - 1) + layers) * (p - 1) * width * width * 4 // p)
        self.assertEqual(rows[0]["calls"], layers + (layers - 1) + layers)
        # the bubble: the 2-stage note's measured figure, the same double (lecture_08.c, say_bubble)
        step, r = by_unit[""]
        bubble = [a for _, _, a in self.noted("r.bubble", "r.formula") if a["stages"] == 2]
        self.assertEqual(len(bubble), 1)
        # predict writes the fewest digits that read back, cJSON 15 when they read back within 2^-52
        self.assertTrue(tracecheck.same_double(r["value"], bubble[0]["r.bubble"]), (r["value"], bubble))

    def test_benchmark_bandwidths(self):
        """The tables' values, as the ranks computed them: algbw = S / t with S
        the whole message (for reduce-scatter the whole input), busbw = algbw
        times the operation's factor; the busbw chart plots the same values."""
        seen, busbw = set(), {}
        # lecture_08/collective_bench.c, bench_table: each table named by its caption's arguments
        for _, r, f in self.noted("op", "world_size", kind="table"):
            op, n = f["op"], f["world_size"]
            seen.add((op, n))
            self.assertEqual([(c["name"], c.get("unit")) for c in r["columns"]],
                             [("size", "MiB"), ("time", "ms"), ("algbw", "GB/s"), ("busbw", "GB/s")])
            factor = 2 * (n - 1) / n if op == "all-reduce" else (n - 1) / n
            self.assertGreaterEqual(len(r["rows"]), 2, r)
            for size_mib, ms, algbw, bus in r["rows"]:
                size, seconds = size_mib * 2 ** 20, ms / 1e3
                self.assertGreater(seconds, 0)
                self.assertTrue(math.isclose(algbw, size / seconds / 1e9, rel_tol=1e-9), (op, n, size_mib, ms, algbw))
                self.assertTrue(math.isclose(bus, algbw * factor, rel_tol=1e-9), (op, n, algbw, bus))
            busbw[(op, n)] = [(row[0], row[3]) for row in r["rows"]]
        self.assertEqual(seen, {("all-reduce", 2), ("all-reduce", 4), ("reduce-scatter", 2),
                                ("reduce-scatter", 4)})
        plots = [(r["spec"], f["world_size"]) for _, r, f in self.noted("world_size", "r->backend", kind="plot")]
        self.assertEqual(len(plots), 2)
        for spec, n in plots:
            self.assertEqual(spec["encoding"]["y"]["title"], "busbw (GB/s)")
            self.assertEqual(spec["encoding"]["x"]["title"], "message size (MiB)")
            for op in ("all-reduce", "reduce-scatter"):
                self.assertEqual([(v["x"], v["y"]) for v in spec["data"]["values"] if v["series"] == op],
                                 busbw[(op, n)])
        # The reference's reduce-scatter estimate (S/n)(n-1)/(n t) is busbw / n: the
        # correction must say so, with the factor for 2 and for 4 ranks.
        self.assertTrue(any("busbw / n" in m and "2 times too low on 2 ranks and 4 times on 4" in m
                            for m in self.markdown()))
        # The sentence under the tables reports the two measured busbw at the largest size, as the tables hold them.
        # lecture_08/collective_bench.c, note_bandwidths: its arguments by name, the tables' values exactly
        said = self.noted("all_reduce[last].busbw", "reduce_scatter[last].busbw")
        self.assertEqual(len(said), 2)
        for _, _, a in said:
            size = a["all_reduce[last].bytes / (1 << 20)"]
            for op, name in (("all-reduce", "all_reduce[last].busbw"), ("reduce-scatter", "reduce_scatter[last].busbw")):
                self.assertTrue(any(pts[-1] == (size, a[name]) for (o, _), pts in busbw.items() if o == op), (op, a))

    def test_alpha_beta_cost_model(self):
        """alpha and beta refitted here from the measured times the plot
        carries, by the same criterion (least squares on relative errors of
        t = 2(p-1)(alpha + n beta / p), beta the time per byte), written out
        independently."""
        plots = {r["spec"]["title"]: r["spec"] for _, r in self.renderings("plot")
                 if "alpha-beta model" in r["spec"].get("title", "")}
        self.assertEqual(sorted(plots), ["all-reduce on 2 ranks: measured and alpha-beta model",
                                         "all-reduce on 4 ranks: measured and alpha-beta model"])
        # lecture_08/collective_bench.c, note_cost_model: the fit's note, its figures by name
        fits = {f["world_size"]: (r["data"], f) for _, r, f in self.noted("m->alpha * 1e6", "m->beta * 1e9")}
        self.assertEqual(sorted(fits), [2, 4])
        for title, spec in plots.items():
            p = int(title.split()[2])
            self.assertEqual(spec["encoding"]["y"]["title"], "all-reduce time (ms)")
            pts = [v for v in spec["data"]["values"] if v["series"] == "measured"]
            model = {v["x"] * 2 ** 20: v["y"] for v in spec["data"]["values"] if v["series"] == "model"}
            self.assertGreaterEqual(len(pts), 3)
            n = [v["x"] * 2 ** 20 for v in pts]
            t = [v["y"] / 1e3 for v in pts]
            # rows (1/t, n/t) . (A, B) ~ 1
            rows = [(1 / ti, ni / ti) for ni, ti in zip(n, t)]
            a11 = sum(u * u for u, _ in rows); a12 = sum(u * v for u, v in rows); a22 = sum(v * v for _, v in rows)
            r1 = sum(u for u, _ in rows); r2 = sum(v for _, v in rows)
            det = a11 * a22 - a12 * a12
            A, B = (r1 * a22 - r2 * a12) / det, (a11 * r2 - a12 * r1) / det
            # a negative A is no latency: A = 0, B alone; a B <= 0 (times that
            # fall with size: a busy machine's noise) leaves A alone
            clamped = 0
            if A < 0:
                A, B, clamped = 0.0, r2 / a22, 1
            if B <= 0:
                A, B, clamped = r1 / a11, 0.0, 2
            alpha = A / (2 * (p - 1))
            beta = B * p / (2 * (p - 1))   # seconds per byte; 0: no bandwidth term
            text, f = fits[p]
            self.assertEqual(f["n"], len(pts))
            inverse = f["m->beta > 0 ? 1e-9 / m->beta : INFINITY"]   # JSON's null for an infinite bandwidth
            # the fit's table holds what the note states, the same doubles
            table = [r for _, r in self.tables(r"^alpha-beta fit of all-reduce on %d ranks" % p)]
            self.assertEqual(len(table), 1)
            row = table[0]["rows"][0]
            self.assertEqual(row, [f["m->alpha * 1e6"], f["m->beta * 1e9"], inverse, f["100 * m->rms_error"],
                                   f["100 * m->max_error"], len(pts)])
            self.assertEqual("negative alpha" in text, clamped == 1)
            self.assertEqual("no bandwidth term" in text, clamped == 2)
            self.assertGreaterEqual(alpha, 0)
            self.assertGreaterEqual(beta, 0)
            if clamped == 0:   # the fit's own result: both positive
                self.assertGreater(alpha, 0)
                self.assertGreater(beta, 0)
            # The same least squares, solved here in another order from the plotted times (doubles, exact in the
            # trace): the normal equations over sizes 1 KiB to 64 MiB lose at most a few parts in 1e7 to their
            # condition, so 1e-5 of the value (plus an absolute floor for a clamped 0) is room, not slack.
            self.assertTrue(math.isclose(f["m->alpha * 1e6"], alpha * 1e6, rel_tol=1e-5, abs_tol=1e-9), (p, f, alpha))
            self.assertTrue(math.isclose(f["m->beta * 1e9"], beta * 1e9, rel_tol=1e-5, abs_tol=1e-12), (p, f, beta))
            if beta > 0:   # the bandwidth is 1 / beta
                self.assertTrue(math.isclose(inverse, 1e-9 / beta, rel_tol=1e-5), (p, inverse, beta))
            else:
                self.assertIsNone(inverse)
            pred = [2 * (p - 1) * (alpha + ni * beta / p) for ni in n]
            err = [pi / ti - 1 for pi, ti in zip(pred, t)]
            rms = math.sqrt(sum(e * e for e in err) / len(err))
            self.assertAlmostEqual(f["100 * m->rms_error"], 100 * rms, delta=1e-3)   # the fit's 1e-5, in percent
            self.assertAlmostEqual(f["100 * m->max_error"], 100 * max(abs(e) for e in err), delta=1e-3)
            for ni, pi in zip(n, pred):   # the plotted model is this formula
                self.assertTrue(math.isclose(model[ni], pi * 1e3, rel_tol=1e-9))
            # the measured times are the table's
            cols = self.columns(self.table(r"^all-reduce on %d ranks$" % p))
            self.assertEqual(cols["time"], [v["y"] for v in pts])

    def overlap_table(self, function, caption):
        """(spawn id, step, table) of the one table rank 0 of `function`'s spawn showed whose caption matches."""
        sid = self.by_spawn(function)[0]
        tables = [(s, r) for s, r in self.tables(caption) if s["spawn"] == sid]
        self.assertEqual(len(tables), 1, "one table, from rank 0")
        self.assertEqual(tables[0][0]["rank"], 0)
        return sid, tables[0][0], tables[0][1]

    def test_overlap_real_and_modelled_side_by_side(self):
        """DDP's step timed four ways, real arithmetic and modelled compute
        in one table; the modelled row within the lesson's bounds (checked
        by the lecture too), the sentences repeating the table."""
        sid, _, table = self.overlap_table("ddp_buckets_main", r"^Overlap: one DDP step on ")
        # the caption's figures by the lecture's names (lectures/lib/buckets.c, overlap_table)
        f = tracecheck.named(table)
        c = self.config()
        backend = [s["backend"] for s in self.trace["spawns"] if s["id"] == sid][0]
        self.assertEqual((f["world_size"], f["dist_backend()"], f["(long long)per_rank"], f["modelled_buckets"]),
                         (4, backend, c["batch"] // 4, 16))
        # backward twice forward: each step's backward is twice its forward, and so are the medians
        self.assertTrue(math.isclose(f["modelled->backward_ms"], 2 * f["modelled->forward_ms"], rel_tol=1e-12), f)
        self.assertEqual([c["name"] for c in table["columns"]], [
            "compute", "buckets", "compute alone", "communication alone", "all-reduce after backward",
            "async all-reduce during backward", "speed-up (after / during)", "during / max(compute, communication)"])
        rows = {r[0]: self.row_dicts(table)[k] for k, r in enumerate(table["rows"])}
        self.assertEqual(sorted(rows), ["modelled", "real"])
        self.assertEqual((rows["real"]["buckets"], rows["modelled"]["buckets"]), (c["layers"] // 2, 16))
        for row in rows.values():
            times = [row[k] for k in ("compute alone", "communication alone", "all-reduce after backward",
                                      "async all-reduce during backward")]
            self.assertTrue(all(math.isfinite(t) and t > 0 for t in times), row)
            # the ratios are the medians of each step's own (its ways back to back), not ratios of the medians
            for k in ("speed-up (after / during)", "during / max(compute, communication)"):
                self.assertTrue(math.isfinite(row[k]) and row[k] > 0, row)
        # the lesson, from the modelled row's own times
        md = rows["modelled"]
        self.assertLessEqual(md["during / max(compute, communication)"], 1.15)
        self.assertGreaterEqual(md["speed-up (after / during)"], 1.3)
        checks = [r for st, r in self.renderings("check") if st["spawn"] == sid and "modelled DDP step" in r["what"]]
        self.assertEqual(len(checks), 2)
        self.assertTrue(all(r["passed"] for r in checks), checks)
        # lecture_08.c, ddp_buckets_main: the note's figures by name are the table's (the same doubles)
        said = self.noted("modelled.over_longer", "real.speedup", spawn=sid)
        self.assertEqual(len(said), 1)
        f = said[0][2]
        self.assertEqual([f["modelled.ms[DURING_BACKWARD]"], f["modelled.ms[NO_ALL_REDUCE]"], f["modelled.ms[COMM_ALONE]"],
                          f["modelled.over_longer"], f["modelled.speedup"], f["real.speedup"]],
                         [md["async all-reduce during backward"], md["compute alone"], md["communication alone"],
                          md["during / max(compute, communication)"], md["speed-up (after / during)"],
                          rows["real"]["speed-up (after / during)"]])
        # The note below says which way the real speed-up went, in words
        # that must agree with it (a tie within 5%: lectures/lib/buckets.c).
        speedup = rows["real"]["speed-up (after / during)"]
        verdict = ("the async step was the faster" if speedup >= 1.05 else
                   "the async step was the slower" if speedup <= 0.95 else "the two took about the same time")
        shared_gpu = "share" in [s["reason"] for s in self.trace["spawns"] if s["id"] == sid][0]
        # lectures/lib/buckets.c, explain_overlap_here: one note with the verdict and the speed-up by name
        said = self.noted("verdict", "speedup", spawn=sid)
        self.assertEqual(len(said), 1, "one note on what this backend could overlap")
        f, text = said[0][2], said[0][1]["data"]
        self.assertEqual((f["verdict"], f["speedup"]), (verdict, speedup))
        if backend == "nccl":
            # a communication stream beside the compute stream: the async
            # step must win there (GPU path unverified so far)
            self.assertGreater(speedup, 1.0)
            self.assertTrue(text.startswith("On NCCL, each bucket's all-reduce"), text)
        elif shared_gpu:
            # ranks sharing a GPU: the async form stages at its call, which
            # drains the GPU's queue; the lecture says what can and cannot hide
            self.assertTrue(text.startswith("Here (Open MPI, %d ranks sharing GPUs)" % f["world_size"]), text)
            self.assertIn("a drained queue at every bucket", text)
        else:
            # Open MPI on CPU: the progress thread moves the all-reduce, but it
            # is CPU work on the matmuls' cores, so no gain is asserted; the
            # lecture must say so rather than claim one
            self.assertTrue(text.startswith("Here (Open MPI, %d ranks on %d CPU cores)" % (f["world_size"], f["cores"])),
                            text)
            self.assertIn("overlap can hide the waiting for other ranks, not that work", text)

    def test_zero3_prefetch_real_and_modelled(self):
        """ZeRO-3's step timed without gathers, gathering when needed and
        prefetching, real and modelled in one table; the modelled row hides
        at least 70% of the gathers' time (checked by the lecture too)."""
        sid, _, table = self.overlap_table("zero3_main", r"^Prefetch: one ZeRO-3 step on ")
        # the caption's figures by the lecture's names (lecture_08/zero3.c, prefetch_table)
        f = tracecheck.named(table)
        self.assertTrue(math.isclose(f["modelled->backward_ms"], 2 * f["modelled->forward_ms"], rel_tol=1e-12), f)
        self.assertEqual([c["name"] for c in table["columns"]], [
            "compute", "layers", "no gathers", "gather when needed", "prefetch",
            "the gathers' time (when needed - no gathers)", "hidden by prefetch"])
        rows = {r["compute"]: r for r in self.row_dicts(table)}
        self.assertEqual((rows["real"]["layers"], rows["modelled"]["layers"]), (self.config()["layers"], 8))
        for row in rows.values():
            gathers = row["gather when needed"] - row["no gathers"]
            self.assertAlmostEqual(row["the gathers' time (when needed - no gathers)"], gathers, delta=1e-9)
            # the fraction hidden: the median of each step's own (its ways back to back), not of the medians
            self.assertTrue(math.isfinite(row["hidden by prefetch"]), row)
        hidden = rows["modelled"]["hidden by prefetch"]
        self.assertGreaterEqual(hidden, 0.7)
        checks = [r for st, r in self.renderings("check") if st["spawn"] == sid and "prefetch hid" in r["what"]]
        self.assertEqual([r["passed"] for r in checks], [True])
        # lecture_08.c, ddp_zero3: the note's figures by name are the table's (the same doubles)
        said = self.noted("modelled.hidden", "real.hidden", spawn=sid)
        self.assertEqual(len(said), 1)
        f = said[0][2]
        gathers = "the gathers' time (when needed - no gathers)"
        self.assertEqual(f["modelled.hidden"], hidden)
        self.assertTrue(math.isclose(f["modelled.ms[Z3_GATHER_WHEN_NEEDED] - modelled.ms[Z3_NO_GATHERS]"],
                                     rows["modelled"][gathers], rel_tol=1e-12))
        self.assertTrue(tracecheck.same_double(f["(2.0 * MODELLED_LAYERS - 2) / (2.0 * MODELLED_LAYERS - 1)"], 14 / 15))
        self.assertEqual(f["real.hidden"], rows["real"]["hidden by prefetch"])
        self.assertTrue(math.isclose(f["real.ms[Z3_GATHER_WHEN_NEEDED] - real.ms[Z3_NO_GATHERS]"],
                                     rows["real"][gathers], rel_tol=1e-12))

    def test_cuda_streams_timed_on_gpu_explained_without(self):
        md = self.markdown()
        # the heading opens the section's first note
        streams = [i for i, m in enumerate(md) if m.split("\n", 1)[0] == "## CUDA streams"][0]
        part2 = md.index("## Part 2 (second sitting): distributed training")
        section = md[streams:part2]
        self.assertTrue(any("**DDP on NCCL** is the same picture" in m for m in section))
        if self.trace["meta"]["gpus"] > 0:
            means = {}
            for what in ("matmul alone", "copy alone", "one stream", "two streams"):
                found = self.texts(r"^%s: \[[0-9., ]+\] \(mean (%s) ms\)$" % (what, NUM))
                self.assertEqual(len(found), 1, what)
                means[what] = float(found[0][1].group(1))
            # the sentence after them follows from them (to their printed 0.1 ms)
            one, two = means["one stream"], means["two streams"]
            if two < one:
                said = [m for m in section if m.startswith("One stream took %.1f ms: about the matmul alone" % one)]
                self.assertEqual(len(said), 1, section)
                self.assertIn("Two streams took %.1f ms" % two, said[0])
            else:
                self.assertTrue(any(m.startswith("One stream took %.1f ms" % one) and "was not hidden" in m
                                    for m in section), section)
        else:
            # no timings are made up without a GPU: the section says it did not run
            self.assertFalse(self.texts(r"^(one|two) streams?: \["))
            self.assertTrue(any(m.startswith("*Not run here: this machine has no GPU*")
                                or m.startswith("*Not run here: this build has no CUDA support*") for m in section))
            self.assertTrue(any(m.startswith("On a CPU rank an Open MPI transfer's copies and sums") for m in section))


# The twin's closed forms (tests/twin/test_twin.py): a platform file read
# independently of the replay, and the tolerances of its clock.
sys.path.insert(0, os.path.join(ROOT, "tests", "twin"))
from test_twin import REL, REPLAY, RING_ATOL, Fabric  # noqa: E402


@unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
class SimulatedFigures(Run, unittest.TestCase):
    """The figures lecture_08 quotes from its twin (twin_last_spawn), each
    against a closed form derived here from the platform file."""

    def twins(self, platform, rule):
        """(spawn, its twin on platform) for every spawn replayed there by `rule`, in order."""
        return [(sp, sp["twin"][platform]) for sp in self.trace["spawns"]
                if sp.get("twin", {}).get(platform, {}).get("rule") == rule]

    def test_busbw_on_h100_node(self):
        fab = Fabric("h100-node")
        (sp, twin), = self.twins("h100-node@8", "ddp")
        self.assertEqual((twin["world_size"], twin["rule"], twin["recorded_ranks"], sp["world_size"]),
                         (8, "ddp", 4, 4))
        simulated = {c["bytes"]: c for c in twin["collectives"] if c["op"] == "all_reduce" and c["ranks"] == 8}
        (spec,) = [r["spec"] for _, r, f in self.noted("world_size", "r->backend", kind="plot") if f["world_size"] == 4]
        series = [v["series"] for v in spec["data"]["values"] if v["series"].startswith("simulated on h100-node")]
        self.assertTrue(series, "the 4-rank busbw chart has no simulated series")
        points = [(v["x"], v["y"]) for v in spec["data"]["values"] if v["series"] == series[0]]
        measured = [(v["x"], v["y"]) for v in spec["data"]["values"] if v["series"] == "all-reduce"]
        self.assertEqual([x for x, _ in points], [x for x, _ in measured], "a simulated point per measured size")
        for mib, busbw in points:
            b = mib * 2 ** 20
            self.assertEqual(busbw, simulated[b]["busbw_GBps"], "the chart plots the trace's twin")
            # the ring on NVLink: 2 (p - 1) steps of latency + b / p / bandwidth (test_twin's closed form)
            t, _ = fab.ring(8, b)
            self.assertAlmostEqual(simulated[b]["time_s"], t, delta=RING_ATOL)
            self.assertAlmostEqual(busbw * 1e9 / (b / t * 2 * 7 / 8), 1, delta=REL)
            self.assertLess(busbw * 1e9, fab.links["nvl0"][0], "busbw above the link rate")
        # the question's hidden value and the sentence's figures are the largest size's
        (_, asked), = [(s, r) for s, r in self.renderings("predict") if "h100-node" in r["question"]]
        self.assertTrue(tracecheck.same_double(asked["value"], points[-1][1]), (asked["value"], points[-1][1]))
        said = self.figures("sim->busbw_GBps", "last->busbw")
        self.assertEqual(said["sim->busbw_GBps"], points[-1][1])
        self.assertEqual(said["last->bytes / (1 << 20)"], points[-1][0])
        self.assertEqual(said["last->busbw"], measured[-1][1])
        text = self.noted("sim->busbw_GBps")[0][1]["data"]
        self.assertIn("simulated", text)
        self.assertIn("320 (2 GPUs) and 335 (4 GPUs)", text)   # the reference's measurement, cited as such

    def test_pipeline_bubble_at_more_stages(self):
        rows = self.columns(self.table(r"^GPipe, 8 micro-batches, simulated on scaled at P stages"))
        self.assertEqual(rows["stages P"], [4, 8, 16])
        m = 8
        for k, P in enumerate(rows["stages P"]):
            formula = (P - 1) / (m + P - 1)
            self.assertAlmostEqual(rows["formula (P - 1) / (m + P - 1)"][k], formula, places=12)
            self.assertEqual(rows["platform"][k], "simulated on scaled@%d" % P)
            (sp, twin), = self.twins("scaled@%d" % P, "pipeline")
            self.assertEqual((twin["world_size"], twin["rule"], twin["recorded_ranks"]), (P, "pipeline", 4))
            # the bubble recomputed from the trace's timelines: 1 - the busiest stage's computing time / the whole
            self.assertEqual(len(twin["ranks"]), P)
            busy = max(sum(x["end"] - x["start"] for x in r if x["op"] in ("compute", "modelled"))
                       for r in twin["ranks"])
            bubble = 1 - busy / twin["simulated_s"]
            # timelines are rounded to 1e-9 s in the trace, 2 (m) spans a stage each way: 1e-6 covers the sum
            self.assertAlmostEqual(rows["simulated bubble"][k], bubble, delta=1e-6)
            self.assertAlmostEqual(rows["simulated time"][k], twin["simulated_s"] * 1e3, places=9)
            # against the formula: what the formula leaves out is the messages between stages (an activation,
            # microseconds over NVLink or InfiniBand) and the replayed work between spans, against slots of
            # 60 ms x 4 / P of modelled compute: 2% of the formula is far above them (measured: 0.01%), and far
            # below stages of unequal work (the end stages left unsplit: the busiest stage's idle is then another)
            self.assertAlmostEqual(bubble / formula, 1, delta=0.02, msg=(P, bubble, formula))
        self.assertEqual(rows["simulated bubble"], sorted(rows["simulated bubble"]), "the bubble grows with P")
        (_, asked), = [(s, r) for s, r in self.renderings("predict") if "scaled@16" in r["question"]]
        self.assertTrue(tracecheck.same_double(asked["value"], rows["simulated bubble"][2]),
                        (asked["value"], rows["simulated bubble"][2]))
        said = self.figures("simulated_bubble(&t[0])")
        self.assertEqual([said["simulated_bubble(&t[%d])" % k] for k in range(3)], rows["simulated bubble"])

    def test_ddp_step_from_8_to_512_gpus(self):
        fab = Fabric("scaled")
        rows = self.columns(self.table(r"^One DDP step, simulated on scaled at P GPUs"))
        self.assertEqual(rows["GPUs P"], [8, 64, 512])
        bucket = 16 * 2 ** 20   # lecture_08.c: SCALE_BUCKET_FLOATS floats
        for k, P in enumerate(rows["GPUs P"]):
            (blocking, b_twin), (overlapped, o_twin) = self.twins("scaled@%d" % P, "ddp")
            self.assertEqual((b_twin["rule"], o_twin["rule"], b_twin["world_size"]), ("ddp", "ddp", P))
            self.assertEqual(rows["platform"][k], "simulated on scaled@%d" % P)
            self.assertAlmostEqual(rows["blocking: simulated step"][k], b_twin["simulated_s"] * 1e3, places=9)
            self.assertAlmostEqual(rows["overlapped: simulated step"][k], o_twin["simulated_s"] * 1e3, places=9)
            # each blocking all-reduce on rank 0's timeline is the ring's closed form on P GPUs
            spans = [x["end"] - x["start"] for x in b_twin["ranks"][0] if x["op"] == "all_reduce"]
            self.assertEqual(len(spans), 2)
            ring, _ = fab.ring(P, bucket)
            for t in spans:
                self.assertAlmostEqual(t, ring, delta=RING_ATOL + REL * ring)
                # the rule: less its 2 (P - 1) latencies, each GPU's link carries 2 (P - 1) / P of the bucket
                lat, bw = max((fab.hop(r, (r + 1) % P) for r in range(P)), key=lambda h: h[0] + bucket / P / h[1])
                self.assertAlmostEqual((t - 2 * (P - 1) * lat) * bw / bucket, 2 * (P - 1) / P, delta=1e-4)
            # the blocking step is its compute, then the two rings, one after the other
            compute = sum(x["end"] - x["start"] for x in b_twin["ranks"][0] if x["op"] in ("compute", "modelled"))
            self.assertAlmostEqual(b_twin["simulated_s"], compute + 2 * ring, delta=2 * RING_ATOL + 1e-6)
            self.assertLessEqual(o_twin["simulated_s"], b_twin["simulated_s"], "overlap made the step slower")
        blocking = rows["blocking: simulated step"]
        self.assertEqual(blocking, sorted(blocking), "the step does not grow with P")
        self.assertGreater(blocking[2], blocking[0])
        (_, asked), = [(s, r) for s, r in self.renderings("predict") if "scaled@512" in r["question"]]
        self.assertAlmostEqual(asked["value"], blocking[2], places=9)
        said = self.figures("t[0][0].simulated_s * 1e3")
        self.assertAlmostEqual(said["t[0][2].simulated_s * 1e3"], blocking[2], places=9)
        self.assertAlmostEqual(said["t[1][2].simulated_s * 1e3"], rows["overlapped: simulated step"][2], places=9)


class WithoutTheReplay(Run, unittest.TestCase):
    """The replay hidden (as in a build without SimGrid): the lecture runs and
    passes, says for each simulated figure why there is none, and its trace
    holds no twin and no simulated figure."""
    ENV = {"LECTERN_TWIN_REPLAY": "/nonexistent/twin_replay"}

    def test_not_simulated_and_says_why(self):
        self.assertFalse([sp["id"] for sp in self.trace["spawns"] if "twin" in sp])
        why = [m for m in (r["data"] for _, r in self.renderings("markdown")) if m.startswith("Not simulated on")]
        self.assertEqual(len(why), 3, why)   # the busbw chart, the DDP step, the pipeline's stages
        for m in why:
            self.assertIn("SimGrid's replay is not built (/nonexistent/twin_replay): install libsimgrid-dev", m)
        self.assertFalse([r["question"] for _, r in self.renderings("predict") if "simulated" in r["question"]])
        self.assertFalse([t for t in self.markdown() if t.startswith("Simulated on")])
        self.assertFalse([r for _, r in self.renderings("table") if "simulated on" in (r.get("caption") or "")])
        for _, r in self.renderings("plot"):
            self.assertFalse([v for v in r["spec"].get("data", {}).get("values", [])
                              if str(v.get("series", "")).startswith("simulated")])


class WorkThatDoesNotDivide(unittest.TestCase):
    """A batch (--batch) that a strategy's world size does not divide stops the
    lecture before any rank of that strategy starts: an error step at the
    must_divide() line just above its spawn(), exit status 1, the steps so
    far kept in lecture_08.failed.json, and the trace already in the output
    folder as it was."""

    def line_before(self, call):
        with open(os.path.join(ROOT, "lectures", "lecture_08.c")) as f:
            lines = [i + 1 for i, line in enumerate(f) if call in line]
        self.assertEqual(len(lines), 1, call)
        return lines[0] - 1

    def run_with(self, *options):
        binary = tracecheck.built("lectures", "lecture_08")
        self.assertTrue(os.path.exists(binary), "lecture_08 is not built in %s (run make)" % tracecheck.BUILD)
        with tempfile.TemporaryDirectory() as out:
            previous = {}
            for name in ("lecture_08.json", "lecture_08.js"):   # the last good trace, as a run left it
                previous[name] = "the last good trace: %s\n" % name
                with open(os.path.join(out, name), "w") as f:
                    f.write(previous[name])
            run = subprocess.run([binary, "--quick", "--quiet", "--out", out] + list(options),
                                 capture_output=True, text=True, timeout=600)
            for name, text in previous.items():
                with open(os.path.join(out, name)) as f:
                    self.assertEqual(f.read(), text, name + " was overwritten")
            failed = os.path.join(out, "lecture_08.failed.json")
            trace = tracecheck.validate(failed) if os.path.exists(failed) else None
        return run, trace

    def assert_stopped_at(self, run, trace, call, message):
        self.assertEqual(run.returncode, 1, run.stderr)
        line = self.line_before(call)
        # stderr names the innermost lecture line (in must_divide) and the message
        self.assertRegex(run.stderr, r"lectures/lecture_08\.c:\d+: %s" % re.escape(message))
        self.assertIsNotNone(trace, "no lecture_08.failed.json written")
        errors = [(s, r["data"]) for s in trace["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertEqual(len(errors), 1, errors)
        step, msg = errors[0]
        self.assertIn(message, msg)
        # the call in the section's function, then must_divide itself
        self.assertEqual(step["stack"][-2]["line"], line, step["stack"])
        self.assertEqual(step["stack"][-1]["function"], "must_divide")
        # what ran before is kept: the one-device baseline's steps
        self.assertGreater(len(trace["steps"]), 10)

    def test_batch_not_divided_by_ddp_world_size(self):
        # 6 examples: DDP on 1 and 2 ranks runs, on 4 ranks it cannot
        run, trace = self.run_with("--batch=6")
        self.assert_stopped_at(run, trace, "spawn(ddp_main, worlds[k], args, size);",
                               "the batch's examples (6) do not divide into 4 equal parts for the spawn() below")
        # DDP on 1 and 2 ranks ran before it
        self.assertEqual([sp["world_size"] for sp in trace["spawns"]][-2:], [1, 2])

    def test_batch_not_divided_into_micro_batches(self):
        # 12 examples: DDP on 4 ranks runs (3 each), 4 ranks x 2 accumulation steps cannot
        run, trace = self.run_with("--batch=12")
        self.assert_stopped_at(run, trace, "spawn(ddp_buckets_main, 4, args, size);",
                               "the batch's examples (12) do not divide into 8 equal parts for the spawn() below")

    def test_batch_that_is_not_a_number(self):
        run, trace = self.run_with("--batch=many")
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("--batch=many: expected a number of examples", run.stderr)
        self.assertIsNone(trace)


def other_kernels():
    """OpenBLAS kernels older than this CPU's that it runs correctly: Prescott
    (SSE3) always, Sandybridge where it has AVX, Haswell where it has AVX2.
    Each adds its sums in another order; the numbers must hold with each."""
    if os.environ.get("LECTERN_OTHER_KERNELS", "1") == "0":
        return []
    try:
        flags = set(re.search(r"^flags\s*:(.*)$", open("/proc/cpuinfo").read(), re.M).group(1).split())
    except (OSError, AttributeError):
        flags = set()
    kernels = ["Prescott"]
    if "avx" in flags:
        kernels.append("Sandybridge")
    if "avx2" in flags:
        kernels.append("Haswell")
    return kernels


class KernelCheck:
    def test_the_kernel_asked_for_ran(self):
        self.assertIn("(%s)" % self.ENV["OPENBLAS_CORETYPE"], self.trace["meta"]["blas"])


for _kernel in other_kernels():
    _name = "Lecture08On%s" % _kernel
    globals()[_name] = type(_name, (Run, Numbers, KernelCheck, unittest.TestCase),
                            {"ENV": {"OPENBLAS_CORETYPE": _kernel}, "__doc__": "The numbers with OpenBLAS's %s kernels." % _kernel})


if __name__ == "__main__":
    unittest.main()
