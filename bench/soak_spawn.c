/*
 * soak_spawn.c: many spawns in one process, to find what fails rarely.
 *
 * 1,000 spawns (or SOAK_SPAWNS) in a row, cycling through 1, 2, 3 and 4
 * ranks in a shuffled order, each running an all-reduce whose result every
 * rank checks. At the end one line:
 *
 *   soak_spawn: 1000 spawns (1-4 ranks), 0 wrong results, 0 stalls (> 2 s),
 *               0 retries, 0 hangs; median 0.13 ms, slowest after the first ...
 *
 *  - a stall is a spawn that took more than STALL_SECONDS (a few hundred
 *    times the median: something waited on a timeout);
 *  - a retry is a pool start that did not come up in time and was started
 *    again (runtime/ranks/pool.c counts them);
 *  - a hang is a spawn stopped by LECTERN_TIMEOUT (set to 30 s here unless
 *    given): the lecture then ends with an error step and status 1, and
 *    this line is never printed, which is itself the verdict.
 *
 *   build/bench/soak_spawn                 1,000 spawns (a few seconds here)
 *   SOAK_SPAWNS=50 build/bench/soak_spawn  a quick check
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "ranks/ranks.h"

#define STALL_SECONDS 2.0

typedef struct soak_args {
    int spawn_no;
} soak_args;

/* Each rank adds rank + spawn_no; every rank checks the sum against the
 * formula and exits with status 3 if it is wrong (the spawn then fails and
 * the soak stops with an error step naming the line). */
static void check_sum(int rank, int world_size, void *p) {
    soak_args *a = p;
    tensor *t = zeros(1, 0, get_device(rank));
    add_scalar_(t, (float)(rank + a->spawn_no));
    dist_all_reduce(t, DIST_SUM);
    float want = (float)(world_size * (world_size - 1) / 2 + world_size * a->spawn_no);
    if (tensor_item(t, 0) != want) { /* small integers: exact in float */
        note("rank %d of %d: sum %g, expected %g", rank, world_size, tensor_item(t, 0), want);
        exit(3);
    }
    tensor_free(t);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void body(void) {
    const char *n_env = getenv("SOAK_SPAWNS");
    int n = n_env && *n_env ? atoi(n_env) : 1000;
    if (n < 1) n = 1;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) exit(1);
    /* The world sizes in a fixed pseudo-random order (a linear congruential
     * sequence), so that every size follows every other. */
    unsigned state = 12345;
    int stalls = 0;
    for (int i = 0; i < n; i++) {
        state = state * 1103515245u + 12345u;
        int world = 1 + (int)((state >> 16) % 4);
        soak_args a = {.spawn_no = i};
        double t0 = now_seconds();
        spawn(check_sum, world, &a, sizeof a);
        t[i] = now_seconds() - t0;
        if (t[i] > STALL_SECONDS) {
            stalls++;
            fprintf(stderr, "soak_spawn: spawn %d of %d ranks took %.2f s\n", i, world, t[i]);
        }
    }
    double first = t[0], max = 0; /* the first spawn starts the pool: apart */
    for (int i = 1; i < n; i++)
        if (t[i] > max) max = t[i];
    qsort(t, (size_t)n, sizeof t[0], cmp);
    lx_pool_stats s = lx_pool_get_stats();
    printf("soak_spawn: %d spawns (1-4 ranks), 0 wrong results, %d stalls (> %g s), %d retries, 0 hangs; "
           "median %.3f ms, slowest after the first %.3f ms, the first (starts the pool) %.3f s, "
           "pools started %d\n",
           n, stalls, STALL_SECONDS, s.retries, 1e3 * t[n / 2], 1e3 * max, first, s.starts);
    note("%d spawns: %d stalls, %d retries, 0 hangs; median %.3f ms, slowest after the first %.3f ms", n, stalls,
         s.retries, 1e3 * t[n / 2], 1e3 * max);
    fflush(stdout);
    free(t);
}

int main(int argc, char **argv) {
    setenv("LECTERN_TIMEOUT", "30", 0);
    return lecture_main(argc, argv, body);
}
