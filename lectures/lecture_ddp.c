/*
 * lecture_ddp: distributed data parallel training, from SGD to the design of
 * PyTorch's DistributedDataParallel.
 *
 *     make run LECTURE=lecture_ddp
 *
 * and open viewer/index.html?trace=lecture_ddp. Every claim is run: the
 * ranks' results are compared with one device computing the whole batch,
 * the bucketed all-reduce is built from dist_all_reduce_async, and the step
 * times are measured on this machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/buckets.h"
#include "lib/mlp.h"

static void introduction(void);
static void sgd_on_one_device(void);
static void data_parallelism(void);
static void ddp_design(void);
static void bucket_size(void);
static void stragglers(void);
static void summary(void);

static void lecture_ddp(void) {
    note("# Distributed data parallel training");
    note("Data parallelism is the most common way to train on many devices: every rank "
         "keeps a whole copy of the model and works on its own part of each batch. This "
         "lecture builds it up from plain SGD to the design of PyTorch's "
         "`DistributedDataParallel` (DDP), and runs every piece on real ranks. The design is "
         "the one this paper describes:");
    see("https://arxiv.org/abs/2006.15704", "Li et al.: PyTorch Distributed: Experiences on "
                                            "Accelerating Data Parallel Training (VLDB 2020)");
    introduction();
    sgd_on_one_device();
    data_parallelism();
    ddp_design();
    bucket_size();
    stragglers();
    summary();
}

/* ------------------------------------------------------------------ */
/* The model and the one-device reference                              */
/* ------------------------------------------------------------------ */

/* Data parallelism on 4 ranks: the batch must split evenly (and again into
 * micro-batches for accumulation). */
enum { WORLD = 4, LOCAL_STEPS = 4, MICRO_BATCHES = 4 };

/* The shared model of lectures/lib/mlp.h, small enough that every rank's
 * part runs in milliseconds. lr is plain SGD's learning rate. */
static mlp_config model_config(void) {
    mlp_config c = {.batch = 64, .width = 64, .layers = 4, .steps = LOCAL_STEPS, .lr = 20.0f};
    return c;
}

static const float ADAM_LR = 1e-3f;

static int64_t layer_floats(const mlp_config *c) { return (int64_t)c->width * c->width; }

/* What one device computes on the whole batch, as host arrays, handed to
 * the ranks in their arguments so each can say how far it is from it. */
enum { REF_GRAD, REF_SGD1, REF_SGDK, REF_ADAM1, REFS };

typedef struct dp_args {
    mlp_config cfg;
    float adam_lr;
    int per_bucket; /* DDP: layers per gradient bucket */
    float ref[];    /* REFS blocks of layers x width x width floats */
} dp_args;

static struct {
    dp_args *args;
    size_t size;
} reference;

static float *ref_block(dp_args *a, int which) {
    return a->ref + (int64_t)which * a->cfg.layers * layer_floats(&a->cfg);
}

/* Layer `layer` of reference block `which`, as a tensor on `device`. */
static tensor *ref_tensor(const dp_args *a, int which, int layer, int device) {
    const float *p = a->ref + ((int64_t)which * a->cfg.layers + layer) * layer_floats(&a->cfg);
    return tensor_from(p, a->cfg.width, a->cfg.width, device);
}

/* w -= lr * g: one step of plain SGD. */
static void sgd_step(tensor *w, const tensor *g, float lr) {
    tensor *update = to_device(g, g->device);
    scale_(update, -lr);
    add_(w, update);
    tensor_free(update);
}

/* Gradients of the loss on x (a batch, or one rank's shard) for every layer,
 * and that loss. */
static float gradients(tensor *const *w, int layers, tensor *x, tensor **grads) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    forward(w, layers, x, acts, pre);
    float loss = mse_loss(acts[layers]);
    backward(w, layers, acts, pre, grads);
    free_saved(layers, acts, pre);
    return loss;
}

static void make_model(const mlp_config *c, int device, tensor **w, tensor **grads) {
    for (int i = 0; i < c->layers; i++) {
        w[i] = init_layer(c, i, device);
        grads[i] = empty(c->width, c->width, device);
    }
}

