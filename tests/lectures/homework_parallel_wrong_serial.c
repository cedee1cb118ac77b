/* A wrong method for exercise 2 of lectures/homework_parallel.c: every stage
 * runs one micro-batch's forward and backward before the next one's. It
 * keeps every rule (one micro-batch in flight at a time), but only one
 * stage ever works: a bubble of 1 - 1/p instead of (p-1)/(m+p-1)
 * (tests/test_homework_parallel.py: the bubble check must fail). */
#define HOMEWORK_SOLUTION
#define OWN_ONE_F_ONE_B
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

void one_f_one_b(int stage, int stages, int m, int *ops) {
    (void)stage;
    (void)stages;
    for (int k = 0; k < m; k++) {
        ops[2 * k] = FWD(k);
        ops[2 * k + 1] = BWD(k);
    }
}
