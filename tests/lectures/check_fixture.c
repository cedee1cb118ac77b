/* Fixture: check() and check_close() (tests/test_checks.py).
 * LECTERN_FIXTURE_CASE: "pass" runs only checks that pass; anything else
 * also runs the failing ones, in the lecture and in a spawned rank; "fold"
 * runs only fold_ranks: 4 ranks' checks at the same lines, one failing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static const float six[6] = {0, 1, 2, 3, 4, 5};
static const float six_off[6] = {0, 1, 2, 3, 4, 5.5f};      /* [1, 2] differs by 0.5 */
static const float six_near[6] = {0, 1, 2, 3, 4, 5.00001f}; /* within rtol 1e-5 of 5 */

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
    for (int i = 0; i < 4; i++)
        want[i] = (float)(world_size * i + world_size * (world_size - 1) / 2);
    tensor *expected = tensor_from(want, 4, 0, get_device(rank));
    check_close(t, expected, 0, 0, "all-reduce sum");
    if (fail && rank == 1) check(rank == 0, "rank %d is rank 0", rank);
    tensor_free(t);
    tensor_free(expected);
}

/* 4 ranks check the same things at the same lines: check_close() with a
 * difference of rank * 1e-4 (rank 3's the largest), a check in a loop, and
 * a value that is 0.1 on every rank but rank 2, where it is 1.0 and fails. */
static void fold_ranks(int rank, int world_size, void *args) {
    (void)world_size;
    (void)args;
    float base[2] = {1, 2}, off[2] = {1, 2 + (float)rank * 1e-4f};
    tensor *a = tensor_from(base, 2, 0, get_device(rank)), *b = tensor_from(off, 2, 0, get_device(rank));
    check_close(b, a, 0, 0.01, "within 0.01");
    for (int i = 0; i < 2; i++)
        check(i < 2, "step %d of 2", i);
    double value = rank == 2 ? 1.0 : 0.1;
    check(value <= 0.5, "value %.1f <= 0.5", value);
    tensor_free(a);
    tensor_free(b);
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    if (c && strcmp(c, "fold") == 0) {
        spawn(fold_ranks, 4, NULL, 0);
        return;
    }
    int fail = !(c && strcmp(c, "pass") == 0);
    note("checks");
    passing();
    if (fail) failing();
    spawn(ranks, 2, &fail, sizeof fail);
    note("after");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
