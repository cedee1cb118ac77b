"""lecture_collectives: run it with --quick and check its numbers from the trace.

Every hand-built all-reduce must equal dist_all_reduce's result, with the
steps and bytes per rank the formulas below give; the deadlock must be
reported by the runtime at the lecture's line, as an expected failure
(spawn_expect_failure) after which the lecture goes on; alpha and beta must be
positive, and the predicted crossover and model times must follow from them.
The trace must validate against the schema with every stack line accurate.

    /usr/bin/python3 tests/lectures/test_lecture_collectives.py
"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT

NAME = "lecture_collectives"
SOURCE = os.path.join(ROOT, "lectures", NAME + ".c")

SECTIONS = [
    "# Collectives from scratch",
    "## Point-to-point: send and receive",
    "## The non-blocking pair",
    "## Two ways to hang",
    "### Both ranks send first",
    "### Touching a buffer before `wait`",
    "## All-reduce by hand",
    "### Everyone to everyone",
    "### Reduce, then broadcast, at a root",
    "### Ring: reduce-scatter, then all-gather",
    "### Tree",
    "## The alpha-beta model",
    "## Topology",
    "## Summary",
]

ALGORITHMS = ["everyone to everyone", "reduce + broadcast", "ring", "tree"]


def binary():
    return tracecheck.lecture(NAME)


half_unit = tracecheck.half_unit


def expected_tally(name, rank, n, d):
    """(steps, bytes sent) of `rank` in the hand-built all-reduce `name` of
    d floats on n ranks, from the algorithms' definitions."""
    full = 4 * d
    if name == "everyone to everyone":
        return n - 1, (n - 1) * full
    if name == "reduce + broadcast":
        return (2 * (n - 1), (n - 1) * full) if rank == 0 else (2, full)
    if name == "ring":
        return 2 * (n - 1), 2 * (n - 1) * full // n
    if name == "tree":
        # children: rank + mask for every mask below rank's lowest set bit
        # (every mask for rank 0); one message to the parent unless root.
        children = sum(1 for k in range(int(math.log2(n))) if rank == 0 or (1 << k) < (rank & -rank))
        up = 1 if rank else 0
        return 2 * (children + up), (children + up) * full
    raise AssertionError(name)


def line_of(function, text):
    """The source line inside `function` that holds `text`."""
    return tracecheck.line_of(SOURCE, text, within=function)


