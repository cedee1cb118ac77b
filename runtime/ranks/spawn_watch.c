/*
 * spawn_watch.c: the parent's watch over a spawn's ranks, and the error
 * steps when it must stop them: a rank that died (its socket closed before
 * "done", or its slot says how), a rank that waits for one that returned
 * (STRAGGLER_GRACE), ranks on a host gone silent (HOST_SILENCE), ranks that
 * wait for each other (spawn_deadlock.c) or made no progress for
 * LECTERN_TIMEOUT, a spawn_exercise() past its time limit, and Ctrl-C.
 * Progress is a step, a waiting call entered or left, or any rank working
 * (inside no call that waits for others). docs/design.md says why.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"
#include "ranks/spawn_run.h"

/* Which rank failed first: the board's earliest recorded failure, else the
 * first socket that closed. -1 when none has failed. */
int lx_spawn_first_failure(spawn_run *run) {
    int first = -1;
    double at = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r]) continue;
        board_slot *s = run->board ? &run->board->slot[r] : NULL;
        int failed = s && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_FAILED;
        double when = failed ? s->failed_at : run->gone[r] ? run->gone_at[r] : 0;
        if (!failed && !run->gone[r]) continue;
        if (first < 0 || when < at) {
            first = r;
            at = when;
        }
    }
    return first;
}

/* A rank that died of an invalid memory access: the build with the
 * sanitizers names the access itself ("index -1 out of bounds for type
 * 'tensor *[8]'") where the signal can only name the line. Said only
 * where this build is not that one already. */
static char *fault_hint(const char *how) {
#if defined(__SANITIZE_ADDRESS__)
    (void)how;
    return strdup("");
#else
    if (!strstr(how, "SIGSEGV") && !strstr(how, "SIGBUS")) return strdup("");
    return lx_fmt(". `make run SAN=1 LECTURE=%s` runs it built with AddressSanitizer and UBSan, which name the bad "
                  "access (an index out of bounds, a pointer past its array)",
                  lx_lecture_name());
#endif
}

/* The failure paths below write the error steps, stop the pool (the next
 * spawn starts a fresh one), close the spawn's entry and leave the reason
 * in run->failure: spawn() ends the lecture with it, spawn_expect_failure()
 * goes on. */
void lx_spawn_fail_rank(spawn_run *run, int rank) {
    board_slot *s = run->board ? &run->board->slot[rank] : NULL;
    /* Its signal handler may still be writing where it was: wait (a little)
     * for the process to be gone. Meanwhile take the last steps of all. */
    double t0 = now_seconds();
    int pid = lx_pool_pid(rank);
    while (pid > 0 && kill(pid, 0) == 0 && !run->gone[rank] && now_seconds() - t0 < 2.0)
        lx_spawn_drain(run, 5);
    lx_spawn_drain_briefly(run);
    int better = lx_spawn_first_failure(run); /* the last messages may show an earlier failure */
    if (better >= 0) {
        rank = better;
        s = run->board ? &run->board->slot[rank] : NULL;
    }
    /* Copied: the board goes away with the pool. */
    char *frames = strdup(s ? (s->failure_frames[0] ? s->failure_frames : s->where) : "");
    int silent = !s || s->failure[0] == '\0';
    char *how = strdup(!silent ? s->failure
                       : s     ? "ended before its function returned, too abruptly to say how "
                                 "(SIGKILL, the out-of-memory killer, or _exit)"
                               : "ended before its function returned (it runs on another host: its own "
                                 "last words, if any, are on the console)");
    lx_pool_kill(); /* the next spawn starts a fresh pool */
    place at = lx_innermost(frames);
    const lx_frame *line = run->n_parent > 0 ? &run->parent[run->n_parent - 1] : NULL;
    char *hint = fault_hint(how);
    char *msg = at.known ? lx_fmt("%s:%d: rank %d of %d %s, in %s()%s%s", at.path, at.line, rank, run->world_size, how,
                                  at.function, silent ? " (the last line it reported)" : "", hint)
                : line   ? lx_fmt("%s:%d: rank %d of %d %s (no line of its own known: this is the spawn() "
                                    "line)",
                                  line->path, line->line, rank, run->world_size, how)
                         : lx_fmt("rank %d of %d %s (no lecture line known)%s", rank, run->world_size, how, hint);
    lx_spawn_error_step(run, rank, frames, msg);
    free(msg);
    free(hint);
    free(frames);
    lx_spawn_finish_entry(run, "failed");
    char *summary =
            at.known ? lx_fmt("spawn of %d rank%s failed: rank %d %s, %s %s:%d", run->world_size,
                              lx_plural(run->world_size), rank, how, silent ? "last seen at" : "at", at.path, at.line)
                     : lx_fmt("spawn of %d rank%s failed: rank %d %s", run->world_size, lx_plural(run->world_size),
                              rank, how);
    free(how);
    run->failure = summary;
}

