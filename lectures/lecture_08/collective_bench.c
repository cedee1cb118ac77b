/*
 * collective_bench.c: timing collectives and reading the times
 * (collective_bench.h), for lecture_08.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

table_t *bench_table(const char *op, int world_size, const bench_result *r, int n) {
    table_t *t = table_new("%s on %d ranks", op, world_size);
    table_column(t, "size", "MiB", "%g");
    table_column(t, "time", "ms", "%.3f");
    table_column(t, "algbw", "GB/s", "%.2f");
    table_column(t, "busbw", "GB/s", "%.2f");
    for (int i = 0; i < n; i++)
        table_row(t, r[i].bytes / (1 << 20), r[i].seconds * 1e3, r[i].algbw, r[i].busbw);
    return t;
}

const twin_collective *twin_all_reduce(const twin_result *t, double bytes) {
    for (int i = 0; t && t->ran && i < t->n_collectives; i++)
        if (strcmp(t->collectives[i].op, "all_reduce") == 0 && t->collectives[i].bytes == bytes)
            return &t->collectives[i];
    return NULL;
}

chart_t *busbw_chart(int world_size, const bench_report *r, const twin_result *twin) {
    double mib[MAX_SIZES], ar[MAX_SIZES], rs[MAX_SIZES], sim_mib[MAX_SIZES], sim[MAX_SIZES];
    int n_sim = 0;
    for (int i = 0; i < r->n; i++) {
        mib[i] = r->all_reduce[i].bytes / (1 << 20);
        ar[i] = r->all_reduce[i].busbw;
        rs[i] = r->reduce_scatter[i].busbw;
        const twin_collective *c = twin_all_reduce(twin, r->all_reduce[i].bytes);
        if (c) sim_mib[n_sim] = mib[i], sim[n_sim++] = c->busbw_GBps;
    }
    chart_t *c = chart_new("message size (MiB)", "busbw (GB/s)", "busbw on %d ranks (%s)", world_size, r->backend);
    chart_log_x(c, 2);
    chart_line(c, "all-reduce", mib, ar, r->n);
    chart_line(c, "reduce-scatter", mib, rs, r->n);
    if (n_sim) { /* hundreds of GB/s beside a few: a log axis shows both */
        char series[96];
        snprintf(series, sizeof series, "simulated on h100-node (all-reduce, %d GPUs)", twin->ranks);
        chart_log_y(c, 10);
        chart_line(c, series, sim_mib, sim, n_sim);
    }
    return c;
}

chart_t *cost_model_chart(int world_size, const bench_result *r, int n, const cost_model *m) {
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
    return c;
}

/* The size step at which reduce-scatter's time grew most against its bytes: *from, *to (indices). Returns that
 * growth over the bytes' growth (1 where the time grew as the bytes did). */
static double largest_jump(const bench_result *r, int n, int *from, int *to) {
    double most = 0;
    *from = *to = 0;
    for (int i = 1; i < n; i++) {
        double grew = (r[i].seconds / r[i - 1].seconds) / (r[i].bytes / r[i - 1].bytes);
        if (grew > most) most = grew, *from = i - 1, *to = i;
    }
    return most;
}

void note_bandwidths(int world_size, const bench_result *all_reduce, const bench_result *reduce_scatter, int n) {
    int last = n - 1, peak = 0; /* peak: the size where all-reduce's busbw was highest */
    for (int i = 1; i < n; i++)
        if (all_reduce[i].busbw > all_reduce[peak].busbw) peak = i;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    note("busbw puts both operations on one scale: it counts the bytes the busiest link must carry, so two "
         "operations that each keep the links equally busy show the same busbw. Measured at %g MiB: all-reduce %.2f "
         "GB/s, reduce-scatter %.2f GB/s. The scale is shared; the speed is not: each number is what "
         "one implementation achieved (Open MPI picks a different algorithm per operation and size, NCCL a different "
         "kernel), and a gap says one of them is further from the link's limit. All-reduce's busbw peaks at %g MiB "
         "(%.2f GB/s) and is %.2f GB/s at %g MiB. On a real link it rises with size towards the link's limit, as the "
         "fixed cost per operation is spread over more bytes.%s",
         all_reduce[last].bytes / (1 << 20), all_reduce[last].busbw, reduce_scatter[last].busbw,
         all_reduce[peak].bytes / (1 << 20), all_reduce[peak].busbw, all_reduce[last].busbw,
         all_reduce[last].bytes / (1 << 20),
         gpu_count() > 0 ? ""
         : world_size > cores
                 ? " Here (more ranks than CPU cores, so they take turns) larger messages no longer fit in the "
                   "caches and go through the main memory all ranks share, and a rank that waits in a collective "
                   "for a partner that is not running at the moment loses its time slice: it can fall instead."
                 : " Here larger messages no longer fit in the caches and go through the main memory all ranks "
                   "share, which can make it fall instead.");
    int from, to;
    double jump = largest_jump(reduce_scatter, n, &from, &to);
    if (gpu_count() == 0 && jump > 2)
        note("Reduce-scatter's time did not grow with its bytes alone: from %g to %g MiB it grew %.1f times for %.0f "
             "times the bytes (%.3f to %.3f ms). That is not the bytes: an algorithm chosen by the size (Open "
             "MPI's for the reduce-scatter, or for the reduce inside basic_linear), or the machine taking the "
             "ranks' cores at that moment; this run did not force an algorithm to tell which, so the jump is "
             "measured here, its cause is not.",
             reduce_scatter[from].bytes / (1 << 20), reduce_scatter[to].bytes / (1 << 20),
             reduce_scatter[to].seconds / reduce_scatter[from].seconds,
             reduce_scatter[to].bytes / reduce_scatter[from].bytes, reduce_scatter[from].seconds * 1e3,
             reduce_scatter[to].seconds * 1e3);
}

