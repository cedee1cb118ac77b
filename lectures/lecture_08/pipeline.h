/*
 * pipeline.h: what lecture_08's pipeline stages keep between their
 * forwards and backwards, their clock stamps, one micro-batch's forward
 * and backward computation, and the report rank 0 makes of them (a table
 * per stage, the bubble replayed, the quickest pass's timeline handed to
 * the lecture). A stage computes for real (its layers' arithmetic) or, when
 * the arguments say so, as modelled compute (model_compute: a device busy
 * for a set time, the core free); its messages are real either way. The
 * messages (dist_recv, dist_isend) and the schedules, the order of the
 * operations, are in the lecture.
 */
#ifndef LECTERN_PIPELINE_H
#define LECTERN_PIPELINE_H

#include "lectern.h"
#include "lib/mlp.h"
#include "train.h"

#define MAX_MICRO_BATCHES 32
#define MAX_STAGES 4

enum { GPIPE = 0, ONE_F_ONE_B = 1 };
extern const char *const SCHEDULE_NAMES[2];

/* Each spawn runs its schedule this many times and shows the run that took
 * the least time: the one the machine's other work disturbed least (as a
 * benchmark takes the best of several). A modelled pass takes the time it
 * was given, whatever the machine does meanwhile (its waits aside), and is
 * long: fewer of them (one with --quick). */
enum { PIPE_RUNS = 5, MODELLED_RUNS = 2 };

/* Fraction of a schedule's time that a stage sits idle, GPipe or 1F1B alike:
 * with p stages and m micro-batches each pass takes m + p - 1 slots, p - 1
 * of them empty. */
double bubble_fraction(int stages, int micro_batches);

/* The measured bubble of a pass whose stages were busy busy[0..stages-1] ms
 * in a span of `span` ms: 1 - (the busiest stage's busy time) / span. The
 * formula's stages are equal, so each idles its bubble; on stages of
 * unequal speed the slowest sets the pace, and the span is its work plus
 * its bubble, while a faster stage idles longer still, waiting for it:
 * that is the stages' imbalance, not the schedule's fill and drain. *mean
 * (if not NULL) gets every stage's idle fraction averaged. */
double pipeline_bubble(const double *busy, int stages, double span, double *mean);

/* One forward or backward of one micro-batch on one stage, in ms after the
 * spawn began; gathered on rank 0 for the timeline. */
typedef struct pipe_event {
    float backward, micro_batch, start_ms, end_ms;
} pipe_event;

/* Everything a stage keeps between its forwards and backwards. */
typedef struct stage {
    const train_args *a;
    int rank, world, first_layer, per_stage, m, device;
    int64_t mb; /* rows per micro-batch */
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    tensor *data; /* stage 0 only */
    tensor *acts[MAX_MICRO_BATCHES][MAX_LAYERS + 1], *pre[MAX_MICRO_BATCHES][MAX_LAYERS];
    dist_request *sent[MAX_MICRO_BATCHES];      /* the forward send of each micro-batch */
    dist_request *sent_back[MAX_MICRO_BATCHES]; /* the backward send of each (stages > 0) */
    tensor *dx_out[MAX_MICRO_BATCHES];          /* what it sends: kept until it has gone */
    /* Where messages land, reused rather than allocated for each: inputs
     * (stages > 0) come from the spares, or a new buffer when none is
     * spare, and go back to them when their micro-batch's backward is done
     * (so a stage holds as many as it has micro-batches in flight); the
     * output's gradient (stages before the last) lands in one buffer. */
    tensor *spare[MAX_MICRO_BATCHES], *recv_grad;
    int n_spare;
    int backwards_done, in_flight, most_in_flight;
    float loss;       /* last stage: the batch's loss */
    double out_diff;  /* last stage: max |output - one device| */
    tensor *expected; /* last stage: one device's output */
    pipe_event events[PIPE_RUNS][2 * MAX_MICRO_BATCHES];
    int run, runs, n_events;
    int modelled; /* forward and backward are model_compute() (a->forward_ms, a->backward_ms) */
} stage;

/* The pipelines' model: the lecture's (base) twice as deep, with a batch of
 * 1024 (256 with --quick), so that a micro-batch's work is long against a
 * message's. */
mlp_config pipeline_config(const mlp_config *base);

/* This stage's layers, its gradients, stage 0's data, the last stage's
 * expected output (none of them for a modelled stage, which only sends
 * tensors of an activation's shape); stage_free frees them. */
stage *stage_new(const train_args *a, int rank, int world_size);
void stage_free(stage *s);
/* Before a pass of the schedule: no stamps yet, gradients and loss from zero. */
void stage_begin_pass(stage *s);

/* Milliseconds since the spawn began (a->clock_base), on the monotonic clock
 * all ranks share; stamp() records one operation that began at `start`. */
