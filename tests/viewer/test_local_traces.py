#!/usr/bin/python3
"""?trace=NAME reads traces/local/NAME.js (what `make run` wrote) when it is
there, else traces/NAME.js (the trace the repository ships); in either
folder NAME.failed.js when it is the newest run (its banner links the last
good run, if one is kept).

    /usr/bin/python3 tests/viewer/test_local_traces.py [-v]
"""
import json
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402


class TestLocalTraces(base.ViewerCase):
    def title(self):
        return self.js("return document.getElementById('title').textContent")

    def test_local_first_then_shipped(self):
        local = os.path.join(self.traces, "local")
        self.assertIsNone(self.open("?trace=demo"))
        self.assertEqual(self.title(), "Demo lecture")          # only the shipped one exists
        os.makedirs(local, exist_ok=True)
        try:
            # A local "demo": the checks fixture's trace under the name demo.
            with open(os.path.join(self.traces, "checks.js"), encoding="utf-8") as f:
                body = f.read().replace('["checks"]', '["demo"]', 1)
            with open(os.path.join(local, "demo.js"), "w", encoding="utf-8") as f:
                f.write(body)
            self.assertIsNone(self.open("?trace=demo"))
            self.assertEqual(self.title(), "Checks")
            # A name with neither still says the file is missing.
            err = self.open("?trace=nothing_here")
            self.assertIn("could not be read", str(err))
        finally:
            shutil.rmtree(local, ignore_errors=True)


    def write_local(self, source, key, start_time, status):
        """traces/local/KEY.js: the fixture `source` under the key KEY, run
        at `start_time` with `status`."""
        with open(os.path.join(self.traces, source + ".json"), encoding="utf-8") as f:
            t = json.load(f)
        t["meta"]["start_time"] = start_time
        t["meta"]["status"] = status
        os.makedirs(os.path.join(self.traces, "local"), exist_ok=True)
        with open(os.path.join(self.traces, "local", key + ".js"), "w", encoding="utf-8") as f:
            f.write("(window.lecternTraces = window.lecternTraces || {})[%s] = %s;\n" % (json.dumps(key), json.dumps(t)))

    def banner(self):
        return self.js("var b = document.getElementById('banner'); return b.hidden ? '' : b.textContent")

    def badge(self):
        return self.js("return document.getElementById('status-badge').textContent")

    def test_the_newest_run_opens_by_name_even_when_it_failed(self):
        local = os.path.join(self.traces, "local")
        try:
            self.write_local("demo", "demo", "2026-11-20T10:00:00Z", "ok")
            self.write_local("checks", "demo.failed", "2026-11-21T10:00:00Z", "failed")
            self.assertIsNone(self.open("?trace=demo"))
            self.assertEqual(self.title(), "Checks")           # the failed run, the newer one
            self.assertEqual(self.badge(), "failed")
            self.assertIn("This run failed.", self.banner())
            self.assertIn("the last run that passed", self.banner())
            self.assertEqual(self.axe(required=False), [])
            # The banner's link opens the good run.
            self.js("document.querySelector('.banner-good a').click()")
            self.assertIsNone(base.harness.wait_ready(self.d))
            self.assertEqual(self.title(), "Demo lecture")
            self.assertEqual(self.badge(), "ok")
            # A failed trace older than the good one is not what NAME opens.
            self.write_local("checks", "demo.failed", "2026-11-19T10:00:00Z", "failed")
            self.assertIsNone(self.open("?trace=demo"))
            self.assertEqual(self.title(), "Demo lecture")
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def test_a_lecture_whose_only_run_failed_opens_by_name(self):
        local = os.path.join(self.traces, "local")
        try:
            self.write_local("checks", "only_failed.failed", "2026-11-21T10:00:00Z", "failed")
            self.assertIsNone(self.open("?trace=only_failed"))
            self.assertEqual(self.title(), "Checks")
            self.assertEqual(self.badge(), "failed")
            self.assertIn("This run failed.", self.banner())
            self.assertNotIn("the last run that passed", self.banner())   # there is none
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def test_a_run_with_warnings_says_how_many_in_the_header(self):
        """A run that passed with tensors left alive is not all green: the
        header counts its warnings and the count goes to the first."""
        local = os.path.join(self.traces, "local")
        try:
            with open(os.path.join(self.traces, "demo.json"), encoding="utf-8") as f:
                t = json.load(f)
            t["meta"]["status"] = "ok"
            k = len(t["steps"]) // 2
            t["steps"][k]["renderings"].append({"type": "warning", "data": "lectures/demo.c:3: 1 tensor (16 bytes) "
                                                "made here is still alive at the end of the lecture"})
            os.makedirs(local, exist_ok=True)
            with open(os.path.join(local, "warned.js"), "w", encoding="utf-8") as f:
                f.write('(window.lecternTraces = window.lecternTraces || {})["warned"] = %s;\n' % json.dumps(t))
            self.assertIsNone(self.open("?trace=warned&step=0"))
            self.assertEqual(self.badge(), "ok")
            self.assertEqual(self.js("var b = document.getElementById('warnings-badge'); "
                                     "return b.hidden ? null : b.textContent"), "1 warning")
            self.js("document.querySelector('#warnings-badge button').click()")
            self.assertEqual(self.js("return window.lectern.S.cur"), k)
            self.assertEqual(self.axe(required=False), [])
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def test_every_rank_keeps_its_column_and_error_cards_stay_inside_it(self):
        """A rank that wrote nothing (killed when a sibling failed) still has
        its column; a long error wraps inside its rank's column."""
        local = os.path.join(self.traces, "local")
        try:
            with open(os.path.join(self.traces, "expected.json"), encoding="utf-8") as f:
                t = json.load(f)
            t["steps"] = [s for s in t["steps"] if not (s.get("spawn") == 1 and s.get("rank") == 3)]
            first = [s for s in t["steps"] if s.get("spawn") == 1 and s.get("rank") == 0][0]
            first["renderings"] = [{"type": "error", "data": "lectures/expected.c:14: " + "x" * 300 + " and "
                                    + "/a/very/long/path/" * 20}]
            t["meta"]["status"] = "failed"
            os.makedirs(local, exist_ok=True)
            with open(os.path.join(local, "columns.js"), "w", encoding="utf-8") as f:
                f.write('(window.lecternTraces = window.lecternTraces || {})["columns"] = %s;\n' % json.dumps(t))
            self.assertIsNone(self.open("?trace=columns&mode=read"))
            heads = self.js("var s = document.querySelectorAll('#read .spawn')[1]; return Array.prototype.map.call("
                            "s.querySelectorAll('.rank-h'), function (h) { return h.getAttribute('data-r'); })")
            self.assertEqual(heads, ["0", "1", "2", "3"])
            over = self.js("""var out = [];
                document.querySelectorAll('#read .cell .r-error').forEach(function (e) {
                  var c = e.closest('.cell').getBoundingClientRect(), b = e.getBoundingClientRect();
                  if (e.scrollWidth > e.clientWidth + 1 || b.right > c.right + 1) out.push([b.right, c.right]);
                }); return [document.querySelectorAll('#read .cell .r-error').length, out];""")
            self.assertGreater(over[0], 0)
            self.assertEqual(over[1], [])
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def test_a_frame_clicked_right_after_a_jump_stays_shown(self):
        """For 2.5 s after a jump the source is brought back to the current
        step whenever it changes size (figures loading); a call-stack frame
        the reader clicks meanwhile must end that, not be scrolled away."""
        self.assertIsNone(self.open("?trace=demo&step=0"))
        n = self.js("return window.lectern.T.steps.length")
        k = n - 1
        self.js("window.lectern.go(arguments[0]);", k)
        self.js("""var L = window.lectern; window.__scrolls = 0; var f = L.scrollToCurrent;
                   L.scrollToCurrent = function () { window.__scrolls++; return f.apply(this, arguments); };
                   document.querySelector('#side .frame').click(); window.__scrolls = 0;
                   var d = document.createElement('div'); d.style.height = '500px';
                   document.querySelector('#source .file').appendChild(d);""")
        import time
        time.sleep(0.5)
        self.assertEqual(self.js("return window.__scrolls"), 0)


if __name__ == "__main__":
    unittest.main()
