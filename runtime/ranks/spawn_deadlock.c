/*
 * spawn_deadlock.c: ranks of a spawn that wait for each other in a cycle,
 * proven from the status board's counters and named at once, each with
 * what it waits for and what to do about it. docs/design.md ("Deadlocks
 * proven from the board") says why this needs no timeout.
 */
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"
#include "ranks/spawn_run.h"

/* ---- deadlocks proven from the board ----
 *
 * A rank that waits writes on the board what its call needs from the others
 * (LX_NEED_*, comm_agree.c): rank p to post the receive of its k-th send to
 * it, rank p to start its k-th send to it, or every rank to enter its k-th
 * collective. Each rank also counts, on its own slot, the receives it has
 * posted, the sends it has started and the collectives it has entered.
 * From one consistent picture of every slot:
 *
 *   a rank is *blocked* when it waits and a need is not met by the others'
 *   counters; a blocked rank whose unmet need can only be met by a rank that
 *   is itself blocked can never go on.
 *
 * Keep, among the blocked ranks, those with an unmet need that some other
 * kept rank must meet, until nothing changes: what remains (if anything)
 * is a set of ranks each waiting for another of the set, a cycle no
 * timing can break. A rank that works, waits in a call no counter
 * describes, or waits for a need already met, is never in it: slow
 * compute is left to LECTERN_TIMEOUT. This does not depend on how the
 * backend makes progress: the counters move when the lecture's thread
 * makes a call, and only then. */

typedef struct wait_view {
    int running, waiting;
    int kind[2], peer[2], seq[2];
    int sends_to[LECTERN_MAX_WORLD], recvs_from[LECTERN_MAX_WORLD], collectives;
} wait_view;

/* Copies what the detector needs from every slot. Returns 0 when a rank was
 * writing meanwhile (its version odd or changed): try again next time. Each
 * slot's version was the same at the first and the last read, so there was
 * a moment between them when every slot held what was copied. */
static int board_picture(const spawn_run *run, wait_view *v) {
    unsigned version[LECTERN_MAX_WORLD];
    for (int r = 0; r < run->world_size; r++) {
        version[r] = __atomic_load_n(&run->board->slot[r].version, __ATOMIC_ACQUIRE);
        if (version[r] & 1u) return 0;
    }
    for (int r = 0; r < run->world_size; r++) {
        const board_slot *s = &run->board->slot[r];
        wait_view *w = &v[r];
        w->running = !run->done[r] && !run->gone[r] && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_RUNNING;
        w->waiting = s->waiting;
        for (int i = 0; i < 2; i++) {
            w->kind[i] = s->need_kind[i];
            w->peer[i] = s->need_peer[i];
            w->seq[i] = s->need_seq[i];
        }
        memcpy(w->sends_to, s->sends_to, sizeof w->sends_to);
        memcpy(w->recvs_from, s->recvs_from, sizeof w->recvs_from);
        w->collectives = s->collectives;
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    for (int r = 0; r < run->world_size; r++)
        if (__atomic_load_n(&run->board->slot[r].version, __ATOMIC_ACQUIRE) != version[r]) return 0;
    return 1;
}

/* Rank q stands in the way of need i of rank r: q has not yet made the
 * call it needs. */
static int in_the_way(const spawn_run *run, const wait_view *v, int r, int i, int q) {
    int p = v[r].peer[i], k = v[r].seq[i];
    switch (v[r].kind[i]) {
    case LX_NEED_RECV_POSTED: return q == p && p >= 0 && p < run->world_size && v[p].recvs_from[r] < k;
    case LX_NEED_SEND_STARTED: return q == p && p >= 0 && p < run->world_size && v[p].sends_to[r] < k;
    case LX_NEED_COLLECTIVE: return v[q].collectives < k;
    default: return 0;
    }
}

/* Fills stuck[] with the deadlocked ranks; returns how many (0: none). */
static int find_deadlock(const spawn_run *run, const wait_view *v, int *stuck) {
    int w = run->world_size;
    for (int r = 0; r < w; r++) {
        stuck[r] = 0;
        if (!v[r].running || !v[r].waiting) continue;
        for (int i = 0; i < 2; i++)
            for (int q = 0; q < w; q++)
                if (in_the_way(run, v, r, i, q)) stuck[r] = 1;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < w; r++) {
            if (!stuck[r]) continue;
            int blocked_by_stuck = 0;
            for (int i = 0; i < 2 && !blocked_by_stuck; i++)
                for (int q = 0; q < w; q++)
                    if (stuck[q] && in_the_way(run, v, r, i, q)) blocked_by_stuck = 1;
            if (!blocked_by_stuck) {
                stuck[r] = 0;
                changed = 1;
            }
        }
    }
    int n = 0;
    for (int r = 0; r < w; r++)
        n += stuck[r];
    return n;
}

