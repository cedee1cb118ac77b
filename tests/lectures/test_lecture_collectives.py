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


named = tracecheck.named
same_double = tracecheck.same_double

# The sweep's model columns and per-step times, the ping-pong's ratio and
# the crossover note's figures are the lecture's arithmetic on its own
# doubles (a few roundings, 2^-53 each) compared here with the same formula
# on the trace's figures (2^-52 each as written): a few times 1e-16, so
# 1e-12 relative is room enough, and a wrong term or factor is off by far
# more.
REL = 1e-12


def first_value(summary):
    """The first element of a summarize() printout ("32768[2...]"): a
    tensor's printout, read as one."""
    m = re.fullmatch(r"\d+\[([-0-9.]+)\.\.\.\]", summary)
    if not m:
        raise AssertionError("not a summarize() printout: %r" % summary)
    return float(m.group(1))


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

    def printouts(self, pattern, rank=None):
        """(step, match) of every note whose text the regex matches: only
        for the notes that print tensors (tensor_str, summarize), whose
        printouts are read as printouts."""
        out = []
        for s, r in self.renderings("markdown"):
            if rank is not None and s["rank"] != rank:
                continue
            m = re.search(pattern, r["data"], re.S)
            if m:
                out.append((s, m))
        return out

    def noted_in(self, function, *exprs):
        """(step, {expr: value}) of the notes made in `function` (the
        innermost frame) whose arguments include exprs."""
        return [(s, a) for s, _, a in self.noted(*exprs) if s["stack"][-1]["function"] == function]

    def caption(self, text):
        """The one table whose caption is exactly `text` (a caption without
        conversions)."""
        found = [r for _, r in self.renderings("table") if r.get("caption") == text]
        self.assertEqual(len(found), 1, text)
        return found[0]

    def rows_of(self, caption):
        return self.caption(caption)["rows"]

    def test_send_recv(self):
        sent = self.printouts(r"^rank 0 sent tensor\(\[([^\]]*)\]")
        got = self.printouts(r"^rank 1 received tensor\(\[([^\]]*)\]")
        before = self.printouts(r"^rank 1 before receiving: tensor\(\[([^\]]*)\]")
        self.assertEqual(len(sent), 1)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][1].group(1), sent[0][1].group(1))
        self.assertNotEqual(before[0][1].group(1), got[0][1].group(1), "the receive changed nothing")
        # the non-blocking pair: both ranks hold the sent value after the wait
        waited = self.printouts(r"^rank (\d) after wait: tensor\(\[([^\]]*)\]")
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
        later = [s["spawn"] for f in ("ordered_main", "sendrecv_main") for s, _ in self.noted_in(f, "rank")]
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
        for function in ("ordered_main", "sendrecv_main"):
            got = self.noted_in(function, "rank", "summarize(theirs)", "1 - rank")
            self.assertEqual(sorted((a["rank"], s["rank"]) for s, a in got), [(0, 0), (1, 1)], function)
            for s, a in got:
                # each rank holds the other's tensor: its value is that rank + 1
                self.assertEqual(a["1 - rank"], 1 - s["rank"])
                self.assertEqual(first_value(a["summarize(theirs)"]), a["1 - rank"] + 1.0,
                                 "%s: rank %d got the wrong tensor" % (function, s["rank"]))
        kept = self.noted_in("wait_then_touch_main", "summarize(t)")
        self.assertEqual([(s["rank"], first_value(a["summarize(t)"])) for s, a in kept], [(1, 1.0)])

    def test_hand_built_all_reduces(self):
        seen = []
        for s, table, a in self.noted("name", "d", "n", kind="table"):
            if s["rank"] != 0:
                continue
            name, d, n = a["name"], a["d"], a["n"]
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
        """The fit's alpha and beta, the doubles its note printed."""
        f = self.figures("alpha", "beta")
        return f["alpha"], f["beta"]

    def test_alpha_beta_positive_and_the_crossover_follows(self):
        alpha, beta = self.alpha_beta()
        self.assertGreater(alpha, 0)
        self.assertGreater(beta, 0)
        n = 4
        L = math.log2(n)
        pred = [p for _, _, p in self.noted("n", "predicted") if "said" not in p]   # the prediction's own note
        self.assertEqual(len(pred), 1)
        self.assertEqual(pred[0]["n"], n)
        # the crossover of the model from the fit's own doubles
        self.assertTrue(same_double(pred[0]["predicted"], alpha * (n - 1 - L) / (beta * (L - (n - 1) / n))), pred)

    def sweep(self):
        """The sweep table's rows: bytes, ring (us), tree (us), faster, model: ring, model: tree, and the
        ring's and the tree's time per step (us)."""
        found = self.noted("n", "cores", kind="table")
        self.assertEqual(len(found), 1)
        _, table, f = found[0]
        self.assertEqual((f["n"], f["cores"]), (4, os.cpu_count()))
        self.assertEqual([(c["name"], c.get("unit")) for c in table["columns"]],
                         [("bytes", None), ("ring", "us"), ("tree", "us"), ("faster", None),
                          ("model: ring", "us"), ("model: tree", "us"), ("ring, per step", "us"),
                          ("tree, per step", "us")])
        return table["rows"]

    def test_sweep_model_and_measured_crossover(self):
        alpha, beta = self.alpha_beta()
        n = 4
        rows = self.sweep()
        self.assertGreaterEqual(len(rows), 3)
        for b, ring, tree, faster, ring_model, tree_model, _, _ in rows:
            self.assertEqual(faster, "tree" if tree < ring else "ring")
            # the model columns from the fit's alpha and beta (REL: the same
            # formula on the same doubles)
            for value, want in ((ring_model, 2 * (n - 1) * (alpha + beta * b / n) * 1e6),
                                (tree_model, 2 * math.log2(n) * (alpha + beta * b) * 1e6)):
                self.assertTrue(math.isclose(value, want, rel_tol=REL), (b, value, want))
        # each step's time: the whole all-reduce's over its steps
        for r in rows:
            self.assertTrue(math.isclose(r[6], r[1] / (2 * (n - 1)), rel_tol=REL), r)
            self.assertTrue(math.isclose(r[7], r[2] / (2 * math.log2(n)), rel_tol=REL), r)
        measured = [(r["data"], named(r)) for _, r in self.renderings("markdown") if r["data"].startswith("measured: ")]
        self.assertEqual(len(measured), 1)
        text, f = measured[0]
        ring_wins = [r[1] < r[2] for r in rows]
        won = ", ".join("%.0f" % r[0] for r, w in zip(rows, ring_wins) if w)
        first = len(rows) - 1   # the first size from which on the ring won every time
        while first > 0 and ring_wins[first - 1]:
            first -= 1
        crossover = self.rows_of("where the ring takes over on 4 ranks")
        self.assertEqual(crossover[0][0], "the model: the tree wins below")
        # which sentence the lecture chose, and the figures it gave it by
        # name: the sizes the ring won at (ring), where it won for good (m)
        if all(ring_wins):
            self.assertEqual(text, "measured: the ring was faster at every swept size")
        elif not any(ring_wins):
            self.assertEqual(text, "measured: the tree was faster at every swept size")
        elif not ring_wins[-1]:
            self.assertEqual(f, {"ring": won})
        elif not any(ring_wins[:first]):   # one crossover
            self.assertEqual(f, {"m": rows[first][0]})
        else:   # the winner changes more than once: every size the ring won is named
            self.assertEqual(f, {"ring": won, "m": rows[first][0]})
        if ring_wins[-1] and not all(ring_wins):
            self.assertEqual(crossover[1], ["measured: the ring won at this size and every larger one", rows[first][0]])
        else:
            self.assertEqual(len(crossover), 1)

    def test_the_check_costs_what_the_note_says(self):
        """The share of a message's time the runtime's check takes is
        computed from the two times the note gives, not written in."""
        found = self.noted("checked_us", "plain_us", "check_us", "check_percent")
        self.assertEqual(len(found), 1)
        _, note, f = found[0]
        checked, plain, cost = f["checked_us"], f["plain_us"], f["check_us"]
        # the lecture subtracts the seconds and scales, here the scaled
        # times are subtracted: a few roundings of numbers of checked's size
        self.assertLessEqual(abs(cost - (checked - plain)), REL * checked, f)
        ping = self.rows_of("ping-pong: one-way time against the alpha-beta model")
        self.assertTrue(same_double(plain, ping[0][1]), (plain, ping[0][1]))
        self.assertLessEqual(abs(f["check_percent"] - 100 * cost / checked), REL * 100, f)
        self.assertNotIn("more than a third", note["data"])

    def test_the_fitted_model_is_tabulated(self):
        alpha, beta = self.alpha_beta()
        (alpha_us, beta_ns, bandwidth), = self.rows_of("the alpha-beta model, fitted to the ping-pong")
        self.assertTrue(same_double(alpha_us, alpha * 1e6), (alpha_us, alpha))
        self.assertTrue(same_double(beta_ns, beta * 1e9), (beta_ns, beta))
        self.assertTrue(math.isclose(bandwidth, 1 / beta_ns, rel_tol=REL), (bandwidth, beta_ns))
        # the two letters of lecture_08 are another measurement, and it says so
        self.assertTrue([t for t in self.markdown() if t.startswith("lecture_08 fits the same two letters")])

    def test_the_crossovers_difference_is_explained_with_the_runs_numbers(self):
        """The lecture does not claim the measured crossover follows from
        alpha and beta; it names what the model leaves out, each with a
        figure that must be the run's own (worked out here from the tables)."""
        alpha, beta = self.alpha_beta()
        n = 4
        rows = self.sweep()
        # the notes' figures by name (lecture_collectives.c, explain_crossover)
        f = self.figures("predicted", "said", "ring_step", "tree_step")
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
        self.assertEqual(f["n"], n)
        self.assertTrue(math.isclose(f["ring_step"], rows[0][1] / (2 * (n - 1)), rel_tol=REL), f)
        self.assertTrue(math.isclose(f["tree_step"], rows[0][2] / (2 * math.log2(n)), rel_tol=REL), f)
        # alpha: the fit's own double, as its note gave it
        self.assertTrue(same_double(f["alpha * 1e6"], alpha * 1e6), f)
        # who waited the longer, and why: the cores this machine has
        self.assertEqual(f["cores"], os.cpu_count())
        self.assertEqual(f["waits"], "wait for the operating system to run the rank that should answer"
                         if f["cores"] < n else "also wait for the slowest of them at every step")
        self.assertEqual(f["longer"], "the ring, whose every step needs every rank at once, waits the longer"
                         if f["ring_step"] > f["tree_step"] else "here the tree's steps waited the longer")
        # the ping-pong size furthest above the two-point line, and by how
        # much (the table's us over the model's us: the same ratio, REL)
        ping = self.rows_of("ping-pong: one-way time against the alpha-beta model")
        worst, at = max((r[1] / r[2], r[0]) for r in ping[1:-1])
        (step, _, p), = self.noted("off_b", "off_ratio")
        self.assertEqual(p["off_b"], at)
        self.assertTrue(math.isclose(p["off_ratio"], worst, rel_tol=REL), (p, worst))
        # which bullet: two protocols where the CPU path's ratio says so
        two = self.trace["meta"]["gpus"] == 0 and p["off_ratio"] > 1.5
        said = "Two protocols" if two else "One line for every size"
        self.assertEqual(step["stack"][-1]["line"], line_of("explain_crossover", "note(\"- **%s.**" % said))
        # the largest tensor against the models: the table's us over the
        # model's us, the lecture's seconds over seconds (REL)
        g = self.figures("big", "tree_over", "ring_over")
        last = rows[-1]
        self.assertEqual(g["big"], last[0])
        self.assertTrue(math.isclose(g["tree_over"], last[2] / last[5], rel_tol=REL), g)
        self.assertTrue(math.isclose(g["ring_over"], last[1] / last[4], rel_tol=REL), g)

    def test_four_ways_are_built_and_said(self):
        with open(os.path.join(ROOT, "lectures", NAME + ".c")) as f:
            src = f.read()
        self.assertEqual(len(re.findall(r"\{\"[a-z +]+\", [a-z_]+_all_reduce\}", src)), 4)
        self.assertNotIn("three ways", src)
        self.assertNotIn("three different ways", src)
        self.assertIn("four different ways", " ".join(self.markdown()))

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
