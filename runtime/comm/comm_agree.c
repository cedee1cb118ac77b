/*
 * comm_agree.c: do all ranks make the same call?
 *
 * Ranks that all-reduce different sizes, or where one broadcasts and the
 * other all-reduces, give wrong numbers or an error deep inside the
 * library. Before each collective's transfer, every rank puts its call's
 * four numbers (which collective, element count, op, root) into one small
 * MPI_Allreduce with MPI_MIN over {x, -x}: the minimum of -x is minus the
 * maximum of x, so one call of 8 integers gives the minimum and maximum of
 * each number, and all ranks agree exactly when they are equal. That is the
 * whole cost when the ranks agree: one latency-bound call of 64 bytes
 * (docs/benchmarks.md measures it against the transfer).
 *
 * Only when they disagree, which every rank learns from the same result,
 * does a second call (MPI_Allgather) bring each rank's call and lecture
 * line to everyone, so that each rank's error step names its own line and
 * a disagreeing rank's. Then a barrier: every rank has sent its error step
 * to the lecture before any rank exits, so none is lost to the pool being
 * stopped.
 *
 * Point to point has no "all ranks": the sender sends its call's
 * description (count, line, and its lecture stack as text: a few hundred
 * bytes, sent only as long as it is) ahead of the data, on the private
 * communicator with the same ordering as the data, and the receiver
 * compares it with its own call before it takes the data. On a mismatch
 * the receiver writes two error steps: its own, and the sender's, at the
 * sender's stack, which it has; the sender may be blocked in its send, or
 * gone on after a send the library buffered, and could not say it itself.
 *
 * The checks run on Open MPI over host memory under either backend: they
 * are a few bytes, and the NCCL calls they precede are on device memory.
 *
 * Timed regions (dist_timer_start .. dist_timer_stop, dist_timed_begin ..
 * dist_timed_end). A check costs a latency-bound collective, a few
 * microseconds: in a loop that times a small collective, it would be most of
 * what is measured. Inside a timed region a call the ranks have already
 * agreed on in this spawn (the same collective, count, op and root; for a
 * send or receive the same peer and count) skips its check: the warm-up
 * call before the loop carries it. Every rank decides alike, because every
 * rank keeps the same list of agreed calls (a call enters it only when all
 * ranks made it). A mismatch inside the region between calls that were each
 * agreed before cannot be caught call by call without the check's cost; the
 * collectives skipped are folded into a digest, compared when the region
 * ends, so it is named there (a mismatch that hangs the transfer is a
 * deadlock, named as one).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm_calls.h"
#include "ranks/ranks.h"

enum { TAG_DESC = 23, TAG_ACK = 24 };

static MPI_Comm check_comm = MPI_COMM_NULL;
static int buffered; /* dist_buffered_sends(1): sends do not wait for their receive */

/* An acknowledgement carries no information beyond its arrival: one int,
 * sent from and received into these (a freed request may still write
 * into its buffer, so the buffer cannot be part of a descriptor). */
static const int ack_out = 1;
static int ack_in;

/* Timed regions: depth, the calls agreed so far in this spawn (the
 * world's collectives in `world`, each group's in its own lx_agree_group),
 * and how many checks ran. */
enum { AGREED_MAX = 32 };
typedef struct agreed {
    int64_t kind, count, op, root;
    int64_t dt; /* the call's dtype (lx_current_dtype): a bf16 call and an fp32 one differ */
} agreed;

/* The collectives one set of ranks (the world, or a group) agreed on, and
 * what a timed region skipped on it: every rank of the set keeps the same. */
struct lx_agree_group {
    agreed calls[AGREED_MAX];
    int n;
    uint64_t digest;
    int64_t skipped; /* in the current region */
};

static int timed_depth;
static struct lx_agree_group world;
static agreed agreed_sends[AGREED_MAX], agreed_recvs[AGREED_MAX];
static int n_sends, n_recvs;
static int64_t checks_made, checks_skipped;

static int is_agreed(const agreed *list, int n, agreed a) {
    for (int i = 0; i < n; i++)
        if (list[i].kind == a.kind && list[i].count == a.count && list[i].op == a.op && list[i].root == a.root &&
            list[i].dt == a.dt)
            return 1;
    return 0;
}

