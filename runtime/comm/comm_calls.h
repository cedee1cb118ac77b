/*
 * comm_calls.h: what the files of the dist_* calls share. Not for lectures.
 *
 * The front of the comm layer is five files, each using only those above it
 * in this list (no file-level circle):
 *
 *   comm_calls.c     one descriptor per public call (lx_calls) and the
 *                    argument checks its descriptor names
 *   comm.c           the world's collectives and point to point
 *   comm_requests.c  the *_async calls, dist_isend/irecv, dist_wait/test
 *   comm_groups.c    dist_new_group, the group (_in) calls, all-to-all,
 *                    timed regions
 *   comm_layer.c     the layer's start and stop (lx_comm_hooks)
 *
 * The descriptor plays the part of nccl-tests' testColl table: each call's
 * name is written once, in lx_calls, and every message, board entry and
 * agreement check of the call reads it from there.
 */
#ifndef LECTERN_COMM_CALLS_H
#define LECTERN_COMM_CALLS_H

#include "comm/comm.h"
#include "comm/comm_agree.h"
#include "trace/trace.h"

/* ---------------- the descriptors (comm_calls.c) ---------------- */

/* How the ranks meet in a call. */
typedef enum lx_call_kind {
    LX_COLLECTIVE,       /* every rank of the world, agreement-checked */
    LX_GROUP_COLLECTIVE, /* every rank of a group (the _in calls) */
    LX_POINT_TO_POINT,   /* a sender and a receiver: the check travels with the send */
    LX_ON_REQUEST,       /* dist_wait, dist_test */
    LX_ON_GROUPS,        /* making, asking and freeing groups */
} lx_call_kind;

/* What a call checks of its arguments, besides being made inside a spawn
 * (every call checks that first). lx_check_args makes the checks of a
 * one-tensor call in this order: the tensor, the root or peer, the op. */
enum {
    LX_CHECK_TENSOR = 1 << 0, /* one tensor: exists, lives where the backend works, fits an int */
    LX_CHECK_PIECES = 1 << 1, /* output and input: their sizes in pieces, and no shared memory */
    LX_CHECK_ROOT = 1 << 2,   /* `peer` names a rank of the world (or of the group), itself allowed */
    LX_CHECK_PEER = 1 << 3,   /* `peer` names another rank of the world */
    LX_CHECK_OP = 1 << 4,     /* a reduction op */
    LX_CHECK_GROUP = 1 << 5,  /* g is NULL or a group of this spawn that holds this rank */
    LX_ASYNC = 1 << 6,        /* returns a request that dist_wait completes */
};

typedef struct lx_call {
    const char *name;  /* "dist_all_reduce": in messages, on the status board */
    lx_call_kind kind; /* how the ranks meet */
    unsigned checks;   /* LX_CHECK_* and LX_ASYNC */
    const char *peer;  /* the root's or peer's parameter ("dst", "src"), else NULL */
    int agree;         /* the number the agreement check compares (comm_agree.c); -1: none */
} lx_call;

/* The collectives come first, in the agreement check's numbering
 * (dist_barrier is 0: its messages give no count). */
typedef enum lx_call_id {
    LX_BARRIER,
    LX_ALL_REDUCE,
    LX_REDUCE,
    LX_BROADCAST,
    LX_REDUCE_SCATTER,
    LX_ALL_GATHER,
    LX_SCATTER,
    LX_GATHER,
    LX_ALL_REDUCE_ASYNC,
    LX_BROADCAST_ASYNC,
    LX_REDUCE_SCATTER_ASYNC,
    LX_ALL_GATHER_ASYNC,
    LX_ALL_TO_ALL,
    LX_ALL_TO_ALL_ASYNC,
    LX_ALL_REDUCE_IN,
    LX_REDUCE_SCATTER_IN,
    LX_ALL_GATHER_IN,
    LX_BROADCAST_IN,
    LX_ALL_TO_ALL_IN,
    LX_ALL_REDUCE_IN_ASYNC,
    LX_REDUCE_SCATTER_IN_ASYNC,
    LX_ALL_GATHER_IN_ASYNC,
    LX_BROADCAST_IN_ASYNC,
    LX_ALL_TO_ALL_IN_ASYNC,
    LX_SEND,
    LX_RECV,
    LX_SENDRECV,
    LX_ISEND,
    LX_IRECV,
    LX_WAIT,
    LX_TEST,
    LX_NEW_GROUP,
    LX_GROUP_RANK,
    LX_GROUP_SIZE,
    LX_GROUP_FREE,
    LX_CALLS
} lx_call_id;

