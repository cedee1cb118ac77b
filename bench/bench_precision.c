/*
 * bench_precision.c: what bf16 costs and saves on the CPU.
 *
 * 1. matmul: a bf16 product against the fp32 one of the same shape, both
 *    through lectern's matmul_into. "bf16, converting" times to_dtype of
 *    both fp32 inputs and the product (what a step that keeps fp32 master
 *    weights pays for each product); "bf16 inputs" times the product of
 *    tensors already in bf16 (matmul widens them to fp32 and calls sgemm:
 *    Debian's OpenBLAS has no bf16 kernel). The three alternate, each run
 *    starting with the next, so drift hits all alike; medians of the runs.
 *
 * 2. all-reduce: a bf16 tensor against an fp32 tensor of the same element
 *    count (half the bytes), on 2 and 4 ranks, 64 MiB of fp32. The slowest
 *    rank's time counts (dist_timer); the two alternate; medians. The bf16
 *    sum is an MPI user op that widens both buffers to fp32, adds and rounds
 *    back (runtime/comm/), so the bytes halve and the reduction's arithmetic
 *    grows: the ratio says which wins here.
 *
 *   build/bench/bench_precision [--quick]
 *
 * Prints markdown tables; ratios are bf16 / fp32 time, from one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { MAX_RUNS = 15 };

/* ---- 1. matmul ---- */

enum { FP32, BF16_CONVERTING, BF16_INPUTS, N_MATMUL_WAYS };

static double time_matmul(int way, tensor *c, const tensor *a, const tensor *b, const tensor *a16, const tensor *b16) {
    double t0 = now_seconds();
    if (way == FP32) {
        matmul_into(c, a, b, 0, 0, 1.0f, 0.0f);
    } else if (way == BF16_CONVERTING) {
        tensor *x = to_dtype(a, DTYPE_BF16), *y = to_dtype(b, DTYPE_BF16);
        matmul_into(c, x, y, 0, 0, 1.0f, 0.0f);
        tensor_free(x);
        tensor_free(y);
    } else {
        matmul_into(c, a16, b16, 0, 0, 1.0f, 0.0f);
    }
    return now_seconds() - t0;
}

static void bench_matmul(int n, int runs) {
    tensor *a = randn(n, n, -1), *b = randn(n, n, -1), *c = zeros(n, n, -1);
    tensor *a16 = to_dtype(a, DTYPE_BF16), *b16 = to_dtype(b, DTYPE_BF16);
    double t[N_MATMUL_WAYS][MAX_RUNS];
    for (int w = 0; w < N_MATMUL_WAYS; w++)
        time_matmul(w, c, a, b, a16, b16); /* warm-up: threads, pages */
    for (int r = 0; r < runs; r++)
        for (int j = 0; j < N_MATMUL_WAYS; j++) {
            int w = (r + j) % N_MATMUL_WAYS;
            t[w][r] = time_matmul(w, c, a, b, a16, b16);
        }
    double ms[N_MATMUL_WAYS];
    for (int w = 0; w < N_MATMUL_WAYS; w++)
        ms[w] = 1e3 * median_of(t[w], runs);
    printf("| %4d^3 | %5d | %9.3f | %9.3f | %9.3f | %5.2f | %5.2f |\n", n, runs, ms[FP32], ms[BF16_CONVERTING],
           ms[BF16_INPUTS], ms[BF16_CONVERTING] / ms[FP32], ms[BF16_INPUTS] / ms[FP32]);
    fflush(stdout);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(a16);
    tensor_free(b16);
}

/* ---- 2. all-reduce ---- */

typedef struct allreduce_args {
    int64_t elements;
    int runs;
} allreduce_args;

static double time_all_reduce(tensor *t) {
    dist_timer timer = {0};
    dist_timer_start(&timer);
    dist_all_reduce(t, DIST_SUM);
    dist_timer_stop(&timer);
    return timer.max;
}

static void all_reduce_main(int rank, int world_size, void *args) {
    const allreduce_args *a = args;
    tensor *f = zeros(a->elements, 0, -1), *z = zeros(a->elements, 0, -1), *h = to_dtype(z, DTYPE_BF16);
    tensor_free(z);
    double t[2][MAX_RUNS];
    time_all_reduce(f); /* warm-up: pages, connections, the agreement check */
    time_all_reduce(h);
    for (int r = 0; r < a->runs; r++)
        for (int j = 0; j < 2; j++) {
            int w = (r + j) % 2;
            t[w][r] = time_all_reduce(w == 0 ? f : h);
        }
    if (rank == 0) {
        double f_ms = 1e3 * median_of(t[0], a->runs), h_ms = 1e3 * median_of(t[1], a->runs);
        printf("| %5d | %7.0f | %5d | %9.1f | %9.1f | %5.2f |\n", world_size,
               (double)a->elements * sizeof(float) / (1 << 20), a->runs, f_ms, h_ms, h_ms / f_ms);
        fflush(stdout);
    }
    tensor_free(f);
    tensor_free(h);
}

/* The machine's load when the run started: these figures are ratios of two
 * things timed in turn, but a loaded 2-core machine still moves them. */
static void print_load(void) {
    char text[128] = "unknown\n";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(text, sizeof text, f)) snprintf(text, sizeof text, "unknown\n");
        fclose(f);
    }
    printf("load average at the start (1, 5, 15 min, ...): %s\n", text);
}

static void body(void) {
    int quick = lecture_quick(), runs = quick ? 3 : 11;
    manual_seed(0);
    print_load();
    printf("matmul: bf16 against fp32 through matmul_into, median of runs, ms\n\n");
    printf("| shape | runs | fp32 ms | bf16, converting ms | bf16 inputs ms | converting / fp32 | inputs / fp32 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    const int sizes[] = {256, 512, 1024};
    for (int i = 0; i < (quick ? 2 : 3); i++)
        bench_matmul(sizes[i], runs);
    allreduce_args a = {.elements = (int64_t)(quick ? 4 : 64) << 18, .runs = quick ? 3 : 11};
    printf("\nall-reduce (sum) of the same element count, fp32 and bf16, slowest rank's time, median of runs\n\n");
    printf("| ranks | fp32 MiB | runs | fp32 ms | bf16 ms | bf16 / fp32 |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);
    spawn(all_reduce_main, 2, &a, sizeof a);
    spawn(all_reduce_main, 4, &a, sizeof a);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