void note_cost_model(int world_size, const bench_result *all_reduce, int n, const cost_model *m) {
    int last = n - 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* the fit as a table: the note below states these numbers, and says what they mean */
    table_t *t = table_new("alpha-beta fit of all-reduce on %d ranks: t = 2(p - 1)(alpha + n beta / p), least squares "
                           "on relative errors (error: model / measured - 1)",
                           world_size);
    table_column(t, "alpha", "us", "%.3g");
    table_column(t, "beta", "ns per byte", "%.3g");
    table_column(t, "1 / beta", "GB/s", "%.3g");
    table_column(t, "error, root mean square", "%", "%.1f");
    table_column(t, "error, largest", "%", "%.1f");
    table_column(t, "sizes fitted", NULL, "%d");
    table_row(t, m->alpha * 1e6, m->beta * 1e9, m->beta > 0 ? 1e-9 / m->beta : INFINITY, 100 * m->rms_error,
              100 * m->max_error, n);
    table_show(t);
    note("Alpha-beta fit on %d ranks: alpha = %.3g us, beta = %.3g ns per byte (a bandwidth 1 / beta of %.3g "
         "GB/s)%s; the model is off by %.1f%% (root mean square) and at most %.1f%% over the %d sizes (error: model "
         "/ measured - 1). Two regimes make the model: alpha dominates while n beta / p is small (here below about "
         "%.0f KiB, where the two terms are equal), beta above. At %g MiB the model predicts %.3g ms, against %.3g "
         "ms measured. Where the points leave the model's line, the machine is not one link of fixed speed: %s",
         world_size, m->alpha * 1e6, m->beta * 1e9, m->beta > 0 ? 1e-9 / m->beta : INFINITY,
         m->clamped == 1   ? " (the best unconstrained fit had a negative alpha: fitted with alpha = 0)"
         : m->clamped == 2 ? " (the times did not grow with size: no bandwidth term could be fitted)"
                           : "",
         100 * m->rms_error, 100 * m->max_error, n, m->beta > 0 ? m->alpha * world_size / m->beta / 1024 : INFINITY,
         all_reduce[last].bytes / (1 << 20), model_seconds(m, all_reduce[last].bytes, world_size) * 1e3,
         all_reduce[last].seconds * 1e3,
         gpu_count() > 0      ? "NCCL switches algorithm and protocol with the size (LL, LL128, Simple), "
                                "each with its own alpha and beta."
         : world_size > cores ? "here the ranks outnumber the CPU cores, so each of the ring's 2(p-1) "
                                "steps may wait for a partner to be scheduled, a cost the model has no "
                                "term for; and the ranks share caches and memory bandwidth, which the "
                                "largest messages exhaust."
                              : "the CPU ranks share caches and memory bandwidth, so the bytes of the "
                                "largest messages move at main memory's speed, not the cache's, and "
                                "the other processes on the machine take turns on the same cores.");
}

void predict_busbw(const bench_result *largest) {
    char question[256];
    snprintf(question, sizeof question,
             "Before the table: what bus bandwidth will the largest all-reduce (%g MiB) reach on these 2 ranks, "
             "processes that share this machine's memory?",
             largest->bytes / (1 << 20));
    predict(question, largest->busbw, "GB/s");
}

/* The sweep's busbw chart, and beside it what the same calls take on a simulated 8-GPU H100 node (node: the
 * 4-rank sweep's twin, NULL for none). */
void show_busbw(int world_size, const twin_result *node) {
    bench_report r;
    if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("the benchmark's rank 0 returned no results");
    const bench_result *last = &r.all_reduce[r.n - 1];
    const twin_collective *sim = twin_all_reduce(node, last->bytes);
    if (node && !sim) {
        note("Not simulated on h100-node: %s.", node->why[0] ? node->why : "the replay has no such all-reduce");
        node = NULL;
    }
    if (sim)
        predict("The same calls replayed on a simulated 8-GPU H100 node (h100-node: each GPU with 450 GB/s each way "
                "into one NVSwitch): what busbw will the largest all-reduce reach there, simulated?",
                sim->busbw_GBps, "GB/s");
    chart_show(busbw_chart(world_size, &r, node));
    if (!sim) return;
    note("Simulated on h100-node, its 8 GPUs: the %g MiB all-reduce reaches busbw %.0f GB/s (simulated), against the "
         "%.2f GB/s measured here on %d ranks. Its ring takes 2(p - 1) = 14 steps of %g MiB / p, each through the "
         "NVSwitch at 450 GB/s plus 1 us of latency (the platform's assumption), so small messages fall far below "
         "the link rate. The lecture this one follows measured, on H100s, a 4 GiB all-reduce at busbw 320 (2 GPUs) "
         "and 335 (4 GPUs) in its unit of 2^30 bytes a second, about 344 and 360 GB/s: NCCL's measurement there, "
         "one call timed with a barrier; the replay plays one ring where NCCL runs several channels "
         "(docs/twin.md), so compare the order of magnitude, not the digits.",
         quoted(last->bytes / (1 << 20)), quoted(sim->busbw_GBps), quoted(last->busbw), world_size,
         last->bytes / (1 << 20));
}

void return_report(const bench_result *all_reduce, const bench_result *reduce_scatter, int n) {
    bench_report r = {.n = n};
    snprintf(r.backend, sizeof r.backend, "%s", dist_backend());
    memcpy(r.all_reduce, all_reduce, sizeof(bench_result) * (size_t)n);
    memcpy(r.reduce_scatter, reduce_scatter, sizeof(bench_result) * (size_t)n);
    spawn_return(&r, sizeof r);
}