static void free_model(const mlp_config *c, tensor **w, tensor **grads) {
    for (int i = 0; i < c->layers; i++) {
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
}

static void keep(dp_args *a, int which, tensor *const *ts) {
    for (int i = 0; i < a->cfg.layers; i++)
        tensor_to_host(ts[i], ref_block(a, which) + i * layer_floats(&a->cfg));
}

/* max over layers of |a[i] - b[i]| and of |b[i]|. */
static double max_diff(tensor *const *a, tensor *const *b, int layers, double *size) {
    double d = 0;
    *size = 0;
    for (int i = 0; i < layers; i++) {
        d = fmax(d, max_abs_diff(a[i], b[i]));
        *size = fmax(*size, largest(b[i]));
    }
    return d;
}

static void introduction(void) {
    note("## The plan");
    note("1. SGD on one device: the reference every other run must reproduce.\n"
         "2. Data parallelism: each rank a shard of the batch; averaging gradients "
         "against averaging parameters.\n"
         "3. DDP's design: the initial broadcast, gradient buckets in reverse order, "
         "all-reduce started during the backward pass, `no_sync` for accumulation.\n"
         "4. Step time against bucket size, measured.\n"
         "5. What one slow rank (a straggler) does to all the others.");
    mlp_config c = model_config();
    note("The model is the one lecture_08 trains: %d layers, each a %d x %d matrix followed "
         "by GELU; loss = mean(output^2); one data set of %d examples. SGD's learning rate "
         "is %g; AdamW's is %g.",
         c.layers, c.width, c.width, c.batch, (double)c.lr, (double)ADAM_LR);
}

static void sgd_on_one_device(void) {
    progress("SGD on one device");
    note("## SGD on one device");
    note("Stochastic gradient descent repeats three things: a forward pass computes the "
         "loss on a batch, the backward pass its gradient with respect to every weight "
         "(the chain rule, layer by layer from the last), and the update "
         "w <- w - lr * gradient. Each step needs the weights the previous step made: the "
         "steps themselves cannot run in parallel. What can is the work *inside* a step.");
    mlp_config c = model_config();
    reference.size = sizeof(dp_args) + (size_t)REFS * c.layers * layer_floats(&c) * sizeof(float);
    dp_args *a = reference.args = calloc(1, reference.size);
    a->cfg = c;
    a->adam_lr = ADAM_LR;
    int device = get_device(0);
    tensor *data = make_data(&c, device);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(&c, device, w, grads);
    for (int step = 0; step < c.steps; step++) {
        float loss = gradients(w, c.layers, data, grads);
        if (step == 0) keep(a, REF_GRAD, grads);
        for (int i = 0; i < c.layers; i++)
            sgd_step(w[i], grads[i], c.lr);
        if (step == 0) keep(a, REF_SGD1, w);
        note_verbatim("One device, SGD: step = %d, loss = %.9g", step, loss);
    }
    keep(a, REF_SGDK, w);
    free_model(&c, w, grads);

    make_model(&c, device, w, grads);
    gradients(w, c.layers, data, grads);
    for (int i = 0; i < c.layers; i++) {
        adamw *opt = adamw_new(w[i], ADAM_LR);
        adamw_step(opt, w[i], grads[i]);
        adamw_free(opt);
    }
    keep(a, REF_ADAM1, w);
    free_model(&c, w, grads);
    tensor_free(data);
    note("The loss falls step by step. These gradients and weights, computed on the whole "
         "batch by one device, are what the ranks below are judged against.");
}

/* ------------------------------------------------------------------ */
/* Data parallelism: averaging gradients or parameters                 */
/* ------------------------------------------------------------------ */

static void average_main(int rank, int world_size, void *args);

static void data_parallelism(void) {
    progress("data parallelism");
    note("## Data parallelism");
    note("The gradient of a mean loss is the mean of the per-example gradients. Cut the "
         "batch into %d equal shards, one per rank: each rank's gradient is the mean over "
         "its shard, and the mean of those %d gradients is the gradient of the whole batch. "
         "One all-reduce (sum, divided by the world size) turns every rank's gradient "
         "into the same full-batch gradient, so every rank makes the same update.",
         WORLD, WORLD);
    mlp_config c = model_config();
    note("Float32 sums give the same result only up to rounding when their terms are added "
         "in another order (each rank sums its shard; the BLAS picks its kernel, and its "
         "order, for this CPU). A float32 sum of n terms is exact to n 2^-24 of their size, "
         "and every gradient goes through one sum per layer plus one for the weight "
         "gradient, so two orders should agree to about 2 (layers + 1) max(batch, width) "
         "2^-24 = %.3g of the largest gradient. That is the tolerance below: a heuristic "
         "(the true bound is relative to the sum of the terms' sizes, not the largest "
         "gradient), measured right answers sit far under it, and a missing or doubled "
         "reduction misses it by 100%% of the gradient or more.",
         gradient_tolerance(&c));
    dp_args *args = reference.args;
    size_t size = reference.size;
    spawn(average_main, WORLD, args, size);
    note("What to take away:");
    note("- **Averaging gradients** is the full-batch gradient, to rounding, on every rank.\n"
         "- **Averaging parameters** after each rank's own SGD step agrees too, after *one* "
         "step: SGD's update is linear in the gradient, so the mean of the updated weights "
         "is the weights updated with the mean gradient.\n"
         "- After **%d local steps** it does not: each rank's later gradients are taken at "
         "its own weights, which have drifted apart (this is *local SGD*, a different "
         "algorithm).\n"
         "- With **AdamW** it does not even after one step: the update divides each gradient "
         "by its own size, which is not linear; averaged updates are not the update of the "
         "averaged gradient. DDP therefore averages gradients, and every optimizer works "
         "unchanged.",
         LOCAL_STEPS);
}

/* SGD step on every layer. */
static void sgd_all(tensor **w, tensor *const *grads, int layers, float lr) {
    for (int i = 0; i < layers; i++)
        sgd_step(w[i], grads[i], lr);
}

static void average_all(tensor **ts, int layers) {
    for (int i = 0; i < layers; i++)
        dist_all_reduce(ts[i], DIST_AVG);
}

/* The largest value over ranks. */
static double max_over_ranks(double value, int device) {
    tensor *t = tensor_from((float[]){(float)value}, 1, 0, device);
    dist_all_reduce(t, DIST_MAX);
    double v = tensor_item(t, 0);
    tensor_free(t);
    return v;
}

/* How far parameters averaged after one SGD step may be from one device's:
 * lr times the gradients' rounding (gradient_tolerance of the largest
 * gradient of any rank: each rank steps on its own), plus the roundings of w - lr g on each rank and of the
 * world_size - 1 additions of the average, each at most 2^-24 of the
 * largest weight summed (world_size of them). */
static double sgd_tolerance(const mlp_config *c, int world_size, double grad_size, double w_size) {
    return c->lr * gradient_tolerance(c) * grad_size + (2.0 + world_size) * world_size * w_size * 0x1p-24;
}

/* Of all parameters, the share more than `by` away from one device's. */
static double share_off(tensor *const *w, const dp_args *a, int which, double by) {
    int64_t n = layer_floats(&a->cfg), off = 0;
    float *got = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < a->cfg.layers; i++) {
        tensor_to_host(w[i], got);
        const float *ref = a->ref + ((int64_t)which * a->cfg.layers + i) * n;
        for (int64_t k = 0; k < n; k++)
            off += fabsf(got[k] - ref[k]) > by;
    }
    free(got);
    return (double)off / (double)(n * a->cfg.layers);
}

/* Compares w with reference block `which`: max |w - ref| and max |ref|. */
static double diff_to(tensor *const *w, const dp_args *a, int which, double *size) {
    tensor *ref[MAX_LAYERS];
    for (int i = 0; i < a->cfg.layers; i++)
        ref[i] = ref_tensor(a, which, i, w[i]->device);
    double d = max_diff(w, ref, a->cfg.layers, size);
    for (int i = 0; i < a->cfg.layers; i++)
        tensor_free(ref[i]);
    return d;
}

static void average_gradients(int rank, const dp_args *a, tensor *x) {
    const mlp_config *c = &a->cfg;
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(c, x->device, w, grads);
    float loss = gradients(w, c->layers, x, grads);
    average_all(grads, c->layers); /* the one line that makes it data parallel */
    double size, diff = diff_to(grads, a, REF_GRAD, &size);
    note_verbatim("Rank %d: shard loss = %.6g; averaged gradients: max |rank - one device| = %.3g "
                  "(largest gradient %.3g, tolerance %.3g)",
                  rank, loss, diff, size, gradient_tolerance(c) * size);
    check(diff <= gradient_tolerance(c) * size,
          "averaged gradients equal the one-device gradient of the whole batch (%.3g <= %.3g)", diff,
          gradient_tolerance(c) * size);
    free_model(c, w, grads);
}

static void average_parameters_one_step(int rank, const dp_args *a, tensor *x) {
    const mlp_config *c = &a->cfg;
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(c, x->device, w, grads);
    gradients(w, c->layers, x, grads);
    double gsize = 0;
    for (int i = 0; i < c->layers; i++)
        gsize = fmax(gsize, largest(grads[i]));
    sgd_all(w, grads, c->layers, c->lr); /* each rank steps on its own gradient */
    average_all(w, c->layers);           /* then the weights are averaged */
    double wsize, diff = diff_to(w, a, REF_SGD1, &wsize);
    double tol = sgd_tolerance(c, dist_world_size(), max_over_ranks(gsize, x->device), wsize);
    if (rank == 0) {
        note_verbatim("SGD, 1 step, averaged parameters: max |rank 0 - one device| = %.3g "
                      "(tolerance %.3g)",
                      diff, tol);
        check(diff <= tol, "SGD, 1 step: averaged parameters equal one device's step (%.3g <= %.3g)", diff, tol);
    }
    free_model(c, w, grads);
}

