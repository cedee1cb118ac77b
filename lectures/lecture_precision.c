/*
 * lecture_precision: mixed precision as code. bf16, fp16 and fp8 tensors,
 * fp32 master weights, loss scaling, FP8's per-tensor scales and a bf16
 * all-reduce, each run and measured.
 *
 *     make run LECTURE=lecture_precision
 *
 * and open viewer/index.html?trace=lecture_precision. Every format fact is
 * what to_dtype() did to a value, every byte count is tensor_bytes_live()
 * or dist_traffic_since(), and every training curve is a real run of
 * lectures/lib/mlp.h's model.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/mlp.h"

static void formats(void);
static void memory_per_parameter(void);
static void bf16_training(void);
static void fp16_loss_scaling(void);
static void bf16_all_reduce(void);
static void fp8_scaling(void);
static void summary(void);

static void lecture_precision(void) {
    note("# Mixed precision");
    note("A model trained today computes in bf16, keeps fp32 master weights, may keep "
         "fp16 gradients behind a loss scale, runs its matrix products in FP8 on the newest "
         "GPUs and all-reduces its gradients in bf16. Each of those is a choice about where "
         "rounding happens. This lecture makes the tensors in each format, trains the lecture "
         "series' MLP with them, and measures what each choice keeps and loses.");
    formats();
    memory_per_parameter();
    bf16_training();
    fp16_loss_scaling();
    bf16_all_reduce();
    fp8_scaling();
    summary();
}

/* ------------------------------------------------------------------ */
/* Helpers: values through a format and back                           */
/* ------------------------------------------------------------------ */

enum { N_DTYPES = 5 };
static const dtype DTYPES[N_DTYPES] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_F8_E4M3, DTYPE_F8_E5M2};

/* out[i] = xs[i] rounded to d (to_dtype), read back exactly as fp32. */
static void through(dtype d, const float *xs, int n, float *out) {
    tensor *t = tensor_from(xs, n, 0, -1);
    tensor *q = to_dtype(t, d);
    tensor_to_host(q, out);
    tensor_free(q);
    tensor_free(t);
}

/* This lecture's tensors are on the CPU, and its 16-bit collectives run on
 * Open MPI over host memory (NCCL, its emulator and ranks sharing a GPU do
 * not carry them yet: lectern.h). On a machine with a GPU, or with
 * LECTERN_BACKEND=nccl set, a spawn would choose those; this one asks for
 * Open MPI, as LECTERN_BACKEND=mpi does, and puts the variable back after.
 * (Run with the NCCL emulator asked for; unverified on a GPU machine.) */
static void spawn_on_open_mpi(void (*fn)(int, int, void *), int world_size) {
    const char *was = getenv("LECTERN_BACKEND");
    char *saved = was ? strdup(was) : NULL;
    setenv("LECTERN_BACKEND", "mpi", 1);
    spawn(fn, world_size, NULL, 0);
    if (saved) setenv("LECTERN_BACKEND", saved, 1);
    else unsetenv("LECTERN_BACKEND");
    free(saved);
}

/* A tensor's values on the host (the caller frees them). */
static float *host_values(const tensor *t) {
    float *v = malloc(sizeof(float) * (size_t)t->numel);
    if (!v) lecture_fail("out of memory for %lld floats", (long long)t->numel);
    tensor_to_host(t, v);
    return v;
}

/* ------------------------------------------------------------------ */
/* 1. The formats                                                      */
/* ------------------------------------------------------------------ */

typedef struct format_facts {
    double spacing_at_1, largest, smallest_normal, smallest_subnormal;
} format_facts;

/* The gap above 1: the smallest 2^-k for which 1 + 2^-k survives the
 * rounding (1 + half of it is a tie, and ties go to the even 1). */
static double spacing_at_one(dtype d) {
    enum { K = 30 };
    float xs[K], got[K];
    for (int k = 0; k < K; k++)
        xs[k] = 1.0f + ldexpf(1.0f, -(k + 1));
    through(d, xs, K, got);
    double spacing = 1;
    for (int k = 0; k < K; k++)
        if (xs[k] != 1.0f && got[k] == xs[k]) spacing = ldexp(1.0, -(k + 1));
    return spacing;
}

/* The largest finite value to_dtype gives for any of (2 - 2^-j) 2^e, j 1..23,
 * e 0..127: every fp32 number up to fp32's largest, coarsely. A format
 * that saturates gives its largest for everything above it; one that does
 * not gives infinity there, and its largest is still among the sweep. */
static double largest_finite(dtype d) {
    enum { J = 23, E = 128 };
    static float xs[J * E], got[J * E];
    for (int e = 0; e < E; e++)
        for (int j = 0; j < J; j++)
            xs[e * J + j] = ldexpf(2.0f - ldexpf(1.0f, -(j + 1)), e);
    through(d, xs, J * E, got);
    double best = 0;
    for (int i = 0; i < J * E; i++)
        if (isfinite(got[i])) best = fmax(best, got[i]);
    return best;
}

/* The smallest positive value to_dtype gives for 2^-k, k 0..149, and the
 * smallest 2^-k at which 2^-k (1 + spacing at 1) survives: below the
 * smallest normal the spacing stops shrinking, so that number rounds. */
static void smallest(dtype d, double spacing, format_facts *f) {
    enum { K = 150 };
    float xs[K], got[K], fine[K], fine_got[K];
    for (int k = 0; k < K; k++) {
        xs[k] = ldexpf(1.0f, -k);
        fine[k] = (float)(ldexp(1.0, -k) * (1 + spacing));
    }
    through(d, xs, K, got);
    through(d, fine, K, fine_got);
    f->smallest_subnormal = f->smallest_normal = 1;
    for (int k = 0; k < K; k++) {
        if (got[k] > 0) f->smallest_subnormal = fmin(f->smallest_subnormal, got[k]);
        if (fine[k] != xs[k] && fine_got[k] == fine[k]) f->smallest_normal = fmin(f->smallest_normal, xs[k]);
    }
}

static format_facts measure_format(dtype d) {
    format_facts f = {.spacing_at_1 = spacing_at_one(d), .largest = largest_finite(d)};
    smallest(d, f.spacing_at_1, &f);
    return f;
}

static void formats(void) {
    progress("formats");
    note("## Five formats");
    note("Every format here is sign, exponent and mantissa: the exponent's bits set the range, "
         "the mantissa's the spacing between neighbours. bf16 keeps fp32's 8 exponent bits and "
         "cuts the mantissa to 7: fp32's range at about two significant decimal digits. fp16 spends 5 bits on "
         "the exponent and 10 on the mantissa: finer, but with a range small gradients fall "
         "out of. The two FP8 formats of the OCP standard split 7 bits 4 + 3 (E4M3, for "
         "weights and activations) and 5 + 2 (E5M2, for gradients, which need range more "
         "than digits).");
    note("The table is measured, not typed in: each figure is what `to_dtype()` did to a sweep "
         "of values (the spacing above 1: the smallest 2^-k for which 1 + 2^-k survives; the "
         "largest: the largest finite result over numbers up to fp32's largest; the smallest "
         "normal: the smallest power of two at which 1 + that spacing survives; the smallest "
         "subnormal: the smallest positive result).");
    table_t *t = table_new("Each format, measured by rounding values with to_dtype");
    table_column(t, "format", NULL, "%s");
    table_column(t, "bytes", NULL, "%d");
    table_column(t, "spacing above 1", NULL, "%.3g");
    table_column(t, "largest", NULL, "%.6g");
    table_column(t, "smallest normal", NULL, "%.3g");
    table_column(t, "smallest subnormal", NULL, "%.3g");
    format_facts f[N_DTYPES];
    for (int i = 0; i < N_DTYPES; i++) {
        f[i] = measure_format(DTYPES[i]);
        table_row(t, dtype_name(DTYPES[i]), (int)dtype_size(DTYPES[i]), f[i].spacing_at_1, f[i].largest,
                  f[i].smallest_normal, f[i].smallest_subnormal);
    }
    table_show(t);
    double bf16_digits = -log10(f[1].spacing_at_1), fp16_max = f[2].largest;
    note("bf16's spacing above 1 is %.3g: about %.1f significant decimal digits, enough for a "
         "weight, not for a running sum of small updates. fp16's largest value is %.6g: a "
         "gradient times a large loss scale overflows it, and its smallest subnormal, %.3g, "
         "is where small gradients vanish.",
         quoted(f[1].spacing_at_1), bf16_digits, quoted(fp16_max), quoted(f[2].smallest_subnormal));
    /* Each figure follows from the bit counts: spacing 2^-M, smallest normal
     * 2^(1 - bias), smallest subnormal 2^(1 - bias - M). A rounding that
     * truncated, or a format table with a wrong bias, fails here. */
    check(f[1].spacing_at_1 == 0x1p-7 && f[2].spacing_at_1 == 0x1p-10 && f[3].spacing_at_1 == 0x1p-3 &&
                  f[4].spacing_at_1 == 0x1p-2,
          "spacing above 1 is 2^-mantissa bits: %g, %g, %g, %g", f[1].spacing_at_1, f[2].spacing_at_1,
          f[3].spacing_at_1, f[4].spacing_at_1);
    check(f[2].smallest_subnormal == 0x1p-24 && f[2].smallest_normal == 0x1p-14,
          "fp16: smallest normal 2^-14, smallest subnormal 2^-24 (%g, %g)", f[2].smallest_normal,
          f[2].smallest_subnormal);
}

