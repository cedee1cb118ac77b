/*
 * homework_parallel: model parallelism by hand, checked.
 *
 * Three exercises on the second half of lecture_08: the backward pass of
 * Megatron's tensor-parallel MLP, a 1F1B pipeline schedule, and ZeRO-3 with
 * the next layer's parameters gathered while the current layer computes.
 * Each function marked EXERCISE is yours to write; the code after them runs
 * your functions on 4 ranks and checks the numbers against one device with
 * check_close(), and checks the method: which calls your ranks made and
 * when (dist_traffic_since()), the rules a schedule must keep, the bubble it
 * leaves. The right numbers by another method do not pass. Each exercise
 * runs on ranks of its own, so one that crashes or hangs costs only its own
 * checks. At the start every check fails; when all pass, the last line of
 * the run says "checks: 48 passed, 0 failed, 0 not reached".
 *
 *     make run LECTURE=homework_parallel
 *
 * docs/homework.md explains the exercises and how they are checked.
 * (The instructor's solution, tests/fixtures/homework_parallel_solution.c,
 * defines HOMEWORK_SOLUTION and its own versions of the three functions.)
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lectern.h"

/* A pipeline order (exercise 2) is a list of operations, one int each. */
#define FWD(k) ((k) + 1) /* the forward of micro-batch k */
#define BWD(k) (-(k)-1)  /* the backward of micro-batch k */

/* Exercise 3's layer: out = gelu(in w), w the whole d x d weight. Given. */
tensor *zero3_layer(int i, const tensor *w, const tensor *in);

#ifndef HOMEWORK_SOLUTION

/* EXERCISE 1: the backward pass of Megatron's tensor-parallel MLP.
 *
 * The block is y = gelu(x A) B: the MLP of a Megatron-LM transformer layer
 * (lecture_08's toy network puts a second gelu after B, y = gelu(gelu(x A)
 * B), to stack such blocks; both are cut the same way). A (d x h) is cut by
 * columns and B (h x d) by rows: this rank holds a = A's columns
 * [r h/w, (r+1) h/w) and b = the same rows of B. The forward (done for you) computed hpre = x a, this rank's
 * columns of x A, and all-reduced gelu(hpre) b into y. Given dy (dL/dy, the
 * same on every rank), write this rank's weight gradients da (d x h/w) and
 * db (h/w x d) and the input gradient dx (B x d, whole on every rank).
 * Only dx needs communication, and one all-reduce is all it needs. */
void megatron_backward(const tensor *x, const tensor *a, const tensor *b, const tensor *hpre, const tensor *dy,
                       tensor *da, tensor *db, tensor *dx) {
    // your code here
}

/* EXERCISE 2: the 1F1B schedule.
 *
 * Fill ops[0 .. 2m - 1] with the order in which stage `stage` of `stages`
 * runs its m micro-batches: FWD(k) for the forward of micro-batch k, BWD(k)
 * for its backward. 1F1B: a stage first runs enough forwards to fill the
 * pipeline behind it (stages - stage - 1 of them, at most m), then
 * alternates one forward and one backward, then runs the backwards left.
 * Micro-batches go in order (0, 1, ...) in both directions. */
void one_f_one_b(int stage, int stages, int m, int *ops) {
    // your code here: ops[0 .. 2m - 1], each FWD(k) or BWD(k), in this stage's order
}

/* EXERCISE 3: a ZeRO-3 forward with prefetch.
 *
 * Layer i's weight (d x d) lives in pieces: pieces[i] holds this rank's band
 * of d / w rows. Run the layers on x (act = zero3_layer(i, whole W_i, act))
 * and return the last activation (a new tensor; free the ones in between,
 * never x). Gather each layer with dist_all_gather_async into one of the two
 * d x d buffers full[0], full[1], and hide the gather behind compute: before
 * layer i computes, layer i + 1's gather must already be on its way. In
 * this order: wait for layer i's gather, start layer i + 1's (into the
 * other buffer), compute layer i. */
tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    // your code here
    return NULL;
}

#else
void megatron_backward(const tensor *x, const tensor *a, const tensor *b, const tensor *hpre, const tensor *dy,
                       tensor *da, tensor *db, tensor *dx);
void one_f_one_b(int stage, int stages, int m, int *ops);
tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full);
#endif

/* ------------------------------------------------------------------ */
/* What checks the exercises (no need to change anything below)       */
/* ------------------------------------------------------------------ */

#define WORLD 4

