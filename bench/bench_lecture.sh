#!/usr/bin/env bash
# How long the whole of lecture_08 takes, how much of it is spent inside
# spawn() (from start to the last rank's exit, as the trace records it: the
# ranks' own work included), and how much of that is start-up (until every
# rank runs and is connected: the spawns' "startup_s"),
# median of RUNS full runs (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${RUNS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$RUNS"); do
    "$BUILD/lectures/lecture_08" --quiet --out "$out/$i" >/dev/null
done
/usr/bin/python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(1, runs + 1):
    t = json.load(open("%s/%d/lecture_08.json" % (out, i)))
    total = t["meta"]["duration_s"]
    spawned = sum(s.get("seconds", 0) for s in t["spawns"])
    startup = sum(s["startup_s"] for s in t["spawns"])
    rows.append((total, spawned, len(t["spawns"]), len(t["steps"]), startup))
    print("run %d: %.1f s, %d spawns take %.1f s (%.0f%%) of which start-up %.1f s (%.0f%%), %d steps"
          % (i, total, rows[-1][2], spawned, 100 * spawned / total, startup, 100 * startup / total, rows[-1][3]))
med = statistics.median(r[0] for r in rows)
share = statistics.median(r[1] / r[0] for r in rows)
start = statistics.median(r[4] / r[0] for r in rows)
print("lecture_08 full run: median %.1f s over %d runs; median share inside spawn(): %.0f%%, "
      "of which rank start-up: %.0f%% of the run" % (med, runs, 100 * share, 100 * start))
PY
