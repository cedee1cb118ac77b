/*
 * comm.c: the collectives a spawned function calls, torch.distributed style.
 *
 * A blocking call returns with the result in the tensor (async_op=False);
 * a *_async call returns a request at once and dist_wait() completes it
 * (async_op=True). This file checks the arguments against the lecture's
 * intent (shapes, ranks, where the tensor lives) and names the lecture line
 * when they are wrong, checks that the ranks agree on the call
 * (comm_agree.c), and keeps the requests not yet waited for (each one not
 * waited for when the function returns is an error step at the line that
 * made it). The backend does the communication:
 *
 *   comm_mpi.c     Open MPI on host memory, over the spawn's communicator
 *   comm_nccl.c    NCCL on device memory, one GPU per rank (or on its CPU
 *                  emulator, nccl_emu.c, on host memory)
 *   comm_staged.c  Open MPI on device memory staged through pinned host
 *                  buffers, for ranks that share a GPU
 *
 * Around each call that waits for other ranks we note where the lecture is
 * and whom it waits for (lx_rank_enter, lx_rank_leave): if the ranks
 * deadlock, one crashes or one waits for a rank that has returned, the
 * parent can say at which line each rank was.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/comm_progress.h"
#include "trace/trace.h"
#include "comm/comm_agree.h"
#include "ranks/ranks.h"


void lx_comm_start(lx_backend b, int rank, int world_size, int device, MPI_Comm comm) {
    lx_backend_error_set_rank_active(lx_comm_active);
    lx_world_set((lx_world){.rank = rank, .size = world_size, .backend = b, .device = device, .comm = comm});
    lx_agree_start();
    if (lx_backend_is_nccl(b)) {
        lx_ops = lx_comm_stats_wrap(lx_comm_nccl_start(b == LX_BACKEND_NCCL_EMULATED));
        return;
    }
    if (b == LX_BACKEND_SHARED || b == LX_BACKEND_SHARED_CUDA_AWARE) {
#ifdef LECTERN_CUDA
        if (device < 0) lx_fatal("rank %d of a spawn on shared GPUs sees no GPU (CUDA_VISIBLE_DEVICES?)", rank);
        lx_ops = lx_comm_stats_wrap(
                lx_comm_staged_start(lx_cuda_stage_copier(device), b == LX_BACKEND_SHARED_CUDA_AWARE));
        return;
#else
        lx_fatal("a spawn on shared GPUs reached a rank built without CUDA");
#endif
    }
    if (b == LX_BACKEND_STAGED_HOST) {
        lx_ops = lx_comm_stats_wrap(lx_comm_staged_start(lx_stage_host_copier(), 0));
        return;
    }
    lx_ops = lx_comm_stats_wrap(lx_comm_mpi_start());
}

/* 1 when this spawn's tensors live on GPUs (not on the NCCL emulator: host tensors). */
static int on_device(void) {
    return lx_the_world.backend == LX_BACKEND_NCCL || lx_the_world.backend == LX_BACKEND_SHARED ||
           lx_the_world.backend == LX_BACKEND_SHARED_CUDA_AWARE;
}

/* A pool rank runs many spawns: after one, it is back to "outside spawn". */
static void finish_forgotten(void);

void lx_comm_finish_requests(void) {
    if (lx_ops) finish_forgotten();
}

static void free_groups(void);

void lx_comm_stop(void) {
    lx_comm_finish_requests();
    if (lx_ops) free_groups();
    if (lx_ops) lx_ops->stop();
    lx_agree_stop();
    lx_world_reset();
}

int dist_rank(void) { return lx_the_world.rank; }
int dist_world_size(void) { return lx_the_world.size; }
const char *dist_backend(void) {
    if (!lx_ops) return "none";
    return lx_backend_is_nccl(lx_the_world.backend) ? "nccl" : "mpi";
}

/* Outside spawn: the first GPU if there is one. In a rank: its own GPU under
 * NCCL (its index among the ranks of its host, which is its rank on one
 * machine), cuda:(rank mod GPUs) on shared GPUs, the CPU under Open MPI and
 * on the NCCL emulator.
 * dist_backend() says "mpi" on shared GPUs: the collectives are Open MPI's;
 * get_device() says where the tensors live. */
int get_device(int rank) {
    if (!lx_ops) return gpu_count() > 0 ? 0 : -1;
    if (lx_the_world.backend == LX_BACKEND_SHARED || lx_the_world.backend == LX_BACKEND_SHARED_CUDA_AWARE)
        return rank == lx_the_world.rank ? lx_the_world.device : rank % gpu_count();
    if (lx_the_world.backend != LX_BACKEND_NCCL) return -1;
    return rank == lx_the_world.rank ? lx_the_world.device : rank;
}

/* ---- checks ---- */

static void need_rank(const char *call) {
    if (!lx_ops) lx_fatal("%s() outside a spawned function: collectives run inside spawn()", call);
}

static const char *where_name(int device) {
    static char buf[32];
    if (device < 0) return "the CPU";
    snprintf(buf, sizeof buf, "cuda:%d", device);
    return buf;
}

/* The tensor exists and lives where this spawn's backend works. Returns its
 * element count. */
static size_t check_tensor(const char *call, const char *what, const tensor *t) {
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
    return (size_t)t->numel;
}

static void check_peer(const char *call, const char *what, int peer, int allow_self) {
    if (peer < 0 || peer >= lx_the_world.size)
        lx_fatal("%s(): %s %d is not a rank of this world (0 to %d)", call, what, peer, lx_the_world.size - 1);
    if (!allow_self && peer == lx_the_world.rank)
        lx_fatal("%s(): rank %d cannot %s itself", call, lx_the_world.rank,
                 what[0] == 'd' ? "send to" : "receive from");
}

