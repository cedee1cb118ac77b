/*
 * bench_host_alloc.c: what keeping freed host memory for the next tensor
 * (runtime/tensor/host_pool.c) saves a training step on the CPU.
 *
 * The work is a pipeline stage's forward as lecture_08 runs it: for each of
 * 8 micro-batches (128 x 512 floats, 256 KiB), two layers of
 * y = gelu(x @ w) with 512 x 512 weights, each output a new tensor, all of
 * them kept until the step ends (GPipe keeps every micro-batch's
 * activations for its backward), then freed. Two ways, each in a child
 * process of its own (the choice is made once per process):
 *
 *   glibc   LECTERN_HOST_POOL=0: every block from glibc and back to it
 *   kept    the runtime's default: a freed block of 64 KiB or more kept for
 *           the next tensor of its size
 *
 * Reported: CPU milliseconds per step, the kernel's included (median of the
 * steps after a warm-up of 3), page faults per step (getrusage), and the
 * ratio glibc / kept, both ways measured in one run of this program. OpenBLAS on one thread, as a rank
 * of a 2-rank spawn on 2 cores runs it.
 *
 *   bench_host_alloc [--quick]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lectern.h"

enum { MICRO_BATCHES = 8, LAYERS = 2, ROWS = 128, WIDTH = 512, WARM_UP = 3, STEPS = 43, QUICK_STEPS = 11 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* CPU time, the kernel's included (page faults are spent there): on a
 * shared machine a step's wall time also counts other processes' turns. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static long faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt + u.ru_majflt;
}

/* One way, in this (child) process: out[0] ms per step, out[1] faults per step. */
static void measure(int steps, double out[2]) {
    openblas_set_num_threads(1);
    tensor *w[LAYERS];
    for (int j = 0; j < LAYERS; j++)
        w[j] = randn(WIDTH, WIDTH, -1);
    tensor *x = randn(ROWS, WIDTH, -1);
    double ms[STEPS];
    long fault_total = 0;
    for (int s = 0; s < steps; s++) {
        tensor *kept[MICRO_BATCHES][2 * LAYERS];
        long f0 = faults();
        double t0 = cpu_ms();
        for (int k = 0; k < MICRO_BATCHES; k++) {
            const tensor *in = x;
            for (int j = 0; j < LAYERS; j++) {
                kept[k][2 * j] = matmul(in, w[j]);
                kept[k][2 * j + 1] = gelu(kept[k][2 * j]);
                in = kept[k][2 * j + 1];
            }
        }
        ms[s] = cpu_ms() - t0;
        long f1 = faults();
        for (int k = 0; k < MICRO_BATCHES; k++)
            for (int i = 0; i < 2 * LAYERS; i++)
                tensor_free(kept[k][i]);
        /* The first steps are the warm-up: glibc adapts its threshold to
         * the blocks it has seen freed. */
        if (s >= WARM_UP) fault_total += f1 - f0;
    }
    int n = steps - WARM_UP;
    qsort(ms + WARM_UP, (size_t)n, sizeof(double), cmp_double);
    out[0] = ms[WARM_UP + n / 2];
    out[1] = (double)fault_total / n;
    for (int j = 0; j < LAYERS; j++)
        tensor_free(w[j]);
    tensor_free(x);
}

/* Runs measure() in a child with LECTERN_HOST_POOL set as asked. */
static int run_child(const char *pool, int steps, double out[2]) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fd[0]);
        setenv("LECTERN_HOST_POOL", pool, 1);
        double r[2];
        measure(steps, r);
        ssize_t n = write(fd[1], r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], out, 2 * sizeof(double));
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return n == (ssize_t)(2 * sizeof(double)) && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    int steps = quick ? QUICK_STEPS : STEPS;
    double glibc[2], kept[2];
    /* Alternated, three times each: the machine's load moves between them. */
    double g_ms[3], k_ms[3];
    for (int r = 0; r < 3; r++) {
        if (run_child("0", steps, glibc) != 0 || run_child("1", steps, kept) != 0) {
            fprintf(stderr, "bench_host_alloc: a measuring child failed\n");
            return 1;
        }
        g_ms[r] = glibc[0];
        k_ms[r] = kept[0];
    }
    qsort(g_ms, 3, sizeof(double), cmp_double);
    qsort(k_ms, 3, sizeof(double), cmp_double);
    double load = 0;
    getloadavg(&load, 1);
    printf("bench_host_alloc: a pipeline stage's forward, %d micro-batches of %dx%d, %d layers of gelu(x @ w), "
           "outputs kept until the step ends; CPU time, median of %d steps after %d of warm-up, median of 3 "
           "alternated runs each way; load average %.1f on %ld cores\n",
           MICRO_BATCHES, ROWS, WIDTH, LAYERS, steps - WARM_UP, WARM_UP, load, sysconf(_SC_NPROCESSORS_ONLN));
    printf("| host memory | CPU ms per step | page faults per step |\n|---|---|---|\n");
    printf("| glibc's defaults (LECTERN_HOST_POOL=0) | %.2f | %.0f |\n", g_ms[1], glibc[1]);
    printf("| kept (the runtime's default) | %.2f | %.0f |\n", k_ms[1], kept[1]);
    printf("glibc / kept: %.2fx the time\n", k_ms[1] > 0 ? g_ms[1] / k_ms[1] : 0.0);
    return 0;
}
