/*
 * comm_stats.c: what this rank communicated, counted where the bytes move.
 *
 * A lecture that claims "ZeRO-3 communicates 1.5 times what DDP does" should
 * be able to measure it, and a homework that asks for a ring built from
 * sends and receives should be able to see that it was. Every collective
 * and point-to-point call goes through the backend's table of operations
 * (lx_comm_ops); lx_comm_stats_wrap() puts a table in front of it that
 * counts each call and passes it on unchanged.
 *
 * Three figures per kind of call (lectern.h, dist_traffic):
 *
 *  - calls: counted here, exact; and the non-blocking collectives whose
 *    wait returned (waited), so that a homework can tell which are in
 *    flight at a moment.
 *  - bytes measured. Point to point: the bytes handed to the transport,
 *    per peer, exact (the agreement check, comm_agree.c, has made sure the
 *    receive is as large as the send). Collectives: the bytes Open MPI's
 *    algorithm sent, per peer, from the library's own counters
 *    (comm_pvars.c), read before and after the call. A non-blocking
 *    collective is read at its start and at the end of its wait; what was
 *    sent in between and is not accounted to another call of this rank is
 *    its own (`accounted` below keeps that sum per peer).
 *  - bytes nominal: what a bandwidth-optimal algorithm sends for the call,
 *    the convention nccl-tests uses for busbw. For p ranks and b bytes:
 *      all-reduce             2 (p - 1) / p * b   (reduce-scatter + all-gather)
 *      reduce-scatter         (p - 1) / p * b_in  (b_in: the whole input)
 *      all-gather             (p - 1) / p * b_out (b_out: the whole output)
 *      broadcast, reduce      b, by every rank but one (a pipelined chain:
 *                             each rank passes the data on once; the last
 *                             link of a broadcast and the root of a reduce
 *                             send nothing)
 *      scatter                (p - 1) pieces at the root, nothing elsewhere
 *      gather                 one piece from every rank but the root
 *      all-to-all             (p - 1) / p * b_in  (all pieces but its own)
 *      send, isend            b;   recv, irecv, barrier: 0
 *    In a group (dist_new_group) p is the group's size.
 *    The same on every machine and backend: a figure to check by hand and
 *    to hold the measured one against.
 *
 * The cost on the hot path: a few additions per call, and for a collective
 * two reads of a world-size array from Open MPI.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_calls.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

static const lx_comm_ops *inner; /* the backend's own table */
static lx_comm_ops counted;      /* the same, counting */

static int64_t calls[DIST_CALL_KINDS], waited[DIST_CALL_KINDS];
static int64_t sent[DIST_CALL_KINDS], received[DIST_CALL_KINDS];
static int64_t sent_to[LECTERN_MAX_WORLD], received_from[LECTERN_MAX_WORLD];
static double nominal[DIST_CALL_KINDS]; /* fractional in the formulas: rounded when read */

/* Open MPI's counters: -1 not decided yet for this spawn, 0 not used, 1 used. */
static int measuring = -1;
/* Per peer: Open MPI's count at this spawn's start, and how much of what it
 * has counted since is accounted to a call of this rank. */
static uint64_t base[LECTERN_MAX_WORLD];
static int64_t accounted[LECTERN_MAX_WORLD];

/* Decided at the first call of a spawn (the backend is known by then):
 * Open MPI carries the collectives of every backend but NCCL. */
static int measure(void) {
    if (measuring < 0) {
        /* The counters are indexed by pool rank (comm_pvars.c): only where
         * that is the spawn's rank can they be put down to its peers. */
        int pool_rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &pool_rank);
        measuring = !lx_backend_is_nccl(lx_the_world.backend) && pool_rank == lx_the_world.rank && lx_pvars_open() &&
                    lx_pvars_read(base, lx_the_world.size);
        memset(accounted, 0, sizeof accounted);
    }
    return measuring;
}

/* What Open MPI has counted since the spawn started, per peer. */
static void library_sent(int64_t *out) {
    uint64_t now[LECTERN_MAX_WORLD];
    if (!lx_pvars_read(now, lx_the_world.size)) {
        memset(out, 0, sizeof(int64_t) * (size_t)lx_the_world.size);
        return;
    }
    for (int q = 0; q < lx_the_world.size; q++)
        out[q] = (int64_t)(now[q] - base[q]);
}

/* ---- point to point: exact here ---- */

/* Bytes per element of the call being made: 4 for fp32, 2 for bf16 and
 * fp16 (counted at the call, where the dtype is the call's). */