class LectureCollectives(tracecheck.LectureRun, tracecheck.ValidTrace, unittest.TestCase):
    NAME = NAME
    SECTIONS = SECTIONS

    def renderings(self, kind):
        """(step, rendering) of every rendering of this kind, in order."""
        return [(s, r) for s in self.trace["steps"] for r in s["renderings"] if r["type"] == kind]

    def tables(self, caption, rank=None):
        """(step, match of the caption, rendering) of every table() whose caption matches."""
        return [(s, m, r) for s, r in self.renderings("table")
                if rank is None or s["rank"] == rank for m in [re.search(caption, r.get("caption", ""))] if m]

    def markdown(self, pattern, rank=None):
        out = []
        for s, r in self.renderings("markdown"):
            if rank is not None and s["rank"] != rank:
                continue
            m = re.search(pattern, r["data"], re.S)
            if m:
                out.append((s, m))
        return out

    def test_send_recv(self):
        sent = self.markdown(r"^rank 0 sent tensor\(\[([^\]]*)\]")
        got = self.markdown(r"^rank 1 received tensor\(\[([^\]]*)\]")
        before = self.markdown(r"^rank 1 before receiving: tensor\(\[([^\]]*)\]")
        self.assertEqual(len(sent), 1)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][1].group(1), sent[0][1].group(1))
        self.assertNotEqual(before[0][1].group(1), got[0][1].group(1), "the receive changed nothing")
        # the non-blocking pair: both ranks hold the sent value after the wait
        waited = self.markdown(r"^rank (\d) after wait: tensor\(\[([^\]]*)\]")
        self.assertEqual(sorted(m.group(1) for _, m in waited), ["0", "1"])
        self.assertEqual(len({m.group(2) for _, m in waited}), 1)
        self.assertEqual([float(v) for v in waited[0][1].group(2).split(",")], [3.0] * 4)

    def expected_errors(self, function, what):
        """The error steps stamped in `function` (spawn_expect_failure's
        ranks): there must be some, each marked expected."""
        errors = [(s, r) for s, r in self.renderings("error") if s["stack"][-1]["function"] == function]
        self.assertTrue(errors, "the %s's report is not in the trace" % what)
        self.assertTrue(all(r.get("expected") is True for _, r in errors), errors)
        return errors

    def test_deadlock_reported_at_the_send(self):
        # spawn_expect_failure(): the report is the ranks' error steps, marked
        # as expected, and the run goes on (it exited 0: setUp)
        line = line_of("both_send_first_main", "dist_send(mine, 1 - rank);")
        spawn_line = line_of("mistakes", "spawn_expect_failure(both_send_first_main")
        errors = self.expected_errors("both_send_first_main", "deadlock")
        self.assertEqual(sorted(s["rank"] for s, _ in errors), [0, 1])
        for s, r in errors:
            self.assertEqual((s["stack"][-1]["function"], s["stack"][-1]["line"]), ("both_send_first_main", line))
            self.assertRegex(r["data"], r"^lectures/%s\.c:%d: deadlock: rank %d of 2 waits in dist_send\(\) in "
                             r"both_send_first_main\(\) for rank %d to post the receive of this send"
                             % (NAME, line, s["rank"], 1 - s["rank"]))
        sp = self.trace["spawns"][errors[0][0]["spawn"]]
        self.assertEqual((sp["status"], sp.get("expect_failure"), sp["stack"][-1]["line"]), ("failed", True, spawn_line))
        self.assertEqual(self.trace["meta"]["status"], "ok")
        # the spawns after it ran: the two fixes exchanged their tensors
        later = [s["spawn"] for s, _ in self.markdown(r"^(ordered by rank|sendrecv): rank")]
        self.assertTrue(later and min(later) > errors[0][0]["spawn"])

    def test_touching_before_wait_is_caught_at_its_line(self):
        # spawn_expect_failure() of touch_then_wait_main: rank 0's error names
        # its add_scalar_ line and the isend's; nothing else failed
        touch = line_of("touch_then_wait_main", "add_scalar_(t, 100.0f);")
        isend = line_of("touch_then_wait_main", "dist_isend(t, 1);")
        errors = self.expected_errors("touch_then_wait_main", "race")
        mine = [(s, r) for s, r in errors if "add_scalar_" in r["data"]]
        self.assertEqual([(s["rank"], s["stack"][-1]["line"]) for s, _ in mine], [(0, touch)], errors)
        self.assertEqual(len(mine), 1, errors)
        self.assertIn("add_scalar_: changes a tensor that dist_isend at lectures/%s.c:%d is still sending"
                      % (NAME, isend), mine[0][1]["data"])
        sp = self.trace["spawns"][mine[0][0]["spawn"]]
        self.assertEqual((sp["status"], sp.get("expect_failure")), ("failed", True))
        others = [r for s, r in self.renderings("error") if not r.get("expected")]
        self.assertEqual(others, [])

    def test_safe_patterns_exchange(self):
        for label in ("ordered by rank", "sendrecv"):
            got = self.markdown(r"^%s: rank (\d) got (\d+)\[([-0-9.]+)\.\.\.\] from rank (\d)" % label)
            self.assertEqual(len(got), 2, label)
            for _, m in got:
                rank, other = int(m.group(1)), int(m.group(4))
                self.assertEqual(other, 1 - rank)
                self.assertEqual(float(m.group(3)), other + 1.0, "%s: rank %d got the wrong tensor" % (label, rank))
        kept = self.markdown(r"^rank 1 received \d+\[([-0-9.]+)\.\.\.\]: the value before")
        self.assertEqual([float(m.group(1)) for _, m in kept], [1.0])

    def test_hand_built_all_reduces(self):
        seen = []
        for _, m, table in self.tables(r"^(.+), D = (\d+) floats on (\d+) ranks; result ", rank=0):
            name, d, n = m.group(1), int(m.group(2)), int(m.group(3))
            rows = table["rows"]
            self.assertEqual([r[0] for r in rows], list(range(n)), name)
            for rank, steps, sent, diff in rows:
                # whole-number inputs: every order of additions is exact, so
                # equality with dist_all_reduce is exact too
                self.assertEqual(diff, 0.0, "%s differs from dist_all_reduce on rank %s" % (name, rank))
                self.assertEqual((steps, sent), expected_tally(name, rank, n, d),
                                 "%s rank %s: steps, bytes" % (name, rank))
            seen.append(name)
        self.assertEqual(seen, ALGORITHMS)

    def alpha_beta(self):
        m = self.markdown(r"^alpha = ([0-9.e+-]+) s, beta = ([0-9.e+-]+) s/byte")
        self.assertEqual(len(m), 1)
        return m[0][1].group(1), m[0][1].group(2)

    def test_alpha_beta_positive_and_the_crossover_follows(self):
        a_s, b_s = self.alpha_beta()
        alpha, beta = float(a_s), float(b_s)
        self.assertGreater(alpha, 0)
        self.assertGreater(beta, 0)
        n = 4
        L = math.log2(n)

        def crossover(a, b):
            return a * (n - 1 - L) / (b * (L - (n - 1) / n))
        pred = self.markdown(r"^predicted: on 4 ranks the tree beats the ring below (\d+) bytes")
        self.assertEqual(len(pred), 1)
        # alpha and beta are printed to 4 digits: the crossover may move by
        # what their rounding allows, plus the half byte of its own printing
        lo = crossover(alpha - half_unit(a_s), beta + half_unit(b_s))
        hi = crossover(alpha + half_unit(a_s), beta - half_unit(b_s))
        self.assertTrue(lo - 0.5 <= float(pred[0][1].group(1)) <= hi + 0.5, (lo, pred[0][1].group(1), hi))

    def sweep(self):
        """The sweep table's rows: bytes, ring (us), tree (us), faster, model: ring, model: tree, and the
        ring's and the tree's time per step (us)."""
        m = self.tables(r"^all-reduce on 4 ranks sharing (\d+) cores: ring against tree$")
        self.assertEqual(len(m), 1)
        self.assertEqual(int(m[0][1].group(1)), os.cpu_count())
        table = m[0][2]
        self.assertEqual([(c["name"], c.get("unit")) for c in table["columns"]],
                         [("bytes", None), ("ring", "us"), ("tree", "us"), ("faster", None),
                          ("model: ring", "us"), ("model: tree", "us"), ("ring, per step", "us"),
                          ("tree, per step", "us")])
        return table["rows"]

    def test_sweep_model_and_measured_crossover(self):
        a_s, b_s = self.alpha_beta()
        alpha, beta, n = float(a_s), float(b_s), 4
        rows = self.sweep()
        self.assertGreaterEqual(len(rows), 3)
        for b, ring, tree, faster, ring_model, tree_model, _, _ in rows:
            self.assertEqual(faster, "tree" if tree < ring else "ring")
            # the model columns from alpha and beta; tolerance: alpha and
            # beta as the note prints them, to 4 digits (relative 1e-3)
            for value, want in ((ring_model, 2 * (n - 1) * (alpha + beta * b / n) * 1e6),
                                (tree_model, 2 * math.log2(n) * (alpha + beta * b) * 1e6)):
                self.assertAlmostEqual(value, want, delta=1e-3 * want + 1e-9)
        # each step's time: the whole all-reduce's over its steps
        for r in rows:
            self.assertAlmostEqual(r[6], r[1] / (2 * (n - 1)), delta=1e-9 * r[1])
            self.assertAlmostEqual(r[7], r[2] / (2 * math.log2(n)), delta=1e-9 * r[2])
        measured = self.markdown(r"^measured: (.*)")
        self.assertEqual(len(measured), 1)
        text = measured[0][1].group(1)
        ring_wins = [r[1] < r[2] for r in rows]
        won = ", ".join("%.0f" % r[0] for r, w in zip(rows, ring_wins) if w)
        first = len(rows) - 1   # the first size from which on the ring won every time
        while first > 0 and ring_wins[first - 1]:
            first -= 1
        crossover = self.rows_of(r"^where the ring takes over on 4 ranks$")
        self.assertEqual(crossover[0][0], "the model: the tree wins below")
        if all(ring_wins):
            self.assertEqual(text, "the ring was faster at every swept size")
        elif not any(ring_wins):
            self.assertEqual(text, "the tree was faster at every swept size")
        elif not ring_wins[-1]:
            self.assertEqual(text, "the ring was faster at %s bytes, the tree at every other size, the largest "
                             "included" % won)
        elif not any(ring_wins[:first]):   # one crossover
            self.assertEqual(text, "the tree was faster below %.0f bytes, the ring from there on" % rows[first][0])
        else:   # the winner changes more than once: every size the ring won is named
            self.assertTrue(text.startswith("the ring was faster at %s bytes, the tree at every other size: no "
                                            "single crossover. From %.0f bytes on the ring won at every size"
                                            % (won, rows[first][0])), text)
        if ring_wins[-1] and not all(ring_wins):
            self.assertEqual(crossover[1], ["measured: the ring won at this size and every larger one", rows[first][0]])
        else:
            self.assertEqual(len(crossover), 1)

    def rows_of(self, caption):
        m = self.tables(caption)
        self.assertEqual(len(m), 1, caption)
        return m[0][2]["rows"]

    def test_the_check_costs_what_the_note_says(self):
        """The share of a message's time the runtime's check takes is
        computed from the two times the note prints, not written in."""
        m = self.markdown(r"^The same smallest message with the runtime's check on every send took ([0-9.]+) us one "
                          r"way, against ([0-9.]+) us without: the check costs ([-0-9.]+) us a message here, "
                          r"([-0-9]+)% of such a message's time through the runtime\.")
        self.assertEqual(len(m), 1)
        checked, plain, cost, share = (float(g) for g in m[0][1].groups())
        self.assertAlmostEqual(cost, checked - plain, delta=0.0101)   # three numbers printed to 0.01
        ping = self.rows_of(r"^ping-pong: one-way time")
        self.assertAlmostEqual(plain, ping[0][1], delta=0.005 + 1e-12)
        # the share from the printed numbers: each off by 0.005 at most
        lo, hi = (cost - 0.01) / (checked + 0.005), (cost + 0.01) / (checked - 0.005)
        self.assertTrue(100 * lo - 0.5 <= share <= 100 * hi + 0.5, (lo, share, hi))
        self.assertNotIn("more than a third", m[0][1].string)

    def test_the_fitted_model_is_tabulated(self):
        a_s, b_s = self.alpha_beta()
        (alpha_us, beta_ns, bandwidth), = self.rows_of(r"^the alpha-beta model, fitted to the ping-pong$")
        self.assertAlmostEqual(alpha_us, float(a_s) * 1e6, delta=half_unit(a_s) * 1e6)
        self.assertAlmostEqual(beta_ns, float(b_s) * 1e9, delta=half_unit(b_s) * 1e9)
        self.assertAlmostEqual(bandwidth, 1 / beta_ns, delta=1e-9 * bandwidth)
        # the two letters of lecture_08 are another measurement, and it says so
        self.assertTrue(self.markdown(r"^lecture_08 fits the same two letters to another measurement"))

    def test_the_crossovers_difference_is_explained_with_the_runs_numbers(self):
        """The lecture does not claim the measured crossover follows from
        alpha and beta; it names what the model leaves out, each with a
        figure that must be the run's own (worked out here from the tables)."""
        a_s, b_s = self.alpha_beta()
        alpha, beta, n = float(a_s), float(b_s), 4
        rows = self.sweep()
        # the note's figures by name (lecture_collectives.c, note_crossovers)
        why = self.noted("predicted", "said", "ring_step", "tree_step")
        self.assertEqual(len(why), 1)
        _, note, f = why[0]
        text = note["data"]
        pred = [p for _, _, p in self.noted("n", "predicted") if "said" not in p]   # the prediction's own note
        self.assertEqual([p["predicted"] for p in pred], [f["predicted"]])   # the same double
        ring_wins = [r[1] < r[2] for r in rows]
        first = len(rows) - 1
        while first > 0 and ring_wins[first - 1]:
            first -= 1
        self.assertEqual(f["said"], "the tree won at the largest size" if not ring_wins[-1] else
                         "the ring won at every size" if first == 0 else
                         "the ring won for good from %.0f bytes" % rows[first][0])
        # per step on the smallest tensor: the ring's 2(N-1) steps, the tree's
        # 2 log2 N; the lecture's doubles from the seconds the table shows in us
        # (its us are the seconds times 1e6: a rounding or two, 1e-12 relative)
        self.assertEqual(f["n"], n)
        self.assertTrue(math.isclose(f["ring_step"], rows[0][1] / (2 * (n - 1)), rel_tol=1e-12), f)
        self.assertTrue(math.isclose(f["tree_step"], rows[0][2] / (2 * math.log2(n)), rel_tol=1e-12), f)
        # alpha: the fit's own double, as its note gave it
        self.assertTrue(tracecheck.same_double(f["alpha * 1e6"], self.figures("alpha", "beta")["alpha"] * 1e6), f)
        self.assertLessEqual(abs(f["alpha * 1e6"] - alpha * 1e6), half_unit(a_s) * 1e6)   # alpha_beta's print
        self.assertIn("the ring, whose every step" if rows[0][1] / 6 > rows[0][2] / 4 else "the tree's steps", text)
        # the ping-pong size furthest above the two-point line, and by how much
        ping = self.tables(r"^ping-pong: one-way time")[0][2]["rows"]
        ratios = [(r[1] / r[2], r[0]) for r in ping[1:-1]]
        worst, at = max(ratios)
        m = re.search(r"ping-pong's (\d+)-byte message took ([0-9.]+) times", text) or \
            re.search(r"within ([0-9.]+) times the line .*?\(the worst at (\d+) bytes\)", text)
        self.assertIsNotNone(m, text)
        if "ping-pong's" in m.group(0):
            self.assertEqual(float(m.group(1)), at)
            # the table's model column is the line rounded to what the
            # table holds (full precision here); 0.05 is the note's rounding
            self.assertAlmostEqual(float(m.group(2)), worst, delta=0.05 + 0.01 * worst)
        # the largest tensor against the models
        # the largest tensor against the models: the table's us over the model's us, the lecture's seconds over
        # seconds (a rounding or two each side, 1e-12 relative)
        last = rows[-1]
        self.assertEqual(f["big"], last[0])
        self.assertTrue(math.isclose(f["tree_over"], last[2] / last[5], rel_tol=1e-12), f)
        self.assertTrue(math.isclose(f["ring_over"], last[1] / last[4], rel_tol=1e-12), f)

    def test_four_ways_are_built_and_said(self):
        with open(os.path.join(ROOT, "lectures", NAME + ".c")) as f:
            src = f.read()
        self.assertEqual(len(re.findall(r"\{\"[a-z +]+\", [a-z_]+_all_reduce\}", src)), 4)
        self.assertNotIn("three ways", src)
        self.assertNotIn("three different ways", src)
        self.assertIn("four different ways", " ".join(r["data"] for _, r in self.renderings("markdown")))

    def test_plot_is_vega_lite_v6_with_four_series(self):
        spec = self.one_plot()
        series = {v["series"] for v in spec["data"]["values"]}
        self.assertEqual(series, {"ring measured", "tree measured", "ring model", "tree model"})
        rows = self.sweep()
        self.assertEqual(len(spec["data"]["values"]), 4 * len(rows))
        # the chart plots the table's values
        for k, name in ((1, "ring measured"), (2, "tree measured"), (4, "ring model"), (5, "tree model")):
            self.assertEqual([(v["x"], v["y"]) for v in spec["data"]["values"] if v["series"] == name],
                             [(r[0], r[k]) for r in rows], name)

    def test_diagrams(self):
        srcs = [r.get("src") or r.get("data") for _, r in self.renderings("image")]
        for name in ("ring", "tree"):
            src = "assets/%s_%s.svg" % (NAME, name)
            self.assertIn(src, srcs)
            self.assertTrue(os.path.exists(os.path.join(ROOT, src)))

    def test_topology(self):
        texts = [r for _, r in self.renderings("text") if "nvidia-smi" in r.get("command", "")
                 or "lstopo" in r.get("command", "")]
        self.assertEqual(len(texts), 1)
        out = texts[0]["data"]
        if shutil.which("nvidia-smi") and "GPU0" in subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True,
                                                                  text=True).stdout:
            self.assertIn("GPU0", out)
        elif shutil.which("lstopo-no-graphics"):
            self.assertIn("Core", out)
        else:
            self.assertIn("model name", out)


