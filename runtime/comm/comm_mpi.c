/*
 * comm_mpi.c: the collectives on Open MPI, on host memory (the gloo of this
 * world). Each dist_* call is one MPI call on a private copy of the spawn's
 * communicator (the pool ranks of this spawn, spawn_rank.c), made at the
 * spawn's start and freed at its end: a message one spawn left unreceived
 * can never match a receive of the next.
 *
 * MPI has no "average": AVG is a SUM followed by a division by the world size
 * on the ranks that hold a result, which is what torch's gloo backend does.
 * Errors come back as codes (MPI_ERRORS_RETURN) so MPI_CHECK can name the
 * call and the file:line; the exit then reaches the parent as a failed rank.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/comm_progress.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

enum { TAG_P2P = 17 };

/* Duplicates of the spawn's communicator (lx_the_world.comm), made at start. */
static MPI_Comm world_comm = MPI_COMM_NULL;  /* blocking calls, sends and receives */
static MPI_Comm world_async = MPI_COMM_NULL; /* the non-blocking collectives */

/* A group's pair (dist_new_group): the blocking calls on the group's own
 * communicator (made for this group, used by no one else but the agreement
 * check, whose calls come in the same order on the same thread), the
 * non-blocking collectives on a duplicate the progress thread alone starts
 * collectives on. One duplicate fewer than the world: a group dies with its
 * spawn, so no message can outlive it into the next. */
typedef struct mpi_group {
    MPI_Comm comm, async;
} mpi_group;

/* What the calls run over: the world's pair, or a group's between
 * use_group(g) and use_group(NULL) (lx_use_group, around each group call). */
static MPI_Comm mpi_comm = MPI_COMM_NULL;
static MPI_Comm async_comm = MPI_COMM_NULL;

/*
 * bf16 and fp16 (lectern.h, "Precision"). MPI has no 16-bit float type, so
 * each is a type of its own over MPI_UINT16_T (2 bytes an element on the
 * wire, and a reduction can tell the two apart by the type it is given),
 * reduced by user ops: each application adds (or compares) two buffers'
 * elements in fp32 and rounds the result once to the 16-bit type. One
 * application is one step of Open MPI's algorithm (a hop of a ring, an
 * exchange of recursive doubling), so a sum over p ranks is rounded p - 1
 * times, in the algorithm's order: what NCCL's bf16 sum does too. The types
 * and ops are made once per process and kept (a pool rank serves many spawns).
 */
static MPI_Datatype bf16_type = MPI_DATATYPE_NULL, f16_type = MPI_DATATYPE_NULL;
static MPI_Op op16_sum = MPI_OP_NULL, op16_min = MPI_OP_NULL, op16_max = MPI_OP_NULL;

enum { COMBINE_SUM, COMBINE_MIN, COMBINE_MAX };

static void combine_16(const void *in, void *inout, int len, MPI_Datatype type, int how) {
    dtype d = type == bf16_type ? DTYPE_BF16 : DTYPE_F16;
    enum { CHUNK = 512 };
    float a[CHUNK], b[CHUNK];
    for (int at = 0; at < len; at += CHUNK) {
        int n = len - at < CHUNK ? len - at : CHUNK;
        lx_dtype_widen(d, a, (const uint16_t *)in + at, n, 1.0);
        lx_dtype_widen(d, b, (uint16_t *)inout + at, n, 1.0);
        for (int i = 0; i < n; i++) {
            if (how == COMBINE_SUM) b[i] = a[i] + b[i]; /* in fp32 */
            else if (how == COMBINE_MIN) b[i] = a[i] < b[i] ? a[i] : b[i];
            else b[i] = a[i] > b[i] ? a[i] : b[i];
        }
        lx_dtype_narrow(d, (uint16_t *)inout + at, b, n, 1.0); /* the step's one rounding */
    }
}

static void sum_16(void *in, void *inout, int *len, MPI_Datatype *type) {
    combine_16(in, inout, *len, *type, COMBINE_SUM);
}
static void min_16(void *in, void *inout, int *len, MPI_Datatype *type) {
    combine_16(in, inout, *len, *type, COMBINE_MIN);
}
static void max_16(void *in, void *inout, int *len, MPI_Datatype *type) {
    combine_16(in, inout, *len, *type, COMBINE_MAX);
}