static void check_op(const char *call, dist_op op) {
    if (op != DIST_SUM && op != DIST_AVG && op != DIST_MIN && op != DIST_MAX)
        lx_fatal("%s(): unknown reduction op %d (DIST_SUM, DIST_AVG, DIST_MIN or DIST_MAX)", call, (int)op);
}

/* ---- around each call that waits ---- */

/* Where the call is, captured once: for the status board (so the parent can
 * name the line when the rank waits for ever) and for the agreement check. */
typedef struct call_site {
    lx_frame frames[LX_MAX_FRAMES];
    int n;
} call_site;

static void enter(call_site *site, const char *call, int peer) {
    site->n = lx_stack_capture(site->frames, LX_MAX_FRAMES);
    lx_rank_enter(call, site->frames, site->n, peer);
}

/* A collective: every rank must make the same call (comm_agree.c). */
static void enter_collective(call_site *site, const char *call, size_t count, int op, int root) {
    enter(site, call, -1);
    lx_agree_collective(call, (int64_t)count, op, root, site->frames, site->n);
}

static void leave(void) { lx_rank_leave(); }

/* ---- collectives ---- */

/* --inspect-collectives: the tensors a collective reads and writes, as
 * inspect(x) would show them, just before it and just after it, named
 * "t (before dist_all_reduce)" after lectern.h's parameter names. */
static void show(const char *call, const char *what, const char *when, const tensor *t) {
    if (!t || !lx_inspect_collectives()) return;
    char *name = lx_fmt("%s (%s %s)", what, when, call);
    lx_inspect(name, LX_INSPECT_TENSOR, t, 0, 0);
    free(name);
}

void dist_barrier(void) {
    need_rank("dist_barrier");
    call_site site;
    enter_collective(&site, "dist_barrier", 0, -1, -1);
    lx_ops->barrier();
    leave();
}

void dist_all_reduce(tensor *t, dist_op op) {
    need_rank("dist_all_reduce");
    size_t n = check_tensor("dist_all_reduce", "the tensor", t);
    check_op("dist_all_reduce", op);
    show("dist_all_reduce", "t", "before", t);
    call_site site;
    enter_collective(&site, "dist_all_reduce", n, op, -1);
    lx_ops->all_reduce(t->data, n, op);
    leave();
    show("dist_all_reduce", "t", "after", t);
}

void dist_reduce(tensor *t, int dst, dist_op op) {
    need_rank("dist_reduce");
    size_t n = check_tensor("dist_reduce", "the tensor", t);
    check_peer("dist_reduce", "dst", dst, 1);
    check_op("dist_reduce", op);
    show("dist_reduce", "t", "before", t);
    call_site site;
    enter_collective(&site, "dist_reduce", n, op, dst);
    lx_ops->reduce(t->data, n, dst, op);
    leave();
    show("dist_reduce", "t", "after", t);
}

void dist_broadcast(tensor *t, int src) {
    need_rank("dist_broadcast");
    size_t n = check_tensor("dist_broadcast", "the tensor", t);
    check_peer("dist_broadcast", "src", src, 1);
    show("dist_broadcast", "t", "before", t);
    call_site site;
    enter_collective(&site, "dist_broadcast", n, -1, src);
    lx_ops->broadcast(t->data, n, src);
    leave();
    show("dist_broadcast", "t", "after", t);
}

/* The two tensors share memory (one a view into the other). */
static int overlap(const tensor *a, const tensor *b) {
    const float *a0 = a->data, *b0 = b->data;
    return a0 < b0 + b->numel && b0 < a0 + a->numel;
}

/* Says which elements `inner` shares with `outer`, and the fix: the call
 * writes output while it reads input. A gather's input inside its output
 * is copied out first; a reduce-scatter's output inside its input gets
 * memory of its own. */
