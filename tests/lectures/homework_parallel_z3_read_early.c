/* A student's mistake in exercise 3 of lectures/homework_parallel.c: layer
 * i computes before its own gather is waited for (the wait comes after the
 * compute). The read happens inside zero3_layer(), the course's code:
 * tests/test_homework_parallel.py checks that the error is put at the
 * student's call of it, naming the line inside too. */
#define HOMEWORK_SOLUTION
#define OWN_ZERO3_FORWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    tensor *act = NULL;
    for (int i = 0; i < layers; i++) {
        dist_request *req = dist_all_gather_async(full[i % 2], pieces[i]);
        tensor *out = zero3_layer(i, full[i % 2], act ? act : x); /* the bug: before the wait */
        dist_wait(req);
        if (act) tensor_free(act);
        act = out;
    }
    return act;
}
