#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh here, as a GPU machine would run it, so that
# device time goes to measuring:
#
#   - the repo is copied the way the device gets it (tracked and untracked,
#     not ignored, files, plus .carry/) into a new folder under /tmp;
#   - in a private mount namespace (unshare -m; root needed) every file of the
#     carried Debian packages installed on this machine is hidden behind an
#     empty one, except the base libraries any image has (zlib, xz, bzip2,
#     udev, libatomic, libtinfo: bash itself needs it): Open MPI, PMIx, cJSON, md4c, libdw, OpenBLAS, cmocka,
#     jsonschema ... can only come from the carried copies, as on a bare
#     machine, and Open MPI must run relocated;
#   - gpu-check.sh runs there (GPU parts skip, saying why), and its results
#     are checked: nothing failed, at most 8 files under OUT, 2 folders deep.
#
#   scripts/gpu-dryrun.sh [all|tests|bench|device]   (after scripts/gpu-bundle.sh; PYTHON=... passes on)
#
# `device` rehearses the one call of a device window: its steps run (their
# GPU parts skip), within GPU_CHECK_DEADLINE_S, which passes on as do
# GPU_CHECK_ONLY and the rest of the environment. A step cut by the deadline
# fails the rehearsal, as it would leave the device run incomplete.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .carry/libs.tar.xz ] || { echo "gpu-dryrun: no .carry/: run scripts/gpu-bundle.sh first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "gpu-dryrun: needs root (unshare -m, mount --bind)" >&2; exit 1; }

dest=$(mktemp -d /tmp/lectern-dryrun.XXXXXX)
echo "gpu-dryrun: in $dest" >&2
mkdir -p "$dest/repo"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$dest/repo"
cp -a .carry "$dest/repo/.carry"
rm -rf "$dest/repo/.carry/out"

# What to hide: the files of every carried package installed here.
BASE=" zlib1g liblzma5 libbz2-1.0 libudev1 libatomic1 libtinfo6 "
: >"$dest/hide.txt"
while read -r pkg _; do
    case "$BASE" in *" $pkg "*) continue ;; esac
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || continue
    dpkg -L "$pkg" | while IFS= read -r f; do
        [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"
        # usrmerge: /lib is /usr/lib, a file may be listed under either
        case "$f" in /lib/*) [ -f "/usr$f" ] && [ ! -L "/usr$f" ] && echo "/usr$f" ;; esac
    done >>"$dest/hide.txt" || true
done <.carry/packages.txt
sort -u -o "$dest/hide.txt" "$dest/hide.txt"
touch "$dest/empty"
echo "gpu-dryrun: hiding $(wc -l <"$dest/hide.txt") files of $(wc -l <.carry/packages.txt) carried packages" >&2

status=0
unshare -m --propagation private bash -s "$dest" "${PYTHON:-}" "${1:-all}" <<'INSIDE' || status=$?
set -uo pipefail
dest=$1
while IFS= read -r f; do mount --bind "$dest/empty" "$f"; done <"$dest/hide.txt"
# the proof that the machine's Open MPI is gone
if /usr/bin/orterun --version >/dev/null 2>&1; then echo "gpu-dryrun: the system's orterun still runs" >&2; exit 1; fi
cd "$dest/repo"
[ -n "$2" ] && export PYTHON=$2
OUT=$dest/out LECTERN_CARRY_DIR=$dest/carry bash scripts/gpu-check.sh "$3"
INSIDE

echo >&2
files=$(cd "$dest/out" 2>/dev/null && find . -type f | sort)
echo "gpu-dryrun: files under OUT:" >&2
echo "$files" >&2
nfiles=$(echo "$files" | grep -c . || true)
deep=$(echo "$files" | awk -F/ 'NF > 4' | wc -l)   # ./a/b/file is 2 folders deep
[ "$nfiles" -le 8 ] || { echo "gpu-dryrun: $nfiles files under OUT (at most 8 come back)" >&2; status=1; }
[ "$deep" -eq 0 ] || { echo "gpu-dryrun: files deeper than 2 folders under OUT" >&2; status=1; }
tail -1 "$dest/out/summary.md" >&2 2>/dev/null || status=1
echo "gpu-dryrun: $([ "$status" -eq 0 ] && echo passed || echo FAILED); everything in $dest" >&2
exit "$status"
