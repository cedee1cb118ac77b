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
        "blocking all-reduce of each bucket after backward",
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

/* One DDP step's forward and backward on x, communicating as `mode` says. */
static void ddp_step(int mode, const mlp_config *c, tensor *const *w, buckets *g, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
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
    if (mode == AFTER_BACKWARD)
        for (int b = 0; b < g->n; b++)
            dist_all_reduce(g->bucket[b], DIST_AVG);
    free_saved(c->layers, acts, pre);
}

void time_ddp_steps(const mlp_config *c, tensor *const *w, buckets *g, tensor *x, int trials,
                    double median_ms[STEP_MODES]) {
    double *ms = malloc(sizeof(double) * STEP_MODES * trials);
    for (int mode = 0; mode < STEP_MODES; mode++)
        ddp_step(mode, c, w, g, x); /* warm-up */
    for (int trial = 0; trial < trials; trial++)
        for (int mode = 0; mode < STEP_MODES; mode++) {
            dist_timer t = {0};
            dist_timer_start(&t);
            ddp_step(mode, c, w, g, x);
            ms[mode * trials + trial] = dist_timer_stop(&t) * 1e3; /* the slowest rank's time */
        }
    for (int mode = 0; mode < STEP_MODES; mode++)
        median_ms[mode] = median_of(ms + mode * trials, trials);
    free(ms);
}

void show_overlap(int world_size, int64_t per_rank, int trials, const double median_ms[STEP_MODES]) {
    table_t *t = table_new("Overlap, measured: one DDP step on %d ranks (%s), %lld examples per rank, slowest rank, "
                           "median of %d steps each",
                           world_size, dist_backend(), (long long)per_rank, trials);
    table_column(t, "step", NULL, "%s");
    table_column(t, "time", "ms", "%.2f");
    for (int mode = 0; mode < STEP_MODES; mode++)
        table_row(t, STEP_MODE_NAMES[mode], median_ms[mode]);
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
