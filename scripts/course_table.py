#!/usr/bin/env python3
"""The figures of docs/course.md's table, counted from the committed traces:
per sitting, the lecture's steps, the words of its own notes (markdown
renderings of steps outside the ranks), its tables, charts and pictures, its
questions (predict), the run time the trace recorded (meta.duration_s), and
the reading estimate course.md states (150 words a minute, half a minute a
table, chart or picture, a minute a question). lecture_08's two sittings are
split at its "## Part 2" heading. Prints the table's rows as Markdown.

    python3 scripts/course_table.py            (from the repository's root)
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import trace_index  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def counts(steps):
    words = figures = questions = 0
    for s in steps:
        for r in s["renderings"]:
            if r["type"] == "markdown" and s["rank"] is None:
                words += len(r["data"].split())
            elif r["type"] in ("table", "plot", "image"):
                figures += 1
            elif r["type"] == "predict":
                questions += 1
    minutes = math.ceil(words / 150 + figures / 2 + questions)
    return len(steps), words, figures, questions, minutes


def part2_start(steps):
    for i, s in enumerate(steps):
        if any(r["type"] == "markdown" and r["data"].startswith("## Part 2") for r in s["renderings"]):
            return i
    raise SystemExit("lecture_08 has no '## Part 2' heading")


def rows():
    out = []
    for k, (name, part) in enumerate(trace_index.SITTINGS, 1):
        with open(os.path.join(ROOT, "traces", name + ".json")) as f:
            t = json.load(f)
        steps = t["steps"]
        if part:
            cut = part2_start(steps)
            steps = steps[:cut] if part == "Part 1" else steps[cut:]
        d = t["meta"]["duration_s"]
        run = ("%.1f s" if d >= 1 else "%.3f s") % d
        if part == "Part 2":
            run = "(above)"
        elif part:
            run += " (both parts)"
        label = "`%s`" % name + (", %s" % part if part else "")
        n, words, figures, questions, minutes = counts(steps)
        out.append("| %d | %s | %s | %d | %d | %d | %d | %d min |" % (k, label, run, n, words, figures, questions,
                                                                       minutes))
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
