"""scripts/gpu-check.sh must not pass without having tested a GPU.

A driver that lists GPUs while the CUDA runtime lectern was built with sees
none (a driver older than the runtime, no libcuda, no device files in a
container) would make every GPU test skip and the run read "0 failed". The
check compares `nvidia-smi -L` with what lectern's build sees
(tests/tools/gpu_probe) and fails, naming the cause. Here a stand-in
nvidia-smi lists a GPU on a machine whose runtime sees none; and one that
lists nothing gives a skip, not a failure. Runs `gpu-check.sh facts` (the
machine's facts and the carried libraries: seconds).

    /usr/bin/python3 tests/system/test_gpu_check.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
PROBE = tracecheck.built("tests", "tools", "gpu_probe")


def stand_in(folder, listing):
    """An nvidia-smi that prints `listing` for -L and nothing else."""
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n[ \"$1\" = -L ] && printf '%s' '" + listing + "' && exit 0\nexit 0\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def gpu_check(folder, **extra):
    out = os.path.join(folder, "out")
    env = dict(os.environ, PATH=folder + os.pathsep + os.environ["PATH"], OUT=out,
               LECTERN_BUILD=os.path.relpath(tracecheck.BUILD, ROOT), **extra)
    p = subprocess.run(["bash", "scripts/gpu-check.sh", "facts"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    counts = ""
    if os.path.exists(os.path.join(out, "counts.txt")):
        with open(os.path.join(out, "counts.txt")) as f:
            counts = f.read()
    return p, counts


class GpuCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(PROBE):
            raise AssertionError("%s is not built (make)" % PROBE)
        cls.seen = int(subprocess.run([PROBE], capture_output=True, text=True).stdout.split("\n")[0].split(": ")[1])

    def test_listed_gpus_the_runtime_cannot_see_fail_with_the_cause(self):
        if self.seen > 0:
            self.skipTest("this machine's CUDA runtime sees %d GPU(s): no mismatch to stage" % self.seen)
        with tempfile.TemporaryDirectory() as d:
            stand_in(d, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\\n")
            p, counts = gpu_check(d)
            self.assertEqual(p.returncode, 1, p.stdout[-2000:])
            self.assertIn("GPUs lectern sees: FAILED: nvidia-smi lists 1 GPU(s) but lectern's CUDA runtime sees none",
                          p.stdout)
            self.assertIn("every GPU test would skip", p.stdout)
            # The cause, as the CUDA runtime gives it (a CPU-only build says so instead).
            self.assertRegex(p.stdout, r"cuda runtime: (cudaGetDeviceCount failed: .+|not built with CUDA)")
            self.assertRegex(counts, r"^\d+ passed, 1 failed, \d+ skipped so far")
            self.assertIn("1 failed", p.stdout.strip().split("\n")[-1])

    def test_no_gpu_listed_is_a_skip_not_a_failure(self):
        if self.seen > 0:
            self.skipTest("this machine has GPUs: a stand-in listing none would contradict the runtime")
        with tempfile.TemporaryDirectory() as d:
            stand_in(d, "")
            p, counts = gpu_check(d)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:])
            self.assertIn("GPUs lectern sees: skipped: nvidia-smi lists no GPU (lectern sees 0)", p.stdout)
            self.assertRegex(counts, r"^\d+ passed, 0 failed, \d+ skipped so far")


class NcclFacts(unittest.TestCase):
    """gpu-check records the NCCL a spawn would load (tests/tools/nccl_probe)
    beside the header the build used: a line that passes where it loads, a
    failure where a GPU is listed and it does not (NCCL spawns would be
    refused), a skip where there is no GPU. The machine's /dev/shm and
    CUDA_MODULE_LOADING are among the facts. The script as a whole must
    parse (bash -n): its steps past the facts run only on a GPU machine."""

    def setUp(self):
        if int(subprocess.run([PROBE], capture_output=True, text=True).stdout.split("\n")[0].split(": ")[1]) > 0:
            self.skipTest("this machine has GPUs: the stand-ins below would contradict them")

    def test_the_script_parses(self):
        p = subprocess.run(["bash", "-n", "scripts/gpu-check.sh"], cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_the_nccl_that_loads_is_recorded(self):
        nccl = subprocess.run([tracecheck.built("tests", "tools", "nccl_probe")], capture_output=True, text=True)
        with tempfile.TemporaryDirectory() as d:
            stand_in(d, "")
            p, counts = gpu_check(d)
            with open(os.path.join(d, "out", "summary.md")) as f:
                summary = f.read()
        self.assertIn("/dev/shm: ", summary)
        self.assertIn("CUDA_MODULE_LOADING: ", summary)
        if nccl.returncode == 0:
            self.assertRegex(p.stdout, r"== NCCL loads \(build: NCCL header [\d.]+;runtime: NCCL [\d.]+ \(/\S+\)\): "
                             r"passed")
        else:
            self.assertIn("== NCCL loads: skipped: no GPU, nothing would load it: build:", p.stdout)

    def test_nccl_that_cannot_load_fails_where_a_gpu_is(self):
        with tempfile.TemporaryDirectory() as d:
            stand_in(d, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n")
            p, counts = gpu_check(d, LECTERN_NCCL_LIBRARY="/nonexistent/libnccl.so.2")
        self.assertIn("== NCCL loads: FAILED: build: ", p.stdout)
        self.assertIn("runtime: not loaded: ", p.stdout)
        self.assertEqual(p.returncode, 1)


class DeviceCall(unittest.TestCase):
    """`gpu-check.sh device`, the one call of a 15-minute device window, run
    here without a GPU (the dry run of its logic): a step whose cap does not
    fit in GPU_CHECK_DEADLINE_S is written "not run: deadline" and not
    started, and the summary ends with the command that reruns exactly those
    steps; --only runs the named steps alone, each with its seconds; a step
    name that does not exist is refused before anything runs."""

    def setUp(self):
        if self.seen() > 0:
            self.skipTest("this machine has GPUs: the stand-in nvidia-smi would contradict them")

    @staticmethod
    def seen():
        return int(subprocess.run([PROBE], capture_output=True, text=True).stdout.split("\n")[0].split(": ")[1])

    def device(self, folder, *args, **extra):
        stand_in(folder, "")
        out = os.path.join(folder, "out")
        env = dict(os.environ, PATH=folder + os.pathsep + os.environ["PATH"], OUT=out,
                   LECTERN_BUILD=os.path.relpath(tracecheck.BUILD, ROOT), **extra)
        p = subprocess.run(["bash", "scripts/gpu-check.sh", "device"] + list(args), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        summary = ""
        if os.path.exists(os.path.join(out, "summary.md")):
            with open(os.path.join(out, "summary.md")) as f:
                summary = f.read()
        return p, summary

    def test_a_step_past_the_deadline_is_not_run_and_named_for_the_rerun(self):
        steps = ["ipc", "cases", "order", "bench", "traces", "suites", "kernels"]
        with tempfile.TemporaryDirectory() as d:
            p, summary = self.device(d, GPU_CHECK_DEADLINE_S="1")
        # The machine's facts come first, whatever the deadline.
        self.assertIn("/dev/shm: ", summary)
        self.assertIn("| NCCL loads", summary)
        for s in steps:
            self.assertRegex(summary, r"\| step %s \| not run: deadline \| needs up to \d+ s, -?\d+ s left of "
                             r"GPU_CHECK_DEADLINE_S=1 \|" % s)
            self.assertIn("== step %s: not run: deadline" % s, p.stdout)
        self.assertIn("Rerun: bash scripts/gpu-check.sh device --only " + ",".join(steps), summary)
        self.assertIn("No step ran.", summary)
        self.assertTrue(p.stdout.strip().endswith("0 failed, 1 skipped, 7 not run (deadline)"), p.stdout[-300:])
        self.assertEqual(p.returncode, 1, "a run cut by its deadline is not a green run")

    def test_only_the_named_steps_run_each_with_its_seconds(self):
        with tempfile.TemporaryDirectory() as d:
            p, summary = self.device(d, "--only", "ipc,order")
        self.assertEqual(p.returncode, 0, p.stdout[-3000:])
        self.assertRegex(summary, r"\| step ipc \| done \| \d+ s \(cap 30 s\) \|")
        self.assertRegex(summary, r"\| step order \| done \| \d+ s \(cap 45 s\) \|")
        self.assertRegex(summary, r"Steps: ipc \d+ s, order \d+ s\.")
        # The probe says there is no GPU; the forced-dependency test ran (on the CPU backend).
        self.assertIn("| cudaIpc works | not asked: no GPU |", summary)
        self.assertRegex(summary, r"\| test_shared_order \| 1 passed, 0 failed, 1 skipped \|")
        for s in ("cases", "bench", "traces", "suites", "kernels"):
            self.assertNotIn("step " + s, summary)
        self.assertNotIn("Rerun:", summary)

    def test_an_unknown_step_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            p, summary = self.device(d, "--only", "ipc,nosuch")
        self.assertEqual(p.returncode, 2)
        self.assertIn("gpu-check: no step 'nosuch' (steps: ipc cases order bench traces suites kernels)", p.stderr)
        self.assertEqual(summary, "")


class AnchorReadsTheBenchmarkTables(unittest.TestCase):
    """bench/torch_anchor.py sets lectern's all-reduce beside PyTorch's from
    bench_allreduce's table; it must take the busbw columns by name. (It once
    read a column by position after the table grew, and set the bare call's
    seconds beside gloo's GB/s.) The columns are read here from the format
    bench_allreduce.c prints its header with, and each column gets a value
    of its own, so a wrong column shows."""

    def test_busbw_columns_by_name(self):
        import importlib.util
        with open(os.path.join(ROOT, "bench", "bench_allreduce.c")) as f:
            src = f.read()
        i = src.index('"collective", "size_MB"')
        names = re.findall(r'"(\w+)"', src[i:src.index(");", i)])
        self.assertIn("lectern_bus", names)
        self.assertIn("bare_bus", names)
        value = {n: str(100 + k) for k, n in enumerate(names)}
        rows = []
        for world, device in ((2, "cuda:0, shared"), (4, "the CPU")):
            rows.append("%d ranks (mpi, tensors on %s); busbw in GB/s" % (world, device))
            rows.append(" ".join(names))
            for size in (1, 64):
                rows.append(" ".join("all_reduce" if n == "collective" else str(size) if n == "size_MB" else
                                     value[n] + ".%d%d" % (world, size) for n in names))
        spec = importlib.util.spec_from_file_location("torch_anchor", os.path.join(ROOT, "bench", "torch_anchor.py"))
        anchor = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(anchor)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench_allreduce.txt")
            with open(path, "w") as f:
                f.write("\n".join(rows) + "\n")
            ours, bare, on_gpu = anchor.ours_allreduce(path)
        self.assertEqual(on_gpu, {2})
        for world in (2, 4):
            for size in (1, 64):
                self.assertEqual(ours[world][size], float(value["lectern_bus"] + ".%d%d" % (world, size)))
                self.assertEqual(bare[world][size], float(value["bare_bus"] + ".%d%d" % (world, size)))


if __name__ == "__main__":
    unittest.main()