/* Remembers a; the oldest goes when the list is full (every rank drops the
 * same one). */
static void remember(agreed *list, int *n, agreed a) {
    if (is_agreed(list, *n, a)) return;
    if (*n == AGREED_MAX) {
        memmove(list, list + 1, (AGREED_MAX - 1) * sizeof *list);
        (*n)--;
    }
    list[(*n)++] = a;
}

static const uint64_t digest_start = 1469598103934665603ull;

static void reset(struct lx_agree_group *s) {
    memset(s, 0, sizeof *s);
    s->digest = digest_start;
}

/* In a timed region, a call s agreed on before: folded into the digest of
 * what the region skipped, and 1 (no check). */
static int skip_agreed(struct lx_agree_group *s, agreed a) {
    if (timed_depth == 0 || !is_agreed(s->calls, s->n, a)) return 0;
    const int64_t v[5] = {a.kind, a.count, a.op, a.root, a.dt};
    for (int i = 0; i < 5; i++)
        s->digest = (s->digest ^ (uint64_t)v[i]) * 1099511628211ull;
    s->skipped++;
    checks_skipped++;
    return 1;
}

/* Whether every rank of `c` made call a: one all-reduce (MIN) of the call
 * and its negation, so each field's minimum and maximum come back together,
 * and they are equal only where every rank passed the same value. */
static int made_alike(agreed a, MPI_Comm c) {
    int64_t v[10] = {a.kind, a.count, a.op, a.root, a.dt, -a.kind, -a.count, -a.op, -a.root, -a.dt};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 10, MPI_INT64_T, MPI_MIN, c));
    for (int i = 0; i < 5; i++)
        if (v[i] != -v[i + 5]) return 0;
    return 1;
}

/* Whether s's ranks skipped the same calls since the last time (one small
 * all-reduce over `c`, only when something was skipped); starts afresh. */
static int skipped_alike(struct lx_agree_group *s, MPI_Comm c) {
    uint64_t d = s->digest;
    int64_t skipped = s->skipped;
    s->digest = digest_start;
    s->skipped = 0;
    if (skipped == 0) return 1;
    int64_t v[2] = {(int64_t)(d >> 1), -(int64_t)(d >> 1)};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MIN, c));
    return v[0] == -v[1];
}

/* One call, as it travels in the slow path and with a send. */
typedef struct call_desc {
    int64_t kind, count, op, root, dt;
    int32_t rank, line;
    char call[40];
    char path[200];
    char frames[FRAMES_TEXT]; /* a send's: its lecture stack (lx_frames_to_text); last, sent as long as it is */
} call_desc;

/* The bytes of `d` that travel with a send: all but the unused end of frames. */
static int sent_size(const call_desc *d) { return (int)(offsetof(call_desc, frames) + strlen(d->frames) + 1); }

void lx_agree_start(void) {
    MPI_Comm comm = lx_the_world.comm;
    buffered = 0;
    MPI_CHECK(MPI_Comm_dup(comm, &check_comm));
    MPI_CHECK(MPI_Comm_set_errhandler(check_comm, MPI_ERRORS_RETURN));
    timed_depth = 0;
    reset(&world);
    n_sends = n_recvs = 0;
    checks_made = checks_skipped = 0;
}

void lx_agree_stop(void) {
    if (check_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&check_comm));
}

/* A call as numbers (lx_call.agree): a blocking call and its _async twin
 * are different calls (MPI does not match them either). */
static void fill(call_desc *d, const lx_call *call, int64_t count, int op, int root, const lx_frame *frames, int n) {
    memset(d, 0, sizeof *d);
    d->kind = call->agree;
    d->count = count;
    d->op = op;
    d->root = root;
    d->dt = lx_current_dtype();
    d->rank = lx_the_world.rank;
    snprintf(d->call, sizeof d->call, "%s", call->name);
    const lx_frame *at = n > 0 ? &frames[n - 1] : NULL;
    d->line = at ? at->line : 0;
    snprintf(d->path, sizeof d->path, "%s", at && at->path ? at->path : "?");
}

/* The same, with the stack as text: what a send carries. */
static void fill_send(call_desc *d, const lx_call *call, int64_t count, int dst, const lx_frame *frames, int n) {
    fill(d, call, count, -1, dst, frames, n);
    lx_frames_to_text(frames, n, d->frames, sizeof d->frames);
}

