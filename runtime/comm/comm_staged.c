/*
 * comm_staged.c: collectives on device tensors without NCCL, for ranks that
 * share a GPU (more ranks than GPUs). NCCL refuses two ranks on one device;
 * Open MPI (as Debian builds it) cannot read device memory. So each call
 * copies the data to pinned host memory, runs the Open MPI call there, and
 * copies the result back.
 *
 * Copying all of a 256 MiB tensor down, reducing it, then copying it all
 * up would leave the copy engines idle during the MPI step and the network
 * idle during the copies. A large message goes in chunks instead, through
 * three slots of a pinned host buffer, so that three things happen at once:
 *
 *     time ->   | chunk k+1: device -> host (copy stream "down")
 *               | chunk k:   the MPI step on host memory (this thread)
 *               | chunk k-1: host -> device (copy stream "up")
 *
 * Chunk k uses slot k mod 3; before chunk k+3 reuses it, the host waits for
 * the up-copy of chunk k (an event per slot and direction). The pipeline is
 * written against a small copy interface (lx_stage_copier): on a GPU it is
 * cudaMemcpyAsync on two streams with events (tensor_cuda.cu); the same
 * pipeline also runs with plain memcpy on host tensors, which is how the
 * test suite checks every chunking case on a machine without a GPU
 * (LECTERN_STAGE_TEST, below). Nothing else differs between the two.
 *
 * Chunks: LECTERN_STAGE_CHUNK floats (default 1 Mi floats, 4 MiB), read
 * once per process. Collectives whose buffers are world_size times the count
 * (reduce-scatter, all-gather, scatter, gather) chunk the per-rank count by
 * chunk / world_size, so a slot's host memory stays the same size. Sends
 * and receives are cut the same way on both sides (the count decides), so
 * chunk i of a send always meets chunk i of its receive.
 *
 * The async forms (dist_all_reduce_async ... dist_isend, dist_irecv) copy
 * their input off the device at the call, start Open MPI's non-blocking call
 * on a host buffer of their own, and copy the result back to the device in
 * dist_wait: the transfer moves while the rank computes, and the tensor is
 * updated at dist_wait, not before.
 *
 * CUDA-aware Open MPI (one built with CUDA, which reads device memory
 * itself: MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h at build time, and
 * MPIX_Query_cuda_support() at run time) is given the device pointers
 * straight ("direct"): the blocking calls and sends and receives go to Open
 * MPI as they are, after the device's queued work is done, and AVG divides
 * on the device. The async collectives are staged as above even then (Open
 * MPI's non-blocking collectives do not take device memory). The spawn
 * chooses the path in the parent (spawn_backend.c) from the build; a rank
 * whose Open MPI says at run time that it is not CUDA-aware stages instead
 * and says so in a warning step. LECTERN_CUDA_AWARE=0 forces staging.
 *
 * The shared-GPU protocol (shared_ipc.c) comes first: where the parent
 * asked for it (the spawn's note) and every rank can map every peer's window
 * (the probe at the spawn's start), every call below goes to it and the data
 * stays on the device; otherwise the paths above, and rank 0 says why in a
 * step. LECTERN_SHARED_IPC=0 keeps them without trying. On the CPU,
 * LECTERN_SHARED_IPC_CPU=1 with LECTERN_STAGE_TEST=1 runs host tensors
 * through the protocol over shared memory (the test hook).
 *
 * The pinned buffer is allocated once per rank process (at its first staged
 * call) and kept from one spawn to the next; it grows only if a later spawn
 * needs bigger slots. lx_comm_staged_release frees it when the pool rank
 * leaves.
 */
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm_calls.h"
#include "comm/comm_progress.h"
#include "comm/shared_ipc.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

enum { TAG_P2P = 18, SLOTS = 3 };

static MPI_Comm world_staged = MPI_COMM_NULL; /* a duplicate of the spawn's (lx_the_world.comm) */
/* What the calls run over: the world's, or a group's duplicate (one per
 * group, dist_new_group) between use_group(g) and use_group(NULL). */
static MPI_Comm staged_comm = MPI_COMM_NULL;
static const lx_stage_copier *copy;
static size_t chunk; /* floats per chunk */
static float *host;  /* SLOTS slots of 2 * area floats */
static size_t host_floats;
static const lx_stage_copier *host_owner; /* who allocated `host` (frees it) */
static size_t area;                       /* floats in each half of a slot */
static int64_t chunks_run;                /* pipeline steps since the process started (tests) */
static int direct;                        /* device pointers straight to (CUDA-aware) Open MPI */
static int ipc;                           /* the shared-GPU protocol (shared_ipc.c) runs the calls */

int64_t lx_stage_chunks_run(void) { return chunks_run; }

static size_t chunk_override; /* lx_stage_set_chunk, for tests */
static size_t stage_chunk_floats(void);

static size_t asked_chunk(void);
static const lx_stage_copier host_copier;