void lx_spawn_fail_deadlock(spawn_run *run, double timeout) {
    lx_spawn_drain_briefly(run);
    int waiting = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r]) continue;
        waiting++;
        const char *frames = run->board ? run->board->slot[r].where : "";
        const char *op = run->board ? run->board->slot[r].operation : "";
        place at = lx_innermost(frames);
        char *msg = at.known ? lx_fmt("%s:%d: rank %d of %d made no progress for %g s, last in %s, in %s() "
                                      "(a deadlock? each rank waiting for another)",
                                      at.path, at.line, r, run->world_size, timeout, op, at.function)
                             : lx_fmt("rank %d of %d made no progress for %g s (no lecture line known)", r,
                                      run->world_size, timeout);
        lx_spawn_error_step(run, r, frames, msg);
        free(msg);
    }
    lx_pool_kill();
    lx_spawn_finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: %d rank%s made no progress for %g s (%s)", run->world_size,
                          lx_plural(run->world_size), waiting, lx_plural(waiting), timeout,
                          run->expect_failure ? "the timeout of spawn_expect_failure" : "LECTERN_TIMEOUT");
}

/* Every call rank r made toward rank q (q returned: its counters are final,
 * from its last copy, which a rank on another host sends just before
 * "done") is matched by q: each send of r met a receive of q and each
 * receive of r a send of q, or, for a wait in a collective (peer -1), q
 * entered at least as many collectives as r. */
static int calls_matched(const spawn_run *run, int r, int q, int peer) {
    const board_slot *a = &run->board->slot[r], *b = &run->board->slot[q];
    if (peer < 0) return a->collectives <= b->collectives;
    return a->recvs_from[q] <= b->sends_to[r] && a->sends_to[q] <= b->recvs_from[r];
}

/* Waiting rank r waits for a rank that returned and never will be met.
 *
 * A send or receive: the returned rank did not match all of r's messages
 * with it (the board counts them per peer). One that did is not what r
 * waits for: r waits for data that rank already sent, on the wire between
 * hosts or, on one host, for r's own turn on a core (seen: a rank of a 1F1B
 * pipeline starved for over STRAGGLER_GRACE at load 10 on 2 cores, its
 * peer's last gradient already sent); only LECTERN_TIMEOUT may call that a
 * hang.
 *
 * A collective: on one host every such wait counts (a rank cannot leave a
 * collective before the others enter it, and STRAGGLER_GRACE covers one just
 * leaving its last); the board counts collectives of every group together,
 * so equal counts do not say the returned rank entered this one. Between
 * hosts a returned rank that entered as many is taken to be sending r's
 * data, as above; one that entered fewer never will. */
static int waits_on_returned(const spawn_run *run, int r) {
    int peer = run->board->slot[r].peer;
    if (peer >= run->world_size) return 0;
    for (int q = 0; q < run->world_size; q++) {
        if (!run->done[q] || (peer >= 0 && q != peer)) continue;
        int one_host = !(on_other_host(r) || on_other_host(q));
        if ((peer < 0 && one_host) || !calls_matched(run, r, q, peer)) return 1;
    }
    return 0;
}

/* "1, 2 and 3" */
static void list_ranks(lx_sb *b, const spawn_run *run, int peer) {
    int n = 0, total = 0;
    for (int q = 0; q < run->world_size; q++)
        if (run->done[q] && (peer < 0 || q == peer)) total++;
    for (int q = 0; q < run->world_size; q++) {
        if (!run->done[q] || (peer >= 0 && q != peer)) continue;
        lx_sb_printf(b, "%s%d", n == 0 ? "" : n == total - 1 ? " and " : ", ", q);
        n++;
    }
}

/* A rank still running that waits for a rank that returned. */
static int still_stuck(const spawn_run *run) {
    for (int r = 0; r < run->world_size; r++)
        if (!run->done[r] && !run->gone[r] && __atomic_load_n(&run->board->slot[r].waiting, __ATOMIC_ACQUIRE) &&
            waits_on_returned(run, r))
            return 1;
    return 0;
}

