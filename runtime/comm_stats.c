/*
 * comm_stats.c: how many bytes this rank has sent, counted by the runtime.
 *
 * A lecture that claims "ZeRO-3 communicates 1.5 times what DDP does" should
 * be able to measure it, not only state it. Every collective and
 * point-to-point call goes through the backend's table of operations
 * (lx_comm_ops); lx_comm_stats_wrap() puts a table in front of it that adds
 * up the traffic of each call and passes the call on unchanged.
 *
 * What is counted: the bytes this rank must send for the call under a
 * bandwidth-optimal algorithm, the convention nccl-tests uses for busbw
 * (runtime/lectern.h, dist_bytes_sent). For p ranks and a tensor of b bytes:
 *   all-reduce             2 (p - 1) / p * b   (reduce-scatter + all-gather)
 *   reduce-scatter         (p - 1) / p * b_in  (b_in: the whole input)
 *   all-gather             (p - 1) / p * b_out (b_out: the whole output)
 *   broadcast, reduce      b, by every rank but one (a pipelined chain:
 *                          each rank passes the data on once; the last link
 *                          of a broadcast and the root of a reduce send nothing)
 *   scatter                (p - 1) pieces at the root, nothing elsewhere
 *   gather                 one piece from every rank but the root
 *   send, isend            b;   recv, irecv, barrier, wait: 0
 * This is a property of the call, not of the library's choice of algorithm
 * (Open MPI may pick a tree for small messages), so the numbers are the same
 * on every machine and backend and can be checked by hand.
 *
 * Operations the table gains later pass through uncounted until they are
 * added here: the wrapper starts as a copy of the backend's table.
 */
#include <math.h>

#include "internal.h"
#include "spawn_impl.h"

static const lx_comm_ops *inner;   /* the backend's own table */
static lx_comm_ops counted;        /* the same, counting */
static int world = 1, me = 0;
static double bytes_sent;          /* fractional in the formulas: rounded when read */
static int64_t calls;

static void add(double bytes) {
    bytes_sent += bytes;
    calls++;
}

static double share(size_t floats) {   /* (p - 1) / p of `floats` floats, in bytes */
    return (double)floats * sizeof(float) * (world - 1) / world;
}

static void c_barrier(void) {
    add(0);
    inner->barrier();
}
static void c_all_reduce(float *buf, size_t count, dist_op op) {
    add(2 * share(count));
    inner->all_reduce(buf, count, op);
}
static void c_reduce(float *buf, size_t count, int root, dist_op op) {
    add(world > 1 && me != root ? (double)count * sizeof(float) : 0);
    inner->reduce(buf, count, root, op);
}
static void c_broadcast(float *buf, size_t count, int root) {
    add(world > 1 && me != (root + world - 1) % world ? (double)count * sizeof(float) : 0);
    inner->broadcast(buf, count, root);
}
static void c_reduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    add(share(count * (size_t)world));
    inner->reduce_scatter(out, in, count, op);
}
static void c_all_gather(float *out, const float *in, size_t count) {
    add(share(count * (size_t)world));
    inner->all_gather(out, in, count);
}
static void c_scatter(float *out, const float *in, size_t count, int root) {
    add(me == root ? (double)count * sizeof(float) * (world - 1) : 0);
    inner->scatter(out, in, count, root);
}
static void c_gather(float *out, const float *in, size_t count, int root) {
    add(me == root ? 0 : (double)count * sizeof(float));
    inner->gather(out, in, count, root);
}
static void c_send(const float *buf, size_t count, int peer) {
    add((double)count * sizeof(float));
    inner->send(buf, count, peer);
}
static void c_recv(float *buf, size_t count, int peer) {
    add(0);
    inner->recv(buf, count, peer);
}
static void *c_isend(const float *buf, size_t count, int peer) {
    add((double)count * sizeof(float));
    return inner->isend(buf, count, peer);
}
static void *c_irecv(float *buf, size_t count, int peer) {
    add(0);
    return inner->irecv(buf, count, peer);
}
/* The async collectives send what their blocking twins send; a sendrecv
 * sends its send. */
static void *c_iall_reduce(float *buf, size_t count, dist_op op) {
    add(2 * share(count));
    return inner->iall_reduce(buf, count, op);
}
static void *c_ibroadcast(float *buf, size_t count, int root) {
    add(world > 1 && me != (root + world - 1) % world ? (double)count * sizeof(float) : 0);
    return inner->ibroadcast(buf, count, root);
}
static void *c_ireduce_scatter(float *out, const float *in, size_t count, dist_op op) {
    add(share(count * (size_t)world));
    return inner->ireduce_scatter(out, in, count, op);
}
static void *c_iall_gather(float *out, const float *in, size_t count) {
    add(share(count * (size_t)world));
    return inner->iall_gather(out, in, count);
}
static void c_sendrecv(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src) {
    add((double)send_count * sizeof(float));
    inner->sendrecv(send, send_count, dst, recv, recv_count, src);
}

const lx_comm_ops *lx_comm_stats_wrap(const lx_comm_ops *ops, int rank, int world_size) {
    inner = ops;
    counted = *ops;   /* anything not overridden below passes straight through */
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
    me = rank;
    world = world_size;
    bytes_sent = 0;
    calls = 0;
    return &counted;
}

int64_t dist_bytes_sent(void) { return (int64_t)llround(bytes_sent); }
int64_t dist_calls(void) { return calls; }
