/* A student's mistake in exercise 1 of lectures/homework_08.c: rank 0's
 * ring_all_reduce loops for ever (a condition that never turns false),
 * after printing a line with printf; the others wait for it. The other
 * exercises are solved. This copy gives each exercise 4 s (the homework's
 * own limit is 30): tests/test_homework.py and tests/test_grade.py check
 * that exercise 1 is stopped at its limit naming where each rank was and
 * for how long, that exercises 2 and 3 still run and pass, and that the
 * line rank 0 printed is in the console's tail of --grade's results. */
#define EXERCISE_SECONDS 4
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    if (dist_rank() == 0) {
        printf("rank 0 starts its ring on %lld floats\n", (long long)t->numel);
        for (volatile unsigned long i = 1; i != 0; i++) {} /* the bug: 2^64 turns */
    }
    dist_all_reduce(t, DIST_SUM);
}