/* `steps` steps on this rank's shard; gradients averaged at every step
 * (average_grads), or parameters averaged once at the end. */
static double sgd_steps(const dp_args *a, tensor *x, int steps, int average_grads, double *tol) {
    const mlp_config *c = &a->cfg;
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(c, x->device, w, grads);
    double gsize = 0;
    for (int step = 0; step < steps; step++) {
        gradients(w, c->layers, x, grads);
        for (int i = 0; i < c->layers; i++)
            gsize = fmax(gsize, largest(grads[i]));
        if (average_grads) average_all(grads, c->layers);
        sgd_all(w, grads, c->layers, c->lr);
    }
    if (!average_grads) average_all(w, c->layers);
    double wsize, diff = diff_to(w, a, REF_SGDK, &wsize);
    /* Each step can add one step's rounding; the steps' errors are not
     * amplified much at this learning rate (checked: the measured
     * differences stay far below). */
    *tol = steps * sgd_tolerance(c, dist_world_size(), max_over_ranks(gsize, x->device), wsize);
    free_model(c, w, grads);
    return diff;
}

static void local_sgd(int rank, const dp_args *a, tensor *x) {
    double tol;
    double by_grads = sgd_steps(a, x, LOCAL_STEPS, 1, &tol);
    double by_params = sgd_steps(a, x, LOCAL_STEPS, 0, &tol);
    if (rank == 0) {
        note_verbatim("SGD, %d steps, gradients averaged every step: max |rank 0 - one device| = %.3g "
                      "(tolerance %.3g)",
                      LOCAL_STEPS, by_grads, tol);
        note_verbatim("SGD, %d local steps, parameters averaged at the end: max |rank 0 - one device| "
                      "= %.3g (%.0f times the tolerance)",
                      LOCAL_STEPS, by_params, by_params / tol);
        check(by_grads <= tol, "SGD, %d steps: gradients averaged every step equal one device's steps (%.3g <= %.3g)",
              LOCAL_STEPS, by_grads, tol);
        /* local SGD is another algorithm: its drift is thousands of tolerances, rounding alone is under one */
        check(by_params > 10 * tol,
              "SGD, %d local steps: averaging parameters at the end is not one device's steps "
              "(%.3g > 10 x %.3g)",
              LOCAL_STEPS, by_params, tol);
    }
}

/* One AdamW step: on the averaged gradient, or on this rank's own gradient
 * followed by averaging the parameters; how far rank 0 lands from one device. */
typedef struct adam_result {
    double diff;  /* max |rank - one device| */
    double share; /* of the parameters, the share more than lr/2 away */
} adam_result;

static adam_result adam_one_step(const dp_args *a, tensor *x, int average_grads) {
    const mlp_config *c = &a->cfg;
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(c, x->device, w, grads);
    gradients(w, c->layers, x, grads);
    if (average_grads) average_all(grads, c->layers);
    for (int i = 0; i < c->layers; i++) {
        adamw *opt = adamw_new(w[i], a->adam_lr);
        adamw_step(opt, w[i], grads[i]);
        adamw_free(opt);
    }
    if (!average_grads) average_all(w, c->layers);
    double wsize;
    adam_result r = {diff_to(w, a, REF_ADAM1, &wsize), share_off(w, a, REF_ADAM1, a->adam_lr / 2)};
    free_model(c, w, grads);
    return r;
}

/* Rank 0's two AdamW steps against one device: the question, the table, the checks. */
static void adam_table(const dp_args *a, adam_result by_grads, adam_result by_params) {
    predict("Now each rank makes its own AdamW step on its own shard's gradient, and the 4 ranks then average "
            "their weights. What share of the parameters (0 to 1) ends up more than lr/2 away from one "
            "device's step on the whole batch?",
            by_params.share, "");
    table_t *t = table_new("AdamW, one step on %d ranks: rank 0 against one device on the whole batch", WORLD);
    table_column(t, "averaged", NULL, "%s");
    table_column(t, "max |rank 0 - one device|", NULL, "%.3g");
    table_column(t, "share of parameters more than lr/2 away", NULL, "%.4f");
    table_row(t, "gradients", by_grads.diff, by_grads.share);
    table_row(t, "parameters", by_params.diff, by_params.share);
    table_show(t);
    /* averaged gradients: only a gradient within rounding of zero flips sign, moving its parameter by at most
     * 2 lr (1% more for the weights' own float32 rounding), and such gradients are rare (none of the 16384 in
     * the committed run; 0.001 allows 16); averaged parameters: a sign step cancels wherever the shards
     * disagree, a large share of the parameters */
    check(by_grads.share < 0.001 && by_grads.diff <= 2.02 * a->adam_lr,
          "AdamW, 1 step: averaged gradients give one device's step, to a rounding sign flip (%.4f of the "
          "parameters more than lr/2 away; %.3g <= 2 lr)",
          by_grads.share, by_grads.diff);
    check(by_params.share > 0.05,
          "AdamW, 1 step: averaging parameters is not one device's step (%.4f of them more than lr/2 away > 0.05)",
          by_params.share);
}

static void average_main(int rank, int world_size, void *args) {
    const dp_args *a = args;
    const mlp_config *c = &a->cfg;
    tensor *data = make_data(c, get_device(rank));
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local); /* this rank's shard */
    average_gradients(rank, a, x);
    average_parameters_one_step(rank, a, x);
    local_sgd(rank, a, x);
    if (rank == 0)
        note("AdamW makes a first step of about lr * sign(gradient) per parameter. Where the "
             "shards' gradients disagree in sign, the averaged steps cancel; the step on the "
             "averaged gradient does not. Averaging gradients leaves only rounding: a "
             "gradient within rounding of zero can flip sign, so a few parameters may land "
             "up to 2 lr away.");
    adam_result by_grads = adam_one_step(a, x, 1), by_params = adam_one_step(a, x, 0);
    if (rank == 0) adam_table(a, by_grads, by_params);
    tensor_free(x);
    tensor_free(data);
}

/* ------------------------------------------------------------------ */
/* DDP's design                                                        */
/* ------------------------------------------------------------------ */

/* One DDP model on one rank: the weights, the gradients laid out in one
 * flat buffer in *reverse* layer order (the order backward makes them), and
 * the buckets cut from that buffer. */
