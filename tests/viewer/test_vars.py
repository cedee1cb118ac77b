#!/usr/bin/python3
"""The variables panel (viewer/vars.js) on a real trace: the one
tests/fixtures/inspect_fixture.c writes with --inspect-collectives, so the
values the panel shows can be checked against what the fixture's source puts
in (rank r's tensor filled with r, then all-reduced to 0 + 1 + 2 + 3).

Per-rank columns, the step a value changed at and the mark on values that
changed at this step, stepping back, the matrix by keyboard (the readout
shows the focused cell's number), the large tensor's summary and picture,
read mode, and axe-core on step and read mode.

    /usr/bin/python3 tests/viewer/test_vars.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

WORLD = 4


class TestVars(base.ViewerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.add_fixture_trace("inspect_fixture", "--inspect-collectives")
        # The steps in the viewer's order (it puts a line's rank steps in rank order).
        cls.d.get(harness.file_url(cls.root, "?trace=inspect_fixture"))
        assert harness.wait_ready(cls.d) is None
        cls.steps = cls.d.execute_script("""return window.lectern.T.steps.map(function (s) {
            var r = s.renderings[0]; return [r.type === 'inspect' ? r.name : null, s.rank]; });""")

    def step_of(self, name, rank=None, nth=1):
        """1-based step of the nth inspect of `name` by `rank`."""
        seen = 0
        for i, (n, r) in enumerate(self.steps):
            if n == name and r == rank:
                seen += 1
                if seen == nth:
                    return i + 1
        raise AssertionError((name, rank, nth))

    def go(self, step):
        self.open("?trace=inspect_fixture&step=%d" % step)

    def row(self, name):
        """[(numbers shown, changed at this step?, changed-at text)] per column of the panel's row `name`."""
        got = self.js("""
            var rows = document.querySelectorAll('#vars table.vars > tbody > tr'), out = null, name = arguments[0];
            rows.forEach(function (tr) {
              if (tr.querySelector('th').textContent !== name) return;
              out = [].map.call(tr.querySelectorAll(':scope > td'), function (td) {
                return [[].map.call(td.querySelectorAll('.tv'), function (x) { return x.textContent; }).join(' ') ||
                        (td.querySelector('.iv-num') || {}).textContent || '',
                        td.classList.contains('v-changed'), (td.querySelector('.v-at') || {}).textContent || ''];
              });
            });
            return out;""", name)
        return None if got is None else [tuple(c) for c in got]

    def test_one_column_per_rank_values_right(self):
        last = max(i for i, (n, r) in enumerate(self.steps) if r is not None) + 1
        self.go(last)   # every rank past its all-reduce
        heads = [h.text for h in self.d.find_elements(By.CSS_SELECTOR, "#vars table.vars > thead th")]
        self.assertEqual([h.lower() for h in heads], ["name"] + ["rank %d" % r for r in range(WORLD)])
        names = [th.text for th in self.d.find_elements(By.CSS_SELECTOR, "#vars table.vars > tbody > tr > th")]
        self.assertEqual(names, ["mine", "rank", "t (before dist_all_reduce)", "t (after dist_all_reduce)", "share"])
        total = sum(range(WORLD))
        self.assertEqual([c[0] for c in self.row("rank")], [str(r) for r in range(WORLD)])
        self.assertEqual([c[0] for c in self.row("mine")], [" ".join([str(total)] * 6)] * WORLD)
        self.assertEqual([c[0] for c in self.row("t (before dist_all_reduce)")],
                         [" ".join([str(r)] * 6) for r in range(WORLD)])
        self.assertEqual([c[0] for c in self.row("share")], [str(r / WORLD) if r else "0" for r in range(WORLD)])
        self.shot("vars-ranks")

    def test_changed_marked_and_stepping_back(self):
        at = self.step_of("mine", rank=2, nth=2)   # rank 2's mine after the all-reduce
        self.go(at)
        mine = self.row("mine")
        self.assertEqual(mine[2], (" ".join(["6"] * 6), True, "changed at this step"))
        self.assertFalse(any(c[1] for k, c in enumerate(mine) if k != 2))
        self.assertFalse(any(c[1] for c in self.row("rank")))
        # One step back: rank 2's mine is its own rank again, changed at its
        # first inspect; what the step before inspected is the one marked.
        self.keys(Keys.ARROW_LEFT)
        self.assertEqual(self.cur_step(), at - 1)
        mine = self.row("mine")
        self.assertEqual(mine[2], (" ".join(["2"] * 6), False, "changed at step %d" % self.step_of("mine", rank=2)))
        name, rank = self.steps[at - 2]
        marked = [(n, k) for n in ("mine", "rank", "t (before dist_all_reduce)", "t (after dist_all_reduce)")
                  for k, c in enumerate(self.row(n) or []) if c[1]]
        self.assertEqual(marked, [(name, rank)] if name in ("mine", "rank") or (name or "").startswith("t (") else [])

    def test_changed_at_is_where_the_value_changed(self):
        # n = 7, then n = 42 in scalars(): after the second, changed at it.
        self.go(self.step_of("n", nth=2))
        self.assertEqual(self.row("n"), [("42", True, "changed at this step")])
        self.go(self.step_of("third"))
        self.assertEqual(self.row("n"), [("7", False, "changed at step %d" % self.step_of("n"))])
        # Another function's variables are not this frame's.
        self.go(self.step_of("row"))
        self.assertIsNone(self.row("n"))

    def test_keyboard_shows_the_number(self):
        self.go(self.step_of("m"))
        m = self.js("""return [].filter.call(document.querySelectorAll('#vars table.vars > tbody > tr'), function (tr) {
                         return tr.querySelector('th').textContent === 'm'; })[0]""")
        cell = m.find_element(By.CSS_SELECTOR, '.tmat td[tabindex="0"]')
        self.js("arguments[0].focus()", cell)
        read = m.find_element(By.CSS_SELECTOR, ".tm-read")
        self.assertEqual(read.text, "[0, 0] = 1.5")
        self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(read.text, "[0, 1] = -2")
        self.keys(Keys.ARROW_DOWN)
        self.assertEqual(read.text, "[1, 1] = 0.1")
        self.assertEqual(self.js("return document.activeElement.getAttribute('data-at')"), "[1, 1]")
        self.keys(Keys.END)
        self.assertEqual(read.text, "[1, 2] = -7")
        # One tab stop per matrix; the arrows moved the cell, not the step.
        self.assertEqual(len(m.find_elements(By.CSS_SELECTOR, '.tmat td[tabindex="0"]')), 1)
        self.assertEqual(self.cur_step(), self.step_of("m"))
        # Hover shows it too.
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(self.d).move_to_element(m.find_elements(By.CSS_SELECTOR, ".tmat td")[3]).perform()
        self.assertEqual(read.text, "[1, 0] = 3")
        self.shot("vars-keyboard")

    def test_large_tensor_summary_and_picture(self):
        self.go(self.step_of("big", nth=2))
        cell = self.d.find_elements(By.CSS_SELECTOR, "#vars table.vars > tbody > tr")[-1]
        self.assertEqual(cell.find_element(By.TAG_NAME, "th").text, "big")
        dl = cell.find_element(By.CSS_SELECTOR, ".iv-sum").text.split()
        self.assertEqual(dl[:4], ["min", "0", "max", "4095"])
        self.assertEqual(len(cell.find_elements(By.CSS_SELECTOR, ".tmat.pic td")), 256)

    def test_read_mode_inline_under_the_note(self):
        self.open("?trace=inspect_fixture&mode=read")
        got = self.js("""return [].map.call(document.querySelectorAll('#read .doc-body > .entry'), function (e) {
                           return [e.classList.contains('entry-var'), e.querySelector('.item').textContent]; });""")
        i = [k for k, (_, text) in enumerate(got) if text.strip() == "scalars"][0]
        self.assertFalse(got[i][0])
        self.assertTrue(got[i + 1][0])
        self.assertIn("n", got[i + 1][1])
        self.assertIn("7", got[i + 1][1])
        self.shot("vars-read")

    def test_no_axe_violations(self):
        for q in ("step=%d" % self.step_of("share", rank=WORLD - 1, nth=1), "step=%d" % self.step_of("big", nth=2),
                  "step=%d&mode=read" % self.step_of("m")):
            with self.subTest(q=q):
                self.open("?trace=inspect_fixture&" + q)
                self.assertEqual(self.axe(), [])


if __name__ == "__main__":
    unittest.main()