void lx_mpi_make_16_bit_types(void) {
    if (bf16_type != MPI_DATATYPE_NULL) return;
    MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &bf16_type));
    MPI_CHECK(MPI_Type_commit(&bf16_type));
    MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &f16_type));
    MPI_CHECK(MPI_Type_commit(&f16_type));
    MPI_CHECK(MPI_Op_create(sum_16, 1, &op16_sum));
    MPI_CHECK(MPI_Op_create(min_16, 1, &op16_min));
    MPI_CHECK(MPI_Op_create(max_16, 1, &op16_max));
}

MPI_Datatype lx_mpi_type_as(dtype d) {
    switch (d) {
    case DTYPE_BF16: return bf16_type;
    case DTYPE_F16: return f16_type;
    default: return MPI_FLOAT;
    }
}

/* The MPI type of the call being made (lx_current_dtype: fp32, bf16 or fp16). */
static MPI_Datatype mpi_type(void) { return lx_mpi_type_as(lx_current_dtype()); }

MPI_Op lx_mpi_op(dist_op op) {
    switch (op) {
    case DIST_MIN: return MPI_MIN;
    case DIST_MAX: return MPI_MAX;
    default: return MPI_SUM; /* SUM, and AVG before its division */
    }
}

void lx_mpi_average(float *x, size_t count, dist_op op, int world_size) {
    if (op != DIST_AVG) return;
    for (size_t i = 0; i < count; i++)
        x[i] /= (float)world_size;
}

void lx_mpi_average_as(dtype d, void *x, size_t count, dist_op op, int world_size) {
    if (d == DTYPE_F32 || op != DIST_AVG) {
        lx_mpi_average(x, count, op, world_size);
        return;
    }
    float *wide = lx_host_buffer((int64_t)count);
    lx_dtype_widen(d, wide, x, (int64_t)count, 1.0);
    lx_mpi_average(wide, count, op, world_size);
    lx_dtype_narrow(d, x, wide, (int64_t)count, 1.0);
    free(wide);
}

MPI_Op lx_mpi_op_as(dtype d, dist_op op) {
    if (d == DTYPE_F32) return lx_mpi_op(op);
    return op == DIST_MIN ? op16_min : op == DIST_MAX ? op16_max : op16_sum;
}

/* The op for the call being made: MPI's own for fp32, ours for 16 bits. */
static MPI_Op mpi_op(dist_op op) { return lx_mpi_op_as(lx_current_dtype(), op); }

static void average(float *x, size_t count, dist_op op) {
    lx_mpi_average_as(lx_current_dtype(), x, count, op, lx_current_size());
}

static void op_barrier(void) { MPI_CHECK(MPI_Barrier(mpi_comm)); }

static void op_all_reduce(float *buf, size_t count, dist_op op) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(), mpi_op(op), mpi_comm));
    average(buf, count, op);
}

static void op_reduce(float *buf, size_t count, int root, dist_op op) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(mpi_comm, &rank));
    if (rank == root) {
        MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, buf, (int)count, mpi_type(), mpi_op(op), root, mpi_comm));
        average(buf, count, op);
    } else {
        MPI_CHECK(MPI_Reduce(buf, NULL, (int)count, mpi_type(), mpi_op(op), root, mpi_comm));
    }
}

static void op_broadcast(float *buf, size_t count, int root) {
    MPI_CHECK(MPI_Bcast(buf, (int)count, mpi_type(), root, mpi_comm));
}

static void op_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    MPI_CHECK(MPI_Reduce_scatter_block(in, out, (int)count, mpi_type(), mpi_op(op), mpi_comm));
    average(out, count, op);
}

static void op_all_gather(float *out, const float *in, size_t count) {
    MPI_CHECK(MPI_Allgather(in, (int)count, mpi_type(), out, (int)count, mpi_type(), mpi_comm));
}

