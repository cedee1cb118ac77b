"""predict(question, measured, unit): one step at the call's line holding the
question (markdown and its HTML), the measured value and its unit, in the
lecture and in a spawned rank. Runs tests/fixtures/predict_fixture.c and
checks each step against what the fixture's source says it asks and
measured (rank r measured 10 (r + 1) ms), and that a bad question, a NaN
and an infinite value are errors at their lines. Then lecture_collectives'
questions in its committed trace: each value is the number the next table
or note states, and what the formulas give.

    /usr/bin/python3 tests/trace/test_predict.py        (LECTERN_BUILD picks the build)
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

PREDICT = tracecheck.Fixture("predict_fixture")
REL = PREDICT.rel
line_of = PREDICT.line_of


def run(out, case=None):
    return PREDICT.run(out, case=case, timeout=180)


class Predict(tracecheck.FixtureRun, unittest.TestCase):
    # Each test: the run passed; schema, .js twin and every step's line
    # (tracecheck knows predict()).
    FIXTURE = PREDICT

    def predicted(self, rank=None):
        return [(s, s["renderings"][0]) for s in self.t["steps"]
                if s["renderings"][0]["type"] == "predict" and s["rank"] == rank]

    def test_lecture_questions_values_units_lines(self):
        want = [("What bus bandwidth did the **all-reduce** reach?", 12.3, "GB/s"),
                ("How many bytes does each rank send?", 25165824, "bytes"),
                ("What fraction of the time is bubble?", 0.375, ""),
                ("How long is one message's latency?", 0.0000123, "s")]
        got = self.predicted()
        self.assertEqual([(r["question"], r["value"], r["unit"]) for _, r in got], want)
        for (s, r), (q, _, _) in zip(got, want):
            with self.subTest(question=q):
                self.assertEqual(len(s["renderings"]), 1)
                f = s["stack"][-1]
                self.assertEqual((f["path"], f["line"], f["function"]), (REL, line_of('predict("' + q), "body"))
                self.assertEqual(s["stack"][0]["function"], "body")
        # The question is markdown, rendered like a note's.
        self.assertEqual(got[0][1]["html"], "<p>What bus bandwidth did the <strong>all-reduce</strong> reach?</p>\n")
        # The value is exact: the same double back, in the fewest digits.
        with open(self.path) as f:
            text = f.read()
        self.assertIn('"value":12.3,', text.replace(" ", ""))
        self.assertIn('"value":1.23e-05,', text.replace(" ", ""))
        self.assertIn('"value":25165824,', text.replace(" ", ""))

    def test_comes_before_the_note_that_states_it(self):
        steps = self.t["steps"]
        i = [k for k, s in enumerate(steps) if s["renderings"][0]["type"] == "predict"][0]
        self.assertEqual(steps[i + 1]["renderings"][0]["data"], "It reached 12.3 GB/s.")

    def test_in_a_rank_like_a_note(self):
        for rank in range(2):
            with self.subTest(rank=rank):
                got = self.predicted(rank)
                self.assertEqual(len(got), 1)
                s, r = got[0]
                self.assertEqual((r["question"], r["value"], r["unit"]),
                                 ("How long did *this rank* take?", 10.0 * (rank + 1), "ms"))
                self.assertEqual(s["world_size"], 2)
                self.assertEqual(s["stack"][-1], {"path": REL, "line": line_of('predict("How long did'),
                                                  "function": "ranks"})
                # Its stack starts at the spawn() line, as a rank's note does.
                self.assertEqual(s["stack"][0]["line"], line_of("spawn(ranks, 2"))
                note = [t for t in self.t["steps"] if t["rank"] == rank and t["renderings"][0]["type"] == "markdown"
                        and t["renderings"][0]["data"].startswith("rank %d took" % rank)]
                self.assertEqual(len(note), 1)
                self.assertEqual(note[0]["stack"][:-1], s["stack"][:-1])

    def test_schema_refuses_a_predict_without_its_value(self):
        import jsonschema
        bad = json.loads(json.dumps(self.t))
        r = [s for s in bad["steps"] if s["renderings"][0]["type"] == "predict"][0]["renderings"][0]
        del r["value"]
        with self.assertRaises(jsonschema.ValidationError):
            jsonschema.validate(bad, tracecheck.schema())

    def test_line_check_rejects_a_predict_at_another_line(self):
        t = json.loads(json.dumps(self.t))
        k = [k for k, s in enumerate(t["steps"]) if s["renderings"][0]["type"] == "predict"][1]
        self.assertIsNone(tracecheck.step_problem(t, k))
        # The question must be the one the line asks.
        t["steps"][k]["stack"][-1]["line"] = line_of('predict("What fraction')
        self.assertIsNotNone(tracecheck.step_problem(t, k))


class BadInput(tracecheck.FixtureTest):

    def test_errors_at_the_line(self):
        cases = {"empty": ('predict("", 1.0', "predict: the question is empty"),
                 "nan": ("predict(\"How fast?\", not_a_number", "predict: the measured value is NaN"),
                 "inf": ("predict(\"How fast?\", minus_infinity", "predict: the measured value is -infinite")}
        for case, (snippet, words) in cases.items():
            with self.subTest(case=case):
                p = run(self.out, case)
                self.assertEqual(p.returncode, 1, tracecheck.why(p))
                self.assertNotRegex(p.stderr, r"SIG[A-Z]+|Segmentation|core dumped")
                t = tracecheck.validate(os.path.join(self.out, "predict_fixture.failed.json"))
                errors = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
                self.assertEqual(errors, ["%s:%d: %s" % (REL, line_of(snippet), errors[0].split(": ", 1)[1])])
                self.assertTrue(errors[0].split(": ", 1)[1].startswith(words), errors)
                self.assertIn(words, p.stderr)
                # No question was recorded; the lecture went on to its next note.
                self.assertFalse([s for s in t["steps"] if s["renderings"][0]["type"] == "predict"])
                self.assertEqual(t["steps"][-1]["renderings"][0]["data"], "after")


class LectureCollectives(unittest.TestCase):
    """lecture_collectives' questions in its committed trace: each asks for a
    number the next table or note states, and its value is that number,
    worked out here from the trace's tables and the textbook formulas."""

    @classmethod
    def setUpClass(cls):
        cls.t = tracecheck.validate(os.path.join(tracecheck.ROOT, "traces", "lecture_collectives.json"))
        cls.steps = cls.t["steps"]

    def next_of(self, i, kind, start=""):
        """(index, rendering) of the first step after i whose rendering is of
        this kind (and, for a table, whose caption starts with `start`)."""
        for k in range(i + 1, len(self.steps)):
            r = self.steps[k]["renderings"][0]
            if r["type"] == kind and (r.get("caption") or r.get("data") or "").startswith(start):
                return k, r
        raise AssertionError((i, kind, start))

    def predicts(self):
        return [(i, s["renderings"][0]) for i, s in enumerate(self.steps) if s["renderings"][0]["type"] == "predict"]

    def test_bytes_each_algorithm_sends(self):
        n = 4
        by_hand = [(i, r) for i, r in self.predicts() if r["question"].startswith("**")]
        self.assertEqual([r["question"].split("**")[1] for _, r in by_hand],
                         ["everyone to everyone", "reduce + broadcast", "ring", "tree"])
        for i, r in by_hand:
            name = r["question"].split("**")[1]
            with self.subTest(algorithm=name):
                self.assertEqual((r["unit"], self.steps[i]["rank"]), ("bytes", 0))
                k, table = self.next_of(i, "table", name + ", D = ")
                self.assertEqual(self.steps[k]["rank"], 0)
                d = int(table["caption"].split("D = ")[1].split()[0])
                self.assertIn("D = %d floats" % d, r["question"])
                rank0 = table["rows"][0]
                self.assertEqual(rank0[0], 0)
                self.assertEqual(r["value"], rank0[2])   # what the table states next
                chunk = 4 * d
                want = {"everyone to everyone": (n - 1) * chunk, "reduce + broadcast": (n - 1) * chunk,
                        "ring": 2 * (n - 1) * chunk // n, "tree": 2 * chunk}[name]   # rank 0: two children
                self.assertEqual(r["value"], want)

    def test_alpha_bandwidth_and_crossover(self):
        rest = [(i, r) for i, r in self.predicts() if not r["question"].startswith("**")]
        self.assertEqual([r["unit"] for _, r in rest], ["us", "GB/s", "bytes"])
        (ia, alpha), (ib, bw), (ic, cross) = rest
        k, ping = self.next_of(ib, "table", "ping-pong")
        self.assertGreater(k, ia)
        rows = ping["rows"]
        self.assertEqual((rows[0][0], rows[-1][0]), (4, 1 << 20))
        # the smallest message's one-way time: the same double, but a table's
        # numbers go through cJSON, whose shortest form may be 1 ulp off (it
        # accepts 15 digits when they read back within DBL_EPSILON relative)
        self.assertAlmostEqual(alpha["value"], rows[0][1], delta=4e-16 * abs(rows[0][1]))
        beta = (rows[-1][1] - rows[0][1]) * 1e-6 / rows[-1][0]
        self.assertAlmostEqual(bw["value"], 1e-9 / beta, delta=1e-9 * bw["value"])
        _, stated = self.next_of(k, "markdown", "alpha = ")
        self.assertIn("a bandwidth of %.3g GB/s" % bw["value"], stated["data"])
        n, log_n, a = 4, 2, alpha["value"] * 1e-6
        want = a * (n - 1 - log_n) / (beta * (log_n - (n - 1) / n))
        self.assertAlmostEqual(cross["value"], want, delta=1e-6 * want)
        k, _ = self.next_of(ic, "table", "all-reduce on 4 ranks")
        self.assertEqual(k, ic + 1)
        _, said = self.next_of(ic, "markdown", "predicted: ")
        self.assertEqual(said["data"], "predicted: on 4 ranks the tree beats the ring below %.0f bytes" % cross["value"])


if __name__ == "__main__":
    unittest.main()
