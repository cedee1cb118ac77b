/*
 * spawn_relay.c: what the ranks of a spawn send the parent, into the trace
 * (take_message): steps, stamped with rank, world size and spawn behind the
 * parent's frames, held HOLD_SECONDS and appended in the ranks' clock order,
 * passing checks of one site folded into one step (fold_pass); results
 * (spawn_result.c); modelled spans; board copies from ranks on other hosts;
 * "done". Also the error steps the parent writes for a rank, and the
 * spawn's entry in the trace's "spawns". docs/design.md says why.
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"
#include "ranks/spawn_run.h"

static int step_of(void *ctx, int rank, int k);

void lx_spawn_finish_entry(spawn_run *run, const char *status) {
    cJSON_ReplaceItemInObjectCaseSensitive(run->entry, "status", cJSON_CreateString(status));
    lx_json_set(run->entry, "seconds", cJSON_CreateNumber(lx_round_us(now_seconds() - run->started)));
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
    /* Who talked to whom: what the ranks that finished sent, matched. */
    lx_links_match(run->entry, run->links, run->world_size, step_of, run);
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
static int fold_pass(spawn_run *run, int rank, cJSON *step, int turn, int *into_index) {
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
        *into_index = run->fold_index[i];
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
        int *x = realloc(run->fold_index, (size_t)cap * sizeof *x);
        if (!x) lx_fatal("out of memory folding checks");
        run->fold_index = x;
        run->cap_folds = cap;
    }
    run->fold_lines[run->n_folds] = pass_line(r);
    run->fold_rank[run->n_folds] = -1;
    run->fold_turn[run->n_folds] = turn;
    run->fold_index[run->n_folds] = -1; /* set once appended */
    run->folds[run->n_folds++] = step;
    return 0;
}

/* Appends a rank's step; returns its index in the trace's steps (a passing
 * check folded into its site's step: that step's). */
static int append_rank_step(spawn_run *run, int rank, cJSON *step) {
    cJSON *stack = joined_stack(run, cJSON_GetObjectItemCaseSensitive(step, "stack"));
    if (cJSON_GetObjectItemCaseSensitive(step, "stack")) cJSON_ReplaceItemInObjectCaseSensitive(step, "stack", stack);
    else cJSON_AddItemToObject(step, "stack", stack);
    lx_json_set(step, "rank", cJSON_CreateNumber(rank));
    lx_json_set(step, "world_size", cJSON_CreateNumber(run->world_size));
    lx_json_set(step, "spawn", cJSON_CreateNumber(run->id));
    if (has_error(step)) {
        if (run->expect_failure) mark_expected(step);
        else lx_mark_failed(); /* lx_error in a rank fails the lecture */
    }
    count_checks(run, step);
    int into = -1;
    if (has_check(step) && fold_pass(run, rank, step, check_turn(run, rank, step), &into)) {
        cJSON_Delete(step);
        return into;
    }
    int index = lx_trace_append(step);
    if (run->n_folds > 0 && run->folds[run->n_folds - 1] == step) run->fold_index[run->n_folds - 1] = index;
    return index;
}

/* Rank `sender`'s k-th step of the spawn is the trace's step `index`. */
static void note_step(spawn_run *run, int sender, int k, int index) {
    if (sender < 0 || sender >= LECTERN_MAX_WORLD || k < 0) return;
    while (k >= run->cap_step_at[sender]) {
        int cap = run->cap_step_at[sender] ? 2 * run->cap_step_at[sender] : 64;
        int *more = realloc(run->step_at[sender], (size_t)cap * sizeof *more);
        if (!more) lx_fatal("out of memory numbering steps");
        for (int i = run->cap_step_at[sender]; i < cap; i++)
            more[i] = -1;
        run->step_at[sender] = more;
        run->cap_step_at[sender] = cap;
    }
    run->step_at[sender][k] = index;
    if (k >= run->n_step_at[sender]) run->n_step_at[sender] = k + 1;
}

