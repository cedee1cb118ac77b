#!/usr/bin/env python3
"""Adds replays to a trace: each spawn's "twin" (docs/trace-format.md).

    python3 tools/twin/attach.py TRACE.json REPLAY.json [REPLAY.json...]

REPLAY.json is twin_replay's output for one platform. For each spawn it
replayed, the trace's spawns[id].twin[platform] becomes
{"label", "simulated_s", "measured_s", "compute", "ranks"}: every figure
named with its platform and the word simulated. TRACE.json and its .js
twin are rewritten atomically (a temporary file, then a rename)."""
import json
import os
import sys


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def attach(trace, replay):
    platform = replay["platform"]
    for s in replay["spawns"]:
        if "simulated_s" not in s:
            continue
        spawn = trace["spawns"][s["id"]]
        spawn.setdefault("twin", {})[platform] = {
            "label": "simulated on %s" % platform,
            "simulated_s": s["simulated_s"],
            "measured_s": s["measured_s"],
            "compute": replay["compute"],
            "ranks": [[{"op": x["op"], "start": round(x["start"], 9), "end": round(x["end"], 9)} for x in r]
                      for r in s["ranks"]],
        }


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    for r in argv[2:]:
        with open(r, encoding="utf-8") as f:
            attach(trace, json.load(f))
    text = json.dumps(trace, separators=(",", ":"), ensure_ascii=False)
    name = os.path.basename(path)[:-len(".json")]
    write_atomic(path, text + "\n")
    write_atomic(path[:-len(".json")] + ".js",
                 '(window.lecternTraces = window.lecternTraces || {})["%s"] = %s;\n' % (name, text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
