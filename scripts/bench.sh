#!/usr/bin/env bash
# Runs every benchmark and keeps its output in bench/results/NAME.txt.
# Figures that go in docs/benchmarks.md come from these files.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
BUILD=${BUILD:-build}
mkdir -p bench/results
# Benchmarks written as lectures leave their traces here, not in traces/.
export LECTERN_OUT=$(mktemp -d)
trap 'rm -rf "$LECTERN_OUT"' EXIT
status=0
for b in "$BUILD"/bench/*; do
    [ -x "$b" ] || continue
    name=$(basename "$b")
    echo "== $name"
    # The tables go to stdout and into the results; progress stays on stderr.
    "$b" | tee "bench/results/$name.txt" || status=1
done
for s in bench/*.py; do
    [ -f "$s" ] || continue
    name=$(basename "$s" .py)
    echo "== $name"
    /usr/bin/python3 "$s" 2>&1 | tee "bench/results/$name.txt" || status=1
done
for s in bench/*.sh; do
    [ -f "$s" ] || continue
    name=$(basename "$s" .sh)
    echo "== $name"
    bash "$s" 2>&1 | tee "bench/results/$name.txt" || status=1
done
echo "results in bench/results/ (machine: $(nproc) cores, $(uname -m))"
exit $status