static const char *op_name(int64_t op) {
    switch (op) {
    case DIST_SUM: return "sum";
    case DIST_AVG: return "avg";
    case DIST_MIN: return "min";
    case DIST_MAX: return "max";
    default: return NULL;
    }
}

/* "dist_all_reduce of 4 floats (sum) at lectures/hw.c:14" */
static void describe(lx_sb *b, const call_desc *d, const char *peer_word) {
    lx_sb_printf(b, "rank %d: %s", (int)d->rank, d->call);
    if (d->kind != 0 || d->dt != DTYPE_F32) {
        if (d->dt == DTYPE_F32) lx_sb_printf(b, " of %lld float%s", (long long)d->count, d->count == 1 ? "" : "s");
        else lx_sb_printf(b, " of %lld %s", (long long)d->count, dtype_name((dtype)d->dt));
    }
    if (op_name(d->op)) lx_sb_printf(b, " (%s)", op_name(d->op));
    if (d->root >= 0) lx_sb_printf(b, " %s rank %lld", peer_word, (long long)d->root);
    lx_sb_printf(b, " at %s:%d", d->path, (int)d->line);
}

static const char *root_word(const char *call) {
    if (strstr(call, "broadcast") || strstr(call, "scatter") || strstr(call, "recv")) return "from";
    return "to";
}

static int same(const call_desc *a, const call_desc *b) {
    return a->kind == b->kind && a->count == b->count && a->op == b->op && a->root == b->root && a->dt == b->dt;
}

/* The slow path: everyone (of the world, or of group g) learns everyone's
 * call, names the first rank whose call differs from its own, and leaves. */
static void __attribute__((noreturn)) disagree(const call_desc *mine, const dist_group *g) {
    MPI_Comm c = g ? g->check_comm : check_comm;
    int size = g ? g->size : lx_the_world.size;
    call_desc *all = calloc((size_t)size, sizeof *all);
    if (!all) lx_fatal("out of memory");
    MPI_CHECK(MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, c));
    int other = -1;
    for (int r = 0; r < size && other < 0; r++)
        if (!same(&all[r], mine)) other = r;
    lx_sb b = {0};
    if (g) lx_sb_printf(&b, "the ranks of group %s made different calls: ", g->name);
    else lx_sb_str(&b, "the ranks made different calls: ");
    describe(&b, mine, root_word(mine->call));
    if (other >= 0) {
        lx_sb_str(&b, "; ");
        describe(&b, &all[other], root_word(all[other].call));
    }
    lx_sb_str(&b, g ? " (every rank of a group must make the same collective calls on it, in the same order)"
                    : " (every rank must make the same collective call, in the same order)");
    lx_error("%s", b.s);
    free(b.s);
    free(all);
    /* All error steps are on their way to the lecture before anyone exits. */
    MPI_CHECK(MPI_Barrier(c));
    exit(1);
}

void lx_agree_collective(const lx_call *call, int64_t count, int op, int root, const lx_frame *frames, int n) {
    /* The n-th collective of this rank waits for every rank to enter its
     * n-th: what the deadlock detector needs to know (spawn_deadlock.c). */
    lx_rank_needs(0, LX_NEED_COLLECTIVE, -1, lx_rank_count_collective());
    int64_t kind = call->agree;
    agreed a = {kind, count, op, root, lx_current_dtype()};
    if (skip_agreed(&world, a)) return;
    checks_made++;
    if (made_alike(a, check_comm)) {
        remember(world.calls, &world.n, a);
        return;
    }
    call_desc mine;
    fill(&mine, call, count, op, root, frames, n);
    disagree(&mine, NULL);
}

/* A group's collective: the same check over the group's ranks, skipped in
 * a timed region as the world's is (against the group's own list of agreed
 * calls), and no count for the deadlock detector, whose "every rank has
 * entered its n-th collective" is the world's. */
