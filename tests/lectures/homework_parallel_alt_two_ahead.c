/* A prefetch two layers ahead for exercise 3 of
 * lectures/homework_parallel.c, with a third buffer of its own. The output
 * is right and the gathers overlap the compute, but the text asks for the
 * two buffers full[0] and full[1], so that only the next layer's gather is
 * on its way: tests/test_homework_parallel.py checks that only the prefetch
 * check fails, naming that rule. */
#define HOMEWORK_SOLUTION
#define OWN_ZERO3_FORWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    tensor *third = zeros(full[0]->shape[0], full[0]->shape[1], full[0]->device);
    tensor *buf[3] = {full[0], full[1], third};
    dist_request *req[16];
    for (int i = 0; i < 2 && i < layers; i++)
        req[i] = dist_all_gather_async(buf[i], pieces[i]);
    tensor *act = NULL;
    for (int i = 0; i < layers; i++) {
        dist_wait(req[i]);
        if (i + 2 < layers) req[i + 2] = dist_all_gather_async(buf[(i + 2) % 3], pieces[i + 2]);
        tensor *out = zero3_layer(i, buf[i % 3], act ? act : x);
        if (act) tensor_free(act);
        act = out;
    }
    tensor_free(third);
    return act;
}