/* ---- the shared-GPU protocol's receives (shared_ipc.c) ----
 *
 * A send on the protocol never waits for its receiver, so dist_isend is
 * dist_send, and dist_irecv is a receive done at its dist_wait (or at a
 * dist_test that finds its message come). Receives from one peer must meet
 * that peer's messages in the order they were posted, as MPI matches them:
 * a receive first completes the earlier dist_irecv's from the same peer. */
typedef struct ipc_recv_req {
    float *buf;
    size_t count;
    int peer, done;
    struct ipc_recv_req *next; /* posted after this one, not yet done */
} ipc_recv_req;
static ipc_recv_req *ipc_posted; /* in the order posted */

/* Completes the posted receives from `peer` up to `upto` (NULL: all of them). */
static void ipc_complete_posted(int peer, const ipc_recv_req *upto) {
    for (ipc_recv_req **at = &ipc_posted; *at;) {
        ipc_recv_req *r = *at;
        if (r->peer != peer) {
            if (r == upto) return;
            at = &r->next;
            continue;
        }
        lx_ipc_recv(r->buf, r->count, r->peer);
        r->done = 1;
        *at = r->next;
        if (r == upto) return;
    }
}

static void ipc_recv(float *buf, size_t count, int peer) {
    ipc_complete_posted(peer, NULL);
    lx_ipc_recv(buf, count, peer);
}

void lx_stage_set_chunk(size_t floats) {
    chunk_override = floats;
    if (staged_comm != MPI_COMM_NULL) chunk = floats ? floats : stage_chunk_floats();
    if (ipc) lx_ipc_set_chunk(asked_chunk());
}

static size_t stage_chunk_floats(void) {
    if (chunk_override) return chunk_override;
    const char *s = getenv("LECTERN_STAGE_CHUNK");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end == '\0' && v > 0 && v <= (1LL << 28)) return (size_t)v;
        lx_fatal("LECTERN_STAGE_CHUNK='%s' is not a number of floats between 1 and 268435456", s);
    }
    return (size_t)1 << 20;
}

static MPI_Op mpi_op(dist_op op) { return lx_mpi_op(op); }

/* AVG: the sum divided by the world size, on host memory, by comm_mpi.c's
 * code (so the results are the same floats). */
static void average(float *x, size_t count, dist_op op) { lx_mpi_average(x, count, op, lx_current_size()); }

/* ---- the pipeline ---- */

/* One call, cut into chunks of `clen` elements of the per-rank count. */
typedef struct pipe {
    size_t chunks;
    size_t clen;  /* elements per chunk (the last may be shorter) */
    size_t count; /* per-rank count (as lx_comm_ops has it) */
    float *buf;   /* in-place calls */
    float *out;
    const float *in;
    size_t send_count, recv_count; /* sendrecv */
    int root, peer, src;
    dist_op op;
    /* queue the device -> host copies of chunk k into slot half A (may do nothing) */
    void (*down)(const struct pipe *, size_t k, float *a);
    /* the MPI step on the slot: A in, B (or A) out */
    void (*step)(const struct pipe *, size_t k, float *a, float *b);
    /* queue the host -> device copies of chunk k's result */
    void (*up)(const struct pipe *, size_t k, const float *a, const float *b);
} pipe;

static size_t lo_of(const pipe *p, size_t k) { return k * p->clen; }
static size_t n_of(const pipe *p, size_t k, size_t total) {
    size_t lo = k * p->clen;
    return lo >= total ? 0 : (total - lo < p->clen ? total - lo : p->clen);
}

static float *slot_a(size_t k) { return host + (k % SLOTS) * 2 * area; }
static float *slot_b(size_t k) { return slot_a(k) + area; }

/* Slots large enough for `need` floats per half, allocated once and kept. */
static void ensure_host(size_t need) {
    if (need < chunk) need = chunk;
    if (host && area >= need) return;
    if (host) host_owner->host_free(host);
    area = need;
    host_floats = SLOTS * 2 * area;
    host = copy->host_alloc(host_floats * sizeof(float));
    host_owner = copy;
}

static void stage_down(const pipe *p, size_t k) {
    int s = (int)(k % SLOTS);
    copy->wait_up(s); /* the slot's previous chunk has left for the device */
    p->down(p, k, slot_a(k));
    copy->mark_down(s);
}

static void run(const pipe *p) {
    if (p->chunks == 0) return;
    copy->begin(); /* device work queued before the call comes first */
    stage_down(p, 0);
    for (size_t k = 0; k < p->chunks; k++) {
        if (k + 1 < p->chunks) stage_down(p, k + 1); /* overlaps the MPI step below */
        int s = (int)(k % SLOTS);
        copy->wait_down(s);
        p->step(p, k, slot_a(k), slot_b(k));
        p->up(p, k, slot_a(k), slot_b(k)); /* overlaps the next chunk's step */
        copy->mark_up(s);
        chunks_run++;
    }
    for (int s = 0; s < SLOTS; s++)
        copy->wait_up(s); /* the result is on the device */
}

static size_t chunks_for(size_t count, size_t clen) { return clen ? (count + clen - 1) / clen : 0; }

static pipe make_pipe(size_t count, size_t clen) {
    pipe p;
    memset(&p, 0, sizeof p);
    p.count = count;
    p.clen = clen;
    p.chunks = chunks_for(count, clen);
    return p;
}

