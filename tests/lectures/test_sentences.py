"""The sentence guard (tests/lib/sentences.py) over every committed trace, and
shown to catch what it is for.

Every traces/NAME.json must break none of the guard's rules: a number a
note declares quoted (quoted(x)) is one of its section's figures as printed,
a sentence that says "measured" prints only figures, and a predict()
question's value is a figure, with the calls it counts adding up to the
runtime's count beside it. The rules are in the module's docstring and in
docs/authoring.md ("Sentences that quote").

Then the guard is shown to fail: on a small trace made here (a quote, a
measured sentence, a question, each right and then wrong) and on copies of
committed traces with one thing planted: a quoted number changed, a measured
number changed, a question's value changed, and lecture_08's ZeRO-3 question
counting its calls wrongly (the way a hint that misdescribes the code reads).

    /usr/bin/python3 tests/lectures/test_sentences.py
"""
import copy
import glob
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sentences  # noqa: E402
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT

TRACES = sorted(p for p in glob.glob(os.path.join(ROOT, "traces", "*.json"))
                if os.path.basename(p) != "index.json")


def load(name):
    with open(os.path.join(ROOT, "traces", name + ".json"), encoding="utf-8") as f:
        return json.load(f)


class CommittedTraces(unittest.TestCase):
    def test_every_committed_trace_keeps_the_rules(self):
        self.assertGreaterEqual(len(TRACES), 5)
        for path in TRACES:
            name = os.path.basename(path)[:-5]
            with self.subTest(lecture=name):
                trace = load(name)
                found = sentences.problems(trace)
                self.assertEqual(found, [], "\n" + sentences.report(trace, found))

    def test_the_guard_reads_the_notes(self):
        """Every note the lectures wrote themselves is matched against its
        format (only the runtime's spawn notes are not theirs): a guard that
        matched none would pass everything."""
        for path in TRACES:
            name = os.path.basename(path)[:-5]
            trace = load(name)
            notes = [s for s in trace["steps"] if s["renderings"][0]["type"] == "markdown"]
            own = [s for s in notes if not s["renderings"][0]["data"].startswith("spawn: ")]
            read = [s for s in own if sentences.note_call(trace, s) is not None]
            with self.subTest(lecture=name):
                self.assertEqual(len(read), len(own))


# A lecture of one section: a table, a quote, a measured sentence and a
# question, each line of its source holding the call the step says.
SOURCE = """\
static void body(void) {
    note("## Timing");
    predict("How many bytes did the step send? It makes 4 all-gathers and 3 reduce-scatters.", bytes, "bytes");
    table_show(t);
    note("The ring took %.1f us at %d bytes.", quoted(ring_us), 4096);
    note("measured: %.2f ms a step, %s in all", step_ms, text);
    note("A layer is %.0f bytes.", layer);
}
"""


def synthetic(ring_us=217.93, step_ms=7.731, text="15.46 ms", value=8650752.0,
              question="How many bytes did the step send? It makes 4 all-gathers and 3 reduce-scatters."):
    """A trace of SOURCE: a table of ring times, step times, bytes and calls,
    then the notes, each printed from the values given."""
    def step(line, rendering):
        return {"stack": [{"path": "l.c", "line": line, "function": "body"}], "rank": None, "world_size": None,
                "spawn": None, "time": 0.0, "renderings": [rendering]}
    table = {"type": "table", "caption": "one step on 4 ranks",
             "columns": [{"name": "ring", "unit": "us", "format": "%.1f", "kind": "number"},
                         {"name": "step", "unit": "ms", "format": "%.2f", "kind": "number"},
                         {"name": "bytes", "format": "%.0f", "kind": "number"},
                         {"name": "calls in step 0", "format": "%d", "kind": "number"}],
             "rows": [[217.93, 7.731, 8650752.0, 7], [496.04, 7.728, 100.0, 2]],
             "display": [["217.9", "7.73", "8650752", "7"], ["496.0", "7.73", "100", "2"]]}
    return {"files": {"l.c": SOURCE}, "steps": [
        step(2, {"type": "markdown", "data": "## Timing"}),
        step(3, {"type": "predict", "question": question, "value": value, "unit": "bytes"}),
        step(4, table),
        step(5, {"type": "markdown", "data": "The ring took %.1f us at %d bytes." % (ring_us, 4096)}),
        step(6, {"type": "markdown", "data": "measured: %.2f ms a step, %s in all" % (step_ms, text)}),
        step(7, {"type": "markdown", "data": "A layer is %.0f bytes." % 1048576}),
    ]}


