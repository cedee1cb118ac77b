/*
 * test_nccl_emu.c: the NCCL emulator keeps NCCL's rules at their strictest
 * (runtime/comm/nccl_emu.c, runtime/comm/nccl_api.h).
 *
 * comm_nccl.c is tested on the emulator (tests/comm/test_nccl_emu.py): a program
 * that completes there must complete on NCCL, so the emulator must never be
 * kinder than NCCL. Each rule is checked here by what two ranks observe
 * through the table itself, in a spawn on Open MPI (the emulator runs over
 * its communicator), each rank handing its observations back with
 * spawn_return:
 *
 *   1. a send is not done while its receive has not been queued, even of
 *      one float (no buffering), and is done once it has;
 *   2. a stream runs in order: a send queued behind an unmatched one does
 *      not start, though its own receive is waiting on the other rank;
 *   3. a group starts its operations together: both ranks queue a send to
 *      the other and a receive from it in one group on one stream, and it
 *      completes (one by one on one stream, each send would wait for a
 *      receive queued behind the other's send);
 *   4. a communicator runs its operations in the order they were queued,
 *      whatever stream each is on: a second all-reduce on another stream
 *      waits for the first, held back by an event;
 *   5. an event is a stream's position: one recorded before a pending send
 *      is done, one after is not; a stream told to wait for it runs
 *      nothing queued after the wait (a copy) until it is.
 * "Not done" is observed for 200 ms after the point where it would be done
 * if the rule were broken, on a machine where the emulator's thread, once
 * woken, ends an operation in well under a millisecond: a rule-breaking
 * emulator would show it done at every look. "Done" is waited for up to
 * 30 s (a deadlock otherwise: far above the few milliseconds it takes).
 * The values moved are checked too (small integers: exact).
 *
 * Then the table's plumbing at one rank, on the emulator and, where there
 * is a GPU and the NCCL library loads, on the real NCCL (nccl_library.c,
 * which nothing else here can run; gpu-check records it): a split and a
 * split that joins nothing, a send to itself and its receive in one group,
 * every collective at one rank with its input and output in different
 * buffers (an input and output swapped in a wrapper would show), a copy
 * behind a wait for an event on another stream, the error strings.
 */
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_test.h"
#include "check.h"
#include "comm/comm.h"
#include "comm/nccl_api.h"

static char dir[256];

/* What one rank saw. 1 = as the rule says, 0 = not, -1 = not looked at. */
typedef struct seen {
    int pending_unmatched_send; /* 1: rank 0's lone send not done before rank 1 queued its receive */
    int send_done_when_matched; /* 1: and done after */
    int value_moved;            /* 1: rank 1 received rank 0's values */
    int behind_unmatched;       /* 2: rank 1's receive of the second send not done while the first waits */
    int stream_drained;         /* 2: both done once the first is matched */
    int group_done;             /* 3: the group completed, with the peer's values */
    int later_collective_held;  /* 4: rank 0's second all-reduce not done while its first is held */
    int collectives_right;      /* 4: both all-reduces give the sums, in order */
    int event_before_done;      /* 5: an event recorded before a pending send is done */
    int event_after_pending;    /* 5: one recorded after it is not */
    int copy_held;              /* 5: a copy queued behind a wait for that event has not run */
    int copy_ran;               /* 5: it has once the send is matched */
} seen;

static const lx_nccl_api *api;

static void ok(int rc) {
    if (rc != 0) lx_fatal("the emulator's table returned %d", rc);
}

static int done(lx_nccl_event e) { return api->event_query(e) == LX_DEVICE_OK; }

/* Polls until done: 1, or 0 after 30 s. */
static int wait_done(lx_nccl_event e) {
    double start = now_seconds();
    while (!done(e)) {
        if (now_seconds() - start > 30) return 0;
        struct timespec pause = {0, 100 * 1000};
        nanosleep(&pause, NULL);
    }
    return 1;
}

