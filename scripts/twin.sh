#!/usr/bin/env bash
# The run's twin (docs/twin.md): runs a built lecture with --twin-record,
# replays each spawn's ranks on the simulated platforms named, and adds to
# each spawn of the trace a "twin" object (tools/twin/attach.py).
#
#   scripts/twin.sh build/lectures/NAME PLATFORM[,PLATFORM...] [lecture options...]
#
# A platform may be NAME@P: each spawn replayed at P ranks by its strategy's
# extension rule (docs/twin.md), e.g. h100-node,scaled@64,scaled@512; a spawn
# no rule covers is left out of that platform's twin, with why.
#
# The replay is $LECTERN_TWIN_REPLAY (make twin sets build/tools/twin/twin_replay).
# Without it (SimGrid missing) this says so and exits 3 before running
# anything: the trace is left as it was. Traces go to $LECTERN_OUT
# (default traces/local/, as make run's).
set -euo pipefail
bin=$1; platforms=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$bin")
out=${LECTERN_OUT:-$root/traces/local}
replay=${LECTERN_TWIN_REPLAY:-$root/build/tools/twin/twin_replay}

if [ ! -x "$replay" ]; then
    echo "make twin: the replay $replay is missing: it needs SimGrid (libsimgrid-dev), which this build did not find." >&2
    echo "  Install it (bash scripts/setup.sh, or apt-get install libsimgrid-dev) and run make twin again." >&2
    echo "  Nothing was run; the trace in $out is as it was." >&2
    exit 3
fi
files=()
for p in ${platforms//,/ }; do
    f=$root/tools/twin/platforms/${p%@*}.xml
    if [ ! -f "$f" ]; then
        echo "make twin: no platform '${p%@*}' (tools/twin/platforms/ has: $(cd "$root/tools/twin/platforms" && ls *.xml | sed 's/\.xml$//' | tr '\n' ' '))" >&2
        exit 2
    fi
    if [[ $p == *@* && ! ${p#*@} =~ ^[1-9][0-9]*$ ]]; then
        echo "make twin: '$p': the ranks after @ must be a positive number" >&2
        exit 2
    fi
    files+=("$p=$f")
done

mkdir -p "$out"
"$bin" --out "$out" --twin-record "$@" || { echo "make twin: $name failed; no replay" >&2; exit 1; }
events=$out/$name.events.json
results=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pf in "${files[@]}"; do
    p=${pf%%=*}
    extra=()
    [[ $p == *@* ]] && extra=(--ranks "${p#*@}")
    "$replay" "$events" "${pf#*=}" --name "$p" --out "$tmp/$p.json" "${extra[@]}"
    results+=("$tmp/$p.json")
done
python3 "$root/tools/twin/attach.py" "$out/$name.json" "${results[@]}"
for pf in "${files[@]}"; do echo "twin: $name replayed on ${pf%%=*} (simulated): $out/$name.json"; done