static void op_scatter(float *out, const float *in, size_t count, int root) {
    MPI_CHECK(MPI_Scatter(in, (int)count, mpi_type(), out, (int)count, mpi_type(), root, mpi_comm));
}

static void op_gather(float *out, const float *in, size_t count, int root) {
    MPI_CHECK(MPI_Gather(in, (int)count, mpi_type(), out, (int)count, mpi_type(), root, mpi_comm));
}

static void op_send(const float *buf, size_t count, int peer) {
    MPI_CHECK(MPI_Send(buf, (int)count, mpi_type(), peer, TAG_P2P, mpi_comm));
}

static void op_recv(float *buf, size_t count, int peer) {
    MPI_CHECK(MPI_Recv(buf, (int)count, mpi_type(), peer, TAG_P2P, mpi_comm, MPI_STATUS_IGNORE));
}

/* A non-blocking call's request. AVG needs a division once the sum has
 * arrived: `average` is the buffer to divide at wait (NULL for others). */
typedef struct mpi_request {
    MPI_Request req;
    float *average;
    size_t count;
    dtype dt;                  /* the call's (lx_current_dtype at the call) */
    MPI_Datatype type;         /* its MPI type */
    int size;                  /* AVG divides by it: the world's or the group's at the call */
    MPI_Comm comm;             /* what a collective starts on (the current async communicator at the call) */
    lx_progress_group *moving; /* the progress thread's hold on req (comm_progress.c) */
    /* A collective the progress thread starts: what to start. */
    int (*start)(struct mpi_request *r);
    float *out;
    const float *in;
    MPI_Op op;
    int root;
} mpi_request;

static mpi_request *new_request(float *average, size_t count) {
    mpi_request *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory");
    r->req = MPI_REQUEST_NULL;
    r->average = average;
    r->count = count;
    r->dt = lx_current_dtype();
    r->type = mpi_type();
    r->size = lx_current_size();
    r->comm = async_comm;
    return r;
}

/* Sends and receives start here, on the lecture's thread, on the blocking
 * calls' communicator: two messages between the same ranks are matched in
 * the order the lecture sent them (MPI's non-overtaking rule), whichever
 * call made them. The progress thread then keeps them moving. */
static void *op_isend(const float *buf, size_t count, int peer) {
    mpi_request *r = new_request(NULL, 0);
    MPI_CHECK(MPI_Isend(buf, (int)count, mpi_type(), peer, TAG_P2P, mpi_comm, &r->req));
    r->moving = lx_progress_watch(&r->req, 1);
    return r;
}

static void *op_irecv(float *buf, size_t count, int peer) {
    mpi_request *r = new_request(NULL, 0);
    MPI_CHECK(MPI_Irecv(buf, (int)count, mpi_type(), peer, TAG_P2P, mpi_comm, &r->req));
    r->moving = lx_progress_watch(&r->req, 1);
    return r;
}

/* The non-blocking collectives (MPI 3) are started by the rank's progress
 * thread (comm_progress.c), in the order the lecture made them, on a
 * communicator of their own (async_world: no other thread starts a
 * collective there, so every rank starts them in the same order), and kept
 * moving there while the lecture's thread computes. Starting one is not
 * free: Open MPI copies through shared memory before MPI_Iallreduce
 * returns (27-36 ms for 16 MiB on 2 ranks here). */
static int start_iall_reduce(mpi_request *r) {
    return MPI_Iallreduce(MPI_IN_PLACE, r->out, (int)r->count, r->type, r->op, r->comm, &r->req);
}
static int start_ibroadcast(mpi_request *r) {
    return MPI_Ibcast(r->out, (int)r->count, r->type, r->root, r->comm, &r->req);
}
static int start_ireduce_scatter(mpi_request *r) {
    return MPI_Ireduce_scatter_block(r->in, r->out, (int)r->count, r->type, r->op, r->comm, &r->req);
}
static int start_iall_gather(mpi_request *r) {
    return MPI_Iallgather(r->in, (int)r->count, r->type, r->out, (int)r->count, r->type, r->comm, &r->req);
}
static int start_iall_to_all(mpi_request *r) {
    return MPI_Ialltoall(r->in, (int)r->count, r->type, r->out, (int)r->count, r->type, r->comm, &r->req);
}

