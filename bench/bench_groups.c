/*
 * bench_groups.c: what a process group costs to make, and the all-to-all
 * (dist_all_to_all, dist_all_to_all_in) against the bare MPI_Alltoall on the
 * same buffers, in the same ranks, in the same run.
 *
 * Making a group: every rank calls dist_new_group (pairs {0,1}, {2,3}: the
 * lists exchanged and checked, MPI_Comm_split, the duplicates the check and
 * the backend keep) and dist_group_free; the slowest rank's time, median of
 * 51. Beside it the bare MPI_Comm_split + MPI_Comm_free of the same pairs.
 *
 * All-to-all: each rank's input is `size` MB (world_size pieces); time as
 * bench_allreduce.c measures it: a barrier, the call, the slowest rank's
 * time (MPI_MAX); lectern's call with its agreement check, lectern's call in
 * a timed region (dist_timed_begin: the check made once by the warm-up) and
 * the bare call take turns, each run starting with the next, and each figure
 * is the median of the runs. ratio = bare time / lectern's time (>= 0.95 is
 * the goal from 1 MB). The group rows run in the pairs of 4 ranks against
 * MPI_Alltoall on an MPI_Comm_split communicator of the same pairs, checked
 * and in a timed region as the world's (a group's calls agreed on before
 * skip their check there too).
 *
 *   build/bench/bench_groups [--out DIR]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "ranks/ranks_mpi.h" /* lx_rank_comm(): the spawn's ranks, for the bare calls */

static const double MB = 1024.0 * 1024.0;
static const int SIZES_MB[] = {1, 4, 16, 64};
enum { N_SIZES = 4, MAX_REPEATS = 101, MAKES = 51 };

static double slowest(double seconds) {
    double worst = 0;
    MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    return worst;
}

static void make_groups(int rank, int world_size) {
    MPI_Comm ranks = lx_rank_comm();
    int first = rank - rank % 2;
    int list[2] = {first, first + 1};
    int n = first + 1 < world_size ? 2 : 1;
    double ours[MAKES], bare[MAKES];
    for (int i = 0; i < MAKES; i++) {
        MPI_Barrier(ranks);
        double t0 = now_seconds();
        dist_group *g = dist_new_group(list, n);
        dist_group_free(g);
        ours[i] = slowest(now_seconds() - t0);
        MPI_Barrier(ranks);
        t0 = now_seconds();
        MPI_Comm c;
        MPI_Comm_split(ranks, first, rank, &c);
        MPI_Comm_free(&c);
        bare[i] = slowest(now_seconds() - t0);
    }
    double o = median_of(ours, MAKES), b = median_of(bare, MAKES);
    if (rank == 0) {
        printf("\n%d ranks: dist_new_group + dist_group_free of pairs: %.3f ms; bare MPI_Comm_split + "
               "MPI_Comm_free: %.3f ms (medians of %d)\n",
               world_size, o * 1e3, b * 1e3, MAKES);
        note("making a group on %d ranks: %.3f ms (bare MPI_Comm_split %.3f ms)", world_size, o * 1e3, b * 1e3);
    }
}

enum { OURS, OURS_TIMED, BARE, N_WAYS };

static double run_once(int way, dist_group *g, MPI_Comm bare_comm, tensor *out, tensor *in) {
    MPI_Comm ranks = lx_rank_comm();
    MPI_Barrier(ranks);
    if (way == OURS_TIMED) dist_timed_begin();
    double t0 = now_seconds();
    int p = g ? dist_group_size(g) : dist_world_size();
    if (way == BARE)
        MPI_Alltoall(in->data, (int)(in->numel / p), MPI_FLOAT, out->data, (int)(in->numel / p), MPI_FLOAT, bare_comm);
    else dist_all_to_all_in(g, out, in);
    double t = now_seconds() - t0;
    if (way == OURS_TIMED) dist_timed_end();
    return slowest(t);
}

static void all_to_all(int rank, int world_size, dist_group *g, MPI_Comm bare_comm, const char *what) {
    int ways = N_WAYS;
    int order[N_WAYS] = {OURS, OURS_TIMED, BARE};
    if (rank == 0) {
        printf("\n%s, %d ranks: all-to-all of `size` MB per rank; times in s, medians of runs; ratio = bare / "
               "lectern\n%-8s %5s %11s %11s %11s %8s %8s\n",
               what, world_size, "size_MB", "runs", "lectern_s", "timed_s", "bare_s", "checked", "timed");
        fflush(stdout);
    }
    for (int k = 0; k < N_SIZES; k++) {
        int p = g ? dist_group_size(g) : world_size;
        int64_t n = (int64_t)(SIZES_MB[k] * MB / sizeof(float));
        n -= n % p;
        tensor *in = arange(n, -1), *out = zeros(n, 0, -1);
        int runs = SIZES_MB[k] <= 4 ? MAX_REPEATS : SIZES_MB[k] <= 16 ? 21 : 7;
        double t[N_WAYS][MAX_REPEATS];
        run_once(OURS, g, bare_comm, out, in);
        run_once(BARE, g, bare_comm, out, in);
        for (int i = 0; i < runs; i++)
            for (int j = 0; j < ways; j++) {
                int way = order[(i + j) % ways];
                t[way][i] = run_once(way, g, bare_comm, out, in);
            }
        double to = median_of(t[OURS], runs), tb = median_of(t[BARE], runs);
        double tt = median_of(t[OURS_TIMED], runs);
        if (rank == 0) {
            printf("%-8d %5d %11.5f %11.5f %11.5f %8.3f %8.3f\n", SIZES_MB[k], runs, to, tt, tb, tb / to, tb / tt);
            note("%s all-to-all %d MB on %d ranks: %.5f s (timed region %.5f s), bare MPI_Alltoall %.5f s "
                 "(ratio %.3f checked, %.3f timed)",
                 what, SIZES_MB[k], world_size, to, tt, tb, tb / to, tb / tt);
            fflush(stdout);
        }
        tensor_free(in);
        tensor_free(out);
    }
}

static void measure(int rank, int world_size, void *args) {
    (void)args;
    make_groups(rank, world_size);
    all_to_all(rank, world_size, NULL, lx_rank_comm(), "world");
    if (world_size >= 4) {
        int first = rank - rank % 2;
        int list[2] = {first, first + 1};
        dist_group *g = dist_new_group(list, 2);
        MPI_Comm c;
        MPI_Comm_split(lx_rank_comm(), first, rank, &c);
        all_to_all(rank, world_size, g, c, "pairs (a group of 2)");
        MPI_Comm_free(&c);
        dist_group_free(g);
    }
}

static void body(void) {
    spawn(measure, 2, NULL, 0);
    spawn(measure, 4, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
