/*
 * comm_nccl.c: the collectives on NCCL, on device memory, one GPU per rank.
 *
 * Start-up is NCCL's usual bootstrap over MPI: rank 0 makes a unique id,
 * MPI_Bcast over the spawn's communicator gives it to every rank, and each
 * calls ncclCommInitRank. Across machines the same code gives a
 * communicator over the network. NCCL's start-up is slow (about a second),
 * and pool ranks serve many spawns: the communicator, with its stream, is
 * made at the first spawn of each world size and kept for the next ones.
 *
 * Ordering. The tensor code queues its kernels on the default stream. NCCL
 * work goes to streams of our own, made to wait (an event) for what the
 * default stream has queued, so a collective sees the tensor's final values.
 * A blocking call then waits for its stream (torch's async_op=False); a
 * *_async call records an event behind its work and returns, and dist_wait
 * makes the compute stream (and the host) wait for that event, so matmuls
 * queued in between overlap the transfer.
 *
 * Point-to-point has a communicator (ncclCommSplit of the collectives' one)
 * and a stream of its own, as torch's ProcessGroupNCCL does: a send in
 * flight never holds up a collective, so `isend; all_reduce; wait` on one
 * rank against `all_reduce; recv` on its peer completes, as on Open MPI.
 * When each send or receive is issued, and grouped with which, is decided
 * by p2p_plan.c (a pure function of the calls, tested on a CPU); each
 * request carries one event recorded behind its group, and nothing here
 * waits on the host until a wait or a blocking call.
 *
 * Errors and lost peers. Every wait polls its event and
 * ncclCommGetAsyncError; an error NCCL reports, or LECTERN_TIMEOUT seconds
 * without completion, aborts the communicators (ncclCommAbort) and stops
 * the rank naming the peer it waited for.
 *
 * None of this has run on a GPU where it was written (docs/gpu.md).
 */
#ifdef LECTERN_CUDA

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/p2p_plan.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

static ncclComm_t comm, p2p_comm;
/* `comm` is what the collectives run on: the world's (world_comm), or a
 * group's (ncclCommSplit, dist_new_group) between use_group(g) and
 * use_group(NULL). cur_size: its size. */
static ncclComm_t world_comm;
static int cur_size = 1;
static cudaStream_t stream, p2p_stream;
static cudaEvent_t queued; /* "the default stream got this far" */
static float *scratch;     /* one float for the barrier */

/* What a world size's first spawn made, for the next spawns of that size. */
typedef struct nccl_world {
    int made;
    int device;
    ncclComm_t comm, p2p_comm;
    cudaStream_t stream, p2p_stream;
    cudaEvent_t queued;
    float *scratch;
} nccl_world;

static nccl_world worlds[LECTERN_MAX_WORLD + 1];

/* A request. A send or receive is held in the open group (p2p_plan.c) until
 * it is issued; `at_call` marks how far the compute stream had got at the
 * call, so the operation waits for that work and no later work. */
typedef struct request {
    int is_collective;
    int is_send, peer;
    float *buf;
    size_t count;
    cudaEvent_t at_call, done;
    int issued;
    struct request *next_open;
} request;

static lx_p2p_plan plan;
static request *open_first, *open_last;

static ncclRedOp_t nccl_op(dist_op op) {
    switch (op) {
    case DIST_AVG: return ncclAvg;
    case DIST_MIN: return ncclMin;
    case DIST_MAX: return ncclMax;
    default: return ncclSum;
    }
}

/* Another library (or the lecture) may have made a different GPU current on
 * this thread: every entry point selects the rank's own first. */
static void own_device(void) { CUDA_CHECK(cudaSetDevice(lx_the_world.device)); }

/* Seconds a wait may last: LECTERN_TIMEOUT, as the parent's deadlock watch
 * (a bad value was refused there, before any rank started). */
