/* A student's mistake in exercise 1 of lectures/homework_08.c: every step
 * of the ring sends with dist_send before it receives, so every rank waits
 * in dist_send for a receive that is never posted. The other exercises are
 * solved: tests/test_homework.py and tests/test_grade.py check that the
 * deadlock costs exercise 1's checks only. */
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
        dist_send(out, next); /* the bug: every rank sends first */
        dist_recv(incoming, prev);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    tensor_free(incoming);
}
