/*
 * homework_scaling: the transformer's strategies by hand, checked.
 *
 * Three exercises on lecture_scaling: sequence parallelism's backward (the
 * collectives that mirror the forward's), ring attention's step with the
 * next block's K/V on its way while the current block computes, and a
 * mixture of experts' dispatch with a capacity that drops tokens. Each
 * function marked EXERCISE is yours to write; the code after them runs
 * your functions on 4 ranks and checks the numbers against one device, and
 * checks the method: which calls your ranks made, how many bytes went to
 * whom (dist_traffic_since()), and, for the ring, the order in which the
 * transfers and the compute were issued. The right numbers by another
 * method do not pass. Each exercise runs on ranks of its own, so one that
 * crashes or hangs costs only its own checks. At the start every check
 * fails; when all pass, the last line of the run says "checks: 40 passed,
 * 0 failed, 0 not reached".
 *
 *     make run LECTURE=homework_scaling
 *
 * docs/homework.md explains the exercises and how they are checked.
 * (The instructor's solution, tests/fixtures/homework_scaling_solution.c,
 * defines HOMEWORK_SOLUTION and its own versions of the three functions.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

/* Given (the course's code, below): exercise 1's tensor-parallel region
 * backward, local to this rank, and exercise 2's compute of one block. */
tensor *tp_region_backward(const tensor *x_full, const tensor *a, const tensor *b, const tensor *hpre,
                           const tensor *dy_full, tensor *da, tensor *db);
void attend_block(const tensor *kv);

#ifndef HOMEWORK_SOLUTION

/* EXERCISE 1: sequence parallelism's backward.
 *
 * An MLP block y = gelu(x A) B runs tensor-parallel (A cut by columns, B by
 * rows: this rank holds a and b), with the sequence-parallel regions on
 * either side of it: outside the block each rank holds only its shard of
 * the sequence, S rows of S x w. The forward (done for you) all-gathered
 * the shards of x into x_full (S w x d) before the block, computed this
 * rank's hpre = x_full a and its partial output gelu(hpre) b, and
 * reduce-scattered the partial outputs into this rank's rows of y.
 *
 * Write the backward. Given dy_shard (S x d: dL/dy for this rank's rows),
 * fill da and db (this rank's weight gradients) and dx_shard (S x d: dL/dx
 * for this rank's rows). tp_region_backward(x_full, a, b, hpre, dy_full,
 * da, db), given, needs the whole dy_full (S w x d), fills da and db, and
 * returns this rank's partial dL/dx_full (S w x d, a new tensor): the sum
 * over the ranks of these partials is dL/dx_full. Each collective of the
 * forward has its conjugate in the backward: where the forward
 * reduce-scattered, the backward all-gathers; where it all-gathered, the
 * backward reduce-scatters. Two collectives, nothing else. */
void sp_backward(const tensor *dy_shard, const tensor *x_full, const tensor *a, const tensor *b, const tensor *hpre,
                 tensor *da, tensor *db, tensor *dx_shard) {
    // your code here
}

/* EXERCISE 2: ring attention, the transfer hidden behind the compute.
 *
 * Each rank holds its block of the sequence's queries (kept by the course's
 * code) and kv, its block of keys and values (K's rows, then V's: 2 T x
 * dh). Attention of the queries over the whole sequence needs every rank's
 * block: pass the blocks round the ring, each rank sending to the next
 * rank ((r + 1) % w) and receiving from the previous one ((r + w - 1) % w),
 * w - 1 times, and call attend_block(block) (given) once on each of the w
 * blocks, this rank's own first. spare is a buffer of kv's shape.
 *
 * The point is the overlap: before a block computes, the next block must
 * already be on its way. For each step: dist_isend the block you hold to
 * the next rank and dist_irecv the next block from the previous one, then
 * attend_block the block you hold, then dist_wait both. (The last step
 * has no next block: just attend it.) The tensors of a transfer in flight
 * must not be written: two buffers, kv and spare, take turns. */
void ring_attention(tensor *kv, tensor *spare) {
    // your code here
}

