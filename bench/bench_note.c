/*
 * bench_note.c: what one note() costs, and what writing the trace costs.
 *
 * Each of N notes (default 100,000) is timed on its own from a call stack
 * four lecture frames deep, like a lecture's; we report the median and the
 * 99th percentile, and the same for its parts (stack capture alone, markdown
 * to HTML alone), then the time to write the whole trace (JSON + .js twin)
 * and its size. Medians, not means: this machine is shared and noisy.
 *
 *   build/bench/bench_note [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("%-28s median %7.2f us   p99 %7.2f us   (n = %d)\n", what, t[n / 2] * 1e6, t[(int)(n * 0.99)] * 1e6, n);
}

static double *samples;
static int n_samples;

/* Four frames deep, as in lecture_08 -> ddp -> ... -> note. */
static void level4(int i) {
    double t = now();
    note("Rank %d: step = %d, loss = **%.6f**, see `params`", i % 4, i % 5, 0.0024 * i);
    samples[i] = now() - t;
}
static void level3(int i) { level4(i); }
static void level2(int i) { level3(i); }
static void level1(void) {
    for (int i = 0; i < n_samples; i++)
        level2(i);
}

static void capture4(int i) {
    lx_frame f[LX_MAX_FRAMES];
    double t = now();
    lx_stack_capture(f, LX_MAX_FRAMES);
    samples[i] = now() - t;
}
static void capture3(int i) { capture4(i); }
static void capture2(int i) { capture3(i); }
static void capture1(void) {
    for (int i = 0; i < n_samples; i++)
        capture2(i);
}

int main(int argc, char **argv) {
    n_samples = argc > 1 ? atoi(argv[1]) : 100000;
    if (n_samples < 100) n_samples = 100;
    samples = malloc(sizeof(double) * (size_t)n_samples);
    char dir[] = "/tmp/lectern-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;

    printf("note() cost, %d notes, 4 lecture frames deep\n", n_samples);
    lx_trace_init("bench_note", dir);
    lx_check_listen(); /* as lecture_main: each step counted and graded */
    lx_grade_listen();
    lx_stack_set_root((const void *)level1);
    level1();
    report("note() total", samples, n_samples);

    lx_stack_set_root((const void *)capture1);
    capture1();
    report("  stack capture", samples, n_samples);

    for (int i = 0; i < n_samples; i++) {
        double t = now();
        char *h = lx_markdown_to_html("Rank 1: step = 3, loss = **0.001234**, see `params`");
        samples[i] = now() - t;
        free(h);
    }
    report("  markdown -> HTML", samples, n_samples);

    int writes = 5;
    double w[5];
    for (int k = 0; k < writes; k++) {
        double t = now();
        lx_trace_write();
        w[k] = now() - t;
    }
    qsort(w, (size_t)writes, sizeof *w, cmp);
    char *path = lx_fmt("%s/bench_note.json", dir);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    printf("trace write (%d steps)      median %7.1f ms   (%d writes; JSON %.1f MB, plus the .js twin)\n", n_samples,
           w[writes / 2] * 1e3, writes, (double)size / 1e6);

    lx_trace_free();
    char *rm = lx_fmt("rm -rf %s", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(rm);
    free(path);
    free(samples);
    return 0;
}
