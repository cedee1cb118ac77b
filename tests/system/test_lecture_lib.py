"""lectures/lib/ holds only what two or more lectures use (docs/authoring.md):
code one lecture alone needs lives in that lecture's own folder,
lectures/NAME/, built into lectures/own/libNAME.a and linked into NAME only.

For each header of lectures/lib/, the lectures that include it, directly
(lectures/NAME.c, or a file of lectures/NAME/) or through another file of
lectures/lib/ that they use, are counted from the #include lines; each
header must have at least two. Each lectures/NAME/ folder must belong to a
lecture lectures/NAME.c.

    /usr/bin/python3 tests/system/test_lecture_lib.py
"""
import glob
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

LECTURES = os.path.join(tracecheck.ROOT, "lectures")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    """The lectures/lib headers a file includes, by base name ("mlp.h")."""
    with open(path) as f:
        text = f.read()
    d = os.path.dirname(path)
    out = set()
    for name in INCLUDE.findall(text):
        full = os.path.normpath(os.path.join(LECTURES, name) if name.startswith("lib/") else os.path.join(d, name))
        if os.path.dirname(full) == os.path.join(LECTURES, "lib") and os.path.exists(full):
            out.add(os.path.basename(full))
    return out


def lib_uses():
    """{header: the lib headers it needs}: a header's own includes and its .c file's."""
    uses = {}
    for h in glob.glob(os.path.join(LECTURES, "lib", "*.h")):
        base = os.path.basename(h)
        need = includes(h)
        c = h[:-2] + ".c"
        if os.path.exists(c):
            need |= includes(c)
        uses[base] = need - {base}
    return uses


def lecture_uses(uses):
    """{lecture: every lib header it needs, through lib's own includes too}."""
    out = {}
    for src in glob.glob(os.path.join(LECTURES, "*.c")):
        name = os.path.basename(src)[:-2]
        files = [src] + glob.glob(os.path.join(LECTURES, name, "*.[ch]"))
        need = set().union(*(includes(f) for f in files))
        todo = list(need)
        while todo:
            for h in uses.get(todo.pop(), ()):
                if h not in need:
                    need.add(h)
                    todo.append(h)
        out[name] = need
    return out


class LectureLib(unittest.TestCase):
    def test_every_lib_header_serves_two_lectures(self):
        uses = lib_uses()
        by = lecture_uses(uses)
        self.assertIn("mlp.h", uses)   # the scan finds lib's headers at all
        self.assertGreaterEqual(len([n for n, need in by.items() if "mlp.h" in need]), 2)
        lonely = {h: sorted(n for n, need in by.items() if h in need) for h in uses}
        lonely = {h: ns for h, ns in lonely.items() if len(ns) < 2}
        self.assertEqual(lonely, {}, "lectures/lib headers used by fewer than two lectures: move each into its "
                                     "lecture's own folder, lectures/NAME/")

    def test_every_own_folder_has_its_lecture(self):
        folders = [d for d in glob.glob(os.path.join(LECTURES, "*")) if os.path.isdir(d)
                   and os.path.basename(d) != "lib" and glob.glob(os.path.join(d, "*.c"))]
        self.assertGreaterEqual(len(folders), 2)   # lecture_08's, lecture_pipelines', lecture_scaling's
        for d in folders:
            self.assertTrue(os.path.exists(d + ".c"), "%s/ has no lecture %s.c" % (d, os.path.basename(d)))


if __name__ == "__main__":
    unittest.main()
