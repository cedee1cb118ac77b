/*
 * spawn.c: real ranks whose steps land in this trace.
 *
 * spawn(fn, 4, args, size) in the lecture (the parent):
 *
 *   1. Picks the backend (NCCL when every rank can have a GPU of its own,
 *      else Open MPI on host memory) and says so in a note.
 *   2. Makes sure the pool of rank processes is up with at least 4 ranks
 *      (pool.c: started with mpirun at the first spawn of the lecture,
 *      reused by every later one).
 *   3. Hands pool ranks 0..3 the spawn description (which function, the
 *      backend, the clock) and the args bytes over their sockets (wire.c).
 *   4. Each rank runs fn(rank, 4, its own copy of args) over a communicator
 *      of those 4 ranks (spawn_rank.c). Its steps (note(), ...) come back as
 *      JSON text; the parent puts its own frames down to the spawn() line in
 *      front of each step's stack, stamps rank / world_size / spawn and
 *      appends it to the trace.
 *   5. A rank says "done" when fn returns; spawn() returns when all have.
 *      The ranks go back to waiting for the next spawn.
 *
 * Failures must be loud and lose nothing. Each rank also owns a slot on a
 * small status board, shared memory on the parent's host: the rank writes
 * where it is before each call that can block (lx_rank_where), and, from its
 * signal handler or exit hook, how it died. Writing to memory is safe in a
 * signal handler, where sending a message is not. The parent waits on the
 * ranks' sockets: a socket that closes before "done" is a rank that died;
 * every 20 ms it also reads the board. A rank that failed stops the spawn:
 * the pool is killed, an error step names the rank, the signal or exit
 * status and the lecture line, and the lecture ends with status 1 and its
 * trace written.
 *
 * Progress. A rank *waits* while it is inside a call that needs other
 * ranks (a collective, a send or receive, dist_wait: the board's `waiting`
 * flag); otherwise it *works* (its own code, tensor operations, matmuls). A
 * working rank is progress. So are steps and every waiting call entered or
 * left. Two ways to be stuck:
 *   - a rank waits for a rank that has returned from the function (a
 *     collective needs every rank; a receive its sender): that wait can
 *     never end, and is reported after STRAGGLER_GRACE, naming who returned
 *     and who waits at which line;
 *   - every rank still running waits, and nothing moved for
 *     LECTERN_TIMEOUT seconds: a deadlock, with each rank's line.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

static int used_mpi, used_nccl;

volatile int lx_spawn_waiting, lx_spawn_interrupt;

void lx_spawn_shutdown(void) { lx_pool_stop(); }

static double timeout_seconds(void) {
    const char *s = getenv("LECTERN_TIMEOUT");
    if (s && *s) {
        char *end;
        double t = strtod(s, &end);
        if (*end == '\0' && t > 0) return t;
        lx_fatal("LECTERN_TIMEOUT='%s' is not a positive number of seconds", s);
    }
    return 120.0;
}

/* LECTERN_NCCL_EMULATE: 1 runs a spawn forced to NCCL on the CPU emulator
 * (docs/gpu.md); unset, empty or 0 does not; anything else is an error. */
static int nccl_emulate(void) {
    const char *s = getenv("LECTERN_NCCL_EMULATE");
    if (!s || !*s || strcmp(s, "0") == 0) return 0;
    if (strcmp(s, "1") == 0) return 1;
    lx_fatal("LECTERN_NCCL_EMULATE='%s': expected 0 or 1", s);
}

/* The backend for this spawn, from the machine's facts (spawn_backend.c). */
static lx_backend choose_backend(int world_size, char **reason) {
    const char *hostfile = getenv("LECTERN_HOSTFILE");
    const char *stage_test = getenv("LECTERN_STAGE_TEST");
    const char *forced = getenv("LECTERN_BACKEND");
    lx_slurm slurm;
    /* Ranks may run on other machines: a hostfile, or an allocation with
     * nodes other than this one. */
    int elsewhere = (hostfile && *hostfile) || (lx_pool_slurm(&slurm) && !slurm.here_only);
    int gpus = gpu_count(), emulate = nccl_emulate();
    /* NCCL is loaded (dlopen) only where this spawn would run on it: never
     * on a machine without GPUs. One that cannot be loaded, or is too old,
     * is named: an error when forced, else the note's reason. */
    int nccl = LECTERN_NCCL;
    char why[512] = "";
    int wants = !emulate && ((forced && strcmp(forced, "nccl") == 0) || (!(forced && *forced) && gpus >= world_size));
    if (nccl && wants && !lx_ranks_comm()->nccl_usable(why, sizeof why)) {
        if (forced && *forced) lx_fatal("LECTERN_BACKEND=nccl, but %s", why);
        nccl = -1;
    }
    lx_backend b = lx_choose_backend(world_size, gpus, gpus > 0 ? lx_gpu_compute_mode() : 0, lx_gpu_held_here(), forced,
                                     nccl, elsewhere, stage_test && strcmp(stage_test, "1") == 0,
                                     lx_ranks_comm()->mpi_cuda_aware_built(), emulate, reason);
    if (nccl < 0) {
        char *r = lx_fmt("%s: %s", *reason, why);
        free(*reason);
        *reason = r;
    }
    return b;
}

typedef struct held_step held_step;
typedef struct check_site check_site;

/* One spawn, as the parent sees it. */
typedef struct spawn_run {
    int id, world_size;
    lx_backend backend;
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
    unsigned cycle_key;      /* the deadlock seen at the last look (0: none), see watch_cycle */
    double cycle_since;
    unsigned cycle_copies[LECTERN_MAX_WORLD]; /* copies[] when it was first seen */
    held_step *held;                          /* steps received, not yet appended (see release) */
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
} spawn_run;

static void set_number(cJSON *obj, const char *key, double v) {
    cJSON *n = cJSON_CreateNumber(v);
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, n);
    else cJSON_AddItemToObject(obj, key, n);
}