/* Per-rank chunk for the calls whose buffers hold world_size pieces: a
 * slot half holds world_size of them. */
static size_t gather_clen(void) {
    size_t c = chunk / (size_t)lx_current_size();
    return c ? c : 1;
}

static void nothing_down(const pipe *p, size_t k, float *a) { (void)p, (void)k, (void)a; }
static void nothing_up(const pipe *p, size_t k, const float *a, const float *b) { (void)p, (void)k, (void)a, (void)b; }

/* ---- all-reduce, reduce, broadcast: one buffer, in place ---- */

static void down_buf(const pipe *p, size_t k, float *a) {
    copy->to_host(a, p->buf + lo_of(p, k), n_of(p, k, p->count));
}
static void up_buf_a(const pipe *p, size_t k, const float *a, const float *b) {
    (void)b;
    copy->to_device(p->buf + lo_of(p, k), a, n_of(p, k, p->count));
}

static void step_all_reduce(const pipe *p, size_t k, float *a, float *b) {
    (void)b;
    size_t n = n_of(p, k, p->count);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, mpi_op(p->op), staged_comm));
    average(a, n, p->op);
}

/* ---- direct: device pointers straight to CUDA-aware Open MPI ---- */

/* Open MPI reads and writes device memory with its own copies, which are
 * not ordered after the kernels this rank queued: wait for them first. */
static void settle(void) {
    copy->begin();
    copy->device_sync();
}

static void divide(float *x, size_t count, dist_op op) {
    if (op == DIST_AVG && count) copy->divide(x, count, (float)lx_current_size());
}

static void direct_all_reduce(float *buf, size_t count, dist_op op) {
    settle();
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, mpi_op(op), staged_comm));
    divide(buf, count, op);
}

static void direct_reduce(float *buf, size_t count, int root, dist_op op) {
    settle();
    if (lx_current_rank() == root) {
        MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, mpi_op(op), root, staged_comm));
        divide(buf, count, op);
    } else {
        MPI_CHECK(MPI_Reduce(buf, NULL, (int)count, MPI_FLOAT, mpi_op(op), root, staged_comm));
    }
}

static void direct_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    settle();
    MPI_CHECK(MPI_Reduce_scatter_block(in, out, (int)count, MPI_FLOAT, mpi_op(op), staged_comm));
    divide(out, count, op);
}

static void op_all_reduce(float *buf, size_t count, dist_op op) {
    if (ipc) {
        lx_ipc_all_reduce(buf, count, (int)op);
        return;
    }
    if (direct) {
        direct_all_reduce(buf, count, op);
        return;
    }
    pipe p = make_pipe(count, chunk);
    p.buf = buf;
    p.op = op;
    p.down = down_buf;
    p.step = step_all_reduce;
    p.up = up_buf_a;
    ensure_host(chunk);
    run(&p);
}

static void step_reduce(const pipe *p, size_t k, float *a, float *b) {
    (void)b;
    size_t n = n_of(p, k, p->count);
    if (lx_current_rank() == p->root) {
        MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, mpi_op(p->op), p->root, staged_comm));
        average(a, n, p->op);
    } else {
        MPI_CHECK(MPI_Reduce(a, NULL, (int)n, MPI_FLOAT, mpi_op(p->op), p->root, staged_comm));
    }
}

static void op_reduce(float *buf, size_t count, int root, dist_op op) {
    if (ipc) {
        lx_ipc_reduce(buf, count, root, (int)op);
        return;
    }
    if (direct) {
        direct_reduce(buf, count, root, op);
        return;
    }
    pipe p = make_pipe(count, chunk);
    p.buf = buf;
    p.op = op;
    p.root = root;
    p.down = down_buf;
    p.step = step_reduce;
    p.up = lx_current_rank() == root ? up_buf_a : nothing_up; /* only the root's tensor changes */
    ensure_host(chunk);
    run(&p);
}

static void step_broadcast(const pipe *p, size_t k, float *a, float *b) {
    (void)b;
    MPI_CHECK(MPI_Bcast(a, (int)n_of(p, k, p->count), MPI_FLOAT, p->root, staged_comm));
}

static void op_broadcast(float *buf, size_t count, int root) {
    if (ipc) {
        lx_ipc_broadcast(buf, count, root);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Bcast(buf, (int)count, MPI_FLOAT, root, staged_comm));
        return;
    }
    pipe p = make_pipe(count, chunk);
    p.buf = buf;
    p.root = root;
    p.down = lx_current_rank() == root ? down_buf : nothing_down;
    p.step = step_broadcast;
    p.up = lx_current_rank() == root ? nothing_up : up_buf_a;
    ensure_host(chunk);
    run(&p);
}

/* ---- the calls with world_size pieces ---- */

/* Chunk k of each of the world_size pieces of `in` (piece r starts at
 * r * count), side by side in A. */
