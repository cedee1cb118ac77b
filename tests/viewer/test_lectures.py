#!/usr/bin/python3
"""The viewer over the committed lecture traces (traces/lecture_00, lecture_08,
lecture_collectives, lecture_ddp and lecture_gpu), as a student uses it at
1400x900 and 800x900.

Steps are found by what they hold, never by their number: the traces are
made again whenever the lectures change. What a check expects is worked out
here from the trace itself (statement ends, calls, ranks), not taken from
the viewer.

    /usr/bin/python3 tests/viewer/test_lectures.py [-v]
"""
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

TRACES = os.path.join(harness.REPO, "traces")
AXE = harness.AXE

# After go(): two animation frames, so that chunks drawn by the scroll are in
# place before anything is measured.
SETTLE = """var done = arguments[arguments.length - 1];
requestAnimationFrame(function () { requestAnimationFrame(function () { done(true); }); });"""


def load(name):
    path = os.path.join(TRACES, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        t = json.load(f)
    rank_order(t["steps"])
    return t


def rank_order(steps):
    """The order the viewer shows steps in (docs/trace-format.md, "How the
    viewer places steps"): a run of consecutive steps of one spawn, made at
    one line by different ranks, goes in rank order. Written here from the
    rule, not taken from the viewer, so step numbers agree with the page."""
    def at(s):
        f = s["stack"][-1]
        return (f["path"], f["line"])
    i = 0
    while i < len(steps):
        s, j = steps[i], i + 1
        if s["rank"] is not None:
            seen = {s["rank"]}
            while (j < len(steps) and steps[j]["rank"] is not None and steps[j]["spawn"] == s["spawn"]
                   and steps[j]["rank"] not in seen and at(steps[j]) == at(s)):
                seen.add(steps[j]["rank"])
                j += 1
            steps[i:j] = sorted(steps[i:j], key=lambda x: x["rank"])
        i = j


def text_of(step):
    return " ".join(r.get("data", "") or "" for r in step["renderings"])


def is_spawn_note(trace, i):
    s = trace["steps"][i]
    return (s["rank"] is None and len(s["renderings"]) == 1 and (s["renderings"][0].get("data") or "").startswith("spawn: ")
            and any(sp["stack"] == s["stack"] for sp in trace["spawns"]))


# ------------------------------------------------------------ calls, by hand

def same_call_prefix(a, b, n):
    """Whether stack b is inside the call that is frame n-1 of stack a: the
    same frames (function, path and line) above it, the same function at it."""
    if len(b) < n:
        return False
    for d in range(n - 1):
        if (a[d]["path"], a[d]["function"], a[d]["line"]) != (b[d]["path"], b[d]["function"], b[d]["line"]):
            return False
    return (a[n - 1]["path"], a[n - 1]["function"]) == (b[n - 1]["path"], b[n - 1]["function"])


def thread_after(trace, i):
    """The steps after i that i's thread of execution can land on: every
    later step for a lecture step; for a rank's step, that rank's later steps
    in its spawn, then (once they end) the lecture's steps."""
    steps, s = trace["steps"], trace["steps"][i]
    if s["rank"] is None:
        return list(range(i + 1, len(steps)))
    mine = [j for j in range(i + 1, len(steps)) if steps[j]["spawn"] == s["spawn"] and steps[j]["rank"] == s["rank"]]
    last = mine[-1] if mine else i
    return mine + [j for j in range(last + 1, len(steps)) if steps[j]["rank"] is None]


def expected_out(trace, i):
    """The first later step (of i's thread) outside the call of i's innermost function."""
    st = trace["steps"][i]["stack"]
    for j in thread_after(trace, i):
        if not same_call_prefix(st, trace["steps"][j]["stack"], len(st)):
            return j
    return -1


def expected_over(trace, i):
    """The next step of i's thread; if it is inside a call made from i's
    function, the first step after that call returns."""
    st, later = trace["steps"][i]["stack"], thread_after(trace, i)
    if not later:
        return -1
    k = later[0]
    sk = trace["steps"][k]["stack"]
    if not (len(sk) > len(st) and same_call_prefix(st, sk, len(st))):
        return k
    for j in later[1:]:
        if not same_call_prefix(sk, trace["steps"][j]["stack"], len(st) + 1):
            return j
    return -1


def stmt_end(lines, line):
    """The last line of the statement starting on `line`: the first line at
    or after it whose code, strings and comments taken out, ends with ; { or }."""
    for k in range(line - 1, min(len(lines), line + 400)):
        code = re.sub(r'"(?:\\.|[^"\\])*"' + "|'(?:\\\\.|[^'\\\\])*'", '""', lines[k])
        code = re.sub(r"/\*.*?\*/", "", code).split("//")[0].rstrip()
        if code.endswith((";", "{", "}")):
            return k + 1
    return line


def note_spawns(trace):
    """Each spawn note's spawn, matched as the viewer does: notes and spawns
    at the same stack in order, a note before its spawn's first rank step (a
    spawn whose ranks made no step takes the next note at its stack)."""
    firsts = {}
    for j, x in enumerate(trace["steps"]):
        if x["spawn"] is not None:
            firsts.setdefault(x["spawn"], j)
    spawns, nxt, out = trace["spawns"], 0, {}
    for q in range(len(trace["steps"])):
        if not is_spawn_note(trace, q):
            continue
        for k in range(nxt, len(spawns)):
            if firsts.get(k, 1 << 30) > q and spawns[k]["stack"] == trace["steps"][q]["stack"]:
                out[q] = nxt = k
                nxt += 1
                break
    return out


def shared_levels(a, b):
    d = 0
    while d < min(len(a), len(b)) and (a[d]["path"], a[d]["function"]) == (b[d]["path"], b[d]["function"]) and \
            (d == 0 or a[d - 1]["line"] == b[d - 1]["line"]):
        d += 1
    return d


class LectureCase(base.ViewerCase):
    width, height = 1400, 900
    script_timeout = 60
    lectures = ("lecture_00", "lecture_08", "lecture_collectives", "lecture_ddp", "lecture_gpu", "lecture_scaling",
                "lecture_pipelines", "lecture_precision", "lecture_checkpoints")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.d.set_script_timeout(cls.script_timeout)
        cls.tr = {name: load(name) for name in cls.lectures}

    def trace(self, name):
        t = self.tr.get(name)
        if t is None:
            self.skipTest("traces/%s.json not written yet (make run LECTURE=%s)" % (name, name))
        return t

    def open_lecture(self, name, query=""):
        self.trace(name)
        self.d.get("file://" + os.path.join(harness.REPO, "viewer", "index.html") + "?trace=" + name + query)
        self.assertIsNone(harness.wait_ready(self.d))
        self.wait_still()

    def go(self, i):
        self.js("window.lecternViewer.go(arguments[0])", i)
        self.d.execute_async_script(SETTLE)

    # visit_all's page side: for each [step, args] of todo, go to the step,
    # wait two animation frames (as go() does) and, when asked, until two
    # looks at the current step's place (where()) 50 ms apart agree (5 s at
    # most), then call the check. A check's exception is its result, as a string.
    VISIT = """var done = arguments[arguments.length - 1], todo = arguments[0], still = arguments[1], out = [];
        var check = function (i, args) { %s };
        // the top of the current step in the source pane, and the pane's height
        function where() {
          var el = document.querySelector('#source .cur-item') || document.querySelector('#source [aria-current=step]');
          var b = document.getElementById('source').getBoundingClientRect(), r = el.getBoundingClientRect();
          return [r.top - b.top, b.height];
        }
        function place() { var w = where(); return Math.round(w[0]) + ' ' + w[1]; }
        function result(i, args) { try { return check(i, args); } catch (e) { return 'error: ' + e; } }
        function next(k) {
          if (k >= todo.length) { done(out); return; }
          var i = todo[k][0], args = todo[k][1];
          window.lecternViewer.go(i);
          requestAnimationFrame(function () { requestAnimationFrame(function () {
            if (!still) { out.push(result(i, args)); next(k + 1); return; }
            var last = null, t0 = performance.now();
            (function look() {
              var now;
              try { now = place(); } catch (e) { now = 'error: ' + e; }
              if (now === last || performance.now() - t0 > 5000) {
                out.push(now === last ? result(i, args) : 'never still: ' + now);
                next(k + 1);
                return;
              }
              last = now;
              setTimeout(look, 50);
            })();
          }); });
        }
        next(0);"""

    def visit_all(self, todo, check, still=False, chunk=60):
        """In the page, without a WebDriver round trip per step: goes to each
        step of todo ([(step, args), ...]) as go() does (and, with still,
        waits until the current step's place stops moving), and returns what
        the JavaScript function body check (arguments i and args) returned
        there, one result per step. chunk steps per script call, so that each
        call stays well inside the script timeout on a loaded machine."""
        out = []
        self.d.set_script_timeout(600)
        try:
            for k in range(0, len(todo), chunk):
                out += self.d.execute_async_script(self.VISIT % check, [[i, a] for i, a in todo[k:k + chunk]], still)
        finally:
            self.d.set_script_timeout(self.script_timeout)
        return out

    def find_step(self, name, pred):
        for i, s in enumerate(self.trace(name)["steps"]):
            if pred(s):
                return i
        raise AssertionError("no step of %s matches" % name)


class TestNotesAndSpawns(LectureCase):

    def test_multiline_note_replaces_its_statement(self):
        for name in self.lectures:
            t = self.trace(name)
            files = {p: src.split("\n") for p, src in t["files"].items()}
            cases = []
            for i, s in enumerate(t["steps"]):
                if s["rank"] is not None or is_spawn_note(t, i):
                    continue
                f = s["stack"][-1]
                end = stmt_end(files[f["path"]], f["line"])
                if end > f["line"]:
                    cases.append((i, f["path"], f["line"], end))
            with self.subTest(lecture=name):
                if name == "lecture_08":
                    self.assertGreater(len(cases), 20)
                self.open_lecture(name)
                seen = self.visit_all([(i, [path, line + 1, end]) for i, path, line, end in cases], """
                    var p = args[0], out = [];
                    for (var ln = args[1]; ln <= args[2]; ln++) {
                      var el = document.querySelector('.file[data-path="' + p + '"] .ln[data-line="' + ln + '"]');
                      out.push(!!el && el.checkVisibility());
                    }
                    var head = document.querySelector('.file[data-path="' + p + '"] .ln[data-line="' + (args[1] - 1) + '"]');
                    return [out, !!head && !!head.querySelector('.item[data-step="' + i + '"]')];""")
                bad = [(i + 1, line, end, got) for (i, path, line, end), got in zip(cases, seen)
                       if isinstance(got, str) or any(got[0]) or not got[1]]
                self.assertEqual(bad, [], "steps whose note leaves lines of its statement in view, or is not at its line")

    def test_spawn_call_in_view_at_every_rank_step(self):
        t = self.trace("lecture_08")
        todo, notes = [], note_spawns(t)
        for i, s in enumerate(t["steps"]):
            k = s["spawn"] if s["rank"] is not None else notes.get(i)
            if k is not None:
                top = t["spawns"][k]["stack"][-1]
                todo.append((i, [top["path"], top["line"], k]))
        self.open_lecture("lecture_08")
        # still: a spawn's grid and the chunks around it are drawn after the
        # move and the viewer brings the step back to its place as they take
        # their height; on a loaded machine that is later than two frames, so
        # the check reads the place the reader is left with.
        got = self.visit_all(todo, """
                var sec = document.querySelector('#source .file[data-path="' + args[0] + '"] .ln[data-line="' +
                  args[1] + '"] .spawn[data-spawn="' + args[2] + '"]');
                if (!sec) return 'no spawn block';
                var code = sec.closest('.ln').querySelector(':scope > .body > .code');
                if (!code || code.textContent.indexOf('spawn(') < 0) return 'the spawn() line is not shown';
                var call = sec.querySelector('.spawn-call'), box = document.getElementById('source').getBoundingClientRect();
                var c = call.getBoundingClientRect(), x = c.left + 5, y = c.top + c.height / 2;
                if (c.top < box.top - 1 || c.bottom > box.bottom + 1) return 'spawn( is off screen';
                var hit = document.elementFromPoint(x, y);
                if (!hit || !call.contains(hit)) return 'spawn( is covered';
                if (call.textContent.indexOf('spawn(') < 0) return 'no spawn( text';
                var cur = sec.querySelector('.item.cur-item');
                if (!cur) return 'the step is not marked';
                var q = cur.getBoundingClientRect(), h = document.elementFromPoint(q.left + 4, q.top + Math.min(q.height, 30) / 2);
                if (q.top < box.top || q.top > box.bottom - 10 || !h || !cur.contains(h)) return 'the step is not in view';
                return '';""", still=True)
        bad = [(i + 1, t["steps"][i]["rank"], r) for (i, _), r in zip(todo, got) if r]
        self.assertEqual(bad, [])

    def test_each_spawn_of_a_loop_has_its_block_and_note(self):
        t = self.trace("lecture_08")
        by_line = {}
        for k, sp in enumerate(t["spawns"]):
            top = sp["stack"][-1]
            by_line.setdefault((top["path"], top["line"]), []).append(k)
        loops = {key: ks for key, ks in by_line.items() if len(ks) > 1}
        self.assertTrue(loops, "lecture_08 spawns in a loop")
        notes = note_spawns(t)
        self.open_lecture("lecture_08")
        for (path, line), ks in loops.items():
            with self.subTest(line=line):
                # a spawn's first rank step, or its note where its ranks made none
                first = min(j for j, s in enumerate(t["steps"]) if s["spawn"] in ks or notes.get(j) in ks)
                self.go(first)
                got = self.js("""var ln = document.querySelector('.file[data-path="' + arguments[0] + '"] .ln[data-line="' +
                    arguments[1] + '"]');
                    return Array.from(ln.querySelectorAll(':scope > .body > .spawn')).map(function (s) {
                      var n = s.querySelector('.spawn-note');
                      return [+s.getAttribute('data-spawn'), n ? n.textContent : null]; });""", path, line)
                self.assertEqual([g[0] for g in got], ks)
                self.assertEqual([g[1] for g in got], [t["spawns"][k]["reason"] for k in ks])
                # The line shows its code, not a note.
                self.assertIn("spawn(", self.line_el(path, line).find_element(By.CSS_SELECTOR, ":scope > .body > .code").text)

    def test_ranks_side_by_side(self):
        t = self.trace("lecture_08")
        i = self.find_step("lecture_08", lambda s: s["rank"] == 0 and "[before all-reduce]" in text_of(s))
        k = t["steps"][i]["spawn"]
        ranks = sorted({s["rank"] for s in t["steps"] if s["spawn"] == k})
        self.assertEqual(ranks, [0, 1, 2, 3])
        self.open_lecture("lecture_08")
        self.go(i)
        seen = self.js("""var sec = document.querySelector('#source .spawn[data-spawn="' + arguments[0] + '"]');
            var box = document.getElementById('source').getBoundingClientRect(), out = [];
            sec.querySelectorAll('.cell .item').forEach(function (it) {
              var m = /^Rank (\\d) \\[before all-reduce\\]/.exec(it.textContent.trim());
              var r = it.getBoundingClientRect();
              if (m && r.top >= box.top && r.bottom <= box.bottom && r.left >= box.left && r.right <= box.right) out.push(+m[1]);
            });
            return out;""", k)
        self.assertEqual(sorted(set(seen)), ranks, "the four 'before all-reduce' outputs are on screen together")
        self.shot("lecture_08-ranks-before-all-reduce")

    def test_pipeline_in_time(self):
        # The pipeline's spawns say each rank's results once (the timeline chart
        # shows every forward and backward), so their view starts by line; "in
        # time" lays the same steps out in the order they happened.
        t = self.trace("lecture_08")
        ks = sorted({s["spawn"] for s in t["steps"] if s["rank"] is not None and "micro-batch" in text_of(s)})
        self.assertTrue(ks)
        k = max(ks, key=lambda k: t["spawns"][k]["world_size"])
        i = min(j for j, s in enumerate(t["steps"]) if s["spawn"] == k)
        self.open_lecture("lecture_08")
        self.go(i)
        sec = '#source .spawn[data-spawn="%d"]' % k
        self.wait_still()
        self.d.find_element(By.CSS_SELECTOR, sec + ' .sp-view-b[data-view="time"]').click()
        WebDriverWait(self.d, 5).until(lambda d: d.find_element(By.CSS_SELECTOR, sec + ' .sp-view-b[data-view="time"]')
                                       .get_attribute("aria-pressed") == "true")
        rows = self.js("return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr[data-row]')).map(function (tr) {"
                       "return Array.from(tr.querySelectorAll('.item')).map(function (e) { return +e.getAttribute('data-step'); }); })",
                       sec)
        steps = [j for row in rows for j in row]
        self.assertEqual(sorted(steps), [j for j, s in enumerate(t["steps"]) if s["spawn"] == k])
        times = [min(t["steps"][j]["time"] for j in row) for row in rows]
        self.assertEqual(times, sorted(times), "rows in the order the steps happened")
        self.shot("lecture_08-pipeline-in-time")

    def test_counts_per_spawn(self):
        t = self.trace("lecture_08")
        where = {}
        for s in t["steps"]:
            if s["rank"] is None or len(s["stack"]) <= len(t["spawns"][s["spawn"]]["stack"]):
                continue
            f = s["stack"][-1]
            where.setdefault((f["path"], f["line"]), {}).setdefault(s["spawn"], {}).setdefault(s["rank"], 0)
            where[(f["path"], f["line"])][s["spawn"]][s["rank"]] += 1
        (path, line), per = next(((key, v) for key, v in sorted(where.items()) if len(v) > 1))
        i = self.find_step("lecture_08", lambda s: s["rank"] is not None and s["stack"][-1]["path"] == path
                           and s["stack"][-1]["line"] == line)
        self.open_lecture("lecture_08")
        self.go(i)
        self.js("window.lectern.showFrame(arguments[0], arguments[1])", path, line)
        groups = self.js("""var ln = document.querySelector('.file[data-path="' + arguments[0] + '"] .ln[data-line="' + arguments[1] + '"]');
            return Array.from(ln.querySelectorAll('.chip-group')).map(function (g) {
              return [+g.getAttribute('data-spawn'), g.textContent.replace(/\\s+/g, ' ').trim()]; });""", path, line)
        self.assertEqual([g[0] for g in groups], sorted(per))
        for k, label in groups:
            counts = per[k]
            ws = t["spawns"][k]["world_size"]
            self.assertTrue(label.startswith("%d rank" % ws), label)
            if len(set(counts.values())) == 1:
                n = list(counts.values())[0]
                if n > 1:
                    self.assertIn("×%d" % n, label)
            else:
                for r, n in counts.items():
                    self.assertIn("%d ×%d" % (r, n), label)

    def test_as_it_happened(self):
        t = self.trace("lecture_08")
        i = self.find_step("lecture_08", lambda s: s["rank"] == 0 and "[before all-reduce]" in text_of(s))
        self.open_lecture("lecture_08")
        self.go(i)
        later = "return Array.from(document.querySelectorAll('#source .item[data-step]')).filter(function (e) {" \
                "return +e.getAttribute('data-step') > window.lecternViewer.cur() && e.checkVisibility(); }).length"
        self.assertGreater(self.js(later), 0)
        self.keys("t")
        WebDriverWait(self.d, 5).until(lambda d: "live=1" in d.current_url)
        self.assertEqual(self.js(later), 0)
        self.assertGreater(self.js("return document.querySelectorAll('#source .item[data-step]').length"), 3)
        self.shot("lecture_08-as-it-happened")
        self.keys(Keys.ARROW_RIGHT)
        self.d.execute_async_script(SETTLE)
        self.assertEqual(self.cur_step(), i + 2)
        self.assertTrue(self.js("return !!document.querySelector('#source .item.cur-item[data-step=\"' + window.lecternViewer.cur() + '\"]')"))
        self.assertEqual(self.js(later), 0)
        # Read mode ends at the current step too.
        self.keys("m")
        self.assertEqual(self.js("return Array.from(document.querySelectorAll('#read .item[data-step]')).filter(function (e) {"
                                 "return +e.getAttribute('data-step') > window.lecternViewer.cur(); }).length"), 0)
        self.keys("m", "t")
        self.d.execute_async_script(SETTLE)
        self.assertGreater(self.js(later), 0)
        self.assertEqual(len(t["steps"]), self.js("return window.lecternViewer.total()"))


class TestNavigation(LectureCase):

    def test_step_out_and_over_land_outside_the_call(self):
        for name in self.lectures:
            t = self.trace(name)
            self.open_lecture(name)
            n = len(t["steps"])
            got = self.js("var v = window.lecternViewer, out = [];"
                          "for (var i = 0; i < v.total(); i++) out.push([v.target('out', i), v.target('over', i)]);"
                          "return out;")
            with self.subTest(lecture=name):
                bad = []
                for i in range(n):
                    out, over = got[i]
                    if out != expected_out(t, i) or over != expected_over(t, i):
                        bad.append((i + 1, out + 1, expected_out(t, i) + 1, over + 1, expected_over(t, i) + 1))
                    st = t["steps"][i]["stack"]
                    # Step out leaves the current call: what it shares with the
                    # current stack is a strict prefix of it.
                    if out >= 0:
                        self.assertLess(shared_levels(st, t["steps"][out]["stack"]), len(st), i)
                self.assertEqual(bad, [], "(step, out, expected, over, expected), 1-based")
                # Step out works in the second half of lecture_08 too: from
                # the first step of a function the body calls after "Part 2".
                if name == "lecture_08":
                    part2 = self.find_step(name, lambda s: text_of(s).startswith("## Part 2"))
                    j = next(j for j in range(part2 + 1, n) if len(t["steps"][j]["stack"]) == 2)
                    self.go(j)
                    self.assertTrue(self.d.find_element(By.ID, "btn-out").is_enabled())
                    self.keys("u")
                    self.assertGreater(self.cur_step() - 1, j)
            # Real key presses land where the links say, here and there: at
            # 12 places of each lecture, 6 in make test's quick scope (the
            # links of every step are checked above, in the page).
            places = 6 if os.environ.get("LECTERN_VIEWER_QUICK") == "1" else 12
            for i in range(1, n, max(1, n // places)):
                for key, kind in (("u", 0), ("j", 1)):
                    if got[i][kind] < 0:
                        continue
                    self.go(i)
                    self.keys(key)
                    self.assertEqual(self.cur_step() - 1, got[i][kind], (name, i + 1, key))

    def test_history_back_and_forward(self):
        self.open("?trace=demo")
        for n in (2, 3, 4):
            self.keys(Keys.ARROW_RIGHT)
            self.wait_url_step(n)
        self.d.back()
        WebDriverWait(self.d, 5).until(lambda d: self.cur_step() == 3)
        self.d.back()
        WebDriverWait(self.d, 5).until(lambda d: self.cur_step() == 2)
        self.assertEqual(self.current_line()[1], fixture_line("demo.c", 'note("This lecture shows'))
        self.d.forward()
        WebDriverWait(self.d, 5).until(lambda d: self.cur_step() == 3)
        self.assertTrue(self.d.current_url.startswith("file://"))

    def test_messages_are_visible(self):
        self.open("?trace=demo")
        self.keys(Keys.END)
        self.keys(Keys.ARROW_RIGHT)
        toast = self.d.find_element(By.ID, "toast")
        WebDriverWait(self.d, 5).until(lambda d: toast.is_displayed())
        self.assertIn("last step", toast.text)

    def test_keys_work_after_any_control(self):
        self.open("?trace=multi&step=2")

        def right_moves():
            before = self.cur_step()
            self.keys(Keys.ARROW_RIGHT)
            self.assertGreater(self.cur_step(), before)

        for bid in ("btn-next", "btn-prev", "btn-over", "btn-raw", "btn-raw", "btn-live", "btn-live"):
            with self.subTest(control=bid):
                self.d.find_element(By.ID, bid).click()
                right_moves()
        with self.subTest(control="rank select"):
            Select(self.d.find_element(By.ID, "rank-filter")).select_by_visible_text("rank 1")
            right_moves()
            Select(self.d.find_element(By.ID, "rank-filter")).select_by_visible_text("all ranks")
            right_moves()
        with self.subTest(control="scrubber"):
            self.d.find_element(By.ID, "scrub").click()
            right_moves()
        with self.subTest(control="file tab"):
            self.d.find_element(By.CSS_SELECTOR, '#file-tabs .tab[data-path="lectures/multi_helper.c"]').click()
            self.keys(Keys.HOME)
            right_moves()
        with self.subTest(control="outline"):
            self.d.find_elements(By.CSS_SELECTOR, "#outline .ol-item")[0].click()
            right_moves()


def fixture_line(path, snippet):
    return base.fixture_line(path, snippet)


class TestPanels(LectureCase):

    def test_title_outline_and_spawns(self):
        t = self.trace("lecture_08")
        first = next(r["data"] for s in t["steps"] for r in s["renderings"]
                     if r["type"] == "markdown" and r["data"].startswith("# "))
        title = first[2:].split("\n")[0].strip()
        self.open_lecture("lecture_08")
        self.assertEqual(self.d.find_element(By.ID, "title").text, title)
        self.assertIn(title, self.d.title)
        self.assertEqual(self.d.find_element(By.ID, "lecture-name").text, "lecture_08")
        # The outline: the second-level headings, a click away.
        heads = [(i, re.sub(r"[*`]", "", r["data"][3:].split("\n")[0]).strip()) for i, s in enumerate(t["steps"]) if s["rank"] is None
                 for r in s["renderings"] if r["type"] == "markdown" and r["data"].startswith("## ")]
        items = self.d.find_elements(By.CSS_SELECTOR, "#outline .ol-l0 .ol-item")
        self.assertEqual([x.text for x in items], [h for _, h in heads])
        items[3].click()
        self.assertEqual(self.cur_step() - 1, heads[3][0])
        WebDriverWait(self.d, 5).until(lambda d: "cur" in d.find_elements(By.CSS_SELECTOR, "#outline .ol-l0")[3]
                                       .get_attribute("class"))
        self.d.find_element(By.ID, "outline-toggle").click()
        self.assertFalse(self.d.find_element(By.ID, "outline").is_displayed())
        self.d.find_element(By.ID, "outline-toggle").click()
        self.assertTrue(self.d.find_element(By.ID, "outline").is_displayed())
        # Spawns, with their functions' full names.
        fns = self.js("return Array.from(document.querySelectorAll('#spawn-info .spawn-list .fn')).map(function (e) {"
                      "return [e.textContent, e.scrollWidth <= e.clientWidth + 1]; })")
        self.assertEqual([f[0] for f in fns], [sp["stack"][-1]["function"] for sp in t["spawns"]])
        self.assertTrue(all(f[1] for f in fns), fns)
        self.assertEqual(self.d.find_element(By.ID, "spawns-h").text.lower(), "spawns")

    def test_plots_draw_without_a_version_warning(self):
        t = self.trace("lecture_00")
        i = self.find_step("lecture_00", lambda s: any(r["type"] == "plot" for r in s["renderings"]))
        self.assertIn("vega-lite", json.dumps(t["steps"][i]["renderings"]))
        if not base.HAVE_NPM:
            self.skipTest("node_modules/ missing (npm ci)")
        self.d.get_log("browser")
        self.open_lecture("lecture_00", "&step=%d" % (i + 1))
        WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".cur-item .r-plot svg"))
        logs = [e["message"] for e in self.d.get_log("browser")]
        self.assertEqual([m for m in logs if "Vega-Lite" in m or "SEVERE" in m], [])


    def test_lecture_08_tables_and_charts(self):
        """lecture_08's table() results are tables the reader can sort; its
        chart_show() charts (lines on log axes, a timeline) draw cleanly."""
        t = self.trace("lecture_08")
        i = self.find_step("lecture_08", lambda s: any(r["type"] == "table" and r.get("caption") == "all-reduce on 2 ranks"
                                                       for r in s["renderings"]))
        self.open_lecture("lecture_08", "&step=%d" % (i + 1))
        rows = self.d.find_elements(By.CSS_SELECTOR, ".cur-item table.r-table tbody tr")
        self.assertEqual(len(rows), len(t["steps"][i]["renderings"][0]["rows"]))
        heads = [b.text for b in self.d.find_elements(By.CSS_SELECTOR, ".cur-item table.r-table th button")]
        self.assertTrue(heads[1].startswith("time (ms)"), heads)
        if not base.HAVE_NPM:
            self.skipTest("node_modules/ missing (npm ci)")
        for title in ("busbw on 2 ranks", "all-reduce on 2 ranks: measured", "GPipe timeline, 2 stages"):
            with self.subTest(title=title):
                j = self.find_step("lecture_08", lambda s: any(r["type"] == "plot" and r["spec"].get("title", "").startswith(title)
                                                               for r in s["renderings"]))
                self.d.get_log("browser")
                self.open_lecture("lecture_08", "&step=%d" % (j + 1))
                WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".cur-item .r-plot svg"))
                logs = [e["message"] for e in self.d.get_log("browser")]
                self.assertEqual([m for m in logs if "Vega-Lite" in m or "SEVERE" in m or "WARN" in m], [])
                if "timeline" in title:
                    # the real run beside its modelled twin: the modelled bars are said to be modelled, in words
                    cap = self.d.find_element(By.CSS_SELECTOR, ".cur-item .r-plot figcaption.modelled-note").text
                    self.assertRegex(cap, r"^Modelled compute: \d+ of \d+ bars \(pale, dashed outline\) are time the "
                                          r"lecture said a device computed")