static void __attribute__((noreturn)) same_memory(const char *call, const tensor *inner, const tensor *outer) {
    long long first = (long long)(inner->data - outer->data), last = first + (long long)inner->numel - 1;
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

/* Returns the output's element count. */
static size_t check_reduce_scatter_in(const char *call, const dist_group *g, tensor *output, const tensor *input,
                                      dist_op op) {
    size_t out_n = check_tensor(call, "output", output);
    size_t in_n = check_tensor(call, "input", input);
    check_op(call, op);
    int p = size_of(g);
    if (in_n != out_n * (size_t)p)
        lx_fatal("%s(): input has %zu elements, output %zu: input must be %s (%d) times output", call, in_n, out_n,
                 size_word(g), p);
    /* (empty tensors may both have no memory at all) */
    if (p > 1 && out_n > 0 && overlap(output, input)) same_memory(call, output, input);
    return out_n;
}

static size_t check_reduce_scatter(const char *call, tensor *output, const tensor *input, dist_op op) {
    return check_reduce_scatter_in(call, NULL, output, input, op);
}

/* Returns the input's element count. */
static size_t check_all_gather_in(const char *call, const dist_group *g, tensor *output, const tensor *input) {
    size_t out_n = check_tensor(call, "output", output);
    size_t in_n = check_tensor(call, "input", input);
    int p = size_of(g);
    if (out_n != in_n * (size_t)p)
        lx_fatal("%s(): output has %zu elements, input %zu: output must be %s (%d) times input", call, out_n, in_n,
                 size_word(g), p);
    if (p > 1 && in_n > 0 && overlap(output, input)) same_memory(call, input, output);
    return in_n;
}

static size_t check_all_gather(const char *call, tensor *output, const tensor *input) {
    return check_all_gather_in(call, NULL, output, input);
}

void dist_reduce_scatter(tensor *output, const tensor *input, dist_op op) {
    need_rank("dist_reduce_scatter");
    size_t out_n = check_reduce_scatter("dist_reduce_scatter", output, input, op);
    show("dist_reduce_scatter", "input", "before", input);
    call_site site;
    enter_collective(&site, "dist_reduce_scatter", out_n, op, -1);
    lx_ops->reduce_scatter(output->data, input->data, out_n, op);
    leave();
    show("dist_reduce_scatter", "output", "after", output);
}

void dist_all_gather(tensor *output, const tensor *input) {
    need_rank("dist_all_gather");
    size_t in_n = check_all_gather("dist_all_gather", output, input);
    show("dist_all_gather", "input", "before", input);
    call_site site;
    enter_collective(&site, "dist_all_gather", in_n, -1, -1);
    lx_ops->all_gather(output->data, input->data, in_n);
    leave();
    show("dist_all_gather", "output", "after", output);
}

void dist_scatter(tensor *output, const tensor *input, int src) {
    need_rank("dist_scatter");
    check_peer("dist_scatter", "src", src, 1);
    size_t out_n = check_tensor("dist_scatter", "output", output);
    const float *in = NULL;
    if (lx_the_world.rank == src) { /* only the source's input matters, as in torch */
        size_t in_n = check_tensor("dist_scatter", "input (on the src rank)", input);
        if (in_n != out_n * (size_t)lx_the_world.size)
            lx_fatal("dist_scatter(): input has %zu elements, output %zu: input must be world_size (%d) "
                     "times output",
                     in_n, out_n, lx_the_world.size);
        in = input->data;
    }
    show("dist_scatter", "input", "before", lx_the_world.rank == src ? input : NULL);
    call_site site;
    enter_collective(&site, "dist_scatter", out_n, -1, src);
    lx_ops->scatter(output->data, in, out_n, src);
    leave();
    show("dist_scatter", "output", "after", output);
}

void dist_gather(tensor *output, const tensor *input, int dst) {
    need_rank("dist_gather");
    check_peer("dist_gather", "dst", dst, 1);
    size_t in_n = check_tensor("dist_gather", "input", input);
    float *out = NULL;
    if (lx_the_world.rank == dst) {
        size_t out_n = check_tensor("dist_gather", "output (on the dst rank)", output);
        if (out_n != in_n * (size_t)lx_the_world.size)
            lx_fatal("dist_gather(): output has %zu elements, input %zu: output must be world_size (%d) "
                     "times input",
                     out_n, in_n, lx_the_world.size);
        out = output->data;
    }
    show("dist_gather", "input", "before", input);
    call_site site;
    enter_collective(&site, "dist_gather", in_n, -1, dst);
    lx_ops->gather(out, input->data, in_n, dst);
    leave();
    show("dist_gather", "output", "after", lx_the_world.rank == dst ? output : NULL);
}

/* ---- point to point ---- */

void dist_send(const tensor *t, int dst) {
    need_rank("dist_send");
    size_t n = check_tensor("dist_send", "the tensor", t);
    check_peer("dist_send", "dst", dst, 0);
    call_site site;
    enter(&site, "dist_send", dst);
    lx_agree_send_desc *d = lx_agree_send("dist_send", (int64_t)n, dst, site.frames, site.n);
    /* Not before the receive is posted, whatever the transport buffers. */
    lx_agree_needs(d, NULL);
    lx_agree_send_posted(d);
    lx_ops->send(t->data, n, dst);
    lx_agree_send_done(d);
    leave();
}

void dist_recv(tensor *t, int src) {
    need_rank("dist_recv");
    size_t n = check_tensor("dist_recv", "the tensor", t);
    check_peer("dist_recv", "src", src, 0);
    call_site site;
    enter(&site, "dist_recv", src);
    lx_agree_recv_desc *d = lx_agree_recv_post(src, (int64_t)n);
    lx_agree_needs(NULL, d);
    lx_agree_recv_check(d, "dist_recv", (int64_t)n, site.frames, site.n);
    lx_ops->recv(t->data, n, src);
    leave();
}

void dist_sendrecv(const tensor *send, int dst, tensor *recv, int src) {
    need_rank("dist_sendrecv");
    size_t sn = check_tensor("dist_sendrecv", "send", send);
    size_t rn = check_tensor("dist_sendrecv", "recv", recv);
    check_peer("dist_sendrecv", "dst", dst, 0);
    check_peer("dist_sendrecv", "src", src, 0);
    if ((const float *)send->data == recv->data && sn > 0 && rn > 0)
        lx_fatal("dist_sendrecv(): send and recv are the same memory");
    call_site site;
    enter(&site, "dist_sendrecv", src);
    lx_agree_send_desc *sd = lx_agree_send("dist_sendrecv", (int64_t)sn, dst, site.frames, site.n);
    lx_agree_recv_desc *rd = lx_agree_recv_post(src, (int64_t)rn);
    lx_agree_needs(sd, rd);
    lx_agree_recv_check(rd, "dist_sendrecv", (int64_t)rn, site.frames, site.n);
    lx_ops->sendrecv(send->data, sn, dst, recv->data, rn, src);
    lx_agree_send_done(sd);
    leave();
}

/* ---- requests ---- */

/* A request remembers the line that made it: dist_wait is where the rank
 * waits, but a request never waited for is reported at the line that made
 * it, when the spawned function returns. The outstanding ones form a list. */
struct dist_request {
    void *backend_request;
    dist_group *group;              /* a group call's group (busy until the wait), else NULL */
    const char *call;               /* "dist_all_reduce_async" */
    int peer;                       /* for the status board: -1 all ranks */
    lx_agree_send_desc *send_check; /* isend: the descriptor in flight */
    lx_agree_recv_desc *recv_check; /* irecv: checked at wait */
    int64_t count;
    call_site site;
    int n_uses; /* the tensors it uses until its wait */
    const tensor *uses[2];
    int writes[2]; /* the library writes into uses[i] */
    int hashed[2]; /* sum[i] holds uses[i]'s hash at the call */
    uint64_t sum[2];
    struct dist_request *prev, *next;
};

static dist_request *outstanding;

static dist_request *make_request(const char *call, int peer, int64_t count, const call_site *site) {
    dist_request *req = calloc(1, sizeof *req);
    if (!req) lx_fatal("out of memory");
    req->call = call;
    req->peer = peer;
    req->count = count;
    req->site = *site;
    req->next = outstanding;
    if (outstanding) outstanding->prev = req;
    outstanding = req;
    return req;
}

/* XXH3 (libxxhash): a send's buffer is hashed at the call and again at its
 * wait, on the lecture's thread, so its cost is on every message's path. A
 * byte-serial FNV-1a took ~45 us for a pipeline stage's 256 KiB activation
 * (one multiply's latency per 8 bytes), twice per message; XXH3 reads it at
 * memory speed (bench/bench_stage_msg.c). A change to the values goes
 * unnoticed but for 1 in 2^64. */
static uint64_t hash_values(const tensor *t) { return XXH3_64bits(t->data, (size_t)t->numel * sizeof(float)); }

/* The request uses `t` until its wait: the tensor operations refuse to
 * change it (and, when the library writes into it, to read it) meanwhile
 * (tensor_track.c). A tensor the library only reads, on the host, is also
 * hashed now and again at the wait: a change through ->data, which no
 * tensor operation sees, is caught there. Not in a timed region, which
 * times the library without the runtime's checks: the two hashes read the
 * whole buffer on the lecture's thread, 0.4 to 2 ms for a 4 MiB isend on
 * the 2-core machine, time an overlap measurement would count as exposed
 * transfer (lecture_scaling's ring). */
static void request_uses(dist_request *req, const tensor *t, int library_writes) {
    /* Two views of one chunk in two requests, one of which the library
     * writes (a send and a receive of the same memory): the one would
     * overwrite the other in flight, and the hash at the wait could only
     * blame "->data". Named here, at the second call, with the first's line. */
    for (const dist_request *o = outstanding; o; o = o->next) {
        if (o == req) continue;
        for (int j = 0; j < o->n_uses; j++) {
            const tensor *u = o->uses[j];
            if (u == t || !(library_writes || o->writes[j]) || t->device != u->device || t->numel == 0 ||
                u->numel == 0 || !overlap(t, u))
                continue;
            const lx_frame *at = o->site.n > 0 ? &o->site.frames[o->site.n - 1] : NULL;
            char *made = at ? lx_fmt("%s:%d", at->path, at->line) : strdup("an unknown line");
            lx_fatal("%s(): this tensor shares memory with the one %s at %s is still %s (two views of one "
                     "chunk): the %s would overwrite it in flight. Give %s a tensor of its own, or dist_wait "
                     "the first request before this call",
                     req->call, o->call, made, o->writes[j] ? "receiving into" : "sending",
                     library_writes ? "receive" : "earlier receive", library_writes ? "this call" : "one of them");
        }
    }
    int i = req->n_uses++;
    req->uses[i] = t;
    req->writes[i] = library_writes;
    const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
    lx_tensor_busy(t, req->call, at, library_writes);
    if (!library_writes && t->device < 0 && t->numel > 0 && !lx_agree_timed()) {
        req->sum[i] = hash_values(t);
        req->hashed[i] = 1;
    }
}

/* After the transfer: the tensors are the lecture's again. */
static void request_done(dist_request *req) {
    for (int i = 0; i < req->n_uses; i++) {
        lx_tensor_idle(req->uses[i], req->writes[i]);
        if (req->hashed[i] && hash_values(req->uses[i]) != req->sum[i]) {
            const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
            char *made = at ? lx_fmt("%s:%d", at->path, at->line) : strdup("an unknown line");
            lx_fatal("dist_wait(): the tensor that %s at %s was sending changed before this wait "
                     "(through its ->data: no tensor operation did it): the receiver may have got the "
                     "old value, the new one, or a mix; change it only after dist_wait",
                     req->call, made);
        }
    }
}

static void unlink_request(dist_request *req) {
    if (req->prev) req->prev->next = req->next;
    else outstanding = req->next;
    if (req->next) req->next->prev = req->prev;
}

static int is_outstanding(const dist_request *req) {
    for (const dist_request *r = outstanding; r; r = r->next)
        if (r == req) return 1;
    return 0;
}

dist_request *dist_isend(const tensor *t, int dst) {
    need_rank("dist_isend");
    size_t n = check_tensor("dist_isend", "the tensor", t);
    check_peer("dist_isend", "dst", dst, 0);
    call_site site;
    site.n = lx_stack_capture(site.frames, LX_MAX_FRAMES);
    dist_request *req = make_request("dist_isend", dst, (int64_t)n, &site);
    req->send_check = lx_agree_send("dist_isend", (int64_t)n, dst, site.frames, site.n);
    request_uses(req, t, 0);
    req->backend_request = lx_ops->isend(t->data, n, dst);
    return req;
}

dist_request *dist_irecv(tensor *t, int src) {
    need_rank("dist_irecv");
    size_t n = check_tensor("dist_irecv", "the tensor", t);
    check_peer("dist_irecv", "src", src, 0);
    call_site site;
    site.n = lx_stack_capture(site.frames, LX_MAX_FRAMES);
    dist_request *req = make_request("dist_irecv", src, (int64_t)n, &site);
    req->recv_check = lx_agree_recv_post(src, (int64_t)n);
    request_uses(req, t, 1);
    req->backend_request = lx_ops->irecv(t->data, n, src);
    return req;
}

/* The async collectives: the agreement check runs at the call (it needs
 * every rank to have made the call: a short wait), then the transfer is
 * started and the request returned. */
static dist_request *async_collective(call_site *site, const char *call, size_t count, int op, int root) {
    enter_collective(site, call, count, op, root);
    leave();
    return make_request(call, -1, (int64_t)count, site);
}

dist_request *dist_all_reduce_async(tensor *t, dist_op op) {
    need_rank("dist_all_reduce_async");
    size_t n = check_tensor("dist_all_reduce_async", "the tensor", t);
    check_op("dist_all_reduce_async", op);
    call_site site;
    dist_request *req = async_collective(&site, "dist_all_reduce_async", n, op, -1);
    request_uses(req, t, 1);
    req->backend_request = lx_ops->iall_reduce(t->data, n, op);
    return req;
}

dist_request *dist_broadcast_async(tensor *t, int src) {
    need_rank("dist_broadcast_async");
    size_t n = check_tensor("dist_broadcast_async", "the tensor", t);
    check_peer("dist_broadcast_async", "src", src, 1);
    call_site site;
    dist_request *req = async_collective(&site, "dist_broadcast_async", n, -1, src);
    request_uses(req, t, 1);
    req->backend_request = lx_ops->ibroadcast(t->data, n, src);
    return req;
}

dist_request *dist_reduce_scatter_async(tensor *output, const tensor *input, dist_op op) {
    need_rank("dist_reduce_scatter_async");
    size_t out_n = check_reduce_scatter("dist_reduce_scatter_async", output, input, op);
    call_site site;
    dist_request *req = async_collective(&site, "dist_reduce_scatter_async", out_n, op, -1);
    request_uses(req, output, 1);
    request_uses(req, input, 0);
    req->backend_request = lx_ops->ireduce_scatter(output->data, input->data, out_n, op);
    return req;
}

dist_request *dist_all_gather_async(tensor *output, const tensor *input) {
    need_rank("dist_all_gather_async");
    size_t in_n = check_all_gather("dist_all_gather_async", output, input);
    call_site site;
    dist_request *req = async_collective(&site, "dist_all_gather_async", in_n, -1, -1);
    request_uses(req, output, 1);
    request_uses(req, input, 0);
    req->backend_request = lx_ops->iall_gather(output->data, input->data, in_n);
    return req;
}

/* Completes a request: the receive's check first (a mismatched size is
 * named before the backend could complain about it), then the transfer. */
static void complete(dist_request *req) {
    lx_agree_needs(req->send_check, req->recv_check);
    /* An isend's wait, like a blocking send, returns once its receive is posted. */
    if (req->send_check) lx_agree_send_posted(req->send_check);
    if (req->recv_check) lx_agree_recv_check(req->recv_check, req->call, req->count, req->site.frames, req->site.n);
    lx_ops->wait(req->backend_request);
    if (req->send_check) lx_agree_send_done(req->send_check);
    request_done(req);
}

void dist_wait(dist_request *req) {
    need_rank("dist_wait");
    if (!req) lx_fatal("dist_wait(): the request is NULL");
    if (!is_outstanding(req))
        lx_fatal("dist_wait(): this request is not one this spawn made, or it was waited for already");
    call_site site;
    enter(&site, "dist_wait", req->peer);
    unlink_request(req);
    complete(req);
    leave();
    if (req->group) req->group->busy--;
    free(req);
}

/* Has the request completed? It stays the lecture's to dist_wait. */
int dist_test(dist_request *req) {
    need_rank("dist_test");
    if (!req) lx_fatal("dist_test(): the request is NULL");
    if (!is_outstanding(req))
        lx_fatal("dist_test(): this request is not one this spawn made, or it was waited for already");
    /* An isend is done once its receive is posted, as its wait says. */
    int done = lx_ops->test(req->backend_request);
    if (req->send_check && !lx_agree_send_test(req->send_check)) done = 0;
    return done;
}

/* When the function returns: each request never waited for is an error
 * step at the line that made it; it is then completed, so the other ranks
 * are not left waiting for its transfer. */
static void finish_forgotten(void) {
    /* Oldest first: the list holds the newest first. */
    dist_request *last = outstanding;
    while (last && last->next)
        last = last->next;
    for (dist_request *req = last; req; req = req->prev) {
        const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
        char *msg = at ? lx_fmt("%s:%d: the request of %s() was never waited for: call dist_wait() on it "
                                "before the spawned function returns",
                                at->path, at->line, req->call)
                       : lx_fmt("the request of %s() was never waited for", req->call);
        fprintf(stderr, "lectern: rank %d: error: %s\n", lx_the_world.rank, msg);
        lx_emit_frames(req->site.frames, req->site.n, lx_rendering_error(msg));
        lx_mark_failed();
        free(msg);
    }
    while (outstanding) {
        dist_request *req = outstanding;
        unlink_request(req);
        call_site site = req->site;
        lx_rank_enter("dist_wait", site.frames, site.n, req->peer);
        complete(req);
        leave();
        if (req->group) req->group->busy--;
        free(req);
    }
}

/* ---- groups (dist_new_group) and all-to-all ----
 *
 * A group is a communicator of its ranks (MPI_Comm_split of the spawn's,
 * ordered as the list), on which the agreement checks run, and the
 * backend's own communicators (group_new). A group call is the world call
 * with the backend switched to the group (use_group) for its duration; the
 * world's calls are untouched. */

static dist_group *groups; /* this spawn's, newest first */

/* "{0, 2}" */
static void list_text(char *buf, size_t size, const int *ranks, int n) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, size - at, "{");
    for (int i = 0; i < n && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? ", " : "", ranks[i]);
    if (at < size) snprintf(buf + at, size - at, "}");
}