/* EXERCISE 3: a mixture of experts' dispatch, with a capacity.
 *
 * There are w experts, expert e on rank e. Each of this rank's T tokens
 * (the rows of x, T x d) goes to 2 experts: experts[2t] and experts[2t+1]
 * (top-2 routing, given; the two differ). An expert takes at most
 * `capacity` tokens from each rank: of the tokens this rank routes to
 * expert e, in token order, the first `capacity` are kept and the rest are
 * dropped (not sent: the model passes them on through the residual).
 *
 * Dispatch: pack one buffer of capacity x d rows per expert (the kept
 * tokens' rows, in token order, then padding), and exchange with
 * dist_all_to_all: first the counts (w floats: how many rows of each
 * expert's buffer are real), then the payload (w buffers of capacity
 * rows). Fill recv (w capacity x d: piece q holds the rows rank q sent to
 * this rank's expert) and counts (w floats: counts[q] is how many rows of
 * piece q are real). What the padding rows hold is not read. x is not
 * const so that row_slice() can take views of it: read it only. */
void moe_dispatch(tensor *x, const int *experts, int capacity, tensor *recv, tensor *counts) {
    // your code here
}

#else
void sp_backward(const tensor *dy_shard, const tensor *x_full, const tensor *a, const tensor *b, const tensor *hpre,
                 tensor *da, tensor *db, tensor *dx_shard);
void ring_attention(tensor *kv, tensor *spare);
void moe_dispatch(tensor *x, const int *experts, int capacity, tensor *recv, tensor *counts);
#endif

/* ------------------------------------------------------------------ */
/* What checks the exercises (no need to change anything below)       */
/* ------------------------------------------------------------------ */

#define WORLD 4

/* Exercise 1: d = 32, h = 64 (16 columns a rank); each rank's shard of the
 * sequence is 8 rows (4 to 12 in a variant). */
enum { SP_D = 32, SP_H = 64 };
/* Every gradient is a float32 dot product of at most 64 terms (dx's over
 * h, which the ranks cut in 4 and the reduce-scatter adds up in another
 * order than one device does; da's and db's over the sequence's rows, at
 * most 48). Two orders of such a sum differ by at most 64 * 2^-24 =
 * 3.8e-6 of the sum of the terms' sizes, which stays below 5 with unit-size
 * x and dy and weights of size 1/sqrt(fan-in): 2e-5. 1e-4 leaves room; a
 * partial dx left unsummed, or a row of another rank's shard, is off by
 * the gradient's own size (0.1 to 1). */
#define SP_ATOL 1e-4

/* Exercise 2: blocks of 8 rows (4 to 12 in a variant), head width 16. */
enum { RING_DH = 16 };
/* attend_block folds each block into a running softmax in float64, and
 * one device's attention is computed in float64 from the same float32
 * inputs: the two differ by the order of a few dozen float64 sums, below
 * 1e-12, and each is rounded once to float32 (outputs below 3 in size: an
 * ulp is at most 2.4e-7). 1e-5 leaves room; a block left out or attended
 * twice moves the output by about a tenth. */
#define RING_ATOL 1e-5

/* Exercise 3: 16 tokens a rank (12 to 24 in a variant), width 8, top-2 of
 * WORLD experts, a capacity of 1.25 times the even share. */
enum { MOE_D = 8, MOE_K = 2 };
#define MOE_CAPACITY_FACTOR 1.25

