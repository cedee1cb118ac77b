#!/usr/bin/python3
"""A spawn's twin in the viewer (viewer/twin.js): the spawn replayed on
simulated platforms, drawn apart from what was measured.

The trace is a real run: tests/fixtures/twin_view_fixture.c through make
twin's recipe on h100-node and scaled@8 (tests/viewer/fixtures/
twin_view_fixture.json; scaled@8 refuses its second spawn). Every expected
figure is read from that JSON here, never from the page. TestCommittedTwins
does the same over the committed traces/lecture_scaling.json and
traces/lecture_08.json: every spawn with a twin, checked against its JSON.

    /usr/bin/python3 tests/viewer/test_twin.py [-v]
"""
import json
import math
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

NAME = "twin_view_fixture"
with open(os.path.join(base.HERE, "fixtures", NAME + ".json"), encoding="utf-8") as _f:
    TRACE = json.load(_f)

UNIT = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def seconds(text):
    """'2.113 ms' -> (0.002113, the half-unit of its last digit in seconds):
    the viewer prints 4 significant digits, so the trace's value is within
    that half-unit of what is shown."""
    m = re.fullmatch(r"(\d+(?:\.(\d+))?) (s|ms|µs|ns)", text.strip())
    assert m, "not a time: %r" % text
    decimals = len(m.group(2) or "")
    return float(m.group(1)) * UNIT[m.group(3)], 0.5 * 10 ** -decimals * UNIT[m.group(3)]


def rank_end(timeline):
    return max(e["end"] for e in timeline)


def spawn_note_step(k, trace=TRACE):
    """The 1-based step of spawn k's note (the step that shows its block):
    the (k+1)-th spawn note of the trace, one per spawn."""
    notes = [i + 1 for i, s in enumerate(trace["steps"])
             if s["rank"] is None and s["renderings"][0].get("data", "").startswith("spawn:")]
    assert len(notes) == len(trace["spawns"]), "a spawn note per spawn"
    return notes[k]


