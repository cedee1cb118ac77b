#!/usr/bin/env bash
# Verifies and measures everything GPU-side in one go, on a GPU machine that
# may have no network and none of lectern's libraries: run from the repo root
# with .carry/ (made by scripts/gpu-bundle.sh) beside it. docs/gpu.md.
#
#   1. the machine's facts: nvidia-smi (and topo -m), nvcc, glibc, CPUs, Python, PyTorch
#   2. the carried libraries: .carry/libs.tar.xz unpacked into /tmp, Open MPI
#      relocated there (OPAL_PREFIX ...); the machine's own copy of a general
#      library wins over the carried one, lectern's own dependencies are the
#      carried ones; NCCL from python3's nvidia/nccl package if there is one
#      then the GPUs lectern's build sees (tests/tools/gpu_probe) against the
#      GPUs nvidia-smi lists: a driver that lists GPUs the CUDA runtime cannot
#      use would make every GPU test skip, so that is a failure, with the cause;
#      the NCCL a spawn would load (tests/tools/nccl_probe: its version and
#      the build header's), /dev/shm, CUDA_MODULE_LOADING, free GPU memory
#   3. the tests: every C test (test_comm_staged: every collective on device
#      tensors of ranks sharing a GPU), tests/ranks/test_spawn.py, test_lecture_08.py,
#      test_lecture_gpu.py (its CUDA kernels run and are checked, also at
#      matrix sizes the tile does not divide), test_foundation.py,
#      test_p2p_order.py (on NCCL where there are two GPUs), test_cuda_sync.py
#      (a faulting kernel named at its launch line under LECTERN_CUDA_SYNC=1),
#      test_groups.py (process groups and all-to-all on device tensors: the
#      staged path on one GPU, NCCL's groups where there are two or more);
#      test_nccl_emu's one-rank cases on the real NCCL (recorded as a line);
#      compute-sanitizer's memcheck on the GPU tests, racecheck and synccheck
#      on lecture_gpu's kernels, all with LECTERN_CUDA_SYNC=1
#   4. the full lecture_08, three runs: the first becomes
#      traces/lecture_08.gpu.json (+ .js); wall time, the CUDA-streams section
#   5. benchmarks: bench_gpu (matmul vs bare cuBLAS, device copy, randn),
#      bench_alloc (cudaMalloc/cudaFree against the stream-ordered pool),
#      bench_spawn (with spawns of 4 ranks using the GPU), bench_allreduce
#      (device tensors of ranks sharing the GPU beside bare MPI on host
#      buffers), bench_groups (all-to-all and groups against bare MPI), then
#      bench/torch_anchor.py (PyTorch on the same machine:
#      spawn, gloo all_reduce on CPU and on cuda:0 tensors, matmul, the
#      reference lecture)
#
# Writes under $OUT (default .carry/out): gpu-check.log (everything),
# summary.md (facts, results, timings; a line per result as it comes),
# counts.txt (the counts so far, rewritten after every result: what is left
# when a command is stopped at the device's limit), bench.md (the benchmark tables),
# traces/lecture_08.gpu.json and .js. Ends with "N passed, N failed"; exit
# status 0 when nothing failed. Where there is no GPU the GPU parts skip and
# say why (that is the dry run of scripts/gpu-dryrun.sh).
#
#   bash scripts/gpu-check.sh [all|tests|bench|facts]   (OUT=..., PYTHON=..., LECTERN_BUILD=... optional)
#   bash scripts/gpu-check.sh device [--only STEP,STEP]  (GPU_CHECK_DEADLINE_S=420, GPU_CHECK_ONLY=...)
#
# device is the one call of a 15-minute device window (docs/gpu.md): steps
# 1 and 2, then named steps, GPU work first, each with a cap in seconds:
#
#   ipc      30   tests/tools/ipc_probe: do ranks sharing the GPU run the
#                 shared-GPU protocol (CUDA IPC)? an exact all-reduce, its busbw
#   cases   150   test_comm_staged (every case, 2-4 ranks, on the protocol
#                 and on the staged path), test_groups.py
#   order    45   test_shared_order: the forced-dependency test, both paths
#   bench   120   bench_shared_gpu: the protocol against the staged path,
#                 all-reduce, reduce-scatter, all-gather, all-to-all at 1, 16
#                 and 256 MiB on 2 and 4 ranks, each as a fraction of the
#                 device-to-device copy rate of the same run
#   traces  150   lecture_08, lecture_ddp, lecture_scaling on the GPU: their
#                 traces, as traces/NAME.gpu.json (+ .js), in traces.tar.xz
#   suites  120   the other GPU C suites (tensor, cuBLAS, NCCL at one rank)
#   kernels  60   test_cuda_sync.py, test_lecture_gpu.py
#
# A step whose cap does not fit in what is left of GPU_CHECK_DEADLINE_S
# (default 420 s) is written "not run: deadline" and not started; each step
# that ran has its seconds in summary.md. The summary ends with the command
# that reruns the failed and not-run steps only (--only), on the warm
# machine. Exit status 0 when nothing failed and every asked step ran.
#
# facts is steps 1 and 2 alone (and the GPU comparison): seconds.
# all (the default) is steps 1-5, about 10 minutes on a 16-core H100 machine;
# where one command may run at most 10 minutes, run `tests` (steps 1-4) and
# `bench` (steps 1, 2, 5) as two commands.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
case "$PART" in all|tests|bench|facts|device) ;; *) echo "usage: $0 [all|tests|bench|facts|device [--only STEP,...]]" >&2; exit 2 ;; esac
ONLY=${GPU_CHECK_ONLY:-}
if [ "${2:-}" = --only ]; then ONLY=${3:-}; fi
case "${2:-}" in ''|--only) ;; *) echo "usage: $0 device [--only STEP,...]" >&2; exit 2 ;; esac
DEVICE_STEPS="ipc cases order bench traces suites kernels"
for s in ${ONLY//,/ }; do
    case " $DEVICE_STEPS " in *" $s "*) ;; *) echo "gpu-check: no step '$s' (steps: $DEVICE_STEPS)" >&2; exit 2 ;; esac
