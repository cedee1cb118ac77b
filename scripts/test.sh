#!/usr/bin/env bash
# Runs every test and closes with one line: "N passed, N failed, N skipped".
#
#   1. the script tests that bound a time (progress, deadlock, timer):
#      progress alone on the machine, the others beside the start of 3.
#   2. C unit tests (cmocka: build/tests/FOLDER/test_*), the layer check (make
#      check-layers: runtime/'s folders call each other one way only), the
#      style check (make format-check: .clang-format), that every planted
#      bug of make mutate still finds its text (mutate.py --check), the other script
#      tests (tests/FOLDER/test_*.py: unittest, Debian's python3) and the browser
#      tests of the viewer (tests/viewer/run.sh, headless Chromium), in two
#      lanes (see "Lanes" below)
#   3. meanwhile (from the end of test_progress on), the sanitizer and
#      CPU-only builds (4., 5.), niced, in the background (LECTERN_JOBS
#      jobs, the number of cores by default); in the quick scope 4. and 5.
#      are at the end of 2.'s list, each waiting for its build, in the all
#      scope they run after it, in one lane
#   4. the C tests and the runtime's script tests (foundation, spawn, checks,
#      leaks, values returned, NCCL loading, the NCCL backend on its emulator
#      but for lecture_08; in the all scope also misuse, lecture_08,
#      lecture_collectives, lecture_ddp, lecture_gpu and more) again, built
#      with AddressSanitizer + UBSan (build-asan/), unless LECTERN_NO_ASAN=1;
#      a sanitizer's report anywhere (a rank's included) fails its suite
#   5. where nvcc is present, the CPU-only build (make CUDA=0, build-cpu/):
#      it must build without warnings and pass the C tests and lecture_ddp's
#      and lecture_gpu's tests (and lecture_08's and the NCCL emulator's
#      suite, which every build has, in the all scope;
#      lecture_gpu's CUDA kernels are left out of that build); in the quick
#      scope beside the sanitizer pass
#
# lecture_08's numbers are checked under this CPU's OpenBLAS kernels and,
# in the first pass, under older ones too (tests/lectures/test_lecture_08.py);
# LECTERN_OTHER_KERNELS=0 leaves those out. LECTERN_LANES=0 runs everything
# one after the other (one core, or to compare).
#
# Each test program's own summary is printed as it runs (a lane's when the
# lane ends); the counts below are individual test cases where the runner
# reports them, and each suite's line ends with its seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
export LECTERN_ROOT_DIR=$PWD
PY=/usr/bin/python3
passed=0
failed=0
skipped=0
failures=()
# Failures by kind: a run whose ranks never started, or that ran out of time,
# is not a wrong result (tests/lib/tracecheck.py marks each failure's message).
launch_failures=0
timeouts=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Open MPI wants these to run as root and to put 4 ranks on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

