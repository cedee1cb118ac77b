/*
 * bench_overlap.c: does an async all-reduce hide behind computation?
 *
 * On 2 and 4 ranks, each rank times (slowest rank counts, median of runs):
 *   compute    a chain of matmuls alone
 *   allreduce  a blocking dist_all_reduce alone
 *   both       dist_all_reduce_async, the same chain, dist_wait
 * and prints both / (compute + allreduce): 1.0 is no overlap at all, and
 * max(compute, allreduce) / (compute + allreduce) is perfect overlap.
 *
 *   build/bench/bench_overlap [--out DIR]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "ranks/ranks_mpi.h" /* lx_rank_comm(): the slowest rank's time */

enum { RUNS = 7, MATMULS = 40 };
static const int SIZES_MB[] = {16, 64};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double slowest(double seconds) {
    double worst = 0;
    MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    return worst;
}

static void compute(const tensor *x) {
    for (int i = 0; i < MATMULS; i++) {
        tensor *y = matmul(x, x);
        tensor_free(y);
    }
}

static void ranks(int rank, int world, void *unused) {
    int dev = get_device(rank);
    tensor *x = randn(512, 512, dev);
    if (rank == 0)
        printf("\n%d ranks (%s), %d matmuls of 512x512, median of %d runs (slowest rank)\n"
               "size_MB   compute_s  allreduce_s     both_s  both/sum  best/sum\n",
               world, dist_backend(), MATMULS, RUNS);
    for (size_t s = 0; s < sizeof SIZES_MB / sizeof SIZES_MB[0]; s++) {
        tensor *t = zeros((int64_t)SIZES_MB[s] * 1024 * 1024 / 4, 0, dev);
        double c[RUNS], r[RUNS], b[RUNS];
        for (int k = 0; k < RUNS; k++) {
            dist_barrier();
            double t0 = now_seconds();
            compute(x);
            device_synchronize();
            c[k] = slowest(now_seconds() - t0);
            dist_barrier();
            t0 = now_seconds();
            dist_all_reduce(t, DIST_SUM);
            device_synchronize();
            r[k] = slowest(now_seconds() - t0);
            dist_barrier();
            t0 = now_seconds();
            dist_request *req = dist_all_reduce_async(t, DIST_SUM);
            compute(x);
            dist_wait(req);
            device_synchronize();
            b[k] = slowest(now_seconds() - t0);
        }
        qsort(c, RUNS, sizeof c[0], cmp);
        qsort(r, RUNS, sizeof r[0], cmp);
        qsort(b, RUNS, sizeof b[0], cmp);
        double C = c[RUNS / 2], R = r[RUNS / 2], B = b[RUNS / 2];
        if (rank == 0)
            printf("%7d %11.4f %12.4f %10.4f %9.2f %9.2f\n", SIZES_MB[s], C, R, B, B / (C + R),
                   (C > R ? C : R) / (C + R));
        fflush(stdout);
        tensor_free(t);
    }
    tensor_free(x);
}

static void body(void) {
    spawn(ranks, 2, NULL, 0);
    spawn(ranks, 4, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
