/*
 * bench_twin_calibrate.c: the numbers of the twin's `this-machine` platform
 * (tools/twin/platforms/this-machine.xml, docs/twin.md), measured through
 * the same calls the lectures make:
 *
 *   latency     half the round trip of a 1-float dist_send/dist_recv
 *               ping-pong between 2 ranks (median of 200)
 *   link        one rank's rate into another: 4 MiB ping-pong, the one-way
 *               time less the latency (median of 15)
 *   backbone    what all ranks move at once: 4 ranks each dist_sendrecv
 *               4 MiB round a ring; 4 x 4 MiB over the median time
 *   memcpy      one core copying 64 MiB (median of 9): the memory's rate
 *               for one copy, which bounds the link
 *
 *   build/bench/bench_twin_calibrate --quiet --out /tmp
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { SMALL_REPS = 200, LARGE_REPS = 15, LARGE = 1 << 20 /* floats: 4 MiB */ };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp);
    return v[n / 2];
}

/* Rank 0 returns {half round trip of 1 float, one-way time of 4 MiB}. */
static void ping_pong(int rank, int world_size, void *args) {
    (void)world_size;
    (void)args;
    tensor *small = zeros(1, 0, get_device(rank)), *large = zeros(LARGE, 0, get_device(rank));
    double t_small[SMALL_REPS], t_large[LARGE_REPS];
    for (int i = 0; i < SMALL_REPS; i++) {
        double t0 = now_seconds();
        if (rank == 0) dist_send(small, 1), dist_recv(small, 1);
        else dist_recv(small, 0), dist_send(small, 0);
        t_small[i] = (now_seconds() - t0) / 2;
    }
    for (int i = 0; i < LARGE_REPS; i++) {
        double t0 = now_seconds();
        if (rank == 0) dist_send(large, 1), dist_recv(large, 1);
        else dist_recv(large, 0), dist_send(large, 0);
        t_large[i] = (now_seconds() - t0) / 2;
    }
    double out[2] = {median(t_small, SMALL_REPS), median(t_large, LARGE_REPS)};
    if (rank == 0) spawn_return(out, sizeof out);
    tensor_free(small);
    tensor_free(large);
}

/* Every rank sends 4 MiB to the next and receives from the previous at once. */
static void ring(int rank, int world_size, void *args) {
    (void)args;
    tensor *out = zeros(LARGE, 0, get_device(rank)), *in = zeros(LARGE, 0, get_device(rank));
    double t[LARGE_REPS];
    for (int i = 0; i < LARGE_REPS; i++) {
        dist_barrier();
        double t0 = now_seconds();
        dist_sendrecv(out, (rank + 1) % world_size, in, (rank + world_size - 1) % world_size);
        dist_barrier();
        t[i] = now_seconds() - t0;
    }
    double m = median(t, LARGE_REPS);
    if (rank == 0) spawn_return(&m, sizeof m);
    tensor_free(out);
    tensor_free(in);
}

static void body(void) {
    double pp[2], ring_s;
    spawn(ping_pong, 2, NULL, 0);
    spawn_result(0, pp, sizeof pp);
    spawn(ring, 4, NULL, 0);
    spawn_result(0, &ring_s, sizeof ring_s);

    size_t n = 64u << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double t[9];
    for (int i = 0; i < 9; i++) {
        double t0 = now_seconds();
        memcpy(b, a, n);
        t[i] = now_seconds() - t0;
    }
    double bytes = LARGE * sizeof(float);
    printf("latency_us %.2f\n", pp[0] * 1e6);
    printf("link_GBps %.3f\n", bytes / (pp[1] - pp[0]) / 1e9);
    printf("backbone_GBps %.3f\n", 4 * bytes / ring_s / 1e9);
    printf("memcpy_GBps %.3f\n", (double)n / median(t, 9) / 1e9);
    free(a);
    free(b);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
