/*
 * test_comm_staged.c: the collectives of ranks that share a GPU
 * (runtime/comm/comm_staged.c), and how a spawn chooses its backend
 * (runtime/ranks/spawn_backend.c).
 *
 * 1. The staging pipeline, on any machine. With LECTERN_STAGE_TEST=1 (a test
 *    hook) a CPU spawn runs its collectives through comm_staged.c's chunked
 *    pipeline with memcpy as the copy primitive: the same chunking, slot
 *    reuse and ordering code a GPU spawn runs, on host tensors. Chunks are 5
 *    floats (LECTERN_STAGE_CHUNK), so the sizes tried (0, 1, 4, 5, 6, 17,
 *    1000 floats: empty, one, chunk-1, chunk, chunk+1, ragged, 200 chunks)
 *    cover every edge, on 1 to 4 ranks, every collective and op, blocking
 *    and async. Each rank computes what each result must be from the
 *    inputs' formula (every rank's inputs are known to every rank) and
 *    writes a line per mismatch (then the same with chunks of 256 Ki floats,
 *    on 3 chunks and 7 floats); the test here reads the lines, and checks
 *    that the number of pipeline steps each rank ran is the number of
 *    chunks the sizes make (computed here again), so a result that came
 *    from anywhere but the pipeline fails.
 *    The same cases run through the direct path's code too (what a
 *    CUDA-aware Open MPI gets), on host memory, where no chunk may go
 *    through the pipeline.
 *    And through the shared-GPU protocol (runtime/comm/shared_ipc.c) over
 *    shared memory (LECTERN_SHARED_IPC_CPU=1): no chunk through the
 *    pipeline, and the protocol's rounds and messages counted against the
 *    number computed here; no shared-memory segment left after the spawns.
 * 2. The same on shared GPUs, where there is a GPU (skipped otherwise, with
 *    the reason): 2 to 4 ranks on fewer GPUs, device tensors on
 *    cuda:(rank mod GPUs), once through CUDA IPC (the staged path where the
 *    probe fails, unless LECTERN_TEST_REQUIRE_IPC=1) and once with
 *    LECTERN_SHARED_IPC=0, the spawn's note as the issue words it; each
 *    pool rank makes its cuBLAS handle and staging streams once for all
 *    spawns; the lecture process holds no CUDA context.
 * 3. lx_choose_backend on facts given here: shared GPUs, NCCL,
 *    exclusive-process and prohibited compute modes, no NCCL built,
 *    a hostfile, the test hook.
 *
 * Inputs are small integers, so every sum is exact in float in any order,
 * and an average is one float division of an exact sum, done the same way
 * here: every comparison is exact.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_test.h"
#include "comm/comm.h"
#include "comm/shared_ipc.h"

enum { CHUNK = 5 };
static const int64_t SIZES[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 17, 1000};
enum { N_SIZES = sizeof SIZES / sizeof SIZES[0] };
static const dist_op OPS[] = {DIST_SUM, DIST_AVG, DIST_MIN, DIST_MAX};
static const char *const OP_NAMES[] = {"sum", "avg", "min", "max"};

typedef struct staged_args {
    char dir[200];
    char group[16]; /* "host", "direct", "ipc", "gpu" or "gpustaged": names the result files */
    int direct;     /* the direct path (CUDA-aware Open MPI's), on host memory */
} staged_args;

static staged_args args;
static int failures;

/* Rank r's i-th input: small integers in [-8, 8], in another order on each
 * rank so MIN and MAX pick different ranks for different i. */
static float input_value(int rank, int64_t i) { return (float)(((i * 7 + rank * 13) % 17) - 8); }

static float reduce_value(dist_op op, int world, int64_t i) {
    float acc = input_value(0, i);
    for (int r = 1; r < world; r++) {
        float x = input_value(r, i);
        if (op == DIST_MIN) acc = x < acc ? x : acc;
        else if (op == DIST_MAX) acc = x > acc ? x : acc;
        else acc += x;
    }
    return op == DIST_AVG ? acc / (float)world : acc;
}

/* ---------------- the ranks' side ---------------- */

typedef struct checker {
    FILE *f;
    int rank, dev;
    int cases;
} checker;

static tensor *inputs(const checker *c, int who, int64_t n) {
    float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!v) {
        perror("inputs");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = input_value(who, i);
    tensor *t = tensor_from(v, n, 0, c->dev);
    free(v);
    return t;
}