/* Exercise 1's sizes: a batch of 8 rows (4 to 16 in a variant), d = 32,
 * h = 64 (16 columns a rank). */
enum { TP_D = 32, TP_H = 64 };
/* Every gradient here is a float32 dot product of at most 64 terms (dx's:
 * over h, which the ranks cut in 4 and the all-reduce adds up in another
 * order than one device does). Two orders of such a sum differ by at most
 * 64 * 2^-24 = 3.8e-6 of the sum of the terms' sizes, and with unit-size x
 * and dy and weights of size 1/sqrt(fan-in) that sum stays below 5 here:
 * 2e-5. 1e-4 leaves room; a missed all-reduce or a gradient left at zero is
 * off by about the gradient's own size (0.1 to 1), three orders more. */
#define TP_ATOL 1e-4

/* Exercise 2: 8 micro-batches on the 4 ranks (6 to PIPE_M_MAX in a
 * variant); the schedule's rules are also checked with 2 (fewer
 * micro-batches than stages). */
enum { PIPE_M_MAX = 9 };
/* Each forward "computes" for FWD_MS and each backward for BWD_MS (twice the
 * forward, as in a real network) by sleeping: four ranks on a machine of
 * two cores would otherwise slow each other down and measure the machine,
 * not the schedule. */
#define FWD_MS 20.0
#define BWD_MS 40.0
/* The measured bubble is 1 - m (f + b) / span. Sleeps never end early, so
 * it is not below the formula (p-1)/(m+p-1) = 0.273 (m = 8) by more than
 * the clocks' noise: 0.05. It is above it by what waking up and passing a
 * message cost on the 2(m+p-1) = 22 operations of the longest path (ideally
 * 11 slots of 60 ms, 660 ms). On a loaded machine (other processes, and
 * ranks that spin while they wait for a message) that was seen to reach
 * 8 ms an operation; +0.35 allows a span of 1270 ms, 28 ms an operation
 * (for the variants' m = 6 to 9: 33 to 26 ms). A schedule that runs one
 * micro-batch at a time through all the stages leaves a bubble of 1 - 1/p =
 * 0.75 at best (any delay only adds to it): above the formula plus 0.35 for
 * every m from 6 (0.333 + 0.35), it cannot pass. */
#define BUBBLE_BELOW 0.05
#define BUBBLE_ABOVE 0.35

/* Exercise 3's sizes: 4 layers of 64 x 64, a batch of 8 (4 to 16 in a
 * variant). */
enum { Z3_LAYERS = 4, Z3_D = 64 };

/* The sizes a variant picks (--variant SEED: variant_int), given to each
 * exercise's ranks. */
typedef struct config {
    int tp_batch; /* exercise 1's rows */
    int pipe_m;   /* exercise 2's micro-batches, at most PIPE_M_MAX */
    int z3_batch; /* exercise 3's rows */
} config;
/* The gathered weights are the floats one device holds and the same matmul
 * runs on them, so the output is the same bits but for OpenBLAS choosing
 * another kernel for a buffer of another alignment: a few ulps of values
 * below 10, well under 1e-5. A layer run with the wrong weight (a buffer
 * still being gathered into) is off by about the values' size. */
#define Z3_ATOL 1e-5

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

static tensor *scaled_randn(int64_t rows, int64_t cols, float s, int device) {
    tensor *t = randn(rows, cols, device);
    scale_(t, s);
    return t;
}