extern const lx_call lx_calls[LX_CALLS];

/* ---------------- the checks (comm_calls.c) ----------------
 *
 * Each stops the rank with an error naming the call and the problem (at
 * the lecture's line: lx_fatal). */

/* Inside a spawned function. */
void lx_need_rank(const lx_call *c);
/* One tensor, checked as c->checks says; returns its element count. `g`:
 * NULL, or the group whose ranks a root is counted in. */
size_t lx_check_args(const lx_call *c, const dist_group *g, const tensor *t, int peer, dist_op op);
/* The tensor exists and lives where this spawn's backend works (`what`
 * names it). Returns its element count. */
size_t lx_check_tensor(const char *call, const char *what, const tensor *t);
/* Both tensors of one call have one dtype, or the lecture stops, naming both. */
void lx_check_same_dtype(const char *call, const char *a_name, const tensor *a, const char *b_name, const tensor *b);
void lx_check_peer(const char *call, const char *what, int peer, int allow_self);
void lx_check_op(const char *call, dist_op op);
/* The two tensors share memory (one a view into the other). */
int lx_overlap(const tensor *a, const tensor *b);
/* The pieces of a two-tensor call over the world (g NULL) or group g:
 * reduce-scatter returns the output's count, all-gather the input's,
 * all-to-all one piece's. */
size_t lx_check_reduce_scatter(const char *call, const dist_group *g, tensor *output, const tensor *input, dist_op op);
size_t lx_check_all_gather(const char *call, const dist_group *g, tensor *output, const tensor *input);
size_t lx_check_all_to_all(const char *call, const dist_group *g, tensor *output, const tensor *input);

/* ---------------- around each call that waits (comm_calls.c) ---------------- */

/* Where the call is, captured once: for the status board (so the parent can
 * name the line when the rank waits for ever) and for the agreement check. */
typedef struct call_site {
    lx_frame frames[LX_MAX_FRAMES];
    int n;
} call_site;

void lx_call_enter(call_site *site, const char *board, int peer);
/* The call about to be made is at `site` (lx_call_enter does it): its top
 * frame and the time, which lx_call_marked returns (NULL: no lecture frame)
 * for the call's message link (trace.h, lx_links_call). */
void lx_call_mark(const call_site *site);
const lx_frame *lx_call_marked(double *enter);
/* A collective: every rank must make the same call (comm_agree.c). */
void lx_call_enter_collective(call_site *site, const lx_call *c, size_t count, int op, int root);
void lx_call_leave(void);
/* --inspect-collectives: tensor t of the call, "before" or "after" it. */
void lx_call_show(const char *call, const char *what, const char *when, const tensor *t);

/* ---------------- requests (comm_requests.c) ---------------- */

/* A request remembers the line that made it: dist_wait is where the rank
 * waits, but a request never waited for is reported at the line that made
 * it, when the spawned function returns. */
struct dist_request {
    void *backend_request;
    dist_group *group;              /* a group call's group (busy until the wait), else NULL */
    const lx_call *call;            /* dist_all_reduce_async's */
    int peer;                       /* for the status board: -1 all ranks */
    lx_agree_send_desc *send_check; /* isend: the descriptor in flight */
    lx_agree_recv_desc *recv_check; /* irecv: checked at wait */
    int64_t count;
    call_site site;
    int n_uses; /* the tensors it uses until its wait */
    const tensor *uses[2];
    int writes[2]; /* the library writes into uses[i] */
    int hashed[2]; /* sum[i] holds uses[i]'s hash at the call */
    uint64_t sum[2];
    struct dist_request *prev, *next;
};

dist_request *lx_request_new(const lx_call *c, int peer, int64_t count, const call_site *site);
/* The request uses `t` until its wait (library_writes: the library writes into it). */
void lx_request_uses(dist_request *req, const tensor *t, int library_writes);
/* An async collective of the world: its agreement check at the call, then the request. */
dist_request *lx_request_collective(call_site *site, const lx_call *c, size_t count, int op, int root);

/* ---------------- groups (comm_groups.c) ---------------- */

/* The spawned function has returned (its requests completed): frees the
 * groups it left. */
void lx_comm_free_groups(void);

#endif /* LECTERN_COMM_CALLS_H */
