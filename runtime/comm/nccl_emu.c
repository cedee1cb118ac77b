/*
 * nccl_emu.c: an NCCL and a GPU's streams on the CPU, strict enough that a
 * program that completes here completes on any NCCL (nccl_api.h).
 *
 * comm_nccl.c, the NCCL backend's logic, runs on this table when a spawn
 * is forced to NCCL with LECTERN_NCCL_EMULATE=1: host tensors, the very
 * same decisions (which communicator and stream each call goes on, which
 * event it waits for), and NCCL's ordering rules at their worst:
 *
 *   - streams are FIFO queues. One thread per rank process (the "device")
 *     drives every stream of the process, as a GPU runs all its streams at
 *     once; it never blocks on one stream's operation, so any number of
 *     them run together (the co-residency NCCL itself does not promise:
 *     docs/gpu.md names it as the assumption it is);
 *   - an operation, or a group of them, starts only when it is at the head
 *     of every stream it was queued on, and when every communicator it uses
 *     has ended its previous operation (NCCL runs a communicator's kernels
 *     in issue order). A group's operations then start together and the
 *     group ends when all of them have: a request inside it is done only
 *     with the whole group;
 *   - a send is MPI_Issend, posted when it starts: it completes only once
 *     the receive on the other rank has started too, however small the
 *     message (NCCL buffers small sends; a program must not count on it);
 *   - each communicator has an MPI communicator of its own for its
 *     operations (so matching follows it) and one for making others from it
 *     (comm_split runs on the caller's thread while operations may be in
 *     flight on the device thread);
 *   - an event is a stream and a count: "this stream has ended that many
 *     operations". The compute stream (NULL) is the host itself: tensor
 *     work is done when its call returns, so its events are passed at once,
 *     and a wait of the compute stream is a wait of the host.
 *
 * What it cannot show (docs/gpu.md): NCCL's protocols and buffer sizes,
 * whether kernels of several communicators fit on one GPU at once, NVLink,
 * device memory, a kernel that spins, performance. Its numbers are Open
 * MPI's on host memory: the sums are exact where the inputs make them so.
 * bf16 and fp16 are reduced by NCCL's rule (one rounding per step; ncclAvg
 * premultiplies), in Open MPI's order of steps: "16-bit reductions" below.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/nccl_api.h"
#include "trace/trace.h"

/* ---- the objects ---- */

struct lx_nccl_comm_s {
    MPI_Comm ops;  /* the operations' messages */
    MPI_Comm make; /* what comm_split splits: never touched by the device thread */
    int rank, size;
    uint64_t queued; /* groups queued that use it: the next one's turn */
    uint64_t ended;  /* groups that used it and ended: whose turn it is */
    int error;       /* LX_NCCL_SYSTEM_ERROR once an operation failed in MPI */
    int aborted;
    char error_text[MPI_MAX_ERROR_STRING + 64];
};

enum { SEND, RECV, ALL_REDUCE, REDUCE, BROADCAST, REDUCE_SCATTER, ALL_GATHER };

typedef struct emu_op {
    int kind;
    const void *in;
    void *out;
    size_t count;
    dtype dt;     /* the elements' type: fp32, bf16 or fp16 */
    void *scaled; /* ncclAvg on a 16-bit type: the contribution times 1/nranks (premultiply) */
    dist_op op;
    int peer; /* the peer of a send or receive, the root of a reduce or broadcast */
    lx_nccl_comm comm;
    lx_nccl_stream stream;
} emu_op;

/* Operations that start together and end as one: a group_start .. group_end,
 * or one operation alone. Queued as a "part" on each stream it uses. */
typedef struct emu_group {
    emu_op *ops;
    MPI_Request *reqs;
    int n_ops, cap;
    lx_nccl_comm comms[8]; /* the communicators it uses, and its turn on each */
    uint64_t turns[8];
    int n_comms;
    int n_parts, at_head, parts_left;
    int started, ended, failed;
} emu_group;

enum { TASK_GROUP, TASK_WAIT, TASK_COPY };

