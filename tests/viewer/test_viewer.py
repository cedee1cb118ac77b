#!/usr/bin/python3
"""The viewer in a real browser: headless Chromium from Debian, no network.

Loads the fixture traces of tests/viewer/fixtures from file:// (and once over
http), presses keys, clicks, and checks the current line, the address bar and
the call stack panel. Screenshots go to build/viewer-screenshots/.

    /usr/bin/python3 tests/viewer/test_viewer.py [-v] [TestViewer.test_name]
"""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHOTS = os.path.join(harness.REPO, "build", "viewer-screenshots")
# Highlighting and plots come from npm packages (npm ci); without them the
# page must still work, and these two checks are left out.
HAVE_NPM = os.path.isdir(os.path.join(harness.REPO, "node_modules", "@highlightjs", "cdn-assets"))


def fixture_line(path, snippet):
    with open(os.path.join(HERE, "fixtures", "src", "lectures", path), encoding="utf-8") as f:
        for n, text in enumerate(f.read().split("\n"), 1):
            if snippet in text:
                return n
    raise AssertionError(f"{path}: no line contains {snippet!r}")


class ViewerCase(unittest.TestCase):
    width, height = 1280, 800

    # Each class gets its own copy of the fixture traces (a class may write
    # into it) and the browser every class of the run shares
    # (harness.shared_browser: blank, at this class's size).
    _fixtures = None
    # A class that names a fixture lecture here gets its run's trace made
    # for it (add_fixture_trace), as cls.trace.
    FIXTURE, FIXTURE_ARGS = None, ()

    @classmethod
    def setUpClass(cls):
        cls.traces = tempfile.mkdtemp(prefix="lectern-traces-")
        if ViewerCase._fixtures is None:
            ViewerCase._fixtures = tempfile.mkdtemp(prefix="lectern-fixtures-")
            atexit.register(shutil.rmtree, ViewerCase._fixtures, True)
            subprocess.run([sys.executable, os.path.join(HERE, "make_fixtures.py"), ViewerCase._fixtures],
                           check=True)
        shutil.copytree(ViewerCase._fixtures, cls.traces, dirs_exist_ok=True)
        cls.root = harness.make_root(cls.traces)
        cls.d = harness.shared_browser(cls.width, cls.height)
        os.makedirs(SHOTS, exist_ok=True)
        if cls.FIXTURE:
            cls.trace = cls.add_fixture_trace(cls.FIXTURE, *cls.FIXTURE_ARGS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.traces, ignore_errors=True)

    @classmethod
    def add_fixture_trace(cls, name, *args):
        """Runs the fixture lecture tests/fixtures/NAME, as LECTERN_BUILD's
        build made it, with args, into this class's trace folder; skips the
        class when it is not built; the trace it wrote, as JSON."""
        binary = harness.tracecheck.fixture(name)
        if not os.path.exists(binary):
            raise unittest.SkipTest("build the fixture first: make build/tests/fixtures/%s" % name)
        env = dict(os.environ, LECTERN_ROOT_DIR=harness.REPO)
        env.pop("LECTERN_FIXTURE_CASE", None)
        p = subprocess.run([binary, "--quiet", "--out", cls.traces, *args], env=env, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, p.stderr
        with open(os.path.join(cls.traces, name + ".json"), encoding="utf-8") as f:
            return json.load(f)

    # -- helpers

    def open(self, query, root=None):
        self.d.get(harness.file_url(root or self.root, query))
        err = harness.wait_ready(self.d)
        if not err:
            self.wait_still()
        return err

    def tab_to(self, selector, limit=200):
        """Tabs (keys only) until the focus is on `selector`; fails past limit."""
        for _ in range(limit):
            if self.js("return document.activeElement.matches(arguments[0])", selector):
                return
            self.keys(Keys.TAB)
        self.fail("the keyboard never reached " + selector)

    def wait_still(self):
        """Waits until the page stops moving (figures loaded, plots drawn,
        the step brought to its place) before something is clicked by its
        position."""
        seen = []

        # Three equal looks 150 ms apart: longer than the 400 ms the viewer
        # keeps bringing a step back to its place after a move.
        def still(d):
            seen.append(self.js("var s = document.getElementById('source'), r = document.getElementById('read');"
                                "return [s.scrollTop, s.scrollHeight, r.scrollTop, r.scrollHeight].join(' ');"))
            return len(seen) >= 4 and len(set(seen[-4:])) == 1
        WebDriverWait(self.d, 15, poll_frequency=0.15).until(still)

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def keys(self, *ks, shift=False):
        a = ActionChains(self.d)
        if shift:
            a.key_down(Keys.SHIFT)
        for k in ks:
            a.send_keys(k)
        if shift:
            a.key_up(Keys.SHIFT)
        a.perform()

    def cur_step(self):
        return self.js("return window.lecternViewer.cur() + 1")

    def current_line(self):
        """(file path, line number) of the element marked aria-current=step."""
        return tuple(self.js("""
            var el = document.querySelectorAll('#source [aria-current="step"]');
            if (el.length !== 1) return [null, el.length];
            return [el[0].closest('.file').getAttribute('data-path'), +el[0].getAttribute('data-line')];"""))

    def url_step(self):
        q = parse_qs(urlparse(self.d.current_url).query)
        return int(q["step"][0]) if "step" in q else None

    def wait_url_step(self, n):
        WebDriverWait(self.d, 5).until(lambda d: self.url_step() == n)

    def stack(self):
        """Frames of the call stack panel, innermost first: 'function file:line'."""
        return [b.text.replace("\n", " ") for b in self.d.find_elements(By.CSS_SELECTOR, "#stack .frame")]

    def axe(self, required=True, context="document"):
        """axe-core's violations in the page as it is now ([] when clean);
        context: a JavaScript expression for the element to check (the whole
        page by default). Without node_modules/axe-core (npm ci) the test is
        skipped, or, with required=False, [] is returned and the test goes on."""
        got = harness.axe(self.d, context)
        if got is None:
            if required:
                self.skipTest("node_modules/axe-core missing (npm ci)")
            return []
        return got

    def shot(self, name):
        self.d.save_screenshot(os.path.join(SHOTS, name + ".png"))

    def line_el(self, path, line):
        return self.d.find_element(By.CSS_SELECTOR, f'.file[data-path="{path}"] .ln[data-line="{line}"]')


class TestViewer(ViewerCase):
    DEMO = "lectures/demo.c"
    MULTI = "lectures/multi.c"
    HELPER = "lectures/multi_helper.c"

    def test_opens_from_file_at_first_step(self):
        self.assertIsNone(self.open("?trace=demo"))
        self.assertEqual(self.js("return window.lecternViewer.via"), "script")
        self.assertEqual(self.cur_step(), 1)
        self.assertEqual(self.current_line(), (self.DEMO, fixture_line("demo.c", 'note("# Demo lecture")')))
        self.assertEqual(self.d.find_element(By.ID, "pos").text, "step 1 / 19")
        self.assertIn("demo", self.d.title)
        # highlight.js coloured the C source.
        if HAVE_NPM:
            self.assertGreater(len(self.d.find_elements(By.CSS_SELECTOR, "#source .code span[class^=hljs-]")), 5)
        self.shot("demo-first-step")

    def test_arrow_keys_move_and_update_url_and_stack(self):
        self.open("?trace=demo")
        self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(self.cur_step(), 2)
        self.wait_url_step(2)
        self.keys(Keys.ARROW_RIGHT)  # into hardware()
        self.assertEqual(self.current_line(), (self.DEMO, fixture_line("demo.c", 'note("## One GPU")')))
        self.wait_url_step(3)
        call = fixture_line("demo.c", "hardware();")
        self.assertEqual(self.stack(), ["hardware demo.c:%d" % fixture_line("demo.c", 'note("## One GPU")'),
                                        "body demo.c:%d" % call])
        # The call site in the caller is marked as part of the stack.
        self.assertIn("onstack", self.line_el(self.DEMO, call).get_attribute("class"))
        self.keys("l", "l")
        self.assertEqual(self.cur_step(), 5)
        self.keys("h")
        self.assertEqual(self.cur_step(), 4)
        self.keys(Keys.ARROW_LEFT)
        self.assertEqual(self.cur_step(), 3)
        self.wait_url_step(3)
        # The current line is on screen.
        self.assertTrue(self.js("""var r = document.querySelector('[aria-current="step"]').getBoundingClientRect(),
            b = document.getElementById('source').getBoundingClientRect();
            return r.top >= b.top && r.top < b.bottom;"""))

    def test_loop_line_stacks_renderings_and_marks_current(self):
        self.open("?trace=demo&step=10")
        line = fixture_line("demo.c", 'note_verbatim("i = %d')
        self.assertEqual(self.current_line(), (self.DEMO, line))
        items = self.line_el(self.DEMO, line).find_elements(By.CSS_SELECTOR, ".item")
        self.assertEqual([i.text for i in items], ["i = %d, i*i = %d" % (k, k * k) for k in range(5)])
        cur = self.line_el(self.DEMO, line).find_elements(By.CSS_SELECTOR, ".item.cur-item")
        self.assertEqual([c.text for c in cur], ["i = 1, i*i = 1"])
        # Clicking a rendering goes to exactly that step.
        items[3].click()
        self.assertEqual(self.cur_step(), 12)
        self.wait_url_step(12)

    def test_step_over_and_out(self):
        self.open("?trace=demo&step=2")
        # The next statement of body() is hardware(): step over runs through
        # it and lands on the first step after it returns, in squares().
        self.keys(Keys.ARROW_RIGHT, shift=True)
        self.assertEqual(self.cur_step(), 8)
        self.assertEqual(self.current_line(), (self.DEMO, fixture_line("demo.c", 'note("## A loop")')))
        self.keys(Keys.HOME)
        self.assertEqual(self.cur_step(), 1)
        self.keys("j")
        self.assertEqual(self.cur_step(), 2)
        self.keys(Keys.END)
        self.assertEqual(self.cur_step(), 19)
        self.wait_url_step(19)
        self.open("?trace=demo&step=3")  # inside hardware()
        self.keys("j")  # over: the next step of hardware()
        self.assertEqual(self.cur_step(), 4)
        self.keys("u")  # out of hardware(): the first step after it returns
        self.assertEqual(self.cur_step(), 8)
        self.keys("U")  # back out of squares(): the step before it began
        self.assertEqual(self.cur_step(), 7)
        self.keys("k")  # back over: the previous step of hardware()
        self.assertEqual(self.cur_step(), 6)
        # Out of a rank function: back in the parent, after the spawn.
        self.open("?trace=multi&step=5")
        self.assertEqual(self.stack()[0].split()[0], "all_reduce_demo")
        self.keys("u")
        self.assertEqual(self.current_line(), (self.MULTI, fixture_line("multi.c", 'note("Every rank ended')))

    def test_reload_and_shared_link_open_the_step(self):
        self.open("?trace=demo")
        self.keys(*[Keys.ARROW_RIGHT] * 6)
        self.wait_url_step(7)
        url = self.d.current_url
        self.d.refresh()
        harness.wait_ready(self.d)
        self.assertEqual(self.cur_step(), 7)
        self.d.get("about:blank")
        self.d.get(url)
        harness.wait_ready(self.d)
        self.assertEqual(self.cur_step(), 7)
        self.assertEqual(self.current_line(), (self.DEMO, fixture_line("demo.c", 'note_system("nproc")')))

    def test_click_line_goes_to_its_step(self):
        self.open("?trace=demo")
        line = fixture_line("demo.c", 'note("## Bandwidth")')
        self.line_el(self.DEMO, line).click()
        self.assertEqual(self.cur_step(), 14)
        self.assertEqual(self.current_line(), (self.DEMO, line))
        # A call site: the first step that passes through it.
        self.wait_still()
        self.line_el(self.DEMO, fixture_line("demo.c", "squares();")).click()
        self.assertEqual(self.current_line(), (self.DEMO, fixture_line("demo.c", 'note("## A loop")')))
        self.wait_url_step(8)

    def test_scrubber_and_buttons(self):
        self.open("?trace=demo")
        self.d.find_element(By.ID, "btn-next").click()
        self.assertEqual(self.cur_step(), 2)
        self.d.find_element(By.ID, "btn-last").click()
        self.assertEqual(self.cur_step(), 19)
        self.assertFalse(self.d.find_element(By.ID, "btn-next").is_enabled())
        self.d.find_element(By.ID, "btn-first").click()
        self.assertEqual(self.cur_step(), 1)
        self.js("var s = document.getElementById('scrub'); s.value = 9; s.dispatchEvent(new Event('input'));")
        self.assertEqual(self.cur_step(), 9)
        self.assertEqual(self.d.find_element(By.ID, "pos").text, "step 9 / 19")

    def test_renderings(self):
        self.open("?trace=demo&step=1")
        src = self.d.find_element(By.ID, "source")
        self.assertEqual(src.find_element(By.CSS_SELECTOR, ".r-md h1").text, "Demo lecture")
        img = src.find_element(By.CSS_SELECTOR, ".r-img img")
        zoom = src.find_element(By.CSS_SELECTOR, ".r-img .zoom")
        self.assertIn("width: 30%", zoom.get_attribute("style"))
        WebDriverWait(self.d, 5).until(lambda d: self.js("return arguments[0].complete && arguments[0].naturalWidth", img))
        # 30% of the column would be narrower than the figure's own 200 px:
        # it is shown at its own width, where there is room.
        WebDriverWait(self.d, 5).until(lambda d: img.size["width"] >= 199)
        self.assertEqual(img.get_attribute("alt"), "Figure: ring")
        # A remote image is a link (new tab), never fetched.
        remote = src.find_element(By.CSS_SELECTOR, ".r-img.remote a")
        self.assertEqual(remote.get_attribute("target"), "_blank")
        self.assertIn("nvlink.png", remote.text)
        self.assertIn("example.org", remote.text)
        self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, 'img[src*="example.org"]')), 0)
        link = src.find_element(By.CSS_SELECTOR, ".r-link a")
        self.assertEqual(link.get_attribute("target"), "_blank")
        # A link without a title says what it points to and where.
        self.assertIn("h100", link.text)
        self.assertIn("nvidia.com", link.find_element(By.CSS_SELECTOR, ".host").text)
        self.assertIn("noopener", link.get_attribute("rel"))
        # A link written inside markdown opens in a new tab too.
        self.assertEqual(src.find_element(By.CSS_SELECTOR, '.r-md a[href="https://example.org/hbm"]')
                         .get_attribute("target"), "_blank")
        cmd = src.find_element(By.CSS_SELECTOR, ".r-cmd")
        self.assertIn("nproc", cmd.find_element(By.CSS_SELECTOR, ".cmd-h").text)
        # Verbatim text keeps its whitespace.
        self.assertEqual(self.js("return getComputedStyle(document.querySelector('.r-text')).whiteSpace"), "pre")
        # The plot is drawn by vega-embed.
        if HAVE_NPM:
            WebDriverWait(self.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".r-plot svg"))
        # The error step is red and names its line.
        self.keys(Keys.END, Keys.ARROW_LEFT)
        err = self.d.find_element(By.CSS_SELECTOR, '[aria-current="step"] .r-error')
        self.assertIn("demo.c:%d" % fixture_line("demo.c", 'image("assets/missing.png"'), err.text)
        self.assertEqual(err.value_of_css_property("border-left-color"), "rgba(180, 35, 24, 1)")
        self.assertIn("1 error step", self.d.find_element(By.ID, "banner").text)
        self.shot("demo-error-step")

    def test_raw_code_toggle(self):
        self.open("?trace=demo&step=3")
        line = fixture_line("demo.c", 'note("## One GPU")')
        self.assertEqual(self.line_el(self.DEMO, line).text.strip(), str(line) + "\nOne GPU")
        self.keys("c")
        self.assertEqual(self.d.find_element(By.ID, "btn-raw").get_attribute("aria-pressed"), "true")
        self.assertIn('note("## One GPU");', self.line_el(self.DEMO, line).text)
        self.assertEqual(self.current_line(), (self.DEMO, line))
        self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, "#source .r-md")), 0)
        self.keys(Keys.ARROW_RIGHT)
        WebDriverWait(self.d, 5).until(lambda d: "code=raw" in d.current_url)
        self.shot("demo-raw-code")
        self.d.find_element(By.ID, "btn-raw").click()
        self.assertGreater(len(self.d.find_elements(By.CSS_SELECTOR, "#source .r-md")), 0)

    def test_multi_file_stack_switches_file(self):
        self.open("?trace=multi&step=3")
        self.assertEqual(self.current_line()[0], self.MULTI)
        self.keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)  # first rank step, made in multi_helper.c
        before = fixture_line("multi_helper.c", "[before all-reduce]")
        spawn_line = fixture_line("multi.c", "spawn(all_reduce_demo")
        # A rank's step is shown in its spawn's table, under the spawn() line.
        self.assertEqual(self.current_line(), (self.MULTI, spawn_line))
        self.assertEqual(self.stack(), ["all_reduce_demo multi_helper.c:%d" % before,
                                        "collectives multi.c:%d" % spawn_line,
                                        "body multi.c:%d" % fixture_line("multi.c", "collectives();")])
        sep = self.d.find_element(By.CSS_SELECTOR, "#stack .spawn-sep").text
        self.assertIn("rank 1", sep)
        self.assertIn("4 ranks", sep)
        cur = self.d.find_element(By.CSS_SELECTOR, "#source .cell .item.cur-item")
        self.assertIn("Rank 1 [before", cur.text)
        self.assertTrue(cur.is_displayed())
        # Its row says which line made it.
        row = cur.find_element(By.XPATH, "ancestor::tr")
        self.assertEqual(row.find_element(By.CSS_SELECTOR, ".to-line").text, str(before))
        self.shot("multi-rank-step")
        # Clicking the rank's frame shows multi_helper.c at its line; the step stays.
        self.d.find_elements(By.CSS_SELECTOR, "#stack .frame")[0].click()
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, '.tab[aria-selected="true"]').text, "multi_helper.c")
        sel = self.d.find_element(By.CSS_SELECTOR, ".ln.frame-sel")
        self.assertEqual(sel.get_attribute("data-line"), str(before))
        self.assertEqual(self.cur_step(), 5)
        # ... and it says which ranks ran that line, and how often.
        self.assertEqual(" ".join(sel.find_element(By.CSS_SELECTOR, ".chips").text.split()), "4 ranks: 0 1 2 3")
        self.shot("multi-spawn-block")
        # The next step goes back to the spawn's table in multi.c.
        self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(self.current_line(), (self.MULTI, spawn_line))
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, '.tab[aria-selected="true"]').text, "multi.c")

    def test_spawn_block_groups_ranks(self):
        self.open("?trace=multi&step=3")
        line = fixture_line("multi.c", "spawn(all_reduce_demo")
        ln = self.line_el(self.MULTI, line)
        # The spawn() call stays visible, with the spawn's table under it.
        self.assertIn("spawn(all_reduce_demo", ln.find_element(By.CSS_SELECTOR, ".code").text)
        block = ln.find_element(By.CSS_SELECTOR, ".spawn")
        cap = block.find_element(By.CSS_SELECTOR, ".sp-cap").text
        self.assertIn("4 ranks", cap)
        self.assertIn("mpi", cap)
        heads = block.find_elements(By.CSS_SELECTOR, ".rank-h")
        self.assertEqual([h.text for h in heads], ["rank 0 3", "rank 1 2", "rank 2 2", "rank 3 2"])
        self.assertEqual(len({h.value_of_css_property("color") for h in heads}), 4)
        # One row per line, the ranks side by side.
        rows = block.find_elements(By.CSS_SELECTOR, "tbody tr")
        cells = [[c.text for c in r.find_elements(By.CSS_SELECTOR, "td")] for r in rows]
        self.assertEqual(cells[0], ["Rank %d [before all-reduce]: tensor([%s], device='cpu')" %
                                    (r, ", ".join("%d." % (x + r) for x in range(4))) for r in range(4)])
        self.assertEqual(cells[1], ["Rank %d [after all-reduce]: tensor([ 6., 10., 14., 18.], device='cpu')" % r
                                    for r in range(4)])
        # Rank 0's note from a nested function sits in rank 0's column, alone in its row.
        self.assertEqual(cells[2], ["Rank 0 checks the sum: [6, 10, 14, 18].", "", "", ""])
        self.assertEqual([r.find_element(By.CSS_SELECTOR, ".to-line").text for r in rows],
                         [str(fixture_line("multi_helper.c", snip)) for snip in
                          ("[before all-reduce]", "[after all-reduce]", 'note("Rank 0 checks')])
        # World size and backend in the side panel.
        info = self.d.find_element(By.ID, "spawn-info").text
        self.assertIn("4 ranks · mpi", info)
        # Clicking a rank's rendering goes to that step.
        rows[1].find_elements(By.CSS_SELECTOR, "td .item")[2].click()
        self.assertEqual(self.js("return window.lecternTraces.multi.steps[window.lecternViewer.cur()].rank"), 2)
        self.assertEqual(self.stack()[0], "all_reduce_demo multi_helper.c:%d" % fixture_line("multi_helper.c", "[after all-reduce]"))

    def test_rank_filter(self):
        self.open("?trace=multi&step=3")
        Select(self.d.find_element(By.ID, "rank-filter")).select_by_visible_text("rank 2")
        WebDriverWait(self.d, 5).until(lambda d: "rank=2" in d.current_url)
        line = fixture_line("multi.c", "spawn(all_reduce_demo")
        WebDriverWait(self.d, 5).until(lambda d: [h.get_attribute("data-r") for h in self.line_el(self.MULTI, line)
                                                  .find_elements(By.CSS_SELECTOR, ".spawn .rank-h")] == ["2"])
        # The keys work right after the select was used (no click elsewhere).
        ranks = []
        for _ in range(4):
            self.keys(Keys.ARROW_RIGHT)
            ranks.append(self.js("var s = window.lecternViewer; return s.state.rank === 2 && "
                                 "window.lecternTraces.multi.steps[s.cur()].rank"))
        self.assertEqual(ranks, [2, 2, None, None])
        self.shot("multi-rank-filter")
        self.keys("a")
        WebDriverWait(self.d, 5).until(lambda d: "rank=" not in d.current_url)
        WebDriverWait(self.d, 5).until(lambda d: len(self.line_el(self.MULTI, line)
                                                     .find_elements(By.CSS_SELECTOR, ".spawn .rank-h")) == 4)
        # A link with rank=1 opens filtered.
        self.open("?trace=multi&step=4&rank=1")
        self.assertEqual(Select(self.d.find_element(By.ID, "rank-filter")).first_selected_option.text, "rank 1")

    def test_failed_trace(self):
        self.assertIsNone(self.open("?trace=multi.failed"))
        self.assertEqual(self.d.find_element(By.ID, "status-badge").text, "failed")
        banner = self.d.find_element(By.ID, "banner")
        self.assertIn("This run failed", banner.text)
        banner.find_element(By.CSS_SELECTOR, "button").click()
        crash = fixture_line("multi_helper.c", "all_reduce(t, DIST_SUM);")
        # The crash is rank 2's step: in the spawn's table, under the spawn() line.
        self.assertEqual(self.current_line(), (self.MULTI, fixture_line("multi.c", "spawn(all_reduce_demo")))
        err = WebDriverWait(self.d, 5).until(
            lambda d: d.find_element(By.CSS_SELECTOR, "[aria-current=step] .item.cur-item .r-error"))
        self.assertIn("rank 2", err.text)
        self.assertIn("multi_helper.c:%d" % crash, err.text)
        self.shot("multi-failed")

    def test_broken_traces_explain_themselves(self):
        cases = [("?trace=broken_syntax", "broken_syntax.js", "not valid JavaScript"),
                 ("?trace=broken_schema", "broken_schema.js", "steps[3].stack[1].line is not a positive integer"),
                 ("?trace=broken_version", "broken_version.js", '"version" is 2, this viewer reads version 1'),
                 ("?trace=broken_empty", "broken_empty.js", 'does not define the trace "broken_empty"'),
                 ("?trace=no_such_lecture", "traces/no_such_lecture.js", "missing"),
                 ("?trace=../tests/viewer/fixtures/none.json", "none.json", "cannot be read from file://"),
                 ("", "", "No trace named")]
        for query, file, what in cases:
            with self.subTest(query=query):
                err = self.open(query)
                self.assertTrue(err, query)
                box = self.d.find_element(By.ID, "error-box")
                self.assertTrue(box.is_displayed())
                self.assertIn(file, box.text)
                self.assertIn(what, box.text)
                self.assertFalse(self.d.find_element(By.ID, "step-view").is_displayed())
        self.open("?trace=broken_schema")
        self.shot("broken-trace")

    def test_trace_by_path(self):
        self.assertIsNone(self.open("?trace=../tests/viewer/fixtures/demo.js&step=4"))
        self.assertEqual(self.cur_step(), 4)

    def test_read_mode(self):
        self.open("?trace=multi&step=6")
        self.keys("m")
        read = self.d.find_element(By.ID, "read")
        self.assertTrue(read.is_displayed())
        self.assertFalse(self.d.find_element(By.ID, "step-view").is_displayed())
        WebDriverWait(self.d, 5).until(lambda d: "mode=read" in d.current_url)
        # Every step's rendering, once, in order; rank output grouped by rank.
        items = read.find_elements(By.CSS_SELECTOR, ".item")
        self.assertEqual(len(items), 17)
        texts = [i.text for i in items]
        self.assertLess(texts.index("Multi-rank lecture"), texts.index("All-reduce on 4 ranks"))
        # A spawn's output where the spawn comes, its ranks side by side: row by row.
        self.assertLess(texts.index("All-reduce on 4 ranks"), texts.index("Rank 1 [before all-reduce]: tensor([1., 2., 3., 4.], device='cpu')"))
        self.assertLess(texts.index("Rank 3 [before all-reduce]: tensor([3., 4., 5., 6.], device='cpu')"),
                        texts.index("Rank 0 checks the sum: [6, 10, 14, 18]."))
        self.assertLess(texts.index("Rank 0 checks the sum: [6, 10, 14, 18]."), texts.index("Every rank ended with the same tensor."))
        self.assertEqual(len(read.find_elements(By.CSS_SELECTOR, ".spawn .rank-h")), 4 + 2)
        self.assertEqual(len(read.find_elements(By.CSS_SELECTOR, ".item.cur-item")), 1)
        self.shot("multi-read-mode")
        self.d.refresh()
        harness.wait_ready(self.d)
        self.assertTrue(self.d.find_element(By.ID, "read").is_displayed())
        self.d.find_element(By.ID, "btn-mode-step").click()
        self.assertTrue(self.d.find_element(By.ID, "step-view").is_displayed())
        self.assertEqual(self.cur_step(), 6)

    def test_help_and_accessible_names(self):
        self.open("?trace=demo")
        self.keys("?")
        dlg = self.d.find_element(By.ID, "help")
        self.assertTrue(dlg.is_displayed())
        self.assertIn("step over", dlg.text)
        self.shot("help")
        self.keys(Keys.ESCAPE)
        self.assertFalse(dlg.is_displayed())
        unnamed = self.js("""return Array.from(document.querySelectorAll('button, select, input')).filter(function (b) {
            return b.offsetParent && !(b.getAttribute('aria-label') || b.textContent.trim() || b.labels && b.labels.length);
        }).map(function (b) { return b.outerHTML.slice(0, 80); });""")
        self.assertEqual(unnamed, [])
        self.assertEqual(self.d.find_element(By.ID, "live").get_attribute("aria-live"), "polite")
        WebDriverWait(self.d, 3).until(lambda d: "Step 1 of 19" in d.find_element(By.ID, "live").get_attribute("textContent"))

    def test_served_over_http_reads_json(self):
        with harness.http_server(self.root) as base:
            self.d.get(base + "/viewer/index.html?trace=multi&step=5")
            self.assertIsNone(harness.wait_ready(self.d))
            self.assertEqual(self.js("return window.lecternViewer.via"), "json")
            self.assertEqual(self.stack()[0].split()[1].split(":")[0], "multi_helper.c")


