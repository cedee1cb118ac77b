/*
 * nccl_probe: the NCCL this build would load at an NCCL spawn, and whether
 * it may (runtime/comm/nccl_library.c: dlopen, version floor).
 *
 * scripts/gpu-check.sh records its two lines; tests/comm/test_nccl_load.py runs it
 * against a missing library and a fake one too old. Prints:
 *
 *   build: NCCL header X.Y.Z            (or: build: no NCCL support)
 *   runtime: NCCL X.Y.Z (PATH)          (or: runtime: not loaded: WHY)
 *
 * Exit status 0 when the library loads and is recent enough, else 1.
 * LECTERN_NCCL_LIBRARY names the file to load, as for a lecture.
 */
#include <stdio.h>

#include "comm/nccl_api.h"

#if defined(LECTERN_CUDA) && LECTERN_NCCL
#include <nccl.h>
#endif

int main(void) {
#if defined(LECTERN_CUDA) && LECTERN_NCCL
    char v[32];
    printf("build: NCCL header %s\n", lx_nccl_version_text(NCCL_VERSION_CODE, v, sizeof v));
#else
    printf("build: no NCCL support\n");
#endif
    char why[512];
    const lx_nccl_api *api = lx_nccl_library(why, sizeof why);
    if (!api) {
        printf("runtime: not loaded: %s\n", why);
        return 1;
    }
    printf("runtime: %s\n", api->name);
    return 0;
}