typedef struct ddp_model {
    mlp_config cfg;
    int device;
    tensor *w[MAX_LAYERS];
    tensor *flat;              /* every gradient, last layer first */
    tensor *grads[MAX_LAYERS]; /* views into flat */
    int buckets;
    tensor *bucket[MAX_LAYERS]; /* views into flat */
    int pending[MAX_LAYERS];    /* layers of the bucket still in backward */
    int bucket_of[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
    int sync;            /* 0 inside no_sync: no all-reduce */
    int all_reduces;     /* started so far */
    double wait_seconds; /* spent in dist_wait */
    char log[512];       /* what happened, in order (when logging) */
    int logging;
} ddp_model;

static void log_event(ddp_model *m, const char *fmt, int a, int b) {
    if (!m->logging) return;
    size_t len = strlen(m->log);
    if (len) snprintf(m->log + len, sizeof m->log - len, ", ");
    len = strlen(m->log);
    snprintf(m->log + len, sizeof m->log - len, fmt, a, b);
}

/* Position of layer i in the flat buffer: the last layer comes first. */
static int slot(const ddp_model *m, int layer) { return m->cfg.layers - 1 - layer; }

/* Buckets of `per_bucket` layers each, filled in the order the gradients
 * become ready: from the last layer down. */
static void make_buckets(ddp_model *m, int per_bucket) {
    const mlp_config *c = &m->cfg;
    m->flat = zeros((int64_t)c->layers * c->width, c->width, m->device);
    for (int i = 0; i < c->layers; i++)
        m->grads[i] = row_slice(m->flat, (int64_t)slot(m, i) * c->width, (int64_t)(slot(m, i) + 1) * c->width);
    m->buckets = (c->layers + per_bucket - 1) / per_bucket;
    for (int b = 0; b < m->buckets; b++) {
        int first = b * per_bucket, end = first + per_bucket < c->layers ? first + per_bucket : c->layers;
        m->bucket[b] = row_slice(m->flat, (int64_t)first * c->width, (int64_t)end * c->width);
        m->pending[b] = end - first;
    }
    for (int i = 0; i < c->layers; i++)
        m->bucket_of[i] = slot(m, i) / per_bucket;
}

static void ddp_free(ddp_model *m) {
    for (int i = 0; i < m->cfg.layers; i++) {
        tensor_free(m->w[i]);
        tensor_free(m->grads[i]);
    }
    for (int b = 0; b < m->buckets; b++)
        tensor_free(m->bucket[b]);
    tensor_free(m->flat);
}

/* The hook DDP puts on every parameter: called when layer i's gradient is
 * final. When it completes its bucket, that bucket's all-reduce starts at
 * once, while backward goes on with the layers below. */
static void gradient_ready(ddp_model *m, int layer) {
    int b = m->bucket_of[layer];
    log_event(m, "grad %d", layer, 0);
    if (--m->pending[b] > 0 || !m->sync) return;
    m->req[b] = dist_all_reduce_async(m->bucket[b], DIST_AVG);
    m->all_reduces++;
    log_event(m, "start bucket %d", b, 0);
}

/* Before the optimizer: every bucket's all-reduce must have finished. */
static void wait_for_buckets(ddp_model *m) {
    double t0 = now_seconds();
    for (int b = 0; b < m->buckets; b++) {
        dist_wait(m->req[b]);
        m->req[b] = NULL;
        log_event(m, "wait bucket %d", b, 0);
    }
    m->wait_seconds += now_seconds() - t0;
}

/* Backward pass, last layer first, calling the hook after each layer. beta
 * 1 adds to the gradients already there (accumulation). */
static void ddp_backward(ddp_model *m, tensor **acts, tensor **pre, float beta) {
    const mlp_config *c = &m->cfg;
    for (int b = 0; b < m->buckets; b++)
        m->pending[b] = 0;
    for (int i = 0; i < c->layers; i++)
        m->pending[m->bucket_of[i]]++;
    tensor *dy = mse_loss_backward(acts[c->layers]);
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *dx = NULL;
        layer_backward(acts[i], pre[i], m->w[i], dy, m->grads[i], i > 0 ? &dx : NULL, beta);
        gradient_ready(m, i);
        tensor_free(dy);
        dy = dx;
    }
}

/* Forward and backward on x; with m->sync the gradients come back averaged
 * over the ranks. Returns the loss on x. */
static float ddp_forward_backward(ddp_model *m, tensor *x, float beta) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    forward(m->w, m->cfg.layers, x, acts, pre);
    float loss = mse_loss(acts[m->cfg.layers]);
    ddp_backward(m, acts, pre, beta);
    if (m->sync) wait_for_buckets(m);
    free_saved(m->cfg.layers, acts, pre);
    return loss;
}

static void ddp_main(int rank, int world_size, void *args);

static void ddp_design(void) {
    progress("DDP's design");
    note("## DDP's design");
    note("PyTorch's `DistributedDataParallel` wraps a model so that training code stays "
         "as it was: the user calls forward, backward and the optimizer; DDP does the "
         "averaging in hooks. The paper behind it (Li et al., VLDB 2020) explains four "
         "choices, each built below on %d ranks:",
         WORLD);
    note("1. **Broadcast the initial parameters** from rank 0, so every replica starts "
         "from the same weights whatever each process drew.\n"
         "2. **Buckets**: many small all-reduces each pay a fixed cost (latency, launch); "
         "one for the whole model would wait for the whole backward pass. DDP groups "
         "gradients into buckets (25 MB by default, `bucket_cap_mb`), in *reverse* layer "
         "order, because backward makes the last layer's gradients first.\n"
         "3. **Overlap**: a hook on each parameter notes when its gradient is final; when "
         "a bucket is complete its all-reduce starts asynchronously, while backward goes on "
         "with the earlier layers. The optimizer waits for all of them.\n"
         "4. **no_sync**: with gradient accumulation, the micro-batches before the last "
         "only add to the local gradients; the all-reduce runs once, on the last.");
    image("assets/lecture_ddp_buckets.svg", 0.8);
    dp_args *args = reference.args;
    size_t size = reference.size;
    args->per_bucket = 2; /* 4 layers in 2 buckets */
    spawn(ddp_main, WORLD, args, size);
    note("Buckets change how many all-reduces carry the gradients, not how many bytes: every gradient byte is "
         "all-reduced once either way. What fewer, larger calls save is each call's fixed cost; what buckets filled "
         "in reverse order keep is the chance to start while backward is still running.");
    image("assets/lecture_ddp_overlap.svg", 0.8);
}

/* Every rank draws its own weights; only rank 0's are the model's. */
static void broadcast_initial_parameters(ddp_model *m, int rank) {
    const mlp_config *c = &m->cfg;
    for (int i = 0; i < c->layers; i++) {
        if (rank == 0) {
            m->w[i] = init_layer(c, i, m->device);
        } else {
            manual_seed(5000 + 100 * (uint64_t)rank + (uint64_t)i); /* a process's own seed */
            m->w[i] = randn(c->width, c->width, m->device);
        }
    }
    double before = spread_over_ranks(m->w, c->layers);
    for (int i = 0; i < c->layers; i++)
        dist_broadcast(m->w[i], 0);
    double after = spread_over_ranks(m->w, c->layers), from_rank0 = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *expected = init_layer(c, i, m->device);
        from_rank0 = fmax(from_rank0, max_abs_diff(m->w[i], expected));
        tensor_free(expected);
    }
    if (rank == 0)
        note_verbatim("Initial parameters: max spread over ranks before broadcast = %.3g, after = %.3g", before, after);
    note_verbatim("Rank %d: after broadcast, max |weights - rank 0's initial weights| = %.3g", rank, from_rank0);
    check(after == 0 && from_rank0 == 0,
          "broadcast: every rank holds rank 0's initial weights, bit for bit "
          "(spread %.3g, off by %.3g)",
          after, from_rank0);
}

