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
        s11 += u * u;
        s12 += u * v;
        s22 += v * v;
        b1 += u;
        b2 += v;
    }
    double det = s11 * s22 - s12 * s12;
    double A = (b1 * s22 - b2 * s12) / det, B = (s11 * b2 - s12 * b1) / det;
    cost_model m = {0};
    if (A < 0) {
        A = 0;
        B = b2 / s22;
        m.clamped = 1;
    }
    if (B <= 0) { /* times that do not grow with size: a busy machine's noise */
        B = 0;
        A = b1 / s11;
        m.clamped = 2;
    }
    m.alpha = A / (2.0 * (p - 1));
    m.beta = B * p / (2.0 * (p - 1)); /* 0 when not resolved: no bandwidth term */
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
    dist_all_reduce(t, DIST_SUM); /* warm-up: connections, buffers */
    device_synchronize();
    dist_barrier();
    dist_timed_begin(); /* the warm-up carried the check: time the library alone */
    double start = now_seconds();
    for (int i = 0; i < trials; i++)
        dist_all_reduce(t, DIST_SUM);
    device_synchronize(); /* GPU work is asynchronous: wait for it */
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


static int trials_for(const bench_args *a, int i) {
    int64_t more = (1 << 20) / a->bytes[i];
    return more > a->trials ? (more < 50 ? (int)more : 50) : a->trials;
}

void bench_sweep(const bench_args *a, int world_size, bench_result *all_reduce, bench_result *reduce_scatter) {
    int device = get_device(dist_rank());
    double n = world_size;
    for (int i = 0; i < a->n_sizes; i++) {
        double t = time_all_reduce(a->bytes[i], trials_for(a, i), device);
        all_reduce[i] = bandwidths(a->bytes[i], t, 2 * (n - 1) / n);
    }
    for (int i = 0; i < a->n_sizes; i++) {
        double t = time_reduce_scatter(a->bytes[i], trials_for(a, i), world_size, device);
        reduce_scatter[i] = bandwidths(a->bytes[i], t, (n - 1) / n);
    }
}

void show_results(const char *op, int world_size, const bench_result *r, int n) {
    table_t *t = table_new("%s on %d ranks", op, world_size);
    table_column(t, "size", "MiB", "%g");
    table_column(t, "time", "ms", "%.3f");
    table_column(t, "algbw", "GB/s", "%.2f");
    table_column(t, "busbw", "GB/s", "%.2f");
    for (int i = 0; i < n; i++)
        table_row(t, r[i].bytes / (1 << 20), r[i].seconds * 1e3, r[i].algbw, r[i].busbw);
    table_show(t);
}

void plot_busbw(int world_size, const bench_result *all_reduce, const bench_result *reduce_scatter, int n) {
    double mib[MAX_SIZES], ar[MAX_SIZES], rs[MAX_SIZES];
    for (int i = 0; i < n; i++) {
        mib[i] = all_reduce[i].bytes / (1 << 20);
        ar[i] = all_reduce[i].busbw;
        rs[i] = reduce_scatter[i].busbw;
    }
    chart_t *c = chart_new("message size (MiB)", "busbw (GB/s)", "busbw on %d ranks (%s)", world_size, dist_backend());
    chart_log_x(c, 2);
    chart_line(c, "all-reduce", mib, ar, n);
    chart_line(c, "reduce-scatter", mib, rs, n);
    chart_show(c);
}

void plot_cost_model(int world_size, const bench_result *r, int n, const cost_model *m) {
    double mib[MAX_SIZES], measured[MAX_SIZES], model[MAX_SIZES];
    for (int i = 0; i < n; i++) {
        mib[i] = r[i].bytes / (1 << 20);
        measured[i] = r[i].seconds * 1e3;
        model[i] = model_seconds(m, r[i].bytes, world_size) * 1e3;
    }
    chart_t *c = chart_new("message size (MiB)", "all-reduce time (ms)",
                           "all-reduce on %d ranks: measured and alpha-beta model", world_size);
    chart_log_x(c, 2);
    chart_log_y(c, 10);
    chart_line(c, "measured", mib, measured, n);
    chart_line(c, "model", mib, model, n);
    chart_show(c);
}
