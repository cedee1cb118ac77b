#!/usr/bin/python3
"""Every rank at one moment (viewer/moment.js): on a spawn's step, the panel
"Every rank at one moment" moves through the spawn's event times and says
each rank's state and line at the moment, measured from the trace.

The trace is a real run of tests/fixtures/timecontrol_fixture.c made for
this class: rank 1 waits in a receive for rank 0, which sleeps before its
send (a planted delay); ranks 0 and 1 wait in an all-reduce for rank 2,
which sleeps before it; rank 2 spends the first wait in model_compute().
Every expected value (the event times, which moment lies inside which
wait, each rank's last step) is worked out here from the trace's JSON, by
the rule docs/viewer.md states, never read from the page.

    bash tests/viewer/run.sh test_timecontrol
"""
import bisect
import json
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


class TestTimeControl(base.ViewerCase):
    FIXTURE = "timecontrol_fixture"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        t = cls.trace
        cls.sp = t["spawns"][0]
        ev = set()
        for s in t["steps"]:
            if s["rank"] is not None:
                ev.add(s["time"])
        for m in cls.sp["messages"]:
            ev.update([m["from"][3], m["from"][4], m["to"][3], m["to"][4]])
        for c in cls.sp["collectives"]:
            for x in c["calls"]:
                ev.update([x[3], x[4]])
        for m in t["modelled"]:
            if m["spawn"] == 0:
                ev.update([m["start"], m["end"]])
        cls.times = sorted(ev)
        cls.msg = [m for m in cls.sp["messages"] if m["from"][0] == 0 and m["to"][0] == 1][0]
        cls.coll = cls.sp["collectives"][0]

    # -- what the trace says

    def last_step(self, rank, t):
        """The viewer's index of rank's last step at or before t (the line it
        is at); the viewer puts runs of ranks' steps at one line in rank
        order, so the file's index is mapped (lecternViewer.fileStep)."""
        steps = [(s["time"], i) for i, s in enumerate(self.trace["steps"]) if s["rank"] == rank]
        steps.sort()
        k = bisect.bisect_right([x[0] for x in steps], t) - 1
        return self.js("return window.lecternViewer.fileStep(%d)" % steps[k][1]) if k >= 0 else None

    def first_index(self, lo, hi):
        """The first event time t with lo <= t < hi (the fixture's delay makes
        such an interval 300 ms wide; the events inside it are counted)."""
        for k, t in enumerate(self.times):
            if lo <= t < hi:
                return k
        self.fail("no event time in [%r, %r)" % (lo, hi))

    # -- the page

    def open_panel_by_keys(self):
        self.tab_to("#moment-toggle", limit=400)
        self.keys(Keys.ENTER)
        self.assertTrue(self.js("return document.activeElement.id === 'mo-t'"))

    def moment(self):
        return self.js("return window.lecternViewer.moment()")

    def state(self, rank):
        return self.js("var e = document.querySelector('#mo-ranks li[data-r=\"%d\"]'); return e ? e.textContent : null" % rank)

    def rank_step(self, rank):
        return self.js("var b = document.querySelector('#mo-ranks li[data-r=\"%d\"] .mo-go');"
                       "return b ? +b.getAttribute('data-step') : null" % rank)

    def recv_note(self):
        """Rank 1's step before its receive, the file's index (where the
        test starts, once mapped by view_step)."""
        return self.msg["to"][2]

    def view_step(self, i):
        return self.js("return window.lecternViewer.fileStep(%d)" % i)

    # -- the tests

    def test_keyboard_to_rank_1_waiting_for_rank_0(self):
        recv, send = self.msg["to"], self.msg["from"]
        self.assertLess(recv[3], send[3], "the planted delay: rank 1 entered its receive before rank 0 sent")
        self.open("?trace=%s&step=1" % self.FIXTURE)
        start = self.view_step(self.recv_note())
        self.open("?trace=%s&step=%d" % (self.FIXTURE, start + 1))
        self.assertEqual(self.js("return window.lecternViewer.state.cur"), start)
        self.assertIsNone(self.moment(), "nothing is built before the panel is opened")
        self.open_panel_by_keys()
        here = self.moment()["index"]
        self.assertEqual(self.times[here], self.trace["steps"][self.recv_note()]["time"])
        # inside rank 1's wait, and after rank 0's first step (on a loaded
        # machine rank 0 may start after rank 1 is in its receive)
        first0 = min(s["time"] for s in self.trace["steps"] if s["rank"] == 0)
        want = self.first_index(max(recv[3], first0), send[3])
        for _ in range(want - here):
            self.keys(Keys.ARROW_RIGHT)
        m = self.moment()
        self.assertEqual(m["index"], want)
        t = self.times[want]
        self.assertIn("waiting for rank 0", self.state(1))
        self.assertIn("line %d" % self.sp["link_sites"][recv[1]]["line"], self.state(1))
        # rank 0 sleeps (its own code): computing, at its last step before t,
        # not the next one
        self.assertRegex(self.state(0), r"rank 0 computing(?! \()")
        self.assertEqual(self.rank_step(0), self.last_step(0, t))
        self.assertEqual(self.rank_step(1), self.last_step(1, t))
        mod = [x for x in self.trace["modelled"] if x["rank"] == 2][0]
        if mod["start"] <= t < mod["end"]:
            self.assertIn("computing (modelled)", self.state(2))
        # the step did not move: the slider's arrows are its own
        self.assertEqual(self.cur_step(), start + 1)
        # one sentence for a screen reader, every rank in it
        WebDriverWait(self.d, 5).until(lambda d: "rank 1 waiting for rank 0" in self.js(
            "return document.getElementById('live').textContent"))
        said = self.js("return document.getElementById('live').textContent")
        for r in range(3):
            self.assertIn("rank %d " % r, said)
        self.assertEqual(self.axe(), [])
        self.keys(Keys.END)
        self.assertEqual(self.moment()["index"], len(self.times) - 1)
        for r in range(3):
            self.assertIn("rank %d done" % r, self.state(r))
        self.keys(Keys.HOME)
        self.assertEqual(self.moment()["index"], 0)
        self.assertEqual(self.cur_step(), start + 1)

    def test_mouse_on_the_lanes_in_the_late_all_reduce(self):
        calls = {x[0]: x for x in self.coll["calls"]}
        early = max(calls[0][3], calls[1][3])
        late = calls[2][3]
        self.assertEqual(self.coll["last"], 2)
        self.open("?trace=%s&step=%d" % (self.FIXTURE, self.recv_note() + 1))
        self.d.find_element(By.ID, "moment-toggle").click()
        svg = self.d.find_element(By.ID, "mo-lanes")
        # a point a fifth of the way from the last early arrival to rank 2's:
        # the nearest event time is at or after the early arrivals
        t = early + 0.2 * (late - early)
        t0, t1 = self.times[0], self.times[-1]
        w = svg.size["width"]
        x = (t - t0) / (t1 - t0) * w
        ActionChains(self.d).move_to_element_with_offset(svg, int(round(x - w / 2)), 0).click().perform()
        k = self.moment()["index"]
        self.assertTrue(early <= self.times[k] < late, (self.times[k], early, late))
        for r in (0, 1):
            self.assertIn("in all_reduce, waiting for rank 2", self.state(r))
        self.assertNotIn("waiting", self.state(2))
        # the cursor is where the moment is
        cx = float(self.js("return +document.getElementById('mo-cursor').getAttribute('x1')"))
        self.assertAlmostEqual(cx, (self.times[k] - t0) / (t1 - t0) * 1000, delta=0.1)  # drawn to 0.1 of 1000
        # a rank's step button goes there and keeps the moment
        b = self.d.find_element(By.CSS_SELECTOR, "#mo-ranks li[data-r='2'] .mo-go")
        want = int(b.get_attribute("data-step"))
        b.click()
        self.assertEqual(self.cur_step(), want + 1)
        self.assertEqual(self.moment()["index"], k)
        self.assertEqual(self.axe(), [])

    def test_read_mode_unaffected(self):
        self.open("?trace=%s&step=%d" % (self.FIXTURE, self.recv_note() + 1))
        self.d.find_element(By.ID, "moment-toggle").click()
        self.keys("m")
        self.assertFalse(self.js("return !!document.getElementById('moment-panel').offsetParent"))
        self.assertEqual(self.js("return document.querySelectorAll('.item.mo-at').length"), 0)
        self.assertEqual(self.axe(), [])
        self.keys("m")
        self.assertTrue(self.js("return !!document.getElementById('moment-panel').offsetParent"))

    def test_rank_filter_shows_that_rank_only(self):
        self.open("?trace=%s&step=%d" % (self.FIXTURE, self.recv_note() + 1))
        self.d.find_element(By.ID, "moment-toggle").click()
        self.keys("1")
        self.assertEqual(self.js("return Array.from(document.querySelectorAll('#mo-ranks li'))"
                                 ".map(function (e) { return +e.getAttribute('data-r'); })"), [1])
        self.assertEqual(self.js("return document.querySelectorAll('.mo-lane').length"), 1)
        self.assertEqual(self.axe(), [])

    def test_as_it_happened_stops_at_the_current_step(self):
        self.open("?trace=%s&step=1" % self.FIXTURE)
        start = self.view_step(self.recv_note())
        self.open("?trace=%s&step=%d&live=1" % (self.FIXTURE, start + 1))
        self.d.find_element(By.ID, "moment-toggle").click()
        self.keys(Keys.END)
        t = self.trace["steps"][self.recv_note()]["time"]
        self.assertEqual(self.moment()["index"], bisect.bisect_right(self.times, t) - 1)
        self.assertLess(self.moment()["index"], len(self.times) - 1)
        self.assertEqual(self.cur_step(), start + 1)

    def test_no_panel_outside_a_spawn(self):
        self.open("?trace=%s&step=1" % self.FIXTURE)
        self.assertIsNone(self.trace["steps"][0]["rank"])
        self.assertTrue(self.js("return document.getElementById('moment-panel').hidden"))


