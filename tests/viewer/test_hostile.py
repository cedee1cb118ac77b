#!/usr/bin/python3
"""A trace is data, never code: the viewer with a trace written to attack it.

The hostile fixture (make_fixtures.py: hostile()) puts HTML that would run a
script (onerror/onload handlers, <script>, javascript: links in notes and in
link renderings, iframes, SVG with script, object/embed/form/base/meta, an
mXSS pattern), a style that would hide the page, and HTML in every text field
(file and function names, host, spawn reason, text and error renderings).
Each payload renames the page, counts itself in the global __pwned and calls
alert(); a script given to the browser before each page (CDP) counts alert
calls in __alerts. The trace is opened every way the viewer allows: ?trace=
from file:// (its .js twin), over http (its .json), the file picker and a
drop. Every step is shown in step mode and the whole trace in read mode; the
harmless text next to each payload (SAFE-...) must be on screen, no payload
may run, and no dangerous attribute may be left anywhere in the page.

    /usr/bin/python3 tests/viewer/test_hostile.py [-v]
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
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# Given to the browser before any script of each new document (frames
# included): alert(), confirm() and prompt() count their calls in the top
# window instead of opening a dialog.
WATCH = """
(function () {
  function count() { try { top.__alerts = (top.__alerts || 0) + 1; } catch (e) { /* cross-origin frame */ } }
  window.alert = window.confirm = window.prompt = count;
})();
"""

# Attributes that make a script run or lead to one, checked on every element
# of the page after the hostile trace was shown.
SCAN = r"""
var bad = [];
var urlAttrs = ['href', 'src', 'action', 'formaction', 'xlink:href', 'data', 'srcdoc', 'poster', 'background'];
document.querySelectorAll('*').forEach(function (el) {
  for (var k = 0; k < el.attributes.length; k++) {
    var a = el.attributes[k], n = a.name.toLowerCase();
    var v = a.value.replace(/[\u0000-\u0020\u007f-\u009f]/g, '').toLowerCase();
    if (/^on/.test(n)) bad.push(el.tagName + ' ' + n);
    else if (urlAttrs.indexOf(n) >= 0 && /^(javascript|data|vbscript):/.test(v)) bad.push(el.tagName + ' ' + n + '=' + v.slice(0, 40));
    else if (n === 'style' && el.closest('.r-md')) bad.push(el.tagName + ' style in a note');
  }
});
// What the trace can reach: the source and read views, the side panels, the
// header, banner and error box (the page's own <noscript> and help form aside).
document.querySelectorAll('#source .file, #read, #side, .top, #banner, #error-box').forEach(function (root) {
  root.querySelectorAll('script, iframe, frame, object, embed, base, link, meta, style, form:not(.vega-bindings), ' +
                        'noscript, math')
    .forEach(function (el) { bad.push('element ' + el.tagName + ' in ' + (el.parentElement.className || el.parentElement.id)); });
});
document.head.querySelectorAll('base, meta[http-equiv], link[rel~=stylesheet]:not([href="viewer.css"])')
  .forEach(function (el) { bad.push('head ' + el.outerHTML.slice(0, 60)); });