static tensor *filled(const checker *c, int64_t n, float value) {
    tensor *t = zeros(n, 0, c->dev);
    if (n) add_scalar_(t, value);
    return t;
}

/* Compares t with want(i, ctx) and writes the first mismatch. */
typedef float (*want_fn)(int64_t i, const void *ctx);

static void expect(checker *c, const char *what, int64_t size, const tensor *t, want_fn want, const void *ctx) {
    c->cases++;
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (!v) {
        perror("expect");
        exit(1);
    }
    tensor_to_host(t, v);
    if (t->device != c->dev)
        fprintf(c->f, "FAIL %s n=%lld: the result is on device %d, not %d\n", what, (long long)size, t->device, c->dev);
    for (int64_t i = 0; i < t->numel; i++) {
        float w = want(i, ctx);
        if (v[i] != w) {
            fprintf(c->f, "FAIL %s n=%lld element %lld: got %.9g, want %.9g\n", what, (long long)size, (long long)i,
                    v[i], w);
            break;
        }
    }
    free(v);
}

typedef struct want_ctx {
    dist_op op;
    int world, who, offset;
    int64_t n;
} want_ctx;

static float want_reduce(int64_t i, const void *p) {
    const want_ctx *w = p;
    return reduce_value(w->op, w->world, w->offset + i);
}
static float want_input(int64_t i, const void *p) {
    const want_ctx *w = p;
    return input_value(w->who, w->offset + i);
}
static float want_gathered(int64_t i, const void *p) { /* piece r of the output is rank r's input */
    const want_ctx *w = p;
    return input_value((int)(i / w->n), i % w->n);
}
static float want_scattered(int64_t i, const void *p) { /* rank `who`'s piece of a (100)'s input */
    const want_ctx *w = p;
    return input_value(100, (int64_t)w->who * w->n + i);
}
static float want_value(int64_t i, const void *p) {
    (void)i;
    const want_ctx *w = p;
    return (float)w->offset;
}