double ms_since(const stage *s);
void stamp(stage *s, int backward, int k, double start);

/* The lecture's schedule moves the messages (dist_recv, dist_isend); these
 * keep the rest. stage_input: where micro-batch k's activation comes in
 * (stage 0: its rows of the data; a later stage: a spare receive buffer, or
 * a new one). stage_forward: micro-batch k through this stage's layers (the
 * last stage adds its loss); returns the activation to send on.
 * stage_forward_done: after the forward's stamp and send (the last stage
 * compares its output with one device's, first pass only). stage_backward:
 * micro-batch k's gradients from dy, the output's gradient received (NULL
 * on the last stage: it starts from the loss); weight gradients add up over
 * the micro-batches; returns the input's gradient, to send back.
 * stage_backward_done: after the backward's stamp and send: dx kept until
 * the schedule's end (its send may still be going), the micro-batch's
 * activations freed, its receive buffer made spare. */
tensor *stage_input(stage *s, int k);
tensor *stage_forward(stage *s, int k, tensor *x);
void stage_forward_done(stage *s, int k);
tensor *stage_backward(stage *s, int k, tensor *dy);
void stage_backward_done(stage *s, int k, tensor *dx);

/* What rank 0 of a pipeline spawn returns to the lecture (spawn_return). */
typedef struct pipe_result {
    /* The bubble: the busiest stage's idle time over the span, the time the
     * pipeline took beyond the work of the stage that sets its pace (see
     * pipeline_bubble). mean: every stage's idle fraction, averaged; above
     * the bubble when stages run at unequal speeds. */
    double bubble, mean, formula, span_ms;
    double replayed, replayed_mean; /* the same, the schedule replayed with the stages' own times, messages free */
    int stage0_held, overlapped;    /* stage 1 began a forward before stage 0's last forward ended */
    double op_ms[2][2];             /* the first and the last stage's mean forward and backward, in ms */
    double load;                    /* the load average as the run ended (-1: unknown) */
    long cores;                     /* the cores online */
    int stages, m, modelled, schedule;
    int spawns;           /* a modelled run: the spawns it took (run_modelled_pipelines runs a disturbed one again) */
    double late_ms;       /* a modelled run's quickest pass: its operations' lateness beyond LATE_SLACK_MS, summed */
    int single_copy;      /* Open MPI moved messages by its single-copy path (the pool's choice, cma) */
    int held[MAX_STAGES]; /* each stage's most micro-batches' activations held at once */
    double together_ms;   /* how long stages 0 and 1 computed at the same time, in the quickest pass */
    double busy0_ms;      /* stage 0's work in that pass */
    /* the quickest pass: each stage's operations in the order it ran them, in ms from the pass's first start */
    pipe_event timeline[MAX_STAGES][2 * MAX_MICRO_BATCHES];
} pipe_result;

/* Every rank calling it: rank 0 gathers every stage's stamps and its
 * gradients' comparison with one device (diff, tolerance; NAN for a
 * modelled stage), hands a pipe_result (the quickest run's figures and
 * timeline) to the lecture (spawn_return), and returns, for a real run, a
 * table (a row per stage) for the caller to show; NULL on other ranks and
 * for a modelled run. */
table_t *report_timeline(stage *s, int schedule, double grad_diff, double grad_tol);

/* Modelled stages: a micro-batch's forward keeps a stage's device busy for MODELLED_F_MS and its backward twice as
 * long (a real network's ratio; homework_parallel's sizes). The formula's stages are equal and its messages free.
 * Here the messages are real (an activation, batch / m rows of the model's width) and each operation ends when its
 * sleeping rank wakes: each adds a delay d to the critical path of m + p - 1 slots, and the measured bubble is
 * about the formula plus 2 d / (f + b) (1 - formula). Measured on the 2-core VM: a wake-up 0.1 ms late (median;
 * 1 ms at the 90th percentile, 2.5-3.3 ms at the 99th, with two busy loops beside it), a message 0.2-0.5 ms. 10% of
 * the formula is 0.011 (2 stages, 8 micro-batches), 0.027 (4, 8) and 0.0086 (4, 32): with f + b = 60 ms that leaves
 * d up to 0.35, 0.9 and 0.28 ms an operation, the median's several times over, not the 90th percentile's: of
 * MODELLED_RUNS passes the quickest counts, the one the machine's other work disturbed least. That is not always
 * enough: on the same VM, in full runs of the lecture, one spawn in three had a stretch of wake-ups 2-11 ms late
 * (context switches at 40-160 thousand a second, other tenants' work) and both passes of one shape missed the bound
 * (0.094-0.139 against 0.0857 for 1F1B, 4 stages, 32 micro-batches). So a shape whose quickest pass misses
 * MODELLED_BOUND is spawned again, up to MODELLED_SPAWNS times, and the table says how many spawns each took. A
 * schedule that breaks the formula misses it in every pass (GPipe one micro-batch at a time: 0.51-0.76 against
 * 0.11-0.27), so the check still fails on a wrong schedule; it costs time only where the machine was disturbed. */
