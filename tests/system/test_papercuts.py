"""The edit-build-run cycle: `make run` leaves tracked files alone (its
trace goes to traces/local/) and names the trace it really wrote; `make`
without cmocka builds everything else and says how to get it; build lines
are short unless V=1; a lecture's printf format mismatch is an error.

    /usr/bin/python3 tests/system/test_papercuts.py
"""
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD


def make_env():
    return {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def make(*args, **kw):
    return subprocess.run(["make", "--no-print-directory"] + list(args), cwd=ROOT, env=make_env(),
                          capture_output=True, text=True, timeout=kw.get("timeout", 300))


def tracked_status():
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


class RunLecture(unittest.TestCase):
    def test_run_changes_no_tracked_file(self):
        before = tracked_status()
        local = os.path.join(ROOT, "traces", "local", "lecture_00.json")
        p = subprocess.run(["bash", "scripts/run-lecture.sh", os.path.join(BUILD, "lectures", "lecture_00"), "--quiet"],
                           cwd=ROOT, env=dict(make_env(), LECTERN_OUT=""), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(tracked_status(), before)
        self.assertIn("Trace: traces/local/lecture_00.json", p.stdout)
        tracecheck.validate(local)
        ignored = subprocess.run(["git", "check-ignore", "-q", local], cwd=ROOT)
        self.assertEqual(ignored.returncode, 0, "traces/local/ must be ignored by git")

    def test_failed_run_names_the_failed_trace_it_wrote(self):
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run(["bash", "scripts/run-lecture.sh", os.path.join(BUILD, "tests", "fixtures", "check_fixture"),
                                "--quiet"], cwd=ROOT, env=dict(make_env(), LECTERN_OUT=out), capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(p.returncode, 1)
            self.assertIn("The lecture FAILED (exit 1). Its trace up to the failure: %s/check_fixture.failed.json" % out,
                          p.stdout)
            self.assertTrue(os.path.exists(os.path.join(out, "check_fixture.failed.json")))
            # ?trace=NAME opens the newest run, this failed one; no good trace
            # exists, and the message says so rather than calling one untouched
            self.assertIn("?trace=check_fixture ", p.stdout)
            self.assertNotIn("untouched", p.stdout)
            self.assertIn("no run of it has passed yet", p.stdout)
            # the checks line after an error (check_fixture stops at an error)
            self.assertRegex(p.stderr, r"(?m)^checks: \d+ passed, \d+ failed$")
            # a good trace beside it: now said to be kept
            with open(os.path.join(out, "check_fixture.json"), "w") as f:
                f.write("{}")
            p = subprocess.run(["bash", "scripts/run-lecture.sh", os.path.join(BUILD, "tests", "fixtures", "check_fixture"),
                                "--quiet"], cwd=ROOT, env=dict(make_env(), LECTERN_OUT=out), capture_output=True,
                               text=True, timeout=300)
            self.assertIn("the last good trace, %s/check_fixture.json, is untouched" % out, p.stdout)

    def test_a_sanitizer_run_shows_no_library_leaks(self):
        """make run SAN=1 passes build-asan/lectures/NAME, a relative path:
        the sanitizer settings (Open MPI's leaks suppressed) must apply, and
        the ranks check for leaks before MPI_Finalize unloads what no
        suppression could name. A spawning lecture's console then holds no
        leak report of the libraries'."""
        binary = os.path.join("build-asan", "tests", "fixtures", "spawn_basic")
        if not os.path.exists(os.path.join(ROOT, binary)):
            self.skipTest("no build-asan/ (make SAN=1)")
        env = {k: v for k, v in make_env().items() if k not in ("LSAN_OPTIONS", "ASAN_OPTIONS")}
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run(["bash", "scripts/run-lecture.sh", binary, "--quiet"], cwd=ROOT,
                               env=dict(env, LECTERN_OUT=out), capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-3000:])
            self.assertIn("built with AddressSanitizer", p.stdout)
            self.assertNotIn("LeakSanitizer", p.stdout + p.stderr)

    def test_a_benchmark_run_by_hand_leaves_traces_alone(self):
        # Without --out or LECTERN_OUT a benchmark's trace goes to
        # bench/results/ (ignored), a lecture's to traces/local/ (ignored too).
        env = {k: v for k, v in make_env().items() if k != "LECTERN_OUT"}
        bench = subprocess.run([os.path.join(BUILD, "bench", "soak_spawn"), "--help"], env=env,
                               capture_output=True, text=True, timeout=60)
        lecture = subprocess.run([os.path.join(BUILD, "lectures", "lecture_00"), "--help"], env=env,
                                 capture_output=True, text=True, timeout=60)
        self.assertIn("%s/bench/results)" % ROOT, bench.stdout)
        self.assertIn("%s/traces/local)" % ROOT, lecture.stdout)
        before = tracked_status()
        p = subprocess.run([os.path.join(BUILD, "bench", "soak_spawn"), "--quick", "--quiet"], cwd=ROOT,
                           env=dict(env, SOAK_SPAWNS="2"), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(os.path.exists(os.path.join(ROOT, "bench", "results", "soak_spawn.json")))
        self.assertFalse(os.path.exists(os.path.join(ROOT, "traces", "soak_spawn.json")))
        self.assertEqual(tracked_status(), before)

    def test_bad_usage_writes_and_names_no_trace(self):
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run(["bash", "scripts/run-lecture.sh", os.path.join(BUILD, "lectures", "lecture_00"), "--nope"],
                               cwd=ROOT, env=dict(make_env(), LECTERN_OUT=out), capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 2)
            self.assertIn("The lecture wrote no trace (exit 2", p.stdout)
            self.assertNotIn("View it", p.stdout)


# The Makefile's own build lines are checked in its default build folder,
# whatever build the other tests run (a coverage or sanitizer build lives in
# another folder, which `make` without BUILD= has no rule for).
DEFAULT_LECTURE = "build/lectures/lecture_00"


class Build(unittest.TestCase):
    def test_without_cmocka_builds_the_rest_and_says_how(self):
        with tempfile.TemporaryDirectory() as b:
            p = make("-n", "CMOCKA=0", "BUILD=" + b, "all")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("cmocka is missing, so the C unit tests (tests/FOLDER/test_*.c) are not built", p.stdout)
            self.assertIn("bash scripts/setup.sh test", p.stdout)
            self.assertNotIn("tests/tensor/test_tensor.c", p.stdout.split("cmocka is missing")[1])
            self.assertIn("lectures/lecture_00.c", p.stdout)
            self.assertIn("tests/fixtures/check_fixture.c", p.stdout)

    def test_short_lines_and_v1(self):
        short = make("-W", "lectures/lecture_00.c", DEFAULT_LECTURE)
        self.assertEqual(short.returncode, 0, short.stderr)
        self.assertIn("  CC    lectures/lecture_00.c\n", short.stdout)
        self.assertNotIn("-fno-inline", short.stdout)
        full = make("-n", "V=1", "-W", "lectures/lecture_00.c",
                    DEFAULT_LECTURE)
        self.assertIn("-Werror=format", full.stdout)
        self.assertNotIn("  CC    lectures", full.stdout)

    def test_format_mismatch_in_a_lecture_is_an_error(self):
        full = make("-n", "V=1", "-W", "lectures/lecture_00.c",
                    DEFAULT_LECTURE)
        line = [x for x in full.stdout.split("\n") if "lectures/lecture_00.c" in x and "-o " in x][0]
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "fmt.c")
            with open(bad, "w") as f:
                f.write('#include "lectern.h"\nstatic void body(void) { note("%d", 2.5); }\n'
                        "int main(int argc, char **argv) { return lecture_main(argc, argv, body); }\n")
            args = shlex.split(line)
            args = [bad if a == "lectures/lecture_00.c" else a for a in args]
            args[args.index("-o") + 1] = os.path.join(d, "fmt")
            p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0)
            self.assertRegex(p.stderr, r"fmt\.c:2:\d+: error: format .%d. expects argument of type .int.")
            self.assertFalse(os.path.exists(os.path.join(d, "fmt")))


if __name__ == "__main__":
    unittest.main()