/* "()" after a call's name on the board, unless it carries its own
 * ("dist_all_reduce_in(group {0,1})"). */
static const char *call_parens(const char *operation) { return strchr(operation, '(') ? "" : "()"; }

static void finish_entry(spawn_run *run, const char *status) {
    cJSON_ReplaceItemInObjectCaseSensitive(run->entry, "status", cJSON_CreateString(status));
    set_number(run->entry, "seconds", lx_round_us(now_seconds() - run->started));
    /* Its checks: a spawn whose ranks ran to the end but failed checks is
     * no all-green "ok" (the viewer's spawn header says so). */
    if (run->checks_passed + run->checks_failed > 0) {
        cJSON *checks = cJSON_CreateObject();
        cJSON_AddNumberToObject(checks, "passed", run->checks_passed);
        cJSON_AddNumberToObject(checks, "failed", run->checks_failed);
        if (cJSON_GetObjectItemCaseSensitive(run->entry, "checks"))
            cJSON_ReplaceItemInObjectCaseSensitive(run->entry, "checks", checks);
        else cJSON_AddItemToObject(run->entry, "checks", checks);
    }
}

/* Counts the checks of a rank's step for its spawn's entry. */
static void count_checks(spawn_run *run, cJSON *step) {
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (!type || strcmp(type, "check") != 0) continue;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "passed"))) run->checks_passed++;
        else run->checks_failed++;
    }
}

/* ---- steps from the ranks ---- */

/* The parent's frames, then the rank's. */
static cJSON *joined_stack(const spawn_run *run, cJSON *rank_stack) {
    cJSON *stack = lx_stack_to_json(run->parent, run->n_parent);
    cJSON *f;
    cJSON_ArrayForEach(f, rank_stack) cJSON_AddItemToArray(stack, cJSON_Duplicate(f, 1));
    return stack;
}

static int has_error(cJSON *step) {
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (type && strcmp(type, "error") == 0) return 1;
    }
    return 0;
}

/* An error of a spawn made with spawn_expect_failure() is what the lecture
 * set out to show: its error renderings say so ("expected": true), and the
 * run is not failed by them. */
static void mark_expected(cJSON *step) {
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (type && strcmp(type, "error") == 0 && !cJSON_GetObjectItemCaseSensitive(r, "expected"))
            cJSON_AddTrueToObject(r, "expected");
    }
}

/* ---- one step per check site ----
 *
 * Four ranks that each check their parameters make four PASS badges that
 * say the same thing. A passing check of a rank is folded into the PASS
 * step its spawn made at the same place (the same stack of lines) and the
 * same turn there: a check in a loop (gradient 0, 1 and 2 of one line)
 * makes one step per turn, rank r's k-th check at a place joining the
 * others' k-th, so that no turn hides behind the first. That step's check
 * rendering lists the ranks ("ranks") and how many checks it stands for
 * ("folded"), each pass's rank and what ("each": nothing is lost but the
 * repeated stack and numbers), and its line reads "PASS on 4 ranks: ...".
 * Its rank is the lowest of its ranks' (the column it is shown in). Its
 * numbers are those of the worst of them (the largest max_abs, when the
 * check has one); when the ranks' lines differ otherwise, the line names
 * whose it shows. A failing check is never folded: it stays a step of its
 * own, with its rank and its numbers, and takes its turn. Every check
 * still counts and is graded one by one (lx_trace_tally). */

/* The check rendering of a step that is one passing check and nothing else. */
static cJSON *passing_check(cJSON *step) {
    cJSON *list = cJSON_GetObjectItemCaseSensitive(step, "renderings");
    if (cJSON_GetArraySize(list) != 1) return NULL;
    cJSON *r = cJSON_GetArrayItem(list, 0);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
    if (!type || strcmp(type, "check") != 0) return NULL;
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "passed")) ? r : NULL;
}

/* Made at the same place: the same frames (file and line) all the way
 * down. A helper that checks, called from two lines, makes two sites. */
static int same_stack(cJSON *sa, cJSON *sb) {
    int n = cJSON_GetArraySize(sa);
    if (n == 0 || n != cJSON_GetArraySize(sb)) return 0;
    for (cJSON *fa = sa->child, *fb = sb->child; fa && fb; fa = fa->next, fb = fb->next) {
        const char *pa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fa, "path"));
        const char *pb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fb, "path"));
        cJSON *la = cJSON_GetObjectItemCaseSensitive(fa, "line"), *lb = cJSON_GetObjectItemCaseSensitive(fb, "line");
        if (!pa || !pb || strcmp(pa, pb) != 0 || !cJSON_IsNumber(la) || !cJSON_IsNumber(lb) ||
            la->valueint != lb->valueint)
            return 0;
    }
    return 1;
}

static int same_site(cJSON *a, cJSON *b) {
    return same_stack(cJSON_GetObjectItemCaseSensitive(a, "stack"), cJSON_GetObjectItemCaseSensitive(b, "stack"));
}

/* A place checks are made at, and how many each rank has made there. */
struct check_site {
    cJSON *stack; /* a copy */
    int made[LECTERN_MAX_WORLD];
};

static int has_check(cJSON *step) {
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (type && strcmp(type, "check") == 0) return 1;
    }
    return 0;
}

/* The turn of rank `rank`'s check step at its place: 0 for its first check
 * there, 1 for its second, ... */
static int check_turn(spawn_run *run, int rank, cJSON *step) {
    cJSON *stack = cJSON_GetObjectItemCaseSensitive(step, "stack");
    int i = 0;
    while (i < run->n_sites && !same_stack(run->sites[i].stack, stack))
        i++;
    if (i == run->n_sites) {
        check_site *grown = realloc(run->sites, (size_t)(run->n_sites + 1) * sizeof *grown);
        if (!grown) lx_fatal("out of memory folding checks");
        run->sites = grown;
        memset(&run->sites[i], 0, sizeof run->sites[i]);
        run->sites[i].stack = cJSON_Duplicate(stack, 1);
        run->n_sites++;
    }
    return run->sites[i].made[rank]++;
}

