/*
 * buckets.c: DDP's gradient buckets and the overlap timing (buckets.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buckets.h"
#include "train.h"

const char *const STEP_MODE_NAMES[STEP_MODES] = {
        "forward + backward, no all-reduce (the compute alone)",
        "the buckets' all-reduces, no compute (the communication alone)",
        "each bucket's async all-reduce started after backward",
        "async all-reduce of each bucket started during backward",
};

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
static void all_reduce_buckets(tensor *const *bucket, int n) {
    dist_request *req[MAX_BUCKETS];
    for (int b = 0; b < n; b++)
        req[b] = dist_all_reduce_async(bucket[b], DIST_AVG);
    for (int b = 0; b < n; b++)
        dist_wait(req[b]);
}

/* One DDP step's forward and backward on x, communicating as `mode` says. */
static void ddp_step(int mode, const mlp_config *c, tensor *const *w, buckets *g, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
    if (mode == COMM_ALONE) {
        all_reduce_buckets(g->bucket, g->n);
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
    if (mode == AFTER_BACKWARD) all_reduce_buckets(g->bucket, g->n); /* the same calls, started late */
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
 * (DURING_BACKWARD) as soon as its lowest layer is done, as ddp_step does with the arithmetic. */
static void modelled_step(int mode, const step_work *s) {
    dist_request *req[MAX_BUCKETS];
    if (mode == COMM_ALONE) {
        all_reduce_buckets(s->bucket, s->n_buckets);
        return;
    }
    model_compute(s->layers * s->forward_ms); /* the forward: nothing to communicate until its end */
    for (int j = 0; j < s->n_buckets; j++) {  /* bucket j: its layers' backward, from the last layer down */
        int count = s->layers - j * s->per_bucket < s->per_bucket ? s->layers - j * s->per_bucket : s->per_bucket;
        model_compute(count * s->backward_ms);
        if (mode == DURING_BACKWARD) req[j] = dist_all_reduce_async(s->bucket[j], DIST_AVG);
    }
    for (int j = 0; j < s->n_buckets && mode == DURING_BACKWARD; j++)
        dist_wait(req[j]);
    if (mode == AFTER_BACKWARD) all_reduce_buckets(s->bucket, s->n_buckets); /* the same calls, started late */
}

static void one_step(int mode, const step_work *s) {
    if (s->bucket) modelled_step(mode, s);
    else ddp_step(mode, s->c, s->w, s->g, s->x);
}

static void time_steps(const step_work *s, int trials, double median_ms[STEP_MODES]) {
    double *ms = malloc(sizeof(double) * STEP_MODES * trials);
    for (int mode = 0; mode < STEP_MODES; mode++)
        one_step(mode, s); /* warm-up */
    for (int trial = 0; trial < trials; trial++)
        for (int mode = 0; mode < STEP_MODES; mode++) {
            dist_timer t = {0};
            dist_timer_start(&t);
            one_step(mode, s);
            ms[mode * trials + trial] = dist_timer_stop(&t) * 1e3; /* the slowest rank's time */
        }
    for (int mode = 0; mode < STEP_MODES; mode++)
        median_ms[mode] = median_of(ms + mode * trials, trials);
    free(ms);
}

void time_ddp_steps(const mlp_config *c, tensor *const *w, buckets *g, tensor *x, int trials,
                    double median_ms[STEP_MODES]) {
    step_work s = {.c = c, .w = w, .g = g, .x = x};
    time_steps(&s, trials, median_ms);
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

/* The median of 5 of a way of the modelled step (the slowest rank's), after three warm-ups: the first calls on new
 * buckets were up to twice as slow here (their pages first touched by the transfers). */
static double median_step(int mode, const step_work *s) {
    double ms[5];
    for (int k = -3; k < 5; k++) {
        dist_timer t = {0};
        dist_timer_start(&t);
        modelled_step(mode, s);
        double v = dist_timer_stop(&t) * 1e3;
        if (k >= 0) ms[k] = v;
    }
    return median_of(ms, 5);
}

/* The modelled compute's size. With n buckets of a = A / n each (A: the communication alone) and compute C (its
 * forward C / 3, its backward 2 C / 3, 2 C / (3 n) a layer), each bucket's all-reduce starts when backward has
 * filled it; while a stays below a layer's backward, each ends before the next is ready, and the overlapped step
 * takes C + a (the last bucket's all-reduce comes after backward), the one that all-reduces after backward C + A.
 * The lesson's bounds: C + a <= 1.15 max(C, A), and (C + A) / (C + a) >= 1.3. C = 2 A on 8 layers gives a = C / 16:
 * C + a = 1.06 C, under the first by 0.09 C, and a speed-up of 1.5 / 1.06 = 1.41, above the second while the step
 * takes under 0.09 C more than C + a (the sleeps' late wake-ups, a message's start); a stays under a layer's
 * backward (C / 12) until the communication is 1.33 times as slow as it was when sized. It is sized from its own
 * median in this spawn, the slowest rank's, so a machine that communicates slowly gets a longer compute. */
enum { COMPUTE_PER_COMMUNICATION = 2 };

void time_modelled_ddp_steps(int layers, int64_t layer_floats, int trials, double *forward_ms, double *backward_ms,
                             double median_ms[STEP_MODES]) {
    step_work s = {0};
    tensor *bucket[MAX_BUCKETS];
    s.bucket = bucket;
    make_modelled_buckets(&s, layers, 1, layer_floats);
    double compute_ms = COMPUTE_PER_COMMUNICATION * median_step(COMM_ALONE, &s);
    *forward_ms = s.forward_ms = compute_ms / (3 * layers);
    *backward_ms = s.backward_ms = 2 * *forward_ms;
    time_steps(&s, trials, median_ms);
    free_tensors(bucket, s.n_buckets);
}

/* The sweep's modelled compute. Each bucket's all-reduce costs a fixed alpha per call (launching it, and each of its
 * rounds taking its turn: 0.2-0.5 ms for one moved behind modelled compute here) and its bytes' time; over n buckets
 * the communication takes n alpha + A. While that fits in the backward pass (W, two thirds of the compute C), the
 * step takes C + alpha + A / n, the last bucket's all-reduce coming after backward; beyond, the calls' cost shows:
 * about n alpha + A - W (1 - 1/n) after it. C = 2 A, A the one-bucket all-reduce alone (measured here first), as
 * time_modelled_ddp_steps sizes it, for the same bounds: at n buckets, C + A / n <= 1.15 C needs A / C <= 0.15 n,
 * and (C + A) / (C + A / n) >= 1.3 needs A / C >= 0.3 / (1 - 1.3 / n): with A / C = 0.5, both hold from 4 buckets
 * on, while n alpha stays under W - A = A / 3 (3 ms for 8 MiB here, so up to about 8 buckets); at 16 and 64 buckets
 * the calls' cost (5-30 ms) is over it, and the step grows again. So the sweep of 1, 4, 16 and 64 buckets has its
 * minimum inside it, near 4, where both bounds hold. */
void time_modelled_bucket_sweep(int layers, int64_t layer_floats, const int *per_bucket, int n_sizes,
                                bucket_sweep *out) {
    step_work s = {0};
    tensor *bucket[MAX_BUCKETS];
    s.bucket = bucket;
    make_modelled_buckets(&s, layers, layers, layer_floats);
    out->bytes_ms = median_step(COMM_ALONE, &s);
    free_tensors(bucket, s.n_buckets);
    double compute = COMPUTE_PER_COMMUNICATION * out->bytes_ms; /* forward a third, backward two */
    s.forward_ms = out->forward_ms = compute / 3 / layers;
    s.backward_ms = out->backward_ms = 2 * out->forward_ms;
    for (int k = 0; k < n_sizes; k++) {
        make_modelled_buckets(&s, layers, per_bucket[k], layer_floats);
        double ms[STEP_MODES];
        time_steps(&s, out->trials, ms);
        out->step_ms[k] = ms[DURING_BACKWARD];
        out->after_ms[k] = ms[AFTER_BACKWARD];
        out->compute_ms[k] = ms[NO_ALL_REDUCE];
        out->comm_ms[k] = ms[COMM_ALONE];
        free_tensors(bucket, s.n_buckets);
    }
}

void show_overlap(int world_size, int64_t per_rank, int trials, int real_buckets, int modelled_buckets,
                  double forward_ms, double backward_ms, const double real_ms[STEP_MODES],
                  const double modelled_ms[STEP_MODES]) {
    table_t *t = table_new("Overlap: one DDP step on %d ranks (%s), slowest rank, median of %d steps each way. Real: "
                           "the model above, %lld examples per rank. Modelled: %d layers of 512 x 512, a bucket of "
                           "1.05 MB each (twice the real depth, a bucket a layer, so that the last bucket, which "
                           "nothing can hide, is small), really all-reduced; each layer's forward %.2f ms and "
                           "backward %.2f ms of modelled compute, in all twice what its all-reduces took alone here "
                           "(measured just before), as a GPU's layers take a few times their gradients' all-reduce",
                           world_size, dist_backend(), trials, (long long)per_rank, modelled_buckets, forward_ms,
                           backward_ms);
    table_column(t, "compute", NULL, "%s");
    table_column(t, "buckets", NULL, "%d");
    table_column(t, "compute alone", "ms", "%.2f");
    table_column(t, "communication alone", "ms", "%.2f");
    table_column(t, "all-reduce after backward", "ms", "%.2f");
    table_column(t, "async all-reduce during backward", "ms", "%.2f");
    table_column(t, "speed-up (after / during)", NULL, "%.2f");
    table_column(t, "during / max(compute, communication)", NULL, "%.2f");
    for (int k = 0; k < 2; k++) {
        const double *ms = k ? modelled_ms : real_ms;
        double longer = ms[NO_ALL_REDUCE] > ms[COMM_ALONE] ? ms[NO_ALL_REDUCE] : ms[COMM_ALONE];
        table_row(t, k ? "modelled" : "real", k ? modelled_buckets : real_buckets, ms[NO_ALL_REDUCE], ms[COMM_ALONE],
                  ms[AFTER_BACKWARD], ms[DURING_BACKWARD], ms[AFTER_BACKWARD] / ms[DURING_BACKWARD],
                  ms[DURING_BACKWARD] / longer);
    }
    table_show(t);
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
