/* Fixture: steps of ranks land in the parent's trace, stamped and in order
 * (tests/test_spawn.py). */
#include <string.h>

#include "lectern.h"

typedef struct {
    int rounds;
    char label[16];
} basic_args;

static void say(int rank, int round) { note("rank %d round %d", rank, round); }

static void worker(int rank, int world_size, void *p) {
    basic_args *a = p;
    for (int i = 0; i < a->rounds; i++) {
        say(rank, i);
        dist_barrier();
    }
    tensor *t = arange(4, get_device(rank));
    add_scalar(t, (float)rank);
    dist_all_reduce(t, DIST_SUM);
    note("%s %d/%d: %s", a->label, rank, world_size, tensor_str(t));
    tensor_free(t);
}

static void quiet(int rank, int world_size, void *p) {
    (void)rank;
    (void)world_size;
    (void)p;
}

static void body(void) {
    note("before the spawns");
    basic_args a = {.rounds = 2};
    strcpy(a.label, "sum");
    spawn(worker, 4, &a, sizeof a);
    note("between");
    spawn(quiet, 1, NULL, 0);
    spawn(worker, 3, &a, sizeof a);
    note("after the spawns");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