typedef struct emu_task {
    int kind;
    int at_head; /* TASK_GROUP: this part has been counted at its stream's head */
    emu_group *group;
    lx_nccl_stream wait_stream; /* TASK_WAIT: until this stream has ended wait_target operations */
    uint64_t wait_target;
    void *dst; /* TASK_COPY */
    const void *src;
    size_t bytes;
    struct emu_task *next;
} emu_task;

struct lx_nccl_stream_s {
    emu_task *head, *tail;
    uint64_t queued, ended; /* tasks queued so far, ended so far */
    struct lx_nccl_stream_s *next;
};

struct lx_nccl_event_s {
    lx_nccl_stream stream; /* NULL: the compute stream, always reached */
    uint64_t target;
};

/* Everything below is guarded by `lock`: the host thread queues and asks,
 * the device thread runs. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER; /* something was queued, or stop */
static pthread_t device;
static int device_running, device_stop;
static lx_nccl_stream streams;
static int group_depth;
static emu_group *open_group; /* between group_start and group_end */

/* ---- the device thread ---- */

static int reached(lx_nccl_stream s, uint64_t target) { return !s || s->ended >= target; }

static void pop(lx_nccl_stream s) {
    emu_task *t = s->head;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    s->ended++;
    free(t);
}

static int turn_has_come(const emu_group *g) {
    for (int i = 0; i < g->n_comms; i++)
        if (g->comms[i]->ended != g->turns[i]) return 0;
    return 1;
}

static void fail(emu_group *g, lx_nccl_comm c, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    c->error = LX_NCCL_SYSTEM_ERROR;
    snprintf(c->error_text, sizeof c->error_text, "%s failed in the NCCL emulator: %s", what, msg);
    g->failed = 1;
}

/*
 * 16-bit reductions, as NCCL makes them. NCCL's reduction kernels combine
 * bf16 and fp16 elements with the type's own add (__hadd2 on recent GPUs,
 * a widening to fp32 on older ones): each step of its algorithm (a hop of a
 * ring, a level of a tree) rounds its result to the 16-bit type, per
 * element. Adding two 16-bit values in fp32 and rounding once gives that
 * same correctly rounded result: fp32's 24 bits are at least twice the
 * 16-bit significand plus two (2 x 8 + 2 for bf16, 2 x 11 + 2 for fp16), so
 * rounding twice never differs from rounding once. The emulator reduces with
 * comm_mpi.c's user ops (lx_mpi_op_as), which do exactly that on each
 * application: one rounding per step, per element. What it cannot copy is
 * NCCL's order of the steps: Open MPI's algorithm picks which partial sums
 * meet (a ring's order on NCCL), so beyond two ranks a last bit may differ
 * from a GPU's; the bound (p - 1 roundings of partial sums) is the same.
 *
 * ncclAvg on floating types is NCCL's "premultiply, then sum": each rank's
 * contribution is multiplied by 1/nranks (that scalar rounded to the type
 * first) and rounded to the type, and the products are summed as above; no
 * division at the end. Here the product is made in double and rounded once
 * (lx_dtype_narrow: exact before its rounding, as the 16-bit product is in
 * fp32), into a copy of the contribution, so the caller's buffer is never
 * changed where it is only read (a reduce's non-root ranks). fp32's AVG stays
 * a sum divided at the end (average below).
 */
static MPI_Op mpi_op(const emu_op *o) { return lx_mpi_op_as(o->dt, o->op); }

static int premultiplies(const emu_op *o) {
    return o->dt != DTYPE_F32 && o->op == DIST_AVG &&
           (o->kind == ALL_REDUCE || o->kind == REDUCE || o->kind == REDUCE_SCATTER);
}

/* The contribution times 1/nranks, rounded to the type: o->scaled, freed
 * with the group. NULL when out of memory. */
static const void *premultiplied(emu_op *o) {
    size_t n = o->count * (o->kind == REDUCE_SCATTER ? (size_t)o->comm->size : 1);
    float one_over[1] = {1.0f / (float)o->comm->size};
    uint16_t scalar;
    lx_dtype_narrow(o->dt, &scalar, one_over, 1, 1.0); /* the scalar in the type, as NCCL holds it */
    lx_dtype_widen(o->dt, one_over, &scalar, 1, 1.0);
    float *wide = malloc((n ? n : 1) * sizeof *wide);
    o->scaled = malloc((n ? n : 1) * sizeof(uint16_t));
    if (!wide || !o->scaled) {
        free(wide);
        return NULL;
    }
    lx_dtype_widen(o->dt, wide, o->in, (int64_t)n, 1.0);
    lx_dtype_narrow(o->dt, o->scaled, wide, (int64_t)n, one_over[0]); /* one rounding per contribution */
    free(wide);
    return o->scaled;
}

