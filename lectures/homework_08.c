/*
 * homework_08: distributed training by hand, checked.
 *
 * Four exercises on what lecture_08 teaches. Each function marked EXERCISE
 * is yours to write; the code after them runs your functions on 4 ranks and
 * checks them against lectern's own collectives with check_close(), and
 * checks how the ranks communicated (which calls, how many bytes to whom,
 * with dist_traffic_since()): the right numbers by another method do not
 * pass. Each exercise runs on ranks of its own, so one that crashes or
 * hangs costs only its own checks. At the start every check fails; when
 * all pass, the last line of the run says "checks: 40 passed, 0 failed,
 * 0 not reached".
 *
 *     make run LECTURE=homework_08                 exercises 1 to 3
 *     make run LECTURE=homework_08 ARGS=--deadlock exercise 4 as well
 *
 * docs/homework.md explains the exercises and how they are checked.
 * (The instructor's solution, tests/fixtures/homework_08_solution.c,
 * defines HOMEWORK_SOLUTION and its own versions of the four functions.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

LECTURE_OPTIONS({"n", "N", "elements per rank in exercise 1 (default 1000, or the variant's)"},
                {"deadlock", NULL, "also run exercise 4 (its deadlock is named in about a second until you fix it)"});

#ifndef HOMEWORK_SOLUTION

/* EXERCISE 1: ring all-reduce from send and receive.
 *
 * Sum t over all ranks, in place, with dist_send / dist_recv (or dist_isend,
 * dist_irecv, dist_wait) only: no dist_all_reduce. Cut t into world_size
 * chunks with tensor_view() (t->numel is a multiple of the world size).
 * Reduce-scatter: in world_size - 1 steps each rank sends one chunk to the
 * next rank and adds the chunk it receives from the previous one; then
 * all-gather: world_size - 1 more steps pass the finished chunks round. */
void ring_all_reduce(tensor *t) {
    // your code here
}

/* EXERCISE 2: data parallelism with one bucket and gradient accumulation.
 *
 * grads[0 .. n - 1] hold this rank's gradients (different shapes), each
 * summed over `accum` micro-batches. Make every rank hold the average over
 * all ranks and all micro-batches, with ONE collective: copy each gradient
 * into its place in `bucket` (a view of the bucket at the right offset, with
 * the gradient's shape), all-reduce the bucket, scale, and copy back. */
void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {
    // your code here
}

/* EXERCISE 3: a ZeRO-1 optimizer step.
 *
 * param and grad are full copies on every rank; this rank's optimizer
 * state `opt` (AdamW) covers only its shard: elements
 * [rank * numel / world, (rank + 1) * numel / world) of param. Average the
 * gradient across ranks straight into this rank's shard (reduce-scatter),
 * step the shard of param with adamw_step, then give every rank the whole
 * updated param (all-gather). Mind: dist_all_gather's output and input may
 * not be the same memory. */
void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    // your code here
}

/* EXERCISE 4: find the deadlock (runs with --deadlock).
 *
 * Ranks 0 and 1, 2 and 3 swap tensors: `theirs` must end up holding the
 * peer's `mine`. As written, every rank waits in dist_send for its peer to
 * receive, and its peer waits in dist_send too. Run it, read where lectern
 * says each rank was stuck, and fix it. */
void exchange(tensor *mine, tensor *theirs) {
    int peer = dist_rank() ^ 1;
    dist_send(mine, peer);
    dist_recv(theirs, peer);
}

#else
void ring_all_reduce(tensor *t);
void ddp_sync(tensor **grads, int n, tensor *bucket, int accum);
void zero1_step(tensor *param, tensor *grad, adamw *opt);
void exchange(tensor *mine, tensor *theirs);
#endif

/* ------------------------------------------------------------------ */
/* What checks the exercises (no need to change anything below)       */
/* ------------------------------------------------------------------ */

/* Tolerances. A float32 sum of k terms is exact to about k 2^-24 of the sum
 * of the terms' sizes, whatever order it adds them in (each of its k - 1
 * additions rounds by half an ulp at most). With 4 ranks of standard
 * normal values (|x| < 6 in practice) a sum of 4 is within 3 * 24 * 2^-24
 * = 4.3e-6 of the exact sum, and two orders, each that close on its side,
 * within twice that, 8.6e-6: 1e-5 holds, and a chunk summed twice or left
 * out is off by about 1, five orders more. */
