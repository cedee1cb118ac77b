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
 * work goes to a stream of our own, made to wait (an event) for what the
 * default stream has queued, so a collective sees the tensor's final values.
 * A blocking call then waits for its stream (torch's async_op=False); a
 * *_async call records an event behind its work and returns, and dist_wait
 * makes the compute stream (and the host) wait for that event, so matmuls
 * queued in between overlap the transfer (unverified: no GPU where this
 * was written).
 *
 * Point-to-point. Two ranks that both send before they receive deadlock in
 * NCCL once messages outgrow its buffers, unless the sends and receives are
 * issued together in one group. So isend/irecv only queue their operation;
 * the queue is issued as one ncclGroupStart/End block by the first wait, or
 * by a blocking send/recv (which joins the queue first). A request whose
 * group has run is complete, because the group is waited for.
 */
#ifdef LECTERN_CUDA

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>

#include "check.h"
#include "comm/comm.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

static ncclComm_t comm;
static cudaStream_t stream;
static cudaEvent_t queued;        /* "the default stream got this far" */
static float *scratch;            /* one float for the barrier */

/* What a world size's first spawn made, for the next spawns of that size. */
typedef struct nccl_world {
    int made;
    int device;
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t queued;
    float *scratch;
} nccl_world;

static nccl_world worlds[LECTERN_MAX_WORLD + 1];

typedef struct p2p_op {
    int is_collective;            /* 0: this is a queued send or receive */
    int is_send;
    float *buf;
    size_t count;
    int peer;
    int issued;                   /* its group has run and finished */
    struct p2p_op *next;
} p2p_op;

static p2p_op *pending, *pending_tail;

static ncclRedOp_t nccl_op(dist_op op) {
    switch (op) {
    case DIST_AVG: return ncclAvg;
    case DIST_MIN: return ncclMin;
    case DIST_MAX: return ncclMax;
    default: return ncclSum;
    }
}

/* Our stream waits for the tensor kernels queued so far. */
static void begin(void) {
    CUDA_CHECK(cudaEventRecord(queued, 0));
    CUDA_CHECK(cudaStreamWaitEvent(stream, queued, 0));
}

static void finish(void) { CUDA_CHECK(cudaStreamSynchronize(stream)); }

/* Issues every queued send and receive as one group, and waits for it. */
static void flush_p2p(void) {
    if (!pending) return;
    begin();
    NCCL_CHECK(ncclGroupStart());
    for (p2p_op *o = pending; o; o = o->next) {
        if (o->is_send) NCCL_CHECK(ncclSend(o->buf, o->count, ncclFloat, o->peer, comm, stream));
        else NCCL_CHECK(ncclRecv(o->buf, o->count, ncclFloat, o->peer, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    finish();
    for (p2p_op *o = pending; o; o = o->next) o->issued = 1;
    pending = pending_tail = NULL;   /* each op is freed by its wait (or below) */
}

static p2p_op *enqueue(int is_send, const float *buf, size_t count, int peer) {
    p2p_op *o = calloc(1, sizeof *o);
    if (!o) lx_fatal("out of memory");
    o->is_send = is_send;
    o->buf = (float *)buf;
    o->count = count;
    o->peer = peer;
    if (pending_tail) pending_tail->next = o;
    else pending = o;
    pending_tail = o;
    return o;
}

static void op_barrier(void) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclAllReduce(scratch, scratch, 1, ncclFloat, ncclSum, comm, stream));
    finish();
}

static void op_all_reduce(float *buf, size_t count, dist_op op) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), comm, stream));
    finish();
}

static void op_reduce(float *buf, size_t count, int root, dist_op op) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclReduce(buf, buf, count, ncclFloat, nccl_op(op), root, comm, stream));
    finish();
}

static void op_broadcast(float *buf, size_t count, int root) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm, stream));
    finish();
}

static void op_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclReduceScatter(in, out, count, ncclFloat, nccl_op(op), comm, stream));
    finish();
}

static void op_all_gather(float *out, const float *in, size_t count) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclAllGather(in, out, count, ncclFloat, comm, stream));
    finish();
}

/* NCCL has no scatter or gather: the root sends (receives) one chunk per
 * rank in a group, and copies its own chunk. */