class TestMedia(LectureCase):

    def test_figures_and_links(self):
        self.assertIsNone(self.open("?trace=media"))
        img = self.d.find_element(By.CSS_SELECTOR, "#source .r-img img")
        WebDriverWait(self.d, 5).until(lambda d: self.js("return arguments[0].complete && arguments[0].naturalWidth", img))
        nat = self.js("return arguments[0].naturalWidth", img)
        self.assertEqual(nat, 600)
        # 30% of a 1400 px page is about 310 px: never below its own width.
        WebDriverWait(self.d, 5).until(lambda d: img.size["width"] >= nat - 1)
        self.assertEqual(img.get_attribute("alt"), "Figure: wide")
        # Click to zoom: larger, in a dialog; Esc closes it.
        self.d.find_element(By.CSS_SELECTOR, "#source .r-img .zoom").click()
        dlg = self.d.find_element(By.ID, "zoom")
        WebDriverWait(self.d, 5).until(lambda d: dlg.is_displayed())
        big = self.d.find_element(By.ID, "zoom-img")
        WebDriverWait(self.d, 5).until(lambda d: big.size["width"] > img.size["width"])
        self.shot("media-zoom")
        self.keys(Keys.ESCAPE)
        WebDriverWait(self.d, 5).until(lambda d: not dlg.is_displayed())
        # see(url, title): its title and host; see(url): what it points to, and host.
        links = self.d.find_elements(By.CSS_SELECTOR, "#source .r-link a")
        self.assertEqual(links[0].find_element(By.CSS_SELECTOR, ".lt").text, "Ring all-reduce, the paper")
        self.assertEqual(links[0].find_element(By.CSS_SELECTOR, ".host").text, "example.org")
        self.assertEqual(links[1].find_element(By.CSS_SELECTOR, ".lt").text, "collectives.html")
        self.assertEqual(links[1].find_element(By.CSS_SELECTOR, ".host").text, "docs.example.org")
        # A figure on the web: named, with its host; nothing loaded by itself.
        remote = self.d.find_element(By.CSS_SELECTOR, "#source .r-img.remote")
        self.assertIn("nvlink-generations.png", remote.text)
        self.assertIn("example.org", remote.find_element(By.CSS_SELECTOR, ".load-img").text)
        self.assertEqual(self.js("return document.querySelectorAll('img[src*=\"example.org\"]').length"), 0)
        self.shot("media")


