/* A student's mistake in exercise 3 of lectures/homework_parallel.c: the
 * forward frees every activation it has used, x (its input) included,
 * which the text forbids ("free the ones in between, never x"). The output
 * is right: tests/test_homework_parallel.py checks that the ownership
 * check fails (so the run cannot score 100) and that nothing else goes
 * wrong (the checker does not free x a second time). */
#define HOMEWORK_SOLUTION
#define OWN_ZERO3_FORWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    dist_request *next = dist_all_gather_async(full[0], pieces[0]);
    tensor *act = (tensor *)x;
    for (int i = 0; i < layers; i++) {
        dist_wait(next);
        next = i + 1 < layers ? dist_all_gather_async(full[(i + 1) % 2], pieces[i + 1]) : NULL;
        tensor *out = zero3_layer(i, full[i % 2], act);
        tensor_free(act); /* the bug: the first time round, act is x */
        act = out;
    }
    return act;
}
