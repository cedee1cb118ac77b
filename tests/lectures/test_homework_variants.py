"""--variant SEED and variant_int(): the two homeworks with other sizes for
each seed (docs/homework.md, "Variants").

Each homework's solution passes every check under three seeds, with the same
tests by name as without a seed (the checks test the same things in every
variant); a wrong method fails exactly its check under each seed; the values
picked lie in the ranges the homework's source declares (read here from the
source, not from the runtime), differ between seeds and repeat for a seed;
the trace's meta.variant and the results' extra_data.variant agree; and the
sizes reach the ranks (the checks' outputs count the variant's bytes and
elements). A seed that is not a whole number from 0 to 4294967295 is bad
usage; variant_int's misuse is an error at its line
(tests/fixtures/variant_misuse.c), and a rank picks what the lecture picked.

    /usr/bin/python3 tests/lectures/test_homework_variants.py   (LECTERN_BUILD picks the build)
"""
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
FIXTURES = os.path.join(tracecheck.BUILD, "tests", "fixtures")
WORLD = 4
SEEDS = (1, 2, 3)


def declared(homework):
    """{name: (lo, hi, default)} of the homework's variant_int calls, read
    from its source; an enum constant as a bound is looked up there too."""
    with open(os.path.join(ROOT, "lectures", homework + ".c")) as f:
        src = f.read()
    consts = {k: int(v) for k, v in re.findall(r"\b([A-Z][A-Z0-9_]*) = (\d+)\b", src)}
    num = lambda s: int(s) if s.isdigit() else consts[s]   # noqa: E731
    calls = re.findall(r'variant_int\("([^"]+)", (\w+), (\w+), (\w+)\)', src.replace("\\'", "'"))
    return {name: (num(lo), num(hi), num(d)) for name, lo, hi, d in calls}


