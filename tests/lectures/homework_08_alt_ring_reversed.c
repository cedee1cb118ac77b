/* A ring the other way round, for exercise 1 of lectures/homework_08.c:
 * each rank sends to rank - 1 and receives from rank + 1. The sums are
 * right and the bytes are a ring's, but the text asks for a ring that
 * "sends one chunk to the next rank and adds the chunk it receives from the
 * previous one": tests/test_homework.py checks that only the traffic check
 * fails, with a message that names that rule and the direction taken. */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = t->numel / w;
    int to = (rank + w - 1) % w, from = (rank + 1) % w;
    tensor *incoming = empty(c, 0, t->device);
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank + s) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank + s + 1) % w) * c, c, 0);
        dist_request *req = dist_isend(out, to);
        dist_recv(incoming, from);
        dist_wait(req);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank - 1 + s + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank + s) % w) * c, c, 0);
        dist_request *req = dist_isend(out, to);
        dist_recv(in, from);
        dist_wait(req);
        tensor_free(out);
        tensor_free(in);
    }
    tensor_free(incoming);
}