static void one_size(checker *c, int world, int64_t n) {
    int rank = c->rank, root = world - 1;
    char what[64];
    for (int k = 0; k < 4; k++) {
        want_ctx w = {.op = OPS[k], .world = world};
        tensor *t = inputs(c, rank, n);
        dist_all_reduce(t, OPS[k]);
        snprintf(what, sizeof what, "all_reduce %s", OP_NAMES[k]);
        expect(c, what, n, t, want_reduce, &w);
        tensor_free(t);

        t = inputs(c, rank, n);
        dist_reduce(t, root, OPS[k]);
        snprintf(what, sizeof what, "reduce %s", OP_NAMES[k]);
        want_ctx mine = {.who = rank};
        expect(c, what, n, t, rank == root ? want_reduce : want_input, rank == root ? (void *)&w : (void *)&mine);
        tensor_free(t);

        tensor *in = inputs(c, rank, n * world);
        tensor *out = filled(c, n, -99);
        dist_reduce_scatter(out, in, OPS[k]);
        snprintf(what, sizeof what, "reduce_scatter %s", OP_NAMES[k]);
        want_ctx piece = {.op = OPS[k], .world = world, .offset = (int)(rank * n)};
        expect(c, what, n, out, want_reduce, &piece);
        tensor_free(in);
        tensor_free(out);

        /* The async twins, both in flight, waited for in the other order. */
        t = inputs(c, rank, n);
        in = inputs(c, rank, n * world);
        out = filled(c, n, -99);
        dist_request *ar = dist_all_reduce_async(t, OPS[k]);
        dist_request *rs = dist_reduce_scatter_async(out, in, OPS[k]);
        dist_wait(rs);
        dist_wait(ar);
        snprintf(what, sizeof what, "all_reduce_async %s", OP_NAMES[k]);
        expect(c, what, n, t, want_reduce, &w);
        snprintf(what, sizeof what, "reduce_scatter_async %s", OP_NAMES[k]);
        expect(c, what, n, out, want_reduce, &piece);
        tensor_free(t);
        tensor_free(in);
        tensor_free(out);
    }

    want_ctx from_root = {.who = root};
    tensor *t = inputs(c, rank, n);
    dist_broadcast(t, root);
    expect(c, "broadcast", n, t, want_input, &from_root);
    tensor_free(t);

    want_ctx gathered = {.n = n};
    tensor *in = inputs(c, rank, n);
    tensor *out = filled(c, n * world, -99);
    dist_all_gather(out, in);
    expect(c, "all_gather", n, out, want_gathered, &gathered);
    tensor_free(in);
    tensor_free(out);

    t = inputs(c, rank, n);
    in = inputs(c, rank, n);
    out = filled(c, n * world, -99);
    dist_request *bc = dist_broadcast_async(t, root);
    dist_request *ag = dist_all_gather_async(out, in);
    dist_wait(ag);
    dist_wait(bc);
    expect(c, "broadcast_async", n, t, want_input, &from_root);
    expect(c, "all_gather_async", n, out, want_gathered, &gathered);
    tensor_free(t);
    tensor_free(in);
    tensor_free(out);

    tensor *whole = rank == root ? inputs(c, 100, n * world) : NULL;
    tensor *part = filled(c, n, -99);
    dist_scatter(part, whole, root);
    want_ctx scattered = {.who = rank, .n = n};
    expect(c, "scatter", n, part, want_scattered, &scattered);
    tensor_free(whole);
    tensor_free(part);

    in = inputs(c, rank, n);
    out = rank == root ? filled(c, n * world, -99) : NULL;
    dist_gather(out, in, root);
    if (out) expect(c, "gather", n, out, want_gathered, &gathered);
    tensor_free(in);
    tensor_free(out);

    if (world < 2) return;
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    /* A ring, blocking: even ranks send first (lecture_test.h). */
    tensor *mine = inputs(c, rank, n);
    tensor *got = filled(c, n, -99);
    ring_send_recv(mine, got, rank, world);
    want_ctx from_prev = {.who = prev};
    expect(c, "send/recv", n, got, want_input, &from_prev);
    tensor_free(mine);
    tensor_free(got);

    /* sendrecv with a different size each way: rank r sends n + r floats,
     * so the send and the receive are cut into different numbers of chunks. */
    mine = inputs(c, rank, n + rank);
    got = filled(c, n + prev, -99);
    dist_sendrecv(mine, next, got, prev);
    expect(c, "sendrecv", n, got, want_input, &from_prev);
    tensor_free(mine);
    tensor_free(got);

    mine = inputs(c, rank, n);
    got = filled(c, n, -99);
    dist_request *s = dist_isend(mine, next);
    dist_request *r = dist_irecv(got, prev);
    dist_wait(r);
    dist_wait(s);
    expect(c, "isend/irecv", n, got, want_input, &from_prev);
    tensor_free(mine);
    tensor_free(got);

    /* A blocking send received by an irecv: both cut the same way. */
    mine = filled(c, n, (float)rank);
    got = filled(c, n, -99);
    if (rank % 2 == 0) {
        r = dist_irecv(got, prev);
        dist_send(mine, next);
        dist_wait(r);
    } else {
        s = dist_isend(mine, next);
        dist_recv(got, prev);
        dist_wait(s);
    }
    want_ctx prev_value = {.offset = prev};
    expect(c, "send/irecv", n, got, want_value, &prev_value);
    tensor_free(mine);
    tensor_free(got);
}

/* Chunks of a realistic size (256 Ki floats, 1 MiB; the default is 4 MiB): a tensor of 3 chunks and 7
 * floats through all-reduce (every op), reduce-scatter and all-gather. On a
 * GPU this is where the copies are large enough to overlap. Under
 * AddressSanitizer the same 3 chunks and 7 floats at 16 Ki floats a chunk:
 * the chunk boundaries it watches are the same, with a sixteenth of the
 * (instrumented) copying. */
#if defined(__SANITIZE_ADDRESS__)
enum { BIG_CHUNK = 1 << 14, BIG = 3 * BIG_CHUNK + 7 };
#else
enum { BIG_CHUNK = 1 << 18, BIG = 3 * BIG_CHUNK + 7 };
#endif