class TwinCase(base.ViewerCase):
    """What the twin tests share: finding a spawn's panel, reaching it by
    keys, and checking an opened panel against a trace's JSON."""

    def panel(self, k, where="#source"):
        return self.d.find_element(By.CSS_SELECTOR, '%s .spawn[data-spawn="%d"] .twin' % (where, k))

    def wait_charts(self, box, n):
        WebDriverWait(self.d, 20).until(lambda d: len(box.find_elements(By.CSS_SELECTOR, ".twin-chart svg.marks")) == n)

    def check_panel(self, trace, k, box, ends_apart=False):
        """Spawn k of trace: its opened panel against the trace's JSON: per
        platform its label, the word simulated, the seconds, the rule that
        extended the recorded ranks, the chart, every rank's end, the busbw
        table; or the refusal. ends_apart: the trace's ranks are known to
        end at different times (so a table of one rank's end repeated
        would not pass)."""
        twin = trace["spawns"][k]["twin"]
        plotted = [p for p, t in twin.items() if "refused" not in t]
        self.wait_charts(box, len(plotted))
        legend = box.find_element(By.CSS_SELECTOR, ".twin-legend").text
        self.assertTrue(legend.startswith("Simulated"), legend)
        for p, t in twin.items():
            if "refused" in t:
                el = box.find_element(By.CSS_SELECTOR, '.twin-refused[data-platform="%s"]' % p)
                self.assertIn("not simulated on " + p, el.text)
                self.assertIn(t["refused"], el.text)
                self.assertEqual(box.find_elements(By.CSS_SELECTOR, '.twin-plat[data-platform="%s"]' % p), [])
                continue
            fig = box.find_element(By.CSS_SELECTOR, '.twin-plat[data-platform="%s"]' % p)
            cap = fig.find_element(By.CSS_SELECTOR, "figcaption").text
            self.assertIn("simulated on " + p, cap)
            m = re.search(r"simulated (\S+ \S+) on %s; measured here (\S+ \S+)" % re.escape(p), cap)
            self.assertTrue(m, cap)
            for shown, want in ((m.group(1), t["simulated_s"]), (m.group(2), t["measured_s"])):
                v, half = seconds(shown)
                self.assertLessEqual(abs(v - want), half * (1 + 1e-9), (p, shown, want))
            # The world it was replayed at and, where the recorded ranks were
            # extended to it, the rule that did it (docs/twin.md).
            ws = t.get("world_size", len(t["ranks"]))
            self.assertIn("%d rank%s" % (ws, "" if ws == 1 else "s"), cap)
            if "recorded_ranks" in t:
                self.assertIn("(%s rule, from the %d recorded)" % (t["rule"], t["recorded_ranks"]), cap)
            if "timelines_of" in t:
                self.assertIn("timelines of " + t["timelines_of"], cap)
            # The chart: its title says simulated and names the platform;
            # a bar per span that lasts, each rank a row.
            svg = fig.find_element(By.CSS_SELECTOR, ".twin-chart svg.marks")
            self.assertIn("simulated on " + p, svg.text)
            label = fig.find_element(By.CSS_SELECTOR, ".twin-chart [role=graphics-document]").get_attribute("aria-label")
            self.assertIn("Simulated timeline on " + p, label)
            spans = sum(1 for tl in t["ranks"] for e in tl if e["end"] > e["start"])
            bars = self.js("return arguments[0].querySelectorAll('.mark-rect path').length", svg)
            self.assertEqual(bars, spans, p)
            # The text alternative: every rank's simulated end, as the trace has it.
            ends = [rank_end(tl) for tl in t["ranks"]]
            if ends_apart:
                self.assertGreater(len(set(ends)), 1, "the trace's ranks should end at different times")
            rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                    for tr in fig.find_elements(By.CSS_SELECTOR, "table.twin-ends tbody tr")]
            self.assertEqual([r[0] for r in rows], ["rank %d" % r for r in range(len(t["ranks"]))])
            for r, (_, shown) in enumerate(rows):
                v, half = seconds(shown)
                self.assertLessEqual(abs(v - ends[r]), half * (1 + 1e-9), (p, r, shown))
            # busbw per collective and size, as the trace has it (3
            # significant digits below 100 GB/s, whole numbers above).
            got = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                   for tr in fig.find_elements(By.CSS_SELECTOR, "table.twin-busbw tbody tr")]
            self.assertEqual(len(got), len(t["collectives"]))
            for row, c in zip(got, t["collectives"]):
                self.assertEqual(row[0], c["op"].replace("_", "-"))
                b = float(row[6])
                half = 0.5 if c["busbw_GBps"] >= 100 else 0.5 * 10 ** (math.floor(math.log10(c["busbw_GBps"])) - 2)
                self.assertLessEqual(abs(b - c["busbw_GBps"]), half * (1 + 1e-9), (p, row, c))


