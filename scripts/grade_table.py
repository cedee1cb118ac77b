"""Prints the score table of a results.json (Gradescope's format) that a
lecture wrote with --grade: one line per test, then the total.

    python3 scripts/grade_table.py results.json
"""
import json
import sys


def table(results):
    tests = results.get("tests", [])
    width = max([len(t["name"]) for t in tests] + [len("check")])
    width = min(width, 96)   # a name longer than this is cut, with "..."
    lines = ["%-*s  %8s  %s" % (width, "check", "points", "")]
    for t in tests:
        name = t["name"] if len(t["name"]) <= width else t["name"][:width - 3] + "..."
        mark = "ok" if t.get("status") == "passed" else "FAILED"
        lines.append("%-*s  %8s  %s" % (width, name, "%g/%g" % (t["score"], t["max_score"]), mark))
    total = results["score"]
    most = results.get("max_score", sum(t["max_score"] for t in tests))
    lines.append("%-*s  %8s" % (width, "total", "%g/%g" % (total, most)))
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(json.load(f)))