static void down_pieces(const pipe *p, size_t k, float *a) {
    size_t n = n_of(p, k, p->count), lo = lo_of(p, k);
    for (int r = 0; r < lx_current_size(); r++)
        copy->to_host(a + (size_t)r * n, p->in + (size_t)r * p->count + lo, n);
}
static void down_in(const pipe *p, size_t k, float *a) { copy->to_host(a, p->in + lo_of(p, k), n_of(p, k, p->count)); }
/* Chunk k of the world_size pieces of B back into their places in `out`. */
static void up_pieces(const pipe *p, size_t k, const float *a, const float *b) {
    (void)a;
    size_t n = n_of(p, k, p->count), lo = lo_of(p, k);
    for (int r = 0; r < lx_current_size(); r++)
        copy->to_device(p->out + (size_t)r * p->count + lo, b + (size_t)r * n, n);
}
static void up_out_b(const pipe *p, size_t k, const float *a, const float *b) {
    (void)a;
    copy->to_device(p->out + lo_of(p, k), b, n_of(p, k, p->count));
}

static void step_reduce_scatter(const pipe *p, size_t k, float *a, float *b) {
    size_t n = n_of(p, k, p->count);
    MPI_CHECK(MPI_Reduce_scatter_block(a, b, (int)n, MPI_FLOAT, mpi_op(p->op), staged_comm));
    average(b, n, p->op);
}

static void op_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    if (ipc) {
        lx_ipc_reduce_scatter(out, in, count, (int)op);
        return;
    }
    if (direct) {
        direct_reduce_scatter(out, in, count, op);
        return;
    }
    pipe p = make_pipe(count, gather_clen());
    p.out = out;
    p.in = in;
    p.op = op;
    p.down = down_pieces;
    p.step = step_reduce_scatter;
    p.up = up_out_b;
    ensure_host(p.clen * (size_t)lx_current_size());
    run(&p);
}

static void step_all_gather(const pipe *p, size_t k, float *a, float *b) {
    int n = (int)n_of(p, k, p->count);
    MPI_CHECK(MPI_Allgather(a, n, MPI_FLOAT, b, n, MPI_FLOAT, staged_comm));
}

static void op_all_gather(float *out, const float *in, size_t count) {
    if (ipc) {
        lx_ipc_all_gather(out, in, count);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, staged_comm));
        return;
    }
    pipe p = make_pipe(count, gather_clen());
    p.out = out;
    p.in = in;
    p.down = down_in;
    p.step = step_all_gather;
    p.up = up_pieces;
    ensure_host(p.clen * (size_t)lx_current_size());
    run(&p);
}

static void step_scatter(const pipe *p, size_t k, float *a, float *b) {
    int n = (int)n_of(p, k, p->count);
    MPI_CHECK(MPI_Scatter(a, n, MPI_FLOAT, b, n, MPI_FLOAT, p->root, staged_comm));
}

static void op_scatter(float *out, const float *in, size_t count, int root) {
    if (ipc) {
        lx_ipc_scatter(out, in, count, root);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Scatter(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, root, staged_comm));
        return;
    }
    pipe p = make_pipe(count, gather_clen());
    p.out = out;
    p.in = in;
    p.root = root;
    p.down = lx_current_rank() == root ? down_pieces : nothing_down;
    p.step = step_scatter;
    p.up = up_out_b;
    ensure_host(p.clen * (size_t)lx_current_size());
    run(&p);
}

static void step_gather(const pipe *p, size_t k, float *a, float *b) {
    int n = (int)n_of(p, k, p->count);
    MPI_CHECK(MPI_Gather(a, n, MPI_FLOAT, b, n, MPI_FLOAT, p->root, staged_comm));
}

static void op_gather(float *out, const float *in, size_t count, int root) {
    if (ipc) {
        lx_ipc_gather(out, in, count, root);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Gather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, root, staged_comm));
        return;
    }
    pipe p = make_pipe(count, gather_clen());
    p.out = out;
    p.in = in;
    p.root = root;
    p.down = down_in;
    p.step = step_gather;
    p.up = lx_current_rank() == root ? up_pieces : nothing_up;
    ensure_host(p.clen * (size_t)lx_current_size());
    run(&p);
}

static void op_barrier(void) { MPI_CHECK(MPI_Barrier(staged_comm)); }

/* ---- point to point: chunk i of a send meets chunk i of its receive ---- */

static void step_send(const pipe *p, size_t k, float *a, float *b) {
    (void)b;
    MPI_CHECK(MPI_Send(a, (int)n_of(p, k, p->count), MPI_FLOAT, p->peer, TAG_P2P, staged_comm));
}

static void op_send(const float *buf, size_t count, int peer) {
    if (ipc) {
        lx_ipc_send(buf, count, peer);
        return;
    }
    if (direct) { /* one message: the receive is direct too (the same Open MPI in every rank) */
        settle();
        MPI_CHECK(MPI_Send(buf, (int)count, MPI_FLOAT, peer, TAG_P2P, staged_comm));
        return;
    }
    pipe p = make_pipe(count, chunk);
    p.buf = (float *)buf; /* only read: down_buf copies from it */
    p.peer = peer;
    p.down = down_buf;
    p.step = step_send;
    p.up = nothing_up;
    ensure_host(chunk);
    run(&p);
}

