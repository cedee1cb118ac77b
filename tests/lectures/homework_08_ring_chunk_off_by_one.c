/* A student's mistake in exercise 1 of lectures/homework_08.c: the
 * all-gather sends chunk (rank - step) where the finished one is
 * (rank + 1 - step). The reduce-scatter is right, the traffic too: only
 * the values are wrong, and tests/test_homework.py checks that the
 * message says which chunks hold what. */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = t->numel / w;
    int next = (rank + 1) % w, prev = (rank + w - 1) % w;
    tensor *incoming = empty(c, 0, t->device);
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank - s + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank - s - 1 + 2 * w) % w) * c, c, 0);
        dist_request *req = dist_isend(out, next);
        dist_recv(incoming, prev);
        dist_wait(req);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank - s + w) % w) * c, c, 0); /* the bug: rank + 1 - s */
        tensor *in = tensor_view(t, ((rank - s - 1 + w) % w) * c, c, 0);
        dist_request *req = dist_isend(out, next);
        dist_recv(in, prev);
        dist_wait(req);
        tensor_free(out);
        tensor_free(in);
    }
    tensor_free(incoming);
}