static void exercise_1(int rank, int world, void *args) {
    int tp_batch = ((const config *)args)->tp_batch;
    int device = get_device(rank);
    int64_t cols = TP_H / world, first = rank * cols;
    manual_seed(100); /* the same x, A, B and dy on every rank */
    tensor *x = randn(tp_batch, TP_D, device);
    tensor *A = scaled_randn(TP_D, TP_H, 1.0f / sqrtf(TP_D), device);
    tensor *B = scaled_randn(TP_H, TP_D, 1.0f / sqrtf(TP_H), device);
    tensor *dy = randn(tp_batch, TP_D, device);

    /* One device: h = x A, z = gelu(h), y = z B, and back. */
    tensor *h = matmul(x, A), *z = gelu(h);
    tensor *dB = zeros(TP_H, TP_D, device), *dz = zeros(tp_batch, TP_H, device);
    matmul_into(dB, z, dy, 1, 0, 1.0f, 0.0f);
    matmul_into(dz, dy, B, 0, 1, 1.0f, 0.0f);
    tensor *dh = gelu_backward(h, dz);
    tensor *dA = zeros(TP_D, TP_H, device), *dx_ref = zeros(tp_batch, TP_D, device);
    matmul_into(dA, x, dh, 1, 0, 1.0f, 0.0f);
    matmul_into(dx_ref, dh, A, 0, 1, 1.0f, 0.0f);

    /* This rank's pieces, and the forward Megatron ran. */
    tensor *a = col_slice(A, first, first + cols);
    tensor *band = row_slice(B, first, first + cols), *b = to_device(band, device);
    tensor *hpre = matmul(x, a);
    tensor *da = zeros(TP_D, cols, device), *db = zeros(cols, TP_D, device), *dx = zeros(tp_batch, TP_D, device);

    dist_traffic before = dist_traffic_now();
    megatron_backward(x, a, b, hpre, dy, da, db, dx);
    dist_traffic d = dist_traffic_since(&before);

    tensor *dA_mine = col_slice(dA, first, first + cols);
    tensor *dB_band = row_slice(dB, first, first + cols), *dB_mine = to_device(dB_band, device);
    check_close(da, dA_mine, 0, TP_ATOL, "exercise 1: da, this rank's columns of dL/dA");
    check_close(db, dB_mine, 0, TP_ATOL, "exercise 1: db, this rank's rows of dL/dB");
    check_close(dx, dx_ref, 0, TP_ATOL, "exercise 1: dx, the whole input gradient");

    /* The method: one all-reduce, of dx's size (its nominal bytes are
     * 2 (w-1)/w of what it reduced), and no other call. */
    char calls[256];
    int64_t want = tp_batch * TP_D;
    int64_t reduced = d.nominal_sent[DIST_CALL_ALL_REDUCE] * world / (2 * (world - 1)) / (int64_t)sizeof(float);
    int one = d.calls[DIST_CALL_ALL_REDUCE] == 1 && collective_calls(&d) == 1 && p2p_calls(&d) == 0;
    char size[64] = "";
    if (one && reduced != want) snprintf(size, sizeof size, " of %lld floats", (long long)reduced);
    check_named(one && reduced == want, "exercise 1: exactly one all-reduce, of dx",
                "the backward needs exactly 1 all-reduce, of dx (%lld floats), and no other call; "
                "megatron_backward made %s%s",
                (long long)want, dist_traffic_text(&d, calls, sizeof calls), size);

    tensor *one_device[] = {x, A, B, dy, h, z, dB, dz, dh, dA, dx_ref};
    tensor *this_rank[] = {a, band, b, hpre, da, db, dx, dA_mine, dB_band, dB_mine};
    for (size_t i = 0; i < sizeof one_device / sizeof one_device[0]; i++)
        tensor_free(one_device[i]);
    for (size_t i = 0; i < sizeof this_rank / sizeof this_rank[0]; i++)
        tensor_free(this_rank[i]);
}

/* ---- exercise 2 ---- */

/* Room past the 2m ops of an order: a function that writes past the end
 * writes here, where it is seen, and not over the checker's variables. */
#define OPS_SLACK 64
#define OPS_PAST 0x7eadbeef /* what stays past the end when nothing writes there */

/* "FWD(3)", "BWD(0)", or the number as it is. */
static const char *op_text(int op, char *buf, size_t size) {
    if (op > 0) snprintf(buf, size, "FWD(%d)", op - 1);
    else if (op < 0 && op != INT_MIN) snprintf(buf, size, "BWD(%d)", -op - 1);
    else snprintf(buf, size, "%d", op);
    return buf;
}

/* Stage s's order for m micro-batches, from the student's function; an op
 * left 0 is one it did not fill. Returns the first index past the 2m ops
 * that it wrote, or -1. */
static int order_of(int s, int p, int m, int *ops) {
    for (int i = 0; i < 2 * m; i++)
        ops[i] = 0;
    for (int i = 2 * m; i < 2 * m + OPS_SLACK; i++)
        ops[i] = OPS_PAST;
    one_f_one_b(s, p, m, ops);
    for (int i = 2 * m; i < 2 * m + OPS_SLACK; i++)
        if (ops[i] != OPS_PAST) return i;
    return -1;
}

/* Rule 1, on one stage: exactly 2m ops, every forward and every backward
 * of the m micro-batches once (none of a micro-batch k >= m, which does not
 * exist), micro-batches in order in each direction, a backward after its
 * own forward. Writes what is wrong into why; returns 1 when the order
 * keeps the rule. */
