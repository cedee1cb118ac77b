/*
 * bench_gpu.c: lectern's GPU paths against the bare library calls on the same
 * buffers, and against what the device can do at most.
 *
 *   matmul      matmul_into() on cuda:0 against a bare cublasSgemm() with a
 *               handle of our own, on the same device buffers, alternated;
 *               TFLOP/s against the fp32 peak, and a bare TF32 cublasSgemm
 *               (tensor cores, 10-bit mantissa inputs) against the TF32 peak,
 *               for scale: lectern's matmul is plain fp32.
 *   copy        tensor_copy() between two device tensors against a bare
 *               cudaMemcpyAsync(DeviceToDevice); a copy reads and writes every
 *               byte, so its bandwidth is 2 x bytes / time (as CUDA's
 *               bandwidthTest counts it), against the memory's peak.
 *   randn       randn() of 8192 x 8192 made on cuda:0 (the CUDA-streams
 *               section's three matrices), and on the host for scale.
 *
 * Peaks. fp32: SMs x clock x 2 (a fused multiply-add is two operations) x
 * fp32 lanes per SM (the CUDA C++ Programming Guide's throughput table: 64 on
 * compute capability 7.x and 8.0, 128 on 8.6, 8.9, 9.x and later). Memory: 2
 * (double data rate) x memory clock x bus width. Both from the device's own
 * attributes. TF32 has no attribute: the dense figure from NVIDIA's datasheet
 * for the devices named below, else not given.
 *
 * Timing: CUDA events on the stream the work runs on, a warm-up first, each
 * sample a batch of calls, the median of the samples.
 *
 *   bench_gpu [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

#ifndef LECTERN_CUDA

int main(void) {
    printf("bench_gpu: skipped: this build has no CUDA (make CUDA=0 or no nvcc)\n");
    return 0;
}

#else

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"

enum { SAMPLES = 7 };

static int cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_ms(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

typedef struct device_facts {
    char name[256];
    int sms, major, minor;
    double clock_hz, mem_clock_hz, bus_bits;
    double fp32_peak, tf32_peak, mem_peak; /* FLOP/s, FLOP/s (0: unknown), bytes/s */
} device_facts;

static int fp32_lanes(int major, int minor) {
    if (major == 7 || (major == 8 && minor == 0)) return 64;
    return 128;
}

/* NVIDIA datasheets, dense TF32 tensor-core TFLOP/s (half the "with
 * sparsity" figure they print). */
static double tf32_datasheet(const char *name) {
    if (strstr(name, "H200")) return 494.7e12;
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 378.0e12;
    if (strstr(name, "H100") && strstr(name, "NVL")) return 417.5e12;
    if (strstr(name, "H100")) return 494.7e12; /* SXM (HBM3) */
    return 0;
}

static device_facts facts_of(int dev) {
    device_facts f;
    memset(&f, 0, sizeof f);
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    snprintf(f.name, sizeof f.name, "%s", p.name);
    int khz = 0, mem_khz = 0, bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&f.minor, cudaDevAttrComputeCapabilityMinor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    f.clock_hz = khz * 1e3;
    f.mem_clock_hz = mem_khz * 1e3;
    f.bus_bits = bits;
    f.fp32_peak = f.sms * f.clock_hz * 2.0 * fp32_lanes(f.major, f.minor);
    f.tf32_peak = tf32_datasheet(f.name);
    f.mem_peak = 2.0 * f.mem_clock_hz * f.bus_bits / 8.0;
    return f;
}

/* ---------------- matmul ---------------- */

typedef struct gemm {
    int n;
    tensor *a, *b, *c;
    cublasHandle_t bare;
} gemm;

/* Row-major c = a b through cuBLAS's column-major view: c^T = b^T a^T. */
static void bare_sgemm(gemm *g) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(g->bare, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->b->data, g->n, g->a->data,
                             g->n, &zero, g->c->data, g->n));
}

static void ours_sgemm(gemm *g) { matmul_into(g->c, g->a, g->b, 0, 0, 1.0f, 0.0f); }

