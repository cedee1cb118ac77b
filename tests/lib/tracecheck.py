"""Checks on lectern traces, shared by the script tests.

    import tracecheck
    trace = tracecheck.load(path)          # the .json, parsed
    tracecheck.validate(path)              # schema + js twin + line accuracy; raises AssertionError

Line accuracy: for every step, the innermost frame's line holds the call that
made the step, and every outer frame's line calls the next frame's function.
"The line holds the call" allows for a call spread over several lines: the
statement that starts at or before the line and reaches it must contain it.
"""
import json
import os
import re

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "trace.schema.json")

# Calls of the runtime that make a step directly.
STEP_CALLS = ("note", "note_verbatim", "image", "see", "note_system", "plot")
# spawn() notes which backend it chose, at the spawn() line. An error step
# (bad input, a crash) may come from any line.
RUNTIME_CALLS = STEP_CALLS + ("spawn",)

_schema = None


def schema():
    global _schema
    if _schema is None:
        with open(SCHEMA_PATH) as f:
            _schema = json.load(f)
    return _schema


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_js_twin(path):
    """The .js twin of a .json trace, parsed back into the same object."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.match(r'^\(window\.lecternTraces = window\.lecternTraces \|\| \{\}\)\["([^"]+)"\] = (.*);\n?$',
                 text, re.S)
    assert m, "%s: not a lectern .js twin" % path
    return m.group(1), json.loads(m.group(2))


def statement_at(lines, line):
    """The text of the statement around `line` (1-based): from the nearest
    earlier line ending a statement (';', '{' or '}') up to the first line at
    or after `line` that ends one."""
    i = line - 1
    start = i
    while start > 0:
        prev = lines[start - 1].split("//")[0].rstrip()
        if prev.endswith((";", "{", "}")) or prev == "" or prev.lstrip().startswith("#"):
            break
        start -= 1
    end = i
    while end < len(lines) - 1:
        cur = lines[end].split("//")[0].rstrip()
        if cur.endswith((";", "{", "}")):
            break
        end += 1
    return "\n".join(lines[start:end + 1])


def calls(text, name):
    return re.search(r"(?<![A-Za-z0-9_])%s\s*\(" % re.escape(name), text) is not None


def calls_through_pointer(stmt, src):
    """A call through a function pointer: the called name is declared in the
    file as a pointer to a function, e.g. `void (*fn)(int)` or `spawn_fn fn`."""
    text = "\n".join(src)
    for name in re.findall(r"(?<![A-Za-z0-9_.>])([A-Za-z_]\w*)\s*\(", stmt):
        if re.search(r"\(\s*\*\s*%s\s*\)\s*\(" % re.escape(name), text):
            return True
        if re.search(r"\b\w+_fn\s+%s\b" % re.escape(name), text):
            return True
    return False


def check_lines(trace):
    """Raises AssertionError naming the first step whose stack is not exact."""
    files = {p: t.split("\n") for p, t in trace["files"].items()}
    for i, step in enumerate(trace["steps"]):
        stack = step["stack"]
        kinds = [r["type"] for r in step["renderings"]]
        for j, frame in enumerate(stack):
            path, line = frame["path"], frame["line"]
            assert path in files, "step %d: %s is not embedded in files" % (i, path)
            src = files[path]
            assert 1 <= line <= len(src), "step %d: %s:%d is past the end" % (i, path, line)
            stmt = statement_at(src, line)
            where = "step %d frame %d (%s:%d %s)" % (i, j, path, line, frame["function"])
            if j + 1 < len(stack):
                nxt = stack[j + 1]["function"]
                # A rank's stack goes from the parent's spawn() line into the
                # rank function, which spawn() calls on the rank's side.
                if step.get("spawn") is not None and not calls(stmt, nxt) and calls(stmt, "spawn"):
                    continue
                assert calls(stmt, nxt) or calls_through_pointer(stmt, src), \
                    "%s: does not call %s(): %r" % (where, nxt, stmt)
            else:
                if "error" in kinds:
                    continue   # a crash or bad input can happen on any line
                assert any(calls(stmt, c) for c in RUNTIME_CALLS), \
                    "%s: no call that makes a step: %r" % (where, stmt)


def function_contains(trace, frame):
    """True if frame's line lies in the body of frame's function (roughly:
    after a line that defines it)."""
    src = trace["files"][frame["path"]].split("\n")
    pat = re.compile(r"(?<![A-Za-z0-9_])%s\s*\([^;]*$" % re.escape(frame["function"]))
    for k in range(frame["line"] - 1, -1, -1):
        if pat.search(src[k]) and not src[k].startswith((" ", "\t")):
            return True
    return False


def validate(path, lines=True):
    trace = load(path)
    jsonschema.validate(trace, schema())
    base = path[:-5] if path.endswith(".json") else path
    name, twin = load_js_twin(base + ".js")
    assert twin == trace, "%s.js does not hold the same trace as the .json" % base
    assert name == os.path.basename(base), "%s.js registers %r" % (base, name)
    if lines:
        check_lines(trace)
        for step in trace["steps"]:
            for frame in step["stack"]:
                assert function_contains(trace, frame), \
                    "%s:%d is not inside %s()" % (frame["path"], frame["line"], frame["function"])
    return trace