static int order_valid(const int *ops, int m, int past, char *why, size_t size) {
    char t[32];
    if (past >= 0) {
        snprintf(why, size,
                 "it writes past the end of the order: ops[%d] = %s, where the order of %d micro-batches "
                 "is ops[0] to ops[%d]",
                 past, op_text(ops[past], t, sizeof t), m, 2 * m - 1);
        return 0;
    }
    int next_f = 0, next_b = 0;
    for (int i = 0; i < 2 * m; i++) {
        int op = ops[i], k = op > 0 ? op - 1 : -op - 1;
        if (op != 0 && op != INT_MIN && k >= m) {
            snprintf(why, size, "op %d is %s, the %s of micro-batch %d, but there are only %d (0 to %d)", i,
                     op_text(op, t, sizeof t), op > 0 ? "forward" : "backward", k, m, m - 1);
            return 0;
        }
        if (op > 0 && k == next_f) {
            next_f++;
        } else if (op < 0 && k == next_b && next_b < next_f) {
            next_b++;
        } else {
            if (op == 0) snprintf(why, size, "op %d is not set", i);
            else if (op > 0)
                snprintf(why, size, "op %d is the forward of micro-batch %d where that of %d was due", i, k, next_f);
            else if (k == next_b)
                snprintf(why, size, "op %d is the backward of micro-batch %d before its forward", i, k);
            else snprintf(why, size, "op %d is the backward of micro-batch %d where that of %d was due", i, k, next_b);
            return 0;
        }
    }
    return 1;
}

/* The most micro-batches whose forward has run and whose backward has not. */
static int most_in_flight(const int *ops, int m) {
    int now = 0, most = 0;
    for (int i = 0; i < 2 * m; i++) {
        now += ops[i] > 0 ? 1 : -1;
        if (now > most) most = now;
    }
    return most;
}

/* Rule 2, over all stages: stage s's forward k needs stage s-1's forward k
 * (its input), stage s's backward k needs stage s+1's backward k (the
 * gradient flows back through the stages in reverse order). Runs the p
 * orders (already valid one by one) with forwards of 1 unit and backwards
 * of 2; returns 0 when some stage would wait forever (writing which), else
 * 1 with the span in units. */
static int orders_run_together(int p, int m, int *const *orders, double *span, char *why, size_t size) {
    double f_end[WORLD][PIPE_M_MAX], b_end[WORLD][PIPE_M_MAX], clock[WORLD] = {0};
    int at[WORLD] = {0}, left = 2 * m * p;
    for (int s = 0; s < p; s++)
        for (int k = 0; k < m; k++)
            f_end[s][k] = b_end[s][k] = -1; /* not run yet */
    while (left > 0) {
        int moved = 0;
        for (int s = 0; s < p; s++) {
            if (at[s] == 2 * m) continue;
            int op = orders[s][at[s]];
            if (op > 0) {
                int k = op - 1;
                if (s > 0 && f_end[s - 1][k] < 0) continue; /* its input is not there yet */
                f_end[s][k] = clock[s] = (s > 0 ? fmax(clock[s], f_end[s - 1][k]) : clock[s]) + 1;
            } else {
                int k = -op - 1;
                if (s < p - 1 && b_end[s + 1][k] < 0) continue; /* its gradient is not there yet */
                b_end[s][k] = clock[s] = (s < p - 1 ? fmax(clock[s], b_end[s + 1][k]) : clock[s]) + 2;
            }
            at[s]++;
            left--;
            moved = 1;
        }
        if (!moved) {
            int s = 0;
            while (at[s] == 2 * m)
                s++;
            int op = orders[s][at[s]];
            snprintf(why, size, "with %d micro-batches stage %d waits forever at op %d (%s of micro-batch %d)", m, s,
                     at[s], op > 0 ? "forward" : "backward", op > 0 ? op - 1 : -op - 1);
            return 0;
        }
    }
    *span = 0;
    for (int s = 0; s < p; s++)
        *span = fmax(*span, clock[s]);
    return 1;
}

static void sleep_ms(double ms) {
    struct timespec t = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&t, &t) != 0)
        continue; /* woken early by a signal: sleep the rest */
}

/* Runs stage `rank`'s order on the ranks: a forward receives its input from
 * the previous stage and sends its output on, a backward receives its
 * gradient from the next stage and sends one back; each "computes" by
 * sleeping. Returns the slowest rank's time for the whole order. */
