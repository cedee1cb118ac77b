"""The build finds NCCL where it lives, and builds GPU support without it.

- scripts/find-nccl.sh searches NCCL_HOME, the CUDA folder, the system
  folders and a Python environment's nvidia/nccl package, in that order:
  checked with folders made here that look like each place.
- A build moved to another folder beside a copy of the sources uses that
  copy (LECTERN_ROOT_DIR, or the folder above the binary), not the folder it
  was built in.
- With nvcc but no NCCL (NCCL_HOME pointing at an empty folder, which is the
  only place searched then), `make` in a separate BUILD folder builds
  everything with CUDA and without NCCL (make test's quick scope: what NCCL
  changes, make runtime-bins), says so in one line, and
  a lecture and a spawning fixture run; forcing LECTERN_BACKEND=nccl there is an error
  that names NCCL.

Skipped, saying why, where there is no nvcc (a CPU-only machine).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
FIND = os.path.join(ROOT, "scripts", "find-nccl.sh")


def make_env(**extra):
    """The environment for a make of our own: not a sub-make of `make test`
    (MAKELEVEL would silence the one-line NCCL message)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "NCCL_HOME")}
    env.update(extra)
    return env


def nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


class FindNccl(unittest.TestCase):
    """Each place is a folder with include/nccl.h and a libnccl in lib."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lectern-test-nccl-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def place(self, name, lib="lib", version=(2, 21, 5), soname="libnccl.so.2"):
        d = os.path.join(self.tmp, name)
        os.makedirs(os.path.join(d, "include"))
        os.makedirs(os.path.join(d, lib))
        with open(os.path.join(d, "include", "nccl.h"), "w") as f:
            f.write("#define NCCL_MAJOR %d\n#define NCCL_MINOR %d\n#define NCCL_PATCH %d\n" % version)
        open(os.path.join(d, lib, soname), "w").close()
        return d

    def fake_python(self, site):
        """A python3 whose site folders are [site]: what the script asks it."""
        path = os.path.join(self.tmp, "python3")
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho '%s'\n" % site)
        os.chmod(path, 0o755)
        return path

    def find(self, **env):
        e = make_env(**env)
        out = subprocess.run(["bash", FIND], env=e, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_order_and_what_it_says(self):
        home = self.place("home", version=(2, 1, 1))
        cuda = self.place("cuda", lib="lib64", version=(2, 2, 2), soname="libnccl.so")
        site = os.path.join(self.tmp, "site")
        self.place(os.path.join("site", "nvidia", "nccl"), version=(2, 3, 3))
        python = self.fake_python(site)
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)

        # 1. NCCL_HOME first, before everything else
        got = self.find(NCCL_HOME=home, CUDA_HOME=cuda, PYTHON=python).split()
        self.assertEqual(got[:4], [home + "/include", home + "/lib", "-l:libnccl.so.2", "2.1.1"])
        self.assertIn("NCCL_HOME", " ".join(got[4:]))
        # ... and when set, the only place: an empty one means no NCCL at all
        got = self.find(NCCL_HOME=empty, CUDA_HOME=cuda, PYTHON=python)
        self.assertTrue(got.startswith("none "), got)
        self.assertIn(empty, got)
        # 2. then the CUDA folder (libnccl.so there: plain -lnccl)
        got = self.find(CUDA_HOME=cuda, PYTHON=python).split()
        self.assertEqual(got[:4], [cuda + "/include", cuda + "/lib64", "-lnccl", "2.2.2"])
        self.assertIn("CUDA folder", " ".join(got[4:]))
        # 3. then the system folders, which this test cannot fake: where the
        # machine has them they come before the Python package
        got = self.find(CUDA_HOME=empty, PYTHON=python).split()
        if os.path.exists("/usr/include/nccl.h"):
            self.assertEqual(got[0], "/usr/include")
            self.assertIn("system folders", " ".join(got[4:]))
        else:
            # 4. a Python environment's nvidia/nccl package
            pkg = os.path.join(site, "nvidia", "nccl")
            self.assertEqual(got[:4], [pkg + "/include", pkg + "/lib", "-l:libnccl.so.2", "2.3.3"])
            self.assertIn("nvidia/nccl", " ".join(got[4:]))
            # and nothing anywhere: none, naming the places searched
            got = self.find(CUDA_HOME=empty, PYTHON=self.fake_python(empty))
            self.assertTrue(got.startswith("none "), got)
            self.assertIn(empty, got)


@unittest.skipUnless(nvcc(), "no nvcc here (PATH or /usr/local/cuda): nothing to build with CUDA")
class BuildWithoutNccl(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lectern-test-nonccl-")
        cls.build = os.path.join(cls.tmp, "build")
        empty = os.path.join(cls.tmp, "no-nccl-here")
        os.makedirs(empty)
        cls.env = make_env(NCCL_HOME=empty)
        jobs = str(min(4, os.cpu_count() or 1))
        # make test's quick scope builds what NCCL changes (make
        # runtime-bins): the runtime (nccl_library.c without the library's
        # code, LECTERN_NCCL seen by runtime/'s headers), the C tests (which
        # include them), and the
        # lecture and fixture run below, linked against it; not the other
        # lectures, fixtures, tools and benchmarks, which compile the same
        # with or without NCCL (no header they include tests LECTERN_NCCL).
        # make test-all builds everything.
        target = "runtime-bins" if os.environ.get("LECTERN_TEST_SCOPE") == "quick" else "all"
        p = subprocess.run(["make", "-C", ROOT, "--no-print-directory", "-j" + jobs, "BUILD=" + cls.build, target],
                           env=cls.env, capture_output=True, text=True, timeout=1200)
        cls.rc, cls.out, cls.err = p.returncode, p.stdout, p.stderr
        cls.nccl = subprocess.run(["make", "-C", ROOT, "-s", "--no-print-directory", "BUILD=" + cls.build,
                                   "print-nccl", "print-cuda"],
                                  env=cls.env, capture_output=True, text=True, timeout=120).stdout.split()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_builds_with_cuda_and_says_there_is_no_nccl(self):
        self.assertEqual(self.rc, 0, self.err[-3000:])
        self.assertNotIn("warning:", self.err + self.out)
        said = [l for l in self.err.splitlines() if "NCCL" in l]
        self.assertEqual(len(said), 1, said)
        self.assertIn("without NCCL", said[0])
        self.assertIn("Open MPI", said[0])
        self.assertEqual(self.nccl, ["0", "1"])   # NCCL off, CUDA on
        # CUDA linked in, NCCL not: nothing of NCCL is needed to run it
        libs = needed(os.path.join(self.build, "lectures", "lecture_00"))
        self.assertTrue(any(l.startswith("libcudart") for l in libs), libs)
        self.assertFalse(any(l.startswith("libnccl") for l in libs), libs)
        # comm_nccl.c and its emulator are built (every build has them), the
        # real library's table is not: nothing in it would load NCCL
        comm = os.path.join(self.build, "runtime", "comm")
        self.assertTrue(os.path.exists(os.path.join(comm, "comm_nccl.o")))
        self.assertTrue(os.path.exists(os.path.join(comm, "nccl_emu.o")))
        symbols = subprocess.run(["nm", os.path.join(comm, "nccl_library.o")], capture_output=True,
                                 text=True).stdout
        self.assertIn("lx_nccl_library", symbols)
        self.assertNotIn("dlopen", symbols)

    def test_a_lecture_and_a_spawn_run(self):
        self.assertEqual(self.rc, 0)
        out = os.path.join(self.tmp, "traces")
        for binary in ("lectures/lecture_00", "tests/fixtures/spawn_basic"):
            p = subprocess.run([os.path.join(self.build, binary), "--out", out, "--quiet"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            name = os.path.basename(binary)
            self.assertTrue(os.path.exists(os.path.join(out, name + ".json")), name)

    def test_the_nccl_emulator_runs_without_nccl(self):
        # comm_nccl.c's logic on the CPU emulator needs no NCCL and no GPU
        self.assertEqual(self.rc, 0)
        env = dict(os.environ, LECTERN_BACKEND="nccl", LECTERN_NCCL_EMULATE="1")
        out = os.path.join(self.tmp, "emulated")
        p = subprocess.run([os.path.join(self.build, "tests", "fixtures", "spawn_basic"), "--out", out, "--quiet"],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(os.path.join(out, "spawn_basic.json")) as f:
            spawns = json.load(f)["spawns"]
        self.assertTrue(spawns)
        self.assertEqual({s["backend"] for s in spawns}, {"nccl"})

    def test_forcing_nccl_is_an_error_naming_it(self):
        self.assertEqual(self.rc, 0)
        env = dict(os.environ, LECTERN_BACKEND="nccl")
        p = subprocess.run([os.path.join(self.build, "tests", "fixtures", "spawn_basic"), "--out",
                            os.path.join(self.tmp, "forced"), "--quiet"],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("NCCL", p.stderr)


class MovedBuild(unittest.TestCase):
    """A build carried to another folder (or machine) beside a copy of the
    sources finds that copy at run time, not the folder it was built in:
    the source it records and the traces/ it writes are the copy's."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lectern-test-moved-")
        self.binary = tracecheck.built("lectures", "lecture_00")
        if not os.path.exists(self.binary):
            self.fail("no %s: build first (make)" % self.binary)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def copy_repo(self, name, marker):
        """The sources a lecture reads at run time, in a new folder, with a
        marker line appended to the lecture so its copy is recognisable."""
        top = os.path.join(self.tmp, name)
        os.makedirs(os.path.join(top, "runtime"))
        os.makedirs(os.path.join(top, "lectures"))
        shutil.copy(os.path.join(ROOT, "runtime", "lectern.h"), os.path.join(top, "runtime"))
        shutil.copytree(os.path.join(ROOT, "assets"), os.path.join(top, "assets"))
        with open(os.path.join(ROOT, "lectures", "lecture_00.c")) as f:
            text = f.read()
        with open(os.path.join(top, "lectures", "lecture_00.c"), "w") as f:
            f.write(text + "/* %s */\n" % marker)
        return top

    def run_lecture(self, binary, env):
        p = subprocess.run([binary, "--quiet"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])

    def recorded_source(self, top):
        import json
        # without --out a lecture writes to traces/local/, never the committed traces/
        self.assertFalse(os.path.exists(os.path.join(top, "traces", "lecture_00.json")))
        with open(os.path.join(top, "traces", "local", "lecture_00.json")) as f:
            t = json.load(f)
        paths = {fr["path"] for st in t["steps"] for fr in st["stack"]}
        self.assertEqual(paths, {"lectures/lecture_00.c"})
        return t["files"]["lectures/lecture_00.c"]

    def test_found_above_the_binary(self):
        top = self.copy_repo("moved", "the moved copy")
        os.makedirs(os.path.join(top, "build", "lectures"))
        binary = os.path.join(top, "build", "lectures", "lecture_00")
        shutil.copy(self.binary, binary)
        env = {k: v for k, v in os.environ.items() if k not in ("LECTERN_ROOT_DIR", "LECTERN_OUT")}
        self.run_lecture(binary, env)
        self.assertIn("/* the moved copy */", self.recorded_source(top))

    def test_lectern_root_dir_overrides(self):
        top = self.copy_repo("elsewhere", "named by LECTERN_ROOT_DIR")
        env = {k: v for k, v in os.environ.items() if k != "LECTERN_OUT"}
        env["LECTERN_ROOT_DIR"] = top
        self.run_lecture(self.binary, env)
        self.assertIn("/* named by LECTERN_ROOT_DIR */", self.recorded_source(top))


if __name__ == "__main__":
    unittest.main(verbosity=2)