static double max_abs_of(cJSON *r) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "max_abs");
    return cJSON_IsNumber(m) ? m->valuedouble : -1;
}

/* What a passing check's line says after "PASS: " (check_close() puts its
 * numbers there). */
static char *pass_line(cJSON *r) {
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "data"));
    const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "what"));
    return strdup(data && strncmp(data, "PASS: ", 6) == 0 ? data + 6 : what ? what : "");
}

/* The folded step's line: "PASS on 4 ranks: ..." or "PASS on rank 2 (8 checks): ...". */
static void fold_label(cJSON *r, const char *rest, int numbers_of) {
    cJSON *ranks = cJSON_GetObjectItemCaseSensitive(r, "ranks");
    int n_ranks = cJSON_GetArraySize(ranks);
    int folded = cJSON_GetObjectItemCaseSensitive(r, "folded")->valueint;
    char *who = n_ranks == 1 ? lx_fmt("rank %d", cJSON_GetArrayItem(ranks, 0)->valueint) : lx_fmt("%d ranks", n_ranks);
    char *of = numbers_of >= 0 && n_ranks > 1 ? lx_fmt(" [rank %d's numbers]", numbers_of) : strdup("");
    char *line = folded > n_ranks ? lx_fmt("PASS on %s (%d checks): %s%s", who, folded, rest, of)
                                  : lx_fmt("PASS on %s: %s%s", who, rest, of);
    free(of);
    cJSON_ReplaceItemInObjectCaseSensitive(r, "data", cJSON_CreateString(line));
    free(line);
    free(who);
}

/* {"rank": 2, "what": "...", "name": "..."}: one pass of those a folded
 * step stands for (its name when check_named gave it one). */
static cJSON *one_pass(int rank, cJSON *r) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "rank", rank);
    cJSON_AddItemToObject(p, "what", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(r, "what"), 1));
    cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "name");
    if (name) cJSON_AddItemToObject(p, "name", cJSON_Duplicate(name, 1));
    return p;
}

/* Folds `step` (rank `rank`) into its site's PASS step: 1 when it did (the
 * step is then the caller's to delete), 0 when it is the first at its site
 * or is no passing check. */
static int fold_pass(spawn_run *run, int rank, cJSON *step, int turn) {
    cJSON *r = passing_check(step);
    if (!r) return 0;
    for (int i = 0; i < run->n_folds; i++) {
        if (run->fold_turn[i] != turn || !same_site(run->folds[i], step)) continue;
        cJSON *into = passing_check(run->folds[i]);
        cJSON *into_rank = cJSON_GetObjectItemCaseSensitive(run->folds[i], "rank");
        if (cJSON_IsNumber(into_rank) && rank < into_rank->valueint) cJSON_SetNumberValue(into_rank, rank);
        cJSON *ranks = cJSON_GetObjectItemCaseSensitive(into, "ranks");
        int seen = 0;
        cJSON *x;
        cJSON_ArrayForEach(x, ranks) seen |= x->valueint == rank;
        if (!seen) cJSON_AddItemToArray(ranks, cJSON_CreateNumber(rank));
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(into, "each"), one_pass(rank, r));
        cJSON *folded = cJSON_GetObjectItemCaseSensitive(into, "folded");
        cJSON_SetNumberValue(folded, folded->valuedouble + 1);
        if (max_abs_of(r) > max_abs_of(into)) { /* keep the worst numbers */
            cJSON *k = r->child;
            for (; k; k = k->next) {
                if (strcmp(k->string, "ranks") == 0 || strcmp(k->string, "folded") == 0 ||
                    strcmp(k->string, "each") == 0)
                    continue;
                cJSON *copy = cJSON_Duplicate(k, 1);
                if (cJSON_GetObjectItemCaseSensitive(into, k->string))
                    cJSON_ReplaceItemInObjectCaseSensitive(into, k->string, copy);
                else cJSON_AddItemToObject(into, k->string, copy);
            }
            free(run->fold_lines[i]);
            run->fold_lines[i] = pass_line(r);
            run->fold_rank[i] = rank;
        } else {
            char *mine = pass_line(r);
            if (strcmp(mine, run->fold_lines[i]) != 0 && run->fold_rank[i] < 0)
                run->fold_rank[i] = cJSON_GetArrayItem(ranks, 0)->valueint; /* the first's */
            free(mine);
        }
        fold_label(into, run->fold_lines[i], run->fold_rank[i]);
        lx_trace_tally(step); /* counted and graded, not shown */
        return 1;
    }
    cJSON *ranks = cJSON_AddArrayToObject(r, "ranks");
    cJSON_AddItemToArray(ranks, cJSON_CreateNumber(rank));
    cJSON_AddNumberToObject(r, "folded", 1);
    cJSON *each = cJSON_CreateArray();
    cJSON_AddItemToArray(each, one_pass(rank, r));
    cJSON_AddItemToObject(r, "each", each);
    if (run->n_folds == run->cap_folds) {
        int cap = run->cap_folds ? 2 * run->cap_folds : 16;
        cJSON **f = realloc(run->folds, (size_t)cap * sizeof *f);
        if (!f) lx_fatal("out of memory folding checks");
        run->folds = f;
        char **l = realloc(run->fold_lines, (size_t)cap * sizeof *l);
        if (!l) lx_fatal("out of memory folding checks");
        run->fold_lines = l;
        int *k = realloc(run->fold_rank, (size_t)cap * sizeof *k);
        if (!k) lx_fatal("out of memory folding checks");
        run->fold_rank = k;
        int *t = realloc(run->fold_turn, (size_t)cap * sizeof *t);
        if (!t) lx_fatal("out of memory folding checks");
        run->fold_turn = t;
        run->cap_folds = cap;
    }
    run->fold_lines[run->n_folds] = pass_line(r);
    run->fold_rank[run->n_folds] = -1;
    run->fold_turn[run->n_folds] = turn;
    run->folds[run->n_folds++] = step;
    return 0;
}

