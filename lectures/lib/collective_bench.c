/*
 * collective_bench.c: timing collectives and reading the times
 * (collective_bench.h), for lecture_08.
 */
#include <math.h>

#include "collective_bench.h"

double model_seconds(const cost_model *m, double bytes, int p) {
    return 2.0 * (p - 1) * (m->alpha + bytes * m->beta / p);
}

cost_model fit_cost_model(const bench_result *r, int n, int p) {
    /* normal equations of min sum ((A + B x_i) / t_i - 1)^2 */
    double s11 = 0, s12 = 0, s22 = 0, b1 = 0, b2 = 0;
    for (int i = 0; i < n; i++) {
        double u = 1 / r[i].seconds, v = r[i].bytes / r[i].seconds;
        s11 += u * u; s12 += u * v; s22 += v * v; b1 += u; b2 += v;
    }
    double det = s11 * s22 - s12 * s12;
    double A = (b1 * s22 - b2 * s12) / det, B = (s11 * b2 - s12 * b1) / det;
    cost_model m = {0};
    if (A < 0) {
        A = 0;
        B = b2 / s22;
        m.clamped = 1;
    }
    if (B <= 0) {   /* times that do not grow with size: a busy machine's noise */
        B = 0;
        A = b1 / s11;
        m.clamped = 2;
    }
    m.alpha = A / (2.0 * (p - 1));
    m.beta = B * p / (2.0 * (p - 1));   /* 0 when not resolved: no bandwidth term */
    for (int i = 0; i < n; i++) {
        double e = model_seconds(&m, r[i].bytes, p) / r[i].seconds - 1;
        m.rms_error += e * e / n;
        m.max_error = fmax(m.max_error, fabs(e));
    }
    m.rms_error = sqrt(m.rms_error);
    return m;
}


/* The mean over ranks of a per-rank number, by all-reduce. */
double mean_over_ranks(double value, int device) {
    float v = (float)value;
    tensor *t = tensor_from(&v, 1, 0, device);
    dist_all_reduce(t, DIST_AVG);
    double mean = tensor_item(t, 0);
    tensor_free(t);
    return mean;
}

/* Seconds per all-reduce of `bytes`: one warm-up, then `trials` in a row. */
double time_all_reduce(int64_t bytes, int trials, int device) {
    tensor *t = zeros(bytes / (int64_t)sizeof(float), 0, device);
    dist_all_reduce(t, DIST_SUM);            /* warm-up: connections, buffers */
    device_synchronize();
    dist_barrier();
    dist_timed_begin();                      /* the warm-up carried the check: time the library alone */
    double start = now_seconds();
    for (int i = 0; i < trials; i++)
        dist_all_reduce(t, DIST_SUM);
    device_synchronize();                    /* GPU work is asynchronous: wait for it */
    double seconds = (now_seconds() - start) / trials;
    dist_timed_end();
    tensor_free(t);
    return mean_over_ranks(seconds, device);
}

/* Seconds per reduce-scatter whose whole input is `bytes`. */
double time_reduce_scatter(int64_t bytes, int trials, int world_size, int device) {
    int64_t n = bytes / (int64_t)sizeof(float);
    tensor *input = zeros(n, 0, device);
    tensor *output = zeros(n / world_size, 0, device);
    dist_reduce_scatter(output, input, DIST_SUM);
    device_synchronize();
    dist_barrier();
    dist_timed_begin();
    double start = now_seconds();
    for (int i = 0; i < trials; i++)
        dist_reduce_scatter(output, input, DIST_SUM);
    device_synchronize();
    double seconds = (now_seconds() - start) / trials;
    dist_timed_end();
    tensor_free(input);
    tensor_free(output);
    return mean_over_ranks(seconds, device);
}

bench_result bandwidths(int64_t bytes, double seconds, double bus_factor) {
    bench_result r = {.bytes = (double)bytes, .seconds = seconds};
    r.algbw = r.bytes / seconds / 1e9;
    r.busbw = r.algbw * bus_factor;
    return r;
}

