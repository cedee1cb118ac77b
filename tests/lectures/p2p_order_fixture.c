/* Fixture: point-to-point programs that MPI completes, in the orders that
 * trip a backend which holds operations back or makes them wait for each
 * other (tests/test_p2p_order.py, tests/test_nccl_emu.py).
 *
 * P2P_CASE picks the program, P2P_FLOATS the messages' size (large enough
 * that no transport buffers them, or small enough that all do),
 * P2P_RANKS the ring's ranks. The same fixture runs on Open MPI (CPUs), on
 * NCCL (where each rank has a GPU) and on the NCCL emulator: the tensors
 * live on get_device(rank).
 *
 *   isend       rank 0: isend(to 1); all_reduce; wait
 *               rank 1: all_reduce; recv(from 0)
 *   mirror      the other order, a send held across a host wait:
 *               rank 0: isend(to 1); WAIT; wait
 *               rank 1: recv(from 0); WAIT
 *               P2P_WAIT picks the host wait: all_reduce (default), barrier,
 *               all_reduce_async (waited at once), new_group, timer
 *   both_ways   both directions in flight across an async all-reduce,
 *               waited out of order
 *   group       a request must complete on its own, not with what was
 *               issued beside it:
 *               rank 0: r = irecv(from 1); send(to 1); barrier; wait(r)
 *               rank 1: recv(from 0); barrier; send(to 0)
 *   three       an acknowledgement waited for while another peer's
 *               operation is pending:
 *               rank 0: r = irecv(from 2); send(to 1); wait(r)
 *               rank 1: recv(from 2); recv(from 0)
 *               rank 2: send(to 0); send(to 1)
 *   ring        P2P_RANKS ranks, 3 steps of isend(right); recv(left); wait
 *   sendrecv    the same ring with dist_sendrecv(to right, from left)
 *   send_first  both ranks isend, then irecv, a barrier, then the waits
 *   pipeline    3 stages, 4 micro-batches: recv from the stage before
 *               (blocking), isend to the next; the waits at the end
 *   slow_peer   rank 0 receives while rank 1 computes for P2P_SLOW_MS
 *               before it sends: a wait longer than LECTERN_TIMEOUT while
 *               another rank works is not a deadlock. In a timed region
 *               after a first exchange, so that the receive skips its
 *               agreement check and waits in the backend itself
 *
 * Each rank notes what it got, as exact sums the tests work out on their
 * own: "rank R all_reduce S" and "rank R received S" (the sum of every
 * receive of the rank). A message from rank a carries 10 (a + 1) + k per
 * element, k its number among a's sends to that peer (0, 1, ...). */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static long floats(void) {
    const char *s = getenv("P2P_FLOATS");
    return s && *s ? atol(s) : 1000;
}

static const char *env_or(const char *name, const char *fallback) {
    const char *s = getenv(name);
    return s && *s ? s : fallback;
}

/* n floats, every one `value`. */
static tensor *filled(long n, float value, int device) {
    tensor *t = zeros(n, 0, device);
    fill_(t, value);
    return t;
}

/* The k-th message from `rank`: 10 (rank + 1) + k per element. */
static tensor *message(int rank, int k) { return filled(floats(), (float)(10 * (rank + 1) + k), get_device(rank)); }

static tensor *inbox(int rank) { return zeros(floats(), 0, get_device(rank)); }

static double received;

static void took(tensor *t) {
    received += tensor_sum(t);
    tensor_free(t);
}

static void say_received(int rank) { note("rank %d received %.17g", rank, received); }

/* The all-reduce every case shares: 1 + 2 (+ 3 ...) per element. */
static tensor *summand(int rank) { return filled(floats(), (float)(rank + 1), get_device(rank)); }

static void say_all_reduce(int rank, tensor *sum) {
    note("rank %d all_reduce %.17g", rank, tensor_sum(sum));
    tensor_free(sum);
}

/* The pattern: the send's wait comes after the all-reduce. */
static void isend_across_all_reduce(int rank, int world_size, void *args) {
    tensor *sum = summand(rank);
    received = 0;
    if (rank == 0) {
        tensor *msg = message(0, 0);
        dist_request *req = dist_isend(msg, 1);
        dist_all_reduce(sum, DIST_SUM);
        dist_wait(req);
        tensor_free(msg);
    } else {
        dist_all_reduce(sum, DIST_SUM);
        tensor *in = inbox(rank);
        dist_recv(in, 0);
        took(in);
        say_received(rank);
    }
    say_all_reduce(rank, sum);
}