count() {   # count <name> <exit status> [seconds [cpu]]: reads the runner's summary from $log
    local name=$1 rc=$2 secs=${3:-} cpu=${4:-} p=0 f=0 k=0 line
    if grep -qE '^\[  PASSED  \] [0-9]+ test' "$log"; then
        # cmocka prints one summary per group; a program may run several.
        p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        f=$(grep -oE '^\[  FAILED  \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        k=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
    elif line=$(grep -E '^Ran [0-9]+ tests?' "$log" | tail -1); [ -n "$line" ]; then
        # unittest: "Ran N tests", then "OK" or "FAILED (failures=F, errors=E, skipped=S)"
        local n verdict
        n=$(echo "$line" | grep -oE '[0-9]+' | head -1)
        verdict=$(grep -E '^(OK|FAILED)( \(|$)' "$log" | tail -1)
        f=$(echo "$verdict" | grep -oE '(failures|errors|unexpected successes)=[0-9]+' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        k=$(echo "$verdict" | grep -oE 'skipped=[0-9]+' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        p=$((n - f - k))
    elif line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1); [ -n "$line" ]; then
        p=$(echo "$line" | grep -oE '[0-9]+' | sed -n 1p)
        f=$(echo "$line" | grep -oE '[0-9]+' | sed -n 2p)
        k=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || true)
        k=${k:-0}
    fi
    # A runner that crashed or failed without saying how many counts as one failure.
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$f" -gt 0 ]; then
        local l t
        l=$(grep -cF '[ranks did not start]' "$log" || true)
        t=$(grep -cF '[timed out]' "$log" || true)
        # A C test (no markers) that failed because the runtime could not start
        # its ranks, or was stopped for making no progress, says so on stderr.
        if [ "$l" -eq 0 ] && [ "$t" -eq 0 ]; then
            if grep -qE 'did not start (them|[0-9]+ ranks?)|could not start them' "$log"; then l=$f
            elif [ "$rc" -eq 124 ] || grep -q 'made no progress for' "$log"; then t=$f; fi
        fi
        [ "$l" -gt "$f" ] && l=$f
        [ $((l + t)) -gt "$f" ] && t=$((f - l))
        launch_failures=$((launch_failures + l))
        timeouts=$((timeouts + t))
    fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$k" -eq 0 ]; then p=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
    [ "$f" -gt 0 ] && failures+=("$name")
    printf '== %-40s %s passed, %s failed, %s skipped%s\n' "$name" "$p" "$f" "$k" "${secs:+ ($secs s${cpu:+, $cpu CPU-s})}"
}

cpu_of() {   # cpu_of <file>: the CPU seconds in a `times` listing's children line ("0m1.250s 0m0.310s")
    awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { m = $i; sub(/m.*/, "", m); s = $i; sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); t += m * 60 + s }
                   printf "%d", t }' "$1"
}
run() {   # run <name> <command...>; RUN_LIMIT (seconds, default 900) bounds it
    local name=$1; shift
    local limit=${RUN_LIMIT:-900}
    echo "== $name"
    local t0=$SECONDS
    # The subshell's only child is the suite, so its `times` (user + system
    # of the children it waited for) is the suite's CPU time, whatever else
    # this shell or the other lane runs meanwhile.
    (timeout "$limit" "$@"; rc=$?; times >"$log.times"; exit $rc) 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] && echo "[timed out] $name ran for more than $limit s and was stopped" | tee -a "$log"
    count "$name" "$rc" $((SECONDS - t0)) "$(cpu_of "$log.times")"
    rm -f "$log.times"
}

# A suite's name in the listing: its path below tests/ (comm/test_groups.py).
suite_name() { local t=${1#*tests/}; echo "$t"; }

# Scope: "all" runs every suite in every configuration (make test-all, and
# CI); "quick" (make test) runs every suite on the normal build and, under
# AddressSanitizer and without CUDA, the suites that exercise what differs
# there: the runtime's memory (unit tests, spawn and pool, traces, leaks) and
# the code a CPU-only build compiles differently (unit tests, the lectures
# that pick their device). The browser suite steps through a sample of each
# lecture's steps instead of every step (tests/viewer/test_lectures.py), and
# the sanitizer build makes only what its pass runs (make test-bins).
SCOPE=${LECTERN_TEST_SCOPE:-all}
case "$SCOPE" in all|quick) ;; *) echo "test.sh: LECTERN_TEST_SCOPE is '$SCOPE': all or quick" >&2; exit 2 ;; esac
echo "== scope: $SCOPE (LECTERN_TEST_SCOPE; make test is quick, make test-all is all)"
[ "$SCOPE" = quick ] && export LECTERN_VIEWER_QUICK=1
started=$(date +%s)

