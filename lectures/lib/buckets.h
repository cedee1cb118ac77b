/*
 * buckets.h: lecture_08's DDP gradient buckets (one contiguous tensor per
 * bucket, the layers' gradients views into it) and the timing of one DDP
 * step three ways, communicating not at all, after backward, or during it.
 */
#ifndef LECTERN_BUCKETS_H
#define LECTERN_BUCKETS_H

#include "lectern.h"
#include "mlp.h"

/* Bucket b is one tensor; layer i's gradient grads[i] is a view into
 * bucket bucket_of[i], whose first (lowest) layer is bucket_first[b]. The
 * backward pass reaches the last layers first, so bucket 0 holds them. */
typedef struct buckets {
    int n;
    tensor *bucket[MAX_LAYERS], *grads[MAX_LAYERS];
    int bucket_of[MAX_LAYERS], bucket_first[MAX_LAYERS];
    char order[256]; /* "layers 2-3, layers 0-1": the buckets in the order backward fills them */
} buckets;

buckets *buckets_new(const mlp_config *c, int layers_per_bucket, int device);
void buckets_free(buckets *g);

/* How a timed step communicates: not at all (the compute alone), each
 * bucket's blocking all-reduce after the whole backward pass, or each
 * bucket's async all-reduce started the moment backward has filled it. */
enum { NO_ALL_REDUCE, AFTER_BACKWARD, DURING_BACKWARD, STEP_MODES };
extern const char *const STEP_MODE_NAMES[STEP_MODES];

/* Inside a spawn, every rank calling it: one DDP step's forward and
 * backward on x (no optimizer step: the same every way) timed `trials`
 * times each way, the ways taking turns so that a busy spell of the machine
 * hits all three alike, after one warm-up each. median_ms[mode]: the median
 * of the slowest rank's times (dist_timer). */
void time_ddp_steps(const mlp_config *c, tensor *const *w, buckets *g, tensor *x, int trials,
                    double median_ms[STEP_MODES]);

/* time_ddp_steps' medians as a table, a row per way. */
void show_overlap(int world_size, int64_t per_rank, int trials, const double median_ms[STEP_MODES]);

/* Rank 0: a note on what overlap can hide on the backend this spawn ran on (NCCL's
 * second stream, ranks sharing GPUs staged through the host, or CPU ranks whose
 * progress threads share the cores with the matmuls), and which way the measured
 * speed-up (blocking / async) went, so the words cannot disagree with the table. */
void explain_overlap_here(int world_size, int device, double speedup);

#endif
