/*
 * shared_ipc.c: the protocol of the shared-GPU collectives (shared_ipc.h),
 * written once over lx_ipc_dev: CUDA IPC on a GPU, shared memory on the CPU
 * (the test backend that `make test` runs every case through).
 *
 * Memory. Every rank exports one window of W floats at the spawn's start
 * and opens every peer's once (a GPU maps memory in hundreds of µs: never
 * per call). A call copies its input into its own window, and one kernel per
 * rank does that rank's share, reading the peers' windows directly.
 *
 * One round of a collective, for a chunk of at most W floats:
 *
 *   1. queue the copy into my window, record my `ready` event (seq s)
 *   2. host: an MPI_Allgather of every rank's s: each peer's record is now
 *      made, so waiting for it is meaningful (shared_ipc.h)
 *   3. queue a wait for every peer's `ready`, then my kernel: my slice of
 *      an all-reduce (read slice r of every window, write the result into
 *      slice r of every window), my piece of a reduce-scatter, the pieces
 *      an all-gather or all-to-all brings me, ...
 *   4. record `done`; host: a barrier; queue a wait for every peer's `done`
 *   5. queue the copy out of my window
 *
 * After step 4 no peer reads or writes my window any more, so the next
 * round's copy in (queued after the waits of step 4) may overwrite it: one
 * window, two events per rank. On a GPU the host never waits for the
 * device: every step queues work on stream 0 or exchanges a few bytes.
 *
 * Chunks: W floats for the calls with one buffer, W / size per piece for
 * those with `size` pieces (as comm_staged.c cuts them), or fewer where the
 * test hook lx_ipc_set_chunk asks.
 *
 * Point to point. A send copies its data into a window of its own kept for
 * that receiver (a "segment", made the first time one of this size is
 * needed and kept for the spawn), records the segment's event, and sends a
 * control message: which segment, the sequence number, and the handles the
 * first time. It does not wait for the receiver, so an isend is a send,
 * and no send can deadlock where Open MPI's would not. The receive waits
 * for the control message, opens the segment the first time, queues a wait
 * for its event and the copy out, records its `consumed` event and answers
 * with an acknowledgement: the sender reuses a segment only after that
 * acknowledgement, behind a wait for `consumed`. Messages between two ranks
 * are matched in order, as MPI matches the control messages.
 */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/shared_ipc.h"
#include "trace/trace.h"

#include "lectern.h"

enum { TAG_CTL = 31, TAG_ACK = 32, MAXW = LECTERN_MAX_WORLD };
enum { WIN, READY, DONE, CONSUMED, N_HANDLES }; /* what a rank exports at the start */

/* A send's control message: where its data waits. */
typedef struct ctl {
    uint64_t seq, count, floats;
    int32_t id, fresh; /* fresh: the receiver opens wh and eh (a new segment) */
    lx_ipc_handle wh, eh;
} ctl;

typedef struct ack {
    uint64_t seq; /* the receiver's `consumed` record */
    int32_t id, pad;
} ack;

/* A segment of this rank's, for messages to one receiver. */
typedef struct segment {
    float *mem;
    size_t floats;
    void *ev;
    lx_ipc_handle wh, eh;
    int id, busy, announced, settled;
    ctl msg; /* the control message in flight (msg_req) */
    MPI_Request msg_req;
    struct segment *next;
} segment;

/* A peer's segment, opened here. */
typedef struct opened {
    int id;
    float *mem;
    size_t floats;
    void *ev;
    struct opened *next;
} opened;

static struct {
    const lx_ipc_dev *dev;
    int active;
    MPI_Comm world; /* a duplicate of the spawn's: the protocol's own messages */
    int wrank, wsize;
    size_t win_floats, chunk, chunk_asked;
    float *win[MAXW];                                /* win[wrank]: mine; the others opened */
    void *ready[MAXW], *done[MAXW], *consumed[MAXW]; /* the same */
    uint64_t seq;                                    /* my last record */
    uint64_t round_seq[MAXW];                        /* the peers' seq of this round */
    /* what the calls run over now */
    MPI_Comm comm;
    int size, rank;
    int world_of[MAXW];
    /* point to point */
    segment *to[MAXW];
    opened *from[MAXW];
    int next_id;
    uint64_t received[MAXW], acked[MAXW];
} S;

static int64_t steps_run;
int64_t lx_ipc_steps_run(void) { return steps_run; }
int lx_ipc_active(void) { return S.active; }

