/*
 * ranks/spawn_run.h: one spawn as the parent sees it, shared by the files of
 * the parent's spawn() and by no other (ranks.h is the layer's contract):
 *
 *   spawn.c           the calls, the backend's note, the pool, the hand-out,
 *                     and the loop that waits for the ranks
 *   spawn_watch.c     what stops a spawn: a rank that died, stragglers, a
 *                     host gone silent, no progress, a time limit, Ctrl-C
 *   spawn_deadlock.c  ranks that wait for each other, proven from the board
 *   spawn_relay.c     the ranks' messages into the trace, the error steps
 *                     the parent writes for a rank, the spawn's entry
 *
 * Each file calls only those listed after it, never one before.
 */
#ifndef LECTERN_SPAWN_RUN_H
#define LECTERN_SPAWN_RUN_H

#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

typedef struct held_step held_step; /* both defined in spawn_relay.c */
typedef struct check_site check_site;

/* One spawn, as the parent sees it. */
typedef struct spawn_run {
    int id, world_size;
    lx_backend backend;
    int shared_ipc; /* lx_shared_ipc_mode */
    lx_frame parent[LX_MAX_FRAMES];
    int n_parent;
    cJSON *entry; /* its object in the trace's "spawns" */
    double started;
    board *board; /* the pool's; NULL without shared memory */
    int done[LECTERN_MAX_WORLD];
    int gone[LECTERN_MAX_WORLD]; /* its socket closed before "done" */
    double gone_at[LECTERN_MAX_WORLD];
    double heard[LECTERN_MAX_WORLD];    /* when its last message came (a rank on another host) */
    unsigned copies[LECTERN_MAX_WORLD]; /* board copies relayed so far (a rank on another host) */
    int n_done;
    unsigned last_progress_sum;
    double last_progress;
    double stuck_since;      /* a rank waits for one that returned: since when (0: none) */
    unsigned stuck_progress; /* the progress sum then */
    unsigned cycle_key;      /* the deadlock seen at the last look (0: none), see lx_spawn_watch_cycle */
    double cycle_since;
    unsigned cycle_copies[LECTERN_MAX_WORLD]; /* copies[] when it was first seen */
    held_step *held;                          /* steps received, not yet appended (see lx_spawn_release) */
    int n_held, cap_held;
    unsigned long seq;
    cJSON **folds;     /* the PASS step of each check site and turn so far (fold_pass) */
    int *fold_turn;    /* its turn at its site */
    check_site *sites; /* where the ranks made checks, and how many each */
    int n_sites;
    char **fold_lines; /* each one's own line, after "PASS: " */
    int *fold_rank;    /* the rank whose numbers it shows, -1 while all ranks' lines agree */
    int n_folds, cap_folds;
    int expect_failure;                         /* spawn_expect_failure(): its errors are the lesson */
    char *failure;                              /* why it failed, one sentence (NULL while it has not) */
    const char *exercise;                       /* spawn_exercise(): the exercise it runs ("exercise 1:"), else NULL */
    double limit;                               /* spawn_exercise(): seconds the ranks may run (0: no limit) */
    double work_started;                        /* when the ranks got their work */
    unsigned moved_progress[LECTERN_MAX_WORLD]; /* each rank's board progress at the last look ... */
    double moved_at[LECTERN_MAX_WORLD];         /* ... and when it last changed: how long it has been where it is */
    int checks_passed, checks_failed;           /* the checks its ranks made */
    /* Message links (trace.h, lx_links_match): rank r's k-th step of this
     * spawn is the trace's step step_at[r][k]; links[r] its calls' record. */
    int *step_at[LECTERN_MAX_WORLD];
    int n_step_at[LECTERN_MAX_WORLD], cap_step_at[LECTERN_MAX_WORLD];
    int steps_from[LECTERN_MAX_WORLD]; /* MSG_STEPs received from rank r's socket */
    char *links[LECTERN_MAX_WORLD];
    int *fold_index; /* the trace index of folds[i] */
} spawn_run;

/* "()" after a call's name on the board, unless it carries its own
 * ("dist_all_reduce_in(group {0,1})"). */
static inline const char *call_parens(const char *operation) { return strchr(operation, '(') ? "" : "()"; }

/* Rank r runs on another host than the lecture: its slot on the board is
 * the last copy its relay sent (relay_board in spawn_rank.c). */
static inline int on_other_host(int r) { return lx_pool_size() > r && lx_pool_pid(r) == 0; }

/* ---- spawn_relay.c ---- */

/* Closes the spawn's entry in "spawns": its status, seconds and checks. */
void lx_spawn_finish_entry(spawn_run *run, const char *status);
/* Waits up to `wait_ms` for the ranks' messages and takes every one there
 * is; returns how many were progress. */
int lx_spawn_drain(spawn_run *run, int wait_ms);
/* The ranks' last messages, given a moment to arrive, all appended. */
void lx_spawn_drain_briefly(spawn_run *run);
/* Appends the held steps older than HOLD_SECONDS (all of them when `all`). */
void lx_spawn_release(spawn_run *run, int all);
/* An error step located in a rank, at `frames_text`: the run is failed by
 * it unless the spawn expects failure. */
void lx_spawn_error_step(spawn_run *run, int rank, const char *frames_text, const char *message);
void lx_spawn_free_run(spawn_run *run);

/* ---- spawn_deadlock.c ---- */

/* Every 20 ms while no rank works: a deadlock proven from the board, seen
 * for DEADLOCK_CONFIRM, stops the spawn (run->failure is then set). */
void lx_spawn_watch_cycle(spawn_run *run, double now);

/* ---- spawn_watch.c ----
 *
 * Each fail_* writes the error steps, stops the pool (the next spawn starts
 * a fresh one), closes the spawn's entry and leaves the reason in
 * run->failure. */

/* Which rank failed first, or -1. */
int lx_spawn_first_failure(spawn_run *run);
void lx_spawn_fail_rank(spawn_run *run, int rank);
/* No progress for `timeout` seconds. */
void lx_spawn_fail_deadlock(spawn_run *run, double timeout);
/* Every 20 ms: the board read, and the spawn stopped when it must. */
void lx_spawn_watch_board(spawn_run *run, double now);
/* When each rank last moved, for the time limit's report. */
void lx_spawn_note_moves(spawn_run *run, double now);
/* A spawn_exercise() past its time limit. */
void lx_spawn_fail_time_limit(spawn_run *run, double now);
/* Ctrl-C or SIGTERM while the ranks run: an error step per rank saying
 * where it is, the pool stopped, the entry closed (spawn.c then raises the
 * signal again). */
void lx_spawn_report_interrupted(spawn_run *run, int sig);

#endif /* LECTERN_SPAWN_RUN_H */