#define MODELLED_F_MS 20.0
#define MODELLED_BOUND 0.10 /* the lesson's bound: a modelled bubble within 10% of (p - 1) / (m + p - 1) */
/* A spell of late wake-ups lasted longer than three spawns (two full runs of the lecture in a row, 30-60 s), so
 * each modelled operation's lateness is measured too: how long it ran beyond its asked time, and how long after it
 * could start it started (a wake-up after its message came). In a quiet pass an operation ends 0.15 ms late
 * (median) and under LATE_SLACK_MS but for a few: a quiet pass's lateness beyond LATE_SLACK_MS, summed, 0-8 ms
 * (m = 32, 4 stages: under 0.004 of the span); in the disturbed spells 20-800 ms, and beside two niced busy loops
 * the late starts as much again; on the NCCL emulator beside a busy loop 5-600 ms. A late operation delays every operation after it by at most its lateness, so the
 * busiest stage's idle time grows by at most the pass's summed lateness L: the check allows the bubble up to
 * (1 + MODELLED_BOUND) formula + L / span, and the table shows L. A wrong schedule is not late (its operations take their asked time), so it still fails: GPipe
 * one micro-batch at a time measured 0.51-0.76 against 0.11-0.27. */
#define LATE_SLACK_MS 0.5 /* above a message's and a wake-up's cost (0.1-0.5 ms), below a late wake-up's (2-11) */
enum { MODELLED_SPAWNS = 3 };
enum { N_MODELLED_SHAPES = 6 };
/* {stages, micro-batches, schedule}: GPipe and 1F1B on 2 and 4 stages with 8 micro-batches, on 4 with 32. */
extern const int MODELLED_SHAPES[N_MODELLED_SHAPES][3];

/* The lecture: spawns `fn` (the lecture's pipeline_main) on every modelled
 * shape in turn, with modelled compute, and keeps rank 0's result of each. */
void run_modelled_pipelines(spawn_fn fn, const mlp_config *c, pipe_result twin[N_MODELLED_SHAPES]);

/* A modelled run's highest bubble within the lesson's bound: (1 + MODELLED_BOUND) formula + late_ms / span_ms. */
double modelled_upper(const pipe_result *r);
/* Its lowest: (1 - MODELLED_BOUND) formula - late_ms / span_ms. Lateness makes the stages' busy time longer, which
 * can shrink the bubble as well as grow it (1F1B, 4 stages, 32 micro-batches measured 0.065 against 0.077 beside
 * other builds, 199 ms late in that pass); a schedule that starts work before its message came is not late. */
double modelled_lower(const pipe_result *r);

/* The lecture: a table of the real runs (GPIPE 2 and 4 stages, 1F1B 4
 * stages, 8 micro-batches) and the modelled ones (the lecture's
 * MODELLED_SHAPES order: each schedule on 2 and 4 stages with 8, on 4 with
 * 32), a row per schedule and shape: the formula, each run's measured
 * bubble, stage 0's activations held, the spawns it took, its lateness and
 * its bound. */
table_t *pipeline_pairs_table(const pipe_result real[3], const pipe_result modelled[N_MODELLED_SHAPES]);

/* The lecture: one chart (for it to show) of a schedule's real run and its modelled twin,
 * each stage's operations on a row of its own ("real: stage 0", "modelled:
 * stage 0"), the modelled ones drawn as modelled (chart_span_modelled). */
chart_t *pipelines_chart(const pipe_result *real, const pipe_result *modelled, const char *schedule);

/* Why a spawn's measured bubble is where it is against the formula, which
 * gives every stage a core, equal work and free messages: a clause for the
 * lecture's sentence ("within 15% of the formula: ..."), from the bubble,
 * its replay, the cores and the load. */
const char *bubble_why(const pipe_result *r, int stages);

/* The lecture, after a real run: the note that splits its bubble into the
 * schedule replayed with the stages' own operation times (nothing between
 * them) and the time between operations, with the stages' mean times. */
void note_replay(const pipe_result *r);

/* A table (for the caller to show) of the bubble in both conventions, of the total and of the ideal
 * time, for 2 and 4 stages with m micro-batches and 4 stages with 32. */
table_t *bubble_conventions_table(int m);

/* A modelled run's checks (in the lecture): its bubble within MODELLED_BOUND of the formula, give or take
 * lateness, and 1F1B's stage s holding at most p - s micro-batches' activations. */
void check_modelled(const pipe_result *r);

#endif
