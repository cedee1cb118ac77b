/*
 * train.c: what lecture_08's training strategies share (train.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* Floats in all the layers' weights together. */
int64_t model_floats(const mlp_config *c) {
    return (int64_t)c->layers * c->width * c->width;
}

/* "[512x512[-0.0279...], ...]": shape and first element of each tensor. */
const char *summaries(tensor *const *ts, int n, char *buf, size_t size) {
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", summarize(ts[i]));
    if (len < size) snprintf(buf + len, size - len, "]");
    return buf;
}

/* "layer 2" or "layers 0-1": layers first..last, in words. */
const char *layer_range(int first, int last, char *buf, size_t size) {
    if (first == last) snprintf(buf, size, "layer %d", first);
    else snprintf(buf, size, "layers %d-%d", first, last);
    return buf;
}

/* "1 rank", "4 ranks". */
const char *plural(int n, const char *one, const char *many) {
    return n == 1 ? one : many;
}



train_args *baseline_args(const baseline_run *baseline, int micro_batches, size_t *size) {
    const mlp_config *c = &baseline->cfg;
    int64_t nw = model_floats(c), nout = (int64_t)c->batch * c->width;
    *size = sizeof(train_args) + (size_t)(2 * nw + nout) * sizeof(float);
    train_args *args = calloc(1, *size);
    args->cfg = *c;
    args->micro_batches = micro_batches;
    args->first_loss = baseline->first_loss;
    memcpy(args->expected, baseline->trained, (size_t)nw * sizeof(float));
    memcpy(args->expected + nw, baseline->first_output, (size_t)nout * sizeof(float));
    memcpy(args->expected + nw + nout, baseline->first_grads, (size_t)nw * sizeof(float));
    return args;
}

/* Layer i's weights as one device trained them. */
tensor *expected_trained(const train_args *a, int layer, int device) {
    int64_t ww = (int64_t)a->cfg.width * a->cfg.width;
    return tensor_from(a->expected + layer * ww, a->cfg.width, a->cfg.width, device);
}

/* One device's step-0 output (batch x width). */
tensor *expected_output(const train_args *a, int device) {
    return tensor_from(a->expected + model_floats(&a->cfg), a->cfg.batch, a->cfg.width, device);
}

/* One device's step-0 gradient of layer i (width x width). */
tensor *expected_grad(const train_args *a, int layer, int device) {
    int64_t ww = (int64_t)a->cfg.width * a->cfg.width;
    const float *g = a->expected + model_floats(&a->cfg) + (int64_t)a->cfg.batch * a->cfg.width +
                     layer * ww;
    return tensor_from(g, a->cfg.width, a->cfg.width, device);
}

/* max |got - one device's step-0 gradient of `layer`|, and the largest
 * element of that gradient (the scale the difference is judged against). */
double grad_diff(const train_args *a, const tensor *got, int layer, double *size) {
    tensor *expected = expected_grad(a, layer, got->device);
    double diff = max_abs_diff(got, expected);
    *size = fmax(*size, largest(expected));
    tensor_free(expected);
    return diff;
}

