/*
 * device.c: facts of the GPUs: how many there are, and a way to wait for
 * the one in use.
 *
 * Timing GPU work needs the wait (timing.c has the clock): kernel launches
 * return at once, so a measurement is now_seconds(), the work,
 * device_synchronize(), now_seconds() (without the synchronize one would time
 * the launch, not the work).
 */
#ifdef LECTERN_CUDA
#include <cuda_runtime_api.h>

#include "check.h"
#endif

#include "lectern.h"
#include "tensor/tensor.h"
#include "trace/trace.h"

/*
 * The GPUs this process can see (CUDA_VISIBLE_DEVICES applies). Asked once
 * and remembered. This is the one CUDA call whose failure is an answer, not
 * an error: without a driver (cudaErrorInsufficientDriver) or without a
 * device (cudaErrorNoDevice) the answer is zero GPUs, and the lecture runs on
 * the CPU.
 */
int gpu_count(void) {
#ifdef LECTERN_CUDA
    static int count = -1;
    if (count < 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError(); /* clear it so no later check trips on it */
            n = 0;
        }
        count = n;
    }
    return count;
#else
    return 0;
#endif
}

/* Waits for the compute stream of the current GPU: CUDA's default stream,
 * where every tensor kernel, cuBLAS call and copy of the runtime is queued.
 * Not cudaDeviceSynchronize: that waits for every stream of the device,
 * NCCL's included, and an NCCL send in flight may wait for a receive its
 * peer posts only after its own device_synchronize (a pipeline's stamp, a
 * timer): each rank would wait for the other (docs/gpu.md). NCCL's work
 * reaches the compute stream through the events dist_wait and the blocking
 * calls wait for, so a timing still covers it. Nothing to wait for on the
 * CPU, or before this process has put anything on a GPU. Compiled only:
 * not yet run on a GPU since the change. */
void device_synchronize(void) {
#ifdef LECTERN_CUDA
    if (lx_cuda_in_use() && gpu_count() > 0) /* no CUDA start-up where none was used */
        CUDA_CHECK(cudaStreamSynchronize(0));
#endif
}

#ifndef LECTERN_CUDA
/* A CPU-only build's answer to every device call (tensor.h's stubs). */
void lx_tensor_no_cuda(void) {
    lx_fatal("this lectern was built without CUDA (no nvcc at build time): "
             "tensors can only live on the CPU (device -1)");
}
#endif