static int run_start(void *ctx) {
    mpi_request *r = ctx;
    return r->start(r);
}

static void *launch(mpi_request *r, int (*start)(mpi_request *)) {
    r->start = start;
    r->moving = lx_progress_launch(run_start, r, &r->req, 1);
    return r;
}

static void *op_iall_reduce(float *buf, size_t count, dist_op op) {
    mpi_request *r = new_request(op == DIST_AVG ? buf : NULL, count);
    r->out = buf;
    r->op = mpi_op(op);
    return launch(r, start_iall_reduce);
}

static void *op_ibroadcast(float *buf, size_t count, int root) {
    mpi_request *r = new_request(NULL, count);
    r->out = buf;
    r->root = root;
    return launch(r, start_ibroadcast);
}

static void *op_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    mpi_request *r = new_request(op == DIST_AVG ? out : NULL, count);
    r->out = out;
    r->in = in;
    r->op = mpi_op(op);
    return launch(r, start_ireduce_scatter);
}

static void *op_iall_gather(float *out, const float *in, size_t count) {
    mpi_request *r = new_request(NULL, count);
    r->out = out;
    r->in = in;
    return launch(r, start_iall_gather);
}

static void op_wait(void *request) {
    mpi_request *r = request;
    lx_progress_claim(r->moving, "MPI_Wait");
    MPI_CHECK(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
    if (r->average) lx_mpi_average_as(r->dt, r->average, r->count, DIST_AVG, r->size);
    free(r);
}

static int op_test(void *request) {
    mpi_request *r = request;
    if (r->moving) return lx_progress_test(r->moving, "MPI_Testall");
    int done = 0;
    MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
    return done;
}

static void op_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    MPI_CHECK(MPI_Sendrecv(send, (int)send_count, mpi_type(), dst, TAG_P2P, recv, (int)recv_count, mpi_type(), src,
                           TAG_P2P, mpi_comm, MPI_STATUS_IGNORE));
}

static void op_all_to_all(float *out, const float *in, size_t count) {
    MPI_CHECK(MPI_Alltoall(in, (int)count, mpi_type(), out, (int)count, mpi_type(), mpi_comm));
}

static void *op_iall_to_all(float *out, const float *in, size_t count) {
    mpi_request *r = new_request(NULL, count);
    r->out = out;
    r->in = in;
    return launch(r, start_iall_to_all);
}

static void *op_group_new(const dist_group *g) {
    mpi_group *m = calloc(1, sizeof *m);
    if (!m) lx_fatal("out of memory");
    m->comm = g->comm;
    MPI_CHECK(MPI_Comm_dup(g->comm, &m->async));
    MPI_CHECK(MPI_Comm_set_errhandler(m->async, MPI_ERRORS_RETURN));
    return m;
}

static void op_group_free(void *backend_group) {
    mpi_group *m = backend_group;
    MPI_CHECK(MPI_Comm_free(&m->async)); /* m->comm is the group's, freed by comm_groups.c */
    free(m);
}

static void op_use_group(const dist_group *g) {
    const mpi_group *m = g ? g->backend : NULL;
    mpi_comm = m ? m->comm : world_comm;
    async_comm = m ? m->async : world_async;
}

static void op_stop(void) {
    if (world_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&world_comm));
    if (world_async != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&world_async));
    mpi_comm = async_comm = MPI_COMM_NULL;
}

static const lx_comm_ops mpi_ops = {
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

const lx_comm_ops *lx_comm_mpi_start(void) {
    lx_mpi_make_16_bit_types();
    MPI_Comm comm = lx_the_world.comm;
    MPI_CHECK(MPI_Comm_dup(comm, &world_comm));
    MPI_CHECK(MPI_Comm_set_errhandler(world_comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_dup(comm, &world_async));
    MPI_CHECK(MPI_Comm_set_errhandler(world_async, MPI_ERRORS_RETURN));
    op_use_group(NULL);
    return &mpi_ops;
}
