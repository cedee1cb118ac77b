/*
 * homework_08: distributed training by hand, checked.
 *
 * Four exercises on what lecture_08 teaches. Each function marked EXERCISE
 * is yours to write; the code after them runs your functions on 4 ranks and
 * checks them against lectern's own collectives with check_close(). At the
 * start every check fails; when all pass, the last line of the run says
 * "checks: 20 passed, 0 failed".
 *
 *     make run LECTURE=homework_08                 exercises 1 to 3
 *     make run LECTURE=homework_08 ARGS=--deadlock exercise 4 as well
 *
 * docs/homework.md explains the exercises and how they are checked.
 * (The instructor's solution, tests/lectures/homework_08_solution.c,
 * defines HOMEWORK_SOLUTION and its own versions of the four functions.)
 */
#include <math.h>
#include <stdlib.h>

#include "lectern.h"

LECTURE_OPTIONS({"n", "N", "elements per rank in exercise 1 (default 1000)"},
                {"deadlock", NULL, "also run exercise 4 (it hangs until the deadlock is fixed)"});

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
    /* your code here */
}

/* EXERCISE 2: data parallelism with one bucket and gradient accumulation.
 *
 * grads[0 .. n - 1] hold this rank's gradients (different shapes), each
 * summed over `accum` micro-batches. Make every rank hold the average over
 * all ranks and all micro-batches, with ONE collective: copy each gradient
 * into its place in `bucket` (a view of the bucket at the right offset, with
 * the gradient's shape), all-reduce the bucket, scale, and copy back. */
void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {
    /* your code here */
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
    /* your code here */
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
 * of the terms' sizes, whatever order it adds them in. With 4 ranks of
 * standard normal values (|x| < 6 in practice) a sum of 4 is within
 * 4 * 24 * 2^-24 = 6e-6 of any other order: 1e-5 leaves room, and a chunk
 * summed twice or left out is off by about 1, five orders more. */
#define SUM_ATOL 1e-5
/* AdamW's first step moves each element by lr * g / (|g| + eps), about lr
 * (1e-3); gradients averaged in another order differ by 1e-7 relative, which
 * moves that step by far less than 1e-6. A step not taken is off by 1e-3. */
#define STEP_ATOL 1e-6
#define LR 1e-3f

typedef struct config {
    int n;          /* elements per rank, exercise 1 */
    int deadlock;   /* run exercise 4 */
} config;

static void exercise_1(int rank, int world, int n) {
    manual_seed(100 + (uint64_t)rank);
    tensor *t = randn(n, 0, get_device(rank));
    tensor *expected = to_device(t, get_device(rank));
    dist_all_reduce(expected, DIST_SUM);
    ring_all_reduce(t);
    check_close(t, expected, 0, SUM_ATOL, "exercise 1: ring all-reduce");
    tensor_free(t);
    tensor_free(expected);
}

static void exercise_2(int rank, int world) {
    enum { N_PARAMS = 3, ACCUM = 2 };
    int64_t rows[N_PARAMS] = {3, 5, 2}, cols[N_PARAMS] = {4, 0, 6};
    tensor *grads[N_PARAMS], *expected[N_PARAMS];
    int64_t total = 0;
    manual_seed(200 + (uint64_t)rank);
    for (int i = 0; i < N_PARAMS; i++) {
        grads[i] = zeros(rows[i], cols[i], get_device(rank));
        for (int m = 0; m < ACCUM; m++) {           /* two micro-batches, accumulated */
            tensor *g = randn(rows[i], cols[i], get_device(rank));
            add_(grads[i], g);
            tensor_free(g);
        }
        expected[i] = to_device(grads[i], get_device(rank));
        dist_all_reduce(expected[i], DIST_SUM);
        scale(expected[i], 1.0f / (float)(world * ACCUM));
        total += grads[i]->numel;
    }
    tensor *bucket = zeros(total, 0, get_device(rank));
    ddp_sync(grads, N_PARAMS, bucket, ACCUM);
    const char *names[N_PARAMS] = {"exercise 2: gradient 0 (3x4)", "exercise 2: gradient 1 (5)",
                                   "exercise 2: gradient 2 (2x6)"};
    for (int i = 0; i < N_PARAMS; i++) {
        check_close(grads[i], expected[i], 0, SUM_ATOL, names[i]);
        tensor_free(grads[i]);
        tensor_free(expected[i]);
    }
    tensor_free(bucket);
}

static void exercise_3(int rank, int world) {
    int64_t numel = 8 * (int64_t)world;
    manual_seed(300);                               /* the same parameters on every rank */
    tensor *param = randn(numel, 0, get_device(rank));
    manual_seed(400 + (uint64_t)rank);              /* each rank its own gradient */
    tensor *grad = randn(numel, 0, get_device(rank));

    /* The reference: the full optimizer on the averaged gradient. */
    tensor *ref = to_device(param, get_device(rank));
    tensor *avg = to_device(grad, get_device(rank));
    dist_all_reduce(avg, DIST_AVG);
    adamw *full = adamw_new(ref, LR);
    adamw_step(full, ref, avg);

    tensor *shard = tensor_view(param, rank * (numel / world), numel / world, 0);
    adamw *opt = adamw_new(shard, LR);
    zero1_step(param, grad, opt);
    check_close(param, ref, 0, STEP_ATOL, "exercise 3: parameters after a ZeRO-1 step");

    adamw_free(opt);
    adamw_free(full);
    tensor_free(shard);
    tensor_free(ref);
    tensor_free(avg);
    tensor_free(param);
    tensor_free(grad);
}

static void exercise_4(int rank, int world) {
    /* 4 MB each way: too large for Open MPI to buffer, so a blocking send
     * waits for its receive. */
    int64_t n = 1 << 20;
    tensor *mine = zeros(n, 0, get_device(rank)), *theirs = zeros(n, 0, get_device(rank));
    fill_(mine, (float)rank);
    exchange(mine, theirs);
    tensor *expected = zeros(n, 0, get_device(rank));
    fill_(expected, (float)(rank ^ 1));
    check_close(theirs, expected, 0, 0, "exercise 4: the peer's tensor arrived");
    tensor_free(mine);
    tensor_free(theirs);
    tensor_free(expected);
}

static void exercises(int rank, int world, void *args) {
    const config *c = args;
    exercise_1(rank, world, c->n);
    exercise_2(rank, world);
    exercise_3(rank, world);
    if (c->deadlock) exercise_4(rank, world);
}

static void body(void) {
    note("# Homework 08: distributed training by hand");
    note("Four exercises, each a function at the top of `lectures/homework_08.c`. Every check below "
         "compares your function with lectern's own collectives on 4 ranks; a failed check shows "
         "the largest difference and where it is.");
    config c = {atoi(lecture_option("n", "1000")), lecture_flag("deadlock")};
    int world = 4;
    if (c.n <= 0 || c.n % world != 0) {
        check(0, "--n=%d must be a positive multiple of %d", c.n, world);
        return;
    }
    note("## Exercises 1 to 3%s", c.deadlock ? ", and 4 (the deadlock)" : "");
    spawn(exercises, world, &c, sizeof c);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