#define SUM_ATOL 1e-5
/* AdamW's first step moves each element by lr * g / (|g| + eps), about lr
 * (1e-3); gradients averaged in another order differ by 1e-7 relative, which
 * moves that step by far less than 1e-6. A step not taken is off by 1e-3. */
#define STEP_ATOL 1e-6
#define LR 1e-3f
/* That step is the same for g and for 4 g (a sum of 4 ranks' gradients
 * where the average was asked for) but where |g| is near eps (1e-8): there
 * g / (|g| + eps) is about 1/2 for the average and 4/5 for the sum, a step
 * 3e-4 apart. Gradients of that size make the sum show. */
#define TINY_GRAD 1e-8f

/* How long each exercise's ranks may run. A solved exercise takes well
 * under a second (exercise 4 moves 4 MB each way), a few seconds built
 * with the sanitizers; past this the ranks are stopped and each is named
 * where it is and for how long, and the next exercise runs. So a loop that
 * never ends costs 30 s, not an autograder's whole time limit (four
 * exercises: two minutes at worst). A test's copy may define a shorter one
 * before it includes this file. */
#ifndef EXERCISE_SECONDS
#define EXERCISE_SECONDS 30
#endif

typedef struct config {
    int n;        /* elements per rank, exercise 1 */
    int accum;    /* micro-batches accumulated, exercise 2 */
    int shard;    /* floats of each rank's ZeRO-1 shard, exercise 3 */
    int deadlock; /* run exercise 4 */
} config;

/* ---- how the ranks communicated (dist_traffic_since) ---- */

static int64_t collective_calls(const dist_traffic *d) {
    int64_t n = 0;
    for (int k = 0; k < DIST_CALL_KINDS; k++)
        if (k != DIST_CALL_SEND && k != DIST_CALL_RECV && k != DIST_CALL_SENDRECV) n += d->calls[k];
    return n;
}

static int64_t p2p_calls(const dist_traffic *d) {
    return d->calls[DIST_CALL_SEND] + d->calls[DIST_CALL_RECV] + d->calls[DIST_CALL_SENDRECV];
}

/* ---- exercise 1 ---- */

/* Rank q's input: made from a seed the checker knows, so that every rank
 * can work out what each chunk of a wrong result holds. */
static tensor *input_of(int q, int n, int device) {
    manual_seed(100 + (uint64_t)q);
    return randn(n, 0, device);
}

static int same_floats(const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)x[i] - y[i]) > SUM_ATOL) return 0;
    return 1;
}

/* What wrong chunk c of this rank's result holds: the sum of some of the
 * ranks' chunks c (a reduce-scatter step too few or too many, or the
 * all-gather never brought the finished chunk), another chunk's sum (the
 * right numbers in the wrong place: a chunk index off by one), a multiple
 * of the sum (added twice), or none of these. `in[q]` is rank q's whole
 * input, `sum` the right result; `len` floats a chunk. */
static void what_chunk_holds(char *out, size_t size, const float *mine, float *const *in, const float *sum, int rank,
                             int world, int64_t len, int c) {
    const float *got = mine + c * len;
    float *part = malloc((size_t)len * sizeof *part);
    if (!part) lecture_fail("out of memory");
    for (unsigned set = 1; world <= 8 && set < (1u << world) - 1; set++) { /* every proper subset of ranks */
        for (int64_t i = 0; i < len; i++) {
            part[i] = 0;
            for (int q = 0; q < world; q++)
                if (set >> q & 1) part[i] += in[q][c * len + i];
        }
        if (!same_floats(got, part, len)) continue;
        int k = __builtin_popcount(set);
        if (set == 1u << rank) snprintf(out, size, "only this rank's own values, as it started");
        else if (k == 1)
            snprintf(out, size,
                     "only rank %d's own values: a chunk passed round before the reduce-scatter "
                     "had added the others to it",
                     __builtin_ctz(set));
        else {
            size_t at = (size_t)snprintf(out, size, "the sum of %d of the %d ranks' values (ranks", k, world);
            for (int q = 0, j = 0; q < world && at < size; q++)
                if (set >> q & 1) at += (size_t)snprintf(out + at, size - at, "%s%d", j++ ? ", " : " ", q);
            if (at < size)
                snprintf(out + at, size - at, "): a reduce-scatter step short, or a chunk passed round unfinished");
        }
        free(part);
        return;
    }
    free(part);
    for (int other = 0; other < world; other++)
        if (other != c && same_floats(got, sum + other * len, len)) {
            snprintf(out, size, "chunk %d's sum (the right numbers in the wrong place)", other);
            return;
        }
    for (int k = 2; k <= world; k++) {
        int multiple = 1;
        for (int64_t i = 0; i < len && multiple; i++)
            multiple = fabs((double)got[i] - (double)k * sum[c * len + i]) <= k * SUM_ATOL;
        if (multiple) {
            snprintf(out, size, "%d times the sum (added %d times)", k, k);
            return;
        }
    }
    snprintf(out, size, "no sum of the ranks' values of this chunk or another");
}