if __name__ == "__main__":
    unittest.main()


class TestTimeControlLecture08(base.ViewerCase):
    """The committed lecture_08 trace: at a moment inside a blocking
    collective that some members had not yet entered, its rank names exactly
    those members (worked out here from the collective's arrivals)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        path = os.path.join(harness_repo(), "traces", "lecture_08.json")
        if not os.path.exists(path):
            raise unittest.SkipTest("traces/lecture_08.json missing")
        with open(path, encoding="utf-8") as f:
            cls.trace = json.load(f)
        shutil.copy(path, cls.traces)
        shutil.copy(path[:-5] + ".js", cls.traces)

    def event_times(self, k):
        t, sp, ev = self.trace, self.trace["spawns"][k], set()
        ev.update(s["time"] for s in t["steps"] if s["rank"] is not None and s["spawn"] == k)
        for m in sp.get("messages", []):
            ev.update([m["from"][3], m["from"][4], m["to"][3], m["to"][4]])
        for c in sp.get("collectives", []):
            for x in c["calls"]:
                ev.update([x[3], x[4]])
        for m in t.get("modelled", []):
            if m["spawn"] == k:
                ev.update([m["start"], m["end"]])
        return sorted(ev)

    def a_wait(self):
        """(spawn, rank, event index, the ranks it waits for): the first
        blocking collective of a spawn without messages or modelled compute
        whose rank is inside it at an event time before another member came."""
        t = self.trace
        for k, sp in enumerate(t["spawns"]):
            if sp.get("messages") or any(m["spawn"] == k for m in t.get("modelled", [])):
                continue
            times = self.event_times(k)
            for c in sp.get("collectives", []):
                if sp["link_sites"][c["calls"][0][1]]["call"].endswith("_async"):
                    continue
                for x in c["calls"]:
                    later = [y for y in c["calls"] if y[3] > x[3]]
                    if not later:
                        continue
                    first_late = min(y[3] for y in later)
                    p = bisect.bisect_left(times, x[3])
                    if times[p] < first_late and times[p] < x[4]:
                        late = sorted(y[0] for y in c["calls"] if y[3] > times[p])
                        return k, x[0], p, late, sp["link_sites"][x[1]]["call"]
        self.fail("lecture_08 has no collective with a late member")

    def test_a_rank_waiting_in_a_collective(self):
        k, rank, p, late, op = self.a_wait()
        first = [n for n, s in enumerate(self.trace["steps"]) if s["rank"] is not None and s["spawn"] == k][0]
        self.open("?trace=lecture_08&step=1")
        i = self.js("return window.lecternViewer.fileStep(%d)" % first)
        self.open("?trace=lecture_08&step=%d" % (i + 1))
        self.d.find_element(By.ID, "moment-toggle").click()
        self.assertEqual(int(self.js("return +document.getElementById('mo-t').max")) + 1, len(self.event_times(k)))
        self.js("var s = document.getElementById('mo-t'); s.value = %d; s.dispatchEvent(new Event('input'));" % p)
        self.assertEqual(self.js("return window.lecternViewer.moment().index"), p)
        said = self.js("return document.querySelector('#mo-ranks li[data-r=\"%d\"]').textContent" % rank)
        want = "in %s, waiting for rank%s %s" % (op, "s" if len(late) > 1 else "", ", ".join(map(str, late)))
        self.assertIn(want, said)
        self.assertEqual(self.axe(), [])


def harness_repo():
    return base.harness.REPO