/* "for rank 1 to post the receive of this send" */
static void say_need(lx_sb *b, const spawn_run *run, const wait_view *v, int r, int i, const int *stuck) {
    int p = v[r].peer[i];
    switch (v[r].kind[i]) {
    case LX_NEED_RECV_POSTED: lx_sb_printf(b, "for rank %d to post the receive of this send", p); break;
    case LX_NEED_SEND_STARTED: lx_sb_printf(b, "for rank %d to send", p); break;
    case LX_NEED_COLLECTIVE: {
        int n = 0;
        lx_sb_str(b, "for rank");
        for (int q = 0; q < run->world_size; q++)
            if (stuck[q] && in_the_way(run, v, r, i, q)) n++;
        lx_sb_str(b, n > 1 ? "s " : " ");
        int k = 0;
        for (int q = 0; q < run->world_size; q++)
            if (stuck[q] && in_the_way(run, v, r, i, q)) {
                lx_sb_printf(b, "%s%d", k == 0 ? "" : k == n - 1 ? " and " : ", ", q);
                k++;
            }
        lx_sb_printf(b, " to reach this collective, which every rank must call");
        break;
    }
    default: break;
    }
}

/* The unmet need of r that a stuck rank stands in the way of. */
static int blocking_need(const spawn_run *run, const wait_view *v, int r, const int *stuck) {
    for (int i = 0; i < 2; i++)
        for (int q = 0; q < run->world_size; q++)
            if (stuck[q] && in_the_way(run, v, r, i, q)) return i;
    return 0;
}

/* What to do about it, from the shape of the cycle. */
static const char *advice(const spawn_run *run, const wait_view *v, const int *stuck) {
    int sends = 0, recvs = 0, colls = 0, n = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (!stuck[r]) continue;
        int k = v[r].kind[blocking_need(run, v, r, stuck)];
        sends += k == LX_NEED_RECV_POSTED;
        recvs += k == LX_NEED_SEND_STARTED;
        colls += k == LX_NEED_COLLECTIVE;
        n++;
    }
    if (colls)
        return "a collective returns only once every rank of the spawn has called it: make every rank call the "
               "same collectives in the same order";
    if (sends && !recvs)
        return n == 2 ? "both send first, and a send returns only once its receive is posted, at any size (the "
                        "transport might buffer a small message, a large one never): post the receive first "
                        "(dist_irecv, then dist_send, then dist_wait) or swap with dist_sendrecv"
                      : "every one of them sends first, and a send returns only once its receive is posted, at "
                        "any size (the transport might buffer a small message, a large one never): post the "
                        "receive first (dist_irecv, then dist_send, then dist_wait) or use dist_sendrecv";
    if (recvs && !sends)
        return n == 2 ? "both receive first: one must send first, or swap with dist_sendrecv"
                      : "every one of them receives first: one must send first, or use dist_sendrecv";
    return "each waits for a call another of them never reaches";
}