static void step_recv(const pipe *p, size_t k, float *a, float *b) {
    (void)b;
    MPI_CHECK(MPI_Recv(a, (int)n_of(p, k, p->count), MPI_FLOAT, p->peer, TAG_P2P, staged_comm, MPI_STATUS_IGNORE));
}

static void op_recv(float *buf, size_t count, int peer) {
    if (ipc) {
        ipc_recv(buf, count, peer);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Recv(buf, (int)count, MPI_FLOAT, peer, TAG_P2P, staged_comm, MPI_STATUS_IGNORE));
        return;
    }
    pipe p = make_pipe(count, chunk);
    p.buf = buf;
    p.peer = peer;
    p.down = nothing_down;
    p.step = step_recv;
    p.up = up_buf_a;
    ensure_host(chunk);
    run(&p);
}

/* sendrecv: the longer of the two streams of chunks sets the step count;
 * each step sends chunk k (if the send has one) and receives chunk k (if
 * the receive has one), non-blocking both, so neither waits on the other. */
static void down_send(const pipe *p, size_t k, float *a) {
    size_t n = n_of(p, k, p->send_count);
    if (n) copy->to_host(a, p->in + lo_of(p, k), n);
}
static void step_sendrecv(const pipe *p, size_t k, float *a, float *b) {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    size_t sn = n_of(p, k, p->send_count), rn = n_of(p, k, p->recv_count);
    if (sn) MPI_CHECK(MPI_Isend(a, (int)sn, MPI_FLOAT, p->peer, TAG_P2P, staged_comm, &req[0]));
    if (rn) MPI_CHECK(MPI_Irecv(b, (int)rn, MPI_FLOAT, p->src, TAG_P2P, staged_comm, &req[1]));
    MPI_CHECK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
}
static void up_recv(const pipe *p, size_t k, const float *a, const float *b) {
    (void)a;
    size_t n = n_of(p, k, p->recv_count);
    if (n) copy->to_device(p->out + lo_of(p, k), b, n);
}

static void op_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    if (ipc) {
        lx_ipc_send(send, send_count, dst);
        ipc_recv(recv, recv_count, src);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Sendrecv(send, (int)send_count, MPI_FLOAT, dst, TAG_P2P, recv, (int)recv_count, MPI_FLOAT, src,
                               TAG_P2P, staged_comm, MPI_STATUS_IGNORE));
        return;
    }
    size_t longer = send_count > recv_count ? send_count : recv_count;
    pipe p = make_pipe(longer, chunk);
    p.in = send;
    p.out = recv;
    p.send_count = send_count;
    p.recv_count = recv_count;
    p.peer = dst;
    p.src = src;
    p.down = down_send;
    p.step = step_sendrecv;
    p.up = up_recv;
    ensure_host(chunk);
    run(&p);
}

/* ---- the async forms: a host buffer of their own, copied back at wait ---- */

typedef struct staged_request {
    MPI_Request *reqs;
    int n_reqs;
    float *host_in, *host_out; /* malloc'd (host_out may be host_in) */
    float *device_out;         /* where the result goes at wait; NULL: nothing comes back */
    size_t out_count;          /* floats to copy back */
    size_t out_stride;         /* pieces: world_size pieces of out_count... */
    int pieces;                /* 1, or world_size for an all-gather (already contiguous) */
    dist_op op;
    size_t average_count;      /* AVG: floats of host_out to divide at wait */
    int size;                  /* AVG divides by it: the world's or the group's at the call */
    lx_progress_group *moving; /* the progress thread's hold on reqs (comm_progress.c) */
    int ipc;                   /* the protocol's: done at the call, or ... */
    ipc_recv_req *recv;        /* ... a receive done at wait */
} staged_request;

/* A request of the protocol: the call's work is queued already (recv: a
 * receive to do at the wait). */
static void *ipc_request(ipc_recv_req *recv) {
    staged_request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->ipc = 1;
    r->recv = recv;
    return r;
}

static void *ipc_irecv(float *buf, size_t count, int peer) {
    ipc_recv_req *q = calloc(1, sizeof *q);
    if (!q) lx_fatal("out of memory");
    *q = (ipc_recv_req){.buf = buf, .count = count, .peer = peer};
    ipc_recv_req **at = &ipc_posted;
    while (*at)
        at = &(*at)->next;
    *at = q;
    return ipc_request(q);
}

static void ipc_wait(staged_request *r) {
    if (r->recv && !r->recv->done) ipc_complete_posted(r->recv->peer, r->recv);
    free(r->recv);
    free(r);
}

/* 1 when the wait would not wait: a receive whose message (and those of the
 * receives posted before it from the same peer) has come is done here. */
static int ipc_test(staged_request *r) {
    if (!r->recv || r->recv->done || r->recv->count == 0) return 1;
    if (!lx_ipc_recv_ready(r->recv->peer)) return 0;
    ipc_complete_posted(r->recv->peer, r->recv);
    return r->recv->done;
}

/* Every request of r has started: from now on they move while the rank
 * computes. */