/* Stops the spawn, unless the ranks' last messages show that the waiting
 * rank finished after all (a rank starved of its core on a busy machine can
 * sit in its last wait past STRAGGLER_GRACE and then return normally). */
static void fail_stragglers(spawn_run *run) {
    lx_spawn_drain_briefly(run);
    if (!still_stuck(run)) {
        run->stuck_since = 0;
        return;
    }
    lx_sb summary = {0};
    int waiting = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r]) continue;
        board_slot *s = &run->board->slot[r];
        place at = lx_innermost(s->where);
        lx_sb b = {0};
        int peer = s->peer;
        if (at.known) lx_sb_printf(&b, "%s:%d: ", at.path, at.line);
        lx_sb_printf(&b, "rank %d of %d waits in %s%s", r, run->world_size, s->operation, call_parens(s->operation));
        if (at.known) lx_sb_printf(&b, " in %s()", at.function);
        lx_sb_printf(&b, " for rank%s ", peer < 0 && run->n_done > 1 ? "s" : "");
        list_ranks(&b, run, peer);
        lx_sb_printf(&b, ", which returned from the spawned function already: %s",
                     peer < 0 ? "a collective the other ranks never make"
                              : "a send or receive that rank never matches");
        lx_spawn_error_step(run, r, s->where, b.s);
        free(b.s);
        waiting++;
        lx_sb_printf(&summary, "%srank %d waits in %s", waiting > 1 ? "; " : "", r, s->operation);
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    lx_sb returned = {0};
    list_ranks(&returned, run, -1);
    lx_pool_kill();
    lx_spawn_finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: rank%s %s returned from the function while %s", run->world_size,
                          lx_plural(run->world_size), run->n_done > 1 ? "s" : "", returned.s, summary.s);
    free(returned.s);
    free(summary.s);
}

/* How long a wait for a returned rank must last before it is reported: a
 * rank that is leaving the last collective (its peer returned from it a
 * moment earlier) still shows as waiting for a few microseconds, or for
 * longer when it loses its core; 1.5 s covers that and keeps the report
 * within 2 s. */
#define STRAGGLER_GRACE 1.5

/* Ranks on another host that have said nothing for HOST_SILENCE seconds
 * (their relay speaks every BOARD_KEEPALIVE seconds while they run): their
 * host is down, or the link to it. Nothing closes their sockets then (TCP
 * keeps a dead link's connection for many minutes), and the ranks here
 * wait in MPI for them: without this the lecture would wait for its
 * timeout and blame a deadlock. One error step per silent rank, at its last
 * known line, and the spawn fails naming the hosts. */
static int silent_remote(const spawn_run *run, int r, double now) {
    return !run->done[r] && !run->gone[r] && lx_pool_pid(r) == 0 && lx_pool_size() > r &&
           now - run->heard[r] > HOST_SILENCE;
}

static int any_silent(const spawn_run *run, double now) {
    for (int r = 0; r < run->world_size; r++)
        if (silent_remote(run, r, now)) return 1;
    return 0;
}

static void fail_hosts_lost(spawn_run *run) {
    /* What reached this process's sockets while it was itself off its
     * core (a busy machine) is heard first: silence is judged after it. */
    lx_spawn_drain(run, 0);
    if (!any_silent(run, now_seconds())) return;
    lx_spawn_drain_briefly(run);
    double now = now_seconds();
    if (!any_silent(run, now)) return;
    lx_sb hosts = {0}, ranks = {0};
    int n = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (!silent_remote(run, r, now)) continue;
        const char *frames = run->board ? run->board->slot[r].where : "";
        place at = lx_innermost(frames);
        lx_sb b = {0};
        if (at.known) lx_sb_printf(&b, "%s:%d: ", at.path, at.line);
        lx_sb_printf(&b, "rank %d of %d on host %s: nothing heard from it for %.0f s", r, run->world_size,
                     lx_pool_host(r), now - run->heard[r]);
        if (at.known) lx_sb_printf(&b, ", last seen in %s()", at.function);
        lx_sb_str(&b, ": the host is down or cut off (its ranks report every 0.5 s while they run)");
        lx_spawn_error_step(run, r, frames, b.s);
        free(b.s);
        if (!strstr(hosts.s ? hosts.s : "", lx_pool_host(r)))
            lx_sb_printf(&hosts, "%s%s", hosts.s ? ", " : "", lx_pool_host(r));
        lx_sb_printf(&ranks, "%s%d", n++ ? ", " : "", r);
    }
    lx_pool_kill();
    lx_spawn_finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s failed: host %s lost (rank%s %s silent for %.0f s)", run->world_size,
                          lx_plural(run->world_size), hosts.s ? hosts.s : "?", n == 1 ? "" : "s",
                          ranks.s ? ranks.s : "", HOST_SILENCE);
    free(hosts.s);
    free(ranks.s);
}