static double wait_limit(void) {
    const char *s = getenv("LECTERN_TIMEOUT");
    double t = s && *s ? strtod(s, NULL) : 0;
    return t > 0 ? t : 120.0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *whom(int peer, char *buf, size_t n) {
    if (peer < 0) snprintf(buf, n, "the other ranks (a collective)");
    else snprintf(buf, n, "rank %d", peer);
    return buf;
}

/* The host waits for `ev`, polling: an error NCCL reports on either
 * communicator (a peer lost, a network failure), or no completion in
 * LECTERN_TIMEOUT seconds, aborts both communicators, so that no kernel is
 * left spinning on the GPU, and stops the rank with the peer's name. */
static void wait_event(cudaEvent_t ev, const char *what, int peer) {
    double start = now_s(), limit = wait_limit();
    char who[64];
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        ncclResult_t a = ncclSuccess, b = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &a));
        NCCL_CHECK(ncclCommGetAsyncError(p2p_comm, &b));
        ncclResult_t err = a != ncclSuccess && a != ncclInProgress ? a : b;
        int failed = err != ncclSuccess && err != ncclInProgress;
        if (failed || now_s() - start > limit) {
            (void)ncclCommAbort(p2p_comm);
            (void)ncclCommAbort(comm);
            worlds[lx_the_world.size].made = 0; /* the next spawn makes new ones */
            if (failed)
                lx_fatal("rank %d: %s waited for %s, and NCCL reported: %s (a rank lost?); its communicators "
                         "were aborted",
                         lx_the_world.rank, what, whom(peer, who, sizeof who), ncclGetErrorString(err));
            lx_fatal("rank %d: %s waited %g s (LECTERN_TIMEOUT) for %s; its NCCL communicators were aborted",
                     lx_the_world.rank, what, limit, whom(peer, who, sizeof who));
        }
        /* Spin for the first 2 ms, so a small collective's wait costs no more
         * than cudaStreamSynchronize's would (a latency lecture_08 measures);
         * then 50 us naps, so a long wait does not hold a core. */
        if (now_s() - start > 0.002) {
            struct timespec pause = {0, 50 * 1000};
            nanosleep(&pause, NULL);
        }
    }
}

/* The collectives' stream waits for the tensor kernels queued so far. */
static void begin(void) {
    own_device();
    CUDA_CHECK(cudaEventRecord(queued, 0));
    CUDA_CHECK(cudaStreamWaitEvent(stream, queued, 0));
}

/* A blocking collective: the host waits for its stream (through an event,
 * so the wait can see NCCL's errors). */
static void finish(const char *what) {
    CUDA_CHECK(cudaEventRecord(queued, stream));
    wait_event(queued, what, -1);
}

/* Issues the open group on the point-to-point communicator: its stream
 * first waits for what the compute stream had queued at each call, then
 * the group, then one event per request behind it. No host wait. */