static void bucketed_step(ddp_model *m, int rank, const dp_args *a, tensor *x) {
    const mlp_config *c = &m->cfg;
    m->logging = rank == 0;
    ddp_forward_backward(m, x, 0.0f);
    m->logging = 0;
    if (rank == 0)
        note_verbatim("Rank 0, step 0, %d layers in %d buckets, in order: %s", c->layers, m->buckets, m->log);
    double size, diff = diff_to(m->grads, a, REF_GRAD, &size);
    note_verbatim("Rank %d: bucketed DDP gradients: max |rank - one device| = %.3g (tolerance %.3g)", rank, diff,
                  gradient_tolerance(c) * size);
    check(diff <= gradient_tolerance(c) * size,
          "bucketed DDP: the gradients equal the one-device gradient of the whole batch (%.3g <= %.3g)", diff,
          gradient_tolerance(c) * size);
    for (int step = 0; step < c->steps; step++) {
        if (step > 0) ddp_forward_backward(m, x, 0.0f);
        for (int i = 0; i < c->layers; i++)
            sgd_step(m->w[i], m->grads[i], c->lr);
    }
    double spread = spread_over_ranks(m->w, c->layers);
    if (rank == 0) note_verbatim("After %d DDP steps: max spread of the weights over ranks = %.3g", c->steps, spread);
    check(spread == 0, "bucketed DDP: after %d steps every rank holds the same weights, bit for bit (spread %.3g)",
          c->steps, spread);
}

/* Cut the same flat gradient buffer into buckets of another size (the layout of the gradients stays the same). */
static void rebucket(ddp_model *m, int per_bucket) {
    for (int i = 0; i < m->cfg.layers; i++)
        tensor_free(m->grads[i]);
    for (int b = 0; b < m->buckets; b++)
        tensor_free(m->bucket[b]);
    tensor_free(m->flat);
    make_buckets(m, per_bucket);
}

/* One forward and backward with the model's buckets: a copy of the averaged gradients, and what it sent. */
static tensor *averaged_gradients(ddp_model *m, tensor *x, dist_traffic *sent) {
    dist_traffic before = dist_traffic_now();
    ddp_forward_backward(m, x, 0.0f);
    *sent = dist_traffic_since(&before);
    return to_device(m->flat, m->device);
}

/* The same step with DDP's buckets and with one all-reduce per parameter (per layer), from the same weights. */
static void buckets_against_per_parameter(ddp_model *m, int rank, int per_bucket, tensor *x) {
    const mlp_config *c = &m->cfg;
    int p = dist_world_size(), buckets = m->buckets;
    dist_traffic in_buckets, per_parameter;
    tensor *bucketed = averaged_gradients(m, x, &in_buckets);
    rebucket(m, 1);
    tensor *one_each = averaged_gradients(m, x, &per_parameter);
    rebucket(m, per_bucket);
    /* The two add the same 4 gradients, possibly in another order (Open MPI picks its algorithm by message size):
     * a few roundings, far under the tolerance used against one device. */
    check_close(bucketed, one_each, 0, gradient_tolerance(c) * largest(one_each),
                "bucketed DDP against one all-reduce per parameter: the averaged gradients");
    /* the ring all-reduce's 2 (p - 1) / p of every gradient byte, counted by the runtime from the calls made */
    double gradient_bytes = (double)c->layers * c->width * c->width * sizeof(float);
    double formula = 2.0 * (p - 1) / p * gradient_bytes;
    int64_t bk = in_buckets.nominal_sent[DIST_CALL_ALL_REDUCE], pp = per_parameter.nominal_sent[DIST_CALL_ALL_REDUCE];
    check(bk == pp && (double)bk == formula,
          "buckets: %d layers' gradients sent once, in %d buckets as one per parameter (%lld = %lld = 2 (p-1)/p "
          "x %.0f bytes)",
          c->layers, buckets, (long long)bk, (long long)pp, gradient_bytes);
    if (rank == 0) {
        char question[400];
        snprintf(question, sizeof question,
                 "Without buckets, one all-reduce per parameter sends %lld bytes a step, by the ring's formula "
                 "(2(p-1)/p of the bytes all-reduced). DDP's %d buckets make %d all-reduces of the same gradients: "
                 "how many bytes do they send?",
                 (long long)pp, buckets, buckets);
        predict(question, (double)bk, "bytes");
        table_t *t = table_new("One DDP step of %d layers on %d ranks: rank 0's gradient all-reduces", c->layers, p);
        table_column(t, "gradients", NULL, "%s");
        table_column(t, "all-reduce calls", NULL, "%lld");
        table_column(t, "bytes sent, formula", "bytes", "%lld");
        table_row(t, "in buckets", (long long)in_buckets.calls[DIST_CALL_ALL_REDUCE], (long long)bk);
        table_row(t, "one per parameter", (long long)per_parameter.calls[DIST_CALL_ALL_REDUCE], (long long)pp);
        table_show(t);
    }
    tensor_free(one_each);
    tensor_free(bucketed);
}

/* no_sync: micro-batches 0 .. n-2 only accumulate; the last one averages. */
static void accumulate(ddp_model *m, int rank, const dp_args *a, tensor *x) {
    const mlp_config *c = &m->cfg;
    int64_t rows = x->shape[0] / MICRO_BATCHES;
    int before = m->all_reduces;
    for (int k = 0; k < MICRO_BATCHES; k++) {
        tensor *micro = row_slice(x, k * rows, (k + 1) * rows);
        m->sync = k == MICRO_BATCHES - 1; /* no_sync() around all but the last */
        ddp_forward_backward(m, micro, k == 0 ? 0.0f : 1.0f);
        tensor_free(micro);
    }
    /* Each micro-batch's gradient is a mean over its rows: the sum of the
     * MICRO_BATCHES means, divided by their number, is the shard's mean. */
    scale_(m->flat, 1.0f / MICRO_BATCHES);
    double size, diff = diff_to(m->grads, a, REF_GRAD, &size);
    note_verbatim("Rank %d: %d micro-batches with no_sync, %d all-reduces (%d buckets): max |rank - one "
                  "device| = %.3g (tolerance %.3g)",
                  rank, MICRO_BATCHES, m->all_reduces - before, m->buckets, diff, gradient_tolerance(c) * size);
    check(m->all_reduces - before == m->buckets && diff <= gradient_tolerance(c) * size,
          "no_sync: %d micro-batches made one all-reduce per bucket (%d of %d) and one device's gradient "
          "(%.3g <= %.3g)",
          MICRO_BATCHES, m->all_reduces - before, m->buckets, diff, gradient_tolerance(c) * size);
}