static void big_sizes(checker *c, int world) {
    lx_stage_set_chunk(BIG_CHUNK);
    for (int k = 0; k < 4; k++) {
        want_ctx w = {.op = OPS[k], .world = world};
        tensor *t = inputs(c, c->rank, BIG);
        dist_all_reduce(t, OPS[k]);
        expect(c, "big all_reduce", BIG, t, want_reduce, &w);
        tensor_free(t);
    }
    int64_t piece = BIG / world;
    tensor *in = inputs(c, c->rank, piece * world);
    tensor *out = filled(c, piece, -99);
    dist_reduce_scatter(out, in, DIST_SUM);
    want_ctx mine = {.op = DIST_SUM, .world = world, .offset = (int)(c->rank * piece)};
    expect(c, "big reduce_scatter", piece, out, want_reduce, &mine);
    tensor_free(in);
    tensor_free(out);
    want_ctx gathered = {.n = piece};
    in = inputs(c, c->rank, piece);
    out = filled(c, piece * world, -99);
    dist_all_gather(out, in);
    expect(c, "big all_gather", piece, out, want_gathered, &gathered);
    tensor_free(in);
    tensor_free(out);
    lx_stage_set_chunk(0);
}

static void exercise(int rank, int world, void *p) {
    const staged_args *a = p;
    char path[300];
    snprintf(path, sizeof path, "%s/%s_w%d_r%d.txt", a->dir, a->group, world, rank);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    checker c = {.f = f, .rank = rank, .dev = get_device(rank)};
    if (a->direct) lx_stage_set_direct(1);
    int64_t before = lx_stage_chunks_run(), ipc_before = lx_ipc_steps_run();
    for (int s = 0; s < N_SIZES; s++)
        one_size(&c, world, SIZES[s]);
    int64_t chunks = lx_stage_chunks_run() - before;
    fprintf(f, "ipc %lld path %d\n", (long long)(lx_ipc_steps_run() - ipc_before), lx_ipc_active());
    int small_cases = c.cases;
    big_sizes(&c, world);
    fprintf(f, "big %d\n", c.cases - small_cases);
    if (a->direct) lx_stage_set_direct(0);
    c.cases = small_cases;
#ifdef LECTERN_CUDA
    if (c.dev >= 0) { /* what this pool rank made on the GPU, in its whole life so far */
        tensor *x = randn(4, 4, c.dev);
        tensor *y = matmul(x, x); /* cuBLAS: its handle */
        tensor_free(y);
        tensor_free(x);
        int stagings = 0, handles = lx_cuda_made(&stagings);
        fprintf(f, "made %d %d\n", handles, stagings);
    }
#endif
    int gpus = gpu_count();
    fprintf(f, "cases %d chunks %lld device %d backend %s gpus %d\n", c.cases, (long long)chunks, c.dev, dist_backend(),
            gpus);
    fclose(f);
}

/* ---------------- the parent's side ---------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The pipeline steps rank `rank` of `world` must have run: one per chunk of
 * every blocking call (the async forms do not go through the pipeline). */
static int64_t chunks_expected(int world, int rank) {
    int64_t cg = CHUNK / world ? CHUNK / world : 1; /* per-rank chunk of the world_size-piece calls */
    int64_t total = 0;
    int prev = (rank + world - 1) % world;
    for (int s = 0; s < N_SIZES; s++) {
        int64_t n = SIZES[s];
        total += 4 * ceil_div(n, CHUNK); /* all_reduce */
        total += 4 * ceil_div(n, CHUNK); /* reduce */
        total += 4 * ceil_div(n, cg);    /* reduce_scatter */
        total += ceil_div(n, CHUNK);     /* broadcast */
        total += 3 * ceil_div(n, cg);    /* all_gather, scatter, gather */
        if (world < 2) continue;
        total += 2 * ceil_div(n, CHUNK); /* send + recv */
        int64_t longer = n + rank > n + prev ? n + rank : n + prev;
        total += ceil_div(longer, CHUNK); /* sendrecv */
        total += ceil_div(n, CHUNK);      /* the blocking half of send/irecv */
    }
    return total;
}

/* The protocol's steps (shared_ipc.c) rank `rank` of `world` must have run:
 * one round per chunk of every collective, async ones included (they run
 * at the call), and one per non-empty message on each side. */
static int64_t ipc_steps_expected(int world, int rank) {
    int64_t cg = CHUNK / world ? CHUNK / world : 1;
    int64_t total = 0;
    int prev = (rank + world - 1) % world;
    for (int s = 0; s < N_SIZES; s++) {
        int64_t n = SIZES[s];
        total += 4 * 3 * ceil_div(n, CHUNK); /* all_reduce, reduce, all_reduce_async */
        total += 4 * 2 * ceil_div(n, cg);    /* reduce_scatter, reduce_scatter_async */
        total += 2 * ceil_div(n, CHUNK);     /* broadcast, broadcast_async */
        total += 4 * ceil_div(n, cg);        /* all_gather, all_gather_async, scatter, gather */
        if (world < 2) continue;
        total += (n + rank > 0) + (n + prev > 0); /* sendrecv: n + rank floats out, n + prev in */
        if (n > 0) total += 3 * 2;                /* send/recv, isend/irecv, send/irecv: one out, one in */
    }
    return total;
}