static void issue_open(void) {
    if (!open_first) return;
    for (request *r = open_first; r; r = r->next_open)
        CUDA_CHECK(cudaStreamWaitEvent(p2p_stream, r->at_call, 0));
    NCCL_CHECK(ncclGroupStart());
    for (request *r = open_first; r; r = r->next_open) {
        if (r->is_send) NCCL_CHECK(ncclSend(r->buf, r->count, ncclFloat, r->peer, p2p_comm, p2p_stream));
        else NCCL_CHECK(ncclRecv(r->buf, r->count, ncclFloat, r->peer, p2p_comm, p2p_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (request *r = open_first, *next; r; r = next) {
        next = r->next_open;
        CUDA_CHECK(cudaEventRecord(r->done, p2p_stream));
        r->issued = 1;
        r->next_open = NULL;
    }
    open_first = open_last = NULL;
}

/* Any call but a send or receive: the open group goes first. */
static void other_call(void) {
    own_device();
    lx_p2p_step s = lx_p2p_plan_call(&plan, LX_P2P_OTHER, -1, -1);
    if (s.issue_before) issue_open();
}

static request *new_p2p(int is_send, const float *buf, size_t count, int peer) {
    request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->is_send = is_send;
    r->buf = (float *)buf;
    r->count = count;
    r->peer = peer;
    CUDA_CHECK(cudaEventCreateWithFlags(&r->at_call, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(r->at_call, 0));
    if (open_last) open_last->next_open = r;
    else open_first = r;
    open_last = r;
    return r;
}

/* A send or receive call, as the plan says: `a` and `b` (a sendrecv's
 * receive, else NULL) are made and joined to the open group. */
static void p2p_call(lx_p2p_call call, int peer, int peer2, request **a, request **b, const float *abuf, size_t acount,
                     float *bbuf, size_t bcount) {
    own_device();
    lx_p2p_step s = lx_p2p_plan_call(&plan, call, peer, peer2);
    if (s.issue_before) issue_open();
    int send = call == LX_P2P_ISEND || call == LX_P2P_SEND || call == LX_P2P_SENDRECV;
    *a = new_p2p(send, abuf, acount, peer);
    if (b) *b = call == LX_P2P_SENDRECV ? new_p2p(0, bbuf, bcount, peer2) : NULL;
    if (s.issue_after) issue_open();
}

/* The request's transfer is done: later kernels on the compute stream see
 * it, and so does the host. Frees the request. */
static void finish_p2p(request *r, const char *what) {
    CUDA_CHECK(cudaStreamWaitEvent(0, r->done, 0));
    wait_event(r->done, what, r->peer);
    CUDA_CHECK(cudaEventDestroy(r->at_call));
    CUDA_CHECK(cudaEventDestroy(r->done));
    free(r);
}

static void op_barrier(void) {
    other_call();
    begin();
    NCCL_CHECK(ncclAllReduce(scratch, scratch, 1, ncclFloat, ncclSum, comm, stream));
    finish("dist_barrier");
}

static void op_all_reduce(float *buf, size_t count, dist_op op) {
    other_call();
    begin();
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), comm, stream));
    finish("dist_all_reduce");
}

static void op_reduce(float *buf, size_t count, int root, dist_op op) {
    other_call();
    begin();
    NCCL_CHECK(ncclReduce(buf, buf, count, ncclFloat, nccl_op(op), root, comm, stream));
    finish("dist_reduce");
}

static void op_broadcast(float *buf, size_t count, int root) {
    other_call();
    begin();
    NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm, stream));
    finish("dist_broadcast");
}

static void op_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    other_call();
    begin();
    NCCL_CHECK(ncclReduceScatter(in, out, count, ncclFloat, nccl_op(op), comm, stream));
    finish("dist_reduce_scatter");
}

static void op_all_gather(float *out, const float *in, size_t count) {
    other_call();
    begin();
    NCCL_CHECK(ncclAllGather(in, out, count, ncclFloat, comm, stream));
    finish("dist_all_gather");
}

/* NCCL has no scatter or gather: the root sends (receives) one chunk per
 * rank in a group, and copies its own chunk. */
static void op_scatter(float *out, const float *in, size_t count, int root) {
    other_call();
    begin();
    NCCL_CHECK(ncclGroupStart());
    if (lx_the_world.rank == root) {
        for (int r = 0; r < lx_the_world.size; r++) {
            if (r == root) continue;
            NCCL_CHECK(ncclSend(in + (size_t)r * count, count, ncclFloat, r, comm, stream));
        }
    } else {
        NCCL_CHECK(ncclRecv(out, count, ncclFloat, root, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    if (lx_the_world.rank == root)
        CUDA_CHECK(cudaMemcpyAsync(out, in + (size_t)root * count, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                   stream));
    finish("dist_scatter");
}

static void op_gather(float *out, const float *in, size_t count, int root) {
    other_call();
    begin();
    NCCL_CHECK(ncclGroupStart());
    if (lx_the_world.rank == root) {
        for (int r = 0; r < lx_the_world.size; r++) {
            if (r == root) continue;
            NCCL_CHECK(ncclRecv(out + (size_t)r * count, count, ncclFloat, r, comm, stream));
        }
    } else {
        NCCL_CHECK(ncclSend(in, count, ncclFloat, root, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    if (lx_the_world.rank == root)
        CUDA_CHECK(cudaMemcpyAsync(out + (size_t)root * count, in, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                   stream));
    finish("dist_gather");
}

/* A blocking send or receive joins the open group, issues it, and waits
 * for its own operation only. */
static void op_send(const float *buf, size_t count, int peer) {
    request *r;
    p2p_call(LX_P2P_SEND, peer, -1, &r, NULL, buf, count, NULL, 0);
    finish_p2p(r, "dist_send");
}

static void op_recv(float *buf, size_t count, int peer) {
    request *r;
    p2p_call(LX_P2P_RECV, peer, -1, &r, NULL, buf, count, NULL, 0);
    finish_p2p(r, "dist_recv");
}

/* Both directions in one group: they move together, whatever the ranks' order. */
static void op_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    request *s, *r;
    p2p_call(LX_P2P_SENDRECV, dst, src, &s, &r, send, send_count, recv, recv_count);
    finish_p2p(s, "dist_sendrecv");
    finish_p2p(r, "dist_sendrecv");
}

static void *op_isend(const float *buf, size_t count, int peer) {
    request *r;
    p2p_call(LX_P2P_ISEND, peer, -1, &r, NULL, buf, count, NULL, 0);
    return r;
}

static void *op_irecv(float *buf, size_t count, int peer) {
    request *r;
    p2p_call(LX_P2P_IRECV, peer, -1, &r, NULL, (const float *)buf, count, NULL, 0);
    return r;
}

/* A non-blocking collective: queued on the collectives' stream after the
 * compute stream's work so far (begin), with an event recorded behind it.
 * The compute stream is not made to wait until dist_wait: kernels queued in
 * between (a matmul of the next layer) overlap the transfer. */
static void *issued(void) {
    request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->is_collective = 1;
    r->peer = -1;
    CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(r->done, stream));
    return r;
}

static void *op_iall_reduce(float *buf, size_t count, dist_op op) {
    other_call();
    begin();
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), comm, stream));
    return issued();
}

static void *op_ibroadcast(float *buf, size_t count, int root) {
    other_call();
    begin();
    NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm, stream));
    return issued();
}

