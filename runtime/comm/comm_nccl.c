/*
 * comm_nccl.c: the collectives on NCCL, on device memory, one GPU per rank.
 *
 * Everything here reaches NCCL and the GPU's streams and events through
 * one table (nccl_api.h): the real library (nccl_library.c, loaded with
 * dlopen at the first NCCL spawn), or an emulator on the CPU with NCCL's
 * ordering rules at their strictest (nccl_emu.c). So this file, the
 * backend's whole logic, runs in `make test` on a machine without a GPU
 * (LECTERN_NCCL_EMULATE=1 with LECTERN_BACKEND=nccl), on host tensors.
 *
 * Start-up is NCCL's usual bootstrap over MPI: rank 0 makes a unique id,
 * MPI_Bcast over the spawn's communicator gives it to every rank, and each
 * calls ncclCommInitRank. NCCL's start-up is slow (about a second), and
 * pool ranks serve many spawns: the communicators, with their streams, are
 * made at the first spawn of each world size and kept for the next ones.
 *
 * One rule makes the ordering right: every operation is queued at its own
 * call, on a stream that one communicator alone uses, and nothing is held
 * back. NCCL runs a communicator's operations in the order they were
 * queued, and a send ends only when its receive runs; so two operations on
 * one communicator can wait for each other across ranks in ways MPI's
 * rules never make them (a rank's send queued ahead of its receive, while
 * its peer does the same: the ring deadlock). The communicators are cut
 * so that NCCL's order is exactly the order MPI promises, and no more:
 *
 *   - the collectives of the world, and of each group (dist_new_group),
 *     run on a communicator and stream of their own: ranks make them in the
 *     same order, as MPI asks too;
 *   - point-to-point runs on a communicator of two ranks per *ordered pair*
 *     (sends from a to b only; torch also gives point-to-point its own
 *     communicators), with a stream each: the k-th send from a to b meets
 *     b's k-th receive from a, MPI's non-overtaking rule, and nothing else
 *     is in their way. A rank holds 2 (N - 1) of them for N ranks.
 *
 * With that, a send or receive is queued at its call, a request completes
 * on its own (an event behind it), and no host wait (an agreement check,
 * a collective, a barrier, a timer) can stand between a send and its
 * issue. Every program MPI completes with a send that returns once its
 * receive is posted (lectern's rule on every backend: comm_agree.c)
 * completes here: tests/comm/test_nccl_emu.py runs them on the emulator.
 *
 * Ordering with the tensors. Tensor kernels run on the compute stream
 * (CUDA's default stream). Each call makes its operation's stream wait for
 * what the compute stream has queued so far (an event), so a send reads the
 * final values and a receive does not overwrite what a kernel still reads.
 * A blocking call waits for its event on the host; a *_async call or an
 * isend returns with the event recorded, and dist_wait waits for it, so
 * matmuls queued in between overlap the transfer.
 *
 * Waiting. The host never blocks inside NCCL or CUDA: every wait polls an
 * event, and NCCL's asynchronous errors; the library calls that block on
 * other ranks (making and destroying a communicator) run on a helper
 * thread the host polls. A wait gives up only when no rank of the spawn
 * has made progress for LECTERN_TIMEOUT seconds, the parent's rule
 * (spawn_watch.c), and one second later than the parent, whose report names
 * every rank's line; the communicators are then aborted (ncclCommAbort),
 * so that no kernel is left spinning, and the rank stops naming whom it
 * waited for.
 *
 * What this rests on that no emulator and no single GPU can show: that
 * NCCL runs kernels of several communicators of one GPU at the same time
 * (point-to-point beside a collective, as torch also assumes); docs/gpu.md.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm/comm_calls.h"
#include "comm/nccl_api.h"
#include "trace/trace.h"
#include "ranks/ranks.h"
#include "tensor/tensor.h"

static const lx_nccl_api *api; /* the current spawn's: the library's or the emulator's */

/* ---- checks: the library's own words, and where ---- */