static int cases_expected(int world, int rank) {
    int per_size = 4 * 5 + 5 + (rank == world - 1 ? 1 : 0) + (world >= 2 ? 4 : 0);
    return per_size * N_SIZES;
}

/* Reads rank r's file of world `world`; fails on a FAIL line or counts that
 * are not what they must be. */
/* want_ipc: 1 the results must have come through the shared-GPU protocol,
 * 0 through the pipeline (or the direct path), -1 either, as the rank says
 * (a GPU whose IPC probe fails stages; the rank's note says why). */
static void check_group(const char *group, int world, int expect_device_mod, int direct, int want_ipc_path) {
    for (int r = 0; r < world; r++) {
        char path[300], line[512];
        snprintf(path, sizeof path, "%s/%s_w%d_r%d.txt", args.dir, group, world, r);
        FILE *f = fopen(path, "r");
        if (!f) fail_msg("%s, world %d: rank %d wrote no results (%s)", group, world, r, path);
        int cases = -1, device = -2, gpus = -1, big = -1, handles = -1, stagings = -1;
        long long chunks = -1, ipc_steps = -1;
        int on_path = -1;
        char backend[16] = "";
        char first_fail[512] = "";
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "FAIL", 4) == 0 && !first_fail[0]) snprintf(first_fail, sizeof first_fail, "%s", line);
            sscanf(line, "big %d", &big);
            sscanf(line, "ipc %lld path %d", &ipc_steps, &on_path);
            sscanf(line, "made %d %d", &handles, &stagings);
            sscanf(line, "cases %d chunks %lld device %d backend %15s gpus %d", &cases, &chunks, &device, backend,
                   &gpus);
        }
        fclose(f);
        if (first_fail[0]) fail_msg("%s, world %d, rank %d: %s", group, world, r, first_fail);
        if (want_ipc_path >= 0 && on_path != want_ipc_path)
            fail_msg("%s, world %d, rank %d: the shared-GPU protocol was %s", group, world, r,
                     on_path == 1 ? "on" : "off");
        int on_ipc = on_path == 1;
        if (cases != cases_expected(world, r))
            fail_msg("%s, world %d, rank %d: %d cases checked, expected %d", group, world, r, cases,
                     cases_expected(world, r));
        if (big != 6) /* 4 all-reduces, a reduce-scatter, an all-gather */
            fail_msg("%s, world %d, rank %d: %d checks of real chunk sizes, expected 6", group, world, r, big);
        /* The direct path hands whole buffers to Open MPI: no pipeline step. */
        long long want_chunks = direct || on_ipc ? 0 : (long long)chunks_expected(world, r);
        if (chunks != want_chunks)
            fail_msg("%s, world %d, rank %d: the staging pipeline ran %lld chunks, expected %lld", group, world, r,
                     chunks, want_chunks);
        /* On the protocol every result came through it; elsewhere it never ran. */
        long long want_ipc = on_ipc ? (long long)ipc_steps_expected(world, r) : 0;
        if (ipc_steps != want_ipc)
            fail_msg("%s, world %d, rank %d: the shared-GPU protocol ran %lld steps, expected %lld", group, world, r,
                     ipc_steps, want_ipc);
        if (strcmp(backend, "mpi") != 0)
            fail_msg("%s, world %d, rank %d: dist_backend() is '%s'", group, world, r, backend);
        /* On a GPU: the pool rank made one cuBLAS handle and one set of
         * staging streams in its life, however many spawns it ran (the
         * spawns of 2, 3 and 4 ranks run on the same pool of 4). */
        if (expect_device_mod > 0 && (handles != 1 || stagings != 1))
            fail_msg("%s, world %d, rank %d: the rank has made %d cuBLAS handles and %d sets of staging streams "
                     "so far; once each is expected (kept from one spawn to the next)",
                     group, world, r, handles, stagings);
        int want_device = expect_device_mod > 0 ? r % expect_device_mod : -1;
        if (device != want_device)
            fail_msg("%s, world %d, rank %d: get_device() gave %d, expected %d", group, world, r, device, want_device);
    }
}

