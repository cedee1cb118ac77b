/*
 * bench_matmul.c: what lectern's matmul costs next to calling BLAS directly.
 *
 * For each shape it times matmul_into() and a bare cblas_sgemm() on the same
 * buffers, alternating the two so that drift (clock boost, other load) hits
 * both alike, and reports the median of several runs after a warm-up. The
 * shapes are square matrices and the three products of one layer of the
 * lecture's MLP (batch 128, width 1024): forward y = x W, and backward
 * dW = x^T dy, dx = dy W^T. With a GPU, matmul on cuda:0 is timed too
 * (synchronised before the clock is read).
 *
 *   bench_matmul [--quick] [--runs N]
 *
 * Prints a markdown table.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

typedef struct shape {
    const char *name;
    int m, k, n; /* op(a) is m x k, op(b) is k x n */
    int trans_a, trans_b;
} shape;

static void bare_sgemm(tensor *c, const tensor *a, const tensor *b, const shape *s) {
    cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans, s->trans_b ? CblasTrans : CblasNoTrans, s->m,
                s->n, s->k, 1.0f, a->data, (int)a->shape[1], b->data, (int)b->shape[1], 0.0f, c->data, s->n);
}

/* One row of the table: medians in milliseconds. */
static void bench_shape(const shape *s, int runs, int gpu) {
    tensor *a = s->trans_a ? randn(s->k, s->m, -1) : randn(s->m, s->k, -1);
    tensor *b = s->trans_b ? randn(s->n, s->k, -1) : randn(s->k, s->n, -1);
    tensor *c = zeros(s->m, s->n, -1);
    double *ours = malloc(sizeof(double) * (size_t)runs);
    double *bare = malloc(sizeof(double) * (size_t)runs);
    double *dev = malloc(sizeof(double) * (size_t)runs);

    matmul_into(c, a, b, s->trans_a, s->trans_b, 1.0f, 0.0f); /* warm-up: threads, caches */
    bare_sgemm(c, a, b, s);
    for (int r = 0; r < runs; r++) {
        for (int which = 0; which < 2; which++) {
            int first_ours = r % 2 == 0; /* alternate who goes first */
            int do_ours = which == 0 ? first_ours : !first_ours;
            double t0 = now_seconds();
            if (do_ours) matmul_into(c, a, b, s->trans_a, s->trans_b, 1.0f, 0.0f);
            else bare_sgemm(c, a, b, s);
            double t = now_seconds() - t0;
            (do_ours ? ours : bare)[r] = t;
        }
    }

    double gpu_ms = -1.0;
    if (gpu) {
        tensor *ga = to_device(a, 0), *gb = to_device(b, 0), *gc = to_device(c, 0);
        matmul_into(gc, ga, gb, s->trans_a, s->trans_b, 1.0f, 0.0f);
        device_synchronize();
        for (int r = 0; r < runs; r++) {
            double t0 = now_seconds();
            matmul_into(gc, ga, gb, s->trans_a, s->trans_b, 1.0f, 0.0f);
            device_synchronize();
            dev[r] = now_seconds() - t0;
        }
        gpu_ms = 1e3 * median_of(dev, runs);
        tensor_free(ga);
        tensor_free(gb);
        tensor_free(gc);
    }

    double ours_ms = 1e3 * median_of(ours, runs), bare_ms = 1e3 * median_of(bare, runs);
    double gflop = 2.0 * s->m * s->n * (double)s->k * 1e-9;
    char gpu_text[64] = "-";
    if (gpu_ms >= 0) snprintf(gpu_text, sizeof gpu_text, "%.3f (%.0f GFLOP/s)", gpu_ms, gflop / (gpu_ms * 1e-3));
    printf("| %-22s | %4dx%-4d @ %4dx%-4d | %9.3f | %9.3f | %5.3f | %7.1f | %s |\n", s->name, s->m, s->k, s->k, s->n,
           ours_ms, bare_ms, ours_ms / bare_ms, gflop / (ours_ms * 1e-3), gpu_text);
    fflush(stdout);

    free(ours);
    free(bare);
    free(dev);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}

int main(int argc, char **argv) {
    int quick = 0, runs = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--runs N]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1) runs = 1;
    if (quick && runs > 3) runs = 3;

    const shape shapes[] = {
            {"square", 256, 256, 256, 0, 0},
            {"square", 512, 512, 512, 0, 0},
            {"square", 1024, 1024, 1024, 0, 0},
            {"square", 2048, 2048, 2048, 0, 0},
            {"MLP forward x W", 128, 1024, 1024, 0, 0},
            {"MLP backward x^T dy", 1024, 128, 1024, 1, 0},
            {"MLP backward dy W^T", 128, 1024, 1024, 0, 1},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int gpu = gpu_count() > 0;
    manual_seed(0);

    printf("matmul: lectern's matmul_into vs a bare cblas_sgemm on the same buffers\n");
    printf("(float32, median of %d runs after a warm-up, milliseconds; OpenBLAS %s)\n\n", runs, openblas_get_config());
    printf("| %-22s | %-21s | %9s | %9s | %5s | %7s | %s |\n", "case", "shape", "ours ms", "cblas ms", "ratio",
           "GFLOP/s", gpu ? "cuda:0 ms" : "cuda:0 (no GPU)");
    printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "-----------------------",
           "----------:", "----------:", "------:", "--------:", "---");
    for (int i = 0; i < nshapes; i++) {
        if (quick && shapes[i].m * (double)shapes[i].n * shapes[i].k > 1024.0 * 1024 * 1024)
            continue; /* --quick leaves out the 2048 cube */
        bench_shape(&shapes[i], runs, gpu);
    }
    return 0;
}