document.querySelectorAll('svg script, svg foreignObject').forEach(function (el) { bad.push('svg ' + el.tagName); });
document.querySelectorAll('script:not([src])').forEach(function (el) { bad.push('inline script'); });
return bad;
"""

# For each marker, whether a text node holding it is rendered with a real
# size (not hidden, not clipped to the 1x1 of .sr-only).
VISIBLE = """
var root = arguments[0] ? document.querySelector(arguments[0]) : document.body, out = {};
arguments[1].forEach(function (m) { out[m] = false; });
var w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
for (var n = w.nextNode(); n; n = w.nextNode()) {
  arguments[1].forEach(function (m) {
    if (out[m] || n.nodeValue.indexOf(m) < 0) return;
    var el = n.parentElement, r = el.getBoundingClientRect();
    out[m] = r.width > 4 && r.height > 4 && el.checkVisibility({visibilityProperty: true, opacityProperty: true});
  });
}
return out;
"""


def markers(step):
    return sorted(set(re.findall(r"SAFE-[a-z-]+[a-z]", json.dumps(step["renderings"]))))


class HostileCase(base.ViewerCase):
    width, height = 1280, 900

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.watch = cls.d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})["identifier"]
        with open(os.path.join(cls.traces, "hostile.json"), encoding="utf-8") as f:
            cls.text = f.read()
        cls.trace = json.loads(cls.text)

    @classmethod
    def tearDownClass(cls):
        # The browser is shared with the classes that come next.
        cls.d.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": cls.watch})
        super().tearDownClass()

    def pwned(self):
        return self.js("return [document.title, window.__pwned || 0, window.__alerts || 0]")

    def assert_clean(self, how):
        """No payload ran: proven against a canary that does run."""
        # A handler this test adds by hand runs: handlers in this page do run,
        # and by the time it has, the hostile images queued earlier have
        # failed to load too.
        self.js("""var i = document.createElement('img');
            i.setAttribute('onerror', 'window.__canary = 1'); i.src = 'no-such-canary.png';
            document.body.appendChild(i);""")
        WebDriverWait(self.d, 10).until(lambda d: self.js("return window.__canary === 1"))
        self.js("document.querySelectorAll('img[src=\"no-such-canary.png\"]').forEach(function (e) { e.remove(); })")
        title, pwned, alerts = self.pwned()
        self.assertNotIn("PWNED", title, how)
        if getattr(self, "title0", None):
            self.assertEqual(title, self.title0, how)
        self.assertEqual(pwned, 0, how + ": a payload ran")
        self.assertEqual(alerts, 0, how + ": alert() was called")
        self.assertEqual(self.js(SCAN), [], how)

    def assert_page_shows(self, how):
        """The page itself is still there: a note's style hid nothing."""
        self.assertNotEqual(self.js("return getComputedStyle(document.body).display"), "none", how)
        nxt = self.d.find_element(By.ID, "btn-next")
        self.assertTrue(nxt.is_displayed(), how)
        self.assertTrue(self.js("""var b = document.getElementById('btn-next').getBoundingClientRect();
            return document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2).closest('#btn-next') !== null;"""),
            how + ": something covers the controls")

    def walk(self, how):
        """Every step in step mode, then read mode; each step's SAFE text on screen."""
        n = len(self.trace["steps"])
        self.assertEqual(self.js("return window.lecternViewer.total()"), n)
        # The page's own title (the trace's first heading), to see it is never changed.
        self.title0 = self.d.title
        self.assertIn("A hostile trace", self.title0)
        for i, step in enumerate(self.trace["steps"]):
            self.js("window.lecternViewer.go(arguments[0])", i)
            # Handlers fire as the page loads what a step holds; assert_clean
            # waits for them at the end; what already ran is caught here.
            self.assertEqual(self.pwned(), [self.title0, 0, 0], "%s: step %d" % (how, i + 1))
            want = markers(step)
            seen = self.js(VISIBLE, "#source", want)
            self.assertEqual([m for m in want if not seen[m]], [], "%s: step %d" % (how, i + 1))
            self.assert_page_shows("%s: step %d" % (how, i + 1))
            if i == 0:
                self.assertIn("A hostile trace", self.d.find_element(By.ID, "source").text)
        # Text renderings stay text: the markup is shown, not made.
        self.js("window.lecternViewer.go(arguments[0])", self.step_of("SAFE-text"))
        self.assertIn('<img src=x onerror="document.title', self.d.find_element(By.CSS_SELECTOR, ".item.cur-item").text)
        # The javascript: links of the notes lead nowhere when clicked.
        self.js("window.lecternViewer.go(arguments[0])", self.step_of("SAFE-jslink"))
        self.wait_still()
        for a in self.d.find_elements(By.CSS_SELECTOR, ".item.cur-item .r-md a"):
            if a.text in ("SAFE-jslink", "upper", "tab", "space", "data", "vb"):
                self.assertIsNone(a.get_attribute("href"), a.text)
                a.click()
        if base.HAVE_NPM:
            self.js("window.lecternViewer.go(arguments[0])", self.step_of("SAFE-plot"))
            WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".cur-item .r-plot svg"))
            # The spec's usermeta asked for "view source" with its own HTML and
            # for the editor: the page's options stand.
            actions = self.js("return Array.from(document.querySelectorAll('.cur-item .vega-actions a'))"
                              ".map(function (a) { return a.textContent; })")
            self.assertFalse([a for a in actions if "Source" in a or "Editor" in a], actions)
        self.keys("m")
        read = self.d.find_element(By.ID, "read")
        self.assertTrue(read.is_displayed())
        want = sorted(set(m for s in self.trace["steps"] for m in markers(s)))
        seen = self.js(VISIBLE, "#read", want)
        self.assertEqual([m for m in want if not seen[m]], [], how + ": read mode")
        self.assertIn('<img src=x onerror="', read.text)  # the spawn reason, as text
        self.assert_clean(how)

    def step_of(self, marker):
        for i, s in enumerate(self.trace["steps"]):
            if marker in json.dumps(s["renderings"]):
                return i
        raise AssertionError(marker)


