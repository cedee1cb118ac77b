/* A homework_08 run that crashes: rank 2's ring_all_reduce writes through
 * a NULL pointer (the others have solved it). tests/test_homework.py checks
 * that --grade still writes the results, with the checks that ran, those
 * that never did as "not reached" worth 0, and the crash as the reason. */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) {
    if (dist_rank() == 2) *(volatile float *)NULL = t->numel; /* the bug */
    dist_all_reduce(t, DIST_SUM);
}
