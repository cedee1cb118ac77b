/*
 * bench_alloc.c: what a device tensor's allocation and free cost, the two
 * ways lectern can get device memory (runtime/tensor/tensor_cuda.cu):
 *
 *   plain   cudaMalloc + cudaFree
 *   pool    cudaMallocAsync + cudaFreeAsync on the default stream, from the
 *           device's default pool with its release threshold raised so
 *           freed memory stays cached (what lx_cuda_alloc does where the
 *           device has memory pools)
 *
 * Two cases per size (4 KiB, 1 MiB, 16 MiB, 256 MiB: a bias, a layer's
 * weights, an activation, a DDP bucket):
 *
 *   idle    the device has nothing else to do
 *   busy    a 512 MiB device-to-device copy is in flight on a stream of its
 *           own (a stand-in for an all-reduce on NCCL's stream): cudaFree
 *           may wait for the whole device, so the host (and the compute
 *           stream behind it) stalls for the copy; cudaFreeAsync should not
 *
 * Each sample is a batch of alloc+free pairs timed on the host clock (the
 * calls are host calls); the median of the samples, both ways in one run,
 * alternated. On a machine without a GPU it says so and exits 0.
 *
 *   bench_alloc [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lectern.h"

#ifndef LECTERN_CUDA

int main(void) {
    printf("bench_alloc: skipped: this build has no CUDA (make CUDA=0 or no nvcc)\n");
    return 0;
}

#else

#include <cuda_runtime.h>

#include "check.h"
#include "tensor/tensor.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define SAMPLES 15
#define BATCH 20

static cudaStream_t side;
static float *copy_src, *copy_dst;
static const size_t copy_bytes = (size_t)512 << 20;

/* One sample: BATCH alloc+free pairs, microseconds per pair. `busy`: a
 * large copy on the side stream is queued before each pair. */
static double sample(int pool, size_t bytes, int busy) {
    double total = 0;
    for (int i = 0; i < BATCH; i++) {
        if (busy) CUDA_CHECK(cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice, side));
        double t0 = now_s();
        if (pool) {
            float *p = lx_cuda_alloc(0, bytes);
            lx_cuda_free(0, p);
        } else {
            void *p = NULL;
            CUDA_CHECK(cudaMalloc(&p, bytes));
            CUDA_CHECK(cudaFree(p));
        }
        total += now_s() - t0;
        CUDA_CHECK(cudaStreamSynchronize(side));
    }
    return total / BATCH * 1e6;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    if (gpu_count() == 0) {
        printf("bench_alloc: skipped: no GPU visible (gpu_count() is 0)\n");
        return 0;
    }
    if (!lx_cuda_pool_in_use(0)) {
        printf("bench_alloc: cuda:0 has no memory pools (or LECTERN_CUDA_POOL=0): lectern uses plain cudaMalloc; "
               "nothing to compare\n");
        return 0;
    }
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc((void **)&copy_src, copy_bytes));
    CUDA_CHECK(cudaMalloc((void **)&copy_dst, copy_bytes));
    /* the copy's own time, for scale */
    double c0 = now_s();
    CUDA_CHECK(cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice, side));
    CUDA_CHECK(cudaStreamSynchronize(side));
    double copy_us = (now_s() - c0) * 1e6;

    static const size_t sizes[] = {(size_t)4 << 10, (size_t)1 << 20, (size_t)16 << 20, (size_t)256 << 20};
    int n_sizes = quick ? 2 : 4, samples = quick ? 5 : SAMPLES;
    printf("bench_alloc on cuda:0: alloc+free, microseconds per pair, median of %d samples of %d pairs\n", samples,
           BATCH);
    printf("(busy: a 512 MiB device copy, %.0f us alone, in flight on another stream)\n", copy_us);
    printf("| size | case | cudaMalloc+cudaFree | pool (cudaMallocAsync+cudaFreeAsync) | ratio |\n");
    printf("|---|---|---|---|---|\n");
    for (int s = 0; s < n_sizes; s++) {
        for (int busy = 0; busy <= 1; busy++) {
            double plain[SAMPLES], pooled[SAMPLES];
            sample(0, sizes[s], busy); /* warm-up both ways */
            sample(1, sizes[s], busy);
            for (int k = 0; k < samples; k++) {
                plain[k] = sample(0, sizes[s], busy);
                pooled[k] = sample(1, sizes[s], busy);
            }
            qsort(plain, (size_t)samples, sizeof(double), cmp_double);
            qsort(pooled, (size_t)samples, sizeof(double), cmp_double);
            double a = plain[samples / 2], b = pooled[samples / 2];
            printf("| %zu KiB | %s | %.1f | %.1f | %.1fx |\n", sizes[s] >> 10, busy ? "busy" : "idle", a, b,
                   b > 0 ? a / b : 0.0);
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(copy_src));
    CUDA_CHECK(cudaFree(copy_dst));
    CUDA_CHECK(cudaStreamDestroy(side));
    return 0;
}

#endif /* LECTERN_CUDA */
