/*
 * test_comm_stats.c: dist_traffic_now() / dist_traffic_since(),
 * dist_bytes_nominal() and dist_calls() count what lectern.h says they
 * count, for every operation, on 1 to 4 ranks.
 *
 * Each rank makes one call of each operation on a tensor of N floats and
 * records, per call, how much the two counters moved; it writes the list to
 * a file (the ranks cannot return values). The parent compares each number
 * with the formula written out here, per rank: all-reduce 2(p-1)/p b,
 * reduce-scatter and all-gather (p-1)/p of the whole, broadcast and reduce b
 * from every rank but one, and so on. N is a multiple of 12, so every
 * formula gives a whole number of bytes for p = 1..4 and the comparison is
 * exact.
 *
 * The measured bytes: point to point exactly what was sent, to and from
 * the right peer; a collective's against what any algorithm must move at
 * least (each element of a rank's all-reduce input affects every other
 * rank's result, so at least one float per element leaves the rank: b; a
 * reduce-scatter's p-1 chunks for others: (p-1)/p b; ...) and at most
 * 2(p-1) b, and under its own kind only. Missing counts (0) fail the lower
 * bounds; counts put down to the wrong kind or counted twice fail the rest.
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
static const char *const NAMES[OPS_N] = {"barrier",
                                         "all_reduce",
                                         "reduce",
                                         "broadcast",
                                         "reduce_scatter",
                                         "all_gather",
                                         "scatter",
                                         "gather",
                                         "send_recv",
                                         "isend_irecv",
                                         "all_reduce_async",
                                         "broadcast_async",
                                         "reduce_scatter_async",
                                         "all_gather_async",
                                         "sendrecv",
                                         "total"};

typedef struct stats_args {
    char dir[200];
} stats_args;
static stats_args args;

/* ---------------- the ranks' side ---------------- */

static int64_t last_bytes, last_calls;
static int64_t got_bytes[OPS_N], got_calls[OPS_N];
static dist_traffic last_traffic, got_traffic[OPS_N];

static void mark(int k) {
    got_bytes[k] = dist_bytes_nominal() - last_bytes;
    got_calls[k] = dist_calls() - last_calls;
    last_bytes = dist_bytes_nominal();
    last_calls = dist_calls();
    got_traffic[k] = dist_traffic_since(&last_traffic);
    last_traffic = dist_traffic_now();
}