static const char *spawn_reason(int id) {
    cJSON *entry = cJSON_GetArrayItem(lx_trace_spawns(), id);
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "reason"));
}

static int host_first_spawn = -1, gpu_first_spawn = -1;
/* After the GPU spawns: does nvidia-smi list this (the lecture) process as
 * one holding a CUDA context? -1 when nvidia-smi could not say. The spawn
 * read the GPUs' compute mode here; that must not have made a context, or
 * an exclusive-process GPU would be taken from the ranks by the asking. */
static int parent_listed = -1;

static void ask_nvidia_smi(void) {
    FILE *p = popen("nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null", "r");
    if (!p) return;
    char line[64];
    int listed = 0, lines = 0;
    while (fgets(line, sizeof line, p)) {
        lines++;
        if (atoi(line) == (int)getpid()) listed = 1;
    }
    if (pclose(p) == 0 && lines > 0) parent_listed = listed; /* the ranks hold contexts: some lines */
}

/* The spawns of worlds 1 to 4 from `first_spawn` on: each spawn's note
 * says `hook` (the path under test ran), and every case of the group `name`
 * (run with the direct path's code or the protocol's) is right. */
static void check_host_worlds(int first_spawn, const char *hook, const char *name, int direct, int ipc) {
    for (int w = 1; w <= 4; w++) {
        const char *reason = spawn_reason(first_spawn + w - 1);
        if (!reason || !strstr(reason, hook))
            fail_msg("world %d: the spawn's note does not say %s ran: %s", w, hook, reason ? reason : "(none)");
        check_group(name, w, 0, direct, ipc);
    }
}

static void test_pipeline_on_host(void **state) {
    (void)state;
    check_host_worlds(host_first_spawn, "staged in chunks: LECTERN_STAGE_TEST", "host", 0, 0);
}

/* The direct path's code (device pointers straight to CUDA-aware Open MPI,
 * AVG divided by the copier) run on host memory: every case again. */
static void test_direct_on_host(void **state) {
    (void)state;
    for (int w = 1; w <= 4; w++)
        check_group("direct", w, 0, 1, 0);
}

/* The shared-GPU protocol (shared_ipc.c) over shared memory, on host
 * tensors: every case again, on 1 to 4 ranks. */
static int ipc_first_spawn = -1;
/* Shared-memory segments of this test's processes (the pool ranks run this
 * binary) still named in /dev/shm after their spawns: the protocol frees or
 * unlinks every one. */
static int ipc_segments_left(char *first, size_t size) {
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int left = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "lectern-ipc-%d-", &pid) != 1) continue;
        char path[64], cmd[512] = "";
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* a process gone: not this test's */
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        cmd[n] = '\0';
        if (!strstr(cmd, "test_comm_staged")) continue;
        if (!left++) snprintf(first, size, "%s", e->d_name);
    }
    closedir(d);
    return left;
}

static void test_protocol_on_host(void **state) {
    (void)state;
    char first[300] = "";
    int left = ipc_segments_left(first, sizeof first);
    if (left) fail_msg("%d shared-memory segments of the protocol left in /dev/shm after the spawns (%s)", left, first);
    check_host_worlds(ipc_first_spawn, "LECTERN_SHARED_IPC_CPU", "ipc", 0, 1);
}