static void ddp_main(int rank, int world_size, void *args) {
    const dp_args *a = args;
    ddp_model m = {.cfg = a->cfg, .device = get_device(rank), .sync = 1};
    broadcast_initial_parameters(&m, rank);
    make_buckets(&m, a->per_bucket);
    tensor *data = make_data(&m.cfg, m.device);
    int64_t local = m.cfg.batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);
    bucketed_step(&m, rank, a, x);
    buckets_against_per_parameter(&m, rank, a->per_bucket, x);
    /* Back to the initial weights for the accumulation run. */
    for (int i = 0; i < m.cfg.layers; i++) {
        tensor *w0 = init_layer(&m.cfg, i, m.device);
        tensor_copy(m.w[i], w0);
        tensor_free(w0);
    }
    accumulate(&m, rank, a, x);
    tensor_free(x);
    tensor_free(data);
    ddp_free(&m);
}

/* ------------------------------------------------------------------ */
/* Step time against bucket size                                       */
/* ------------------------------------------------------------------ */

enum { SWEEP_WORLD = 2, SWEEP_LAYERS = 8 };

typedef struct sweep_args {
    mlp_config cfg;
    int warmup, steps;
} sweep_args;

/* Layers per bucket: one bucket per parameter, a few, one for all. */
static const int SWEEP_SIZES[] = {1, 2, 4, SWEEP_LAYERS};
#define N_SIZES (int)(sizeof SWEEP_SIZES / sizeof SWEEP_SIZES[0])

/* The modelled sweep: 64 layers of 64 x 1024 floats (256 KiB of gradient
 * each, 16 MiB in all), in 1 to 64 buckets. */
enum { MODELLED_LAYERS = 64, MODELLED_FLOATS = 64 * 1024, MODELLED_TRIALS = 7 };
static const int MODELLED_SIZES[] = {64, 16, 8, 4, 1};
#define N_MODELLED (int)(sizeof MODELLED_SIZES / sizeof MODELLED_SIZES[0])

/* The slowest rank's medians, per bucket size, handed to the lecture
 * (spawn_return), which makes the table and the plot; then the modelled
 * sweep's. */
typedef struct sweep_times {
    double step[N_SIZES], wait[N_SIZES];
    bucket_sweep modelled;
    int rounds; /* the modelled sweep's round shown (1 .. MODELLED_ROUNDS) */
} sweep_times;

/* The bucket count whose modelled step was fastest: its index in MODELLED_SIZES. */
static int fastest_modelled(const bucket_sweep *md) {
    int best = 0;
    for (int k = 1; k < N_MODELLED; k++)
        if (md->size[k].ms[DURING_BACKWARD] < md->size[best].ms[DURING_BACKWARD]) best = k;
    return best;
}

static void sweep_main(int rank, int world_size, void *args);
static void note_sweep(const sweep_args *a, const sweep_times *t);

/* Overlap, measured: one DDP step four ways (lectures/lib/buckets.c): the compute alone, the communication alone,
 * the buckets' all-reduces started after backward, and started as backward fills each; with the sweep's model
 * (real) and with modelled compute. */
enum { OVERLAP_WORLD = 4, OVERLAP_TRIALS = 9, MODELLED_BUCKETS = 16 };

