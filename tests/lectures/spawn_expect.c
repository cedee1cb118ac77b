/* Fixture: spawns whose failure is the lesson (tests/test_spawn_expect.py).
 * SPAWN_EXPECT picks the case; the test finds each expected line by the
 * marker comment on it. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lectern.h"

/* Both ranks receive first: neither ever sends. */
static void both_receive(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    note("rank %d waits for the other", rank);
    dist_recv(t, 1 - rank); /* MARK:deadlock */
    dist_send(t, 1 - rank);
    tensor_free(t);
}

/* Stuck in a way the status board cannot prove: rank 0's send is buffered
 * (dist_buffered_sends: no need is written for it) but too large for the
 * transport to buffer, and rank 1 waits in a barrier rank 0 never reaches.
 * Only the timeout stops it. */
static void stuck_unprovably(int rank, int world_size, void *args) {
    tensor *t = zeros(1 << 22, 0, get_device(rank));
    dist_buffered_sends(1);
    if (rank == 0) dist_send(t, 1); /* MARK:stuck-send */
    dist_barrier();
    tensor_free(t);
}

static void crash_on_rank_1(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    dist_barrier();
    if (rank == 1) {
        volatile int *forbidden = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *forbidden = 42; /* MARK:segv */
    }
    dist_barrier();
}

/* Rank 0 all-reduces 4 floats, the others 6: the agreement check. */
static void different_counts(int rank, int world_size, void *args) {
    tensor *t = zeros(rank == 0 ? 4 : 6, 0, get_device(rank));
    if (rank == 0) dist_all_reduce(t, DIST_SUM); /* MARK:four */
    else dist_all_reduce(t, DIST_SUM);           /* MARK:six */
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* A sum the test can check: sum over ranks of (rank + 1). */
static void fine(int rank, int world_size, void *args) {
    tensor *t = zeros(2, 0, get_device(rank));
    add_scalar(t, (float)rank + 1);
    dist_all_reduce(t, DIST_SUM);
    note("fine: rank %d of %d has %s", rank, world_size, tensor_str(t));
    tensor_free(t);
}

static void body(void) {
    const char *c = getenv("SPAWN_EXPECT");
    if (!c) c = "";
    note("case %s", c);
    if (strcmp(c, "deadlock") == 0) {
        /* The pool must serve a normal spawn after each expected failure. */
        for (int i = 0; i < 3; i++) {
            int caught = spawn_expect_failure(both_receive, 2, NULL, 0); /* MARK:expect-deadlock */
            note("round %d: caught %d", i, caught);
            spawn(fine, 2 + i, NULL, 0);
        }
    } else if (strcmp(c, "stuck") == 0) {
        note("caught %d", spawn_expect_failure(stuck_unprovably, 2, NULL, 0));
    } else if (strcmp(c, "crash") == 0) {
        note("caught %d", spawn_expect_failure(crash_on_rank_1, 3, NULL, 0));
        spawn(fine, 4, NULL, 0);
    } else if (strcmp(c, "counts") == 0) {
        spawn(fine, 3, NULL, 0); /* the pool is up before: reused, then stopped */
        note("caught %d", spawn_expect_failure(different_counts, 3, NULL, 0));
        spawn(fine, 3, NULL, 0);
    } else if (strcmp(c, "succeeds") == 0) {
        note("caught %d", spawn_expect_failure(fine, 2, NULL, 0)); /* MARK:succeeds */
        spawn(fine, 2, NULL, 0);
    } else if (strcmp(c, "bad") == 0) {
        spawn_expect_failure(fine, 0, NULL, 0); /* MARK:bad */
    }
    note("after the spawns");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
