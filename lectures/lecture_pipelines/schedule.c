/*
 * schedule.c: the rules a pipeline order must keep, checked by replaying it
 * (see schedule.h). The replay is a discrete-event simulation: each stage
 * runs its next op as soon as the op's inputs have come, so an order that
 * is valid always completes, and its times are the order's ideal timeline.
 */
#include "schedule.h"

#include <math.h>
#include <stdio.h>

const char *const OP_NAME[OP_KINDS] = {"F", "B", "W", "BW"};

void schedule_push(schedule *s, int stage, int kind, int chunk, int micro) {
    if (s->n[stage] < SCHED_MAX_OPS) s->ops[stage][s->n[stage]] = (op){kind, chunk, micro};
    s->n[stage]++; /* one past the room: check_order names it */
}

int prev_part(const schedule *s, int st, int c, int *pc) {
    if (st > 0) return *pc = c, st - 1;
    return c > 0 ? (*pc = c - 1, s->p - 1) : -1;
}

int next_part(const schedule *s, int st, int c, int *nc) {
    if (st < s->p - 1) return *nc = c, st + 1;
    return c < s->v - 1 ? (*nc = c + 1, 0) : -1;
}

order_sim check_order(const schedule *s, const double dur[OP_KINDS]) {
    order_sim r = {.ok = 1};
    const int P = s->p, V = s->v, M = s->m;
    if (P < 1 || P > SCHED_MAX_STAGES || V < 1 || V > SCHED_MAX_CHUNKS || M < 1 || M > SCHED_MAX_MICRO) {
        snprintf(r.why, sizeof r.why, "%d stages, %d chunks, %d micro-batches: past this checker's %d, %d, %d", P, V, M,
                 SCHED_MAX_STAGES, SCHED_MAX_CHUNKS, SCHED_MAX_MICRO);
        return r.ok = 0, r;
    }
    int backward = s->split ? OP_B : OP_BW;
    for (int st = 0; st < P; st++) {
        if (s->n[st] > SCHED_MAX_OPS) {
            snprintf(r.why, sizeof r.why, "stage %d: %d ops, past this checker's %d", st, s->n[st], SCHED_MAX_OPS);
            return r.ok = 0, r;
        }
        int count[OP_KINDS][SCHED_MAX_CHUNKS][SCHED_MAX_MICRO] = {{{0}}};
        for (int i = 0; i < s->n[st]; i++) {
            const op *o = &s->ops[st][i];
            if (o->kind < 0 || o->kind >= OP_KINDS || o->chunk < 0 || o->chunk >= V || o->micro < 0 || o->micro >= M) {
                snprintf(r.why, sizeof r.why, "stage %d: op %d names kind %d, chunk %d, micro-batch %d", st, i, o->kind,
                         o->chunk, o->micro);
                return r.ok = 0, r;
            }
            count[o->kind][o->chunk][o->micro]++;
        }
        for (int kind = 0; kind < OP_KINDS; kind++)
            for (int c = 0; c < s->v; c++)
                for (int k = 0; k < M; k++) {
                    int want = kind == OP_F || kind == backward || (s->split && kind == OP_W);
                    if (count[kind][c][k] != want) {
                        snprintf(r.why, sizeof r.why, "stage %d: %s of chunk %d, micro-batch %d appears %d times", st,
                                 OP_NAME[kind], c, k, count[kind][c][k]);
                        return r.ok = 0, r;
                    }
                }
    }
    double end[SCHED_MAX_STAGES][OP_KINDS][SCHED_MAX_CHUNKS][SCHED_MAX_MICRO];
    double free_at[SCHED_MAX_STAGES] = {0};
    int next[SCHED_MAX_STAGES] = {0}, left = 0, in_flight[SCHED_MAX_STAGES] = {0};
    /* messages from stage a to stage b, in the order sent: queue[a][b][head..tail) (static: too big for the
     * stack, so check_order is not reentrant; the lectures call it from their main thread) */
    static op queue[SCHED_MAX_STAGES][SCHED_MAX_STAGES][SCHED_MAX_OPS];
    int head[SCHED_MAX_STAGES][SCHED_MAX_STAGES] = {{0}}, tail[SCHED_MAX_STAGES][SCHED_MAX_STAGES] = {{0}};
    for (int st = 0; st < P; st++)
        left += s->n[st];
    for (int a = 0; a < P; a++)
        for (int k = 0; k < OP_KINDS; k++)
            for (int c = 0; c < V; c++)
                for (int m = 0; m < M; m++)
                    end[a][k][c][m] = -1;
    while (left > 0) {
        int moved = 0;
        for (int st = 0; st < P; st++)
            while (next[st] < s->n[st]) {
                const op *o = &s->ops[st][next[st]];
                double ready = free_at[st];
                int from = -1, fc = 0, ok = 1;
                if (o->kind == OP_F) from = prev_part(s, st, o->chunk, &fc);
                else if (o->kind != OP_W) from = next_part(s, st, o->chunk, &fc);
                if (o->kind == OP_W) { /* its own B, earlier on this stage */
                    ok = end[st][OP_B][o->chunk][o->micro] >= 0;
                    if (ok) ready = fmax(ready, end[st][OP_B][o->chunk][o->micro]);
                } else if (o->kind != OP_F) { /* a backward needs this stage's forward of it */
                    ok = end[st][OP_F][o->chunk][o->micro] >= 0;
                    if (ok) ready = fmax(ready, end[st][OP_F][o->chunk][o->micro]);
                }
                if (ok && from >= 0) {
                    if (head[from][st] == tail[from][st]) ok = 0; /* not sent yet */
                    else {
                        const op *msg = &queue[from][st][head[from][st]];
                        int want = o->kind == OP_F ? OP_F : backward;
                        if (msg->kind != want || msg->chunk != fc || msg->micro != o->micro) {
                            snprintf(r.why, sizeof r.why,
                                     "stage %d waits for %s of chunk %d, micro-batch %d from stage %d, but the next "
                                     "message from it is %s of chunk %d, micro-batch %d",
                                     st, OP_NAME[want], fc, o->micro, from, OP_NAME[msg->kind], msg->chunk, msg->micro);
                            return r.ok = 0, r;
                        }
                        ready = fmax(ready, end[from][want][fc][o->micro]);
                    }
                }
                if (!ok) break; /* this stage waits; another may move */
                if (from >= 0) head[from][st]++;
                double e = ready + dur[o->kind];
                end[st][o->kind][o->chunk][o->micro] = free_at[st] = e;
                r.busy[st] += dur[o->kind];
                if (o->kind == OP_F) in_flight[st]++;
                if (o->kind == OP_W || o->kind == OP_BW) in_flight[st]--;
                if (in_flight[st] > r.held[st]) r.held[st] = in_flight[st];
                int to = -1, tc = 0;
                if (o->kind == OP_F) to = next_part(s, st, o->chunk, &tc);
                else if (o->kind != OP_W) to = prev_part(s, st, o->chunk, &tc);
                if (to >= 0) queue[st][to][tail[st][to]++] = *o;
                next[st]++, left--, moved = 1;
            }
        if (!moved) {
            int st = 0;
            while (next[st] >= s->n[st])
                st++;
            const op *o = &s->ops[st][next[st]];
            snprintf(r.why, sizeof r.why, "deadlock: stage %d waits forever at %s of chunk %d, micro-batch %d", st,
                     OP_NAME[o->kind], o->chunk, o->micro);
            return r.ok = 0, r;
        }
    }
    for (int st = 0; st < P; st++)
        r.span = fmax(r.span, free_at[st]);
    double most = 0;
    for (int st = 0; st < P; st++)
        most = fmax(most, r.busy[st]);
    r.bubble = 1 - most / r.span;
    snprintf(r.why, sizeof r.why, "each op once, every wait met, completes");
    return r;
}
