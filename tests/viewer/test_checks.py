#!/usr/bin/python3
"""The viewer and checks: each check a badge with its numbers, the counts in
the header (the failed count a way to the first failed check), ranks' output
in rank order however it arrived, and axe-core finds nothing to fault.

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

    def test_no_axe_violations(self):
        for q in ("?trace=checks&step=3", "?trace=checks&step=8", "?trace=checks&step=3&mode=read"):
            with self.subTest(q=q):
                self.open(q)
                self.assertEqual(self.axe(), [])


if __name__ == "__main__":
    unittest.main()