# Lanes: on a machine with two cores or more, two lanes take the suites
# from one list, each the next one not yet taken (the longest are listed
# first); a lane in the background shows its output whole when it ends. The
# browser suite opens the background lane. The suites whose checks bound a
# time (TIMED below) run first, with no other suite beside them, and the all
# scope runs its sanitizer and CPU-only passes in one lane (they hold timed
# suites).
JOBS=${LECTERN_JOBS:-$(nproc 2>/dev/null || echo 2)}
lanes=0; [ "$JOBS" -ge 2 ] && [ "${LECTERN_LANES:-1}" != 0 ] && lanes=1
lane_dir=$(mktemp -d)
trap 'rm -rf "$log" "$lane_dir"' EXIT
items=()
take_items() {   # take_items <list>: runs the items of $items not taken yet (item "<how> <arg>", see item())
    local list=$1 i
    for i in "${!items[@]}"; do
        mkdir "$lane_dir/$list.$i" 2>/dev/null || continue   # atomic: only one lane takes item i
        item ${items[$i]}
    done
}
lane_start() {   # lane_start <name> <function...>: runs it in the background lane
    local name=$1; shift
    echo "== lane $name: running beside the suites below (its output comes when it ends)"
    (
        passed=0 failed=0 skipped=0 launch_failures=0 timeouts=0 failures=()
        log=$(mktemp)
        "$@" >"$lane_dir/$name.out" 2>&1
        rm -f "$log"
        { echo "$passed $failed $skipped $launch_failures $timeouts"
          [ ${#failures[@]} -gt 0 ] && printf '%s\n' "${failures[@]}"; } >"$lane_dir/$name.sum"
    ) &
    lane_pid=$!
}
lane_join() {   # lane_join <name>: waits for the background lane, shows its output, adds its counts
    local name=$1
    [ -n "${lane_pid:-}" ] || return 0
    wait "$lane_pid"
    lane_pid=
    echo "== lane $name: its output"
    cat "$lane_dir/$name.out"
    echo "== lane $name: end"
    local p f k l t rest
    { read -r p f k l t; mapfile -t rest; } <"$lane_dir/$name.sum"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
    launch_failures=$((launch_failures + l)); timeouts=$((timeouts + t))
    [ ${#rest[@]} -gt 0 ] && failures+=("${rest[@]}")
    return 0
}
in_lanes() {   # in_lanes <list> [first]: the items, in two lanes (first: what the background lane does before)
    local list=$1 first=${2:-}
    if [ $lanes = 1 ]; then
        lane_start "$list" eval "$first${first:+;} take_items $list"
        take_items "$list"
        lane_join "$list"
    else
        [ -n "$first" ] && $first
        take_items "$list"
    fi
}

BUILD=${BUILD:-build}
# The sanitizer and CPU-only builds are made in the background while the
# script and browser suites run, niced so that the suites keep their share
# of the cores; their output is shown only when they fail. The CUDA objects
# are compiled without the sanitizer's flags: the sanitizer build takes the
# normal build's copies (make rebuilds any that are older than their source).
start_builds() {
    asan_log=$(mktemp); cpu_log=$(mktemp)
    trap 'rm -rf "$log" "$lane_dir" "$asan_log" "$asan_log.rc" "$cpu_log" "$cpu_log.rc"' EXIT
    want_asan=0; [ "${LECTERN_NO_ASAN:-0}" != 1 ] && want_asan=1
    want_cpu=0; [ "$(make --no-print-directory -s -f Makefile print-cuda 2>/dev/null)" = 1 ] && want_cpu=1
    asan_targets=all; [ "$SCOPE" = quick ] && asan_targets=test-bins
    builds_pid=
    if [ $want_asan = 1 ] || [ $want_cpu = 1 ]; then
        echo "== building with AddressSanitizer + UBSan (build-asan/, make $asan_targets) and without CUDA (build-cpu/), in the background"
        if [ $want_asan = 1 ] && [ "$BUILD" = build ]; then
            (cd build && find runtime lectures -name '*.cu.o' 2>/dev/null) | while read -r o; do
                [ -e "build-asan/$o" ] && continue
                mkdir -p "build-asan/$(dirname "$o")" && cp -p "build/$o" "build-asan/$o"
            done
        fi
        # Each build writes "<status> <when>" to its .rc file as it ends, so a
        # pass can start as soon as its own build is there (build_ready).
        (
            [ $want_asan = 1 ] && { nice -n 10 make --no-print-directory -j"$JOBS" SAN=1 $asan_targets >"$asan_log" 2>&1
                                    echo "$? $(date +%s)" >"$asan_log.rc.tmp"; mv "$asan_log.rc.tmp" "$asan_log.rc"; }
            [ $want_cpu = 1 ] && { nice -n 10 make --no-print-directory -j"$JOBS" CUDA=0 BUILD=build-cpu all >"$cpu_log" 2>&1
                                   echo "$? $(date +%s)" >"$cpu_log.rc.tmp"; mv "$cpu_log.rc.tmp" "$cpu_log.rc"; }
        ) &
        builds_pid=$!
        builds_started=$(date +%s)
    fi
}

# Suites that bound how long something takes (the progress thread's overlap,
# a deadlock found within 5 s, a timer's seconds) run first. test_progress
# alone on the machine: it bounds what the progress thread, at nice 19,
# gets of a spare core, and a niced build would take that core (what the
# thread does that bounds no time is test_async.py's, in the lanes). The
# background builds start after it, beside the others (their bounds are
# about waits, which builds at nice 10 beside them hardly touch, and they
# leave most of a core idle).
TIMED=(tests/comm/test_progress.py tests/ranks/test_deadlock.py tests/comm/test_timer.py)
for t in "${TIMED[@]}"; do
    [ -f "$t" ] && run "$(suite_name "$t")" env LECTERN_BUILD="$BUILD" $PY "$t"
    [ "$t" = "${TIMED[0]}" ] && start_builds
done
# The lectures whose modelled runs check a speed lesson's bound (a pipeline's
# bubble, DDP's overlap; test_nccl_emu.py runs lecture_08 whole on the NCCL
# emulator) run one at a time too, beside the niced builds only:
# a second suite beside them (4 more ranks on 2 cores) is the busy machine
# the bounds allow for only in part (lectures/lecture_08/pipeline.h measures the
# lateness it causes; a DDP step's all-reduces slow with it). The sanitizer
# and CPU-only passes' copies of them run alone in the all scope, in one
# lane; in the quick scope their CPU-only lecture_ddp is in the lanes.
MODELLED=(tests/lectures/test_lecture_08.py tests/lectures/test_lecture_ddp.py tests/comm/test_nccl_emu.py)
for t in "${MODELLED[@]}"; do
    [ -f "$t" ] && run "$(suite_name "$t")" env LECTERN_BUILD="$BUILD" $PY "$t"
done
TIMED+=("${MODELLED[@]}")

build_ready() {   # build_ready asan|cpu: waits for that background build; 0 when it built (the CPU-only one without warnings)
    local which=$1 buildlog rc done_at
    buildlog=$asan_log; [ "$which" = cpu ] && buildlog=$cpu_log
    while [ ! -e "$buildlog.rc" ]; do
        # The builds' subshell gone without a word for this build (killed):
        # a failed build, not a wait without end.
        if ! kill -0 "$builds_pid" 2>/dev/null && [ ! -e "$buildlog.rc" ]; then
            echo "(the background builds stopped before the $which build ended)" >>"$buildlog"
            echo "1 $(date +%s)" >"$buildlog.rc"
        fi
        sleep 1
    done
    read -r rc done_at <"$buildlog.rc"
    # The first pass to find the build says how long it took or, when it
    # failed (or, without CUDA, warned), shows its log: one failure in all.
    if mkdir "$lane_dir/built.$which" 2>/dev/null; then
        echo "== $which build done: $((done_at - builds_started)) s after the background builds started, $(( $(date +%s) - done_at )) s before now"
        if [ "$rc" -ne 0 ] || { [ "$which" = cpu ] && grep -q "warning:" "$buildlog"; }; then
            cat "$buildlog"
            if [ "$rc" -ne 0 ]; then echo "== $which build FAILED"; else echo "== $which build FAILED (warned)"; fi
            failed=$((failed + 1))
            failures+=("$which build")
        fi
    fi
    [ "$rc" -eq 0 ] && ! { [ "$which" = cpu ] && grep -q "warning:" "$buildlog"; }
}

viewer_suite() {
    # Every step of every committed lecture, twice (two window sizes), in
    # the all scope: more than 900 s on the 2-core machine.
    [ -f tests/viewer/run.sh ] && RUN_LIMIT=2700 run "viewer (Chromium)" bash tests/viewer/run.sh
}
item() {   # item <how> <arg>: one entry of a lane's list
    case $1 in
        c) run "$(suite_name "$2")" env LECTERN_BUILD="$BUILD" "$2" ;;
        # runtime/'s folders call each other one way only (docs/design.md, "Layers").
        layers) run "check-layers" make --no-print-directory BUILD="$BUILD" check-layers ;;
        # One C style for every C and CUDA file (.clang-format; make format
        # rewrites what this names).
        format) run "format-check" bash scripts/format.sh check ;;
        # Every planted bug of make mutate still finds its text, once: an
        # edit that moves or copies it would leave the mutant unplanted.
        mutants) run "mutants-check" $PY scripts/mutate.py --check ;;
        py) run "$(suite_name "$2")" env LECTERN_BUILD="$BUILD" $PY "$2" ;;
        # The sanitizer and CPU-only passes: each waits for its build first.
        asan-*) build_ready asan || return 0 ;;&
        cpu-*) build_ready cpu || return 0 ;;&
        asan-c) asan_run "asan: $(suite_name "$2")" "build-asan/$2" ;;
        asan-py) asan_run "asan: $(suite_name "$2")" env LECTERN_OTHER_KERNELS=0 $PY "$2" ;;
        # async calls in flight together, and timed regions (test_progress.py's
        # timing bounds are the first pass's)
        asan-async) asan_run "asan: comm/test_async.py" $PY tests/comm/test_async.py TimedRegion \
                        Progress.test_async_calls_in_flight_together_give_the_right_sums ;;
        # the NCCL backend on its emulator (lecture_08 is not in make
        # test-bins: its emulated run is the first pass's)
        asan-nccl-emu) asan_run "asan: comm/test_nccl_emu.py" $PY tests/comm/test_nccl_emu.py EmulatedP2P TheSwitch \
                           LecturesOnTheEmulator.test_homework_08_solution ;;
        asan-nccl-emu-all) asan_run "asan: comm/test_nccl_emu.py (groups, test_comm)" $PY tests/comm/test_nccl_emu.py \
                               EmulatedGroups EmulatedDistTest EmulatedTestComm ;;
        cpu-c) run "cpu-only: $(suite_name "$2")" env LECTERN_BUILD=build-cpu "build-cpu/$2" ;;
        cpu-layers) run "cpu-only: check-layers" make --no-print-directory CUDA=0 BUILD=build-cpu check-layers ;;
        cpu-py) run "cpu-only: $(suite_name "$2")" env LECTERN_BUILD=build-cpu $PY "$2" ;;
        cpu-py-other) run "cpu-only: $(suite_name "$2")" env LECTERN_BUILD=build-cpu LECTERN_OTHER_KERNELS=0 $PY "$2" ;;
    esac
}
# The sanitizer pass: the C tests and the runtime's script suites built with
# AddressSanitizer + UBSan. Open MPI and its helpers keep some memory until
# exit on purpose; the suppressions name only those libraries, never ours.
# A block's stack is taken with frame pointers (the sanitizer's default, a
# third less CPU than its DWARF unwinder): ours are kept (-fno-omit-frame-
# pointer), and what Open MPI's plugins keep from its start, whose stacks
# would name no library, is left out where it is made (spawn_rank.c).
ASAN_OPTS="protect_shadow_gap=0:detect_leaks=1:abort_on_error=0"
# A sanitizer's report goes to a file of its own (log_path, one per
# process) rather than to the stderr of whichever process made it: a rank's
# leak check runs as its pool ends, after the lecture has written its trace,
# and its exit status reaches no test, so a report on stderr could pass
# unseen. After each suite of the pass, any report is shown and counts as a
# failure of that suite.
asan_run() {   # asan_run <name> <command...>: run, under the sanitizer's settings, then its reports
    local name=$1; shift
    local dir
    dir=$(mktemp -d "$lane_dir/reports.XXXXXX")
    run "$name" env "LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
        "ASAN_OPTIONS=$ASAN_OPTS:log_path=$dir/asan" "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$dir/ubsan" \
        LECTERN_BUILD=build-asan "$@"
    local reports=("$dir"/*)
    if [ -e "${reports[0]}" ]; then
        echo "== $name: ${#reports[@]} sanitizer report(s):"
        cat "${reports[@]}"
        failed=$((failed + 1))
        failures+=("$name (sanitizer reports)")
    fi
    rm -rf "$dir"
}
pass_items() {   # the sanitizer and CPU-only passes' items, added to $items
    local t
    if [ $want_asan = 1 ]; then
        local asan_suites=(tests/ranks/test_spawn.py tests/trace/test_foundation.py tests/trace/test_checks.py tests/tensor/test_leaks.py
                           tests/ranks/test_spawn_result.py tests/comm/test_nccl_load.py tests/twin/test_twin.py
                           tests/trace/test_grade_visibility.py)
        [ "$SCOPE" = all ] && asan_suites+=(tests/system/test_misuse.py tests/lectures/test_lecture_08.py
                     tests/lectures/test_lecture_collectives.py tests/lectures/test_lecture_ddp.py tests/lectures/test_lecture_gpu.py
                     tests/trace/test_options.py tests/comm/test_timer.py tests/ranks/test_spawn_expect.py tests/ranks/test_deadlock.py
                     tests/comm/test_groups.py tests/comm/test_dtype_paths.py)
        for t in "${asan_suites[@]}"; do [ -f "$t" ] && items+=("asan-py $t"); done
        items+=("asan-async -" "asan-nccl-emu -")
        [ "$SCOPE" = all ] && items+=("asan-nccl-emu-all -")
        # the C tests the normal build has: make test-bins builds each of them
        for t in "$BUILD"/tests/*/test_*; do [ -x "$t" ] && items+=("asan-c ${t#"$BUILD"/}"); done
    fi
    # The build without CUDA is what a machine without nvcc gets: keep it working.
    if [ $want_cpu = 1 ]; then
        for t in "$BUILD"/tests/*/test_*; do [ -x "$t" ] && items+=("cpu-c ${t#"$BUILD"/}"); done
        items+=("cpu-layers -")
        [ "$SCOPE" = all ] && items+=("cpu-py-other tests/lectures/test_lecture_08.py" "cpu-py tests/comm/test_nccl_emu.py")
        items+=("cpu-py tests/lectures/test_lecture_ddp.py" "cpu-py tests/lectures/test_lecture_gpu.py")
    fi
}

# The script suites by folder, the runtime's layers lowest first
# (tests/FOLDER/test_*.py; the browser suites of tests/viewer/ are
# tests/viewer/run.sh's), then any left at the top of tests/.
script_suites() {
    local d
    for d in trace tensor ranks comm lectures system twin; do ls tests/$d/test_*.py 2>/dev/null; done
    ls tests/test_*.py 2>/dev/null
    return 0
}

# The script suites, the longest first (seconds on a quiet 2-core machine,
# one at a time: planted checks 61, misuse 147 before its cases ran four at
# a time, build 36, two hosts 32, comm checks 30, spawn 29, then 25 and
# less), then the rest by name.
LONG=(tests/lectures/test_planted_checks.py tests/system/test_misuse.py tests/system/test_build.py tests/system/test_two_hosts.py
      tests/comm/test_comm_checks.py tests/ranks/test_spawn.py tests/comm/test_groups.py tests/lectures/test_lecture_scaling.py
      tests/lectures/test_lecture_precision.py
      tests/ranks/test_spawn_expect.py tests/trace/test_grade.py)
items=()
for t in "${LONG[@]}" $(script_suites); do
    [ -f "$t" ] || continue
    case " ${TIMED[*]} " in *" $t "*) continue ;; esac
    case " ${items[*]} " in *" py $t "*) continue ;; esac
    items+=("py $t")
done
# then the C unit tests, the layer check and the style check
for t in "$BUILD"/tests/*/test_*; do [ -x "$t" ] && items+=("c $t"); done
items+=("layers -" "format -" "mutants -")
# In the quick scope the sanitizer and CPU-only passes follow in the same
# list, each waiting for its build (made meanwhile in the background): a lane
# that runs out of suites goes on with them instead of waiting for the other
# lane. The all scope runs them after, in one lane: its sanitizer pass holds
# the timed suites.
[ "$SCOPE" = quick ] && pass_items
# the browser suite first in the background lane
in_lanes scripts viewer_suite
if [ "$SCOPE" = all ]; then
    items=()
    pass_items
    take_items passes
fi
[ -n "$builds_pid" ] && wait "$builds_pid"

echo
echo "scope $SCOPE: $(( $(date +%s) - started )) s"
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
if [ "$failed" -gt 0 ]; then
    echo "of the $failed failed: $((failed - launch_failures - timeouts)) wrong results," \
         "$launch_failures where ranks did not start, $timeouts timed out"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