static void test_shared_gpu(void **state) {
    (void)state;
    int gpus = gpu_count();
    if (gpus == 0) {
        printf("skipped: shared-GPU collectives need a GPU, and this machine has none\n");
        skip();
    }
    if (gpus >= 4) {
        printf("skipped: %d GPUs: no spawn of up to 4 ranks shares one\n", gpus);
        skip();
    }
    /* Where Open MPI is CUDA-aware the device pointers go straight to it.
     * The first round tries the shared-GPU protocol (CUDA IPC), the second
     * forces the staged path (LECTERN_SHARED_IPC=0). Where the probe fails
     * the first round stages too; LECTERN_TEST_REQUIRE_IPC=1 (gpu-check)
     * makes that a failure. */
    int aware = lx_mpi_cuda_aware_built();
    const char *path = aware ? "CUDA-aware Open MPI" : "Open MPI via host memory";
    const char *require = getenv("LECTERN_TEST_REQUIRE_IPC");
    int want_ipc = require && strcmp(require, "1") == 0 ? 1 : -1;
    int per_round = 4 - gpus;
    for (int round = 0; round < 2; round++)
        for (int w = gpus + 1; w <= 4 && w > gpus; w++) {
            const char *reason = spawn_reason(gpu_first_spawn + round * per_round + w - (gpus + 1));
            char list[64], via[200], want[400];
            if (gpus == 1) snprintf(list, sizeof list, "1 GPU (cuda:0)");
            else snprintf(list, sizeof list, "%d GPUs (cuda:0-%d)", gpus, gpus - 1);
            if (round == 0) snprintf(via, sizeof via, "CUDA IPC on the device (%s where its probe fails)", path);
            else snprintf(via, sizeof via, "%s", path);
            snprintf(want, sizeof want, "%d ranks share %s; collectives through %s", w, list, via);
            if (!reason || strcmp(reason, want) != 0)
                fail_msg("world %d: the spawn's note is '%s', expected '%s'", w, reason ? reason : "(none)", want);
            check_group(round == 0 ? "gpu" : "gpustaged", w, gpus, aware, round == 0 ? want_ipc : 0);
        }
    if (parent_listed < 0)
        printf("(nvidia-smi could not list the processes on the GPU: the parent's context not checked)\n");
    else if (parent_listed) fail_msg("the lecture process holds a CUDA context after choosing the backend");
}

/* ---- lx_choose_backend on given facts ---- */

static lx_backend choose(int world, int gpus, int mode, int parent, const char *forced, int nccl, int hostfile,
                         int stage_test, char *reason, size_t size) {
    char *r = NULL;
    lx_backend b = lx_choose_backend(world, gpus, mode, parent, forced, nccl, hostfile, stage_test, 0, 0, &r);
    snprintf(reason, size, "%s", r);
    free(r);
    return b;
}