static double run_order(int rank, int p, int m, const int *ops, double fwd_ms, double bwd_ms) {
    int device = get_device(rank);
    tensor *msg[2 * PIPE_M_MAX];
    dist_request *sent[2 * PIPE_M_MAX];
    int n_sent = 0;
    dist_timer t = {0};
    dist_timer_start(&t);
    for (int i = 0; i < 2 * m; i++) {
        int forward = ops[i] > 0, k = forward ? ops[i] - 1 : -ops[i] - 1;
        int from = forward ? rank - 1 : rank + 1, to = forward ? rank + 1 : rank - 1;
        tensor *in = zeros(4, 0, device);
        if (from >= 0 && from < p) dist_recv(in, from);
        sleep_ms(forward ? fwd_ms : bwd_ms);
        fill_(in, (float)k);
        if (to >= 0 && to < p) {
            msg[n_sent] = in;
            sent[n_sent++] = dist_isend(in, to);
        } else {
            tensor_free(in);
        }
    }
    for (int i = 0; i < n_sent; i++) {
        dist_wait(sent[i]);
        tensor_free(msg[i]);
    }
    return dist_timer_stop(&t);
}

static double bubble_formula(int p, int m) { return (double)(p - 1) / (m + p - 1); }

static void exercise_2(int rank, int world, void *args) {
    int pipe_m = ((const config *)args)->pipe_m;
    int p = world, s = rank;
    int store[2][WORLD][2 * PIPE_M_MAX + OPS_SLACK];
    int ms[2] = {pipe_m, 2};
    int valid_mine = 1, valid_all = 1, together = 1;
    char why_mine[384] = "", why_all[384] = "",
         why_together[256] = ""; /* room for a why of 256 and the words around it */
    /* The in-flight rule, per number of micro-batches: what the order
     * holds at most, what is allowed. */
    int held[2] = {0, 0}, allowed[2] = {0, 0}, counted[2] = {0, 0};
    double span = 0;
    for (int j = 0; j < 2; j++) {
        int m = ms[j];
        int *orders[WORLD];
        for (int q = 0; q < p; q++) {
            orders[q] = store[j][q];
            int past = order_of(q, p, m, orders[q]);
            char why[256];
            if (!order_valid(orders[q], m, past, why, sizeof why)) {
                if (q == s && valid_mine) snprintf(why_mine, sizeof why_mine, "with %d micro-batches %s", m, why);
                if (q == s) valid_mine = 0;
                if (valid_all) snprintf(why_all, sizeof why_all, "stage %d, %d micro-batches: %s", q, m, why);
                valid_all = 0;
            }
        }
        if (!valid_all) continue;
        double units;
        char why[128];
        if (!orders_run_together(p, m, orders, &units, why, sizeof why)) {
            if (together) snprintf(why_together, sizeof why_together, "%s", why);
            together = 0;
        } else if (j == 0) {
            span = units;
        }
        held[j] = most_in_flight(orders[s], m);
        allowed[j] = p - s < m ? p - s : m;
        counted[j] = 1;
    }
    check_named(valid_mine, "exercise 2: every forward and backward once, in order",
                "stage %d's order runs each micro-batch's forward, then its backward, once each and in "
                "micro-batch order%s%s",
                s, valid_mine ? "" : ": ", why_mine);
    if (!valid_all)
        check_named(0, "exercise 2: the stages' orders run together",
                    "forward k after the previous stage's, backward k after the next stage's: not tried, an order "
                    "breaks the first rule (%s)",
                    why_all);
    else
        check_named(together, "exercise 2: the stages' orders run together",
                    "forward k after the previous stage's, backward k after the next stage's%s%s", together ? "" : ": ",
                    why_together);
    /* At most min(p - s, m) in flight: stage s keeps the activations of
     * the micro-batches whose backward is still to come. Said for the
     * number of micro-batches where it fails, with that number's bound. */
    if (!valid_all || !together) {
        check_named(0, "exercise 2: at most min(p - s, m) micro-batches in flight",
                    "on stage %d: not counted, the orders break a rule above", s);
    } else {
        int bad = held[0] > allowed[0] ? 0 : held[1] > allowed[1] ? 1 : -1;
        if (bad >= 0)
            check_named(0, "exercise 2: at most min(p - s, m) micro-batches in flight",
                        "stage %d keeps the activations of each micro-batch whose backward is still to come: with "
                        "%d micro-batches at most min(%d - %d, %d) = %d; its order holds %d at once",
                        s, ms[bad], p, s, ms[bad], allowed[bad], held[bad]);
        else
            check_named(counted[0] && counted[1], "exercise 2: at most min(p - s, m) micro-batches in flight",
                        "stage %d keeps the activations of each micro-batch whose backward is still to come: its "
                        "order holds %d at once with %d micro-batches (at most %d) and %d with %d (at most %d)",
                        s, held[0], ms[0], allowed[0], held[1], ms[1], allowed[1]);
    }

    double formula = bubble_formula(p, pipe_m);
    if (!valid_all || !together) {
        check_named(0, "exercise 2: the measured bubble",
                    "within [-%.2f, +%.2f] of (p-1)/(m+p-1) = %.3f: not run, the orders break a rule above",
                    BUBBLE_BELOW, BUBBLE_ABOVE, formula);
        return;
    }
    /* Every rank decided the same (the orders are the same everywhere): run. */
    run_order(rank, p, pipe_m, store[0][s], 0, 0); /* warm-up: the sends' first checks */
    double seconds = run_order(rank, p, pipe_m, store[0][s], FWD_MS, BWD_MS);
    double bubble = 1 - pipe_m * (FWD_MS + BWD_MS) * 1e-3 / seconds;
    double simulated = 1 - pipe_m * 3.0 / span;
    int in_bounds = bubble >= formula - BUBBLE_BELOW && bubble <= formula + BUBBLE_ABOVE;
    check_named(in_bounds, "exercise 2: the measured bubble",
                "within [-%.2f, +%.2f] of (p-1)/(m+p-1) = %.3f: %.3f (%.0f ms for %d forwards of %.0f ms and "
                "backwards of %.0f ms per stage; %.3f with no cost to pass a message)",
                BUBBLE_BELOW, BUBBLE_ABOVE, formula, bubble, seconds * 1e3, pipe_m, FWD_MS, BWD_MS, simulated);
    /* The course's leaderboard (--grade's results.json): rank 0's measured
     * bubble, smaller first, for a schedule the check accepts. */
    if (in_bounds) grade_leaderboard("exercise 2: 1F1B bubble, measured", bubble, "asc");
}