static void __attribute__((noreturn)) nccl_failed(int rc, const char *file, int line, const char *expr) {
    const char *said = api->last_error(NULL);
    char *msg = lx_fmt("%s%s%s (NCCL_DEBUG=WARN prints NCCL's own account)", api->error_string(rc),
                       said && *said ? "; NCCL said: " : "", said && *said ? said : "");
    lx_backend_error("NCCL", msg, file, line, expr);
}

#define NCCL_TRY(call)                                                                \
    do {                                                                              \
        int nccl_rc_ = (call);                                                        \
        if (nccl_rc_ != LX_NCCL_OK) nccl_failed(nccl_rc_, __FILE__, __LINE__, #call); \
    } while (0)

#define DEVICE_TRY(call)                                                                                               \
    do {                                                                                                               \
        int device_rc_ = (call);                                                                                       \
        if (device_rc_ != LX_DEVICE_OK)                                                                                \
            lx_backend_error(api->emulated ? "NCCL emulator" : "CUDA", api->device_error_string(device_rc_), __FILE__, \
                             __LINE__, #call);                                                                         \
    } while (0)

/* ---- what a world size's first spawn makes, for the next spawns of that size ---- */

/* A communicator and the stream that it alone uses. */
typedef struct lane {
    lx_nccl_comm comm;
    lx_nccl_stream stream;
} lane;

typedef struct nccl_world {
    int made, device;
    const lx_nccl_api *api; /* the table that made it */
    lane world;             /* the world's collectives */
    /* Point to point: to[p] carries this rank's sends to p, from[p] p's
     * sends to this rank (two ranks each: the sender is rank 0 of it). */
    lane to[LECTERN_MAX_WORLD], from[LECTERN_MAX_WORLD];
    lx_nccl_event at_call, ended;       /* the compute stream's position at a call; a blocking call's end */
    lane *pairs[2 * LECTERN_MAX_WORLD]; /* the pair lanes in the order they were made: the same on every rank */
    int n_pairs;
    float *scratch; /* the barrier's float, and the pairs' first message */
} nccl_world;

static nccl_world worlds[LECTERN_MAX_WORLD + 1];
static nccl_world *w; /* this spawn's */
static lane *cur;     /* where the collectives go: &w->world, or a group's (use_group) */

/* A group's communicator and stream (dist_new_group), kept in a list so that
 * an abort reaches them too. */
typedef struct nccl_group {
    lane lane;
    struct nccl_group *next;
} nccl_group;
static nccl_group *groups;

/* A request: the event behind its operation, and where it ran. */
typedef struct request {
    lx_nccl_event done;
    lane *lane;
    int peer; /* -1: a collective */
} request;

/* ---- waiting, bounded by the spawn's progress ---- */

/* Seconds without progress after which a wait gives up: LECTERN_TIMEOUT (a
 * bad value was refused by the parent), plus one, so that the parent,
 * which watches the same progress and names every rank's line, speaks first. */
static double wait_limit(void) {
    const char *s = getenv("LECTERN_TIMEOUT");
    double t = s && *s ? strtod(s, NULL) : 0;
    return (t > 0 ? t : 120.0) + 1.0;
}

/* Since when nothing has moved: the board's progress (lx_spawn_progress),
 * or, for a rank without a board, the wait's own start. */
typedef struct watch {
    double since, limit;
    unsigned sum;
    int have_board;
} watch;

static watch watch_start(void) {
    watch t = {now_seconds(), wait_limit(), 0, 0};
    int working;
    t.have_board = lx_spawn_progress(&t.sum, &working) == 0;
    return t;
}

/* 1 when nothing has moved for the limit. */
static int stuck(watch *t) {
    double now = now_seconds();
    unsigned sum;
    int working;
    if (t->have_board && lx_spawn_progress(&sum, &working) == 0 && (sum != t->sum || working)) {
        t->sum = sum;
        t->since = now;
    }
    return now - t->since > t->limit;
}

/* Spin for the first 2 ms, so a small collective's wait costs no more than
 * a cudaStreamSynchronize would (a latency lecture_08 measures); then 50 us
 * naps, so a long wait does not hold a core. */
static void pause_after(double started) {
    if (now_seconds() - started > 0.002) {
        struct timespec pause = {0, 50 * 1000};
        nanosleep(&pause, NULL);
    }
}

static const char *whom(int peer, char *buf, size_t n) {
    if (peer < 0) snprintf(buf, n, "the other ranks (a collective)");
    else snprintf(buf, n, "rank %d", peer);
    return buf;
}

static void abort_all(void) {
    for (nccl_group *g = groups; g; g = g->next)
        (void)api->comm_abort(g->lane.comm);
    for (int i = 0; i < w->n_pairs; i++)
        (void)api->comm_abort(w->pairs[i]->comm);
    (void)api->comm_abort(w->world.comm);
}

/* The error NCCL found after a call returned (a peer lost), on the lane's
 * communicator or the world's: LX_NCCL_OK when none. */
static int async_error(const lane *l) {
    int a = LX_NCCL_OK, b = LX_NCCL_OK;
    if (l && l->comm) NCCL_TRY(api->comm_async_error(l->comm, &a));
    NCCL_TRY(api->comm_async_error(w->world.comm, &b));
    if (a != LX_NCCL_OK && a != LX_NCCL_IN_PROGRESS) return a;
    if (b != LX_NCCL_OK && b != LX_NCCL_IN_PROGRESS) return b;
    return LX_NCCL_OK;
}

/* The host waits for `ev`, polling: an error NCCL reports, or no progress
 * anywhere for the limit, aborts the communicators and stops the rank with
 * the peer's name. */
static void wait_event(lx_nccl_event ev, const char *what, int peer, const lane *l) {
    double started = now_seconds();
    watch t = watch_start();
    char who[64];
    for (;;) {
        int q = api->event_query(ev);
        if (q == LX_DEVICE_OK) return;
        if (q != LX_DEVICE_NOT_READY) DEVICE_TRY(q);
        int err = async_error(l);
        if (err != LX_NCCL_OK) {
            const char *said = api->last_error(l ? l->comm : NULL);
            abort_all();
            lx_fatal("%s waited for %s, and NCCL reported: %s%s%s (a rank lost?); its communicators were aborted", what,
                     whom(peer, who, sizeof who), api->error_string(err), said && *said ? ": " : "",
                     said && *said ? said : "");
        }
        if (stuck(&t)) {
            abort_all();
            lx_fatal("%s waited for %s while no rank made progress for %g s (LECTERN_TIMEOUT, plus one); its NCCL "
                     "communicators were aborted",
                     what, whom(peer, who, sizeof who), t.limit);
        }
        pause_after(started);
    }
}

/* Everything queued on `l` so far has ended (the host waits). */
static void drain(lane *l, const char *what) {
    DEVICE_TRY(api->event_record(w->ended, l->stream));
    wait_event(w->ended, what, -1, l);
}

/* A library call that blocks until other ranks make it too (making or
 * destroying a communicator): run on a helper thread, so the host can
 * watch the spawn's progress meanwhile, as every wait here does. */
typedef struct blocking_call {
    int (*fn)(struct blocking_call *);
    const lx_nccl_api *api;
    int device, rc;
    lx_nccl_comm comm, *out;
    int nranks, rank, color, key;
    lx_nccl_id id;
    volatile int finished;
} blocking_call;

static void *run_blocking(void *arg) {
    blocking_call *c = arg;
    int rc = c->device >= 0 ? c->api->set_device(c->device) : LX_DEVICE_OK;
    c->rc = rc == LX_DEVICE_OK ? c->fn(c) : LX_NCCL_SYSTEM_ERROR;
    __atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int call_init(blocking_call *c) { return c->api->comm_init_rank(c->out, c->nranks, &c->id, c->rank); }
static int call_split(blocking_call *c) { return c->api->comm_split(c->comm, c->color, c->key, c->out); }
static int call_destroy(blocking_call *c) { return c->api->comm_destroy(c->comm); }

static int bounded(blocking_call *c, const char *what) {
    c->api = api;
    c->device = api->emulated ? -1 : w->device; /* (the pool rank leaving is outside any spawn) */
    pthread_t thread;
    if (pthread_create(&thread, NULL, run_blocking, c) != 0) lx_fatal("cannot start a thread for %s", what);
    double started = now_seconds();
    watch t = watch_start();
    while (!__atomic_load_n(&c->finished, __ATOMIC_ACQUIRE)) {
        if (stuck(&t))
            lx_fatal("%s waited for the other ranks while no rank made progress for %g s (LECTERN_TIMEOUT, plus one)",
                     what, t.limit);
        pause_after(started);
    }
    pthread_join(thread, NULL);
    return c->rc;
}

static void destroy_comm(lx_nccl_comm comm) {
    if (!comm) return;
    blocking_call c = {.fn = call_destroy, .comm = comm};
    NCCL_TRY(bounded(&c, "ncclCommDestroy"));
}

static lx_nccl_comm split(lx_nccl_comm parent, int color, int key, const char *what) {
    lx_nccl_comm out = NULL;
    blocking_call c = {.fn = call_split, .comm = parent, .color = color, .key = key, .out = &out};
    NCCL_TRY(bounded(&c, what));
    return out;
}

/* ---- queueing an operation ---- */

/* Another library (or the lecture) may have made a different GPU current on
 * this thread: every entry point selects the rank's own first. */
static void own_device(void) {
    if (!api->emulated) DEVICE_TRY(api->set_device(lx_the_world.device));
}

/* The lane's stream waits for the tensor work queued so far. */
static void begin(lane *l) {
    own_device();
    DEVICE_TRY(api->event_record(w->at_call, NULL));
    DEVICE_TRY(api->stream_wait_event(l->stream, w->at_call));
}

/* A blocking call: the host waits for what was just queued on `l`; then
 * the compute stream is ordered after it too (a no-op once the host has
 * seen it end, and the emulator's compute stream is the host). */
static void finish(lane *l, const char *what, int peer) {
    drain(l, what);
    DEVICE_TRY(api->stream_wait_event(NULL, w->ended));
}

/* A request for what was just queued on `l`. */
static request *queued_on(lane *l, int peer) {
    request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->lane = l;
    r->peer = peer;
    DEVICE_TRY(api->event_create(&r->done));
    DEVICE_TRY(api->event_record(r->done, l->stream));
    return r;
}

/* The request's transfer is done, for the host and the compute stream.
 * Frees the request. */
static void complete(request *r, const char *what) {
    own_device();
    wait_event(r->done, what, r->peer, r->lane);
    DEVICE_TRY(api->stream_wait_event(NULL, r->done));
    DEVICE_TRY(api->event_destroy(r->done));
    free(r);
}

/* ---- the call's elements ----
 *
 * A call's buffers hold elements of its tensors' dtype (lx_current_dtype:
 * fp32, bf16 or fp16, whatever the float pointers say), and NCCL is told
 * that type: counts are in elements, and the pieces of a scatter, gather or
 * all-to-all are found by the element's size, not by float arithmetic.
 * Reductions on 16-bit types are NCCL's: fp32 arithmetic rounded to the type
 * once per step of its algorithm; AVG is ncclAvg (nccl_api.h). */
static dtype dt(void) { return lx_current_dtype(); }

/* Piece `index` (of `count` elements each) of a buffer. */
static const void *piece(const void *base, size_t index, size_t count) {
    return (const char *)base + index * count * dtype_size(dt());
}
static void *piece_out(void *base, size_t index, size_t count) { return (void *)piece(base, index, count); }

/* A send or receive, queued now on its ordered pair's lane. */
static request *p2p(int is_send, const float *buf, size_t count, int peer) {
    lane *l = is_send ? &w->to[peer] : &w->from[peer];
    begin(l);
    if (is_send) NCCL_TRY(api->send(buf, count, dt(), 1, l->comm, l->stream));
    else NCCL_TRY(api->recv((float *)buf, count, dt(), 0, l->comm, l->stream));
    return queued_on(l, peer);
}

/* ---- the operations ---- */

static void op_barrier(void) {
    begin(cur);
    NCCL_TRY(api->all_reduce(w->scratch, w->scratch, 1, DTYPE_F32, DIST_SUM, cur->comm, cur->stream));
    finish(cur, lx_calls[LX_BARRIER].name, -1);
}

static void op_all_reduce(float *buf, size_t count, dist_op op) {
    begin(cur);
    NCCL_TRY(api->all_reduce(buf, buf, count, dt(), op, cur->comm, cur->stream));
    finish(cur, lx_calls[LX_ALL_REDUCE].name, -1);
}

static void op_reduce(float *buf, size_t count, int root, dist_op op) {
    begin(cur);
    NCCL_TRY(api->reduce(buf, buf, count, dt(), op, root, cur->comm, cur->stream));
    finish(cur, lx_calls[LX_REDUCE].name, -1);
}

static void op_broadcast(float *buf, size_t count, int root) {
    begin(cur);
    NCCL_TRY(api->broadcast(buf, buf, count, dt(), root, cur->comm, cur->stream));
    finish(cur, lx_calls[LX_BROADCAST].name, -1);
}

static void op_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    begin(cur);
    NCCL_TRY(api->reduce_scatter(in, out, count, dt(), op, cur->comm, cur->stream));
    finish(cur, lx_calls[LX_REDUCE_SCATTER].name, -1);
}

static void op_all_gather(float *out, const float *in, size_t count) {
    begin(cur);
    NCCL_TRY(api->all_gather(in, out, count, dt(), cur->comm, cur->stream));
    finish(cur, lx_calls[LX_ALL_GATHER].name, -1);
}

/* NCCL has no scatter or gather: the root sends (receives) one chunk per
 * rank in a group on the collectives' communicator, and copies its own. */
static void op_scatter(float *out, const float *in, size_t count, int root) {
    int me = lx_the_world.rank;
    begin(cur);
    NCCL_TRY(api->group_start());
    if (me == root) {
        for (int r = 0; r < lx_the_world.size; r++)
            if (r != root) NCCL_TRY(api->send(piece(in, (size_t)r, count), count, dt(), r, cur->comm, cur->stream));
    } else {
        NCCL_TRY(api->recv(out, count, dt(), root, cur->comm, cur->stream));
    }
    NCCL_TRY(api->group_end());
    if (me == root) DEVICE_TRY(api->copy(out, piece(in, (size_t)root, count), count * dtype_size(dt()), cur->stream));
    finish(cur, lx_calls[LX_SCATTER].name, -1);
}

static void op_gather(float *out, const float *in, size_t count, int root) {
    int me = lx_the_world.rank;
    begin(cur);
    NCCL_TRY(api->group_start());
    if (me == root) {
        for (int r = 0; r < lx_the_world.size; r++)
            if (r != root)
                NCCL_TRY(api->recv(piece_out(out, (size_t)r, count), count, dt(), r, cur->comm, cur->stream));
    } else {
        NCCL_TRY(api->send(in, count, dt(), root, cur->comm, cur->stream));
    }
    NCCL_TRY(api->group_end());
    if (me == root)
        DEVICE_TRY(api->copy(piece_out(out, (size_t)root, count), in, count * dtype_size(dt()), cur->stream));
    finish(cur, lx_calls[LX_GATHER].name, -1);
}

/* A blocking send or receive waits for its own operation only. */
static void op_send(const float *buf, size_t count, int peer) {
    complete(p2p(1, buf, count, peer), lx_calls[LX_SEND].name);
}

static void op_recv(float *buf, size_t count, int peer) { complete(p2p(0, buf, count, peer), lx_calls[LX_RECV].name); }

/* Two lanes, both queued before either is waited for: they move together,
 * whatever the ranks' order, with no group needed. */
static void op_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    request *s = p2p(1, send, send_count, dst);
    request *r = p2p(0, recv, recv_count, src);
    complete(s, lx_calls[LX_SENDRECV].name);
    complete(r, lx_calls[LX_SENDRECV].name);
}

static void *op_isend(const float *buf, size_t count, int peer) { return p2p(1, buf, count, peer); }

static void *op_irecv(float *buf, size_t count, int peer) { return p2p(0, buf, count, peer); }

/* A non-blocking collective: queued after the compute stream's work so far,
 * with an event behind it. The compute stream is not made to wait until
 * dist_wait: kernels queued in between (a matmul of the next layer)
 * overlap the transfer. */
static void *op_iall_reduce(float *buf, size_t count, dist_op op) {
    begin(cur);
    NCCL_TRY(api->all_reduce(buf, buf, count, dt(), op, cur->comm, cur->stream));
    return queued_on(cur, -1);
}

static void *op_ibroadcast(float *buf, size_t count, int root) {
    begin(cur);
    NCCL_TRY(api->broadcast(buf, buf, count, dt(), root, cur->comm, cur->stream));
    return queued_on(cur, -1);
}

static void *op_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    begin(cur);
    NCCL_TRY(api->reduce_scatter(in, out, count, dt(), op, cur->comm, cur->stream));
    return queued_on(cur, -1);
}