class TestWithoutNodeModules(ViewerCase):
    """Without npm packages the page still works: plain code, plot data as text."""

    def test_degrades(self):
        root = harness.make_root(self.traces, node_modules=False)
        try:
            self.assertIsNone(self.open("?trace=demo&step=15", root))
            self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, "#source .hljs-keyword")), 0)
            self.assertIn("static void hardware(void)", self.d.find_element(By.ID, "source").text)
            WebDriverWait(self.d, 5).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".r-plot.plot-missing"))
            self.assertIn("npm ci", self.d.find_element(By.CSS_SELECTOR, ".r-plot").text)
            # Without DOMPurify a note's HTML is never used: its markdown shows as text.
            self.assertIn("DOMPurify", self.d.find_element(By.ID, "notice").text)
            self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, "#source .r-md h2, #source .r-md strong")), 0)
            self.assertIn("## Bandwidth", self.d.find_element(By.ID, "source").text)
        finally:
            shutil.rmtree(root, ignore_errors=True)


class TestNarrowWindow(ViewerCase):
    width, height = 420, 800

    def test_fits(self):
        self.open("?trace=multi&step=6")
        self.assertEqual(self.js("return document.documentElement.scrollWidth <= window.innerWidth"), True)
        for el in ["btn-next", "btn-over", "scrub", "stack"]:
            self.assertTrue(self.d.find_element(By.ID, el).is_displayed(), el)
        self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(self.cur_step(), 7)
        self.shot("multi-narrow")


class TestLectureTrace(ViewerCase):
    """The real lecture trace, when `make run` has written it."""

    def test_lecture_08(self):
        real = os.path.join(harness.REPO, "traces", "lecture_08.js")
        if not os.path.exists(real):
            self.skipTest("traces/lecture_08.js not written yet (make run)")
        url = "file://" + os.path.join(harness.REPO, "viewer", "index.html") + "?trace=lecture_08"
        self.d.get(url)
        self.assertIsNone(harness.wait_ready(self.d))
        n = self.js("return window.lecternViewer.total()")
        self.assertGreater(n, 10)
        self.assertIsNotNone(self.current_line()[0])
        for _ in range(min(n - 1, 40)):
            self.keys(Keys.ARROW_RIGHT)
        self.assertEqual(self.cur_step(), min(n, 41))
        self.assertIsNotNone(self.current_line()[0])
        self.shot("lecture_08-step-41")


if __name__ == "__main__":
    unittest.main()
