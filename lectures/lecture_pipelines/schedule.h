/*
 * schedule.h: a pipeline schedule as data, and the rules an order must keep.
 * A schedule lists every stage's ops in the order the stage runs them;
 * check_order proves the order can run (each op exactly once, every wait
 * met, the messages between two stages received in the order they were
 * sent) and replays it with given op times: its bubble, its span, the most
 * micro-batches' activations each stage holds. The orders themselves are
 * the lecture's lesson (lecture_pipelines makes them); this file only
 * checks them.
 */
#ifndef LECTERN_SCHEDULE_H
#define LECTERN_SCHEDULE_H

enum { SCHED_MAX_STAGES = 8, SCHED_MAX_CHUNKS = 4, SCHED_MAX_MICRO = 16 };
enum { SCHED_MAX_OPS = 3 * SCHED_MAX_CHUNKS * SCHED_MAX_MICRO }; /* a stage's: F, B and W of each */

/* An op's kind: forward, input gradient, weight gradient, or the whole
 * backward (B and W as one, when the backward is not split). */
enum { OP_F, OP_B, OP_W, OP_BW, OP_KINDS };
extern const char *const OP_NAME[OP_KINDS]; /* "F", "B", "W", "BW" */

typedef struct op {
    int kind, chunk, micro;
} op;

/* p stages, each holding v chunks of the model, m micro-batches. Model
 * part q = chunk * p + stage: a micro-batch visits stage 0, 1, .., p - 1,
 * then stage 0 again for chunk 1. `split`: the backward is B then W, not
 * one BW. `which` is the caller's name for the schedule. Flat (no
 * pointers), so a spawn's arguments can carry it. */
typedef struct schedule {
    int which, p, v, m, split;
    int n[SCHED_MAX_STAGES];
    op ops[SCHED_MAX_STAGES][SCHED_MAX_OPS];
} schedule;

/* Appends an op to stage `stage`'s order (the caller keeps within
 * SCHED_MAX_OPS; check_order names any op out of range). */
void schedule_push(schedule *s, int stage, int kind, int chunk, int micro);

/* The model parts before and after chunk c of stage st, as a stage
 * (returned) and its chunk (*pc, *nc); -1 at the model's ends. */
int prev_part(const schedule *s, int st, int c, int *pc);
int next_part(const schedule *s, int st, int c, int *nc);

/* What check_order found: ok, or why not (the stage and op). */
typedef struct order_sim {
    int ok;
    char why[200];
    double bubble, span, busy[SCHED_MAX_STAGES]; /* bubble: 1 - the busiest stage's busy time / span */
    int held[SCHED_MAX_STAGES]; /* most micro-batches' activations a stage held at once (F done, W or BW not yet) */
} order_sim;

/* Checks an order: every op exactly once on its stage; then replays it
 * with durations dur[kind], each stage running its ops in its order, each
 * op starting when its stage is free and its input has come: a forward the
 * part before's forward of that micro-batch (a message), a B or BW the part
 * after's (a message; the model's last part starts from its own loss,
 * after its forward), a W its own B. An order that leaves a stage waiting
 * for what never comes (a deadlock), or for another message than the one
 * that arrives first, fails. */
order_sim check_order(const schedule *s, const double dur[OP_KINDS]);

#endif