static void overlap_main(int rank, int world_size, void *args) {
    const mlp_config *c = args;
    int device = get_device(rank);
    int64_t local = c->batch / world_size;
    tensor *data = make_data(c, device), *x = row_slice(data, rank * local, (rank + 1) * local), *w[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        w[i] = init_layer(c, i, device);
    buckets *g = buckets_new(c, 2, device); /* two layers a bucket */
    step_times real, modelled;
    time_ddp_steps(c, w, g, x, OVERLAP_TRIALS, &real);
    time_modelled_ddp_steps(MODELLED_BUCKETS, MODELLED_LAYER_ROWS * MODELLED_LAYER_COLS, OVERLAP_TRIALS, &modelled);
    if (rank == 0) {
        table_show(overlap_table(world_size, local, OVERLAP_TRIALS, g->n, MODELLED_BUCKETS, &real, &modelled));
        check(modelled.over_longer <= OVERLAP_OVER_LONGER_MAX,
              "modelled DDP step: the async all-reduces during backward took at most %.2f x the longer of compute "
              "alone and communication alone (%.2f x; round %d of at most %d)",
              OVERLAP_OVER_LONGER_MAX, modelled.over_longer, modelled.rounds, MODELLED_ROUNDS);
        check(modelled.speedup >= OVERLAP_SPEEDUP_MIN,
              "modelled DDP step: all-reducing after backward took at least %.1f x the overlapped step (%.2f x; "
              "round %d of at most %d)",
              OVERLAP_SPEEDUP_MIN, modelled.speedup, modelled.rounds, MODELLED_ROUNDS);
        note("What each row proves. Modelled: started during backward, the buckets' all-reduces took %.2f ms beside "
             "%.2f ms of compute alone and %.2f ms of communication alone (%.2f x the longer), %.2f times faster "
             "than started after backward: the overlap DDP's design is for. Real (this machine's arithmetic on %d "
             "ranks sharing %ld cores): speed-up %.2f.",
             modelled.ms[DURING_BACKWARD], modelled.ms[NO_ALL_REDUCE], modelled.ms[COMM_ALONE], modelled.over_longer,
             modelled.speedup, world_size, sysconf(_SC_NPROCESSORS_ONLN), real.speedup);
    }
    buckets_free(g);
    for (int i = 0; i < c->layers; i++)
        tensor_free(w[i]);
    tensor_free(x);
    tensor_free(data);
}

static void bucket_size(void) {
    progress("bucket size");
    note("## Step time against bucket size");
    sweep_args a = {.cfg = {.batch = 64, .width = 128, .layers = SWEEP_LAYERS, .steps = 1, .lr = 1e-2f},
                    .warmup = 1,
                    .steps = 9};
    if (lecture_quick()) {
        a.cfg.width = 64;
        a.steps = 5;
    }
    note("First, what overlap buys: one DDP step of the model below (%d layers of %d x %d, buckets of two layers, "
         "%d ranks) timed four ways, and the same step with modelled compute (`model_compute`: each layer's device "
         "busy for a set time, its host and links free, as on a GPU) and real all-reduces of real buckets.",
         a.cfg.layers, a.cfg.width, a.cfg.width, OVERLAP_WORLD);
    spawn(overlap_main, OVERLAP_WORLD, &a.cfg, sizeof a.cfg);
    note("Two sweeps, in one table and one chart. **Real**: a bigger model for timing, %d layers of %d x %d (%.2f MB "
         "of gradients), a batch of %d on %d ranks; one training step (forward, backward with the bucketed "
         "all-reduce, SGD) timed %d times after %d warm-up steps for each bucket size, the slowest rank's median. "
         "**Modelled**: the same DDP step with modelled compute (`model_compute`: each layer's device busy for a "
         "set time, its host and links free, as on a GPU) and real all-reduces of real buckets, so that the trade "
         "the bucket size makes shows, not this machine's cores.",
         a.cfg.layers, a.cfg.width, a.cfg.width, (double)a.cfg.layers * a.cfg.width * a.cfg.width * 4 / 1e6,
         a.cfg.batch, SWEEP_WORLD, a.steps, a.warmup);
    spawn(sweep_main, SWEEP_WORLD, &a, sizeof a);
    sweep_times t;
    if (spawn_result(0, &t, sizeof t) == sizeof t) note_sweep(&a, &t);
    if (gpu_count() == 0)
        note("What the real column shows, and what it cannot. Its ranks are processes on a CPU that other work "
             "shares: each rank's progress thread moves an early bucket's all-reduce while backward goes on "
             "(docs/design.md), but the all-reduce's copies and sums need the same cores as the matrix products, so "
             "hiding the transfer does not hide its work. Its rows differ by the fixed cost of each all-reduce call, "
             "by what waiting the overlap hides, and by the noise of a shared machine, and their order may change "
             "from run to run.");
    else
        note("What the real column shows, and what it cannot. The matrix products ran on the GPU; the all-reduce "
             "ran on the backend named in the spawn's note above (on NCCL, its own stream; with ranks sharing a GPU, "
             "Open MPI on the CPU through staged host copies), so it competes with the products for copies and "
             "synchronisation, not for the same cores.");
    note("On GPUs with NCCL each all-reduce runs on its own stream beside the backward kernels, as the modelled "
         "column's do: small buckets pay the fixed cost many times, one bucket for all cannot start before backward "
         "ends, and a middle size hides most of the communication. That is why PyTorch's default (25 MB) is neither "
         "one bucket per parameter nor one for all.");
}

/* Median step time (s) and median time waiting for buckets, with buckets of
 * per_bucket layers. */
static double time_steps(const sweep_args *a, int per_bucket, tensor *x, double *wait) {
    ddp_model m = {.cfg = a->cfg, .device = x->device, .sync = 1};
    for (int i = 0; i < a->cfg.layers; i++)
        m.w[i] = init_layer(&a->cfg, i, m.device);
    make_buckets(&m, per_bucket);
    double times[64], waits[64];
    for (int s = 0; s < a->warmup + a->steps; s++) {
        /* The warm-up steps carry the runtime's agreement checks; the timed
         * ones skip them (a timed region), so a step costs what DDP costs. */
        if (s == a->warmup) dist_timed_begin();
        dist_barrier(); /* every rank starts the step together */
        m.wait_seconds = 0;
        double t0 = now_seconds();
        ddp_forward_backward(&m, x, 0.0f);
        for (int i = 0; i < a->cfg.layers; i++)
            sgd_step(m.w[i], m.grads[i], a->cfg.lr);
        device_synchronize();
        if (s >= a->warmup) {
            times[s - a->warmup] = now_seconds() - t0;
            waits[s - a->warmup] = m.wait_seconds;
        }
    }
    if (a->steps > 0) dist_timed_end();
    ddp_free(&m);
    *wait = median_of(waits, a->steps);
    return median_of(times, a->steps);
}

static void sweep_main(int rank, int world_size, void *args) {
    const sweep_args *a = args;
    int device = get_device(rank);
    tensor *data = make_data(&a->cfg, device);
    int64_t local = a->cfg.batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);
    sweep_times t = {.modelled = {.trials = MODELLED_TRIALS}};
    for (int k = 0; k < N_SIZES; k++) {
        double wait, step = time_steps(a, SWEEP_SIZES[k], x, &wait);
        t.step[k] = max_over_ranks(step, device);
        t.wait[k] = max_over_ranks(wait, device);
    }
    /* lectures/lib/buckets.c: real buckets, modelled compute, sized from this machine's all-reduces. A round
     * whose fastest step sits at an end of the sweep is run again, up to MODELLED_ROUNDS rounds, as the overlap
     * above is: a busy spell of the machine can even out 16 and 64 buckets (seen once in six runs at load 9 on 2
     * cores), while a sweep without the trade misses every round. The times are the slowest rank's (dist_timer),
     * the same on every rank, so every rank decides alike. */
    for (t.rounds = 1;; t.rounds++) {
        time_modelled_bucket_sweep(MODELLED_LAYERS, MODELLED_FLOATS, MODELLED_SIZES, N_MODELLED, &t.modelled);
        int best = fastest_modelled(&t.modelled);
        if ((best > 0 && best < N_MODELLED - 1) || t.rounds == MODELLED_ROUNDS) break;
    }
    if (rank == 0) spawn_return(&t, sizeof t);
    tensor_free(x);
    tensor_free(data);
}

