#!/usr/bin/python3
"""Message links in the viewer (viewer/links.js): on a rank's step, the
Messages panel says where its message came from or went, a button (and the
key f) goes to the partner's step and "back" (and b) returns; a
collective's step says which ranks took part and who arrived last; in the
spawn's columns the partners are marked by more than colour.

The trace is a real run of tests/fixtures/links_fixture.c made for this
class; every expected value is read from that trace's JSON, never from the
page.

    bash tests/viewer/run.sh test_links
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


class TestLinks(base.ViewerCase):
    FIXTURE = "links_fixture"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sp = cls.trace["spawns"][0]

    def site(self, side):
        return self.sp["link_sites"][side[1]]

    def pipe_message(self):
        """A message of the pipeline from rank 0 to rank 1: its sender's step
        and the receiver's differ (they are two ranks' notes)."""
        ms = [m for m in self.sp["messages"] if m["from"][0] == 0 and m["to"][0] == 1
              and self.site(m["from"])["call"] == "send"]
        self.assertTrue(ms)
        return ms[0]

    def view(self, i):
        """The viewer's index of the trace file's step i: the viewer puts a
        run of ranks' steps at one line in rank order, and a link's step is
        the file's index (the page must be open)."""
        return self.js("return window.lecternViewer.fileStep(%d)" % i)

    def open_at(self, file_step):
        """Opens the trace at the file's step file_step; returns the
        viewer's index of it."""
        self.open("?trace=%s&step=1" % self.FIXTURE)
        i = self.view(file_step)
        self.open("?trace=%s&step=%d" % (self.FIXTURE, i + 1))
        self.assertEqual(self.cur_step(), i + 1)
        return i

    def panel_text(self):
        return self.d.find_element(By.ID, "links-panel").text

    def test_receive_names_its_send_and_jumps_there_and_back_by_keys(self):
        m = self.pipe_message()
        self.assertEqual(self.trace["steps"][m["from"][2]]["rank"], 0)
        recv_step = self.open_at(m["to"][2])
        send_step = self.view(m["from"][2])
        text = self.panel_text()
        want = "from rank 0, line %d" % self.site(m["from"])["line"]
        self.assertIn(want, text)
        self.assertIn("%d bytes" % m["bytes"], text)
        # the partner's cell in the columns is marked, in words too
        linked = self.js("return Array.from(document.querySelectorAll('.spawn .cell .item.linked'))"
                         ".map(function (e) { return +e.getAttribute('data-step'); })")
        self.assertIn(send_step, linked)
        self.assertTrue(self.js("return !!document.querySelector('.item.linked .link-sr')"))
        self.keys("f")
        self.assertEqual(self.cur_step(), send_step + 1)
        self.assertIn("to rank 1, line %d" % self.site(m["to"])["line"], self.panel_text())
        self.keys("b")
        self.assertEqual(self.cur_step(), recv_step + 1)
        self.assertEqual(self.axe(), [])

    def test_mouse_button_has_an_accessible_name_and_goes(self):
        m = self.pipe_message()
        recv_step = self.open_at(m["to"][2])
        send_step = self.view(m["from"][2])
        b = self.d.find_element(By.CSS_SELECTOR, "#links-panel .link-go[data-step='%d']" % send_step)
        self.assertIn("go to rank 0, line %d" % self.site(m["from"])["line"], b.get_attribute("aria-label"))
        b.click()
        self.assertEqual(self.cur_step(), send_step + 1)
        back = self.d.find_element(By.CSS_SELECTOR, "#links-panel .link-back")
        back.click()
        self.assertEqual(self.cur_step(), recv_step + 1)

    def test_keyboard_only_reaches_the_link(self):
        m = self.pipe_message()
        self.open_at(m["to"][2])
        self.tab_to("#links-panel .link-go", limit=300)
        self.keys(Keys.ENTER)
        self.assertEqual(self.cur_step(), self.view(m["from"][2]) + 1)

    def test_collective_names_its_ranks_and_who_arrived_last(self):
        c = [c for c in self.sp["collectives"] if c["op"] == "all_reduce"][0]
        last = max(c["calls"], key=lambda x: x[3])
        self.assertEqual(last[0], c["last"])
        other = [x for x in c["calls"] if x[0] != c["last"]][0]
        self.open_at(other[2])
        text = self.panel_text()
        self.assertIn("on ranks %s" % ", ".join(str(x[0]) for x in c["calls"]), text)
        self.assertIn("Arrived last: rank %d" % c["last"], text)
        self.assertIn("this rank waited", text)
        self.assertEqual(self.axe(), [])

    def test_read_mode_unaffected(self):
        m = self.pipe_message()
        self.open_at(m["to"][2])
        self.keys("m")
        self.assertTrue(self.js("return document.getElementById('links-panel').hidden"))
        self.assertEqual(self.js("return document.querySelectorAll('.item.linked').length"), 0)
        self.assertEqual(self.axe(), [])

    def test_rank_filter_lifted_to_show_the_partner(self):
        m = self.pipe_message()
        self.open_at(m["to"][2])
        self.keys("1")  # rank 1 only: the sender, rank 0, is hidden
        self.assertEqual(self.js("return document.getElementById('rank-filter').value"), "1")
        self.keys("f")
        self.assertEqual(self.cur_step(), self.view(m["from"][2]) + 1)
        self.assertEqual(self.js("return document.getElementById('rank-filter').value"), "")
        self.assertEqual(self.axe(), [])

    def test_a_step_without_links_has_no_panel(self):
        self.open("?trace=%s&step=1" % self.FIXTURE)
        self.assertTrue(self.js("return document.getElementById('links-panel').hidden"))


if __name__ == "__main__":
    unittest.main()
