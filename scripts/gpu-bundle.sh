#!/usr/bin/env bash
# Prepares .carry/ (git-ignored): what a GPU machine that cannot reach any
# package registry needs to run scripts/gpu-check.sh. Run it here, on a
# Debian machine with the CUDA toolkit (nvcc) and NCCL; docs/gpu.md says how
# the folder then travels and what runs there.
#
#   .carry/build.tar.xz    lectern built with CUDA (make CUDA=1 BUILD=.carry/build),
#                          packed (gpu-check.sh unpacks it into .carry/build)
#   .carry/libs.tar.xz     the runtime libraries a GPU image usually lacks, from
#                          Debian's own packages (apt-get download, dpkg -x):
#                          Open MPI + PMIx, cJSON, md4c, libdw/libelf, OpenBLAS +
#                          libgfortran, hwloc, cmocka, python3-jsonschema, and
#                          every library they need in turn (found from the ELF
#                          files' NEEDED entries), except the C and C++ runtimes,
#                          which the GPU machine has in newer versions
#   .carry/packages.txt    the packages and versions in it
#   .carry/reference/      with --reference DIR: that folder's lecture_08.py, for
#                          the PyTorch anchor of the whole lecture (not part of
#                          the repo; only carried)
#
#   scripts/gpu-bundle.sh [--reference DIR]
#
# The device copies the repo checkout plus carried paths of at most 64 MiB in
# all: the script stops if .carry/ grows past 60 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

reference=
while [ $# -gt 0 ]; do
    case "$1" in
        --reference) reference=${2:?--reference needs a folder}; shift 2 ;;
        *) echo "usage: $0 [--reference DIR]" >&2; exit 2 ;;
    esac
done

CARRY=.carry
LIMIT_MIB=60
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
say() { echo "gpu-bundle: $*" >&2; }

# ---- 1. the build ------------------------------------------------------------
if [ "$(make --no-print-directory -s print-cuda | tail -n 1)" != 1 ]; then
    say "no nvcc here (PATH or /usr/local/cuda): a GPU bundle needs a CUDA build"
    exit 1
fi
mkdir -p "$CARRY"
rm -rf "$CARRY/build"
say "building with CUDA into $CARRY/build"
make --no-print-directory -j"$(nproc)" CUDA=1 BUILD="$CARRY/build" all >"$stage/make.log" 2>&1 ||
    { cat "$stage/make.log" >&2; exit 1; }
grep "^lectern:" "$stage/make.log" >&2 || true
rm -f "$CARRY"/build/runtime/*/*.o   # only the binaries travel (the objects sit in layer folders)

# ---- 2. which Debian packages ------------------------------------------------
# What lectern's binaries and Open MPI's own programs and plugins load.
SEEDS=(libopenmpi3 openmpi-bin openmpi-common libpmix2 libcjson1 libmd4c0 libmd4c-html0
       libdw1 libelf1 libopenblas0-pthread libgfortran5 libhwloc15 hwloc libcmocka0 libxxhash0
       python3-jsonschema python3-attr python3-pyrsistent)
# Newer on any machine that has a CUDA toolkit: never shadow them (libc6-i386
# and the like also ship a libc.so.6, for other architectures).
NEVER=" libc6 libc6-i386 libc6-x32 libc6-amd64 libgcc-s1 libstdc++6 "

root=$stage/root
mkdir -p "$root" "$stage/debs"
declare -A have=()
fetch() {   # fetch PACKAGE...: download and unpack those not yet here
    local p
    for p in "$@"; do
        [ -n "${have[$p]:-}" ] && continue
        have[$p]=1
        (cd "$stage/debs" && apt-get download -q "$p" >/dev/null 2>"$stage/apt.err") ||
            { cat "$stage/apt.err" >&2; say "apt-get download $p failed"; exit 1; }
    done
    local deb
    for deb in "$stage"/debs/*.deb; do
        [ -e "$deb.done" ] && continue
        dpkg -x "$deb" "$root"
        touch "$deb.done"
    done
}

# The installed package that ships a file named SONAME, or nothing.
package_of() {
    local soname=$1
    { dpkg -S "*/$soname" 2>/dev/null || true; } | awk -F: 'NR == 1 { print $1 }'
}

fetch "${SEEDS[@]}"
# Follow NEEDED entries until every library is either carried or the C/C++
# runtime (or the CUDA driver and toolkit, which are not Debian packages).
while :; do
    missing=()
    while IFS= read -r soname; do
        [ -n "$(find "$root" -name "$soname" -print -quit)" ] && continue
        p=$(package_of "$soname")
        [ -z "$p" ] && continue                        # CUDA, NCCL: on the GPU machine
        case "$NEVER" in *" $p "*) continue ;; esac
        [ -n "${have[$p]:-}" ] && continue
        missing+=("$p")
    done < <({ find "$root" -type f; find "$CARRY/build" -type f -perm -u+x; } |
             while IFS= read -r f; do readelf -d "$f" 2>/dev/null || true; done |
             sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
    [ ${#missing[@]} -eq 0 ] && break
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    say "also needed: ${missing[*]}"
    fetch "${missing[@]}"
done

# ---- 3. trim, pack -----------------------------------------------------------
# Some packages still ship /lib, /bin: put everything under usr/, as merged-/usr
# systems see it, so one set of folders serves.
for d in lib bin sbin; do
    if [ -d "$root/$d" ]; then
        mkdir -p "$root/usr/$d"
        cp -a "$root/$d/." "$root/usr/$d/"
        rm -rf "${root:?}/$d"
    fi
done
rm -rf "$root"/usr/share/{doc,man,lintian,locale,bug,info}
# Links that Debian makes with update-alternatives, not in the packages.
ln -sf openblas-pthread/libopenblas.so.0 "$root/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
ln -sf orterun "$root/usr/bin/mpirun"
ln -sf orterun "$root/usr/bin/mpiexec"
rm -f "$CARRY/libs.tar.xz"
tar -C "$root" -cf - . | xz -6 -T0 >"$CARRY/libs.tar.xz"
for deb in "$stage"/debs/*.deb; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"; done |
    sort >"$CARRY/packages.txt"

# ---- 4. the reference lecture (optional) ------------------------------------
rm -rf "$CARRY/reference"
if [ -n "$reference" ]; then
    [ -f "$reference/lecture_08.py" ] || { say "no lecture_08.py in $reference"; exit 1; }
    mkdir -p "$CARRY/reference"
    cp "$reference/lecture_08.py" "$CARRY/reference/"
fi

# The build, packed too: its binaries keep their DWARF (lectern reads its own
# stack from it), so each test fixture is ~1.2 MiB and the folder ~85 MiB, over
# the device's 64 MiB; they share most of their bytes, and xz takes them to ~9.
say "packing the build"
rm -f "$CARRY/build.tar.xz"
tar -C "$CARRY" -cf - build | xz -6 -T0 >"$CARRY/build.tar.xz"
rm -rf "$CARRY/build"

size=$(du -sm "$CARRY" | cut -f1)
say "$(wc -l <"$CARRY/packages.txt") packages, $(du -sh "$CARRY/libs.tar.xz" | cut -f1) packed;" \
    ".carry/ is ${size} MiB (limit ${LIMIT_MIB})"
if [ "$size" -gt "$LIMIT_MIB" ]; then
    say "too large to carry"
    exit 1
fi
