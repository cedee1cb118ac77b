/*
 * test_p2p_plan.c: when the NCCL backend issues point-to-point operations
 * (runtime/comm/p2p_plan.c), checked on a CPU.
 *
 * Two kinds of test. The decisions themselves, call by call, for the
 * patterns the lectures use. And whole programs of 2 to 4 ranks run
 * through a model of NCCL written here, independently of the plan: each
 * rank has one in-order point-to-point stream of groups and separate
 * collectives; a group runs when it reaches the head of its stream, and
 * each of its operations completes only when the matching operation (the
 * k-th send from a to b and the k-th receive at b from a) is running too,
 * as a send larger than NCCL's buffers does. The model must find every
 * program deadlock-free under the plan, and it must find the ring deadlock
 * when every operation is issued alone at its call (the model can fail).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "comm/p2p_plan.h"

/* ---- decisions, call by call ---- */

static void expect(lx_p2p_plan *p, lx_p2p_call c, int peer, int peer2, int before, int join, int after) {
    lx_p2p_step s = lx_p2p_plan_call(p, c, peer, peer2);
    assert_int_equal(s.issue_before, before);
    assert_int_equal(s.join, join);
    assert_int_equal(s.issue_after, after);
}

/* isend; all_reduce; wait: the send is issued before the all-reduce, alone. */
static void test_isend_then_collective(void **state) {
    (void)state;
    lx_p2p_plan p = {0};
    expect(&p, LX_P2P_ISEND, 1, -1, 0, 1, 0);
    expect(&p, LX_P2P_OTHER, -1, -1, 1, 0, 0); /* the all-reduce */
    expect(&p, LX_P2P_OTHER, -1, -1, 0, 0, 0); /* the wait: nothing left to issue */
}

/* A ring step: isend(right); recv(left) is one group, issued at the recv. */
static void test_ring_step_is_one_group(void **state) {
    (void)state;
    lx_p2p_plan p = {0};
    expect(&p, LX_P2P_ISEND, 2, -1, 0, 1, 0);
    expect(&p, LX_P2P_RECV, 0, -1, 0, 1, 1);
    expect(&p, LX_P2P_OTHER, -1, -1, 0, 0, 0); /* the isend's wait */
}

/* A pipeline stage's activations: the second isend to the same peer issues
 * the first, so micro-batches do not pile up in one group. */
static void test_same_path_issues_the_first(void **state) {
    (void)state;
    lx_p2p_plan p = {0};
    expect(&p, LX_P2P_ISEND, 1, -1, 0, 1, 0);
    expect(&p, LX_P2P_ISEND, 1, -1, 1, 1, 0);
    expect(&p, LX_P2P_IRECV, 1, -1, 0, 1, 0);   /* other direction: joins */
    expect(&p, LX_P2P_SENDRECV, 2, 1, 1, 1, 1); /* receive from 1 already open */
    expect(&p, LX_P2P_OTHER, -1, -1, 0, 0, 0);
}

/* ---- the model ---- */

enum { ISEND, IRECV, SEND, RECV, SENDRECV, COLL, WAIT, END };
typedef struct instr {
    int op, peer, peer2, req;
} instr;

#define MAXR 4
#define MAXOPS 64

typedef struct mop {
    int is_send, peer, k, done;
} mop;

typedef struct rank_state {
    const instr *prog;
    int pc, coll_seen;
    int sent[MAXR], recvd[MAXR]; /* the k of the next send to / receive from each peer */
    mop ops[MAXOPS];
    int n_ops;
    int group_of[MAXOPS]; /* -1: held in the open group */
    int next_group, head; /* groups issued so far; the one running */
    int req_op[16][2];    /* a request's operations (index, -1) */
    int blocked_on[2];    /* a blocking call's operations */
    lx_p2p_plan plan;
} rank_state;

static int n_ranks;
static rank_state R[MAXR];
static int naive; /* issue each operation alone, at its call */

static int add_op(rank_state *r, int is_send, int peer) {
    int i = r->n_ops++;
    r->ops[i] = (mop){is_send, peer, is_send ? r->sent[peer]++ : r->recvd[peer]++, 0};
    r->group_of[i] = -1;
    return i;
}

static void issue(rank_state *r) {
    for (int i = 0; i < r->n_ops; i++)
        if (r->group_of[i] < 0) r->group_of[i] = r->next_group;
    r->next_group++;
}