static void append_rank_step(spawn_run *run, int rank, cJSON *step) {
    cJSON *stack = joined_stack(run, cJSON_GetObjectItemCaseSensitive(step, "stack"));
    if (cJSON_GetObjectItemCaseSensitive(step, "stack")) cJSON_ReplaceItemInObjectCaseSensitive(step, "stack", stack);
    else cJSON_AddItemToObject(step, "stack", stack);
    set_number(step, "rank", rank);
    set_number(step, "world_size", run->world_size);
    set_number(step, "spawn", run->id);
    if (has_error(step)) {
        if (run->expect_failure) mark_expected(step);
        else lx_mark_failed(); /* lx_error in a rank fails the lecture */
    }
    count_checks(run, step);
    if (has_check(step) && fold_pass(run, rank, step, check_turn(run, rank, step))) {
        cJSON_Delete(step);
        return;
    }
    lx_trace_append(step);
}

/* A step waiting to be appended. Steps from different ranks can arrive out
 * of order (a rank stamps a step, then loses its core before sending it), so
 * each is held for a short while and released in the order of the ranks'
 * clock, which on one host is the parent's clock too. */
#define HOLD_SECONDS 0.05

struct held_step {
    double time;
    unsigned long seq; /* arrival order: breaks ties, keeps one rank's steps in order */
    int rank;
    cJSON *step;
};