static void *op_iall_gather(float *out, const float *in, size_t count) {
    begin(cur);
    NCCL_TRY(api->all_gather(in, out, count, dt(), cur->comm, cur->stream));
    return queued_on(cur, -1);
}

/* dist_wait returns with the result in place, as on Open MPI. */
static void op_wait(void *request_) { complete(request_, lx_calls[LX_WAIT].name); }

static int op_test(void *request_) {
    request *r = request_;
    int q = api->event_query(r->done);
    if (q == LX_DEVICE_NOT_READY) return 0;
    DEVICE_TRY(q);
    return 1;
}

/* NCCL has no all-to-all: a send and a receive per rank in one group on the
 * collectives' communicator (the rank's own piece too, which NCCL copies). */
static void queue_all_to_all(float *out, const float *in, size_t count) {
    begin(cur);
    NCCL_TRY(api->group_start());
    for (int r = 0; r < lx_current_size(); r++) {
        NCCL_TRY(api->send(piece(in, (size_t)r, count), count, dt(), r, cur->comm, cur->stream));
        NCCL_TRY(api->recv(piece_out(out, (size_t)r, count), count, dt(), r, cur->comm, cur->stream));
    }
    NCCL_TRY(api->group_end());
}

static void op_all_to_all(float *out, const float *in, size_t count) {
    queue_all_to_all(out, in, count);
    finish(cur, lx_calls[LX_ALL_TO_ALL].name, -1);
}