void lx_agree_collective_in(const dist_group *g, const lx_call *call, int64_t count, int op, int root,
                            const lx_frame *frames, int n) {
    int64_t kind = call->agree;
    agreed a = {kind, count, op, root, lx_current_dtype()};
    struct lx_agree_group *s = g->agreed;
    if (skip_agreed(s, a)) return;
    checks_made++;
    if (made_alike(a, g->check_comm)) {
        remember(s->calls, &s->n, a);
        return;
    }
    call_desc mine;
    fill(&mine, call, count, op, root, frames, n);
    disagree(&mine, g);
}

struct lx_agree_group *lx_agree_group_new(void) {
    struct lx_agree_group *s = malloc(sizeof *s);
    if (!s) lx_fatal("out of memory");
    reset(s);
    return s;
}

void lx_agree_group_free(struct lx_agree_group *s) { free(s); }

void lx_agree_group_settle(const dist_group *g) {
    if (skipped_alike(g->agreed, g->check_comm)) return;
    lx_fatal("the ranks of group %s made different collective calls on it inside the timed region that ends "
             "here (calls repeated there skip the agreement check; run the loop once before the timer to find "
             "the line where they differ)",
             g->name);
}

/* ---- point to point ----
 *
 * Every receive, when it is posted, sends its sender an acknowledgement
 * (TAG_ACK); every send receives one. A blocking send waits for it before
 * its data: it returns only once its receive is posted, whatever the
 * transport would have buffered (MPI_Ssend's semantics, for every backend,
 * since the acknowledgement travels on Open MPI over host memory). Both
 * ranks sending first then block at any size, and the deadlock detector
 * sees each waiting for a receive the other never posts. The k-th receive
 * a rank posts from a sender matches that sender's k-th send (MPI keeps
 * the order of one sender's messages); the acknowledgements keep the same
 * order, so the k-th send receives the k-th acknowledgement. */

struct lx_agree_send_desc {
    call_desc desc;
    MPI_Request req;
    MPI_Request ack; /* the acknowledgement of this send's receive */
    int dst, seq;    /* this rank's seq-th send to dst in the spawn */
    int acked;
};

struct lx_agree_recv_desc {
    call_desc desc;
    MPI_Request req;
    int src, seq; /* this rank's seq-th receive from src */
};

lx_agree_send_desc *lx_agree_send(const lx_call *call, int64_t count, int dst, const lx_frame *frames, int n) {
    agreed a = {0, count, 0, dst, lx_current_dtype()};
    if (timed_depth > 0 && is_agreed(agreed_sends, n_sends, a)) {
        checks_skipped++;
        return NULL;
    }
    checks_made++;
    remember(agreed_sends, &n_sends, a);
    lx_agree_send_desc *d = malloc(sizeof *d);
    if (!d) lx_fatal("out of memory");
    d->dst = dst;
    d->seq = lx_rank_count_send(dst);
    d->acked = 0;
    fill_send(&d->desc, call, count, dst, frames, n);
    MPI_CHECK(MPI_Isend(&d->desc, sent_size(&d->desc), MPI_BYTE, dst, TAG_DESC, check_comm, &d->req));
    MPI_CHECK(MPI_Irecv(&ack_in, 1, MPI_INT, dst, TAG_ACK, check_comm, &d->ack));
    return d;
}

void lx_agree_send_posted(lx_agree_send_desc *d) {
    if (!d || buffered || d->acked) return;
    MPI_CHECK(MPI_Wait(&d->ack, MPI_STATUS_IGNORE));
    d->acked = 1;
}

int lx_agree_send_test(lx_agree_send_desc *d) {
    if (!d || buffered || d->acked) return 1;
    int done = 0;
    MPI_CHECK(MPI_Test(&d->ack, &done, MPI_STATUS_IGNORE));
    if (done) d->acked = 1;
    return done;
}

void lx_agree_send_done(lx_agree_send_desc *d) {
    if (!d) return;
    MPI_CHECK(MPI_Wait(&d->req, MPI_STATUS_IGNORE));
    if (!d->acked) {
        /* With buffered sends the acknowledgement is not waited for: the
         * freed request still takes it when it comes, keeping the order. */
        if (buffered) MPI_CHECK(MPI_Request_free(&d->ack));
        else MPI_CHECK(MPI_Wait(&d->ack, MPI_STATUS_IGNORE));
    }
    free(d);
}