static void exercise(int rank, int world, void *p) {
    const stats_args *a = p;
    int dev = get_device(rank);
    last_bytes = dist_bytes_nominal();
    last_calls = dist_calls();
    last_traffic = dist_traffic_now();
    dist_traffic start_traffic = last_traffic;
    int64_t start_bytes = last_bytes, start_calls = last_calls;
    tensor *t = zeros(N, 0, dev), *whole = zeros(N, 0, dev), *piece = zeros(N / world, 0, dev);
    dist_barrier();
    mark(0);
    dist_all_reduce(t, DIST_SUM);
    mark(1);
    dist_reduce(t, world - 1, DIST_SUM);
    mark(2);
    dist_broadcast(t, 0);
    mark(3);
    dist_reduce_scatter(piece, whole, DIST_SUM);
    mark(4);
    dist_all_gather(whole, piece);
    mark(5);
    dist_scatter(piece, rank == 0 ? whole : NULL, 0);
    mark(6);
    dist_gather(rank == 0 ? whole : NULL, piece, 0);
    mark(7);
    if (world > 1) { /* rank 0 sends to rank 1 */
        if (rank == 0) dist_send(t, 1);
        if (rank == 1) dist_recv(t, 0);
    }
    mark(8);
    if (world > 1) {
        if (rank == 0) dist_wait(dist_isend(t, 1));
        if (rank == 1) dist_wait(dist_irecv(t, 0));
    }
    mark(9);
    dist_wait(dist_all_reduce_async(t, DIST_SUM));
    mark(10);
    dist_wait(dist_broadcast_async(t, 0));
    mark(11);
    dist_wait(dist_reduce_scatter_async(piece, whole, DIST_SUM));
    mark(12);
    dist_wait(dist_all_gather_async(whole, piece));
    mark(13);
    if (world > 1) { /* a ring: each rank sends to the next, receives from the one before */
        tensor *got = zeros(N, 0, dev);
        dist_sendrecv(t, (rank + 1) % world, got, (rank + world - 1) % world);
        tensor_free(got);
    }
    mark(14);
    got_bytes[OPS_N - 1] = dist_bytes_nominal() - start_bytes;
    got_calls[OPS_N - 1] = dist_calls() - start_calls;
    got_traffic[OPS_N - 1] = dist_traffic_since(&start_traffic);
    tensor_free(t);
    tensor_free(whole);
    tensor_free(piece);

    char path[300];
    snprintf(path, sizeof path, "%s/w%d_r%d.bin", a->dir, world, rank);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(got_bytes, sizeof got_bytes, 1, f) != 1 || fwrite(got_calls, sizeof got_calls, 1, f) != 1 ||
        fwrite(got_traffic, sizeof got_traffic, 1, f) != 1) {
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
            0,                            /* barrier */
            2 * share,                    /* all-reduce */
            r == p - 1 ? 0 : b,           /* reduce to the last rank: all but the root send */
            r == p - 1 ? 0 : b,           /* broadcast from 0: the chain 0 -> 1 -> ... ends at p-1 */
            share,                        /* reduce-scatter of a whole of b */
            share,                        /* all-gather into a whole of b */
            r == 0 ? b / p * (p - 1) : 0, /* scatter from 0: p-1 pieces of b/p */
            r == 0 ? 0 : b / p,           /* gather to 0: one piece from each other rank */
            p > 1 && r == 0 ? b : 0,      /* send (the receive counts 0) */
            p > 1 && r == 0 ? b : 0,      /* isend */
            2 * share,                    /* the async twins send what the blocking ones send */
            r == p - 1 ? 0 : b,
            share,
            share,
            p > 1 ? b : 0, /* sendrecv: its send */
            0,
    };
    int64_t c[OPS_N] = {1, 1, 1, 1, 1, 1, 1, 1, p > 1 && r<2, p> 1 && r<2, 1, 1, 1, 1, p> 1, 0};
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
                    fail_msg("world %d rank %d %s: %lld bytes in %lld calls, expected %lld in %lld", p, r, NAMES[k],
                             (long long)bytes[k], (long long)calls[k], (long long)want_bytes[k],
                             (long long)want_calls[k]);
            }
        }
    }
}

static int64_t got_nominal(int p, int r, int k) {
    int64_t bytes[OPS_N], calls[OPS_N];
    expected(r, p, bytes, calls);
    return bytes[k];
}

/* The kind each operation counts under (-1: the send/receive pair, whose
 * kind depends on the rank). */
static const int KIND[OPS_N - 1] = {DIST_CALL_BARRIER,
                                    DIST_CALL_ALL_REDUCE,
                                    DIST_CALL_REDUCE,
                                    DIST_CALL_BROADCAST,
                                    DIST_CALL_REDUCE_SCATTER,
                                    DIST_CALL_ALL_GATHER,
                                    DIST_CALL_SCATTER,
                                    DIST_CALL_GATHER,
                                    -1,
                                    -1,
                                    DIST_CALL_ALL_REDUCE,
                                    DIST_CALL_BROADCAST,
                                    DIST_CALL_REDUCE_SCATTER,
                                    DIST_CALL_ALL_GATHER,
                                    DIST_CALL_SENDRECV};

static void read_traffic(int p, int r, dist_traffic *t) {
    char path[300];
    snprintf(path, sizeof path, "%s/w%d_r%d.bin", args.dir, p, r);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    int64_t skip[2 * OPS_N];
    assert_int_equal(fread(skip, sizeof skip, 1, f), 1);
    assert_int_equal(fread(t, sizeof(dist_traffic) * OPS_N, 1, f), 1);
    fclose(f);
}