static void *op_iall_to_all(float *out, const float *in, size_t count) {
    queue_all_to_all(out, in, count);
    return queued_on(cur, -1);
}

/* A group's communicator, split from the world's by every rank at once
 * (colour: the group's first world rank; the groups of one dist_new_group
 * call are disjoint), with a stream of its own: its collectives are ordered
 * among themselves only, as MPI orders a communicator's. */
static void *op_group_new(const dist_group *g) {
    own_device();
    int color = g->ranks[0];
    for (int i = 1; i < g->size; i++)
        if (g->ranks[i] < color) color = g->ranks[i];
    nccl_group *n = calloc(1, sizeof *n);
    if (!n) lx_fatal("out of memory");
    n->lane.comm = split(w->world.comm, color, g->rank, "ncclCommSplit (dist_new_group)");
    DEVICE_TRY(api->stream_create(&n->lane.stream));
    n->next = groups;
    groups = n;
    return n;
}

static void op_group_free(void *backend_group) {
    nccl_group *n = backend_group;
    own_device();
    drain(&n->lane, lx_calls[LX_GROUP_FREE].name);
    nccl_group **p = &groups;
    while (*p != n)
        p = &(*p)->next;
    *p = n->next;
    destroy_comm(n->lane.comm);
    DEVICE_TRY(api->stream_destroy(n->lane.stream));
    free(n);
}

