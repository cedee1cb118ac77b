/*
 * test_shared_order.c: a collective of ranks sharing a GPU waits for the
 * kernels that wrote its input (the forced-dependency test).
 *
 * Each round one rank (a different one each round) queues a slow producer,
 * a chain of large matrix products, and then the kernel that writes its
 * input, and calls the collective at once: the host does not wait for the
 * GPU, so the input is written long after the call was made. The other
 * ranks call with inputs written at once. A protocol that let a peer read
 * the slow rank's window before that rank's `ready` event (or the staged
 * path's copy before the kernel) would see the last round's values, which
 * differ from this round's in every element: exact results prove the
 * ordering. All-reduce, reduce-scatter, all-gather, broadcast, all-to-all
 * and a send/receive ring, each on 2 to 4 ranks.
 *
 * On a GPU: once through the shared-GPU protocol (CUDA IPC) and once on the
 * staged path (LECTERN_SHARED_IPC=0). Without one: through the protocol over
 * shared memory (LECTERN_SHARED_IPC_CPU=1), where everything is synchronous
 * and the test checks the same code's results only; the ordering is a GPU
 * matter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_test.h"
#include "comm/shared_ipc.h"

enum { N = 3 * 1024 * 1024 + 5, ROUNDS = 4 }; /* 12 MiB, a count 2, 3 and 4 do not divide */

typedef struct order_args {
    char dir[200];
    char group[16];
} order_args;
static order_args args;
static int failures;

/* Rank r's input in round k: a different value in every round and rank. */
static float value(int round, int rank, int64_t i) { return (float)(round * 16 + rank + 1 + (i % 5)); }

/* The slow producer: on a GPU about 50 ms of matrix products on stream 0
 * (64 products of 2048 x 2048, 17 GFLOP each), queued, not waited for. */
static void slow(int dev) {
    if (dev < 0) return;
    tensor *x = randn(2048, 2048, dev);
    for (int k = 0; k < 64; k++) {
        tensor *y = matmul(x, x);
        scale_(y, 1e-3f);
        tensor_free(x);
        x = y;
    }
    tensor_free(x);
}

/* t's elements i become value(round, rank, lo + i), written by a kernel
 * queued behind the slow producer on the slow rank: t holds (i % 5) and the
 * kernel adds the rest. */
static tensor *produced(int round, int rank, int slow_rank, int64_t n, int64_t lo, int dev) {
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) exit(1);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((lo + i) % 5);
    tensor *t = tensor_from(v, n, 0, dev);
    free(v);
    if (rank == slow_rank) slow(dev);
    add_scalar_(t, (float)(round * 16 + rank + 1));
    return t;
}

/* Writes a FAIL line to f at t's first element that is not want(i, ctx),
 * then frees t and the call's input `in` (NULL when t was both). */
static void expect_then_free(FILE *f, const char *what, int round, tensor *t, tensor *in,
                             float (*want)(int64_t, const int *), const int *ctx) {
    float *v = malloc((size_t)t->numel * sizeof(float));
    if (!v) exit(1);
    tensor_to_host(t, v);
    for (int64_t i = 0; i < t->numel; i++)
        if (v[i] != want(i, ctx)) {
            fprintf(f, "FAIL %s round %d element %lld: got %.9g, want %.9g\n", what, round, (long long)i, v[i],
                    want(i, ctx));
            break;
        }
    free(v);
    tensor_free(t);
    if (in) tensor_free(in);
}

/* ctx: {round, world, rank, piece} */
static float want_sum(int64_t i, const int *c) {
    float s = 0;
    for (int r = 0; r < c[1]; r++)
        s += value(c[0], r, (int64_t)c[3] + i);
    return s;
}
static float want_gathered(int64_t i, const int *c) { return value(c[0], (int)(i / c[3]), i % c[3]); }
static float want_from(int64_t i, const int *c) { return value(c[0], c[2], i); }
static float want_a2a(int64_t i, const int *c) { /* piece q comes from rank q: its piece `rank` */
    int64_t piece = c[3];
    return value(c[0], (int)(i / piece), (int64_t)c[2] * piece + i % piece);
}