static int by_time(const void *a, const void *b) {
    const held_step *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the held steps older than HOLD_SECONDS (all of them when `all`),
 * oldest first. */
static void release(spawn_run *run, int all) {
    if (run->n_held == 0) return;
    qsort(run->held, (size_t)run->n_held, sizeof run->held[0], by_time);
    double cutoff = lx_elapsed() - HOLD_SECONDS;
    int n = 0;
    while (n < run->n_held && (all || run->held[n].time <= cutoff)) {
        append_rank_step(run, run->held[n].rank, run->held[n].step);
        n++;
    }
    memmove(run->held, run->held + n, (size_t)(run->n_held - n) * sizeof run->held[0]);
    run->n_held -= n;
}

static void hold(spawn_run *run, int rank, cJSON *step) {
    if (run->n_held == run->cap_held) {
        int cap = run->cap_held ? 2 * run->cap_held : 64;
        held_step *h = realloc(run->held, (size_t)cap * sizeof *h);
        if (!h) lx_fatal("out of memory holding steps");
        run->held = h;
        run->cap_held = cap;
    }
    cJSON *t = cJSON_GetObjectItemCaseSensitive(step, "time");
    held_step *h = &run->held[run->n_held++];
    h->time = cJSON_IsNumber(t) ? t->valuedouble : 0.0;
    h->seq = run->seq++;
    h->rank = rank;
    h->step = step;
}

/* A copy of the board slot of a rank on another host (relay_board in
 * spawn_rank.c), mirrored into the board: one of an earlier spawn, or of a
 * rank that has a slot of its own here, is dropped. */
static void mirror_slot(spawn_run *run, int r, const char *body, size_t size) {
    int32_t id;
    if (!run->board || lx_pool_pid(r) != 0 || size != sizeof id + sizeof(board_slot)) return;
    memcpy(&id, body, sizeof id);
    if (id != run->id) return;
    memcpy((void *)&run->board->slot[r], body + sizeof id, sizeof(board_slot));
    run->board->slot[r].pid = 0;
    run->copies[r]++;
}

/* One message from rank r, whose socket is readable. Returns 1 for a
 * message that is progress (a step, a result, "done", a closed socket), 0
 * for a board copy: a rank that only reports that it waits has not moved. */
static int take_message(spawn_run *run, int r) {
    uint32_t type;
    char *body;
    size_t size;
    if (lx_wire_recv(lx_pool_fd(r), &type, &body, &size) != 0) {
        run->gone[r] = 1; /* the rank's process is gone (or its socket broke) */
        run->gone_at[r] = now_seconds();
        return 1;
    }
    run->heard[r] = now_seconds();
    if (type == MSG_BOARD) {
        mirror_slot(run, r, body, size);
        free(body);
        return 0;
    }
    if (type == MSG_DONE) {
        if (!run->done[r]) run->n_done++;
        run->done[r] = 1;
    } else if (type == MSG_RESULT) {
        lx_spawn_results_put(r, body, size); /* kept: spawn_result() reads it */
        return 1;
    } else if (type == MSG_MODELLED) {
        cJSON *span = cJSON_Parse(body);
        if (span) {
            set_number(span, "spawn", run->id);
            set_number(span, "rank", r);
            lx_trace_modelled_append(span);
        } else {
            fprintf(stderr, "lectern: rank %d sent a modelled span that is not JSON; dropped\n", r);
        }
    } else if (type == MSG_STEP) {
        cJSON *step = cJSON_Parse(body);
        /* A step one rank writes for another (lx_rank_error_for). */
        cJSON *as = step ? cJSON_GetObjectItemCaseSensitive(step, "as_rank") : NULL;
        int rank = r;
        if (as) {
            if (cJSON_IsNumber(as) && as->valueint >= 0 && as->valueint < run->world_size) rank = as->valueint;
            cJSON_DeleteItemFromObjectCaseSensitive(step, "as_rank");
        }
        if (step) hold(run, rank, step);
        else fprintf(stderr, "lectern: rank %d sent a step that is not JSON; dropped\n", r);
    }
    free(body);
    return 1;
}

/* The ranks that may still send: neither done nor gone. */
static int still_heard(const spawn_run *run) {
    int n = 0;
    for (int r = 0; r < run->world_size; r++)
        n += !run->done[r] && !run->gone[r];
    return n;
}

/* Waits up to `wait_ms` for messages from the ranks still working, and takes
 * every message there is. Returns how many were progress (take_message).
 * With no rank left to hear from it still waits `wait_ms` (a sleep): its
 * callers loop until a time has passed, and would otherwise spin. */
static int drain(spawn_run *run, int wait_ms) {
    int messages = 0, moved = 0;
    for (;;) {
        struct pollfd fds[LECTERN_MAX_WORLD];
        int rank_of[LECTERN_MAX_WORLD];
        int n = 0;
        for (int r = 0; r < run->world_size; r++) {
            if (run->done[r] || run->gone[r]) continue;
            fds[n] = (struct pollfd){.fd = lx_pool_fd(r), .events = POLLIN};
            rank_of[n++] = r;
        }
        if (n == 0) {
            if (!messages && wait_ms > 0) poll(NULL, 0, wait_ms);
            break;
        }
        int ready = poll(fds, (nfds_t)n, messages ? 0 : wait_ms);
        if (ready <= 0) break;
        for (int i = 0; i < n; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            moved += take_message(run, rank_of[i]);
            messages++;
        }
    }
    release(run, 0);
    return moved;
}

/* ---- failures ---- */

/* An error step located in a rank: the parent's frames, then `frames_text`. */
static void rank_error_step(spawn_run *run, int rank, const char *frames_text, const char *message) {
    cJSON *rank_stack = lx_frames_text_to_json(frames_text);
    cJSON *step = cJSON_CreateObject();
    cJSON_AddItemToObject(step, "stack", joined_stack(run, rank_stack));
    cJSON_Delete(rank_stack);
    cJSON_AddNumberToObject(step, "rank", rank);
    cJSON_AddNumberToObject(step, "world_size", run->world_size);
    cJSON_AddNumberToObject(step, "spawn", run->id);
    cJSON_AddNumberToObject(step, "time", lx_round_us(lx_elapsed()));
    cJSON *list = cJSON_AddArrayToObject(step, "renderings");
    cJSON_AddItemToArray(list, lx_rendering_error(message));
    if (run->expect_failure) {
        mark_expected(step);
        lx_trace_append(step);
        return;
    }
    fprintf(stderr, "lectern: %s\n", message);
    lx_trace_append(step);
    lx_mark_failed();
}

/* Gives the ranks' last messages a moment to arrive: the steps a failing
 * rank made before it failed belong in the trace. Once every rank is done
 * or gone (its socket closed after its last message) nothing more can come. */
static void drain_briefly(spawn_run *run) {
    double t0 = now_seconds(), last = t0;
    while (still_heard(run) > 0 && now_seconds() - last < 0.1 && now_seconds() - t0 < 1.0)
        if (drain(run, 5) > 0) last = now_seconds();
    release(run, 1);
}

static void free_run(spawn_run *run) {
    for (int i = 0; i < run->n_held; i++)
        cJSON_Delete(run->held[i].step);
    free(run->held);
    for (int i = 0; i < run->n_folds; i++)
        free(run->fold_lines[i]);
    free(run->fold_lines);
    free(run->fold_rank);
    free(run->fold_turn);
    free(run->folds);
    for (int i = 0; i < run->n_sites; i++)
        cJSON_Delete(run->sites[i].stack);
    free(run->sites);
    free(run->failure);
    free(run);
}

/* Which rank failed first: the board's earliest recorded failure, else the
 * first socket that closed. -1 when none has failed. */
static int first_failure(spawn_run *run) {
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
static void fail_rank(spawn_run *run, int rank) {
    board_slot *s = run->board ? &run->board->slot[rank] : NULL;
    /* Its signal handler may still be writing where it was: wait (a little)
     * for the process to be gone. Meanwhile take the last steps of all. */
    double t0 = now_seconds();
    int pid = lx_pool_pid(rank);
    while (pid > 0 && kill(pid, 0) == 0 && !run->gone[rank] && now_seconds() - t0 < 2.0)
        drain(run, 5);
    drain_briefly(run);
    int better = first_failure(run); /* the last messages may show an earlier failure */
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
    rank_error_step(run, rank, frames, msg);
    free(msg);
    free(hint);
    free(frames);
    finish_entry(run, "failed");
    char *summary =
            at.known ? lx_fmt("spawn of %d rank%s failed: rank %d %s, %s %s:%d", run->world_size,
                              lx_plural(run->world_size), rank, how, silent ? "last seen at" : "at", at.path, at.line)
                     : lx_fmt("spawn of %d rank%s failed: rank %d %s", run->world_size, lx_plural(run->world_size),
                              rank, how);
    free(how);
    run->failure = summary;
}

static void fail_deadlock(spawn_run *run, double timeout) {
    drain_briefly(run);
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
        rank_error_step(run, r, frames, msg);
        free(msg);
    }
    lx_pool_kill();
    finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: %d rank%s made no progress for %g s (%s)", run->world_size,
                          lx_plural(run->world_size), waiting, lx_plural(waiting), timeout,
                          run->expect_failure ? "the timeout of spawn_expect_failure" : "LECTERN_TIMEOUT");
}

/* Rank r runs on another host than the lecture: its slot on the board is
 * the last copy its relay sent (relay_board in spawn_rank.c). */
static int on_other_host(int r) { return lx_pool_size() > r && lx_pool_pid(r) == 0; }

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

/* Waiting rank r waits for a rank that returned. On one host every such
 * wait counts (STRAGGLER_GRACE covers a rank just leaving its last call).
 * Between hosts a returned rank that matched all of r's calls is not what
 * r waits for: r waits for data that rank sent, still on the wire (seconds,
 * on a busy machine), which only LECTERN_TIMEOUT may call a hang. A rank
 * that did not match them never will: that wait is reported as on one
 * host. */
