"""Every repo path that a header, a doc or the viewer's script list names
exists, so no map points to a room that is gone.

Where it looks: the headers (runtime/**/*.h, lectures/**/*.h, tests/lib/*.h),
README.md, docs/*.md and viewer/base.js.

What counts as a repo path: a token that starts with one of the repo's own
top-level folders (runtime/, lectures/, tests/, docs/, viewer/, scripts/,
bench/, assets/, traces/, .ci/), as in "runtime/tensor/philox.h" or
"docs/gpu.md". Inside runtime/, whose headers name each other's files from
runtime/ ("trace/trace.h", "comm/comm_stats.c"), a token that starts with a
layer folder (trace/, tensor/, ranks/, comm/, lecture/) is read from runtime/
too. A word glued to something before it (a URL, "../x", "a/b") is no repo
path, and neither is build/ (made by make, never tracked).

How it is read:
  - a trailing ":LINE" or ":LINE-LINE" (file:line) and sentence punctuation
    are dropped;
  - placeholders stand for any name: "<lecture>", "NAME", "N" (a part of
    capitals between underscores, as docs write "lectures/NAME.c" and
    "lectures/NAME_kernels.cu"), a one-letter name
    ("lectures/x.c") and "..." become *;
  - globs ("tests/test_*.py") and braces ("runtime/{trace,tensor}/") are
    expanded, and must match at least one file;
  - a path git ignores (traces/local/, bench/results/: what a run writes)
    need not exist, nor a program built from a source beside it
    ("tests/tools/nccl_probe", made from nccl_probe.c), nor the few files
    named in NOT_IN_THE_REPO below, each with its reason.
Exit status follows unittest; each missing path is named with the file and
line that names it.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT

TOP = ("runtime", "lectures", "tests", "docs", "viewer", "scripts", "bench", "assets", "traces", ".ci")
LAYERS = ("trace", "tensor", "ranks", "comm", "lecture")

# Named on purpose though not in the repo.
NOT_IN_THE_REPO = {
    "lectures/hw.c": "the homework the docs walk a reader through writing (docs/authoring.md)",
    "lectures/my_lecture.c": "the lecture the docs ask a reader to write (docs/authoring.md)",
    "traces/lecture_08.gpu.json": "what `make gpu-check` writes on a GPU machine, committed only from such a run (docs/gpu.md)",
}

# A path token: a top-level folder, a slash, then path characters. Not
# glued to what comes before (a URL, "../", "x/").
TOKEN = re.compile(r"(?<![\w/.\-])((?:%s)/[\w./*<>{},\-]*)" % "|".join(re.escape(t) for t in TOP + LAYERS))


def sources(root=ROOT):
    """The files whose paths are checked, repo-relative."""
    pats = ["runtime/**/*.h", "lectures/**/*.h", "tests/lib/*.h", "README.md", "docs/*.md", "viewer/base.js"]
    out = set()
    for p in pats:
        out.update(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, p), recursive=True))
    return sorted(out)


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(",") for x in expand_braces(s[:m.start()] + alt + s[m.end():])]


def as_pattern(token):
    """A token as a glob, or None when it is no repo path after all."""
    t = re.sub(r":\d+(?:-\d+)?.*$", "", token)  # file:line
    t = t.rstrip(".,;:)'\"`")
    t = re.sub(r"\.\.\.", "*", t)
    t = re.sub(r"<[^<>/]*>", "*", t)
    if "<" in t or ">" in t:
        return None  # "<" in a C expression, not a placeholder
    parts = t.split("/")
    for i, part in enumerate(parts):
        stem, dot, ext = part.partition(".")
        if ext != "md":  # README.md is a name; NAME.c, N, NAME_kernels.cu hold placeholders
            stem = "_".join("*" if re.fullmatch(r"[A-Z][A-Z0-9]*", w) else w for w in stem.split("_"))
            parts[i] = stem + dot + ext
        if i == len(parts) - 1 and dot and re.fullmatch(r"[a-z]", stem):
            parts[i] = "*" + dot + ext  # x.c: any file
    return "/".join(parts)


def ignored(path, root):
    """Whether git ignores the path (a placeholder * read as a name)."""
    p = path.replace("*", "x")
    return any(subprocess.run(["git", "check-ignore", "-q", "--no-index", q], cwd=root, stderr=subprocess.DEVNULL).returncode == 0
               for q in (p, p.rstrip("/") + "/"))


def there(pattern, root):
    if pattern in NOT_IN_THE_REPO or glob.glob(os.path.join(root, pattern)) or ignored(pattern, root):
        return True
    # A program, built (in build/) from the source of the same name.
    return not os.path.splitext(pattern)[1] and any(
        glob.glob(os.path.join(root, pattern + ext)) for ext in (".c", ".cu"))


def missing_paths(root=ROOT, files=None):
    """-> [(source file, line number, token)] for every named path that is not there."""
    missing = []
    for src in files if files is not None else sources(root):
        with open(os.path.join(root, src), encoding="utf-8") as f:
            lines = f.read().split("\n")
        in_runtime = src.startswith("runtime/")
        for n, line in enumerate(lines, 1):
            for m in TOKEN.finditer(line):
                token = m.group(1)
                head = token.split("/")[0]
                if head in LAYERS and head not in TOP:
                    if not in_runtime:
                        continue  # "comm/" in prose outside runtime/ is not a path
                    base = "runtime/"
                else:
                    base = ""
                pat = as_pattern(token)
                if not pat or pat.rstrip("/") in TOP:
                    continue
                if not all(there(p, root) for p in expand_braces(base + pat)):
                    missing.append((src, n, token))
    return missing


def script_list(base_js):
    """The scripts viewer/base.js's head lists, in order: "  name.js  what it does"."""
    head = base_js.split("*/", 1)[0]
    return re.findall(r"^ \*   (\w+\.js)\s", head, re.M)