/* ------------------------------------------------------------------ */
/* 2. Memory per parameter                                             */
/* ------------------------------------------------------------------ */

/* The model of every training run below: lectures/lib/mlp.h's stack. */
static mlp_config model_config(void) {
    mlp_config c = {.batch = 64, .width = 64, .layers = 4, .steps = 60, .lr = 1e-4f};
    return c;
}

static int64_t parameters(const mlp_config *c) { return (int64_t)c->layers * c->width * c->width; }

/* What a recipe keeps between steps, per layer. Any field may be NULL. */
typedef struct layer_state {
    tensor *weights;   /* what the products read (fp32 or bf16) */
    tensor *master;    /* fp32 master weights, when weights are bf16 */
    tensor *gradients; /* bf16 or fp32 */
    adamw *opt;        /* its two fp32 moments */
} layer_state;

enum { RECIPE_FP32, RECIPE_BF16, RECIPE_BF16_FP32_GRADS, N_RECIPES };
static const char *const RECIPE_NAMES[N_RECIPES] = {"fp32", "bf16 + fp32 master", "bf16 + fp32 master, fp32 gradients"};

/* Makes one layer's state in recipe r, over `rows` rows of the layer (all
 * of it, or a ZeRO shard). */
static layer_state make_state(int r, tensor *w, int64_t rows, int64_t offset) {
    layer_state s = {0};
    tensor *mine = tensor_view(w, offset, rows, w->shape[1]);
    tensor *fp32 = to_device(mine, -1);
    tensor_free(mine);
    if (r == RECIPE_FP32) {
        s.weights = fp32;
        s.gradients = zeros(rows, w->shape[1], -1);
        s.opt = adamw_new(s.weights, 1e-3f);
        return s;
    }
    s.master = fp32;
    s.weights = to_dtype(fp32, DTYPE_BF16);
    tensor *g = zeros(rows, w->shape[1], -1);
    s.gradients = r == RECIPE_BF16 ? to_dtype(g, DTYPE_BF16) : g;
    if (s.gradients != g) tensor_free(g);
    s.opt = adamw_new(s.master, 1e-3f);
    return s;
}

static void free_state(layer_state *s) {
    tensor_free(s->weights);
    if (s->master) tensor_free(s->master);
    tensor_free(s->gradients);
    adamw_free(s->opt);
}