static int waits_on_returned(const spawn_run *run, int r) {
    int peer = run->board->slot[r].peer;
    if (peer >= run->world_size) return 0;
    for (int q = 0; q < run->world_size; q++) {
        if (!run->done[q] || (peer >= 0 && q != peer)) continue;
        if (!(on_other_host(r) || on_other_host(q)) || !calls_matched(run, r, q, peer)) return 1;
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
    drain_briefly(run);
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
        rank_error_step(run, r, s->where, b.s);
        free(b.s);
        waiting++;
        lx_sb_printf(&summary, "%srank %d waits in %s", waiting > 1 ? "; " : "", r, s->operation);
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    lx_sb returned = {0};
    list_ranks(&returned, run, -1);
    lx_pool_kill();
    finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: rank%s %s returned from the function while %s", run->world_size,
                          lx_plural(run->world_size), run->n_done > 1 ? "s" : "", returned.s, summary.s);
    free(returned.s);
    free(summary.s);
}

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
    drain_briefly(run);
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
        rank_error_step(run, r, s->where, b.s);
        free(b.s);
        lx_sb_printf(&summary, "%srank %d waits in %s", n++ ? "; " : "", r, s->operation);
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    /* The spawn's time ends when the deadlock is named, not when the pool
     * (mpirun and its ranks, reaped) is gone. */
    finish_entry(run, "failed");
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

static void watch_cycle(spawn_run *run, double now) {
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
    drain(run, 0);
    if (!any_silent(run, now_seconds())) return;
    drain_briefly(run);
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
        rank_error_step(run, r, frames, b.s);
        free(b.s);
        if (!strstr(hosts.s ? hosts.s : "", lx_pool_host(r)))
            lx_sb_printf(&hosts, "%s%s", hosts.s ? ", " : "", lx_pool_host(r));
        lx_sb_printf(&ranks, "%s%d", n++ ? ", " : "", r);
    }
    lx_pool_kill();
    finish_entry(run, "failed");
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
static void watch_board(spawn_run *run, double now) {
    if (any_silent(run, now)) {
        fail_hosts_lost(run);
        if (run->failure) return;
    }
    int failed = first_failure(run);
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
            watch_cycle(run, now);
            if (run->failure) return;
        }
    }
    if (failed >= 0) fail_rank(run, failed);
}

/* ---- where each rank is, when the lecture must stop the ranks ---- */

/* When each rank last moved (a step, a call entered or left): how long it
 * has been where it is, for the time limit's report. */
static void note_moves(spawn_run *run, double now) {
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
 * reported while working), then the pool is stopped and the signal raised
 * again: crash.c adds the lecture's own step and writes the trace. */
static void __attribute__((noreturn)) fail_interrupted(spawn_run *run, int sig) {
    const char *name = sig == SIGINT ? "SIGINT (interrupted)" : "SIGTERM (terminated)";
    drain_briefly(run);
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
        rank_error_step(run, r, frames, b.s);
        free(b.s);
    }
    lx_pool_kill();
    finish_entry(run, "failed");
    free_run(run);
    lx_spawn_waiting = 0;
    raise(sig);
    _exit(128 + sig); /* not reached: the handler re-raises with the default action */
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
static void fail_time_limit(spawn_run *run, double now) {
    drain_briefly(run);
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
        rank_error_step(run, r, frames, b.s);
        free(b.s);
        lx_sb_printf(&summary, "%srank %d %s", n++ ? "; " : "", r, waiting ? "waiting" : "working");
        if (at.known) lx_sb_printf(&summary, " at %s:%d", at.path, at.line);
    }
    lx_pool_kill();
    finish_entry(run, "failed");
    run->failure = lx_fmt("spawn of %d rank%s stopped: %s ran past its time limit of %g s (%s)", run->world_size,
                          lx_plural(run->world_size), what, run->limit, summary.s ? summary.s : "no rank left");
    free(summary.s);
    free(what);
}

/* ---- spawn() ---- */

/* `call`: "spawn" or "spawn_expect_failure", as the lecture wrote it. */
static void check_arguments(const char *call, spawn_fn fn, int world_size, const void *args, size_t args_size) {
    if (lx_in_rank()) lx_fatal("%s() inside a spawned rank: ranks cannot start ranks of their own", call);
    if (!fn) lx_fatal("%s(): the function to run is NULL", call);
    if (world_size <= 0 || world_size > LECTERN_MAX_WORLD)
        lx_fatal("%s(): world_size %d is out of range: 1 to %d ranks (LECTERN_MAX_WORLD)", call, world_size,
                 LECTERN_MAX_WORLD);
    lx_slurm slurm;
    if (lx_pool_slurm(&slurm) && slurm.tasks > 0 && world_size > slurm.tasks)
        lx_fatal("%s(): world_size %d is more than the %d task%s of Slurm job %s's allocation "
                 "(SLURM_TASKS_PER_NODE=%s on %s); ask Slurm for at least %d (salloc -n %d, sbatch -n %d) "
                 "or spawn fewer ranks",
                 call, world_size, slurm.tasks, lx_plural(slurm.tasks), slurm.job, slurm.tasks_per_node, slurm.nodes,
                 world_size, world_size, world_size);
    if (args_size > LECTERN_MAX_SPAWN_ARGS)
        lx_fatal("%s(): args of %zu bytes exceed the limit of %u bytes (LECTERN_MAX_SPAWN_ARGS); "
                 "pass sizes and let each rank make its data",
                 call, args_size, (unsigned)LECTERN_MAX_SPAWN_ARGS);
    if (!args && args_size > 0) lx_fatal("%s(): args is NULL but args_size is %zu", call, args_size);
}