static void *op_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    other_call();
    begin();
    NCCL_CHECK(ncclReduceScatter(in, out, count, ncclFloat, nccl_op(op), comm, stream));
    return issued();
}

static void *op_iall_gather(float *out, const float *in, size_t count) {
    other_call();
    begin();
    NCCL_CHECK(ncclAllGather(in, out, count, ncclFloat, comm, stream));
    return issued();
}

/* The compute stream waits for the request (later kernels see its result),
 * and so does the host: dist_wait returns with the result in place, as on
 * Open MPI. A send or receive still in the open group is issued first. */
static void op_wait(void *request_) {
    request *r = request_;
    other_call();
    if (r->is_collective) {
        CUDA_CHECK(cudaStreamWaitEvent(0, r->done, 0));
        wait_event(r->done, "dist_wait", -1);
        CUDA_CHECK(cudaEventDestroy(r->done));
        free(r);
        return;
    }
    finish_p2p(r, "dist_wait");
}

/* Done when the event behind the transfer has passed; a send or receive
 * still in the open group is issued first (as any call but a send or
 * receive would), or it would never complete. */
static int op_test(void *request_) {
    request *r = request_;
    other_call();
    if (!r->is_collective && !r->issued) issue_open();
    cudaError_t q = cudaEventQuery(r->done);
    if (q == cudaErrorNotReady) return 0;
    CUDA_CHECK(q);
    return 1;
}

/* NCCL has no all-to-all: a send and a receive per rank in one group
 * (the rank's own piece too, which NCCL copies). */