static size_t elem_size(void) { return dtype_size(lx_current_dtype()); }

static void p2p_sent(dist_call_kind kind, size_t count, int peer) {
    int64_t b = (int64_t)(count * elem_size());
    sent[kind] += b;
    sent_to[peer] += b;
    accounted[peer] += b; /* Open MPI counts it too: not a collective's */
    nominal[kind] += (double)b;
}

static void p2p_received(dist_call_kind kind, size_t count, int peer) {
    int64_t b = (int64_t)(count * elem_size());
    received[kind] += b;
    received_from[peer] += b;
}

/* ---- collectives: a window around the call ---- */

typedef struct window {
    dist_call_kind kind;
    int64_t start[LECTERN_MAX_WORLD];     /* Open MPI's count at the start */
    int64_t accounted[LECTERN_MAX_WORLD]; /* accounted[] at the start */
} window;

static void open_window(window *w, dist_call_kind kind, double nominal_bytes) {
    calls[kind]++;
    nominal[kind] += nominal_bytes;
    w->kind = kind;
    if (!measure()) return;
    library_sent(w->start);
    memcpy(w->accounted, accounted, sizeof(int64_t) * (size_t)lx_the_world.size);
}

/* What was sent since the window opened and no other call accounts for is
 * this call's. */
static void close_window(const window *w) {
    if (measuring <= 0) return;
    int64_t now[LECTERN_MAX_WORLD];
    library_sent(now);
    for (int q = 0; q < lx_the_world.size; q++) {
        int64_t d = (now[q] - w->start[q]) - (accounted[q] - w->accounted[q]);
        if (d <= 0) continue;
        sent[w->kind] += d;
        sent_to[q] += d;
        accounted[q] += d;
    }
}

/* A non-blocking collective's window stays open until its wait: kept by
 * the backend's request. */
typedef struct open_request {
    void *req;
    window w;
    int p2p; /* a dist_isend / dist_irecv: its bytes were counted at the call, no window to close */
    struct open_request *next;
} open_request;
static open_request *open_requests;

static void *keep_open(void *req, const window *w) {
    open_request *o = malloc(sizeof *o);
    if (!o) lx_fatal("out of memory");
    o->req = req;
    o->w = *w;
    o->p2p = 0;
    o->next = open_requests;
    open_requests = o;
    return req;
}

/* A dist_isend's or dist_irecv's request is kept too, so that its wait
 * counts in waited[] (an order of events a homework reads: a receive
 * posted before a compute and waited for after it); its bytes were counted
 * at the call, exactly, so it has no window. */
static void *keep_p2p(void *req, dist_call_kind kind) {
    window w = {.kind = kind};
    keep_open(req, &w);
    open_requests->p2p = 1;
    return req;
}

/* The formulas' p and rank: the world's, or a group's between
 * lx_use_group(g) and lx_use_group(NULL) (a group call counts as its kind). */
static double share(size_t floats) { /* (p - 1) / p of `floats` floats, in bytes */
    int p = lx_current_size();
    return (double)floats * elem_size() * (p - 1) / p;
}
static double chain(size_t count, int silent_rank) { /* b from every rank but one */
    return lx_current_size() > 1 && lx_current_rank() != silent_rank ? (double)count * elem_size() : 0;
}

/* ---- the twin's record (--twin-record, trace/twin_record.c) and the
 * message links (always, trace/links_record.c) ----
 *
 * Every call passes here, so here each is described once: its kind (as
 * dist_call_name spells it), its size in bytes as nccl-tests counts it
 * (all-gather: the whole output; reduce-scatter, all-to-all, scatter,
 * gather: the whole input or output, p pieces; the rest: the buffer), its
 * root or peer as a world rank, its group, and the clock around it. The
 * link also takes the line that made the call and when it was entered
 * (comm_calls.c marks both before any waiting: a collective's agreement
 * check waits for every rank, and its arrival is before that). */
static double twin_clock(void) { return lx_elapsed(); }

static void record(const lx_twin_call_desc *d) {
    double enter;
    const lx_frame *site = lx_call_marked(&enter);
    if (enter > d->start) enter = d->start; /* a call the comm layer did not mark */
    lx_links_call(d, site, enter);
    if (lx_twin_recording()) lx_twin_call(d);
}