static float *W(int q) { return S.win[S.world_of[q]]; }

static void set_chunk(void) { S.chunk = S.chunk_asked && S.chunk_asked < S.win_floats ? S.chunk_asked : S.win_floats; }
void lx_ipc_set_chunk(size_t floats) {
    S.chunk_asked = floats;
    set_chunk();
}

void lx_ipc_use(MPI_Comm comm, int size, int rank, const int *world_of) {
    if (comm == MPI_COMM_NULL) { /* the world */
        comm = S.world, size = S.wsize, rank = S.wrank, world_of = NULL;
    }
    S.comm = comm;
    S.size = size;
    S.rank = rank;
    for (int q = 0; q < size; q++)
        S.world_of[q] = world_of ? world_of[q] : q;
}

/* ---------------- one round ---------------- */

/* Steps 1-3: my copies in are queued; now my `ready`, the host's exchange
 * of sequence numbers, and the waits for every peer's. */
static void ready(void) {
    S.seq++;
    S.dev->record(S.ready[S.wrank], S.seq);
    MPI_CHECK(MPI_Allgather(&S.seq, 1, MPI_UINT64_T, S.round_seq, 1, MPI_UINT64_T, S.comm));
    for (int q = 0; q < S.size; q++)
        if (q != S.rank) S.dev->wait(S.ready[S.world_of[q]], S.round_seq[q]);
}

/* Step 4: my kernel is queued; `done`, a barrier, the waits for every
 * peer's `done`. After it no peer touches my window in this round. */
static void done(void) {
    S.dev->record(S.done[S.wrank], S.seq);
    MPI_CHECK(MPI_Barrier(S.comm));
    for (int q = 0; q < S.size; q++)
        if (q != S.rank) S.dev->wait(S.done[S.world_of[q]], S.round_seq[q]);
    steps_run++;
}

static size_t one_clen(void) { return S.chunk; }
static size_t piece_clen(void) {
    size_t c = S.chunk / (size_t)S.size;
    return c ? c : 1;
}
static size_t len_at(size_t lo, size_t count, size_t clen) { return count - lo < clen ? count - lo : clen; }

/* ---------------- the collectives ---------------- */

void lx_ipc_all_reduce(float *buf, size_t count, int op) {
    size_t clen = one_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        S.dev->copy(W(S.rank), buf + lo, n);
        ready();
        /* my slice of the chunk, reduced in every window at once */
        size_t s0 = n * (size_t)S.rank / (size_t)S.size, s1 = n * (size_t)(S.rank + 1) / (size_t)S.size;
        if (s1 > s0) {
            float *io[MAXW];
            for (int q = 0; q < S.size; q++)
                io[q] = W(q) + s0;
            S.dev->reduce(io, S.size, (const float *const *)io, S.size, s1 - s0, op, (float)S.size);
        }
        done();
        S.dev->copy(buf + lo, W(S.rank), n);
    }
}

void lx_ipc_reduce(float *buf, size_t count, int root, int op) {
    size_t clen = one_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        S.dev->copy(W(S.rank), buf + lo, n);
        ready();
        if (S.rank == root) {
            const float *in[MAXW];
            for (int q = 0; q < S.size; q++)
                in[q] = W(q);
            float *out = buf + lo;
            S.dev->reduce(&out, 1, in, S.size, n, op, (float)S.size);
        }
        done();
    }
}

void lx_ipc_broadcast(float *buf, size_t count, int root) {
    size_t clen = one_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        if (S.rank == root) S.dev->copy(W(root), buf + lo, n);
        ready();
        if (S.rank != root) S.dev->copy(buf + lo, W(root), n);
        done();
    }
}

/* Chunk [lo, lo + n) of each of the size pieces of `in` (piece q at
 * q * count) into my window, side by side. */
static void pieces_in(const float *in, size_t count, size_t lo, size_t n) {
    for (int q = 0; q < S.size; q++)
        S.dev->copy(W(S.rank) + (size_t)q * n, in + (size_t)q * count + lo, n);
}

void lx_ipc_reduce_scatter(float *out, const float *in, size_t count, int op) {
    size_t clen = piece_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        pieces_in(in, count, lo, n);
        ready();
        const float *from[MAXW];
        for (int q = 0; q < S.size; q++)
            from[q] = W(q) + (size_t)S.rank * n;
        float *to = out + lo;
        S.dev->reduce(&to, 1, from, S.size, n, op, (float)S.size);
        done();
    }
}

