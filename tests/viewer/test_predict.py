#!/usr/bin/python3
"""predict()'s questions in the viewer (viewer/predict.js), on the trace
tests/fixtures/predict_fixture.c writes: the question with an answer field
and a Reveal button, the measured value nowhere in it until revealed, and
then the value and how close the answer was, in words this test works out
itself from the fixture's numbers (12.3 GB/s, 25165824 bytes, 0.375,
1.23e-5 s, rank r's 10 (r + 1) ms). By mouse, by keyboard only, in read
mode, answers kept across the two modes, and axe-core on both.

    /usr/bin/python3 tests/viewer/test_predict.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_viewer as base  # noqa: E402
from test_lectures import AXE  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


# What the fixture measured, by question.
BUSBW = ("What bus bandwidth", 12.3, "GB/s")
BYTES = ("How many bytes", 25165824, "bytes")
BUBBLE = ("What fraction", 0.375, "")
LATENCY = ("How long is one message", 0.0000123, "s")


def shown(v):
    """The measured value as the viewer is to show it (docs/trace-format.md):
    integers whole, very small ones with an exponent, others to 4 digits."""
    if float(v).is_integer():
        return "%d" % v
    if abs(v) < 1e-4:
        mant, exp = ("%.3e" % v).split("e")
        return mant.rstrip("0").rstrip(".") + "e" + str(int(exp))
    return ("%.4g" % v)


def expected(v, unit, answer=None):
    """The result line for measured v and the typed answer (text)."""
    out = "measured " + shown(v) + (" " + unit if unit else "")
    if answer is None:
        return out
    a = float(answer)
    if a == v:
        how = "is exactly right"
    elif a / v >= 2:
        how = "is %s times too high" % ("%.2g" % (a / v))
    elif 0 < a / v <= 0.5:
        how = "is %s times too low" % ("%.2g" % (v / a))
    else:
        pct = abs(a - v) / abs(v) * 100
        assert abs(pct - round(pct)) != 0.5, "pick an answer whose percent does not end in .5"
        how = "is within 0.5%" if pct < 0.5 else "is %d%% %s" % (round(pct), "high" if a > v else "low")
    return out + "; your answer " + answer + " " + how


class TestPredict(base.ViewerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.add_fixture_trace("predict_fixture")
        cls.d.get(harness.file_url(cls.root, "?trace=predict_fixture"))
        assert harness.wait_ready(cls.d) is None
        cls.steps = cls.d.execute_script("""return window.lectern.T.steps.map(function (s) {
            var r = s.renderings[0]; return [r.type === 'predict' ? r.question : null, s.rank]; });""")

    def setUp(self):
        # Answers are kept for the page's session: each test starts without.
        self.js("try { sessionStorage.clear(); } catch (e) {}")

    def step_of(self, start, rank=None):
        """1-based step of the predict whose question starts with `start`."""
        for i, (q, r) in enumerate(self.steps):
            if q and q.startswith(start) and r == rank:
                return i + 1
        raise AssertionError((start, rank))

    def box(self, step, where="#source"):
        return self.d.find_element(By.CSS_SELECTOR, '%s .r-predict[data-s="%d"]' % (where, step - 1))

    def result(self, box):
        return box.find_element(By.CSS_SELECTOR, ".pr-result").text

    def assert_hidden(self, box, value):
        self.assertEqual(self.result(box), "")
        self.assertNotIn(shown(value), box.text)
        self.assertTrue(box.find_element(By.CSS_SELECTOR, ".pr-reveal").is_displayed())

    def test_answer_and_reveal_by_mouse(self):
        at = self.step_of(BUSBW[0])
        self.open("?trace=predict_fixture&step=%d" % at)
        box = self.box(at)
        self.assertIn("What bus bandwidth did the all-reduce reach?", box.text)
        self.assertEqual(box.find_element(By.CSS_SELECTOR, ".pr-q strong").text, "all-reduce")
        self.assert_hidden(box, BUSBW[1])
        # The field is labelled with the unit; the result is a live region.
        inp = box.find_element(By.CSS_SELECTOR, "input.pr-answer")
        label = self.js("return arguments[0].labels[0].textContent", inp)
        self.assertEqual(label, "Your answer (GB/s)")
        self.assertEqual(box.find_element(By.CSS_SELECTOR, ".pr-result").get_attribute("aria-live"), "polite")
        inp.send_keys("10")
        box.find_element(By.CSS_SELECTOR, ".pr-reveal").click()
        self.assertEqual(self.result(box), expected(*BUSBW[1:], answer="10"))
        self.assertEqual(self.result(box), "measured 12.3 GB/s; your answer 10 is 19% low")
        self.assertFalse(box.find_element(By.CSS_SELECTOR, ".pr-reveal").is_displayed())
        self.assertEqual(self.cur_step(), at)
        self.shot("predict-revealed")
        # Another answer, Enter: compared again.
        inp.clear()
        inp.send_keys("30")
        inp.send_keys(Keys.ENTER)
        self.assertEqual(self.result(box), expected(*BUSBW[1:], answer="30"))
        # A unitless ratio, a large integer off by a factor, a tiny value
        # revealed without an answer.
        for (q, v, unit), answer in ((BUBBLE, "0.4"), (BYTES, "100000000"), (LATENCY, None)):
            with self.subTest(question=q):
                b = self.box(self.step_of(q))
                self.assert_hidden(b, v)
                if unit == "":
                    self.assertEqual(self.js("return arguments[0].labels[0].textContent",
                                             b.find_element(By.CSS_SELECTOR, "input")), "Your answer")
                if answer:
                    b.find_element(By.CSS_SELECTOR, "input").send_keys(answer)
                self.js("arguments[0].click()", b.find_element(By.CSS_SELECTOR, ".pr-reveal"))
                self.assertEqual(self.result(b), expected(v, unit, answer))

    def test_each_rank_its_own_value(self):
        at = self.step_of("How long did", rank=1)
        self.open("?trace=predict_fixture&step=%d" % at)
        for rank in range(2):
            b = self.box(self.step_of("How long did", rank=rank))
            self.assert_hidden(b, 10.0 * (rank + 1))
            self.js("arguments[0].click()", b.find_element(By.CSS_SELECTOR, ".pr-reveal"))
            self.assertEqual(self.result(b), expected(10.0 * (rank + 1), "ms"))

    def test_keyboard_only(self):
        at = self.step_of(BUSBW[0])
        self.open("?trace=predict_fixture&step=%d" % at)
        self.js("document.getElementById('source').focus()")
        active = "return document.activeElement.closest('.r-predict') && " \
                 "+document.activeElement.closest('.r-predict').getAttribute('data-s')"
        for _ in range(12):
            self.keys(Keys.TAB)
            if self.js(active) == at - 1:
                break
        self.assertEqual(self.js("return document.activeElement.className"), "pr-answer")
        self.assertEqual(self.js(active), at - 1)
        # Digits and letters go into the field, not to the viewer's keys
        # (digits pick a rank, arrows step).
        self.keys("12.5")
        self.keys(Keys.ARROW_LEFT)
        self.assertEqual(self.cur_step(), at)
        self.assertIsNone(self.js("return window.lecternViewer.state.rank"))
        self.keys(Keys.ENTER)
        box = self.box(at)
        self.assertEqual(self.result(box), expected(*BUSBW[1:], answer="12.5"))
        self.assertEqual(self.result(box), "measured 12.3 GB/s; your answer 12.5 is 2% high")
        # The next question's field, then its button, with Enter and no answer.
        self.keys(Keys.TAB)
        nxt = self.step_of(BYTES[0])
        self.assertEqual(self.js(active), nxt - 1)
        self.assertEqual(self.js("return document.activeElement.className"), "pr-answer")
        self.keys(Keys.TAB)
        self.assertEqual(self.js("return document.activeElement.className"), "pr-reveal")
        self.keys(Keys.ENTER)
        self.assertEqual(self.result(self.box(nxt)), expected(*BYTES[1:]))
        # The focus is not lost with the button: it is in the answer field.
        self.assertEqual(self.js("return document.activeElement.className"), "pr-answer")
        self.assertEqual(self.js(active), nxt - 1)

    def test_read_mode_each_behind_its_button(self):
        self.open("?trace=predict_fixture&mode=read")
        boxes = self.d.find_elements(By.CSS_SELECTOR, "#read .r-predict")
        self.assertEqual(len(boxes), 6)   # four in the lecture, one per rank
        for b in boxes:
            self.assertEqual(self.result(b), "")
            self.assertEqual(len(b.find_elements(By.CSS_SELECTOR, "button.pr-reveal")), 1)
        at = self.step_of(BUBBLE[0])
        b = self.box(at, "#read")
        b.find_element(By.CSS_SELECTOR, "input").send_keys("0.25")
        b.find_element(By.CSS_SELECTOR, "input").send_keys(Keys.ENTER)
        self.assertEqual(self.result(b), expected(*BUBBLE[1:], answer="0.25"))
        # Only that one.
        self.assertEqual([self.result(x) != "" for x in self.d.find_elements(By.CSS_SELECTOR, "#read .r-predict")],
                         [x.get_attribute("data-s") == str(at - 1)
                          for x in self.d.find_elements(By.CSS_SELECTOR, "#read .r-predict")])
        self.shot("predict-read")
        # Kept for the session: the step view shows the same answer, revealed.
        self.open("?trace=predict_fixture&step=%d" % at)
        sb = self.box(at)
        self.assertEqual(sb.find_element(By.CSS_SELECTOR, "input").get_attribute("value"), "0.25")
        self.assertEqual(self.result(sb), expected(*BUBBLE[1:], answer="0.25"))
        self.assert_hidden(self.box(self.step_of(BUSBW[0])), BUSBW[1])

    def test_no_axe_violations(self):
        if not os.path.exists(AXE):
            self.skipTest("node_modules/axe-core missing (npm ci)")
        with open(AXE, encoding="utf-8") as f:
            axe_src = f.read()
        at = self.step_of(BUSBW[0])
        for q, reveal in (("step=%d" % at, False), ("step=%d" % at, True),
                          ("step=%d" % self.step_of("How long did", rank=0), False),
                          ("mode=read", False), ("mode=read", True)):
            with self.subTest(q=q, revealed=reveal):
                self.open("?trace=predict_fixture&" + q)
                if reveal:
                    where = "#read" if "read" in q else "#source"
                    b = self.box(at, where)
                    b.find_element(By.CSS_SELECTOR, "input").send_keys("10")
                    self.js("arguments[0].click()", b.find_element(By.CSS_SELECTOR, ".pr-reveal"))
                    self.assertNotEqual(self.result(b), "")
                self.js(axe_src)
                got = self.d.execute_async_script("""var done = arguments[arguments.length - 1];
                    axe.run(document).then(function (r) { done(r.violations.map(function (v) {
                      return v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map(function (n) {
                        return n.target.join(' '); }).join(', ');
                    })); }, function (e) { done(['axe failed: ' + e]); });""")
                self.assertEqual(got, [])


if __name__ == "__main__":
    unittest.main()