static void op_use_group(const dist_group *g) { cur = g ? &((nccl_group *)g->backend)->lane : &w->world; }

/* Requests never waited for were completed by comm_requests.c before
 * this; every lane is drained (nothing of this spawn is left in flight),
 * and the communicators stay for the next spawn of this size. */
static void op_stop(void) {
    own_device();
    drain(&w->world, "the end of the spawned function");
    for (int i = 0; i < w->n_pairs; i++)
        drain(w->pairs[i], "the end of the spawned function");
}

static const lx_comm_ops nccl_ops = {
        .barrier = op_barrier,
        .all_reduce = op_all_reduce,
        .reduce = op_reduce,
        .broadcast = op_broadcast,
        .reduce_scatter = op_reduce_scatter,
        .all_gather = op_all_gather,
        .scatter = op_scatter,
        .gather = op_gather,
        .send = op_send,
        .recv = op_recv,
        .isend = op_isend,
        .irecv = op_irecv,
        .wait = op_wait,
        .test = op_test,
        .iall_reduce = op_iall_reduce,
        .ibroadcast = op_ibroadcast,
        .ireduce_scatter = op_ireduce_scatter,
        .iall_gather = op_iall_gather,
        .sendrecv = op_sendrecv,
        .all_to_all = op_all_to_all,
        .iall_to_all = op_iall_to_all,
        .group_new = op_group_new,
        .group_free = op_group_free,
        .use_group = op_use_group,
        .stop = op_stop,
};