class TestTwin(TwinCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The same trace without its twins: what the page shows must not
        # change but for the twin panels.
        bare = json.loads(json.dumps(TRACE))
        for sp in bare["spawns"]:
            del sp["twin"]
        bare["lecture"] = "notwin"
        body = json.dumps(bare, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(cls.traces, "notwin.js"), "w", encoding="utf-8") as f:
            f.write('(window.lecternTraces = window.lecternTraces || {})["notwin"] = ' + body + ";\n")

    def measured_plot(self):
        """The measured chart (rank 0's chart_show), drawn: its SVG."""
        WebDriverWait(self.d, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#source .spawn .cell .r-plot svg.marks"))
        plots = self.d.find_elements(By.CSS_SELECTOR, "#source .r-plot")
        self.assertEqual(len(plots), 1)
        return plots[0].find_element(By.CSS_SELECTOR, "svg.marks").get_attribute("outerHTML")

    def test_step_mode_keyboard_only(self):
        at = spawn_note_step(0)
        self.assertIsNone(self.open("?trace=notwin&step=%d" % at))
        bare_plot = self.measured_plot()
        bare_cells = self.js("return document.querySelector('#source .spawn[data-spawn=\"0\"] .rgrid').textContent")
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, ".twin"), [])

        self.assertIsNone(self.open("?trace=%s&step=%d" % (NAME, at)))
        for k in range(len(TRACE["spawns"])):
            btn = self.panel(k).find_element(By.CSS_SELECTOR, ".twin-toggle")
            self.assertEqual(btn.get_attribute("aria-expanded"), "false")
            self.assertIn("simulated", btn.text.lower())
        # Closed, nothing of it is built.
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, ".twin-body > *"), [])
        # Keys only: Tab to the first spawn's twin, Enter opens, Space
        # closes, Enter opens again; the focus stays on its button.
        self.js("document.getElementById('source').focus()")
        sel = '#source .spawn[data-spawn="0"] .twin-toggle'
        self.tab_to(sel)
        box = self.panel(0)
        body = box.find_element(By.CSS_SELECTOR, ".twin-body")
        self.keys(Keys.ENTER)
        self.assertEqual(box.find_element(By.CSS_SELECTOR, ".twin-toggle").get_attribute("aria-expanded"), "true")
        self.assertTrue(body.is_displayed())
        self.keys(Keys.SPACE)
        self.assertEqual(box.find_element(By.CSS_SELECTOR, ".twin-toggle").get_attribute("aria-expanded"), "false")
        self.assertFalse(body.is_displayed())
        self.keys(Keys.ENTER)
        self.assertTrue(self.js("return document.activeElement.matches(arguments[0])", sel))
        self.assertEqual(self.cur_step(), at, "the keys that open a twin do not move the step")
        self.check_panel(TRACE, 0, box, ends_apart=True)
        # Apart from the measured output: no simulated chart among the
        # ranks' cells, no measured chart in the twin, and the measured
        # chart and the ranks' output exactly as without the twin.
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "#source .rgrid .twin, #source .twin .r-plot"), [])
        self.assertEqual(self.measured_plot(), bare_plot)
        self.assertEqual(self.js("return document.querySelector('#source .spawn[data-spawn=\"0\"] .rgrid').textContent"),
                         bare_cells)
        # The second spawn: refused on scaled@8, which says so.
        self.tab_to('#source .spawn[data-spawn="1"] .twin-toggle')
        self.keys(Keys.ENTER)
        self.check_panel(TRACE, 1, self.panel(1))
        self.wait_still()
        self.assertEqual(self.axe(), [])
        self.shot("twin-step")

    def test_read_mode(self):
        self.assertIsNone(self.open("?trace=%s&step=%d" % (NAME, spawn_note_step(1))))
        self.keys("m")
        WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, '#read .spawn[data-spawn="1"] .twin'))
        self.js("document.getElementById('read').focus()")
        for k in range(len(TRACE["spawns"])):
            sel = '#read .spawn[data-spawn="%d"] .twin-toggle' % k
            self.tab_to(sel)
            self.keys(Keys.ENTER)
            self.assertEqual(self.d.find_element(By.CSS_SELECTOR, sel).get_attribute("aria-expanded"), "true")
            self.check_panel(TRACE, k, self.panel(k, "#read"), ends_apart=k == 0)
        self.wait_still()
        self.assertEqual(self.axe(), [])
        self.shot("twin-read")

    def test_twin_is_data(self):
        # A twin's names and reasons are text, whatever they hold.
        self.assertIsNone(self.open("?trace=%s&step=%d" % (NAME, spawn_note_step(0))))
        bad = '"><img id="pwn" src="x" onerror="top.__pwned = 1">'
        got = self.js("""var L = window.lectern, t = L.T.spawns[0].twin, name = arguments[0];
            t[name] = JSON.parse(JSON.stringify(t['h100-node']));
            t[name].ranks[0][1].op = name;
            t[name].collectives[0].op = name;
            t[name + ' refused'] = {label: 'x', refused: name};
            var box = document.createElement('div');
            document.getElementById('source').appendChild(box);
            box.innerHTML = L.twinHTML(0, 'test');
            L.toggleTwin(box.querySelector('.twin-toggle'));
            return [box.querySelectorAll('.twin-plat').length, box.querySelector('.twin-refused:last-child').textContent];""",
                      bad)
        self.assertEqual(got[0], 3)
        self.assertIn("not simulated on " + bad + " refused: " + bad, got[1])
        WebDriverWait(self.d, 20).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".twin-chart svg.marks")) >= 3)
        self.assertEqual(self.d.find_elements(By.ID, "pwn"), [])
        self.assertIsNone(self.js("return window.__pwned"))

    def test_a_trace_without_twins_draws_none(self):
        self.assertIsNone(self.open("?trace=expected"))
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, ".twin, .twin-toggle"), [])


def committed(name):
    with open(os.path.join(harness.REPO, "traces", name + ".json"), encoding="utf-8") as f:
        return json.load(f)


