/* A wrong method for exercise 3 of lectures/homework_08.c: the whole
 * gradient all-reduced (averaged), then the shard stepped and gathered.
 * The parameters are right; the communication is DDP's, not ZeRO-1's
 * reduce-scatter (tests/test_homework.py: the method check must fail). */
#define HOMEWORK_SOLUTION
#define OWN_ZERO1_STEP
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = param->numel / w;
    dist_all_reduce(grad, DIST_AVG);
    tensor *shard = tensor_view(param, rank * c, c, 0);
    tensor *grad_shard = tensor_view(grad, rank * c, c, 0);
    adamw_step(opt, shard, grad_shard);
    tensor *mine = to_device(shard, param->device);
    dist_all_gather(param, mine);
    tensor_free(mine);
    tensor_free(grad_shard);
    tensor_free(shard);
}