static void record_backend(lx_backend backend) {
    if (lx_backend_is_nccl(backend)) used_nccl = 1;
    else used_mpi = 1;
    const char *all = used_nccl && used_mpi ? "nccl+mpi" : used_nccl ? "nccl" : "mpi";
    lx_trace_meta("backend", cJSON_CreateString(all));
}

/* Hands the spawn to pool ranks 0..world_size-1. */
static void hand_out(spawn_run *run, spawn_fn fn, const void *args, size_t args_size) {
    spawn_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.fn_offset = (int64_t)((uintptr_t)(void *)fn - (uintptr_t)(void *)&lx_spawn_child_entry);
    desc.spawn_id = run->id;
    desc.world_size = run->world_size;
    desc.backend = run->backend;
    desc.quick = lecture_quick();
    desc.quiet = lx_quiet();
    desc.expect_failure = run->expect_failure;
    desc.clock_zero = now_seconds() - lx_elapsed();
    desc.args_size = args_size;
    snprintf(desc.lecture, sizeof desc.lecture, "%s", lx_lecture_name());
    if (!getcwd(desc.cwd, sizeof desc.cwd)) desc.cwd[0] = '\0';
    char *options = lx_options_text();
    if (strlen(options) >= sizeof desc.options)
        lx_fatal("spawn(): the lecture's options take %zu bytes, more than the %zu its ranks can be sent",
                 strlen(options), sizeof desc.options - 1);
    snprintf(desc.options, sizeof desc.options, "%s", options);
    free(options);
    for (int r = 0; r < run->world_size; r++) {
        if (run->board) lx_board_slot_reset(&run->board->slot[r]);
        if (lx_wire_send(lx_pool_fd(r), MSG_SPAWN, &desc, sizeof desc, args, args_size) != 0) {
            run->gone[r] = 1;
            run->gone_at[r] = now_seconds();
        }
    }
}

/* Where the ranks run, when that is more than one host: the spawn's
 * "hosts", rank r's at index r (the viewer's rank headers show them). */
static void record_hosts(spawn_run *run) {
    int many = 0;
    for (int r = 1; r < run->world_size; r++)
        many |= strcmp(lx_pool_host(r), lx_pool_host(0)) != 0;
    if (!many) return;
    cJSON *hosts = cJSON_AddArrayToObject(run->entry, "hosts");
    for (int r = 0; r < run->world_size; r++)
        cJSON_AddItemToArray(hosts, cJSON_CreateString(lx_pool_host(r)));
}

/* Runs one spawn to its end. Returns NULL when every rank's function
 * returned, else why the spawn failed (malloc'd): the error steps are in
 * the trace by then, and the pool is stopped. `deadlock_timeout`: seconds
 * every rank may wait without progress; `exercise` and `limit`: those of
 * spawn_exercise() (NULL and 0 otherwise). */
static char *run_spawn(spawn_fn fn, int world_size, const void *args, size_t args_size, int expect_failure,
                       double deadlock_timeout, const char *exercise, double limit) {
    double timeout = deadlock_timeout;
    spawn_run *run = calloc(1, sizeof *run);
    if (!run) lx_fatal("out of memory");
    run->world_size = world_size;
    run->expect_failure = expect_failure;
    run->exercise = exercise;
    run->limit = limit;
    lx_spawn_results_clear(world_size);
    run->started = now_seconds();
    run->n_parent = lx_stack_capture(run->parent, LX_MAX_FRAMES);
    char *reason = NULL;
    run->backend = choose_backend(world_size, &reason);
    lx_slurm slurm;
    if (lx_pool_slurm(&slurm)) { /* where: the allocation's nodes, as mpirun places them */
        char *where = lx_fmt("%s; in Slurm job %s's allocation: %d task%s on %s (SLURM_TASKS_PER_NODE=%s), "
                             "placed by mpirun%s",
                             reason, slurm.job, slurm.tasks, lx_plural(slurm.tasks), slurm.nodes, slurm.tasks_per_node,
                             getenv("LECTERN_HOSTFILE") && *getenv("LECTERN_HOSTFILE") ? " within LECTERN_HOSTFILE"
                                                                                       : ", no hostfile");
        free(reason);
        reason = where;
    }

    /* The trace says which backend and why, before any rank speaks. */
    note("spawn: %s", reason);
    progress("spawn %d rank%s (%s)", world_size, lx_plural(world_size),
             lx_backend_is_nccl(run->backend) ? "NCCL" : "Open MPI");
    cJSON *spawns = lx_trace_spawns();
    run->id = cJSON_GetArraySize(spawns);
    run->entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(run->entry, "id", run->id);
    cJSON_AddNumberToObject(run->entry, "world_size", world_size);
    cJSON_AddStringToObject(run->entry, "backend", lx_backend_is_nccl(run->backend) ? "nccl" : "mpi");
    cJSON_AddStringToObject(run->entry, "reason", reason);
    cJSON_AddItemToObject(run->entry, "stack", lx_stack_to_json(run->parent, run->n_parent));
    cJSON_AddStringToObject(run->entry, "status", "running");
    if (expect_failure) cJSON_AddTrueToObject(run->entry, "expect_failure");
    if (exercise) cJSON_AddStringToObject(run->entry, "exercise", exercise);
    if (limit > 0) cJSON_AddNumberToObject(run->entry, "time_limit_s", limit);
    if (slurm.present) {
        cJSON *alloc = cJSON_AddObjectToObject(run->entry, "slurm");
        cJSON_AddStringToObject(alloc, "job_id", slurm.job);
        cJSON_AddStringToObject(alloc, "nodes", slurm.nodes);
        cJSON_AddStringToObject(alloc, "tasks_per_node", slurm.tasks_per_node);
        cJSON_AddNumberToObject(alloc, "tasks", slurm.tasks);
    }
    cJSON_AddNumberToObject(run->entry, "seconds", 0);
    cJSON_AddItemToArray(spawns, run->entry);
    record_backend(run->backend);
    free(reason);

    /* A pool's normal start: well under a second per rank even on 2 busy
     * cores. LECTERN_TIMEOUT bounds it too; the short timeout of an
     * expected failure does not (it is about the ranks' waits, not their
     * start). */
    double start_limit = 15.0 + 2.0 * world_size;
    if (start_limit > timeout_seconds()) start_limit = timeout_seconds();
    int started_pool = 0;
    char *error = NULL;
    if (lx_pool_ensure(world_size, start_limit, &started_pool, &error) != 0) {
        finish_entry(run, "failed");
        free_run(run);
        lx_fatal("spawn of %d rank%s failed: %s", world_size, lx_plural(world_size), error);
    }
    run->board = lx_pool_board();
    hand_out(run, fn, args, args_size);
    for (int r = 0; r < world_size; r++)
        run->heard[r] = now_seconds();
    record_hosts(run);
    /* Start-up: from spawn() until every rank has its work (a pool started
     * on the way included). */
    set_number(run->entry, "startup_s", lx_round_us(now_seconds() - run->started));
    if (run->backend != LX_BACKEND_NCCL) cJSON_AddStringToObject(run->entry, "single_copy", lx_pool_single_copy());

    /* Wait for "done" from every rank, forwarding steps as they come. */
    run->last_progress = run->work_started = now_seconds();
    for (int r = 0; r < world_size; r++)
        run->moved_at[r] = run->work_started;
    double last_board = 0;
    lx_spawn_interrupt = 0;
    lx_spawn_waiting = 1;
    while (run->n_done < world_size && !run->failure) {
        if (lx_spawn_interrupt) fail_interrupted(run, lx_spawn_interrupt);
        double now = now_seconds();
        if (drain(run, 20) > 0) run->last_progress = now_seconds();
        now = now_seconds();
        int failed = first_failure(run);
        if (failed >= 0) {
            fail_rank(run, failed);
            break;
        }
        if (now - last_board >= 0.02) {
            last_board = now;
            note_moves(run, now);
            watch_board(run, now);
            if (run->failure) break;
        }
        if (now - run->last_progress > timeout) fail_deadlock(run, timeout);
        else if (run->limit > 0 && now - run->work_started > run->limit) fail_time_limit(run, now);
    }

    lx_spawn_waiting = 0;
    /* A signal that came as the loop ended: handled as outside a spawn. */
    if (lx_spawn_interrupt) raise(lx_spawn_interrupt);
    char *failure = run->failure;
    run->failure = NULL;
    if (!failure) {
        release(run, 1);
        finish_entry(run, "ok");
    }
    free_run(run);
    return failure;
}