/* The values, chunk by chunk: a ring's mistakes are a chunk's, and "chunk
 * 2 holds the sum of 3 of the 4 ranks' values" says which step went wrong
 * where "elements 500-749 wrong" does not. Chunks that hold the same are
 * named together. 1 when every chunk is right. */
static int check_ring_values(const tensor *t, const tensor *expected, int rank, int world, int n) {
    float *mine = malloc((size_t)n * sizeof *mine), *sum = malloc((size_t)n * sizeof *sum);
    float *in[LECTERN_MAX_WORLD];
    if (!mine || !sum) lecture_fail("out of memory");
    tensor_to_host(t, mine);
    tensor_to_host(expected, sum);
    int64_t len = n / world, worst_at = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)mine[i] - sum[i]) > worst) {
            worst = fabs((double)mine[i] - sum[i]);
            worst_at = i;
        }
    for (int q = 0; q < world; q++) {
        tensor *x = input_of(q, n, -1);
        in[q] = malloc((size_t)n * sizeof *in[q]);
        if (!in[q]) lecture_fail("out of memory");
        tensor_to_host(x, in[q]);
        tensor_free(x);
    }
    char holds[LECTERN_MAX_WORLD][256];
    int wrong = 0, told[LECTERN_MAX_WORLD] = {0};
    for (int c = 0; c < world; c++) {
        holds[c][0] = 0;
        if (same_floats(mine + c * len, sum + c * len, len)) continue;
        what_chunk_holds(holds[c], sizeof holds[c], mine, in, sum, rank, world, len, c);
        wrong++;
    }
    for (int q = 0; q < world; q++)
        free(in[q]);
    char story[2048] = "", *at = story, *end = story + sizeof story;
    for (int c = 0; c < world; c++) {
        if (!holds[c][0] || told[c]) continue;
        int same = 0;
        for (int o = c; o < world; o++)
            same += strcmp(holds[o], holds[c]) == 0;
        if (at < end) at += snprintf(at, (size_t)(end - at), "%schunk%s ", at > story ? "; " : "", same > 1 ? "s" : "");
        for (int o = c, j = 0; o < world; o++) {
            if (strcmp(holds[o], holds[c]) != 0) continue;
            told[o] = 1;
            if (at < end)
                at += snprintf(at, (size_t)(end - at), "%s%d", j == 0 ? "" : j == same - 1 ? " and " : ", ", o);
            j++;
        }
        if (at < end) at += snprintf(at, (size_t)(end - at), " hold%s %s", same > 1 ? "" : "s", holds[c]);
    }
    if (wrong == 0)
        check_named(1, "exercise 1: the sum over the ranks", "every chunk right (largest difference %.2g, atol %g)",
                    worst, SUM_ATOL);
    else
        check_named(0, "exercise 1: the sum over the ranks",
                    "%d of %d chunks wrong (chunk c is elements %lld c to %lld c + %lld): %s; largest difference "
                    "%.3g at [%lld] (actual %.7g, expected %.7g)",
                    wrong, world, (long long)len, (long long)len, (long long)len - 1, story, worst, (long long)worst_at,
                    mine[worst_at], sum[worst_at]);
    free(mine);
    free(sum);
    return wrong == 0;
}

/* Exercise 1's method: sends and receives only, and a ring's traffic: one
 * chunk (numel / world floats) to the next rank and one from the previous
 * rank per step, 2 (world - 1) steps; nothing to or from anyone else. A ring
 * that passes whole tensors sends world times too much; one that goes the
 * other way round (to rank - 1) sends as much, but not as the exercise
 * says ("each rank sends one chunk to the next rank and adds the chunk it
 * receives from the previous one"), and is told so. */
