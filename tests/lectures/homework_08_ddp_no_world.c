/* A student's mistake in exercise 2 of lectures/homework_08.c: the bucket
 * is divided by the micro-batches only, not by the world size, so every
 * gradient is 4 times the average. tests/test_homework.py checks that the
 * message says so: a constant ratio, the world size. */
#define HOMEWORK_SOLUTION
#define OWN_DDP_SYNC
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        tensor *place = tensor_view(bucket, at, grads[i]->shape[0], grads[i]->ndim == 2 ? grads[i]->shape[1] : 0);
        tensor_copy(place, grads[i]);
        tensor_free(place);
        at += grads[i]->numel;
    }
    dist_all_reduce(bucket, DIST_SUM);
    scale_(bucket, 1.0f / (float)accum); /* the bug: not by the world size too */
    at = 0;
    for (int i = 0; i < n; i++) {
        tensor *place = tensor_view(bucket, at, grads[i]->shape[0], grads[i]->ndim == 2 ? grads[i]->shape[1] : 0);
        tensor_copy(grads[i], place);
        tensor_free(place);
        at += grads[i]->numel;
    }
}
