/*
 * bench_spawn.c: how long spawn() takes, from the call to its return, for a
 * function that does nothing: the price of handing a spawn to the ranks and
 * waiting for them to finish.
 *
 * The first spawn of a run also starts the pool of ranks with mpirun
 * (runtime/ranks/pool.c): it is reported on its own. Then, for 1, 2 and 4 ranks,
 * the median and the spread of many spawns on that pool; then what growing
 * the pool costs (a spawn of 8, then of 16 ranks, each replacing the pool
 * with a bigger one), and spawns on the 16-rank pool. Medians: this machine
 * is shared and noisy.
 *
 *   build/bench/bench_spawn        (scripts/bench.sh sets LECTERN_OUT to a
 *                                   temporary folder, so traces/ is untouched)
 *
 * LECTERN_POOL_MIN=1 shows what starting with a pool of 1 would cost
 * instead (docs/design.md).
 *
 * With a GPU, last: spawns of 4 ranks whose function puts a small matrix
 * product on get_device(rank) (on a one-GPU machine the 4 ranks share
 * cuda:0). The first such spawn pays for each rank's CUDA context and cuBLAS
 * handle; the later ones find them made, because a pool rank keeps them from
 * one spawn to the next. Both are reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { REPEATS = 21 };

static void nothing(int rank, int world_size, void *args) {
    (void)rank;
    (void)world_size;
    (void)args;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A rank's first use of the GPU: its CUDA context, a cuBLAS handle, a kernel. */
static void touch_gpu(int rank, int world_size, void *args) {
    (void)world_size;
    (void)args;
    tensor *a = randn(8, 8, get_device(rank));
    tensor *b = matmul(a, a);
    device_synchronize();
    tensor_free(b);
    tensor_free(a);
}

static double timed_spawn_of(spawn_fn fn, int world_size) {
    double t = now_seconds();
    spawn(fn, world_size, NULL, 0);
    return now_seconds() - t;
}

static double timed_spawn(int world_size) { return timed_spawn_of(nothing, world_size); }

static void report_one(const char *what, double seconds) {
    printf("%-44s %8.3f s\n", what, seconds);
    note("%s: %.3f s", what, seconds);
}

static void report_many_of(spawn_fn fn, int world_size, const char *what) {
    double t[REPEATS];
    for (int i = 0; i < REPEATS; i++)
        t[i] = timed_spawn_of(fn, world_size);
    qsort(t, REPEATS, sizeof t[0], cmp);
    printf("spawn of %2d rank%s on the pool%s: median %.3f ms  min %.3f  max %.3f  (%d spawns)\n", world_size,
           world_size == 1 ? " " : "s", what, 1e3 * t[REPEATS / 2], 1e3 * t[0], 1e3 * t[REPEATS - 1], REPEATS);
    note("spawn of %d rank%s on the pool%s: median %.3f ms (min %.3f, max %.3f, %d spawns)", world_size,
         world_size == 1 ? "" : "s", what, 1e3 * t[REPEATS / 2], 1e3 * t[0], 1e3 * t[REPEATS - 1], REPEATS);
}

static void report_many(int world_size) { report_many_of(nothing, world_size, ""); }

static void body(void) {
    report_one("first spawn (4 ranks, starts the pool)", timed_spawn(4));
    const int sizes[] = {1, 2, 4};
    for (int k = 0; k < 3; k++)
        report_many(sizes[k]);
    report_one("spawn of 8 ranks (grows the pool to 8)", timed_spawn(8));
    report_one("spawn of 16 ranks (grows the pool to 16)", timed_spawn(16));
    report_many(16);
    report_many(4);
    if (gpu_count() > 0) {
        report_one("first spawn of 4 ranks using the GPU", timed_spawn_of(touch_gpu, 4));
        report_many_of(touch_gpu, 4, ", using the GPU");
    } else {
        printf("spawns using the GPU: skipped (no GPU)\n");
    }
    fflush(stdout);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
