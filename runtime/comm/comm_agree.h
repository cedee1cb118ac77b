/*
 * comm_agree.h: the check that the ranks made the same call (comm_agree.c).
 * Not for lectures.
 */
#ifndef LECTERN_COMM_AGREE_H
#define LECTERN_COMM_AGREE_H

#include <mpi.h>
#include <stdint.h>

#include "trace/trace.h"

struct lx_call; /* comm_calls.h: the call's descriptor (its name, and the number compared) */

/* Over a private copy of the spawn's communicator: checks never match the
 * lecture's own messages. */
void lx_agree_start(void);
void lx_agree_stop(void);

/* Every rank calls this at the same point of a collective, before its
 * transfer: returns when all ranks made the same call (`call`, `count`
 * elements, `op` and `root`, -1 where they do not apply). Otherwise each
 * rank adds an error step naming its own line and another rank's, and the
 * rank exits once all have said so: no result is recorded after it. */
void lx_agree_collective(const struct lx_call *call, int64_t count, int op, int root, const lx_frame *frames, int n);
/* The same over the ranks of group g (its check_comm): an error names the
 * group. Not counted as a world collective by the deadlock detector. In a
 * timed region a call the group's ranks agreed on before skips its check,
 * as the world's calls do; the group keeps its own list of agreed calls
 * and digest of skipped ones (lx_agree_group_new, when it is made). */
struct dist_group;
void lx_agree_collective_in(const struct dist_group *g, const struct lx_call *call, int64_t count, int op, int root,
                            const lx_frame *frames, int n);
struct lx_agree_group;
struct lx_agree_group *lx_agree_group_new(void);
void lx_agree_group_free(struct lx_agree_group *s);
/* When the group skipped checks since the last time: its ranks compare
 * what they skipped (one small all-reduce over the group) and stop with an
 * error naming the group if they differ. Every rank of g calls it at the
 * same point: when a timed region ends (the groups oldest first, after the
 * world's comparison) and before the group is freed. */
void lx_agree_group_settle(const struct dist_group *g);

/* Point to point: the sender sends a small descriptor of its call ahead of
 * the data; the receiver checks it against its own call before it takes
 * the data, and on a mismatch adds an error step naming both lines and
 * exits. */
typedef struct lx_agree_send_desc lx_agree_send_desc;
typedef struct lx_agree_recv_desc lx_agree_recv_desc;
lx_agree_send_desc *lx_agree_send(const struct lx_call *call, int64_t count, int dst, const lx_frame *frames, int n);
/* Waits until the receiver has posted the matching receive (unless
 * dist_buffered_sends is on): a blocking send calls it before its data.
 * NULL (a send whose check a timed region skipped): returns at once. */
void lx_agree_send_posted(lx_agree_send_desc *d);
/* 1 when the send may return: its receive is posted (or sends are
 * buffered); never waits. NULL: 1. */
int lx_agree_send_test(lx_agree_send_desc *d);
void lx_agree_send_done(lx_agree_send_desc *d); /* frees d; NULL: nothing */
/* Writes on the status board what the current wait needs: the receive of
 * send `s` posted, the send of receive `r` started (either may be NULL). */
void lx_agree_needs(const lx_agree_send_desc *s, const lx_agree_recv_desc *r);
lx_agree_recv_desc *lx_agree_recv_post(int src, int64_t count);
/* Waits for the sender's descriptor and compares; frees d. */
void lx_agree_recv_check(lx_agree_recv_desc *d, const struct lx_call *call, int64_t count, const lx_frame *frames,
                         int n);

/* In a timed region a call the ranks already agreed on in this spawn skips
 * its check: lx_agree_collective returns at once, lx_agree_send and
 * lx_agree_recv_post return NULL (which send_done and recv_check accept).
 * Regions nest; both ends are collective. The end compares a digest of the
 * collectives skipped and stops the rank with an error (at the lecture line
 * that ends the region) when the ranks differ. */
void lx_agree_timed_begin(void);
/* 1 when the outermost region ended here (the caller then settles the
 * groups: lx_agree_group_settle). */
int lx_agree_timed_end(void);
/* 1 inside a timed region. */
int lx_agree_timed(void);
/* Checks this spawn has made and skipped so far (tests). */
int64_t lx_agree_checks_made(void);
int64_t lx_agree_checks_skipped(void);

#endif /* LECTERN_COMM_AGREE_H */