typedef struct config {
    int sp_rows;   /* exercise 1: rows of each rank's shard of the sequence */
    int ring_rows; /* exercise 2: rows of each rank's block */
    int tokens;    /* exercise 3: tokens on each rank */
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

static tensor *scaled_randn(int64_t rows, int64_t cols, float s, int device) {
    tensor *t = randn(rows, cols, device);
    scale_(t, s);
    return t;
}

/* ---- exercise 1 ---- */

tensor *tp_region_backward(const tensor *x_full, const tensor *a, const tensor *b, const tensor *hpre,
                           const tensor *dy_full, tensor *da, tensor *db) {
    int device = x_full->device;
    int64_t n = x_full->shape[0], cols = a->shape[1];
    tensor *z = gelu(hpre), *dz = zeros(n, cols, device);
    matmul_into(db, z, dy_full, 1, 0, 1.0f, 0.0f); /* db = z^T dy */
    matmul_into(dz, dy_full, b, 0, 1, 1.0f, 0.0f); /* dz = dy b^T */
    tensor *dh = gelu_backward(hpre, dz);
    matmul_into(da, x_full, dh, 1, 0, 1.0f, 0.0f); /* da = x^T dh */
    tensor *dx = zeros(n, x_full->shape[1], device);
    matmul_into(dx, dh, a, 0, 1, 1.0f, 0.0f); /* this rank's share of dx = dh A^T */
    tensor_free(z);
    tensor_free(dz);
    tensor_free(dh);
    return dx;
}

static void exercise_1(int rank, int world, void *args) {
    int s = ((const config *)args)->sp_rows;
    int device = get_device(rank);
    int64_t n = (int64_t)s * world, cols = SP_H / world, first = rank * cols;
    manual_seed(100); /* the same x, A, B and dy on every rank */
    tensor *x = randn(n, SP_D, device);
    tensor *A = scaled_randn(SP_D, SP_H, 1.0f / sqrtf(SP_D), device);
    tensor *B = scaled_randn(SP_H, SP_D, 1.0f / sqrtf(SP_H), device);
    tensor *dy = randn(n, SP_D, device);

    /* One device: h = x A, z = gelu(h), y = z B, and back. */
    tensor *h = matmul(x, A), *z = gelu(h);
    tensor *dB = zeros(SP_H, SP_D, device), *dz = zeros(n, SP_H, device);
    matmul_into(dB, z, dy, 1, 0, 1.0f, 0.0f);
    matmul_into(dz, dy, B, 0, 1, 1.0f, 0.0f);
    tensor *dh = gelu_backward(h, dz);
    tensor *dA = zeros(SP_D, SP_H, device), *dx_ref = zeros(n, SP_D, device);
    matmul_into(dA, x, dh, 1, 0, 1.0f, 0.0f);
    matmul_into(dx_ref, dh, A, 0, 1, 1.0f, 0.0f);

    /* This rank's pieces and what its forward kept: x_full (the forward's
     * all-gather) and hpre. */
    tensor *a = col_slice(A, first, first + cols);
    tensor *band = row_slice(B, first, first + cols), *b = to_device(band, device);
    tensor *x_full = to_device(x, device);
    tensor *hpre = matmul(x_full, a);
    tensor *dy_rows = row_slice(dy, rank * s, (rank + 1) * s), *dy_shard = to_device(dy_rows, device);
    tensor *da = zeros(SP_D, cols, device), *db = zeros(cols, SP_D, device), *dx_shard = zeros(s, SP_D, device);

    dist_traffic before = dist_traffic_now();
    sp_backward(dy_shard, x_full, a, b, hpre, da, db, dx_shard);
    dist_traffic d = dist_traffic_since(&before);

    tensor *dA_mine = col_slice(dA, first, first + cols);
    tensor *dB_band = row_slice(dB, first, first + cols), *dB_mine = to_device(dB_band, device);
    tensor *dx_rows = row_slice(dx_ref, rank * s, (rank + 1) * s), *dx_mine = to_device(dx_rows, device);
    check_close(da, dA_mine, 0, SP_ATOL, "exercise 1: da, this rank's columns of dL/dA");
    check_close(db, dB_mine, 0, SP_ATOL, "exercise 1: db, this rank's rows of dL/dB");
    check_close(dx_shard, dx_mine, 0, SP_ATOL, "exercise 1: dx, this rank's rows of dL/dx");

    /* The method: one all-gather of dy and one reduce-scatter of dx, each
     * of the whole sequence (S w x d floats: the nominal bytes of both are
     * (w-1)/w of it), and no other call. */
    char calls[256];
    int64_t whole = n * SP_D, want = whole * (world - 1) / world * (int64_t)sizeof(float);
    int64_t gathered = d.nominal_sent[DIST_CALL_ALL_GATHER] * world / (world - 1) / (int64_t)sizeof(float);
    int64_t scattered = d.nominal_sent[DIST_CALL_REDUCE_SCATTER] * world / (world - 1) / (int64_t)sizeof(float);
    int two = d.calls[DIST_CALL_ALL_GATHER] == 1 && d.calls[DIST_CALL_REDUCE_SCATTER] == 1 &&
              collective_calls(&d) == 2 && p2p_calls(&d) == 0;
    int sizes = d.nominal_sent[DIST_CALL_ALL_GATHER] == want && d.nominal_sent[DIST_CALL_REDUCE_SCATTER] == want;
    char size[128] = "";
    if (two && !sizes)
        snprintf(size, sizeof size, ", gathering %lld floats and reduce-scattering %lld", (long long)gathered,
                 (long long)scattered);
    /* The bytes a bandwidth-optimal algorithm sends for the calls made,
     * against the two collectives': an all-reduce of dx is twice a
     * reduce-scatter's. */
    int64_t nominal = dist_traffic_nominal(&d);
    check_named(two && sizes, "exercise 1: the conjugate collectives, an all-gather of dy and a reduce-scatter of dx",
                "the backward all-gathers dy (%lld floats in all) where the forward reduce-scattered y, and "
                "reduce-scatters dx (%lld floats) where the forward all-gathered x: 1 dist_all_gather and 1 "
                "dist_reduce_scatter, no other call, %lld bytes sent (nominal); sp_backward made %s%s, %lld bytes "
                "(%.2fx)",
                (long long)whole, (long long)whole, (long long)(2 * want), dist_traffic_text(&d, calls, sizeof calls),
                size, (long long)nominal, (double)nominal / (double)(2 * want));

    tensor *one_device[] = {x, A, B, dy, h, z, dB, dz, dh, dA, dx_ref};
    tensor *this_rank[] = {a,  band,     b,       x_full,  hpre,    dy_rows, dy_shard, da,
                           db, dx_shard, dA_mine, dB_band, dB_mine, dx_rows, dx_mine};
    for (size_t i = 0; i < sizeof one_device / sizeof one_device[0]; i++)
        tensor_free(one_device[i]);
    for (size_t i = 0; i < sizeof this_rank / sizeof this_rank[0]; i++)
        tensor_free(this_rank[i]);
}

/* ---- exercise 2 ---- */

/* This rank's queries and the running softmax attend_block folds blocks
 * into, row by row: the largest score so far, the sum of exp(score - max)
 * and the weighted sum of the value rows (float64). */
static int ring_t;
static const float *ring_q;
static double *ring_max, *ring_sum, *ring_acc;

/* What attend_block saw when called: the bytes sent to the next rank and
 * asked for from the previous one (counted when a send or a receive is
 * issued), and the sends and receives issued and not yet waited for. */
typedef struct block_seen {
    int64_t sent, asked;
    int64_t sends_open, recvs_open;
} block_seen;
static block_seen blocks_seen[64];
static int n_blocks;
static dist_traffic ring_start;

void attend_block(const tensor *kv) {
    int r = dist_rank(), w = dist_world_size(), t = ring_t;
    dist_traffic d = dist_traffic_since(&ring_start);
    if (n_blocks < (int)(sizeof blocks_seen / sizeof blocks_seen[0]))
        blocks_seen[n_blocks] = (block_seen){d.sent_to[(r + 1) % w], d.received_from[(r + w - 1) % w],
                                             d.calls[DIST_CALL_SEND] - d.waited[DIST_CALL_SEND],
                                             d.calls[DIST_CALL_RECV] - d.waited[DIST_CALL_RECV]};
    n_blocks++;
    if (kv->numel != 2 * (int64_t)t * RING_DH)
        lecture_fail("attend_block: the block has %lld elements; K and V of %d rows of %d are %d", (long long)kv->numel,
                     t, RING_DH, 2 * t * RING_DH);
    float *k = malloc(sizeof(float) * (size_t)kv->numel);
    if (!k) lecture_fail("attend_block: out of memory");
    tensor_to_host(kv, k); /* K's rows, then V's */
    const float *v = k + (size_t)t * RING_DH;
    double scale = 1.0 / sqrt((double)RING_DH);
    for (int i = 0; i < t; i++) {
        for (int j = 0; j < t; j++) {
            double score = 0;
            for (int c = 0; c < RING_DH; c++)
                score += (double)ring_q[i * RING_DH + c] * k[j * RING_DH + c];
            score *= scale;
            /* A larger maximum rescales what was summed so far. */
            if (score > ring_max[i]) {
                double shrink = exp(ring_max[i] - score);
                ring_sum[i] *= shrink;
                for (int c = 0; c < RING_DH; c++)
                    ring_acc[i * RING_DH + c] *= shrink;
                ring_max[i] = score;
            }
            double e = exp(score - ring_max[i]);
            ring_sum[i] += e;
            for (int c = 0; c < RING_DH; c++)
                ring_acc[i * RING_DH + c] += e * v[j * RING_DH + c];
        }
    }
    free(k);
}

/* Rank q's block of queries (t x dh) or keys and values (2t x dh), the same
 * on every rank, as host floats. */
static void ring_inputs(int q, int t, float *qs, float *kv) {
    manual_seed(200 + (uint64_t)q);
    tensor *tq = randn(t, RING_DH, -1), *tkv = randn(2 * t, RING_DH, -1);
    tensor_to_host(tq, qs);
    tensor_to_host(tkv, kv);
    tensor_free(tq);
    tensor_free(tkv);
}

/* The order of events, block by block: before block j (of w) computes,
 * block j + 1 has been sent and asked for, and no later one (two buffers),
 * and both transfers are still open (waited for after the compute); the
 * last block computes with nothing more asked for. Every send and receive
 * is a non-blocking one, waited for (`d`, the whole function's traffic).
 * Writes the first rule broken into why; returns 1 when all were kept. */
static int overlap_kept(int w, int64_t block_bytes, const dist_traffic *d, char *why, size_t size) {
    if (n_blocks != w) {
        snprintf(why, size, "attend_block was called %d times for %d blocks", n_blocks, w);
        return 0;
    }
    for (int j = 0; j < w; j++) {
        const block_seen *e = &blocks_seen[j];
        int last = j == w - 1;
        int64_t want = (last ? j : j + 1) * block_bytes;
        if (!last && (e->sent < want || e->asked < want))
            snprintf(why, size,
                     "when block %d computed, block %d had not been %s: dist_isend it to the next rank and "
                     "dist_irecv the next from the previous one before attend_block",
                     j, j + 1,
                     e->sent < want && e->asked < want ? "sent and asked for"
                     : e->sent < want                  ? "sent"
                                                       : "asked for");
        else if (e->sent > want || e->asked > want)
            snprintf(why, size,
                     "when block %d computed, %lld bytes had been %s, more than the next block's: only the "
                     "next block may be on its way (two buffers, kv and spare)",
                     j, (long long)(e->sent > want ? e->sent : e->asked), e->sent > want ? "sent" : "asked for");
        else if (!last && (e->sends_open < 1 || e->recvs_open < 1))
            snprintf(why, size,
                     "when block %d computed, block %d's %s had been waited for already: wait after "
                     "attend_block, so that the block moves while this one computes",
                     j, j + 1, e->recvs_open < 1 ? "receive" : "send");
        else continue;
        return 0;
    }
    if (d->calls[DIST_CALL_SENDRECV] || d->calls[DIST_CALL_SEND] != d->waited[DIST_CALL_SEND] ||
        d->calls[DIST_CALL_RECV] != d->waited[DIST_CALL_RECV]) {
        int64_t blocking = d->calls[DIST_CALL_SENDRECV] + d->calls[DIST_CALL_SEND] - d->waited[DIST_CALL_SEND] +
                           d->calls[DIST_CALL_RECV] - d->waited[DIST_CALL_RECV];
        snprintf(why, size,
                 "%lld of its sends and receives were blocking calls: a blocking transfer moves while "
                 "nothing computes; dist_isend and dist_irecv, waited for after the compute",
                 (long long)blocking);
        return 0;
    }
    return 1;
}

static void exercise_2(int rank, int world, void *args) {
    int t = ((const config *)args)->ring_rows;
    int device = get_device(rank);
    size_t qn = (size_t)t * RING_DH, kvn = 2 * qn;
    float *qs = malloc(sizeof(float) * qn * world), *kvs = malloc(sizeof(float) * kvn * world);
    double *ref = calloc(qn, sizeof(double));
    ring_max = malloc(sizeof(double) * t);
    ring_sum = calloc((size_t)t, sizeof(double));
    ring_acc = calloc(qn, sizeof(double));
    if (!qs || !kvs || !ref || !ring_max || !ring_sum || !ring_acc) lecture_fail("exercise 2: out of memory");
    for (int q = 0; q < world; q++)
        ring_inputs(q, t, qs + q * qn, kvs + q * kvn);

    /* One device: this rank's queries over every rank's keys, a softmax
     * over the whole sequence, times the values (float64). */
    const float *mine = qs + rank * qn;
    double scale = 1.0 / sqrt((double)RING_DH);
    int n = t * world;
    double *scores = malloc(sizeof(double) * n);
    if (!scores) lecture_fail("exercise 2: out of memory");
    for (int i = 0; i < t; i++) {
        double top = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            const float *kj = kvs + (j / t) * kvn + (size_t)(j % t) * RING_DH;
            double s = 0;
            for (int c = 0; c < RING_DH; c++)
                s += (double)mine[i * RING_DH + c] * kj[c];
            scores[j] = s * scale;
            if (scores[j] > top) top = scores[j];
        }
        for (int j = 0; j < n; j++) {
            scores[j] = exp(scores[j] - top);
            sum += scores[j];
        }
        for (int j = 0; j < n; j++) {
            const float *vj = kvs + (j / t) * kvn + qn + (size_t)(j % t) * RING_DH;
            for (int c = 0; c < RING_DH; c++)
                ref[i * RING_DH + c] += scores[j] / sum * vj[c];
        }
    }

    ring_t = t;
    ring_q = mine;
    for (int i = 0; i < t; i++)
        ring_max[i] = -INFINITY;
    n_blocks = 0;
    tensor *kv = tensor_from(kvs + rank * kvn, 2 * t, RING_DH, device), *spare = zeros(2 * t, RING_DH, device);
    ring_start = dist_traffic_now();
    ring_attention(kv, spare);
    dist_traffic d = dist_traffic_since(&ring_start);

    float *out = malloc(sizeof(float) * qn), *want = malloc(sizeof(float) * qn);
    if (!out || !want) lecture_fail("exercise 2: out of memory");
    for (size_t i = 0; i < qn; i++) {
        out[i] = (float)(ring_acc[i] / ring_sum[i / RING_DH]);
        want[i] = (float)ref[i];
    }
    tensor *actual = tensor_from(out, t, RING_DH, device), *expected = tensor_from(want, t, RING_DH, device);
    check_close(actual, expected, 0, RING_ATOL, "exercise 2: attention over the whole sequence");

    /* The traffic: w - 1 blocks to the next rank and from the previous
     * one, nothing with any other rank, no collective. */
    int64_t block_bytes = (int64_t)kvn * (int64_t)sizeof(float), ring_bytes = (world - 1) * block_bytes;
    int next = (rank + 1) % world, prev = (rank + world - 1) % world, others = 0;
    for (int q = 0; q < world; q++)
        if (q != next && q != prev && (d.sent_to[q] || d.received_from[q])) others = 1;
    char calls[256];
    int ring_ok = collective_calls(&d) == 0 && !others && d.sent_to[next] == ring_bytes &&
                  d.received_from[prev] == ring_bytes && (world == 2 || (!d.sent_to[prev] && !d.received_from[next]));
    check_named(ring_ok, "exercise 2: K/V round the ring, w - 1 blocks each way",
                "%d blocks of %lld bytes to rank %d (the next) and from rank %d (the previous), nothing else: "
                "%lld bytes to rank %d, %lld from rank %d%s%s; ring_attention made %s",
                world - 1, (long long)block_bytes, next, prev, (long long)d.sent_to[next], next,
                (long long)d.received_from[prev], prev, others ? ", and bytes with another rank" : "",
                world > 2 && (d.sent_to[prev] || d.received_from[next]) ? ", and bytes the other way round" : "",
                dist_traffic_text(&d, calls, sizeof calls));

    char why[320] = "", log[640] = "";
    size_t at = 0;
    for (int j = 0; j < n_blocks && j < (int)(sizeof blocks_seen / sizeof blocks_seen[0]); j++)
        if (at < sizeof log)
            at += (size_t)snprintf(log + at, sizeof log - at, "%sblock %d: %lld sent, %lld asked for, %lld/%lld open",
                                   j ? "; " : "", j, (long long)blocks_seen[j].sent, (long long)blocks_seen[j].asked,
                                   (long long)blocks_seen[j].sends_open, (long long)blocks_seen[j].recvs_open);
    int ok = overlap_kept(world, block_bytes, &d, why, sizeof why);
    check_named(ok, "exercise 2: the next block on its way while this one computes",
                "sent and asked for before attend_block, waited for after%s%s%s%s", ok ? "" : ": ", why,
                n_blocks ? "; " : "", log);

    tensor_free(actual);
    tensor_free(expected);
    tensor_free(kv);
    tensor_free(spare);
    free(out);
    free(want);
    free(scores);
    free(qs);
    free(kvs);
    free(ref);
    free(ring_max);
    free(ring_sum);
    free(ring_acc);
}

