/* The instructor's solution of lectures/homework_parallel.c
 * (tests/test_homework_parallel.py checks that it passes every check, and
 * that the starter fails them). The homework's own checking code is included
 * as it is; the three exercises are in homework_parallel_solution.h, which
 * the wrong-method fixtures share. */
#define HOMEWORK_SOLUTION
#include "../../lectures/homework_parallel.c"
#include "homework_parallel_solution.h"