static void *started(staged_request *r) {
    r->moving = lx_progress_watch(r->reqs, r->n_reqs);
    return r;
}

static float *host_copy(const float *dev, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!h) lx_fatal("out of memory for %zu floats of an async collective's host buffer", n);
    if (dev && n) copy->sync_to_host(h, dev, n);
    return h;
}

static staged_request *new_request(int n_reqs) {
    staged_request *r = calloc(1, sizeof *r);
    MPI_Request *reqs = calloc((size_t)(n_reqs ? n_reqs : 1), sizeof *reqs);
    if (!r || !reqs) lx_fatal("out of memory");
    for (int i = 0; i < n_reqs; i++)
        reqs[i] = MPI_REQUEST_NULL;
    r->reqs = reqs;
    r->n_reqs = n_reqs;
    r->size = lx_current_size();
    return r;
}

static void *op_isend(const float *buf, size_t count, int peer) {
    if (ipc) {
        lx_ipc_send(buf, count, peer);
        return ipc_request(NULL);
    }
    if (direct) {
        staged_request *r = new_request(1);
        settle();
        MPI_CHECK(MPI_Isend(buf, (int)count, MPI_FLOAT, peer, TAG_P2P, staged_comm, &r->reqs[0]));
        return started(r);
    }
    size_t chunks = chunks_for(count, chunk);
    if (chunks > INT32_MAX) lx_fatal("%s(): too many chunks", lx_calls[LX_ISEND].name);
    staged_request *r = new_request((int)chunks);
    r->host_in = host_copy(buf, count);
    for (size_t k = 0; k < chunks; k++) {
        size_t lo = k * chunk, n = count - lo < chunk ? count - lo : chunk;
        MPI_CHECK(MPI_Isend(r->host_in + lo, (int)n, MPI_FLOAT, peer, TAG_P2P, staged_comm, &r->reqs[k]));
    }
    return started(r);
}

static void *op_irecv(float *buf, size_t count, int peer) {
    if (ipc) return ipc_irecv(buf, count, peer);
    if (direct) {
        staged_request *r = new_request(1);
        settle();
        MPI_CHECK(MPI_Irecv(buf, (int)count, MPI_FLOAT, peer, TAG_P2P, staged_comm, &r->reqs[0]));
        return started(r);
    }
    size_t chunks = chunks_for(count, chunk);
    if (chunks > INT32_MAX) lx_fatal("%s(): too many chunks", lx_calls[LX_IRECV].name);
    staged_request *r = new_request((int)chunks);
    r->host_out = host_copy(NULL, count);
    r->device_out = buf;
    r->out_count = count;
    for (size_t k = 0; k < chunks; k++) {
        size_t lo = k * chunk, n = count - lo < chunk ? count - lo : chunk;
        MPI_CHECK(MPI_Irecv(r->host_out + lo, (int)n, MPI_FLOAT, peer, TAG_P2P, staged_comm, &r->reqs[k]));
    }
    return started(r);
}

static void *op_iall_reduce(float *buf, size_t count, dist_op op) {
    if (ipc) {
        lx_ipc_all_reduce(buf, count, (int)op);
        return ipc_request(NULL);
    }
    staged_request *r = new_request(1);
    r->host_in = r->host_out = host_copy(buf, count);
    r->device_out = buf;
    r->out_count = count;
    r->op = op;
    r->average_count = count;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, r->host_out, (int)count, MPI_FLOAT, mpi_op(op), staged_comm, &r->reqs[0]));
    return started(r);
}

static void *op_ibroadcast(float *buf, size_t count, int root) {
    if (ipc) {
        lx_ipc_broadcast(buf, count, root);
        return ipc_request(NULL);
    }
    staged_request *r = new_request(1);
    r->host_in = r->host_out = host_copy(lx_current_rank() == root ? buf : NULL, count);
    if (lx_current_rank() != root) {
        r->device_out = buf;
        r->out_count = count;
    }
    MPI_CHECK(MPI_Ibcast(r->host_out, (int)count, MPI_FLOAT, root, staged_comm, &r->reqs[0]));
    return started(r);
}

static void *op_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    if (ipc) {
        lx_ipc_reduce_scatter(out, in, count, (int)op);
        return ipc_request(NULL);
    }
    staged_request *r = new_request(1);
    r->host_in = host_copy(in, count * (size_t)lx_current_size());
    r->host_out = host_copy(NULL, count);
    r->device_out = out;
    r->out_count = count;
    r->op = op;
    r->average_count = count;
    MPI_CHECK(MPI_Ireduce_scatter_block(r->host_in, r->host_out, (int)count, MPI_FLOAT, mpi_op(op), staged_comm,
                                        &r->reqs[0]));
    return started(r);
}

static void *op_iall_gather(float *out, const float *in, size_t count) {
    if (ipc) {
        lx_ipc_all_gather(out, in, count);
        return ipc_request(NULL);
    }
    staged_request *r = new_request(1);
    r->host_in = host_copy(in, count);
    r->host_out = host_copy(NULL, count * (size_t)lx_current_size());
    r->device_out = out;
    r->out_count = count * (size_t)lx_current_size();
    MPI_CHECK(MPI_Iallgather(r->host_in, (int)count, MPI_FLOAT, r->host_out, (int)count, MPI_FLOAT, staged_comm,
                             &r->reqs[0]));
    return started(r);
}

