#!/usr/bin/env bash
# One C style for every C and CUDA file of the project (.clang-format).
#
#   scripts/format.sh          rewrite the files in place (make format)
#   scripts/format.sh check    name each file that differs, exit 1 (make format-check)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
    echo "format: clang-format is missing (apt-get install clang-format, or scripts/setup.sh test)" >&2
    exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' | grep -v '^node_modules/')
if [ "${1:-fix}" = check ]; then
    # One clang-format for every file (one process per file took 15 times
    # as long); each file that differs is named in its diagnostics.
    bad=()
    if ! out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1 >/dev/null); then
        mapfile -t bad < <(printf '%s\n' "$out" | grep -oE '^[^:]+:[0-9]+:[0-9]+: (error|warning):' | cut -d: -f1 | sort -u)
        # A failure that names no file (clang-format itself failed): say what it said.
        if [ ${#bad[@]} -eq 0 ]; then
            printf '%s\n' "$out" | head -20
            exit 1
        fi
    fi
    if [ ${#bad[@]} -gt 0 ]; then
        echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (make format rewrites them):"
        printf '  %s\n' "${bad[@]}"
        clang-format --dry-run "${bad[0]}" 2>&1 | head -20
        exit 1
    fi
    echo "format: ${#files[@]} files follow .clang-format"
else
    clang-format -i "${files[@]}"
    echo "format: ${#files[@]} files formatted"
fi
