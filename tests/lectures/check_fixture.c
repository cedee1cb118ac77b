/* Fixture: check() and check_close() (tests/test_checks.py).
 * LECTERN_FIXTURE_CASE: "pass" runs only checks that pass; anything else
 * also runs the failing ones, in the lecture and in a spawned rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static const float six[6] = {0, 1, 2, 3, 4, 5};
static const float six_off[6] = {0, 1, 2, 3, 4, 5.5f};      /* [1, 2] differs by 0.5 */
static const float six_near[6] = {0, 1, 2, 3, 4, 5.00001f};  /* within rtol 1e-5 of 5 */

static void passing(void) {
    check(1 + 1 == 2, "one and one make %d", 2);
    tensor *a = tensor_from(six, 2, 3, -1), *near = tensor_from(six_near, 2, 3, -1);
    check_close(a, a, 0, 0, "a tensor against itself");
    check_close(near, a, 1e-5, 0, "within rtol");
    tensor_free(a);
    tensor_free(near);
}

static void failing(void) {
    check(2 + 2 == 5, "two and two make %d", 5);
    tensor *a = tensor_from(six, 2, 3, -1), *off = tensor_from(six_off, 2, 3, -1);
    check_close(a, off, 1e-3, 1e-6, "one element off");
    tensor *flat = tensor_from(six, 6, 0, -1);
    check_close(flat, a, 0, 0, "shapes differ");
    float bad[6] = {0, 1, NAN, 3, 4, 5};
    tensor *nan = tensor_from(bad, 2, 3, -1);
    check_close(nan, a, 0.5, 0.5, "a NaN");
    tensor_free(a);
    tensor_free(off);
    tensor_free(flat);
    tensor_free(nan);
}

/* Each rank checks the all-reduce of arange(4) + rank against the sum the
 * test knows; with `fail`, rank 1 also checks something false. */
static void ranks(int rank, int world_size, void *args) {
    int fail = *(const int *)args;
    tensor *t = arange(4, get_device(rank));
    add_scalar(t, (float)rank);
    dist_all_reduce(t, DIST_SUM);
    float want[4];
    for (int i = 0; i < 4; i++) want[i] = (float)(world_size * i + world_size * (world_size - 1) / 2);
    tensor *expected = tensor_from(want, 4, 0, get_device(rank));
    check_close(t, expected, 0, 0, "all-reduce sum");
    if (fail && rank == 1) check(rank == 0, "rank %d is rank 0", rank);
    tensor_free(t);
    tensor_free(expected);
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    int fail = !(c && strcmp(c, "pass") == 0);
    note("checks");
    passing();
    if (fail) failing();
    spawn(ranks, 2, &fail, sizeof fail);
    note("after");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