class TestHostileTrace(HostileCase):

    def test_by_name_from_file(self):
        self.assertIsNone(self.open("?trace=hostile"))
        self.assertEqual(self.js("return window.lecternViewer.via"), "script")
        self.walk("?trace=hostile from file://")

    def test_json_over_http(self):
        with harness.http_server(self.root) as site:
            self.d.get(site + "/viewer/index.html?trace=hostile")
            self.assertIsNone(harness.wait_ready(self.d))
            self.assertEqual(self.js("return window.lecternViewer.via"), "json")
            self.walk("?trace=hostile over http")

    def test_file_picker(self):
        self.assertIn("No trace named", self.open(""))
        # The page says how to open a trace from someone else.
        self.assertIn("safe way to open a trace from someone else", self.d.find_element(By.ID, "error-box").text)
        self.d.find_element(By.ID, "open-file").send_keys(os.path.join(self.traces, "hostile.json"))
        self.assertIsNone(harness.wait_ready(self.d))
        self.assertEqual(self.js("return window.lecternViewer.via"), "file")
        self.walk("file picker")
        # The address names no trace: it could not be opened again from it.
        self.assertNotIn("trace=", self.d.current_url)

    def test_drop(self):
        # Dropped onto a page that already shows another trace: it replaces it.
        self.assertIsNone(self.open("?trace=demo"))
        self.drop("hostile.json", self.text)
        WebDriverWait(self.d, 10).until(lambda d: self.js(
            "var v = window.lecternViewer; return v.ready && v.via === 'file'"))
        self.assertEqual([t.get_attribute("data-path") for t in self.d.find_elements(By.CSS_SELECTOR, "#file-tabs .tab")],
                         ["lectures/hostile.c"])
        self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, '#source .file[data-path="lectures/demo.c"]')), 0)
        self.walk("drop")

    def drop(self, name, text):
        self.js("""var dt = new DataTransfer();
            dt.items.add(new File([arguments[1]], arguments[0], {type: 'application/json'}));
            ['dragenter', 'dragover', 'drop'].forEach(function (t) {
              document.body.dispatchEvent(new DragEvent(t, {dataTransfer: dt, bubbles: true, cancelable: true}));
            });""", name, text)