class TestAccessibility(LectureCase):
    """axe-core in the page: no violation of any rule it runs by default."""

    def places(self, name):
        t = self.trace(name)
        picks = [0, len(t["steps"]) - 1]
        for pred in (lambda s: "|---" in text_of(s), lambda s: s["rank"] is not None,
                     lambda s: any(r["type"] in ("plot", "image") for r in s["renderings"]),
                     lambda s: any(r["type"] == "table" for r in s["renderings"])):
            picks += [i for i, s in enumerate(t["steps"]) if pred(s)][:1]
        return sorted(set(picks))

    def at_place(self, name, i):
        """Goes to step i in the open page (step or read mode) and waits for its plot."""
        self.go(i)
        if any(r["type"] == "plot" for r in self.trace(name)["steps"][i]["renderings"]) and base.HAVE_NPM:
            WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".r-plot svg"))

    # Read mode: the elements the current step marks (its entry, and in a
    # spawn its row and rank column), tagged with their marks so that they
    # can be marked again together.
    TAG_MARKS = """var n = 0, fresh = 0;
        document.querySelectorAll('#read .cur-item, #read .cur-row, #read .cur-col').forEach(function (e) {
          var m = ['cur-item', 'cur-row', 'cur-col'].filter(function (c) { return e.classList.contains(c); });
          if (!e.hasAttribute('data-axe-mark')) fresh++;
          e.setAttribute('data-axe-mark', ((e.getAttribute('data-axe-mark') || '') + ' ' + m.join(' ')).trim()); n++; });
        return [n, fresh];"""
    REMARK = """var n = 0;
        document.querySelectorAll('#read [data-axe-mark]').forEach(function (e) {
          e.getAttribute('data-axe-mark').split(' ').forEach(function (c) { e.classList.add(c); });
          e.removeAttribute('data-axe-mark'); n++; });
        return n;"""

    def test_no_violations(self):
        """Each place of each lecture (places()) in step mode and in read
        mode, from one page load per mode. Step mode: axe-core on the whole
        page at each place. Read mode shows the whole lecture as one document
        wherever the reader is; what a place changes is which entry (and, in
        a spawn, which row and rank column) is marked current. So the marks
        of every place are recorded as it is visited, put back all at once,
        and the whole document checked once with each place's marks on it
        (a place whose marked elements were redrawn meanwhile, which the
        count shows, is checked on its own)."""
        for name in self.lectures:
            places = self.places(name)
            self.open_lecture(name, "&step=%d" % (places[0] + 1))
            for i in places:
                with self.subTest(lecture=name, step=i + 1, mode="step"):
                    self.at_place(name, i)
                    self.assertEqual(self.axe(), [])
            self.open_lecture(name, "&step=%d&mode=read" % (places[0] + 1))
            tagged = 0
            for i in places:
                self.at_place(name, i)
                n, fresh = self.js(self.TAG_MARKS)
                with self.subTest(lecture=name, step=i + 1, mode="read: the current step marked"):
                    self.assertGreater(n, 0)
                tagged += fresh
            with self.subTest(lecture=name, mode="read, every place's marks at once"):
                again = self.js(self.REMARK)
                if again != tagged:   # redrawn: each place alone, as the page shows it
                    for i in places:
                        self.at_place(name, i)
                        self.assertEqual(self.axe(), [], i + 1)
                else:
                    self.assertEqual(self.axe(), [])

    def test_a_planted_violation_is_named(self):
        """The check above can fail: a button without a name and a text in
        grey on grey, put into a lecture's page, are each named."""
        self.open_lecture("lecture_00")
        self.js("""var b = document.createElement('button'); b.id = 'planted-button';
            var p = document.createElement('p'); p.id = 'planted-text'; p.textContent = 'faint';
            p.style.cssText = 'position: fixed; top: 0; left: 0; z-index: 99; color: #777; background: #888';
            document.getElementById('source').append(b, p);""")
        got = self.axe()
        self.assertTrue(any(v.startswith("button-name") and "#planted-button" in v for v in got), got)
        self.assertTrue(any(v.startswith("color-contrast") and "#planted-text" in v for v in got), got)

    def test_a_pressed_button_under_the_pointer_keeps_its_contrast(self):
        """Clicked, a mode button is pressed (ink, paper text) with the
        pointer still on it: the hover colour must not take its background
        (paper text on a paper-like hover once made the word vanish)."""
        self.open_lecture("lecture_00")
        for which in ("read", "step"):
            with self.subTest(button=which):
                self.d.find_element(By.ID, "btn-mode-" + which).click()
                WebDriverWait(self.d, 5).until(lambda d: d.find_element(By.ID, "btn-mode-" + which)
                                               .get_attribute("aria-pressed") == "true")
                self.assertEqual(self.axe(context="document.getElementById('btn-mode-%s')" % which), [])

    def test_keyboard_reaches_every_control(self):
        self.open_lecture("lecture_08")
        i = self.find_step("lecture_08", lambda s: s["rank"] is not None)
        self.go(i)
        self.js("""document.activeElement.blur(); window.__seen = [];
            document.addEventListener('focusin', function (e) {
              var a = e.target; window.__seen.push(a.id || a.className || a.tagName); });""")
        seen = set()
        for _ in range(6):
            self.keys(*[Keys.TAB] * 100)
            seen = set(self.js("return window.__seen"))
            if "outline-toggle" in seen and "btn-help" in seen:
                break
        for want in ("skip", "btn-mode-read", "btn-raw", "btn-live", "btn-open", "btn-help", "btn-next", "btn-over",
                     "btn-out", "scrub", "rank-filter", "outline-toggle"):
            self.assertTrue(any(want == x or want in x.split() for x in seen), (want, sorted(seen)))
        self.assertTrue(any("sp-view-b" in x for x in seen), sorted(seen))
        # Enter on a focused control does what a click does.
        self.js("document.querySelector('#source .spawn .sp-view-b[aria-pressed=\"false\"]').focus()")
        view = self.js("return document.activeElement.getAttribute('data-view')")
        self.keys(Keys.ENTER)
        WebDriverWait(self.d, 5).until(lambda d: self.js(
            "return document.querySelector('#source .spawn .sp-view-b[data-view=\"' + arguments[0] + '\"]')"
            ".getAttribute('aria-pressed')", view) == "true")


