/*
 * bench_allreduce.c: bus bandwidth of the runtime's collectives against the
 * bare MPI call on the same buffers, in the same ranks, in the same run.
 *
 * Definitions are nccl-tests' (docs/benchmarks.md), with `bytes` the size of
 * the full vector:
 *   algbw = bytes / time
 *   all_reduce:                 busbw = algbw * 2(n-1)/n
 *   reduce_scatter, all_gather: busbw = algbw * (n-1)/n
 *     (reduce_scatter: bytes = input = n * each rank's output;
 *      all_gather:     bytes = output = n * each rank's input)
 * busbw is what each link carries, so it can be compared across n.
 *
 * time: every rank waits at a barrier, runs the call, and the slowest rank's
 * time counts (an MPI_MAX reduction of the times). The runtime's call and the
 * bare one alternate, first one then the other, so both see the same machine
 * state; each figure is the median of several runs.
 *
 * On a machine with fewer GPUs than ranks the ranks share the GPUs
 * (docs/gpu.md): the runtime's side then runs on device tensors of
 * get_device(rank), staged through pinned host buffers, and the bare side
 * stays MPI on host buffers of the same size: what the staging costs
 * against the same transfer that never leaves host memory.
 *
 *   build/bench/bench_allreduce [--out DIR]   (default DIR: a temporary folder)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "ranks/ranks_mpi.h" /* lx_rank_comm(): the spawn's ranks, for the bare calls */

enum { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, N_OPS };
static const char *const OP_NAMES[] = {"all_reduce", "reduce_scatter", "all_gather"};

static const double MB = 1024.0 * 1024.0;
static const int SIZES_MB[] = {1, 4, 16, 64, 256};
enum { N_SIZES = 5, MAX_REPEATS = 101 };

/* The slowest rank's time for one call. */
static double slowest(double seconds) {
    double worst = 0;
    MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    return worst;
}

/* How a call is made: through the runtime with its agreement check (as a
 * lecture's single call pays it), through the runtime inside a timed region
 * (dist_timed_begin: the check was made once, by the warm-up; what a
 * lecture's timed loop pays), or straight to MPI. */
enum { OURS, OURS_TIMED, BARE, N_WAYS };

/* One timed call: through the runtime on full and part, or straight to MPI
 * on full_h and part_h (host tensors: the same ones where the spawn runs on
 * the CPU). */
static double run_once(int op, int way, tensor *full_t, tensor *part_t, tensor *full_h, tensor *part_h) {
    int bare = way == BARE;
    tensor *full = bare ? full_h : full_t, *part = bare ? part_h : part_t;
    int count = (int)part->numel;
    MPI_Comm ranks = lx_rank_comm();
    MPI_Barrier(ranks);
    if (way == OURS_TIMED) dist_timed_begin();
    double t0 = now_seconds();
    if (op == OP_ALL_REDUCE) {
        if (bare) MPI_Allreduce(MPI_IN_PLACE, full->data, (int)full->numel, MPI_FLOAT, MPI_SUM, ranks);
        else dist_all_reduce(full, DIST_SUM);
    } else if (op == OP_REDUCE_SCATTER) {
        if (bare) MPI_Reduce_scatter_block(full->data, part->data, count, MPI_FLOAT, MPI_SUM, ranks);
        else dist_reduce_scatter(part, full, DIST_SUM);
    } else {
        if (bare) MPI_Allgather(part->data, count, MPI_FLOAT, full->data, count, MPI_FLOAT, ranks);
        else dist_all_gather(full, part);
    }
    device_synchronize();
    double t = now_seconds() - t0;
    if (way == OURS_TIMED) dist_timed_end(); /* its comparison is outside the timing */
    return slowest(t);
}

static double bus_factor(int op, int n) { return op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n; }

/* What the agreement check (runtime/comm/comm_agree.c) adds to every collective
 * outside a timed region when the ranks agree: one MPI_Allreduce of 8 int64
 * with MPI_MIN. Timed alone, it bounds the ratio the checked column can
 * show: at best t_bare / (t_bare + t_check). */
static double check_alone(void) {
    MPI_Comm ranks = lx_rank_comm();
    enum { RUNS = 101 };
    double t[RUNS];
    int64_t v[8] = {0};
    for (int i = 0; i < RUNS; i++) {
        MPI_Barrier(ranks);
        double t0 = now_seconds();
        MPI_Allreduce(MPI_IN_PLACE, v, 8, MPI_INT64_T, MPI_MIN, ranks);
        t[i] = slowest(now_seconds() - t0);
    }
    return median_of(t, RUNS);
}

