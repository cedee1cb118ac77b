/* Fixture: ranks that fail, and spawn() calls that are wrong
 * (tests/test_spawn.py). SPAWN_FAIL picks the case; the test finds each
 * expected line by the marker comment on it. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lectern.h"

static void crash_on_rank_2(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    dist_barrier();
    if (rank == 2) {
        /* A page with no access rights: a true fault, in every build (a
         * NULL store would be caught earlier by UBSan in sanitizer builds). */
        volatile int *forbidden = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *forbidden = 42; /* MARK:segv */
    }
    dist_barrier();
    note("rank %d should not get here", rank);
}

static void exit_on_rank_1(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    if (rank == 1) exit(3); /* MARK:exit */
    dist_barrier();
}

static void killed_rank_0(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    dist_barrier(); /* MARK:kill-barrier */
    if (rank == 0) raise(SIGKILL);
    dist_barrier();
}

static void abort_on_rank_0(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    if (rank == 0) abort(); /* MARK:abort */
    dist_barrier();
}

/* Both ranks receive first: neither ever sends. */
static void both_receive(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    note("rank %d waits for the other", rank);
    dist_recv(t, 1 - rank); /* MARK:deadlock */
    dist_send(t, 1 - rank);
    tensor_free(t);
}

static void bad_collective(int rank, int world_size, void *args) {
    tensor *in = zeros(8, 0, get_device(rank));
    tensor *out = zeros(3, 0, get_device(rank));
    dist_reduce_scatter(out, in, DIST_SUM); /* MARK:shape */
    tensor_free(in);
    tensor_free(out);
}

static void nested(int rank, int world_size, void *args) { spawn(nested, 1, NULL, 0); /* MARK:nested */ }

static void fine(int rank, int world_size, void *args) { note("rank %d is fine", rank); }

static void body(void) {
    const char *c = getenv("SPAWN_FAIL");
    if (!c) c = "";
    note("case %s", c);
    static char big[16];
    if (strcmp(c, "segv") == 0) spawn(crash_on_rank_2, 4, NULL, 0);
    else if (strcmp(c, "exit") == 0) spawn(exit_on_rank_1, 2, NULL, 0);
    else if (strcmp(c, "kill") == 0) spawn(killed_rank_0, 3, NULL, 0);
    else if (strcmp(c, "abort") == 0) spawn(abort_on_rank_0, 2, NULL, 0);
    else if (strcmp(c, "deadlock") == 0) spawn(both_receive, 2, NULL, 0);
    else if (strcmp(c, "shape") == 0) spawn(bad_collective, 2, NULL, 0);
    else if (strcmp(c, "nested") == 0) spawn(nested, 1, NULL, 0);
    else if (strcmp(c, "world0") == 0) spawn(fine, 0, NULL, 0);                          /* MARK:world0 */
    else if (strcmp(c, "world17") == 0) spawn(fine, LECTERN_MAX_WORLD + 1, NULL, 0);     /* MARK:world17 */
    else if (strcmp(c, "nullfn") == 0) spawn(NULL, 2, NULL, 0);                          /* MARK:nullfn */
    else if (strcmp(c, "nullargs") == 0) spawn(fine, 2, NULL, 8);                        /* MARK:nullargs */
    else if (strcmp(c, "bigargs") == 0) spawn(fine, 2, big, LECTERN_MAX_SPAWN_ARGS + 1); /* MARK:bigargs */
    else if (strcmp(c, "late") == 0) { /* a good spawn, then a bad one */ spawn(fine, 2, NULL, 0);
        spawn(fine, LECTERN_MAX_WORLD + 1, NULL, 0); /* MARK:late */
    } else spawn(fine, 2, NULL, 0);
    note("after the spawn");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