/* ---- start-up ---- */

/* The rank's GPU, or an error that says which GPU and why, at the spawn()
 * line (no lecture frame of the rank has run yet). */
static void use_device(int rank, int size, int device) {
    int count = gpu_count();
    if (device >= count)
        lx_fatal("rank %d of %d cannot use cuda:%d: its host has %d GPU%s, and NCCL needs one GPU per rank", rank, size,
                 device, count, count == 1 ? "" : "s");
    int rc = api->set_device(device);
    if (rc != LX_DEVICE_OK)
        lx_fatal("rank %d of %d cannot use cuda:%d: %s", rank, size, device, api->device_error_string(rc));
}

/* Rank i's partner in round r of a round robin over m ranks (m even): the
 * circle method, m - 1 rounds in which every rank meets one other, and
 * every pair meets once. */
static int partner(int i, int r, int m) {
    if (i == m - 1) return r;
    if (i == r) return m - 1;
    return ((2 * r - i) % (m - 1) + (m - 1)) % (m - 1);
}

/* The point-to-point lanes. An ncclCommSplit gives each rank one
 * communicator, so the pairs are made in rounds: in each round of a round
 * robin every rank meets one partner (none, with an odd number of ranks),
 * and two splits make that pair's two directions; in each, the sender is
 * rank 0 (key 0). 2 (N - 1) splits for N ranks (2N for N odd).
 *
 * NCCL connects a pair at its first operation, and both ranks must take
 * part, so each new lane carries one float at once, in the same order on
 * every rank (round by round): left to the lecture's first isend, the
 * connection could wait for a peer busy elsewhere. */