static void op_wait(void *request) {
    staged_request *r = request;
    if (r->ipc) {
        ipc_wait(r);
        return;
    }
    lx_progress_claim(r->moving, "MPI_Waitall");
    MPI_CHECK(MPI_Waitall(r->n_reqs, r->reqs, MPI_STATUSES_IGNORE));
    if (r->op == DIST_AVG) lx_mpi_average(r->host_out, r->average_count, DIST_AVG, r->size);
    if (r->device_out && r->out_count) copy->sync_to_device(r->device_out, r->host_out, r->out_count);
    if (r->host_out != r->host_in) free(r->host_out);
    free(r->host_in);
    free(r->reqs);
    free(r);
}

/* ---- all-to-all: chunk k of each piece side by side, as a reduce-scatter's ---- */

static void step_all_to_all(const pipe *p, size_t k, float *a, float *b) {
    int n = (int)n_of(p, k, p->count);
    MPI_CHECK(MPI_Alltoall(a, n, MPI_FLOAT, b, n, MPI_FLOAT, staged_comm));
}

static void op_all_to_all(float *out, const float *in, size_t count) {
    if (ipc) {
        lx_ipc_all_to_all(out, in, count);
        return;
    }
    if (direct) {
        settle();
        MPI_CHECK(MPI_Alltoall(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, staged_comm));
        return;
    }
    pipe p = make_pipe(count, gather_clen());
    p.out = out;
    p.in = in;
    p.down = down_pieces;
    p.step = step_all_to_all;
    p.up = up_pieces;
    ensure_host(p.clen * (size_t)lx_current_size());
    run(&p);
}

static void *op_iall_to_all(float *out, const float *in, size_t count) {
    if (ipc) {
        lx_ipc_all_to_all(out, in, count);
        return ipc_request(NULL);
    }
    staged_request *r = new_request(1);
    r->host_in = host_copy(in, count * (size_t)lx_current_size());
    r->host_out = host_copy(NULL, count * (size_t)lx_current_size());
    r->device_out = out;
    r->out_count = count * (size_t)lx_current_size();
    MPI_CHECK(MPI_Ialltoall(r->host_in, (int)count, MPI_FLOAT, r->host_out, (int)count, MPI_FLOAT, staged_comm,
                            &r->reqs[0]));
    return started(r);
}

/* ---- groups: on the group's own communicator ----
 *
 * Every call here, async ones included, is started on the lecture's thread,
 * as the agreement check's are: one communicator keeps them in order (a
 * group dies with its spawn, so no duplicate is needed against the next). */

static void *op_group_new(const dist_group *g) {
    (void)g;
    return NULL;
}

static void op_group_free(void *backend_group) { (void)backend_group; }

static void op_use_group(const dist_group *g) {
    staged_comm = g ? g->comm : world_staged;
    if (ipc) lx_ipc_use(g ? g->comm : MPI_COMM_NULL, g ? g->size : 0, g ? g->rank : 0, g ? g->ranks : NULL);
}

static int op_test(void *request) {
    staged_request *r = request;
    if (r->ipc) return ipc_test(r);
    if (r->moving) return lx_progress_test(r->moving, "MPI_Testall");
    int done = 0;
    MPI_CHECK(MPI_Testall(r->n_reqs, r->reqs, &done, MPI_STATUSES_IGNORE));
    return done;
}

static void op_stop(void) {
    if (ipc) lx_ipc_stop();
    ipc = 0;
    for (ipc_recv_req *r = ipc_posted, *next; r; r = next) { /* none: every request was waited for */
        next = r->next;
        free(r);
    }
    ipc_posted = NULL;
    if (world_staged != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&world_staged));
    staged_comm = MPI_COMM_NULL;
}

static const lx_comm_ops staged_ops = {
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

/* Open MPI built CUDA-aware (mpi-ext.h), and not turned off with
 * LECTERN_CUDA_AWARE=0: what the parent predicts for the spawn's note. */
int lx_mpi_cuda_aware_built(void) {
    const char *off = getenv("LECTERN_CUDA_AWARE");
    if (off && strcmp(off, "0") == 0) return 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return 1;
#else
    return 0;
#endif
}

/* The same, asked of Open MPI at run time (after MPI_Init). */
static int cuda_aware_now(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return 0;
#endif
}

void lx_stage_set_direct(int on) { direct = on; }

/* The floats per round a test or the user asked for (LECTERN_STAGE_CHUNK,
 * lx_stage_set_chunk); 0: none, the protocol's window size. */
static size_t asked_chunk(void) {
    if (chunk_override) return chunk_override;
    const char *s = getenv("LECTERN_STAGE_CHUNK");
    return s && *s ? stage_chunk_floats() : 0;
}

/* LECTERN_SHARED_IPC_WINDOW: floats of each rank's window (the most a
 * round moves); default 16 Mi floats (64 MiB) on a GPU, 1 Mi (4 MiB) in
 * shared memory, where /dev/shm may be small. */
static size_t window_floats(int on_gpu) {
    const char *s = getenv("LECTERN_SHARED_IPC_WINDOW");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end == '\0' && v > 0 && v <= (1LL << 30)) return (size_t)v;
        lx_fatal("LECTERN_SHARED_IPC_WINDOW='%s' is not a number of floats between 1 and 1073741824", s);
    }
    return on_gpu ? (size_t)1 << 24 : (size_t)1 << 20;
}

