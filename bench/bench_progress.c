/*
 * bench_progress.c: does communication move while its rank computes, and
 * what does the agreement check cost a timed loop?
 *
 * Each case runs with the rank's progress thread on and off
 * (runtime/comm/comm_progress.c; lx_progress_set, in the same ranks of the same
 * run), medians over RUNS, the slowest rank's figure:
 *
 *   isend      rank 0 isends 4 MiB to rank 1, then computes 300 ms (a sleep:
 *              the core is free) before its wait; the time from its isend to
 *              rank 1's receive returning.
 *   allreduce  a 16 MiB dist_all_reduce_async, 200 ms of such compute, the
 *              wait: total / max(compute, the blocking all-reduce alone).
 *              1.0 is perfect overlap; (compute + all-reduce) / max is none.
 *   check      a 1-float all-reduce and a 1-float ping-pong (one way): per
 *              call with the agreement check, and in a timed region, where
 *              the repeated calls skip it (dist_timed_begin).
 *
 *   build/bench/bench_progress [--out DIR]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm_progress.h" /* lx_progress_set: on and off in one run */
#include "lectern.h"
#include "ranks/ranks_mpi.h" /* lx_rank_comm(): the slowest rank's time */

enum { RUNS = 5, LAT_REPS = 2000 };

static double slowest(double seconds) {
    double worst = 0;
    MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    return worst;
}

static void nap(double seconds) {
    struct timespec ts = {0, (long)(seconds * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Seconds from rank 0's isend to rank 1's receive returning. */
static double isend_case(int rank) {
    tensor *t = zeros(1 << 20, 0, get_device(rank));
    dist_barrier();
    double sent = 0, got = 0;
    if (rank == 0) {
        dist_request *r = dist_isend(t, 1);
        sent = now_seconds();
        nap(0.3);
        dist_wait(r);
    } else if (rank == 1) {
        dist_recv(t, 0);
        got = now_seconds();
    }
    /* CLOCK_MONOTONIC is one clock for the ranks of a host. */
    double both[2] = {sent, got}, all[2];
    MPI_Allreduce(both, all, 2, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    tensor_free(t);
    return all[1] - all[0];
}

/* total / max(compute, all-reduce alone), and both parts. */
static void allreduce_case(int rank, double *ratio, double *total_s, double *alone_s) {
    tensor *t = zeros(16 << 18, 0, get_device(rank));
    dist_all_reduce(t, DIST_SUM);
    dist_barrier();
    double t0 = now_seconds();
    dist_all_reduce(t, DIST_SUM);
    double alone = slowest(now_seconds() - t0);
    dist_barrier();
    t0 = now_seconds();
    dist_request *r = dist_all_reduce_async(t, DIST_SUM);
    nap(0.2);
    dist_wait(r);
    double total = slowest(now_seconds() - t0);
    *ratio = total / (alone > 0.2 ? alone : 0.2);
    *total_s = total;
    *alone_s = alone;
    tensor_free(t);
}

/* Per call: a 1-float all-reduce, and a one-way 1-float message (half a
 * ping-pong between ranks 0 and 1), LAT_REPS in a row after a warm-up. */
static void latency_case(int rank, int world, int timed, double *allreduce_s, double *oneway_s) {
    tensor *t = zeros(1, 0, get_device(rank));
    dist_all_reduce(t, DIST_SUM); /* the warm-up carries the check */
    if (rank == 0) {
        dist_send(t, 1);
        dist_recv(t, 1);
    }
    if (rank == 1) {
        dist_recv(t, 0);
        dist_send(t, 0);
    }
    dist_barrier();
    if (timed) dist_timed_begin();
    double t0 = now_seconds();
    for (int i = 0; i < LAT_REPS; i++)
        dist_all_reduce(t, DIST_SUM);
    double a = now_seconds() - t0;
    t0 = now_seconds();
    for (int i = 0; i < LAT_REPS; i++) {
        if (rank == 0) {
            dist_send(t, 1);
            dist_recv(t, 1);
        }
        if (rank == 1) {
            dist_recv(t, 0);
            dist_send(t, 0);
        }
    }
    double p = now_seconds() - t0;
    if (timed) dist_timed_end();
    *allreduce_s = slowest(a) / LAT_REPS;
    *oneway_s = slowest(rank <= 1 ? p : 0) / LAT_REPS / 2;
    tensor_free(t);
}

static void ranks(int rank, int world, void *unused) {
    double isend[2][RUNS], ratio[2][RUNS], total[2][RUNS], alone[2][RUNS];
    for (int i = 0; i < RUNS; i++)
        for (int on = 0; on < 2; on++) { /* alternated, so load changes hit both alike */
            lx_progress_set(on);
            isend[on][i] = isend_case(rank);
            allreduce_case(rank, &ratio[on][i], &total[on][i], &alone[on][i]);
        }
    lx_progress_set(1);
    double lat[2][RUNS], pp[2][RUNS];
    for (int i = 0; i < RUNS; i++)
        for (int timed = 0; timed < 2; timed++)
            latency_case(rank, world, timed, &lat[timed][i], &pp[timed][i]);
    if (rank != 0) return;
    printf("\n%d ranks (%s), medians of %d runs, slowest rank\n", world, dist_backend(), RUNS);
    for (int on = 1; on >= 0; on--) {
        printf("progress %-3s  isend 4 MiB + 300 ms compute: receive after %7.1f ms\n", on ? "on" : "off",
               median_of(isend[on], RUNS) * 1e3);
        printf("progress %-3s  all-reduce 16 MiB async + 200 ms compute: total %6.1f ms, alone %5.1f ms, "
               "total/max(compute, alone) %.3f\n",
               on ? "on" : "off", median_of(total[on], RUNS) * 1e3, median_of(alone[on], RUNS) * 1e3,
               median_of(ratio[on], RUNS));
    }
    double checked = median_of(lat[0], RUNS), bare = median_of(lat[1], RUNS);
    double pp_checked = median_of(pp[0], RUNS), pp_bare = median_of(pp[1], RUNS);
    printf("1-float all-reduce per call: %.2f us checked, %.2f us in a timed region (check: %.2f us)\n", checked * 1e6,
           bare * 1e6, (checked - bare) * 1e6);
    printf("1-float message one way:     %.2f us checked, %.2f us in a timed region (check: %.2f us)\n",
           pp_checked * 1e6, pp_bare * 1e6, (pp_checked - pp_bare) * 1e6);
    fflush(stdout);
}

static void body(void) {
    spawn(ranks, 2, NULL, 0);
    spawn(ranks, 4, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