class TestScroll(LectureCase):
    """At every step the current note (or grid cell) is in the upper third
    of the source pane."""

    def steps_to_visit(self, t):
        """Every step; under make test's quick scope (LECTERN_VIEWER_QUICK=1)
        every step whose place differs from the one before (another function
        or spawn), the first step of each kind of rendering (other than
        text) in each place, the first and last, and every eighth."""
        n = len(t["steps"])
        if os.environ.get("LECTERN_VIEWER_QUICK") != "1":
            return range(n)

        def place(s):
            top = s["stack"][-1] if s["stack"] else {}
            return (top.get("function"), s.get("spawn"))

        def kind(s):
            return place(s) + (tuple(sorted({r["type"] for r in s["renderings"]} - {"markdown"})),)
        steps = t["steps"]
        keep = {0, n - 1} | set(range(0, n, 8))
        keep |= {i for i in range(1, n) if place(steps[i]) != place(steps[i - 1])}
        firsts = {}
        for i, s in enumerate(steps):
            firsts.setdefault(kind(s), i)
        return sorted(keep | set(firsts.values()))

    def test_current_step_in_upper_third(self):
        for name in self.lectures:
            t = self.trace(name)
            self.open_lecture(name)
            # At each step, once the view is still (chunks drawn near it, the
            # step brought back to its place): the top of the current step in
            # the source pane, and the pane's height.
            visit = list(self.steps_to_visit(t))
            got = self.visit_all([(i, None) for i in visit], "return where();", still=True)
            bad = []
            for i, r in zip(visit, got):
                if isinstance(r, str):
                    bad.append((i + 1, r))
                # 2 px: sub-pixel rounding of the scroll position.
                elif not (-2 <= r[0] <= r[1] / 3 + 2):
                    bad.append((i + 1, round(r[0]), round(r[1])))
            with self.subTest(lecture=name, size="%dx%d" % (self.width, self.height)):
                self.assertEqual(bad, [], "(step, top of the step in the pane, pane height)")


