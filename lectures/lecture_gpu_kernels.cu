/*
 * lecture_gpu_kernels.cu: the two kernels lecture_gpu teaches, the two
 * STREAM loops its roofline measures the memory bandwidth with, and the
 * launches that run them (declared in lecture_gpu_kernels.h).
 *
 * The lecture shows the text between the "lecture:" markers below as it is
 * in this file, so what the reader sees is what nvcc compiled.
 *
 * Compiled by nvcc in a CUDA build. Verified on GPU (2026-11-28, H200):
 * test_lecture_gpu.py 16 of 16, compute-sanitizer's synccheck clean;
 * racecheck on the tiled kernel alone not yet run (docs/gpu.md).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lecture_gpu_kernels.h"

extern "C" void gpu_facts_of(int device, gpu_facts *f) {
    cudaDeviceProp p;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", p.name);
    CUDA_CHECK(cudaDeviceGetAttribute(&f->sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&f->threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&f->registers_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&f->shared_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&f->l2_bytes, cudaDevAttrL2CacheSize, device));
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    f->global_bytes = (double)total_bytes;
}

/* lecture: vector_add */
__global__ void vector_add(const float *x, const float *y, float *out, int64_t n) {
    /* Which element is mine: my block's first element plus my place in it. */
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) /* the last block may stick out past the end */
        out[i] = x[i] + y[i];
}

extern "C" void gpu_vector_add(int device, const float *x, const float *y, float *out, int64_t n) {
    int threads = 256;                            /* per block */
    int64_t blocks = (n + threads - 1) / threads; /* enough blocks to cover n */
    CUDA_CHECK(cudaSetDevice(device));
    vector_add<<<(unsigned)blocks, threads>>>(x, y, out, n);
    KERNEL_CHECK(); /* a launch returns nothing; LECTERN_CUDA_SYNC=1 also waits for it */
}
/* lecture: end */

/* lecture: tiled_matmul */
#define TILE 16

__global__ void tiled_matmul(const float *a, const float *b, float *c, int n) {
    /* Each block computes one TILE x TILE tile of c; each thread one element. */
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f; /* lives in a register */
    for (int t = 0; t < n; t += TILE) {
        /* The block loads one tile of a and one of b from HBM, each thread
         * one element (zero past the edge)... */
        a_tile[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[row * n + t + threadIdx.x] : 0.0f;
        b_tile[threadIdx.y][threadIdx.x] = (t + threadIdx.y < n && col < n) ? b[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads(); /* ...the whole tile is in */
        /* ...and every thread reads TILE elements of each from shared memory:
         * each element loaded once is used TILE times. */
        for (int k = 0; k < TILE; k++)
            acc += a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
        __syncthreads(); /* done with this tile */
    }
    if (row < n && col < n) c[row * n + col] = acc;
}

extern "C" void gpu_tiled_matmul(int device, const float *a, const float *b, float *c, int n) {
    dim3 threads(TILE, TILE);
    dim3 blocks((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    CUDA_CHECK(cudaSetDevice(device));
    tiled_matmul<<<blocks, threads>>>(a, b, c, n);
    KERNEL_CHECK();
}
/* lecture: end */

/* STREAM's copy and triad (McCalpin), the bandwidth roof of the roofline.
 * Grid-stride loops: a fixed grid of blocks walks the whole array, so one
 * launch covers any n and every SM stays busy. */
__global__ void stream_copy(float *c, const float *a, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c[i] = a[i];
}

__global__ void stream_triad(float *a, const float *b, const float *c, float s, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        a[i] = b[i] + s * c[i];
}

/* 32 blocks of 256 threads per SM: more than an SM holds at once, so the
 * scheduler always has a warp ready while others wait for memory. */
static unsigned stream_blocks(int device) {
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return (unsigned)(32 * sms);
}

extern "C" void gpu_stream_copy(int device, float *c, const float *a, int64_t n) {
    CUDA_CHECK(cudaSetDevice(device));
    stream_copy<<<stream_blocks(device), 256>>>(c, a, n);
    KERNEL_CHECK();
}

extern "C" void gpu_stream_triad(int device, float *a, const float *b, const float *c, float s, int64_t n) {
    CUDA_CHECK(cudaSetDevice(device));
    stream_triad<<<stream_blocks(device), 256>>>(a, b, c, s, n);
    KERNEL_CHECK();
}
