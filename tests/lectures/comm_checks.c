/* Fixture: collectives that the ranks do not agree on, requests never
 * waited for, ranks that wait for ranks that returned, and a rank that
 * computes for longer than LECTERN_TIMEOUT (tests/test_comm_checks.py).
 * COMM_CASE picks the case; the test finds each expected line by the marker
 * comment on it. */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "check.h"
#include "lectern.h"

/* Rank 2 all-reduces 6 floats, the others 4. */
static void different_counts(int rank, int world_size, void *args) {
    note("rank %d of %d starts", rank, world_size);
    tensor *t = zeros(rank == 2 ? 6 : 4, 0, get_device(rank));
    if (rank == 2) dist_all_reduce(t, DIST_SUM); /* MARK:six */
    else dist_all_reduce(t, DIST_SUM);           /* MARK:four */
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* Rank 0 broadcasts from rank 0, rank 1 from rank 1. */
static void different_roots(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    dist_broadcast(t, rank); /* MARK:root */
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* Rank 0 sends 6 floats, rank 1 receives 4. */
static void send_recv_sizes(int rank, int world_size, void *args) {
    tensor *t = zeros(rank == 0 ? 6 : 4, 0, get_device(rank));
    if (rank == 0) dist_send(t, 1); /* MARK:send6 */
    else dist_recv(t, 0);           /* MARK:recv4 */
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* The same without blocking, and large: rank 0's isend cannot complete
 * until rank 1 takes the data, which it never does (its check fails). */
static void isend_irecv_sizes(int rank, int world_size, void *args) {
    tensor *t = zeros(rank == 0 ? (1 << 20) + 1 : 1 << 20, 0, get_device(rank));
    dist_request *req;
    if (rank == 0) req = dist_isend(t, 1); /* MARK:isend-big */
    else req = dist_irecv(t, 0);           /* MARK:irecv-big */
    dist_wait(req);
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* An async all-reduce nobody waits for. */
static void forgotten(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    dist_request *req = dist_all_reduce_async(t, DIST_SUM); /* MARK:forgotten */
    (void)req;
    note("rank %d returns", rank);
}

/* Tensors touched while a request still uses them (TOUCH picks how):
 * "send" changes an isend's tensor with a tensor operation, "raw" through
 * ->data (seen at the wait), "recv" reads an irecv's tensor, "async" reads
 * an async all-reduce's, "free" frees an isend's. */
static void touch_before_wait(int rank, int world_size, void *args) {
    const char *how = getenv("TOUCH");
    tensor *t = zeros(1 << 16, 0, get_device(rank));
    if (strcmp(how, "async") == 0) {
        dist_request *req = dist_all_reduce_async(t, DIST_SUM); /* MARK:touch-async */
        note("rank %d: %g", rank, tensor_item(t, 0));           /* MARK:touch-async-read */
        dist_wait(req);
    } else if (strcmp(how, "raw-timed") == 0) { /* the same change in a timed region: not hashed there */
        if (rank == 0) dist_send(t, 1);         /* the call agreed on once, outside */
        else dist_recv(t, 0);
        dist_timed_begin();
        if (rank == 0) {
            dist_request *req = dist_isend(t, 1);
            t->data[7] = 5.0f;
            dist_wait(req); /* MARK:touch-timed-wait */
        } else {
            dist_recv(t, 0);
        }
        dist_timed_end();
    } else if (rank == 0) {
        dist_request *req = dist_isend(t, 1);              /* MARK:touch-isend */
        if (strcmp(how, "send") == 0) add_scalar(t, 1.0f); /* MARK:touch-send */
        if (strcmp(how, "raw") == 0) t->data[7] = 5.0f;
        if (strcmp(how, "free") == 0) tensor_free(t); /* MARK:touch-free */
        dist_wait(req);                               /* MARK:touch-wait */
    } else {
        dist_request *req = dist_irecv(t, 0);                               /* MARK:touch-irecv */
        if (strcmp(how, "recv") == 0) note("early: %g", tensor_item(t, 0)); /* MARK:touch-recv */
        dist_wait(req);
    }
    note("rank %d has a result", rank);
    tensor_free(t);
}

/* The control: every touch after its wait; rank 0 sends one tensor to
 * rank 1 twice, both in flight at once (both only read it). */
static void touch_after_wait(int rank, int world_size, void *args) {
    tensor *t = zeros(1 << 16, 0, get_device(rank));
    tensor *u = zeros(1 << 16, 0, get_device(rank));
    if (rank == 0) {
        fill_(t, 3.0f);
        dist_request *a = dist_isend(t, 1), *b = dist_isend(t, 1);
        note("rank 0 reads its tensor while it is sent: %g", tensor_item(t, 0));
        dist_wait(a);
        dist_wait(b);
        add_scalar(t, 1.0f);
    } else {
        dist_request *a = dist_irecv(t, 0), *b = dist_irecv(u, 0);
        dist_wait(a);
        dist_wait(b);
        note("rank 1 got %g %g", tensor_item(t, (1 << 16) - 1), tensor_item(u, 0));
    }
    tensor_free(u);
    tensor_free(t);
}

/* Rank 0 all-reduces once more than the others. */
static void one_extra(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    dist_all_reduce(t, DIST_SUM);
    if (rank == 0) dist_all_reduce(t, DIST_SUM); /* MARK:extra */
    tensor_free(t);
}

/* Rank 0 receives from rank 1, which returns without sending. */
static void no_sender(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) dist_recv(t, 1); /* MARK:nosend */
    tensor_free(t);
}

/* Rank 0 works on tensors for about 3 s (LECTERN_TIMEOUT is 1 s in the
 * test) while rank 1 waits for it in a barrier: not a deadlock. */
static void slow_compute(int rank, int world_size, void *args) {
    if (rank == 0) {
        double t0 = now_seconds();
        tensor *a = randn(256, 256, get_device(rank));
        while (now_seconds() - t0 < 3.0) {
            tensor *b = matmul(a, a);
            scale_(b, 1e-3f);
            tensor_free(b);
        }
        tensor_free(a);
    }
    dist_barrier();
    note("rank %d passed the barrier", rank);
}

/* A library call that fails, checked as the runtime checks its own: an
 * element count MPI refuses. Its message must reach the trace. */
static void mpi_error(int rank, int world_size, void *args) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_SELF, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    float x = 0;
    MPI_CHECK(MPI_Bcast(&x, -1, MPI_FLOAT, 0, c)); /* MARK:mpierror */
}

static void nothing(int rank, int world_size, void *args) {}

static void body(void) {
    const char *c = getenv("COMM_CASE");
    if (!c) c = "";
    if (strcmp(c, "counts") == 0) spawn(different_counts, 4, NULL, 0);
    else if (strcmp(c, "roots") == 0) spawn(different_roots, 2, NULL, 0);
    else if (strcmp(c, "p2p") == 0) spawn(send_recv_sizes, 2, NULL, 0);
    else if (strcmp(c, "p2p-big") == 0) spawn(isend_irecv_sizes, 2, NULL, 0);
    else if (strcmp(c, "forgotten") == 0) spawn(forgotten, 2, NULL, 0);
    else if (strcmp(c, "touch") == 0) spawn(touch_before_wait, 2, NULL, 0);
    else if (strcmp(c, "touch-ok") == 0) spawn(touch_after_wait, 2, NULL, 0);
    else if (strcmp(c, "extra") == 0) spawn(one_extra, 4, NULL, 0);
    else if (strcmp(c, "nosend") == 0) spawn(no_sender, 2, NULL, 0);
    else if (strcmp(c, "compute") == 0) {
        /* The pool starts first under the default timeout (a pool's start
         * is bounded by LECTERN_TIMEOUT too, and takes more than a second on
         * a busy machine); then the slow spawn runs under COMM_TIMEOUT. */
        spawn(nothing, 2, NULL, 0);
        const char *t = getenv("COMM_TIMEOUT");
        if (t) setenv("LECTERN_TIMEOUT", t, 1);
        spawn(slow_compute, 2, NULL, 0);
    } else if (strcmp(c, "mpierror") == 0) spawn(mpi_error, 1, NULL, 0);
    note("after the spawn");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