static void check_ring_method(const dist_traffic *d, int rank, int world, int64_t numel) {
    char calls[256];
    dist_traffic_text(d, calls, sizeof calls);
    int64_t coll = collective_calls(d), p2p = p2p_calls(d);
    if (coll > 0)
        check_named(0, "exercise 1: sends and receives only",
                    "ring_all_reduce made %s; the exercise allows only sends and receives", calls);
    else if (p2p == 0)
        check_named(0, "exercise 1: sends and receives only",
                    "ring_all_reduce made no send or receive; the exercise builds the ring from them");
    else check_named(1, "exercise 1: sends and receives only", "ring_all_reduce made %s", calls);

    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    int64_t want = 2 * (int64_t)(world - 1) * (numel / world) * (int64_t)sizeof(float);
    int64_t to_others = 0, from_others = 0;
    for (int q = 0; q < world; q++) {
        if (q != next) to_others += d->sent_to[q];
        if (q != prev) from_others += d->received_from[q];
    }
    int reversed = next != prev && d->sent_to[prev] == want && d->received_from[next] == want &&
                   to_others == d->sent_to[prev] && from_others == d->received_from[next];
    char why[256] = "";
    if (reversed)
        snprintf(why, sizeof why,
                 "; it goes round the other way (to rank %d, from rank %d): the exercise's ring sends to the next "
                 "rank (rank + 1) and receives from the previous one",
                 prev, next);
    check_named(d->sent_to[next] == want && d->received_from[prev] == want && to_others == 0 && from_others == 0,
                "exercise 1: a ring's traffic, one chunk a step to the next rank",
                "a ring sends 2(w-1) = %d chunks of %lld bytes to the next rank (%d) and receives as many from the "
                "previous one (%d): %lld bytes each way; ring_all_reduce sent %lld bytes to rank %d and %lld to "
                "others, received %lld from rank %d and %lld from others%s",
                2 * (world - 1), (long long)(numel / world * (int64_t)sizeof(float)), next, prev, (long long)want,
                (long long)d->sent_to[next], next, (long long)to_others, (long long)d->received_from[prev], prev,
                (long long)from_others, why);
}

static void exercise_1(int rank, int world, void *args) {
    const config *c = args;
    tensor *t = input_of(rank, c->n, get_device(rank));
    tensor *expected = to_device(t, get_device(rank));
    dist_all_reduce(expected, DIST_SUM);
    dist_barrier(); /* the ranks start the ring together: its time is the ring's, not a late rank's */
    dist_traffic before = dist_traffic_now();
    double start = now_seconds();
    ring_all_reduce(t);
    double seconds = now_seconds() - start;
    dist_traffic d = dist_traffic_since(&before);
    int right = check_ring_values(t, expected, rank, world, c->n);
    check_ring_method(&d, rank, world, t->numel);
    /* The course's leaderboard (--grade's results.json): the ring's bus
     * bandwidth as nccl-tests define it, 2 (w-1)/w of the tensor's bytes a
     * second, on rank 0, for a ring whose sum is right. At the default 1000
     * floats the time is mostly the messages' latency, not bandwidth. */
    if (right && seconds > 0)
        grade_leaderboard("exercise 1: ring all-reduce bus bandwidth (GB/s)",
                          2.0 * (world - 1) / world * (double)t->numel * sizeof(float) / seconds / 1e9, "desc");
    tensor_free(t);
    tensor_free(expected);
}

/* ---- exercise 2 ---- */