/* Is operation i of rank r running (its group at the head of the stream)? */
static int running(const rank_state *r, int i) { return r->group_of[i] >= 0 && r->group_of[i] == r->head; }

static int match(int rank, const mop *o) {
    rank_state *q = &R[o->peer];
    for (int j = 0; j < q->n_ops; j++)
        if (q->ops[j].is_send != o->is_send && q->ops[j].peer == rank && q->ops[j].k == o->k) return j;
    return -1;
}

static int gpu_step(void) {
    int moved = 0;
    for (int a = 0; a < n_ranks; a++) {
        rank_state *r = &R[a];
        for (int i = 0; i < r->n_ops; i++) {
            if (r->ops[i].done || !running(r, i)) continue;
            int j = match(a, &r->ops[i]);
            if (j >= 0 && running(&R[r->ops[i].peer], j)) {
                r->ops[i].done = R[r->ops[i].peer].ops[j].done = 1;
                moved = 1;
            }
        }
        /* the head group is done: the next one runs */
        int all = r->head < r->next_group;
        for (int i = 0; i < r->n_ops; i++)
            if (r->group_of[i] == r->head && !r->ops[i].done) all = 0;
        if (all) {
            r->head++;
            moved = 1;
        }
    }
    return moved;
}

static int done_op(const rank_state *r, int i) { return i < 0 || r->ops[i].done; }

static void plan_call(rank_state *r, lx_p2p_call c, int peer, int peer2, int *a, int *b) {
    lx_p2p_step s = naive ? (lx_p2p_step){0, 1, 1} : lx_p2p_plan_call(&r->plan, c, peer, peer2);
    if (c == LX_P2P_OTHER) s.join = s.issue_after = 0;
    if (s.issue_before) issue(r);
    *a = *b = -1;
    if (s.join) {
        if (c == LX_P2P_ISEND || c == LX_P2P_SEND || c == LX_P2P_SENDRECV) *a = add_op(r, 1, peer);
        if (c == LX_P2P_IRECV || c == LX_P2P_RECV) *a = add_op(r, 0, peer);
        if (c == LX_P2P_SENDRECV) *b = add_op(r, 0, peer2);
    }
    if (s.issue_after) issue(r);
}

static int host_step(int a) {
    rank_state *r = &R[a];
    const instr *in = &r->prog[r->pc];
    if (in->op == END) return 0;
    if (r->blocked_on[0] != -2) { /* in a blocking call */
        if (!done_op(r, r->blocked_on[0]) || !done_op(r, r->blocked_on[1])) return 0;
        r->blocked_on[0] = -2;
        r->pc++;
        return 1;
    }
    int x, y;
    switch (in->op) {
    case ISEND:
        plan_call(r, LX_P2P_ISEND, in->peer, -1, &x, &y);
        r->req_op[in->req][0] = x;
        r->req_op[in->req][1] = -1;
        r->pc++;
        return 1;
    case IRECV:
        plan_call(r, LX_P2P_IRECV, in->peer, -1, &x, &y);
        r->req_op[in->req][0] = x;
        r->req_op[in->req][1] = -1;
        r->pc++;
        return 1;
    case SEND: plan_call(r, LX_P2P_SEND, in->peer, -1, &x, &y); break;
    case RECV: plan_call(r, LX_P2P_RECV, in->peer, -1, &x, &y); break;
    case SENDRECV: plan_call(r, LX_P2P_SENDRECV, in->peer, in->peer2, &x, &y); break;
    case WAIT:
        plan_call(r, LX_P2P_OTHER, -1, -1, &x, &y);
        x = r->req_op[in->req][0];
        y = r->req_op[in->req][1];
        break;
    case COLL: {
        /* A collective (on its own communicator) completes when every rank
         * has reached it. */
        if (r->blocked_on[1] != -3) {
            plan_call(r, LX_P2P_OTHER, -1, -1, &x, &y);
            r->coll_seen++;
            r->blocked_on[1] = -3;
        }
        for (int q = 0; q < n_ranks; q++)
            if (R[q].coll_seen < r->coll_seen) return 0;
        r->blocked_on[1] = -1;
        r->pc++;
        return 1;
    }
    }
    r->blocked_on[0] = x;
    r->blocked_on[1] = y;
    return 1;
}

/* Runs the ranks' programs; 1 when every rank reached its END with every
 * operation done, 0 for a deadlock. */