/* Posts one operation's MPI call; the request lands in *req. */
static int post(emu_op *o, MPI_Request *req) {
    lx_nccl_comm c = o->comm;
    int n = (int)o->count;
    MPI_Datatype type = lx_mpi_type_as(o->dt);
    const void *in = o->in;
    if (premultiplies(o) && !(in = premultiplied(o))) return MPI_ERR_NO_MEM;
    const void *in_place = in == o->out ? MPI_IN_PLACE : in;
    switch (o->kind) {
    case SEND: return MPI_Issend(in, n, type, o->peer, 0, c->ops, req);
    case RECV: return MPI_Irecv(o->out, n, type, o->peer, 0, c->ops, req);
    case ALL_REDUCE: return MPI_Iallreduce(in_place, o->out, n, type, mpi_op(o), c->ops, req);
    case REDUCE:
        if (c->rank == o->peer) return MPI_Ireduce(in_place, o->out, n, type, mpi_op(o), o->peer, c->ops, req);
        return MPI_Ireduce(in, NULL, n, type, mpi_op(o), o->peer, c->ops, req);
    case BROADCAST:
        if (c->rank == o->peer && in != o->out) memmove(o->out, in, o->count * dtype_size(o->dt));
        return MPI_Ibcast(o->out, n, type, o->peer, c->ops, req);
    case REDUCE_SCATTER: return MPI_Ireduce_scatter_block(in, o->out, n, type, mpi_op(o), c->ops, req);
    default: return MPI_Iallgather(in, n, type, o->out, n, type, c->ops, req);
    }
}

static void start(emu_group *g) {
    g->started = 1;
    for (int i = 0; i < g->n_ops; i++) {
        g->reqs[i] = MPI_REQUEST_NULL;
        int rc = post(&g->ops[i], &g->reqs[i]);
        if (rc != MPI_SUCCESS) {
            fail(g, g->ops[i].comm, rc, "an operation's start");
            return;
        }
    }
}

/* fp32's AVG is a sum divided by the ranks where the result is (16-bit
 * types premultiplied instead, above). NCCL premultiplies fp32 too; the
 * emulator keeps the division its fp32 results have always had. Over the
 * same sums the two rules agree where the world size is a power of two
 * (scaling by 1/2^k is exact, barring underflow) and may differ in the last
 * bits elsewhere. */
static void average(emu_group *g) {
    for (int i = 0; i < g->n_ops; i++) {
        emu_op *o = &g->ops[i];
        if (o->op != DIST_AVG || o->dt != DTYPE_F32) continue;
        int has_result =
                o->kind == ALL_REDUCE || o->kind == REDUCE_SCATTER || (o->kind == REDUCE && o->comm->rank == o->peer);
        if (has_result) lx_mpi_average(o->out, o->count, DIST_AVG, o->comm->size);
    }
}

static int try_end(emu_group *g) {
    int done = 0;
    int rc = MPI_Testall(g->n_ops, g->reqs, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
        fail(g, g->ops[0].comm, rc, "an operation");
        return 0;
    }
    if (!done) return 0;
    average(g);
    g->ended = 1;
    for (int i = 0; i < g->n_comms; i++)
        g->comms[i]->ended++;
    return 1;
}