class Rules(unittest.TestCase):
    def messages(self, trace):
        return [m for _, m in sentences.problems(trace)]

    def test_a_right_trace_passes(self):
        self.assertEqual(self.messages(synthetic()), [])

    def test_the_conversions_and_their_arguments(self):
        ps = sentences.printed("a %*.*f b %s c %lld%% d", ["w", "p", "quoted(x)", "name", "n"],
                               "a  3.14 b two words c 12% d")
        self.assertEqual([(p.spec, p.arg, p.text) for p in ps],
                         [("%*.*f", "quoted(x)", "3.14"), ("%s", "name", "two words"), ("%d", "n", "12")])
        self.assertTrue(ps[0].quoted)
        self.assertFalse(ps[2].quoted)
        self.assertIsNone(sentences.printed("a %d b", ["n"], "a x b"))
        # the arguments of a call, split at its top-level commas only
        src = 'note("x %d %s", f(a, b[1, 2]), c ? "d, e" : g(")")) /* , */;'
        self.assertEqual(sentences._arguments(src, src.index(",") + 1), ['f(a, b[1, 2])', 'c ? "d, e" : g(")")'])

    def test_a_quote_that_is_no_figure(self):
        found = self.messages(synthetic(ring_us=271.93))
        self.assertEqual(len(found), 1)
        self.assertIn("printed 271.9 for quoted(ring_us), which is none of the figures", found[0])

    def test_a_measured_number_that_is_no_figure(self):
        found = self.messages(synthetic(step_ms=7.37))
        self.assertEqual(len(found), 1)
        self.assertIn("prints 7.37 for step_ms", found[0])
        # a column's total is a figure ("... in all"), and so is its display
        self.assertEqual(self.messages(synthetic(text="15.46 ms")), [])
        found = self.messages(synthetic(text="15.64 ms"))
        self.assertEqual(len(found), 1)
        self.assertIn("prints 15.64 (in text), which no table or caption", found[0])

    def test_a_number_no_rule_covers_is_not_read(self):
        # "A layer is 1048576 bytes." is neither quoted nor measured
        self.assertNotIn("1048576", " ".join(self.messages(synthetic())))

    def test_a_question_whose_value_is_no_figure(self):
        found = self.messages(synthetic(value=7864320.0))
        self.assertEqual(len(found), 1)
        self.assertIn("the question's value 7864320.0 is none of the figures", found[0])

    def test_a_question_that_counts_the_calls_wrongly(self):
        found = self.messages(synthetic(question="How many bytes? It makes 4 all-gathers and 2 reduce-scatters."))
        self.assertEqual(found, ["the question counts 4 + 2 = 6 calls; the row that holds its value says "
                                 "'calls in step 0' = 7"])
        found = self.messages(synthetic(question="How many bytes did the step send?"))
        self.assertEqual(len(found), 1)
        self.assertIn("the question counts no calls", found[0])


class PlantedInCommittedTraces(unittest.TestCase):
    """One thing planted in a copy of a committed trace; the guard must name
    it at its step."""

    def planted(self, name, change):
        trace = copy.deepcopy(load(name))
        self.assertEqual(sentences.problems(trace), [], "the unplanted trace must pass first")
        i = change(trace)
        found = sentences.problems(trace)
        self.assertTrue(found, "the plant went unnoticed")
        self.assertEqual({k for k, _ in found}, {i})
        return found

    def first(self, trace, kind, pattern):
        for i, s in enumerate(trace["steps"]):
            r = s["renderings"][0]
            if r["type"] == kind and re.search(pattern, r.get("data") or r.get("question") or ""):
                return i
        raise AssertionError("no %s step matches %r" % (kind, pattern))

    def test_a_wrong_quoted_number(self):
        def change(trace):
            i = self.first(trace, "markdown", r"^predicted: on 4 ranks the tree beats the ring below \d+ bytes")
            r = trace["steps"][i]["renderings"][0]
            r["data"] = re.sub(r"\d+ bytes", lambda m: str(int(m.group(0).split()[0]) + 10) + " bytes", r["data"])
            return i
        self.planted("lecture_collectives", change)

    def test_a_wrong_measured_number(self):
        def change(trace):
            i = self.first(trace, "markdown", r"^Why the crossovers differ")
            r = trace["steps"][i]["renderings"][0]
            r["data"] = re.sub(r"a ring step took ([0-9.]+) us",
                               lambda m: "a ring step took %.1f us" % (float(m.group(1)) + 1.0), r["data"])
            return i
        self.planted("lecture_collectives", change)

    def test_a_question_about_a_number_never_shown(self):
        def change(trace):
            i = self.first(trace, "predict", r"Beta, the time per byte")
            trace["steps"][i]["renderings"][0]["value"] *= 1.01
            return i
        self.planted("lecture_collectives", change)

    def test_lecture_08s_zero3_question_counting_wrongly(self):
        """lecture_08's ZeRO-3 question, with a hint that counts the calls as
        the old hint described them (the last layer kept from its forward to
        its backward: one gather fewer), against the runtime's count."""
        trace = copy.deepcopy(load("lecture_08"))
        i = self.first(trace, "predict", r"How many bytes does one rank send in one ZeRO-3 step")
        r = trace["steps"][i]["renderings"][0]
        base = r["question"].split("?")[0] + "?"
        r["question"] = base + " It makes 4 all-gathers forward, 2 all-gathers backward and 4 reduce-scatters."
        found = [m for k, m in sentences.problems(trace) if k == i]
        self.assertEqual(found, ["the question counts 4 + 2 + 4 = 10 calls; the row that holds its value says "
                                 "'calls' = 11"])
        r["question"] = base + " It makes 4 all-gathers forward, 3 all-gathers backward and 4 reduce-scatters."
        self.assertEqual([m for k, m in sentences.problems(trace) if k == i], [])


if __name__ == "__main__":
    unittest.main()