static void measure(int rank, int world_size, void *args) {
    (void)args;
    double check = check_alone();
    if (rank == 0) {
        printf("\n%d ranks: the agreement check alone (MPI_Allreduce of 8 int64): %.1f us, median of 101\n", world_size,
               check * 1e6);
        note("agreement check alone on %d ranks: %.1f us", world_size, check * 1e6);
    }
    /* The bare side is MPI on host memory. Under NCCL it is not run (device
     * memory, another library); on shared GPUs it is, on host buffers. */
    int compare = strcmp(dist_backend(), "mpi") == 0;
    int dev = get_device(rank);
    if (rank == 0) {
        printf("\n%d ranks (%s, tensors on %s); busbw in GB/s (1 GB = 1e9 bytes), median of runs;\n"
               "ratio: lectern's busbw / bare MPI's (checked: with the agreement check; timed: in a timed region)\n",
               world_size, dist_backend(), dev < 0 ? "the CPU" : "cuda:0, shared");
        printf("%-15s %8s %5s %11s %11s %11s %11s %11s %8s %8s\n", "collective", "size_MB", "runs", "lectern_s",
               "lectern_bus", "timed_s", "bare_mpi_s", "bare_bus", "checked", "timed");
        fflush(stdout);
    }
    for (int op = 0; op < N_OPS; op++) {
        for (int k = 0; k < N_SIZES; k++) {
            int64_t full_n = (int64_t)(SIZES_MB[k] * MB / sizeof(float));
            full_n -= full_n % world_size;
            tensor *full = zeros(full_n, 0, dev);
            tensor *part = zeros(full_n / world_size, 0, dev);
            tensor *full_h = compare && dev >= 0 ? zeros(full_n, 0, -1) : full;
            tensor *part_h = compare && dev >= 0 ? zeros(full_n / world_size, 0, -1) : part;
            /* More runs where a run is short and the noise relatively large. */
            int runs = SIZES_MB[k] <= 4 ? MAX_REPEATS : SIZES_MB[k] <= 16 ? 21 : SIZES_MB[k] <= 64 ? 7 : 5;
            double t[N_WAYS][MAX_REPEATS];
            /* Warm-up: first touch of the pages, connections, and the
             * agreement the timed region's calls skip. */
            run_once(op, OURS, full, part, full_h, part_h);
            if (compare) run_once(op, BARE, full, part, full_h, part_h);
            int ways = compare ? N_WAYS : BARE; /* BARE is last: left out without a comparison */
            for (int i = 0; i < runs; i++)      /* each run starts with the next way: all see the same machine */
                for (int j = 0; j < ways; j++) {
                    int way = (i + j) % ways;
                    t[way][i] = run_once(op, way, full, part, full_h, part_h);
                }
            double bytes = (double)full_n * sizeof(float);
            double t_ours = median_of(t[OURS], runs), t_timed = median_of(t[OURS_TIMED], runs);
            double bus_ours = bytes / t_ours * bus_factor(op, world_size) / 1e9;
            if (rank == 0) {
                if (compare) {
                    double t_bare = median_of(t[BARE], runs);
                    double bus_bare = bytes / t_bare * bus_factor(op, world_size) / 1e9;
                    /* busbw ratio = time ratio (the same bytes and factor) */
                    double ratio = t_bare / t_ours, ratio_timed = t_bare / t_timed;
                    printf("%-15s %8d %5d %11.5f %11.3f %11.5f %11.5f %11.3f %8.3f %8.3f\n", OP_NAMES[op], SIZES_MB[k],
                           runs, t_ours, bus_ours, t_timed, t_bare, bus_bare, ratio, ratio_timed);
                    note("%s %d MB on %d ranks: busbw %.3f GB/s, bare MPI %.3f GB/s (ratio %.3f checked, %.3f in a "
                         "timed region)",
                         OP_NAMES[op], SIZES_MB[k], world_size, bus_ours, bus_bare, ratio, ratio_timed);
                } else {
                    printf("%-15s %8d %5d %11.5f %11.3f %11.5f %11s %11s %8s %8s\n", OP_NAMES[op], SIZES_MB[k], runs,
                           t_ours, bus_ours, t_timed, "-", "-", "-", "-");
                    note("%s %d MB on %d ranks: busbw %.3f GB/s", OP_NAMES[op], SIZES_MB[k], world_size, bus_ours);
                }
                fflush(stdout);
            }
            if (full_h != full) tensor_free(full_h);
            if (part_h != part) tensor_free(part_h);
            tensor_free(full);
            tensor_free(part);
        }
    }
}

static void body(void) {
    spawn(measure, 2, NULL, 0);
    spawn(measure, 4, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