static void note_sweep(const sweep_args *a, const sweep_times *t) {
    const bucket_sweep *md = &t->modelled;
    /* the caption holds the modelled compute's sizes, which the note after the chart states */
    table_t *table = table_new("DDP step against bucket size: the real model, and modelled compute (each layer's "
                               "forward %.3f ms and backward %.3f ms, sized from %d buckets' all-reduces alone: %.2f "
                               "ms)",
                               md->forward_ms, md->backward_ms, md->sized_buckets, md->comm_ms);
    table_column(table, "buckets", NULL, "%d");
    table_column(table, "real: layers per bucket", NULL, "%.0f");
    table_column(table, "real: bucket size", "MB", "%.3f");
    table_column(table, "real: step", "ms", "%.3f");
    table_column(table, "real: waiting for buckets", "ms", "%.3f");
    table_column(table, "modelled: layers per bucket", NULL, "%.0f");
    table_column(table, "modelled: step", "ms", "%.3f");
    table_column(table, "modelled: all-reduce after backward", "ms", "%.3f");
    table_column(table, "modelled: compute alone", "ms", "%.3f");
    table_column(table, "modelled: communication alone", "ms", "%.3f");
    table_column(table, "modelled: speed-up (after / during)", NULL, "%.2f");
    table_column(table, "modelled: during / max(compute, communication)", NULL, "%.2f");
    double real_buckets[N_SIZES], real_ms[N_SIZES], model_buckets[N_MODELLED], model_ms[N_MODELLED];
    int best = fastest_modelled(md);
    for (int n = 1; n <= MODELLED_LAYERS; n *= 2) { /* a row per bucket count either run had */
        int r = -1, m = -1;
        for (int k = 0; k < N_SIZES; k++)
            if ((a->cfg.layers + SWEEP_SIZES[k] - 1) / SWEEP_SIZES[k] == n) r = k;
        for (int k = 0; k < N_MODELLED; k++)
            if (MODELLED_LAYERS / MODELLED_SIZES[k] == n) m = k;
        if (r < 0 && m < 0) continue;
        double mb = r < 0 ? NAN : (double)SWEEP_SIZES[r] * a->cfg.width * a->cfg.width * 4 / 1e6;
        table_row(table, n, r < 0 ? NAN : SWEEP_SIZES[r], mb, r < 0 ? NAN : t->step[r] * 1e3,
                  r < 0 ? NAN : t->wait[r] * 1e3, m < 0 ? NAN : MODELLED_SIZES[m],
                  m < 0 ? NAN : md->size[m].ms[DURING_BACKWARD], m < 0 ? NAN : md->size[m].ms[AFTER_BACKWARD],
                  m < 0 ? NAN : md->size[m].ms[NO_ALL_REDUCE], m < 0 ? NAN : md->size[m].ms[COMM_ALONE],
                  m < 0 ? NAN : md->size[m].speedup, m < 0 ? NAN : md->size[m].over_longer);
    }
    table_show(table);
    for (int k = 0; k < N_SIZES; k++) {
        real_buckets[k] = (a->cfg.layers + SWEEP_SIZES[k] - 1) / SWEEP_SIZES[k];
        real_ms[k] = t->step[k] * 1e3;
    }
    for (int k = 0; k < N_MODELLED; k++) {
        model_buckets[k] = MODELLED_LAYERS / MODELLED_SIZES[k];
        model_ms[k] = md->size[k].ms[DURING_BACKWARD];
    }
    chart_t *c = chart_new("buckets", "step (ms)", "DDP step time against the number of buckets");
    chart_log_x(c, 2);
    chart_line(c, "real", real_buckets, real_ms, N_SIZES);
    chart_line(c, "modelled compute", model_buckets, model_ms, N_MODELLED);
    chart_show(c);
    int n_best = MODELLED_LAYERS / MODELLED_SIZES[best];
    const step_times *b = &md->size[best];
    note("The modelled sweep: %d layers of 256 KiB of gradient each, really all-reduced, on %d ranks; each layer's "
         "forward %.3f ms and backward %.3f ms of modelled compute (medians; a bucket's layers' backward one span), "
         "in all 1.8 times what the all-reduces of the middle size, %d buckets, took alone (%.2f ms, median), measured in "
         "each step just before.",
         MODELLED_LAYERS, SWEEP_WORLD, md->forward_ms, md->backward_ms, md->sized_buckets, md->comm_ms);
    check(best > 0 && best < N_MODELLED - 1,
          "modelled sweep: the fastest step (%.2f ms, %d buckets) lies inside the sweep, not at 1 bucket (%.2f ms) "
          "nor at %d (%.2f ms; round %d of at most %d)",
          model_ms[best], n_best, model_ms[0], MODELLED_LAYERS, model_ms[N_MODELLED - 1], t->rounds, MODELLED_ROUNDS);
    note("Both halves of the trade, in the modelled column: one bucket starts late (its all-reduce only after "
         "backward: %.2f ms), %d buckets each pay the per-call cost, at the call and at the wait (%.2f ms), and %d "
         "buckets, between the two, are the fastest (%.2f ms: %.2f x the longer of compute alone and communication "
         "alone, %.2f times faster than the same buckets all-reduced after backward). The real column is this "
         "machine's arithmetic.",
         model_ms[0], MODELLED_LAYERS, model_ms[N_MODELLED - 1], n_best, model_ms[best], b->over_longer, b->speedup);
}

/* ------------------------------------------------------------------ */
/* Stragglers                                                          */
/* ------------------------------------------------------------------ */

enum { STRAGGLER_WORLD = 3, STRAGGLER = 1 };

typedef struct straggler_args {
    mlp_config cfg;
    int delay_ms, steps;
} straggler_args;

static void straggler_main(int rank, int world_size, void *args);

static void stragglers(void) {
    progress("stragglers");
    note("## Stragglers");
    straggler_args a = {.cfg = model_config(), .delay_ms = 50, .steps = 7};
    if (lecture_quick()) a.steps = 5;
    note("An all-reduce finishes only when every rank has joined it, so a step is as slow "
         "as the slowest rank. Here rank %d of %d sleeps %d ms more than the others in "
         "each step (a slower GPU, a busy host, a bigger batch). Every rank times its own "
         "compute, its all-reduce and the whole step, %d steps; medians below.",
         STRAGGLER, STRAGGLER_WORLD, a.delay_ms, a.steps);
    spawn(straggler_main, STRAGGLER_WORLD, &a, sizeof a);
    note("The fast ranks finish their compute early and spend the difference inside the "
         "all-reduce: every rank's step takes as long as the straggler's. With hundreds of "
         "ranks, the chance that *some* rank is slow in a step grows, which is why large "
         "jobs watch for stragglers.");
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void straggler_main(int rank, int world_size, void *args) {
    const straggler_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    make_model(c, device, w, grads);
    double compute[64], reduce[64], step[64];
    for (int s = 0; s < a->steps; s++) {
        dist_barrier();
        double t0 = now_seconds();
        gradients(w, c->layers, x, grads);
        if (rank == STRAGGLER) sleep_ms(a->delay_ms); /* the slow rank */
        double t1 = now_seconds();
        average_all(grads, c->layers);
        double t2 = now_seconds();
        sgd_all(w, grads, c->layers, c->lr);
        double t3 = now_seconds();
        compute[s] = t1 - t0;
        reduce[s] = t2 - t1;
        step[s] = t3 - t0;
    }
    const char *role = rank == STRAGGLER ? " (straggler)" : "";
    double compute_ms = median_of(compute, a->steps) * 1e3, reduce_ms = median_of(reduce, a->steps) * 1e3,
           step_ms = median_of(step, a->steps) * 1e3;
    note_verbatim("Rank %d%s: compute %.2f ms, all-reduce %.2f ms, step %.2f ms", rank, role, compute_ms, reduce_ms,
                  step_ms);
    free_model(c, w, grads);
    tensor_free(x);
    tensor_free(data);
}

static void summary(void) {
    note("## Summary");
    note("- Data parallelism splits the batch; averaging gradients reproduces one device "
         "(to float32 rounding) with any optimizer, averaging parameters only for one plain "
         "SGD step.\n"
         "- DDP broadcasts rank 0's parameters, fills buckets in reverse layer order, starts "
         "each bucket's all-reduce as soon as backward completes it, and waits before the "
         "optimizer; `no_sync` skips the all-reduce on all but the last micro-batch.\n"
         "- The bucket size trades a fixed cost per all-reduce against how early "
         "communication can start: with modelled compute, one bucket and a bucket per "
         "layer were both slower than a middle size.\n"
         "- One slow rank slows every rank: they wait for it in the all-reduce.");
    see("https://arxiv.org/abs/2006.15704", "Li et al.: PyTorch Distributed: Experiences on "
                                            "Accelerating Data Parallel Training (VLDB 2020)");
    see("https://pytorch.org/docs/stable/notes/ddp.html", "PyTorch: Distributed Data Parallel design notes");
    free(reference.args);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_ddp); }