static void make_pairs(nccl_world *nw, int rank, int size) {
    int m = size % 2 ? size + 1 : size;
    for (int r = 0; r < m - 1; r++) {
        int p = partner(rank, r, m);
        for (int dir = 0; dir < 2; dir++) {
            int lo = rank < p ? rank : p, hi = rank < p ? p : rank;
            int sender = dir == 0 ? lo : hi;
            int color = p < size ? lo : LX_NCCL_SPLIT_NOCOLOR;
            lx_nccl_comm c = split(nw->world.comm, color, rank == sender ? 0 : 1, "ncclCommSplit (point to point)");
            if (!c) continue;
            lane *l = rank == sender ? &nw->to[p] : &nw->from[p];
            l->comm = c;
            nw->pairs[nw->n_pairs++] = l;
            DEVICE_TRY(api->stream_create(&l->stream));
            if (rank == sender) NCCL_TRY(api->send(nw->scratch, 1, DTYPE_F32, 1, c, l->stream));
            else NCCL_TRY(api->recv(nw->scratch + 1, 1, DTYPE_F32, 0, c, l->stream));
        }
    }
}

static void release_world(nccl_world *x);

static void make_world(nccl_world *nw, int rank, int size, int device) {
    nw->api = api;
    nw->device = device;
    lx_nccl_id id;
    memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_TRY(api->get_unique_id(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, lx_the_world.comm));
    blocking_call c = {.fn = call_init, .out = &nw->world.comm, .nranks = size, .rank = rank, .id = id};
    NCCL_TRY(bounded(&c, "ncclCommInitRank"));
    DEVICE_TRY(api->stream_create(&nw->world.stream));
    DEVICE_TRY(api->event_create(&nw->at_call));
    DEVICE_TRY(api->event_create(&nw->ended));
    DEVICE_TRY(api->alloc((void **)&nw->scratch, 2 * sizeof(float)));
    DEVICE_TRY(api->zero(nw->scratch, 2 * sizeof(float)));
    nw->made = 1;
    if (size > 1) make_pairs(nw, rank, size);
}

