/* A wrong method for exercise 3 of lectures/homework_parallel.c: layer
 * i + 1's gather is started asynchronously, as asked, but waited for at
 * once, before layer i computes: a blocking gather in two calls, nothing
 * overlapped (tests/test_homework_parallel.py: the prefetch check must fail,
 * from the bytes already counted when the layer computes). */
#define HOMEWORK_SOLUTION
#define OWN_ZERO3_FORWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    dist_wait(dist_all_gather_async(full[0], pieces[0]));
    tensor *act = NULL;
    for (int i = 0; i < layers; i++) {
        if (i + 1 < layers) dist_wait(dist_all_gather_async(full[(i + 1) % 2], pieces[i + 1]));
        tensor *out = zero3_layer(i, full[i % 2], act ? act : x);
        if (act) tensor_free(act);
        act = out;
    }
    return act;
}