done
[ -n "$ONLY" ] && [ "$PART" != device ] && { echo "gpu-check: --only names steps of 'device'" >&2; exit 2; }
DEADLINE_S=${GPU_CHECK_DEADLINE_S:-420}
case "$DEADLINE_S" in ''|*[!0-9]*) echo "gpu-check: GPU_CHECK_DEADLINE_S='$DEADLINE_S' is not a number of seconds" >&2; exit 2 ;; esac
ROOT=$PWD
START=$(date +%s)
# No benchmark starts after this many seconds (22 minutes; `bench` alone: 7).
BUDGET_S=${GPU_CHECK_BUDGET_S:-$([ "$PART" = bench ] && echo 420 || echo 1320)}
OUT=${OUT:-$ROOT/.carry/out}
mkdir -p "$OUT/traces"
SUMMARY=$OUT/summary.md
BENCH=$OUT/bench.md
WORK=$(mktemp -d /tmp/lectern-gpu-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee "$OUT/gpu-check.log") 2>&1

PY=${PYTHON:-python3}
# The build travels packed (scripts/gpu-bundle.sh): unpack it once.
if [ -z "${LECTERN_BUILD:-}" ] && [ ! -x .carry/build/lectures/lecture_08 ] && [ -f .carry/build.tar.xz ]; then
    echo "gpu-check: unpacking .carry/build.tar.xz"
    xz -dc .carry/build.tar.xz | tar -C .carry -xf - || { echo "gpu-check: .carry/build.tar.xz did not unpack" >&2; exit 1; }
fi
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
if [ -n "${LECTERN_BUILD:-}" ]; then BUILD=$LECTERN_BUILD
elif [ -x .carry/build/lectures/lecture_08 ]; then BUILD=.carry/build
else BUILD=build
fi
export LECTERN_BUILD=$BUILD LECTERN_ROOT_DIR=$ROOT
# Open MPI runs as root here and puts 4 ranks on however many cores there are.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

passed=0
failed=0
skipped=0
failures=()
: >"$SUMMARY"
: >"$BENCH"
md() { echo "$*" >>"$SUMMARY"; }
elapsed() { echo $(($(date +%s) - START)); }
section() { echo; echo "===== $* ($(elapsed) s)"; }