static void free_group(dist_group *g) {
    lx_ops->group_free(g->backend);
    MPI_CHECK(MPI_Comm_free(&g->comm));
    lx_agree_group_free(g->agreed);
    free(g);
}

/* A timed region ended: each group this rank is in compares what its ranks
 * skipped there, oldest group first. Every rank made every dist_new_group
 * call, so every rank holds its groups in the same order of making, and
 * the groups' comparisons cannot wait for one another in a circle. */
static void settle_groups(const dist_group *g) {
    if (!g) return;
    settle_groups(g->next); /* older ones first: the list is newest first */
    lx_agree_group_settle(g);
}

/* The spawned function has returned (its requests completed): the groups it left. */
static void free_groups(void) {
    while (groups) {
        dist_group *g = groups;
        groups = g->next;
        free_group(g);
    }
}

/* g is NULL (the world) or a group of this spawn that this rank is in. */
static void check_group(const char *call, const dist_group *g) {
    if (!g) return;
    const dist_group *h = groups;
    while (h && h != g)
        h = h->next;
    if (!h)
        lx_fatal("%s(): this group is not one of this spawn's: it was freed (dist_group_free), or made in "
                 "another spawn (a group lives until its spawned function returns)",
                 call);
    int in = 0;
    for (int i = 0; i < g->size; i++)
        in |= g->ranks[i] == lx_the_world.rank;
    if (!in) lx_fatal("%s(): rank %d is not in group %s", call, lx_the_world.rank, g->name);
}

