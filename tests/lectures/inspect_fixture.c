/* Fixture: inspect(x) (tests/test_inspect.py). Every kind of value, small
 * and large tensors, and the same names in four ranks, each rank's values
 * its own. LECTERN_FIXTURE_CASE picks a misuse instead: "null" (a NULL
 * tensor) or "freed" (a tensor after tensor_free). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

/* Kept in a volatile so the compiler cannot see the NULL and warn. */
static tensor *volatile nothing = NULL;

/* Rank r's tensor is filled with r, then all-reduced: every rank then holds
 * 0 + 1 + ... + (world - 1). */
static void ranks(int rank, int world_size, void *args) {
    (void)args;
    tensor *mine = zeros(2, 3, get_device(rank));
    fill_(mine, (float)rank);
    inspect(mine);
    inspect(rank);
    dist_all_reduce(mine, DIST_SUM);
    inspect(mine);
    double share = (double)rank / world_size;
    inspect(share);
    tensor_free(mine);
}

static void scalars(void) {
    int n = 7;
    inspect(n);
    int64_t big = INT64_C(9007199254740993); /* 2^53 + 1: not a double */
    inspect(big);
    float f = 0.1f;
    inspect(f);
    double third = 1.0 / 3.0;
    inspect(third);
    n = n * 6;
    inspect(n);
}

static void tensors(void) {
    tensor *row = arange(5, -1);
    inspect(row);
    float vals[6] = {1.5f, -2.0f, 0.25f, 3.0f, 0.1f, -7.0f};
    tensor *m = tensor_from(vals, 2, 3, -1);
    inspect(m);
    tensor *edge = arange(256, -1); /* the largest kept whole */
    inspect(edge);
    tensor *flat = arange(4096, -1);
    tensor *big = reshape(flat, 64, 64); /* element (r, c) is 64 r + c */
    inspect(big);
    tensor *strip = arange(1000, -1);
    inspect(strip);
    const tensor *ro = m;
    inspect(ro);
    tensor_free(row);
    tensor_free(m);
    tensor_free(edge);
    tensor_free(big);
    tensor_free(flat);
    tensor_free(strip);
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    if (c && strcmp(c, "null") == 0) {
        tensor *t = nothing;
        inspect(t);
        note("after");
        return;
    }
    if (c && strcmp(c, "freed") == 0) {
        tensor *t = arange(4, -1);
        tensor_free(t);
        inspect(t);
        note("after");
        return;
    }
    note("scalars");
    scalars();
    note("tensors");
    tensors();
    spawn(ranks, 4, NULL, 0);
    note("done");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