class MeasuredWinners(unittest.TestCase):
    """The "measured:" sentence holds for any order of winners: copies of the
    lecture hand the sweep fixed times (the ring 100 us everywhere, the tree
    faster or slower by size) and the sentence must name exactly the sizes
    the table marks."""

    def run_with_times(self, tree_us):
        times = ", ".join("%g" % t for t in tree_us)
        plant = ("    if (rank == 0) { double tree_us[] = {%s}; for (int i = 0; i < N_SWEEP; i++) t.ring_s[i] = 1e-4, "
                 "t.tree_s[i] = tree_us[i] * 1e-6; spawn_return(&t, sizeof t); }" % times)
        with planted.binary(NAME, "    if (rank == 0) spawn_return(&t, sizeof t);", plant) as exe, \
                tempfile.TemporaryDirectory() as out:
            p, trace = tracecheck.run_quick(exe, out)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        said = [r["data"] for s in trace["steps"] for r in s["renderings"]
                if r["type"] == "markdown" and r["data"].startswith("measured: ")]
        self.assertEqual(len(said), 1)
        return said[0]

    def test_a_window_for_each(self):
        # sizes 16 ... 1048576 bytes; the ring wins at 4096 and at 1048576 only
        said = self.run_with_times([50, 50, 150, 50, 50, 50, 150])
        self.assertEqual(said, "measured: the ring was faster at 4096, 1048576 bytes, the tree at every other size: "
                         "no single crossover. From 1048576 bytes on the ring won at every size; below it the winner "
                         "changed with the size (the notes below say why).")

    def test_the_tree_wins_at_the_largest(self):
        said = self.run_with_times([150, 150, 50, 50, 50, 50, 50])
        self.assertEqual(said, "measured: the ring was faster at 16, 256 bytes, the tree at every other size, the "
                         "largest included")

    def test_one_crossover(self):
        said = self.run_with_times([50, 50, 50, 150, 150, 150, 150])
        self.assertEqual(said, "measured: the tree was faster below 16384 bytes, the ring from there on")


if __name__ == "__main__":
    unittest.main()