enum { ROW = 1 + LECTERN_MAX_WORLD }; /* one rank's call: n (-1: NULL list), then its ranks */

/* What is wrong with rank q's list, or NULL: the same text on every rank. */
static char *bad_list(const int *row, int q, int world) {
    int n = row[0];
    if (n < 0) return lx_fmt("rank %d passed NULL as its list of ranks", q);
    if (n < 1 || n > world) return lx_fmt("rank %d passed n = %d: a group has 1 to world_size (%d) ranks", q, n, world);
    char text[4 * ROW + 8];
    list_text(text, sizeof text, row + 1, n);
    for (int i = 0; i < n; i++) {
        int r = row[1 + i];
        if (r < 0 || r >= world)
            return lx_fmt("rank %d's list %s holds %d, which is not a rank of this world (0 to %d)", q, text, r,
                          world - 1);
        for (int j = 0; j < i; j++)
            if (row[1 + j] == r) return lx_fmt("rank %d's list %s holds rank %d twice", q, text, r);
    }
    for (int i = 0; i < n; i++)
        if (row[1 + i] == q) return NULL;
    return lx_fmt("rank %d's list %s does not hold rank %d: each rank passes the list of the group it belongs to", q,
                  text, q);
}

static int same_list(const int *a, const int *b) {
    if (a[0] != b[0]) return 0;
    for (int i = 0; i < a[0]; i++)
        if (a[1 + i] != b[1 + i]) return 0;
    return 1;
}

