/* Fixture: ranks that return values to the lecture with spawn_return(),
 * read with spawn_result() (tests/test_spawn_result.py). SPAWN_RESULT picks
 * the case; the test finds each expected line by the marker comment on it. */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

typedef struct answer {
    int rank, world_size;
    double square;
} answer;

/* Every rank but the last returns its answer; the last returns nothing. */
static void answers(int rank, int world_size, void *args) {
    answer a = {.rank = rank, .world_size = world_size, .square = (double)rank * rank};
    if (rank < world_size - 1) spawn_return(&a, sizeof a);
}

/* BIG doubles, element i = i + rank: 8 MB, far more than one socket write. */
enum { BIG = 1000000 };
static void big(int rank, int world_size, void *args) {
    double *v = malloc(BIG * sizeof *v);
    for (int i = 0; i < BIG; i++)
        v[i] = i + rank;
    spawn_return(v, BIG * sizeof *v);
    free(v);
}

static void nothing(int rank, int world_size, void *args) {}

static void twice(int rank, int world_size, void *args) {
    int first = 1, second = 2;
    spawn_return(&first, sizeof first);
    spawn_return(&second, sizeof second); /* MARK:twice */
}

static void too_big(int rank, int world_size, void *args) {
    size_t n = LECTERN_MAX_SPAWN_RESULT + 1u;
    char *p = calloc(n, 1);
    spawn_return(p, n); /* MARK:too-big */
    free(p);
}

static void values(void) {
    spawn(answers, 4, NULL, 0);
    for (int r = 0; r < 4; r++) {
        answer a = {-1, -1, -1};
        size_t n = spawn_result(r, &a, sizeof a);
        note("rank %d returned %zu bytes: rank %d of %d, square %g", r, n, a.rank, a.world_size, a.square);
    }
    note("size only: %zu", spawn_result(0, NULL, 0));
    spawn(big, 2, NULL, 0);
    double *v = malloc(BIG * sizeof *v);
    for (int r = 0; r < 2; r++) {
        size_t n = spawn_result(r, v, BIG * sizeof *v);
        double s = 0;
        for (int i = 0; i < BIG; i++)
            s += v[i];
        note("big: rank %d returned %zu bytes, sum %.1f", r, n, s);
    }
    free(v);
    spawn(nothing, 2, NULL, 0); /* the previous spawn's values are gone */
    note("after a spawn that returned nothing: %zu", spawn_result(0, NULL, 0));
}

static void errors(void) {
    int x = 0;
    spawn_result(0, &x, sizeof x); /* MARK:no-spawn */
    spawn_return(&x, sizeof x);    /* MARK:in-lecture */
    spawn(twice, 2, NULL, 0);
    size_t kept = spawn_result(1, &x, sizeof x);
    note("twice: kept %zu bytes, value %d", kept, x);
    spawn_result(2, &x, sizeof x); /* MARK:bad-rank */
    spawn(answers, 2, NULL, 0);
    note("small: %zu", spawn_result(0, &x, sizeof x)); /* MARK:small */
    spawn(too_big, 1, NULL, 0);
    note("too big: %zu", spawn_result(0, NULL, 0));
}

static void body(void) {
    const char *c = getenv("SPAWN_RESULT");
    if (c && strcmp(c, "errors") == 0) errors();
    else values();
    note("done");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
