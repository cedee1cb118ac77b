/* Fixture: deadlocks the runtime proves from the status board, and
 * programs that only look stuck (tests/test_deadlock.py). DEADLOCK_CASE
 * picks the case, DEADLOCK_FLOATS the size of a swap; the test finds each
 * line by the marker comment on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lectern.h"

/* n floats, every one `value`. */
static tensor *filled(long n, float value, int device) {
    tensor *t = zeros(n, 0, device);
    fill_(t, value);
    return t;
}

static long floats(void) {
    const char *s = getenv("DEADLOCK_FLOATS");
    return s && *s ? atol(s) : 1000;
}

/* Both ranks send first, then receive: the transport buffers a small
 * message, so with plain MPI_Send this passes at 1,000 floats and hangs
 * at 4 M. */
static void swap_send_first(int rank, int world_size, void *args) {
    tensor *mine = filled(floats(), (float)rank, get_device(rank));
    tensor *theirs = zeros(floats(), 0, get_device(rank));
    dist_send(mine, 1 - rank); /* MARK:send-first */
    dist_recv(theirs, 1 - rank);
    note("rank %d got %g", rank, (double)theirs->data[0]);
    tensor_free(mine);
    tensor_free(theirs);
}

/* The same swap, made right: one call that sends and receives. */
static void swap_sendrecv(int rank, int world_size, void *args) {
    tensor *mine = filled(floats(), (float)rank, get_device(rank));
    tensor *theirs = zeros(floats(), 0, get_device(rank));
    dist_sendrecv(mine, 1 - rank, theirs, 1 - rank);
    note("rank %d got %g", rank, (double)theirs->data[0]);
    tensor_free(mine);
    tensor_free(theirs);
}

/* And right the other way: the receive posted first. */
static void swap_irecv_first(int rank, int world_size, void *args) {
    tensor *mine = filled(floats(), (float)rank, get_device(rank));
    tensor *theirs = zeros(floats(), 0, get_device(rank));
    dist_request *r = dist_irecv(theirs, 1 - rank);
    dist_send(mine, 1 - rank);
    dist_wait(r);
    note("rank %d got %g", rank, (double)theirs->data[0]);
    tensor_free(mine);
    tensor_free(theirs);
}

/* Buffered sends asked for: the small swap relies on the transport, as
 * MPI_Send allows, and passes. */
static void swap_buffered(int rank, int world_size, void *args) {
    dist_buffered_sends(1);
    swap_send_first(rank, world_size, args);
}

/* Both receive first. */
static void both_receive(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    dist_recv(t, 1 - rank); /* MARK:recv-first */
    dist_send(t, 1 - rank);
    tensor_free(t);
}

/* Rank 0 all-reduces; rank 1 receives from rank 0 before it would. */
static void collective_missed(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) dist_all_reduce(t, DIST_SUM); /* MARK:allreduce */
    else dist_recv(t, 0);                        /* MARK:recv-from-0 */
    tensor_free(t);
}

/* Every rank sends to its right, then receives from its left. */
static void ring_send_first(int rank, int world_size, void *args) {
    tensor *t = filled(8, (float)rank, get_device(rank));
    tensor *in = zeros(8, 0, get_device(rank));
    dist_send(t, (rank + 1) % world_size); /* MARK:ring-send */
    dist_recv(in, (rank + world_size - 1) % world_size);
    tensor_free(t);
    tensor_free(in);
}

static void spin(double seconds) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile double x = 0;
    do {
        for (int i = 0; i < 100000; i++)
            x += 1e-9;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec) < seconds);
}

/* With DEADLOCK_READY=PATH each rank makes the file PATH.RANK when it
 * reaches its marked line: a test that interrupts the lecture there waits
 * for them instead of guessing how long a loaded machine takes to start. */
static void ready(int rank) {
    const char *path = getenv("DEADLOCK_READY");
    if (!path || !*path) return;
    char name[4096];
    snprintf(name, sizeof name, "%s.%d", path, rank);
    FILE *f = fopen(name, "w");
    if (f) fclose(f);
}

/* Rank 1 computes for DEADLOCK_COMPUTE seconds (default 10) while rank 0
 * waits for its result: slow, not stuck. */
static void slow_compute(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    ready(rank);
    if (rank == 0) {
        dist_recv(t, 1); /* MARK:waits-for-slow */
    } else {
        const char *s = getenv("DEADLOCK_COMPUTE");
        spin(s && *s ? atof(s) : 10.0); /* MARK:computes */
        fill_(t, 5);
        dist_send(t, 0);
    }
    note("rank %d done: %g", rank, (double)t->data[0]);
    tensor_free(t);
}

static void body(void) {
    const char *c = getenv("DEADLOCK_CASE");
    if (!c) c = "";
    note("case %s, %ld floats", c, floats());
    check(floats() > 0, "a swap of %ld floats", floats());          /* the console's checks line, even after an error */
    if (strcmp(c, "swap") == 0) spawn(swap_send_first, 2, NULL, 0); /* MARK:spawn */
    else if (strcmp(c, "sendrecv") == 0) spawn(swap_sendrecv, 2, NULL, 0);
    else if (strcmp(c, "irecv") == 0) spawn(swap_irecv_first, 2, NULL, 0);
    else if (strcmp(c, "buffered") == 0) spawn(swap_buffered, 2, NULL, 0);
    else if (strcmp(c, "recv") == 0) spawn(both_receive, 2, NULL, 0);
    else if (strcmp(c, "collective") == 0) spawn(collective_missed, 2, NULL, 0);
    else if (strcmp(c, "ring") == 0) spawn(ring_send_first, 4, NULL, 0);
    else if (strcmp(c, "slow") == 0) spawn(slow_compute, 2, NULL, 0);
    note("after the spawn");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