/* Every rank's list, checked alike on every rank: the first problem found,
 * or NULL. */
static char *check_lists(const int *all, int world) {
    for (int q = 0; q < world; q++) {
        char *bad = bad_list(all + (size_t)q * ROW, q, world);
        if (bad) return bad;
    }
    for (int q = 0; q < world; q++) {
        const int *mine = all + (size_t)q * ROW;
        for (int i = 0; i < mine[0]; i++) {
            int r = mine[1 + i];
            const int *theirs = all + (size_t)r * ROW;
            if (same_list(mine, theirs)) continue;
            char a[4 * ROW + 8], b[4 * ROW + 8];
            list_text(a, sizeof a, mine + 1, mine[0]);
            list_text(b, sizeof b, theirs + 1, theirs[0]);
            return lx_fmt("ranks %d and %d disagree: rank %d says its group is %s, rank %d says %s (the ranks of "
                          "a group pass the same list, in the same order)",
                          q, r, q, a, r, b);
        }
    }
    return NULL;
}

dist_group *dist_new_group(const int *ranks, int n) {
    need_rank("dist_new_group");
    int world = lx_the_world.size, me = lx_the_world.rank;
    int row[ROW];
    memset(row, 0, sizeof row);
    row[0] = ranks ? n : -1;
    for (int i = 0; ranks && i < n && i < LECTERN_MAX_WORLD; i++)
        row[1 + i] = ranks[i];
    if (ranks && n > LECTERN_MAX_WORLD) row[0] = world + 1; /* too many: named below */
    call_site site;
    enter(&site, "dist_new_group", -1);
    /* Every rank's list to every rank: each names the same problem, or none. */
    int *all = malloc(sizeof(int) * ROW * (size_t)world);
    if (!all) lx_fatal("out of memory");
    MPI_CHECK(MPI_Allgather(row, ROW, MPI_INT, all, ROW, MPI_INT, lx_the_world.comm));
    char *bad = check_lists(all, world);
    free(all);
    if (bad) {
        lx_error("dist_new_group(): %s", bad);
        free(bad);
        /* Every rank's error step is on its way before any rank exits. */
        MPI_CHECK(MPI_Barrier(lx_the_world.comm));
        exit(1);
    }
    dist_group *g = calloc(1, sizeof *g);
    if (!g) lx_fatal("out of memory");
    g->size = n;
    int color = ranks[0];
    for (int i = 0; i < n; i++) {
        g->ranks[i] = ranks[i];
        if (ranks[i] == me) g->rank = i;
        if (ranks[i] < color) color = ranks[i];
    }
    snprintf(g->name, sizeof g->name, "{");
    for (int i = 0; i < n; i++) {
        size_t at = strlen(g->name);
        snprintf(g->name + at, sizeof g->name - at, "%s%d", i ? "," : "", ranks[i]);
    }
    size_t at = strlen(g->name);
    if (at + 1 < sizeof g->name) snprintf(g->name + at, sizeof g->name - at, "}");
    /* The groups of one call are disjoint: the first rank of each colours it. */
    MPI_CHECK(MPI_Comm_split(lx_the_world.comm, color, g->rank, &g->comm));
    MPI_CHECK(MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN));
    g->check_comm = g->comm; /* the checks are the only calls comm.c makes on it */
    g->agreed = lx_agree_group_new();
    g->backend = lx_ops->group_new(g);
    g->next = groups;
    groups = g;
    leave();
    return g;
}

