#!/usr/bin/python3
"""The viewer and table(): a table rendering is a real table whose cells show
the recorded text, sorted by the recorded values (numbers as numbers) when a
column's header button is pressed, by mouse or by keyboard, with aria-sort
saying the order; axe-core finds nothing to fault.

    /usr/bin/python3 tests/viewer/test_tables.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

TABLE = "#source table.r-table"
PLOT = "#source figure.r-plot"


class TestTables(base.ViewerCase):
    def column(self, k):
        return [r.find_elements(By.TAG_NAME, "td")[k].text
                for r in self.d.find_elements(By.CSS_SELECTOR, TABLE + " tbody tr")]

    def sorts(self):
        return [th.get_attribute("aria-sort") for th in self.d.find_elements(By.CSS_SELECTOR, TABLE + " th")]

    def test_table_shows_caption_units_and_text(self):
        self.assertIsNone(self.open("?trace=tables&step=2"))
        t = self.d.find_element(By.CSS_SELECTOR, TABLE)
        self.assertEqual(t.find_element(By.TAG_NAME, "caption").text, "all-reduce on 4 ranks")
        heads = [h.text for h in t.find_elements(By.CSS_SELECTOR, "th button")]
        self.assertEqual([h.replace("↕", "").strip() for h in heads], ["operation", "size (MiB)", "busbw (GB/s)"])
        self.assertEqual(self.column(2), ["2.50", "10.25", "0.75"])   # as recorded, in the column's format
        self.assertEqual(self.sorts(), ["none", "none", "none"])
        self.shot("table")

    def test_sort_by_keyboard(self):
        self.open("?trace=tables&step=2")
        size = self.d.find_elements(By.CSS_SELECTOR, TABLE + " th button")[1]
        self.js("arguments[0].focus()", size)
        self.keys(Keys.ENTER)
        # numbers sort as numbers: 1, 4, 16 (as text, "16" would come before "4")
        self.assertEqual(self.column(1), ["1", "4", "16"])
        self.assertEqual(self.sorts(), ["none", "ascending", "none"])
        # the focus stays on the header, so the next key sorts the other way
        self.assertEqual(self.js("return document.activeElement.getAttribute('data-col')"), "1")
        self.keys(" ")
        self.assertEqual(self.column(1), ["16", "4", "1"])
        self.assertEqual(self.sorts(), ["none", "descending", "none"])
        self.keys(Keys.ENTER)   # third press: the order recorded
        self.assertEqual(self.column(1), ["4", "16", "1"])
        self.assertEqual(self.sorts(), ["none", "none", "none"])
        # the step did not move while sorting
        self.assertEqual(self.cur_step(), 2)

    def test_sort_by_click_and_text(self):
        self.open("?trace=tables&step=2")
        self.d.find_elements(By.CSS_SELECTOR, TABLE + " th button")[0].click()
        self.assertEqual(self.column(0), ["all-reduce", "broadcast", "reduce-scatter"])
        self.d.find_elements(By.CSS_SELECTOR, TABLE + " th button")[2].click()
        self.assertEqual(self.column(2), ["0.75", "2.50", "10.25"])
        self.assertEqual(self.sorts(), ["none", "none", "ascending"])

    def test_modelled_spans_drawn_apart_labelled_and_in_the_legend(self):
        # A chart with a measured and a modelled span (chart_span_modelled).
        self.assertIsNone(self.open("?trace=tables&step=3"))
        fig = self.d.find_element(By.CSS_SELECTOR, PLOT)
        # Said in words under the chart, with the count.
        cap = fig.find_element(By.CSS_SELECTOR, "figcaption.modelled-note").text
        self.assertIn("Modelled compute: 1 of 2 bars (pale, dashed outline) is time the lecture said a device "
                      "computed (model_compute), not arithmetic that was measured.", cap)
        # Drawn apart: the bars, in data order, one solid and opaque, the
        # modelled one pale with a dashed outline.
        bars = fig.find_elements(By.CSS_SELECTOR, "svg g.mark-rect path")
        self.assertEqual(len(bars), 2)
        looks = sorted((b.get_attribute("opacity"), b.get_attribute("stroke-dasharray")) for b in bars)
        self.assertEqual(looks, [("0.4", "4,2"), ("1", "1,0")])
        # A legend entry of its own, and the chart's accessible description.
        legend = [t.text for t in fig.find_elements(By.CSS_SELECTOR, "svg g.mark-text.role-legend-label text")]
        self.assertIn("modelled", legend)
        self.assertIn("measured", legend)
        chart = fig.find_element(By.CSS_SELECTOR, '[aria-roledescription="visualization"]')
        self.assertIn("modelled compute", chart.get_attribute("aria-label"))
        # A screen reader hears each bar's kind with its numbers.
        self.assertEqual(sorted("compute: modelled" in (b.get_attribute("aria-label") or "") for b in bars),
                         [False, True])
        # The header says the run rests partly on modelled compute.
        self.assertIn("modelled compute: 2 spans", self.d.find_element(By.ID, "meta").text)
        self.shot("modelled")

    def test_no_axe_violations(self):
        for q in ("?trace=tables&step=2", "?trace=tables&step=2&mode=read", "?trace=tables&step=3",
                  "?trace=tables&step=3&mode=read"):
            with self.subTest(q=q):
                self.open(q)
                if "read" not in q and "step=2" in q:
                    self.d.find_elements(By.CSS_SELECTOR, TABLE + " th button")[1].click()
                self.assertEqual(self.axe(), [])


if __name__ == "__main__":
    unittest.main()
