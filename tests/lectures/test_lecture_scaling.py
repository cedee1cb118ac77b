"""lecture_scaling (expert, tensor, sequence and context parallelism, a 2-D
mesh): run it with --quick and check its trace, then plant bugs in copies of
it and see the checks that guard them fail.

Every number the lecture prints is read back from the trace and judged here
against figures computed here from the printed configuration: each
strategy's difference from one device against a tolerance recomputed from
the lecture's stated rule (2 (sum of the sums' lengths) 2^-24 of the largest
value), the all-to-all's bytes and capacity from the routed counts, the
tensor- and sequence-parallel bytes from the activation's size, the ring's
bytes from the chunk's size. The trace must validate against the schema
with every stack line accurate; so must the committed traces/
lecture_scaling.json, made from the current source.

    /usr/bin/python3 tests/lectures/test_lecture_scaling.py     (LECTERN_BUILD picks the build)
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
from tracecheck import U  # noqa: E402

ROOT = tracecheck.ROOT

WORLD = 4

SECTIONS = [
    "# After DDP, ZeRO, TP and PP",
    "## The plan",
    "## The block on one device",
    "## Expert parallelism",
    "## Tensor and sequence parallelism",
    "### Backward: the conjugate collectives",
    "## Context parallelism: ring attention",
    "### Zig-zag: a balanced causal ring",
    "### Ulysses: all-to-all instead of a ring",
    "### Does the ring hide its transfers?",
    "## A 2-D mesh: data x tensor parallelism",
    "## ZeRO-1, ZeRO-2 and ZeRO-3 with prefetch",
    "### Does the prefetch hide the gathers?",
    "## Memory: activations and recomputation",
    "### Mixed precision: bytes per parameter (accounting)",
    "## Summary",
]


class LectureScaling(tracecheck.LectureRun, tracecheck.WholeTrace, unittest.TestCase):
    NAME = "lecture_scaling"
    SECTIONS = SECTIONS

    # ---- helpers over the trace ----

    def block_config(self):
        # the block note's own arguments (lecture_scaling.c, block_on_one_device), read by name
        f = self.figures("sz.heads", "sz.dim / sz.heads", "sz.hidden")
        return {"seq": f["sz.seq"], "d": f["sz.dim"], "heads": f["sz.heads"], "dh": f["sz.dim / sz.heads"],
                "hidden": f["sz.hidden"]}

    def compared(self, what):
        """{expr: value} of each rank's line of compare() (lecture_scaling.c)
        for `what`, in rank order."""
        return self.per_rank_noted("rank", "what", "diff", "largest(expected)", "tol", world=WORLD,
                                   where={"what": what})

    def assert_within(self, f, sum_lengths, what):
        """The difference is within the tolerance, and that tolerance is
        2 sum_lengths u of the largest value: the lecture's own doubles, and
        the same product here (2 sum_lengths u is exact in a double, so only
        the last product rounds: equal to a trace's writing,
        tracecheck.same_double)."""
        self.assertLessEqual(f["diff"], f["tol"], what)
        self.assertTrue(tracecheck.same_double(f["tol"], 2 * sum_lengths * U * f["largest(expected)"]), (what, f))
        self.assertGreater(f["largest(expected)"], 0.1, what)   # a real result, not zeros

    # ---- the trace as a whole ----

    def test_diagrams_and_references(self):
        local = {r["src"] for _, r in self.renderings("image") if not r["remote"]}
        for name in ("moe", "ring"):
            src = "assets/lecture_scaling_%s.svg" % name
            self.assertIn(src, local)
            self.assertTrue(os.path.exists(os.path.join(ROOT, src)), src)
        links = {r["url"] for _, r in self.renderings("link")}
        for url in ("https://arxiv.org/abs/2101.03961", "https://arxiv.org/abs/2006.16668", "https://arxiv.org/abs/1909.08053",
                    "https://arxiv.org/abs/2205.05198", "https://arxiv.org/abs/2310.01889",
                    "https://arxiv.org/abs/1910.02054", "https://arxiv.org/abs/1604.06174"):
            self.assertIn(url, links)

    def test_every_strategy_passes_on_every_rank(self):
        passes = tracecheck.check_passes(self.trace)
        self.assertTrue(all(ok for _, _, ok in passes), [p for p in passes if not p[2]])
        for prefix in ("expert parallel: the kept tokens' output", "expert parallel: the input's gradient",
                       "expert parallel: the router's gradient", "expert parallel: 3 all-to-alls forward",
                       "expert parallel: 2 all-to-alls backward", "factor 1.0, forward: 3 all-to-alls",
                       "factor 2.0, forward: 3 all-to-alls",
                       "padded: 3 all-to-alls", "expert x data: the kept tokens' output",
                       "expert x data: 2 all-to-alls backward", "expert x data: the router's gradient",
                       "tensor parallelism: the block's output", "sequence parallelism: the block's output",
                       "sequence parallelism: the same bytes",
                       "ring attention, plain split: this rank's rows", "ring attention, zig-zag: this rank's rows",
                       "ring attention backward, plain split: dK", "ring attention backward, zig-zag: dV",
                       "ring attention, plain split, forward: every chunk", "ring attention, zig-zag, backward",
                       "Ulysses attention: this rank's rows", "Ulysses attention: four all-to-alls",
                       "2-D mesh: the gradients",
                       "ZeRO-1: the gradient pieces", "ZeRO-1: the weights", "ZeRO-2: the gradient pieces",
                       "ZeRO-2: the weights", "ZeRO-3, prefetch: the gradient pieces", "ZeRO-3, prefetch: the weights",
                       "ZeRO-3: each layer's all-gather", "ZeRO-1 and ZeRO-2: the same bytes",
                       "ZeRO-3 prefetch, modelled compute", "ring attention, modelled compute"):
            ranks = sorted(r for r, what, ok in passes if what.startswith(prefix) and ok)
            self.assertEqual(ranks, list(range(WORLD)), prefix)
        mine = [what for r, what, ok in passes if r is None and ok]
        self.assertTrue(any(w.startswith("load-balancing loss: the loss") for w in mine), mine)
        self.assertTrue(any(w.startswith("recomputation, modelled compute") for w in mine), mine)

    # ---- expert parallelism ----

    def moe_config(self):
        # the sizes note's own arguments (lecture_scaling.c, expert_parallelism), read by name
        f = self.figures("s.tokens", "s.dim", "s.hidden", "TOP_K")
        self.assertEqual((f["WORLD"], f["EXPERTS"], f["TOP_K"]), (WORLD, WORLD, 2))
        return {"tokens": f["s.tokens"], "d": f["s.dim"], "hidden": f["s.hidden"], "k": f["TOP_K"]}

    def moe_demand(self):
        """Each rank's assignments to each expert (the routing table)."""
        rows = self.table(r"^Top-2 routing: each rank's assignments")["rows"]
        self.assertEqual([r[0] for r in rows], list(range(WORLD)))
        return [[int(c) for c in r[1].split()] for r in rows]

    def moe_compared(self, how):
        """{what: [rank lines]} of compare() for the labels starting with `how: `."""
        found = {}
        for s, _, a in self.noted("rank", "what", "diff", "largest(expected)", "tol", kind="text"):
            if a["what"].startswith(how + ": "):
                self.assertEqual(a["rank"], s["rank"])
                found.setdefault(a["what"][len(how) + 2:], []).append(a)
        return found

    def test_kept_tokens_forward_and_backward_equal_one_device(self):
        c = self.moe_config()
        d, hidden, tokens = c["d"], c["hidden"], c["tokens"]
        forward = d + d + hidden   # the router, the expert's two products
        # + the gate's dot product and dy w2^T (d each), + a sum over at most every token, or dh w1^T
        backward = forward + 2 * d + max(hidden, WORLD * tokens)
        for how, experts_per_rank in (("expert parallel", 1), ("expert x data", 2)):
            found = self.moe_compared(how)
            for what, sums in (("the kept tokens' output", forward), ("the input's gradient", backward),
                               ("the router's gradient", backward)):
                self.assertEqual(sorted(a["rank"] for a in found[what]), list(range(WORLD)), (how, what))
                for a in found[what]:
                    self.assert_within(a, sums, (how, what))
            # every expert's gradients, each on the ranks that own it: expert e on rank e, or
            # (2 x 2) experts 2q, 2q + 1 on group rank q of both groups
            for e in range(WORLD):
                for w in ("w1", "w2"):
                    lines = found["expert %d's gradients (%s)" % (e, w)]
                    owners = [e] if experts_per_rank == 1 else [e // 2, e // 2 + 2]
                    self.assertEqual(sorted(a["rank"] for a in lines), owners, (how, e, w))
                    for a in lines:
                        self.assert_within(a, backward, (how, e, w))

    def test_drops_and_bytes_follow_from_the_routing(self):
        c = self.moe_config()
        tokens, d, k = c["tokens"], c["d"], c["k"]
        demand = self.moe_demand()
        for rank, row in enumerate(demand):
            self.assertEqual(sum(row), tokens * k, rank)   # every token goes to exactly two experts
        self.assertGreater(max(max(r) for r in demand) - min(min(r) for r in demand), tokens // 8)  # it leans
        t = self.table(r"^Capacity factor: drops")
        rows = self.rows_by_first(t)
        assignments = WORLD * tokens * k
        for name, cf in (("1.0", 1.0), ("1.25", 1.25), ("2.0", 2.0), ("none: pad to the largest count", None)):
            row = rows[name]
            # the capacity: ceil(cf tokens k / E) a rank, or the largest count anywhere
            cap = max(max(r) for r in demand) if cf is None else math.ceil(cf * tokens * k / WORLD)
            self.assertEqual(row[0], cap, name)
            # an independent count: an expert chosen n times keeps min(n, C), whatever the order
            dropped = sum(max(0, n - cap) for r in demand for n in r)
            self.assertEqual(row[1], dropped, name)
            self.assertTrue(tracecheck.same_double(row[2], 100.0 * dropped / assignments), (name, row))
            # (p - 1) pieces of the three all-to-alls: 1 count, C rows there, C rows back
            self.assertEqual(row[3], WORLD * (WORLD - 1) * 4 * (1 + 2 * cap * d), name)
            useful = sum(2 * 4 * d * min(n, cap) for rank, r in enumerate(demand) for e, n in enumerate(r)
                         if e != rank)
            self.assertTrue(tracecheck.same_double(row[4], 100.0 * useful / row[3]), (name, row))
            self.assertGreaterEqual(row[5], 0)
        self.assertGreater(rows["1.0"][1], rows["1.25"][1])   # a larger factor drops less
        self.assertGreater(rows["1.0"][1], 0)

    def test_prediction_is_the_drop_rate_shown(self):
        asked = [r for _, r in self.renderings("predict") if "capacity factor of 1.0" in r["question"]]
        self.assertEqual(len(asked), 1)
        rate = self.rows_by_first(self.table(r"^Capacity factor: drops"))["1.0"][2]
        self.assertTrue(tracecheck.same_double(asked[0]["value"], rate), (asked[0]["value"], rate))
        self.assertEqual(asked[0]["unit"], "%")

    def test_backward_all_to_alls_reverse_the_forward(self):
        c = self.moe_config()
        cap = math.ceil(1.25 * c["tokens"] * c["k"] / WORLD)
        rows = self.table(r"^Factor 1.25, forward and backward")["rows"]
        self.assertEqual([r[0] for r in rows], list(range(WORLD)))
        for r in rows:
            # forward: the counts and two token exchanges; backward: the two exchanges again
            self.assertEqual(r[1:5], [3, (WORLD - 1) * 4 * (1 + 2 * cap * c["d"]), 2,
                                      (WORLD - 1) * 4 * 2 * cap * c["d"]], r)
            self.assertGreaterEqual(r[5], 0)

    def test_load_balancing_loss_evens_the_load(self):
        c = self.moe_config()
        demand = self.moe_demand()
        rows = self.table(r"^Expert load before and after")["rows"]
        self.assertEqual([r[0] for r in rows], list(range(WORLD)))
        before, after = [r[1] for r in rows], [r[2] for r in rows]
        self.assertEqual(before, [sum(r[e] for r in demand) for e in range(WORLD)])
        self.assertEqual(sum(after), WORLD * c["tokens"] * c["k"])
        self.assertLess(max(after) - min(after), (max(before) - min(before)) / 2)
        # the chart is the loss per step; the note quotes its ends
        f = self.figures("r[0].aux_loss[0]", "r[0].aux_loss[AUX_STEPS]")
        losses = [v["y"] for v in self.one_plot()["data"]["values"] if v["series"] == "E sum f_e P_e"]
        self.assertTrue(tracecheck.same_double(losses[0], f["r[0].aux_loss[0]"]))
        self.assertTrue(tracecheck.same_double(losses[-1], f["r[0].aux_loss[AUX_STEPS]"]))
        self.assertGreater(losses[0], 1.05)          # the leaning router: above the even load's 1
        self.assertLess(losses[-1], losses[0] - 0.05)
        self.assertLess(losses[-1], 1.05)            # near the even load's 1
        self.assertLess(f["rate_after"], f["rate_before"])
        table = self.rows_by_first(self.table(r"^Capacity factor: drops"))
        self.assertTrue(tracecheck.same_double(f["rate_before"], table["1.0"][2]))
        self.assertEqual(f["padded_before"], table["none: pad to the largest count"][0])
        self.assertLess(f["padded_after"], f["padded_before"])
        # the before/after table holds the note's figures
        ends = self.rows_by_first(self.table(r"^The load-balancing loss: before and after"))
        for row, which in ((ends["before"], "before"), (ends["after"], "after")):
            loss = f["r[0].aux_loss[0]"] if which == "before" else f["r[0].aux_loss[AUX_STEPS]"]
            self.assertTrue(tracecheck.same_double(row[0], loss), which)
            self.assertTrue(tracecheck.same_double(row[1], f["rate_" + which]), which)
            self.assertEqual(row[2], f["padded_" + which], which)

    # ---- tensor and sequence parallelism ----

    def block_sum_lengths(self):
        c = self.block_config()
        d = c["d"]
        return 2 * d + d + c["dh"] + c["seq"] + d + 2 * d + d + c["hidden"]

    def test_tensor_and_sequence_parallel_outputs_equal_one_device(self):
        n = self.block_sum_lengths()
        for row in self.compared("tensor parallelism: the block's output"):
            self.assert_within(row, n, "TP")
        for row in self.compared("sequence parallelism: the block's output, this rank's quarter"):
            self.assert_within(row, n, "SP")

    def test_sequence_parallel_sends_the_same_bytes_in_twice_the_calls(self):
        c = self.block_config()
        b = c["seq"] * c["d"] * 4
        rows = self.table(r"^One block forward")["rows"]
        self.assertEqual(len(rows), 2)
        (tp_name, tp_calls, tp_formula, tp_bytes, tp_measured, tp_rows), \
            (sp_name, sp_calls, sp_formula, sp_bytes, sp_measured, sp_rows) = rows
        self.assertEqual((tp_formula, sp_formula), ("2 x 2 (p-1)/p b", "4 x (p-1)/p b"))   # what the bytes are
        self.assertEqual((tp_calls, sp_calls), (2, 4))
        self.assertEqual(tp_bytes, 2 * 2 * (WORLD - 1) * b // WORLD)   # two all-reduces
        self.assertEqual(sp_bytes, 4 * (WORLD - 1) * b // WORLD)       # two reduce-scatters, two all-gathers
        self.assertEqual((tp_rows, sp_rows), (c["seq"], c["seq"] // WORLD))
        self.assertGreaterEqual(tp_measured, 0)
        self.assertGreaterEqual(sp_measured, 0)

    # ---- attention's backward: the conjugate collectives ----

    GRADS = ["dx, this rank's rows", "dW_q, this rank's columns", "dW_k, this rank's columns",
             "dW_v, this rank's columns", "dW_o, this rank's rows", "LayerNorm's dgain", "LayerNorm's dbias"]

    def attention_backward_sum_lengths(self):
        # lecture_scaling.c, attention_backward_sum_lengths, from the block's sizes
        c = self.block_config()
        d, dh, seq = c["d"], c["dh"], c["seq"]
        return 2 * d + d + dh + seq + d + seq + 2 * dh + 2 * seq + seq + 3 * d + 2 * d + seq

    def test_attention_backward_equals_one_device(self):
        """Every rank's gradient of every weight and of its input, under
        tensor and under sequence parallelism, within the stated tolerance
        of one device's; so are the forward outputs."""
        n = self.attention_backward_sum_lengths()
        for how in ("tensor parallel attention", "sequence parallel attention"):
            for g in self.GRADS:
                what = "%s backward: %s" % (how, g)
                rows = self.compared(what)
                self.assertEqual(len(rows), WORLD, what)
                for row in rows:
                    self.assert_within(row, n, what)
        for what in ("tensor parallel attention forward: the output",
                     "sequence parallel attention forward: the output, this rank's rows"):
            for row in self.compared(what):
                self.assert_within(row, n, what)

    def conjugate_rows(self):
        rows = self.table(r"^Attention forward and backward on")["rows"]
        # calls, bytes by the formula, the runtime's nominal, measured (the formula's text, r[4], left out)
        return {(r[0], r[1], r[2]): [r[3]] + r[5:] for r in rows}

    def test_conjugate_collectives_per_pass(self):
        """Each pass's collectives, calls and bytes, against the ring's
        formula recomputed here from the block's sizes: TP one all-reduce of
        an activation each way (f and g); SP an all-gather and a
        reduce-scatter forward, the same two backward (each the other's
        conjugate), and one all-reduce of LayerNorm's 2 d weight gradients."""
        c = self.block_config()
        b, p = c["seq"] * c["d"] * 4, WORLD
        ag = (p - 1) * b // p
        want = {
            ("tensor parallel", "forward", "all-reduce"): 2 * (p - 1) * b // p,
            ("tensor parallel", "backward", "all-reduce"): 2 * (p - 1) * b // p,
            ("sequence parallel", "forward", "all-gather"): ag,
            ("sequence parallel", "forward", "reduce-scatter"): ag,
            ("sequence parallel", "backward", "all-gather"): ag,
            ("sequence parallel", "backward", "reduce-scatter"): ag,
            ("sequence parallel", "backward", "all-reduce"): 2 * (p - 1) * (2 * c["d"] * 4) // p,
        }
        got = self.conjugate_rows()
        self.assertEqual(sorted(got), sorted(want))   # no other collective in any pass
        for key, nbytes in want.items():
            calls, formula, nominal, measured = got[key]
            self.assertEqual((calls, formula, nominal), (1, nbytes, nbytes), key)
            self.assertGreaterEqual(measured, 0, key)
        # the duality: each SP forward collective comes back as the other, the same bytes
        fwd = {k[2]: v for k, v in got.items() if k[:2] == ("sequence parallel", "forward")}
        bwd = {k[2]: v for k, v in got.items() if k[:2] == ("sequence parallel", "backward")}
        self.assertEqual(fwd["all-gather"][1], bwd["reduce-scatter"][1])
        self.assertEqual(fwd["reduce-scatter"][1], bwd["all-gather"][1])
        # a TP all-reduce is an SP reduce-scatter plus an all-gather
        self.assertEqual(got[("tensor parallel", "backward", "all-reduce")][1],
                         bwd["all-gather"][1] + bwd["reduce-scatter"][1])

    def test_prediction_is_the_all_gathers_backward(self):
        asked = self.renderings("predict")
        steps = self.trace["steps"]
        (s_q, q), = [(s, r) for s, r in asked if "back through that all-gather" in r["question"]]
        (s_t, t), = self.tables(r"^Attention forward and backward on")
        c = self.block_config()
        b = c["seq"] * c["d"] * 4
        rs = {(r[0], r[1], r[2]): r for r in t["rows"]}[("sequence parallel", "backward", "reduce-scatter")]
        self.assertEqual(rs[4], "(p-1)/p b")
        self.assertEqual((q["value"], q["unit"]), (rs[5], "bytes"))
        self.assertEqual(q["value"], (WORLD - 1) * b // WORLD)
        self.assertIn("b = %d bytes" % b, q["question"])   # what it needs is said
        self.assertLess(steps.index(s_q), steps.index(s_t))

    # ---- ring attention ----

    def cp_config(self):
        # the sizes note's own arguments (lecture_scaling.c, context_parallelism), read by name
        f = self.figures("s.heads", "s.dim / s.heads", "s.seq / (2 * WORLD)")
        seq, d, heads, dh, c2 = f["s.seq"], f["s.dim"], f["s.heads"], f["s.dim / s.heads"], f["s.seq / (2 * WORLD)"]
        self.assertEqual((c2 * 2 * WORLD, dh * heads, f["2 * WORLD"]), (seq, d, 2 * WORLD))
        return seq, d, heads, dh

    @staticmethod
    def chunks_of(layout, rank):
        """The two chunks (of 2p) a rank holds: the plain split's contiguous
        pair, or the zig-zag's one from each end (Striped/Llama 3)."""
        return [2 * rank, 2 * rank + 1] if layout == "plain split" else [rank, 2 * WORLD - 1 - rank]

    def test_ring_attention_forward_and_backward_equal_one_device(self):
        seq, d, heads, dh = self.cp_config()
        # the lecture's sums (cp_forward_sums, cp_backward_sums): a score, the values, 2p merges; a score, dP
        # and D, the log-sum-exp and the gradient sums over the sequence, p partial sums and 2p shares
        for layout in ("plain split", "zig-zag"):
            for row in self.compared("ring attention, %s: this rank's rows" % layout):
                self.assert_within(row, dh + seq + 2 * WORLD, layout)
            for grad in ("dQ", "dK", "dV"):
                for row in self.compared("ring attention backward, %s: %s" % (layout, grad)):
                    self.assert_within(row, 3 * dh + 2 * seq + 3 * WORLD, (layout, grad))
        for row in self.compared("Ulysses attention: this rank's rows"):
            self.assert_within(row, dh + seq + 2 * WORLD, "Ulysses")

    def test_ring_passes_keys_forward_and_gradients_home(self):
        seq, d, heads, dh = self.cp_config()
        chunk = 2 * (seq // WORLD) * d * 4   # a rank's keys and values, float32
        for layout in ("plain split", "zig-zag"):
            rows = self.per_rank_noted("rank", "r.useful", "(long long)f->ring_bytes[0]", world=WORLD,
                                       where={"LAYOUT_NAME[layout]": layout})
            for rank, row in enumerate(rows):
                # counted here: (query chunk, key chunk) pairs the causal mask leaves work in, key <= query
                pairs = sum(1 for a in self.chunks_of(layout, rank) for b in range(2 * WORLD) if b <= a)
                self.assertEqual(row["r.useful"], pairs, (layout, rank))
                self.assertEqual(row["(long long)chunk"], chunk)
                # forward: p - 1 passes of the keys and values, each started before the block
                self.assertEqual(row["(long long)f->ring_bytes[0]"], (WORLD - 1) * chunk)
                self.assertEqual(row["(long long)f->ring_calls[0]"], WORLD - 1)
                # backward: the keys and values p - 1 times again, their dK and dV p times (home at the last)
                self.assertEqual(row["(long long)f->ring_bytes[1]"], (2 * WORLD - 1) * chunk)
                self.assertEqual(row["(long long)f->ring_calls[1]"], 2 * WORLD - 1)

    def test_zig_zag_balances_the_causal_ring(self):
        t = self.columns(self.table(r"^Causal ring attention on"))
        self.assertEqual(t["rank"], [str(r) for r in range(WORLD)] + ["slowest / fastest"])
        for layout, col in (("plain split", "pairs, plain split"), ("zig-zag", "pairs, zig-zag")):
            pairs = [sum(1 for a in self.chunks_of(layout, r) for b in range(2 * WORLD) if b <= a) for r in range(WORLD)]
            self.assertEqual(t[col], pairs + [max(pairs) / min(pairs)])
        self.assertEqual(set(t["pairs, zig-zag"]), {2 * WORLD + 1, 1})
        ratio = {}
        for k in ("compute, plain split", "compute, zig-zag"):
            ratio[k] = max(t[k][:WORLD]) / min(t[k][:WORLD])
            self.assertTrue(tracecheck.same_double(t[k][WORLD], ratio[k]), (k, t[k]))
        self.assertLess(ratio["compute, zig-zag"], ratio["compute, plain split"])
        # the sentence's figures are the table's
        f = self.figures("ratio[PLAIN]", "ratio[ZIGZAG]")
        self.assertTrue(tracecheck.same_double(f["ratio[PLAIN]"], ratio["compute, plain split"]), f)
        self.assertTrue(tracecheck.same_double(f["ratio[ZIGZAG]"], ratio["compute, zig-zag"]), f)

    def test_ulysses_bytes_against_the_ring(self):
        seq, d, heads, dh = self.cp_config()
        floats = seq // WORLD * d   # a rank's chunk of q (or k, or v)
        for row in self.per_rank_noted("rank", "(long long)f->ulysses_calls", world=WORLD):
            self.assertEqual(row["(long long)f->ulysses_calls"], 4)
            self.assertEqual(row["(long long)q->numel"], floats)
            # each all-to-all keeps 1/p of the tensor and sends the rest
            self.assertEqual(row["(long long)f->ulysses_nominal"], 4 * (WORLD - 1) * floats // WORLD * 4)
            self.assertEqual(row["(long long)f->ulysses_bytes"], 4 * (WORLD - 1) * floats // WORLD * 4)
        s_t, table = self.tables(r"^Bytes each rank sends for one attention layer")[0]
        rows = table["rows"]
        ring_fwd = (WORLD - 1) * 2 * floats * 4                 # keys and values, p - 1 passes
        ring_bwd = (2 * WORLD - 1) * 2 * floats * 4             # again, and dK, dV p times
        uly = 4 * (WORLD - 1) * floats // WORLD * 4             # q, k, v and the output, (p-1)/p each
        self.assertEqual([r[1:4] for r in rows], [[WORLD - 1, ring_fwd, ring_fwd], [2 * WORLD - 1, ring_bwd, ring_bwd],
                                                  [4, uly, uly]])
        for r in rows:
            self.assertTrue(tracecheck.same_double(r[4], r[3] / uly), r)
        # the prediction: the ring's forward over Ulysses', p / 2 by the formulas, equal to the table's
        steps = self.trace["steps"]
        (s_q, q), = [(s, r) for s, r in self.renderings("predict") if "Ulysses" in r["question"]]
        self.assertTrue(tracecheck.same_double(q["value"], rows[0][4]), (q["value"], rows[0]))
        self.assertEqual(q["value"], WORLD / 2)
        self.assertEqual(q["unit"], "x")
        self.assertLess(steps.index(s_q), steps.index(s_t))

    # ---- the mesh ----

    def test_mesh_gradients_equal_one_device(self):
        f = self.figures("MESH_BATCH")   # lecture_scaling.c, mesh_section's note
        hidden, batch = f["MESH_HIDDEN"], f["MESH_BATCH"]
        # lib/mlp.h's gradient_tolerance: 2 (layers + 1) max(batch, width) u, width the hidden one: exact in a
        # double, so the tolerance is one rounded product here as there
        factor = 2 * 3 * max(batch, hidden)
        # each rank's line (lecture_scaling.c, mesh_main), its figures by name
        for rank, row in enumerate(self.per_rank_noted("rank", "dp", "tp_rank", "size", world=WORLD)):
            self.assertEqual((row["dp"], row["tp_rank"]), (rank // 2, rank % 2))
            self.assertEqual(row["(long long)(tp_rank * cols)"], (rank % 2) * hidden // 2)
            self.assertEqual(row["(long long)((tp_rank + 1) * cols - 1)"], (rank % 2 + 1) * hidden // 2 - 1)
            self.assertLessEqual(row["diff"], row["tol"])
            self.assertGreater(row["size"], 0)
            self.assertTrue(tracecheck.same_double(row["tol"], factor * U * row["size"]), ("mesh", row))

    # ---- ZeRO ----

    def zero_config(self):
        # the ZeRO section's note (lecture_scaling.c, zero_section), its figures by name
        f = self.figures("c.batch", "(double)c.lr")
        return f["c.layers"], f["c.width"], f["c.batch"], f["(double)c.lr"]

    def test_zero_stages_equal_ddp(self):
        layers, width, batch, lr = self.zero_config()
        tol_factor = 2 * (layers + 1) * max(batch, width) * U   # lib/mlp.h's gradient_tolerance
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3, prefetch"):
            # each rank's line (lecture_scaling.c, zero_compare), its figures by name
            rows = self.per_rank_noted("rank", "METHOD_NAMES[m]", "diff", "tol", world=WORLD,
                                       where={"METHOD_NAMES[m]": method})
            for f in rows:
                self.assertLessEqual(f["diff"], f["tol"], method)
                self.assertGreater(f["tol"], 0)
                self.assertLess(f["tol"], tol_factor * 10, method)   # gradients here are under 10
                self.assertLessEqual(f["100 * off"], f["100 * near_zero"], method)
                self.assertLess(f["100 * near_zero"], 1.0, method)   # under 1% of weights near a sign flip

    def test_zero_bytes_and_state(self):
        layers, width, batch, lr = self.zero_config()
        rows = self.rows_by_first(self.table(r"^One step on"))
        layer, p = width * width, WORLD
        ddp = 2 * layers * (p - 1) * layer * 4 // p
        self.assertEqual(rows["DDP"], [layers * layer, layers * layer, 2 * layers * layer, ddp, layers])
        self.assertEqual(rows["ZeRO-1"], [layers * layer, layers * layer, 2 * layers * layer // p, ddp, 2 * layers])
        self.assertEqual(rows["ZeRO-2"], [layers * layer, layer + layers * layer // p, 2 * layers * layer // p, ddp,
                                          2 * layers])
        # gathers: every layer forward, all but layer 0 backward; a reduce-scatter per layer
        z3 = rows["ZeRO-3, prefetch"]
        self.assertEqual(z3[3], (3 * layers - 1) * (p - 1) * layer * 4 // p)
        self.assertEqual(z3[4], 3 * layers - 1)
        self.assertEqual(z3[0], layers * layer // p + 2 * layer)
        m = self.noted("log.text", kind="text")   # rank 0's line (lecture_scaling.c, zero_main)
        self.assertEqual(len(m), 1)
        self.assertEqual(m[0][0]["rank"], 0)
        expected = ["gather 0"]
        for i in range(layers):
            if i + 1 < layers:
                expected.append("gather %d" % (i + 1))
            else:   # the backward's first gather, before the forward's last compute
                expected.append("gather for the backward %d" % i)
            expected.append("compute %d" % i)
        self.assertEqual(m[0][2]["log.text"].split(", "), expected)

    # ---- memory ----

    def test_activations_measured_against_the_formula(self):
        t = self.table(r"^One step of")
        f = tracecheck.named(t)   # the caption's own arguments (lecture_scaling.c, memory_section)
        layers, batch, width = f["c.layers"], f["c.batch"], f["c.width"]
        act = batch * width * 4
        (n1, plain, f1, p1), (n2, recomputed, f2, p2) = t["rows"]
        self.assertEqual((f1, f2), (2 * layers * act, layers * act))
        # forward L products; backward dW for each layer and dx for all but the first; recomputation L more
        self.assertEqual((p1, p2), (3 * layers - 1, 4 * layers - 1))
        # the runtime's count of tensor storage (tensor_bytes_live): no headers, exact
        self.assertEqual((plain, recomputed), (2 * layers * act, layers * act))

    def test_recomputation_timed_in_turn_real_and_modelled(self):
        layers = 4
        t = self.table(r"^The step's time, plain and with recomputation, taken in turn$")
        (real, r_keep, r_kf, r_ks, r_rec, r_rf, r_rs, r_ratio, r_prod, r_share, r_pred), \
            (modelled, m_keep, m_kf, m_ks, m_rec, m_rf, m_rs, m_ratio, m_prod, m_share, m_pred) = t["rows"]
        self.assertTrue(real.startswith("real: this CPU, 5 steps each"), real)
        # the modelled sentence's figures by name (lecture_scaling.c, memory_section)
        said = self.figures("PRODUCT_MS", "ratio", "want")
        product_ms = said["PRODUCT_MS"]
        for fastest, median, slowest in ((r_kf, r_keep, r_ks), (r_rf, r_rec, r_rs), (m_kf, m_keep, m_ks),
                                         (m_rf, m_rec, m_rs)):
            self.assertTrue(0 < fastest <= median <= slowest, (fastest, median, slowest))
        self.assertAlmostEqual(r_ratio, r_rf / r_kf, delta=1e-9)   # the fastest of each
        self.assertAlmostEqual(m_ratio, m_rf / m_kf, delta=1e-9)
        # what the products alone predict: one product's time, 11 of them in a plain step, 4 more recomputed
        self.assertEqual(m_prod, product_ms)
        self.assertGreater(r_prod, 0)
        for prod, keep, share, pred in ((r_prod, r_kf, r_share, r_pred), (m_prod, m_kf, m_share, m_pred)):
            self.assertAlmostEqual(share, 100 * (3 * layers - 1) * prod / keep, delta=1e-9 * share)
            self.assertAlmostEqual(pred, 1 + layers * prod / keep, delta=1e-9)
        # modelled: sleeps never end early, so each step is at least its products' time ...
        self.assertGreaterEqual(m_kf, (3 * layers - 1) * product_ms)
        self.assertGreaterEqual(m_rf, (4 * layers - 1) * product_ms)
        # ... and the ratio is the products' within the lecture's bound (its comment derives 0.1)
        self.assertLessEqual(abs(m_ratio - (4 * layers - 1) / (3 * layers - 1)), 0.1)
        # the modelled spans are the trace's, in the lecture's own process: 11 and 15 per pair of steps
        spans = [sp for sp in self.trace["modelled"] if sp["rank"] is None]
        reps = len(spans) // ((3 * layers - 1) + (4 * layers - 1))
        self.assertEqual(len(spans), reps * ((3 * layers - 1) + (4 * layers - 1)))
        self.assertEqual(modelled, "modelled: each product %.0f ms, %d steps each" % (product_ms, reps))   # as the row says
        self.assertTrue(all(sp["ms"] == product_ms for sp in spans))
        self.assertTrue(self.trace["meta"]["modelled_compute"])
        # the sentences quote the table: the same quotients of the same doubles
        self.assertEqual(said["ratio"], m_ratio)
        self.assertEqual((said["products(c.layers, 1)"], said["products(c.layers, 0)"]), (4 * layers - 1, 3 * layers - 1))
        self.assertTrue(tracecheck.same_double(said["want"], (4 * layers - 1) / (3 * layers - 1)), said)
        real_said = self.noted("measured", "expected", "verdict")
        self.assertEqual(len(real_said), 1)
        _, real_note, real = real_said[0]
        self.assertEqual(real["measured"], r_ratio)
        self.assertEqual((real["expected"], real["100 * share[0]"]), (r_pred, r_share))
        self.assertNotIn("0.90 times", real_note["data"])

    def hidden_table(self, caption, what):
        """The rows of a real-against-modelled timing table, each checked: the
        hidden share is 1 - overlapped / blocking from its own columns."""
        t = self.table(caption)
        rows = t["rows"]
        self.assertEqual(len(rows), 2)
        self.assertTrue(rows[0][0].startswith("real: this CPU's arithmetic"), rows[0][0])
        self.assertTrue(rows[1][0].startswith("modelled: "), rows[1][0])
        for row in rows:
            as_needed, overlapped, share = row[-3], row[-2], row[-1]
            self.assertGreater(as_needed, 0, what)
            self.assertGreaterEqual(overlapped, 0, what)
            self.assertAlmostEqual(share, 100 * (1 - overlapped / as_needed), delta=1e-9, msg=what)
        return rows

    def test_prefetch_hides_the_gathers_in_the_modelled_run(self):
        rows = self.hidden_table(r"^ZeRO-3 on 4 ranks, (\d+) layers of (\d+) x \d+, rank 0: the fastest of (\d+) "
                                 r"steps each$", "prefetch")
        # the sentence under the table (lecture_scaling.c, prefetch_timing), its figures by name
        said = self.figures("f.forward_ms", "100 * hidden[1]")
        forward_ms = said["f.forward_ms"]
        self.assertEqual(rows[1][0], "modelled: %.1f ms a layer forward, per product backward" % forward_ms)
        self.assertGreaterEqual(forward_ms, 10.0)   # PREFETCH_MIN_MS
        self.assertGreaterEqual(rows[1][-1], 70)     # the lecture's bound, derived beside it
        # the sentence quotes the table's own doubles
        self.assertEqual(said["100 * hidden[1]"], rows[1][-1])
        self.assertEqual((said["f.step[1][1] * 1e3"], said["f.step[1][0] * 1e3"]), (rows[1][2], rows[1][1]))
        caption = tracecheck.named(self.table(r"^ZeRO-3 on 4 ranks"))
        layers = caption["c.layers"]
        self.assertEqual((said["2 * c.layers - 2"], said["2 * c.layers - 1"]), (2 * layers - 2, 2 * layers - 1))
        # the trace's modelled spans of that spawn, per rank: a warm-up and reps of each form, each step a
        # forward of F per layer and a backward of 2F per layer but layer 0's F
        steps = 1 + 2 * caption["PREFETCH_REPS"]
        self.assert_spans(forward_ms, {1: steps * (layers + 1), 2: steps * (layers - 1)})

    def assert_spans(self, ms, per_multiple):
        """The modelled spans of the one spawn whose spans last ms (the
        lecture's own double) or multiples of it: per rank, how many of each
        multiple."""
        spawns = {sp["spawn"] for sp in self.trace["modelled"] if sp["rank"] is not None and sp["ms"] == ms}
        self.assertEqual(len(spawns), 1, spawns)
        spans = [sp for sp in self.trace["modelled"] if sp["spawn"] in spawns]
        exact = ms
        for rank in range(WORLD):
            mine = [sp for sp in spans if sp["rank"] == rank]
            got = {}
            for sp in mine:
                k = round(sp["ms"] / exact)
                self.assertAlmostEqual(sp["ms"], k * exact, delta=1e-9)
                got[k] = got.get(k, 0) + 1
                self.assertGreaterEqual(sp["end"] - sp["start"], sp["ms"] * 1e-3 - 1e-6)   # a sleep never ends early
            self.assertEqual(got, per_multiple, rank)

    def test_the_ring_hides_its_transfers_in_the_modelled_run(self):
        rows = self.hidden_table(r"^Ring attention on 4 ranks, one head of width (\d+), rank 0: the fastest of (\d+) "
                                 r"rings each", "ring")
        self.assertEqual((rows[0][1], rows[1][1]), (256, 4096))   # tokens per chunk, real and modelled
        # the sentence under the table (lecture_scaling.c, ring_timing), its figures by name
        said = self.figures("f.block_ms", "100 * hidden[1]")
        block_ms = said["f.block_ms"]
        self.assertEqual(rows[1][0], "modelled: %.1f ms a block" % block_ms)
        self.assertGreaterEqual(block_ms, 5.0)
        self.assertGreaterEqual(rows[1][-1], 70)
        self.assertEqual(said["100 * hidden[1]"], rows[1][-1])   # the table's own double
        self.assertEqual((said["f.step[1][1] * 1e3"], said["f.step[1][0] * 1e3"]), (rows[1][3], rows[1][2]))
        # per modelled round, two warm-ups and reps rings of each form, of 4 blocks each, per rank
        caption = tracecheck.named(self.table(r"^Ring attention on"))
        reps, rounds = caption["RING_T_REPS"], caption["f.rounds"]
        self.assertTrue(1 <= rounds <= caption["RING_T_ROUNDS"], caption)
        self.assert_spans(block_ms, {1: rounds * (2 + 2 * reps) * WORLD})

    def test_predictions_hold_what_follows(self):
        """Two questions (predict()), each asked before the table that holds
        its value: sequence parallelism's bytes (the formula's, recomputed
        here from the block's sizes) and the share of the transfers the
        modelled ring hides (the table's own double)."""
        asked = self.renderings("predict")
        steps = self.trace["steps"]
        (s_sp, sp), = [(s, r) for s, r in asked if "sequence parallelism" in r["question"]]
        (s_ring, ring), = [(s, r) for s, r in asked if "overlapped ring" in r["question"]]
        c = self.block_config()
        b = c["seq"] * c["d"] * 4
        (s_table, table), = self.tables(r"^One block forward")
        sp_row = table["rows"][1]
        self.assertEqual((sp["value"], sp["unit"]), (4 * (WORLD - 1) * b // WORLD, "bytes"))   # 2 RS + 2 AG
        self.assertEqual(sp["value"], sp_row[3])
        self.assertIn("b = %d bytes, on p = %d ranks" % (b, WORLD), sp["question"])   # what it needs is said
        self.assertLess(steps.index(s_sp), steps.index(s_table))
        (s_table, table), = self.tables(r"^Ring attention on")
        # the same double, written twice (a trace keeps 2^-52 of it: tracecheck.same_double)
        self.assertTrue(tracecheck.same_double(ring["value"], table["rows"][1][-1]), (ring["value"], table["rows"][1]))
        self.assertEqual(ring["unit"], "%")
        self.assertIn("modelled at %.1f ms" % self.figures("f.block_ms", "100 * hidden[1]")["f.block_ms"],
                      ring["question"])   # modelled compute, said so
        self.assertLess(steps.index(s_ring), steps.index(s_table))

    def test_mixed_precision_is_accounting(self):
        rows = self.rows_by_first(self.table(r"^Model state per parameter"))
        for name, row in rows.items():
            self.assertEqual(sum(row[:4]), row[4], name)
            self.assertEqual(row[5], row[4] / WORLD, name)
        self.assertEqual(rows["bf16 mixed precision"][:5], [2, 2, 4, 8, 16])
        # fp32 gradient accumulation (Megatron-LM): 18 bytes, not 16
        self.assertEqual(rows["bf16, fp32 gradients (Megatron-LM)"][:5], [2, 4, 4, 8, 18])
        self.assertIn("This is accounting", self.markdown_text())
        self.assertIn("keep 18", self.markdown_text())


class PlantedBugs(planted.PlantedCase):
    """Each check can fail: a copy of the lecture with one bug (tests/lib/
    planted.py) must fail the check that guards it. Each bug moves its result
    by over 1% of the largest value; the tolerances are under 1e-4 of it."""

    LECTURE = "lecture_scaling"

    def test_unplanted_copy_passes(self):
        p, trace = self.run_planted("static void mesh_2d(void) {", "static void mesh_2d(void) {")
        self.assertEqual(planted.failed_checks(trace), [])
        self.assertEqual(p.returncode, 0, tracecheck.why(p))

    def test_moe_without_the_capacity(self):
        # every expert seated twice the capacity: tokens one device drops reach their experts
        self.assert_fails("    moe_assign(st->r, capacity);", "    moe_assign(st->r, 2 * capacity);",
                          "expert parallel: the kept tokens' output")

    def test_moe_backward_skips_its_first_all_to_all(self):
        # each rank keeps its own tokens' output gradients: the experts learn from the wrong rows
        self.assert_fails("    dist_all_to_all_in(L->group, recv, send); /* the combine's reverse: g_k dy_t to expert k */",
                          "    tensor_copy(recv, send);",
                          "expert parallel: expert")

    def test_expert_x_data_without_the_replicas_sum(self):
        self.assert_fails("            dist_all_reduce_in(L->data, dw1[j], DIST_SUM);", "            (void)0;",
                          "expert x data: expert")

    def test_load_balancing_without_the_step(self):
        self.assert_fails("    add_(router, drouter); /* SGD: router -= lr dL/drouter */", "    (void)0;",
                          "load-balancing loss")

    def test_tensor_parallel_attention_without_its_all_reduce(self):
        self.assert_fails("    dist_all_reduce(y, DIST_SUM); /* the heads' partial outputs add up */",
                          "    (void)0;",
                          "tensor parallelism: the block's output")

    def test_sequence_parallel_mlp_keeps_its_own_partial(self):
        # the reduce-scatter's sum replaced by the rank's own rows: a partial, not the sum
        self.assert_fails("    dist_reduce_scatter(mine, partial, DIST_SUM);",
                          "    dist_reduce_scatter(mine, partial, DIST_MAX);",
                          "sequence parallelism: the block's output")

    def test_sequence_parallel_backward_all_reduces_instead_of_reduce_scattering(self):
        # the input gradient all-reduced and this rank's rows kept: the right numbers by the wrong
        # collective (4/3 the bytes); only the per-pass check of the conjugates catches it
        self.assert_fails("    tensor *da_mine = reduce_scatter_sequence(da); /* the all-gather's conjugate */",
                          "    dist_all_reduce(da, DIST_SUM); tensor *da_mine = empty(x_mine->shape[0], da->shape[1], da->device), *v = "
                          "row_slice(da, dist_rank() * x_mine->shape[0], (dist_rank() + 1) * x_mine->shape[0]); "
                          "tensor_copy(da_mine, v); tensor_free(v);",
                          "sequence parallel backward: 1 all-reduce, 1 all-gather, 1 reduce-scatter")

    def test_tensor_parallel_backward_without_the_input_gradient_all_reduce(self):
        # each rank keeps its own heads' part of dx: f's conjugate missing
        self.assert_fails("    dist_all_reduce(da, DIST_SUM); /* f backward: the heads' partial input gradients add up */",
                          "    (void)0;",
                          "tensor parallel attention backward: dx")

    def test_sequence_parallel_layer_norm_without_its_all_reduce(self):
        # each rank keeps its quarter's share of LayerNorm's gain and bias gradients
        self.assert_fails("    dist_all_reduce(both, DIST_SUM); /* LayerNorm's gain and bias: every quarter's share added */",
                          "    (void)both;",
                          "sequence parallel attention backward: LayerNorm's dgain")

    # the context-parallelism plants skip the timed sections after it (the same line count)
    CP_ONLY = (("    ring_timing();\n}", "    (void)ring_timing;\n}"), ("    zero_stages();", "    (void)0;"),
               ("    memory();", "    (void)0;"))

    def test_ring_attention_skips_its_own_chunk(self):
        self.assert_fails("        ring_blocks(r, kv, owner, NULL);", "        if (step) ring_blocks(r, kv, owner, NULL);",
                          "ring attention, plain split: this rank's rows", also=self.CP_ONLY)

    def test_ring_backward_drops_the_partial_sums_that_travel(self):
        # each rank sends on only its own share of the chunk's dK, dV: the ranks before it are lost
        self.assert_fails("            add_(part[slot], arrived);", "            (void)arrived;",
                          "ring attention backward, plain split: dK", also=self.CP_ONLY)

    def test_zig_zag_that_pairs_r_with_p_minus_1_minus_r(self):
        # chunks p .. 2p-1 held by nobody, chunks 0 .. p-1 twice: the forward still matches (a chunk of keys
        # merged twice leaves a softmax unchanged), the gradients of the keys counted twice do not, and the
        # work is unequal
        p, trace = self.run_planted("    return a == 0 ? rank : 2 * p - 1 - rank;", "    return a == 0 ? rank : p - 1 - rank;",
                                    also=self.CP_ONLY)
        failed = planted.failed_checks(trace)
        self.assertTrue(any(w.startswith("ring attention backward, zig-zag: dK") for w in failed), failed)
        self.assertTrue(any(w.startswith("zig-zag: every rank computes") for w in failed), failed)
        self.assertNotEqual(p.returncode, 0)

    def test_ulysses_regroups_the_wrong_way(self):
        # the all-to-all's pieces taken as [head][rank] instead of [rank][head]: heads mixed up
        self.assert_fails("        heads[i] = regroup(got, p, hp, c); /* [head of mine][rank j][token]: whole sequences */",
                          "        heads[i] = regroup(got, hp, p, c); /* [head of mine][rank j][token]: whole sequences */",
                          "Ulysses attention: this rank's rows", also=self.CP_ONLY)

    def test_ulysses_refuses_heads_that_do_not_split(self):
        # 6 heads on 4 ranks: an error at the line that refuses, naming both numbers, and no trace clobbered
        p, trace = self.run_planted("(cp_sizes){128, 64, 8} :", "(cp_sizes){128, 48, 6} :", also=self.CP_ONLY)
        self.assertNotEqual(p.returncode, 0)
        text = p.stdout + p.stderr + json.dumps(trace)
        self.assertIn("Ulysses attention: 6 heads do not split over 4 ranks", text)
        with open(os.path.join(ROOT, "lectures", "lecture_scaling.c")) as f:
            line = next(i for i, l in enumerate(f, 1) if 'lecture_fail("Ulysses attention: %d heads' in l)
        self.assertIn("lecture_scaling.c:%d" % line, text)

    def test_mesh_without_the_data_parallel_average(self):
        self.assert_fails("    dist_all_reduce_in(dpg, ga, DIST_AVG); /* the batch halves' gradients averaged */",
                          "    (void)0;",
                          "2-D mesh: the gradients")

    def test_zero1_without_its_all_gather(self):
        # the updated band never reaches the weights: every weight stays about lr from DDP's
        self.assert_fails("        dist_all_gather(w[i], mine); /* every band, updated, to every rank */",
                          "        (void)0;",
                          "ZeRO-1: the weights after AdamW equal DDP's")

    def test_prefetch_waited_for_at_once(self):
        # the "prefetched" steps gather each layer only when it computes: nothing hides
        self.assert_fails("                step[pf][k] = timed_zero3_step(&c, x, band, gp, pf, ms, &gathers[pf][k]);",
                          "                step[pf][k] = timed_zero3_step(&c, x, band, gp, 0, ms, &gathers[pf][k]);",
                          "ZeRO-3 prefetch, modelled compute")

    def test_ring_sent_after_the_block(self):
        # the "overlapped" rings send after each block, as the blocking form does (every round misses)
        self.assert_fails("            step[o][r] = timed_ring(q, &kv, &in, o, ms, &transfers[o][r]);",
                          "            step[o][r] = timed_ring(q, &kv, &in, 0, ms, &transfers[o][r]);",
                          "ring attention, modelled compute")

    def test_modelled_recomputation_that_recomputes_nothing(self):
        self.assert_fails("        if (recompute) model_compute(PRODUCT_MS); /* h = x W again */",
                          "        (void)0;", "recomputation, modelled compute")

    def test_recomputation_that_keeps_h(self):
        # the checkpointed forward keeps every pre-activation (a leak too): twice the formula's bytes
        self.assert_fails("        tensor_free(h); /* recomputed in backward */", "        (void)h;",
                          "activations: the tensors alive hold what the formula says")



if __name__ == "__main__":
    unittest.main()
