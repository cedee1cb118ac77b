/*
 * bench_stage_msg.c: what a pipeline stage pays to receive an activation.
 *
 * Two ranks, as lecture_08's 2-stage pipeline: rank 0 isends a micro-batch's
 * activation (SIZES below) and goes on computing; rank 1 takes it. Each case
 * times, on rank 1, only the call that gives it the data, when the sender's
 * isend was made 5 ms before (so nothing waits for the sender):
 *
 *   recv       dist_recv, as the lecture's stage does;
 *   irecv      dist_irecv posted before rank 1 computed 5 ms, then its
 *              dist_wait (the transfer could move while it computed);
 *   bare       MPI_Recv on the same ranks, no lectern call around it.
 *
 * and, on rank 0, what the sender pays: the dist_isend call, and its
 * dist_wait once the receive is long done (both hash the tensor sent, so
 * that a change made through ->data in between is named at the wait).
 *
 * Then where the receive lands, at 256 KiB, bare MPI_Recv (sender as above):
 *
 *   reused     the same buffer every time, as a stage that keeps its
 *              receive buffers;
 *   written    a new buffer each time, written by the rank just before
 *              (memset), never by the kernel;
 *   untouched  a new buffer each time, never touched: the copy itself
 *              takes the page faults.
 *
 * Open MPI's receive copies with process_vm_readv (CMA), the kernel writing
 * the receiver's pages: on a VM whose hypervisor pays for the first time
 * the kernel writes a page, "written" and "untouched" cost several times
 * "reused", which is why lecture_08's pipeline stages receive into buffers
 * they made once.
 *
 * Medians over REPS, in microseconds.
 *
 *   build/bench/bench_stage_msg [--out DIR]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lectern.h"
#include "ranks/ranks_mpi.h" /* lx_rank_comm(): the bare MPI case */

enum { REPS = 41 };
static const int SIZES[] = {64 << 10, 256 << 10, 1 << 20}; /* bytes */

/* A busy core, as a stage's matmul keeps it. */
static void compute(double seconds) {
    double end = now_seconds() + seconds;
    volatile double x = 1;
    while (now_seconds() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 1.0000001 + 1e-9;
}

/* Rank 1's receive time; on rank 0, *isend_s and *wait_s. */
static double one(int rank, int mode, tensor *t, double *isend_s, double *wait_s) {
    size_t n = (size_t)t->numel;
    dist_barrier();
    double took = 0;
    if (rank == 0) {
        if (mode == 2) {
            MPI_Request r;
            MPI_Isend(t->data, (int)n, MPI_FLOAT, 1, 99, lx_rank_comm(), &r);
            compute(0.010);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else {
            double t0 = now_seconds();
            dist_request *r = dist_isend(t, 1);
            *isend_s = now_seconds() - t0;
            compute(0.010);
            t0 = now_seconds();
            dist_wait(r);
            *wait_s = now_seconds() - t0;
        }
    } else {
        if (mode == 1) {
            dist_request *r = dist_irecv(t, 0);
            compute(0.005);
            double t0 = now_seconds();
            dist_wait(r);
            took = now_seconds() - t0;
        } else {
            compute(0.005);
            double t0 = now_seconds();
            if (mode == 2) MPI_Recv(t->data, (int)n, MPI_FLOAT, 0, 99, lx_rank_comm(), MPI_STATUS_IGNORE);
            else dist_recv(t, 0);
            took = now_seconds() - t0;
        }
    }
    return took;
}

static void ranks(int rank, int world, void *unused) {
    (void)world, (void)unused;
    static const char *names[3] = {"recv", "irecv+wait", "bare MPI_Recv"};
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        tensor *t = zeros(SIZES[s] / 4, 0, get_device(rank));
        double v[3][REPS], isend[REPS], wait[REPS];
        for (int i = 0; i < REPS; i++)
            for (int mode = 0; mode < 3; mode++) /* alternated: load changes hit all alike */
                v[mode][i] = one(rank, mode, t, &isend[i], &wait[i]);
        double sender[2] = {median_of(isend, REPS), median_of(wait, REPS)};
        MPI_Bcast(sender, 2, MPI_DOUBLE, 0, lx_rank_comm());
        if (rank == 1) {
            printf("%7d KiB: receiver:", SIZES[s] >> 10);
            for (int mode = 0; mode < 3; mode++)
                printf("  %s %6.1f", names[mode], median_of(v[mode], REPS) * 1e6);
            printf("   sender: dist_isend %5.1f, dist_wait %5.1f (us)\n", sender[0] * 1e6, sender[1] * 1e6);
            fflush(stdout);
        }
        tensor_free(t);
    }
}

/* Rank 1's bare receive of 256 KiB into: the same buffer (mode 0), a new
 * one the rank wrote first (1), a new one never touched (2). New buffers are
 * kept until all REPS are done, so that none is memory freed a moment ago. */
static void landing(int rank, int world, void *unused) {
    (void)world, (void)unused;
    enum { N = (256 << 10) / 4 };
    static const char *names[3] = {"reused", "written", "untouched"};
    float *same = calloc(N, sizeof(float)), *fresh[REPS];
    if (!same) lecture_fail("out of memory");
    double v[3][REPS];
    for (int mode = 0; mode < 3; mode++) {
        for (int i = 0; i < REPS; i++) {
            float *dst = same;
            if (rank == 1 && mode > 0) {
                dst = fresh[i] = malloc(sizeof(float) * N);
                if (!dst) lecture_fail("out of memory");
                if (mode == 1) memset(dst, 0, sizeof(float) * N);
            }
            MPI_Barrier(lx_rank_comm());
            if (rank == 0) {
                MPI_Request r;
                MPI_Isend(same, N, MPI_FLOAT, 1, 98, lx_rank_comm(), &r);
                compute(0.008);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            } else {
                compute(0.004);
                double t0 = now_seconds();
                MPI_Recv(dst, N, MPI_FLOAT, 0, 98, lx_rank_comm(), MPI_STATUS_IGNORE);
                v[mode][i] = now_seconds() - t0;
            }
        }
        if (rank == 1 && mode > 0)
            for (int i = 0; i < REPS; i++)
                free(fresh[i]);
    }
    if (rank == 1) {
        printf("256 KiB bare MPI_Recv landing in:");
        for (int mode = 0; mode < 3; mode++)
            printf("  %s %6.1f", names[mode], median_of(v[mode], REPS) * 1e6);
        printf(" (us)\n");
        fflush(stdout);
    }
    free(same);
}

static void body(void) {
    spawn(ranks, 2, NULL, 0);
    spawn(landing, 2, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
