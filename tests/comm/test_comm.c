/*
 * test_comm.c: every collective and reduction op, on 1, 2, 3 and 4 real
 * ranks started by spawn(), checked against results this test computes on
 * its own from the same inputs.
 *
 * The ranks cannot return values to the parent, so each writes what it got
 * to a file (w<world>_<case>_r<rank>.bin in a temporary folder); the cmocka
 * tests, back in the parent, read the files and compare them with sums,
 * minima, maxima and concatenations done here with plain loops. One spawn
 * per world size runs every case, so the whole file takes a few seconds.
 *
 * Inputs are small integers (exact in float), so SUM, MIN and MAX must match
 * exactly; AVG is compared to 1e-6 relative.
 *
 * Backends. Each world size runs once with the backend the runtime picks by
 * itself (NCCL on device memory when every rank can have a GPU, else Open MPI
 * on host memory; ranks sharing fewer GPUs than they are, on device tensors
 * staged through Open MPI), and test_identity checks the pick against that rule with
 * what the ranks report (dist_backend(), get_device()). Where the machine
 * could run both, the world size runs a second time with LECTERN_BACKEND=mpi,
 * so both paths are covered. tests/comm/test_nccl_emu.py runs it all again with
 * the spawns forced onto the NCCL emulator (host tensors, NCCL's code).
 * Tensors are filled and read through the API
 * (tensor_from, tensor_to_host), never through ->data, so the same code runs
 * on host and device memory.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_test.h"

enum { N = 6, BIG = 1 << 18 }; /* elements per rank; BIG: large enough for MPI's rendezvous path */

static const dist_op OPS[] = {DIST_SUM, DIST_AVG, DIST_MIN, DIST_MAX};
static const char *const OP_NAMES[] = {"sum", "avg", "min", "max"};

/* Rank r's i-th input: small integers in [-8, 8], in a different order on
 * each rank, so MIN and MAX pick different ranks for different i. */
static float input_value(int rank, int64_t i) { return (float)(((i * 7 + rank * 13) % 17) - 8); }

/* Rank `rank`'s inputs, on the device this spawn's backend works on. */
static tensor *inputs(int rank, int64_t n) {
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) {
        perror("inputs");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = input_value(rank, i);
    tensor *t = tensor_from(v, n, 0, get_device(dist_rank()));
    free(v);
    return t;
}

typedef struct comm_args {
    char dir[200];
    char group[32]; /* "w2_auto", "w1_mpi": names this run's result files */
} comm_args;