void lx_ipc_all_gather(float *out, const float *in, size_t count) {
    size_t clen = piece_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        S.dev->copy(W(S.rank), in + lo, n);
        ready();
        for (int q = 0; q < S.size; q++)
            S.dev->copy(out + (size_t)q * count + lo, W(q), n);
        done();
    }
}

void lx_ipc_scatter(float *out, const float *in, size_t count, int root) {
    size_t clen = piece_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        if (S.rank == root) pieces_in(in, count, lo, n);
        ready();
        S.dev->copy(out + lo, W(root) + (size_t)S.rank * n, n);
        done();
    }
}

void lx_ipc_gather(float *out, const float *in, size_t count, int root) {
    size_t clen = piece_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        S.dev->copy(W(S.rank), in + lo, n);
        ready();
        if (S.rank == root)
            for (int q = 0; q < S.size; q++)
                S.dev->copy(out + (size_t)q * count + lo, W(q), n);
        done();
    }
}

void lx_ipc_all_to_all(float *out, const float *in, size_t count) {
    size_t clen = piece_clen();
    for (size_t lo = 0; lo < count; lo += clen) {
        size_t n = len_at(lo, count, clen);
        pieces_in(in, count, lo, n);
        ready();
        for (int q = 0; q < S.size; q++) /* piece `rank` of rank q's input */
            S.dev->copy(out + (size_t)q * count + lo, W(q) + (size_t)S.rank * n, n);
        done();
    }
}

/* ---------------- point to point ---------------- */

static segment *find_segment(int peer, int id) {
    for (segment *s = S.to[peer]; s; s = s->next)
        if (s->id == id) return s;
    lx_fatal("shared-GPU protocol: rank %d acknowledged segment %d, which rank %d never sent it", peer, id, S.wrank);
}

/* An acknowledgement from `peer`: its segment is free again, once the
 * receiver's copy out (its `consumed` record) is done. */
static void take_ack(int peer, const ack *a) {
    segment *s = find_segment(peer, a->id);
    S.dev->wait(S.consumed[peer], a->seq);
    MPI_CHECK(MPI_Wait(&s->msg_req, MPI_STATUS_IGNORE)); /* matched: the receiver has read it */
    s->busy = 0;
    if (!s->settled) { /* the receiver has opened it */
        S.dev->opened_by_all(s->mem);
        S.dev->opened_by_all(s->ev);
        s->settled = 1;
    }
    S.acked[peer]++;
}

static void recv_ack(int peer) {
    ack a;
    MPI_CHECK(MPI_Recv(&a, sizeof a, MPI_BYTE, peer, TAG_ACK, S.world, MPI_STATUS_IGNORE));
    take_ack(peer, &a);
}

/* The acknowledgements that have come, without waiting for any. */
static void poll_acks(int peer) {
    for (;;) {
        int flag = 0;
        MPI_CHECK(MPI_Iprobe(peer, TAG_ACK, S.world, &flag, MPI_STATUS_IGNORE));
        if (!flag) return;
        recv_ack(peer);
    }
}

/* A free segment for `count` floats to `peer`: one kept, or a new one. */
static segment *segment_for(int peer, size_t count) {
    poll_acks(peer);
    for (segment *s = S.to[peer]; s; s = s->next)
        if (!s->busy && s->floats >= count) return s;
    segment *s = calloc(1, sizeof *s);
    if (!s) lx_fatal("out of memory");
    char why[200] = "";
    s->floats = count;
    s->mem = S.dev->window_new(count * sizeof(float), &s->wh, why, sizeof why);
    if (s->mem) s->ev = S.dev->event_new(&s->eh, why, sizeof why);
    if (!s->mem || !s->ev)
        lx_fatal("shared-GPU protocol: rank %d could not make a window of %zu floats for rank %d: %s", S.wrank, count,
                 peer, why);
    s->id = S.next_id++;
    s->msg_req = MPI_REQUEST_NULL;
    s->next = S.to[peer];
    S.to[peer] = s;
    return s;
}

void lx_ipc_send(const float *buf, size_t count, int peer) {
    if (count == 0) return; /* no message on either side */
    segment *s = segment_for(peer, count);
    S.dev->copy(s->mem, buf, count);
    S.dev->record(s->ev, ++S.seq);
    s->msg = (ctl){.seq = S.seq, .count = count, .floats = s->floats, .id = s->id, .fresh = !s->announced};
    if (!s->announced) {
        s->msg.wh = s->wh;
        s->msg.eh = s->eh;
    }
    s->announced = 1;
    s->busy = 1;
    MPI_CHECK(MPI_Isend(&s->msg, sizeof s->msg, MPI_BYTE, peer, TAG_CTL, S.world, &s->msg_req));
    steps_run++;
}

