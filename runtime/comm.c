/*
 * comm.c: the collectives a spawned function calls, torch.distributed style.
 *
 * Every call is synchronous (like async_op=False): when it returns, the
 * result is in the tensor. This file checks the arguments against the
 * lecture's intent (shapes, ranks, where the tensor lives) and names the
 * lecture line when they are wrong; the backend does the communication:
 *
 *   comm_mpi.c   Open MPI on host memory, over the spawn's communicator
 *   comm_nccl.c  NCCL on device memory, one GPU per rank
 *
 * Before each call that waits for other ranks we note where the lecture is
 * (lx_rank_where): if the ranks deadlock or one crashes, the parent can say
 * at which line each rank was.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "spawn_impl.h"

static const lx_comm_ops *ops;    /* NULL outside a rank */
static lx_backend backend;
static int my_rank = 0, my_world = 1, my_device = -1;

void lx_comm_start(lx_backend b, int rank, int world_size, int device, MPI_Comm comm) {
    backend = b;
    my_rank = rank;
    my_world = world_size;
    my_device = device;
#if LECTERN_NCCL
    if (b == LX_BACKEND_NCCL) {
        ops = lx_comm_stats_wrap(lx_comm_nccl_start(rank, world_size, device, comm), rank, world_size);
        return;
    }
#endif
    ops = lx_comm_stats_wrap(lx_comm_mpi_start(rank, world_size, comm), rank, world_size);
}

/* A pool rank runs many spawns: after one, it is back to "outside spawn". */
void lx_comm_stop(void) {
    if (ops) ops->stop();
    ops = NULL;
    backend = LX_BACKEND_MPI;
    my_rank = 0;
    my_world = 1;
    my_device = -1;
}

int dist_rank(void) { return my_rank; }
int dist_world_size(void) { return my_world; }
const char *dist_backend(void) {
    if (!ops) return "none";
    return backend == LX_BACKEND_NCCL ? "nccl" : "mpi";
}

/* Outside spawn: the first GPU if there is one. In a rank: its own GPU under
 * NCCL (its index among the ranks of its host, which is its rank on one
 * machine), the CPU under Open MPI. */
int get_device(int rank) {
    if (!ops) return gpu_count() > 0 ? 0 : -1;
    if (backend != LX_BACKEND_NCCL) return -1;
    return rank == my_rank ? my_device : rank;
}

/* ---- checks ---- */

static void need_rank(const char *call) {
    if (!ops) lx_fatal("%s() outside a spawned function: collectives run inside spawn()", call);
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
    int want_device = backend == LX_BACKEND_NCCL;
    if (want_device && t->device < 0)
        lx_fatal("%s(): %s is on the CPU, but this spawn runs NCCL on GPU memory: create it on "
                 "get_device(rank)",
                 call, what);
    if (!want_device && t->device >= 0)
        lx_fatal("%s(): %s is on %s, but this spawn runs Open MPI on host memory: create it on "
                 "get_device(rank) (the CPU here)",
                 call, what, where_name(t->device));
    if (want_device && t->device != my_device)
        lx_fatal("%s(): %s is on cuda:%d, but rank %d's GPU is cuda:%d", call, what, t->device, my_rank,
                 my_device);
    if (t->numel < 0 || t->numel > INT_MAX)
        lx_fatal("%s(): %s has %lld elements; at most %d per call", call, what, (long long)t->numel, INT_MAX);
    return (size_t)t->numel;
}

static void check_peer(const char *call, const char *what, int peer, int allow_self) {
    if (peer < 0 || peer >= my_world)
        lx_fatal("%s(): %s %d is not a rank of this world (0 to %d)", call, what, peer, my_world - 1);
    if (!allow_self && peer == my_rank)
        lx_fatal("%s(): rank %d cannot %s itself", call, my_rank,
                 what[0] == 'd' ? "send to" : "receive from");
}

static void check_op(const char *call, dist_op op) {
    if (op != DIST_SUM && op != DIST_AVG && op != DIST_MIN && op != DIST_MAX)
        lx_fatal("%s(): unknown reduction op %d (DIST_SUM, DIST_AVG, DIST_MIN or DIST_MAX)", call, (int)op);
}

/* ---- collectives ---- */

void dist_barrier(void) {
    need_rank("dist_barrier");
    lx_rank_where("dist_barrier");
    ops->barrier();
}

void dist_all_reduce(tensor *t, dist_op op) {
    need_rank("dist_all_reduce");
    size_t n = check_tensor("dist_all_reduce", "the tensor", t);
    check_op("dist_all_reduce", op);
    lx_rank_where("dist_all_reduce");
    ops->all_reduce(t->data, n, op);
}

void dist_reduce(tensor *t, int dst, dist_op op) {
    need_rank("dist_reduce");
    size_t n = check_tensor("dist_reduce", "the tensor", t);
    check_peer("dist_reduce", "dst", dst, 1);
    check_op("dist_reduce", op);
    lx_rank_where("dist_reduce");
    ops->reduce(t->data, n, dst, op);
}

