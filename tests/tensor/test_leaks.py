"""Tensors left alive, freed twice, used after free.

At the end of each rank's function and of the lecture, tensors still alive
are one warning step per line that made them (count and bytes, stamped at
that line), the run still ok; a pool rank gives them back, so the next spawn
starts clean. A double free and a use after free are named as such, with
the lines that made and freed the tensor.

    /usr/bin/python3 tests/tensor/test_leaks.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

BUILD = tracecheck.BUILD
LEAKS = tracecheck.Fixture("leak_fixture")
SRC = LEAKS.rel
line_of = LEAKS.line_of


def run(out, case, env=None):
    return LEAKS.run(out, case=case, env=env, timeout=180)


def run_with_reports(out, case, logs, env):
    """The fixture's run of `case` with `env` (sanitizer options that write
    their reports into the folder `logs`), and the text of every report."""
    p = run(out, case, env)
    reports = []
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as f:
            reports.append(f.read())
    return p, reports


def renderings(trace, kind):
    return [(s, r["data"]) for s in trace["steps"] for r in s["renderings"] if r["type"] == kind]


class Leaks(tracecheck.FixtureTest):
    def test_leaks_are_warnings_at_the_making_line(self):
        p = run(self.out, "leak")
        self.assertEqual(p.returncode, 0, tracecheck.why(p))   # a warning, not a failure
        t = tracecheck.validate(os.path.join(self.out, "leak_fixture.json"))
        warns = renderings(t, "warning")
        zeros_line, arange_line, randn_line = line_of("zeros(16, 16"), line_of("kept = arange"), line_of("randn(256")
        ranked = sorted((s["spawn"], s["rank"], s["stack"][-1]["line"], m) for s, m in warns if s["rank"] is not None)
        # Two spawns x two ranks x two lines: the loop's 3 tensors of 16x16 floats, the global's 8 floats.
        self.assertEqual(len(ranked), 8, ranked)
        for sp, rank, line, m in ranked:
            self.assertIn(line, (zeros_line, arange_line))
            want = "3 tensors (3.0 kB) made here are" if line == zeros_line else "1 tensor (32 bytes) made here is"
            self.assertIn(want, m)
            self.assertIn("still alive at the end of rank %d's function ranks()" % rank, m)
            self.assertTrue(m.startswith("%s:%d: " % (SRC, line)), m)
        own = [(s["stack"][-1]["line"], m) for s, m in warns if s["rank"] is None]
        self.assertEqual(len(own), 1, own)
        self.assertEqual(own[0][0], randn_line)
        self.assertIn("1 tensor (256.0 kB) made here is still alive at the end of the lecture", own[0][1])
        self.assertIn("warning: 1 tensor (256.0 kB) still alive at the end of the lecture", p.stderr)
        # the console names the line, as the viewer does
        self.assertIn("lectern: warning: %s:%d: 1 tensor (256.0 kB) made here is still alive at the end of the "
                      "lecture" % (SRC, randn_line), p.stderr)
        self.assertIn("lectern: rank 1: warning: %s:%d: 3 tensors (3.0 kB) made here are still alive"
                      % (SRC, zeros_line), p.stderr)
        self.assertEqual(t["meta"]["status"], "ok")

    def failed(self, case):
        p = run(self.out, case)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        self.assertNotIn("core dumped", p.stderr)
        return p, tracecheck.validate(os.path.join(self.out, "leak_fixture.failed.json"))

    def test_double_free_is_named(self):
        p, t = self.failed("double_free")
        (_, m), = renderings(t, "error")
        made, freed = line_of("tensor *t = zeros(2, 2", ), None
        m2 = re.fullmatch(r"%s:(\d+): tensor_free: double free: this tensor \(made at %s:(\d+)\) was already freed at "
                          r"%s:(\d+)" % (SRC, SRC, SRC), m)
        self.assertTrue(m2, m)
        second, made_at, first = (int(x) for x in m2.groups())
        self.assertEqual(made_at, made)
        self.assertEqual(first, made + 1)
        self.assertEqual(second, made + 2)

    def test_use_after_free_is_named(self):
        p, t = self.failed("use_after_free")
        (_, m), = renderings(t, "error")
        self.assertRegex(m, r"^%s:\d+: add_scalar_: use after free: this tensor \(made at %s:\d+\) was freed at "
                            r"%s:\d+$" % (SRC, SRC, SRC))

    def test_raw_access_after_free_is_named_by_the_crash(self):
        p, t = self.failed("raw_after_free")
        (_, m), = renderings(t, "error")
        self.assertIn("SIGSEGV (invalid memory access) (a freed tensor's data: a tensor used after tensor_free) "
                      "at %s:%d" % (SRC, line_of("t->data[1]")), m)

    def test_use_after_free_in_a_rank(self):
        """A freed tensor given to a collective is named at the call, before
        the collective waits for the other ranks (or checks they agree)."""
        p, t = self.failed("rank_use_after_free")
        msgs = [m for _, m in renderings(t, "error")]
        want = r"^%s:%d: dist_all_reduce: use after free: this tensor \(made at %s:\d+\) was freed at %s:\d+" % (
            SRC, line_of("if (rank == 1) dist_all_reduce(t, DIST_SUM);"), SRC, SRC)
        self.assertTrue(any(re.match(want, m) for m in msgs), msgs)

    @unittest.skipUnless(os.path.basename(BUILD) == "build-asan",
                         "needs the sanitizer build (scripts/test.sh's sanitizer pass runs it)")
    def test_the_sanitizer_names_memory_of_ours_left_behind(self):
        """Under the sanitizer pass's own settings (its suppressions, its
        unwinder): a block of plain memory the lecture loses, and one each
        rank loses, are reported with the function that lost them. So the
        suppressions hide no leak of ours, the stacks reach our frames, and
        a rank's leak check is on again after Open MPI's start (spawn_rank.c
        leaves that start out)."""
        logs = os.path.join(self.out, "sanitizer")
        os.makedirs(logs)
        env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "protect_shadow_gap=0") +
               ":detect_leaks=1:log_path=" + os.path.join(logs, "asan")}
        p, reports = run_with_reports(self.out, "lost_block", logs, env)
        leaks = [r for r in reports if "LeakSanitizer: detected memory leaks" in r]
        lecture = [r for r in leaks if re.search(r"#1 0x[0-9a-f]+ in lecture_loses_a_block ", r)]
        ranks = [r for r in leaks if re.search(r"#1 0x[0-9a-f]+ in rank_loses_a_block ", r)]
        self.assertEqual(len(lecture), 1, "the lecture's lost block, reported once: %s\n%s" % (reports, p.stderr[-2000:]))
        self.assertIn("80 byte(s) in 1 object(s)", lecture[0])
        self.assertEqual(len(ranks), 2, "each of the 2 ranks' lost block: %s\n%s" % (reports, p.stderr[-2000:]))
        for r in ranks:
            self.assertIn("48 byte(s) in 1 object(s)", r)
        # nothing else: a report of Open MPI's own memory would fail the pass
        self.assertEqual(len(leaks), 3, reports)

    @unittest.skipUnless(os.path.basename(BUILD) == "build-asan",
                         "needs the sanitizer build (scripts/test.sh's sanitizer pass runs it)")
    def test_undefined_behaviour_in_a_rank_lands_in_a_report_file(self):
        """Under the sanitizer pass's own UBSan settings (only the folder of
        log_path changed), a rank's signed overflow is a report in a file,
        where the pass looks. gcc's libubsan, loaded beside libasan, never
        takes log_path from UBSAN_OPTIONS and writes to stderr, where the
        pass would not see it; lecture_main hands it the path (main.c)."""
        pass_options = os.environ.get("UBSAN_OPTIONS")
        if pass_options is None or "log_path=" not in pass_options:
            self.skipTest("run by scripts/test.sh's sanitizer pass, whose UBSAN_OPTIONS this checks")
        logs = os.path.join(self.out, "ubsan")
        os.makedirs(logs)
        options = ":".join(o for o in pass_options.split(":") if not o.startswith("log_path="))
        env = {"UBSAN_OPTIONS": options + ":log_path=" + os.path.join(logs, "ubsan"),
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "protect_shadow_gap=0") +
               ":log_path=" + os.path.join(logs, "asan")}
        p, reports = run_with_reports(self.out, "rank_overflows", logs, env)
        overflow = [r for r in reports if "runtime error: signed integer overflow" in r]
        self.assertEqual(len(overflow), 2, "each rank's overflow, in a file: %s\nstderr: %s" %
                         (reports, p.stderr[-2000:]))
        for r in overflow:
            self.assertIn("%s:%d" % (SRC, line_of("int sum = near_max + (rank + 1);")), r)


if __name__ == "__main__":
    unittest.main()