int dist_group_rank(const dist_group *g) {
    if (!g) return dist_rank();
    need_rank("dist_group_rank");
    check_group("dist_group_rank", g);
    return g->rank;
}

int dist_group_size(const dist_group *g) {
    if (!g) return dist_world_size();
    need_rank("dist_group_size");
    check_group("dist_group_size", g);
    return g->size;
}

void dist_group_free(dist_group *g) {
    need_rank("dist_group_free");
    if (!g) lx_fatal("dist_group_free(): the group is NULL (NULL stands for all ranks, which are not freed)");
    check_group("dist_group_free", g);
    if (g->busy)
        lx_fatal("dist_group_free(): %d request%s on group %s not waited for yet: dist_wait them first", g->busy,
                 g->busy == 1 ? " is" : "s are", g->name);
    lx_agree_group_settle(g); /* freed inside a timed region: what it skipped there, compared now */
    dist_group **p = &groups;
    while (*p != g)
        p = &(*p)->next;
    *p = g->next;
    free_group(g);
}

/* ---- timed regions ---- */

/* Inside, repeated calls skip the agreement check (comm_agree.c), the
 * world's and each group's. Outside a spawn there is nothing to check: both
 * do nothing. */
void dist_timed_begin(void) {
    if (lx_ops) lx_agree_timed_begin();
}

void dist_timed_end(void) {
    if (lx_ops && lx_agree_timed_end()) settle_groups(groups);
}

/* A group call: where it is (the board names the group), and the group's
 * ranks agree on it. */
static void enter_group(call_site *site, const dist_group *g, const char *call, size_t count, int op, int root) {
    char what[48];
    snprintf(what, sizeof what, "%s(group %s)", call, g->name);
    enter(site, what, -1);
    lx_agree_collective_in(g, call, (int64_t)count, op, root, site->frames, site->n);
}

static void check_group_peer(const char *call, const dist_group *g, int src) {
    if (src < 0 || src >= g->size)
        lx_fatal("%s(): src %d is not a rank of group %s (its ranks are 0 to %d, in the list's order)", call, src,
                 g->name, g->size - 1);
}

void dist_all_reduce_in(dist_group *g, tensor *t, dist_op op) {
    if (!g) {
        dist_all_reduce(t, op);
        return;
    }
    const char *call = "dist_all_reduce_in";
    need_rank(call);
    check_group(call, g);
    size_t n = check_tensor(call, "the tensor", t);
    check_op(call, op);
    show(call, "t", "before", t);
    call_site site;
    enter_group(&site, g, call, n, op, -1);
    lx_use_group(g);
    lx_ops->all_reduce(t->data, n, op);
    lx_use_group(NULL);
    leave();
    show(call, "t", "after", t);
}

void dist_broadcast_in(dist_group *g, tensor *t, int src) {
    if (!g) {
        dist_broadcast(t, src);
        return;
    }
    const char *call = "dist_broadcast_in";
    need_rank(call);
    check_group(call, g);
    size_t n = check_tensor(call, "the tensor", t);
    check_group_peer(call, g, src);
    show(call, "t", "before", t);
    call_site site;
    enter_group(&site, g, call, n, -1, src);
    lx_use_group(g);
    lx_ops->broadcast(t->data, n, src);
    lx_use_group(NULL);
    leave();
    show(call, "t", "after", t);
}

void dist_reduce_scatter_in(dist_group *g, tensor *output, const tensor *input, dist_op op) {
    if (!g) {
        dist_reduce_scatter(output, input, op);
        return;
    }
    const char *call = "dist_reduce_scatter_in";
    need_rank(call);
    check_group(call, g);
    size_t out_n = check_reduce_scatter_in(call, g, output, input, op);
    show(call, "input", "before", input);
    call_site site;
    enter_group(&site, g, call, out_n, op, -1);
    lx_use_group(g);
    lx_ops->reduce_scatter(output->data, input->data, out_n, op);
    lx_use_group(NULL);
    leave();
    show(call, "output", "after", output);
}

void dist_all_gather_in(dist_group *g, tensor *output, const tensor *input) {
    if (!g) {
        dist_all_gather(output, input);
        return;
    }
    const char *call = "dist_all_gather_in";
    need_rank(call);
    check_group(call, g);
    size_t in_n = check_all_gather_in(call, g, output, input);
    show(call, "input", "before", input);
    call_site site;
    enter_group(&site, g, call, in_n, -1, -1);
    lx_use_group(g);
    lx_ops->all_gather(output->data, input->data, in_n);
    lx_use_group(NULL);
    leave();
    show(call, "output", "after", output);
}