/* One look at the head of each stream; 1 when anything moved. */
static int step(void) {
    int moved = 0;
    for (lx_nccl_stream s = streams; s; s = s->next) {
        emu_task *t = s->head;
        if (!t) continue;
        if (t->kind == TASK_WAIT) {
            if (reached(t->wait_stream, t->wait_target)) {
                pop(s);
                moved = 1;
            }
            continue;
        }
        if (t->kind == TASK_COPY) {
            memmove(t->dst, t->src, t->bytes);
            pop(s);
            moved = 1;
            continue;
        }
        emu_group *g = t->group;
        if (!t->at_head) {
            t->at_head = 1;
            g->at_head++;
            moved = 1;
        }
        if (g->failed) continue; /* the host finds the error and stops the rank */
        if (!g->started && g->at_head == g->n_parts && turn_has_come(g)) {
            start(g);
            moved = 1;
        }
        if (g->started && !g->ended && !g->failed && try_end(g)) moved = 1;
        if (g->ended) {
            pop(s);
            if (--g->parts_left == 0) {
                for (int i = 0; i < g->n_ops; i++)
                    free(g->ops[i].scaled);
                free(g->ops);
                free(g->reqs);
                free(g);
            }
            moved = 1;
        }
    }
    return moved;
}

static int anything_queued(void) {
    for (lx_nccl_stream s = streams; s; s = s->next)
        if (s->head) return 1;
    return 0;
}

/* Runs the streams until told to stop. When nothing moves it naps, 20 us
 * at first and up to MAX_NAP_US while nothing moves (a transfer waiting for
 * its peer costs a few wake-ups a millisecond, not a core); with nothing
 * queued it sleeps until something is. The cap is what a hand-off can cost
 * beyond NCCL's: at 1 ms, lecture_08's modelled pipelines on the emulator
 * measured their bubble 0.131 against 0.111 (22 hand-offs up to 1 ms late on
 * a 0.55 s span); 250 us keeps a hand-off within what a message costs on
 * Open MPI here (0.1-0.5 ms). */
#define MAX_NAP_US 250
static void *run_device(void *unused) {
    (void)unused;
    long nap_us = 20;
    pthread_mutex_lock(&lock);
    while (!device_stop) {
        if (step()) {
            nap_us = 20;
            continue;
        }
        if (!anything_queued()) {
            pthread_cond_wait(&work, &lock);
            nap_us = 20;
            continue;
        }
        pthread_mutex_unlock(&lock);
        struct timespec pause = {0, nap_us * 1000};
        nanosleep(&pause, NULL);
        if (nap_us < MAX_NAP_US) nap_us = nap_us * 2 < MAX_NAP_US ? nap_us * 2 : MAX_NAP_US;
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* ---- queueing (the host's side) ---- */

static void queue(lx_nccl_stream s, emu_task *t) {
    t->next = NULL;
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    s->queued++;
}

static emu_task *new_task(int kind) {
    emu_task *t = calloc(1, sizeof *t);
    if (!t) lx_fatal("out of memory");
    t->kind = kind;
    return t;
}

/* The group goes on each of its streams; its turn on each of its
 * communicators is taken now, in the order the host queued. */
static void queue_group(emu_group *g) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < g->n_comms; i++)
        g->turns[i] = g->comms[i]->queued++;
    for (int i = 0; i < g->n_ops; i++) {
        lx_nccl_stream s = g->ops[i].stream;
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= g->ops[j].stream == s;
        if (seen) continue;
        emu_task *t = new_task(TASK_GROUP);
        t->group = g;
        queue(s, t);
        g->n_parts++;
    }
    g->parts_left = g->n_parts;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&lock);
}

static emu_group *new_group(void) {
    emu_group *g = calloc(1, sizeof *g);
    if (!g) lx_fatal("out of memory");
    return g;
}

/* Adds an operation to the open group, or queues it alone. */
static int add(emu_op o) {
    if (!o.comm || !o.stream) return LX_NCCL_INVALID_USAGE; /* the emulator queues no work on the compute stream */
    if (o.count > (size_t)INT32_MAX) return LX_NCCL_INVALID_USAGE;
    if (o.dt != DTYPE_F32 && o.dt != DTYPE_BF16 && o.dt != DTYPE_F16)
        return LX_NCCL_INVALID_USAGE; /* NCCL has no fp8 sum here */
    emu_group *g = group_depth > 0 ? open_group : new_group();
    if (g->n_ops == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 4;
        g->ops = realloc(g->ops, (size_t)g->cap * sizeof *g->ops);
        g->reqs = realloc(g->reqs, (size_t)g->cap * sizeof *g->reqs);
        if (!g->ops || !g->reqs) lx_fatal("out of memory");
    }
    g->ops[g->n_ops++] = o;
    int known = 0;
    for (int i = 0; i < g->n_comms; i++)
        known |= g->comms[i] == o.comm;
    if (!known) {
        if (g->n_comms == (int)(sizeof g->comms / sizeof g->comms[0])) return LX_NCCL_INVALID_USAGE;
        g->comms[g->n_comms++] = o.comm;
    }
    if (group_depth == 0) queue_group(g);
    return LX_NCCL_OK;
}

