/* A student's mistake in exercise 2 of lectures/homework_parallel.c: the
 * warm-up is not capped at m, so with 2 micro-batches stage 0 runs
 * FWD(0), FWD(1), FWD(2) (a micro-batch that does not exist) and writes 5
 * ops where the order has 4. tests/test_homework_parallel.py checks that
 * the first rule names the write past the end. */
#define HOMEWORK_SOLUTION
#define OWN_ONE_F_ONE_B
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"

void one_f_one_b(int stage, int stages, int m, int *ops) {
    int warm = stages - stage - 1; /* the bug: at most m */
    int f = 0, b = 0, n = 0;
    while (f < warm)
        ops[n++] = FWD(f++);
    while (f < m) {
        ops[n++] = FWD(f++);
        ops[n++] = BWD(b++);
    }
    while (b < m)
        ops[n++] = BWD(b++);
}