static void exercise_2(int rank, int world, void *args) {
    const config *c = args;
    enum { N_PARAMS = 3 };
    int64_t rows[N_PARAMS] = {3, 5, 2}, cols[N_PARAMS] = {4, 0, 6};
    tensor *grads[N_PARAMS], *expected[N_PARAMS];
    int64_t total = 0;
    manual_seed(200 + (uint64_t)rank);
    for (int i = 0; i < N_PARAMS; i++) {
        grads[i] = zeros(rows[i], cols[i], get_device(rank));
        for (int m = 0; m < c->accum; m++) { /* micro-batches, accumulated */
            tensor *g = randn(rows[i], cols[i], get_device(rank));
            add_(grads[i], g);
            tensor_free(g);
        }
        expected[i] = to_device(grads[i], get_device(rank));
        dist_all_reduce(expected[i], DIST_SUM);
        scale_(expected[i], 1.0f / (float)(world * c->accum));
        total += grads[i]->numel;
    }
    tensor *bucket = zeros(total, 0, get_device(rank));
    dist_traffic before = dist_traffic_now();
    ddp_sync(grads, N_PARAMS, bucket, c->accum);
    dist_traffic d = dist_traffic_since(&before);
    const char *names[N_PARAMS] = {"exercise 2: gradient 0 (3x4)", "exercise 2: gradient 1 (5)",
                                   "exercise 2: gradient 2 (2x6)"};
    for (int i = 0; i < N_PARAMS; i++) {
        if (!check_close(grads[i], expected[i], 0, SUM_ATOL, names[i])) {
            inspect(grads[i]);
            inspect(expected[i]);
        }
        tensor_free(grads[i]);
        tensor_free(expected[i]);
    }
    /* One all-reduce of the whole bucket: its nominal bytes, 2 (w-1)/w of
     * what it reduced, say how many floats it carried. */
    char calls[256];
    int64_t reduced =
            world > 1 ? d.nominal_sent[DIST_CALL_ALL_REDUCE] * world / (2 * (world - 1)) / (int64_t)sizeof(float) : 0;
    int one = d.calls[DIST_CALL_ALL_REDUCE] == 1 && collective_calls(&d) == 1 && p2p_calls(&d) == 0;
    char size[64] = "";
    if (one && world > 1 && reduced != total) snprintf(size, sizeof size, " of %lld floats", (long long)reduced);
    check_named(one && (world < 2 || reduced == total), "exercise 2: one all-reduce of the whole bucket",
                "expected 1 all-reduce per step, of the whole bucket (%lld floats); ddp_sync made %s%s",
                (long long)total, dist_traffic_text(&d, calls, sizeof calls), size);
    tensor_free(bucket);
}

/* ---- exercise 3 ---- */

/* One ZeRO-1 step of zero1_step against the full optimizer on the averaged
 * gradient; the rank's gradient is standard normal times grad_scale.
 * Returns what this rank communicated inside zero1_step. */
static dist_traffic zero1_against_full(int rank, int world, int shard_numel, float grad_scale, const char *what,
                                       int show) {
    int64_t numel = shard_numel * (int64_t)world;
    manual_seed(300); /* the same parameters on every rank */
    tensor *param = randn(numel, 0, get_device(rank));
    manual_seed(400 + (uint64_t)rank); /* each rank its own gradient */
    tensor *grad = randn(numel, 0, get_device(rank));
    scale_(grad, grad_scale);

    /* The reference: the full optimizer on the averaged gradient. */
    tensor *ref = to_device(param, get_device(rank));
    tensor *avg = to_device(grad, get_device(rank));
    dist_all_reduce(avg, DIST_AVG);
    adamw *full = adamw_new(ref, LR);
    adamw_step(full, ref, avg);

    tensor *shard = tensor_view(param, rank * (numel / world), numel / world, 0);
    adamw *opt = adamw_new(shard, LR);
    dist_traffic before = dist_traffic_now();
    zero1_step(param, grad, opt);
    dist_traffic d = dist_traffic_since(&before);
    if (!check_close(param, ref, 0, STEP_ATOL, what) && show) { /* a withheld check shows nothing */
        inspect(param);
        inspect(ref);
    }

    adamw_free(opt);
    adamw_free(full);
    tensor_free(shard);
    tensor_free(ref);
    tensor_free(avg);
    tensor_free(param);
    tensor_free(grad);
    return d;
}

static void exercise_3(int rank, int world, void *args) {
    const config *c = args;
    dist_traffic d = zero1_against_full(rank, world, c->shard, 1.0f, "exercise 3: parameters after a ZeRO-1 step", 1);
    zero1_against_full(rank, world, c->shard, TINY_GRAD,
                       "exercise 3: parameters after a ZeRO-1 step with gradients near AdamW's eps (a sum "
                       "where the average is asked for shows here)",
                       0);
    /* ZeRO-1's traffic is a reduce-scatter and an all-gather: an all-reduce
     * of the whole gradient gives the same numbers and sends more. */
    char calls[256];
    check_named(d.calls[DIST_CALL_REDUCE_SCATTER] == 1 && d.calls[DIST_CALL_ALL_GATHER] == 1 &&
                        collective_calls(&d) == 2 && p2p_calls(&d) == 0,
                "exercise 3: a reduce-scatter and an all-gather, nothing else",
                "expected 1 dist_reduce_scatter and 1 dist_all_gather per step, nothing else; zero1_step made %s",
                dist_traffic_text(&d, calls, sizeof calls));
}

