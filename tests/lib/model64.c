/*
 * model64.c: see model64.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model64.h"

static double gelu64(double x) {
    const double c = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double gelu64_grad(double x) {
    const double c = sqrt(2.0 / M_PI);
    double t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

static double *zeros64(size_t n) {
    double *p = calloc(n, sizeof *p);
    if (!p) {
        fprintf(stderr, "model64: out of memory\n");
        exit(1);
    }
    return p;
}

double *model64_values(const tensor *t) {
    float *f = malloc((size_t)t->numel * sizeof *f);
    double *d = zeros64((size_t)t->numel);
    if (!f) exit(1);
    tensor_to_host(t, f);
    for (int64_t i = 0; i < t->numel; i++)
        d[i] = f[i];
    free(f);
    return d;
}

double model64_relative_error(const double *a, const double *b, size_t n) {
    double diff = 0, size = 0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs(a[i] - b[i]));
        size = fmax(size, fabs(b[i]));
    }
    return diff / size;
}

double model64_forward(model64 *m) {
    int b = m->batch, n = m->width;
    m->a[0] = m->x;
    for (int l = 0; l < m->layers; l++) {
        free(m->h[l]);
        free(m->a[l + 1]);
        m->h[l] = zeros64((size_t)b * n);
        m->a[l + 1] = zeros64((size_t)b * n);
        for (int i = 0; i < b; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < n; k++)
                    s += m->a[l][i * n + k] * m->w[l][k * n + j];
                m->h[l][i * n + j] = s;
                m->a[l + 1][i * n + j] = gelu64(s);
            }
    }
    double loss = 0;
    for (int i = 0; i < b * n; i++)
        loss += m->a[m->layers][i] * m->a[m->layers][i];
    return loss / (b * n);
}

void model64_backward(model64 *m) {
    int b = m->batch, n = m->width;
    double *dy = zeros64((size_t)b * n);
    for (int i = 0; i < b * n; i++)
        dy[i] = 2.0 * m->a[m->layers][i] / (b * n);
    for (int l = m->layers - 1; l >= 0; l--) {
        double *dh = zeros64((size_t)b * n);
        for (int i = 0; i < b * n; i++)
            dh[i] = dy[i] * gelu64_grad(m->h[l][i]);
        free(m->g[l]);
        m->g[l] = zeros64((size_t)n * n);
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int i = 0; i < b; i++)
                    s += m->a[l][i * n + k] * dh[i * n + j];
                m->g[l][k * n + j] = s;
            }
        double *dx = zeros64((size_t)b * n);
        for (int i = 0; i < b; i++)
            for (int k = 0; k < n; k++) {
                double s = 0;
                for (int j = 0; j < n; j++)
                    s += dh[i * n + j] * m->w[l][k * n + j];
                dx[i * n + k] = s;
            }
        free(dh);
        free(dy);
        dy = dx;
    }
    free(dy);
}

void model64_adamw_step(model64 *m, double lr) {
    const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
    m->step++;
    double c1 = 1.0 - pow(beta1, m->step), c2 = 1.0 - pow(beta2, m->step);
    size_t n = (size_t)m->width * m->width;
    for (int l = 0; l < m->layers; l++) {
        if (!m->m[l]) {
            m->m[l] = zeros64(n);
            m->v[l] = zeros64(n);
        }
        for (size_t i = 0; i < n; i++) {
            double g = m->g[l][i];
            m->w[l][i] *= 1.0 - lr * weight_decay;
            m->m[l][i] = beta1 * m->m[l][i] + (1.0 - beta1) * g;
            m->v[l][i] = beta2 * m->v[l][i] + (1.0 - beta2) * g * g;
            m->w[l][i] -= lr * (m->m[l][i] / c1) / (sqrt(m->v[l][i] / c2) + eps);
        }
    }
}

void model64_free(model64 *m) {
    for (int l = 0; l < m->layers; l++) {
        free(m->w[l]);
        free(m->h[l]);
        free(m->a[l + 1]);
        free(m->g[l]);
        free(m->m[l]);
        free(m->v[l]);
    }
    free(m->x);
}

model64 model64_of(const mlp_config *c) {
    model64 m;
    memset(&m, 0, sizeof m);
    m.batch = c->batch;
    m.width = c->width;
    m.layers = c->layers;
    tensor *x = make_data(c, -1);
    m.x = model64_values(x);
    tensor_free(x);
    for (int l = 0; l < c->layers; l++) {
        tensor *w = init_layer(c, l, -1);
        m.w[l] = model64_values(w);
        tensor_free(w);
    }
    return m;
}
