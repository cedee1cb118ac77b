/* Fixture: many rounds of DDP's bucketed async all-reduces, as lecture_08's
 * "DDP with buckets" runs them (tests/test_two_hosts.py soaks it across two
 * hosts, docs/multinode.md).
 *
 * Each round of a rank: --layers layers' "backward" (a --width x --width
 * matmul each, real compute on the rank's core), and, when a bucket of
 * --per-bucket layers is complete, dist_all_reduce_async of that bucket
 * (--width x --width floats per layer), the lower layers computing while it
 * is in flight; then dist_wait of every bucket, last layers' first. Every
 * third round instead times the same step (dist_timer: a barrier, then an
 * all-gather of the times) with each bucket's blocking all-reduce after the
 * compute, as lecture_08's overlap measurement does in turns with the async
 * step.
 *
 * Rank r fills bucket b of round k with (r + 1) (b + 1) + k before the
 * round: the sum over p ranks, p (p + 1) / 2 (b + 1) + p k, is worked out
 * here and compared exactly (small integers are exact in float32).
 *
 * Each rank hands back its slowest round's time and the round, the
 * OMPI_MCA_mpi_yield_when_idle it was started with and whether it leads a
 * session of its own; the lecture prints one line "rounds N slowest S s
 * (rank R, round K) spawn T s yield Y0,Y1,... own session S0,S1,...".
 *
 * --leave-early=R plants a bug: rank R returns before the last round, and
 * the others wait for it in that round's first collective (across hosts
 * the lecture must still name them at once: tests/test_two_hosts.py). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lectern.h"

LECTURE_OPTIONS({"rounds", "N", "rounds of the bucketed step (default 40)"}, {"world", "N", "ranks (default 4)"},
                {"width", "N", "a layer's width: a bucket holds per-bucket x width x width floats (default 256)"},
                {"layers", "N", "layers (default 4)"}, {"per-bucket", "N", "layers per bucket (default 2)"},
                {"leave-early", "RANK", "a planted bug: that rank returns before the last round (default -1: none)"});

enum { MAX_BUCKETS = 16 };

typedef struct {
    int rounds, width, layers, per_bucket;
    int leave_early; /* this rank skips the last round, the others wait for it there (-1: none) */
    char log[1024];  /* BUCKET_ROUNDS_LOG, read by the lecture: ranks on another host do not have it */
} cfg;

typedef struct {
    double slowest, total;
    int slowest_round;
    char yield[8];   /* OMPI_MCA_mpi_yield_when_idle as the rank saw it ("-" unset) */
    int own_session; /* the rank leads a session of its own (spawn_rank.c, own_session) */
} rank_times;

