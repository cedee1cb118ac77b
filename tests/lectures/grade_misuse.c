/* Misuse of grade_exercise (tests/test_grade.py): each bad call is an
 * error step at its own line, and the run goes on to its one check. */
#include "lectern.h"

static void in_a_rank(int rank, int world, void *args) {
    (void)world;
    (void)args;
    if (rank == 0) grade_exercise("from a rank:", 1, 1); /* BAD: rank */
}

static void body(void) {
    grade_exercise("part A:", 10, 2);
    grade_exercise("part A:", 5, 1);  /* BAD: twice */
    grade_exercise("", 5, 1);         /* BAD: empty */
    grade_exercise("part B:", -1, 1); /* BAD: points */
    grade_exercise("part C:", 5, 0);  /* BAD: checks */
    spawn(in_a_rank, 2, NULL, 0);
    check(1, "part A: the one check");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
