"""lecture_08's checks can fail: a copy of the lecture with one line
changed (a bug a student could write) is compiled and run with --quick, and
the check that guards that line must FAIL and the run exit 1.

Planted bugs, each against the check whose tolerance was derived to catch it
(lectures/lib/mlp.h, gradient_tolerance: rounding moves a gradient by
~1e-4 of the largest; these bugs by 100% or more):
  - DDP's averaged gradient doubled: "DDP: step-0 gradients" fails;
  - DDP summing instead of averaging: the same check fails on 2 and 4 ranks
    (off by 1 and 3 times the gradient), and passes on 1, where a sum is the
    average;
  - ZeRO-3 summing its gradient shard instead of averaging it:
    "ZeRO-3: the step-0 gradient pieces" fails;
  - ZeRO-3's backward skipping layer 0: the same check fails (it checks
    every layer after the backward loop, so a layer the loop skips is not
    a check skipped).

    /usr/bin/python3 tests/lectures/test_lecture_08_planted.py     (LECTERN_BUILD picks the build)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
BUILD = tracecheck.BUILD
SRC = os.path.join(ROOT, "lectures", "lecture_08.c")

BUGS = {
    # (no trailing comment in the patterns: make format realigns comments)
    "ddp_doubled": ("            dist_all_reduce(grads[i], DIST_AVG);",
                    "            { dist_all_reduce(grads[i], DIST_AVG); scale_(grads[i], 2.0f); }"),
    "ddp_summed": ("dist_all_reduce(grads[i], DIST_AVG);", "dist_all_reduce(grads[i], DIST_SUM);"),
    "zero3_shard_summed": ("dist_reduce_scatter(grad_piece[i], grad, DIST_AVG);",
                           "dist_reduce_scatter(grad_piece[i], grad, DIST_SUM);"),
    "zero3_skips_layer_0": ("        for (int i = c->layers - 1; i >= 0; i--) {\n            tensor *w = i > 0",
                            "        for (int i = c->layers - 1; i > 0; i--) {\n            tensor *w = i > 0"),
}


def compile_command():
    """The command make uses for lecture_08, read from make -n (forced)."""
    p = subprocess.run(["make", "-n", "-W", "lectures/lecture_08.c", "%s/lectures/lecture_08" % os.path.relpath(BUILD, ROOT)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stdout.split("\n") if " lectures/lecture_08.c -o " in l]
    if len(lines) != 1:
        raise AssertionError("cannot read lecture_08's compile command from make -n:\n" + p.stdout + p.stderr)
    return lines[0]


class Planted(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.command = compile_command()
        with open(SRC) as f:
            cls.source = f.read()
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_planted(self, bug):
        find, replace = BUGS[bug]
        self.assertEqual(self.source.count(find), 1, "the line to plant %s on is not in lecture_08.c once" % bug)
        # Same folder as the lecture, so its includes ("lib/mlp.h") resolve; removed after.
        path = os.path.join(ROOT, "lectures", "planted_%s_%d.c" % (bug, os.getpid()))
        exe = os.path.join(self.tmp.name, bug)
        try:
            with open(path, "w") as f:
                f.write(self.source.replace(find, replace))
            cmd = self.command.replace(" lectures/lecture_08.c -o ", " %s -o " % os.path.relpath(path, ROOT), 1)
            cmd = cmd.replace(" -o %s/lectures/lecture_08 " % os.path.relpath(BUILD, ROOT), " -o %s " % exe, 1)
            c = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)
            self.assertEqual(c.returncode, 0, c.stderr)
        finally:
            os.unlink(path)
        out = os.path.join(self.tmp.name, bug + "_out")
        p = subprocess.run([exe, "--quick", "--quiet", "--out", out], capture_output=True, text=True, timeout=600)
        # the trace is named after the source file (planted_...), written as failed
        failed_path = os.path.join(out, os.path.basename(path)[:-2] + ".failed.json")
        self.assertTrue(os.path.exists(failed_path), tracecheck.why(p) + " " + str(os.listdir(out)))
        with open(failed_path) as f:
            trace = json.load(f)
        return p, [(s.get("world_size"), r["what"]) for s in trace["steps"] for r in s["renderings"]
                   if r["type"] == "check" and not r["passed"]]

    def assert_fails(self, bug, what, world_sizes):
        p, failed = self.run_planted(bug)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        self.assertIn("check failed", p.stderr)
        hit = sorted({w for w, t in failed if t.startswith(what)})
        self.assertEqual(hit, world_sizes, failed)

    def test_doubled_gradient_fails_ddp_gradient_check(self):
        self.assert_fails("ddp_doubled", "DDP: step-0 gradients", [1, 2, 4])

    def test_summed_not_averaged_fails_ddp_gradient_check(self):
        self.assert_fails("ddp_summed", "DDP: step-0 gradients", [2, 4])

    def test_shard_summed_fails_zero3_gradient_check(self):
        self.assert_fails("zero3_shard_summed", "ZeRO-3: the step-0 gradient pieces", [4])

    def test_skipped_layer_fails_zero3_gradient_check(self):
        self.assert_fails("zero3_skips_layer_0", "ZeRO-3: the step-0 gradient pieces", [4])


if __name__ == "__main__":
    unittest.main()
