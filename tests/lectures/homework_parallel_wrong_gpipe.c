/* A wrong method for exercise 2 of lectures/homework_parallel.c: the GPipe
 * order, every forward then every backward. It runs, and its bubble is
 * 1F1B's; but every stage holds all m micro-batches' activations at once
 * where 1F1B holds at most p - s (tests/test_homework_parallel.py: the
 * in-flight check must fail). */
#define HOMEWORK_SOLUTION
#define OWN_ONE_F_ONE_B
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

void one_f_one_b(int stage, int stages, int m, int *ops) {
    (void)stage;
    (void)stages;
    for (int k = 0; k < m; k++) {
        ops[k] = FWD(k);
        ops[m + k] = BWD(k);
    }
}
