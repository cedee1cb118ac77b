/* Fixture: tensors left alive, freed twice, used after free
 * (tests/test_leaks.py). LECTERN_FIXTURE_CASE picks: "leak" (the default),
 * "double_free", "use_after_free", "raw_after_free", "rank_use_after_free",
 * "lost_block" (memory that is not a tensor, lost by the lecture and by
 * each rank: the sanitizer build's leak check names these functions),
 * "rank_overflows" (undefined behaviour in a rank: UBSan's report). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static tensor *kept;

static void ranks(int rank, int world_size, void *args) {
    for (int i = 0; i < 3; i++) {
        tensor *t = zeros(16, 16, get_device(rank)); /* 1 kB each, never freed */
        (void)t;
    }
    kept = arange(8, get_device(rank)); /* 32 bytes, in a global */
    tensor *fine = zeros(4, 0, get_device(rank));
    tensor_free(fine);
    note_verbatim("rank %d done", rank);
}

static void ranks_use_after_free(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    tensor_free(t);
    if (rank == 1) dist_all_reduce(t, DIST_SUM);
}

/* A block of plain memory, its only pointer dropped: a leak only the
 * sanitizer's leak check sees. The pointer is volatile so that the
 * compiler keeps the malloc. */
static void *volatile block;

static void rank_loses_a_block(int rank, int world_size, void *args) {
    block = malloc(48);
    block = NULL;
    note_verbatim("rank %d lost a block", rank);
}

/* A signed overflow UBSan reports: the operand is volatile so that the
 * compiler cannot see the value and fold it (or warn at compile time). */
static volatile int near_max = INT_MAX;

static void rank_overflows(int rank, int world_size, void *args) {
    int sum = near_max + (rank + 1);
    note_verbatim("rank %d summed %d", rank, sum);
}

static void lecture_loses_a_block(void) {
    block = malloc(80);
    block = NULL;
}

static void leak(void) {
    tensor *a = randn(256, 256, -1); /* 256 kB, never freed */
    (void)a;
    spawn(ranks, 2, NULL, 0);
    spawn(ranks, 2, NULL, 0); /* the pool's ranks start clean again */
    note("after");
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    c = c ? c : "leak";
    if (strcmp(c, "leak") == 0) leak();
    if (strcmp(c, "double_free") == 0) {
        tensor *t = zeros(2, 2, -1);
        tensor_free(t);
        tensor_free(t);
    }
    if (strcmp(c, "use_after_free") == 0) {
        tensor *t = zeros(2, 2, -1);
        tensor_free(t);
        add_scalar(t, 1.0f);
    }
    if (strcmp(c, "raw_after_free") == 0) {
        tensor *t = zeros(2, 2, -1);
        tensor_free(t);
        note("%g", (double)t->data[1]);
    }
    if (strcmp(c, "rank_use_after_free") == 0) spawn(ranks_use_after_free, 2, NULL, 0);
    if (strcmp(c, "lost_block") == 0) {
        lecture_loses_a_block();
        spawn(rank_loses_a_block, 2, NULL, 0);
    }
    if (strcmp(c, "rank_overflows") == 0) spawn(rank_overflows, 2, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