static void op_scatter(float *out, const float *in, size_t count, int root) {
    flush_p2p();
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
        CUDA_CHECK(cudaMemcpyAsync(out, in + (size_t)root * count, count * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
    finish();
}

static void op_gather(float *out, const float *in, size_t count, int root) {
    flush_p2p();
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
        CUDA_CHECK(cudaMemcpyAsync(out + (size_t)root * count, in, count * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
    finish();
}

/* A blocking send or receive joins the queue and issues it at once. */
static void op_send(const float *buf, size_t count, int peer) {
    p2p_op *mine = enqueue(1, buf, count, peer);
    flush_p2p();
    free(mine);
}

static void op_recv(float *buf, size_t count, int peer) {
    p2p_op *mine = enqueue(0, buf, count, peer);
    flush_p2p();
    free(mine);
}

/* A non-blocking collective: queued on our stream after the compute
 * stream's work so far (begin), with an event recorded behind it. The
 * compute stream is not made to wait until dist_wait: kernels queued in
 * between (a matmul of the next layer) overlap the transfer. */
typedef struct coll_request {
    int is_collective;            /* 1 */
    cudaEvent_t done;
} coll_request;

static void *issued(void) {
    coll_request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->is_collective = 1;
    CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(r->done, stream));
    return r;
}

static void *op_iall_reduce(float *buf, size_t count, dist_op op) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), comm, stream));
    return issued();
}

static void *op_ibroadcast(float *buf, size_t count, int root) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm, stream));
    return issued();
}

static void *op_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclReduceScatter(in, out, count, ncclFloat, nccl_op(op), comm, stream));
    return issued();
}

static void *op_iall_gather(float *out, const float *in, size_t count) {
    flush_p2p();
    begin();
    NCCL_CHECK(ncclAllGather(in, out, count, ncclFloat, comm, stream));
    return issued();
}

/* One group: both directions move together, whatever the ranks' order. */
static void op_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    p2p_op *s = enqueue(1, send, send_count, dst);
    p2p_op *r = enqueue(0, recv, recv_count, src);
    flush_p2p();
    free(s);
    free(r);
}

static void *op_isend(const float *buf, size_t count, int peer) { return enqueue(1, buf, count, peer); }

static void *op_irecv(float *buf, size_t count, int peer) { return enqueue(0, buf, count, peer); }

static void op_wait(void *request) {
    if (((coll_request *)request)->is_collective) {
        /* The compute stream waits for the collective (later kernels see
         * its result), and so does the host: dist_wait returns with the
         * result in place, as on Open MPI. */
        coll_request *c = request;
        CUDA_CHECK(cudaStreamWaitEvent(0, c->done, 0));
        CUDA_CHECK(cudaEventSynchronize(c->done));
        CUDA_CHECK(cudaEventDestroy(c->done));
        free(c);
        return;
    }
    p2p_op *o = request;
    if (!o->issued) flush_p2p();
    free(o);
}

static void op_stop(void) {
    /* Requests never waited for are issued, so the peers are not left
     * hanging; the communicator stays for the next spawn of this size. */
    flush_p2p();
    CUDA_CHECK(cudaStreamSynchronize(stream));
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
    .iall_reduce = op_iall_reduce,
    .ibroadcast = op_ibroadcast,
    .ireduce_scatter = op_ireduce_scatter,
    .iall_gather = op_iall_gather,
    .sendrecv = op_sendrecv,
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
        lx_fatal("rank %d of %d cannot use cuda:%d: its host has %d GPU%s, and NCCL needs one GPU per rank",
                 rank, size, device, count, count == 1 ? "" : "s");
    cudaError_t rc = cudaSetDevice(device);
    if (rc != cudaSuccess)
        lx_fatal("rank %d of %d cannot use cuda:%d: %s", rank, size, device, cudaGetErrorString(rc));
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
        CUDA_CHECK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&w->queued, cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc((void **)&w->scratch, sizeof(float)));
        CUDA_CHECK(cudaMemset(w->scratch, 0, sizeof(float)));
        w->device = device;
        w->made = 1;
    }
    comm = w->comm;
    stream = w->stream;
    queued = w->queued;
    scratch = w->scratch;
    return &nccl_ops;
}

void lx_comm_nccl_release(void) {
    for (int s = 0; s <= LECTERN_MAX_WORLD; s++) {
        nccl_world *w = &worlds[s];
        if (!w->made) continue;
        CUDA_CHECK(cudaSetDevice(w->device));
        NCCL_CHECK(ncclCommDestroy(w->comm));
        CUDA_CHECK(cudaFree(w->scratch));
        CUDA_CHECK(cudaEventDestroy(w->queued));
        CUDA_CHECK(cudaStreamDestroy(w->stream));
        w->made = 0;
    }
}

#endif /* LECTERN_CUDA */