static void test_choice(void **state) {
    (void)state;
    char why[300];
    assert_int_equal(choose(4, 1, 0, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_SHARED);
    assert_string_equal(why, "4 ranks share 1 GPU (cuda:0); collectives through Open MPI via host memory");
    assert_int_equal(choose(3, 2, 0, 0, "", 1, 0, 0, why, sizeof why), LX_BACKEND_SHARED);
    assert_string_equal(why, "3 ranks share 2 GPUs (cuda:0-1); collectives through Open MPI via host memory");
    assert_int_equal(choose(1, 1, 0, 1, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_NCCL);
    assert_int_equal(choose(2, 4, 0, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_NCCL);
    /* No NCCL in the build: GPUs still compute, Open MPI carries the data. */
    assert_int_equal(choose(2, 2, 0, 0, NULL, 0, 0, 0, why, sizeof why), LX_BACKEND_SHARED);
    assert_non_null(strstr(why, "this build has no NCCL"));
    /* Exclusive-process: sharing would fail in a rank; one rank per GPU is
     * fine unless the lecture process holds the GPU itself. */
    assert_int_equal(choose(4, 1, 3, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_MPI);
    assert_non_null(strstr(why, "exclusive-process compute mode"));
    assert_int_equal(choose(1, 1, 3, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_NCCL);
    assert_int_equal(choose(1, 1, 3, 1, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_MPI);
    assert_non_null(strstr(why, "the lecture process holds it already"));
    assert_int_equal(choose(2, 1, 2, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_MPI);
    assert_non_null(strstr(why, "prohibited compute mode"));
    assert_int_equal(choose(4, 0, 0, 0, NULL, 1, 0, 0, why, sizeof why), LX_BACKEND_MPI);
    assert_string_equal(why, "4 ranks, 0 GPUs: Open MPI on host memory");
    /* Forced: the CPU path even with a GPU. */
    assert_int_equal(choose(4, 1, 0, 0, "mpi", 1, 0, 0, why, sizeof why), LX_BACKEND_MPI);
    assert_non_null(strstr(why, "LECTERN_BACKEND=mpi"));
    /* Ranks on other hosts cannot share this host's GPU. */
    assert_int_equal(choose(4, 1, 0, 0, NULL, 1, 1, 0, why, sizeof why), LX_BACKEND_MPI);
    /* The test hook turns only the CPU path into the staged one. */
    assert_int_equal(choose(4, 1, 0, 0, "mpi", 1, 0, 1, why, sizeof why), LX_BACKEND_STAGED_HOST);
    assert_int_equal(choose(4, 0, 0, 0, NULL, 0, 0, 1, why, sizeof why), LX_BACKEND_STAGED_HOST);
    assert_int_equal(choose(4, 1, 0, 0, NULL, 1, 0, 1, why, sizeof why), LX_BACKEND_SHARED);
    /* CUDA-aware Open MPI: the device pointers go straight, and the note says so. */
    char *r = NULL;
    assert_int_equal(lx_choose_backend(4, 1, 0, 0, NULL, 1, 0, 0, 1, 0, &r), LX_BACKEND_SHARED_CUDA_AWARE);
    assert_string_equal(r, "4 ranks share 1 GPU (cuda:0); collectives through CUDA-aware Open MPI");
    free(r);
    /* NCCL built but not loadable (-1): the GPUs still compute, and the
     * note says NCCL could not be loaded (the caller adds why). */
    assert_int_equal(choose(2, 2, 0, 0, NULL, -1, 0, 0, why, sizeof why), LX_BACKEND_SHARED);
    assert_non_null(strstr(why, "(NCCL could not be loaded)"));
    assert_int_equal(choose(1, 1, 0, 0, NULL, -1, 0, 0, why, sizeof why), LX_BACKEND_SHARED);
    /* The emulator: only when forced to NCCL, with or without GPUs or an NCCL. */
    r = NULL;
    assert_int_equal(lx_choose_backend(4, 0, 0, 0, "nccl", 0, 0, 0, 0, 1, &r), LX_BACKEND_NCCL_EMULATED);
    assert_non_null(strstr(r, "NCCL emulator"));
    free(r);
    r = NULL;
    assert_int_equal(lx_choose_backend(4, 0, 0, 0, NULL, 0, 0, 0, 0, 1, &r), LX_BACKEND_MPI);
    free(r);
    r = NULL;
    assert_int_equal(lx_choose_backend(2, 0, 0, 0, "mpi", 1, 0, 0, 0, 1, &r), LX_BACKEND_MPI);
    free(r);
}

static void body(void) {
    host_first_spawn = cJSON_GetArraySize(lx_trace_spawns());
    snprintf(args.group, sizeof args.group, "host");
    setenv("LECTERN_STAGE_TEST", "1", 1);
    setenv("LECTERN_BACKEND", "mpi", 1); /* the CPU path, also on a GPU machine */
    for (int w = 1; w <= 4; w++)
        spawn(exercise, w, &args, sizeof args);
    snprintf(args.group, sizeof args.group, "direct");
    args.direct = 1;
    for (int w = 1; w <= 4; w++)
        spawn(exercise, w, &args, sizeof args);
    args.direct = 0;
    ipc_first_spawn = cJSON_GetArraySize(lx_trace_spawns());
    snprintf(args.group, sizeof args.group, "ipc");
    setenv("LECTERN_SHARED_IPC_CPU", "1", 1);
    for (int w = 1; w <= 4; w++)
        spawn(exercise, w, &args, sizeof args);
    unsetenv("LECTERN_SHARED_IPC_CPU");
    unsetenv("LECTERN_STAGE_TEST");
    unsetenv("LECTERN_BACKEND");
    int gpus = gpu_count();
    if (gpus > 0) {
        gpu_first_spawn = cJSON_GetArraySize(lx_trace_spawns());
        snprintf(args.group, sizeof args.group, "gpu");
        for (int w = gpus + 1; w <= 4; w++)
            spawn(exercise, w, &args, sizeof args);
        snprintf(args.group, sizeof args.group, "gpustaged");
        setenv("LECTERN_SHARED_IPC", "0", 1);
        for (int w = gpus + 1; w <= 4; w++)
            spawn(exercise, w, &args, sizeof args);
        unsetenv("LECTERN_SHARED_IPC");
        ask_nvidia_smi(); /* while the pool ranks still hold theirs */
    }
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_pipeline_on_host), cmocka_unit_test(test_direct_on_host),
            cmocka_unit_test(test_protocol_on_host), cmocka_unit_test(test_shared_gpu),
            cmocka_unit_test(test_choice),
    };
    failures += cmocka_run_group_tests_name("comm staged", tests, NULL, NULL);
}

int main(int argc, char **argv) {
    /* Read by the ranks when the pool starts (at the first spawn): set first. */
    setenv("LECTERN_STAGE_CHUNK", "5", 1);
    unsetenv("LECTERN_BACKEND");
    int rc = run_test_lecture(argc, argv, body, args.dir, sizeof args.dir, "test_comm_staged");
    return failures || rc ? 1 : 0;
}
