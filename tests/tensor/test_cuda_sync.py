"""LECTERN_CUDA_SYNC, the synchronous mode that reports a faulting kernel
at its launch line (runtime/tensor/cuda_sync.c, KERNEL_CHECK in
runtime/check.h), as far as a machine without a GPU can test it: the flag
is read and recorded in the trace's meta (cuda_sync), a value other than
0 or 1 is an error naming the variable (with the last good trace kept),
and --help documents it. That a kernel's fault is then named at its launch
line needs a GPU: scripts/gpu-check.sh runs compute-sanitizer with it set.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, fixture, links, machine_gpus  # noqa: E402

FIXTURE = "p2p_order_fixture"   # a short run that passes


class CudaSync(FixtureTest):
    def run_with(self, value, *args):
        env = dict(os.environ)
        env.pop("LECTERN_CUDA_SYNC", None)
        if value is not None:
            env["LECTERN_CUDA_SYNC"] = value
        return subprocess.run([fixture(FIXTURE), "--out", self.out, "--quiet", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    def meta(self, name):
        return tracecheck.validate(os.path.join(self.out, name))["meta"]

    def test_recorded_in_the_trace(self):
        for value, want in ((None, False), ("0", False), ("1", True)):
            with self.subTest(value=value):
                p = self.run_with(value)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIs(self.meta(FIXTURE + ".json")["cuda_sync"], want)

    def test_a_bad_value_is_an_error_and_keeps_the_last_good_trace(self):
        self.assertEqual(self.run_with("1").returncode, 0)
        good = os.path.join(self.out, FIXTURE + ".json")
        kept = open(good).read()
        p = self.run_with("yes")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("LECTERN_CUDA_SYNC='yes' is neither 0 nor 1", p.stderr)
        failed = tracecheck.load(os.path.join(self.out, FIXTURE + ".failed.json"))
        errors = [r["data"] for s in failed["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertTrue(any("LECTERN_CUDA_SYNC" in e for e in errors), errors)
        self.assertEqual(open(good).read(), kept, "the last good trace was clobbered")

    def test_help_documents_it(self):
        p = self.run_with(None, "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("LECTERN_CUDA_SYNC=1", p.stdout)


def kernel_check_line():
    """The line of KERNEL_CHECK() right after the add-a-scalar kernel's
    launch in tensor_cuda.cu, read from the source."""
    path = os.path.join(tracecheck.ROOT, "runtime", "tensor", "tensor_cuda.cu")
    lines = open(path).read().split("\n")
    start = next(i for i, l in enumerate(lines) if "add_scalar_kernel<<<" in l)
    return next(i for i in range(start, start + 3) if "KERNEL_CHECK()" in lines[i]) + 1


class FaultAtItsLine(unittest.TestCase):
    def setUp(self):
        if not (links(fixture("cuda_fault_fixture"), "libcudart") and machine_gpus() > 0):
            self.skipTest("needs a GPU and a CUDA build")
        self.out = tempfile.mkdtemp(prefix="lectern-test-cuda-fault-")

    def tearDown(self):
        shutil.rmtree(self.out, ignore_errors=True)

    def run_fault(self, sync):
        env = dict(os.environ, LECTERN_CUDA_SYNC=sync)
        return subprocess.run([fixture("cuda_fault_fixture"), "--out", self.out, "--quiet"], env=env,
                              capture_output=True, text=True, timeout=120)

    def test_sync_mode_names_the_launch(self):
        p = self.run_fault("1")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("runtime/tensor/tensor_cuda.cu:%d" % kernel_check_line(), p.stderr)
        self.assertIn("cudaDeviceSynchronize", p.stderr)

    def test_without_it_the_fault_surfaces_later(self):
        # What the mode is for: without it the same fault is reported
        # elsewhere, at a call that waits for the GPU after the launch.
        p = self.run_fault("0")
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("runtime/tensor/tensor_cuda.cu:%d" % kernel_check_line(), p.stderr)


if __name__ == "__main__":
    unittest.main()
