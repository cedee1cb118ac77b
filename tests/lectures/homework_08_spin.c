/* A homework_08 run that never ends: rank 2's ring_all_reduce loops for
 * ever (a student's loop whose condition never turns false); the others
 * wait for it in their all-reduce. A rank that computes is never called
 * deadlocked, so only the autograder's own time limit (SIGTERM) stops it:
 * tests/test_grade.py checks that --grade still writes the results, with
 * the checks not reached and SIGTERM as the reason. */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    if (dist_rank() == 2)
        for (volatile unsigned long i = 1; i != 0; i++) {} /* the bug: 2^64 turns */
    dist_all_reduce(t, DIST_SUM);
}
