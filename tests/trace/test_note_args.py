"""A note's arguments by name (runtime/trace/note_args.c): for every
conversion of a note's format the step's markdown rendering keeps the
expression that filled it as the lecture wrote it, whether it was marked
quoted(), its value and the characters it printed. Runs
tests/fixtures/note_args_fixture.c and checks each note against the values
its source holds (written here again, not read back from the runtime), and
that every "printed" is the piece of the note's text it should be.

    /usr/bin/python3 tests/trace/test_note_args.py      (LECTERN_BUILD picks the build)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

NOTE_ARGS = tracecheck.Fixture("note_args_fixture")


class NoteArgs(tracecheck.FixtureRun, unittest.TestCase):
    FIXTURE = NOTE_ARGS

    def notes(self, rank=None):
        return [s["renderings"][0] for s in self.t["steps"]
                if s["renderings"][0]["type"] == "markdown" and s["rank"] == rank]

    def args(self, prefix):
        found = [r for r in self.notes() if r["data"].startswith(prefix)]
        self.assertEqual(len(found), 1, prefix)
        return found[0], found[0].get("args")

    def triples(self, args):
        return [(a["expr"], a.get("value"), a.get("printed")) for a in args]

    def test_integers_of_every_length(self):
        r, args = self.args("4 ranks sent")
        self.assertEqual(self.triples(args), [("ranks_n", 4, "4"), ("bytes", 25165824, "25165824"),
                                              ("count", 3, "3"), ("small", 65535, "65535")])
        self.assertNotIn("quoted", args[0])

    def test_floats_quoted_and_percent(self):
        r, args = self.args("Speed-up")
        self.assertEqual(r["data"], "Speed-up 1.03 x,  93.7% of the line.")
        self.assertEqual(args[0], {"expr": "speedup", "quoted": True, "value": 1.0312, "printed": "1.03"})
        self.assertEqual(args[1]["expr"], "100.0 * speedup / 1.1")
        self.assertAlmostEqual(args[1]["value"], 100.0 * 1.0312 / 1.1, places=12)
        self.assertEqual(args[1]["printed"], " 93.7")

    def test_star_width_string_and_char(self):
        r, args = self.args("Width star")
        self.assertEqual(r["data"], "Width star: [   2.250] then two, words and x.")
        # The '*'s take their own arguments: they are not a conversion's value.
        self.assertEqual(self.triples(args), [("table[1]", 2.25, "   2.250"), ('"two, words"', "two, words", None),
                                              ("'x'", "x", None)])

    def test_expressions_with_commas_and_brackets(self):
        r, args = self.args("A shape")
        self.assertEqual([a["expr"] for a in args], ["s.rows", "s.cols", "twice(s.rows, s.cols)", "table[s.rows - 2]"])
        self.assertEqual([a["value"] for a in args], [3, 5, 16, 2.25])

    def test_hex_and_exponent(self):
        r, args = self.args("Hex")
        self.assertEqual(self.triples(args), [("255u", 255, "0xff"), ("1.5e-7", 1.5e-7, "1.500000e-07")])

    def test_no_conversion_no_args(self):
        r, args = self.args("No number here")
        self.assertEqual(r["data"], "No number here, 100% sure.")
        self.assertIsNone(args)

    def test_every_printed_piece_is_in_the_text(self):
        for r in self.notes():
            for a in r.get("args") or []:
                shown = a.get("printed", a.get("value"))
                if isinstance(shown, str):
                    self.assertIn(shown, r["data"], (a, r["data"]))

    def test_caption_and_title(self):
        tables = [r for s in self.t["steps"] for r in s["renderings"] if r["type"] == "table"]
        self.assertEqual(len(tables), 1)
        self.assertEqual(tables[0]["caption"], "2 rows, tolerance 4.8e-07")
        self.assertEqual([a["expr"] for a in tables[0]["caption_args"]], ["2", "4.0 * 1.1920929e-07"])
        self.assertAlmostEqual(tables[0]["caption_args"][1]["value"], 4.0 * 1.1920929e-07, delta=1e-20)
        plots = [r for s in self.t["steps"] for r in s["renderings"] if r["type"] == "plot"]
        self.assertEqual(plots[0]["spec"]["title"], "busbw on 4 ranks")
        self.assertEqual(plots[0]["title_args"], [{"expr": "ranks_n", "value": 4, "printed": "4"}])

    def test_in_a_rank(self):
        for rank in (0, 1):
            got = [r for r in self.notes(rank) if r["data"].startswith("rank ")]
            self.assertEqual(len(got), 1)
            self.assertEqual(self.triples(got[0]["args"]),
                             [("rank", rank, str(rank)), ("world_size", 2, "2")])


if __name__ == "__main__":
    unittest.main()