class TestScrollNarrow(TestScroll):
    width, height = 800, 900


class TestScreenshots(LectureCase):
    """Every lecture at 1400x900 and 800x900, for a person to look at.
    They check nothing the other classes do not (each lecture's steps, read
    mode, both sizes): make test's quick scope leaves them to make test-all."""

    def test_screenshots(self):
        if os.environ.get("LECTERN_VIEWER_QUICK") == "1":
            self.skipTest("screenshots are for a person to look at: make test-all takes them")
        for w in (1400, 800):
            harness.set_size(self.d, w, 900)
            for name in self.lectures:
                t = self.trace(name)
                picks = {"first": 0}
                for label, pred in (("multiline", lambda s: "\n" in text_of(s) and s["rank"] is None),
                                    ("table", lambda s: "|---" in text_of(s)),
                                    ("figure", lambda s: any(r["type"] == "image" and not r["remote"] for r in s["renderings"])),
                                    ("plot", lambda s: any(r["type"] == "plot" for r in s["renderings"])),
                                    ("ranks", lambda s: "[before all-reduce]" in text_of(s)),
                                    ("pipeline", lambda s: s["rank"] is not None and "micro-batch" in text_of(s))):
                    hits = [i for i, s in enumerate(t["steps"]) if pred(s)]
                    if hits:
                        picks[label] = hits[0]
                # One page load per lecture and size: the picks are gone to in
                # the page, then read mode is switched on at the ranks' step.
                self.open_lecture(name)
                for label, i in picks.items():
                    self.go(i)
                    self.wait_still()
                    self.shot("%s-%dx900-%s" % (name, w, label))
                self.go(picks.get("ranks", 0))
                self.d.find_element(By.ID, "btn-mode-read").click()
                WebDriverWait(self.d, 5).until(lambda d: d.find_element(By.ID, "read").is_displayed())
                self.d.execute_async_script(SETTLE)
                self.wait_still()
                self.shot("%s-%dx900-read" % (name, w))
        harness.set_size(self.d, self.width, self.height)


if __name__ == "__main__":
    unittest.main()
