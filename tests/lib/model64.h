/*
 * model64.h: lecture_08's model (lectures/lib/mlp.h) again, in float64 plain
 * loops that share no code with it: the independent reference the tests
 * judge the float32 model and every training strategy against.
 *
 * Only the starting point is shared: the data and initial weights are read
 * from the lecture's own make_data() and init_layer(), so both start from
 * the same numbers.
 */
#ifndef LECTERN_MODEL64_H
#define LECTERN_MODEL64_H

#include <stddef.h>

#include "lectern.h"
#include "lib/mlp.h"

typedef struct model64 {
    int batch, width, layers;
    double *w[MAX_LAYERS];                 /* width x width each */
    double *x;                             /* batch x width */
    double *h[MAX_LAYERS];                 /* pre-activations */
    double *a[MAX_LAYERS + 1];             /* a[0] = x, a[i + 1] = gelu(h[i]) */
    double *g[MAX_LAYERS];                 /* d loss / d w[i] */
    double *m[MAX_LAYERS], *v[MAX_LAYERS]; /* AdamW's moments */
    int step;
} model64;

/* The model of `c` with the lecture's data and initial weights. */
model64 model64_of(const mlp_config *c);
void model64_free(model64 *m);

/* mean(output^2), keeping every activation. */
double model64_forward(model64 *m);

/* Every weight gradient, by the chain rule (after model64_forward). */
void model64_backward(model64 *m);

/* One AdamW step with torch's defaults (betas 0.9, 0.999, eps 1e-8,
 * weight decay 0.01) and learning rate lr, from the textbook formulas. */
void model64_adamw_step(model64 *m, double lr);

/* A tensor's values as float64 (caller frees); max |a - b| / max |b|. */
double *model64_values(const tensor *t);
double model64_relative_error(const double *a, const double *b, size_t n);

#endif /* LECTERN_MODEL64_H */
