#!/usr/bin/env python3
"""How much of a lecture is its lesson: the lines inside note(...) calls
against all its lines.

    python3 scripts/note_share.py lectures/lecture_08.c [...]

A line counts as a note line when any part of a note( ... ) call is on it
(the call's first line to the line of its closing parenthesis). Strings,
character constants and comments are read as such, so a parenthesis inside
them does not end a call. note_verbatim() (program output) is not counted.
"""
import re
import sys


def note_lines(text):
    lines = set()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "\"'":
            i = skip_quoted(text, i)
            continue
        m = re.compile(r"(?<![A-Za-z0-9_])note\s*\(").match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = call_end(text, m.end())
            first, last = text.count("\n", 0, i), text.count("\n", 0, end)
            lines.update(range(first, last + 1))
            i = end
            continue
        i += 1
    return lines


def skip_quoted(text, i):
    q, i = text[i], i + 1
    while i < len(text) and text[i] != q:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def call_end(text, i):
    depth = 1
    while i < len(text) and depth:
        c = text[i]
        if c in "\"'":
            i = skip_quoted(text, i)
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i) + 2
            continue
        depth += c == "("
        depth -= c == ")"
        i += 1
    return i


def main(paths):
    for p in paths:
        with open(p, encoding="utf-8") as f:
            text = f.read()
        total = text.count("\n")
        notes = len(note_lines(text))
        print("%s: %d lines, %d in note() calls (%.1f%%)" % (p, total, notes, 100.0 * notes / max(total, 1)))


if __name__ == "__main__":
    main(sys.argv[1:] or ["lectures/lecture_08.c"])
