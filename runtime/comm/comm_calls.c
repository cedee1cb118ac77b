/*
 * comm_calls.c: one descriptor per public dist_* call, and the checks of
 * their arguments.
 *
 * The table below is the one place a call's name is written: its kind (how
 * the ranks meet), the checks it makes, the name of its root or peer, and
 * the number the agreement check compares. The checks name the lecture's
 * mistake against its intent (shapes, ranks, where the tensor lives) before
 * any rank is waited for. The files of the calls (comm_calls.h) use both.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_calls.h"
#include "ranks/ranks.h"

enum {
    TENSOR = LX_CHECK_TENSOR,
    PIECES = LX_CHECK_PIECES,
    ROOT = LX_CHECK_ROOT,
    PEER = LX_CHECK_PEER,
    OP = LX_CHECK_OP,
    GROUP = LX_CHECK_GROUP,
    ASYNC = LX_ASYNC,
};

/* A collective's agreement number is its place in the table; other calls
 * are not compared as collectives (-1). */
#define COLLECTIVE(id, name, checks, peer) [id] = {name, LX_COLLECTIVE, checks, peer, id}
#define IN_GROUP(id, name, checks, peer) [id] = {name, LX_GROUP_COLLECTIVE, checks, peer, id}
#define OTHER(id, name, kind, checks, peer) [id] = {name, kind, checks, peer, -1}

/* clang-format off */
const lx_call lx_calls[LX_CALLS] = {
    COLLECTIVE(LX_BARRIER,                  "dist_barrier",                 0,                             NULL),
    COLLECTIVE(LX_ALL_REDUCE,               "dist_all_reduce",              TENSOR | OP,                   NULL),
    COLLECTIVE(LX_REDUCE,                   "dist_reduce",                  TENSOR | ROOT | OP,            "dst"),
    COLLECTIVE(LX_BROADCAST,                "dist_broadcast",               TENSOR | ROOT,                 "src"),
    COLLECTIVE(LX_REDUCE_SCATTER,           "dist_reduce_scatter",          PIECES | OP,                   NULL),
    COLLECTIVE(LX_ALL_GATHER,               "dist_all_gather",              PIECES,                        NULL),
    COLLECTIVE(LX_SCATTER,                  "dist_scatter",                 ROOT | PIECES,                 "src"),
    COLLECTIVE(LX_GATHER,                   "dist_gather",                  ROOT | PIECES,                 "dst"),
    COLLECTIVE(LX_ALL_REDUCE_ASYNC,         "dist_all_reduce_async",        TENSOR | OP | ASYNC,           NULL),
    COLLECTIVE(LX_BROADCAST_ASYNC,          "dist_broadcast_async",         TENSOR | ROOT | ASYNC,         "src"),
    COLLECTIVE(LX_REDUCE_SCATTER_ASYNC,     "dist_reduce_scatter_async",    PIECES | OP | ASYNC,           NULL),
    COLLECTIVE(LX_ALL_GATHER_ASYNC,         "dist_all_gather_async",        PIECES | ASYNC,                NULL),
    COLLECTIVE(LX_ALL_TO_ALL,               "dist_all_to_all",              PIECES,                        NULL),
    COLLECTIVE(LX_ALL_TO_ALL_ASYNC,         "dist_all_to_all_async",        PIECES | ASYNC,                NULL),
    IN_GROUP(LX_ALL_REDUCE_IN,              "dist_all_reduce_in",           GROUP | TENSOR | OP,           NULL),
    IN_GROUP(LX_REDUCE_SCATTER_IN,          "dist_reduce_scatter_in",       GROUP | PIECES | OP,           NULL),
    IN_GROUP(LX_ALL_GATHER_IN,              "dist_all_gather_in",           GROUP | PIECES,                NULL),
    IN_GROUP(LX_BROADCAST_IN,               "dist_broadcast_in",            GROUP | TENSOR | ROOT,         "src"),
    IN_GROUP(LX_ALL_TO_ALL_IN,              "dist_all_to_all_in",           GROUP | PIECES,                NULL),
    IN_GROUP(LX_ALL_REDUCE_IN_ASYNC,        "dist_all_reduce_in_async",     GROUP | TENSOR | OP | ASYNC,   NULL),
    IN_GROUP(LX_REDUCE_SCATTER_IN_ASYNC,    "dist_reduce_scatter_in_async", GROUP | PIECES | OP | ASYNC,   NULL),
    IN_GROUP(LX_ALL_GATHER_IN_ASYNC,        "dist_all_gather_in_async",     GROUP | PIECES | ASYNC,        NULL),
    IN_GROUP(LX_BROADCAST_IN_ASYNC,         "dist_broadcast_in_async",      GROUP | TENSOR | ROOT | ASYNC, "src"),
    IN_GROUP(LX_ALL_TO_ALL_IN_ASYNC,        "dist_all_to_all_in_async",     GROUP | PIECES | ASYNC,        NULL),
    OTHER(LX_SEND,       "dist_send",       LX_POINT_TO_POINT, TENSOR | PEER,         "dst"),
    OTHER(LX_RECV,       "dist_recv",       LX_POINT_TO_POINT, TENSOR | PEER,         "src"),
    OTHER(LX_SENDRECV,   "dist_sendrecv",   LX_POINT_TO_POINT, TENSOR | PEER,         NULL),
    OTHER(LX_ISEND,      "dist_isend",      LX_POINT_TO_POINT, TENSOR | PEER | ASYNC, "dst"),
    OTHER(LX_IRECV,      "dist_irecv",      LX_POINT_TO_POINT, TENSOR | PEER | ASYNC, "src"),
    OTHER(LX_WAIT,       "dist_wait",       LX_ON_REQUEST,     0,                     NULL),
    OTHER(LX_TEST,       "dist_test",       LX_ON_REQUEST,     0,                     NULL),
    OTHER(LX_NEW_GROUP,  "dist_new_group",  LX_ON_GROUPS,      0,                     NULL),
    OTHER(LX_GROUP_RANK, "dist_group_rank", LX_ON_GROUPS,      GROUP,                 NULL),
    OTHER(LX_GROUP_SIZE, "dist_group_size", LX_ON_GROUPS,      GROUP,                 NULL),
    OTHER(LX_GROUP_FREE, "dist_group_free", LX_ON_GROUPS,      GROUP,                 NULL),
};
/* clang-format on */

