"""The foundation: traces, exact stacks, errors that name the line, nothing lost.

Runs the fixture lectures in tests/fixtures/ and lecture_00, and checks their
traces. LECTERN_BUILD picks the build folder (build, or build-asan).
"""
import copy
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD


fixture = tracecheck.fixture


def run(binary, out, env=None, args=()):
    return tracecheck.run(binary, out, *args, env=env)


def texts(trace):
    return [r.get("data", "") for s in trace["steps"] for r in s["renderings"]]


errors = tracecheck.errors


Base = tracecheck.FixtureTest


class Lecture00(Base):
    def test_runs_validates_and_is_line_accurate(self):
        p = run(os.path.join(BUILD, "lectures", "lecture_00"), self.out)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "lecture_00.json"))
        self.assertEqual(t["lecture"], "lecture_00")
        kinds = {r["type"] for s in t["steps"] for r in s["renderings"]}
        self.assertLessEqual({"markdown", "text", "image", "link", "plot"}, kinds)
        self.assertEqual(t["meta"]["status"], "ok")
        for key in ("start_time", "host", "gpus", "backend"):
            self.assertIn(key, t["meta"])
        # Stacks start at the body function, not at main.
        self.assertTrue(all(s["stack"][0]["function"] == "lecture_00" for s in t["steps"]))
        # The markdown was rendered to HTML.
        first = t["steps"][0]["renderings"][0]
        self.assertEqual(first["html"].strip(), "<h1>How executable lectures work</h1>")

    def test_help_and_bad_option(self):
        binary = os.path.join(BUILD, "lectures", "lecture_00")
        p = subprocess.run([binary, "--help"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("--out DIR", p.stdout)
        p = subprocess.run([binary, "--bogus"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, tracecheck.why(p))
        self.assertIn("unknown option '--bogus'", p.stderr)

    def test_lecture_out_environment_is_the_default_folder(self):
        env = dict(os.environ, LECTERN_OUT=self.out)
        p = subprocess.run([os.path.join(BUILD, "lectures", "lecture_00"), "--quiet"], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        tracecheck.validate(os.path.join(self.out, "lecture_00.json"))
        # --out still wins over the environment.
        other = os.path.join(self.out, "other")
        p = subprocess.run([os.path.join(BUILD, "lectures", "lecture_00"), "--quiet", "--out", other],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        self.assertTrue(os.path.exists(os.path.join(other, "lecture_00.json")))

    def test_unwritable_out_is_exit_2(self):
        blocker = os.path.join(self.out, "a-file")
        open(blocker, "w").close()
        p = run(os.path.join(BUILD, "lectures", "lecture_00"), os.path.join(blocker, "sub"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot write the trace to", p.stderr)
        self.assertIn("a-file/sub", p.stderr)


class Stacks(Base):
    def setUp(self):
        super().setUp()
        p = run(fixture("stack_fixture"), self.out)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        self.trace = tracecheck.validate(os.path.join(self.out, "stack_fixture.json"))
        self.src = self.trace["files"]["tests/fixtures/stack_fixture.c"].split("\n")

    def line_of(self, text, path="tests/fixtures/stack_fixture.c"):
        src = self.trace["files"][path].split("\n")
        hits = [i + 1 for i, l in enumerate(src) if text in l]
        self.assertEqual(len(hits), 1, text)
        return hits[0]

    def step(self, data):
        for s in self.trace["steps"]:
            if s["renderings"][0].get("data") == data:
                return s
        self.fail("no step %r" % data)

    def frames(self, step):
        return [(f["function"], f["line"]) for f in step["stack"]]

    def test_exact_frames_through_static_and_exported_functions(self):
        s = self.step("leaf called by middle")
        self.assertEqual(self.frames(s), [
            ("body", self.line_of("    exported();")),
            ("exported", self.line_of("    middle();")),
            ("middle", self.line_of('    leaf("middle");')),
            ("leaf", self.line_of('note("leaf called by %s", who);')),
        ])

    def test_helper_file_is_embedded_and_named(self):
        s = self.step("helper at depth 2")
        inner = s["stack"][-1]
        self.assertEqual(inner["path"], "tests/fixtures/stack_helper.h")
        self.assertEqual(inner["function"], "helper_note")
        self.assertEqual(inner["line"], self.line_of('note("helper at depth %d"', "tests/fixtures/stack_helper.h"))
        self.assertIn("tests/fixtures/stack_helper.h", self.trace["files"])

    def test_recursion_has_one_frame_per_call(self):
        leaves = [s for s in self.trace["steps"] if s["renderings"][0].get("data", "").startswith("fib(")]
        # fib(3) reaches the leaves fib(1), fib(0), fib(1), each at its own depth.
        self.assertEqual([s["renderings"][0]["data"] for s in leaves], ["fib(1) = 1", "fib(0) = 0", "fib(1) = 1"])
        depths = [sum(1 for f in s["stack"] if f["function"] == "fib") for s in leaves]
        self.assertEqual(depths, [3, 3, 2])
        rec = self.line_of("    return fib(n - 1) + fib(n - 2);")
        for s in leaves:
            self.assertTrue(all(f["line"] == rec for f in s["stack"][1:-1]))

    def test_function_pointer_and_loop_and_multiline(self):
        s = self.step("leaf called by a function pointer")
        self.assertEqual([f for f, _ in self.frames(s)], ["body", "through_pointer", "leaf"])
        loops = [s for s in self.trace["steps"] if s["renderings"][0].get("data", "").startswith("loop ")]
        self.assertEqual(len(loops), 3)
        self.assertEqual({s["stack"][-1]["line"] for s in loops}, {self.line_of('note_verbatim("loop %d", i);')})
        # A call over two lines is stamped with the line holding the called name.
        s = self.step("a call over two lines")
        self.assertEqual(s["stack"][-1]["line"], self.line_of('    note("a call "'))

    def test_checker_rejects_a_wrong_line(self):
        # The line checker itself must catch a stack that is off by one.
        bad = copy.deepcopy(self.trace)
        bad["steps"][1]["stack"][-1]["line"] += 1
        with self.assertRaises(AssertionError):
            tracecheck.check_lines(bad)
        bad = copy.deepcopy(self.trace)
        bad["steps"][2]["stack"][1]["function"] = "middle"
        with self.assertRaises(AssertionError):
            tracecheck.check_lines(bad)


    def test_checker_rejects_stacks_shifted_by_one_line(self):
        # Every frame, or only the innermost, moved one line up or down: the
        # checker must reject at least 98% of such steps in real traces.
        for path in (os.path.join(self.out, "stack_fixture.json"), os.path.join(ROOT, "traces", "lecture_00.json")):
            trace = tracecheck.load(path)
            self.assertIsNone(tracecheck.step_problem(trace, 0))
            for innermost in (False, True):
                for delta in (1, -1):
                    rejected, total = tracecheck.shifted_rejections(trace, delta, innermost)
                    self.assertGreaterEqual(rejected, 0.98 * total, (path, innermost, delta, rejected, total))

    def test_checker_ignores_names_in_strings_and_comments(self):
        src = ('static void body(void) {\n'
               '    note("first: call spawn() and helper() later");\n'
               '    /* helper(); */ note("second");\n'
               '    helper(); // the real call\n'
               '}\n'
               'static void helper(void) {\n'
               '    note("from %s, %d times", "helper", 3);\n'
               '}\n')

        def trace(stack, data, kind="markdown"):
            return {"files": {"x.c": src}, "spawns": [],
                    "steps": [{"stack": [{"path": "x.c", "line": l, "function": f} for f, l in stack],
                               "renderings": [{"type": kind, "data": data}]}]}
        ok = trace([("body", 4), ("helper", 7)], "from helper, 3 times")
        self.assertIsNone(tracecheck.step_problem(ok, 0))
        # helper() named only inside a string, or inside a comment: not a call.
        for line in (2, 3):
            self.assertIsNotNone(tracecheck.step_problem(trace([("body", line), ("helper", 7)],
                                                              "from helper, 3 times"), 0))
        # The right line but a rendering its call cannot have made.
        self.assertIsNotNone(tracecheck.step_problem(trace([("body", 2)], "second"), 0))
        self.assertIsNotNone(tracecheck.step_problem(trace([("body", 3)], "second", "text"), 0))
        self.assertIsNone(tracecheck.step_problem(trace([("body", 3)], "second"), 0))


class Crashes(Base):
    def crash(self, how):
        good = os.path.join(self.out, "crash_fixture.json")
        with open(good, "w") as f:
            f.write('{"an": "earlier good trace"}\n')
        p = run(fixture("crash_fixture"), self.out, {"LECTERN_FIXTURE_CRASH": how})
        # A crash is a failed lecture: status 1, as documented (not the
        # shell's 128 + signal).
        self.assertEqual(p.returncode, 1, p.stderr)
        # The last good trace is untouched ...
        with open(good) as f:
            self.assertEqual(json.load(f), {"an": "earlier good trace"})
        # ... and the failed run's trace holds everything up to the crash.
        t = tracecheck.validate(os.path.join(self.out, "crash_fixture.failed.json"))
        self.assertEqual(t["meta"]["status"], "failed")
        self.assertEqual(texts(t)[:2], ["before the crash", "still fine"])
        self.assertNotIn("never reached", texts(t))
        last = t["steps"][-1]
        self.assertEqual(last["renderings"][0]["type"], "error")
        return t, last["renderings"][0]["data"], last, p

    def test_segfault_names_signal_and_line(self):
        t, msg, last, p = self.crash("segv")
        src = t["files"]["tests/fixtures/crash_fixture.c"].split("\n")
        line = [i + 1 for i, l in enumerate(src) if "*p = 42;" in l][0]
        self.assertIn("SIGSEGV", msg)
        self.assertIn("tests/fixtures/crash_fixture.c:%d in crash()" % line, msg)
        self.assertEqual([f["function"] for f in last["stack"]], ["body", "crash"])
        self.assertIn("SIGSEGV", p.stderr)

    def test_abort_and_assert(self):
        for how in ("abort", "assert"):
            _, msg, last, _ = self.crash(how)
            self.assertIn("SIGABRT", msg)
            self.assertEqual(last["stack"][-1]["function"], "crash")

    def test_fpe(self):
        _, msg, _, _ = self.crash("fpe")
        self.assertIn("SIGFPE", msg)

    def test_stack_overflow(self):
        t, msg, last, _ = self.crash("overflow")
        self.assertIn("SIGSEGV", msg)
        self.assertEqual(last["stack"][-1]["function"], "recurse")

    def test_good_run_after_failed_one_removes_the_stale_failure(self):
        # The same lecture fails, then runs well: its .failed trace (both
        # twins) goes, the good trace is written, and another lecture's
        # failure is none of its business.
        self.crash("segv")
        other = os.path.join(self.out, "stack_fixture.failed.json")
        with open(other, "w") as f:
            f.write("{}\n")
        p = run(fixture("crash_fixture"), self.out, {"LECTERN_FIXTURE_CRASH": "none"})
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        self.assertFalse(os.path.exists(os.path.join(self.out, "crash_fixture.failed.json")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "crash_fixture.failed.js")))
        t = tracecheck.validate(os.path.join(self.out, "crash_fixture.json"))
        self.assertEqual(t["meta"]["status"], "ok")
        self.assertEqual(texts(t), ["before the crash", "still fine", "never reached"])
        self.assertTrue(os.path.exists(other))


class Input(Base):
    def case(self, name, ok=False):
        p = run(fixture("input_fixture"), self.out, {"LECTERN_FIXTURE_INPUT": name})
        self.assertEqual(p.returncode, 0 if ok else 1, tracecheck.why(p))
        path = os.path.join(self.out, "input_fixture%s.json" % ("" if ok else ".failed"))
        t = tracecheck.validate(path)
        self.assertEqual(texts(t)[-1], "after")   # going on after a bad call
        return t, p

    def error_line(self, t, code):
        src = t["files"]["tests/fixtures/input_fixture.c"].split("\n")
        return [i + 1 for i, l in enumerate(src) if code in l][0]

    def test_missing_image_names_file_and_line(self):
        t, p = self.case("missing_image")
        (_, msg), = errors(t)
        line = self.error_line(t, "assets/no_such_image.png")
        self.assertEqual(msg, "tests/fixtures/input_fixture.c:%d: image: no such file 'assets/no_such_image.png'" % line)
        self.assertIn(msg, p.stderr)

    def test_bad_width_and_outside_assets(self):
        t, _ = self.case("bad_width")
        self.assertIn("width 1.5", errors(t)[0][1])
        t, _ = self.case("outside_assets")
        self.assertIn("neither a file under assets/", errors(t)[0][1])
        # A path that starts in assets/ but climbs out of it (to a file that
        # exists) is refused too, and no image rendering is kept.
        t, _ = self.case("climbs_out")
        (_, msg), = errors(t)
        self.assertIn("'assets/../README.md' is neither a file under assets/", msg)
        self.assertFalse([r for s in t["steps"] for r in s["renderings"] if r["type"] == "image"])

    def test_empty_strings_are_errors(self):
        t, _ = self.case("empty_strings")
        self.assertEqual([m.split(": ", 1)[1] for _, m in errors(t)],
                         ["image: the source is empty", "see: the link is empty",
                          "note_system: the command is empty"])

    def test_remote_image_is_kept_as_a_link(self):
        t, _ = self.case("remote_image", ok=True)
        r = [r for s in t["steps"] for r in s["renderings"] if r["type"] == "image"][0]
        self.assertEqual(r, {"type": "image", "src": "https://example.org/figure.png", "width": 0.3, "remote": True})

    def test_bad_plot(self):
        t, _ = self.case("bad_plot")
        self.assertIn("plot: the specification is not a JSON object", errors(t)[0][1])

    def test_missing_command_is_an_error_step_not_a_crash(self):
        t, _ = self.case("missing_command")
        out = [r for s in t["steps"] for r in s["renderings"] if r.get("command")][0]
        self.assertEqual(out["exit_status"], 127)
        self.assertIn("command not found", errors(t)[0][1])

    def test_ansi_escapes_removed(self):
        t, _ = self.case("ansi", ok=True)
        out = [r for s in t["steps"] for r in s["renderings"] if r.get("command")][0]
        self.assertEqual(out["data"], "red plain\n")

    def test_invalid_utf8_is_repaired(self):
        t, _ = self.case("utf8", ok=True)
        msg = [x for x in texts(t) if x.startswith("bad bytes")][0]
        self.assertEqual(msg, "bad bytes: \ufffd\ufffd and good: caf\u00e9, cut: \ufffd\ufffd")

    def test_ten_megabyte_note(self):
        t, _ = self.case("big", ok=True)
        big = [x for x in texts(t) if len(x) > 1000][0]
        self.assertEqual(len(big), 10 << 20)
        self.assertEqual(big[:30], "abcdefghijklmnopqrstuvwxyzabcd")


if __name__ == "__main__":
    unittest.main(verbosity=2)