void dist_broadcast(tensor *t, int src) {
    need_rank("dist_broadcast");
    size_t n = check_tensor("dist_broadcast", "the tensor", t);
    check_peer("dist_broadcast", "src", src, 1);
    lx_rank_where("dist_broadcast");
    ops->broadcast(t->data, n, src);
}

void dist_reduce_scatter(tensor *output, const tensor *input, dist_op op) {
    need_rank("dist_reduce_scatter");
    size_t out_n = check_tensor("dist_reduce_scatter", "output", output);
    size_t in_n = check_tensor("dist_reduce_scatter", "input", input);
    check_op("dist_reduce_scatter", op);
    if (in_n != out_n * (size_t)my_world)
        lx_fatal("dist_reduce_scatter(): input has %zu elements, output %zu: input must be world_size (%d) "
                 "times output",
                 in_n, out_n, my_world);
    if (output->data == input->data && my_world > 1)
        lx_fatal("dist_reduce_scatter(): output and input are the same memory");
    lx_rank_where("dist_reduce_scatter");
    ops->reduce_scatter(output->data, input->data, out_n, op);
}

void dist_all_gather(tensor *output, const tensor *input) {
    need_rank("dist_all_gather");
    size_t out_n = check_tensor("dist_all_gather", "output", output);
    size_t in_n = check_tensor("dist_all_gather", "input", input);
    if (out_n != in_n * (size_t)my_world)
        lx_fatal("dist_all_gather(): output has %zu elements, input %zu: output must be world_size (%d) "
                 "times input",
                 out_n, in_n, my_world);
    if (output->data == input->data && my_world > 1)
        lx_fatal("dist_all_gather(): output and input are the same memory");
    lx_rank_where("dist_all_gather");
    ops->all_gather(output->data, input->data, in_n);
}

void dist_scatter(tensor *output, const tensor *input, int src) {
    need_rank("dist_scatter");
    check_peer("dist_scatter", "src", src, 1);
    size_t out_n = check_tensor("dist_scatter", "output", output);
    const float *in = NULL;
    if (my_rank == src) {   /* only the source's input matters, as in torch */
        size_t in_n = check_tensor("dist_scatter", "input (on the src rank)", input);
        if (in_n != out_n * (size_t)my_world)
            lx_fatal("dist_scatter(): input has %zu elements, output %zu: input must be world_size (%d) "
                     "times output",
                     in_n, out_n, my_world);
        in = input->data;
    }
    lx_rank_where("dist_scatter");
    ops->scatter(output->data, in, out_n, src);
}

void dist_gather(tensor *output, const tensor *input, int dst) {
    need_rank("dist_gather");
    check_peer("dist_gather", "dst", dst, 1);
    size_t in_n = check_tensor("dist_gather", "input", input);
    float *out = NULL;
    if (my_rank == dst) {
        size_t out_n = check_tensor("dist_gather", "output (on the dst rank)", output);
        if (out_n != in_n * (size_t)my_world)
            lx_fatal("dist_gather(): output has %zu elements, input %zu: output must be world_size (%d) "
                     "times input",
                     out_n, in_n, my_world);
        out = output->data;
    }
    lx_rank_where("dist_gather");
    ops->gather(out, input->data, in_n, dst);
}

void dist_send(const tensor *t, int dst) {
    need_rank("dist_send");
    size_t n = check_tensor("dist_send", "the tensor", t);
    check_peer("dist_send", "dst", dst, 0);
    lx_rank_where("dist_send");
    ops->send(t->data, n, dst);
}

void dist_recv(tensor *t, int src) {
    need_rank("dist_recv");
    size_t n = check_tensor("dist_recv", "the tensor", t);
    check_peer("dist_recv", "src", src, 0);
    lx_rank_where("dist_recv");
    ops->recv(t->data, n, src);
}

struct dist_request {
    void *backend_request;
};

static dist_request *wrap(void *r) {
    dist_request *req = malloc(sizeof *req);
    if (!req) lx_fatal("out of memory");
    req->backend_request = r;
    return req;
}

dist_request *dist_isend(const tensor *t, int dst) {
    need_rank("dist_isend");
    size_t n = check_tensor("dist_isend", "the tensor", t);
    check_peer("dist_isend", "dst", dst, 0);
    return wrap(ops->isend(t->data, n, dst));
}

dist_request *dist_irecv(tensor *t, int src) {
    need_rank("dist_irecv");
    size_t n = check_tensor("dist_irecv", "the tensor", t);
    check_peer("dist_irecv", "src", src, 0);
    return wrap(ops->irecv(t->data, n, src));
}

void dist_wait(dist_request *req) {
    need_rank("dist_wait");
    if (!req) lx_fatal("dist_wait(): the request is NULL");
    lx_rank_where("dist_wait");
    ops->wait(req->backend_request);
    free(req);
}
