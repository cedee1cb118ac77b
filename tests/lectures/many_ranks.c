/* Fixture: a world of many ranks (tests/test_many_ranks.py). MANY_RANKS
 * ranks (default 32) each all-reduce rank+1 (the sum is n(n+1)/2), pass
 * their rank one step round a ring with dist_sendrecv, and all-gather their
 * ranks; each notes what it got and the bytes it sent to its right-hand
 * neighbour (the traffic counters are kept per peer, up to
 * LECTERN_MAX_WORLD of them). */
#include <stdlib.h>

#include "lectern.h"

static void worker(int rank, int world_size, void *p) {
    (void)p;
    dist_traffic before = dist_traffic_now();
    tensor *t = zeros(4, 0, get_device(rank));
    fill_(t, (float)(rank + 1));
    dist_all_reduce(t, DIST_SUM);

    int right = (rank + 1) % world_size, left = (rank + world_size - 1) % world_size;
    tensor *mine = zeros(1, 0, get_device(rank)), *got = zeros(1, 0, get_device(rank));
    fill_(mine, (float)rank);
    dist_sendrecv(mine, right, got, left);

    tensor *all = zeros(world_size, 0, get_device(rank));
    dist_all_gather(all, mine);
    int in_order = 1;
    for (int q = 0; q < world_size; q++)
        in_order &= tensor_item(all, q) == (float)q;

    dist_traffic d = dist_traffic_since(&before);
    note("rank %d/%d: sum %g %g %g %g, from the left %g, gathered in order %d, to the right %lld bytes", rank,
         world_size, tensor_item(t, 0), tensor_item(t, 1), tensor_item(t, 2), tensor_item(t, 3), tensor_item(got, 0),
         in_order, (long long)d.sent_to[right]);
    tensor_free(all);
    tensor_free(got);
    tensor_free(mine);
    tensor_free(t);
}

static void body(void) {
    const char *n = getenv("MANY_RANKS");
    note("before the spawn");
    spawn(worker, n && *n ? atoi(n) : 32, NULL, 0);
    note("after the spawn");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