const lx_comm_ops *lx_comm_nccl_start(int emulated) {
    int rank = lx_the_world.rank, size = lx_the_world.size, device = lx_the_world.device;
    if (emulated) {
        api = lx_nccl_emulator();
    } else {
        char why[512];
        api = lx_nccl_library(why, sizeof why);
        if (!api) lx_fatal("rank %d of %d cannot run NCCL: %s", rank, size, why);
        use_device(rank, size, device);
        /* The runtime's kernels loaded now: a lazily loaded module's first
         * launch can wait for kernels in flight, NCCL's among them (docs/gpu.md). */
        lx_cuda_preload_kernels(device);
    }
    w = &worlds[size];
    if (w->made && (w->api != api || w->device != device)) release_world(w);
    if (!w->made) {
        make_world(w, rank, size, device);
        drain(&w->world, "making the ranks' NCCL communicators");
        for (int i = 0; i < w->n_pairs; i++)
            drain(w->pairs[i], "connecting the ranks' NCCL communicators");
    }
    cur = &w->world;
    groups = NULL;
    return &nccl_ops;
}

static void release_lane(lane *l) {
    destroy_comm(l->comm);
    if (l->stream) DEVICE_TRY(api->stream_destroy(l->stream));
    *l = (lane){NULL, NULL};
}

/* Every rank of the world releases its communicators at the same point (the
 * pool rank leaves, or a spawn of this size on another table), in the same
 * order, the order they were made in (round by round, not by peer, which
 * would differ between the two ranks of a pair): ncclCommDestroy may wait
 * for the communicator's other ranks. */
static void release_world(nccl_world *x) {
    const lx_nccl_api *keep = api;
    nccl_world *keep_w = w;
    api = x->api;
    w = x;
    if (!api->emulated) DEVICE_TRY(api->set_device(x->device));
    for (int i = 0; i < x->n_pairs; i++)
        release_lane(x->pairs[i]);
    release_lane(&x->world);
    DEVICE_TRY(api->release(x->scratch));
    DEVICE_TRY(api->event_destroy(x->at_call));
    DEVICE_TRY(api->event_destroy(x->ended));
    memset(x, 0, sizeof *x);
    api = keep;
    w = keep_w;
}

void lx_comm_nccl_release(void) {
    for (int s = 0; s <= LECTERN_MAX_WORLD; s++)
        if (worlds[s].made) release_world(&worlds[s]);
}

int lx_nccl_usable(char *why, size_t size) { return lx_nccl_library(why, size) != NULL; }