static void twin(dist_call_kind kind, size_t count, int peer, const void *req, double start) {
    const dist_group *g = lx_current_group();
    lx_twin_call_desc d = {.name = dist_call_name(kind),
                           .bytes = (int64_t)(count * elem_size()),
                           .peer = peer >= 0 && g ? g->ranks[peer] : peer,
                           .src = -1,
                           .group_ranks = g ? g->ranks : NULL,
                           .group_size = g ? g->size : 0,
                           .backend_request = req,
                           .start = start,
                           .end = lx_elapsed()};
    record(&d);
}

static void c_barrier(void) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_BARRIER, 0);
    inner->barrier();
    close_window(&w);
    twin(DIST_CALL_BARRIER, 0, -1, NULL, t);
}
static void c_all_reduce(float *buf, size_t count, dist_op op) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_REDUCE, 2 * share(count));
    inner->all_reduce(buf, count, op);
    close_window(&w);
    twin(DIST_CALL_ALL_REDUCE, count, -1, NULL, t);
}
static void c_reduce(float *buf, size_t count, int root, dist_op op) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_REDUCE, chain(count, root));
    inner->reduce(buf, count, root, op);
    close_window(&w);
    twin(DIST_CALL_REDUCE, count, root, NULL, t);
}
static void c_broadcast(float *buf, size_t count, int root) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_BROADCAST, chain(count, (root + lx_current_size() - 1) % lx_current_size()));
    inner->broadcast(buf, count, root);
    close_window(&w);
    twin(DIST_CALL_BROADCAST, count, root, NULL, t);
}
static void c_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_REDUCE_SCATTER, share(count * (size_t)lx_current_size()));
    inner->reduce_scatter(out, in, count, op);
    close_window(&w);
    twin(DIST_CALL_REDUCE_SCATTER, count * (size_t)lx_current_size(), -1, NULL, t);
}
static void c_all_gather(float *out, const float *in, size_t count) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_GATHER, share(count * (size_t)lx_current_size()));
    inner->all_gather(out, in, count);
    close_window(&w);
    twin(DIST_CALL_ALL_GATHER, count * (size_t)lx_current_size(), -1, NULL, t);
}
static void c_scatter(float *out, const float *in, size_t count, int root) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_SCATTER,
                lx_current_rank() == root ? (double)count * elem_size() * (lx_current_size() - 1) : 0);
    inner->scatter(out, in, count, root);
    close_window(&w);
    twin(DIST_CALL_SCATTER, count * (size_t)lx_current_size(), root, NULL, t);
}
static void c_gather(float *out, const float *in, size_t count, int root) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_GATHER, lx_current_rank() == root ? 0 : (double)count * elem_size());
    inner->gather(out, in, count, root);
    close_window(&w);
    twin(DIST_CALL_GATHER, count * (size_t)lx_current_size(), root, NULL, t);
}
static void c_send(const float *buf, size_t count, int peer) {
    double t = twin_clock();
    calls[DIST_CALL_SEND]++;
    p2p_sent(DIST_CALL_SEND, count, peer);
    inner->send(buf, count, peer);
    twin(DIST_CALL_SEND, count, peer, NULL, t);
}
static void c_recv(float *buf, size_t count, int peer) {
    double t = twin_clock();
    calls[DIST_CALL_RECV]++;
    p2p_received(DIST_CALL_RECV, count, peer);
    inner->recv(buf, count, peer);
    twin(DIST_CALL_RECV, count, peer, NULL, t);
}
/* A non-blocking send is counted at its start: the bytes it will hand over
 * are known, whenever they move. */
