"""lecture_pipelines (pipeline schedules today): run it with --quick and check its trace.

The orders are re-checked here by the same rules, written again (each op once, every wait met, messages between
two stages received in the order sent); every order's simulated bubble equals its formula, written again here (ZB-H1's
(p - 1) / (3 m + p - 1) included), and ZB-H1 holds no more activations than 1F1B; the bubbles are recomputed from the
charted timelines; the message counts come from the formula; the planted bugs (an order that deadlocks, a missing W,
every B pushed as a W, each W run right after its B, a ZB-H1 stage holding p + 1 micro-batches) each fail the
lecture's check.

    /usr/bin/python3 tests/lectures/test_lecture_pipelines.py
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

P, V, M = 4, 2, 8
NAMES = ["GPipe", "1F1B", "interleaved 1F1B", "ZB-H1"]
CHUNKS = {"GPipe": 1, "1F1B": 1, "interleaved 1F1B": V, "ZB-H1": 1}
# the bubble of the total time each order must reach (with the modelled times F = B = W, BW = 2F)
FORMULA = {"GPipe": (P - 1) / (M + P - 1), "1F1B": (P - 1) / (M + P - 1),
           "interleaved 1F1B": (P - 1) / (V * M + P - 1), "ZB-H1": (P - 1) / (3 * M + P - 1)}
HELD = "activations held, stage %d"
# modelled times (ms) of one op: a stage's forward 20, B = W = 20, a whole backward 40; a chunk half of each
DUR = {"F": 20.0, "B": 20.0, "W": 20.0, "BW": 40.0}
OVERRUN = "overrun: busiest stage beyond its asked time"
LATE = "lateness: the longest chain's delay"


def parse(text):
    ops = []
    for word in text.split():
        kind = word.rstrip("0123456789.")
        chunk, micro = word[len(kind):].split(".")
        ops.append((kind, int(chunk), int(micro)))
    return ops


def replay(orders, v, split):
    """The rules, written again: (bubble of the total, most in flight per stage), or raise AssertionError."""
    back = "B" if split else "BW"
    want = {(k, c, m) for k in (["F", back] + (["W"] if split else [])) for c in range(v) for m in range(M)}
    for st, ops in enumerate(orders):
        assert sorted(ops) == sorted(want), "stage %d: not every op exactly once" % st
    part = lambda st, c: c * P + st  # noqa: E731
    where = lambda q: (q % P, q // P)  # noqa: E731 (stage, chunk) of model part q
    end, free, nxt, busy, held, inflight = {}, [0.0] * P, [0] * P, [0.0] * P, [0] * P, [0] * P
    sent = {}  # (from, to) -> list of messages in send order; consumed from the front
    scale = 1.0 / v
    while any(nxt[s] < len(orders[s]) for s in range(P)):
        moved = False
        for st in range(P):
            while nxt[st] < len(orders[st]):
                k, c, m = orders[st][nxt[st]]
                q = part(st, c)
                need, src = [], None
                if k == "F" and q > 0:
                    src = (where(q - 1), "F")
                elif k in ("B", "BW"):
                    need.append((st, "F", c, m))
                    if q < v * P - 1:
                        src = (where(q + 1), back)
                elif k == "W":
                    need.append((st, "B", c, m))
                if any(n not in end for n in need):
                    break
                ready = max([free[st]] + [end[n] for n in need])
                if src:
                    (fs, fc), fk = src
                    queue = sent.get((fs, st), [])
                    if not queue:
                        break
                    assert queue[0] == (fk, fc, m), "stage %d receives %s but %s comes first" % (st, (fk, fc, m),
                                                                                                 queue[0])
                    queue.pop(0)
                    ready = max(ready, end[(fs, fk, fc, m)])
                d = DUR[k] * scale
                end[(st, k, c, m)] = free[st] = ready + d
                busy[st] += d
                inflight[st] += (k == "F") - (k in ("W", "BW"))
                held[st] = max(held[st], inflight[st])
                to = None
                if k == "F" and q < v * P - 1:
                    to = where(q + 1)[0]
                if k in ("B", "BW") and q > 0:
                    to = where(q - 1)[0]
                if to is not None:
                    sent.setdefault((st, to), []).append((k, c, m))
                nxt[st] += 1
                moved = True
        assert moved, "deadlock"
    return 1 - max(busy) / max(free), held


class Lecture(tracecheck.LectureRun, tracecheck.WholeTrace, unittest.TestCase):
    NAME = "lecture_pipelines"
    SECTIONS = ["# Pipeline schedules today", "## Interleaved 1F1B", "## Zero-bubble: B and W", "## Run on 4 ranks",
                "## A 3-D mesh: data x pipeline x tensor", "## Choosing a configuration"]

    def bubbles(self):
        return self.row_dicts(self.table(r"^bubbles on 4 stages"))

    def bounds(self):
        return {r["schedule"]: r for r in self.row_dicts(self.table(r"^modelled runs against the formula's bound"))}

    def test_orders_follow_the_rules(self):
        sims = {r["schedule"]: r["simulated"] for r in self.bubbles()}
        for name in NAMES:
            t = self.table(r"^the %s order on 4 stages" % name)
            rows = self.row_dicts(t)
            orders = [parse(r["order"]) for r in rows]
            bubble, held = replay(orders, CHUNKS[name], name == "ZB-H1")
            self.assertAlmostEqual(bubble, sims[name], delta=1e-9, msg=name)
            self.assertEqual(held, [r["most activations held"] for r in rows], name)
            if name == "ZB-H1":  # 1F1B's memory: no stage above 1F1B's stage 0, which holds p
                self.assertEqual(max(held), P, held)
        # every order reaches its formula exactly: the replay's times are whole slots, so the only error is the
        # rounding of one division and one subtraction (about 1e-16); 1e-9 is far above it and far below a slot
        # late (1/27 of the span here)
        formulas = {r["schedule"]: r["formula"] for r in self.bubbles()}
        for name in NAMES:
            self.assertAlmostEqual(sims[name], FORMULA[name], delta=1e-9, msg=name)
            self.assertAlmostEqual(formulas[name], FORMULA[name], delta=1e-9, msg=name)

    def test_bubbles_messages_gradients(self):
        for r in self.bubbles():
            v = CHUNKS[r["schedule"]]
            self.assertEqual(r["messages"], 2 * M * (v * P - 1), r)  # every micro-batch over v p - 1 boundaries, twice
            if r["run"] == "real":
                self.assertLessEqual(r["max |gradient - one device|"], r["tolerance"], r)
                self.assertLess(r["tolerance"], 1e-2)
            else:  # within 10% of the formula, widened by the machine's disturbance (the lecture's bound)
                bound = self.bounds()[r["schedule"]]
                self.assertEqual((bound["bubble"], bound["span"]), (r["bubble"], r["span"]), r)
                self.assertLessEqual(r["bubble"], 1.10 * FORMULA[r["schedule"]] + bound[LATE] / r["span"], r)
                self.assertGreaterEqual(r["bubble"], 0.90 * FORMULA[r["schedule"]] - bound[OVERRUN] / r["span"], r)
        rows = {(r["schedule"], r["run"]): r for r in self.bubbles()}
        held = {k: [r[HELD % s] for s in range(P)] for k, r in rows.items()}
        for run in ("real", "modelled"):  # counted by the ranks as they ran
            self.assertEqual(held[("GPipe", run)], [M] * P)
            self.assertEqual(held[("1F1B", run)], [P - s for s in range(P)])
            self.assertEqual(held[("ZB-H1", run)][0], P)
            self.assertLessEqual(max(held[("ZB-H1", run)]), P)
        self.assertLess(rows[("ZB-H1", "modelled")]["bubble"], rows[("1F1B", "modelled")]["bubble"])

    def test_bubbles_recomputed_from_the_chart(self):
        spec = self.one_plot()
        rows = {(r["schedule"], r["run"]): r for r in self.bubbles()}
        for (name, run), r in rows.items():
            values = [x for x in spec["data"]["values"] if x["row"].startswith("%s %s: stage" % (name, run))]
            self.assertTrue(all(x.get("modelled", False) == (run == "modelled") for x in values))
            busy = [sum(x["end"] - x["start"] for x in values if x["row"].endswith("stage %d" % s)) for s in range(P)]
            span = max(x["end"] for x in values) - min(x["start"] for x in values)
            # the chart's values are the floats the bubble came from, printed: 1e-4 of a 0-1 fraction is far above
            # their rounding and far below any schedule's difference
            self.assertAlmostEqual(1 - max(busy) / span, r["bubble"], delta=1e-4, msg=(name, run))
            if run == "modelled":  # the overrun: the busiest stage's busy time beyond what its ops asked for
                asked = [sum(DUR[x["series"]] / CHUNKS[name] for x in values if x["row"].endswith("stage %d" % s))
                         for s in range(P)]
                self.assertEqual(len(set(asked)), 1, (name, asked))  # every stage asks for the same work
                # float32 stamps of up to ~1 s (2^-14 ms apart) summed over up to 48 ops: 0.01 ms is above that
                # rounding and below the overrun of one late wake-up (a millisecond or more)
                bound = self.bounds()[name]
                self.assertAlmostEqual(max(0.0, max(busy) - asked[0]), bound[OVERRUN], delta=0.01, msg=name)
                self.assertAlmostEqual(bound["lower bound"], 0.9 * FORMULA[name] - bound[OVERRUN] / r["span"],
                                       delta=1e-9, msg=name)  # the same doubles, one division apart
                self.assertAlmostEqual(bound["upper bound"], 1.1 * FORMULA[name] + bound[LATE] / r["span"],
                                       delta=1e-9, msg=name)
                self.assertGreaterEqual(bound[LATE], 0.0, name)


MESH = {"dp": 4, "pp": 2, "tp": 1}  # rank = 4 dp + 2 pp + tp: the stride of each axis
AXIS = {"tensor": "tp", "pipeline": "pp", "data": "dp"}
MESH_LAYERS, MICRO, PAIRS = 8, 4, 2  # 2 stages of 4 layers, 2 column/row pairs each




def configuration_figures(m, tp, pp, ep):
    """configure.c's formulas, written again from the inputs table's row m (a dict): bytes and seconds."""
    GB, b = 1e9, 1
    sbh = m["sequence"] * b * m["hidden"]
    dp = m["GPUs"] / (tp * pp)
    experts_all = m["MoE layers"] * m["routed experts a layer"] * 3 * m["hidden"] * m["expert hidden"]
    dense, experts = (m["parameters"] - experts_all) / (tp * pp), experts_all / (tp * pp * ep)
    fsdp = m["model"].startswith("Llama")  # FSDP shards the gradients too; DeepSeek-V3's ZeRO-1 does not
    f = {"DP": dp, "parameters a rank": dense + experts, "weights": 2 * (dense + experts) / GB,
         "gradients": 2 * (dense + experts) / (dp if fsdp else 1) / GB,
         "optimizer": 12 * (dense / dp + experts / (dp / ep)) / GB,
         "activations": m["layers"] * 34 * sbh / tp / GB, "activations, recomputed": m["layers"] * 2 * sbh / tp / GB}
    f["total"] = f["weights"] + f["gradients"] + f["optimizer"] + f["activations"]
    f["total, recomputed"] = f["total"] - f["activations"] + f["activations, recomputed"]
    memory = m["GPU memory"]
    f["fits"] = "yes" if f["total"] <= memory else "with recomputation" if f["total, recomputed"] <= memory else "no"
    micro = m["sequences a step"] / (dp * b)
    f["micro-batches a replica"], f["tokens a step"] = micro, m["sequences a step"] * m["sequence"]
    f["bubble"] = (pp - 1) / (micro + pp - 1)
    calls = 4 * m["layers"] / pp * micro
    f["tensor (NVLink)"] = calls * 2 * (tp - 1) / tp * sbh * 2 / GB if tp > 1 else 0
    f["pipeline (network)"] = 2 * micro * sbh * 2 / tp / GB if pp > 1 else 0
    de = dp / ep
    f["data (network)"] = (2 * (dp - 1) / dp * 2 * dense + (2 * (de - 1) / de * 2 * experts if de > 1 else 0)) / GB
    f["expert"] = (m["MoE layers"] / pp * micro * m["sequence"] * b * (4 if ep > 8 else 8) * m["hidden"] * 3 * 2 / GB
                   if ep > 1 else 0)
    on_nvlink = 1 < ep <= 8
    flops, peak = 6 * m["active parameters"] * f["tokens a step"], m["peak BF16"] * 1e12
    f["compute"] = flops / (m["GPUs"] * peak) * (8 / 6 if f["fits"] == "with recomputation" else 1)
    critical = f["tensor (NVLink)"] / m["NVLink"] + (calls * 10e-6 if tp > 1 else 0)
    hidden = (f["pipeline (network)"] + f["data (network)"] + (0 if on_nvlink else f["expert"])) / m["network"] + \
        (f["expert"] / m["NVLink"] if on_nvlink else 0)
    f["step (modelled)"] = f["compute"] / (1 - f["bubble"]) + critical + max(0.0, hidden - f["compute"])
    f["MFU (modelled)"] = flops / (f["step (modelled)"] * m["GPUs"] * peak)
    return f


class Mesh(tracecheck.LectureRun, unittest.TestCase):
    """The 3-D mesh against one device, and its bytes per axis against the formula; the configuration tables
    recomputed from the papers' figures."""
    NAME = "lecture_pipelines"

    def sizes(self):
        return self.figures("c.lr", "c.steps", "c.batch", "c.width")

    def test_every_rank_equals_one_device(self):
        rows = self.row_dicts(self.table(r"^the 2 x 2 x 2 mesh after"))
        c = self.sizes()
        self.assertEqual([r["rank"] for r in rows], list(range(8)))
        bound = tracecheck.adamw_rounding_bound(c["c.lr"], c["c.steps"])
        for r in rows:
            self.assertEqual(r["rank"], sum(r[a] * stride for a, stride in MESH.items()), r)
            self.assertLessEqual(r["max |step-0 gradient - one device|"], r["gradient tolerance"], r)
            # the tolerance is 2 (layers + 1) max(batch, width) 2^-24 of the largest gradient (lib/mlp.h): that
            # factor alone is ~1e-4 here; a gradient a million times larger than the tolerance would hide nothing
            factor = 2 * (MESH_LAYERS + 1) * max(c["c.batch"], c["c.width"]) * 2.0 ** -24
            self.assertGreater(r["gradient tolerance"], 0)
            self.assertLess(r["gradient tolerance"], factor, r)
            self.assertLessEqual(r["max |weights - one device|"], r["AdamW rounding bound"], r)
            # the bound recomputed here; 1e-12 relative: a dozen double roundings apart at most
            self.assertAlmostEqual(r["AdamW rounding bound"], bound, delta=1e-12 * bound)
            self.assertEqual(r["max |weights - other replica|"], 0, r)  # averaged: the same floats

    def test_bytes_per_axis(self):
        c = self.sizes()
        act = c["c.batch"] // (2 * MICRO) * c["c.width"] * 4  # one micro-batch's activation, float32
        rows = self.row_dicts(self.table(r"^bytes one rank sends in one step, along each axis"))
        self.assertEqual(sorted({(r["axis"], r["rank"]) for r in rows}),
                         sorted((a, q) for a in AXIS for q in (0, 2, 4, 6)))
        for r in rows:
            stage = (r["rank"] // 2) % 2
            self.assertEqual(r["stage"], stage)
            # the peer differs from the rank along this axis only
            self.assertEqual(r["peer"], r["rank"] ^ MESH[AXIS[r["axis"]]], r)
            want = {"tensor": MICRO * (2 * PAIRS - (stage == 0)) * act,  # all-reduce of 2: 2 (2 - 1) / 2 x buffer
                    "pipeline": MICRO * act,                          # one activation or gradient a micro-batch
                    "data": MESH_LAYERS // 2 * c["c.width"] // 2 * c["c.width"] * 4}[r["axis"]]
            self.assertEqual(r["nominal"], want, r)
            self.assertEqual(r["formula"], want, r)
            self.assertEqual(r["measured to the peer"], r["measured"], r)
            if r["axis"] == "pipeline":  # point to point: measured exactly, as handed to the transport
                self.assertEqual(r["measured"], want, r)

    def inputs(self):
        return {r["model"]: r for r in self.row_dicts(self.table(r"^the two published runs"))}

    def configurations(self):
        rows = self.row_dicts(self.table(r"^step 1, fit in memory"))
        models = self.inputs()
        return [(r, models[next(m for m in models if r["configuration"].startswith(m))]) for r in rows]

    def test_configuration_tables_recomputed(self):
        step2 = {r["configuration"]: r for r in self.row_dicts(self.table(r"^step 2, reach the global batch"))}
        step3 = {r["configuration"]: r for r in self.row_dicts(self.table(r"^step 3, maximise throughput"))}
        models = self.inputs()
        self.assertEqual(models["Llama 3 405B"]["GPUs"], 16384)  # the papers' own figures
        self.assertEqual(models["DeepSeek-V3"]["GPUs"], 2048)
        published = []
        for r, m in self.configurations():
            f = configuration_figures(m, r["TP"], r["PP"], r["EP"])
            # the same double arithmetic in another order: 1e-9 relative is far above its rounding (1e-15) and far
            # below any formula's slip (a factor, a term)
            close = lambda a, b: self.assertTrue(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (r, a, b))  # noqa
            for k in ("DP", "parameters a rank", "weights", "gradients", "optimizer", "activations",
                      "activations, recomputed", "total", "total, recomputed"):
                close(r[k], f[k])
            self.assertEqual(r["fits"], f["fits"], r)
            s2 = step2[r["configuration"]]
            for k in ("micro-batches a replica", "tokens a step", "bubble"):
                close(s2[k], f[k])
            candidate = f["fits"] != "no" and f["micro-batches a replica"] >= 1
            self.assertEqual(r["configuration"] in step3, candidate, r)
            if candidate:
                s3 = step3[r["configuration"]]
                for k in ("tensor (NVLink)", "pipeline (network)", "data (network)", "expert", "compute",
                          "step (modelled)", "MFU (modelled)"):
                    close(s3[k], f[k])
                if s3["published"] == "yes":
                    published.append(r["configuration"])
        self.assertEqual(published, ["Llama 3 405B TP 8 PP 16", "DeepSeek-V3 TP 1 PP 16 EP 64"])
        # the memory of the published runs, by hand: Llama's 405e9 / (8 x 16) parameters a rank, 16-bit weights
        llama = [r for r, _ in self.configurations() if r["configuration"] == "Llama 3 405B TP 8 PP 16"][0]
        self.assertAlmostEqual(llama["weights"], 2 * 405e9 / 128 / 1e9, delta=1e-9)

    def test_prediction_is_the_tables_figure(self):
        steps = self.trace["steps"]
        where = {}
        for i, s in enumerate(steps):
            for r in s["renderings"]:
                if r["type"] == "predict" and "published configuration (TP 8 x PP 16" in r["question"]:
                    where["predict"], value = i, r["value"]
                if r["type"] == "table" and (r.get("caption") or "").startswith("step 1, fit in memory"):
                    where["table"] = i
        self.assertLess(where["predict"], where["table"])  # asked before the verdicts are shown
        row = [r for r, _ in self.configurations() if r["configuration"] == "Llama 3 405B TP 8 PP 16"][0]
        self.assertEqual(value, row["total"])  # the same double, written twice by the same code
        self.assertEqual(row["fits"], "yes" if value <= 80 else "with recomputation")


class Planted(unittest.TestCase):
    """Each planted bug fails the lecture's order check."""

    def failed(self, find, replace, source=None):
        with planted.binary("lecture_pipelines", find, replace, source=source) as exe, \
                tempfile.TemporaryDirectory() as out:
            p, _ = tracecheck.run_quick(exe, out)
            self.assertNotEqual(p.returncode, 0)
            with open(os.path.join(out, "lecture_pipelines.failed.json")) as f:
                return planted.failed_checks(json.load(f))

    def test_deadlocking_order(self):  # a backward before its forward: the last stage waits forever
        got = self.failed("            push_nth(s, st, OP_F, f++);\n            push_nth(s, st, OP_BW, b++);",
                          "            push_nth(s, st, OP_BW, b++);\n            push_nth(s, st, OP_F, f++);")
        self.assertTrue(any(w.startswith("the 1F1B order") for w in got), got)

    def test_missing_w(self):  # the last micro-batch's W never pushed
        got = self.failed("} else if (fits && w < b) schedule_push(s, st, OP_W, 0, w++);",
                          "} else if (fits && w < b) if (w++ != M - 1) schedule_push(s, st, OP_W, 0, w - 1);")
        self.assertTrue(any(w.startswith("the ZB-H1 order:") for w in got), got)

    def test_b_pushed_as_w(self):
        got = self.failed("push(s, st, OP_B, 0, b++);", "push(s, st, OP_W, 0, b++);")
        self.assertTrue(any(w.startswith("the ZB-H1 order:") for w in got), got)

    def test_w_right_after_b(self):  # no forward while a W is pending, so each W follows its B, as the greedy order
        got = self.failed("else if (fits && f < M && f - w < P &&", "else if (fits && f < M && w == b && f - w < P &&")
        # the forwards fall behind the B's timetable: a B comes before its forward, which the replay finds
        self.assertTrue(any(w.startswith("the ZB-H1 order:") for w in got), got)

    def test_cool_down_not_filled(self):  # the B's of the cool-down one every 3 slots, as in the steady state
        got = self.failed("first + 3 * steady + 2 * (k - steady)", "first + 3 * steady + 3 * (k - steady)")
        # a valid order (each op once, every wait met), but its bubble misses the formula
        self.assertFalse(any(w.startswith("the ZB-H1 order:") for w in got), got)
        self.assertTrue(any(w.startswith("the ZB-H1 order's simulated bubble") for w in got), got)

    def test_tensor_group_on_the_data_axis(self):  # the TP all-reduces sum the two replicas' same halves
        got = self.failed("k.tp = axis_group(rank, AX_TP);", "k.tp = axis_group(rank, AX_DP);",
                          "lecture_pipelines/mesh.c")
        self.assertTrue(any(w.startswith("3-D mesh: every rank's step-0 gradients") for w in got), got)
        self.assertTrue(any(w.startswith("3-D mesh: each axis's measured bytes") for w in got), got)

    def test_missing_data_parallel_average(self):  # each replica steps with its own half batch's gradient
        got = self.failed("dist_all_reduce_in(k.dp, k.g[j], DIST_AVG);", "(void)k.dp;", "lecture_pipelines/mesh.c")
        self.assertTrue(any(w.startswith("3-D mesh: every rank's step-0 gradients") for w in got), got)
        self.assertTrue(any(w.startswith("3-D mesh: the two data-parallel replicas") for w in got), got)

    def test_recomputation_for_free(self):  # no second forward: Llama's PP 8, with the smaller bubble, ranks first
        got = self.failed("(f.fit == FITS_RECOMPUTED ? 8.0 / 6 : 1)", "(f.fit == FITS_RECOMPUTED ? 1.0 : 1)",
                          "lecture_pipelines/configure.c")
        self.assertTrue(any(w.startswith("Llama 3 405B: the published configuration") for w in got), got)

    def test_modelled_run_of_another_order(self):  # ZB-H1's modelled ranks run 1F1B's order (W with its B)
        got = self.failed("modelled[w] = run_modelled(&s[w], &c, expected);",
                          "schedule *t = malloc(sizeof *t); *t = s[w == ZB_H1 ? ONE_F_ONE_B : w]; t->which = w; "
                          "modelled[w] = run_modelled(t, &c, expected); free(t);")
        self.assertTrue(any(w.startswith("ZB-H1, modelled: bubble") for w in got), got)

    def test_more_memory_than_1f1b(self):  # a stage may hold p + 1 micro-batches
        got = self.failed("else if (fits && f < M && f - w < P &&", "else if (fits && f < M && f - w < P + 1 &&")
        self.assertTrue(any(w.startswith("ZB-H1 holds") for w in got), got)


if __name__ == "__main__":
    unittest.main()
