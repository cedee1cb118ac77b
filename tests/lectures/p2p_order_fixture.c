/* Fixture: point-to-point in flight across a collective
 * (tests/test_p2p_order.py).
 *
 * MPI allows a send to be started, a collective made, and the send waited
 * for after it, while the receiver makes the collective first and receives
 * after:
 *
 *   rank 0:  isend(to 1); all_reduce; wait
 *   rank 1:  all_reduce; recv(from 0)
 *
 * A backend that holds the send back until something forces it (the
 * collective, say) blocks rank 0's all-reduce on rank 1's receive, which
 * comes only after an all-reduce that needs rank 0: a deadlock. P2P_CASE
 * picks the pattern, P2P_FLOATS the message's size (large enough that no
 * transport buffers it, or small enough that all do). The same fixture runs
 * on Open MPI (CPUs) and on NCCL (where two GPUs exist): the tensors live on
 * get_device(rank).
 *
 * Each rank notes what it got, as exact sums the test works out on its own:
 *   "rank R all_reduce S"  and  "rank R received S". */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static long floats(void) {
    const char *s = getenv("P2P_FLOATS");
    return s && *s ? atol(s) : 1000;
}

/* n floats, every one `value`. */
static tensor *filled(long n, float value, int device) {
    tensor *t = zeros(n, 0, device);
    fill_(t, value);
    return t;
}

/* The pattern: the send's wait comes after the all-reduce. */
static void isend_across_all_reduce(int rank, int world_size, void *args) {
    long n = floats();
    int dev = get_device(rank);
    tensor *sum = filled(n, (float)(rank + 1), dev); /* all-reduced: 1 + 2 = 3 */
    tensor *msg = rank == 0 ? filled(n, 7.0f, dev) : zeros(n, 0, dev);
    if (rank == 0) {
        dist_request *req = dist_isend(msg, 1);
        dist_all_reduce(sum, DIST_SUM);
        dist_wait(req);
    } else {
        dist_all_reduce(sum, DIST_SUM);
        dist_recv(msg, 0);
        note("rank %d received %.17g", rank, tensor_sum(msg));
    }
    note("rank %d all_reduce %.17g", rank, tensor_sum(sum));
    tensor_free(sum);
    tensor_free(msg);
}

/* Both directions in flight across an async all-reduce, waited out of
 * order: rank 0 isends then irecvs; rank 1 irecvs then isends. */
static void both_ways_across_async(int rank, int world_size, void *args) {
    long n = floats();
    int dev = get_device(rank);
    int peer = 1 - rank;
    tensor *sum = filled(n, (float)(rank + 1), dev);
    tensor *out = filled(n, (float)(10 * (rank + 1)), dev); /* rank 0 sends 10s, rank 1 20s */
    tensor *in = zeros(n, 0, dev);
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
    note("rank %d received %.17g", rank, tensor_sum(in));
    note("rank %d all_reduce %.17g", rank, tensor_sum(sum));
    tensor_free(sum);
    tensor_free(out);
    tensor_free(in);
}

static void body(void) {
    const char *c = getenv("P2P_CASE");
    if (c && strcmp(c, "both_ways") == 0) spawn(both_ways_across_async, 2, NULL, 0);
    else spawn(isend_across_all_reduce, 2, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