void lx_agree_needs(const lx_agree_send_desc *s, const lx_agree_recv_desc *r) {
    int i = 0;
    /* A buffered send may return without its receive: nothing provable. */
    if (s && !s->acked && !buffered) lx_rank_needs(i++, LX_NEED_RECV_POSTED, s->dst, s->seq);
    if (r) lx_rank_needs(i, LX_NEED_SEND_STARTED, r->src, r->seq);
}

void dist_buffered_sends(int on) {
    if (check_comm == MPI_COMM_NULL)
        lx_fatal("%s() outside a spawned function: it sets how this rank's sends behave", __func__);
    buffered = on != 0;
}

lx_agree_recv_desc *lx_agree_recv_post(int src, int64_t count) {
    agreed a = {0, count, 0, src, lx_current_dtype()};
    if (timed_depth > 0 && is_agreed(agreed_recvs, n_recvs, a)) {
        checks_skipped++;
        return NULL;
    }
    checks_made++;
    lx_agree_recv_desc *d = malloc(sizeof *d);
    if (!d) lx_fatal("out of memory");
    d->src = src;
    /* Counted before the acknowledgement leaves: when the sender learns of
     * the receive, the board shows it too. */
    d->seq = lx_rank_count_recv(src);
    MPI_Request ack;
    MPI_CHECK(MPI_Isend(&ack_out, 1, MPI_INT, src, TAG_ACK, check_comm, &ack));
    MPI_CHECK(MPI_Request_free(&ack));
    MPI_CHECK(MPI_Irecv(&d->desc, (int)sizeof d->desc, MPI_BYTE, src, TAG_DESC, check_comm, &d->req));
    return d;
}

void lx_agree_recv_check(lx_agree_recv_desc *d, const lx_call *call, int64_t count, const lx_frame *frames, int n) {
    if (!d) return;
    MPI_CHECK(MPI_Wait(&d->req, MPI_STATUS_IGNORE));
    d->desc.frames[sizeof d->desc.frames - 1] = '\0';
    if (d->desc.count != count || d->desc.dt != lx_current_dtype()) {
        call_desc mine;
        fill(&mine, call, count, -1, d->src, frames, n);
        /* The sender's step first, at its own line: "rank 0: dist_send of 6
         * floats to rank 1 at ...; rank 1: dist_recv of 4 floats ...". */
        lx_sb s = {0};
        lx_sb_str(&s, "the send and the receive do not match: ");
        describe(&s, &d->desc, "to");
        lx_sb_str(&s, "; ");
        describe(&s, &mine, "from");
        lx_sb_str(&s, " (a send gives exactly as many elements, of the same dtype, as its receive takes)");
        place at = lx_innermost(d->desc.frames);
        char *located = at.known ? lx_fmt("%s:%d: %s", at.path, at.line, s.s) : strdup(s.s);
        lx_rank_error_for(d->src, d->desc.frames, located);
        free(located);
        free(s.s);
        lx_sb b = {0};
        lx_sb_str(&b, "the send and the receive do not match: ");
        describe(&b, &mine, "from");
        lx_sb_str(&b, "; ");
        describe(&b, &d->desc, "to");
        lx_sb_str(&b, " (a receive takes exactly as many elements, of the same dtype, as its send gives)");
        free(d);
        lx_fatal("%s", b.s);
    }
    agreed a = {0, count, 0, d->src, lx_current_dtype()};
    remember(agreed_recvs, &n_recvs, a);
    free(d);
}

/* ---- timed regions ---- */

void lx_agree_timed_begin(void) { timed_depth++; }

int lx_agree_timed(void) { return timed_depth > 0; }

int lx_agree_timed_end(void) {
    if (timed_depth == 0) return 0;
    if (--timed_depth > 0) return 0;
    /* Did every rank skip the same collectives? One more small all-reduce,
     * once per region, outside the timing; only when the region skipped a
     * collective, which every rank of the spawn then made too (a region
     * that times messages between two ranks of four ends on those two). */
    if (skipped_alike(&world, check_comm)) return 1;
    lx_fatal("the ranks made different collective calls inside the timed region that ends here (calls "
             "repeated there skip the agreement check; run the loop once before the timer to find the "
             "line where they differ)");
}

int64_t lx_agree_checks_made(void) { return checks_made; }
int64_t lx_agree_checks_skipped(void) { return checks_skipped; }