class TestOpeningTraces(HostileCase):
    """Where a trace may come from, and what the page says when it may not."""

    def error_text(self):
        return self.d.find_element(By.ID, "error-box").text

    def test_http_reads_only_its_own_origin(self):
        with harness.http_server(self.root) as site, harness.http_server(self.root) as other:
            # The other site serves the trace fine to its own page...
            self.d.get(other + "/viewer/index.html?trace=demo")
            self.assertIsNone(harness.wait_ready(self.d))
            # ...but a page on this site does not read it.
            for arg in [other + "/traces/demo.json", other + "/traces/demo.js",
                        "//" + other.split("//")[1] + "/traces/demo.json"]:
                with self.subTest(arg=arg):
                    self.d.get(site + "/viewer/index.html?trace=" + arg)
                    err = harness.wait_ready(self.d)
                    self.assertIn("not on this page's own site", err or "")
                    self.assertIn("Open trace", self.error_text())
            # A path on its own site is read.
            self.d.get(site + "/viewer/index.html?trace=../traces/demo.json&step=3")
            self.assertIsNone(harness.wait_ready(self.d))
            self.assertEqual(self.cur_step(), 3)
        self.assert_clean("origins")

    def test_file_page_reads_only_files(self):
        for arg in ["https://example.org/traces/demo.js", "javascript:alert('PWNED')",
                    "data:text/javascript,alert('PWNED')//.js"]:
            with self.subTest(arg=arg):
                err = self.open("?trace=" + arg)
                self.assertIn("Refused", err or "")
                self.assertIn("not a file on this computer", self.error_text())
                self.assert_clean(arg)

    def test_picker_reports_a_broken_trace_then_opens_a_good_one(self):
        self.open("")
        self.d.find_element(By.ID, "open-file").send_keys(os.path.join(self.traces, "broken_schema.json"))
        WebDriverWait(self.d, 10).until(lambda d: "broken_schema.json" in self.error_text())
        self.assertIn("steps[3].stack[1].line is not a positive integer", self.error_text())
        # The error page has its own way to open another file.
        self.assertTrue(self.d.find_element(By.CSS_SELECTOR, "#error-box .open-trace").is_displayed())
        self.d.find_element(By.ID, "open-file").send_keys(os.path.join(self.traces, "demo.json"))
        WebDriverWait(self.d, 10).until(lambda d: self.js("return window.lecternViewer.ready"))
        self.assertFalse(self.d.find_element(By.ID, "error-box").is_displayed())
        self.assertEqual(self.d.find_element(By.ID, "pos").text, "step 1 / 19")
        self.assertTrue(self.d.find_element(By.ID, "btn-next").is_displayed())

    def test_dropped_js_trace_is_not_run(self):
        self.open("")
        with open(os.path.join(self.traces, "demo.js"), encoding="utf-8") as f:
            js = f.read().replace('["demo"] = {', '["demo"] = (alert("PWNED"), {').replace("};\n", "});\n")
        TestHostileTrace.drop(self, "demo.js", js)
        WebDriverWait(self.d, 10).until(lambda d: "A .js trace is a script" in self.error_text())
        self.assert_clean("dropped .js")

    def test_compared_runs(self):
        # Two runs compared (diff.js): the hostile trace against itself with
        # every text changed, so every pair differs and the side panel shows
        # both runs' payloads; then against demo, so every step of it is
        # "only in B" and shown from B alone. Both read with Compare….
        other = json.loads(self.text)
        for st in other["steps"]:
            for r in st["renderings"]:
                for k in ("data", "src", "url", "question"):
                    if isinstance(r.get(k), str):
                        r[k] += " (B)"
        with open(os.path.join(self.traces, "hostile_b.json"), "w", encoding="utf-8") as f:
            json.dump(other, f)
        for a, b in [("hostile.json", "hostile_b.json"), ("demo.json", "hostile.json")]:
            how = "compared: %s with %s" % (a, b)
            self.open("?trace=demo")
            self.d.find_element(By.ID, "btn-compare").click()
            self.d.find_element(By.ID, "compare-a").send_keys(os.path.join(self.traces, a))
            self.d.find_element(By.ID, "compare-b").send_keys(os.path.join(self.traces, b))
            self.d.find_element(By.ID, "compare-go").click()
            self.assertIsNone(harness.wait_ready(self.d))
            title0 = self.d.title
            n = int(self.js("return document.querySelector('#diff-bar .diff-sum').getAttribute('data-differ')")) + \
                int(self.js("return document.querySelector('#diff-bar .diff-sum').getAttribute('data-only-b')"))
            self.assertGreater(n, 5, how)
            shown = ""
            for k in range(n):
                self.js("window.lectern.diffMove(1)")
                self.assertEqual(self.pwned(), [title0, 0, 0], "%s: difference %d" % (how, k + 1))
                self.assert_page_shows("%s: difference %d" % (how, k + 1))
                shown += self.d.find_element(By.ID, "diff-info").text
            # B's payloads were on screen, as text.
            self.assertIn("SAFE-text (B)" if b == "hostile_b.json" else "SAFE-text", shown, how)
            self.title0 = title0
            self.assert_clean(how)


class TestLectureNotesUnchanged(base.ViewerCase):
    """Nothing of the look changes for a trace lectern wrote: the sanitizer
    gives back every note of the committed lectures as the same DOM."""

    SAME = """
    var t = window.lecternTraces[arguments[0]], diff = [], n = 0;
    t.steps.forEach(function (s, i) { s.renderings.forEach(function (r) {
      if (r.type !== 'markdown') return;
      n++;
      var a = document.createElement('template'), b = document.createElement('template');
      a.innerHTML = r.html;
      b.innerHTML = window.lecternSafe.html(r.html);
      if (!a.content.isEqualNode(b.content)) diff.push(i + 1);
    }); });
    return [n, diff];"""

    def test_lectures(self):
        if not base.HAVE_NPM:
            self.skipTest("node_modules/ missing (npm ci): no DOMPurify")
        for name in ["lecture_00", "lecture_08", "lecture_collectives"]:
            with self.subTest(lecture=name):
                self.d.get("file://" + os.path.join(harness.REPO, "viewer", "index.html") + "?trace=" + name)
                self.assertIsNone(harness.wait_ready(self.d))
                n, diff = self.js(self.SAME, name)
                self.assertGreater(n, 10)
                self.assertEqual(diff, [], "steps whose note the sanitizer changed")


if __name__ == "__main__":
    unittest.main()