/* Milliseconds per call: `reps` calls between two events on the default stream. */
static float time_calls(void (*call)(gemm *), gemm *g, int reps, cudaEvent_t start, cudaEvent_t stop) {
    CUDA_CHECK(cudaEventRecord(start, 0));
    for (int i = 0; i < reps; i++)
        call(g);
    CUDA_CHECK(cudaEventRecord(stop, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / reps;
}

static void bench_matmul(const device_facts *f, int quick) {
    const int sizes[] = {1024, 2048, 4096, 8192};
    int nsizes = quick ? 2 : 4;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    printf("\n### matmul on cuda:0, float32, median of %d samples\n\n", SAMPLES);
    printf("| n | ours ms | bare cuBLAS ms | ours/bare time | ours TFLOP/s | %% of fp32 peak | "
           "bare TF32 ms | TF32 TFLOP/s | %% of TF32 peak |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < nsizes; k++) {
        gemm g = {.n = sizes[k]};
        manual_seed(1);
        g.a = randn(g.n, g.n, 0);
        g.b = randn(g.n, g.n, 0);
        g.c = zeros(g.n, g.n, 0);
        CUBLAS_CHECK(cublasCreate(&g.bare));
        double flop = 2.0 * g.n * (double)g.n * g.n;
        int reps = g.n <= 1024 ? 50 : g.n <= 2048 ? 10 : 3;
        ours_sgemm(&g); /* warm-up: cuBLAS loads its kernels */
        bare_sgemm(&g);
        float ours[SAMPLES], bare[SAMPLES], tf32[SAMPLES];
        for (int s = 0; s < SAMPLES; s++) {
            if (s % 2 == 0) {
                ours[s] = time_calls(ours_sgemm, &g, reps, start, stop);
                bare[s] = time_calls(bare_sgemm, &g, reps, start, stop);
            } else {
                bare[s] = time_calls(bare_sgemm, &g, reps, start, stop);
                ours[s] = time_calls(ours_sgemm, &g, reps, start, stop);
            }
        }
        CUBLAS_CHECK(cublasSetMathMode(g.bare, CUBLAS_TF32_TENSOR_OP_MATH));
        bare_sgemm(&g);
        for (int s = 0; s < SAMPLES; s++)
            tf32[s] = time_calls(bare_sgemm, &g, reps, start, stop);
        float o = median_ms(ours, SAMPLES), b = median_ms(bare, SAMPLES), t = median_ms(tf32, SAMPLES);
        double tflops = flop / (o * 1e-3) / 1e12, tf32_tflops = flop / (t * 1e-3) / 1e12;
        char tf32_share[32] = "n/a";
        if (f->tf32_peak > 0)
            snprintf(tf32_share, sizeof tf32_share, "%.0f%%", 100 * tf32_tflops * 1e12 / f->tf32_peak);
        printf("| %d | %.3f | %.3f | %.3f | %.1f | %.0f%% | %.3f | %.1f | %s |\n", g.n, o, b, o / b, tflops,
               100 * tflops * 1e12 / f->fp32_peak, t, tf32_tflops, tf32_share);
        fflush(stdout);
        CUBLAS_CHECK(cublasDestroy(g.bare));
        tensor_free(g.a);
        tensor_free(g.b);
        tensor_free(g.c);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
}

/* ---------------- copies ---------------- */

static void bench_copy(const device_facts *f, int quick) {
    const int64_t mib[] = {64, 256, 1024};
    int nsizes = quick ? 2 : 3;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    printf("\n### device-to-device copy on cuda:0 (bandwidth = 2 x bytes / time), median of %d samples\n\n", SAMPLES);
    printf("| size | ours ms | bare cudaMemcpy ms | ours/bare time | ours GB/s | %% of memory peak |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < nsizes; k++) {
        int64_t n = mib[k] * 1024 * 1024 / 4;
        size_t bytes = (size_t)n * sizeof(float);
        tensor *src = zeros(n, 0, 0), *dst = zeros(n, 0, 0);
        tensor_copy(dst, src); /* warm-up */
        float ours[SAMPLES], bare[SAMPLES];
        const int reps = 10;
        for (int s = 0; s < SAMPLES; s++) {
            for (int which = 0; which < 2; which++) {
                int do_ours = (s + which) % 2 == 0;
                CUDA_CHECK(cudaEventRecord(start, 0));
                for (int i = 0; i < reps; i++) {
                    if (do_ours) tensor_copy(dst, src);
                    else CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data, bytes, cudaMemcpyDeviceToDevice, 0));
                }
                CUDA_CHECK(cudaEventRecord(stop, 0));
                CUDA_CHECK(cudaEventSynchronize(stop));
                float ms = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
                (do_ours ? ours : bare)[s] = ms / reps;
            }
        }
        float o = median_ms(ours, SAMPLES), b = median_ms(bare, SAMPLES);
        double gbs = 2.0 * bytes / (o * 1e-3) / 1e9;
        printf("| %lld MiB | %.3f | %.3f | %.3f | %.0f | %.0f%% |\n", (long long)mib[k], o, b, o / b, gbs,
               100 * gbs * 1e9 / f->mem_peak);
        fflush(stdout);
        tensor_free(src);
        tensor_free(dst);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
}

/* ---------------- randn ---------------- */

static void bench_randn(void) {
    printf("\n### randn\n\n");
    manual_seed(0);
    tensor *warm = randn(1024, 0, 0);
    device_synchronize();
    double t0 = now_seconds();
    tensor *big = randn(8192, 8192, 0);
    device_synchronize();
    double dev_s = now_seconds() - t0;
    t0 = now_seconds();
    tensor *host = randn(2048, 2048, -1);
    double host_s = now_seconds() - t0;
    printf("randn(8192, 8192) on cuda:0: %.1f ms; on the host, randn(2048, 2048): %.1f ms "
           "(%.1f ns per number, so %.2f s for 8192 x 8192)\n",
           dev_s * 1e3, host_s * 1e3, host_s / (2048.0 * 2048) * 1e9, host_s * 16);
    tensor_free(warm);
    tensor_free(big);
    tensor_free(host);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    if (gpu_count() == 0) {
        printf("bench_gpu: skipped: no GPU visible (gpu_count() is 0)\n");
        return 0;
    }
    device_facts f = facts_of(0);
    printf("bench_gpu on cuda:0: %s, compute capability %d.%d, %d SMs at %.0f MHz, memory %.0f MHz x %.0f bits\n",
           f.name, f.major, f.minor, f.sms, f.clock_hz / 1e6, f.mem_clock_hz / 1e6, f.bus_bits);
    printf("peaks: fp32 %.1f TFLOP/s (%d lanes per SM), TF32 %s, memory %.0f GB/s\n", f.fp32_peak / 1e12,
           fp32_lanes(f.major, f.minor), f.tf32_peak > 0 ? "from the datasheet" : "unknown for this device",
           f.mem_peak / 1e9);
    if (f.tf32_peak > 0) printf("TF32 peak (datasheet, dense): %.1f TFLOP/s\n", f.tf32_peak / 1e12);
    bench_matmul(&f, quick);
    bench_copy(&f, quick);
    bench_randn();
    return 0;
}

#endif /* LECTERN_CUDA */