/* ---- exercise 3 ---- */

/* Rank q's tokens (t x d) and their two experts, the same on every rank:
 * gate scores with a bias that favours the low experts, so that some
 * experts get more than their capacity and drop tokens, as real gates do
 * before a balancing loss has trained. */
static void moe_inputs(int q, int t, int w, float *x, int *experts) {
    manual_seed(500 + (uint64_t)q);
    tensor *tx = randn(t, MOE_D, -1), *gate = randn(t, w, -1);
    float *g = malloc(sizeof(float) * (size_t)t * w);
    if (!g) lecture_fail("exercise 3: out of memory");
    tensor_to_host(tx, x);
    tensor_to_host(gate, g);
    for (int i = 0; i < t; i++) {
        int best = -1, second = -1;
        for (int e = 0; e < w; e++) {
            float s = g[i * w + e] + 0.6f * (float)(w - 1 - e) / (float)(w - 1);
            g[i * w + e] = s;
            if (best < 0 || s > g[i * w + best]) {
                second = best;
                best = e;
            } else if (second < 0 || s > g[i * w + second]) {
                second = e;
            }
        }
        experts[2 * i] = best;
        experts[2 * i + 1] = second;
    }
    free(g);
    tensor_free(tx);
    tensor_free(gate);
}

static int moe_capacity(int t, int w) { return (int)ceil(MOE_CAPACITY_FACTOR * t * MOE_K / w); }

