/* The instructor's solution of lectures/homework_08.c (tests/test_homework.py
 * checks that it passes every check, and that the starter fails them).
 * The homework's own checking code is included as it is; the four
 * exercises are in homework_08_solution.h, which the wrong-method fixtures
 * share. */
#define HOMEWORK_SOLUTION
#include "../../lectures/homework_08.c"
#include "homework_08_solution.h"
