/* A student's mistake in exercise 1 of lectures/homework_parallel.c: da
 * computed as dh^T x, the wrong transpose, which matmul refuses as an
 * error that stops the exercise's ranks. Exercises 2 and 3 are solved:
 * tests/test_homework_parallel.py checks that they still run and pass. */
#define HOMEWORK_SOLUTION
#define OWN_MEGATRON_BACKWARD
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

void megatron_backward(const tensor *x, const tensor *a, const tensor *b, const tensor *hpre, const tensor *dy,
                       tensor *da, tensor *db, tensor *dx) {
    tensor *z = gelu(hpre);
    matmul_into(db, z, dy, 1, 0, 1.0f, 0.0f);
    tensor *dz = empty(dy->shape[0], b->shape[0], dy->device);
    matmul_into(dz, dy, b, 0, 1, 1.0f, 0.0f);
    tensor *dh = gelu_backward(hpre, dz);
    matmul_into(da, dh, x, 1, 0, 1.0f, 0.0f); /* the bug: dh^T x is h/w x d, da is d x h/w */
    matmul_into(dx, dh, a, 0, 1, 1.0f, 0.0f);
    dist_all_reduce(dx, DIST_SUM);
    tensor_free(dh);
    tensor_free(dz);
    tensor_free(z);
}