static void exercise_3(int rank, int world, void *args) {
    int t = ((const config *)args)->tokens;
    int device = get_device(rank);
    int cap = moe_capacity(t, world);
    size_t xn = (size_t)t * MOE_D, piece = (size_t)cap * MOE_D;
    float *xs = malloc(sizeof(float) * xn * world);
    int *routes = malloc(sizeof(int) * (size_t)t * MOE_K * world);
    float *want = calloc(piece * world, sizeof(float)), *want_counts = calloc((size_t)world, sizeof(float));
    if (!xs || !routes || !want || !want_counts) lecture_fail("exercise 3: out of memory");
    for (int q = 0; q < world; q++)
        moe_inputs(q, t, world, xs + q * xn, routes + (size_t)q * t * MOE_K);

    /* One device: what each rank keeps for this rank's expert, in token
     * order, up to the capacity; and the drops over the whole model. */
    int routed = 0, kept = 0;
    for (int q = 0; q < world; q++) {
        int to[LECTERN_MAX_WORLD] = {0};
        for (int i = 0; i < t; i++)
            for (int k = 0; k < MOE_K; k++) {
                int e = routes[((size_t)q * t + i) * MOE_K + k];
                routed++;
                if (to[e] >= cap) continue;
                if (e == rank)
                    memcpy(want + q * piece + (size_t)to[e] * MOE_D, xs + q * xn + (size_t)i * MOE_D,
                           sizeof(float) * MOE_D);
                to[e]++;
                kept++;
            }
        want_counts[q] = (float)to[rank];
    }

    tensor *x = tensor_from(xs + rank * xn, t, MOE_D, device);
    tensor *recv = zeros((int64_t)cap * world, MOE_D, device), *counts = zeros(world, 0, device);
    dist_traffic before = dist_traffic_now();
    moe_dispatch(x, routes + (size_t)rank * t * MOE_K, cap, recv, counts);
    dist_traffic d = dist_traffic_since(&before);

    tensor *expected_counts = tensor_from(want_counts, world, 0, device);
    /* Counts are small whole numbers, exact in float32: atol 0. */
    check_close(counts, expected_counts, 0, 0, "exercise 3: counts, the real rows from each rank");
    /* The real rows, piece by piece, are copies of the senders' rows: exact
     * (atol 0). The padding is left out of both sides. */
    float *got = malloc(sizeof(float) * piece * world);
    if (!got) lecture_fail("exercise 3: out of memory");
    tensor_to_host(recv, got);
    for (int q = 0; q < world; q++)
        for (size_t i = (size_t)want_counts[q] * MOE_D; i < piece; i++)
            got[q * piece + i] = want[q * piece + i] = 0;
    tensor *actual = tensor_from(got, (int64_t)cap * world, MOE_D, device);
    tensor *expected = tensor_from(want, (int64_t)cap * world, MOE_D, device);
    check_close(actual, expected, 0, 0, "exercise 3: the kept tokens' rows, from each rank in token order");
    if (rank == 0)
        note("The gate sent %d token-expert pairs of %d tokens to %d experts of capacity %d per rank: %d kept, "
             "%d dropped (%.1f%%).",
             routed, t * world, world, cap, kept, routed - kept, 100.0 * (routed - kept) / routed);

    /* The method: two all-to-alls, the counts (w floats) and the payload
     * (w pieces of capacity x d): their nominal bytes are (w-1)/w of
     * both, and nothing else. */
    char calls[256];
    int64_t floats = world + (int64_t)piece * world;
    int64_t want_bytes = floats * (world - 1) / world * (int64_t)sizeof(float);
    int64_t moved = d.nominal_sent[DIST_CALL_ALL_TO_ALL] * world / (world - 1) / (int64_t)sizeof(float);
    int two = d.calls[DIST_CALL_ALL_TO_ALL] == 2 && collective_calls(&d) == 2 && p2p_calls(&d) == 0;
    char size[128] = "";
    if (two && d.nominal_sent[DIST_CALL_ALL_TO_ALL] != want_bytes)
        snprintf(size, sizeof size, " of %lld floats in all", (long long)moved);
    check_named(two && d.nominal_sent[DIST_CALL_ALL_TO_ALL] == want_bytes,
                "exercise 3: counts then payload, two all-to-alls of capacity-sized pieces",
                "2 dist_all_to_all calls, the counts (%d floats) and the payload (%d pieces of %d x %d), %lld floats "
                "in all, and no other call; moe_dispatch made %s%s",
                world, world, cap, MOE_D, (long long)floats, dist_traffic_text(&d, calls, sizeof calls), size);

    tensor_free(x);
    tensor_free(recv);
    tensor_free(counts);
    tensor_free(expected_counts);
    tensor_free(actual);
    tensor_free(expected);
    free(got);
    free(xs);
    free(routes);
    free(want);
    free(want_counts);
}

