/*
 * bench_core_balance.c: do two cores run the same arithmetic at the same
 * speed at the same time?
 *
 * The pipeline bubble formula assumes stages of equal speed. lecture_08's two
 * stages do the same arithmetic, yet on the 2-core VM one stage's operations
 * were at times 10-25% slower than the other's for a whole spawn. This
 * benchmark takes lectern out of the question: two processes, one pinned to
 * each of the first two CPUs, run the same loop at the same time (a pipeline
 * stage's forward: a 128 x 512 by 512 x 512 matrix product, then GELU through
 * the logistic function, over 16 micro-batches' buffers), no communication
 * between them. Each reports the time of each round; per round, the slower
 * process over the faster. Then each CPU alone.
 *
 *   build/bench/bench_core_balance [--out DIR]
 *
 * (sched_setaffinity and CPU_SET need _GNU_SOURCE: the Makefile defines it.)
 */
#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lectern.h"

enum { ROWS = 128, WIDTH = 512, BUFS = 16, ROUNDS = 20, PAIRS = 5, REPS = 25 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ms per micro-batch for each of ROUNDS rounds, into out. */
static void stage_loop(double *out) {
    float *act[BUFS], *w = malloc(sizeof(float) * WIDTH * WIDTH);
    if (!w) exit(1);
    for (int i = 0; i < WIDTH * WIDTH; i++)
        w[i] = 0.002f * (float)(i % 7 - 3);
    for (int b = 0; b < BUFS; b++) {
        act[b] = malloc(sizeof(float) * ROWS * WIDTH);
        if (!act[b]) exit(1);
        for (int i = 0; i < ROWS * WIDTH; i++)
            act[b][i] = 0.01f * (float)(i % 11 - 5);
    }
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now();
        for (int k = 0; k < REPS; k++)
            for (int b = 0; b + 1 < BUFS; b += 2) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, WIDTH, WIDTH, 1, act[b], WIDTH, w, WIDTH,
                            0, act[b + 1], WIDTH);
                float *x = act[b + 1];
                for (int i = 0; i < ROWS * WIDTH; i++) /* GELU's logistic form, as runtime/tensor/tensor.c */
                    x[i] = 0.01f * x[i] / (1.0f + expf(-1.5957691f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
            }
        out[r] = (now() - t0) * 1e3 / (REPS * BUFS / 2);
    }
    for (int b = 0; b < BUFS; b++)
        free(act[b]);
    free(w);
}

/* Runs stage_loop in a child pinned to `cpu`, writing its times to fd. */
static pid_t start_on(int cpu, int fd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(2);
    double t[ROUNDS];
    stage_loop(t);
    if (write(fd, t, sizeof t) != (ssize_t)sizeof t) _exit(3);
    _exit(0);
}

static int run(const int *cpus, int n, double t[][ROUNDS]) {
    int fds[2][2];
    pid_t pids[2];
    for (int i = 0; i < n; i++) {
        if (pipe(fds[i]) != 0) return -1;
        pids[i] = start_on(cpus[i], fds[i][1]);
        close(fds[i][1]);
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        while (got < sizeof t[i]) {
            ssize_t k = read(fds[i][0], (char *)t[i] + got, sizeof t[i] - got);
            if (k <= 0) break;
            got += (size_t)k;
        }
        close(fds[i][0]);
        int status;
        waitpid(pids[i], &status, 0);
        if (got != sizeof t[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = 0;
    }
    return ok ? 0 : -1;
}

static void body(void) {
    openblas_set_num_threads(1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 2) {
        printf("one CPU online: nothing to compare\n");
        return;
    }
    int both[2] = {0, 1};
    double t[2][ROUNDS], ratios[PAIRS * ROUNDS], worst = 1;
    int n = 0;
    printf("Same arithmetic on CPUs 0 and 1 at once (ms per micro-batch: median of %d rounds, CPU 0 | CPU 1; "
           "slower / faster per round: median, largest)\n",
           ROUNDS);
    for (int p = 0; p < PAIRS; p++) {
        if (run(both, 2, t) != 0) lecture_fail("a benchmark child failed");
        double pair[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            double a = t[0][r], b = t[1][r];
            pair[r] = ratios[n++] = a > b ? a / b : b / a;
            worst = fmax(worst, pair[r]);
        }
        double pworst = 1;
        for (int r = 0; r < ROUNDS; r++)
            pworst = fmax(pworst, pair[r]);
        printf("pair %d: %.3f | %.3f ms, slower/faster %.3f, largest %.3f\n", p + 1, median_of(t[0], ROUNDS),
               median_of(t[1], ROUNDS), median_of(pair, ROUNDS), pworst);
        fflush(stdout);
    }
    printf("all pairs: slower/faster median %.3f, largest %.3f (%d rounds)\n", median_of(ratios, n), worst, n);
    for (int cpu = 0; cpu < 2; cpu++) {
        if (run(&both[cpu], 1, t) != 0) lecture_fail("a benchmark child failed");
        printf("CPU %d alone: %.3f ms\n", cpu, median_of(t[0], ROUNDS));
    }
    double load[1];
    if (getloadavg(load, 1) == 1) printf("load average %.2f on %ld CPUs\n", load[0], cores);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