/* The host wait P2P_WAIT names, made by both ranks. */
static void host_wait(int rank, tensor *sum) {
    const char *w = env_or("P2P_WAIT", "all_reduce");
    if (strcmp(w, "barrier") == 0) {
        dist_barrier();
        dist_all_reduce(sum, DIST_SUM);
    } else if (strcmp(w, "all_reduce_async") == 0) {
        dist_wait(dist_all_reduce_async(sum, DIST_SUM));
    } else if (strcmp(w, "new_group") == 0) {
        int both[2] = {0, 1};
        dist_group *g = dist_new_group(both, 2);
        dist_all_reduce_in(g, sum, DIST_SUM);
        dist_group_free(g);
    } else if (strcmp(w, "timer") == 0) {
        dist_timer t = {0};
        dist_timer_start(&t);
        dist_all_reduce(sum, DIST_SUM);
        dist_timer_stop(&t);
    } else {
        dist_all_reduce(sum, DIST_SUM);
    }
}

/* The mirror: the receiver receives first, the sender waits on the host
 * with its send in flight. */
static void send_held_across_host_wait(int rank, int world_size, void *args) {
    tensor *sum = summand(rank);
    received = 0;
    if (rank == 0) {
        tensor *msg = message(0, 0);
        dist_request *req = dist_isend(msg, 1);
        host_wait(rank, sum);
        dist_wait(req);
        tensor_free(msg);
    } else {
        tensor *in = inbox(rank);
        dist_recv(in, 0);
        took(in);
        host_wait(rank, sum);
        say_received(rank);
    }
    say_all_reduce(rank, sum);
}

/* Both directions in flight across an async all-reduce, waited out of
 * order: rank 0 isends then irecvs; rank 1 irecvs then isends. */
static void both_ways_across_async(int rank, int world_size, void *args) {
    int peer = 1 - rank;
    tensor *sum = summand(rank);
    tensor *out = message(rank, 0), *in = inbox(rank);
    dist_request *s, *r;
    if (rank == 0) {
        s = dist_isend(out, peer);
        r = dist_irecv(in, peer);
    } else {
        r = dist_irecv(in, peer);
        s = dist_isend(out, peer);
    }
    dist_request *ar = dist_all_reduce_async(sum, DIST_SUM);
    dist_wait(r);
    dist_wait(ar);
    dist_wait(s);
    received = 0;
    took(in);
    say_received(rank);
    say_all_reduce(rank, sum);
    tensor_free(out);
}

/* A request completes on its own: rank 0's irecv is waited for after a
 * barrier that rank 1 reaches only once rank 0's send has been received. */
static void request_alone(int rank, int world_size, void *args) {
    received = 0;
    if (rank == 0) {
        tensor *a = inbox(0), *b = message(0, 0);
        dist_request *r = dist_irecv(a, 1);
        dist_send(b, 1);
        dist_barrier();
        dist_wait(r);
        took(a);
        tensor_free(b);
    } else {
        tensor *b = inbox(1), *a = message(1, 0);
        dist_recv(b, 0);
        dist_barrier();
        dist_send(a, 0);
        took(b);
        tensor_free(a);
    }
    say_received(rank);
}

/* Three ranks: rank 0 waits for rank 1's receive to be posted while its
 * receive from rank 2 is pending; rank 1 posts it only after rank 2's
 * second send, which rank 2 makes only after its first send (to rank 0)
 * completed. */
static void three_ranks(int rank, int world_size, void *args) {
    received = 0;
    if (rank == 0) {
        tensor *a = inbox(0), *b = message(0, 0);
        dist_request *r = dist_irecv(a, 2);
        dist_send(b, 1);
        dist_wait(r);
        took(a);
        tensor_free(b);
    } else if (rank == 1) {
        tensor *c = inbox(1), *b = inbox(1);
        dist_recv(c, 2);
        dist_recv(b, 0);
        took(c);
        took(b);
    } else {
        tensor *a = message(2, 0), *c = message(2, 0);
        dist_send(a, 0);
        dist_send(c, 1);
        tensor_free(a);
        tensor_free(c);
    }
    say_received(rank);
}

