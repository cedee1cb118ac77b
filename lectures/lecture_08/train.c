/*
 * train.c: what lecture_08's training strategies share (train.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* Floats in all the layers' weights together. */
int64_t model_floats(const mlp_config *c) { return (int64_t)c->layers * c->width * c->width; }

const char *losses_text(const float *loss, int steps, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < steps && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%.9g", i ? ", " : "[", (double)loss[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* "[512x512[-0.0279...], ...]": shape and first element of each tensor. */
const char *summaries(tensor *const *ts, int n, char *buf, size_t size) {
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", summarize(ts[i]));
    if (len < size) snprintf(buf + len, size - len, "]");
    return buf;
}

/* "1 rank", "4 ranks". */
const char *plural(int n, const char *one, const char *many) { return n == 1 ? one : many; }


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
    const float *g = a->expected + model_floats(&a->cfg) + (int64_t)a->cfg.batch * a->cfg.width + layer * ww;
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


/* Trains on one device for `steps` steps (0: step 0's forward and backward
 * only, no update), keeping step 0's loss, output and gradients and the
 * trained weights in *b. */
static void train(baseline_run *b, int steps, float *losses, char (*params)[PARAMS_TEXT]) {
    mlp_config c = b->cfg;
    int device = get_device(0);
    int64_t ww = (int64_t)c.width * c.width;
    tensor *data = make_data(&c, device);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    for (int i = 0; i < c.layers; i++) {
        w[i] = init_layer(&c, i, device);
        grads[i] = empty(c.width, c.width, device);
        opt[i] = adamw_new(w[i], c.lr);
    }
    b->first_output = malloc((size_t)c.batch * c.width * sizeof(float));
    b->first_grads = malloc((size_t)model_floats(&c) * sizeof(float));
    b->trained = calloc((size_t)model_floats(&c), sizeof(float));
    for (int step = 0; step < (steps > 0 ? steps : 1); step++) {
        forward(w, c.layers, data, acts, pre);
        float loss = mse_loss(acts[c.layers]);
        backward(w, c.layers, acts, pre, grads);
        if (step == 0) {
            b->first_loss = loss;
            tensor_to_host(acts[c.layers], b->first_output);
            for (int i = 0; i < c.layers; i++)
                tensor_to_host(grads[i], b->first_grads + i * ww);
        }
        free_saved(c.layers, acts, pre);
        if (steps == 0) break;
        for (int i = 0; i < c.layers; i++)
            adamw_step(opt[i], w[i], grads[i]);
        losses[step] = loss;
        summaries(w, c.layers, params[step], PARAMS_TEXT);
    }
    for (int i = 0; i < c.layers; i++) {
        if (steps > 0) tensor_to_host(w[i], b->trained + i * ww);
        adamw_free(opt[i]);
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    tensor_free(data);
}

table_t *one_device_train(baseline_run *b) {
    float losses[16]; /* steps: at most 5 (training_config) */
    char params[16][PARAMS_TEXT];
    train(b, b->cfg.steps, losses, params);
    table_t *t = table_new("One device: the whole batch, step by step");
    table_column(t, "step", NULL, "%d");
    table_column(t, "loss", NULL, "%.9g");
    table_column(t, "params after the step", NULL, "%s");
    for (int step = 0; step < b->cfg.steps; step++)
        table_row(t, step, (double)losses[step], params[step]);
    return t;
}

void one_device_step0(baseline_run *b) { train(b, 0, NULL, NULL); }

void baseline_free(baseline_run *b) {
    free(b->first_output);
    free(b->first_grads);
    free(b->trained);
}

/* Every rank's result of the last spawn, in rank order. */
static void results_of(int world_size, rank_result *out) {
    for (int r = 0; r < world_size; r++)
        if (spawn_result(r, &out[r], sizeof out[r]) != sizeof out[r])
            lecture_fail("rank %d of the strategy's spawn returned no rank_result", r);
}

/* The caption, printf-style, of a new table. */
static table_t *table_from(const char *fmt, va_list ap) {
    char caption[300];
    vsnprintf(caption, sizeof caption, fmt, ap);
    return table_new("%s", caption);
}

table_t *results_table(int world_size, const char *caption_fmt, ...) {
    rank_result res[LECTERN_MAX_WORLD];
    results_of(world_size, res);
    va_list ap;
    va_start(ap, caption_fmt);
    table_t *t = table_from(caption_fmt, ap);
    va_end(ap);
    const char *names[] = {"first_row", "rows", "state_bytes", "bytes", "calls"};
    table_column(t, "rank", NULL, "%d");
    for (int i = 0; i < 5; i++)
        table_column(t, names[i], i >= 2 && i <= 3 ? "bytes" : NULL, "%.0f");
    const char *diffs[] = {"grad_diff", "grad_tol", "grad_max", "trained_diff", "trained_bound"};
    for (int i = 0; i < 5; i++)
        table_column(t, diffs[i], NULL, "%.3g");
    table_column(t, "losses", NULL, "%s");
    for (int r = 0; r < world_size; r++) {
        const rank_result *x = &res[r];
        char losses[400];
        table_row(t, r, x->first, x->rows, x->state_bytes, x->bytes, x->calls, x->grad_diff, x->grad_tol, x->grad_max,
                  x->trained_diff, x->trained_bound, losses_text(x->loss, x->steps, losses, sizeof losses));
    }
    return t;
}

table_t *buckets_table(int world_size, const char *caption_fmt, ...) {
    rank_result res[LECTERN_MAX_WORLD];
    results_of(world_size, res);
    va_list ap;
    va_start(ap, caption_fmt);
    table_t *t = table_from(caption_fmt, ap);
    va_end(ap);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "calls_mb0", NULL, "%.0f");
    table_column(t, "calls_mb1", NULL, "%.0f");
    table_column(t, "grad_diff", NULL, "%.3g");
    table_column(t, "grad_tol", NULL, "%.3g");
    table_column(t, "grad_max", NULL, "%.3g");
    table_column(t, "losses", NULL, "%s");
    for (int r = 0; r < world_size; r++) {
        const rank_result *x = &res[r];
        char losses[400];
        table_row(t, r, x->calls_mb[0], x->calls_mb[1], x->grad_diff, x->grad_tol, x->grad_max,
                  losses_text(x->loss, x->steps, losses, sizeof losses));
    }
    return t;
}

table_t *tp_table(int world_size, const char *caption_fmt, ...) {
    rank_result res[LECTERN_MAX_WORLD];
    results_of(world_size, res);
    va_list ap;
    va_start(ap, caption_fmt);
    table_t *t = table_from(caption_fmt, ap);
    va_end(ap);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "first_col", NULL, "%.0f");
    const char *names[] = {"one_loss", "loss", "out_diff", "out_tol", "grad_diff", "grad_tol", "grad_max"};
    for (int i = 0; i < 7; i++)
        table_column(t, names[i], NULL, i < 2 ? "%.9g" : "%.3g");
    table_column(t, "bytes", "bytes", "%.0f");
    table_column(t, "calls", NULL, "%.0f");
    for (int r = 0; r < world_size; r++) {
        const rank_result *x = &res[r];
        table_row(t, r, x->first, x->one_loss, x->loss0, x->out_diff, x->out_tol, x->grad_diff, x->grad_tol,
                  x->grad_max, x->bytes, x->calls);
    }
    return t;
}

tensor *layer_part(const mlp_config *c, int layer, char cut, int64_t first, int64_t last, int device) {
    tensor *full = init_layer(c, layer, device);
    if (cut == 'w') return full;
    tensor *part;
    if (cut == 'c') {
        part = col_slice(full, first, last);
    } else {
        tensor *rows = row_slice(full, first, last);
        part = to_device(rows, device); /* a copy of its own, not a view into full */
        tensor_free(rows);
    }
    tensor_free(full);
    return part;
}

double diff_from_one_device(const train_args *a, int which, tensor *const *got, int layers, const char *cut,
                            int64_t first, int64_t last, double *size) {
    double diff = 0;
    for (int i = 0; i < layers; i++) {
        tensor *full = which == TRAINED ? expected_trained(a, i, got[i]->device) : expected_grad(a, i, got[i]->device);
        char k = cut ? cut[i] : 'w';
        tensor *part = k == 'c' ? col_slice(full, first, last) : k == 'r' ? row_slice(full, first, last) : NULL;
        diff = fmax(diff, max_abs_diff(got[i], part ? part : full));
        if (size) *size = fmax(*size, largest(full));
        if (part) tensor_free(part);
        tensor_free(full);
    }
    return diff;
}

table_t *zero_stages_table(double params, int ranks) {
    /* fp32 with AdamW: weights 4P bytes, gradients 4P, AdamW's two moments 8P; stage s divides the first s of
     * (moments, gradients, weights) by the world size */
    table_t *t = table_new("model state per rank, %d ranks", ranks);
    table_column(t, "method", NULL, "%s");
    table_column(t, "weights", "MB", "%.3f");
    table_column(t, "gradients", "MB", "%.3f");
    table_column(t, "AdamW state", "MB", "%.3f");
    table_column(t, "total", "MB", "%.3f");
    const char *names[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    for (int stage = 0; stage <= 3; stage++) {
        double w = 4 * params / (stage >= 3 ? ranks : 1), g = 4 * params / (stage >= 2 ? ranks : 1);
        double o = 8 * params / (stage >= 1 ? ranks : 1);
        table_row(t, names[stage], w / 1e6, g / 1e6, o / 1e6, (w + g + o) / 1e6);
    }
    return t;
}

double output_diff(const train_args *a, const tensor *out, double *tol) {
    tensor *expected = expected_output(a, out->device);
    double diff = max_abs_diff(out, expected);
    *tol = output_tolerance(&a->cfg) * largest(expected);
    tensor_free(expected);
    return diff;
}

void adamw_step_layers(adamw *const *opt, tensor *const *w, tensor *const *g, int n) {
    for (int i = 0; i < n; i++)
        adamw_step(opt[i], w[i], g[i]);
}

void adamw_free_layers(adamw *const *opt, int n) {
    for (int i = 0; i < n; i++)
        adamw_free(opt[i]);
}

mlp_config training_config(void) {
    mlp_config c = {.batch = 128, .width = 512, .layers = 4, .steps = 5, .lr = 1e-3f};
    if (lecture_quick()) {
        c.width = 256;
        c.steps = 2;
    }
    const char *batch = lecture_option("batch", "128");
    char *end;
    long n = strtol(batch, &end, 10);
    if (*end != '\0' || n < 1 || n > 1 << 16) { /* bad usage, as for an undeclared option */
        fprintf(stderr, "lecture_08: --batch=%s: expected a number of examples from 1 to 65536\n", batch);
        exit(2);
    }
    c.batch = (int)n;
    return c;
}

/* Every rank's (rows x cols/world) piece, side by side: (rows x cols). The all-gather stacks the pieces one under
 * the other; cat_cols puts them side by side. */
tensor *all_gather_columns(tensor *piece, int world_size) {
    int64_t rows = piece->shape[0];
    tensor *stacked = empty(world_size * rows, piece->shape[1], piece->device);
    dist_all_gather(stacked, piece);
    tensor *parts[LECTERN_MAX_WORLD];
    for (int r = 0; r < world_size; r++)
        parts[r] = row_slice(stacked, r * rows, (r + 1) * rows);
    tensor *full = cat_cols(parts, world_size);
    for (int r = 0; r < world_size; r++)
        tensor_free(parts[r]);
    tensor_free(stacked);
    return full;
}

void predict_zero3_bytes(int world_size, const mlp_config *c, double bytes) {
    char question[400];
    snprintf(question, sizeof question,
             "How many bytes does one rank send in one ZeRO-3 step here (%d ranks, %d layers of %d x %d floats)? Each "
             "all-gather and each reduce-scatter sends (p - 1) / p of a layer. The forward makes %d all-gathers (every "
             "layer, each freed after use); the backward %d all-gathers (every layer but layer 0, again) and %d "
             "reduce-scatters (every layer's gradient).",
             world_size, c->layers, c->width, c->width, c->layers, c->layers - 1, c->layers);
    predict(question, bytes, "bytes");
}