/* Every 20 ms: did any rank move, is any rank gone without "done", does a
 * rank wait for one that returned, is any rank working (not waiting for
 * others: computing, in its own code or the runtime's), and is every rank
 * on another host still heard from? */
void lx_spawn_watch_board(spawn_run *run, double now) {
    if (any_silent(run, now)) {
        fail_hosts_lost(run);
        if (run->failure) return;
    }
    int failed = lx_spawn_first_failure(run);
    if (run->board) {
        unsigned sum = 0;
        int working = 0, stuck = 0;
        for (int r = 0; r < run->world_size; r++) {
            board_slot *s = &run->board->slot[r];
            sum += __atomic_load_n(&s->progress, __ATOMIC_ACQUIRE);
            int pid = lx_pool_pid(r);
            if (failed < 0 && !run->done[r] && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) failed = r;
            if (run->done[r] || run->gone[r]) continue;
            if (!__atomic_load_n(&s->waiting, __ATOMIC_ACQUIRE)) working = 1;
            else if (waits_on_returned(run, r)) stuck = 1;
        }
        if (sum != run->last_progress_sum) {
            run->last_progress_sum = sum;
            run->last_progress = now;
        }
        /* A working rank is progress: only ranks that all wait can deadlock. */
        if (working) run->last_progress = now;
        if (!stuck || sum != run->stuck_progress) {
            run->stuck_since = stuck ? now : 0;
            run->stuck_progress = sum;
        } else if (failed < 0 && now - run->stuck_since >= STRAGGLER_GRACE) {
            fail_stragglers(run);
            if (run->failure) return;
        }
        if (failed < 0 && !working) {
            lx_spawn_watch_cycle(run, now);
            if (run->failure) return;
        }
    }
    if (failed >= 0) lx_spawn_fail_rank(run, failed);
}

/* ---- where each rank is, when the lecture must stop the ranks ---- */

/* When each rank last moved (a step, a call entered or left): how long it
 * has been where it is, for the time limit's report. */
void lx_spawn_note_moves(spawn_run *run, double now) {
    if (!run->board) return;
    for (int r = 0; r < run->world_size; r++) {
        unsigned p = __atomic_load_n(&run->board->slot[r].progress, __ATOMIC_ACQUIRE);
        if (p != run->moved_progress[r]) {
            run->moved_progress[r] = p;
            run->moved_at[r] = now;
        }
    }
}

/* A rank that works has written no line since its last step: asks each
 * working rank where it is (SIGUSR2: its handler writes its stack on the
 * board and raises `sampled`), and waits up to 1 s for the answers.
 * asked[r]: rank r was asked. */
static void ask_working_ranks(spawn_run *run, int *asked) {
    for (int r = 0; r < run->world_size; r++) {
        asked[r] = 0;
        board_slot *s = run->board ? &run->board->slot[r] : NULL;
        int pid = lx_pool_pid(r);
        if (!s || run->done[r] || run->gone[r] || pid <= 0 || __atomic_load_n(&s->waiting, __ATOMIC_ACQUIRE)) continue;
        __atomic_store_n(&s->sampled, 0, __ATOMIC_RELEASE);
        asked[r] = kill(pid, SIGUSR2) == 0;
    }
    for (double t0 = now_seconds(); now_seconds() - t0 < 1.0;) {
        int pending = 0;
        for (int r = 0; r < run->world_size; r++)
            if (asked[r] && !__atomic_load_n(&run->board->slot[r].sampled, __ATOMIC_ACQUIRE)) pending = 1;
        if (!pending) break;
        lx_sleep_seconds(0.01);
    }
}

/* Rank r's place: the stack it gave when asked, else the last line it
 * reported. *sampled: 1 when it is the former. */
static const char *rank_frames(const spawn_run *run, int r, const int *asked, int *sampled) {
    board_slot *s = run->board ? &run->board->slot[r] : NULL;
    *sampled = s && asked[r] && s->sampled && s->sample[0];
    return !s ? "" : *sampled ? s->sample : s->where;
}

/* Ctrl-C (or SIGTERM) while the ranks run: one error step per rank saying
 * where it is (the call it waits in and for whom, or the line it last
 * reported while working), then the pool is stopped (spawn.c raises the
 * signal again: crash.c adds the lecture's own step and writes the trace). */