/* At least what any algorithm must send from rank r of p (b bytes). */
static int64_t least(int kind, int r, int p, int64_t b) {
    if (p < 2) return 0;
    switch (kind) {
    case DIST_CALL_ALL_REDUCE: return b;                   /* every element leaves, summed or not */
    case DIST_CALL_REDUCE: return r == p - 1 ? 0 : b;      /* to the last rank: every other rank's elements */
    case DIST_CALL_BROADCAST: return r == 0 ? b : 0;       /* the root's data must leave it */
    case DIST_CALL_REDUCE_SCATTER: return b / p * (p - 1); /* the chunks of the others */
    case DIST_CALL_ALL_GATHER: return b / p;               /* its piece */
    case DIST_CALL_SCATTER: return r == 0 ? b / p * (p - 1) : 0;
    case DIST_CALL_GATHER: return r == 0 ? 0 : b / p;
    default: return 0;
    }
}

static void test_measured(void **state) {
    (void)state;
    const int64_t b = N * 4;
    for (int p = 1; p <= 4; p++) {
        int64_t to_me_from[LECTERN_MAX_WORLD][LECTERN_MAX_WORLD] = {{0}}; /* [op 14's receiver][sender] */
        for (int r = 0; r < p; r++) {
            dist_traffic t[OPS_N];
            read_traffic(p, r, t);
            for (int k = 0; k < OPS_N - 1; k++) {
                const dist_traffic *d = &t[k];
                char what[120];
                snprintf(what, sizeof what, "world %d rank %d %s", p, r, NAMES[k]);
                if (p > 1 && !d->measured_collectives)
                    fail_msg("%s: the collectives' bytes are not measured (Open MPI's pml monitoring)", what);
                int kind = KIND[k];
                if (kind < 0) kind = r == 0 ? DIST_CALL_SEND : DIST_CALL_RECV;
                int active = kind == DIST_CALL_SEND || kind == DIST_CALL_RECV ? p > 1 && r < 2
                                                                              : !(kind == DIST_CALL_SENDRECV && p < 2);
                /* one call, of its kind, and nothing under any other kind; a
                 * non-blocking call (isend_irecv to all_gather_async, each
                 * waited for at once) counts as waited for, a blocking one not */
                int async = k >= 9 && k <= 13;
                for (int j = 0; j < DIST_CALL_KINDS; j++) {
                    if (d->calls[j] != (j == kind ? active : 0))
                        fail_msg("%s: %lld calls of %s", what, (long long)d->calls[j], dist_call_name(j));
                    if (d->waited[j] != (j == kind && async ? active : 0))
                        fail_msg("%s: %lld waited for of %s", what, (long long)d->waited[j], dist_call_name(j));
                    if (j != kind && (d->bytes_sent[j] || d->bytes_received[j]))
                        fail_msg("%s: bytes counted under %s", what, dist_call_name(j));
                }
                int64_t sum_to = 0, sum_from = 0;
                for (int q = 0; q < LECTERN_MAX_WORLD; q++) {
                    sum_to += d->sent_to[q];
                    sum_from += d->received_from[q];
                    if (q >= p && (d->sent_to[q] || d->received_from[q])) fail_msg("%s: traffic with rank %d", what, q);
                }
                if (d->sent_to[r] || d->received_from[r]) fail_msg("%s: traffic with itself", what);
                if (sum_to != d->bytes_sent[kind] || sum_from != d->bytes_received[kind])
                    fail_msg("%s: the peers' bytes (%lld, %lld) do not add up to the kind's (%lld, %lld)", what,
                             (long long)sum_to, (long long)sum_from, (long long)d->bytes_sent[kind],
                             (long long)d->bytes_received[kind]);
                if (kind == DIST_CALL_SEND || kind == DIST_CALL_RECV) { /* rank 0 to rank 1, exact */
                    int64_t want_sent = active && r == 0 ? b : 0, want_recv = active && r == 1 ? b : 0;
                    if (d->bytes_sent[kind] != want_sent || (want_sent && d->sent_to[1] != b) ||
                        d->bytes_received[kind] != want_recv || (want_recv && d->received_from[0] != b))
                        fail_msg("%s: sent %lld, received %lld; expected %lld to rank 1, %lld from rank 0", what,
                                 (long long)d->bytes_sent[kind], (long long)d->bytes_received[kind],
                                 (long long)want_sent, (long long)want_recv);
                } else if (kind == DIST_CALL_SENDRECV) { /* the ring: to the next, from the one before */
                    if (p > 1 && (d->sent_to[(r + 1) % p] != b || d->received_from[(r + p - 1) % p] != b))
                        fail_msg("%s: %lld to the next rank, %lld from the one before; expected %lld each", what,
                                 (long long)d->sent_to[(r + 1) % p], (long long)d->received_from[(r + p - 1) % p],
                                 (long long)b);
                    for (int q = 0; q < p; q++)
                        to_me_from[q][r] += d->sent_to[q];
                } else {
                    int64_t lo = least(kind, r, p, b), hi = p > 1 ? 2 * (p - 1) * b : 0;
                    if (d->bytes_sent[kind] < lo || d->bytes_sent[kind] > hi)
                        fail_msg("%s: %lld bytes sent, expected between %lld and %lld", what,
                                 (long long)d->bytes_sent[kind], (long long)lo, (long long)hi);
                    if (d->bytes_received[kind]) fail_msg("%s: received bytes of a collective", what);
                }
                /* the nominal figure, per kind, is the formula's (checked in test_counts) */
                if (d->nominal_sent[kind] != got_nominal(p, r, k))
                    fail_msg("%s: nominal %lld", what, (long long)d->nominal_sent[kind]);
            }
        }
        (void)to_me_from;
    }
}