class Variants(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def graded(self, binary, *args, ok=True):
        """Runs the fixture with --grade; returns its results and trace."""
        results = os.path.join(self.out, "results.json")
        p = tracecheck.run(os.path.join(FIXTURES, binary), self.out, "--grade", results, *args)
        self.assertEqual(p.returncode, 0 if ok else 1, tracecheck.why(p))
        with open(results) as f:
            r = json.load(f)
        name = binary.split("_solution")[0].split("_wrong")[0]
        trace = tracecheck.validate(os.path.join(self.out, name + (".json" if ok else ".failed.json")))
        return r, trace

    def variant_of(self, r, trace, seed, ranges):
        v = r["extra_data"]["variant"]
        self.assertEqual(trace["meta"]["variant"], v)
        self.assertEqual(v["seed"], seed)
        self.assertEqual(sorted(v["values"]), sorted(ranges))
        for name, value in v["values"].items():
            lo, hi, _ = ranges[name]
            self.assertTrue(lo <= value <= hi, (name, value, ranges[name]))
        self.assertEqual(r["output"].split("\n")[1], "Variant %d: " % seed + ", ".join(
            "%s = %d" % kv for kv in v["values"].items()))
        return v["values"]

    def outputs(self, r, suffix):
        tests = [t for t in r["tests"] if t["name"].endswith(suffix)]
        self.assertEqual(len(tests), WORLD, suffix)
        return [t["output"] for t in tests]

    def test_homework_08_under_three_seeds(self):
        ranges = declared("homework_08")
        self.assertEqual(len(ranges), 3)
        r, trace = self.graded("homework_08_solution", "--deadlock")
        self.assertNotIn("extra_data", r)
        self.assertNotIn("variant", trace["meta"])
        names = sorted(t["name"] for t in r["tests"])
        self.assertEqual(len(names), 44)
        # Without a seed, the defaults: the ring's 250-float chunks.
        self.assertTrue(all("chunks of 1000 bytes" in o for o in self.outputs(r, "one chunk a step to the next rank")))
        picked = {}
        for seed in SEEDS + (SEEDS[0],):
            with self.subTest(seed=seed):
                r, trace = self.graded("homework_08_solution", "--deadlock", "--variant", str(seed))
                self.assertEqual((r["score"], r["max_score"]), (100, 100))
                self.assertEqual(sorted(t["name"] for t in r["tests"]), names)
                self.assertTrue(all(t["status"] == "passed" for t in r["tests"]))
                values = self.variant_of(r, trace, seed, ranges)
                if seed in picked:
                    self.assertEqual(values, picked[seed])     # the same seed, the same values
                picked[seed] = values
                chunk, shard = values["floats per ring chunk"], values["floats per ZeRO-1 shard"]
                for o in self.outputs(r, "exercise 1: a ring's traffic, one chunk a step to the next rank"):
                    self.assertIn("chunks of %d bytes" % (4 * chunk), o)
                for o in self.outputs(r, "exercise 3: parameters after a ZeRO-1 step"):
                    self.assertIn("0 of %d elements outside" % (WORLD * shard), o)
        self.assertEqual(len({json.dumps(picked[s], sort_keys=True) for s in SEEDS}), len(SEEDS))

    def test_homework_parallel_under_three_seeds(self):
        ranges = declared("homework_parallel")
        self.assertEqual(len(ranges), 3)
        r, _ = self.graded("homework_parallel_solution")
        names = sorted(t["name"] for t in r["tests"])
        self.assertEqual(len(names), 48)
        picked = {}
        for seed in SEEDS:
            with self.subTest(seed=seed):
                r, trace = self.graded("homework_parallel_solution", "--variant", str(seed))
                self.assertEqual((r["score"], r["max_score"]), (100, 100))
                self.assertEqual(sorted(t["name"] for t in r["tests"]), names)
                values = picked[seed] = self.variant_of(r, trace, seed, ranges)
                m = values["micro-batches"]
                # exercise 1's dx is rows x 32 floats, exercise 3's output rows x 64
                for o in self.outputs(r, "exercise 1: exactly one all-reduce, of dx"):
                    self.assertIn("of dx (%d floats)" % (32 * values["rows of exercise 1's batch"]), o)
                for o in self.outputs(r, "exercise 3: the output after 4 layers"):
                    self.assertIn("0 of %d elements outside" % (64 * values["rows of exercise 3's batch"]), o)
                for o in self.outputs(r, "exercise 2: the measured bubble"):
                    self.assertIn("(p-1)/(m+p-1) = %.3f" % (3 / (m + 3)), o)
        self.assertEqual(len({json.dumps(picked[s], sort_keys=True) for s in SEEDS}), len(SEEDS))

    def test_a_wrong_method_fails_under_each_seed(self):
        for seed in SEEDS:
            with self.subTest(seed=seed, homework="homework_08"):
                r, _ = self.graded("homework_08_wrong_bucket_per_grad", "--variant", str(seed), ok=False)
                failed = [t["name"] for t in r["tests"] if t["status"] == "failed"]
                self.assertEqual(sorted(failed), ["rank %d: exercise 2: one all-reduce of the whole bucket" % k
                                                  for k in range(WORLD)])
            with self.subTest(seed=seed, homework="homework_parallel"):
                r, trace = self.graded("homework_parallel_wrong_gpipe", "--variant", str(seed), ok=False)
                m = trace["meta"]["variant"]["values"]["micro-batches"]
                failed = [t for t in r["tests"] if t["status"] == "failed"]
                self.assertEqual(sorted(t["name"] for t in failed),
                                 ["rank %d: exercise 2: at most min(p - s, m) micro-batches in flight" % k
                                  for k in range(WORLD)])
                for t in failed:   # GPipe holds every micro-batch at once: the variant's m
                    self.assertIn("with %d micro-batches" % m, t["output"])
                    self.assertIn("its order holds %d at once" % m, t["output"])

    def test_a_seed_that_is_not_a_whole_number_is_bad_usage(self):
        good = os.path.join(self.out, "variant_misuse.json")
        with open(good, "w") as f:
            f.write("the last good trace")
        for seed in ("abc", "-1", "1.5", " 7", "+7", "4294967296", "99999999999", ""):
            with self.subTest(seed=seed):
                p = tracecheck.run(os.path.join(FIXTURES, "variant_misuse"), self.out, "--variant", seed)
                self.assertEqual(p.returncode, 2, tracecheck.why(p))
                self.assertRegex(p.stderr, r"--variant needs a seed[:,] .*whole number from 0 to 4294967295")
                if seed:
                    self.assertIn("(got '%s')" % seed, p.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.out, "variant_misuse.failed.json")))
                with open(good) as f:
                    self.assertEqual(f.read(), "the last good trace")
        for args in (["--variant"], ["--variant="]):
            p = tracecheck.run(os.path.join(FIXTURES, "variant_misuse"), self.out, *args)
            self.assertEqual(p.returncode, 2)
            self.assertIn("--variant needs a seed: --variant SEED", p.stderr)
        p = tracecheck.run(os.path.join(FIXTURES, "variant_misuse"), self.out, "--variant=4294967295")
        self.assertEqual(p.returncode, 1, tracecheck.why(p))     # the largest seed runs (to the fixture's errors)

    def test_variant_int_misuse_is_an_error_at_its_line(self):
        for args in ((), ("--variant", "5")):
            with self.subTest(args=args):
                p = tracecheck.run(os.path.join(FIXTURES, "variant_misuse"), self.out, *args)
                self.assertEqual(p.returncode, 1, tracecheck.why(p))
                t = tracecheck.validate(os.path.join(self.out, "variant_misuse.failed.json"))
                src = t["files"]["tests/fixtures/variant_misuse.c"].split("\n")
                bad = sorted(i for i, line in enumerate(src, 1) if "/* BAD" in line)
                errors = [(s["stack"][-1]["line"], r["data"]) for s in t["steps"] for r in s["renderings"]
                          if r["type"] == "error"]
                self.assertEqual(sorted(line for line, _ in errors), bad)
                self.assertIn("one name, one range", errors[0][1])
                self.assertEqual(t["meta"]["checks"], {"passed": 2, "failed": 0})   # each rank's value is the lecture's
                if not args:
                    self.assertNotIn("variant", t["meta"])
                    self.assertIn("block = 7", json.dumps(t["steps"]))   # the default
                else:   # the lecture's names only; a rank's call records nothing
                    self.assertEqual(list(t["meta"]["variant"]["values"]), ["block"])
                    self.assertEqual(t["meta"]["variant"]["seed"], 5)


if __name__ == "__main__":
    unittest.main()