/* Ring steps: isend(right); recv(left); wait, three times. */
static void ring(int rank, int world_size, void *args) {
    int right = (rank + 1) % world_size, left = (rank + world_size - 1) % world_size;
    received = 0;
    for (int step = 0; step < 3; step++) {
        tensor *out = message(rank, step), *in = inbox(rank);
        dist_request *s = dist_isend(out, right);
        dist_recv(in, left);
        dist_wait(s);
        took(in);
        tensor_free(out);
    }
    say_received(rank);
}

/* The same ring steps, each one dist_sendrecv. */
static void sendrecv_ring(int rank, int world_size, void *args) {
    int right = (rank + 1) % world_size, left = (rank + world_size - 1) % world_size;
    received = 0;
    for (int step = 0; step < 3; step++) {
        tensor *out = message(rank, step), *in = inbox(rank);
        dist_sendrecv(out, right, in, left);
        took(in);
        tensor_free(out);
    }
    say_received(rank);
}

/* Both ranks isend, then irecv, then a barrier, then the waits (each rank
 * its own order). */
static void send_first(int rank, int world_size, void *args) {
    int peer = 1 - rank;
    tensor *out = message(rank, 0), *in = inbox(rank);
    dist_request *s = dist_isend(out, peer);
    dist_request *r = dist_irecv(in, peer);
    dist_barrier();
    if (rank == 0) {
        dist_wait(r);
        dist_wait(s);
    } else {
        dist_wait(s);
        dist_wait(r);
    }
    received = 0;
    took(in);
    tensor_free(out);
    say_received(rank);
}

/* A 3-stage pipeline, 4 micro-batches forward: stage s receives from s-1
 * (blocking) and isends its own message to s+1; the waits at the end. */
enum { MICRO = 4 };
static void pipeline(int rank, int world_size, void *args) {
    dist_request *sent[MICRO];
    tensor *outs[MICRO];
    received = 0;
    for (int m = 0; m < MICRO; m++) {
        tensor *out = message(rank, m);
        if (rank > 0) {
            tensor *in = inbox(rank);
            dist_recv(in, rank - 1);
            received += tensor_sum(in);
            tensor_free(in);
        }
        outs[m] = out;
        if (rank < world_size - 1) sent[m] = dist_isend(out, rank + 1);
    }
    for (int m = 0; m < MICRO; m++) {
        if (rank < world_size - 1) dist_wait(sent[m]);
        tensor_free(outs[m]);
    }
    say_received(rank);
}

/* One message from rank 1 to rank 0; rank 1 first works for `ms` (the
 * host, busy: inside no waiting call). */
static void one_message(int rank, double ms) {
    if (rank == 0) {
        tensor *in = inbox(0);
        dist_recv(in, 1);
        took(in);
    } else {
        double until = now_seconds() + ms / 1e3;
        volatile double x = 0;
        while (now_seconds() < until)
            x += 1;
        tensor *out = message(1, 0);
        dist_send(out, 0);
        tensor_free(out);
    }
}

static void slow_peer(int rank, int world_size, void *args) {
    received = 0;
    one_message(rank, 0); /* agreed on here: skips its check below */
    dist_timed_begin();
    one_message(rank, atof(env_or("P2P_SLOW_MS", "0")));
    dist_timed_end();
    say_received(rank);
}

static void body(void) {
    const char *c = env_or("P2P_CASE", "isend");
    int n = atoi(env_or("P2P_RANKS", "4"));
    if (strcmp(c, "both_ways") == 0) spawn(both_ways_across_async, 2, NULL, 0);
    else if (strcmp(c, "mirror") == 0) spawn(send_held_across_host_wait, 2, NULL, 0);
    else if (strcmp(c, "group") == 0) spawn(request_alone, 2, NULL, 0);
    else if (strcmp(c, "three") == 0) spawn(three_ranks, 3, NULL, 0);
    else if (strcmp(c, "ring") == 0) spawn(ring, n, NULL, 0);
    else if (strcmp(c, "sendrecv") == 0) spawn(sendrecv_ring, n, NULL, 0);
    else if (strcmp(c, "send_first") == 0) spawn(send_first, 2, NULL, 0);
    else if (strcmp(c, "pipeline") == 0) spawn(pipeline, 3, NULL, 0);
    else if (strcmp(c, "slow_peer") == 0) spawn(slow_peer, 2, NULL, 0);
    else spawn(isend_across_all_reduce, 2, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