static int option_int(const char *name, const char *fallback, int lo, int hi) {
    const char *s = lecture_option(name, fallback);
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "bucket_rounds_fixture: --%s=%s: expected a number from %d to %d\n", name, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

/* BUCKET_ROUNDS_LOG=PREFIX: each rank writes when each call began and
 * ended (the monotonic clock, one for all processes of a machine) to
 * PREFIX.RANK, for finding where a slow round waits. */
static FILE *trail;

static void mark(int round, const char *what, int b) {
    if (trail) {
        fprintf(trail, "%.6f %d %s %d\n", now_seconds(), round, what, b);
        fflush(trail);
    }
}

static float bucket_value(int rank, int b, int round) { return (float)((rank + 1) * (b + 1) + round); }

static void rounds_main(int rank, int world_size, void *args) {
    const cfg *c = args;
    int device = get_device(rank);
    int n_buckets = (c->layers + c->per_bucket - 1) / c->per_bucket;
    tensor *bucket[MAX_BUCKETS];
    dist_request *req[MAX_BUCKETS];
    for (int b = 0; b < n_buckets; b++) {
        int layers = c->layers - b * c->per_bucket < c->per_bucket ? c->layers - b * c->per_bucket : c->per_bucket;
        bucket[b] = zeros((int64_t)layers * c->width, c->width, device);
    }
    tensor *w = randn(c->width, c->width, device), *x = randn(c->width, c->width, device);
    tensor *y = empty(c->width, c->width, device);
    rank_times out = {0, 0, -1, "-", getsid(0) == getpid()};
    const char *yield = getenv("OMPI_MCA_mpi_yield_when_idle");
    if (yield) snprintf(out.yield, sizeof out.yield, "%s", yield);
    if (c->log[0]) {
        char path[1100];
        snprintf(path, sizeof path, "%s.%d", c->log, rank);
        trail = fopen(path, "w");
    }
    for (int round = 0; round < c->rounds; round++) {
        if (rank == c->leave_early && round == c->rounds - 1) break;
        for (int b = 0; b < n_buckets; b++)
            fill_(bucket[b], bucket_value(rank, b, round));
        int timed = round % 3 == 2;
        dist_timer timer = {0};
        double start = now_seconds();
        mark(round, "start", -1);
        if (timed) dist_timer_start(&timer);
        mark(round, "timer", -1);
        /* Backward from the last layer: bucket b is complete once its
         * lowest layer is done. */
        for (int i = c->layers - 1; i >= 0; i--) {
            matmul_into(y, x, w, 0, 0, 1.0f, 0.0f);
            int b = (c->layers - 1 - i) / c->per_bucket;
            int lowest = c->layers - 1 - ((b + 1) * c->per_bucket - 1);
            if (!timed && (i == lowest || i == 0)) {
                mark(round, "iallreduce", b);
                req[b] = dist_all_reduce_async(bucket[b], DIST_SUM);
                mark(round, "iallreduce-done", b);
            }
        }
        for (int b = 0; b < n_buckets; b++) {
            mark(round, timed ? "allreduce" : "wait", b);
            if (timed) dist_all_reduce(bucket[b], DIST_SUM);
            else dist_wait(req[b]);
            mark(round, "done", b);
        }
        if (timed) dist_timer_stop(&timer);
        mark(round, "end", -1);
        double seconds = now_seconds() - start;
        out.total += seconds;
        if (seconds > out.slowest) {
            out.slowest = seconds;
            out.slowest_round = round;
        }
        for (int b = 0; b < n_buckets; b++) {
            /* sum over ranks of (r + 1)(b + 1) + round */
            float want = (float)(world_size * (world_size + 1) / 2 * (b + 1) + world_size * round);
            tensor *expect = zeros(bucket[b]->shape[0], c->width, -1);
            fill_(expect, want);
            check_close(bucket[b], expect, 0, 0, "a bucket's all-reduce");
            tensor_free(expect);
        }
    }
    spawn_return(&out, sizeof out);
    if (trail) fclose(trail);
    trail = NULL;
    for (int b = 0; b < n_buckets; b++)
        tensor_free(bucket[b]);
    tensor_free(w);
    tensor_free(x);
    tensor_free(y);
}

static void body(void) {
    cfg c = {.rounds = option_int("rounds", "40", 1, 100000),
             .width = option_int("width", "256", 1, 4096),
             .layers = option_int("layers", "4", 1, 64),
             .per_bucket = option_int("per-bucket", "2", 1, 64),
             .leave_early = option_int("leave-early", "-1", -1, 63)};
    int world = option_int("world", "4", 1, 64);
    const char *log = getenv("BUCKET_ROUNDS_LOG");
    snprintf(c.log, sizeof c.log, "%s", log ? log : "");
    if ((c.layers + c.per_bucket - 1) / c.per_bucket > MAX_BUCKETS) {
        fprintf(stderr, "bucket_rounds_fixture: more than %d buckets (--layers / --per-bucket)\n", MAX_BUCKETS);
        exit(2);
    }
    double start = now_seconds();
    spawn(rounds_main, world, &c, sizeof c);
    double seconds = now_seconds() - start;
    rank_times worst = {0, 0, -1, "-", 0};
    int worst_rank = -1;
    char yields[256] = "", sessions[256] = "";
    size_t len = 0, slen = 0;
    for (int r = 0; r < world; r++) {
        rank_times t;
        if (spawn_result(r, &t, sizeof t) != sizeof t) continue;
        t.yield[sizeof t.yield - 1] = '\0';
        if (len < sizeof yields)
            len += (size_t)snprintf(yields + len, sizeof yields - len, "%s%s", r ? "," : "", t.yield);
        if (slen < sizeof sessions)
            slen += (size_t)snprintf(sessions + slen, sizeof sessions - slen, "%s%d", r ? "," : "", t.own_session);
        if (t.slowest >= worst.slowest) {
            worst = t;
            worst_rank = r;
        }
    }
    printf("rounds %d slowest %.3f s (rank %d, round %d) spawn %.3f s yield %s own session %s\n", c.rounds,
           worst.slowest, worst_rank, worst.slowest_round, seconds, yields, sessions);
    fflush(stdout);
    note_verbatim("rounds %d slowest %.3f s (rank %d, round %d) spawn %.3f s yield %s own session %s", c.rounds,
                  worst.slowest, worst_rank, worst.slowest_round, seconds, yields, sessions);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