static int emu_group_start(void) {
    if (group_depth++ == 0) open_group = new_group();
    return LX_NCCL_OK;
}

static int emu_group_end(void) {
    if (group_depth == 0) return LX_NCCL_INVALID_USAGE;
    if (--group_depth > 0) return LX_NCCL_OK;
    emu_group *g = open_group;
    open_group = NULL;
    if (g->n_ops == 0) {
        free(g);
        return LX_NCCL_OK;
    }
    queue_group(g);
    return LX_NCCL_OK;
}

static int emu_send(const void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream) {
    return add((emu_op){SEND, buf, NULL, count, dt, NULL, DIST_SUM, peer, comm, stream});
}

static int emu_recv(void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream) {
    return add((emu_op){RECV, NULL, buf, count, dt, NULL, DIST_SUM, peer, comm, stream});
}

static int emu_all_reduce(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                          lx_nccl_stream stream) {
    return add((emu_op){ALL_REDUCE, in, out, count, dt, NULL, op, -1, comm, stream});
}

static int emu_reduce(const void *in, void *out, size_t count, dtype dt, dist_op op, int root, lx_nccl_comm comm,
                      lx_nccl_stream stream) {
    return add((emu_op){REDUCE, in, out, count, dt, NULL, op, root, comm, stream});
}

static int emu_broadcast(const void *in, void *out, size_t count, dtype dt, int root, lx_nccl_comm comm,
                         lx_nccl_stream stream) {
    return add((emu_op){BROADCAST, in, out, count, dt, NULL, DIST_SUM, root, comm, stream});
}

static int emu_reduce_scatter(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                              lx_nccl_stream stream) {
    return add((emu_op){REDUCE_SCATTER, in, out, count, dt, NULL, op, -1, comm, stream});
}

static int emu_all_gather(const void *in, void *out, size_t count, dtype dt, lx_nccl_comm comm, lx_nccl_stream stream) {
    return add((emu_op){ALL_GATHER, in, out, count, dt, NULL, DIST_SUM, -1, comm, stream});
}

/* ---- communicators ---- */

static const char ID_MARK[] = "lectern NCCL emulator";

static int emu_get_unique_id(lx_nccl_id *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, ID_MARK, sizeof ID_MARK);
    return LX_NCCL_OK;
}