static void rounds(int rank, int world, void *p) {
    const order_args *a = p;
    char path[300];
    snprintf(path, sizeof path, "%s/%s_w%d_r%d.txt", a->dir, a->group, world, rank);
    FILE *f = fopen(path, "w");
    if (!f) exit(1);
    int dev = get_device(rank);
    int64_t piece = N / world;
    for (int k = 0; k < ROUNDS; k++) {
        int s = k % world, round = k + 1;
        /* each call's expectation: ctx = {round, world, rank, piece} */
        tensor *t = produced(round, rank, s, N, 0, dev);
        dist_all_reduce(t, DIST_SUM);
        expect_then_free(f, "all_reduce", round, t, NULL, want_sum, (int[]){round, world, rank, 0});

        tensor *in = produced(round, rank, s, piece * world, 0, dev), *out = zeros(piece, 0, dev);
        dist_reduce_scatter(out, in, DIST_SUM);
        expect_then_free(f, "reduce_scatter", round, out, in, want_sum,
                         (int[]){round, world, rank, (int)(rank * piece)});

        in = produced(round, rank, s, piece, 0, dev);
        out = zeros(piece * world, 0, dev);
        dist_all_gather(out, in);
        expect_then_free(f, "all_gather", round, out, in, want_gathered, (int[]){round, world, rank, (int)piece});

        t = produced(round, rank, s, N, 0, dev);
        dist_broadcast(t, s); /* from the slow rank */
        expect_then_free(f, "broadcast", round, t, NULL, want_from, (int[]){round, world, s, 0});

        in = produced(round, rank, s, piece * world, 0, dev);
        out = zeros(piece * world, 0, dev);
        dist_all_to_all(out, in);
        expect_then_free(f, "all_to_all", round, out, in, want_a2a, (int[]){round, world, rank, (int)piece});

        if (world >= 2) {
            tensor *mine = produced(round, rank, s, N, 0, dev), *got = zeros(N, 0, dev);
            ring_send_recv(mine, got, rank, world);
            expect_then_free(f, "send/recv", round, got, mine, want_from,
                             (int[]){round, world, (rank + world - 1) % world, 0});
        }
    }
    fprintf(f, "done path %d\n", lx_ipc_active());
    fclose(f);
}

static void check_group(const char *group, int want_path) {
    for (int w = 2; w <= 4; w++)
        for (int r = 0; r < w; r++) {
            char path[300], line[512];
            snprintf(path, sizeof path, "%s/%s_w%d_r%d.txt", args.dir, group, w, r);
            FILE *f = fopen(path, "r");
            if (!f) fail_msg("%s, world %d: rank %d wrote nothing", group, w, r);
            int on = -1;
            while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "FAIL", 4) == 0) {
                    fclose(f);
                    fail_msg("%s, world %d, rank %d: %s", group, w, r, line);
                }
                sscanf(line, "done path %d", &on);
            }
            fclose(f);
            if (on != want_path)
                fail_msg("%s, world %d, rank %d: the shared-GPU protocol was %s, expected %s", group, w, r,
                         on == 1   ? "on"
                         : on == 0 ? "off"
                                   : "not reported",
                         want_path ? "on" : "off");
        }
}

static void test_protocol(void **state) {
    (void)state;
    const char *require = getenv("LECTERN_TEST_REQUIRE_IPC");
    /* On a GPU the probe may fail (the note says why); gpu-check requires it. */
    int want = gpu_count() == 0 || (require && strcmp(require, "1") == 0) ? 1 : -1;
    if (want < 0) {
        char path[300], line[256];
        snprintf(path, sizeof path, "%s/ipc_w2_r0.txt", args.dir);
        FILE *f = fopen(path, "r");
        want = 0;
        while (f && fgets(line, sizeof line, f))
            sscanf(line, "done path %d", &want);
        if (f) fclose(f);
        if (!want) printf("(the shared-GPU protocol's probe failed on this GPU: the staged path was checked)\n");
    }
    check_group("ipc", want);
}

static void test_staged(void **state) {
    (void)state;
    if (gpu_count() == 0) {
        printf("skipped: the staged path's ordering needs a GPU\n");
        skip();
    }
    check_group("staged", 0);
}

static void body(void) {
    int gpus = gpu_count();
    if (gpus == 0) {
        setenv("LECTERN_STAGE_TEST", "1", 1);
        setenv("LECTERN_SHARED_IPC_CPU", "1", 1);
        setenv("LECTERN_BACKEND", "mpi", 1);
    }
    if (gpus < 2) { /* with 2 or more GPUs a spawn of 2 would not share one */
        snprintf(args.group, sizeof args.group, "ipc");
        for (int w = 2; w <= 4; w++)
            spawn(rounds, w, &args, sizeof args);
        if (gpus > 0) {
            setenv("LECTERN_SHARED_IPC", "0", 1);
            snprintf(args.group, sizeof args.group, "staged");
            for (int w = 2; w <= 4; w++)
                spawn(rounds, w, &args, sizeof args);
            unsetenv("LECTERN_SHARED_IPC");
        }
    }
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_protocol),
            cmocka_unit_test(test_staged),
    };
    if (gpus >= 2) {
        printf("skipped: %d GPUs: spawns of 2 ranks would not share one\n", gpus);
        return;
    }
    failures += cmocka_run_group_tests_name("shared order", tests, NULL, NULL);
}

int main(int argc, char **argv) {
    int rc = run_test_lecture(argc, argv, body, args.dir, sizeof args.dir, "test_shared_order");
    return failures || rc ? 1 : 0;
}