class TestCommittedTwins(TwinCase):
    """The committed traces' twins (`make twin`): lecture_scaling's 2 x 2
    mesh replayed by the mesh rule on h100-node@8 and scaled@64, and
    lecture_08's spawns replayed on the 8-GPU node and the scaled cluster.
    Every spawn with a twin is opened by keys in step mode and in read mode
    and checked against the committed JSON; axe-core with them open."""

    def twin_spawns(self, trace):
        ks = [k for k, sp in enumerate(trace["spawns"]) if "twin" in sp]
        self.assertTrue(ks, "the committed trace has no twin (make twin)")
        return ks

    def open_by_keys(self, where, k):
        """From the first control of spawn k's block, Tab (keys only) to its
        twin's button and press Enter; the panel opens. The focus starts in
        the block, as a reader's Tab into it would, rather than at the top
        of a long lecture."""
        self.js("""var sec = document.querySelector(arguments[0] + ' .spawn[data-spawn="' + arguments[1] + '"]');
            sec.scrollIntoView({block: 'center'});
            sec.querySelector('button, a[href], [tabindex]:not([tabindex="-1"])').focus();""", where, k)
        sel = '%s .spawn[data-spawn="%d"] .twin-toggle' % (where, k)
        self.tab_to(sel, limit=60)
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, sel).get_attribute("aria-expanded"), "false")
        self.keys(Keys.ENTER)
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, sel).get_attribute("aria-expanded"), "true")
        return self.panel(k, where)

    def step_mode(self, name):
        """Per source file, the page opened at the note of its first spawn
        with a twin; every twin in that file opened and checked; axe."""
        trace = committed(name)
        files = {}
        for k in self.twin_spawns(trace):
            files.setdefault(trace["spawns"][k]["stack"][-1]["path"], []).append(k)
        for path, ks in files.items():
            at = spawn_note_step(ks[0], trace)
            self.d.get("file://" + os.path.join(harness.REPO, "viewer", "index.html") + "?trace=%s&step=%d" % (name, at))
            self.assertIsNone(harness.wait_ready(self.d))
            self.wait_still()
            for k in ks:
                with self.subTest(spawn=k, mode="step"):
                    self.check_panel(trace, k, self.open_by_keys("#source", k))
            self.assertEqual(self.cur_step(), at, "the keys that open a twin do not move the step")
            self.wait_still()
            self.assertEqual(self.axe(), [], (name, path))
        return trace

    def read_mode(self, name):
        """Read mode at the last twin's note (so every earlier spawn is in
        the page): every twin opened by keys and checked; axe."""
        trace = committed(name)
        ks = self.twin_spawns(trace)
        self.d.get("file://" + os.path.join(harness.REPO, "viewer", "index.html") +
                   "?trace=%s&step=%d" % (name, spawn_note_step(ks[-1], trace)))
        self.assertIsNone(harness.wait_ready(self.d))
        self.keys("m")
        WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, '#read .spawn[data-spawn="%d"] .twin' % ks[-1]))
        for k in ks:
            with self.subTest(spawn=k, mode="read"):
                self.check_panel(trace, k, self.open_by_keys("#read", k))
        self.wait_still()
        self.assertEqual(self.axe(), [], name)
        return trace

    def test_lecture_scaling_mesh(self):
        trace = self.step_mode("lecture_scaling")
        # Its mesh spawn, replayed by the mesh rule on the 8-GPU node and the
        # scaled cluster: the caption names the rule.
        for k in self.twin_spawns(trace):
            twin = trace["spawns"][k]["twin"]
            self.assertTrue({"h100-node@8", "scaled@64"} <= set(twin), sorted(twin))
            for p, t in twin.items():
                self.assertEqual(t["rule"], "mesh", p)
                cap = self.panel(k).find_element(By.CSS_SELECTOR, '.twin-plat[data-platform="%s"] figcaption' % p).text
                self.assertIn("mesh rule", cap)
        self.shot("twin-lecture_scaling-step")
        self.read_mode("lecture_scaling")
        self.shot("twin-lecture_scaling-read")

    def test_lecture_08(self):
        self.step_mode("lecture_08")
        self.shot("twin-lecture_08-step")
        self.read_mode("lecture_08")
        self.shot("twin-lecture_08-read")


if __name__ == "__main__":
    unittest.main()
