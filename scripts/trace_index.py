#!/usr/bin/env python3
"""Writes the lecture index the viewer shows when no trace is named.

    python3 scripts/trace_index.py [DIR]          (DIR: traces/ by default)

Reads every DIR/NAME.json trace, and the NAME.failed.json of a lecture
whose only run failed, and writes DIR/index.json and its twin DIR/index.js,
which a page opened from file:// can load with a <script> (it cannot fetch()
a file). Each entry:

    {"name": "lecture_08", "title": "Distributed training",
     "summary": "the first lines of the lecture",
     "start_time": "...", "host": "...", "gpus": 0, "backend": "mpi",
     "duration_s": 13.5, "steps": 355, "failed_run": false,
     "state": "ok", "has_good": true, "order": 3,
     "sittings": [{"n": 3, "part": "Part 1"}, {"n": 6, "part": "Part 2"}]}

`order` is the lecture's place in the series' reading order (READING_ORDER
below), absent for a lecture outside it; the index lists entries in that
order, then the others by name. `sittings` are the course's classes that
read it (SITTINGS below, docs/course.md), numbered from 1; lecture_08 takes
two, each with its part.

The title is the lecture's first heading, the summary the text of the
markdown that follows it, both as plain text: the viewer shows them as text,
never as HTML. `failed_run` says that a later run failed (NAME.failed.json is
newer than NAME.json). `state` is the newest run's: "ok", or "failed" when
NAME.failed.json is the newest (what ?trace=NAME opens); `has_good` says
whether a run that passed is kept (false for a lecture whose only run
failed: its entry is made from the failed trace). A file that is not a lectern trace is skipped with a
warning on stderr; the index is written atomically, so a viewer never reads
half of one.
"""
import json
import os
import re
import sys
import tempfile

SUMMARY_CHARS = 280

# The course, one class (sitting) at a time, as docs/course.md lays it out:
# one device first; the first half of lecture_08 (how accelerators talk);
# collectives and DDP in depth, which its second half builds on; that second
# half (one model trained every way); then what comes after DDP, pipeline
# schedules, mixed precision, checkpoints. lecture_08 is two sittings, named
# by its parts' headings.
SITTINGS = [("lecture_00", None), ("lecture_gpu", None), ("lecture_08", "Part 1"), ("lecture_collectives", None),
            ("lecture_ddp", None), ("lecture_08", "Part 2"), ("lecture_scaling", None), ("lecture_pipelines", None),
            ("lecture_precision", None), ("lecture_checkpoints", None)]

# The order in which to read the series: each lecture at its first sitting.
# An entry of this list gets "order" (1, 2, ...) and "sittings" (the classes
# that read it: [{"n": 3, "part": "Part 1"}, ...], "part" only where a
# lecture takes more than one); the index lists those first, in that order,
# then any other lecture by name.
READING_ORDER = [name for i, (name, _) in enumerate(SITTINGS) if name not in [n for n, _ in SITTINGS[:i]]]


def sittings_of(name):
    """The sittings of the course that read lecture `name`, in order."""
    return [dict({"n": i + 1}, **({"part": part} if part else {})) for i, (n, part) in enumerate(SITTINGS)
            if n == name]


def plain(markdown):
    """Markdown to one line of plain text: no markup characters, no links'
    addresses, whitespace folded."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"^\s{0,3}(#+|[-*+]|\d+\.|>)\s+", "", text, flags=re.M)
    text = re.sub(r"[*`|]", "", text)
    # _emphasis_ loses its underscores; homework_08.c keeps its own
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)
    return " ".join(text.split())


def describe(name, trace):
    markdown = [r["data"] for s in trace["steps"] if s.get("rank") is None
                for r in s.get("renderings", []) if r.get("type") == "markdown" and isinstance(r.get("data"), str)]
    title, summary = name, []
    for i, md in enumerate(markdown):
        m = re.match(r"\s*#\s+(.+)", md)
        if m:
            title = plain(m.group(1))
            markdown = markdown[i + 1:]
            break
    for md in markdown:
        if re.match(r"\s*#", md) or len(" ".join(summary)) >= SUMMARY_CHARS:
            break
        summary.append(plain(md))
    summary = " ".join(s for s in summary if s)
    if len(summary) > SUMMARY_CHARS:
        summary = summary[:SUMMARY_CHARS].rsplit(" ", 1)[0] + " …"
    meta = trace.get("meta") or {}
    return {
        "name": name,
        "title": title,
        "summary": summary,
        "start_time": meta.get("start_time"),
        "host": meta.get("host"),
        "gpus": meta.get("gpus"),
        "backend": meta.get("backend"),
        "duration_s": meta.get("duration_s"),
        "steps": len(trace["steps"]),
    }


def read_trace(path):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    if trace.get("version") != 1 or not isinstance(trace.get("steps"), list):
        raise ValueError("not a version 1 lectern trace")
    return trace


def build(folder):
    entries = []
    names = set()
    for fname in os.listdir(folder):
        if fname.endswith(".failed.json"):
            names.add(fname[:-len(".failed.json")])
        elif fname.endswith(".json") and fname != "index.json":
            names.add(fname[:-len(".json")])
    for name in sorted(names):
        path = os.path.join(folder, name + ".json")
        failed = os.path.join(folder, name + ".failed.json")
        has_good = os.path.exists(path)
        source = path if has_good else failed
        try:
            entry = describe(name, read_trace(source))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print("trace_index: skipping %s: %s" % (source, e), file=sys.stderr)
            continue
        newer_failed = has_good and os.path.exists(failed) and os.path.getmtime(failed) > os.path.getmtime(path)
        entry["failed_run"] = newer_failed
        entry["has_good"] = has_good
        entry["state"] = "failed" if newer_failed or not has_good else "ok"
        if name in READING_ORDER:
            entry["order"] = READING_ORDER.index(name) + 1
            entry["sittings"] = sittings_of(name)
        entries.append(entry)
    entries.sort(key=reading_key)
    return {"version": 1, "lectures": entries}


def reading_key(entry):
    """The series' reading order first, then by name."""
    order = entry.get("order")
    return (0, order, "") if isinstance(order, int) else (1, 0, entry["name"])


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".index.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    folder = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "traces")
    if not os.path.isdir(folder):
        print("trace_index: %s is not a folder" % folder, file=sys.stderr)
        return 1
    index = build(folder)
    text = json.dumps(index, indent=1, ensure_ascii=False)
    write_atomic(os.path.join(folder, "index.json"), text + "\n")
    write_atomic(os.path.join(folder, "index.js"), "window.lecternIndex = " + text + ";\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