# The counts so far, after every result: a run stopped at the device's
# 10-minute limit still leaves them.
tally() { echo "$passed passed, $failed failed, $skipped skipped so far ($(elapsed) s; last: $1)" >"$OUT/counts.txt"; }
# ok NAME / bad NAME WHY / skip NAME WHY: one result line each.
ok() { passed=$((passed + 1)); md "| $1 | passed | |"; echo "== $1: passed"; tally "$1"; }
bad() { failed=$((failed + 1)); failures+=("$1"); md "| $1 | **FAILED** | $2 |"; echo "== $1: FAILED: $2"; tally "$1"; }
skip() { skipped=$((skipped + 1)); md "| $1 | skipped | $2 |"; echo "== $1: skipped: $2"; tally "$1"; }

# tests NAME COMMAND...: a test program; its own counts (cmocka or unittest).
tests() {
    local name=$1 log=$WORK/test.log p=0 f=0 k=0 rc line n verdict
    shift
    echo "== $name"
    # Under the device's 10-minute limit a command, so one slow suite cannot
    # take the summary with it.
    # In a device step: what is left of the step's cap.
    local limit=${GPU_CHECK_TEST_LIMIT_S:-540}
    if [ -n "${STEP_END:-}" ]; then limit=$((STEP_END - $(date +%s))); [ "$limit" -lt 1 ] && limit=1; fi
    timeout "$limit" "$@" >"$log" 2>&1
    rc=$?
    [ "$rc" -eq 124 ] && echo "[timed out] $name: stopped after $limit s" >>"$log"
    cat "$log"
    if grep -qE '^\[  PASSED  \] [0-9]+ test' "$log"; then
        p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        f=$(grep -oE '^\[  FAILED  \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        k=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
    elif line=$(grep -E '^Ran [0-9]+ tests?' "$log" | tail -1); [ -n "$line" ]; then
        n=$(echo "$line" | grep -oE '[0-9]+' | head -1)
        verdict=$(grep -E '^(OK|FAILED)( \(|$)' "$log" | tail -1)
        f=$(echo "$verdict" | grep -oE '(failures|errors)=[0-9]+' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        k=$(echo "$verdict" | grep -oE 'skipped=[0-9]+' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        p=$((n - f - k))
    fi
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1   # crashed without saying how many
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
    [ "$f" -gt 0 ] && failures+=("$name")
    # Each skip's reason, as the test printed it.
    local why
    why=$(grep -hoE '^skipped: .*|skipped .*\) \.\.\. skipped .*|test_comm: the NCCL path is not covered here: .*' "$log" |
          sort -u | head -3 | paste -sd';' -)
    md "| $name | $p passed, $f failed, $k skipped | ${why} |"
    echo "== $name: $p passed, $f failed, $k skipped"
    tally "$name"
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpus=${gpus:-0}

# ---------------------------------------------------------------- 1. facts
section "the machine"
md "# GPU check ($PART), $(date -u +%Y-%m-%dT%H:%MZ)"
md ""
md "## The machine"
md ""
md '```'
{
    echo "host: $(hostname); $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null | cut -d= -f2 | tr -d '"')"
    echo "kernel: $(uname -srm)"
    echo "glibc: $(ldd --version 2>/dev/null | head -1)"
    echo "CPUs: $(nproc); memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "GPUs (nvidia-smi -L): $gpus"
    nvidia-smi -L 2>/dev/null
    # Exclusive-process or prohibited: spawns fall back to the CPU (docs/gpu.md).
    [ "$gpus" -gt 0 ] && echo "compute mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | paste -sd, -)"
    nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    if [ -x "$nvcc_bin" ]; then echo "nvcc: $("$nvcc_bin" --version | tail -2 | head -1)"; else echo "nvcc: none"; fi
    echo "python: $($PY --version 2>&1) at $(command -v "$PY")"
    timeout "$([ "$PART" = device ] && echo 30 || echo 120)" "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
        "GPUs", torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>&1 | tail -1
    echo "NCCL on the system: $( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p) | grep -m1 'libnccl.so.2 ' | sed 's/.*=> //')"
    # NCCL and Open MPI keep their shared memory here; Docker's default 64 MB
    # fails a first multi-rank NCCL run (docs/gpu.md).
    echo "/dev/shm: $(df -h /dev/shm 2>/dev/null | awk 'NR == 2 {print $2 " size, " $4 " free"}')"
    echo "CUDA_MODULE_LOADING: ${CUDA_MODULE_LOADING:-unset, so lazy: the CUDA default since 12.2}"
    [ "$gpus" -gt 0 ] && echo "GPU memory free: $(nvidia-smi --query-gpu=memory.free,memory.total --format=csv,noheader 2>/dev/null | paste -sd';' -)"
    echo "build: $BUILD (carried: $([ -f .carry/libs.tar.xz ] && echo yes || echo no))"
} | tee -a "$SUMMARY"
md '```'
if [ "$gpus" -gt 0 ]; then
    md ""
    md '```'
    nvidia-smi 2>&1 | tee -a "$SUMMARY"
    nvidia-smi topo -m 2>&1 | tee -a "$SUMMARY"
    md '```'
fi
md ""
md "## Results"
md ""
md "| check | result | notes |"
md "|---|---|---|"

# ---------------------------------------------------------------- 2. libraries
section "carried libraries"
# Lectern's own dependencies: always the carried copies (what was tested
# with). Anything else (zlib, libudev ...): the machine's copy when it has one.
OURS='^lib(mpi|open-|oshmem|mca_|ompitrace|pmix|hwloc|cjson|md4c|dw|elf|openblas|cmocka|gfortran|quadmath|event|fabric|ucx|uc[mpst]|psm|munge)'
setup_carry() {
    local tarball=$ROOT/.carry/libs.tar.xz
    if [ ! -f "$tarball" ]; then
        echo "no .carry/libs.tar.xz: using this machine's own libraries"
        return 0
    fi
    PFX=${LECTERN_CARRY_DIR:-/tmp/lectern-carry}
    rm -rf "$PFX"
    mkdir -p "$PFX/shadowed"
    xz -dc "$tarball" | tar -C "$PFX" -xf - || return 1
    local lib=$PFX/usr/lib/x86_64-linux-gnu f name sys kept=0 shadowed=0
    for f in "$lib"/lib*.so*; do
        name=$(basename "$f")
        if [[ $name =~ $OURS ]]; then kept=$((kept + 1)); continue; fi
        sys=$( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p) | awk -v n="$name" '$1 == n { print $NF; exit }')
        if [ -n "$sys" ] && [ -s "$sys" ]; then
            mv "$f" "$PFX/shadowed/"
            shadowed=$((shadowed + 1))
        else
            kept=$((kept + 1))
        fi
    done
    echo "carried libraries in $PFX: $kept used, $shadowed left to the machine's own copies"
    # Open MPI and PMIx, relocated: every folder they were built with under
    # /usr (plugins, help texts) is found under the new prefix instead.
    export OPAL_PREFIX=$PFX/usr
    export OPAL_SYSCONFDIR=$PFX/etc/openmpi
    # PMIx's plugins and help texts: it reads its folders from these.
    export PMIX_INSTALL_PREFIX=$lib/pmix2 PMIX_LIBDIR=$lib/pmix2/lib PMIX_PKGLIBDIR=$lib/pmix2/lib/pmix
    export PMIX_DATADIR=$lib/pmix2/share PMIX_PKGDATADIR=$lib/pmix2/share/pmix
    export PATH=$PFX/usr/bin:$PATH
    LD_LIBRARY_PATH=$lib/openmpi/lib:$lib/pmix2/lib:$lib/openblas-pthread:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    CARRY_PYTHONPATH=$PFX/usr/lib/python3/dist-packages
}
CARRY_PYTHONPATH=
setup_rc=0
setup_carry || setup_rc=1
# NCCL: the one lectern was built against may not be here; python3's
# nvidia/nccl (PyTorch's) first, else the system's.
nccl_dir=$("$PY" -c 'import site, os
for d in site.getsitepackages() + [site.getusersitepackages()]:
    p = os.path.join(d, "nvidia", "nccl", "lib")
    if os.path.exists(os.path.join(p, "libnccl.so.2")): print(p); break' 2>/dev/null || true)
[ -n "$nccl_dir" ] && LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
echo "OPAL_PREFIX=${OPAL_PREFIX:-}"
# What the lecture loads, and from where.
ldd "$BUILD/lectures/lecture_08" | tee "$WORK/ldd.txt"
if [ "$setup_rc" -ne 0 ]; then
    bad "carried libraries" "unpacking .carry/libs.tar.xz failed"
elif grep -q "not found" "$WORK/ldd.txt"; then
    bad "carried libraries" "$(grep 'not found' "$WORK/ldd.txt" | awk '{print $1}' | paste -sd' ' -) not found"
elif [ -n "${OPAL_PREFIX:-}" ] && ! grep -q "libmpi.so.40 => $OPAL_PREFIX" "$WORK/ldd.txt"; then
    bad "carried libraries" "libmpi is not the carried one: $(grep libmpi "$WORK/ldd.txt")"
else
    ok "carried libraries ($(grep -c '=> /' "$WORK/ldd.txt") loaded; libmpi $(grep -o 'libmpi.so.40 => [^ ]*' "$WORK/ldd.txt" | cut -d' ' -f3))"
fi
md "| NCCL used | ${nccl_dir:-from the system folders (ld.so.cache)} | |"
# Open MPI relocated: a spawn of 4 ranks must load every plugin it tries
# (a leftover path to /usr would show as "unable to open ... (ignored)").
if timeout "$([ "$PART" = device ] && echo 60 || echo 300)" "$BUILD/tests/fixtures/spawn_basic" --quiet --out "$WORK/smoke" >"$WORK/smoke.log" 2>&1 &&
    ! grep -qE "unable to open|file too short|cannot open shared" "$WORK/smoke.log"; then
    ok "Open MPI spawn of 4 ranks, every plugin loaded"
else
    cat "$WORK/smoke.log"
    bad "Open MPI spawn of 4 ranks" "$(grep -m1 -E 'unable to open|file too short|error' "$WORK/smoke.log" | cut -c1-200)"
fi

# The GPUs lectern's build sees, against the GPUs the driver lists. With a
# driver or runtime mismatch every GPU test would skip and the run would read
# "0 failed" without having tested a GPU.
probe_bin=$BUILD/tests/tools/gpu_probe
if [ ! -x "$probe_bin" ]; then
    bad "GPUs lectern sees" "no $probe_bin (build first: make)"
else
    probe=$("$probe_bin" 2>&1)
    echo "$probe"
    seen=$(echo "$probe" | sed -n 's/^lectern gpu_count: \([0-9]*\)$/\1/p')
    why_not=$(echo "$probe" | grep -E '^cuda (runtime|versions):' | paste -sd';' -)
    if [ -z "$seen" ]; then
        bad "GPUs lectern sees" "gpu_probe said nothing readable: $(echo "$probe" | head -1)"
    elif [ "$gpus" -gt 0 ] && [ "$seen" -eq 0 ]; then
        bad "GPUs lectern sees" "nvidia-smi lists $gpus GPU(s) but lectern's CUDA runtime sees none ($why_not): every GPU test would skip"
    elif [ "$gpus" -gt 0 ]; then
        ok "GPUs lectern sees ($seen of the $gpus nvidia-smi lists)"
    else
        skip "GPUs lectern sees" "nvidia-smi lists no GPU (lectern sees $seen)"
    fi
fi

# The NCCL the lecture would load at an NCCL spawn (dlopen, never linked:
# runtime/comm/nccl_library.c), against the header it was built with. Where a
# GPU is, one that does not load (or is older than 2.18) is a failure: NCCL
# spawns would be refused; without a GPU nothing would load it.
nccl_probe=$BUILD/tests/tools/nccl_probe
if [ ! -x "$nccl_probe" ]; then
    bad "NCCL loads" "no $nccl_probe (build first: make)"
else
    nccl_said=$("$nccl_probe" 2>&1)
    nccl_rc=$?
    echo "$nccl_said"
    nccl_line=$(echo "$nccl_said" | paste -sd';' - | sed 's/|/\\|/g')
    if [ "$nccl_rc" -eq 0 ]; then
        ok "NCCL loads ($nccl_line)"
    elif [ "$gpus" -gt 0 ]; then
        bad "NCCL loads" "$nccl_line"
    else
        skip "NCCL loads" "no GPU, nothing would load it: $nccl_line"
    fi
fi

if [ "$PART" = device ]; then
    . scripts/gpu-check-device.sh
fi

if [ "$PART" != bench ] && [ "$PART" != facts ] && [ "$PART" != device ]; then
# ---------------------------------------------------------------- 3. tests
section "tests"
for t in "$BUILD"/tests/*/test_*; do
    [ -x "$t" ] || continue
    tests "${t#"$BUILD"/tests/}" "$t"
done
# test_nccl_emu's one-rank cases (the table's plumbing, which make test runs
# on the emulator) on the real NCCL: the only run nccl_library.c's calls get
# on one GPU. The suite ran above; this line says whether that case ran.
if [ "$gpus" -eq 0 ]; then
    skip "NCCL table at one rank on the real NCCL" "no GPU"
elif grep -q '^\[       OK \] test_library_plumbing' <(timeout 120 "$BUILD/tests/comm/test_nccl_emu" 2>&1); then
    ok "NCCL table at one rank on the real NCCL (test_nccl_emu's plumbing cases)"
else
    bad "NCCL table at one rank on the real NCCL" "test_nccl_emu's test_library_plumbing did not pass (skipped or failed: see its output above)"
fi
# The GPU-specific suites first (a command stopped at the device's limit
# loses the least), the sanitizers, then the suites that also run on the CPU.
for t in tests/tensor/test_cuda_sync.py tests/lectures/test_lecture_gpu.py; do
    tests "$(basename "$t")" env PYTHONPATH="$CARRY_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$t"
done
if [ "$gpus" -eq 0 ]; then
    skip "compute-sanitizer (memcheck, racecheck, synccheck)" "no GPU"
elif ! command -v compute-sanitizer >/dev/null && [ ! -x /usr/local/cuda/bin/compute-sanitizer ]; then
    skip "compute-sanitizer (memcheck, racecheck, synccheck)" "no compute-sanitizer"
else
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    # sanitize LABEL TOOL [OPTION...] -- COMMAND...: one compute-sanitizer run
    # with LECTERN_CUDA_SYNC=1 (each kernel waited for at its launch, so a
    # fault is reported at the launch's file:line: docs/gpu.md); a result line
    # with its summary, or why it failed.
    sanitize() {
        local label=$1 tool=$2 rc why opts=()
        shift 2
        while [ "$1" != -- ]; do opts+=("$1"); shift; done
        shift
        LECTERN_CUDA_SYNC=1 timeout "${GPU_CHECK_TEST_LIMIT_S:-540}" "$cs" --tool "$tool" "${opts[@]}" \
            --error-exitcode 3 "$@" >"$WORK/cs.log" 2>&1
        rc=$?
        why=$(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$WORK/cs.log" || true)
        if [ "$rc" -eq 0 ]; then
            ok "$label${opts[*]:+ (${opts[*]})} ($why)"
            return
        fi
        tail -30 "$WORK/cs.log"
        [ "$rc" -eq 124 ] && why="stopped after ${GPU_CHECK_TEST_LIMIT_S:-540} s (GPU_CHECK_TEST_LIMIT_S)"
        bad "$label" "${why:-exit status $rc}"
    }
    for t in test_random test_tensor; do
        sanitize "memcheck $t" memcheck -- "$BUILD/tests/tensor/$t"
    done
    # lecture_gpu's own kernels: races on shared memory (a missing
    # __syncthreads in tiled_matmul) and barriers not every thread reaches;
    # 100 is not a multiple of the tile, so edge blocks have idle threads.
    # racecheck instruments every kernel's shared memory, cuBLAS's large
    # products too: on an H200 (2026-11-28) the whole lecture under it ran past
    # 200 s. Where compute-sanitizer can filter kernels by name, racecheck
    # looks at the two kernels with shared memory and a barrier: lecture_gpu's
    # tiled_matmul, and the runtime's sum_kernel (test_tensor's sums).
    lecture_gpu=("$BUILD/lectures/lecture_gpu" --quick --quiet --matmul-n=100)
    if "$cs" --help 2>&1 | grep -q -- '--kernel-name '; then
        sanitize "racecheck lecture_gpu kernels" racecheck --kernel-name kns=tiled_matmul -- \
            "${lecture_gpu[@]}" --out "$WORK/cs-racecheck"
        sanitize "racecheck test_tensor" racecheck --kernel-name kns=sum_kernel -- "$BUILD/tests/tensor/test_tensor"
    else
        echo "compute-sanitizer has no --kernel-name: racecheck looks at every kernel (slow)"
        sanitize "racecheck lecture_gpu kernels" racecheck -- "${lecture_gpu[@]}" --out "$WORK/cs-racecheck"
    fi
    sanitize "synccheck lecture_gpu kernels" synccheck -- "${lecture_gpu[@]}" --out "$WORK/cs-synccheck"
fi

for t in tests/lectures/test_lecture_08.py tests/ranks/test_spawn.py tests/comm/test_groups.py tests/trace/test_foundation.py; do
    tests "$(basename "$t")" env PYTHONPATH="$CARRY_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$t"
done
# test_p2p_order.py: isend; all_reduce; wait against all_reduce; recv. It
# shows something about NCCL only where each rank has a GPU of its own; on one
# GPU its spawns run on Open MPI, as make test's run on the CPU (docs/gpu.md).
if [ "$gpus" -ge 2 ]; then
    tests test_p2p_order.py env PYTHONPATH="$CARRY_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$PY" tests/comm/test_p2p_order.py
else
    skip "test_p2p_order.py on NCCL" "$gpus GPU(s): NCCL refuses two ranks on one GPU, so its spawns would run on Open MPI as on the CPU"
fi

# ---------------------------------------------------------------- 4. lecture_08
section "lecture_08, full, three runs"
times=()
for i in 1 2 3; do
    mkdir -p "$WORK/lecture$i"
    t0=$(date +%s.%N)
    if timeout 300 "$BUILD/lectures/lecture_08" --quiet --out "$WORK/lecture$i" >"$WORK/lecture$i.log" 2>&1; then
        t1=$(date +%s.%N)
        times+=("$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')")
    else
        tail -20 "$WORK/lecture$i.log"
        bad "lecture_08 run $i" "exit status nonzero: $(tail -1 "$WORK/lecture$i.log")"
    fi
done
if [ -f "$WORK/lecture1/lecture_08.json" ]; then
    # The trace as traces/lecture_08.gpu.json, and its .js twin under the key
    # the viewer asks for with ?trace=lecture_08.gpu.
    cp "$WORK/lecture1/lecture_08.json" "$OUT/traces/lecture_08.gpu.json"
    sed '1s/^(window\.lecternTraces = window\.lecternTraces || {})\["lecture_08"\]/(window.lecternTraces = window.lecternTraces || {})["lecture_08.gpu"]/' \
        "$WORK/lecture1/lecture_08.js" >"$OUT/traces/lecture_08.gpu.js"
    if PYTHONPATH="$CARRY_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$OUT/traces/lecture_08.gpu.json" \
        "${times[*]:-}" >"$WORK/stats.txt" 2>&1 <<'PY'
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "lib"))
import tracecheck
path, walls = sys.argv[1], [float(x) for x in sys.argv[2].split()]
tracecheck.validate(path)  # schema, the .js twin, every stack line against the source
key, _ = tracecheck.load_js_twin(path[:-5] + ".js")
assert key == "lecture_08.gpu", key
t = tracecheck.load(path)
steps = [s for s in t["steps"] if s["rank"] is None]
text = lambda s: (s["renderings"][0].get("data") or "") if s["renderings"] else ""
start = next(i for i, s in enumerate(steps) if text(s).startswith("## CUDA streams"))
end = next((i for i in range(start + 1, len(steps)) if text(steps[i]).startswith("## ")), len(steps) - 1)
setup = next((i for i in range(start, end) if text(steps[i]).startswith("Matrices of")), None)
timed = [text(s) for s in steps[start:end] if text(s).startswith(("matmul alone", "copy alone", "one stream",
                                                                     "two streams"))]
print("trace: %d steps, gpus %s, backend %s, duration %.2f s" % (len(t["steps"]), t["meta"]["gpus"],
      t["meta"]["backend"], t["meta"]["duration_s"]))
print("wall times: %s s (median %.2f s)" % (", ".join("%.2f" % w for w in walls), statistics.median(walls)))
print("CUDA-streams section: %.2f s in all; set-up before its first figure: %s" % (
    steps[end]["time"] - steps[start]["time"],
    "%.2f s" % (steps[setup]["time"] - steps[setup - 1]["time"]) if setup else "not run (no GPU)"))
for line in timed:
    print("  " + line)
for s in t["spawns"]:
    print("spawn of %d: %s, %.2f s (start-up %.2f s)" % (s["world_size"], s["backend"], s.get("seconds", 0),
          s.get("startup_s", 0)))
PY
    then
        cat "$WORK/stats.txt"
        ok "lecture_08 trace ($(head -1 "$WORK/stats.txt"))"
        md ""
        md '```'
        cat "$WORK/stats.txt" >>"$SUMMARY"
        md '```'
        md ""
    else
        cat "$WORK/stats.txt"
        bad "lecture_08 trace" "$(tail -1 "$WORK/stats.txt")"
    fi
else
    bad "lecture_08 trace" "no trace written"
fi

fi   # tests and lecture

if [ "$PART" != tests ] && [ "$PART" != facts ] && [ "$PART" != device ]; then
# ---------------------------------------------------------------- 5. benchmarks
section "benchmarks"
# bench NAME TIMEOUT COMMAND...: output into $WORK/NAME.txt and bench.md.
bench() {
    local name=$1 limit=$2
    shift 2
    if [ "$(elapsed)" -gt "$BUDGET_S" ]; then
        skip "$name" "over the time budget (${BUDGET_S} s)"
        return
    fi
    echo "== $name"
    { echo; echo "## $name"; echo; } >>"$BENCH"
    timeout "$limit" "$@" >"$WORK/$name.txt" 2>"$WORK/$name.err"
    local rc=$?
    cat "$WORK/$name.txt" "$WORK/$name.err"
    cat "$WORK/$name.txt" >>"$BENCH"
    if [ "$rc" -eq 0 ]; then
        if grep -q "skipped:" "$WORK/$name.txt"; then skip "$name" "$(grep -m1 -o 'skipped: .*' "$WORK/$name.txt" | cut -c10-)"
        else ok "$name"; fi
    else
        bad "$name" "exit status $rc: $(tail -1 "$WORK/$name.err")"
    fi
}
export LECTERN_OUT=$WORK/bench-traces
mkdir -p "$LECTERN_OUT"
# cudaMalloc/cudaFree against the stream-ordered pool, idle and beside a copy
# in flight: first, being short and what the pool was written for
bench bench_alloc 120 "$BUILD/bench/bench_alloc"
bench bench_gpu 300 "$BUILD/bench/bench_gpu"
bench bench_spawn 180 "$BUILD/bench/bench_spawn"
bench bench_allreduce 420 "$BUILD/bench/bench_allreduce"
# groups and all-to-all against bare MPI: on 16 cores the agreement check's
# cost without ranks outnumbering the cores (6.5 s on the 2-core VM)
bench bench_groups 120 "$BUILD/bench/bench_groups"
ref=()
[ -f .carry/reference/lecture_08.py ] &&
    ref=(--reference .carry/reference/lecture_08.py --ours-lecture "$BUILD/lectures/lecture_08")
# PyTorch with the machine's libraries only (its own bundled ones must not meet
# the carried copies); lectern's lecture, which it times too, with ours.
bench torch_anchor 540 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" LECTERN_LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
    "$PY" bench/torch_anchor.py --ours-spawn "$WORK/bench_spawn.txt" \
    --ours-allreduce "$WORK/bench_allreduce.txt" --ours-gpu "$WORK/bench_gpu.txt" "${ref[@]}"
[ ${#ref[@]} -eq 0 ] && skip "reference lecture" "no .carry/reference/lecture_08.py (scripts/gpu-bundle.sh --reference DIR)"
fi   # benchmarks

# ---------------------------------------------------------------- the end
section "done"
md ""
if [ "$PART" = device ]; then
    md "Total: $(elapsed) s of a $DEADLINE_S s deadline. Files: summary.md, bench.md, gpu-check.log, counts.txt (and traces.tar.xz where the traces step wrote some)."
    device_summary
else
    md "Total: $(elapsed) s. Files: summary.md, bench.md, gpu-check.log, traces/lecture_08.gpu.json (+ .js)."
fi
echo
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "took $(elapsed) s; results in $OUT"
echo "$passed passed, $failed failed, $skipped skipped${notrun:+, $notrun not run (deadline)}" | tee -a "$SUMMARY"
[ "$failed" -eq 0 ] && [ "${notrun:-0}" -eq 0 ]
