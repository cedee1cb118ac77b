"""table() and the chart helpers: what a lecture shows as a table or a chart
is in the trace as data (numbers as numbers, with their format and unit), so
the viewer sorts it and a test reads it back. Runs tests/fixtures/table_fixture.c.
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

TABLES = tracecheck.Fixture("table_fixture")
SOURCE = TABLES.source
line_of = TABLES.line_of


class TableAndCharts(unittest.TestCase):
    def run_fixture(self, *args):
        out = tempfile.mkdtemp(prefix="lectern-table-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        p = TABLES.run(out, *args, timeout=120)
        name = "table_fixture.failed.json" if args else "table_fixture.json"
        return p, tracecheck.validate(os.path.join(out, name))

    def test_table_values_formats_and_units(self):
        p, t = self.run_fixture()
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        [step] = [s for s in t["steps"] if s["renderings"][0]["type"] == "table"]
        self.assertEqual(step["stack"][-1]["line"], line_of("table_show(t);"))
        r = step["renderings"][0]
        self.assertEqual(r["caption"], "all-reduce on 4 ranks")
        self.assertEqual([(c["name"], c.get("unit"), c["format"], c["kind"]) for c in r["columns"]],
                         [("size", "MiB", "%g", "number"), ("time", "ms", "%.3f", "number"),
                          ("calls", None, "%d", "number"), ("bytes", "B", "%lld", "number"),
                          ("operation", None, "%s", "text")])
        self.assertEqual(r["rows"], [[0.25, 1.23456, 3, 262144, "all-reduce"],
                                     [4, 0.5, 10, 4194304, "reduce-scatter"],
                                     [1, None, 7, 1048576, "broadcast"]])   # NaN is null
        self.assertEqual(r["display"][0], ["0.25", "1.235", "3", "262144", "all-reduce"])
        self.assertEqual(r["display"][2][1], "nan")

    def test_chart_lines_and_spans(self):
        p, t = self.run_fixture()
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        plots = [r["spec"] for s in t["steps"] for r in s["renderings"] if r["type"] == "plot"]
        lines, spans, mixed, only = plots
        self.assertEqual(lines["title"], "time on 2 ranks")
        self.assertEqual(lines["encoding"]["x"]["title"], "size (MiB)")
        self.assertEqual(lines["encoding"]["x"]["scale"], {"type": "log", "base": 2})
        self.assertEqual(lines["encoding"]["y"]["title"], "time (ms)")
        measured = [(v["x"], v["y"]) for v in lines["data"]["values"] if v["series"] == "measured"]
        self.assertEqual(measured, [(1, 10), (2, 20), (4, 40)])   # x = 0 cannot be on a log axis
        self.assertEqual(lines["usermeta"], {"dropped_points": 1})
        self.assertEqual(spans["mark"], "bar")
        self.assertEqual(spans["data"]["values"], [
            {"series": "forward", "row": "stage 0", "label": "micro-batch 0", "start": 0, "end": 1.5},
            {"series": "backward", "row": "stage 1", "start": 1.5, "end": 2}])
        # Measured spans alone: nothing about modelled compute in the spec.
        self.assertNotIn("opacity", spans["encoding"])
        self.assertNotIn("description", spans)

    def test_modelled_spans_are_marked(self):
        p, t = self.run_fixture()
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        plots = [r["spec"] for s in t["steps"] for r in s["renderings"] if r["type"] == "plot"]
        _, _, mixed, only = plots
        self.assertEqual(mixed["data"]["values"], [
            {"series": "forward", "row": "real: stage 0", "label": "micro-batch 0", "start": 0, "end": 1.5,
             "compute": "measured"},
            {"series": "forward", "row": "modelled: stage 0", "label": "micro-batch 0", "start": 0, "end": 20,
             "modelled": True, "compute": "modelled"}])
        # Drawn apart: pale with a dashed outline, its own legend ("compute"),
        # in the tooltip, and said in the chart's description.
        enc = mixed["encoding"]
        self.assertEqual(enc["opacity"]["field"], "compute")
        self.assertEqual(enc["opacity"]["scale"], {"domain": ["measured", "modelled"], "range": [1, 0.4]})
        self.assertEqual(enc["strokeDash"]["scale"], {"domain": ["measured", "modelled"], "range": [[1, 0], [4, 2]]})
        self.assertEqual(enc["opacity"]["title"], "compute")
        self.assertIn({"field": "compute"}, enc["tooltip"])
        self.assertIn("modelled compute", mixed["description"])
        self.assertEqual(mixed["mark"]["type"], "bar")
        # Modelled spans only: the legend names only what is drawn.
        self.assertEqual(only["encoding"]["opacity"]["scale"], {"domain": ["modelled"], "range": [0.4]})
        self.assertEqual(only["encoding"]["strokeDash"]["scale"], {"domain": ["modelled"], "range": [[4, 2]]})
        self.assertEqual([v["compute"] for v in only["data"]["values"]], ["modelled"])

    def test_modelled_spans_kept_up_to_the_limit(self):
        # 1200 empty spans in the lecture's own process: the first 1024 kept
        # (runtime/trace/trace.h, LX_MODELLED_PER_SPAWN), the rest counted.
        out = tempfile.mkdtemp(prefix="lectern-table-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        p = TABLES.run(out, "--spans", timeout=120)
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(out, "table_fixture.json"))
        self.assertEqual(len(t["modelled"]), 1024)
        self.assertEqual(t["meta"]["modelled_dropped"], 176)
        self.assertIs(t["meta"]["modelled_compute"], True)
        self.assertEqual({(x["spawn"], x["rank"], x["ms"], x["function"]) for x in t["modelled"]},
                         {(None, None, 0, "body")})
        starts = [x["start"] for x in t["modelled"]]
        self.assertEqual(starts, sorted(starts))   # the first 1024, in order
        # without it, none
        _, t = self.run_fixture()
        self.assertEqual(t["modelled"], [])
        self.assertIs(t["meta"]["modelled_compute"], False)
        self.assertNotIn("modelled_dropped", t["meta"])

    def test_mistakes_are_errors_at_their_lines(self):
        p, t = self.run_fixture("--bad")
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        errs = [(s["stack"][-1]["line"], r["data"]) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "error"]
        self.assertEqual(len(errs), 3, errs)
        self.assertEqual(errs[0][0], line_of('"%p"'))
        self.assertIn("format '%p' of column 'x' is not one conversion", errs[0][1])
        self.assertEqual(errs[1][0], line_of('chart_span(c, "row"'))
        self.assertIn("a chart is lines or spans", errs[1][1])
        self.assertEqual(errs[2][0], line_of('chart_span_modelled(d, "row"'))
        self.assertIn("chart_span_modelled: a span added to a chart of lines", errs[2][1])
        # nothing half-made was shown
        self.assertEqual(sum(r["type"] == "table" for s in t["steps"] for r in s["renderings"]), 1)


if __name__ == "__main__":
    unittest.main()
