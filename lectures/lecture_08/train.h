/*
 * train.h: what lecture_08's training strategies share: one device's run
 * (the baseline every strategy is judged against), the arguments their
 * ranks get, and small helpers for what they print.
 */
#ifndef LECTERN_TRAIN_H
#define LECTERN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "lectern.h"
#include "lib/layers.h"
#include "lib/mlp.h"

/* What one device computed, as host arrays: the parent keeps it and sends
 * it to the ranks inside their arguments. */
typedef struct baseline_run {
    mlp_config cfg;
    float first_loss;    /* step 0, whole batch */
    float *first_output; /* step 0: batch x width */
    float *first_grads;  /* step 0: layers x width x width */
    float *trained;      /* after all steps: layers x width x width */
} baseline_run;

/* The arguments every strategy's ranks get: the configuration and what one
 * device computed (its step-0 output and gradients, its trained weights),
 * so that each rank can say how far it is from it. */
typedef struct train_args {
    mlp_config cfg;
    int micro_batches; /* pipeline parallelism only */
    int schedule;      /* pipeline parallelism: GPIPE or ONE_F_ONE_B */
    double clock_base; /* pipeline parallelism: now_seconds() at the spawn */
    /* pipeline parallelism: when > 0, a stage's forward and backward of one
     * micro-batch are modelled compute of these many ms (model_compute)
     * instead of its layers' arithmetic; its messages stay real */
    double forward_ms, backward_ms;
    float first_loss;
    float expected[]; /* trained weights, step-0 output, step-0 gradients */
} train_args;

/* The arguments for a spawn (malloc'd, *size bytes: free it after the spawn). */
train_args *baseline_args(const baseline_run *baseline, int micro_batches, size_t *size);
/* One device's results, on `device`: layer i's trained weights, the step-0
 * output (batch x width), layer i's step-0 gradient (width x width). */
tensor *expected_trained(const train_args *a, int layer, int device);
tensor *expected_output(const train_args *a, int device);
tensor *expected_grad(const train_args *a, int layer, int device);
/* max |got - one device's step-0 gradient of `layer`|; *size becomes the
 * larger of itself and that gradient's largest element. */
double grad_diff(const train_args *a, const tensor *got, int layer, double *size);

/* Floats in all the layers' weights together. */
int64_t model_floats(const mlp_config *c);
/* "[512x512[-0.0279...], ...]": shape and first element of each tensor, in buf. */
const char *summaries(tensor *const *ts, int n, char *buf, size_t size);
/* one or many, as n is 1 or not. */
const char *plural(int n, const char *one, const char *many);
/* "[0.51, 0.49, ...]": a loss at each step, in buf. */
const char *losses_text(const float *loss, int steps, char *buf, size_t size);

/* lecture_08's model: 4 layers 512 wide (256 with --quick), batch 128 (--batch=N), 5 steps (2 with --quick);
 * a --batch that is not a number from 1 to 65536 is bad usage (exit 2). */
mlp_config training_config(void);
/* One device trains the model for b->cfg.steps steps on the whole batch, filling the rest of *b (malloc'd:
 * baseline_free), and returns a table (for the caller to show) of each step's loss and summaries() of the weights
 * after it. */
enum { PARAMS_TEXT = 512 };
table_t *one_device_train(baseline_run *b);
/* Step 0 only (its loss, output and gradients): b->trained stays zeros. */
void one_device_step0(baseline_run *b);
void baseline_free(baseline_run *b);

/* What a rank of a training strategy hands back to the lecture (spawn_return), by name: the lecture makes its
 * table in the parent from every rank's (results_table, buckets_table, tp_table). A field a strategy does not
 * measure stays 0. Each comparison with one device comes with its tolerance, so a reader (or a test) judges
 * the one by the other. */