/* Not done at any look over 200 ms. */
static int stays_pending(lx_nccl_event e) {
    double start = now_seconds();
    while (now_seconds() - start < 0.2) {
        if (done(e)) return 0;
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return 1;
}

static void barrier(void) { MPI_CHECK(MPI_Barrier(lx_rank_comm())); }

static lx_nccl_event event_on(lx_nccl_stream s) {
    lx_nccl_event e;
    ok(api->event_create(&e));
    ok(api->event_record(e, s));
    return e;
}

static void rules(int rank, int world_size, void *unused) {
    seen s;
    memset(&s, 0xff, sizeof s); /* -1: not looked at */
    api = lx_nccl_emulator();
    lx_nccl_id id;
    if (rank == 0) ok(api->get_unique_id(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, lx_rank_comm()));
    lx_nccl_comm c, c2;
    ok(api->comm_init_rank(&c, 2, &id, rank));
    ok(api->comm_split(c, 0, rank, &c2));
    lx_nccl_stream s1, s2;
    ok(api->stream_create(&s1));
    ok(api->stream_create(&s2));
    int peer = 1 - rank;
    float x = 0, y = 0;

    /* 1. No buffering: a one-float send waits for its receive. */
    if (rank == 0) {
        x = 7;
        ok(api->send(&x, 1, DTYPE_F32, 1, c, s1));
        lx_nccl_event e = event_on(s1);
        s.pending_unmatched_send = stays_pending(e);
        barrier(); /* now rank 1 queues the receive */
        s.send_done_when_matched = wait_done(e);
        ok(api->event_destroy(e));
    } else {
        barrier();
        ok(api->recv(&y, 1, DTYPE_F32, 0, c, s1));
        lx_nccl_event e = event_on(s1);
        s.value_moved = wait_done(e) && y == 7;
        ok(api->event_destroy(e));
    }
    barrier();

    /* 2. In order on a stream: rank 0 queues A (on c) then B (on c2) on s1;
     * rank 1 queues B's receive first, on s2: B cannot start behind A. */
    if (rank == 0) {
        x = 1;
        y = 2;
        ok(api->send(&x, 1, DTYPE_F32, 1, c, s1));
        ok(api->send(&y, 1, DTYPE_F32, 1, c2, s1));
        lx_nccl_event e = event_on(s1);
        barrier();
        barrier();
        s.stream_drained = wait_done(e);
        ok(api->event_destroy(e));
    } else {
        float a = 0, b = 0;
        barrier();
        ok(api->recv(&b, 1, DTYPE_F32, 0, c2, s2));
        lx_nccl_event eb = event_on(s2);
        s.behind_unmatched = stays_pending(eb);
        ok(api->recv(&a, 1, DTYPE_F32, 0, c, s1));
        lx_nccl_event ea = event_on(s1);
        barrier();
        s.stream_drained = wait_done(ea) && wait_done(eb) && a == 1 && b == 2;
        ok(api->event_destroy(ea));
        ok(api->event_destroy(eb));
    }
    barrier();

    /* 3. A group starts together: send and receive both ways on one stream. */
    {
        x = (float)(10 + rank);
        y = 0;
        barrier();
        ok(api->group_start());
        ok(api->send(&x, 1, DTYPE_F32, peer, c, s1));
        ok(api->recv(&y, 1, DTYPE_F32, peer, c, s1));
        ok(api->group_end());
        lx_nccl_event e = event_on(s1);
        s.group_done = wait_done(e) && y == (float)(10 + peer);
        ok(api->event_destroy(e));
    }
    barrier();

    /* 4. A communicator's order across streams: on rank 0, all-reduce P on
     * s1 is held behind a wait for an event (a send on c2 that rank 1
     * receives only later); all-reduce Q on s2 must wait for P. */
    {
        float p = (float)(rank + 1), q = (float)(10 * (rank + 1)), hold = 5;
        lx_nccl_event eq = NULL, ep = NULL;
        if (rank == 0) {
            ok(api->send(&hold, 1, DTYPE_F32, 1, c2, s2)); /* unmatched until rank 1 receives */
            lx_nccl_event held = event_on(s2);
            lx_nccl_stream s3;
            ok(api->stream_create(&s3));
            ok(api->stream_wait_event(s1, held));
            ok(api->all_reduce(&p, &p, 1, DTYPE_F32, DIST_SUM, c, s1));
            ep = event_on(s1);
            ok(api->all_reduce(&q, &q, 1, DTYPE_F32, DIST_SUM, c, s3));
            eq = event_on(s3);
            s.later_collective_held = stays_pending(eq);
            barrier();
            s.collectives_right = wait_done(ep) && wait_done(eq) && p == 3 && q == 30;
            ok(api->event_destroy(held));
            ok(api->event_destroy(ep));
            ok(api->event_destroy(eq));
            ok(api->stream_destroy(s3));
        } else {
            ok(api->all_reduce(&p, &p, 1, DTYPE_F32, DIST_SUM, c, s1));
            ep = event_on(s1);
            ok(api->all_reduce(&q, &q, 1, DTYPE_F32, DIST_SUM, c, s1));
            eq = event_on(s1);
            barrier();
            float got = 0;
            ok(api->recv(&got, 1, DTYPE_F32, 0, c2, s2));
            lx_nccl_event e = event_on(s2);
            s.collectives_right = wait_done(e) && wait_done(ep) && wait_done(eq) && p == 3 && q == 30 && got == 5;
            ok(api->event_destroy(e));
            ok(api->event_destroy(ep));
            ok(api->event_destroy(eq));
        }
    }
    barrier();

    /* 5. Events are positions; a wait holds what is queued after it. */
    if (rank == 0) {
        float src = 42, dst = 0;
        lx_nccl_event before = event_on(s1);
        x = 3;
        ok(api->send(&x, 1, DTYPE_F32, 1, c, s1));
        lx_nccl_event after = event_on(s1);
        ok(api->stream_wait_event(s2, after));
        ok(api->copy(&dst, &src, sizeof dst, s2));
        lx_nccl_event copied = event_on(s2);
        s.event_before_done = wait_done(before);
        s.event_after_pending = stays_pending(after);
        s.copy_held = dst == 0 && !done(copied);
        barrier();
        s.copy_ran = wait_done(copied) && dst == 42;
        ok(api->event_destroy(before));
        ok(api->event_destroy(after));
        ok(api->event_destroy(copied));
    } else {
        barrier();
        float got = 0;
        ok(api->recv(&got, 1, DTYPE_F32, 0, c, s1));
        lx_nccl_event e = event_on(s1);
        s.value_moved = s.value_moved == 1 && wait_done(e) && got == 3;
        ok(api->event_destroy(e));
    }
    barrier();

    ok(api->stream_destroy(s1));
    ok(api->stream_destroy(s2));
    ok(api->comm_destroy(c2));
    ok(api->comm_destroy(c));
    spawn_return(&s, sizeof s);
}

/* ---- one rank: the table's plumbing ---- */

typedef struct plumbing {
    int ran;             /* 0: the table was not there (no GPU, no NCCL): skipped */
    int split, no_color; /* a split of one rank; NOCOLOR gives NULL */
    int self_exchange;   /* a group {send to self, recv from self} moved the values */
    int all_reduce, all_reduce_avg, reduce, broadcast, reduce_scatter, all_gather;
    int copy_behind_wait; /* a copy queued behind a wait for another stream's copy saw its result */
    int words;            /* the error strings say something */
} plumbing;

enum { N = 6 };

/* n floats on `dev`: v, v + 1, ... */
static tensor *counting(int dev, float v) {
    float h[N];
    for (int i = 0; i < N; i++)
        h[i] = v + (float)i;
    return tensor_from(h, N, 0, dev);
}

static int holds(const tensor *t, float v, float step) {
    float h[N];
    tensor_to_host(t, h);
    for (int i = 0; i < N; i++)
        if (h[i] != v + step * (float)i) return 0;
    return 1;
}

/* The stream waits for the compute stream's work so far (tensor kernels:
 * fill_, tensor_from's copy), as comm_nccl.c's begin() makes it. */
static void fence(lx_nccl_stream st) {
    lx_nccl_event e;
    ok(api->event_create(&e));
    ok(api->event_record(e, NULL));
    ok(api->stream_wait_event(st, e));
    ok(api->event_destroy(e));
}

/* Queues, waits for the stream, and says whether `t` then holds v, v + step, ... */
static int after(lx_nccl_stream st, const tensor *t, float v, float step) {
    lx_nccl_event e = event_on(st);
    int ok_ = wait_done(e) && holds(t, v, step);
    ok(api->event_destroy(e));
    return ok_;
}

static void plumb(plumbing *p, const lx_nccl_api *table) {
    api = table;
    int dev = api->emulated ? -1 : 0;
    if (!api->emulated) ok(api->set_device(0));
    lx_nccl_id id;
    ok(api->get_unique_id(&id));
    lx_nccl_comm c, one, none = (lx_nccl_comm)1;
    ok(api->comm_init_rank(&c, 1, &id, 0));
    ok(api->comm_split(c, 3, 0, &one));
    ok(api->comm_split(c, LX_NCCL_SPLIT_NOCOLOR, 0, &none));
    p->split = one != NULL;
    p->no_color = none == NULL;
    lx_nccl_stream st, other;
    ok(api->stream_create(&st));
    ok(api->stream_create(&other));

    tensor *a = counting(dev, 1), *b = zeros(N, 0, dev);
    fence(st);
    ok(api->group_start());
    ok(api->send(a->data, N, DTYPE_F32, 0, one, st));
    ok(api->recv(b->data, N, DTYPE_F32, 0, one, st));
    ok(api->group_end());
    p->self_exchange = after(st, b, 1, 1);

    fill_(b, 0);
    fence(st);
    ok(api->all_reduce(a->data, b->data, N, DTYPE_F32, DIST_SUM, c, st));
    p->all_reduce = after(st, b, 1, 1) && holds(a, 1, 1);
    ok(api->all_reduce(a->data, a->data, N, DTYPE_F32, DIST_AVG, c, st)); /* in place; one rank: x / 1 */
    p->all_reduce_avg = after(st, a, 1, 1);
    fill_(b, 0);
    fence(st);
    ok(api->reduce(a->data, b->data, N, DTYPE_F32, DIST_MAX, 0, c, st));
    p->reduce = after(st, b, 1, 1);
    fill_(b, 0);
    fence(st);
    ok(api->broadcast(a->data, b->data, N, DTYPE_F32, 0, c, st));
    p->broadcast = after(st, b, 1, 1);
    fill_(b, 0);
    fence(st);
    ok(api->reduce_scatter(a->data, b->data, N, DTYPE_F32, DIST_SUM, c, st));
    p->reduce_scatter = after(st, b, 1, 1);
    fill_(b, 0);
    fence(st);
    ok(api->all_gather(a->data, b->data, N, DTYPE_F32, c, st));
    p->all_gather = after(st, b, 1, 1);

    /* b <- a on `other`; `st` waits for it, then copies b to c2 */
    tensor *c2 = zeros(N, 0, dev);
    fill_(b, 0);
    fence(other);
    ok(api->copy(b->data, a->data, N * sizeof(float), other));
    lx_nccl_event copied = event_on(other);
    ok(api->stream_wait_event(st, copied));
    ok(api->copy(c2->data, b->data, N * sizeof(float), st));
    p->copy_behind_wait = after(st, c2, 1, 1);
    ok(api->event_destroy(copied));

    int err = -1;
    ok(api->comm_async_error(c, &err));
    const char *said = api->last_error(c);
    p->words = err == LX_NCCL_OK && strstr(api->error_string(LX_NCCL_INVALID_USAGE), "invalid usage") != NULL &&
               said != NULL && api->device_error_string(LX_DEVICE_NOT_READY)[0] != '\0';

    tensor_free(a);
    tensor_free(b);
    tensor_free(c2);
    ok(api->stream_destroy(st));
    ok(api->stream_destroy(other));
    ok(api->comm_destroy(one));
    ok(api->comm_destroy(c));
    p->ran = 1;
}

typedef struct plumbed {
    plumbing emulator, library;
    char library_why[512];
} plumbed;

static void one_rank(int rank, int world_size, void *unused) {
    plumbed r;
    memset(&r, 0, sizeof r);
    plumb(&r.emulator, lx_nccl_emulator());
    const lx_nccl_api *library = lx_nccl_library(r.library_why, sizeof r.library_why);
    if (gpu_count() == 0)
        snprintf(r.library_why, sizeof r.library_why, "no GPU here: the real NCCL's table runs where there is one");
    else if (library) plumb(&r.library, library);
    spawn_return(&r, sizeof r);
}

static seen got[2];
static plumbed plumbing_got;

static void test_no_buffering(void **state) {
    (void)state;
    assert_int_equal(got[0].pending_unmatched_send, 1);
    assert_int_equal(got[0].send_done_when_matched, 1);
    assert_int_equal(got[1].value_moved, 1);
}

static void test_a_stream_runs_in_order(void **state) {
    (void)state;
    assert_int_equal(got[1].behind_unmatched, 1);
    assert_int_equal(got[0].stream_drained, 1);
    assert_int_equal(got[1].stream_drained, 1);
}

static void test_a_group_starts_together(void **state) {
    (void)state;
    assert_int_equal(got[0].group_done, 1);
    assert_int_equal(got[1].group_done, 1);
}

static void test_a_communicator_runs_in_order(void **state) {
    (void)state;
    assert_int_equal(got[0].later_collective_held, 1);
    assert_int_equal(got[0].collectives_right, 1);
    assert_int_equal(got[1].collectives_right, 1);
}

static void test_events_are_positions(void **state) {
    (void)state;
    assert_int_equal(got[0].event_before_done, 1);
    assert_int_equal(got[0].event_after_pending, 1);
    assert_int_equal(got[0].copy_held, 1);
    assert_int_equal(got[0].copy_ran, 1);
}

static void check_plumbing(const plumbing *p) {
    assert_int_equal(p->ran, 1);
    assert_int_equal(p->split, 1);
    assert_int_equal(p->no_color, 1);
    assert_int_equal(p->self_exchange, 1);
    assert_int_equal(p->all_reduce, 1);
    assert_int_equal(p->all_reduce_avg, 1);
    assert_int_equal(p->reduce, 1);
    assert_int_equal(p->broadcast, 1);
    assert_int_equal(p->reduce_scatter, 1);
    assert_int_equal(p->all_gather, 1);
    assert_int_equal(p->copy_behind_wait, 1);
    assert_int_equal(p->words, 1);
}

static void test_emulator_plumbing(void **state) {
    (void)state;
    check_plumbing(&plumbing_got.emulator);
}

static void test_library_plumbing(void **state) {
    (void)state;
    if (!plumbing_got.library.ran) {
        printf("(the real NCCL's table not run: %s)\n", plumbing_got.library_why);
        skip();
    }
    check_plumbing(&plumbing_got.library);
}

static void body(void) {
    setenv("LECTERN_BACKEND", "mpi", 1);
    spawn(rules, 2, NULL, 0);
    for (int r = 0; r < 2; r++)
        if (spawn_result(r, &got[r], sizeof got[r]) != sizeof got[r]) memset(&got[r], 0, sizeof got[r]);
    spawn(one_rank, 1, NULL, 0);
    if (spawn_result(0, &plumbing_got, sizeof plumbing_got) != sizeof plumbing_got)
        memset(&plumbing_got, 0, sizeof plumbing_got);
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_no_buffering),
            cmocka_unit_test(test_a_stream_runs_in_order),
            cmocka_unit_test(test_a_group_starts_together),
            cmocka_unit_test(test_a_communicator_runs_in_order),
            cmocka_unit_test(test_events_are_positions),
            cmocka_unit_test(test_emulator_plumbing),
            cmocka_unit_test(test_library_plumbing),
    };
    if (cmocka_run_group_tests(tests, NULL, NULL) != 0) lecture_fail("the emulator broke a rule");
}

int main(int argc, char **argv) { return run_test_lecture(argc, argv, body, dir, sizeof dir, "nccl-emu"); }
