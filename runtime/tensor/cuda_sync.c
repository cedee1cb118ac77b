/*
 * cuda_sync.c: LECTERN_CUDA_SYNC, the synchronous mode for finding a
 * faulting kernel.
 *
 * A kernel launch returns before the kernel runs: cudaGetLastError right
 * after it sees only a bad launch (a grid too large, say). A kernel that
 * reads out of bounds is reported by whatever CUDA call next waits for the
 * GPU, lines later, possibly in another file. With LECTERN_CUDA_SYNC=1
 * every launch of the runtime is followed by cudaDeviceSynchronize and a
 * check (KERNEL_CHECK in check.h), so the error names the launch's own
 * file:line, at the cost of all overlap: for debugging and for
 * compute-sanitizer runs (scripts/gpu-check.sh), never for timings.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "trace/trace.h"

int lx_cuda_sync(void) {
    static int on = -1; /* read once; every thread reads the same variable */
    if (on < 0) {
        const char *s = getenv("LECTERN_CUDA_SYNC");
        if (!s || !*s || strcmp(s, "0") == 0) on = 0;
        else if (strcmp(s, "1") == 0) on = 1;
        else
            lx_fatal(
                    "LECTERN_CUDA_SYNC='%s' is neither 0 nor 1 (1: wait for each kernel and check it at its launch line)",
                    s);
    }
    return on;
}