/* Returns the count of one piece. */
static size_t check_all_to_all(const char *call, const dist_group *g, tensor *output, const tensor *input) {
    size_t out_n = check_tensor(call, "output", output);
    size_t in_n = check_tensor(call, "input", input);
    int p = size_of(g);
    if (out_n != in_n)
        lx_fatal("%s(): output has %zu elements, input %zu: they have the same size (%s pieces each)", call, out_n,
                 in_n, size_word(g));
    if (in_n % (size_t)p != 0)
        lx_fatal("%s(): input has %zu elements, which do not split into %s (%d) equal pieces", call, in_n, size_word(g),
                 p);
    if (in_n > 0 && overlap(output, input))
        lx_fatal("%s(): output and input are the same memory: the all-to-all writes output while it still reads "
                 "input. Give it an output of its own: tensor *out = zeros(%zu, 0, get_device(rank))",
                 call, in_n);
    return in_n / (size_t)p;
}

void dist_all_to_all_in(dist_group *g, tensor *output, const tensor *input) {
    const char *call = g ? "dist_all_to_all_in" : "dist_all_to_all";
    need_rank(call);
    check_group(call, g);
    size_t piece = check_all_to_all(call, g, output, input);
    show(call, "input", "before", input);
    call_site site;
    if (g) enter_group(&site, g, call, piece, -1, -1);
    else enter_collective(&site, call, piece, -1, -1);
    if (g) lx_use_group(g);
    lx_ops->all_to_all(output->data, input->data, piece);
    if (g) lx_use_group(NULL);
    leave();
    show(call, "output", "after", output);
}

void dist_all_to_all(tensor *output, const tensor *input) { dist_all_to_all_in(NULL, output, input); }

/* A group's async call: checked like async_collective, over the group. */
static dist_request *async_group(call_site *site, dist_group *g, const char *call, size_t count, int op, int root) {
    enter_group(site, g, call, count, op, root);
    leave();
    dist_request *req = make_request(call, -1, (int64_t)count, site);
    req->group = g;
    g->busy++;
    return req;
}

dist_request *dist_all_reduce_in_async(dist_group *g, tensor *t, dist_op op) {
    if (!g) return dist_all_reduce_async(t, op);
    const char *call = "dist_all_reduce_in_async";
    need_rank(call);
    check_group(call, g);
    size_t n = check_tensor(call, "the tensor", t);
    check_op(call, op);
    call_site site;
    dist_request *req = async_group(&site, g, call, n, op, -1);
    request_uses(req, t, 1);
    lx_use_group(g);
    req->backend_request = lx_ops->iall_reduce(t->data, n, op);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_broadcast_in_async(dist_group *g, tensor *t, int src) {
    if (!g) return dist_broadcast_async(t, src);
    const char *call = "dist_broadcast_in_async";
    need_rank(call);
    check_group(call, g);
    size_t n = check_tensor(call, "the tensor", t);
    check_group_peer(call, g, src);
    call_site site;
    dist_request *req = async_group(&site, g, call, n, -1, src);
    request_uses(req, t, 1);
    lx_use_group(g);
    req->backend_request = lx_ops->ibroadcast(t->data, n, src);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_reduce_scatter_in_async(dist_group *g, tensor *output, const tensor *input, dist_op op) {
    if (!g) return dist_reduce_scatter_async(output, input, op);
    const char *call = "dist_reduce_scatter_in_async";
    need_rank(call);
    check_group(call, g);
    size_t out_n = check_reduce_scatter_in(call, g, output, input, op);
    call_site site;
    dist_request *req = async_group(&site, g, call, out_n, op, -1);
    request_uses(req, output, 1);
    request_uses(req, input, 0);
    lx_use_group(g);
    req->backend_request = lx_ops->ireduce_scatter(output->data, input->data, out_n, op);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_all_gather_in_async(dist_group *g, tensor *output, const tensor *input) {
    if (!g) return dist_all_gather_async(output, input);
    const char *call = "dist_all_gather_in_async";
    need_rank(call);
    check_group(call, g);
    size_t in_n = check_all_gather_in(call, g, output, input);
    call_site site;
    dist_request *req = async_group(&site, g, call, in_n, -1, -1);
    request_uses(req, output, 1);
    request_uses(req, input, 0);
    lx_use_group(g);
    req->backend_request = lx_ops->iall_gather(output->data, input->data, in_n);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_all_to_all_in_async(dist_group *g, tensor *output, const tensor *input) {
    const char *call = g ? "dist_all_to_all_in_async" : "dist_all_to_all_async";
    need_rank(call);
    check_group(call, g);
    size_t piece = check_all_to_all(call, g, output, input);
    call_site site;
    dist_request *req = g ? async_group(&site, g, call, piece, -1, -1) : async_collective(&site, call, piece, -1, -1);
    request_uses(req, output, 1);
    request_uses(req, input, 0);
    if (g) lx_use_group(g);
    req->backend_request = lx_ops->iall_to_all(output->data, input->data, piece);
    if (g) lx_use_group(NULL);
    return req;
}

dist_request *dist_all_to_all_async(tensor *output, const tensor *input) {
    return dist_all_to_all_in_async(NULL, output, input);
}

/* The pool rank leaves: what the comm layer kept from one spawn to the next. */
static void pool_rank_leaves(void) {
    lx_progress_stop();
    lx_comm_nccl_release();
    lx_comm_staged_release();
}

const lx_comm_hooks *lx_comm_layer(void) {
    static const lx_comm_hooks hooks = {
            .mpi_ready = lx_progress_init,
            .start = lx_comm_start,
            .finish_requests = lx_comm_finish_requests,
            .stop = lx_comm_stop,
            .leave = pool_rank_leaves,
            .mpi_cuda_aware_built = lx_mpi_cuda_aware_built,
            .nccl_usable = lx_nccl_usable,
    };
    return &hooks;
}