def page_scripts(index_html):
    """The viewer's own scripts index.html loads, in order (not node_modules')."""
    return [s for s in re.findall(r'<script src="([^"]+)"', index_html) if "/" not in s]


class RepoPaths(unittest.TestCase):
    def test_base_js_lists_every_script_the_viewer_loads(self):
        # base.js's head is the viewer's map: the scripts index.html loads,
        # in its order; each listed one is a file of viewer/.
        with open(os.path.join(ROOT, "viewer", "base.js"), encoding="utf-8") as f:
            listed = script_list(f.read())
        with open(os.path.join(ROOT, "viewer", "index.html"), encoding="utf-8") as f:
            loaded = page_scripts(f.read())
        self.assertGreater(len(loaded), 10)
        self.assertEqual(listed, loaded)
        for name in listed:
            self.assertTrue(os.path.exists(os.path.join(ROOT, "viewer", name)), name)

    def test_a_script_missing_from_the_list_is_seen(self):
        with open(os.path.join(ROOT, "viewer", "base.js"), encoding="utf-8") as f:
            base = f.read()
        planted = re.sub(r"^ \*   lectures\.js .*\n", "", base, flags=re.M)
        self.assertNotEqual(planted, base)
        self.assertNotIn("lectures.js", script_list(planted))

    def test_every_named_path_exists(self):
        bad = missing_paths()
        self.assertEqual(bad, [], "paths named but not in the repo:\n" + "\n".join(
            "  %s:%d: %s" % b for b in bad))

    def test_the_sources_are_read(self):
        # Not vacuous: the check reads the maps it is about, and finds paths in them.
        files = sources()
        for f in ("runtime/lectern.h", "runtime/trace/trace.h", "README.md", "docs/design.md", "viewer/base.js"):
            self.assertIn(f, files)
        with open(os.path.join(ROOT, "docs/design.md"), encoding="utf-8") as f:
            self.assertGreater(len(TOKEN.findall(f.read())), 10)

    def test_a_planted_bad_path_is_named(self):
        # A doc and a header beside the repo's folders: the doc's good paths
        # pass, then a stale one planted in each: only the doc's is named
        # (outside runtime/, "trace/..." is prose).
        with tempfile.TemporaryDirectory() as d:
            for top in TOP:
                if os.path.isdir(os.path.join(ROOT, top)):
                    os.symlink(os.path.join(ROOT, top), os.path.join(d, top))
            os.mkdir(os.path.join(d, "fake"))
            good = ("Run lectures/NAME.c (lectures/lecture_00.c, the tests/lib/*.py, runtime/{trace,tensor}/,\n"
                    "runtime/tensor/philox.h, docs/gpu.md:12, traces/<lecture>.json, bench/bench_alloc).\n")
            with open(os.path.join(d, "fake", "README.md"), "w") as f:
                f.write(good)
            self.assertEqual(missing_paths(d, ["fake/README.md"]), [])
            with open(os.path.join(d, "fake", "README.md"), "a") as f:
                f.write("\nThe generator lives in runtime/philox.h (see docs/gpu.md:12).\n")
            with open(os.path.join(d, "fake", "x.h"), "w") as f:
                f.write("/* check() is in trace/verdict.c; tensors in tensor/tensor.c */\n")
            got = missing_paths(d, ["fake/README.md", "fake/x.h"])
            self.assertEqual([t for _, _, t in got], ["runtime/philox.h"], got)
        self.assertEqual(as_pattern("lectures/NAME.c"), "lectures/*.c")
        self.assertEqual(as_pattern("lectures/NAME_kernels.cu"), "lectures/*_kernels.cu")
        self.assertEqual(as_pattern("traces/<lecture>.json,"), "traces/*.json")
        self.assertEqual(as_pattern("comm/comm.h:36"), "comm/comm.h")
        self.assertEqual(expand_braces("runtime/{trace,tensor}/"), ["runtime/trace/", "runtime/tensor/"])

    def test_a_planted_bad_layer_path_in_a_runtime_header_is_named(self):
        # runtime/ is the real one here: a header beside its own files.
        path = os.path.join(ROOT, "runtime", "trace", "planted_test_paths.h")
        try:
            with open(path, "w") as f:
                f.write("/* check() is in trace/verdict.c; the tally in trace/check.c */\n")
            got = missing_paths(ROOT, ["runtime/trace/planted_test_paths.h"])
        finally:
            os.unlink(path)
        self.assertEqual(got, [("runtime/trace/planted_test_paths.h", 1, "trace/verdict.c")])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--list":
        for b in missing_paths():
            print("%s:%d: %s" % b)
        sys.exit(0)
    unittest.main()
