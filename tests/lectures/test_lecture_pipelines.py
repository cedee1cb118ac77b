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
    SECTIONS = ["# Pipeline schedules today", "## Interleaved 1F1B", "## Zero-bubble: B and W", "## Run on 4 ranks"]

    def bubbles(self):
        return self.row_dicts(self.table(r"^bubbles on 4 stages"))

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
            else:  # within 10% of the formula (the lecture's bound)
                self.assertLessEqual(abs(r["bubble"] - FORMULA[r["schedule"]]), 0.10 * FORMULA[r["schedule"]], r)
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


class Planted(unittest.TestCase):
    """Each planted bug fails the lecture's order check."""

    def failed(self, find, replace):
        with planted.binary("lecture_pipelines", find, replace) as exe, tempfile.TemporaryDirectory() as out:
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

    def test_more_memory_than_1f1b(self):  # a stage may hold p + 1 micro-batches
        got = self.failed("else if (fits && f < M && f - w < P &&", "else if (fits && f < M && f - w < P + 1 &&")
        self.assertTrue(any(w.startswith("ZB-H1 holds") for w in got), got)


if __name__ == "__main__":
    unittest.main()
