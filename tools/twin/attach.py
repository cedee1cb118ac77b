#!/usr/bin/env python3
"""Adds replays to a trace: each spawn's "twin" (docs/trace-format.md).

    python3 tools/twin/attach.py TRACE.json REPLAY.json [REPLAY.json...]

REPLAY.json is twin_replay's output for one platform. For each spawn it
replayed, the trace's spawns[id].twin[platform] becomes
{"label", "simulated_s", "measured_s", "world_size", "compute", "modelled",
"collectives" (per size: simulated time, algbw, busbw), "ranks"}, with
"rule" and "recorded_ranks" for a replay at another size, and
{"label", "refused"} for a spawn no extension rule covers: every figure
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


# A replay at 512 ranks (scaled@512) has 512 timelines: the trace keeps the
# first TIMELINES_KEPT, which a viewer can draw, and says so.
TIMELINES_KEPT = 16


def attach(trace, replay):
    platform = replay["platform"]
    for s in replay["spawns"]:
        spawn = trace["spawns"][s["id"]]
        if "refused" in s:
            spawn.setdefault("twin", {})[platform] = {"label": "not simulated on %s" % platform,
                                                      "refused": s["refused"]}
            continue
        if "simulated_s" not in s:
            continue
        ranks = s["ranks"][:TIMELINES_KEPT]
        twin = {
            "label": "simulated on %s" % platform,
            "simulated_s": s["simulated_s"],
            "measured_s": s["measured_s"],
            "world_size": s["world_size"],
            "compute": replay["compute"],
            "modelled": replay.get("modelled", ""),
            "collectives": s.get("collectives", []),
            "ranks": [[{"op": x["op"], "start": round(x["start"], 9), "end": round(x["end"], 9)} for x in r]
                      for r in ranks],
        }
        if len(ranks) < len(s["ranks"]):
            twin["timelines_of"] = "the first %d of %d ranks" % (len(ranks), len(s["ranks"]))
        if "rule" in s:
            twin["rule"] = s["rule"]
            twin["recorded_ranks"] = s["recorded_ranks"]
        spawn.setdefault("twin", {})[platform] = twin


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