/* A communicator over `make` (taken over): its operations get a duplicate. */
static int new_comm(MPI_Comm make, lx_nccl_comm *out) {
    lx_nccl_comm c = calloc(1, sizeof *c);
    if (!c) lx_fatal("out of memory");
    c->make = make;
    MPI_CHECK(MPI_Comm_set_errhandler(make, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_dup(make, &c->ops));
    MPI_CHECK(MPI_Comm_set_errhandler(c->ops, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(make, &c->rank));
    MPI_CHECK(MPI_Comm_size(make, &c->size));
    *out = c;
    return LX_NCCL_OK;
}

/* The emulator's device thread calls MPI beside the rank's own thread. */
static void need_thread_multiple(void) {
    int level = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Query_thread(&level));
    if (level < MPI_THREAD_MULTIPLE)
        lx_fatal("the NCCL emulator needs Open MPI's MPI_THREAD_MULTIPLE, and this rank has level %d", level);
}

/* The ranks that pass the same id are the spawn's ranks (the only way
 * comm_nccl.c makes a first communicator): a duplicate of the spawn's
 * communicator. */
static int emu_comm_init_rank(lx_nccl_comm *comm, int nranks, const lx_nccl_id *id, int rank) {
    need_thread_multiple();
    lx_mpi_make_16_bit_types(); /* here, on the rank's thread: the device thread only uses them */
    if (memcmp(id->bytes, ID_MARK, sizeof ID_MARK) != 0) return LX_NCCL_INVALID_USAGE;
    int size = 0, me = -1;
    MPI_Comm world = lx_the_world.comm;
    MPI_CHECK(MPI_Comm_size(world, &size));
    MPI_CHECK(MPI_Comm_rank(world, &me));
    if (size != nranks || me != rank) return LX_NCCL_INVALID_USAGE;
    MPI_Comm make;
    MPI_CHECK(MPI_Comm_dup(world, &make));
    return new_comm(make, comm);
}

static int emu_comm_split(lx_nccl_comm comm, int color, int key, lx_nccl_comm *out) {
    MPI_Comm make;
    int rc = MPI_Comm_split(comm->make, color == LX_NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &make);
    if (rc != MPI_SUCCESS) return LX_NCCL_SYSTEM_ERROR;
    *out = NULL;
    if (make == MPI_COMM_NULL) return LX_NCCL_OK;
    return new_comm(make, out);
}

/* ncclCommDestroy may wait for the communicator's other ranks (its
 * finalization is collective): here it always does, so that ranks that
 * destroy their communicators in different orders wait for ever, as they
 * may on NCCL. */
static int emu_comm_destroy(lx_nccl_comm comm) {
    if (!comm) return LX_NCCL_OK;
    MPI_CHECK(MPI_Barrier(comm->make));
    MPI_CHECK(MPI_Comm_free(&comm->ops));
    MPI_CHECK(MPI_Comm_free(&comm->make));
    free(comm);
    return LX_NCCL_OK;
}

/* The rank stops right after an abort: operations in flight are left. */
static int emu_comm_abort(lx_nccl_comm comm) {
    pthread_mutex_lock(&lock);
    if (comm) comm->aborted = 1;
    pthread_mutex_unlock(&lock);
    return LX_NCCL_OK;
}

static int emu_comm_async_error(lx_nccl_comm comm, int *error) {
    pthread_mutex_lock(&lock);
    *error = comm ? comm->error : LX_NCCL_INVALID_USAGE;
    pthread_mutex_unlock(&lock);
    return LX_NCCL_OK;
}

static const char *emu_error_string(int status) {
    switch (status) {
    case 0: return "no error";
    case 1: return "unhandled cuda error";
    case 2: return "unhandled system error";
    case 3: return "internal error";
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

static const char *emu_last_error(lx_nccl_comm comm) { return comm ? comm->error_text : ""; }

/* ---- the device ---- */

static int emu_set_device(int device) {
    (void)device;
    return LX_DEVICE_OK;
}

static int emu_stream_create(lx_nccl_stream *stream) {
    lx_nccl_stream s = calloc(1, sizeof *s);
    if (!s) lx_fatal("out of memory");
    pthread_mutex_lock(&lock);
    s->next = streams;
    streams = s;
    if (!device_running) {
        device_stop = 0;
        if (pthread_create(&device, NULL, run_device, NULL) != 0) lx_fatal("cannot start the NCCL emulator's thread");
        device_running = 1;
    }
    pthread_mutex_unlock(&lock);
    *stream = s;
    return LX_DEVICE_OK;
}

/* Its work must have ended (comm_nccl.c waits first). The last stream
 * stops the device thread. */
static int emu_stream_destroy(lx_nccl_stream stream) {
    pthread_mutex_lock(&lock);
    if (stream->head) {
        pthread_mutex_unlock(&lock);
        return 1; /* cudaErrorInvalidValue: work still queued */
    }
    lx_nccl_stream *p = &streams;
    while (*p && *p != stream)
        p = &(*p)->next;
    if (*p) *p = stream->next;
    int last = streams == NULL && device_running;
    if (last) {
        device_stop = 1;
        pthread_cond_signal(&work);
    }
    pthread_mutex_unlock(&lock);
    if (last) {
        pthread_join(device, NULL);
        device_running = 0;
    }
    free(stream);
    return LX_DEVICE_OK;
}

static int emu_event_create(lx_nccl_event *event) {
    *event = calloc(1, sizeof **event);
    if (!*event) lx_fatal("out of memory");
    return LX_DEVICE_OK;
}

static int emu_event_destroy(lx_nccl_event event) {
    free(event);
    return LX_DEVICE_OK;
}

static int emu_event_record(lx_nccl_event event, lx_nccl_stream stream) {
    pthread_mutex_lock(&lock);
    event->stream = stream;
    event->target = stream ? stream->queued : 0;
    pthread_mutex_unlock(&lock);
    return LX_DEVICE_OK;
}

static int emu_event_query(lx_nccl_event event) {
    pthread_mutex_lock(&lock);
    int done = reached(event->stream, event->target);
    pthread_mutex_unlock(&lock);
    return done ? LX_DEVICE_OK : LX_DEVICE_NOT_READY;
}

/* A device stream queues the wait. The compute stream is the host: it
 * waits here (comm_nccl.c has the host wait for the event first, polling
 * with its timeout, so this returns at once). */
static int emu_stream_wait_event(lx_nccl_stream stream, lx_nccl_event event) {
    pthread_mutex_lock(&lock);
    lx_nccl_stream on = event->stream;
    uint64_t target = event->target;
    if (stream) {
        emu_task *t = new_task(TASK_WAIT);
        t->wait_stream = on;
        t->wait_target = target;
        queue(stream, t);
        pthread_cond_signal(&work);
    }
    pthread_mutex_unlock(&lock);
    if (stream) return LX_DEVICE_OK;
    while (emu_event_query(event) == LX_DEVICE_NOT_READY) {
        struct timespec pause = {0, 50 * 1000};
        nanosleep(&pause, NULL);
    }
    return LX_DEVICE_OK;
}

static int emu_alloc(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? LX_DEVICE_OK : 2; /* cudaErrorMemoryAllocation */
}

static int emu_release(void *p) {
    free(p);
    return LX_DEVICE_OK;
}

static int emu_zero(void *p, size_t bytes) {
    memset(p, 0, bytes);
    return LX_DEVICE_OK;
}

static int emu_copy(void *dst, const void *src, size_t bytes, lx_nccl_stream stream) {
    if (!stream) {
        memmove(dst, src, bytes);
        return LX_DEVICE_OK;
    }
    emu_task *t = new_task(TASK_COPY);
    t->dst = dst;
    t->src = src;
    t->bytes = bytes;
    pthread_mutex_lock(&lock);
    queue(stream, t);
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&lock);
    return LX_DEVICE_OK;
}

static const char *emu_device_error_string(int status) {
    switch (status) {
    case 0: return "no error";
    case 1: return "invalid argument (a stream destroyed with work still queued)";
    case 2: return "out of memory";
    case LX_DEVICE_NOT_READY: return "device not ready";
    default: return "unknown device error";
    }
}

const lx_nccl_api *lx_nccl_emulator(void) {
    static const lx_nccl_api api = {
            .name = "the NCCL emulator (CPU, host memory)",
            .version = 0,
            .emulated = 1,
            .get_unique_id = emu_get_unique_id,
            .comm_init_rank = emu_comm_init_rank,
            .comm_split = emu_comm_split,
            .comm_destroy = emu_comm_destroy,
            .comm_abort = emu_comm_abort,
            .comm_async_error = emu_comm_async_error,
            .error_string = emu_error_string,
            .last_error = emu_last_error,
            .group_start = emu_group_start,
            .group_end = emu_group_end,
            .send = emu_send,
            .recv = emu_recv,
            .all_reduce = emu_all_reduce,
            .reduce = emu_reduce,
            .broadcast = emu_broadcast,
            .reduce_scatter = emu_reduce_scatter,
            .all_gather = emu_all_gather,
            .set_device = emu_set_device,
            .stream_create = emu_stream_create,
            .stream_destroy = emu_stream_destroy,
            .event_create = emu_event_create,
            .event_destroy = emu_event_destroy,
            .event_record = emu_event_record,
            .event_query = emu_event_query,
            .stream_wait_event = emu_stream_wait_event,
            .alloc = emu_alloc,
            .release = emu_release,
            .zero = emu_zero,
            .copy = emu_copy,
            .device_error_string = emu_device_error_string,
    };
    return &api;
}
