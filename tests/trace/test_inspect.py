"""inspect(x): a variable's name as written and its value, in the trace as
data. Runs tests/fixtures/inspect_fixture.c and checks every value against
numbers worked out here from what the fixture's source says it puts in
(arange's i, rank r's tensor filled with r), not against the runtime.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

INSPECT = tracecheck.Fixture("inspect_fixture")
SOURCE, REL = INSPECT.source, INSPECT.rel
line_of = INSPECT.line_of


def f32(x):
    """x rounded to float32, as the tensor holds it."""
    return struct.unpack("f", struct.pack("f", x))[0]


def run(out, case=None, args=()):
    return INSPECT.run(out, *args, case=case, timeout=180)


class Inspect(tracecheck.FixtureRun, unittest.TestCase):
    # Each test: the run passed; schema, .js twin and every step's line
    # (tracecheck knows inspect()).
    FIXTURE = INSPECT

    def inspected(self, rank=None):
        return [(s, s["renderings"][0]) for s in self.t["steps"]
                if s["renderings"][0]["type"] == "inspect" and s["rank"] == rank]

    def one(self, name, line_snippet, rank=None, nth=1):
        line = line_of(line_snippet, nth)
        found = [r for s, r in self.inspected(rank) if r["name"] == name and s["stack"][-1]["line"] == line]
        self.assertEqual(len(found), 1, (name, line, rank))
        return found[0]

    def test_names_are_the_source_text(self):
        names = [r["name"] for _, r in self.inspected()]
        self.assertEqual(names, ["n", "big", "f", "third", "n", "row", "m", "edge", "big", "strip", "ro"])
        for s, r in self.inspected():
            with self.subTest(name=r["name"]):
                f = s["stack"][-1]
                self.assertEqual(f["path"], REL)
                with open(SOURCE) as src:
                    text = src.read().split("\n")[f["line"] - 1]
                self.assertIn("inspect(%s);" % r["name"], text)

    def test_every_number_type(self):
        self.assertEqual(self.one("n", "inspect(n);")["value"], 7)
        self.assertEqual(self.one("n", "inspect(n);")["kind"], "int")
        self.assertEqual(self.one("n", "inspect(n);", nth=2)["value"], 42)   # n = n * 6
        big = self.one("big", "inspect(big);")
        self.assertEqual(big["kind"], "int64")
        self.assertEqual(big["data"], "big = %d" % (2 ** 53 + 1))
        # The JSON text holds every digit (a double could not: 2^53 + 1).
        with open(self.path) as f:
            self.assertIn('"value":%d' % (2 ** 53 + 1), f.read().replace(" ", ""))
        fl = self.one("f", "inspect(f);")
        self.assertEqual(fl["kind"], "float")
        self.assertEqual(f32(fl["value"]), f32(0.1))
        self.assertEqual(fl["value"], 0.1)      # the fewest digits that give the float back
        third = self.one("third", "inspect(third);")
        self.assertEqual(third["kind"], "double")
        self.assertEqual(third["value"], 1.0 / 3.0)   # exact: a double round-trips

    def test_small_tensors_are_whole(self):
        row = self.one("row", "inspect(row);")
        self.assertEqual((row["shape"], row["device"], row["numel"]), ([5], "cpu", 5))
        self.assertEqual(row["values"], [0, 1, 2, 3, 4])
        m = self.one("m", "inspect(m);")
        self.assertEqual(m["shape"], [2, 3])
        self.assertEqual(m["values"], [f32(v) if f32(v) == v else v for v in [1.5, -2.0, 0.25, 3.0, 0.1, -7.0]])
        self.assertEqual(self.one("ro", "inspect(ro);")["values"], m["values"])   # a const tensor *
        edge = self.one("edge", "inspect(edge);")
        self.assertEqual(edge["values"], list(range(256)))
        self.assertNotIn("picture", edge)

    def test_large_tensors_are_summary_and_picture(self):
        big = self.one("big", "inspect(big);", nth=2)   # the tensor; the first is the int64
        self.assertEqual((big["shape"], big["numel"]), ([64, 64], 4096))
        self.assertNotIn("values", big)
        xs = list(range(4096))
        self.assertEqual((big["min"], big["max"]), (0, 4095))
        self.assertEqual(big["mean"], sum(xs) / 4096)
        # The norm of small integers is exact in double; the trace keeps 17 digits.
        self.assertAlmostEqual(big["norm"], math.sqrt(sum(x * x for x in xs)), delta=1e-9 * big["norm"])
        # 16 x 16 block means of 4 x 4 blocks: element (r, c) is 64 r + c.
        self.assertEqual(big["picture"]["shape"], [16, 16])
        want = [sum(64 * r + c for r in range(4 * i, 4 * i + 4) for c in range(4 * j, 4 * j + 4)) / 16
                for i in range(16) for j in range(16)]
        # A cell keeps 4 significant digits: within half a unit of the 4th.
        for got, w in zip(big["picture"]["values"], want):
            self.assertLessEqual(abs(got - w), 0.5 * 10 ** (math.floor(math.log10(abs(w))) - 3) if w else 0, (got, w))
        strip = self.one("strip", "inspect(strip);")
        self.assertEqual(strip["picture"]["shape"], [64])
        # Bucket k averages [k*1000/64, (k+1)*1000/64): integer bounds, every element once.
        want = []
        for k in range(64):
            lo, hi = k * 1000 // 64, (k + 1) * 1000 // 64
            want.append(sum(range(lo, hi)) / (hi - lo))
        self.assertEqual(len(strip["picture"]["values"]), 64)
        for got, w in zip(strip["picture"]["values"], want):   # 4 significant digits, as above
            self.assertLessEqual(abs(got - w), 0.5 * 10 ** (math.floor(math.log10(abs(w))) - 3) if w else 0, (got, w))
        # A large tensor costs about what a small one does.
        self.assertLess(len(json.dumps(big)), 4096)

    def test_costs_what_a_note_costs(self):
        note = next(s for s in self.t["steps"] if s["renderings"][0].get("data") == "scalars")
        n = next(s for s, r in self.inspected() if r["name"] == "n")
        # Same stack depth (both in body() or scalars(): one frame apart at most);
        # a frame is ~70 bytes, so compare the renderings, the part inspect adds.
        self.assertLessEqual(len(json.dumps(n["renderings"])), len(json.dumps(note["renderings"])) + 16)

    def test_in_ranks_each_rank_its_own_values(self):
        world = 4
        for r in range(world):
            with self.subTest(rank=r):
                before = self.one("mine", "inspect(mine);", rank=r)
                self.assertEqual(before["values"], [r] * 6)        # fill_(mine, rank)
                self.assertEqual(self.one("rank", "inspect(rank);", rank=r)["value"], r)
                after = self.one("mine", "inspect(mine);", rank=r, nth=2)
                self.assertEqual(after["values"], [sum(range(world))] * 6)   # the all-reduce's sum
                self.assertEqual(self.one("share", "inspect(share);", rank=r)["value"], r / world)
                steps = [s for s, _ in self.inspected(r)]
                self.assertTrue(all(s["world_size"] == world and s["spawn"] == 0 for s in steps))
                self.assertEqual(steps[0]["stack"][-1]["function"], "ranks")

    def test_no_collective_inspects_without_the_option(self):
        self.assertFalse([r for s in self.t["steps"] for r in s["renderings"]
                          if r["type"] == "inspect" and "dist_" in r["name"]])


class InspectCollectives(unittest.TestCase):
    def test_before_and_after_per_rank_at_the_collectives_line(self):
        out = tempfile.mkdtemp(prefix="lectern-inspect-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        p = run(out, args=["--inspect-collectives"])
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(out, "inspect_fixture.json"))
        line = line_of("dist_all_reduce(mine, DIST_SUM);")
        world = 4
        for r in range(world):
            with self.subTest(rank=r):
                got = {x["name"]: x["values"] for s in t["steps"] for x in s["renderings"]
                       if x["type"] == "inspect" and s["rank"] == r and s["stack"][-1]["line"] == line}
                self.assertEqual(got, {"t (before dist_all_reduce)": [r] * 6,
                                       "t (after dist_all_reduce)": [sum(range(world))] * 6})


class HomeworkFailedCheck(unittest.TestCase):
    """homework_08: a failed check_close shows the student's tensor beside the
    expected one (here a ZeRO-1 that steps on a zeroed gradient), and a passed
    one shows nothing; nor does a failed check withheld until the due date
    (grade_visibility: what it saw is the grader's)."""

    def test_failed_check_is_followed_by_both_tensors(self):
        binary = tracecheck.fixture("homework_08_zero1_zero_grad")
        out = tempfile.mkdtemp(prefix="lectern-inspect-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        p = subprocess.run([binary, "--quiet", "--out", out], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(out, "homework_08.failed.json"))
        hw = os.path.join(tracecheck.ROOT, "lectures", "homework_08.c")
        lines = (tracecheck.line_of(hw, "inspect(param);"), tracecheck.line_of(hw, "inspect(ref);"))
        world = t["spawns"][0]["world_size"]
        for r in range(world):
            with self.subTest(rank=r):
                # A rank's own steps, in its order. A passing check of several
                # ranks is one folded step, placed where the first of them
                # arrived and labelled with the lowest rank: it can stand
                # before rank 0's inspects when rank 1 got there first (seen
                # under load), so it is no step of one rank's sequence.
                steps = [s for s in t["steps"] if s["rank"] == r
                         and "folded" not in s["renderings"][0]]
                kinds = [(x["renderings"][0]["type"], x["renderings"][0].get("name")) for x in steps]
                failed = [k for k, x in enumerate(steps) if x["renderings"][0]["type"] == "check"
                          and not x["renderings"][0]["passed"] and "max_abs" in x["renderings"][0]]
                self.assertEqual(len(failed), 1, kinds)
                # The near-eps check fails too, withheld: no figures, no tensors after it.
                withheld = [k for k, x in enumerate(steps) if x["renderings"][0]["type"] == "check"
                            and not x["renderings"][0]["passed"]
                            and x["renderings"][0].get("visibility") == "after_due_date"]
                self.assertEqual(len(withheld), 1, kinds)
                self.assertNotIn("max_abs", steps[withheld[0]]["renderings"][0])
                self.assertNotIn("inspect", [x["renderings"][0]["type"] for x in steps[withheld[0] + 1:withheld[0] + 2]])
                k = failed[0]
                self.assertEqual(kinds[k + 1:k + 3], [("inspect", "param"), ("inspect", "ref")])
                self.assertEqual(tuple(x["stack"][-1]["line"] for x in steps[k + 1:k + 3]), lines)
                # Only there: no other inspect in this rank's steps.
                self.assertEqual(sum(1 for kind, _ in kinds if kind == "inspect"), 2)
                mine, ref = (x["renderings"][0]["values"] for x in steps[k + 1:k + 3])
                # The check's largest difference is the one between the two tensors shown:
                # the trace's shortest digits read back to the same float32s, subtracted
                # in double as check_close does, so the two agree exactly.
                chk = steps[k]["renderings"][0]
                self.assertEqual(max(abs(f32(a) - f32(b)) for a, b in zip(mine, ref)), chk["max_abs"])


class Misuse(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="lectern-inspect-")
        self.addCleanup(shutil.rmtree, self.out, ignore_errors=True)

    def failed(self, case, words):
        # A good trace first: a failed run must leave it alone.
        self.assertEqual(run(self.out).returncode, 0)
        good = os.path.join(self.out, "inspect_fixture.json")
        with open(good) as f:
            before = f.read()
        p = run(self.out, case)
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        self.assertNotRegex(p.stderr, r"SIG[A-Z]+|Segmentation|core dumped")
        t = tracecheck.validate(os.path.join(self.out, "inspect_fixture.failed.json"))
        errs = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertTrue(errs)
        m = re.match(r"%s:(\d+): inspect: " % re.escape(REL), errs[0])
        self.assertTrue(m, errs)
        with open(SOURCE) as f:
            self.assertIn("inspect(t);", f.read().split("\n")[int(m.group(1)) - 1])
        self.assertIn(words, errs[0])
        with open(good) as f:
            self.assertEqual(f.read(), before)
        return t

    def test_null_tensor(self):
        t = self.failed("null", "t is NULL")
        # An error step, then the lecture goes on (like any NULL given to the runtime).
        self.assertEqual(t["steps"][-1]["renderings"][0].get("data"), "after")

    def test_freed_tensor(self):
        t = self.failed("freed", "use after free")
        err = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"][0]
        # Where it was freed: the tensor_free line.
        self.assertIn("freed at %s:%d" % (REL, line_of("tensor_free(t);")), err)
        self.assertNotIn("after", [s["renderings"][0].get("data") for s in t["steps"]])


if __name__ == "__main__":
    unittest.main()
