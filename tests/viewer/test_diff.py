#!/usr/bin/python3
"""Two runs side by side in the viewer (viewer/diff.js): ?trace=A&diff=B and
the Compare… dialog.

The traces are real runs made here, in setUpClass: homework_08's starter
(lectures/homework_08.c) against its solution (tests/fixtures/
homework_08_solution.c), lecture_collectives --quick run twice (the same
code: only timings differ), and lecture_08 --quick on the project's two
backends here: Open MPI and the NCCL emulator (LECTERN_BACKEND=nccl
LECTERN_NCCL_EMULATE=1, docs/gpu.md). What the page counts is checked against a
comparison computed here from the two JSON files (compare() below, written
from the rules in diff.js's header, not from its code), and against what is
known without either: the starter fails each of its 40 checks and the
solution passes them all, so 40 checks flip.

    /usr/bin/python3 tests/viewer/test_diff.py [-v]
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


# ------------------------------------------------------- the comparison, here

def norm(path):
    out = []
    for x in path.split("/"):
        if x in (".", ""):
            continue
        if x == ".." and out and out[-1] != "..":
            out.pop()
        else:
            out.append(x)
    return "/".join(out)


def stack_key(rank, stack):
    return (rank, tuple((norm(f["path"]), f["line"], f.get("function") or "") for f in stack))


def units(t):
    """(step, rank, key) per step; a folded PASS once per rank it stands for."""
    out = []
    for i, s in enumerate(t["steps"]):
        folded = next((r for r in s["renderings"] if r.get("type") == "check" and r.get("ranks")), None) \
            if s["rank"] is not None else None
        ranks = folded["ranks"] if folded else [s["rank"]]
        for r in ranks:
            out.append((i, r, stack_key(r, s["stack"])))
    return out


def named_check_key(step, rank):
    r = step["renderings"][0]
    if r.get("type") != "check" or not isinstance(r.get("name"), str):
        return None
    inner = step["stack"][-1]
    return (stack_key(rank, step["stack"][:-1]), norm(inner["path"]), inner.get("function") or "", r["name"])


def pair(ua, ub, key_a, key_b, done_a, done_b):
    queues = {}
    for j, u in enumerate(ub):
        if j not in done_b and key_b(u) is not None:
            queues.setdefault(key_b(u), []).append(j)
    got = {}
    for k, u in enumerate(ua):
        q = queues.get(key_a(u)) if k not in done_a and key_a(u) is not None else None
        if q:
            got[k] = q.pop(0)
    return got


def close(a, b, rtol):
    if a == b:
        return True
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (a, b)):
        return False
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def text_of(r):
    t = r.get("type")
    if t in ("markdown", "text", "error", "warning", "inspect"):
        return r.get("data") or ""
    if t == "predict":
        return r.get("question") or ""
    if t == "image":
        return r.get("src") or ""
    if t == "link":
        return "%s %s" % (r.get("url"), r.get("title") or "")
    if t == "check":
        return r.get("name") or r.get("what") or ""
    if t == "table":
        return (r.get("caption") or "") + " | " + " | ".join(c.get("name") for c in r.get("columns") or [])
    return ""


def numbers_beyond(ra, rb, rtol):
    if ra["type"] in ("inspect", "predict"):
        n = 0 if close(ra.get("value"), rb.get("value"), rtol) else 1
        va, vb = ra.get("values") or [], rb.get("values") or []
        return n + sum(1 for x, y in zip(va, vb) if not close(x, y, rtol))
    if isinstance(ra.get("args"), list) and isinstance(rb.get("args"), list):
        ma = {a["expr"]: a["value"] for a in ra["args"] if isinstance(a.get("value"), (int, float))}
        mb = {a["expr"]: a["value"] for a in rb["args"] if isinstance(a.get("value"), (int, float))}
        return sum(1 for e in ma if e in mb and not close(ma[e], mb[e], rtol))
    na = [float(x) for x in NUM.findall(text_of(ra))]
    nb = [float(x) for x in NUM.findall(text_of(rb))]
    return sum(1 for x, y in zip(na, nb) if not close(x, y, rtol))


def passed(r, rank):
    if r.get("ranks") and rank is not None:
        return r.get("passed") is True and rank in r["ranks"]
    return r.get("passed") is True


def compare_pair(sa, sb, rank, rtol):
    """(kinds, check flips, numbers beyond, cells beyond) of one pair."""
    kinds, flips, nums, cells = set(), 0, 0, 0
    A, B = sa["renderings"], sb["renderings"]
    if len(A) != len(B):
        kinds.add("note")
    for ra, rb in zip(A, B):
        if ra.get("type") != rb.get("type"):
            kinds.add("note")
            continue
        if ra["type"] == "check":
            if passed(ra, rank) != passed(rb, rank):
                kinds.add("check")
                flips = 1
            continue
        if ra["type"] == "plot":
            continue
        if NUM.sub("#", text_of(ra)) != NUM.sub("#", text_of(rb)):
            kinds.add("note")
        else:
            n = numbers_beyond(ra, rb, rtol)
            if n:
                kinds.add("number")
                nums += n
        if ra["type"] == "table":
            rows_a, rows_b = ra.get("rows") or [], rb.get("rows") or []
            if len(rows_a) != len(rows_b) or any(len(x) != len(y) for x, y in zip(rows_a, rows_b)):
                kinds.add("table")
                continue
            bad = sum(1 for x, y in zip(rows_a, rows_b) for p, q in zip(x, y)
                      if (not close(p, q, rtol) if isinstance(p, (int, float)) or isinstance(q, (int, float))
                          else p != q))
            if bad:
                kinds.add("table")
                cells += bad
    return kinds, flips, nums, cells


def compare(A, B, rtol):
    """The counts the page shows, and the stops of d in order: (A step, "A")
    for each difference of A's units, and (A step, B unit's rank) for each
    unit only in B, placed as the viewer places it: after the A unit its
    nearest paired predecessor in B is paired with (step 0 when none)."""
    ua, ub = units(A), units(B)
    first = pair(ua, ub, lambda u: u[2], lambda u: u[2], set(), set())
    second = pair(ua, ub, lambda u: named_check_key(A["steps"][u[0]], u[1]),
                  lambda u: named_check_key(B["steps"][u[0]], u[1]), set(first), set(first.values()))
    pairs = {**first, **second}
    c = dict(same=0, differ=0, onlyA=0, onlyB=0, flips=0, numbers=0, cells=0)
    kinds = {"note": 0, "number": 0, "check": 0, "table": 0}
    diff_steps_a = []
    for k, (i, rank, _) in enumerate(ua):
        if k not in pairs:
            c["onlyA"] += 1
            diff_steps_a.append((k, i))
            continue
        ks, f, n, cl = compare_pair(A["steps"][i], B["steps"][ub[pairs[k]][0]], rank, rtol)
        if ks:
            c["differ"] += 1
            diff_steps_a.append((k, i))
            for x in ks:
                kinds[x] += 1
        else:
            c["same"] += 1
        c["flips"] += f
        c["numbers"] += n
        c["cells"] += cl
    c["onlyB"] = len(ub) - len(pairs)
    pair_of_b = {v: k for k, v in pairs.items()}
    after, last = {}, -1
    for kb, (_, rank_b, _) in enumerate(ub):
        if kb in pair_of_b:
            last = pair_of_b[kb]
            continue
        after.setdefault(last, []).append(rank_b)
    differs = {k for k, _ in diff_steps_a}
    stops = [(0, r) for r in after.get(-1, [])]
    for k, (i, _, _) in enumerate(ua):
        if k in differs:
            stops.append((i, "A"))
        stops += [(i, r) for r in after.get(k, [])]
    return c, kinds, stops


def spawn_key(sp):
    return tuple((norm(f["path"]), f["line"], f.get("function") or "") for f in sp.get("stack") or [])


def channels(sp):
    """A spawn's traffic by channel, as diff.js's header defines it: a
    sender and receiver rank ("p", from, to), whatever the call, or an op
    on a group ("c", op, group) -> [calls, bytes summed]."""
    out = {}
    for m in sp.get("messages") or []:
        c = out.setdefault(("p", m["from"][0], m["to"][0]), [0, 0])
        c[0] += 1
        c[1] += m["bytes"]
    for m in sp.get("collectives") or []:
        c = out.setdefault(("c", m["op"], tuple(m["group"])), [0, 0])
        c[0] += 1
        c[1] += m["bytes"]
    return out


def traffic_diffs(sa, sb):
    """The channels whose calls or bytes differ: key -> (A's calls, A's
    bytes, B's calls, B's bytes), a channel of one side only being 0, 0 on
    the other."""
    ca, cb = channels(sa), channels(sb)
    out = {}
    for k in set(ca) | set(cb):
        x, y = ca.get(k, [0, 0]), cb.get(k, [0, 0])
        if x != y:
            out[k] = (x[0], x[1], y[0], y[1])
    return out


def chan_name(key):
    """A channel's key as the page writes it in data-chan."""
    if key[0] == "p":
        return "p %d %d" % (key[1], key[2])
    return "c %s [%s]" % (key[1], ",".join(str(r) for r in key[2]))


