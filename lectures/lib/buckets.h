/*
 * buckets.h: lecture_08's DDP gradient buckets (one contiguous tensor per
 * bucket, the layers' gradients views into it) and the timing of one DDP
 * step four ways: the compute alone, the communication alone, all-reducing
 * after backward, or during it; with the model's real arithmetic, or with
 * modelled compute (model_compute) sized from this machine's communication.
 */
#ifndef LECTERN_BUCKETS_H
#define LECTERN_BUCKETS_H

#include "lectern.h"
#include "mlp.h"

/* Bucket b is one tensor; layer i's gradient grads[i] is a view into
 * bucket bucket_of[i], whose first (lowest) layer is bucket_first[b]. The
 * backward pass reaches the last layers first, so bucket 0 holds them. */
#define MAX_BUCKETS 64 /* of the modelled steps (a bucket a layer at most) */
typedef struct buckets {
    int n;
    tensor *bucket[MAX_LAYERS], *grads[MAX_LAYERS];
    int bucket_of[MAX_LAYERS], bucket_first[MAX_LAYERS];
    char order[256]; /* "layers 2-3, layers 0-1": the buckets in the order backward fills them */
} buckets;

buckets *buckets_new(const mlp_config *c, int layers_per_bucket, int device);
void buckets_free(buckets *g);

/* How a timed step communicates: not at all (the compute alone), only
 * communicates (each bucket's async all-reduce started back to back, no
 * compute: the communication alone), the same all-reduces started after
 * the whole backward pass, or each bucket's started the moment backward has
 * filled it. All three use the same non-blocking calls (Open MPI's
 * non-blocking all-reduce is another algorithm than its blocking one,
 * sometimes twice as slow here): what differs is only when they start. */
enum { NO_ALL_REDUCE, COMM_ALONE, AFTER_BACKWARD, DURING_BACKWARD, STEP_MODES };

/* What the timing of a step's ways gives: each way's median over the
 * trials, and the medians of the two ratios the lesson bounds, each taken
 * within a trial (its ways back to back): the speed-up (after backward /
 * during) and the overlapped step over the longer of compute alone and
 * communication alone. forward_ms, backward_ms: a modelled step's compute
 * for a layer (the median over the trials). */
typedef struct step_times {
    double ms[STEP_MODES];
    double speedup, over_longer;
    double forward_ms, backward_ms;
    int rounds; /* time_modelled_ddp_steps: the rounds of trials it ran (a disturbed round is run again) */
} step_times;

/* The modelled DDP step's lesson, the bounds its checks hold it to (derived in buckets.c, at
 * COMPUTE_PER_COMMUNICATION): the overlapped step at most OVERLAP_OVER_LONGER_MAX x the longer of compute alone and
 * communication alone, and all-reducing after backward at least OVERLAP_SPEEDUP_MIN x as long. */
#define OVERLAP_OVER_LONGER_MAX 1.15
#define OVERLAP_SPEEDUP_MIN 1.3
enum { MODELLED_ROUNDS = 3 };

/* Inside a spawn, every rank calling it: one DDP step's forward and
 * backward on x (no optimizer step: the same every way) timed `trials`
 * times each way, the ways taking turns so that a busy spell of the machine
 * hits all of them alike, after one warm-up each; the slowest rank's times
 * (dist_timer). */
void time_ddp_steps(const mlp_config *c, tensor *const *w, buckets *g, tensor *x, int trials, step_times *out);

/* The same step with modelled compute: `layers` layers whose gradients are
 * `layer_floats` floats each, one bucket a layer (real tensors, really
 * all-reduced), and each layer's forward and backward modelled
 * (model_compute). Every rank calling it: in each trial the communication
 * alone is timed first, and that trial's compute sized from it. A round of
 * `trials` whose medians miss the bounds above is run again, up to
 * MODELLED_ROUNDS rounds (out->rounds): every rank holds the same slowest-rank
 * times, so all decide alike. */
void time_modelled_ddp_steps(int layers, int64_t layer_floats, int trials, step_times *out);

/* The modelled DDP step's layer, its gradient a bucket: 1024 x 1024
 * floats, 4.19 MB (why this size: buckets.c, at COMPUTE_PER_COMMUNICATION). */
enum { MODELLED_LAYER_ROWS = 1024, MODELLED_LAYER_COLS = 1024 };

/* The bucket sweep with modelled compute (lecture_ddp): `layers` layers of
 * layer_floats floats each, in buckets of per_bucket[k] layers for each k
 * (a bucket's layers' backward one modelled span, then its all-reduce);
 * every rank calling it. Each trial times the middle size's all-reduces
 * alone first (per_bucket[n_sizes / 2]: sized_buckets buckets; comm_ms, its
 * median) and sizes that trial's compute from it (forward_ms, backward_ms:
 * a layer's, from the median), then every bucket size its four ways;
 * size[k]: bucket size k's medians. */
#define MAX_SWEEP 8
typedef struct bucket_sweep {
    int trials, sized_buckets;
    double comm_ms, forward_ms, backward_ms;
    step_times size[MAX_SWEEP];
} bucket_sweep;
void time_modelled_bucket_sweep(int layers, int64_t layer_floats, const int *per_bucket, int n_sizes,
                                bucket_sweep *out);

/* The real and the modelled step side by side, a row each: the four
 * ways' medians and the two ratios; the caption says what the modelled
 * step is (a layer's modelled times). A table for the caller to show. */
table_t *overlap_table(int world_size, int64_t per_rank, int trials, int real_buckets, int modelled_buckets,
                       const step_times *real, const step_times *modelled);

/* Rank 0: a note on what overlap can hide on the backend this spawn ran on (NCCL's
 * second stream, ranks sharing GPUs staged through the host, or CPU ranks whose
 * progress threads share the cores with the matmuls), and which way the measured
 * speed-up (blocking / async) went, so the words cannot disagree with the table. */
void explain_overlap_here(int world_size, int device, double speedup);

#endif
