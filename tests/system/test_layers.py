"""scripts/check_layers.py, the check that runtime/'s layer folders call each
other one way only, and the files inside each folder too (make
check-layers): fed synthetic `nm -A` listings, it passes a one-way graph and
fails, naming files and symbols, on a cycle between folders, on a call from
a lower layer to a higher one, and on a circle of files inside a folder.
Then the real build's objects, when they are there, pass it."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_layers  # noqa: E402

ORDER = ["trace", "tensor", "ranks"]

# trace <- tensor <- ranks, each calling only below itself.
ONE_WAY = """\
build/runtime/trace/trace.o:0000000000000010 T lx_emit
build/runtime/trace/trace.o:                 U malloc
build/runtime/trace/stack.o:0000000000000020 T lx_stack_capture
build/runtime/trace/trace.o:                 U lx_stack_capture
build/runtime/tensor/tensor.o:0000000000000030 T tensor_new
build/runtime/tensor/tensor.o:                 U lx_emit
build/runtime/tensor/tensor.o:0000000000000008 B tensor_count
build/runtime/ranks/spawn.o:0000000000000040 T spawn
build/runtime/ranks/spawn.o:                 U tensor_new
build/runtime/ranks/spawn.o:                 U tensor_count
build/runtime/ranks/spawn.o:                 U lx_stack_capture
"""

# ... and trace calling back up into ranks: a cycle, and an upward call.
CYCLE = ONE_WAY + """\
build/runtime/trace/trace.o:                 U spawn
"""


def run_check(listing, order=ORDER):
    return check_layers.check(listing.splitlines(True), order)


class CheckLayers(unittest.TestCase):
    def test_one_way_passes(self):
        ok, text = run_check(ONE_WAY)
        self.assertTrue(ok, text)
        self.assertIn("ranks->tensor (2)", text)
        self.assertIn("tensor->trace (1)", text)

    def test_cycle_fails_naming_files_and_symbols(self):
        ok, text = run_check(CYCLE)
        self.assertFalse(ok)
        self.assertIn("cycle between folders ranks, tensor, trace", text)   # the strongly connected set
        self.assertIn("build/runtime/trace/trace.o uses spawn (defined in build/runtime/ranks/spawn.o)", text)
        self.assertIn("lower layer trace uses higher layer ranks", text)

    def test_upward_call_without_cycle_fails(self):
        # trace calls ranks, ranks calls nothing below: no cycle, still wrong.
        listing = """\
build/runtime/trace/trace.o:                 U spawn
build/runtime/ranks/spawn.o:0000000000000040 T spawn
"""
        ok, text = run_check(listing)
        self.assertFalse(ok)
        self.assertNotIn("cycle", text)
        self.assertIn("lower layer trace uses higher layer ranks", text)

    def test_folder_in_no_layer_fails(self):
        ok, text = run_check(ONE_WAY + "build/runtime/misc/x.o:0000000000000001 T x\n")
        self.assertFalse(ok)
        self.assertIn("folder misc is in no layer", text)

    def test_one_way_calls_inside_a_folder_pass(self):
        # a -> b -> c, and a -> c: a clean folder, however many arrows.
        listing = """\
build/runtime/trace/a.o:                 U b_fn
build/runtime/trace/a.o:                 U c_fn
build/runtime/trace/a.o:0000000000000001 T a_fn
build/runtime/trace/b.o:                 U c_fn
build/runtime/trace/b.o:0000000000000002 T b_fn
build/runtime/trace/c.o:0000000000000003 T c_fn
"""
        ok, text = run_check(listing)
        self.assertTrue(ok, text)

    def test_a_circle_of_files_inside_a_folder_fails(self):
        # a -> b -> c -> a inside trace/, beside a clean tensor/: the three
        # files are named, with one symbol for each arrow, and nothing else.
        listing = """\
