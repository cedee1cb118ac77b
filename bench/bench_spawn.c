/*
 * bench_spawn.c: how long spawn() takes, from the call to its return, for a
 * function that does nothing: the price of starting ranks with Open MPI,
 * handing them the spawn description, and waiting for them to finish.
 *
 * The first spawn of a process also pays for MPI_Init (the lecture becomes an
 * MPI singleton): it is reported on its own. Then, for 1, 2 and 4 ranks, the
 * median and the spread of several spawns. Medians: this machine is shared
 * and noisy.
 *
 *   build/bench/bench_spawn        (scripts/bench.sh sets LECTERN_OUT to a
 *                                   temporary folder, so traces/ is untouched)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { REPEATS = 9 };

static void nothing(int rank, int world_size, void *args) {
    (void)rank; (void)world_size; (void)args;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double timed_spawn(int world_size) {
    double t = now_seconds();
    spawn(nothing, world_size, NULL, 0);
    return now_seconds() - t;
}

static void body(void) {
    double first = timed_spawn(1);
    printf("first spawn (1 rank, includes MPI_Init): %.3f s\n", first);
    note("first spawn (1 rank, includes MPI_Init): %.3f s", first);
    const int sizes[] = {1, 2, 4};
    printf("%-6s %10s %10s %10s   (%d spawns each)\n", "ranks", "median_s", "min_s", "max_s", REPEATS);
    for (int k = 0; k < 3; k++) {
        double t[REPEATS];
        for (int i = 0; i < REPEATS; i++) t[i] = timed_spawn(sizes[k]);
        qsort(t, REPEATS, sizeof t[0], cmp);
        printf("%-6d %10.3f %10.3f %10.3f\n", sizes[k], t[REPEATS / 2], t[0], t[REPEATS - 1]);
        note("spawn of %d rank%s: median %.3f s (min %.3f, max %.3f, %d runs)", sizes[k],
             sizes[k] == 1 ? "" : "s", t[REPEATS / 2], t[0], t[REPEATS - 1], REPEATS);
    }
    fflush(stdout);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
