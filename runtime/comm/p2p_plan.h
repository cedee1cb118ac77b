/*
 * comm/p2p_plan.h: when the NCCL backend issues a point-to-point operation,
 * and with what (p2p_plan.c). Not for lectures.
 *
 * A pure function of the rank's sequence of calls, so that a test on a CPU
 * can check the decisions comm_nccl.c will make on a GPU (tests/test_p2p_plan.c).
 */
#ifndef LECTERN_P2P_PLAN_H
#define LECTERN_P2P_PLAN_H

#include "lectern.h" /* LECTERN_MAX_WORLD */

/* What the rank calls, as the plan sees it. */
typedef enum lx_p2p_call {
    LX_P2P_ISEND,
    LX_P2P_IRECV,
    LX_P2P_SEND,     /* blocking */
    LX_P2P_RECV,     /* blocking */
    LX_P2P_SENDRECV, /* a send to `peer` and a receive from `peer2`, together */
    LX_P2P_OTHER,    /* anything else: a collective, a wait, the end of the spawned function */
} lx_p2p_call;

/* The open group: the operations held since the last issue, at most one per
 * peer and direction. */
typedef struct lx_p2p_plan {
    int n_open;
    unsigned char open[2][LECTERN_MAX_WORLD]; /* [is_send][peer] */
} lx_p2p_plan;

/* What to do at one call, in this order: issue the open group (ncclGroupStart,
 * its operations, ncclGroupEnd) before the call; add the call's own
 * operations (if any) to the group; issue the group right away, the call's
 * operations included. */
typedef struct lx_p2p_step {
    int issue_before;
    int join;
    int issue_after;
} lx_p2p_step;

/* The decision at a call; updates the plan. `peer` is the send's (or the
 * receive's) peer, `peer2` the receive's of a SENDRECV. */
lx_p2p_step lx_p2p_plan_call(lx_p2p_plan *p, lx_p2p_call call, int peer, int peer2);

#endif /* LECTERN_P2P_PLAN_H */