enum { MAX_STEPS = 16 };
typedef struct rank_result {
    double first, rows;                 /* the rows (ZeRO-3) or columns (TP) of every layer held: first, how many */
    double state_bytes;                 /* model state held: weights, gradients, AdamW's two moments */
    double bytes, calls;                /* nominal bytes sent and calls made in step 0 */
    double calls_mb[2];                 /* with buckets: step 0's calls in micro-batch 0 (no_sync) and 1 */
    double one_loss, loss0;             /* TP: one device's step-0 loss (as the rank got it) and the rank's */
    double out_diff, out_tol;           /* TP: max |output - one device's| and its tolerance */
    double grad_diff, grad_tol;         /* step 0: max |gradient - one device's| and its tolerance, */
    double grad_max;                    /* gradient_tolerance() times this: one device's largest gradient element */
    double trained_diff, trained_bound; /* trained: max |parameter - one device's| and AdamW's rounding bound */
    int steps;                          /* losses in loss[] */
    float loss[MAX_STEPS];              /* the loss of the rank's slice at each step */
} rank_result;

/* In the lecture, after a spawn of world_size ranks that each gave spawn_return() a rank_result: a table, a row
 * per rank, for the caller to show (table_show). results_table (DDP, ZeRO-3): rank, first_row, rows, state_bytes,
 * bytes, calls, grad_diff, grad_tol, grad_max, trained_diff, trained_bound, losses ("[l0, l1, ...]").
 * buckets_table: rank, calls_mb0, calls_mb1, grad_diff, grad_tol, grad_max, losses. tp_table: rank, first_col,
 * one_loss, loss, out_diff, out_tol, grad_diff, grad_tol, grad_max, bytes, calls. A rank that returned no rank_result: lecture_fail. */
table_t *results_table(int world_size, const char *caption_fmt, ...) LECTERN_PRINTF(2, 3);
table_t *buckets_table(int world_size, const char *caption_fmt, ...) LECTERN_PRINTF(2, 3);
table_t *tp_table(int world_size, const char *caption_fmt, ...) LECTERN_PRINTF(2, 3);

/* Layer `layer`'s initial weights, whole (cut 'w'), or only rows (cut 'r')
 * or columns ('c') [first, last): what a rank that keeps that part holds. */
tensor *layer_part(const mlp_config *c, int layer, char cut, int64_t first, int64_t last, int device);
/* max over the layers of |got[i] - one device's layer i, cut as cut[i] says
 * ('w', 'r' or 'c', as layer_part; cut NULL: all whole)|: against one device's step-0 gradients
 * (STEP0_GRADS; *size becomes the larger of itself and the largest whole
 * gradient's element) or its trained weights (TRAINED). */
enum { STEP0_GRADS, TRAINED };
double diff_from_one_device(const train_args *a, int which, tensor *const *got, int layers, const char *cut,
                            int64_t first, int64_t last, double *size);

/* The table (for the caller to show) of model state per rank, P = params
 * parameters in fp32 with AdamW, for DDP and ZeRO stages 1 to 3 on `ranks` ranks. */
table_t *zero_stages_table(double params, int ranks);
/* max |out - one device's step-0 output|; *tol: the output's tolerance
 * (output_tolerance times one device's largest output element). */
double output_diff(const train_args *a, const tensor *out, double *tol);
/* One AdamW step per layer: opt[i] moves w[i] along g[i], for i in 0..n-1. */
void adamw_step_layers(adamw *const *opt, tensor *const *w, tensor *const *g, int n);
/* adamw_free of opt[0..n-1]. */
void adamw_free_layers(adamw *const *opt, int n);

/* ZeRO-3's question (predict): how many bytes one rank sends in a step of lecture_08's zero3_main, whose
 * count (`bytes`, the rank's nominal tally) is the answer; the hint describes the calls that code makes. */
void predict_zero3_bytes(int world_size, const mlp_config *c, double bytes);

/* Tensor parallelism's all-gather: every rank's (rows x cols/world) piece, side by side (rows x cols). */
tensor *all_gather_columns(tensor *piece, int world_size);
#endif
