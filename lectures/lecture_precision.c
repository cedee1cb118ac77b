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
    mlp_config c = {.batch = 64, .width = 64, .layers = 4, .steps = 60, .lr = 1e-3f};
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
static layer_state make_state(int r, const tensor *w, int64_t rows, int64_t offset) {
    layer_state s = {0};
    tensor *mine = tensor_view((tensor *)w, offset, rows, w->shape[1]);
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
static layer_state zero_state(int stage, const tensor *w, int rank, int world_size) {
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
    spawn(zero_main, WORLD, NULL, 0);
    zero_bytes z[WORLD];
    for (int r = 0; r < WORLD; r++)
        if (spawn_result(r, &z[r], sizeof z[r]) != sizeof z[r]) lecture_fail("rank %d returned no byte counts", r);
    table_t *t = table_new("Model state per parameter, measured with tensor_bytes_live, %d layers of %d x %d",
                           c.layers, c.width, c.width);
    table_column(t, "training", NULL, "%s");
    table_column(t, "measured", "bytes", "%.2f");
    table_column(t, "formula", "bytes", "%.2f");
    double formula[N_RECIPES] = {4 + 4 + 8, 2 + 4 + 8 + 2, 2 + 4 + 8 + 4};
    for (int r = 0; r < N_RECIPES; r++)
        table_row(t, RECIPE_NAMES[r], per[r], formula[r]);
    double zero1 = 2 + 2 + 12.0 / WORLD, zero3 = 16.0 / WORLD;
    table_row(t, "bf16 + fp32 master, ZeRO-1 on 4 ranks (rank 0)", z[0].zero1, zero1);
    table_row(t, "bf16 + fp32 master, ZeRO-3 on 4 ranks (rank 0)", z[0].zero3, zero3);
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
    double saved = per[RECIPE_BF16] - z[0].zero3;
    predict("Mixed precision holds 16 bytes a parameter. How many bytes a parameter does each of "
            "4 ranks save when ZeRO-3 shards all of it (bf16 weights and gradients, fp32 master "
            "weights and moments)?",
            saved, "bytes");
    note("ZeRO-1 shards only the fp32 state: each rank keeps %.2f bytes a parameter. ZeRO-3 "
         "shards everything: %.2f, saving %.2f of the 16.",
         quoted(z[0].zero1), quoted(z[0].zero3), quoted(saved));
}

/* ------------------------------------------------------------------ */
/* 3. bf16 training, with and without fp32 master weights              */
/* ------------------------------------------------------------------ */

static void bf16_training(void) {}
static void fp16_loss_scaling(void) {}
static void bf16_all_reduce(void) {}
static void fp8_scaling(void) {}
static void summary(void) {}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_precision); }
