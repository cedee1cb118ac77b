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
 *   per size    the ping-pong's one-way time at 4 B to 16 MiB (median of
 *               SIZE_REPS), an alpha-beta fit t = alpha + bytes / beta to
 *               them (least squares on the relative error, so the small
 *               sizes count as much as the large), and per size the error
 *               of the platform file's closed form for one message
 *               (latency + bytes / link rate: what the replay plays for a
 *               lone message, tests/twin/test_twin.py) against the measured
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

/* Per size: the ping-pong's one-way time, median of SIZE_REPS. */
enum { N_SIZES = 6, SIZE_REPS = 31 };
static const long SIZE_FLOATS[N_SIZES] = {1, 1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22}; /* 4 B .. 16 MiB */

static void ping_pong_sizes(int rank, int world_size, void *args) {
    (void)world_size;
    (void)args;
    double out[N_SIZES];
    for (int k = 0; k < N_SIZES; k++) {
        tensor *t = zeros(SIZE_FLOATS[k], 0, get_device(rank));
        double one_way[SIZE_REPS];
        for (int i = -1; i < SIZE_REPS; i++) { /* one warm-up */
            double t0 = now_seconds();
            if (rank == 0) dist_send(t, 1), dist_recv(t, 1);
            else dist_recv(t, 0), dist_send(t, 0);
            if (i >= 0) one_way[i] = (now_seconds() - t0) / 2;
        }
        out[k] = median(one_way, SIZE_REPS);
        tensor_free(t);
    }
    if (rank == 0) spawn_return(out, sizeof out);
}

/* A number of the platform file's cluster: attribute `key` ("bw", "lat") in
 * SimGrid's units (GBps, us) as bytes/s or s; 0 when not found. */
static double platform_number(const char *key) {
    FILE *f = fopen("tools/twin/platforms/this-machine.xml", "r");
    if (!f) return 0;
    char line[512], pattern[32];
    snprintf(pattern, sizeof pattern, " %s=\"", key);
    double v = 0;
    while (fgets(line, sizeof line, f)) {
        char *at = strstr(line, pattern);
        if (!at || strstr(line, "<prop")) continue;
        char *unit;
        v = strtod(at + strlen(pattern), &unit);
        v *= !strncmp(unit, "GBps", 4) ? 1e9 : !strncmp(unit, "us", 2) ? 1e-6 : 0; /* else: a unit not read here */
        break;
    }
    fclose(f);
    return v;
}

/* t = alpha + bytes / beta, least squares weighted by 1 / t^2 (relative errors). */
static void fit_alpha_beta(const double *bytes, const double *t, int n, double *alpha, double *beta) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double w = 1 / (t[i] * t[i]);
        sw += w, sx += w * bytes[i], sy += w * t[i], sxx += w * bytes[i] * bytes[i], sxy += w * bytes[i] * t[i];
    }
    double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
    *alpha = (sy - slope * sx) / sw;
    *beta = 1 / slope;
}

static void per_size(void) {
    double t[N_SIZES], bytes[N_SIZES], alpha, beta;
    spawn(ping_pong_sizes, 2, NULL, 0);
    spawn_result(0, t, sizeof t);
    for (int k = 0; k < N_SIZES; k++)
        bytes[k] = (double)SIZE_FLOATS[k] * sizeof(float);
    fit_alpha_beta(bytes, t, N_SIZES, &alpha, &beta);
    /* One message on this-machine: two private links (lat each) and the backbone, the slowest link's rate. */
    double lat = 2 * platform_number("lat"), bw = platform_number("bw");
    table_t *tab = table_new("One-way ping-pong time per size, measured here; the alpha-beta fit (alpha %.2f us, "
                             "beta %.3f GB/s); the platform file's closed form (%.2f us, %.3f GB/s)",
                             alpha * 1e6, beta / 1e9, lat * 1e6, bw / 1e9);
    table_column(tab, "bytes", NULL, "%.0f");
    table_column(tab, "measured", "us", "%.2f");
    table_column(tab, "fit", "us", "%.2f");
    table_column(tab, "fit error", "%", "%+.0f");
    table_column(tab, "platform (simulated)", "us", "%.2f");
    table_column(tab, "platform error", "%", "%+.0f");
    printf("alpha_us %.2f beta_GBps %.3f\n", alpha * 1e6, beta / 1e9);
    for (int k = 0; k < N_SIZES; k++) {
        double fit = alpha + bytes[k] / beta, sim = lat + bytes[k] / bw;
        table_row(tab, bytes[k], t[k] * 1e6, fit * 1e6, 100 * (fit / t[k] - 1), sim * 1e6, 100 * (sim / t[k] - 1));
        printf("size %.0f measured_us %.2f fit_us %.2f fit_err %+.0f%% platform_us %.2f platform_err %+.0f%%\n",
               bytes[k], t[k] * 1e6, fit * 1e6, 100 * (fit / t[k] - 1), sim * 1e6, 100 * (sim / t[k] - 1));
    }
    table_show(tab);
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
    per_size();
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