/* ---- exercise 3 ---- */

/* What zero3_layer saw when called: the layer, the all-gathers started so
 * far and those whose dist_wait has returned (dist_traffic's calls and
 * waited), and which buffer it was given. Events, not bytes: two gathers
 * in flight share the bytes that move during either's wait. */
typedef struct layer_seen {
    int layer;
    int64_t started, waited;
    int buffer; /* 0 or 1: full[0] or full[1]; -1 another tensor */
} layer_seen;
static layer_seen seen[16];
static int n_seen;
static dist_traffic z3_start;
static tensor *const *z3_full;

tensor *zero3_layer(int i, const tensor *w, const tensor *in) {
    dist_traffic d = dist_traffic_since(&z3_start);
    if (n_seen < (int)(sizeof seen / sizeof seen[0]))
        seen[n_seen] = (layer_seen){i, d.calls[DIST_CALL_ALL_GATHER], d.waited[DIST_CALL_ALL_GATHER],
                                    w == z3_full[0]   ? 0
                                    : w == z3_full[1] ? 1
                                                      : -1};
    n_seen++;
    tensor *pre = matmul(in, w);
    tensor *out = gelu(pre);
    tensor_free(pre);
    return out;
}

/* The prefetch, from the order of events: when layer i computes, layer
 * i + 1's gather has started and is still in flight, and no later one has
 * started (two buffers: full[i % 2] is read, the other one is being
 * written); layer i's own gather has been waited for (the runtime stops a
 * read of a buffer still being gathered into, so this holds or the run
 * has stopped). Any order of the calls that keeps this passes: wait for i
 * then start i + 1, or start i + 1 then wait for i. Writes the first rule
 * broken into why; returns 1 when every layer kept them all. */
