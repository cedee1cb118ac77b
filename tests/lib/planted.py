"""Plant a bug in a copy of a lecture, build the copy, and see a check fail.

A check in a lecture is worth something only if a wrong implementation fails
it. This builds the lecture from a copy of its source with one piece of text
replaced (a sum made a max, a loop bound off by one), with exactly the
command the Makefile uses for the real lecture, so the test can run the copy
and look for the check that must now fail:

    import planted, tracecheck
    with planted.binary("lecture_gpu", "out[i] = x[i] + y[i];", "out[i] = fmaxf(x[i], y[i]);") as exe:
        p, trace = tracecheck.run_quick(exe, out_dir)
        failed = planted.failed_checks(trace)

The copy keeps the lecture's name (so its trace is NAME.json) and its line
numbers (the replacement may not add or remove lines), and is compiled with
-ffile-prefix-map so its stack frames name lectures/NAME.c: the trace stays
comparable with the real lecture's. The real source is never touched.
"""
import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import unittest

import tracecheck

ROOT = tracecheck.ROOT


def compile_command(name):
    """The Makefile's command that builds lectures/NAME.c into the build
    folder, as a list of arguments (make -n, with the source taken as new)."""
    build = os.path.relpath(tracecheck.BUILD, ROOT)
    target = "%s/lectures/%s" % (build, name)
    # the build folder's own flags: the sanitizer build links libasan, the
    # CPU-only one has no CUDA (the Makefile names these folders)
    flags = {"build-asan": ["SAN=1"], "build-cpu": ["CUDA=0"], "build-cov": ["COV=1"]}.get(os.path.basename(build), [])
    p = subprocess.run(["make", "--no-print-directory", "-n", "-W", "lectures/%s.c" % name] + flags +
                       ["BUILD=" + build, target],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("make -n %s failed: %s" % (target, p.stderr[-2000:]))
    for line in p.stdout.splitlines():
        args = shlex.split(line)
        if "lectures/%s.c" % name in args and "-o" in args and args[args.index("-o") + 1] == target:
            return args
    raise AssertionError("no command that builds %s in make -n's output:\n%s" % (target, p.stdout[-2000:]))


@contextlib.contextmanager
def binary(name, find, replace, count=1, also=(), source=None):
    """The lecture NAME built from its source with `find` replaced by
    `replace` (`find` must occur exactly `count` times, all replaced), and
    each (find, replace) of `also` (each once, in the same file: a second
    edit that is not the bug, such as skipping sections the plant does not
    reach, to keep the run short); the path of the built program, removed on
    leaving the block. `source`: the file under lectures/ that holds `find`
    when it is one of the lecture's own files ("lecture_pipelines/mesh.c");
    its planted copy is compiled with the lecture and linked before the
    lecture's own library, so the copy's definitions are the ones used (that
    file must include its headers by their path under lectures/)."""
    source = source or name + ".c"
    with open(os.path.join(ROOT, "lectures", source), encoding="utf-8") as f:
        src = f.read()
    for f_, r_, n_ in [(find, replace, count)] + [(f_, r_, 1) for f_, r_ in also]:
        found = src.count(f_)
        if found != n_:
            raise AssertionError("lectures/%s holds %r %d times, not %d: the plant no longer fits" %
                                 (source, f_, found, n_))
        if f_.count("\n") != r_.count("\n"):
            raise AssertionError("a plant must keep the line count (the trace's lines must stay the lecture's)")
        src = src.replace(f_, r_)
    tmp = tempfile.mkdtemp(prefix="planted-")
    try:
        copy = os.path.join(tmp, "lectures", source)
        os.makedirs(os.path.dirname(copy))
        with open(copy, "w", encoding="utf-8") as f:
            f.write(src)
        exe = os.path.join(tmp, name)
        args = compile_command(name)
        main = args.index("lectures/%s.c" % name)
        if source == name + ".c":
            args[main] = copy
        else:
            args.insert(main + 1, copy)
        args[args.index("-o") + 1] = exe
        # quoted includes ("lib/mlp.h") resolve from the real lectures/;
        # the copy's frames are named as the real file's
        args[1:1] = ["-iquote", os.path.join(ROOT, "lectures"), "-ffile-prefix-map=%s/=" % tmp]
        p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise AssertionError("the planted copy of %s did not build: %s" % (name, p.stderr[-3000:]))
        yield exe
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def checks(trace):
    """Every check rendering of a trace, in order."""
    return [r for s in trace["steps"] for r in s["renderings"] if r["type"] == "check"]


def failed_checks(trace):
    """The `what` of every check that failed."""
    return [c["what"] for c in checks(trace) if not c["passed"]]


class PlantedCase(unittest.TestCase):
    """A TestCase whose tests each build a copy of the lecture LECTURE with
    one bug planted (binary()) and run it --quick: run_planted() gives its
    process and trace (the failed one when it failed), assert_fails() that a
    check whose text starts as given failed and the run with it. Under the
    sanitizer build (LECTERN_BUILD=build-asan) the copy is built with SAN=1,
    which make takes from MAKEFLAGS: a copy built without the sanitizer's
    flags would not link against that build's library."""

    LECTURE = None

    @classmethod
    def setUpClass(cls):
        cls.makeflags = os.environ.get("MAKEFLAGS")
        if os.path.basename(tracecheck.BUILD) == "build-asan":
            os.environ["MAKEFLAGS"] = "-- SAN=1"

    @classmethod
    def tearDownClass(cls):
        if cls.makeflags is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = cls.makeflags

    def run_planted(self, find, replace, **kwargs):
        with binary(self.LECTURE, find, replace, **kwargs) as exe, tempfile.TemporaryDirectory() as out:
            p, trace = tracecheck.run_quick(exe, out)
            failed = os.path.join(out, self.LECTURE + ".failed.json")
            if trace is None and os.path.exists(failed):
                trace = tracecheck.load(failed)
        self.assertIsNotNone(trace, "the planted copy wrote no trace: " + tracecheck.why(p))
        return p, trace

    def assert_unplanted_passes(self, anchor):
        """The copy built with `anchor` (text found once) left as it is, so
        the copy's build alone: every check it makes passes, and the run
        with them. Its check renderings, for the caller's own count."""
        p, trace = self.run_planted(anchor, anchor)
        self.assertEqual(failed_checks(trace), [])
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        return checks(trace)

    def assert_fails(self, find, replace, what_starts, **kwargs):
        p, trace = self.run_planted(find, replace, **kwargs)
        failed = failed_checks(trace)
        self.assertTrue(any(w.startswith(what_starts) for w in failed),
                        "planting %r: no failed check starts with %r; failed: %r" % (replace, what_starts, failed))
        self.assertNotEqual(p.returncode, 0, "a failed check must make the run fail")