void lx_spawn_report_interrupted(spawn_run *run, int sig) {
    const char *name = sig == SIGINT ? "SIGINT (interrupted)" : "SIGTERM (terminated)";
    lx_spawn_drain_briefly(run);
    int asked[LECTERN_MAX_WORLD];
    ask_working_ranks(run, asked);
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r] || run->gone[r]) continue;
        board_slot *s = run->board ? &run->board->slot[r] : NULL;
        int sampled;
        const char *frames = rank_frames(run, r, asked, &sampled);
        place at = lx_innermost(frames);
        lx_sb b = {0};
        if (at.known) lx_sb_printf(&b, "%s:%d: ", at.path, at.line);
        lx_sb_printf(&b, "%s: rank %d of %d ", name, r, run->world_size);
        int waiting = s && __atomic_load_n(&s->waiting, __ATOMIC_ACQUIRE);
        if (waiting) {
            lx_sb_printf(&b, "was waiting in %s%s", s->operation, call_parens(s->operation));
            if (at.known) lx_sb_printf(&b, " in %s()", at.function);
            if (s->peer >= 0) lx_sb_printf(&b, " for rank %d", s->peer);
            else lx_sb_str(&b, " for every rank (a collective)");
        } else if (at.known) {
            lx_sb_printf(&b, "was working in %s()%s", at.function, sampled ? "" : " (the last line it reported)");
        } else {
            lx_sb_str(&b, "was working (no lecture line known)");
        }
        lx_spawn_error_step(run, r, frames, b.s);
        free(b.s);
    }
    lx_pool_kill();
    lx_spawn_finish_entry(run, "failed");
}

/* "exercise 1" for "exercise 1:", or "the spawn". */
static char *run_name(const spawn_run *run) {
    if (!run->exercise) return strdup("the spawn");
    int len = (int)strlen(run->exercise);
    while (len > 0 && (run->exercise[len - 1] == ':' || run->exercise[len - 1] == ' '))
        len--;
    return lx_fmt("%.*s", len, run->exercise);
}

/* A spawn_exercise() whose ranks still run after its time limit: a loop
 * that never ends, in one rank or all, which no deadlock detector calls a
 * deadlock (a working rank is progress). One error step per rank still
 * running: where it is, working or waiting (and for whom), and for how
 * long it has been there (since its last step or call). */
void lx_spawn_fail_time_limit(spawn_run *run, double now) {
    lx_spawn_drain_briefly(run);
    int asked[LECTERN_MAX_WORLD];
    ask_working_ranks(run, asked);
    char *what = run_name(run);
    lx_sb summary = {0};
    int n = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r] || run->gone[r]) continue;
        board_slot *s = run->board ? &run->board->slot[r] : NULL;
        int sampled;
        const char *frames = rank_frames(run, r, asked, &sampled);
        place at = lx_innermost(frames);
        double there = now - run->moved_at[r];
        lx_sb b = {0};
        if (at.known) lx_sb_printf(&b, "%s:%d: ", at.path, at.line);
        lx_sb_printf(&b, "%s ran past its time limit of %g s: rank %d of %d ", what, run->limit, r, run->world_size);
        int waiting = s && __atomic_load_n(&s->waiting, __ATOMIC_ACQUIRE);
        if (waiting) {
            lx_sb_printf(&b, "has been waiting in %s%s", s->operation, call_parens(s->operation));
            if (at.known) lx_sb_printf(&b, " in %s()", at.function);
            if (s->peer >= 0) lx_sb_printf(&b, " for rank %d", s->peer);
            else lx_sb_str(&b, " for every rank (a collective)");
            lx_sb_printf(&b, " for %.1f s", there);
        } else {
            if (at.known) lx_sb_printf(&b, "has been working in %s()", at.function);
            else lx_sb_str(&b, "has been working (no lecture line known)");
            lx_sb_printf(&b, " for %.1f s%s: a loop that never ends?", there,
                         at.known && !sampled ? " (the last line it reported)" : "");
        }
        lx_spawn_error_step(run, r, frames, b.s);
        free(b.s);
        lx_sb_printf(&summary, "%srank %d %s", n++ ? "; " : "", r, waiting ? "waiting" : "working");
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    lx_pool_kill();
    lx_spawn_finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: %s ran past its time limit of %g s (%s)", run->world_size,
                          lx_plural(run->world_size), what, run->limit, summary.s ? summary.s : "no rank left");
    free(summary.s);
    free(what);
}
