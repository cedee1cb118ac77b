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
#include "mlp.h"

/* What one device computed, as host arrays: the parent keeps it and sends
 * it to the ranks inside their arguments. */
typedef struct baseline_run {
    mlp_config cfg;
    float first_loss;     /* step 0, whole batch */
    float *first_output;  /* step 0: batch x width */
    float *first_grads;   /* step 0: layers x width x width */
    float *trained;       /* after all steps: layers x width x width */
} baseline_run;

/* The arguments every strategy's ranks get: the configuration and what one
 * device computed (its step-0 output and gradients, its trained weights),
 * so that each rank can say how far it is from it. */
typedef struct train_args {
    mlp_config cfg;
    int micro_batches;    /* pipeline parallelism only */
    int schedule;         /* pipeline parallelism: GPIPE or ONE_F_ONE_B */
    double clock_base;    /* pipeline parallelism: now_seconds() at the spawn */
    float first_loss;
    float expected[];     /* trained weights, step-0 output, step-0 gradients */
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
/* "layer 2" or "layers 0-1", in buf. */
const char *layer_range(int first, int last, char *buf, size_t size);
/* one or many, as n is 1 or not. */
const char *plural(int n, const char *one, const char *many);

#endif