/* The bytes a recipe's state holds for the whole model, measured on the heap. */
static int64_t state_bytes(const mlp_config *c, int r) {
    tensor *w[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        w[i] = init_layer(c, i, -1);
    int64_t before = tensor_bytes_live(-1);
    layer_state s[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        s[i] = make_state(r, w[i], c->width, 0);
    int64_t bytes = tensor_bytes_live(-1) - before;
    for (int i = 0; i < c->layers; i++) {
        free_state(&s[i]);
        tensor_free(w[i]);
    }
    return bytes;
}

/* ZeRO over the ranks of a spawn: the bytes one rank keeps, per parameter
 * of the whole model, for bf16 with fp32 master weights. */
typedef struct zero_bytes {
    double zero1, zero3; /* bytes per parameter of the model, this rank */
} zero_bytes;

/* ZeRO-1: every rank keeps the whole bf16 weights and gradients and its
 * shard of the fp32 master weights and moments. ZeRO-3: a shard of all. */
static layer_state zero_state(int stage, tensor *w, int rank, int world_size) {
    int64_t rows = w->shape[0] / world_size;
    layer_state s = make_state(RECIPE_BF16, w, rows, rank * rows * w->shape[1]);
    if (stage == 1) { /* the whole bf16 weights and gradients in place of their shards */
        tensor_free(s.weights);
        tensor_free(s.gradients);
        s.weights = to_dtype(w, DTYPE_BF16);
        tensor *g = zeros(w->shape[0], w->shape[1], -1);
        s.gradients = to_dtype(g, DTYPE_BF16);
        tensor_free(g);
    }
    return s;
}

static int64_t zero_state_bytes(const mlp_config *c, int stage, int rank, int world_size) {
    tensor *w[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        w[i] = init_layer(c, i, -1);
    int64_t before = tensor_bytes_live(-1);
    layer_state s[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        s[i] = zero_state(stage, w[i], rank, world_size);
    int64_t bytes = tensor_bytes_live(-1) - before;
    for (int i = 0; i < c->layers; i++) {
        free_state(&s[i]);
        tensor_free(w[i]);
    }
    return bytes;
}

static void zero_main(int rank, int world_size, void *args) {
    (void)args;
    mlp_config c = model_config();
    double n = (double)parameters(&c);
    zero_bytes z = {zero_state_bytes(&c, 1, rank, world_size) / n, zero_state_bytes(&c, 3, rank, world_size) / n};
    spawn_return(&z, sizeof z);
}

enum { WORLD = 4 };

static void memory_per_parameter(void) {
    progress("memory");
    note("## Bytes per parameter");
    note("Training with AdamW keeps, per parameter, the weight, its gradient and two moments. "
         "In fp32 that is 4 + 4 + 8 = 16 bytes. Mixed precision keeps the weights the products "
         "read in bf16 (2), an fp32 **master** copy that the optimizer updates (4), the fp32 "
         "moments (8) and bf16 gradients (2): 16 again. Many stacks accumulate gradients in "
         "fp32 (4 instead of 2): 18. The saving of mixed precision is in the activations and "
         "in the speed of the products, not in the model's state; ZeRO is what cuts the state.");
    mlp_config c = model_config();
    double n = (double)parameters(&c);
    double per[N_RECIPES];
    for (int r = 0; r < N_RECIPES; r++)
        per[r] = state_bytes(&c, r) / n;
    spawn_on_open_mpi(zero_main, WORLD);
    zero_bytes z[WORLD];
    for (int r = 0; r < WORLD; r++)
        if (spawn_result(r, &z[r], sizeof z[r]) != sizeof z[r]) lecture_fail("rank %d returned no byte counts", r);
    table_t *t = table_new("Model state per parameter, measured with tensor_bytes_live, %d layers of %d x %d", c.layers,
                           c.width, c.width);
    table_column(t, "training", NULL, "%s");
    table_column(t, "measured", "bytes", "%.2f");
    table_column(t, "formula", "bytes", "%.2f");
    table_column(t, "saved against bf16 + fp32 master", "bytes", "%.2f");
    double formula[N_RECIPES] = {4 + 4 + 8, 2 + 4 + 8 + 2, 2 + 4 + 8 + 4};
    for (int r = 0; r < N_RECIPES; r++)
        table_row(t, RECIPE_NAMES[r], per[r], formula[r], per[RECIPE_BF16] - per[r]);
    double zero1 = 2 + 2 + 12.0 / WORLD, zero3 = 16.0 / WORLD, saved = per[RECIPE_BF16] - z[0].zero3;
    table_row(t, "bf16 + fp32 master, ZeRO-1 on 4 ranks (rank 0)", z[0].zero1, zero1, per[RECIPE_BF16] - z[0].zero1);
    table_row(t, "bf16 + fp32 master, ZeRO-3 on 4 ranks (rank 0)", z[0].zero3, zero3, saved);
    predict("Mixed precision holds 16 bytes a parameter. How many bytes a parameter does each of "
            "4 ranks save when ZeRO-3 shards all of it (bf16 weights and gradients, fp32 master "
            "weights and moments)?",
            saved, "bytes");
    table_show(t);
    int exact = 1;
    for (int r = 0; r < N_RECIPES; r++)
        exact &= per[r] == formula[r];
    for (int r = 0; r < WORLD; r++)
        exact &= z[r].zero1 == zero1 && z[r].zero3 == zero3;
    /* tensor_bytes_live counts storage to the byte, so the measured bytes
     * equal the formula exactly; one tensor too many or in the wrong dtype
     * is at least 64 x 64 x 2 bytes off, 0.5 bytes a parameter. */
    check(exact, "every recipe holds what its formula says, on every rank (fp32 %.2f, bf16 %.2f, fp32 grads %.2f)",
          per[0], per[1], per[2]);
    note("ZeRO-1 shards only the fp32 state: each rank keeps %.2f bytes a parameter. ZeRO-3 "
         "shards everything: %.2f, saving %.2f of the 16.",
         quoted(z[0].zero1), quoted(z[0].zero3), quoted(saved));
}

/* ------------------------------------------------------------------ */
/* 3. bf16 training, with and without fp32 master weights              */
/* ------------------------------------------------------------------ */

/* One training run of the MLP. What the products read is w: fp32, or bf16.
 * With master weights, AdamW updates the fp32 master and w is its bf16
 * copy; without, AdamW updates the bf16 w itself. */
typedef enum { RUN_FP32, RUN_MIXED, RUN_BF16_ONLY, N_RUNS } run_kind;
static const char *const RUN_NAMES[N_RUNS] = {"fp32", "bf16, fp32 master weights", "bf16, no master weights"};

typedef struct run {
    run_kind kind;
    int layers;
    tensor *w[MAX_LAYERS], *master[MAX_LAYERS], *grad[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
} run;

static run run_new(const mlp_config *c, run_kind kind) {
    run r = {.kind = kind, .layers = c->layers};
    for (int i = 0; i < c->layers; i++) {
        tensor *w = init_layer(c, i, -1);
        r.master[i] = kind == RUN_MIXED ? w : NULL;
        r.w[i] = kind == RUN_FP32 ? w : to_dtype(w, DTYPE_BF16);
        if (kind == RUN_BF16_ONLY) tensor_free(w);
        r.grad[i] = zeros(c->width, c->width, -1); /* fp32: the products accumulate in fp32 */
        r.opt[i] = adamw_new(kind == RUN_MIXED ? r.master[i] : r.w[i], c->lr);
    }
    return r;
}

static void run_free(run *r) {
    for (int i = 0; i < r->layers; i++) {
        tensor_free(r->w[i]);
        if (r->master[i]) tensor_free(r->master[i]);
        tensor_free(r->grad[i]);
        adamw_free(r->opt[i]);
    }
}

/* The product's input in the dtype of the weights: bf16 runs round each
 * layer's input to bf16 (and keep it so for backward: half the bytes). */
static tensor *as_weights(const run *r, const tensor *x) {
    return r->kind == RUN_FP32 ? to_device(x, x->device) : to_dtype(x, DTYPE_BF16);
}

/* Forward and backward: r->grad[i] = d mean(out^2) / d w[i], in fp32
 * accumulators; the loss is returned. Every product reads inputs of the
 * weights' dtype and sums in fp32, as a tensor core does. The loss is
 * multiplied by loss_scale before backward (1: none), so the gradients are
 * too. */
static double forward_backward(run *r, const tensor *x, float loss_scale) {
    tensor *in[MAX_LAYERS], *pre[MAX_LAYERS], *out = to_device(x, x->device);
    for (int i = 0; i < r->layers; i++) {
        in[i] = as_weights(r, out);
        tensor_free(out);
        pre[i] = matmul(in[i], r->w[i]);
        out = gelu(pre[i]);
    }
    double loss = mse_loss(out);
    tensor *dy = mse_loss_backward(out);
    if (loss_scale != 1.0f) scale_(dy, loss_scale);
    tensor_free(out);
    for (int i = r->layers - 1; i >= 0; i--) {
        tensor *dh32 = gelu_backward(pre[i], dy), *dh = as_weights(r, dh32);
        tensor_free(dh32);
        tensor_free(dy);
        matmul_into(r->grad[i], in[i], dh, 1, 0, 1.0f, 0.0f);
        dy = NULL;
        if (i > 0) {
            dy = zeros(x->shape[0], x->shape[1], -1);
            matmul_into(dy, dh, r->w[i], 0, 1, 1.0f, 0.0f);
        }
        tensor_free(dh);
        tensor_free(in[i]);
        tensor_free(pre[i]);
    }
    return loss;
}

/* The update: bf16 runs keep bf16 gradients (rounded once from the fp32
 * accumulator); mixed precision steps the fp32 master and copies it into
 * the bf16 weights, the bf16-only run steps the bf16 weights themselves. */
static void update(run *r, int i) {
    if (r->kind == RUN_FP32) {
        adamw_step(r->opt[i], r->w[i], r->grad[i]);
        return;
    }
    tensor *g16 = to_dtype(r->grad[i], DTYPE_BF16);
    if (r->kind == RUN_MIXED) {
        adamw_step(r->opt[i], r->master[i], g16);
        tensor_copy(r->w[i], r->master[i]); /* rounds to bf16 */
    } else {
        adamw_step(r->opt[i], r->w[i], g16);
    }
    tensor_free(g16);
}

static double train_step(run *r, const tensor *x) {
    double loss = forward_backward(r, x, 1.0f);
    for (int i = 0; i < r->layers; i++)
        update(r, i);
    return loss;
}

/* What AdamW meant to do to a bf16-only layer at its next step, and what
 * the bf16 weights kept. The update is computed in fp32 on a copy of the
 * weights with a copy of the optimizer's state (the same arithmetic
 * adamw_step does before it rounds). */
typedef struct vanishing {
    int64_t params, moved_in_fp32, unchanged_in_bf16, vanished, below_half_gap;
    float before[8], update[8], half_gap[8], after[8];
} vanishing;

/* Half the distance from w to its bf16 neighbour in the direction of d:
 * the largest update that rounds back to w. bf16 has 8 significant bits,
 * so in the binade [2^(e-1), 2^e) the gap is 2^(e-8); moving towards zero
 * from a power of two, the gap below is half that. */
static double half_gap_towards(float w, float d) {
    int e;
    double m = frexp(fabs((double)w), &e); /* |w| = m 2^e, m in [0.5, 1) */
    double gap = ldexp(1.0, e - 8);
    if (m == 0.5 && (d < 0) != (w < 0)) gap /= 2;
    return gap / 2;
}

static void count_vanishing(vanishing *v, const float *before, const float *intended, const float *after, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        float d = intended[k] - before[k]; /* exact: the two are within a factor of 2 */
        v->params++;
        v->moved_in_fp32 += d != 0;
        v->unchanged_in_bf16 += after[k] == before[k];
        v->vanished += d != 0 && after[k] == before[k];
        v->below_half_gap += d != 0 && fabs((double)d) < half_gap_towards(before[k], d);
        if (v->params <= 8) {
            int j = (int)v->params - 1;
            v->before[j] = before[k];
            v->update[j] = d;
            v->half_gap[j] = (float)half_gap_towards(before[k], d);
            v->after[j] = after[k];
        }
    }
}

/* The bf16-only run's next step, layer by layer, watched. */
static vanishing watched_step(run *r, const tensor *x, double *loss) {
    vanishing v = {0};
    *loss = forward_backward(r, x, 1.0f);
    for (int i = 0; i < r->layers; i++) {
        tensor *fp32 = to_dtype(r->w[i], DTYPE_F32), *g16 = to_dtype(r->grad[i], DTYPE_BF16);
        adamw *twin = adamw_new(fp32, r->opt[i]->lr);
        tensor_copy(twin->m, r->opt[i]->m);
        tensor_copy(twin->v, r->opt[i]->v);
        twin->step = r->opt[i]->step;
        float *before = host_values(fp32);
        adamw_step(twin, fp32, g16);
        update(r, i);
        float *intended = host_values(fp32), *after = host_values(r->w[i]);
        count_vanishing(&v, before, intended, after, fp32->numel);
        free(before);
        free(intended);
        free(after);
        adamw_free(twin);
        tensor_free(g16);
        tensor_free(fp32);
    }
    return v;
}

static double largest_difference(const run *a, const run *b) {
    double worst = 0;
    for (int i = 0; i < a->layers; i++) {
        const tensor *wa = a->master[i] ? a->master[i] : a->w[i], *wb = b->master[i] ? b->master[i] : b->w[i];
        worst = fmax(worst, max_abs_diff(wa, wb));
    }
    return worst;
}

/* The bf16-only run's last step, shown: what AdamW meant and what stuck. */
static void vanished_updates(const vanishing *v, float lr) {
    note("### Updates that vanish");
    note("AdamW moves each weight by about lr = %g a step. bf16's gap between neighbours near a "
         "weight of 0.1 is 2^-11 = 0.00049: an update under half the gap rounds back to the "
         "weight it started from. The last step of the bf16-only run, watched: each layer's "
         "update computed in fp32 (a copy of the optimizer's state, the same arithmetic), then "
         "the bf16 weights after the real step.",
         lr);
    table_t *t = table_new("The first 8 weights of layer 0 in the bf16-only run's last step");
    table_column(t, "weight before", NULL, "%.8g");
    table_column(t, "update, fp32", NULL, "%.4g");
    table_column(t, "half the gap to the next bf16", NULL, "%.4g");
    table_column(t, "weight after", NULL, "%.8g");
    table_column(t, "the update", NULL, "%s");
    for (int j = 0; j < 8; j++)
        table_row(t, (double)v->before[j], (double)v->update[j], (double)v->half_gap[j], (double)v->after[j],
                  v->after[j] == v->before[j] ? "vanished" : "kept");
    table_show(t);
    table_t *all = table_new("Every weight of the bf16-only run's last step");
    table_column(all, "weights", NULL, "%lld");
    table_column(all, "moved by the fp32 update", NULL, "%lld");
    table_column(all, "unchanged in bf16", NULL, "%lld");
    table_column(all, "update vanished", NULL, "%lld");
    table_column(all, "update below half the gap", NULL, "%lld");
    table_row(all, (long long)v->params, (long long)v->moved_in_fp32, (long long)v->unchanged_in_bf16,
              (long long)v->vanished, (long long)v->below_half_gap);
    table_show(all);
    /* Rounding to nearest keeps w exactly when |update| is under half the
     * gap towards the update's side (a tie, exactly half, is not met here):
     * the two counts are the same weights, or the rounding is not to
     * nearest (truncation loses more, rounding up fewer). */
    check(v->vanished == v->below_half_gap && v->vanished > 0,
          "the updates that vanished are those under half of bf16's gap: %lld and %lld", (long long)v->vanished,
          (long long)v->below_half_gap);
    double lost = (double)v->vanished / (double)v->moved_in_fp32;
    note("Of %lld weights the fp32 update moved, %lld came out of the step unchanged in bf16: %.0f%% "
         "of the updates vanished, each one smaller than half the gap to its neighbour. fp32 master "
         "weights keep them: 2^-24 of a weight is far below any update.",
         quoted((long long)v->moved_in_fp32), quoted((long long)v->vanished), 100 * lost);
}

static void bf16_training(void) {
    progress("bf16 training");
    note("## bf16 training and fp32 master weights");
    note("Three runs of the same model from the same weights: fp32 throughout; bf16 products "
         "(each layer's input and weights rounded to bf16, the products summed in fp32, as a "
         "tensor core does) with bf16 gradients and fp32 master weights; and the same without "
         "master weights, AdamW updating the bf16 weights directly.");
    mlp_config c = model_config();
    tensor *x = make_data(&c, -1);
    run r[N_RUNS];
    static double steps[256], loss[N_RUNS][256];
    vanishing v = {0};
    for (int k = 0; k < N_RUNS; k++) {
        r[k] = run_new(&c, k);
        for (int s = 0; s < c.steps; s++) {
            steps[s] = s;
            if (k == RUN_BF16_ONLY && s == c.steps - 1) v = watched_step(&r[k], x, &loss[k][s]);
            else loss[k][s] = train_step(&r[k], x);
        }
    }
    chart_t *ch = chart_new("step", "loss", "The loss of %d steps, fp32 and bf16, AdamW lr %g", c.steps, c.lr);
    chart_log_y(ch, 10);
    for (int k = 0; k < N_RUNS; k++)
        chart_line(ch, RUN_NAMES[k], steps, loss[k], c.steps);
    chart_show(ch);
    int last = c.steps - 1;
    double drop[N_RUNS];
    table_t *t = table_new("fp32 and bf16 after %d steps", c.steps);
    table_column(t, "run", NULL, "%s");
    table_column(t, "first loss", NULL, "%.5g");
    table_column(t, "last loss", NULL, "%.5g");
    table_column(t, "loss drop", NULL, "%.5g");
    table_column(t, "largest |weight - fp32 run's|", NULL, "%.3g");
    for (int k = 0; k < N_RUNS; k++) {
        drop[k] = loss[k][0] - loss[k][last];
        table_row(t, RUN_NAMES[k], loss[k][0], loss[k][last], drop[k], largest_difference(&r[k], &r[RUN_FP32]));
    }
    table_show(t);
    /* bf16 perturbs each product's inputs by at most 2^-9 of their size, so
     * the mixed run's gradients are the fp32 run's within about a percent
     * and its loss falls as far, within a few percent (0.1% here). 90% of the
     * fp32 run's drop leaves room for that and for another model size; a run
     * that loses most of its updates falls short of it (the bf16-only run:
     * under half). */
    check(drop[RUN_MIXED] >= 0.9 * drop[RUN_FP32],
          "bf16 with master weights trains as fp32 does: loss drop %.4g >= 0.9 x %.4g", drop[RUN_MIXED],
          drop[RUN_FP32]);
    check(drop[RUN_BF16_ONLY] < 0.9 * drop[RUN_FP32],
          "bf16 without master weights falls short: loss drop %.4g < 0.9 x %.4g", drop[RUN_BF16_ONLY], drop[RUN_FP32]);
    double share = drop[RUN_BF16_ONLY] / drop[RUN_FP32];
    note("With fp32 master weights the bf16 run's loss fell as far as fp32's (%.5g against %.5g). "
         "Without them it fell %.5g, %.0f%% of that: most of its updates were lost.",
         quoted(drop[RUN_MIXED]), quoted(drop[RUN_FP32]), quoted(drop[RUN_BF16_ONLY]), 100 * share);
    vanished_updates(&v, c.lr);
    for (int k = 0; k < N_RUNS; k++)
        run_free(&r[k]);
    tensor_free(x);
}

/* ------------------------------------------------------------------ */
/* 4. fp16 and loss scaling                                            */
/* ------------------------------------------------------------------ */

/* The deepest stack mlp.h allows: GELU roughly halves a small signal on
 * the way down and again on the way back, so the first layers' gradients
 * are the smallest numbers of the step. */
static mlp_config deep_config(void) {
    mlp_config c = {.batch = 64, .width = 64, .layers = MAX_LAYERS, .steps = 60, .lr = 1e-3f};
    return c;
}

/* What fp16 does to the gradients r->grad holds (backward ran with the
 * loss times some scale), each multiplied by `back` first (1 / that scale:
 * the true gradient; 1: the scaled one): how many nonzero values become 0,
 * and whether any becomes infinite. */
typedef struct fp16_fate {
    int64_t underflowed, nonzero;
    int overflowed;
    double largest;
} fp16_fate;

static fp16_fate fate_in_fp16(const run *r, double back) {
    fp16_fate f = {0};
    for (int i = 0; i < r->layers; i++) {
        tensor *g16 = to_dtype_scaled(r->grad[i], DTYPE_F16, back);
        float *g = host_values(r->grad[i]), *h = host_values(g16);
        for (int64_t k = 0; k < g16->numel; k++) {
            f.nonzero += g[k] != 0;
            f.underflowed += g[k] != 0 && h[k] == 0;
            f.overflowed |= isinf(h[k]);
            f.largest = fmax(f.largest, fabs((double)g[k]) * back);
        }
        free(g);
        free(h);
        tensor_free(g16);
    }
    return f;
}

/* torch.amp.GradScaler's rule: halve the scale and skip the step on an
 * overflow, double it after `interval` steps without one (0: never). */
typedef struct scaler {
    double scale;
    int interval, good_steps;
} scaler;

/* One step of a run that keeps its gradients in fp16: backward with the
 * loss times the scale, the gradients rounded to fp16; an infinity skips
 * the update and halves the scale; otherwise they are unscaled in fp32 and
 * AdamW steps the fp32 weights. Returns 1 when the update was made. */
static int fp16_step(run *r, const tensor *x, scaler *s, double *loss) {
    *loss = forward_backward(r, x, (float)s->scale);
    tensor *g16[MAX_LAYERS];
    int finite = 1;
    for (int i = 0; i < r->layers; i++) {
        g16[i] = to_dtype(r->grad[i], DTYPE_F16);
        finite &= isfinite(tensor_sum(g16[i]));
    }
    for (int i = 0; i < r->layers; i++) {
        if (finite) {
            tensor *g = to_dtype_scaled(g16[i], DTYPE_F32, 1.0 / s->scale);
            adamw_step(r->opt[i], r->w[i], g);
            tensor_free(g);
        }
        tensor_free(g16[i]);
    }
    if (!finite) {
        s->scale /= 2;
        s->good_steps = 0;
    } else if (s->interval > 0 && ++s->good_steps == s->interval) {
        s->scale *= 2;
        s->good_steps = 0;
    }
    return finite;
}

enum { FP16_STEPS = 60, SCALE_INTERVAL = 3 };
static const double INITIAL_SCALE = 0x1p24;

typedef struct fp16_history {
    double step[FP16_STEPS], loss[3][FP16_STEPS], log2_scale[FP16_STEPS];
    double lost_unscaled[FP16_STEPS], lost_scaled[FP16_STEPS], nonzero[FP16_STEPS], largest[FP16_STEPS];
    int applied[FP16_STEPS];
    double moved[3];    /* the largest |weight - its start| after the run */
    double off_fp32[3]; /* the largest |weight - fp32 run's| after the run */
} fp16_history;

enum { FP16_RUN_FP32, FP16_RUN_UNSCALED, FP16_RUN_SCALED };
static const char *const FP16_RUN_NAMES[3] = {"fp32", "fp16 gradients, no loss scale",
                                              "fp16 gradients, dynamic loss scale"};

/* The three runs, step by step; the scaled one's gradients are watched. */
static void fp16_runs(const mlp_config *c, const tensor *x, fp16_history *h) {
    run fp32 = run_new(c, RUN_FP32), unscaled = run_new(c, RUN_FP32), scaled = run_new(c, RUN_FP32);
    scaler none = {.scale = 1, .interval = 0}, dynamic = {.scale = INITIAL_SCALE, .interval = SCALE_INTERVAL};
    for (int s = 0; s < FP16_STEPS; s++) {
        h->step[s] = s;
        h->loss[FP16_RUN_FP32][s] = train_step(&fp32, x);
        fp16_step(&unscaled, x, &none, &h->loss[FP16_RUN_UNSCALED][s]);
        h->log2_scale[s] = log2(dynamic.scale);
        double scale = dynamic.scale;
        h->applied[s] = fp16_step(&scaled, x, &dynamic, &h->loss[FP16_RUN_SCALED][s]);
        fp16_fate bare = fate_in_fp16(&scaled, 1.0 / scale), kept = fate_in_fp16(&scaled, 1.0);
        h->lost_unscaled[s] = (double)bare.underflowed;
        h->lost_scaled[s] = (double)kept.underflowed;
        h->nonzero[s] = (double)bare.nonzero;
        h->largest[s] = bare.largest;
    }
    const run *runs[3] = {&fp32, &unscaled, &scaled};
    run start = run_new(c, RUN_FP32);
    for (int k = 0; k < 3; k++) {
        h->moved[k] = largest_difference(runs[k], &start);
        h->off_fp32[k] = largest_difference(runs[k], &fp32);
    }
    run_free(&start);
    run_free(&fp32);
    run_free(&unscaled);
    run_free(&scaled);
}

static void fp16_tables(const fp16_history *h, int half) {
    table_t *t = table_new("fp16 gradients, step by step, in the dynamically scaled run");
    table_column(t, "step", NULL, "%d");
    table_column(t, "loss scale, log2", NULL, "%.0f");
    table_column(t, "update", NULL, "%s");
    table_column(t, "largest gradient", NULL, "%.3g");
    table_column(t, "nonzero gradients", NULL, "%.0f");
    table_column(t, "0 in fp16, unscaled", NULL, "%.0f");
    table_column(t, "0 in fp16, scaled", NULL, "%.0f");
    int skipped = 0;
    double lost_unscaled = 0, lost_scaled = 0;
    for (int s = 0; s < FP16_STEPS; s++) {
        table_row(t, s, h->log2_scale[s], h->applied[s] ? "made" : "skipped: overflow", h->largest[s], h->nonzero[s],
                  h->lost_unscaled[s], h->lost_scaled[s]);
        skipped += !h->applied[s];
        lost_unscaled += h->lost_unscaled[s];
        lost_scaled += h->lost_scaled[s];
    }
    table_show(t);
    chart_t *sc = chart_new("step", "log2 of the loss scale", "The dynamic loss scale finding its level");
    chart_line(sc, "loss scale", h->step, h->log2_scale, FP16_STEPS);
    chart_show(sc);
    chart_t *lc = chart_new("step", "loss", "The loss, fp32 and fp16 gradients");
    chart_log_y(lc, 10);
    for (int k = 0; k < 3; k++)
        chart_line(lc, FP16_RUN_NAMES[k], h->step, h->loss[k], FP16_STEPS);
    chart_show(lc);
    int last = FP16_STEPS - 1;
    table_t *w = table_new("fp32 and fp16 gradients after %d steps", FP16_STEPS);
    table_column(w, "run", NULL, "%s");
    table_column(w, "loss drop", NULL, "%.4g");
    table_column(w, "largest |weight - its start|", NULL, "%.3g");
    table_column(w, "largest |weight - fp32 run's|", NULL, "%.3g");
    for (int k = 0; k < 3; k++)
        table_row(w, FP16_RUN_NAMES[k], h->loss[k][0] - h->loss[k][last], h->moved[k], h->off_fp32[k]);
    table_show(w);
    note("Unscaled, fp16 turned more than half of the gradients into 0 from step %d on. The "
         "scale doubled every %d good steps, following the gradients down, until the largest "
         "gradient times the scale passed fp16's largest value: that step was skipped and the "
         "scale halved (%d skipped in all). Over the %d steps, scaled fp16 lost %.0f "
         "gradients to 0 against %.0f for the same gradients unscaled.",
         quoted(half), SCALE_INTERVAL, skipped, FP16_STEPS, quoted(lost_scaled), quoted(lost_unscaled));
    check(skipped > 0 && lost_scaled < 0.01 * lost_unscaled,
          "the scale overflowed and backed off (%d skipped) and kept the gradients out of fp16's underflow (%.0f lost "
          "against %.0f)",
          skipped, lost_scaled, lost_unscaled);
    /* A weight whose gradients are lost stays where it started while the
     * fp32 run's moves: the unscaled run ends about as far from fp32 as
     * fp32 moved. The scaled run differs by fp16's rounding of each
     * gradient (2^-11 of it) and a few skipped steps of 60: a few percent
     * of the movement. A quarter of it separates the two. */
    double bar = 0.25 * h->moved[FP16_RUN_FP32];
    check(h->off_fp32[FP16_RUN_SCALED] < bar && h->off_fp32[FP16_RUN_UNSCALED] > bar,
          "scaled fp16 ends near fp32 (%.3g < %.3g), unscaled does not (%.3g)", h->off_fp32[FP16_RUN_SCALED], bar,
          h->off_fp32[FP16_RUN_UNSCALED]);
    note("The loss barely tells them apart: the last layers, whose gradients fp16 holds, do most of "
         "its work. The weights do: fp32 moved a weight by up to %.3g; the scaled run ended %.3g "
         "from fp32's weights, the unscaled one %.3g.",
         quoted(h->moved[FP16_RUN_FP32]), quoted(h->off_fp32[FP16_RUN_SCALED]), quoted(h->off_fp32[FP16_RUN_UNSCALED]));
}

static void fp16_loss_scaling(void) {
    progress("fp16 loss scaling");
    note("## fp16 and loss scaling");
    mlp_config c = deep_config();
    note("fp16 has 3 more mantissa bits than bf16 but 3 fewer exponent bits: at 2^-25 or below a "
         "number rounds to 0. Gradients are small numbers. The model here has %d layers (the "
         "deepest `lectures/lib/mlp.h` allows: GELU shrinks a small signal on the way down and "
         "again on the way back), AdamW lr %g. Three runs: fp32; gradients kept in fp16 as they "
         "are; and gradients kept in fp16 behind a **dynamic loss scale**, torch's GradScaler "
         "rule: multiply the loss by S before backward (so every gradient is S times larger), "
         "divide the fp16 gradients by S in fp32 before the update; on an infinity, skip the "
         "step and halve S; after %d steps without one, double it. S starts at 2^%.0f (torch "
         "starts at 2^16 and waits 2000 steps before doubling; a run of 60 steps needs less). "
         "(Forward and backward compute in fp32 here and the gradients are rounded to fp16 as "
         "an fp16 run keeps them: what fp16's range does to gradients, not to activations.)",
         c.layers, c.lr, SCALE_INTERVAL, log2(INITIAL_SCALE));
    tensor *x = make_data(&c, -1);
    static fp16_history h;
    fp16_runs(&c, x, &h);
    tensor_free(x);
    int half = -1;
    for (int s = 0; s < FP16_STEPS && half < 0; s++)
        if (2 * h.lost_unscaled[s] > h.nonzero[s]) half = s;
    char question[320];
    snprintf(question, sizeof question,
             "The largest gradient at step 0 is %.2g, fp16's smallest subnormal 6e-8, and the "
             "gradients shrink as the loss falls. At which step does fp16, unscaled, first turn "
             "more than half of the nonzero gradients into 0?",
             h.largest[0]);
    predict(question, half, "");
    fp16_tables(&h, half);
}
/* ------------------------------------------------------------------ */
/* 5. A bf16 all-reduce                                                */
/* ------------------------------------------------------------------ */

enum { GRAD_ELEMENTS = 1 << 16, GRAD_SEED = 100 };
static const double BF16_UNIT = 0x1p-8; /* half of bf16's spacing at 1: its relative rounding error */

/* Rank r's gradient: the same numbers in the ranks and in the lecture. */
static tensor *rank_gradient(int r) {
    manual_seed(GRAD_SEED + (uint64_t)r);
    return randn(GRAD_ELEMENTS, 0, -1);
}

/* |t|, elementwise, as a new fp32 tensor. */
static tensor *magnitudes(const tensor *t) {
    float *v = host_values(t);
    for (int64_t k = 0; k < t->numel; k++)
        v[k] = fabsf(v[k]);
    tensor *m = tensor_from(v, t->numel, 0, t->device);
    free(v);
    return m;
}

typedef struct allreduce_result {
    int64_t sent[2], nominal[2]; /* fp32, bf16: bytes this rank sent, measured and nominal */
    int measured;                /* Open MPI's counters backed the measured figure */
    double largest_error;        /* max |bf16 sum - fp32 sum| */
    double worst_of_bound;       /* max over elements of |error| / (p u sum |g|) */
    double largest_sum;          /* max |fp32 sum| */
} allreduce_result;

static void all_reduce_main(int rank, int world_size, void *args) {
    (void)args;
    allreduce_result r = {0};
    tensor *g = rank_gradient(rank), *g16 = to_dtype(g, DTYPE_BF16), *size = magnitudes(g);
    dist_traffic before = dist_traffic_now();
    dist_all_reduce(g, DIST_SUM);
    dist_traffic d32 = dist_traffic_since(&before);
    before = dist_traffic_now();
    dist_all_reduce(g16, DIST_SUM);
    dist_traffic d16 = dist_traffic_since(&before);
    dist_all_reduce(size, DIST_SUM); /* sum over the ranks of |g|: what the rounding errors scale with */
    r.sent[0] = d32.bytes_sent[DIST_CALL_ALL_REDUCE];
    r.sent[1] = d16.bytes_sent[DIST_CALL_ALL_REDUCE];
    r.nominal[0] = d32.nominal_sent[DIST_CALL_ALL_REDUCE];
    r.nominal[1] = d16.nominal_sent[DIST_CALL_ALL_REDUCE];
    r.measured = d32.measured_collectives && d16.measured_collectives;
    float *exact = host_values(g), *got = host_values(g16), *sizes = host_values(size);
    for (int64_t k = 0; k < g->numel; k++) {
        double err = fabs((double)got[k] - exact[k]);
        r.largest_error = fmax(r.largest_error, err);
        r.worst_of_bound = fmax(r.worst_of_bound, err / (world_size * BF16_UNIT * sizes[k]));
        r.largest_sum = fmax(r.largest_sum, fabs((double)exact[k]));
    }
    free(exact);
    free(got);
    free(sizes);
    tensor_free(g);
    tensor_free(g16);
    tensor_free(size);
    spawn_return(&r, sizeof r);
}

/* The four ranks' gradients added one after another in `order`, in dtype d:
 * each add_ computes in fp32 and rounds once into the accumulator. */
static tensor *sum_in_order(dtype d, const int *order, int n) {
    tensor *acc = NULL;
    for (int i = 0; i < n; i++) {
        tensor *g = rank_gradient(order[i]), *gd = to_dtype(g, d);
        if (acc) add_(acc, gd);
        else acc = to_dtype(gd, d);
        tensor_free(gd);
        tensor_free(g);
    }
    return acc;
}

static void two_orders(void) {
    static const int forward_order[WORLD] = {0, 1, 2, 3}, backward_order[WORLD] = {3, 2, 1, 0};
    const dtype ds[2] = {DTYPE_F32, DTYPE_BF16};
    table_t *t = table_new("The four gradients summed in two orders, %d elements", GRAD_ELEMENTS);
    table_column(t, "dtype", NULL, "%s");
    table_column(t, "elements that differ", NULL, "%lld");
    table_column(t, "largest difference", NULL, "%.3g");
    double diff[2];
    long long differ[2];
    for (int i = 0; i < 2; i++) {
        tensor *a = sum_in_order(ds[i], forward_order, WORLD), *b = sum_in_order(ds[i], backward_order, WORLD);
        float *va = host_values(a), *vb = host_values(b);
        differ[i] = 0;
        for (int64_t k = 0; k < a->numel; k++)
            differ[i] += va[k] != vb[k];
        diff[i] = max_abs_diff(a, b);
        table_row(t, dtype_name(ds[i]), differ[i], diff[i]);
        free(va);
        free(vb);
        tensor_free(a);
        tensor_free(b);
    }
    table_show(t);
    note("Summed 0 + 1 + 2 + 3 and 3 + 2 + 1 + 0, %lld of the fp32 sums differ, by at most %.3g; "
         "in bf16, %lld differ, by up to %.3g. Each addition rounds to the format's spacing at "
         "the partial sum, 2^16 times coarser in bf16, so which rank's gradient is added last "
         "shows in the result: a bf16 all-reduce is not reproducible across algorithms, and "
         "ranks that reduce in different orders (a tree here, a ring there) disagree.",
         quoted(differ[0]), quoted(diff[0]), quoted(differ[1]), quoted(diff[1]));
}

/* One large value and three small ones: the textbook case. */
static void one_large_three_small(void) {
    const float values[WORLD] = {1.0f, 0x1p-8f, 0x1p-8f, 0x1p-8f};
    table_t *t = table_new("1 and three times 2^-8, summed in bf16 in two orders");
    table_column(t, "order", NULL, "%s");
    table_column(t, "bf16 sum", NULL, "%.8g");
    table_column(t, "exact sum", NULL, "%.8g");
    const char *names[2] = {"large first", "small first"};
    double got[2];
    for (int o = 0; o < 2; o++) {
        tensor *acc = NULL;
        for (int i = 0; i < WORLD; i++) {
            float v = values[o == 0 ? i : WORLD - 1 - i];
            tensor *one = tensor_from(&v, 1, 0, -1), *b = to_dtype(one, DTYPE_BF16);
            if (acc) add_(acc, b);
            else acc = to_dtype(b, DTYPE_BF16);
            tensor_free(b);
            tensor_free(one);
        }
        got[o] = tensor_item(acc, 0);
        table_row(t, names[o], got[o], 1.0 + 3 * 0x1p-8);
        tensor_free(acc);
    }
    table_show(t);
    note("Large first, each 2^-8 is half of bf16's gap above 1, a tie that rounds to the even "
         "1: the sum stays %.8g. Small first, they add up before meeting the 1: %.8g. fp32 "
         "gives the exact 1.01171875 either way.",
         quoted(got[0]), quoted(got[1]));
}

static void bf16_all_reduce(void) {
    progress("bf16 all-reduce");
    note("## A bf16 gradient all-reduce");
    note("DDP and ZeRO all-reduce or reduce-scatter the gradients every step. In bf16 the bytes "
         "halve. Each rank holds %d gradients (rank r's from seed %d + r); the same tensor is "
         "all-reduced in fp32 and, rounded to bf16, in bf16 (Open MPI's algorithm; the sum adds "
         "two buffers in fp32 and rounds to bf16 at each step: over %d ranks, %d roundings).",
         GRAD_ELEMENTS, GRAD_SEED, WORLD, WORLD - 1);
    spawn_on_open_mpi(all_reduce_main, WORLD);
    allreduce_result r[WORLD];
    for (int k = 0; k < WORLD; k++)
        if (spawn_result(k, &r[k], sizeof r[k]) != sizeof r[k]) lecture_fail("rank %d returned nothing", k);
    table_t *t = table_new("All-reduce of %d gradients on %d ranks: bytes each rank sent", GRAD_ELEMENTS, WORLD);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "fp32, measured", "bytes", "%lld");
    table_column(t, "bf16, measured", "bytes", "%lld");
    table_column(t, "bf16 / fp32", NULL, "%.3f");
    table_column(t, "fp32, nominal", "bytes", "%lld");
    table_column(t, "bf16, nominal", "bytes", "%lld");
    int halved = 1;
    for (int k = 0; k < WORLD; k++) {
        double ratio = (double)r[k].sent[1] / (double)r[k].sent[0];
        table_row(t, k, (long long)r[k].sent[0], (long long)r[k].sent[1], ratio, (long long)r[k].nominal[0],
                  (long long)r[k].nominal[1]);
        halved &= r[k].measured && r[k].sent[0] > 0 && 2 * r[k].sent[1] == r[k].sent[0] &&
                  2 * r[k].nominal[1] == r[k].nominal[0];
    }
    table_show(t);
    /* The same algorithm on the same element count: every message half as
     * long, to the byte. A bf16 tensor sent as 4-byte elements, or a
     * collective counted twice, is off by a factor. */
    check(halved, "bf16 sends half the bytes of fp32 on every rank, measured and nominal (rank 0: %lld of %lld)",
          (long long)r[0].sent[1], (long long)r[0].sent[0]);
    note("Measured with Open MPI's own counters (`dist_traffic_since`): rank 0 sent %lld bytes "
         "for the fp32 all-reduce and %lld for the bf16 one.",
         quoted((long long)r[0].sent[0]), quoted((long long)r[0].sent[1]));
    table_t *e = table_new("The bf16 all-reduce against the fp32 one");
    table_column(e, "rank", NULL, "%d");
    table_column(e, "largest |bf16 - fp32|", NULL, "%.3g");
    table_column(e, "largest |sum|", NULL, "%.3g");
    table_column(e, "largest error / (p u sum |g|)", NULL, "%.3f");
    double worst = 0;
    for (int k = 0; k < WORLD; k++) {
        table_row(e, k, r[k].largest_error, r[k].largest_sum, r[k].worst_of_bound);
        worst = fmax(worst, r[k].worst_of_bound);
    }
    table_show(e);
    /* Each gradient is rounded to bf16 once (at most u |g_r|, u = 2^-8),
     * and each of the p - 1 additions rounds once (at most u times a
     * partial sum, itself at most sum |g_r|): p u sum_r |g_r| per element,
     * to first order (the u^2 terms are 2^-16 of it: the 1 + p u below).
     * A sum that dropped a rank, or added one twice, is off by a whole
     * gradient, hundreds of times the bound. */
    check(worst <= 1 + WORLD * BF16_UNIT,
          "every element of the bf16 all-reduce is within p u sum |g| of the fp32 one (worst %.3f of it)", worst);
    note("The largest error, %.3g against sums up to %.3g, is %.2f of the bound p u sum |g| that "
         "the roundings allow (u = 2^-8).",
         quoted(r[0].largest_error), quoted(r[0].largest_sum), quoted(r[0].worst_of_bound));
    note("### Why the order of the sum matters more in bf16");
    two_orders();
    one_large_three_small();
}

/* ------------------------------------------------------------------ */
/* 6. FP8 with per-tensor scales                                       */
/* ------------------------------------------------------------------ */

enum { FP8_ROWS = 64, FP8_INNER = 256, FP8_COLS = 64, AMAX_HISTORY = 4, FP8_STEPS = 8 };
static const double E4M3_MAX = 448, E5M2_MAX = 57344;

/* A format's relative rounding error (half its spacing at 1) and the
 * absolute one below its smallest normal (half its smallest subnormal),
 * both in the scaled units the format holds. */
typedef struct rounding {
    double unit, floor;
} rounding;
static const rounding E4M3_ROUNDING = {0x1p-4, 0x1p-10}, E5M2_ROUNDING = {0x1p-3, 0x1p-17},
                      BF16_ROUNDING = {0x1p-8, 0x1p-134};

/* How far a product of a (rows x inner) and b (inner x cols), each
 * rounded to its format after scaling by sa and sb, may be from the fp32
 * product, element by element: with |a~ - a| <= ua |a| + fa / sa (the same
 * for b),
 *     |a~ b~ - a b| <= (ua |a| + fa/sa)|b~| + |a|(ub |b| + fb/sb) ...
 * summed over the inner index, plus the fp32 sums' own 2 inner 2^-24 of
 * sum |a||b|. Returns the worst |error| / bound over the elements. */
static double worst_of_bound(const tensor *got, const tensor *ref, const tensor *a, const tensor *b, rounding ra,
                             double sa, rounding rb, double sb) {
    int64_t n = a->shape[0], k = a->shape[1], m = b->shape[1];
    float *va = host_values(a), *vb = host_values(b), *vg = host_values(got), *vr = host_values(ref);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double bound = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = fabs((double)va[i * k + p]), y = fabs((double)vb[p * m + j]);
                double ex = ra.unit * x + ra.floor / sa, ey = rb.unit * y + rb.floor / sb;
                bound += ex * y + x * ey + ex * ey + 2.0 * k * 0x1p-24 * x * y;
            }
            worst = fmax(worst, fabs((double)vg[i * m + j] - vr[i * m + j]) / bound);
        }
    free(va);
    free(vb);
    free(vg);
    free(vr);
    return worst;
}

static double amax_of(const tensor *t) { return largest(t); }

/* a @ b with each operand rounded to its format at its per-tensor scale,
 * the products of the rounded values summed in fp32 (exact products, as
 * an FP8 tensor core makes them) and the result scaled back once. */
static tensor *scaled_matmul(const tensor *a, dtype da, double sa, const tensor *b, dtype db, double sb) {
    tensor *qa = to_dtype_scaled(a, da, sa), *qb = to_dtype_scaled(b, db, sb);
    tensor *wa = to_dtype(qa, DTYPE_F32), *wb = to_dtype(qb, DTYPE_F32); /* exact */
    tensor *y = matmul(wa, wb);
    scale_(y, (float)(1.0 / (sa * sb)));
    tensor_free(qa);
    tensor_free(qb);
    tensor_free(wa);
    tensor_free(wb);
    return y;
}

/* How many nonzero elements of t become 0 in dtype d, unscaled. */
static long long zeros_in(const tensor *t, dtype d) {
    tensor *q = to_dtype(t, d);
    float *v = host_values(t), *r = host_values(q);
    long long n = 0;
    for (int64_t k = 0; k < t->numel; k++)
        n += v[k] != 0 && r[k] == 0;
    free(v);
    free(r);
    tensor_free(q);
    return n;
}

static tensor *transposed(const tensor *t) {
    int64_t r = t->shape[0], c = t->shape[1];
    float *v = host_values(t), *w = malloc(sizeof(float) * (size_t)(r * c));
    if (!w) lecture_fail("out of memory");
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            w[j * r + i] = v[i * c + j];
    tensor *out = tensor_from(w, c, r, t->device);
    free(v);
    free(w);
    return out;
}

static void fp8_products(void) {
    manual_seed(200);
    tensor *x = randn(FP8_ROWS, FP8_INNER, -1), *w = randn(FP8_INNER, FP8_COLS, -1),
           *dy = randn(FP8_ROWS, FP8_COLS, -1);
    scale_(w, 1.0f / 16); /* 1 / sqrt(inner), as init_layer scales */
    scale_(dy, 1e-6f);    /* a gradient's size */
    tensor *xt = transposed(x);
    tensor *ref = matmul(x, w), *dref = matmul(xt, dy);
    tensor *xb = to_dtype(x, DTYPE_BF16), *wb = to_dtype(w, DTYPE_BF16);
    tensor *yb = matmul(xb, wb);
    double sx = E4M3_MAX / amax_of(x), sw = E4M3_MAX / amax_of(w), sdy = E5M2_MAX / amax_of(dy);
    tensor *y8 = scaled_matmul(x, DTYPE_F8_E4M3, sx, w, DTYPE_F8_E4M3, sw);
    tensor *d8 = scaled_matmul(xt, DTYPE_F8_E4M3, sx, dy, DTYPE_F8_E5M2, sdy);
    table_t *t = table_new("y = x w (%d x %d times %d x %d) and dW = x^T dy against fp32", FP8_ROWS, FP8_INNER,
                           FP8_INNER, FP8_COLS);
    table_column(t, "product", NULL, "%s");
    table_column(t, "largest |error| / largest |fp32 result|", NULL, "%.3g");
    table_column(t, "worst error / its bound", NULL, "%.3f");
    double rel[3] = {max_abs_diff(yb, ref) / largest(ref), max_abs_diff(y8, ref) / largest(ref),
                     max_abs_diff(d8, dref) / largest(dref)};
    double of_bound[3] = {worst_of_bound(yb, ref, x, w, BF16_ROUNDING, 1, BF16_ROUNDING, 1),
                          worst_of_bound(y8, ref, x, w, E4M3_ROUNDING, sx, E4M3_ROUNDING, sw),
                          worst_of_bound(d8, dref, xt, dy, E4M3_ROUNDING, sx, E5M2_ROUNDING, sdy)};
    long long vanish = zeros_in(dy, DTYPE_F8_E5M2);
    const char *names[3] = {"y, bf16 x bf16", "y, E4M3 x E4M3, per-tensor scales",
                            "dW, E4M3 x E5M2 (gradient), per-tensor scales"};
    for (int i = 0; i < 3; i++)
        table_row(t, names[i], rel[i], of_bound[i]);
    table_show(t);
    /* Each bound is the first-order sum of the inputs' roundings derived
     * above worst_of_bound, per element; an operand scaled with the wrong
     * factor, or rounded to the wrong format, breaks it by far. */
    check(of_bound[0] <= 1 && of_bound[1] <= 1 && of_bound[2] <= 1,
          "every product within its rounding bound (%.3f, %.3f, %.3f of it)", of_bound[0], of_bound[1], of_bound[2]);
    note("E4M3 keeps 3 mantissa bits against bf16's 7: its product is off by %.3g of the largest "
         "result, against %.3g for bf16. The gradient's product, E5M2 (2 bits) against E4M3, "
         "by %.3g. Scaled by 448 / amax (E4M3) and 57344 / amax (E5M2), a tensor of size 1e-6 "
         "uses the format's whole range: unscaled, %lld of the gradient's %lld elements round to "
         "0 in E5M2.",
         quoted(rel[1]), quoted(rel[0]), quoted(rel[2]), vanish, (long long)dy->numel);
    tensor *ts[] = {x, w, dy, xt, ref, dref, xb, wb, yb, y8, d8};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_free(ts[i]);
}

/* Delayed scaling: the scale for step t comes from the largest amax of the
 * steps before it (Transformer Engine's amax history), so it is known
 * before the step's tensor is; a tensor that grows past that history
 * saturates at 448 until the history catches up. */
static void delayed_scaling(void) {
    manual_seed(300);
    tensor *base = randn(FP8_ROWS, FP8_INNER, -1), *w = randn(FP8_INNER, FP8_COLS, -1);
    scale_(w, 1.0f / 16);
    double history[FP8_STEPS], sw = E4M3_MAX / amax_of(w);
    table_t *t =
            table_new("Delayed scaling: activations steady for 4 steps, then growing 1.5x a step; amax history of %d "
                      "steps",
                      AMAX_HISTORY);
    table_column(t, "step", NULL, "%d");
    table_column(t, "amax now", NULL, "%.4g");
    table_column(t, "amax of the history", NULL, "%.4g");
    table_column(t, "scale", NULL, "%.4g");
    table_column(t, "elements saturated", NULL, "%lld");
    table_column(t, "largest |error| / largest |fp32|, delayed", NULL, "%.3g");
    table_column(t, "the same, scale from amax now", NULL, "%.3g");
    long long saturated_total = 0;
    double worst_delayed = 0, worst_current = 0;
    for (int s = 0; s < FP8_STEPS; s++) {
        tensor *x = to_device(base, -1);
        scale_(x, (float)(s < 4 ? 1.0 : pow(1.5, s - 3)));
        double now = amax_of(x), past = 0;
        for (int h = s - AMAX_HISTORY; h < s; h++)
            if (h >= 0) past = fmax(past, history[h]);
        if (s == 0) past = now; /* the first step calibrates on itself */
        history[s] = now;
        double sx = E4M3_MAX / past;
        float *v = host_values(x);
        long long saturated = 0;
        for (int64_t k = 0; k < x->numel; k++)
            saturated += fabs((double)v[k]) * sx > E4M3_MAX;
        free(v);
        tensor *ref = matmul(x, w), *late = scaled_matmul(x, DTYPE_F8_E4M3, sx, w, DTYPE_F8_E4M3, sw);
        tensor *fresh = scaled_matmul(x, DTYPE_F8_E4M3, E4M3_MAX / now, w, DTYPE_F8_E4M3, sw);
        double e_late = max_abs_diff(late, ref) / largest(ref), e_fresh = max_abs_diff(fresh, ref) / largest(ref);
        table_row(t, s, now, past, sx, saturated, e_late, e_fresh);
        saturated_total += saturated;
        worst_delayed = fmax(worst_delayed, e_late);
        worst_current = fmax(worst_current, e_fresh);
        tensor_free(x);
        tensor_free(ref);
        tensor_free(late);
        tensor_free(fresh);
    }
    table_show(t);
    /* Steps 4 to 7 grow the tensor past every amax before them: its largest
     * elements must saturate there and only there, and clipping them costs
     * more than rounding does. */
    check(saturated_total > 0 && worst_delayed > worst_current,
          "delayed scaling saturated %lld elements once the activations outgrew the history (error %.3g against "
          "%.3g with the current amax)",
          saturated_total, worst_delayed, worst_current);
    note("While the activations are steady the history's scale is as good as the current one. "
         "Once they grow, the scale lags: %lld elements saturated at 448 over the growing steps, "
         "and the product's error rose to %.3g against %.3g with a scale from the current amax, "
         "which a GPU cannot know before it has computed the tensor.",
         quoted(saturated_total), quoted(worst_delayed), quoted(worst_current));
    tensor_free(base);
    tensor_free(w);
}

static void fp8_scaling(void) {
    progress("fp8");
    note("## FP8: per-tensor scales");
    note("FP8 training rounds the inputs of each large matrix product to 8 bits: E4M3 for "
         "weights and activations, E5M2 for gradients. Their range is small (448 and 57344), so "
         "each tensor is multiplied by a **scale** before rounding, 448 / amax for E4M3, and the "
         "product is divided by both scales after. The products here run on the CPU as an "
         "emulation: the fp8 values widened to fp32 (exactly), multiplied and summed in fp32, as "
         "an FP8 tensor core does. On an H100 or H200 the same product is an FP8 GEMM through "
         "cublasLt with the scales passed to it: expected, not run here (unverified).");
    fp8_products();
    note("### Delayed scaling: an amax history");
    delayed_scaling();
}

/* ------------------------------------------------------------------ */
/* Summary                                                             */
/* ------------------------------------------------------------------ */

static void summary(void) {
    note("## Summary");
    note("| choice | what it keeps | what it loses |\n"
         "|---|---|---|\n"
         "| bf16 products, fp32 master weights | fp32's range, fp32's training curve | nothing measurable here; 16 bytes a parameter as fp32 |\n"
         "| bf16 weights without a master copy | 2 bytes a parameter less | every update under half of bf16's gap |\n"
         "| fp16 gradients, no scale | 3 more mantissa bits than bf16 | every gradient under 2^-25 |\n"
         "| fp16 gradients, dynamic loss scale | the gradients | a skipped step at each overflow |\n"
         "| bf16 all-reduce | half the bytes | p roundings per element; the result depends on the order |\n"
         "| FP8 products, per-tensor scales | half of bf16's bytes per input | a few percent per product; saturation when amax outruns its history |");
    if (gpu_count() == 0)
        note("Everything above ran on this machine's CPU and its Open MPI ranks. On a GPU the bf16 "
             "products go to cublasGemmEx with fp32 accumulation: compiled only, unverified; the "
             "16-bit collectives are refused on NCCL for now, and FP8 products through cublasLt "
             "are not written yet.");
    else
        note("This run had %d GPU(s), but the lecture's tensors stay on the CPU: bf16 products "
             "through cublasGemmEx, 16-bit collectives on NCCL and FP8 GEMMs through cublasLt "
             "are not what this trace shows.",
             gpu_count());
}


int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_precision); }