void spawn(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    check_arguments("spawn", fn, world_size, args, args_size);
    double timeout = timeout_seconds();
    lx_pool_min_ranks(); /* a bad setting fails here, before anything starts */
    char *failure = run_spawn(fn, world_size, args, args_size, 0, timeout, NULL, 0);
    if (failure) lx_fatal("%s", failure);
}

int spawn_exercise(const char *exercise, double seconds, spawn_fn fn, int world_size, const void *args,
                   size_t args_size) {
    check_arguments("spawn_exercise", fn, world_size, args, args_size);
    if (!(seconds >= 0) || isinf(seconds))
        lx_fatal("spawn_exercise(): the time limit must be a finite number of seconds >= 0 (0: none), not %g", seconds);
    if (!exercise)
        lx_fatal("spawn_exercise(): the exercise is NULL: give the prefix grade_exercise() declared for it "
                 "(\"exercise 1:\")");
    if (lx_grade_begin(exercise) != 0)
        lx_fatal("spawn_exercise(\"%s\"): no exercise has that prefix: declare it first with grade_exercise()",
                 exercise);
    double timeout = timeout_seconds();
    lx_pool_min_ranks();
    char *failure = run_spawn(fn, world_size, args, args_size, 0, timeout, exercise, seconds);
    lx_grade_end();
    if (!failure) return 1;
    /* Said as the error steps were, and the run is failed by them; the
     * lecture goes on to its next exercise. */
    fprintf(stderr, "lectern: %s %s; the lecture goes on\n", exercise, failure);
    free(failure);
    return 0;
}

/* The deadlock timeout of an expected failure: LECTERN_EXPECT_TIMEOUT, else
 * 3 s; never longer than LECTERN_TIMEOUT. 3 s is far above any wait of a
 * working program on a busy machine (a working rank is progress anyway),
 * and short enough for a lecture to show a deadlock without a pause. */
static double expect_timeout_seconds(void) {
    double t = 3.0;
    const char *s = getenv("LECTERN_EXPECT_TIMEOUT");
    if (s && *s) {
        char *end;
        t = strtod(s, &end);
        if (*end != '\0' || !(t > 0)) lx_fatal("LECTERN_EXPECT_TIMEOUT='%s' is not a positive number of seconds", s);
    }
    double limit = timeout_seconds();
    return t < limit ? t : limit;
}

int spawn_expect_failure(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    check_arguments("spawn_expect_failure", fn, world_size, args, args_size);
    double timeout = expect_timeout_seconds();
    lx_pool_min_ranks();
    char *failure = run_spawn(fn, world_size, args, args_size, 1, timeout, NULL, 0);
    if (!failure) {
        /* The lesson did not happen: the lecture is wrong, say where. */
        lx_error("spawn_expect_failure(): the spawn of %d rank%s succeeded, but it was expected to fail "
                 "(a deadlock, a crash, ranks that disagree)",
                 world_size, lx_plural(world_size));
        return 0;
    }
    if (!lx_quiet()) fprintf(stderr, "lectern: caught, as expected: %s\n", failure);
    free(failure);
    return 1;
}
