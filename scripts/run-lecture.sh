#!/usr/bin/env bash
# Runs one built lecture and says how to open its trace in the viewer.
#   scripts/run-lecture.sh build/lectures/NAME [lecture options...]
set -uo pipefail
bin=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$bin")
"$bin" "$@"
rc=$?
trace=$name
[ $rc -ne 0 ] && trace=$name.failed
echo
if [ $rc -eq 0 ]; then
    echo "Trace: traces/$name.json"
else
    echo "The lecture FAILED (exit $rc). Its trace up to the failure: traces/$name.failed.json"
    echo "(the last good trace, traces/$name.json, is untouched)"
fi
echo "View it: open file://$root/viewer/index.html?trace=$trace in a browser"
echo "   (or run 'make view' and open the URL it prints)"
exit $rc
