/* Fixture: what a rank of the reused pool sees (tests/test_spawn.py).
 * SPAWN_POOL picks the case:
 *   globals   spawned functions change globals, statics and the random
 *             generators; every spawn must still see them as at program start
 *   printf    a rank's own printf() and fprintf(stderr) reach the console
 *   sixteen   16 ranks, then the pool sits idle while the test watches it
 *   revive    a spawn, then (after the test killed a pool rank) another */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

/* Start values the test knows from this source. */
int counter = 7;
static double scale_factor = 1.5;
static char label[16] = "start";
static const int table[4] = {1, 2, 3, 4};
static int *remembered = NULL; /* a pointer kept in a global */
static int somewhere;

static int calls(void) {
    static int n = 0; /* a function's static: back to 0 at every spawn */
    return ++n;
}

/* randn's first number: unseeded, a fresh process draws from seed 0. */
static float first_randn(void) {
    tensor *r = randn(1, 0, -1);
    float x = tensor_item(r, 0);
    tensor_free(r);
    return x;
}

static void change_globals(int rank, int world_size, void *args) {
    float first = first_randn();
    note("rank %d sees counter=%d scale=%g label=%s table=%d calls=%d remembered=%s rand=%d randn=%.6f", rank, counter,
         scale_factor, label, table[3], calls(), remembered ? "set" : "NULL", rand(), first);
    counter += 100;
    scale_factor *= 2;
    strcpy(label, "changed");
    calls();
    if (!remembered) remembered = &somewhere;
    manual_seed(99);
    srand(99);
}

static void say_printf(int rank, int world_size, void *args) {
    printf("printf from rank %d of %d\n", rank, world_size);
    fprintf(stderr, "stderr from rank %d of %d\n", rank, world_size);
    note("rank %d printed", rank);
}

static void sum_of_ranks(int rank, int world_size, void *args) {
    tensor *t = tensor_from((float[]){(float)rank}, 1, 0, get_device(rank));
    dist_all_reduce(t, DIST_SUM);
    note("rank %d of %d: sum %g", rank, world_size, tensor_item(t, 0));
    tensor_free(t);
}

/* The test reads our stdout line by line; it answers on stdin. */
static void tell_and_wait(const char *what) {
    printf("%s\n", what);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) exit(2);
}

static void body(void) {
    const char *c = getenv("SPAWN_POOL");
    if (!c) c = "";
    if (strcmp(c, "globals") == 0) {
        /* What a fresh process would see first: the parent is one. */
        float first = first_randn();
        note("parent rand=%d randn=%.6f", rand(), first);
        counter = 42; /* the parent's own copy: ranks never see this */
        spawn(change_globals, 2, NULL, 0);
        spawn(change_globals, 3, NULL, 0);
        spawn(change_globals, 1, NULL, 0);
    } else if (strcmp(c, "printf") == 0) {
        spawn(say_printf, 2, NULL, 0);
        spawn(say_printf, 3, NULL, 0);
    } else if (strcmp(c, "sixteen") == 0) {
        spawn(sum_of_ranks, 2, NULL, 0);
        spawn(sum_of_ranks, 16, NULL, 0); /* grows the pool */
        tell_and_wait("idle");
        spawn(sum_of_ranks, 3, NULL, 0);
    } else if (strcmp(c, "revive") == 0) {
        spawn(sum_of_ranks, 2, NULL, 0);
        tell_and_wait("pool up");
        spawn(sum_of_ranks, 4, NULL, 0);
    }
    note("after the spawns");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
