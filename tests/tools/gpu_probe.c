/*
 * gpu_probe: what lectern's build sees of this machine's GPUs, and why.
 *
 * scripts/gpu-check.sh compares it with `nvidia-smi -L`: a driver that lists
 * GPUs while the CUDA runtime lectern was built with sees none (a driver
 * older than the runtime, a missing libcuda, no device files in a
 * container) would otherwise make every GPU test skip and the check read
 * "0 failed". Prints three lines:
 *
 *   lectern gpu_count: N
 *   cuda runtime: <cudaGetDeviceCount's status, or "not built with CUDA">
 *   cuda versions: driver D, runtime R      (CUDA builds)
 *
 * Exit status 0 whatever it finds: the comparison is the caller's.
 */
#include <stdio.h>

#include "lectern.h"

#ifdef LECTERN_CUDA
#include <cuda_runtime.h>
#endif

int main(void) {
    printf("lectern gpu_count: %d\n", gpu_count());
#ifdef LECTERN_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) printf("cuda runtime: %d device%s\n", n, n == 1 ? "" : "s");
    else printf("cuda runtime: cudaGetDeviceCount failed: %s (%s)\n", cudaGetErrorString(e), cudaGetErrorName(e));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    printf("cuda versions: driver %d.%d, runtime %d.%d%s\n", driver / 1000, driver % 1000 / 10, runtime / 1000,
           runtime % 1000 / 10,
           driver == 0        ? " (no driver found)"
           : driver < runtime ? " (driver older than the runtime)"
                              : "");
#else
    printf("cuda runtime: not built with CUDA (CUDA=0)\n");
#endif
    return 0;
}
