/* A wrong method for exercise 3 of lectures/homework_08.c: the gradient is
 * reduce-scattered as a SUM where the exercise asks for the average. AdamW's
 * first step is almost blind to the gradient's scale, so with ordinary
 * gradients the parameters come out within 1e-8 of the right ones; with
 * gradients near AdamW's eps they do not (tests/test_homework.py: that check
 * must fail). */
#define HOMEWORK_SOLUTION
#define OWN_ZERO1_STEP
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = param->numel / w;
    tensor *grad_shard = empty(c, 0, param->device);
    dist_reduce_scatter(grad_shard, grad, DIST_SUM);
    tensor *shard = tensor_view(param, rank * c, c, 0);
    adamw_step(opt, shard, grad_shard);
    tensor *mine = to_device(shard, param->device);
    dist_all_gather(param, mine);
    tensor_free(mine);
    tensor_free(shard);
    tensor_free(grad_shard);
}
