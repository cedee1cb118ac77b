/* A wrong method for exercise 1 of lectures/homework_parallel.c: each rank
 * all-gathers every rank's partial dx and adds them up itself. dx is right;
 * the communication is w times dx where one all-reduce of dx is enough
 * (tests/test_homework_parallel.py: the method check must fail). */
#define HOMEWORK_SOLUTION
#define OWN_MEGATRON_BACKWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

void megatron_backward(const tensor *x, const tensor *a, const tensor *b, const tensor *hpre, const tensor *dy,
                       tensor *da, tensor *db, tensor *dx) {
    int w = dist_world_size();
    tensor *z = gelu(hpre);
    matmul_into(db, z, dy, 1, 0, 1.0f, 0.0f);
    tensor *dz = empty(dy->shape[0], b->shape[0], dy->device);
    matmul_into(dz, dy, b, 0, 1, 1.0f, 0.0f);
    tensor *dh = gelu_backward(hpre, dz);
    matmul_into(da, x, dh, 1, 0, 1.0f, 0.0f);
    matmul_into(dx, dh, a, 0, 1, 1.0f, 0.0f);
    tensor *parts = empty(w * dx->numel, 0, dx->device);
    dist_all_gather(parts, dx);
    fill_(dx, 0.0f);
    for (int r = 0; r < w; r++) {
        tensor *part = tensor_view(parts, r * dx->numel, dx->shape[0], dx->shape[1]);
        add_(dx, part);
        tensor_free(part);
    }
    tensor_free(parts);
    tensor_free(dh);
    tensor_free(dz);
    tensor_free(z);
}