static int step_of(void *ctx, int rank, int k) {
    const spawn_run *run = ctx;
    if (rank < 0 || rank >= LECTERN_MAX_WORLD || k < 0 || k >= run->n_step_at[rank]) return -1;
    return run->step_at[rank][k];
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
    int sender, k; /* the socket it came from and its number there (note_step) */
    cJSON *step;
};

static int by_time(const void *a, const void *b) {
    const held_step *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the held steps older than HOLD_SECONDS (all of them when `all`),
 * oldest first. */
void lx_spawn_release(spawn_run *run, int all) {
    if (run->n_held == 0) return;
    qsort(run->held, (size_t)run->n_held, sizeof run->held[0], by_time);
    double cutoff = lx_elapsed() - HOLD_SECONDS;
    int n = 0;
    while (n < run->n_held && (all || run->held[n].time <= cutoff)) {
        int index = append_rank_step(run, run->held[n].rank, run->held[n].step);
        note_step(run, run->held[n].sender, run->held[n].k, index);
        n++;
    }
    memmove(run->held, run->held + n, (size_t)(run->n_held - n) * sizeof run->held[0]);
    run->n_held -= n;
}

static void hold(spawn_run *run, int rank, cJSON *step, int sender, int k) {
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
    h->sender = sender;
    h->k = k;
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
    } else if (type == MSG_TWIN) {
        lx_twin_add_rank(run->id, r, run->world_size, body);
    } else if (type == MSG_LINKS) {
        free(run->links[r]);
        run->links[r] = body; /* matched at the spawn's end (lx_spawn_finish_entry) */
        return 1;
    } else if (type == MSG_MODELLED) {
        cJSON *span = cJSON_Parse(body);
        if (span) {
            lx_json_set(span, "spawn", cJSON_CreateNumber(run->id));
            lx_json_set(span, "rank", cJSON_CreateNumber(r));
            lx_trace_modelled_append(span);
        } else {
            fprintf(stderr, "lectern: rank %d sent a modelled span that is not JSON; dropped\n", r);
        }
    } else if (type == MSG_STEP) {
        int k = run->steps_from[r]++; /* the rank counts it too (lx_links_step_sent) */
        cJSON *step = cJSON_Parse(body);
        /* A step one rank writes for another (lx_rank_error_for). */
        cJSON *as = step ? cJSON_GetObjectItemCaseSensitive(step, "as_rank") : NULL;
        int rank = r;
        if (as) {
            if (cJSON_IsNumber(as) && as->valueint >= 0 && as->valueint < run->world_size) rank = as->valueint;
            cJSON_DeleteItemFromObjectCaseSensitive(step, "as_rank");
        }
        if (step) hold(run, rank, step, r, k);
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
int lx_spawn_drain(spawn_run *run, int wait_ms) {
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
    lx_spawn_release(run, 0);
    return moved;
}

/* ---- what the failure paths (spawn_watch.c) write ---- */

/* An error step located in a rank: the parent's frames, then `frames_text`. */
void lx_spawn_error_step(spawn_run *run, int rank, const char *frames_text, const char *message) {
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
void lx_spawn_drain_briefly(spawn_run *run) {
    double t0 = now_seconds(), last = t0;
    while (still_heard(run) > 0 && now_seconds() - last < 0.1 && now_seconds() - t0 < 1.0)
        if (lx_spawn_drain(run, 5) > 0) last = now_seconds();
    lx_spawn_release(run, 1);
}

void lx_spawn_free_run(spawn_run *run) {
    for (int i = 0; i < run->n_held; i++)
        cJSON_Delete(run->held[i].step);
    free(run->held);
    for (int i = 0; i < run->n_folds; i++)
        free(run->fold_lines[i]);
    free(run->fold_lines);
    free(run->fold_rank);
    free(run->fold_turn);
    free(run->fold_index);
    free(run->folds);
    for (int r = 0; r < LECTERN_MAX_WORLD; r++) {
        free(run->step_at[r]);
        free(run->links[r]);
    }
    for (int i = 0; i < run->n_sites; i++)
        cJSON_Delete(run->sites[i].stack);
    free(run->sites);
    free(run->failure);
    free(run);
}
