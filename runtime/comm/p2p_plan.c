/*
 * p2p_plan.c: when the NCCL backend issues a point-to-point operation.
 *
 * MPI lets a rank start a send, make a collective, and wait for the send
 * after it. NCCL runs a rank's operations on one communicator in the order
 * they were issued, and a send of more than NCCL's buffers finishes only
 * when its receive is running. Two rules follow:
 *
 *   - point-to-point goes on a communicator and a stream of its own
 *     (comm_nccl.c), so a send in flight never holds up a collective, and
 *     is never held back for one: the open group is issued at the next call
 *     of any other kind, before that call runs.
 *
 *   - a rank's send and receive that must run at the same time go in one
 *     group (ncclGroupStart/End). A ring step is `isend(right); recv(left)`
 *     on every rank: issued one by one, every rank's send would wait for
 *     its right neighbour's receive, queued behind that neighbour's own
 *     send, for ever. So consecutive isend/irecv calls are held in an open
 *     group, and a blocking send, recv or sendrecv joins it and issues it.
 *
 * A second operation to the same peer in the same direction does not join:
 * NCCL would order the two anyway, so nothing is gained by holding the
 * first, and a pipeline stage's activations (one isend per micro-batch)
 * leave at the next micro-batch's isend instead of piling up. The host time
 * between a call and its issue costs little on a GPU, where kernels are
 * queued, not run, by the host; and comm_nccl.c records the compute
 * stream's position at the call itself, so the send waits for what was
 * queued before it, not for what was queued before the issue.
 *
 * The cost, said plainly: an isend is issued at the rank's next dist_*
 * call, not at its own. Where the host itself computes between the two (a
 * lecture's sleep_ms standing in for work, a host-side loop), the message
 * leaves that much later: pipeline stage 0, which only sends, sends
 * micro-batch k's activations at micro-batch k+1's isend. Issuing each
 * operation alone at its call would remove that delay and deadlock the ring
 * above; knowing whether a receive follows needs the future.
 */
#include <string.h>

#include "comm/p2p_plan.h"

static lx_p2p_step issue_open_first(lx_p2p_plan *p, lx_p2p_step s) {
    if (p->n_open > 0) s.issue_before = 1;
    memset(p, 0, sizeof *p);
    return s;
}

static int is_open(const lx_p2p_plan *p, int is_send, int peer) {
    return peer >= 0 && peer < LECTERN_MAX_WORLD && p->open[is_send][peer];
}

static void add(lx_p2p_plan *p, int is_send, int peer) {
    if (peer < 0 || peer >= LECTERN_MAX_WORLD) return;
    p->open[is_send][peer] = 1;
    p->n_open++;
}

lx_p2p_step lx_p2p_plan_call(lx_p2p_plan *p, lx_p2p_call call, int peer, int peer2) {
    lx_p2p_step s = {0, 0, 0};
    if (call == LX_P2P_OTHER) return issue_open_first(p, s);
    int send = call == LX_P2P_ISEND || call == LX_P2P_SEND || call == LX_P2P_SENDRECV;
    int recv_peer = call == LX_P2P_SENDRECV ? peer2 : peer;
    int recv = call != LX_P2P_ISEND && call != LX_P2P_SEND;
    if ((send && is_open(p, 1, peer)) || (recv && is_open(p, 0, recv_peer))) s = issue_open_first(p, s);
    if (send) add(p, 1, peer);
    if (recv) add(p, 0, recv_peer);
    s.join = 1;
    if (call == LX_P2P_SEND || call == LX_P2P_RECV || call == LX_P2P_SENDRECV) {
        s.issue_after = 1;
        memset(p, 0, sizeof *p);
    }
    return s;
}
