#!/usr/bin/env bash
# make grade LECTURE=name [ARGS=...]: runs a lecture (a homework) the way a
# course's autograder does, with --grade, and prints the score table it wrote.
#
#   bash scripts/grade.sh BINARY [lecture options]
#
# The results file (Gradescope's results.json format) is kept in
# $LECTERN_GRADE_OUT when set, else in a temporary folder removed at the end.
# Exit status: the lecture's (0 all checks passed, 1 some failed or the run
# failed, 2 bad usage).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1; shift
export LECTERN_ROOT_DIR=${LECTERN_ROOT_DIR:-$PWD}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=${LECTERN_GRADE_OUT:-$tmp}/results.json
mkdir -p "$(dirname "$results")"
"$bin" --quiet --out "$tmp" --grade "$results" "$@"
rc=$?
if [ -f "$results" ]; then
    python3 scripts/grade_table.py "$results"
else
    echo "no results were written ($results)" >&2
fi
exit $rc