static int prefetch_kept(char *why, size_t size) {
    if (n_seen != Z3_LAYERS) {
        snprintf(why, size, "zero3_layer was called %d times for %d layers", n_seen, Z3_LAYERS);
        return 0;
    }
    for (int j = 0; j < n_seen; j++) {
        const layer_seen *e = &seen[j];
        int i = e->layer, last = i + 1 == Z3_LAYERS;
        int64_t want_started = last ? Z3_LAYERS : i + 2, want_waited = last ? Z3_LAYERS : i + 1;
        if (i != j) snprintf(why, size, "call %d of zero3_layer computed layer %d: the layers go in order", j, i);
        else if (e->buffer < 0)
            snprintf(why, size,
                     "layer %d computed with a weight that is neither full[0] nor full[1]: the exercise "
                     "gathers into those two buffers",
                     i);
        else if (e->started < want_started)
            snprintf(why, size,
                     "when layer %d computed, layer %d's gather had not started (%lld of %d started): "
                     "start it before layer %d computes",
                     i, i + 1, (long long)e->started, Z3_LAYERS, i);
        else if (e->started > want_started)
            snprintf(why, size,
                     "when layer %d computed, %lld gathers had started, layer %d's and later ones: only "
                     "the next layer's may be on its way (two buffers, full[0] and full[1])",
                     i, (long long)e->started, i + 2);
        else if (e->waited > want_waited)
            snprintf(why, size,
                     "when layer %d computed, layer %d's gather had been waited for already: wait for it "
                     "after layer %d has computed, so that it moves while layer %d computes",
                     i, i + 1, i, i);
        else if (e->waited < want_waited)
            snprintf(why, size, "when layer %d computed, its own gather had not been waited for", i);
        else continue;
        return 0;
    }
    return 1;
}

/* What zero3_forward may free: the activations it makes, never x, the
 * weights' pieces or the buffers (the text: "free the ones in between,
 * never x"). Returns how many of those it freed, naming the first. */
static int freed_not_its_own(tensor *const *pieces, const tensor *x, tensor *const *full, char *what, size_t size) {
    int n = 0;
    what[0] = 0;
    if (tensor_was_freed(x)) {
        snprintf(what, size, "x, its input");
        n++;
    }
    for (int k = 0; k < 2; k++)
        if (tensor_was_freed(full[k]) && n++ == 0) snprintf(what, size, "full[%d], a buffer it was lent", k);
    for (int i = 0; i < Z3_LAYERS; i++)
        if (tensor_was_freed(pieces[i]) && n++ == 0) snprintf(what, size, "pieces[%d], a weight's band", i);
    return n;
}

static void exercise_3(int rank, int world, void *args) {
    int z3_batch = ((const config *)args)->z3_batch;
    int device = get_device(rank);
    int64_t rows = Z3_D / world;
    tensor *pieces[Z3_LAYERS], *whole[Z3_LAYERS];
    for (int i = 0; i < Z3_LAYERS; i++) {
        manual_seed(300 + (uint64_t)i); /* layer i's weight, the same on every rank */
        whole[i] = scaled_randn(Z3_D, Z3_D, 1.0f / sqrtf(Z3_D), device);
        tensor *band = row_slice(whole[i], rank * rows, (rank + 1) * rows);
        pieces[i] = to_device(band, device);
        tensor_free(band);
    }
    manual_seed(400);
    tensor *x = randn(z3_batch, Z3_D, device);
    tensor *expected = to_device(x, device);
    for (int i = 0; i < Z3_LAYERS; i++) { /* one device */
        tensor *pre = matmul(expected, whole[i]);
        tensor_free(expected);
        expected = gelu(pre);
        tensor_free(pre);
    }
    tensor *full[2] = {zeros(Z3_D, Z3_D, device), zeros(Z3_D, Z3_D, device)};

    n_seen = 0;
    z3_full = full;
    z3_start = dist_traffic_now();
    tensor *y = zero3_forward(pieces, Z3_LAYERS, x, full);
    dist_traffic d = dist_traffic_since(&z3_start);

    if (y) check_close(y, expected, 0, Z3_ATOL, "exercise 3: the output after 4 layers");
    else check_named(0, "exercise 3: the output after 4 layers", "zero3_forward returned NULL");

    char calls[256];
    check_named(d.calls[DIST_CALL_ALL_GATHER] == Z3_LAYERS && collective_calls(&d) == Z3_LAYERS && p2p_calls(&d) == 0,
                "exercise 3: one dist_all_gather per layer, nothing else",
                "one dist_all_gather per layer (%d), no other call; zero3_forward made %s", Z3_LAYERS,
                dist_traffic_text(&d, calls, sizeof calls));

    char why[320] = "", log[320] = "";
    size_t at = 0;
    for (int j = 0; j < n_seen && j < (int)(sizeof seen / sizeof seen[0]); j++)
        if (at < sizeof log)
            at += (size_t)snprintf(log + at, sizeof log - at, "%slayer %d: %lld started, %lld waited, %s",
                                   j ? "; " : "", seen[j].layer, (long long)seen[j].started, (long long)seen[j].waited,
                                   seen[j].buffer == 0   ? "full[0]"
                                   : seen[j].buffer == 1 ? "full[1]"
                                                         : "another weight");
    int ok = prefetch_kept(why, sizeof why);
    check_named(ok, "exercise 3: layer i+1's gather in flight while layer i computes",
                "started before, waited after%s%s%s%s", ok ? "" : ": ", why, n_seen ? "; " : "", log);

    /* Ownership: what zero3_forward freed that was not its own would be a
     * double free below. Checked, and then left alone. */
    char freed[64];
    int bad = freed_not_its_own(pieces, x, full, freed, sizeof freed);
    check_named(y && bad == 0, "exercise 3: x, the pieces and the buffers left alive",
                "zero3_forward frees the activations it makes, never x, pieces[] or full[]%s%s%s",
                bad  ? "; it freed "
                : !y ? ": not counted, zero3_forward returned NULL"
                     : "",
                freed, bad > 1 ? " and more" : "");

    if (y && y != x && y != full[0] && y != full[1] && !tensor_was_freed(y)) tensor_free(y);
    tensor_free(expected);
    if (!tensor_was_freed(x)) tensor_free(x);
    for (int k = 0; k < 2; k++)
        if (!tensor_was_freed(full[k])) tensor_free(full[k]);
    for (int i = 0; i < Z3_LAYERS; i++) {
        if (!tensor_was_freed(pieces[i])) tensor_free(pieces[i]);
        tensor_free(whole[i]);
    }
}

