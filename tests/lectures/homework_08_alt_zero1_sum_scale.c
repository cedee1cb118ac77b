/* Another right method for exercise 3 of lectures/homework_08.c: the
 * reduce-scatter sums, and the shard is scaled by 1 / world after it (the
 * average, in two calls). The text asks to "average the gradient across
 * ranks", not for DIST_AVG: tests/test_homework.py checks that it passes
 * every check. */
#define HOMEWORK_SOLUTION
#define OWN_ZERO1_STEP
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = param->numel / w;
    tensor *grad_shard = empty(c, 0, param->device);
    dist_reduce_scatter(grad_shard, grad, DIST_SUM);
    scale_(grad_shard, 1.0f / (float)w);
    tensor *shard = tensor_view(param, rank * c, c, 0);
    adamw_step(opt, shard, grad_shard);
    tensor *mine = to_device(shard, param->device);
    dist_all_gather(param, mine);
    tensor_free(mine);
    tensor_free(shard);
    tensor_free(grad_shard);
}
