#!/usr/bin/python3
"""The viewer and spawns: the errors of a spawn_expect_failure() spawn are
shown as caught, as expected (not as the run failing), and in a narrow pane
where a spawn's header wraps to more than a third of the pane, the current
step still comes to the upper third, never under the header.

    /usr/bin/python3 tests/viewer/test_spawn_header.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

SETTLE = """var done = arguments[arguments.length - 1];
requestAnimationFrame(function () { requestAnimationFrame(function () { done(true); }); });"""

# Where the current step is, and what of its spawn's header covers the top
# of the pane: [top of the step in the pane, pane height, the header's
# height, how far the stuck part of the header reaches into the pane].
MEASURE = """var el = document.querySelector('#source .cur-item') || document.querySelector('#source [aria-current=step]');
var box = document.getElementById('source'), b = box.getBoundingClientRect(), r = el.getBoundingClientRect();
var sp = el.closest('.spawn'), head = sp && sp.querySelector('thead'), cover = 0, h = 0;
var pad = parseFloat(getComputedStyle(box).paddingTop) || 0;   // sticky top: 0 is below the padding
if (head) {
  h = head.getBoundingClientRect().height;
  // Whatever of the header is stuck at the top of the pane (at its sticky
  // place) covers the pane down to its bottom; the step's own header rows
  // do not count.
  [head].concat(Array.prototype.slice.call(head.querySelectorAll('th'))).forEach(function (x) {
    var q = x.getBoundingClientRect();
    if (!x.contains(el) && getComputedStyle(x).position === 'sticky' && Math.abs(q.top - b.top - pad) < 1.5)
      cover = Math.max(cover, q.bottom - b.top);
  });
}
return [Math.round(r.top - b.top), Math.round(b.height), Math.round(h), Math.round(cover)];"""


class TestExpectedErrors(base.ViewerCase):
    def test_expected_errors_are_caught_not_failures(self):
        self.assertIsNone(self.open("?trace=expected&step=8"))
        errs = self.d.find_elements(By.CSS_SELECTOR, "#source .r-error")
        self.assertEqual(len(errs), 4)
        for e in errs:
            self.assertIn("r-expected", e.get_attribute("class"))
            self.assertTrue(e.text.startswith("Caught, as expected"), e.text)
        # Not the run's errors: no banner, no error mark on the item, the run ok.
        self.assertTrue(self.js("return document.getElementById('banner').hidden"))
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "#source .has-error"), [])
        self.assertEqual(self.d.find_element(By.ID, "status-badge").text, "ok")
        sts = [(e.text, e.get_attribute("class")) for e in self.d.find_elements(By.CSS_SELECTOR, "#source .sp-facts .st")]
        self.assertEqual(sts, [("caught, as expected", "st ok"), ("ok", "st ok")])
        self.shot("expected-errors")

    def test_a_spawn_that_succeeded_when_a_failure_was_expected_is_bad(self):
        # The same trace with the first spawn marked ok: the lecture's error.
        self.assertIsNone(self.open("?trace=expected"))
        self.js("var sp = window.lectern.T.spawns[0]; sp.status = 'ok';")
        self.assertEqual(self.js("return window.lectern.spawnStatus(window.lectern.T.spawns[0])"),
                         {"text": "succeeded, but a failure was expected", "bad": True})


class TestHosts(base.ViewerCase):
    # A spawn whose ranks ran on two hosts records them ("hosts", rank r's at
    # index r): each rank's header names its host, the address in its
    # tooltip, and the spawn's facts count the hosts. One host: nothing.
    HEADERS = """var box = document.createElement('div');
box.innerHTML = window.lectern.spawnHTML(0, 'test');
return {hosts: Array.prototype.map.call(box.querySelectorAll('.rank-h'), function (th) {
          var h = th.querySelector('.rank-host'); return h ? [h.textContent, h.title] : null; }),
        facts: box.querySelector('.sp-facts').textContent};"""

    def test_rank_headers_name_their_hosts(self):
        self.assertIsNone(self.open("?trace=expected"))
        ws = self.js("return window.lectern.T.spawns[0].world_size")
        self.assertGreaterEqual(ws, 2)
        plain = self.js(self.HEADERS)
        self.assertEqual(plain["hosts"], [None] * ws, "one host: no host in the headers")
        self.assertNotIn("hosts", plain["facts"])
        names = ["vm (10.0.0.1)"] * (ws - 1) + ["node-b (10.0.0.2)"]
        self.js("window.lectern.T.spawns[0].hosts = arguments[0]", names)
        got = self.js(self.HEADERS)
        self.assertEqual(got["hosts"], [[n.split(" (")[0], n] for n in names])
        self.assertIn("2 hosts", got["facts"])


class TestWrappedHeader(base.ViewerCase):
    # A narrow, short window: the source pane is about 700 x 220 px, and a
    # spawn's header (its long call, facts and buttons, the spawn's note,
    # the rank labels) wraps to more than a third of it.
    width, height = 1000, 500

    def test_current_step_in_upper_third_below_the_header(self):
        self.assertIsNone(self.open("?trace=expected"))
        n = self.js("return window.lectern.T.steps.length")
        wrapped, bad = 0, []
        for i in range(n):
            self.js("window.lecternViewer.go(arguments[0])", i)
            self.d.execute_async_script(SETTLE)
            last = [None]

            def still(d):
                r = self.js(MEASURE)
                ok = r == last[0]
                last[0] = r
                return r if ok else False
            top, h, head, cover = WebDriverWait(self.d, 5, poll_frequency=0.05).until(still)
            if head > h / 3:
                wrapped += 1
            # In the upper third (2 px: sub-pixel rounding of the scroll
            # position), and not under what of the header is stuck.
            if not (-2 <= top <= h / 3 + 2 and top >= cover - 2):
                bad.append((i + 1, top, h, head, cover))
        # The case this test is for happened: steps whose spawn's header is
        # more than a third of the pane.
        self.assertGreater(wrapped, 15, "the headers did not wrap: make the window narrower")
        self.assertEqual(bad, [], "(step, top of the step, pane height, header height, stuck header's bottom)")
        self.shot("wrapped-header")


if __name__ == "__main__":
    unittest.main()