def compare_spawns(A, B):
    """Spawns paired by stack and order: [(a, b, fields that differ,
    channels that differ)], a or b -1 for a spawn of one run only (diff.js's
    header: compared by ranks, backend and status, and a pair by its
    traffic per channel; a spawn of one run only lists no channels)."""
    queues, out, used = {}, [], set()
    for j, sp in enumerate(B.get("spawns") or []):
        queues.setdefault(spawn_key(sp), []).append(j)
    for k, sp in enumerate(A.get("spawns") or []):
        q = queues.get(spawn_key(sp))
        if not q:
            out.append((k, -1, ["only in A"], {}))
            continue
        j = q.pop(0)
        used.add(j)
        out.append((k, j, [f for f in ("world_size", "backend", "status") if sp[f] != B["spawns"][j][f]],
                    traffic_diffs(sp, B["spawns"][j])))
    out += [(-1, j, ["only in B"], {}) for j in range(len(B.get("spawns") or [])) if j not in used]
    return out


def traffic(sp):
    """A spawn's communication with its timings and its call counts set
    aside: who talks to whom and the sizes of their calls. Messages as
    (sender's call, from rank, to rank) -> the bytes its messages carry, each
    size once; collectives as (op, group) -> the bytes of its calls, each
    size once. (Counts are left out: lecture_08 times some loops until a
    time budget is spent, so how many calls a spawn makes is a timing.)"""
    msgs, colls = {}, {}
    for m in sp.get("messages") or []:
        msgs.setdefault((m["kind"], m["from"][0], m["to"][0]), set()).add(m["bytes"])
    for c in sp.get("collectives") or []:
        colls.setdefault((c["op"], tuple(c["group"])), set()).add(c["bytes"])
    return msgs, colls