static char ipc_why_not[300]; /* the probe's failure, this spawn */
const char *lx_stage_ipc_why_not(void) { return ipc_why_not; }

/* The protocol for this spawn where it is asked for and every rank can map
 * every peer's window (the probe); else the staged host path, and rank 0
 * says why in a step. */
static void try_ipc(const lx_stage_copier *copier) {
    /* The parent decided (ranks.h, lx_shared_ipc_mode): LECTERN_SHARED_IPC=0
     * keeps the staged host path, LECTERN_SHARED_IPC_CPU=1 is the test hook. */
    const lx_ipc_dev *dev = NULL;
    int mode = lx_spawn_shared_ipc();
    if (mode == LX_SHARED_IPC_SHM && copier == &host_copier) dev = lx_ipc_shm_dev();
#ifdef LECTERN_CUDA
    if (mode == LX_SHARED_IPC_DEVICE && copier != &host_copier) dev = lx_ipc_cuda_dev(lx_the_world.device);
#endif
    if (!dev) return;
    char why[300] = "";
    ipc_why_not[0] = '\0';
    ipc = lx_ipc_start(dev, lx_the_world.comm, lx_the_world.rank, lx_the_world.size,
                       window_floats(copier != &host_copier), asked_chunk(), why, sizeof why);
    if (!ipc) snprintf(ipc_why_not, sizeof ipc_why_not, "%s", why);
    if (!ipc && lx_the_world.rank == 0) {
        char *md = lx_fmt("**note:** the collectives of ranks sharing the GPU cannot run on the device through %s "
                          "(%s): they run through host memory (the staged path); LECTERN_SHARED_IPC=0 chooses "
                          "that path without trying",
                          dev->name, why);
        lx_emit(lx_rendering_markdown(md));
        free(md);
    }
    if (ipc) direct = 0;
}

const lx_comm_ops *lx_comm_staged_start(const lx_stage_copier *copier, int cuda_aware) {
    MPI_Comm comm = lx_the_world.comm;
    direct = 0;
    if (cuda_aware) {
        direct = cuda_aware_now();
        if (!direct)
            lx_emit(lx_rendering_markdown("**warning:** Open MPI was built CUDA-aware but says at run time that it "
                                          "is not (`MPIX_Query_cuda_support()` is 0): this rank stages its "
                                          "collectives through host memory"));
    }
    if (host && copier != host_owner) { /* another kind of memory than last spawn's */
        host_owner->host_free(host);
        host = NULL;
        area = 0;
    }
    copy = copier;
    chunk = stage_chunk_floats();
    MPI_CHECK(MPI_Comm_dup(comm, &world_staged));
    MPI_CHECK(MPI_Comm_set_errhandler(world_staged, MPI_ERRORS_RETURN));
    try_ipc(copier);
    op_use_group(NULL);
    return &staged_ops;
}

void lx_comm_staged_release(void) {
    if (host) host_owner->host_free(host);
    host = NULL;
    area = 0;
}

/* ---- the host copier: the same pipeline on host memory ---- */

/* LECTERN_STAGE_TEST=1 (a test hook, not for lectures): a spawn that would
 * run Open MPI on host memory runs the staged pipeline above instead, with
 * memcpy as its copies and "device" tensors that are host tensors. Every
 * chunking and ordering decision is the one a GPU spawn makes; only the copy
 * primitive differs. tests/comm/test_comm_staged.c runs it, and with
 * lx_stage_set_direct(1) the direct path's code as well. */
static void h_begin(void) {}
static void h_copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void h_mark(int slot) { (void)slot; }
static float *h_alloc(size_t bytes) {
    float *p = malloc(bytes ? bytes : 1);
    if (!p) lx_fatal("out of memory for %zu bytes of staging buffers", bytes);
    return p;
}
static void h_free(float *p) { free(p); }
static void h_divide(float *x, size_t n, float by) {
    for (size_t i = 0; i < n; i++)
        x[i] /= by;
}

static const lx_stage_copier host_copier = {
        .name = "host memcpy",
        .begin = h_begin,
        .to_host = h_copy,
        .to_device = h_copy,
        .mark_down = h_mark,
        .wait_down = h_mark,
        .mark_up = h_mark,
        .wait_up = h_mark,
        .sync_to_host = h_copy,
        .sync_to_device = h_copy,
        .host_alloc = h_alloc,
        .host_free = h_free,
        .device_sync = h_begin,
        .divide = h_divide,
};

const lx_stage_copier *lx_stage_host_copier(void) { return &host_copier; }
