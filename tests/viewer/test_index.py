#!/usr/bin/python3
"""The lecture index: viewer/index.html with no ?trace= lists the lectures of
traces/ from the traces/index.js that scripts/trace_index.py writes.

The expected titles and facts are read here from the traces themselves, not
from the index; a hostile title must show as text.

    /usr/bin/python3 tests/viewer/test_index.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402

INDEXER = os.path.join(harness.REPO, "scripts", "trace_index.py")
AXE = harness.AXE
HOSTILE = '<img src=x onerror="window.pwned=1">'


def minimal_trace(name, heading, text):
    step = lambda md: {"stack": [{"path": "lectures/%s.c" % name, "line": 3, "function": name}],
                       "rank": None, "world_size": None, "renderings": [{"type": "markdown", "data": md}]}
    return {"version": 1, "lecture": name, "files": {"lectures/%s.c" % name: "\n" * 5},
            "meta": {"start_time": "2026-01-02T03:04:05Z", "host": "box", "gpus": 1, "backend": "nccl",
                     "status": "ok", "duration_s": 2.5},
            "steps": [step("# " + heading), step(text)]}


def run_indexer(folder):
    return subprocess.run([sys.executable, INDEXER, folder], capture_output=True, text=True, timeout=60)


class IndexScript(unittest.TestCase):
    def test_lists_each_lecture_once_with_the_state_of_its_newest_run(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("a", "b"):
                with open(os.path.join(d, name + ".json"), "w") as f:
                    json.dump(minimal_trace(name, "Lecture " + name.upper(), "About *" + name + "*."), f)
            with open(os.path.join(d, "a.failed.json"), "w") as f:
                json.dump(minimal_trace("a", "Broken", "x"), f)
            # A lecture whose only run failed is listed, from its failed trace.
            with open(os.path.join(d, "c.failed.json"), "w") as f:
                json.dump(minimal_trace("c", "Lecture C", "Only failed, in `homework_08.c`, _really_."), f)
            with open(os.path.join(d, "junk.json"), "w") as f:
                f.write("{not json")
            p = run_indexer(d)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("junk.json", p.stderr)   # skipped, and said so
            with open(os.path.join(d, "index.json")) as f:
                idx = json.load(f)
            self.assertEqual([e["name"] for e in idx["lectures"]], ["a", "b", "c"])
            self.assertEqual([e["state"] for e in idx["lectures"]], ["failed", "ok", "failed"])
            self.assertEqual([e["has_good"] for e in idx["lectures"]], [True, True, False])
            self.assertEqual(idx["lectures"][2]["title"], "Lecture C")
            # underscores inside a name stay; emphasis marks go
            self.assertEqual(idx["lectures"][2]["summary"], "Only failed, in homework_08.c, really.")
            self.assertEqual(idx["lectures"][1]["title"], "Lecture B")
            self.assertEqual(idx["lectures"][1]["summary"], "About b.")   # markup removed
            self.assertEqual(idx["lectures"][0]["host"], "box")
            self.assertTrue(idx["lectures"][0]["failed_run"])   # a.failed.json is newer
            self.assertFalse(idx["lectures"][1]["failed_run"])
            with open(os.path.join(d, "index.js")) as f:
                js = f.read()
            self.assertTrue(js.startswith("window.lecternIndex = "))
            self.assertEqual(json.loads(js[len("window.lecternIndex = "):].rstrip().rstrip(";")), idx)

    def test_missing_folder_is_an_error(self):
        p = run_indexer("/nonexistent/traces")
        self.assertEqual(p.returncode, 1)
        self.assertIn("not a folder", p.stderr)


class IndexPage(unittest.TestCase):
    """The page over a folder holding the repository's lecture traces and a
    made-up one with a hostile title."""

    @classmethod
    def setUpClass(cls):
        cls.traces = tempfile.mkdtemp(prefix="lectern-index-")
        cls.expected = {}
        for fname in sorted(os.listdir(os.path.join(harness.REPO, "traces"))):
            if fname.endswith(".json") and not fname.endswith(".failed.json") and fname != "index.json":
                src = os.path.join(harness.REPO, "traces", fname)
                with open(src, encoding="utf-8") as f:
                    t = json.load(f)
                heading = next(r["data"] for s in t["steps"] for r in s["renderings"]
                               if r["type"] == "markdown" and r["data"].startswith("# "))
                cls.expected[fname[:-5]] = (heading[2:].strip(), t["meta"]["host"])
                shutil.copy(src, cls.traces)
                shutil.copy(src[:-5] + ".js", cls.traces)
        with open(os.path.join(cls.traces, "zz_hostile.json"), "w") as f:
            json.dump(minimal_trace("zz_hostile", HOSTILE, "Text " + HOSTILE), f)
        cls.expected["zz_hostile"] = (HOSTILE, "box")
        p = run_indexer(cls.traces)
        assert p.returncode == 0, p.stderr
        # A lecture also run here (make run writes traces/local/): listed
        # once, as the local run.
        cls.local_name = min(n for n in cls.expected if n != "zz_hostile")
        local = os.path.join(cls.traces, "local")
        os.makedirs(local)
        with open(os.path.join(cls.traces, cls.local_name + ".json"), encoding="utf-8") as f:
            t = json.load(f)
        t["meta"]["host"] = "here-box"
        with open(os.path.join(local, cls.local_name + ".json"), "w", encoding="utf-8") as f:
            json.dump(t, f)
        cls.expected[cls.local_name] = (cls.expected[cls.local_name][0], "here-box")
        # A lecture run here whose only run failed: listed, marked failed.
        failed_only = minimal_trace("zz_failed_only", "Failed only", "Its only run failed.")
        failed_only["meta"]["status"] = "failed"
        failed_only["meta"]["host"] = "here-box"
        with open(os.path.join(local, "zz_failed_only.failed.json"), "w", encoding="utf-8") as f:
            json.dump(failed_only, f)
        with open(os.path.join(local, "zz_failed_only.failed.js"), "w", encoding="utf-8") as f:
            f.write('(window.lecternTraces = window.lecternTraces || {})["zz_failed_only.failed"] = %s;\n'
                    % json.dumps(failed_only))
        cls.expected["zz_failed_only"] = ("Failed only", "here-box")
        p = run_indexer(local)
        assert p.returncode == 0, p.stderr
        cls.root = harness.make_root(cls.traces)
        cls.d = harness.browser(1280, 800)

    @classmethod
    def tearDownClass(cls):
        harness.quit_browser(cls.d)
        shutil.rmtree(cls.root, ignore_errors=True)
        shutil.rmtree(cls.traces, ignore_errors=True)

    def open_index(self):
        self.d.get(harness.file_url(self.root, ""))
        self.assertIsNone(harness.wait_ready(self.d))

    def entries(self):
        return self.d.find_elements(By.CSS_SELECTOR, ".lecture-entry")

    def test_every_lecture_listed_with_its_title_and_machine(self):
        self.open_index()
        self.assertGreaterEqual(len(self.expected), 3, "the repository's traces/ holds no lecture trace")
        rows = self.entries()
        self.assertEqual(len(rows), len(self.expected))
        # the course's order first (docs/course.md: one device; lecture_08's first half; collectives and DDP in
        # depth; its second half; after DDP), each lecture at its first sitting, then by name
        sittings = ["lecture_00", "lecture_gpu", "lecture_08", "lecture_collectives", "lecture_ddp", "lecture_08",
                    "lecture_scaling", "lecture_pipelines", "lecture_precision", "lecture_checkpoints"]
        order = [n for i, n in enumerate(sittings) if n not in sittings[:i]]
        key = lambda item: (order.index(item[0]), "") if item[0] in order else (len(order), item[0])
        self.assertEqual([n for n, _ in sorted(self.expected.items(), key=key)][:len(order)],
                         [n for n in order if n in self.expected])
        for row, (name, (title, host)) in zip(rows, sorted(self.expected.items(), key=key)):
            with self.subTest(lecture=name):
                self.assertEqual(row.find_element(By.CSS_SELECTOR, "h2").text, title)
                self.assertIn(host, row.find_element(By.CSS_SELECTOR, ".lecture-facts").text)
                self.assertIn("lectures/%s.c" % name, row.text)
                # its sittings, numbered as the course's classes; lecture_08's two by their parts
                mark = [m.text for m in row.find_elements(By.CSS_SELECTOR, ".lecture-sitting")]
                at = [i + 1 for i, n in enumerate(sittings) if n == name]
                if name == "lecture_08":
                    self.assertEqual(mark, ["Sittings 3 (Part 1) and 6 (Part 2) of the course"])
                else:
                    self.assertEqual(mark, ["Sitting %d of the course" % at[0]] if at else [])
                facts = row.find_element(By.CSS_SELECTOR, ".lecture-facts").text
                self.assertEqual(facts.startswith("Your run: "), name in (self.local_name, "zz_failed_only"), facts)
                failed = row.find_elements(By.CSS_SELECTOR, ".lecture-failed")
                self.assertEqual(len(failed), 1 if name == "zz_failed_only" else 0)
                if failed:
                    self.assertIn("Its only run failed", failed[0].text)
        self.assertIsNone(self.d.execute_script("return window.pwned"))
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, ".lecture-index img"), [])
        os.makedirs(os.path.join(harness.REPO, "build", "viewer-screenshots"), exist_ok=True)
        self.d.save_screenshot(os.path.join(harness.REPO, "build", "viewer-screenshots", "lecture-index.png"))

    def test_a_title_opens_its_lecture(self):
        name = min(n for n in self.expected if n != "zz_hostile")
        self.open_index()
        link = [r for r in self.entries() if ("lectures/%s.c" % name) in r.text][0].find_element(By.CSS_SELECTOR, "a")
        link.click()
        self.assertIsNone(harness.wait_ready(self.d))
        self.assertIn("trace=" + name, self.d.current_url)
        self.assertEqual(self.d.find_element(By.ID, "lecture-name").text, name)

    def test_a_failed_only_lecture_opens_its_failed_trace(self):
        self.open_index()
        link = [r for r in self.entries() if "lectures/zz_failed_only.c" in r.text][0].find_element(By.CSS_SELECTOR, "a")
        link.click()
        self.assertIsNone(harness.wait_ready(self.d))
        self.assertIn("trace=zz_failed_only", self.d.current_url)
        self.assertEqual(self.d.find_element(By.ID, "status-badge").text, "failed")
        self.assertIn("This run failed.", self.d.find_element(By.ID, "banner").text)

    def test_no_accessibility_violations(self):
        if not os.path.exists(harness.AXE):
            self.skipTest("node_modules/axe-core missing (npm ci)")
        self.open_index()
        self.assertEqual(harness.axe(self.d), [])


if __name__ == "__main__":
    unittest.main()
