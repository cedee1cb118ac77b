#!/usr/bin/env bash
# Where NCCL is, for the Makefile. The CUDA toolkit does not ship NCCL: it is
# a package of its own, so it may sit in any of these places, searched in
# this order:
#
#   1. $NCCL_HOME               (include/nccl.h, lib/ or lib64/); when set,
#                               it is the only place looked at
#   2. the CUDA folder          $CUDA_HOME/include, $CUDA_HOME/lib64 or lib
#   3. the system folders       /usr/include, /usr/lib/<multiarch>, /usr/lib64, /usr/lib
#   4. a Python environment's   <site-packages>/nvidia/nccl/{include,lib}, for
#      nvidia/nccl package      every site folder of `python3` (PyTorch's wheels
#                               bring one)
#
# Prints one line of words: INCLUDE_DIR LIB_DIR LINK_FLAG VERSION WHERE...
# (WHERE is the rest of the line, for people), or, when there is no NCCL,
# "none - - - " followed by the places searched. Exit status 0 either way.
#
#   CUDA_HOME=/usr/local/cuda NCCL_HOME= bash scripts/find-nccl.sh
set -uo pipefail

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}

# A library folder of $1 that holds libnccl: prints "DIR FLAG". A pip wheel
# ships only libnccl.so.2 (no libnccl.so link), which -lnccl would not find.
lib_in() {
    local d
    for d in "$@"; do
        if [ -e "$d/libnccl.so" ]; then echo "$d -lnccl"; return 0; fi
        if [ -e "$d/libnccl.so.2" ]; then echo "$d -l:libnccl.so.2"; return 0; fi
    done
    return 1
}

# "2.28.9" from nccl.h's NCCL_MAJOR/MINOR/PATCH.
version_of() {
    local h=$1/nccl.h major minor patch
    major=$(sed -n 's/^#define NCCL_MAJOR \([0-9]*\).*/\1/p' "$h" | head -1)
    minor=$(sed -n 's/^#define NCCL_MINOR \([0-9]*\).*/\1/p' "$h" | head -1)
    patch=$(sed -n 's/^#define NCCL_PATCH \([0-9]*\).*/\1/p' "$h" | head -1)
    echo "${major:-?}.${minor:-?}.${patch:-?}"
}

# found INCLUDE_DIR "LIB_DIR FLAG" WHERE...
found() {
    local inc=$1 lib=$2
    shift 2
    echo "$inc $lib $(version_of "$inc") $*"
    exit 0
}

if [ -n "${NCCL_HOME:-}" ]; then
    if [ -f "$NCCL_HOME/include/nccl.h" ] && lib=$(lib_in "$NCCL_HOME/lib" "$NCCL_HOME/lib64"); then
        found "$NCCL_HOME/include" "$lib" "NCCL_HOME ($NCCL_HOME)"
    fi
    echo "none - - - NCCL_HOME=$NCCL_HOME (no include/nccl.h with lib/libnccl.so there)"
    exit 0
fi

if [ -f "$CUDA_HOME/include/nccl.h" ] && lib=$(lib_in "$CUDA_HOME/lib64" "$CUDA_HOME/lib"); then
    found "$CUDA_HOME/include" "$lib" "the CUDA folder ($CUDA_HOME)"
fi

multiarch=$(${CC:-cc} -print-multiarch 2>/dev/null || true)
if [ -f /usr/include/nccl.h ] &&
    lib=$(lib_in ${multiarch:+/usr/lib/$multiarch} /usr/lib64 /usr/lib); then
    found /usr/include "$lib" "the system folders (/usr/include, ${lib%% *})"
fi

# site.getsitepackages() and the user's site folder: where pip put nvidia-nccl-cu*.
sites=$("$PYTHON" -c 'import site
for d in site.getsitepackages() + [site.getusersitepackages()]: print(d)' 2>/dev/null || true)
while IFS= read -r d; do
    [ -n "$d" ] || continue
    n=$d/nvidia/nccl
    if [ -f "$n/include/nccl.h" ] && lib=$(lib_in "$n/lib"); then
        found "$n/include" "$lib" "$PYTHON's nvidia/nccl package ($n)"
    fi
done <<<"$sites"

echo "none - - - searched NCCL_HOME (unset), $CUDA_HOME, /usr/include, $PYTHON's site-packages/nvidia/nccl"