/* ---- checks ---- */

void lx_need_rank(const lx_call *c) {
    if (!lx_ops) lx_fatal("%s() outside a spawned function: collectives run inside spawn()", c->name);
}

/* 1 when this spawn's tensors live on GPUs (not on the NCCL emulator: host tensors). */
static int on_device(void) {
    return lx_the_world.backend == LX_BACKEND_NCCL || lx_the_world.backend == LX_BACKEND_SHARED ||
           lx_the_world.backend == LX_BACKEND_SHARED_CUDA_AWARE;
}

static const char *where_name(int device) {
    static char buf[32];
    if (device < 0) return "the CPU";
    snprintf(buf, sizeof buf, "cuda:%d", device);
    return buf;
}

/* What the backends carry: fp32 everywhere; bf16 and fp16 on Open MPI
 * (host memory: an MPI user op adds them in fp32, comm_mpi.c) and on NCCL
 * and its emulator (ncclBfloat16, ncclFloat16: nccl_api.h); fp8 nowhere (no
 * backend here sums it). The shared-GPU paths (staged through host memory,
 * the shared-GPU protocol) do not carry 16-bit tensors yet: refused. */
static void check_dtype(const char *call, const char *what, const tensor *t) {
    if (t->dt == DTYPE_F32) return;
    if (t->dt != DTYPE_BF16 && t->dt != DTYPE_F16)
        lx_fatal("%s(): %s is %s, which no collective here carries: to_dtype(%s, DTYPE_BF16) first (or DTYPE_F32)",
                 call, what, dtype_name(t->dt), what);
    lx_backend b = lx_the_world.backend;
    if (b != LX_BACKEND_MPI && b != LX_BACKEND_NCCL && b != LX_BACKEND_NCCL_EMULATED)
        lx_fatal("%s(): %s is %s; on this spawn's backend (ranks sharing GPUs) the collectives carry fp32 only: "
                 "to_dtype(%s, DTYPE_F32) first",
                 call, what, dtype_name(t->dt), what);
}

