#!/usr/bin/env bash
# make coverage: builds with gcov counters (build-cov/), runs the C tests and
# the script tests against that build, and prints the line and branch
# coverage of runtime/ and lectures/lib/ (and the lectures' own folders, lectures/NAME/) with every line no test reaches.
# The browser tests are left out: they exercise the viewer, not this C.
# Results: build-cov/coverage.txt (summary and missing lines),
# build-cov/coverage.html (line by line).
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v gcovr >/dev/null || { echo "coverage: gcovr is missing (apt-get install gcovr)" >&2; exit 1; }

echo "== building with coverage counters (build-cov/)"
find build-cov -name '*.gcda' -delete 2>/dev/null
make --no-print-directory COV=1 all >/dev/null || { echo "coverage: the build failed" >&2; exit 1; }

echo "== running the tests"
status=0
for t in build-cov/tests/*/test_*; do
    [ -x "$t" ] || continue
    echo "-- ${t#build-cov/tests/}"
    LECTERN_BUILD=build-cov "$t" >/dev/null 2>&1 || { echo "   (failed)"; status=1; }
done
# the script suites of every folder but the browser's (tests/viewer/)
for t in tests/{trace,tensor,ranks,comm,lectures,system}/test_*.py tests/test_*.py; do
    [ -f "$t" ] || continue
    echo "-- ${t#tests/}"
    LECTERN_BUILD=build-cov LECTERN_OTHER_KERNELS=0 /usr/bin/python3 "$t" >/dev/null 2>&1 || { echo "   (failed)"; status=1; }
done

echo "== coverage of runtime/, lectures/lib/ and the lectures' own folders (lectures/NAME/)"
filters=(--root . --filter 'runtime/' --filter 'lectures/[^/]+/' --object-directory build-cov)
gcovr "${filters[@]}" --txt build-cov/coverage.txt --html-details build-cov/coverage.html \
      --print-summary >/dev/null 2>build-cov/gcovr.log
gcovr "${filters[@]}" --branches --txt build-cov/coverage-branches.txt >/dev/null 2>>build-cov/gcovr.log
cat build-cov/coverage.txt
echo
echo "branches:"
tail -n 3 build-cov/coverage-branches.txt
# Files that only run with a GPU (NCCL, cuBLAS) cannot be reached on a machine
# without one: give the figure for the rest too, saying so.
if ! nvidia-smi -L >/dev/null 2>&1; then
    gpu_only=(--exclude 'runtime/comm/comm_nccl.c' --exclude 'runtime/tensor/cublas_lazy.c')
    echo
    echo "without the GPU-only files (runtime/comm/comm_nccl.c, runtime/tensor/cublas_lazy.c), which need a GPU:"
    gcovr "${filters[@]}" "${gpu_only[@]}" --txt 2>>build-cov/gcovr.log | tail -n 2 | head -n 1 | sed 's/^/  lines    /'
    gcovr "${filters[@]}" "${gpu_only[@]}" --branches --txt 2>>build-cov/gcovr.log | tail -n 2 | head -n 1 | sed 's/^/  branches /'
fi
echo
echo "full report: build-cov/coverage.html; lines no test reaches: the Missing column above"
[ "$status" -eq 0 ] || echo "coverage: some tests failed; the figures above count what ran" >&2
exit 0