/* ---- exercise 4 ---- */

static void exercise_4(int rank, int world, void *args) {
    (void)world;
    (void)args;
    /* 4 MB each way: too large for Open MPI to buffer, so a blocking send
     * waits for its receive. */
    int64_t n = 1 << 20;
    tensor *mine = zeros(n, 0, get_device(rank)), *theirs = zeros(n, 0, get_device(rank));
    fill_(mine, (float)rank);
    exchange(mine, theirs);
    tensor *expected = zeros(n, 0, get_device(rank));
    fill_(expected, (float)(rank ^ 1));
    if (!check_close(theirs, expected, 0, 0, "exercise 4: the peer's tensor arrived")) {
        inspect(theirs);
        inspect(expected);
    }
    tensor_free(mine);
    tensor_free(theirs);
    tensor_free(expected);
}

/* Each exercise runs in a spawn of its own (spawn_exercise): a crash, a
 * deadlock or a loop that never ends in one costs that exercise's checks,
 * and the next exercise still runs and is checked. */
static void homework_08(void) {
    note("# Homework 08: distributed training by hand");
    note("Four exercises, each a function at the top of `lectures/homework_08.c`. Every check below "
         "compares your function with lectern's own collectives on 4 ranks; a failed check shows "
         "the largest difference and where it is. Each exercise runs on ranks of its own: one that "
         "crashes or hangs costs only its own checks.");
    int world = 4;
    /* The sizes, from the student's variant (--variant SEED, which the
     * autograder gives each submission): what the checks expect is
     * computed from them, so every variant checks the same things. Without
     * a seed, the defaults. --n, given, wins over the variant's size. */
    const char *n = lecture_option("n", NULL);
    config c = {n ? atoi(n) : world * variant_int("floats per ring chunk", 150, 400, 250),
                variant_int("micro-batches accumulated", 2, 4, 2), variant_int("floats per ZeRO-1 shard", 4, 16, 8),
                lecture_flag("deadlock")};
    if (c.n <= 0 || c.n % world != 0) {
        check(0, "--n=%d must be a positive multiple of %d", c.n, world);
        return;
    }
    /* The weights of the grade an autograder reads (--grade FILE,
     * docs/homework.md): 30 points for each of exercises 1 to 3, shared by
     * their checks (per rank: 3, 4 and 3), 10 for the deadlock. */
    grade_exercise("exercise 1:", 30, 3 * world);
    grade_exercise("exercise 2:", 30, 4 * world);
    grade_exercise("exercise 3:", 30, 3 * world);
    if (c.deadlock) grade_exercise("exercise 4:", 10, world);
    /* The stricter ZeRO-1 step (gradients near eps) is shown to the student
     * after the due date: until then the console and the trace say that it
     * passed or failed, not what it saw, and results.json keeps that for
     * the grader. */
    grade_visibility("exercise 3: parameters after a ZeRO-1 step with gradients near AdamW's eps", "after_due_date");
    note("## Exercise 1: a ring all-reduce from sends and receives");
    spawn_exercise("exercise 1:", EXERCISE_SECONDS, exercise_1, world, &c, sizeof c);
    note("## Exercise 2: data parallelism, one bucket");
    spawn_exercise("exercise 2:", EXERCISE_SECONDS, exercise_2, world, &c, sizeof c);
    note("## Exercise 3: a ZeRO-1 step");
    spawn_exercise("exercise 3:", EXERCISE_SECONDS, exercise_3, world, &c, sizeof c);
    if (c.deadlock) {
        note("## Exercise 4: the deadlock");
        spawn_exercise("exercise 4:", EXERCISE_SECONDS, exercise_4, world, &c, sizeof c);
    }
}

int main(int argc, char **argv) { return lecture_main(argc, argv, homework_08); }