/* How long each exercise's ranks may run. A solved exercise takes about a
 * second (exercise 2 sleeps 0.7 s to time its schedule), a few seconds
 * built with the sanitizers; past this the ranks are stopped and each is
 * named where it is and for how long, and the next exercise runs: a loop
 * that never ends costs 30 s, not an autograder's whole limit. A test's
 * copy may define a shorter one before it includes this file. */
#ifndef EXERCISE_SECONDS
#define EXERCISE_SECONDS 30
#endif

/* Each exercise runs in a spawn of its own (spawn_exercise): a crash, a
 * deadlock or a loop that never ends in one costs that exercise's checks,
 * and the next exercise still runs and is checked. */
static void homework_parallel(void) {
    note("# Homework: tensor, pipeline and sharded-data parallelism");
    note("Three exercises, each a function at the top of `lectures/homework_parallel.c`. Every check below "
         "compares your function with one device on 4 ranks, or checks how it communicated; a failed check "
         "says what was expected and what was seen. Each exercise runs on ranks of its own: one that crashes "
         "or hangs costs only its own checks.");
    /* The weights of the grade an autograder reads (--grade FILE,
     * docs/homework.md), shared by each exercise's checks (per rank: 4, 4
     * and 4). */
    grade_exercise("exercise 1:", 35, 4 * WORLD);
    grade_exercise("exercise 2:", 35, 4 * WORLD);
    grade_exercise("exercise 3:", 30, 4 * WORLD);
    /* db's check is the course's hidden test: the console and the trace
     * say whether it passed, at its line, never what it saw (results.json
     * keeps that for the grader). da's check, computed the same way,
     * shows its numbers. */
    grade_visibility("exercise 1: db", "hidden");
    /* The sizes, from the student's variant (--variant SEED, which the
     * autograder gives each submission): what the checks expect is
     * computed from them, so every variant checks the same things. Without
     * a seed, the defaults. */
    config c = {variant_int("rows of exercise 1's batch", 4, 16, 8), variant_int("micro-batches", 6, PIPE_M_MAX, 8),
                variant_int("rows of exercise 3's batch", 4, 16, 8)};
    note("## Exercise 1: Megatron's MLP, backward");
    spawn_exercise("exercise 1:", EXERCISE_SECONDS, exercise_1, WORLD, &c, sizeof c);
    note("## Exercise 2: a 1F1B schedule");
    spawn_exercise("exercise 2:", EXERCISE_SECONDS, exercise_2, WORLD, &c, sizeof c);
    note("## Exercise 3: ZeRO-3 with prefetch");
    spawn_exercise("exercise 3:", EXERCISE_SECONDS, exercise_3, WORLD, &c, sizeof c);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, homework_parallel); }
