/*
 * mlp.c: the model of mlp.h. See there for what each function computes.
 */
#include <float.h>
#include <math.h>

#include "mlp.h"

tensor *make_data(const mlp_config *c, int device) {
    manual_seed(DATA_SEED);
    return randn(c->batch, c->width, device);
}

tensor *init_layer(const mlp_config *c, int layer, int device) {
    manual_seed(WEIGHT_SEED + (uint64_t)layer);
    tensor *w = randn(c->width, c->width, device);
    scale_(w, 1.0f / sqrtf((float)c->width));
    return w;
}

tensor *layer_forward(const tensor *x, const tensor *w, tensor **h) {
    *h = matmul(x, w);
    return gelu(*h);
}

void layer_backward(const tensor *x, const tensor *h, const tensor *w, const tensor *dy, tensor *dw, tensor **dx,
                    float beta) {
    tensor *dh = gelu_backward(h, dy);
    matmul_into(dw, x, dh, 1, 0, 1.0f, beta);
    if (dx) {
        *dx = empty(x->shape[0], x->shape[1], x->device);
        matmul_into(*dx, dh, w, 0, 1, 1.0f, 0.0f);
    }
    tensor_free(dh);
}

void forward(tensor *const *w, int layers, tensor *x, tensor **acts, tensor **pre) {
    acts[0] = x;
    for (int i = 0; i < layers; i++)
        acts[i + 1] = layer_forward(acts[i], w[i], &pre[i]);
}

void backward(tensor *const *w, int layers, tensor **acts, tensor **pre, tensor **grads) {
    tensor *dy = mse_loss_backward(acts[layers]);
    for (int i = layers - 1; i >= 0; i--) {
        tensor *dx = NULL;
        layer_backward(acts[i], pre[i], w[i], dy, grads[i], i > 0 ? &dx : NULL, 0.0f);
        tensor_free(dy);
        dy = dx;
    }
}

void free_saved(int layers, tensor **acts, tensor **pre) {
    for (int i = 0; i < layers; i++) {
        tensor_free(acts[i + 1]);
        tensor_free(pre[i]);
    }
}

double largest(const tensor *t) {
    tensor *zero = zeros(t->shape[0], t->ndim == 2 ? t->shape[1] : 0, t->device);
    double m = max_abs_diff(t, zero);
    tensor_free(zero);
    return m;
}

double spread_over_ranks(tensor *const *ts, int n) {
    double spread = 0;
    for (int i = 0; i < n; i++) {
        tensor *hi = to_device(ts[i], ts[i]->device), *lo = to_device(ts[i], ts[i]->device);
        dist_all_reduce(hi, DIST_MAX);
        dist_all_reduce(lo, DIST_MIN);
        spread = fmax(spread, max_abs_diff(hi, lo));
        tensor_free(hi);
        tensor_free(lo);
    }
    return spread;
}

/* u = 2^-24: FLT_EPSILON (2^-23, the spacing of floats at 1) halved. */
static double longest_sum(const mlp_config *c) { return c->batch > c->width ? c->batch : c->width; }

double gradient_tolerance(const mlp_config *c) { return 2.0 * (c->layers + 1) * longest_sum(c) * (FLT_EPSILON / 2); }

double output_tolerance(const mlp_config *c) { return 2.0 * c->layers * longest_sum(c) * (FLT_EPSILON / 2); }

double adamw_rounding_bound(const mlp_config *c) {
    const double beta1 = 0.9, beta2 = 0.999; /* AdamW's defaults (adamw_new) */
    double bound = 0;
    for (int t = 1; t <= c->steps; t++) {
        double a2_over_b = 0, b_sum = 0, a_sum = 0;
        for (int i = 1; i <= t; i++) {
            double a = (1 - beta1) * pow(beta1, t - i), b = (1 - beta2) * pow(beta2, t - i);
            a2_over_b += a * a / b;
            b_sum += b;
            a_sum += a;
        }
        bound += 2.0 * c->lr * sqrt(a2_over_b) * sqrt(b_sum) / a_sum;
    }
    return bound;
}
