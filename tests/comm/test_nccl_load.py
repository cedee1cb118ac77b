"""NCCL is loaded when an NCCL spawn needs it, never linked
(runtime/comm/nccl_library.c):

  - no binary of the build needs libnccl, so each starts where none exists,
    and a lecture runs its spawns on the CPU with no loadable NCCL at all;
  - the NCCL the build found loads here (no GPU is needed to load it) and
    says its version (tests/tools/nccl_probe, what gpu-check records);
  - a library that cannot be loaded, one older than 2.18 (the floor:
    ncclCommSplit), in either of ncclGetVersion's encodings, and one that
    lacks a function lectern calls are each refused with a sentence naming
    the file, the version and what is missing; fake libraries built here
    stand in for them (LECTERN_NCCL_LIBRARY names the file to load);
  - a spawn forced to NCCL with such a library stops at its spawn() line
    with that sentence, before any rank starts.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402
from tracecheck import FixtureTest, links  # noqa: E402

PROBE = tracecheck.built("tests", "tools", "nccl_probe")
# What nccl_library.c looks up, in its order (a fake lacking one is refused by name).
FUNCTIONS = ["ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommSplit", "ncclCommDestroy",
             "ncclCommAbort", "ncclCommGetAsyncError", "ncclGetErrorString", "ncclGetLastError", "ncclGroupStart",
             "ncclGroupEnd", "ncclSend", "ncclRecv", "ncclAllReduce", "ncclReduce", "ncclBroadcast",
             "ncclReduceScatter", "ncclAllGather"]


def probe(library=None):
    env = dict(os.environ)
    if library is not None:
        env["LECTERN_NCCL_LIBRARY"] = library
    p = subprocess.run([PROBE], capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stdout


def has_nccl_support():
    return probe()[1].startswith("build: NCCL header")


def fake_library(folder, version, without=()):
    """A libnccl.so.2 whose ncclGetVersion says `version` (an
    ncclGetVersion code) and which exports every other function lectern
    looks up but those in `without`, each a stub never called."""
    src = os.path.join(folder, "fake_nccl.c")
    with open(src, "w") as f:
        f.write("int ncclGetVersion(int *v) { *v = %d; return 0; }\n" % version)
        for name in FUNCTIONS[1:]:
            if name not in without:
                f.write("int %s(void) { return 0; }\n" % name)
    lib = os.path.join(folder, "libnccl.so.2")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


class Loading(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lectern-test-nccl-load-")
        cls.fakes = {}
        for name, version, without in (("2.17.3", 21703, ()), ("2.7.8", 2708, ()),
                                       ("no-split", 21900, ("ncclCommSplit",)), ("2.19.0", 21900, ())):
            d = os.path.join(cls.tmp, name)
            os.makedirs(d)
            cls.fakes[name] = fake_library(d, version, without)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        if not has_nccl_support():
            self.skipTest("this build has no NCCL support (make print-nccl is 0): nothing to load")

    def test_no_binary_links_nccl(self):
        for b in (tracecheck.built("lectures", "lecture_00"),
                  tracecheck.built("tests", "fixtures", "p2p_order_fixture"), tracecheck.built("tests", "comm", "test_comm")):
            self.assertTrue(links(b, "libmpi"), b)   # the check can see a NEEDED entry
            self.assertFalse(links(b, "libnccl"), b)

    def test_the_library_the_build_found_loads(self):
        rc, out = probe()
        self.assertEqual(rc, 0, out)
        header = re.search(r"^build: NCCL header (\d+)\.(\d+)\.(\d+)$", out, re.M)
        runtime = re.search(r"^runtime: NCCL (\d+)\.(\d+)\.(\d+) \((/\S+libnccl\S*)\)$", out, re.M)
        self.assertTrue(header and runtime, out)
        self.assertGreaterEqual(tuple(int(x) for x in runtime.group(1, 2, 3)), (2, 18, 0))
        self.assertTrue(os.path.exists(runtime.group(4)), out)

    def test_a_missing_library_is_named(self):
        rc, out = probe("/nonexistent/libnccl.so.2")
        self.assertEqual(rc, 1)
        self.assertIn("runtime: not loaded: NCCL cannot be loaded (/nonexistent/libnccl.so.2)", out)
        self.assertIn("LECTERN_NCCL_LIBRARY", out)

    def test_too_old_is_refused_naming_the_version(self):
        for name in ("2.17.3", "2.7.8"):
            rc, out = probe(self.fakes[name])
            self.assertEqual(rc, 1, out)
            self.assertIn("NCCL %s (%s) is older than 2.18.0" % (name, self.fakes[name]), out)
            self.assertIn("ncclCommSplit", out)

    def test_a_missing_function_is_named(self):
        rc, out = probe(self.fakes["no-split"])
        self.assertEqual(rc, 1, out)
        self.assertIn("NCCL 2.19.0 (%s) has no ncclCommSplit, which lectern calls" % self.fakes["no-split"], out)
        # the same library with every function loads: the probe does not refuse everything
        rc, out = probe(self.fakes["2.19.0"])
        self.assertEqual(rc, 0, out)
        self.assertIn("runtime: NCCL 2.19.0 (%s)" % self.fakes["2.19.0"], out)


class Spawns(FixtureTest):
    def test_a_lecture_runs_where_no_nccl_loads(self):
        rc, out, err = self.run_fixture("p2p_order_fixture",
                                        {"LECTERN_NCCL_LIBRARY": "/nonexistent/libnccl.so.2", "LECTERN_BACKEND": "",
                                         "P2P_CASE": "isend"})
        self.assertEqual(rc, 0, err)
        t = tracecheck.load(os.path.join(self.out, "p2p_order_fixture.json"))
        self.assertEqual(len(t["spawns"]), 1)

    def test_forced_nccl_refuses_an_old_library_at_the_spawn_line(self):
        if not has_nccl_support():
            self.skipTest("this build has no NCCL support: LECTERN_BACKEND=nccl is refused for that instead")
        d = tempfile.mkdtemp(prefix="lectern-test-nccl-old-", dir=self.out)
        lib = fake_library(d, 21703)
        rc, out, err = self.run_fixture("p2p_order_fixture", {"LECTERN_NCCL_LIBRARY": lib, "LECTERN_BACKEND": "nccl",
                                                              "P2P_CASE": "isend"})
        self.assertNotEqual(rc, 0)
        line = tracecheck.line_of("tests/fixtures/p2p_order_fixture.c", "spawn(isend_across_all_reduce")
        self.assertRegex(err, r"p2p_order_fixture\.c:%d: .*LECTERN_BACKEND=nccl, but NCCL 2\.17\.3 \(%s\) is older "
                         r"than 2\.18\.0" % (line, re.escape(lib)))


if __name__ == "__main__":
    unittest.main()
