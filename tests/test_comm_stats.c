/*
 * test_comm_stats.c: dist_bytes_sent() and dist_calls() count what
 * lectern.h says they count, for every operation, on 1 to 4 ranks.
 *
 * Each rank makes one call of each operation on a tensor of N floats and
 * records, per call, how much the two counters moved; it writes the list to
 * a file (the ranks cannot return values). The parent compares each number
 * with the formula written out here, per rank: all-reduce 2(p-1)/p b,
 * reduce-scatter and all-gather (p-1)/p of the whole, broadcast and reduce b
 * from every rank but one, and so on. N is a multiple of 12, so every
 * formula gives a whole number of bytes for p = 1..4 and the comparison is
 * exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_test.h"

enum { N = 1200, OPS_N = 16 };
static const char *const NAMES[OPS_N] = {"barrier", "all_reduce", "reduce", "broadcast", "reduce_scatter",
                                         "all_gather", "scatter", "gather", "send_recv", "isend_irecv",
                                         "all_reduce_async", "broadcast_async", "reduce_scatter_async",
                                         "all_gather_async", "sendrecv", "total"};

typedef struct stats_args {
    char dir[200];
} stats_args;
static stats_args args;

/* ---------------- the ranks' side ---------------- */

static int64_t last_bytes, last_calls;
static int64_t got_bytes[OPS_N], got_calls[OPS_N];

static void mark(int k) {
    got_bytes[k] = dist_bytes_sent() - last_bytes;
    got_calls[k] = dist_calls() - last_calls;
    last_bytes = dist_bytes_sent();
    last_calls = dist_calls();
}

static void exercise(int rank, int world, void *p) {
    const stats_args *a = p;
    int dev = get_device(rank);
    last_bytes = dist_bytes_sent();
    last_calls = dist_calls();
    int64_t start_bytes = last_bytes, start_calls = last_calls;
    tensor *t = zeros(N, 0, dev), *whole = zeros(N, 0, dev), *piece = zeros(N / world, 0, dev);
    dist_barrier();                              mark(0);
    dist_all_reduce(t, DIST_SUM);                mark(1);
    dist_reduce(t, world - 1, DIST_SUM);         mark(2);
    dist_broadcast(t, 0);                        mark(3);
    dist_reduce_scatter(piece, whole, DIST_SUM); mark(4);
    dist_all_gather(whole, piece);               mark(5);
    dist_scatter(piece, rank == 0 ? whole : NULL, 0); mark(6);
    dist_gather(rank == 0 ? whole : NULL, piece, 0);  mark(7);
    if (world > 1) {   /* rank 0 sends to rank 1 */
        if (rank == 0) dist_send(t, 1);
        if (rank == 1) dist_recv(t, 0);
    }
    mark(8);
    if (world > 1) {
        if (rank == 0) dist_wait(dist_isend(t, 1));
        if (rank == 1) dist_wait(dist_irecv(t, 0));
    }
    mark(9);
    dist_wait(dist_all_reduce_async(t, DIST_SUM));                mark(10);
    dist_wait(dist_broadcast_async(t, 0));                        mark(11);
    dist_wait(dist_reduce_scatter_async(piece, whole, DIST_SUM)); mark(12);
    dist_wait(dist_all_gather_async(whole, piece));               mark(13);
    if (world > 1) {   /* a ring: each rank sends to the next, receives from the one before */
        tensor *got = zeros(N, 0, dev);
        dist_sendrecv(t, (rank + 1) % world, got, (rank + world - 1) % world);
        tensor_free(got);
    }
    mark(14);
    got_bytes[OPS_N - 1] = dist_bytes_sent() - start_bytes;
    got_calls[OPS_N - 1] = dist_calls() - start_calls;
    tensor_free(t);
    tensor_free(whole);
    tensor_free(piece);

    char path[300];
    snprintf(path, sizeof path, "%s/w%d_r%d.bin", a->dir, world, rank);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(got_bytes, sizeof got_bytes, 1, f) != 1 || fwrite(got_calls, sizeof got_calls, 1, f) != 1) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* ---------------- the parent's side ---------------- */

/* What lectern.h promises, per operation, for rank r of p (b = N floats). */
static void expected(int r, int p, int64_t *bytes, int64_t *calls) {
    int64_t b = N * 4, share = b * (p - 1) / p;
    int64_t e[OPS_N] = {
        0,                              /* barrier */
        2 * share,                      /* all-reduce */
        r == p - 1 ? 0 : b,             /* reduce to the last rank: all but the root send */
        r == p - 1 ? 0 : b,             /* broadcast from 0: the chain 0 -> 1 -> ... ends at p-1 */
        share,                          /* reduce-scatter of a whole of b */
        share,                          /* all-gather into a whole of b */
        r == 0 ? b / p * (p - 1) : 0,   /* scatter from 0: p-1 pieces of b/p */
        r == 0 ? 0 : b / p,             /* gather to 0: one piece from each other rank */
        p > 1 && r == 0 ? b : 0,        /* send (the receive counts 0) */
        p > 1 && r == 0 ? b : 0,        /* isend */
        2 * share,                      /* the async twins send what the blocking ones send */
        r == p - 1 ? 0 : b,
        share,
        share,
        p > 1 ? b : 0,                  /* sendrecv: its send */
        0,
    };
    int64_t c[OPS_N] = {1, 1, 1, 1, 1, 1, 1, 1, p > 1 && r < 2, p > 1 && r < 2, 1, 1, 1, 1, p > 1, 0};
    for (int k = 0; k < OPS_N - 1; k++) {
        e[OPS_N - 1] += e[k];
        c[OPS_N - 1] += c[k];
    }
    memcpy(bytes, e, sizeof e);
    memcpy(calls, c, sizeof c);
}

static void test_counts(void **state) {
    (void)state;
    for (int p = 1; p <= 4; p++) {
        for (int r = 0; r < p; r++) {
            char path[300];
            snprintf(path, sizeof path, "%s/w%d_r%d.bin", args.dir, p, r);
            int64_t bytes[OPS_N], calls[OPS_N], want_bytes[OPS_N], want_calls[OPS_N];
            FILE *f = fopen(path, "rb");
            assert_non_null(f);
            assert_int_equal(fread(bytes, sizeof bytes, 1, f), 1);
            assert_int_equal(fread(calls, sizeof calls, 1, f), 1);
            fclose(f);
            expected(r, p, want_bytes, want_calls);
            for (int k = 0; k < OPS_N; k++) {
                if (bytes[k] != want_bytes[k] || calls[k] != want_calls[k])
                    fail_msg("world %d rank %d %s: %lld bytes in %lld calls, expected %lld in %lld", p, r,
                             NAMES[k], (long long)bytes[k], (long long)calls[k], (long long)want_bytes[k],
                             (long long)want_calls[k]);
            }
        }
    }
}

static void test_outside_spawn(void **state) {
    (void)state;
    assert_int_equal(dist_bytes_sent(), 0);
    assert_int_equal(dist_calls(), 0);
}

static int failures;

static void body(void) {
    for (int p = 1; p <= 4; p++) spawn(exercise, p, &args, sizeof args);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_counts), cmocka_unit_test(test_outside_spawn)};
    failures += cmocka_run_group_tests_name("comm stats", tests, NULL, NULL);
}

int main(int argc, char **argv) {
    int rc = run_test_lecture(argc, argv, body, args.dir, sizeof args.dir, "test_comm_stats");
    return failures || rc ? 1 : 0;
}
