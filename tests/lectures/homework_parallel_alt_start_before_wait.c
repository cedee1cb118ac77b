/* Another right method for exercise 3 of lectures/homework_parallel.c:
 * layer i + 1's gather (into the other buffer) is started before layer i's
 * is waited for, then layer i's wait, then its compute. The same two
 * buffers, and more overlap than the order the text suggests; the text's
 * rule ("before layer i computes, layer i + 1's gather must already be on
 * its way") holds. tests/test_homework_parallel.py checks that it passes
 * every check, in every run. */
#define HOMEWORK_SOLUTION
#define OWN_ZERO3_FORWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    dist_request *current = dist_all_gather_async(full[0], pieces[0]);
    tensor *act = NULL;
    for (int i = 0; i < layers; i++) {
        dist_request *next = i + 1 < layers ? dist_all_gather_async(full[(i + 1) % 2], pieces[i + 1]) : NULL;
        dist_wait(current);
        tensor *out = zero3_layer(i, full[i % 2], act ? act : x);
        if (act) tensor_free(act);
        act = out;
        current = next;
    }
    return act;
}