static void *c_isend(const float *buf, size_t count, int peer) {
    calls[DIST_CALL_SEND]++;
    p2p_sent(DIST_CALL_SEND, count, peer);
    double t = twin_clock();
    void *req = keep_p2p(inner->isend(buf, count, peer), DIST_CALL_SEND);
    twin(DIST_CALL_SEND, count, peer, req, t);
    return req;
}
static void *c_irecv(float *buf, size_t count, int peer) {
    calls[DIST_CALL_RECV]++;
    p2p_received(DIST_CALL_RECV, count, peer);
    double t = twin_clock();
    void *req = keep_p2p(inner->irecv(buf, count, peer), DIST_CALL_RECV);
    twin(DIST_CALL_RECV, count, peer, req, t);
    return req;
}
static void *c_iall_reduce(float *buf, size_t count, dist_op op) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_REDUCE, 2 * share(count));
    void *req = keep_open(inner->iall_reduce(buf, count, op), &w);
    twin(DIST_CALL_ALL_REDUCE, count, -1, req, t);
    return req;
}
static void *c_ibroadcast(float *buf, size_t count, int root) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_BROADCAST, chain(count, (root + lx_current_size() - 1) % lx_current_size()));
    void *req = keep_open(inner->ibroadcast(buf, count, root), &w);
    twin(DIST_CALL_BROADCAST, count, root, req, t);
    return req;
}
static void *c_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_REDUCE_SCATTER, share(count * (size_t)lx_current_size()));
    void *req = keep_open(inner->ireduce_scatter(out, in, count, op), &w);
    twin(DIST_CALL_REDUCE_SCATTER, count * (size_t)lx_current_size(), -1, req, t);
    return req;
}
static void *c_iall_gather(float *out, const float *in, size_t count) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_GATHER, share(count * (size_t)lx_current_size()));
    void *req = keep_open(inner->iall_gather(out, in, count), &w);
    twin(DIST_CALL_ALL_GATHER, count * (size_t)lx_current_size(), -1, req, t);
    return req;
}
static void c_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    calls[DIST_CALL_SENDRECV]++;
    p2p_sent(DIST_CALL_SENDRECV, send_count, dst);
    p2p_received(DIST_CALL_SENDRECV, recv_count, src);
    double t = twin_clock();
    inner->sendrecv(send, send_count, dst, recv, recv_count, src);
    lx_twin_call_desc d = {.name = dist_call_name(DIST_CALL_SENDRECV),
                           .bytes = (int64_t)(send_count * elem_size()),
                           .recv_bytes = (int64_t)(recv_count * elem_size()),
                           .peer = dst,
                           .src = src,
                           .start = t,
                           .end = lx_elapsed()};
    record(&d);
}
static void c_all_to_all(float *out, const float *in, size_t count) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_TO_ALL, share(count * (size_t)lx_current_size()));
    inner->all_to_all(out, in, count);
    close_window(&w);
    twin(DIST_CALL_ALL_TO_ALL, count * (size_t)lx_current_size(), -1, NULL, t);
}
static void *c_iall_to_all(float *out, const float *in, size_t count) {
    double t = twin_clock();
    window w;
    open_window(&w, DIST_CALL_ALL_TO_ALL, share(count * (size_t)lx_current_size()));
    void *req = keep_open(inner->iall_to_all(out, in, count), &w);
    twin(DIST_CALL_ALL_TO_ALL, count * (size_t)lx_current_size(), -1, req, t);
    return req;
}
/* The wait of a non-blocking collective closes its window. */
static void c_wait(void *req) {
    double t = twin_clock();
    inner->wait(req);
    double end = lx_elapsed();
    lx_links_wait(req, end);
    if (lx_twin_recording()) lx_twin_wait(req, t, end);
    for (open_request **p = &open_requests; *p; p = &(*p)->next) {
        if ((*p)->req != req) continue;
        open_request *o = *p;
        *p = o->next;
        if (!o->p2p) close_window(&o->w);
        waited[o->w.kind]++;
        free(o);
        return;
    }
}

const lx_comm_ops *lx_comm_stats_wrap(const lx_comm_ops *ops) {
    inner = ops;
    counted = *ops; /* anything not overridden below passes straight through */
    counted.barrier = c_barrier;
    counted.all_reduce = c_all_reduce;
    counted.reduce = c_reduce;
    counted.broadcast = c_broadcast;
    counted.reduce_scatter = c_reduce_scatter;
    counted.all_gather = c_all_gather;
    counted.scatter = c_scatter;
    counted.gather = c_gather;
    counted.send = c_send;
    counted.recv = c_recv;
    counted.isend = c_isend;
    counted.irecv = c_irecv;
    if (ops->iall_reduce) counted.iall_reduce = c_iall_reduce;
    if (ops->ibroadcast) counted.ibroadcast = c_ibroadcast;
    if (ops->ireduce_scatter) counted.ireduce_scatter = c_ireduce_scatter;
    if (ops->iall_gather) counted.iall_gather = c_iall_gather;
    if (ops->sendrecv) counted.sendrecv = c_sendrecv;
    if (ops->wait) counted.wait = c_wait;
    if (ops->all_to_all) counted.all_to_all = c_all_to_all;
    if (ops->iall_to_all) counted.iall_to_all = c_iall_to_all;
    memset(calls, 0, sizeof calls);
    memset(waited, 0, sizeof waited);
    memset(sent, 0, sizeof sent);
    memset(received, 0, sizeof received);
    memset(sent_to, 0, sizeof sent_to);
    memset(received_from, 0, sizeof received_from);
    memset(nominal, 0, sizeof nominal);
    while (open_requests) { /* a request of the last spawn never waited for */
        open_request *o = open_requests;
        open_requests = o->next;
        free(o);
    }
    measuring = -1;
    return &counted;
}

