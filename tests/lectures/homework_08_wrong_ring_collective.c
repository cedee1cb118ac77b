/* A wrong method for exercise 1 of lectures/homework_08.c, the shortest way
 * through: ring_all_reduce calls the library's all-reduce. The numbers are
 * right; the exercise asked for a ring of sends and receives
 * (tests/test_homework.py: the method checks must fail, naming the call). */
#define HOMEWORK_SOLUTION
#define OWN_RING_ALL_REDUCE
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"

void ring_all_reduce(tensor *t) { dist_all_reduce(t, DIST_SUM); }
