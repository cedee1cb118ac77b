#!/usr/bin/python3
"""The viewer and checks: each check a badge with its numbers, the counts in
the header (the run's own, a folded pass counted as the checks it stands for,
checks not reached said; the failed count a way to the first failed check),
a spawn whose checks failed not marked ok, folded passes in the lowest
rank's column, ranks' output in rank order however it arrived, and axe-core
finds nothing to fault.

    /usr/bin/python3 tests/viewer/test_checks.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


class TestChecks(base.ViewerCase):
    def badges(self):
        return [(e.get_attribute("class"), e.text) for e in self.d.find_elements(By.CSS_SELECTOR, "#source .r-check")]

    def test_header_counts_and_first_failure(self):
        self.assertIsNone(self.open("?trace=checks"))
        # The fixture: 3 lecture checks (1 failed), 4 rank checks (rank 3's failed).
        badge = self.d.find_element(By.ID, "checks-badge")
        self.assertTrue(badge.is_displayed())
        self.assertEqual(badge.text, "checks: 5 passed, 2 failed")
        self.assertIn("bad", badge.get_attribute("class"))
        # No error step: the banner says the failure is the checks'.
        self.assertIn("2 checks failed. First: lectures/checks.c:19 (body)", self.d.find_element(By.ID, "banner").text)
        badge.find_element(By.CSS_SELECTOR, "button").click()
        step = self.js("return window.lecternViewer.cur()")
        r = self.js("return window.lectern.T.steps[arguments[0]].renderings[0]", step)
        self.assertEqual((r["type"], r["what"], r["passed"]), ("check", "gradients", False))
        self.shot("checks")

    def test_each_check_is_a_badge_with_numbers(self):
        self.open("?trace=checks&step=5")
        found = self.badges()
        lecture = [b for b in found if "gradients" in b[1] or "outputs" in b[1] or "two and two" in b[1]]
        self.assertEqual(len(lecture), 3, found)
        grad = [b for b in lecture if "gradients" in b[1]][0]
        self.assertIn("fail", grad[0].split())
        self.assertIn("✗ fail", grad[1])
        self.assertIn("max abs diff 0.5 at [0] (actual 1.5, expected 1)", grad[1])
        self.assertIn("wrong elements 0–5", grad[1])
        self.assertIn("6 of 6 outside", grad[1])
        outs = [b for b in lecture if "outputs" in b[1]][0]
        self.assertIn("pass", outs[0].split())
        self.assertIn("✓ pass", outs[1])
        self.assertIn("rtol 1e-5, atol 1e-8", outs[1])

    def test_rank_steps_in_rank_order(self):
        self.open("?trace=checks&step=5")
        # The trace holds rank 0, 3, 2, 1 (and 2, 0, 1, 3): the viewer steps through 0, 1, 2, 3.
        seq = []
        for _ in range(8):
            i = self.js("return window.lecternViewer.cur()")
            s = self.js("return window.lectern.T.steps[arguments[0]]", i)
            seq.append((s["renderings"][0]["type"], s["rank"]))
            self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(seq, [("text", 0), ("text", 1), ("text", 2), ("text", 3),
                               ("check", 0), ("check", 1), ("check", 2), ("check", 3)])

    def test_homework_counts_and_spawn_statuses(self):
        # The homework fixture: exercise 1's 8 passes folded into 2 steps,
        # exercise 2's 4 failed checks, exercise 3 crashed before its 4. The
        # header gives the run's counts (meta.checks: what the console said),
        # not the steps: a folded PASS stands for all of its ranks' checks.
        self.assertIsNone(self.open("?trace=homework&step=3"))
        badge = self.d.find_element(By.ID, "checks-badge")
        self.assertEqual(badge.text, "checks: 8 passed, 4 failed, 4 not reached")
        self.assertIn("bad", badge.get_attribute("class"))
        self.assertIn("8 passed, 4 failed, 4 not reached", self.js("return document.getElementById('run-info').textContent"))
        # Each spawn names its exercise; the one that ran to its end with
        # failed checks is not a green "ok".
        facts = [e.text for e in self.d.find_elements(By.CSS_SELECTOR, "#source .sp-facts")]
        self.assertEqual([f.split(" · ")[0] for f in facts], ["exercise 1", "exercise 2", "exercise 3"])
        sts = [(e.text, e.get_attribute("class")) for e in self.d.find_elements(By.CSS_SELECTOR, "#source .sp-facts .st")]
        self.assertEqual(sts, [("ok", "st ok"), ("ran, 4 checks failed", "st bad"), ("failed", "st bad")])
        # The folded passes sit in rank 0's column, in order of their turn.
        cells = self.js("""return Array.prototype.map.call(
            document.querySelectorAll('#source section.spawn[data-spawn="0"] tbody tr'), function (tr) {
              return Array.prototype.map.call(tr.querySelectorAll('td'), function (td) {
                return td.classList.contains('empty') ? '' : td.textContent.indexOf('part 0') >= 0 ? 'part 0' :
                  td.textContent.indexOf('part 1') >= 0 ? 'part 1' : '?'; }); });""")
        self.assertEqual(cells, [["part 0", "", "", ""], ["part 1", "", "", ""]])
        self.assertEqual(self.axe(), [])

    def test_header_counts_folded_passes_without_meta(self):
        # An older trace without meta.checks: the header counts a folded
        # PASS as the checks it stands for.
        self.assertIsNone(self.open("?trace=homework"))
        self.assertEqual(self.js("delete window.lectern.T.meta.checks; return window.lectern.checkCounts()"),
                         {"passed": 8, "failed": 4, "notReached": None})

    def test_no_axe_violations(self):
        for q in ("?trace=checks&step=3", "?trace=checks&step=8", "?trace=checks&step=3&mode=read"):
            with self.subTest(q=q):
                self.open(q)
                self.assertEqual(self.axe(), [])


if __name__ == "__main__":
    unittest.main()