/* ---- reading ---- */

dist_traffic dist_traffic_now(void) {
    dist_traffic t;
    memset(&t, 0, sizeof t);
    if (!lx_comm_active()) return t;
    memcpy(t.calls, calls, sizeof calls);
    memcpy(t.waited, waited, sizeof waited);
    memcpy(t.bytes_sent, sent, sizeof sent);
    memcpy(t.bytes_received, received, sizeof received);
    memcpy(t.sent_to, sent_to, sizeof sent_to);
    memcpy(t.received_from, received_from, sizeof received_from);
    for (int k = 0; k < DIST_CALL_KINDS; k++)
        t.nominal_sent[k] = (int64_t)llround(nominal[k]);
    t.measured_collectives = measure();
    return t;
}

dist_traffic dist_traffic_since(const dist_traffic *start) {
    dist_traffic t = dist_traffic_now();
    if (!start) {
        lx_error("%s: start is NULL (take it with dist_traffic_now())", __func__);
        return t;
    }
    for (int k = 0; k < DIST_CALL_KINDS; k++) {
        t.calls[k] -= start->calls[k];
        t.waited[k] -= start->waited[k];
        t.bytes_sent[k] -= start->bytes_sent[k];
        t.bytes_received[k] -= start->bytes_received[k];
        t.nominal_sent[k] -= start->nominal_sent[k];
    }
    for (int q = 0; q < LECTERN_MAX_WORLD; q++) {
        t.sent_to[q] -= start->sent_to[q];
        t.received_from[q] -= start->received_from[q];
    }
    return t;
}

const char *dist_call_name(dist_call_kind kind) {
    static const char *const names[DIST_CALL_KINDS] = {"barrier",        "all_reduce", "reduce",   "broadcast",
                                                       "reduce_scatter", "all_gather", "scatter",  "gather",
                                                       "send",           "recv",       "sendrecv", "all_to_all"};
    return kind >= 0 && kind < DIST_CALL_KINDS ? names[kind] : "unknown";
}

static int64_t total(const int64_t *v) {
    int64_t s = 0;
    for (int k = 0; k < DIST_CALL_KINDS; k++)
        s += v[k];
    return s;
}
/* A NULL is a mistake in the lecture: an error step at its line, and 0. */
static const dist_traffic *given(const dist_traffic *t, const char *call) {
    if (!t) lx_error("%s: the traffic is NULL (take it with dist_traffic_now() or dist_traffic_since())", call);
    return t;
}

int64_t dist_traffic_sent(const dist_traffic *t) { return given(t, __func__) ? total(t->bytes_sent) : 0; }
int64_t dist_traffic_nominal(const dist_traffic *t) { return given(t, __func__) ? total(t->nominal_sent) : 0; }
int64_t dist_traffic_calls(const dist_traffic *t) { return given(t, __func__) ? total(t->calls) : 0; }

const char *dist_traffic_text(const dist_traffic *t, char *buf, size_t size) {
    if (!buf) {
        lx_error("%s: buf is NULL (give it room for the text, e.g. char buf[256])", __func__);
        return buf;
    }
    if (!size) return buf;
    buf[0] = 0;
    if (!given(t, __func__)) return buf;
    size_t at = 0;
    for (int k = 0; k < DIST_CALL_KINDS && at < size; k++) {
        if (!t->calls[k]) continue;
        /* snprintf returns what it would have written: past the end, at >= size stops the loop */
        at += (size_t)snprintf(buf + at, size - at, "%s%lld dist_%s call%s", at ? ", " : "", (long long)t->calls[k],
                               dist_call_name((dist_call_kind)k), t->calls[k] == 1 ? "" : "s");
    }
    if (!buf[0]) snprintf(buf, size, "no calls");
    return buf;
}

int64_t dist_bytes_nominal(void) {
    double s = 0;
    for (int k = 0; k < DIST_CALL_KINDS; k++)
        s += nominal[k];
    return lx_comm_active() ? (int64_t)llround(s) : 0;
}
int64_t dist_calls(void) { return lx_comm_active() ? total(calls) : 0; }