build/runtime/trace/a.o:                 U b_fn
build/runtime/trace/a.o:0000000000000001 T a_fn
build/runtime/trace/b.o:                 U c_fn
build/runtime/trace/b.o:                 U c_data
build/runtime/trace/b.o:0000000000000002 T b_fn
build/runtime/trace/c.o:                 U a_fn
build/runtime/trace/c.o:0000000000000003 T c_fn
build/runtime/trace/c.o:0000000000000004 D c_data
build/runtime/trace/d.o:                 U a_fn
build/runtime/trace/d.o:0000000000000005 T d_fn
build/runtime/tensor/x.o:                 U y_fn
build/runtime/tensor/x.o:                 U a_fn
build/runtime/tensor/y.o:0000000000000006 T y_fn
"""
        ok, text = run_check(listing)
        self.assertFalse(ok)
        self.assertIn("cycle between files of folder trace: "
                      "build/runtime/trace/a.o, build/runtime/trace/b.o, build/runtime/trace/c.o\n", text)
        self.assertIn("build/runtime/trace/a.o -> build/runtime/trace/b.o: uses b_fn", text)
        self.assertIn("build/runtime/trace/b.o -> build/runtime/trace/c.o: uses c_data", text)  # one symbol: the first
        self.assertNotIn("uses c_fn", text)
        self.assertIn("build/runtime/trace/c.o -> build/runtime/trace/a.o: uses a_fn", text)
        self.assertNotIn("d.o", text)  # d calls into the circle but is not in it
        self.assertNotIn("folder tensor", text)
        self.assertEqual(text.count("cycle"), 1, text)

    def test_a_file_calling_itself_is_no_circle(self):
        # A symbol an object both leaves undefined and defines (nm lists a
        # weak or common one so) is no arrow.
        listing = """\
build/runtime/trace/a.o:                 U a_fn
build/runtime/trace/a.o:0000000000000001 T a_fn
"""
        ok, text = run_check(listing)
        self.assertTrue(ok, text)

    def test_the_script_exits_1_on_a_cycle_and_0_without(self):
        script = os.path.join(ROOT, "scripts", "check_layers.py")
        with tempfile.TemporaryDirectory() as d:
            circle = ONE_WAY + "build/runtime/trace/stack.o:                 U lx_emit\n"
            for listing, want in ((ONE_WAY, 0), (CYCLE, 1), (circle, 1)):
                path = os.path.join(d, "nm.txt")
                with open(path, "w") as f:
                    f.write(listing)
                p = subprocess.run([sys.executable, script, "--order", ",".join(ORDER), "--nm-listing", path],
                                   capture_output=True, text=True)
                self.assertEqual(p.returncode, want, p.stdout + p.stderr)
                if listing is CYCLE:
                    self.assertIn("trace.o uses spawn", p.stderr)
                if listing is circle:
                    self.assertIn("cycle between files of folder trace", p.stderr)
                    self.assertIn("stack.o -> build/runtime/trace/trace.o: uses lx_emit", p.stderr)

    def test_the_built_runtime_is_layered(self):
        build = tracecheck.built("runtime")
        # The objects of today's sources only: a build folder keeps the
        # object of a source since renamed or removed, which the library
        # no longer links (make check-layers reads the same list).
        objs = []
        for dp, _, fs in os.walk(build):
            for f in fs:
                source = f[:-2] if f.endswith(".cu.o") else f[:-2] + ".c"
                if (f.endswith(".o") and os.path.basename(dp) in check_layers.LAYERS
                        and os.path.exists(os.path.join(ROOT, "runtime", os.path.basename(dp), source))):
                    objs.append(os.path.join(dp, f))
        if not objs:
            self.skipTest("no runtime objects under %s (build first)" % build)
        ok, text = check_layers.check(check_layers.nm_listing(objs), check_layers.LAYERS)
        self.assertTrue(ok, text)


if __name__ == "__main__":
    unittest.main()