static opened *open_segment(int peer, const ctl *c) {
    opened *o = calloc(1, sizeof *o);
    if (!o) lx_fatal("out of memory");
    char why[200] = "";
    o->id = c->id;
    o->floats = c->floats;
    o->mem = S.dev->window_open(&c->wh, c->floats * sizeof(float), why, sizeof why);
    if (o->mem) o->ev = S.dev->event_open(&c->eh, why, sizeof why);
    if (!o->mem || !o->ev)
        lx_fatal("shared-GPU protocol: rank %d could not open rank %d's window of %llu floats: %s", S.wrank, peer,
                 (unsigned long long)c->floats, why);
    o->next = S.from[peer];
    S.from[peer] = o;
    return o;
}

void lx_ipc_recv(float *buf, size_t count, int peer) {
    if (count == 0) return;
    ctl c;
    MPI_CHECK(MPI_Recv(&c, sizeof c, MPI_BYTE, peer, TAG_CTL, S.world, MPI_STATUS_IGNORE));
    if (c.count != count)
        lx_fatal("shared-GPU protocol: rank %d's message holds %llu floats, the receive on rank %d wants %zu", peer,
                 (unsigned long long)c.count, S.wrank, count);
    opened *o = NULL;
    if (c.fresh) o = open_segment(peer, &c);
    else
        for (o = S.from[peer]; o && o->id != c.id; o = o->next) {}
    if (!o) lx_fatal("shared-GPU protocol: rank %d names segment %d, which rank %d never opened", peer, c.id, S.wrank);
    S.dev->wait(o->ev, c.seq);
    S.dev->copy(buf, o->mem, count);
    ack a = {.seq = ++S.seq, .id = c.id};
    S.dev->record(S.consumed[S.wrank], a.seq);
    MPI_CHECK(MPI_Send(&a, sizeof a, MPI_BYTE, peer, TAG_ACK, S.world));
    S.received[peer]++;
    steps_run++;
}

int lx_ipc_recv_ready(int peer) {
    int flag = 0;
    MPI_CHECK(MPI_Iprobe(peer, TAG_CTL, S.world, &flag, MPI_STATUS_IGNORE));
    return flag;
}

/* ---------------- start and stop ---------------- */

/* Closes what this rank opened of its peers', then frees its own: every
 * rank at once (the barrier: no peer still has my memory open). */
static void close_and_free(void) {
    S.dev->finish();
    for (int q = 0; q < S.wsize; q++) {
        for (opened *o = S.from[q], *next; o; o = next) {
            next = o->next;
            S.dev->window_close(o->mem, o->floats * sizeof(float));
            S.dev->event_close(o->ev);
            free(o);
        }
        S.from[q] = NULL;
        if (q == S.wrank) continue;
        if (S.win[q]) S.dev->window_close(S.win[q], S.win_floats * sizeof(float));
        if (S.ready[q]) S.dev->event_close(S.ready[q]);
        if (S.done[q]) S.dev->event_close(S.done[q]);
        if (S.consumed[q]) S.dev->event_close(S.consumed[q]);
    }
    MPI_CHECK(MPI_Barrier(S.world));
    for (int q = 0; q < S.wsize; q++) {
        for (segment *s = S.to[q], *next; s; s = next) {
            next = s->next;
            /* a message never received: its control message dies with the communicator */
            if (s->msg_req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Request_free(&s->msg_req));
            S.dev->window_free(s->mem, s->floats * sizeof(float));
            S.dev->event_free(s->ev);
            free(s);
        }
        S.to[q] = NULL;
    }
    if (S.win[S.wrank]) S.dev->window_free(S.win[S.wrank], S.win_floats * sizeof(float));
    if (S.ready[S.wrank]) S.dev->event_free(S.ready[S.wrank]);
    if (S.done[S.wrank]) S.dev->event_free(S.done[S.wrank]);
    if (S.consumed[S.wrank]) S.dev->event_free(S.consumed[S.wrank]);
    MPI_CHECK(MPI_Comm_free(&S.world));
    memset(&S, 0, sizeof S);
}