static void queue_all_to_all(float *out, const float *in, size_t count) {
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < cur_size; r++) {
        NCCL_CHECK(ncclSend(in + (size_t)r * count, count, ncclFloat, r, comm, stream));
        NCCL_CHECK(ncclRecv(out + (size_t)r * count, count, ncclFloat, r, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

static void op_all_to_all(float *out, const float *in, size_t count) {
    other_call();
    begin();
    queue_all_to_all(out, in, count);
    finish("dist_all_to_all");
}

static void *op_iall_to_all(float *out, const float *in, size_t count) {
    other_call();
    begin();
    queue_all_to_all(out, in, count);
    return issued();
}

/* A group's communicator: split from the world's by every rank at once,
 * colour the group's first world rank (the groups of one dist_new_group
 * call are disjoint), key the rank's place in the group. */
static void *op_group_new(const dist_group *g) {
    own_device();
    int color = g->ranks[0];
    for (int i = 1; i < g->size; i++)
        if (g->ranks[i] < color) color = g->ranks[i];
    ncclComm_t *c = malloc(sizeof *c);
    if (!c) lx_fatal("out of memory");
    NCCL_CHECK(ncclCommSplit(world_comm, color, g->rank, c, NULL));
    return c;
}

static void op_group_free(void *backend_group) {
    ncclComm_t *c = backend_group;
    own_device();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    NCCL_CHECK(ncclCommDestroy(*c));
    free(c);
}

static void op_use_group(const dist_group *g) {
    comm = g ? *(ncclComm_t *)g->backend : world_comm;
    cur_size = g ? g->size : lx_the_world.size;
}

static void op_stop(void) {
    /* Requests never waited for were completed by comm.c before this; the
     * communicators stay for the next spawn of this size. */
    other_call();
    CUDA_CHECK(cudaStreamSynchronize(p2p_stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    plan = (lx_p2p_plan){0};
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

/* The rank's GPU, or an error that says which GPU and why, at the spawn()
 * line (no lecture frame of the rank has run yet). */
static void use_device(int rank, int size, int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        count = 0;
    }
    if (device >= count)
        lx_fatal("rank %d of %d cannot use cuda:%d: its host has %d GPU%s, and NCCL needs one GPU per rank", rank, size,
                 device, count, count == 1 ? "" : "s");
    cudaError_t rc = cudaSetDevice(device);
    if (rc != cudaSuccess) lx_fatal("rank %d of %d cannot use cuda:%d: %s", rank, size, device, cudaGetErrorString(rc));
}

/* NCCL connects two ranks for point-to-point at their first send or
 * receive, and both must take part. Left to the lecture's first isend, a
 * rank could wait there for a peer busy in a collective: every pair is
 * connected here instead, while every rank is at the same place (one float
 * each way, one group). */
static void connect_every_pair(nccl_world *w, int rank, int size) {
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size; peer++) {
        if (peer == rank) continue;
        NCCL_CHECK(ncclSend(w->scratch, 1, ncclFloat, peer, w->p2p_comm, w->p2p_stream));
        NCCL_CHECK(ncclRecv(w->scratch + 1, 1, ncclFloat, peer, w->p2p_comm, w->p2p_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaStreamSynchronize(w->p2p_stream));
}

const lx_comm_ops *lx_comm_nccl_start(void) {
    int rank = lx_the_world.rank, size = lx_the_world.size, device = lx_the_world.device;
    MPI_Comm spawn_comm = lx_the_world.comm;
    use_device(rank, size, device);
    nccl_world *w = &worlds[size];
    if (!w->made || w->device != device) {
        ncclUniqueId id;
        if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, spawn_comm));
        NCCL_CHECK(ncclCommInitRank(&w->comm, size, id, rank));
        /* Same ranks, same order, a communicator of its own. */
        NCCL_CHECK(ncclCommSplit(w->comm, 0, rank, &w->p2p_comm, NULL));
        CUDA_CHECK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&w->p2p_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&w->queued, cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc((void **)&w->scratch, 2 * sizeof(float)));
        CUDA_CHECK(cudaMemset(w->scratch, 0, 2 * sizeof(float)));
        if (size > 1) connect_every_pair(w, rank, size);
        w->device = device;
        w->made = 1;
    }
    comm = world_comm = w->comm;
    cur_size = size;
    p2p_comm = w->p2p_comm;
    stream = w->stream;
    p2p_stream = w->p2p_stream;
    queued = w->queued;
    scratch = w->scratch;
    plan = (lx_p2p_plan){0};
    open_first = open_last = NULL;
    return &nccl_ops;
}

void lx_comm_nccl_release(void) {
    for (int s = 0; s <= LECTERN_MAX_WORLD; s++) {
        nccl_world *w = &worlds[s];
        if (!w->made) continue;
        CUDA_CHECK(cudaSetDevice(w->device));
        NCCL_CHECK(ncclCommDestroy(w->p2p_comm));
        NCCL_CHECK(ncclCommDestroy(w->comm));
        CUDA_CHECK(cudaFree(w->scratch));
        CUDA_CHECK(cudaEventDestroy(w->queued));
        CUDA_CHECK(cudaStreamDestroy(w->p2p_stream));
        CUDA_CHECK(cudaStreamDestroy(w->stream));
        w->made = 0;
    }
}

#endif /* LECTERN_CUDA */
