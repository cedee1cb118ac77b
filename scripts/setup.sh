#!/usr/bin/env bash
# Installs what lectern needs and is missing: Debian packages (apt-get) and
# the viewer's npm packages. Quick when everything is there already.
# As a non-root user without sudo rights it prints the command to run.
#
#   scripts/setup.sh run    what building and running lectures needs
#   scripts/setup.sh test   that, plus what the tests need (the default)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in run|test) ;; *) echo "usage: $0 [run|test]" >&2; exit 2 ;; esac

# Build and run: compiler, Open MPI, JSON, markdown, DWARF, BLAS, hashing (xxHash), CPU topology,
# and npm for the viewer's libraries.
PACKAGES=(build-essential pkg-config
          libopenmpi-dev openmpi-bin libcjson-dev libmd4c-dev libmd4c-html0-dev
          libdw-dev libelf-dev libopenblas-dev libxxhash-dev hwloc python3
          nodejs npm libsimgrid-dev)
# Tests: cmocka, the schema validator, Chromium, its headless shell (what the
# viewer's tests drive: it starts and loads pages for less CPU) and its driver,
# sshd for the second host of tests/system/test_two_hosts.py, Slurm and munge for
# the one-node cluster of tests/system/test_slurm.py (which starts its own daemons
# with its own config and key; the system's services are not used). SimGrid (the
# twin's replay: make twin, the lectures' simulated figures, tests/twin/) is in
# the base list: a lecture run without it says its simulated figures are missing
# and lectern still builds.
if [ "$mode" = test ]; then
    PACKAGES+=(libcmocka-dev python3-jsonschema chromium chromium-headless-shell chromium-driver python3-selenium gcovr clang-format
               openssh-server slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
    # node and npm may come from elsewhere than Debian (nodesource, nvm): then they are not missing.
    really=()
    for p in "${missing[@]}"; do
        case "$p" in
            nodejs) command -v node >/dev/null || really+=("$p") ;;
            npm) command -v npm >/dev/null || really+=("$p") ;;
            *) really+=("$p") ;;
        esac
    done
    missing=("${really[@]+"${really[@]}"}")
fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo"
    else
        echo "setup: these Debian packages are missing; please run:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >&2
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The viewer's libraries (highlight.js, vega-embed ...), pinned by package-lock.json.
if [ -f package-lock.json ]; then
    if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
        echo "setup: npm ci (viewer libraries)" >&2
        npm ci --no-audit --no-fund --loglevel=error >&2
    fi
fi

if [ ! -x "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" ]; then
    echo "setup: no CUDA toolkit found: building for CPU only (Open MPI + OpenBLAS)" >&2
fi