static int run(int n, const instr *const *progs) {
    n_ranks = n;
    memset(R, 0, sizeof R);
    for (int a = 0; a < n; a++) {
        R[a].prog = progs[a];
        R[a].blocked_on[0] = -2;
        R[a].blocked_on[1] = -1;
    }
    for (int guard = 0; guard < 100000; guard++) {
        int moved = gpu_step();
        for (int a = 0; a < n; a++)
            moved |= host_step(a);
        if (!moved) break;
    }
    for (int a = 0; a < n; a++) {
        if (R[a].prog[R[a].pc].op != END) return 0;
        plan_call(&R[a], LX_P2P_OTHER, -1, -1, &(int){0}, &(int){0}); /* the spawn's end */
    }
    while (gpu_step()) {}
    for (int a = 0; a < n; a++)
        for (int i = 0; i < R[a].n_ops; i++)
            if (!R[a].ops[i].done) return 0;
    return 1;
}

/* The issue's pattern: rank 0 isend; all_reduce; wait, rank 1 all_reduce; recv. */
static void test_model_isend_across_collective(void **state) {
    (void)state;
    static const instr r0[] = {{ISEND, 1, 0, 0}, {COLL, 0, 0, 0}, {WAIT, 0, 0, 0}, {END, 0, 0, 0}};
    static const instr r1[] = {{COLL, 0, 0, 0}, {RECV, 0, 0, 0}, {END, 0, 0, 0}};
    const instr *const progs[] = {r0, r1};
    assert_true(run(2, progs));
}

/* Ring steps on 4 ranks, isend(right); recv(left); wait, three times. */
static instr ring[MAXR][16];
static void make_ring(int n) {
    for (int a = 0; a < n; a++) {
        int k = 0;
        for (int s = 0; s < 3; s++) {
            ring[a][k++] = (instr){ISEND, (a + 1) % n, 0, s};
            ring[a][k++] = (instr){RECV, (a + n - 1) % n, 0, 0};
            ring[a][k++] = (instr){WAIT, 0, 0, s};
        }
        ring[a][k] = (instr){END, 0, 0, 0};
    }
}

static void test_model_ring(void **state) {
    (void)state;
    for (int n = 2; n <= 4; n++) {
        make_ring(n);
        const instr *const progs[] = {ring[0], ring[1], ring[2], ring[3]};
        naive = 0;
        assert_true(run(n, progs));
        naive = 1; /* each operation alone at its call: every send waits for a receive behind a send */
        assert_false(run(n, progs));
        naive = 0;
    }
}

/* Both ranks isend then irecv, then wait: MPI-legal, and one group here. */
static void test_model_both_send_first(void **state) {
    (void)state;
    static const instr r0[] = {{ISEND, 1, 0, 0}, {IRECV, 1, 0, 1}, {COLL, 0, 0, 0},
                               {WAIT, 0, 0, 1},  {WAIT, 0, 0, 0},  {END, 0, 0, 0}};
    static const instr r1[] = {{ISEND, 0, 0, 0}, {IRECV, 0, 0, 1}, {COLL, 0, 0, 0},
                               {WAIT, 0, 0, 0},  {WAIT, 0, 0, 1},  {END, 0, 0, 0}};
    const instr *const progs[] = {r0, r1};
    assert_true(run(2, progs));
}

/* A 3-stage pipeline, 4 micro-batches forward: stage s receives from s-1
 * (blocking) and isends to s+1; the waits come at the end. */
static void test_model_pipeline(void **state) {
    (void)state;
    static instr st[3][32];
    for (int s = 0; s < 3; s++) {
        int k = 0;
        for (int m = 0; m < 4; m++) {
            if (s > 0) st[s][k++] = (instr){RECV, s - 1, 0, 0};
            if (s < 2) st[s][k++] = (instr){ISEND, s + 1, 0, m};
        }
        for (int m = 0; m < 4 && s < 2; m++)
            st[s][k++] = (instr){WAIT, 0, 0, m};
        st[s][k] = (instr){END, 0, 0, 0};
    }
    const instr *const progs[] = {st[0], st[1], st[2]};
    assert_true(run(3, progs));
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_isend_then_collective),
            cmocka_unit_test(test_ring_step_is_one_group),
            cmocka_unit_test(test_same_path_issues_the_first),
            cmocka_unit_test(test_model_isend_across_collective),
            cmocka_unit_test(test_model_ring),
            cmocka_unit_test(test_model_both_send_first),
            cmocka_unit_test(test_model_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