size_t lx_check_tensor(const char *call, const char *what, const tensor *t) {
    if (!t) lx_fatal("%s(): %s is NULL", call, what);
    /* A freed tensor, or one a request is still writing into: named, before
     * any rank is waited for. */
    lx_tensor_read(t, call);
    int want_device = on_device();
    if (want_device && t->device < 0)
        lx_fatal("%s(): %s is on the CPU, but this spawn's ranks compute on GPUs (%s): create it on "
                 "get_device(rank)",
                 call, what, lx_the_world.backend == LX_BACKEND_NCCL ? "NCCL" : "shared, Open MPI via host memory");
    if (!want_device && t->device >= 0)
        lx_fatal("%s(): %s is on %s, but this spawn runs %s on host memory: create it on "
                 "get_device(rank) (the CPU here)",
                 call, what, where_name(t->device),
                 lx_the_world.backend == LX_BACKEND_NCCL_EMULATED ? "the NCCL emulator" : "Open MPI");
    if (want_device && t->device != lx_the_world.device)
        lx_fatal("%s(): %s is on cuda:%d, but rank %d's GPU is cuda:%d", call, what, t->device, lx_the_world.rank,
                 lx_the_world.device);
    if (t->numel < 0 || t->numel > INT_MAX)
        lx_fatal("%s(): %s has %lld elements; at most %d per call", call, what, (long long)t->numel, INT_MAX);
    check_dtype(call, what, t);
    lx_use_dtype(t->dt);
    return (size_t)t->numel;
}

void lx_check_same_dtype(const char *call, const char *a_name, const tensor *a, const char *b_name, const tensor *b) {
    if (a->dt != b->dt)
        lx_fatal("%s(): %s is %s but %s is %s: one dtype per call (convert one with to_dtype())", call, a_name,
                 dtype_name(a->dt), b_name, dtype_name(b->dt));
}

void lx_check_peer(const char *call, const char *what, int peer, int allow_self) {
    if (peer < 0 || peer >= lx_the_world.size)
        lx_fatal("%s(): %s %d is not a rank of this world (0 to %d)", call, what, peer, lx_the_world.size - 1);
    if (!allow_self && peer == lx_the_world.rank)
        lx_fatal("%s(): rank %d cannot %s itself", call, lx_the_world.rank,
                 what[0] == 'd' ? "send to" : "receive from");
}

void lx_check_op(const char *call, dist_op op) {
    if (op != DIST_SUM && op != DIST_AVG && op != DIST_MIN && op != DIST_MAX)
        lx_fatal("%s(): unknown reduction op %d (DIST_SUM, DIST_AVG, DIST_MIN or DIST_MAX)", call, (int)op);
}

/* A group's root counts in the group's ranks. */
static void check_group_root(const char *call, const dist_group *g, int src) {
    if (src < 0 || src >= g->size)
        lx_fatal("%s(): src %d is not a rank of group %s (its ranks are 0 to %d, in the list's order)", call, src,
                 g->name, g->size - 1);
}

size_t lx_check_args(const lx_call *c, const dist_group *g, const tensor *t, int peer, dist_op op) {
    size_t n = lx_check_tensor(c->name, "the tensor", t);
    if (c->checks & LX_CHECK_ROOT) {
        if (g) check_group_root(c->name, g, peer);
        else lx_check_peer(c->name, c->peer, peer, 1);
    }
    if (c->checks & LX_CHECK_PEER) lx_check_peer(c->name, c->peer, peer, 0);
    if (c->checks & LX_CHECK_OP) lx_check_op(c->name, op);
    return n;
}

int lx_overlap(const tensor *a, const tensor *b) {
    const char *a0 = a->raw, *b0 = b->raw;
    return a0 < b0 + b->numel * (int64_t)dtype_size(b->dt) && b0 < a0 + a->numel * (int64_t)dtype_size(a->dt);
}

/* Says which elements `inner` shares with `outer`, and the fix: the call
 * writes output while it reads input. A gather's input inside its output
 * is copied out first; a reduce-scatter's output inside its input gets
 * memory of its own. */
static void __attribute__((noreturn)) same_memory(const char *call, const tensor *inner, const tensor *outer) {
    long long first = (long long)(((const char *)inner->raw - (const char *)outer->raw) / (long)dtype_size(inner->dt)),
              last = first + (long long)inner->numel - 1;
    int gather = strstr(call, "gather") != NULL;
    lx_fatal("%s(): output and input are the same memory (%s is elements %lld to %lld of %s): the %s writes output "
             "while it still reads input. %s: tensor *mine = zeros(%lld, 0, get_device(rank)); %s",
             call, gather ? "input" : "output", first, last, gather ? "output" : "input",
             gather ? "gather" : "reduce-scatter", gather ? "Give it a copy" : "Give it an output of its own",
             (long long)inner->numel,
             gather ? "tensor_copy(mine, input); then gather from mine"
                    : "reduce-scatter into mine, then tensor_copy it where it belongs");
}

