/*
 * mlp.h: the model every strategy of lecture_08 trains, and how to judge
 * two float32 results equal.
 *
 * A stack of square linear layers, each followed by GELU, trained to push
 * its output to zero: loss = mean(output^2). The forward and backward
 * passes are written out by hand so a lecture can show (and cut up) every
 * matrix product. Every rank that calls make_data() or init_layer() gets
 * the same numbers, because each draws from its own fixed seed.
 *
 * Lectures include this header and link lectures/lib/mlp.c (the Makefile
 * does it); tests/lectures/test_mlp.c checks it against float64 arithmetic of its
 * own and against finite differences.
 */
#ifndef LECTERN_MLP_H
#define LECTERN_MLP_H

#include <stdint.h>

#include "lectern.h"

#define MAX_LAYERS 8
enum { DATA_SEED = 0, WEIGHT_SEED = 1000 };

typedef struct mlp_config {
    int batch; /* examples in one step (the whole data set) */
    int width; /* every layer is width x width */
    int layers;
    int steps;
    float lr; /* AdamW's learning rate */
} mlp_config;

/* The data set (batch x width), from DATA_SEED. */
tensor *make_data(const mlp_config *c, int device);

/* Layer `layer`'s full weights (width x width): standard normal from
 * WEIGHT_SEED + layer, scaled by 1/sqrt(width) so activations keep their
 * size through the stack. */
tensor *init_layer(const mlp_config *c, int layer, int device);

/* y = gelu(x @ w); the pre-activation h = x @ w is kept in *h for backward. */
tensor *layer_forward(const tensor *x, const tensor *w, tensor **h);

/* Backward of y = gelu(x @ w) given dy = dloss/dy:
 *   dh = dy * gelu'(h),   dw = beta * dw + x^T dh,   dx = dh w^T.
 * beta 1 accumulates over micro-batches. *dx is made only when dx is not
 * NULL (the first layer's input needs no gradient). */
void layer_backward(const tensor *x, const tensor *h, const tensor *w, const tensor *dy, tensor *dw, tensor **dx,
                    float beta);

/* Forward through `layers` layers: acts[0] = x, acts[i + 1] = layer i's
 * output, pre[i] its pre-activation. */
void forward(tensor *const *w, int layers, tensor *x, tensor **acts, tensor **pre);

/* grads[i] = d mean(acts[layers]^2) / d w[i], for every layer. */
void backward(tensor *const *w, int layers, tensor **acts, tensor **pre, tensor **grads);

/* Frees what forward() kept (not acts[0], the caller's input). */
void free_saved(int layers, tensor **acts, tensor **pre);

/* ---- judging float32 results ---- */

/* The largest |element| of t. */
double largest(const tensor *t);

/* Inside a spawn, every rank calling it: the largest elementwise difference
 * between ranks over a list of tensors (all-reduce a copy with MAX, another
 * with MIN, compare). 0 means every rank holds bit-identical values. */
double spread_over_ranks(tensor *const *ts, int n);

/* How far apart two float32 computations of this model's gradients may be,
 * relative to the largest gradient, when they differ only in the order of
 * their sums (another BLAS kernel, the batch cut into slices, columns cut
 * across ranks). A float32 sum of n terms, in any order, is exact to
 * n * u times the sum of the terms' sizes (u = 2^-24, half the spacing of
 * floats near 1). Every gradient goes through one such sum per layer on the
 * way down and one more for the weight gradient, each of at most
 * max(batch, width) terms; taking the largest gradient as the size of what
 * is summed, two orders differ by about
 *     2 (layers + 1) max(batch, width) u.
 * A heuristic, not a bound: the rigorous bound is relative to the sum of
 * the terms' sizes, which can exceed the largest result, and errors carried
 * down through the layers are scaled by the weights. It is a tolerance with
 * room on both sides:
 *   - right answers: tests/lectures/test_mlp.c measures one float32 run against
 *     float64 at under 1% of it on every OpenBLAS kernel;
 *   - wrong answers: a doubled gradient, or a sum where an average belongs
 *     (p ranks: p times the average), is off by 100% or more of the largest
 *     gradient, a skipped layer's gradient by all of it: over 6000 times this
 *     tolerance (1.5e-4 at 4 layers, width 512);
 *     tests/lectures/test_lecture_08_planted.py plants each and sees the check fail. */
double gradient_tolerance(const mlp_config *c);

/* The same for the model's output, relative to its largest element
 * (forward only: `layers` sums): 2 layers max(batch, width) u. */
double output_tolerance(const mlp_config *c);

/* How far AdamW can carry one parameter apart in two runs whose gradients
 * differ only by rounding, after c->steps steps. AdamW moves a parameter by
 * lr * m_hat / (sqrt(v_hat) + eps): a gradient's running mean over its own
 * running size. By Cauchy-Schwarz that ratio is at most
 *     R_t = sqrt(sum_i a_i^2 / b_i) sqrt(sum_i b_i) / sum_i a_i,
 * a_i = (1 - beta1) beta1^(t-i), b_i = (1 - beta2) beta2^(t-i), whatever
 * the gradients (R_1 = 1, R_5 = 1.011). A gradient near zero whose sign
 * rounding flips therefore moves its parameter up to 2 lr R_t apart in step
 * t: the bound is the sum over the steps. It says nothing about which run is
 * right (any two gradient sequences stay within it): compare gradients for
 * that. */
double adamw_rounding_bound(const mlp_config *c);

#endif /* LECTERN_MLP_H */