static void save(const comm_args *a, const char *name, int world, int rank, const float *v, int64_t n) {
    char path[300];
    (void)world;
    snprintf(path, sizeof path, "%s/%s_%s_r%d.bin", a->dir, a->group, name, rank);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (fwrite(v, sizeof(float), (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* A tensor's values, wherever it lives, through the API. */
static void save_tensor(const comm_args *a, const char *name, int world, int rank, const tensor *t) {
    float *v = malloc((size_t)t->numel * sizeof(float));
    if (!v) {
        perror("save_tensor");
        exit(1);
    }
    tensor_to_host(t, v);
    save(a, name, world, rank, v, t->numel);
    free(v);
}

/* ---------------- the ranks' side ---------------- */

static void run_reductions(const comm_args *a, int rank, int world) {
    char name[64];
    for (int k = 0; k < 4; k++) {
        tensor *t = inputs(rank, N);
        dist_all_reduce(t, OPS[k]);
        snprintf(name, sizeof name, "all_reduce_%s", OP_NAMES[k]);
        save_tensor(a, name, world, rank, t);
        tensor_free(t);

        t = inputs(rank, N);
        dist_reduce(t, world - 1, OPS[k]);
        snprintf(name, sizeof name, "reduce_%s", OP_NAMES[k]);
        if (rank == world - 1) save_tensor(a, name, world, rank, t);
        tensor_free(t);

        tensor *in = inputs(rank, N * world);
        tensor *out = zeros(N, 0, get_device(rank));
        dist_reduce_scatter(out, in, OPS[k]);
        snprintf(name, sizeof name, "reduce_scatter_%s", OP_NAMES[k]);
        save_tensor(a, name, world, rank, out);
        tensor_free(in);
        tensor_free(out);
    }
    /* The async twins: both requests of an op in flight at once, waited
     * for in the other order than they were made. */
    for (int k = 0; k < 4; k++) {
        tensor *t = inputs(rank, N);
        tensor *in = inputs(rank, N * world);
        tensor *out = zeros(N, 0, get_device(rank));
        dist_request *ar = dist_all_reduce_async(t, OPS[k]);
        dist_request *rs = dist_reduce_scatter_async(out, in, OPS[k]);
        dist_wait(rs);
        dist_wait(ar);
        snprintf(name, sizeof name, "all_reduce_async_%s", OP_NAMES[k]);
        save_tensor(a, name, world, rank, t);
        snprintf(name, sizeof name, "reduce_scatter_async_%s", OP_NAMES[k]);
        save_tensor(a, name, world, rank, out);
        tensor_free(t);
        tensor_free(in);
        tensor_free(out);
    }
}

static void run_data_movement(const comm_args *a, int rank, int world) {
    tensor *t = inputs(rank, N);
    dist_broadcast(t, world - 1);
    save_tensor(a, "broadcast", world, rank, t);
    tensor_free(t);

    tensor *in = inputs(rank, N);
    tensor *out = zeros(N * world, 0, get_device(rank));
    dist_all_gather(out, in);
    save_tensor(a, "all_gather", world, rank, out);
    tensor_free(in);
    tensor_free(out);

    t = inputs(rank, N);
    in = inputs(rank, N);
    out = zeros(N * world, 0, get_device(rank));
    dist_request *bc = dist_broadcast_async(t, world - 1);
    dist_request *ag = dist_all_gather_async(out, in);
    dist_wait(bc);
    dist_wait(ag);
    save_tensor(a, "broadcast_async", world, rank, t);
    save_tensor(a, "all_gather_async", world, rank, out);
    tensor_free(t);
    tensor_free(in);
    tensor_free(out);

    /* Only the source's input is read: the others pass NULL. The source is
     * the last rank, so a scatter that always started at rank 0 would fail. */
    tensor *whole = rank == world - 1 ? inputs(100, N * world) : NULL;
    tensor *part = zeros(N, 0, get_device(rank));
    dist_scatter(part, whole, world - 1);
    save_tensor(a, "scatter", world, rank, part);
    tensor_free(whole);
    tensor_free(part);

    in = inputs(rank, N);
    out = rank == world - 1 ? zeros(N * world, 0, get_device(rank)) : NULL;
    dist_gather(out, in, world - 1);
    if (out) save_tensor(a, "gather", world, rank, out);
    tensor_free(in);
    tensor_free(out);
}

/* sendrecv: every rank sends right and receives from the left at once. */
static void by_sendrecv(tensor *mine, tensor *got, int rank, int world) {
    dist_sendrecv(mine, (rank + 1) % world, got, (rank + world - 1) % world);
}

/* Non-blocking: everyone posts both, then waits. */
static void by_isend_irecv(tensor *mine, tensor *got, int rank, int world) {
    dist_request *s = dist_isend(mine, (rank + 1) % world);
    dist_request *r = dist_irecv(got, (rank + world - 1) % world);
    dist_wait(r);
    dist_wait(s);
}

/* Each rank's n inputs sent round the ring by `exchange`; what it got from
 * the previous rank saved as `name`. */
static void ring_saved(const comm_args *a, const char *name, int64_t n, int rank, int world,
                       void (*exchange)(tensor *mine, tensor *got, int rank, int world)) {
    tensor *mine = inputs(rank, n);
    tensor *got = zeros(n, 0, get_device(rank));
    exchange(mine, got, rank, world);
    save_tensor(a, name, world, rank, got);
    tensor_free(mine);
    tensor_free(got);
}

static void run_point_to_point(const comm_args *a, int rank, int world) {
    if (world < 2) return;
    /* A ring with blocking calls (lecture_test.h), then sendrecv and
     * isend/irecv at a size large enough that blocking sends in their order
     * would deadlock. */
    ring_saved(a, "send_recv", N, rank, world, ring_send_recv);
    ring_saved(a, "sendrecv", BIG, rank, world, by_sendrecv);
    ring_saved(a, "isend_irecv", BIG, rank, world, by_isend_irecv);
}

static void run_misc(const comm_args *a, int rank, int world) {
    /* Large all-reduce: MPI switches algorithms for big messages. */
    tensor *t = inputs(rank, BIG);
    dist_all_reduce(t, DIST_SUM);
    save_tensor(a, "all_reduce_big", world, rank, t);
    tensor_free(t);

    /* The barrier holds everyone until the slowest arrives: rank 0 comes
     * 0.2 s late; the others measure how long they waited. */
    dist_barrier();
    if (rank == 0) {
        struct timespec nap = {0, 200 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    double t0 = now_seconds();
    dist_barrier();
    float waited = (float)(now_seconds() - t0);
    save(a, "barrier", world, rank, &waited, 1);

    float who[4] = {(float)dist_rank(), (float)dist_world_size(), (float)get_device(rank),
                    strcmp(dist_backend(), "mpi") == 0    ? 1.0f
                    : strcmp(dist_backend(), "nccl") == 0 ? 2.0f
                                                          : 0.0f};
    save(a, "identity", world, rank, who, 4);
}

static void exercise(int rank, int world, void *p) {
    const comm_args *a = p;
    run_reductions(a, rank, world);
    run_data_movement(a, rank, world);
    run_point_to_point(a, rank, world);
    run_misc(a, rank, world);
}

/* ---------------- overlap: an async all-reduce behind a long computation ---------------- */

enum { OVERLAP_FLOATS = 1 << 22, OVERLAP_MATMULS = 40, OVERLAP_REPEATS = 3 };

static void compute(const tensor *x) {
    for (int i = 0; i < OVERLAP_MATMULS; i++) {
        tensor *y = matmul(x, x);
        tensor_free(y);
    }
}

static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* Rank 0 measures, three times each (medians): the computation alone, the
 * all-reduce alone, and the all-reduce issued async before the computation
 * and waited for after it. Every rank does the same work at the same time. */
static void overlap_rank(int rank, int world, void *p) {
    const comm_args *a = p;
    int dev = get_device(rank);
    tensor *t = zeros(OVERLAP_FLOATS, 0, dev);
    tensor *x = randn(512, 512, dev);
    double c[OVERLAP_REPEATS], r[OVERLAP_REPEATS], both[OVERLAP_REPEATS];
    for (int k = 0; k < OVERLAP_REPEATS; k++) {
        dist_barrier();
        double t0 = now_seconds();
        compute(x);
        device_synchronize();
        c[k] = now_seconds() - t0;
        dist_barrier();
        t0 = now_seconds();
        dist_all_reduce(t, DIST_SUM);
        device_synchronize();
        r[k] = now_seconds() - t0;
        dist_barrier();
        t0 = now_seconds();
        dist_request *req = dist_all_reduce_async(t, DIST_SUM);
        compute(x);
        dist_wait(req);
        device_synchronize();
        both[k] = now_seconds() - t0;
    }
    float v[4] = {(float)median3(c[0], c[1], c[2]), (float)median3(r[0], r[1], r[2]),
                  (float)median3(both[0], both[1], both[2]), strcmp(dist_backend(), "nccl") == 0 ? 2.0f : 1.0f};
    if (rank == 0) save(a, "overlap", world, rank, v, 4);
    tensor_free(t);
    tensor_free(x);
}

/* ---------------- the parent's side: expected values ---------------- */

static comm_args args;
static int group_world;           /* the world size whose results are being checked */
static const char *group_backend; /* "auto" (the runtime's pick) or the LECTERN_BACKEND forced */

static float *load(const char *name, int rank, int64_t n) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s_%s_r%d.bin", args.dir, args.group, name, rank);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("world %d: rank %d wrote no result for %s (%s)", group_world, rank, name, path);
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    size_t got = fread(v, sizeof(float), (size_t)n, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != (size_t)n || extra != EOF)
        fail_msg("world %d: %s of rank %d does not hold %lld floats", group_world, name, rank, (long long)n);
    return v;
}

/* op over ranks of input_value(r, i) */
static double reduce_expected(int op, int64_t i) {
    double acc = input_value(0, i);
    for (int r = 1; r < group_world; r++) {
        double x = input_value(r, i);
        if (OPS[op] == DIST_MIN) acc = x < acc ? x : acc;
        else if (OPS[op] == DIST_MAX) acc = x > acc ? x : acc;
        else acc += x;
    }
    return OPS[op] == DIST_AVG ? acc / group_world : acc;
}

static void expect_close(const char *what, int rank, int64_t i, double got, double want, int exact) {
    double tol = exact ? 0.0 : 1e-6 * (fabs(want) + 1.0);
    if (fabs(got - want) > tol)
        fail_msg("world %d, %s, rank %d, element %lld: got %.9g, expected %.9g", group_world, what, rank, (long long)i,
                 got, want);
}

/* Each rank's result of each op of `prefix`: the reduced vector whole
 * (all-reduce), or rank r's chunk r of the reduced (N * group_world) vector
 * (chunked: reduce-scatter); only rank dst's when dst >= 0 (reduce: the
 * result lives on dst only). */
static void check_reduced(const char *prefix, int chunked, int dst) {
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%s", prefix, OP_NAMES[k]);
        for (int r = 0; r < group_world; r++) {
            if (dst >= 0 && r != dst) continue;
            float *v = load(name, r, N);
            int64_t first = chunked ? (int64_t)r * N : 0;
            for (int64_t i = 0; i < N; i++)
                expect_close(name, r, i, v[i], reduce_expected(k, first + i), k != 1);
            free(v);
        }
    }
}

/* blocking and async */
static void test_all_reduce(void **state) {
    (void)state;
    check_reduced("all_reduce", 0, -1);
    check_reduced("all_reduce_async", 0, -1);
}

static void test_reduce(void **state) {
    (void)state;
    check_reduced("reduce", 0, group_world - 1);
}

static void test_reduce_scatter(void **state) {
    (void)state;
    check_reduced("reduce_scatter", 1, -1);
    check_reduced("reduce_scatter_async", 1, -1);
}

static void check_broadcast(const char *name) {
    for (int r = 0; r < group_world; r++) {
        float *v = load(name, r, N);
        for (int64_t i = 0; i < N; i++)
            expect_close(name, r, i, v[i], input_value(group_world - 1, i), 1);
        free(v);
    }
}

static void test_broadcast(void **state) {
    (void)state;
    check_broadcast("broadcast");
    check_broadcast("broadcast_async");
}

static void check_all_gather(const char *name) {
    for (int r = 0; r < group_world; r++) {
        float *v = load(name, r, (int64_t)N * group_world);
        for (int src = 0; src < group_world; src++)
            for (int64_t i = 0; i < N; i++)
                expect_close(name, r, src * N + i, v[src * N + i], input_value(src, i), 1);
        free(v);
    }
}

static void test_all_gather(void **state) {
    (void)state;
    check_all_gather("all_gather");
    check_all_gather("all_gather_async");
}

static void test_scatter(void **state) {
    (void)state;
    for (int r = 0; r < group_world; r++) {
        float *v = load("scatter", r, N);
        for (int64_t i = 0; i < N; i++)
            expect_close("scatter", r, i, v[i], input_value(100, (int64_t)r * N + i), 1);
        free(v);
    }
}

static void test_gather(void **state) {
    (void)state;
    float *v = load("gather", group_world - 1, (int64_t)N * group_world);
    for (int src = 0; src < group_world; src++)
        for (int64_t i = 0; i < N; i++)
            expect_close("gather", group_world - 1, src * N + i, v[src * N + i], input_value(src, i), 1);
    free(v);
}

static void test_send_recv(void **state) {
    (void)state;
    if (group_world < 2) skip();
    for (int r = 0; r < group_world; r++) {
        int prev = (r + group_world - 1) % group_world;
        float *v = load("send_recv", r, N);
        for (int64_t i = 0; i < N; i++)
            expect_close("send_recv", r, i, v[i], input_value(prev, i), 1);
        free(v);
        v = load("sendrecv", r, BIG);
        for (int64_t i = 0; i < BIG; i++)
            expect_close("sendrecv", r, i, v[i], input_value(prev, i), 1);
        free(v);
        v = load("isend_irecv", r, BIG);
        for (int64_t i = 0; i < BIG; i++)
            expect_close("isend_irecv", r, i, v[i], input_value(prev, i), 1);
        free(v);
    }
}

static void test_big_all_reduce(void **state) {
    (void)state;
    for (int r = 0; r < group_world; r++) {
        float *v = load("all_reduce_big", r, BIG);
        for (int64_t i = 0; i < BIG; i++)
            expect_close("all_reduce_big", r, i, v[i], reduce_expected(0, i), 1);
        free(v);
    }
}

static void test_barrier_waits(void **state) {
    (void)state;
    for (int r = 1; r < group_world; r++) {
        float *v = load("barrier", r, 1);
        if (v[0] < 0.1f)
            fail_msg("world %d: rank %d left the barrier after %.3f s, before rank 0 (0.2 s late) arrived", group_world,
                     r, v[0]);
        free(v);
    }
}

/* 1 when the spawns are forced onto the NCCL emulator (LECTERN_BACKEND=nccl,
 * LECTERN_NCCL_EMULATE=1: tests/comm/test_nccl_emu.py runs this test so): NCCL's
 * code on host tensors. */
static int nccl_emulated(void) {
    const char *b = getenv("LECTERN_BACKEND"), *e = getenv("LECTERN_NCCL_EMULATE");
    return b && strcmp(b, "nccl") == 0 && e && strcmp(e, "1") == 0;
}

/* 1 where this build and machine can run world_size ranks on NCCL: the
 * build has NCCL and every rank can have a GPU of its own. */
static int nccl_possible(int world_size) { return LECTERN_NCCL && gpu_count() >= world_size; }

/* The backend the ranks should have run: the forced one, or the runtime's
 * documented rule (lectern.h, spawn()). */
static const char *expected_backend(void) {
    if (strcmp(group_backend, "auto") != 0) return group_backend;
    const char *env = getenv("LECTERN_BACKEND");
    if (env && *env) return env;
    return nccl_possible(group_world) ? "nccl" : "mpi";
}

static void test_identity(void **state) {
    (void)state;
    int nccl = strcmp(expected_backend(), "nccl") == 0;
    for (int r = 0; r < group_world; r++) {
        float *v = load("identity", r, 4);
        assert_int_equal((int)v[0], r);           /* dist_rank */
        assert_int_equal((int)v[1], group_world); /* dist_world_size */
        if ((int)v[3] != (nccl ? 2 : 1))
            fail_msg("world %d (%s): rank %d ran on %s, expected %s", group_world, group_backend, r,
                     (int)v[3] == 2   ? "nccl"
                     : (int)v[3] == 1 ? "mpi"
                                      : "neither",
                     expected_backend());
        /* get_device: its own GPU under NCCL, cuda:(r mod GPUs) on shared
         * GPUs (the runtime's own pick with fewer GPUs than ranks), the CPU
         * under Open MPI */
        int shared = !nccl && strcmp(group_backend, "auto") == 0 &&
                     !(getenv("LECTERN_BACKEND") && *getenv("LECTERN_BACKEND")) && gpu_count() > 0;
        assert_int_equal((int)v[2], nccl && !nccl_emulated() ? r : shared ? r % gpu_count() : -1);
        free(v);
    }
}

/* Overlap is a claim about the device: on NCCL the all-reduce runs on its
 * own stream while the matmuls run on the compute stream, so issued before
 * them it must not add its time. On Open MPI on a CPU the transfer and the
 * matmuls need the same cores (the copies are CPU work), and the figures
 * are recorded in docs/benchmarks.md instead of asserted. */
static void test_overlap(void **state) {
    (void)state;
    float *v = load("overlap", 0, 4);
    double alone_c = v[0], alone_r = v[1], both = v[2];
    int nccl = (int)v[3] == 2;
    free(v);
    print_message("overlap (%s): compute %.4f s, all-reduce %.4f s, both with async %.4f s\n", nccl ? "nccl" : "mpi",
                  alone_c, alone_r, both);
    if (!nccl) {
        print_message("skipped: on Open MPI the all-reduce's copies need the cores the matmuls use; "
                      "overlap is asserted on NCCL only\n");
        skip();
    }
    if (nccl_emulated()) {
        print_message("skipped: on the NCCL emulator the all-reduce's copies need the cores the matmuls use, as on "
                      "Open MPI; overlap is asserted on NCCL's GPUs only\n");
        skip();
    }
    /* Both parts must be long enough that timer noise and launch latency
     * (tens of microseconds) cannot decide the comparison. */
    if (alone_c < 0.005 || alone_r < 0.005) {
        print_message("skipped: compute %.4f s or all-reduce %.4f s too short to measure overlap\n", alone_c, alone_r);
        skip();
    }
    /* Serial would be alone_c + alone_r; 0.9 leaves 10% for the two
     * streams slowing each other down (shared memory bandwidth), which is
     * still well short of serial when the shorter part is at least 5 ms. */
    if (both >= 0.9 * (alone_c + alone_r))
        fail_msg("async all-reduce did not overlap: compute %.4f s + all-reduce %.4f s alone, %.4f s together", alone_c,
                 alone_r, both);
}

/* Outside spawn there is no group_world to talk to. */
static void test_outside_spawn(void **state) {
    (void)state;
    assert_int_equal(dist_rank(), 0);
    assert_int_equal(dist_world_size(), 1);
    assert_string_equal(dist_backend(), "none");
    assert_int_equal(get_device(0), gpu_count() > 0 ? 0 : -1);
}

/* ---------------- groups: one spawn per group_world size ---------------- */

static int spawn_world(void **state) {
    (void)state;
    snprintf(args.group, sizeof args.group, "w%d_%s", group_world, group_backend);
    const char *before = getenv("LECTERN_BACKEND");
    char *saved = before ? strdup(before) : NULL;
    if (strcmp(group_backend, "auto") != 0) setenv("LECTERN_BACKEND", group_backend, 1);
    spawn(exercise, group_world, &args, sizeof args);
    if (saved) setenv("LECTERN_BACKEND", saved, 1);
    else unsetenv("LECTERN_BACKEND");
    free(saved);
    return 0;
}

static int failures;

/* One group of checks over the results of one spawn. */
static void run_group(int world, const char *backend, const struct CMUnitTest *tests, size_t n) {
    char name[64];
    group_world = world;
    group_backend = backend;
    snprintf(name, sizeof name, "world size %d, backend %s", world, backend);
    failures += _cmocka_run_group_tests(name, tests, n, spawn_world, NULL);
}

static void body(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_all_reduce),     cmocka_unit_test(test_reduce),
            cmocka_unit_test(test_reduce_scatter), cmocka_unit_test(test_broadcast),
            cmocka_unit_test(test_all_gather),     cmocka_unit_test(test_scatter),
            cmocka_unit_test(test_gather),         cmocka_unit_test(test_send_recv),
            cmocka_unit_test(test_big_all_reduce), cmocka_unit_test(test_barrier_waits),
            cmocka_unit_test(test_identity),
    };
    const struct CMUnitTest outside[] = {cmocka_unit_test(test_outside_spawn)};
    failures += cmocka_run_group_tests_name("outside spawn", outside, NULL, NULL);
    size_t n = sizeof tests / sizeof tests[0];
    const char *forced = getenv("LECTERN_BACKEND");
    for (int world = 1; world <= 4; world++) {
        run_group(world, "auto", tests, n);
        /* The runtime picked NCCL, or shared GPUs: cover the CPU path too. */
        if ((nccl_possible(world) || gpu_count() > 0) && !(forced && *forced)) run_group(world, "mpi", tests, n);
    }
    const struct CMUnitTest overlap[] = {cmocka_unit_test(test_overlap)};
    group_world = 2;
    group_backend = "auto";
    snprintf(args.group, sizeof args.group, "overlap");
    spawn(overlap_rank, 2, &args, sizeof args);
    failures += cmocka_run_group_tests_name("overlap, world size 2", overlap, NULL, NULL);
    if (!nccl_possible(1))
        fprintf(stderr, "test_comm: the NCCL path is not covered here: %s\n",
                !LECTERN_NCCL ? "this build has no NCCL" : "no GPU is visible (gpu_count() is 0)");
}

int main(int argc, char **argv) {
    int rc = run_test_lecture(argc, argv, body, args.dir, sizeof args.dir, "test_comm");
    return failures || rc ? 1 : 0;
}
