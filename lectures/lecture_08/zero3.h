/*
 * zero3.h: lecture_08's ZeRO-3 step timed three ways, to show what
 * prefetching the next layer's all-gather buys: with every layer already
 * whole (no gathers: the compute and the reduce-scatters alone), gathering
 * each layer when it is needed, and prefetching (the next layer's gather
 * started before the current layer computes, as PyTorch's FSDP does); with
 * the model's real arithmetic, or with modelled compute (model_compute)
 * sized from this machine's own gathers.
 */
#ifndef LECTERN_ZERO3_H
#define LECTERN_ZERO3_H

#include "lectern.h"
#include "lib/mlp.h"

enum { Z3_NO_GATHERS, Z3_GATHER_WHEN_NEEDED, Z3_PREFETCH, Z3_MODES };

/* What the timing of the three ways gives: each way's median over the
 * trials, and the fraction of the gathers' time (gathering when needed less
 * no gathers) that prefetching hid, taken within each trial (its ways back
 * to back), its median. forward_ms, backward_ms: a modelled layer's compute
 * (the median over the trials; 0 for the real step). */
typedef struct z3_times {
    double ms[Z3_MODES];
    double hidden;
    double forward_ms, backward_ms;
    int rounds; /* time_modelled_zero3_steps: the rounds of trials it ran (a disturbed round is run again) */
} z3_times;

/* What the modelled step's prefetch must hide of the gathers' time: all but
 * the first of 2L - 1 gathers can hide, 14/15 = 0.93 with 8 layers, and
 * quiet runs here measured 0.93-0.99; 0.7 leaves room for a wake-up or two
 * late, while a prefetch that waits for its gather at once hides nothing. */
#define PREFETCH_HIDDEN_MIN 0.7
/* The modelled step's rounds of trials at the most. */
enum { PREFETCH_ROUNDS = 3 };

/* Inside a spawn, every rank calling it: the step's forward and backward
 * on x with this rank's pieces (piece[i]: rows [rank w/p, (rank+1) w/p) of
 * layer i, as zero3_main holds them), each layer's gradient reduce-scattered
 * (async, waited at the end of backward) in every way; timed `trials` times
 * each way, the ways taking turns, after a warm-up; the slowest rank's
 * times. */
void time_zero3_steps(const mlp_config *c, tensor *const *piece, tensor *x, int trials, z3_times *out);

/* The same step with modelled compute: `layers` layers of width x width
 * floats (real pieces, really gathered and reduce-scattered), each layer's
 * forward and backward modelled; in each trial one layer's gather alone is
 * timed first and that trial's compute sized from it. A round of `trials`
 * whose median hides less than PREFETCH_HIDDEN_MIN is run again, up to
 * PREFETCH_ROUNDS rounds (out->rounds): every rank holds the same
 * slowest-rank times, so all decide alike. */
void time_modelled_zero3_steps(int width, int layers, int trials, z3_times *out);

/* The real and the modelled step side by side, a row each: a table for the caller to show. */
table_t *prefetch_table(int world_size, int trials, int real_layers, int modelled_layers, const z3_times *real,
                        const z3_times *modelled);

#endif