/* The size the pieces of a call are counted in: the world's, or group g's. */
static int size_of(const dist_group *g) { return g ? g->size : lx_the_world.size; }
static const char *size_word(const dist_group *g) { return g ? "the group's size" : "world_size"; }

size_t lx_check_reduce_scatter(const char *call, const dist_group *g, tensor *output, const tensor *input, dist_op op) {
    size_t out_n = lx_check_tensor(call, "output", output);
    size_t in_n = lx_check_tensor(call, "input", input);
    lx_check_same_dtype(call, "output", output, "input", input);
    lx_check_op(call, op);
    int p = size_of(g);
    if (in_n != out_n * (size_t)p)
        lx_fatal("%s(): input has %zu elements, output %zu: input must be %s (%d) times output", call, in_n, out_n,
                 size_word(g), p);
    /* (empty tensors may both have no memory at all) */
    if (p > 1 && out_n > 0 && lx_overlap(output, input)) same_memory(call, output, input);
    return out_n;
}

size_t lx_check_all_gather(const char *call, const dist_group *g, tensor *output, const tensor *input) {
    size_t out_n = lx_check_tensor(call, "output", output);
    size_t in_n = lx_check_tensor(call, "input", input);
    lx_check_same_dtype(call, "output", output, "input", input);
    int p = size_of(g);
    if (out_n != in_n * (size_t)p)
        lx_fatal("%s(): output has %zu elements, input %zu: output must be %s (%d) times input", call, out_n, in_n,
                 size_word(g), p);
    if (p > 1 && in_n > 0 && lx_overlap(output, input)) same_memory(call, input, output);
    return in_n;
}

size_t lx_check_all_to_all(const char *call, const dist_group *g, tensor *output, const tensor *input) {
    size_t out_n = lx_check_tensor(call, "output", output);
    size_t in_n = lx_check_tensor(call, "input", input);
    lx_check_same_dtype(call, "output", output, "input", input);
    int p = size_of(g);
    if (out_n != in_n)
        lx_fatal("%s(): output has %zu elements, input %zu: they have the same size (%s pieces each)", call, out_n,
                 in_n, size_word(g));
    if (in_n % (size_t)p != 0)
        lx_fatal("%s(): input has %zu elements, which do not split into %s (%d) equal pieces", call, in_n, size_word(g),
                 p);
    if (in_n > 0 && lx_overlap(output, input))
        lx_fatal("%s(): output and input are the same memory: the all-to-all writes output while it still reads "
                 "input. Give it an output of its own: tensor *out = zeros(%zu, 0, get_device(rank))",
                 call, in_n);
    return in_n / (size_t)p;
}

/* ---- around each call that waits ---- */

/* The last call's line and when it was entered, for its message link
 * (comm_stats.c reads them once the backend returns). */
static lx_frame last_site;
static double last_enter;

void lx_call_mark(const call_site *site) {
    last_site = site->n > 0 ? site->frames[site->n - 1] : (lx_frame){0};
    last_enter = lx_elapsed();
}

const lx_frame *lx_call_marked(double *enter) {
    *enter = last_enter;
    return last_site.path ? &last_site : NULL;
}

void lx_call_enter(call_site *site, const char *board, int peer) {
    site->n = lx_stack_capture(site->frames, LX_MAX_FRAMES);
    lx_call_mark(site);
    lx_rank_enter(board, site->frames, site->n, peer);
}

void lx_call_enter_collective(call_site *site, const lx_call *c, size_t count, int op, int root) {
    lx_call_enter(site, c->name, -1);
    lx_agree_collective(c, (int64_t)count, op, root, site->frames, site->n);
}

void lx_call_leave(void) { lx_rank_leave(); }

/* --inspect-collectives: the tensors a collective reads and writes, as
 * inspect(x) would show them, just before it and just after it, named
 * "t (before dist_all_reduce)" after lectern.h's parameter names. */
void lx_call_show(const char *call, const char *what, const char *when, const tensor *t) {
    if (!t || !lx_inspect_collectives()) return;
    char *name = lx_fmt("%s (%s %s)", what, when, call);
    lx_inspect(name, LX_INSPECT_TENSOR, t, 0, 0);
    free(name);
}