/* Makes this rank's window and events: 0 with why[] on failure. */
static int export_mine(lx_ipc_handle *h, char *why, size_t why_size) {
    int me = S.wrank;
    S.win[me] = S.dev->window_new(S.win_floats * sizeof(float), &h[WIN], why, why_size);
    if (!S.win[me]) return 0;
    void **ev[] = {[READY] = &S.ready[me], [DONE] = &S.done[me], [CONSUMED] = &S.consumed[me]};
    for (int k = READY; k < N_HANDLES; k++)
        if (!(*ev[k] = S.dev->event_new(&h[k], why, why_size))) return 0;
    return 1;
}

/* Opens peer q's window and events (their handles in h): 0 with why[]. */
static int open_peer(int q, const lx_ipc_handle *h, char *why, size_t why_size) {
    S.win[q] = S.dev->window_open(&h[WIN], S.win_floats * sizeof(float), why, why_size);
    if (!S.win[q]) return 0;
    void **ev[] = {[READY] = &S.ready[q], [DONE] = &S.done[q], [CONSUMED] = &S.consumed[q]};
    for (int k = READY; k < N_HANDLES; k++)
        if (!(*ev[k] = S.dev->event_open(&h[k], why, why_size))) return 0;
    return 1;
}

int lx_ipc_start(const lx_ipc_dev *dev, MPI_Comm comm, int rank, int size, size_t window_floats, size_t chunk,
                 char *why, size_t why_size) {
    if (size > MAXW) lx_fatal("shared-GPU protocol: %d ranks, at most %d", size, MAXW);
    memset(&S, 0, sizeof S);
    S.dev = dev;
    S.wrank = rank;
    S.wsize = size;
    S.win_floats = window_floats ? window_floats : 1;
    S.chunk_asked = chunk;
    set_chunk();
    MPI_CHECK(MPI_Comm_dup(comm, &S.world));
    MPI_CHECK(MPI_Comm_set_errhandler(S.world, MPI_ERRORS_RETURN));

    char mine_why[256] = "";
    lx_ipc_handle h[N_HANDLES];
    memset(h, 0, sizeof h);
    int ok = export_mine(h, mine_why, sizeof mine_why);
    lx_ipc_handle *all = calloc((size_t)size * N_HANDLES, sizeof *all);
    if (!all) lx_fatal("out of memory");
    MPI_CHECK(MPI_Allgather(h, (int)sizeof h, MPI_BYTE, all, (int)sizeof h, MPI_BYTE, S.world));
    for (int q = 0; q < size && ok; q++) {
        if (q == rank) continue;
        char w[200] = "";
        if (!open_peer(q, all + (size_t)q * N_HANDLES, w, sizeof w)) {
            snprintf(mine_why, sizeof mine_why, "rank %d could not open rank %d's window: %s", rank, q, w);
            ok = 0;
        }
    }
    free(all);
    if (!ok && strncmp(mine_why, "rank ", 5) != 0) { /* a failure to export: say whose */
        char w[256];
        snprintf(w, sizeof w, "rank %d could not export its window: %s", rank, mine_why);
        snprintf(mine_why, sizeof mine_why, "%s", w);
    }
    /* The probe's verdict, the same on every rank: the first failing rank's reason. */
    int bad = ok ? INT_MAX : rank, first = INT_MAX;
    MPI_CHECK(MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, S.world));
    if (first == INT_MAX) {
        S.dev->opened_by_all(S.win[rank]);
        S.dev->opened_by_all(S.ready[rank]);
        S.dev->opened_by_all(S.done[rank]);
        S.dev->opened_by_all(S.consumed[rank]);
        S.active = 1;
        lx_ipc_use(MPI_COMM_NULL, 0, 0, NULL);
        return 1;
    }
    MPI_CHECK(MPI_Bcast(mine_why, (int)sizeof mine_why, MPI_CHAR, first, S.world));
    snprintf(why, why_size, "%s", mine_why);
    close_and_free();
    return 0;
}

void lx_ipc_stop(void) {
    if (!S.active) return;
    /* Every message a peer received from me has its acknowledgement on the
     * way: take them all (the peers' copies out are then done). */
    uint64_t got[MAXW];
    MPI_CHECK(MPI_Alltoall(S.received, 1, MPI_UINT64_T, got, 1, MPI_UINT64_T, S.world));
    for (int q = 0; q < S.wsize; q++)
        while (S.acked[q] < got[q])
            recv_ack(q);
    close_and_free();
}
