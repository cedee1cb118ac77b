/*
 * shared_ipc_cuda.cu: the GPU backend of the shared-GPU protocol
 * (shared_ipc.h): ranks that share one device map each other's windows with
 * CUDA IPC and move and reduce the data with kernels on it.
 *
 * Compiled only: no GPU has run this file yet. Every GPU figure of the
 * protocol is expected, not measured (docs/gpu.md, "Ranks sharing a GPU").
 *
 *   windows  cudaMalloc, exported with cudaIpcGetMemHandle and opened by
 *            each peer once per spawn with cudaIpcOpenMemHandle. Legacy IPC
 *            takes only cudaMalloc memory, not the stream-ordered pool the
 *            tensors come from: so a call copies into its window and out.
 *   events   cudaEventInterprocess | cudaEventDisableTiming, exported with
 *            cudaIpcGetEventHandle; record on stream 0, peers wait with
 *            cudaStreamWaitEvent(0, ...). The sequence number travels with
 *            the host's notification; the GPU needs only the order it gives.
 *   copies   cudaMemcpyAsync device to device on stream 0, the tensors' stream
 *   reduce   one grid-stride kernel over the inputs, in their order
 *
 * A failure to make or open a window or an event returns NULL with CUDA's
 * message (the probe falls back to the staged host path); a failure once
 * the protocol runs stops the rank at the call's line (CUDA_CHECK).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#define LX_IPC_DEV_ONLY
#include "comm/shared_ipc.h"

enum { THREADS = 256, MAX_BLOCKS = 4096, MAX_PTRS = 64 };

/* The kernel's pointers, passed by value (1 KiB of parameters). */
struct ptrs {
    float *out[MAX_PTRS];
    const float *in[MAX_PTRS];
};

static __global__ void reduce_kernel(ptrs p, int n_out, int n_in, int64_t n, int op, float divide_by) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = p.in[0][i];
        for (int k = 1; k < n_in; k++) {
            float x = p.in[k][i];
            if (op == LX_IPC_MIN) acc = fminf(acc, x);
            else if (op == LX_IPC_MAX) acc = fmaxf(acc, x);
            else acc += x;
        }
        if (op == LX_IPC_AVG) acc /= divide_by;
        for (int k = 0; k < n_out; k++)
            p.out[k][i] = acc;
    }
}

/* Records CUDA's message in why[] and clears the (non-sticky) error. */
static int failed(cudaError_t rc, const char *what, char *why, size_t size) {
    if (rc == cudaSuccess) return 0;
    snprintf(why, size, "%s: %s", what, cudaGetErrorString(rc));
    (void)cudaGetLastError();
    return 1;
}

static float *window_new(size_t bytes, lx_ipc_handle *h, char *why, size_t size) {
    void *p = NULL;
    memset(h, 0, sizeof *h);
    if (failed(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc", why, size)) return NULL;
    cudaIpcMemHandle_t mh;
    if (failed(cudaIpcGetMemHandle(&mh, p), "cudaIpcGetMemHandle", why, size)) {
        CUDA_CHECK(cudaFree(p));
        return NULL;
    }
    memcpy(h->bytes, &mh, sizeof mh);
    return (float *)p;
}

static float *window_open(const lx_ipc_handle *h, size_t bytes, char *why, size_t size) {
    (void)bytes;
    cudaIpcMemHandle_t mh;
    memcpy(&mh, h->bytes, sizeof mh);
    void *p = NULL;
    if (failed(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle", why, size))
        return NULL;
    return (float *)p;
}

static void window_close(float *p, size_t bytes) {
    (void)bytes;
    CUDA_CHECK(cudaIpcCloseMemHandle(p));
}

static void window_free(float *p, size_t bytes) {
    (void)bytes;
    CUDA_CHECK(cudaFree(p));
}

static void opened_by_all(void *mine) { (void)mine; }

static void *event_new(lx_ipc_handle *h, char *why, size_t size) {
    cudaEvent_t ev;
    memset(h, 0, sizeof *h);
    if (failed(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming), "cudaEventCreate", why,
               size))
        return NULL;
    cudaIpcEventHandle_t eh;
    if (failed(cudaIpcGetEventHandle(&eh, ev), "cudaIpcGetEventHandle", why, size)) {
        CUDA_CHECK(cudaEventDestroy(ev));
        return NULL;
    }
    memcpy(h->bytes, &eh, sizeof eh);
    return (void *)ev;
}

static void *event_open(const lx_ipc_handle *h, char *why, size_t size) {
    cudaIpcEventHandle_t eh;
    memcpy(&eh, h->bytes, sizeof eh);
    cudaEvent_t ev;
    if (failed(cudaIpcOpenEventHandle(&ev, eh), "cudaIpcOpenEventHandle", why, size)) return NULL;
    return (void *)ev;
}

static void event_close(void *ev) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev)); }
static void event_free(void *ev) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev)); }

static void record(void *ev, uint64_t seq) {
    (void)seq;
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, 0));
}

static void wait_for(void *ev, uint64_t seq) {
    (void)seq;
    CUDA_CHECK(cudaStreamWaitEvent(0, (cudaEvent_t)ev, 0));
}

static void copy(float *dst, const float *src, size_t n) {
    if (n) CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
}

static void reduce(float *const *out, int n_out, const float *const *in, int n_in, size_t n, int op, float divide_by) {
    if (n == 0) return;
    if (n_out > MAX_PTRS || n_in > MAX_PTRS)
        lx_backend_error("lectern", "more ranks than the kernel takes (64)", __FILE__, __LINE__, "reduce");
    ptrs p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < n_out; k++)
        p.out[k] = out[k];
    for (int k = 0; k < n_in; k++)
        p.in[k] = in[k];
    int64_t blocks = ((int64_t)n + THREADS - 1) / THREADS;
    int grid = blocks > MAX_BLOCKS ? MAX_BLOCKS : (int)blocks;
    reduce_kernel<<<grid, THREADS>>>(p, n_out, n_in, (int64_t)n, op, divide_by);
    KERNEL_CHECK();
}

static void finish(void) { CUDA_CHECK(cudaStreamSynchronize(0)); }

static const lx_ipc_dev cuda_dev = {
        "CUDA IPC",  window_new, window_open, window_close, window_free, opened_by_all, event_new, event_open,
        event_close, event_free, record,      wait_for,     copy,        reduce,        finish,
};

extern "C" const lx_ipc_dev *lx_ipc_cuda_dev(int device) {
    CUDA_CHECK(cudaSetDevice(device));
    return &cuda_dev;
}
