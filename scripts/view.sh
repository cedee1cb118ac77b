#!/usr/bin/env bash
# Serves the repo on localhost so the viewer can also read traces/*.json.
# (Opening viewer/index.html from disk works too: it loads the .js twins.)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-8000}
name=${LECTURE:-$( [ -f lectures/lecture_08.c ] && echo lecture_08 || echo lecture_00 )}
echo "Serving $(pwd) on http://127.0.0.1:$port/"
echo "Open http://127.0.0.1:$port/viewer/index.html?trace=$name   (Ctrl-C stops)"
exec /usr/bin/python3 -m http.server "$port" --bind 127.0.0.1