static void test_outside_spawn(void **state) {
    (void)state;
    assert_int_equal(dist_bytes_nominal(), 0);
    assert_int_equal(dist_calls(), 0);
    dist_traffic t = dist_traffic_now();
    assert_int_equal(dist_traffic_calls(&t), 0);
    assert_int_equal(dist_traffic_sent(&t), 0);
    assert_int_equal(t.measured_collectives, 0);
}

/* dist_traffic_text on counts set by hand: each kind with calls, in the
 * enum's order, singular for one; "no calls" for none; cut short, never
 * past size, always terminated. */
static void test_traffic_text(void **state) {
    (void)state;
    dist_traffic t;
    memset(&t, 0, sizeof t);
    char buf[128];
    assert_string_equal(dist_traffic_text(&t, buf, sizeof buf), "no calls");
    t.calls[DIST_CALL_SEND] = 2;
    t.calls[DIST_CALL_ALL_GATHER] = 1;
    t.calls[DIST_CALL_ALL_TO_ALL] = 12;
    assert_ptr_equal(dist_traffic_text(&t, buf, sizeof buf), buf);
    assert_string_equal(buf, "1 dist_all_gather call, 2 dist_send calls, 12 dist_all_to_all calls");
    char small[12];
    memset(small, 'x', sizeof small);
    dist_traffic_text(&t, small, 10);
    assert_string_equal(small, "1 dist_al"); /* 9 characters and the terminator */
    assert_int_equal(small[10], 'x');        /* nothing written past size */
    small[0] = 'y';
    dist_traffic_text(&t, small, 0);
    assert_int_equal(small[0], 'y'); /* size 0: buf untouched */
}

static int failures;

static void body(void) {
    for (int p = 1; p <= 4; p++)
        spawn(exercise, p, &args, sizeof args);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_counts), cmocka_unit_test(test_measured),
                                       cmocka_unit_test(test_outside_spawn), cmocka_unit_test(test_traffic_text)};
    failures += cmocka_run_group_tests_name("comm stats", tests, NULL, NULL);
}

int main(int argc, char **argv) {
    int rc = run_test_lecture(argc, argv, body, args.dir, sizeof args.dir, "test_comm_stats");
    return failures || rc ? 1 : 0;
}