static void fail_cycle(spawn_run *run, const wait_view *v, const int *stuck) {
    lx_spawn_drain_briefly(run);
    const char *why = advice(run, v, stuck);
    int n_stuck = 0;
    for (int r = 0; r < run->world_size; r++)
        n_stuck += stuck[r];
    lx_sb summary = {0};
    int n = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (!stuck[r]) continue;
        const board_slot *s = &run->board->slot[r];
        place at = lx_innermost(s->where);
        int i = blocking_need(run, v, r, stuck);
        lx_sb b = {0};
        if (at.known) lx_sb_printf(&b, "%s:%d: ", at.path, at.line);
        lx_sb_printf(&b, "deadlock: rank %d of %d waits in %s%s", r, run->world_size, s->operation,
                     call_parens(s->operation));
        if (at.known) lx_sb_printf(&b, " in %s()", at.function);
        lx_sb_str(&b, " ");
        say_need(&b, run, v, r, i, stuck);
        /* Where each rank it waits for is, and what that one waits for. */
        for (int q = 0; q < run->world_size; q++) {
            if (q == r || !stuck[q] || !in_the_way(run, v, r, i, q)) continue;
            const board_slot *t = &run->board->slot[q];
            place qa = lx_innermost(t->where);
            lx_sb_printf(&b, "; rank %d waits in %s%s", q, t->operation, call_parens(t->operation));
            if (qa.known) lx_sb_printf(&b, " at %s:%d", qa.path, qa.line);
            lx_sb_str(&b, " ");
            say_need(&b, run, v, q, blocking_need(run, v, q, stuck), stuck);
        }
        lx_sb_printf(&b, ". %s can go on: %s", n_stuck == 2 ? "Neither" : "None of them", why);
        lx_spawn_error_step(run, r, s->where, b.s);
        free(b.s);
        lx_sb_printf(&summary, "%srank %d waits in %s", n++ ? "; " : "", r, s->operation);
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    /* The spawn's time ends when the deadlock is named, not when the pool
     * (mpirun and its ranks, reaped) is gone. */
    lx_spawn_finish_entry(run, "failed");
    lx_pool_kill();
    run->failure = lx_fmt("spawn of %d rank%s stopped: deadlock, %d rank%s waiting for each other (%s)",
                          run->world_size, lx_plural(run->world_size), n, lx_plural(n), summary.s);
    free(summary.s);
}

/* How long one deadlock must be seen, unchanged, before it is reported:
 * the proof needs one picture, this is a margin against a picture taken
 * wrong. Well inside the 2 s a student waits. */
#define DEADLOCK_CONFIRM 0.2

/* A rank on another host is known by its last relayed copy, which can be
 * old when it is read: a slow link holds back the copy that would show the
 * rank moving on, and a picture mixing such a copy with the current slots
 * of this host's ranks could show a cycle that never existed at any one
 * moment. So a deadlock that involves such a rank is reported only once
 * DEADLOCK_REMOTE_COPIES copies of each of those ranks came after it was
 * first seen, all the same (its key unchanged): the relay sends a copy at
 * least every BOARD_KEEPALIVE seconds and at once on a change, so each
 * such rank stood still for that long on its own clock, and the picture
 * held for that long here too. About 1 s added to such a report. */
#define DEADLOCK_REMOTE_COPIES 2

static int remote_copies_confirm(const spawn_run *run, const int *stuck) {
    for (int r = 0; r < run->world_size; r++)
        if (stuck[r] && on_other_host(r) && run->copies[r] - run->cycle_copies[r] < DEADLOCK_REMOTE_COPIES) return 0;
    return 1;
}

void lx_spawn_watch_cycle(spawn_run *run, double now) {
    wait_view v[LECTERN_MAX_WORLD];
    int stuck[LECTERN_MAX_WORLD];
    if (!board_picture(run, v)) return;
    if (find_deadlock(run, v, stuck) == 0) {
        run->cycle_key = 0;
        return;
    }
    /* The same deadlock: the same ranks, nobody having written since. */
    unsigned key = 1;
    for (int r = 0; r < run->world_size; r++)
        key = key * 31u + (stuck[r] ? 7u : 1u) * (__atomic_load_n(&run->board->slot[r].version, __ATOMIC_ACQUIRE) + 1u);
    if (key != run->cycle_key) {
        run->cycle_key = key;
        run->cycle_since = now;
        memcpy(run->cycle_copies, run->copies, sizeof run->copies);
        return;
    }
    if (now - run->cycle_since >= DEADLOCK_CONFIRM && remote_copies_confirm(run, stuck)) fail_cycle(run, v, stuck);
}
