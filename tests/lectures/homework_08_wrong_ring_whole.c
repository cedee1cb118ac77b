/* A wrong method for exercise 1 of lectures/homework_08.c: a "ring" that
 * passes whole tensors. Each rank sends what it last received (first its
 * own tensor) to the next rank, world - 1 times, and adds what arrives:
 * right sums from sends and receives only, but world / 2 times the bytes of
 * a ring that sends chunks (tests/test_homework.py: the bytes-per-peer
 * check must fail). */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    int rank = dist_rank(), w = dist_world_size();
    int next = (rank + 1) % w, prev = (rank + w - 1) % w;
    tensor *passing = to_device(t, t->device), *incoming = empty(t->numel, 0, t->device);
    for (int s = 0; s < w - 1; s++) {
        dist_request *req = dist_isend(passing, next);
        dist_recv(incoming, prev);
        dist_wait(req);
        add_(t, incoming);
        tensor_copy(passing, incoming);
    }
    tensor_free(passing);
    tensor_free(incoming);
}
