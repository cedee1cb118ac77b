#!/usr/bin/env bash
# Runs one built lecture and says how to open its trace in the viewer.
#   scripts/run-lecture.sh build/lectures/NAME [lecture options...]
#
# The trace goes to traces/local/ (not tracked by git), so `make run` never
# changes a committed file: traces/NAME.json is the browsable trace that
# ships with the repository, and the viewer's ?trace=NAME shows the local
# one when there is one, else that one.
set -uo pipefail
bin=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$bin")
out=${LECTERN_OUT:-$root/traces/local}
mkdir -p "$out"
# "/$bin": make passes a relative build-asan/lectures/NAME
case "/$bin" in
    */build-asan/*)
        # make run SAN=1: AddressSanitizer + UBSan, set up as the tests do
        # (Open MPI needs the shadow gap; its own leaks are suppressed).
        export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
        export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:abort_on_error=0"
        export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
        echo "(built with AddressSanitizer and UBSan: slower; their reports, if any, come before the verdict)"
        ;;
esac
# Which trace this run wrote is read from the files, not guessed from the
# exit status: a sanitizer can fail a run whose trace was written as ok.
marker=$(mktemp)
trap 'rm -f "$marker"' EXIT
"$bin" --out "$out" "$@"
rc=$?
rel=${out#"$root"/}
echo
if [ "$out/$name.failed.json" -nt "$marker" ]; then
    trace=$name
    echo "The lecture FAILED (exit $rc). Its trace up to the failure: $rel/$name.failed.json"
    if [ -f "$out/$name.json" ]; then
        echo "(the last good trace, $rel/$name.json, is untouched; the viewer opens the newest run, this one)"
    else
        echo "(no run of it has passed yet: there is no good trace to keep)"
    fi
elif [ "$out/$name.json" -nt "$marker" ]; then
    trace=$name
    echo "Trace: $rel/$name.json"
    [ $rc -ne 0 ] && echo "The lecture's trace says it went well, but the process exited $rc: see the messages above (a sanitizer's report?)."
else
    echo "The lecture wrote no trace (exit $rc: bad usage, an unwritable $rel, or it was killed)."
    exit $rc
fi
# The list the viewer shows when no trace is named (viewer/lectures.js).
python3 "$root/scripts/trace_index.py" "$out" >/dev/null || echo "(the lecture index in $rel could not be updated)"
echo "View it: open file://$root/viewer/index.html?trace=$trace in a browser"
echo "   (or run 'make view' and open the URL it prints)"
exit $rc
