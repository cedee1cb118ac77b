/* A wrong method for exercise 2 of lectures/homework_08.c: one all-reduce
 * per gradient, the bucket left unused. The averages are right; the
 * exercise asked for one all-reduce of the whole bucket
 * (tests/test_homework.py: the method check must fail, saying 3). */
#define HOMEWORK_SOLUTION
#define OWN_DDP_SYNC
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {
    (void)bucket;
    for (int i = 0; i < n; i++) {
        dist_all_reduce(grads[i], DIST_SUM);
        scale_(grads[i], 1.0f / (float)(dist_world_size() * accum));
    }
}
