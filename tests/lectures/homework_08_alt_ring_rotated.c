/* Another right method for exercise 1 of lectures/homework_08.c: the ring
 * of the exercise (a chunk to the next rank each step, reduce-scatter then
 * all-gather), built from dist_irecv, dist_send and dist_wait, with every
 * chunk index rotated by 2. The text asks for no particular chunk order:
 * tests/test_homework.py checks that it passes every check. */
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
        tensor *out = tensor_view(t, ((rank - s + 2 + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank - s + 1 + 2 * w) % w) * c, c, 0);
        dist_request *req = dist_irecv(incoming, prev);
        dist_send(out, next);
        dist_wait(req);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank + 3 - s + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank + 2 - s + w) % w) * c, c, 0);
        dist_request *req = dist_irecv(in, prev);
        dist_send(out, next);
        dist_wait(req);
        tensor_free(out);
        tensor_free(in);
    }
    tensor_free(incoming);
}
