/* A student's mistake in exercise 3 of lectures/homework_08.c: the
 * all-gather's input is a view of its own output, an error that stops the
 * exercise's ranks. Exercises 1, 2 and 4 are solved: tests/test_grade.py
 * checks that exercise 4, after it, still runs and scores. */
#define HOMEWORK_SOLUTION
#define OWN_ZERO1_STEP
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = param->numel / w;
    tensor *grad_shard = empty(c, 0, param->device);
    dist_reduce_scatter(grad_shard, grad, DIST_AVG);
    tensor *shard = tensor_view(param, rank * c, c, 0);
    adamw_step(opt, shard, grad_shard);
    dist_all_gather(param, shard); /* the bug: the input is part of the output */
    tensor_free(shard);
    tensor_free(grad_shard);
}