def rank_ordered(t):
    """The trace with its steps in the viewer's order (docs/trace-format.md,
    "How the viewer places steps"): a run of consecutive steps of one
    spawn's ranks at one line, each rank once, is put in rank order. The
    page's step numbers count in this order."""
    steps, i = list(t["steps"]), 0
    while i < len(steps):
        s, j = steps[i], i + 1
        if s["rank"] is not None:
            where, seen = s["stack"][-1], {s["rank"]}
            while (j < len(steps) and steps[j]["rank"] is not None and steps[j]["spawn"] == s["spawn"]
                   and steps[j]["rank"] not in seen and (steps[j]["stack"][-1]["path"], steps[j]["stack"][-1]["line"])
                   == (where["path"], where["line"])):
                seen.add(steps[j]["rank"])
                j += 1
            steps[i:j] = sorted(steps[i:j], key=lambda x: x["rank"])
        i = j
    return dict(t, steps=steps)


def js_trace(path, name, out_dir):
    """Copies the trace JSON at path to out_dir as NAME.json and NAME.js (the
    key NAME), as `make run` would have written it under that name."""
    with open(path, encoding="utf-8") as f:
        t = json.load(f)
    body = json.dumps(t, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        f.write(body)
    with open(os.path.join(out_dir, name + ".js"), "w", encoding="utf-8") as f:
        f.write('(window.lecternTraces = window.lecternTraces || {})["%s"] = %s;\n' % (name, body))
    return t


def start_into(binary, args, extra_env=None):
    """Starts a lecture binary writing into a fresh folder: (folder, process)."""
    if not os.path.exists(binary):
        raise unittest.SkipTest("build it first: make (%s is missing)" % binary)
    out = tempfile.mkdtemp(prefix="lectern-diff-")
    env = dict(os.environ, LECTERN_ROOT_DIR=harness.REPO, **(extra_env or {}))
    env.pop("LECTERN_FIXTURE_CASE", None)
    p = subprocess.Popen([binary, "--quiet", "--out", out, *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    return out, p


def finish_into(binary, out, p):
    """Waits for a run start_into() began; its one trace's path."""
    try:
        _, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    found = [f for f in os.listdir(out) if f.endswith(".json")]
    assert len(found) == 1, "%s wrote %s: %s" % (binary, found, err[-2000:])
    return os.path.join(out, found[0])


def run_into(binary, *args):
    """Runs a lecture binary into a fresh folder; its one trace's path."""
    out, p = start_into(binary, args)
    return out, finish_into(binary, out, p)


# lecture_08 on the NCCL emulator: the same calls on NCCL's rules, on the CPUs
# (docs/gpu.md; tests/comm/test_nccl_emu.py runs it whole).
EMULATED = {"LECTERN_BACKEND": "nccl", "LECTERN_NCCL_EMULATE": "1"}


class TestDiff(base.ViewerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = []
        made = {}
        # lecture_08's two runs (about a minute each on a loaded 2-core
        # machine) go in the background while the four short ones run.
        l08 = harness.tracecheck.built("lectures", "lecture_08")
        started = []
        for name, env in [("l08_mpi", {"LECTERN_BACKEND": "mpi"}), ("l08_nccl", EMULATED)]:
            out, p = start_into(l08, ["--quick"], env)
            cls.tmp.append(out)
            started.append((name, out, p))
        for name, binary, args in [
                ("hw_starter", harness.tracecheck.built("lectures", "homework_08"), []),
                ("hw_solution", harness.tracecheck.fixture("homework_08_solution"), []),
                ("coll_1", harness.tracecheck.built("lectures", "lecture_collectives"), ["--quick"]),
                ("coll_2", harness.tracecheck.built("lectures", "lecture_collectives"), ["--quick"])]:
            out, path = run_into(binary, *args)
            cls.tmp.append(out)
            made[name] = rank_ordered(js_trace(path, name, cls.traces))
        for name, out, p in started:
            made[name] = rank_ordered(js_trace(finish_into(l08, out, p), name, cls.traces))
        cls.T = made

    @classmethod
    def tearDownClass(cls):
        for d in cls.tmp:
            shutil.rmtree(d, ignore_errors=True)
        super().tearDownClass()

    def page_counts(self):
        el = self.d.find_element(By.CSS_SELECTOR, "#diff-bar .diff-sum")
        got = {k: int(el.get_attribute("data-" + a)) for k, a in
               [("same", "same"), ("differ", "differ"), ("onlyA", "only-a"), ("onlyB", "only-b"),
                ("flips", "flips"), ("numbers", "numbers"), ("cells", "cells")]}
        kinds = {k: 0 for k in ("note", "number", "check", "table")}
        for k in self.d.find_elements(By.CSS_SELECTOR, "#diff-bar .diff-k"):
            kinds[k.get_attribute("data-kind")] = int(k.text.split()[0])
        return got, kinds

    def page_comm(self):
        """The page's communication differences: (count of channel
        differences, count of spawns that differ, {(a, b): {data-chan: (A's
        calls, A's bytes, B's calls, B's bytes)}}, {(a, b): [item texts]})."""
        got = self.js("""
            var el = document.querySelector('#diff-bar .diff-comm'), out = [];
            el.querySelectorAll('li.diff-spawn').forEach(function (s) {
              var ch = [];
              s.querySelectorAll('li.diff-chan').forEach(function (c) {
                ch.push([c.dataset.chan, +c.dataset.aCalls, +c.dataset.aBytes, +c.dataset.bCalls, +c.dataset.bBytes,
                         c.textContent]);
              });
              out.push([+s.dataset.a, +s.dataset.b, ch]);
            });
            return [+el.dataset.comm, +el.dataset.spawns, out];""")
        chans = {(a, b): {c[0]: tuple(c[1:5]) for c in ch} for a, b, ch in got[2]}
        texts = {(a, b): [c[5] for c in ch] for a, b, ch in got[2]}
        return got[0], got[1], chans, texts

    def assert_comm_as_the_rule_says(self, A, B):
        """The page's communication differences are compare_spawns()'s; the
        comparison, for the caller to check further."""
        spawns = compare_spawns(A, B)
        n, n_spawns, chans, texts = self.page_comm()
        want = {(a, b): {chan_name(k): v for k, v in c.items()} for a, b, w, c in spawns if w or c}
        self.assertEqual(chans, want)
        self.assertEqual(n, sum(len(c) for _, _, _, c in spawns))
        self.assertEqual(n_spawns, len(want))
        return spawns, texts

    def open_diff(self, a, b, extra=""):
        self.assertIsNone(self.open("?trace=%s&diff=%s%s" % (a, b, extra)))

    # -- homework: the student's trace against the solution's

    def test_homework_starter_against_solution(self):
        self.open_diff("hw_starter", "hw_solution")
        A, B = self.T["hw_starter"], self.T["hw_solution"]
        want, kinds, _ = compare(A, B, 1e-6)
        got, got_kinds = self.page_counts()
        self.assertEqual(got, want)
        self.assertEqual(got_kinds, kinds)
        # Known without either comparison: each of the starter's failed
        # checks passes in the solution.
        self.assertEqual(A["meta"]["checks"]["failed"], 40)
        self.assertEqual(B["meta"]["checks"], {"passed": 40, "failed": 0, "not_reached": 0})
        self.assertEqual(got["flips"], 40)
        # Every step of A is in one pair or is A's alone.
        self.assertEqual(got["same"] + got["differ"] + got["onlyA"], len(units(A)))
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, "#diff-bar .diff-name").text, "hw_solution")
        # Communication: the starter leaves out calls the solution makes.
        # Known without the rule: its ring never sends, so each rank's
        # messages to the next exist in B only; its all-gather and
        # reduce-scatter are missing.
        spawns, texts = self.assert_comm_as_the_rule_says(A, B)
        ring = [(a, b, c) for a, b, _, c in spawns if any(k[0] == "p" for k in c)]
        self.assertEqual(len(ring), 1)
        a, b, c = ring[0]
        self.assertEqual({k[1:] for k in c if k[0] == "p"}, {(0, 1), (1, 2), (2, 3), (3, 0)})
        self.assertTrue(all(v[0] == 0 and v[2] > 0 for k, v in c.items() if k[0] == "p"))
        said = next(t for t in texts[(a, b)] if t.startswith("rank 0 -> rank 1: "))
        self.assertRegex(said, r"^rank 0 -> rank 1: none in A; %d messages, [0-9.]+ (B|KiB|MiB) in B$"
                         % c[("p", 0, 1)][2])
        missing = {k[1] for _, _, _, c in spawns for k, v in c.items() if k[0] == "c" and v[0] == 0}
        self.assertTrue({"all_gather", "reduce_scatter"} <= missing, missing)
        # The list opened (a summary: a button to the keyboard), axe clean.
        self.d.find_element(By.CSS_SELECTOR, "#diff-bar .diff-comm summary").click()
        self.assertTrue(self.d.find_element(By.CSS_SELECTOR, "#diff-bar li.diff-chan").is_displayed())
        self.assertEqual(self.axe(), [])
        self.shot("diff-homework")
        # Read mode, the diff still open: the marks are there, axe clean.
        self.keys("m")
        WebDriverWait(self.d, 5).until(lambda d: self.js("return window.lecternViewer.state.mode") == "read")
        self.assertGreater(len(self.d.find_elements(By.CSS_SELECTOR, "#read .item.diff-differs")), 0)
        self.assertEqual(self.axe(), [])

    def test_keyboard_walks_the_differences(self):
        self.open_diff("hw_starter", "hw_solution")
        _, _, stops = compare(self.T["hw_starter"], self.T["hw_solution"], 1e-6)
        steps = [i for i, _ in stops]
        # the solution enters the ring's bus bandwidth in the leaderboard, a note the starter lacks
        self.assertGreater(sum(1 for _, r in stops if r != "A"), 0)
        seen = []
        for k in range(len(steps)):
            self.keys("d")
            seen.append(self.cur_step() - 1)
            WebDriverWait(self.d, 3).until(
                lambda d: self.js("return document.getElementById('diff-live').textContent")
                .startswith("Difference %d of %d:" % (k + 1, len(steps))))
        self.assertEqual(seen, steps)
        self.keys("d")
        WebDriverWait(self.d, 3).until(
            lambda d: self.js("return document.getElementById('diff-live').textContent") ==
            "No difference after this step.")
        self.keys("D")
        self.assertEqual(self.cur_step() - 1, steps[-2])
        # The panel says what differs at this step, with both runs' sides.
        panel = self.d.find_element(By.ID, "diff-panel")
        self.assertTrue(panel.is_displayed())
        self.assertEqual(self.axe(), [])

    def test_keyboard_with_one_rank_shown(self):
        # With rank 2 alone shown (the key 2), d stops only at steps of rank
        # 2 (or of no rank: the lecture's own), in order.
        A = self.T["hw_starter"]
        self.open_diff("hw_starter", "hw_solution", "&rank=2")
        _, _, stops = compare(A, self.T["hw_solution"], 1e-6)
        steps = [i for i, _ in stops]

        def shown(i, rank_b):
            if rank_b != "A":   # a step only in B: by its own rank
                return rank_b in (None, 2)
            s = A["steps"][i]
            return s["rank"] in (None, 2) or any(2 in (r.get("ranks") or []) for r in s["renderings"]
                                                 if r.get("type") == "check")
        want = [i for i, r in stops if shown(i, r)]
        self.assertLess(len(want), len(steps))
        seen = []
        for _ in want:
            self.keys("d")
            seen.append(self.cur_step() - 1)
        self.assertEqual(seen, want)
        self.assertEqual(self.axe(), [])

    def test_flipped_check_panel(self):
        self.open_diff("hw_starter", "hw_solution")
        A = self.T["hw_starter"]
        fail = next(i for i, s in enumerate(A["steps"])
                    if s["renderings"][0].get("type") == "check" and not s["renderings"][0]["passed"])
        self.js("window.lecternViewer.go(arguments[0])", fail)
        txt = self.d.find_element(By.ID, "diff-info").text
        self.assertIn("the check fails in A and passes in B", txt)
        item = self.d.find_element(By.CSS_SELECTOR, '#source .item[data-step="%d"]' % fail)
        self.assertIn("differs from B: check", item.text)

    # -- the same lecture twice: timings only

    def test_collectives_twice_with_a_tolerance(self):
        A, B = self.T["coll_1"], self.T["coll_2"]
        want, kinds, _ = compare(A, B, 1e-6)
        self.open_diff("coll_1", "coll_2")
        got, got_kinds = self.page_counts()
        self.assertEqual(got, want)
        self.assertEqual(got_kinds, kinds)
        # The same code: no check flips. (The lecture words some sentences
        # by what it measured: "the tree was faster at every swept size" is
        # a note at another line in another run, so a few steps can be one
        # run's alone.)
        self.assertEqual(got["flips"], 0)
        self.assertEqual(got["same"] + got["differ"] + got["onlyA"], len(units(A)))
        self.assertGreater(got["numbers"] + got["cells"], 0, "two runs' timings never agree to 1e-6")
        # The same code makes the same calls: whatever the runs' traffic,
        # the page says what the rule says.
        self.assert_comm_as_the_rule_says(A, B)
        # A looser tolerance, typed in the page: the counts follow it.
        loose, loose_kinds, _ = compare(A, B, 0.5)
        self.assertNotEqual(loose, want, "the runs should differ by less than 50% somewhere")
        inp = self.d.find_element(By.ID, "diff-rtol")
        inp.clear()
        inp.send_keys("0.5", Keys.ENTER)
        WebDriverWait(self.d, 5).until(lambda d: self.page_counts()[0] != got)
        self.assertEqual(self.page_counts(), (loose, loose_kinds))
        # ...and in the address.
        self.open_diff("coll_1", "coll_2", "&rtol=0.5")
        self.assertEqual(self.page_counts(), (loose, loose_kinds))

    def test_same_trace_is_all_the_same(self):
        self.open_diff("coll_1", "coll_1")
        got, _ = self.page_counts()
        n = len(units(self.T["coll_1"]))
        self.assertEqual(got, dict(same=n, differ=0, onlyA=0, onlyB=0, flips=0, numbers=0, cells=0))
        self.assertEqual(self.page_comm(), (0, 0, {}, {}))

    def test_local_run_against_the_shipped_trace(self):
        # ?trace=NAME opens traces/local/NAME (this machine's run) and
        # ?diff=../traces/NAME.js the shipped one: two scripts defining the
        # same name, each read as its own trace.
        local = os.path.join(self.traces, "local")
        os.makedirs(local, exist_ok=True)
        with open(os.path.join(self.traces, "coll_2.json"), encoding="utf-8") as f:
            body = f.read()
        with open(os.path.join(local, "coll_1.js"), "w", encoding="utf-8") as f:
            f.write('(window.lecternTraces = window.lecternTraces || {})["coll_1"] = %s;\n' % body)
        try:
            self.open_diff("coll_1", "../traces/coll_1.js")
            want, kinds, _ = compare(self.T["coll_2"], self.T["coll_1"], 1e-6)
            self.assertEqual(self.page_counts(), (want, kinds))
            self.assertGreater(want["numbers"] + want["cells"], 0)
        finally:
            shutil.rmtree(local)

    # -- one lecture on two backends: Open MPI and the NCCL emulator

    def test_lecture_08_on_two_backends(self):
        A, B = self.T["l08_mpi"], self.T["l08_nccl"]
        self.assertEqual({s["backend"] for s in A["spawns"]}, {"mpi"})
        self.assertEqual({s["backend"] for s in B["spawns"]}, {"nccl"})
        want, kinds, _ = compare(A, B, 1e-6)
        self.open_diff("l08_mpi", "l08_nccl")
        got, got_kinds = self.page_counts()
        self.assertEqual(got, want)
        self.assertEqual(got_kinds, kinds)
        # The same code on both backends: every check passes in both, none
        # flips; timings differ.
        self.assertEqual(A["meta"]["checks"]["failed"], 0)
        self.assertEqual(B["meta"]["checks"]["failed"], 0)
        self.assertEqual(got["flips"], 0)
        self.assertEqual(got["same"] + got["differ"] + got["onlyA"], len(units(A)))
        self.assertGreater(got["numbers"] + got["cells"], 0, "two runs' timings never agree to 1e-6")
        # Communication as diff.js defines it: spawns paired by stack and
        # order, compared by ranks, backend and outcome, and a pair by its
        # calls and bytes per channel. Every pair differs in its backend,
        # which the page names for each side. (A modelled pipeline shape is
        # spawned again while its timing misses its bound, so that site's
        # spawn count, and the pairs' world sizes there, can differ between
        # two runs on one backend too.)
        spawns, _ = self.assert_comm_as_the_rule_says(A, B)
        paired = [(a, b, w, c) for a, b, w, c in spawns if a >= 0 and b >= 0]
        self.assertEqual(len(paired), min(len(A["spawns"]), len(B["spawns"])))
        self.assertTrue(all("backend" in w for _, _, w, _ in paired))
        items = self.js("return Array.from(document.querySelectorAll('#diff-bar li.diff-spawn'))"
                        ".map(function (li) { return li.firstChild.textContent; })")
        said = []
        for a, b, what, chans in spawns:
            sp = A["spawns"][a] if a >= 0 else B["spawns"][b]
            words = [w if w.startswith("only") else "%s %s in A, %s in B" % (
                w.replace("_", " "), A["spawns"][a][w], B["spawns"][b][w]) for w in what]
            tail = "; %d channel%s differ" % (len(chans), "" if len(chans) == 1 else "s") if chans else ""
            said.append("spawn at %s:%d: %s%s" % (os.path.basename(sp["stack"][-1]["path"]),
                                                  sp["stack"][-1]["line"], ", ".join(words), tail))
        self.assertEqual(items, said)
        self.assertEqual(sum(x.count("backend mpi in A, nccl in B") for x in items), len(paired))
        # What the page does not compare, checked here: the same calls move
        # the same bytes on both backends. A pair of spawns has the same
        # senders and receivers, ops and groups, and the same sizes of
        # call between them (traffic()); at each call site, the spawns'
        # traffic is the same set in both runs. Not compared: timings, the
        # backend's name and reason, and how many calls a timed loop made.
        # run_modelled_pipelines (lectures/lecture_08/pipeline.c) spawns a
        # shape again while its timing misses its bound, so which of its
        # spawns meet in a pair is a timing: its site is left to by_site().
        def retried(sp):
            return any(f[2] == "run_modelled_pipelines" for f in spawn_key(sp))
        fixed = [(a, b) for a, b, _, _ in paired if not retried(A["spawns"][a])]
        self.assertEqual(len(fixed), sum(1 for sp in A["spawns"] if not retried(sp)))
        self.assertGreater(len(fixed), 10)
        for a, b in fixed:
            self.assertEqual(traffic(A["spawns"][a]), traffic(B["spawns"][b]), "spawn %d of A, %d of B" % (a, b))
        # So where the rule marks a channel of such a pair, it is one both
        # runs used (the same peers, ops and groups): only how many calls a
        # timed loop made differs, never who talked to whom.
        comm_of = {(a, b): c for a, b, _, c in paired}
        for a, b in fixed:
            for k, v in comm_of[(a, b)].items():
                self.assertTrue(v[0] > 0 and v[2] > 0, "spawn %d of A, %d of B: %s %s" % (a, b, k, v))

        def by_site(t):
            out = {}
            for sp in t["spawns"]:
                msgs, colls = traffic(sp)
                out.setdefault(spawn_key(sp), set()).add(repr((sorted(msgs.items()), sorted(colls.items()))))
            return out
        self.assertEqual(by_site(A), by_site(B))
        self.assertEqual(self.axe(), [])
        self.shot("diff-lecture-08-backends")
        self.keys("m")
        WebDriverWait(self.d, 5).until(lambda d: self.js("return window.lecternViewer.state.mode") == "read")
        self.assertEqual(self.axe(), [])

    # -- the picker, and a B that cannot be read

    def test_compare_dialog_reads_two_json_files(self):
        self.assertIsNone(self.open("?trace=coll_1"))
        self.d.find_element(By.ID, "btn-compare").click()
        self.d.find_element(By.ID, "compare-a").send_keys(os.path.join(self.traces, "hw_starter.json"))
        self.d.find_element(By.ID, "compare-b").send_keys(os.path.join(self.traces, "hw_solution.json"))
        self.assertEqual(self.axe(), [])
        self.d.find_element(By.ID, "compare-go").click()
        self.assertIsNone(harness.wait_ready(self.d))
        self.assertEqual(self.js("return window.lecternViewer.via"), "file")
        want, kinds, _ = compare(self.T["hw_starter"], self.T["hw_solution"], 1e-6)
        self.assertEqual(self.page_counts(), (want, kinds))
        self.assertNotIn("diff=", self.d.current_url)

    def test_missing_b_says_which_file(self):
        err = self.open("?trace=coll_1&diff=no_such_trace")
        self.assertIsNotNone(err)
        self.assertIn("no_such_trace", err)
        self.assertIn("compare with", self.d.find_element(By.ID, "error-box").text)


if __name__ == "__main__":
    unittest.main()