/* How long each exercise's ranks may run. A solved exercise takes well
 * under a second, a few seconds built with the sanitizers; past this the
 * ranks are stopped and each is named where it is and for how long, and
 * the next exercise runs. A test's copy may define a shorter one before it
 * includes this file. */
#ifndef EXERCISE_SECONDS
#define EXERCISE_SECONDS 30
#endif

static void homework_scaling(void) {
    note("# Homework: sequence, context and expert parallelism");
    note("Three exercises, each a function at the top of `lectures/homework_scaling.c`. Every check below "
         "compares your function with one device on 4 ranks, or checks how it communicated; a failed check "
         "says what was expected and what was seen. Each exercise runs on ranks of its own: one that crashes "
         "or hangs costs only its own checks.");
    /* The weights of the grade (--grade FILE, docs/homework.md): the ring,
     * where the order of events is the lesson, weighs most. Per rank: 4, 3
     * and 3 checks. */
    grade_exercise("exercise 1:", 30, 4 * WORLD);
    grade_exercise("exercise 2:", 40, 3 * WORLD);
    grade_exercise("exercise 3:", 30, 3 * WORLD);
    /* The sizes, from the student's variant (--variant SEED): what the
     * checks expect is computed from them. Without a seed, the defaults. */
    config c = {variant_int("rows of each rank's sequence shard", 4, 12, 8),
                variant_int("rows of each ring block", 4, 12, 8), variant_int("tokens per rank", 12, 24, 16)};
    note("## Exercise 1: sequence parallelism, backward");
    spawn_exercise("exercise 1:", EXERCISE_SECONDS, exercise_1, WORLD, &c, sizeof c);
    note("## Exercise 2: ring attention with the transfer hidden");
    spawn_exercise("exercise 2:", EXERCISE_SECONDS, exercise_2, WORLD, &c, sizeof c);
    note("## Exercise 3: expert dispatch with a capacity");
    spawn_exercise("exercise 3:", EXERCISE_SECONDS, exercise_3, WORLD, &c, sizeof c);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, homework_scaling); }
