# Sourced by scripts/gpu-check.sh for `device`: the one call of a 15-minute
# device window. Uses gpu-check.sh's helpers (ok, bad, skip, tests, md,
# section, elapsed) and variables (BUILD, WORK, OUT, PY, CARRY_PYTHONPATH,
# DEADLINE_S, ONLY, gpus). Each step is a function run by `step`, which keeps
# the deadline, the seconds and the failed steps.

notrun=0
step_times=()
failed_steps=()
notrun_steps=()

# step NAME CAP FUNCTION: FUNCTION within CAP seconds, or "not run: deadline"
# when CAP does not fit in what is left; only the steps --only names.
step() {
    local name=$1 cap=$2 fn=$3 left t0 f0 secs verdict
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then return; fi
    left=$((DEADLINE_S - $(elapsed)))
    if [ "$cap" -gt "$left" ]; then
        notrun=$((notrun + 1))
        notrun_steps+=("$name")
        md "| step $name | not run: deadline | needs up to $cap s, $left s left of GPU_CHECK_DEADLINE_S=$DEADLINE_S |"
        echo "== step $name: not run: deadline (cap $cap s, $left s left)"
        tally "step $name"
        return
    fi
    section "step $name (cap $cap s)"
    t0=$(date +%s)
    f0=$failed
    STEP_END=$((t0 + cap))
    "$fn"
    STEP_END=
    secs=$(($(date +%s) - t0))
    step_times+=("$name ${secs} s")
    verdict=done
    if [ "$failed" -gt "$f0" ]; then verdict="**FAILED**"; failed_steps+=("$name"); fi
    md "| step $name | $verdict | ${secs} s (cap $cap s) |"
}

# The Python suites see the carried Python packages (a command, not a
# function: `tests` runs it under timeout).
PY_ENV=(env PYTHONPATH="$CARRY_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$PY")

# What is left of the step's cap, at least 1 s.
left_in_step() { local l=$((STEP_END - $(date +%s))); [ "$l" -lt 1 ] && l=1; echo "$l"; }

step_ipc() {
    local said rc
    said=$(timeout "$(left_in_step)" "$BUILD/tests/tools/ipc_probe" --quiet --out "$WORK/ipc" 2>&1)
    rc=$?
    echo "$said"
    if echo "$said" | grep -q '^ipc_probe: skipped'; then
        md "| cudaIpc works | not asked: no GPU | |"
        skip "ipc probe" "$(echo "$said" | grep -m1 '^ipc_probe: skipped' | cut -c21-)"
    elif [ "$rc" -eq 0 ]; then
        md "| cudaIpc works | yes | $(echo "$said" | grep 'busbw' | cut -c12-) |"
        ok "ipc probe ($(echo "$said" | grep -m1 'protocol' | cut -c12-))"
    else
        md "| cudaIpc works | **no** | $(echo "$said" | grep -m1 'protocol off' | cut -c12- | sed 's/|/\\|/g') |"
        bad "ipc probe" "exit status $rc: $(echo "$said" | grep -m1 -E 'protocol off|WRONG|error' | cut -c1-200)"
    fi
}

step_cases() {
    tests test_comm_staged env LECTERN_TEST_REQUIRE_IPC=1 "$BUILD/tests/comm/test_comm_staged"
    tests test_groups.py "${PY_ENV[@]}" tests/comm/test_groups.py
}

step_order() {
    tests test_shared_order env LECTERN_TEST_REQUIRE_IPC=1 "$BUILD/tests/comm/test_shared_order"
}

step_bench() {
    local rc
    { echo; echo "## bench_shared_gpu"; echo; echo '```'; } >>"$BENCH"
    timeout "$(left_in_step)" "$BUILD/bench/bench_shared_gpu" --quiet --out "$WORK/bench" >"$WORK/bench.txt" 2>&1
    rc=$?
    cat "$WORK/bench.txt" | tee -a "$BENCH"
    echo '```' >>"$BENCH"
    if grep -q 'skipped:' "$WORK/bench.txt"; then skip bench_shared_gpu "$(grep -m1 -o 'skipped: .*' "$WORK/bench.txt" | cut -c10-)"
    elif [ "$rc" -eq 0 ]; then ok bench_shared_gpu
    else bad bench_shared_gpu "exit status $rc: $(tail -1 "$WORK/bench.txt")"; fi
}

step_traces() {
    local name kept=()
    mkdir -p "$WORK/gpu-traces"
    for name in lecture_08 lecture_ddp lecture_scaling; do
        if [ "$gpus" -eq 0 ]; then skip "$name GPU trace" "no GPU"; continue; fi
        if timeout "$(left_in_step)" "$BUILD/lectures/$name" --quiet --out "$WORK/lecture-$name" >"$WORK/$name.log" 2>&1 &&
            [ -f "$WORK/lecture-$name/$name.json" ]; then
            cp "$WORK/lecture-$name/$name.json" "$WORK/gpu-traces/$name.gpu.json"
            # the .js twin under the key the viewer asks for with ?trace=NAME.gpu
            sed "1s/\\[\"$name\"\\]/[\"$name.gpu\"]/" "$WORK/lecture-$name/$name.js" >"$WORK/gpu-traces/$name.gpu.js"
            kept+=("$name")
            ok "$name GPU trace"
        else
            tail -20 "$WORK/$name.log"
            bad "$name GPU trace" "$(tail -1 "$WORK/$name.log" | cut -c1-200)"
        fi
    done
    if [ ${#kept[@]} -gt 0 ]; then tar -C "$WORK/gpu-traces" -cJf "$OUT/traces.tar.xz" .; fi
}

step_suites() {
    local t
    for t in tensor/test_tensor tensor/test_random tensor/test_gpu_count tensor/test_cublas_lazy tensor/test_mlp comm/test_comm comm/test_nccl_emu; do
        [ -x "$BUILD/tests/$t" ] && tests "$t" "$BUILD/tests/$t"
    done
}

step_kernels() {
    tests test_cuda_sync.py "${PY_ENV[@]}" tests/tensor/test_cuda_sync.py
    tests test_lecture_gpu.py "${PY_ENV[@]}" tests/lectures/test_lecture_gpu.py
}

step ipc 30 step_ipc
step cases 150 step_cases
step order 45 step_order
step bench 120 step_bench
step traces 150 step_traces
step suites 120 step_suites
step kernels 60 step_kernels

# The end of summary.md: the seconds per step, and the rerun.
device_summary() {
    local joined
    joined=$(printf '%s, ' "${step_times[@]}")
    md "Steps: ${joined%, }."
    [ ${#step_times[@]} -eq 0 ] && md "No step ran."
    [ ${#notrun_steps[@]} -gt 0 ] && md "Not run (deadline): ${notrun_steps[*]}."
    local again=("${failed_steps[@]}" "${notrun_steps[@]}")
    if [ ${#again[@]} -gt 0 ]; then
        local list
        list=$(IFS=,; echo "${again[*]}")
        md "Rerun: bash scripts/gpu-check.sh device --only $list"
        echo "rerun the failed and not-run steps: bash scripts/gpu-check.sh device --only $list"
    fi
}
