/*
 * lecture_scaling: what comes after data, ZeRO, tensor and pipeline
 * parallelism: experts, sequences, long contexts and meshes of ranks.
 *
 *     make run LECTURE=lecture_scaling
 *
 * and open viewer/index.html?trace=lecture_scaling. Every strategy runs on
 * real ranks and is compared with one device within a tolerance derived
 * from float32 rounding; every byte count is the runtime's, read where the
 * bytes move.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/mlp.h"
#include "lecture_scaling/transformer.h"

static void introduction(void);
static void one_device(void);
static void expert_parallelism(void);
static void tensor_and_sequence_parallelism(void);
static void context_parallelism(void);
static void mesh_2d(void);
static void zero_stages(void);
static void memory(void);
static void summary(void);

static void lecture_scaling(void) {
    note("# After DDP, ZeRO, TP and PP");
    note("lecture_08 split a stack of matrices four ways: the batch (DDP), the optimizer "
         "state, gradients and weights (ZeRO), each matrix (tensor parallelism) and the "
         "layers (pipelines). A transformer has more to cut: experts that each see only "
         "some tokens, a sequence whose positions are independent outside attention, and "
         "a context long enough that one device cannot hold its attention. This lecture "
         "runs each of those cuts on real ranks and compares it with one device.");
    introduction();
    one_device();
    expert_parallelism();
    tensor_and_sequence_parallelism();
    context_parallelism();
    mesh_2d();
    zero_stages();
    memory();
    summary();
}

/* ------------------------------------------------------------------ */
/* Sizes, seeds and how close is close enough                          */
/* ------------------------------------------------------------------ */

/* 4 ranks for every strategy. */
enum {
    WORLD = 4,
    EXPERTS = 4,       /* one per rank */
    MESH_DIM = 32,     /* the 2-D mesh's MLP: width d */
    MESH_HIDDEN = 128, /* and hidden width 4 d */
    MESH_BATCH = 32,
};

/* The transformer block's sizes (one device, tensor and sequence
 * parallelism): the lecture's are a sequence of 1,024 tokens of width 256
 * in 8 heads (32 wide) with an MLP of hidden width 4 d, where an
 * activation is 1 MiB and the bytes tables read as real ones do; the
 * tests' (--quick) are 32 tokens of width 32 in 4 heads, where each spawn
 * takes milliseconds and every sum still has dozens of terms. Heads and
 * the hidden width split over the ranks, the sequence into p quarters. */
typedef struct block_sizes {
    int seq, dim, heads, hidden;
} block_sizes;
static block_sizes block_sizes_now(void) {
    return lecture_quick() ? (block_sizes){32, 32, 4, 128} : (block_sizes){1024, 256, 8, 1024};
}
static const float LN_EPS = 1e-5f;

/* Every tensor is drawn from its own seed, so every rank that needs it
 * makes the same numbers without communicating. */
enum {
    SEED_X = 1,
    SEED_WQ = 10,
    SEED_WK,
    SEED_WV,
    SEED_WO,
    SEED_W1,
    SEED_W2,
    SEED_TOKENS = 20,
    SEED_ROUTER,
    SEED_EXPERT_W1 = 30,
    SEED_EXPERT_W2 = 40,
    SEED_Q = 50,
    SEED_K,
    SEED_V,
    SEED_DO, /* the attention's upstream gradient */
    SEED_MESH_X = 60,
    SEED_MESH_A,
    SEED_MESH_B,
    SEED_GAIN = 70,
    SEED_BIAS,
    SEED_DY,
};

static tensor *input(int64_t rows, int64_t cols, uint64_t seed, int device) {
    manual_seed(seed);
    return randn(rows, cols, device);
}

/* How far two float32 computations of the same formula may be apart when
 * they differ only in the order of their sums (another matrix shape for
 * the BLAS, partial sums added by an all-reduce, keys merged chunk by
 * chunk). A float32 sum of n terms, in any order, is exact to n u times
 * the sum of the terms' sizes (u = 2^-24); two orders differ by twice
 * that. Along a path through the computation the sums' lengths add up;
 * taking the largest result as the size of the terms gives
 *     2 (sum of the lengths) u max|result|.
 * A heuristic, as lib/mlp.h's gradient_tolerance is (the rigorous bound
 * is relative to the sum of |terms|), with room on both sides: the right
 * answers below sit 20 to 3000 times under it (the more terms, the further:
 * rounding errors of a long sum mostly cancel; tests/lectures/test_transformer.c
 * holds each piece to bounds derived for its exact numbers), and every
 * bug planted in
 * tests/lectures/test_lecture_scaling.py (a missing all-reduce, experts
 * seated at twice their capacity, a skipped chunk of keys) is off by far
 * more: the test sees each one's check fail. */
static double rounding_tolerance(int sum_lengths, double size) { return 2.0 * sum_lengths * FLOAT32_UNIT * size; }

/* The sums on the way through a transformer block: LayerNorm's mean and
 * variance (d each), the q, k, v projection (d), the scores (d / heads),
 * the weighted values (seq), the output projection (d), the second
 * LayerNorm (2 d), the MLP's two products (d and hidden). */
static int block_sum_lengths(void) {
    block_sizes sz = block_sizes_now();
    return 2 * sz.dim + sz.dim + sz.dim / sz.heads + sz.seq + sz.dim + 2 * sz.dim + sz.dim + sz.hidden;
}

/* Compares `got` with `expected` and says it: max |difference| against
 * the tolerance for sums of `sum_lengths` terms. The check fails past it. */
static double compare(const char *what, int rank, const tensor *got, const tensor *expected, int sum_lengths) {
    double diff = max_abs_diff(got, expected), tol = rounding_tolerance(sum_lengths, largest(expected));
    note_verbatim("Rank %d: %s: max |ranks - one device| = %.3g (largest value %.3g, tolerance %.3g)", rank, what, diff,
                  largest(expected), tol);
    check(diff <= tol, "%s: equal to one device's (%.3g <= %.3g)", what, diff, tol);
    return diff;
}

/* The fastest of n timings: another program on the machine can only slow a
 * run down, never speed it up, so the fastest of a few is the schedule's
 * own time with the least of the machine's noise in it. */
static double fastest_of(const double *t, int n) {
    double best = t[0];
    for (int i = 1; i < n; i++)
        best = fmin(best, t[i]);
    return best;
}

static void introduction(void) {
    note("## The plan");
    note("1. The pieces of a transformer block on one device: LayerNorm, attention, the MLP, "
         "and a mixture of experts (`lectures/lecture_scaling/transformer.c`, each piece tested against "
         "float64 in `tests/lectures/test_transformer.c`).\n"
         "2. **Expert parallelism**: each rank owns one expert; tokens travel to their "
         "expert's rank and back with two all-to-alls.\n"
         "3. **Tensor and sequence parallelism** on a whole block: Megatron's column and row "
         "split with one all-reduce per sub-block, then the same all-reduce cut into a "
         "reduce-scatter and an all-gather so LayerNorm and the residual work on a quarter of "
         "the sequence; then attention's backward under both, each forward collective's conjugate "
         "carrying the gradient back.\n"
         "4. **Context parallelism**: ring attention, keys and values passed round a ring while "
         "each block computes, merged with an online softmax, forward and backward (dK and dV travelling "
         "with their chunk); the zig-zag split that balances a causal ring; Ulysses' all-to-alls instead of "
         "the ring, bytes compared; the overlap timed.\n"
         "5. **A 2-D mesh**: data parallelism across one axis of 4 ranks, tensor "
         "parallelism across the other, with process groups.\n"
         "6. **ZeRO-1 and ZeRO-2**, whose traffic is DDP's, and **ZeRO-3 with prefetch**, timed.\n"
         "7. **Memory**: the activations a step keeps, measured, with and without "
         "recomputation, and what recomputation costs in time; mixed precision's bytes per parameter.\n\n"
         "Each timed lesson runs twice, side by side in one table: with this CPU's arithmetic, and with the "
         "compute **modelled** (`model_compute`: the rank's device busy for a given time while its core is "
         "free, as a GPU computes while its host and the link are free). With real arithmetic, four ranks on "
         "this machine's cores overlap little and not reliably (a rank that multiplies holds a core its "
         "transfer needs); the modelled run shows the schedule, and the prose says which run shows what.");
    note("Every strategy's result is compared with one device's on every rank. Float32 sums "
         "taken in another order differ by rounding: a sum of n terms is exact to n 2^-24 of "
         "its terms' size. Each tolerance below adds up the lengths of the sums on the way "
         "to the result (the function `rounding_tolerance` beside the code says how), so a "
         "right answer passes and a lost all-reduce, a token at the wrong expert or a "
         "skipped chunk cannot.");
}

/* ------------------------------------------------------------------ */
/* The block on one device                                             */
/* ------------------------------------------------------------------ */

/* A pre-LayerNorm transformer block's weights: attention (q, k, v and
 * the output projection o) and the MLP (w1 then w2). A rank of tensor
 * parallelism holds columns of wq, wk, wv, w1 and rows of wo, w2. */
typedef struct block {
    tensor *wq, *wk, *wv, *wo, *w1, *w2;
    int heads;
} block;

static block block_full(int device) {
    block_sizes sz = block_sizes_now();
    block b = {init_weight(sz.dim, sz.dim, SEED_WQ, device),
               init_weight(sz.dim, sz.dim, SEED_WK, device),
               init_weight(sz.dim, sz.dim, SEED_WV, device),
               init_weight(sz.dim, sz.dim, SEED_WO, device),
               init_weight(sz.dim, sz.hidden, SEED_W1, device),
               init_weight(sz.hidden, sz.dim, SEED_W2, device),
               sz.heads};
    return b;
}

static void block_free(block *b) {
    tensor *all[] = {b->wq, b->wk, b->wv, b->wo, b->w1, b->w2};
    for (int i = 0; i < 6; i++)
        tensor_free(all[i]);
}

/* Multi-head attention of a (already normalised): its heads, then o. */
static tensor *attention_part(const tensor *a, const block *w) {
    tensor *heads = attention_heads(a, w->wq, w->wk, w->wv, w->heads, 1);
    tensor *out = matmul(heads, w->wo);
    tensor_free(heads);
    return out;
}

/* y = x + attention(LN(x)); z = y + MLP(LN(y)). */
static tensor *block_forward(const tensor *x, const block *w) {
    tensor *a = layer_norm(x, LN_EPS), *y = attention_part(a, w);
    add_(y, x);
    tensor *b = layer_norm(y, LN_EPS), *z = mlp_forward(b, w->w1, w->w2);
    add_(z, y);
    tensor_free(a);
    tensor_free(b);
    tensor_free(y);
    return z;
}

static void one_device(void) {
    progress("one device");
    note("## The block on one device");
    note("A pre-LayerNorm transformer block, the unit every strategy below cuts up:\n\n"
         "    y = x + Attention(LayerNorm(x))\n"
         "    z = y + MLP(LayerNorm(y))\n\n"
         "LayerNorm works on each token (row) alone. Attention mixes tokens: each query "
         "row takes a softmax-weighted mean of the value rows, here with a causal mask (a "
         "token sees itself and earlier tokens). The MLP is gelu(b W1) W2, again one token "
         "at a time.");
    block_sizes sz = block_sizes_now();
    int device = get_device(0);
    tensor *x = input(sz.seq, sz.dim, SEED_X, device);
    block w = block_full(device);
    tensor *z = block_forward(x, &w);
    note("Here: a sequence of %d tokens of width d = %d, %d heads of width %d, an MLP of "
         "hidden width %d. One device's output z: %s. Every rank below computes this same "
         "block, from the same seeds, to judge its own part against.%s",
         sz.seq, sz.dim, sz.heads, sz.dim / sz.heads, sz.hidden, summarize(z),
         lecture_quick() ? " (--quick: the lecture's full run has 1,024 tokens of width 256 in 8 heads, hidden width "
                           "1,024.)"
                         : "");
    tensor_free(z);
    block_free(&w);
    tensor_free(x);
}

/* ------------------------------------------------------------------ */
/* Expert parallelism                                                  */
/* ------------------------------------------------------------------ */

/* The mixture of experts runs at two sizes: a sequence of 1,024 tokens
 * (256 a rank) of width 256 with experts of hidden width 512 for the
 * lecture, where the drop rates mean something; 32 tokens a rank of width
 * 32 (hidden 64) for the tests. */
typedef struct moe_sizes {
    int tokens; /* per rank */
    int dim, hidden;
} moe_sizes;

enum {
    TOP_K = 2,      /* experts per token */
    CAPACITIES = 3, /* capacity factors tried, then padding to the largest count */
    CHECKED = 1,    /* the factor whose backward is compared with one device: 1.25 */
    AUX_STEPS = 20, /* SGD steps of the load-balancing loss */
    SEED_MOE_DY = 70,
    SEED_MOE_SHIFT,
};
static const double CAPACITY_FACTOR[CAPACITIES] = {1.0, 1.25, 2.0};
/* Every token carries the same offset of this size (a shared direction, as
 * real activations have): the router's logits lean the same way for every
 * token and the load is uneven, the case the auxiliary loss is for. */
static const float MOE_SHIFT = 0.5f;
/* The auxiliary loss's SGD step: a step of lr in the router moves a
 * token's logits by about lr |x|^2 times the gradient (a mean over the
 * tokens), and |x|^2 grows as d: lr = 16 / d moves them the same at every
 * width (0.5 at d = 32; 4 times that overshoots, all the load swinging to
 * the other experts). */
static float aux_lr(int dim) { return 16.0f / (float)dim; }

/* The all-to-alls of one pass, forward and backward: calls and bytes (the
 * runtime's nominal figure and Open MPI's measured one). */
typedef struct moe_pass {
    int capacity, dropped;
    int64_t calls[2], nominal[2], measured[2]; /* [0] forward, [1] backward */
    int64_t useful;                            /* token rows that left this rank, forward */
} moe_pass;

/* What each rank of the MoE spawn hands back. */
typedef struct moe_result {
    int demand[EXPERTS];             /* this rank's assignments to each expert */
    moe_pass pass[CAPACITIES + 1];   /* per capacity factor, then padded */
    int demand_after[EXPERTS];       /* after the load-balancing loss */
    int dropped_after, padded_after; /* at factor 1.0; the padded capacity */
    float aux_loss[AUX_STEPS + 1];
    int measured;
} moe_result;

/* A rank's share of the layer: its group of expert-parallel ranks, and the
 * m experts it owns (group rank q owns experts q m .. q m + m - 1). */
typedef struct ep_layer {
    dist_group *group; /* NULL: every rank */
    dist_group *data;  /* the replicas of my experts (expert x data), or NULL */
    int p, m, first;   /* ranks in the group, experts per rank, my first expert */
    moe_sizes s;
    const tensor *router;
    tensor *w1[EXPERTS], *w2[EXPERTS];
} ep_layer;

/* What the forward keeps for the backward. */
typedef struct ep_saved {
    moe_routing *r;
    int from[EXPERTS];   /* rows group rank q sent my expert j: from[q m + j] */
    int *rows[EXPERTS];  /* where those rows sit in the received buffer */
    int n[EXPERTS];      /* how many */
    tensor *in[EXPERTS]; /* my expert j's input rows */
    tensor *back;        /* the experts' outputs, home again */
} ep_saved;

static void moe_main(int rank, int world_size, void *args);
static void moe_tables(const moe_sizes *s);
static void moe_load_balancing(const moe_sizes *s, const moe_result *r);

static void expert_parallelism(void) {
    progress("expert parallelism");
    moe_sizes s = lecture_quick() ? (moe_sizes){32, 32, 64} : (moe_sizes){256, 256, 512};
    note("## Expert parallelism");
    note("A mixture-of-experts (MoE) layer replaces the block's one MLP by E of them, the "
         "experts, and a router: a d x E matrix whose softmax gives each token a probability "
         "for each expert. With **top-2 routing** (GShard, Mixtral) a token goes to its two "
         "likeliest experts and its output is their MLPs' outputs weighted by the two "
         "probabilities renormalised to sum to 1. Parameters grow E times; the work per token "
         "only twice.");
    see("https://arxiv.org/abs/2006.16668", "Lepikhin et al.: GShard (2020)");
    see("https://arxiv.org/abs/2101.03961", "Fedus et al.: Switch Transformers (2021)");
    note("Expert parallelism puts expert e on rank e. An all-to-all moves equal pieces, so "
         "each expert takes at most a **capacity** of C rows from each rank, "
         "C = ceil(cf tokens k / E), the even share of a rank's k assignments times a "
         "*capacity factor* cf. It is per rank (GShard's per-group capacity): each rank "
         "decides alone which of its tokens to keep, with no extra round of communication. "
         "First choices are seated before second choices; an assignment past C is "
         "**dropped**: it adds nothing to the token's output (in a block, the residual "
         "carries the token past the layer). Then:\n"
         "1. an all-to-all of the counts: how many rows each rank will send each expert;\n"
         "2. **dispatch**: an all-to-all of the tokens, C rows per expert, piece e to rank e;\n"
         "3. each rank runs its expert on the rows it received (padding left out);\n"
         "4. **combine**: an all-to-all back, the same pieces in reverse, each token's outputs "
         "weighted by its gates.\n\n"
         "The backward runs the two big all-to-alls in reverse: the output's gradient goes "
         "to the experts as the combine came back, and the inputs' gradients come home as the "
         "dispatch went out.");
    image("assets/lecture_scaling_moe.svg", 0.8);
    note("%d ranks with %d tokens each (%d in all), d = %d, %d experts of hidden width %d, "
         "top-%d; every token has a shared offset of size %.1f, so the router leans.",
         WORLD, s.tokens, WORLD * s.tokens, s.dim, EXPERTS, s.hidden, TOP_K, MOE_SHIFT);
    spawn(moe_main, WORLD, &s, sizeof s);
    moe_tables(&s);
}

/* The expert weights of expert e: the same numbers on every rank. */
static void expert_weights(int e, const moe_sizes *s, int device, tensor **w1, tensor **w2) {
    *w1 = init_weight(s->dim, s->hidden, SEED_EXPERT_W1 + (uint64_t)e, device);
    *w2 = init_weight(s->hidden, s->dim, SEED_EXPERT_W2 + (uint64_t)e, device);
}

/* All tokens of the sequence, every rank's: standard normal plus the
 * shared offset. */
static tensor *moe_tokens(const moe_sizes *s, int device) {
    tensor *x = input((int64_t)WORLD * s->tokens, s->dim, SEED_TOKENS, device);
    tensor *shift = input(1, s->dim, SEED_MOE_SHIFT, device);
    float *h = malloc((size_t)WORLD * s->tokens * s->dim * sizeof(float)), *o = malloc((size_t)s->dim * sizeof(float));
    if (!h || !o) lecture_fail("out of memory for %d tokens", WORLD * s->tokens);
    tensor_to_host(x, h);
    tensor_to_host(shift, o);
    for (int64_t i = 0; i < (int64_t)WORLD * s->tokens * s->dim; i++)
        h[i] += MOE_SHIFT * o[i % s->dim];
    tensor *all = tensor_from(h, (int64_t)WORLD * s->tokens, s->dim, device);
    free(h);
    free(o);
    tensor_free(x);
    tensor_free(shift);
    return all;
}

static float *host_of(const tensor *t) {
    float *h = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    if (!h) lecture_fail("out of memory copying %lld floats", (long long)t->numel);
    tensor_to_host(t, h);
    return h;
}

/* Step 1: the counts. Every rank tells every other how many rows it will
 * send each of its experts; from[q m + j] is what group rank q sends my
 * expert j. */
static void exchange_counts(ep_layer *L, const int *kept, int *from) {
    int experts = L->p * L->m;
    float sent[EXPERTS] = {0}, got[EXPERTS] = {0};
    for (int e = 0; e < experts; e++)
        sent[e] = (float)kept[e];
    tensor *send = tensor_from(sent, experts, 0, L->router->device), *recv = empty(experts, 0, L->router->device);
    dist_all_to_all_in(L->group, recv, send);
    tensor_to_host(recv, got);
    for (int e = 0; e < experts; e++)
        from[e] = (int)got[e];
    tensor_free(send);
    tensor_free(recv);
}

/* Rows of the routing's layout (experts x capacity) filled from `rows`
 * (tokens x d, host): row slot[t k] = scale(t, k) rows[t], zeros elsewhere.
 * With `gated`, scale is the gate (the backward's dy); else 1 (dispatch). */
static tensor *pack(const moe_routing *r, const float *rows, int d, int gated, int device) {
    float *buf = calloc((size_t)r->experts * r->capacity * d, sizeof(float));
    if (!buf) lecture_fail("out of memory packing %d tokens", r->tokens);
    for (int i = 0; i < 2 * r->tokens; i++) {
        if (r->slot[i] < 0) continue; /* dropped */
        float g = gated ? r->gate[i] : 1.0f;
        for (int c = 0; c < d; c++)
            buf[(int64_t)r->slot[i] * d + c] = g * rows[(int64_t)(i / 2) * d + c];
    }
    tensor *t = tensor_from(buf, (int64_t)r->experts * r->capacity, d, device);
    free(buf);
    return t;
}

/* Step 3: my experts on the rows they received; their outputs in the same
 * rows of a buffer of the received one's shape (padding stays zero). */
static tensor *run_my_experts(ep_layer *L, const tensor *recv, ep_saved *st) {
    int C = st->r->capacity;
    tensor *done = zeros(recv->shape[0], L->s.dim, recv->device);
    for (int j = 0; j < L->m; j++) {
        st->rows[j] = malloc((size_t)(L->p * C + 1) * sizeof(int));
        float *ones = malloc((size_t)(L->p * C + 1) * sizeof(float));
        if (!st->rows[j] || !ones) lecture_fail("out of memory for an expert's rows");
        st->n[j] = 0;
        for (int q = 0; q < L->p; q++)
            for (int i = 0; i < st->from[q * L->m + j]; i++) {
                ones[st->n[j]] = 1.0f;
                st->rows[j][st->n[j]++] = (q * L->m + j) * C + i;
            }
        st->in[j] = gather_rows(recv, st->rows[j], st->n[j]);
        if (st->n[j] > 0) {
            tensor *y = mlp_forward(st->in[j], L->w1[j], L->w2[j]);
            scatter_rows(done, y, st->rows[j], ones, st->n[j]);
            tensor_free(y);
        }
        free(ones);
    }
    return done;
}

/* The layer forward, expert parallel: this rank's tokens x in, their
 * outputs out; `capacity` 0 pads every piece to the group's largest count. */
static tensor *ep_forward(ep_layer *L, const tensor *x, double cf, ep_saved *st) {
    int d = L->s.dim, experts = L->p * L->m, T = (int)x->shape[0];
    st->r = moe_route_top2(x, L->router);
    int capacity = moe_capacity(cf, T, TOP_K, experts);
    if (cf <= 0) { /* no factor: the largest count anywhere, so nothing drops */
        float most = 0;
        for (int e = 0; e < experts; e++)
            most = fmaxf(most, (float)st->r->demand[e]);
        tensor *m = tensor_from(&most, 1, 0, x->device);
        dist_all_reduce_in(L->group, m, DIST_MAX);
        capacity = (int)tensor_item(m, 0);
        tensor_free(m);
    }
    moe_assign(st->r, capacity);
    exchange_counts(L, st->r->kept, st->from);
    float *xh = host_of(x);
    tensor *send = pack(st->r, xh, d, 0, x->device), *recv = empty(send->shape[0], d, x->device);
    dist_all_to_all_in(L->group, recv, send); /* dispatch: expert e's rows to its rank */
    tensor *done = run_my_experts(L, recv, st);
    st->back = empty(send->shape[0], d, x->device);
    dist_all_to_all_in(L->group, st->back, done); /* combine: each piece home again */
    float *back = host_of(st->back), *y = calloc((size_t)T * d, sizeof(float));
    if (!y) lecture_fail("out of memory for %d outputs", T);
    for (int i = 0; i < 2 * T; i++) /* y_t = sum over kept k of g_k expert_k(x_t) */
        if (st->r->slot[i] >= 0)
            for (int c = 0; c < d; c++)
                y[(int64_t)(i / 2) * d + c] += st->r->gate[i] * back[(int64_t)st->r->slot[i] * d + c];
    tensor *out = tensor_from(y, T, d, x->device);
    free(y);
    free(back);
    free(xh);
    tensor_free(send);
    tensor_free(recv);
    tensor_free(done);
    return out;
}

/* The router's share of the backward, the same on one device and on the
 * ranks: a gate g_k = softmax over the two chosen logits, so with
 * dg_k = <dy_t, expert_k(x_t)> (0 when dropped), the chosen logit's
 * gradient is g_k (dg_k - sum_j g_j dg_j); the other logits get none. */
static void logit_gradients(const moe_routing *r, const float *dg, float *dlogits) {
    memset(dlogits, 0, (size_t)r->tokens * r->experts * sizeof(float));
    for (int t = 0; t < r->tokens; t++) {
        const float *g = r->gate + 2 * t, *dgt = dg + 2 * t;
        float mean = g[0] * dgt[0] + g[1] * dgt[1];
        for (int k = 0; k < 2; k++)
            dlogits[(int64_t)t * r->experts + r->choice[2 * t + k]] = g[k] * (dgt[k] - mean);
    }
}

/* dx += dlogits router^T and drouter = x^T dlogits: the router's product backward. */
static tensor *router_backward(const tensor *x, const tensor *router, const float *dlogits, tensor *dx) {
    tensor *dl = tensor_from(dlogits, x->shape[0], router->shape[1], x->device);
    matmul_into(dx, dl, router, 0, 1, 1.0f, 1.0f);
    tensor *drouter = empty(router->shape[0], router->shape[1], x->device);
    matmul_into(drouter, x, dl, 1, 0, 1.0f, 0.0f);
    tensor_free(dl);
    return drouter;
}

/* The layer backward for an upstream gradient dy: this rank's dx, its
 * experts' weight gradients (from this group's tokens) and the router's
 * (all-reduced: every rank holds the router). */
static tensor *ep_backward(ep_layer *L, const tensor *x, const tensor *dy, ep_saved *st, tensor **dw1, tensor **dw2,
                           tensor **drouter) {
    const moe_routing *r = st->r;
    int d = L->s.dim, T = r->tokens;
    float *dyh = host_of(dy), *back = host_of(st->back), *dg = calloc((size_t)2 * T, sizeof(float));
    if (!dg) lecture_fail("out of memory for %d gate gradients", T);
    for (int i = 0; i < 2 * T; i++)
        if (r->slot[i] >= 0)
            for (int c = 0; c < d; c++)
                dg[i] += dyh[(int64_t)(i / 2) * d + c] * back[(int64_t)r->slot[i] * d + c];
    tensor *send = pack(r, dyh, d, 1, x->device), *recv = empty(send->shape[0], d, x->device);
    dist_all_to_all_in(L->group, recv, send); /* the combine's reverse: g_k dy_t to expert k */
    tensor *dxbuf = zeros(send->shape[0], d, x->device);
    for (int j = 0; j < L->m; j++) {
        if (st->n[j] == 0) { /* no row reached expert j: no gradient */
            dw1[j] = zeros(d, L->s.hidden, x->device);
            dw2[j] = zeros(L->s.hidden, d, x->device);
            continue;
        }
        float *ones = malloc((size_t)st->n[j] * sizeof(float));
        if (!ones) lecture_fail("out of memory for an expert's rows");
        for (int i = 0; i < st->n[j]; i++)
            ones[i] = 1.0f;
        tensor *dyj = gather_rows(recv, st->rows[j], st->n[j]), *dxj;
        mlp_backward(st->in[j], L->w1[j], L->w2[j], dyj, &dxj, &dw1[j], &dw2[j]);
        scatter_rows(dxbuf, dxj, st->rows[j], ones, st->n[j]);
        tensor_free(dyj);
        tensor_free(dxj);
        free(ones);
    }
    tensor *home = empty(send->shape[0], d, x->device);
    dist_all_to_all_in(L->group, home, dxbuf); /* the dispatch's reverse: dx rows home */
    float *homeh = host_of(home), *dxh = calloc((size_t)T * d, sizeof(float)),
          *dl = malloc((size_t)T * r->experts * sizeof(float));
    if (!dxh || !dl) lecture_fail("out of memory for %d input gradients", T);
    for (int i = 0; i < 2 * T; i++)
        if (r->slot[i] >= 0)
            for (int c = 0; c < d; c++)
                dxh[(int64_t)(i / 2) * d + c] += homeh[(int64_t)r->slot[i] * d + c];
    logit_gradients(r, dg, dl);
    tensor *dx = tensor_from(dxh, T, d, x->device);
    *drouter = router_backward(x, L->router, dl, dx);
    dist_all_reduce(*drouter, DIST_SUM); /* the router is replicated: its gradient summed */
    free(dyh);
    free(back);
    free(dg);
    free(homeh);
    free(dxh);
    free(dl);
    tensor_free(send);
    tensor_free(recv);
    tensor_free(dxbuf);
    tensor_free(home);
    return dx;
}

static void ep_saved_free(ep_saved *st, int m) {
    for (int j = 0; j < m; j++) {
        free(st->rows[j]);
        tensor_free(st->in[j]);
    }
    tensor_free(st->back);
    moe_routing_free(st->r);
    memset(st, 0, sizeof *st);
}

/* One device, every token: the same routing (each rank's tokens routed and
 * seated with the same capacity, as the ranks do), every expert on its
 * kept rows in one product, and the backward. */
typedef struct moe_grads {
    tensor *out, *dx, *dw1[EXPERTS], *dw2[EXPERTS], *drouter;
} moe_grads;

static moe_grads moe_one_device(const tensor *all_x, const tensor *all_dy, const tensor *router, double cf,
                                const moe_sizes *s) {
    int T = s->tokens, G = WORLD * T, d = s->dim, dev = all_x->device;
    moe_routing *r[WORLD];
    moe_grads g = {0};
    float *dyh = host_of(all_dy), *out = calloc((size_t)G * d, sizeof(float)),
          *dx = calloc((size_t)G * d, sizeof(float)), *dg = calloc((size_t)2 * G, sizeof(float)),
          *dl = malloc((size_t)G * EXPERTS * sizeof(float));
    int *rows = malloc((size_t)2 * G * sizeof(int)), *which = malloc((size_t)2 * G * sizeof(int));
    float *dyrows = malloc((size_t)2 * G * d * sizeof(float));
    if (!out || !dx || !dg || !dl || !rows || !which || !dyrows) lecture_fail("out of memory for one device's MoE");
    for (int b = 0; b < WORLD; b++) {
        tensor *xb = row_slice((tensor *)all_x, (int64_t)b * T, (int64_t)(b + 1) * T);
        r[b] = moe_route_top2(xb, router);
        moe_assign(r[b], moe_capacity(cf, T, TOP_K, EXPERTS));
        tensor_free(xb);
    }
    for (int e = 0; e < EXPERTS; e++) {
        int n = 0; /* expert e's kept rows, every rank's */
        for (int b = 0; b < WORLD; b++)
            for (int i = 0; i < 2 * T; i++)
                if (r[b]->slot[i] >= 0 && r[b]->choice[i] == e) {
                    rows[n] = b * T + i / 2;
                    which[n] = b * 2 * T + i;
                    for (int c = 0; c < d; c++)
                        dyrows[(int64_t)n * d + c] = r[b]->gate[i] * dyh[(int64_t)rows[n] * d + c];
                    n++;
                }
        if (n == 0) { /* no token kept for expert e: no gradient */
            g.dw1[e] = zeros(d, s->hidden, dev);
            g.dw2[e] = zeros(s->hidden, d, dev);
            continue;
        }
        tensor *w1, *w2, *xe = gather_rows(all_x, rows, n), *dye = tensor_from(dyrows, n, d, dev), *dxe;
        expert_weights(e, s, dev, &w1, &w2);
        tensor *ye = mlp_forward(xe, w1, w2);
        mlp_backward(xe, w1, w2, dye, &dxe, &g.dw1[e], &g.dw2[e]);
        float *yh = host_of(ye), *dxeh = host_of(dxe);
        for (int i = 0; i < n; i++) {
            int b = which[i] / (2 * T), k = which[i] % (2 * T);
            for (int c = 0; c < d; c++) {
                out[(int64_t)rows[i] * d + c] += r[b]->gate[k] * yh[(int64_t)i * d + c];
                dg[which[i]] += dyh[(int64_t)rows[i] * d + c] * yh[(int64_t)i * d + c];
                dx[(int64_t)rows[i] * d + c] += dxeh[(int64_t)i * d + c];
            }
        }
        free(yh);
        free(dxeh);
        tensor_free(ye);
        tensor_free(dxe);
        tensor_free(xe);
        tensor_free(dye);
        tensor_free(w1);
        tensor_free(w2);
    }
    for (int b = 0; b < WORLD; b++)
        logit_gradients(r[b], dg + (int64_t)b * 2 * T, dl + (int64_t)b * T * EXPERTS);
    g.out = tensor_from(out, G, d, dev);
    g.dx = tensor_from(dx, G, d, dev);
    g.drouter = router_backward(all_x, router, dl, g.dx);
    for (int b = 0; b < WORLD; b++)
        moe_routing_free(r[b]);
    free(dyh);
    free(out);
    free(dx);
    free(dg);
    free(dl);
    free(rows);
    free(which);
    free(dyrows);
    return g;
}

static void moe_grads_free(moe_grads *g) {
    tensor_free(g->out);
    tensor_free(g->dx);
    tensor_free(g->drouter);
    for (int e = 0; e < EXPERTS; e++) {
        tensor_free(g->dw1[e]);
        tensor_free(g->dw2[e]);
    }
}

/* The all-to-alls' bytes by the formula, for a group of p ranks with m
 * experts each and capacity C: each rank sends (p - 1) of its p pieces; the
 * forward's counts (m floats a piece) and its two token exchanges (m C rows
 * of d floats a piece, there and back); the backward's two of the same size. */
static int64_t moe_formula_bytes(int p, int m, int capacity, int d, int backward) {
    int64_t rows = (int64_t)(p - 1) * m * capacity * d * (int64_t)sizeof(float);
    return backward ? 2 * rows : (int64_t)(p - 1) * m * (int64_t)sizeof(float) + 2 * rows;
}

/* The tolerances' sums (rounding_tolerance): a token's output goes through
 * the router (d terms) and the expert's two products (d and hidden); the
 * backward adds the gate's dot product (d) and dy w2^T (d), then dh w1^T
 * (hidden) for dx, or a sum over tokens for a weight (at most all of them). */
static int moe_forward_sums(const moe_sizes *s) { return s->dim + s->dim + s->hidden; }
static int moe_backward_sums(const moe_sizes *s) {
    return moe_forward_sums(s) + 2 * s->dim + (s->hidden > WORLD * s->tokens ? s->hidden : WORLD * s->tokens);
}

/* Compares my tokens' output and input gradient, my experts' weight
 * gradients and the router's with one device's. */
static void compare_moe(const char *how, int rank, const ep_layer *L, const tensor *out, const tensor *dx,
                        tensor *const *dw1, tensor *const *dw2, const tensor *drouter, const moe_grads *ref) {
    char what[160];
    int T = L->s.tokens;
    tensor *ref_out = row_slice(ref->out, (int64_t)rank * T, (int64_t)(rank + 1) * T),
           *ref_dx = row_slice(ref->dx, (int64_t)rank * T, (int64_t)(rank + 1) * T);
    snprintf(what, sizeof what, "%s: the kept tokens' output", how);
    compare(what, rank, out, ref_out, moe_forward_sums(&L->s));
    snprintf(what, sizeof what, "%s: the input's gradient", how);
    compare(what, rank, dx, ref_dx, moe_backward_sums(&L->s));
    for (int j = 0; j < L->m; j++) {
        snprintf(what, sizeof what, "%s: expert %d's gradients (w1)", how, L->first + j);
        compare(what, rank, dw1[j], ref->dw1[L->first + j], moe_backward_sums(&L->s));
        snprintf(what, sizeof what, "%s: expert %d's gradients (w2)", how, L->first + j);
        compare(what, rank, dw2[j], ref->dw2[L->first + j], moe_backward_sums(&L->s));
    }
    snprintf(what, sizeof what, "%s: the router's gradient", how);
    compare(what, rank, drouter, ref->drouter, moe_backward_sums(&L->s));
    tensor_free(ref_out);
    tensor_free(ref_dx);
}

/* One pass of the layer, forward (and, with `ref`, backward, compared with
 * one device), its all-to-alls counted. */
static void moe_pass_run(ep_layer *L, const tensor *x, const tensor *dy, double cf, const moe_grads *ref,
                         const char *how, moe_pass *p, int *measured) {
    ep_saved st = {0};
    int rank = dist_rank(), d = L->s.dim;
    dist_traffic before = dist_traffic_now();
    tensor *out = ep_forward(L, x, cf, &st);
    dist_traffic f = dist_traffic_since(&before);
    p->capacity = st.r->capacity;
    p->dropped = moe_dropped(st.r);
    p->calls[0] = f.calls[DIST_CALL_ALL_TO_ALL];
    p->nominal[0] = f.nominal_sent[DIST_CALL_ALL_TO_ALL];
    p->measured[0] = f.bytes_sent[DIST_CALL_ALL_TO_ALL];
    *measured = f.measured_collectives;
    int me = L->group ? dist_group_rank(L->group) : rank;
    for (int e = 0; e < L->p * L->m; e++)
        if (e / L->m != me) p->useful += 2 * (int64_t)st.r->kept[e] * d * (int64_t)sizeof(float);
    check(p->calls[0] == 3 && p->nominal[0] == moe_formula_bytes(L->p, L->m, p->capacity, d, 0),
          "%s: 3 all-to-alls forward, %lld bytes (formula %lld)", how, (long long)p->nominal[0],
          (long long)moe_formula_bytes(L->p, L->m, p->capacity, d, 0));
    if (ref) {
        tensor *dw1[EXPERTS], *dw2[EXPERTS], *drouter;
        before = dist_traffic_now();
        tensor *dx = ep_backward(L, x, dy, &st, dw1, dw2, &drouter);
        dist_traffic b = dist_traffic_since(&before);
        p->calls[1] = b.calls[DIST_CALL_ALL_TO_ALL];
        p->nominal[1] = b.nominal_sent[DIST_CALL_ALL_TO_ALL];
        p->measured[1] = b.bytes_sent[DIST_CALL_ALL_TO_ALL];
        check(p->calls[1] == 2 && p->nominal[1] == moe_formula_bytes(L->p, L->m, p->capacity, d, 1),
              "%s: 2 all-to-alls backward, %lld bytes (formula %lld)", how, (long long)p->nominal[1],
              (long long)moe_formula_bytes(L->p, L->m, p->capacity, d, 1));
        for (int j = 0; L->data && j < L->m; j++) { /* expert x data: the replicas' tokens summed */
            dist_all_reduce_in(L->data, dw1[j], DIST_SUM);
            dist_all_reduce_in(L->data, dw2[j], DIST_SUM);
        }
        compare_moe(how, rank, L, out, dx, dw1, dw2, drouter, ref);
        for (int j = 0; j < L->m; j++) {
            tensor_free(dw1[j]);
            tensor_free(dw2[j]);
        }
        tensor_free(drouter);
        tensor_free(dx);
    }
    tensor_free(out);
    ep_saved_free(&st, L->m);
}

/* ---- the load-balancing loss ---- */

/* One step of the auxiliary loss on the router alone (Switch's form):
 *     L = E sum_e f_e P_e,
 * f_e the share of the sequence's k-assignments expert e was chosen for
 * (not differentiable: a count), P_e the router's mean probability for e.
 * Uniform routing gives L = 1. dL/dp_te = E f_e / G, through the softmax
 * dL/dlogit_tj = (E / G) p_tj (f_j - sum_e f_e p_te). The counts and
 * probability sums are all-reduced (the loss is the sequence's), then the
 * router's gradient: every rank takes the same step. Returns L before the
 * step; lr 0 takes none. */
static float aux_loss_step(const tensor *x, tensor *router, int all_tokens, float lr) {
    moe_routing *r = moe_route_top2(x, router);
    int E = r->experts;
    float sums[2 * EXPERTS] = {0}, f[EXPERTS], loss = 0;
    for (int e = 0; e < E; e++) {
        sums[e] = (float)r->demand[e];
        for (int t = 0; t < r->tokens; t++)
            sums[E + e] += r->prob[(int64_t)t * E + e];
    }
    tensor *s = tensor_from(sums, 2 * E, 0, x->device);
    dist_all_reduce(s, DIST_SUM);
    tensor_to_host(s, sums);
    tensor_free(s);
    for (int e = 0; e < E; e++) {
        f[e] = sums[e] / (float)(TOP_K * all_tokens);
        loss += (float)E * f[e] * sums[E + e] / (float)all_tokens;
    }
    float *dl = malloc((size_t)r->tokens * E * sizeof(float));
    if (!dl) lecture_fail("out of memory for the router's gradient");
    for (int t = 0; t < r->tokens; t++) {
        const float *p = r->prob + (int64_t)t * E;
        float fp = 0;
        for (int e = 0; e < E; e++)
            fp += f[e] * p[e];
        for (int j = 0; j < E; j++)
            dl[(int64_t)t * E + j] = (float)E / (float)all_tokens * p[j] * (f[j] - fp);
    }
    tensor *g = tensor_from(dl, r->tokens, E, x->device), *drouter = empty(router->shape[0], E, x->device);
    matmul_into(drouter, x, g, 1, 0, 1.0f, 0.0f);
    dist_all_reduce(drouter, DIST_SUM);
    scale_(drouter, -lr);
    add_(router, drouter); /* SGD: router -= lr dL/drouter */
    tensor_free(g);
    tensor_free(drouter);
    free(dl);
    moe_routing_free(r);
    return loss;
}

/* The router trained on the auxiliary loss alone for AUX_STEPS steps; the
 * load afterwards. */
static void train_balance(const moe_sizes *s, const tensor *x, const tensor *router0, moe_result *res) {
    tensor *router = to_device(router0, x->device);
    for (int step = 0; step <= AUX_STEPS; step++)
        res->aux_loss[step] = aux_loss_step(x, router, WORLD * s->tokens, step < AUX_STEPS ? aux_lr(s->dim) : 0.0f);
    moe_routing *r = moe_route_top2(x, router);
    for (int e = 0; e < EXPERTS; e++)
        res->demand_after[e] = r->demand[e];
    moe_assign(r, moe_capacity(CAPACITY_FACTOR[0], s->tokens, TOP_K, EXPERTS));
    res->dropped_after = moe_dropped(r);
    float most = 0;
    for (int e = 0; e < EXPERTS; e++)
        most = fmaxf(most, (float)r->demand[e]);
    tensor *m = tensor_from(&most, 1, 0, x->device);
    dist_all_reduce(m, DIST_MAX);
    res->padded_after = (int)tensor_item(m, 0);
    tensor_free(m);
    moe_routing_free(r);
    tensor_free(router);
}

static void moe_main(int rank, int world_size, void *args) {
    const moe_sizes *s = args;
    if (world_size != EXPERTS) lecture_fail("expert parallelism needs one rank per expert (%d)", EXPERTS);
    int device = get_device(rank), T = s->tokens;
    tensor *all_x = moe_tokens(s, device), *all_dy = input((int64_t)world_size * T, s->dim, SEED_MOE_DY, device);
    tensor *x = row_slice(all_x, (int64_t)rank * T, (int64_t)(rank + 1) * T),
           *dy = row_slice(all_dy, (int64_t)rank * T, (int64_t)(rank + 1) * T);
    tensor *router = init_weight(s->dim, EXPERTS, SEED_ROUTER, device);
    moe_result res = {0};
    moe_grads ref = moe_one_device(all_x, all_dy, router, CAPACITY_FACTOR[CHECKED], s);

    /* Expert parallel: one expert a rank, every capacity factor, then padding. */
    ep_layer L = {.group = NULL, .data = NULL, .p = world_size, .m = 1, .first = rank, .s = *s, .router = router};
    expert_weights(rank, s, device, &L.w1[0], &L.w2[0]);
    const char *how[CAPACITIES + 1] = {"factor 1.0, forward", "expert parallel", "factor 2.0, forward", "padded"};
    for (int c = 0; c <= CAPACITIES; c++)
        moe_pass_run(&L, x, dy, c < CAPACITIES ? CAPACITY_FACTOR[c] : 0.0, c == CHECKED ? &ref : NULL, how[c],
                     &res.pass[c], &res.measured);
    moe_routing *r = moe_route_top2(x, router);
    for (int e = 0; e < EXPERTS; e++)
        res.demand[e] = r->demand[e];
    moe_routing_free(r);
    tensor_free(L.w1[0]);
    tensor_free(L.w2[0]);

    /* Expert x data: 2 groups of 2 expert-parallel ranks ({0, 1}, {2, 3}),
     * two experts a rank; rank r and r + 2 hold the same experts. */
    int ep_ranks[2][2] = {{0, 1}, {2, 3}}, dp_ranks[2][2] = {{0, 2}, {1, 3}};
    ep_layer M = {.p = 2, .m = 2, .s = *s, .router = router};
    M.group = dist_new_group(ep_ranks[rank / 2], 2);
    M.data = dist_new_group(dp_ranks[rank % 2], 2);
    M.first = dist_group_rank(M.group) * M.m;
    for (int j = 0; j < M.m; j++)
        expert_weights(M.first + j, s, device, &M.w1[j], &M.w2[j]);
    moe_pass ed = {0};
    moe_pass_run(&M, x, dy, CAPACITY_FACTOR[CHECKED], &ref, "expert x data", &ed, &res.measured);
    for (int j = 0; j < M.m; j++) {
        tensor_free(M.w1[j]);
        tensor_free(M.w2[j]);
    }
    dist_group_free(M.group);
    dist_group_free(M.data);

    train_balance(s, x, router, &res);
    spawn_return(&res, sizeof res);
    moe_grads_free(&ref);
    tensor_free(router);
    tensor_free(x);
    tensor_free(dy);
    tensor_free(all_x);
    tensor_free(all_dy);
}

/* ---- what the ranks found ---- */

static void moe_tables(const moe_sizes *s) {
    moe_result r[WORLD];
    for (int i = 0; i < WORLD; i++)
        if (spawn_result(i, &r[i], sizeof r[i]) != sizeof r[i]) lecture_fail("rank %d returned no result", i);
    int assignments = WORLD * s->tokens * TOP_K, dropped[CAPACITIES + 1] = {0};
    int64_t nominal[CAPACITIES + 1] = {0}, useful[CAPACITIES + 1] = {0}, measured[CAPACITIES + 1] = {0};
    for (int c = 0; c <= CAPACITIES; c++)
        for (int i = 0; i < WORLD; i++) {
            dropped[c] += r[i].pass[c].dropped;
            nominal[c] += r[i].pass[c].nominal[0];
            useful[c] += r[i].pass[c].useful;
            measured[c] += r[i].pass[c].measured[0];
        }

    table_t *t = table_new("Top-2 routing: each rank's assignments to each expert");
    table_column(t, "rank", NULL, "%d");
    table_column(t, "assignments to experts 0-3", NULL, "%s");
    char text[WORLD][64];
    for (int i = 0; i < WORLD; i++) {
        snprintf(text[i], sizeof text[i], "%d %d %d %d", r[i].demand[0], r[i].demand[1], r[i].demand[2],
                 r[i].demand[3]);
        table_row(t, i, text[i]);
    }
    table_show(t);
    double rate1 = 100.0 * dropped[0] / assignments;
    predict("The router leans: the counts above are uneven. With a capacity factor of 1.0 (each expert takes "
            "exactly the even share of each rank's assignments), what percentage of the sequence's "
            "assignments is dropped?",
            rate1, "%");
    t = table_new("Capacity factor: drops and the forward all-to-alls' bytes (all ranks)");
    table_column(t, "capacity factor", NULL, "%s");
    table_column(t, "capacity C", "rows", "%d");
    table_column(t, "assignments dropped", NULL, "%d");
    table_column(t, "drop rate", "%", "%.1f");
    table_column(t, "all-to-all, formula", "bytes", "%lld");
    table_column(t, "token rows in it", "%", "%.1f");
    table_column(t, "all-to-all, measured", "bytes", "%lld");
    const char *names[CAPACITIES + 1] = {"1.0", "1.25", "2.0", "none: pad to the largest count"};
    for (int c = 0; c <= CAPACITIES; c++)
        table_row(t, names[c], r[0].pass[c].capacity, dropped[c], 100.0 * dropped[c] / assignments,
                  (long long)nominal[c], 100.0 * (double)useful[c] / (double)nominal[c], (long long)measured[c]);
    table_show(t);
    note("A capacity factor of 1.0 dropped %.1f%% of the %d assignments; 2.0 dropped %.1f%%. Padding every "
         "piece to the largest count (C = %d rows) drops nothing, but its all-to-alls sent %lld bytes, "
         "%.2f times the %lld of factor 1.25, and only %.1f%% of them carried tokens.",
         quoted(rate1), assignments, quoted(100.0 * dropped[2] / assignments), r[0].pass[CAPACITIES].capacity,
         (long long)nominal[CAPACITIES], (double)nominal[CAPACITIES] / (double)nominal[CHECKED],
         (long long)nominal[CHECKED], quoted(100.0 * (double)useful[CAPACITIES] / (double)nominal[CAPACITIES]));

    t = table_new("Factor 1.25, forward and backward: each rank's all-to-alls");
    table_column(t, "rank", NULL, "%d");
    table_column(t, "forward calls", NULL, "%lld");
    table_column(t, "forward, formula", "bytes", "%lld");
    table_column(t, "backward calls", NULL, "%lld");
    table_column(t, "backward, formula", "bytes", "%lld");
    table_column(t, "backward, measured", "bytes", "%lld");
    for (int i = 0; i < WORLD; i++) {
        const moe_pass *p = &r[i].pass[CHECKED];
        table_row(t, i, (long long)p->calls[0], (long long)p->nominal[0], (long long)p->calls[1],
                  (long long)p->nominal[1], (long long)p->measured[1]);
    }
    table_show(t);
    note("Every rank's output, input gradient, its expert's weight gradients and the router's gradient "
         "equal one device's for the kept tokens (the comparisons above, one per rank). The backward "
         "sends what the forward's two token all-to-alls sent, in reverse, and no counts: the "
         "forward's are still known.");
    if (r[0].measured)
        note("The measured columns are what Open MPI's own all-to-all sent (its MPI_T counters); they "
             "may differ from the formula by the algorithm Open MPI picks.");
    else note("Open MPI's counters are not available in this run, so the measured columns are 0.");
    note("### Expert x data parallelism");
    note("With more ranks than experts, each expert has replicas: here 2 groups of 2 ranks "
         "({0, 1} and {2, 3}, `dist_new_group`), two experts a rank, each group's "
         "all-to-alls inside it, and the two replicas of an expert (ranks r and r + 2) "
         "summing their weight gradients with an all-reduce in their data group. The "
         "comparisons above labelled *expert x data* hold the result to one device's too.");
    moe_load_balancing(s, r);
}

static void moe_load_balancing(const moe_sizes *s, const moe_result *r) {
    note("### The load-balancing loss");
    note("The router leans because nothing asks it not to. Switch adds E sum_e f_e P_e to the loss: "
         "f_e the share of the assignments expert e got (a count), P_e the router's mean probability "
         "for e (differentiable). It is 1 when the load is even and larger when the probability is "
         "high where the load is. Here the router alone takes %d SGD steps of it (learning rate %.3g), "
         "the expert weights left alone.",
         AUX_STEPS, aux_lr(s->dim));
    double steps[AUX_STEPS + 1], loss[AUX_STEPS + 1];
    for (int i = 0; i <= AUX_STEPS; i++) {
        steps[i] = i;
        loss[i] = r[0].aux_loss[i];
    }
    chart_t *c = chart_new("SGD step", "auxiliary loss", "The load-balancing loss, %d ranks", WORLD);
    chart_line(c, "E sum f_e P_e", steps, loss, AUX_STEPS + 1);
    chart_show(c);
    int before[EXPERTS] = {0}, after[EXPERTS] = {0}, dropped_after = 0;
    for (int i = 0; i < WORLD; i++) {
        dropped_after += r[i].dropped_after;
        for (int e = 0; e < EXPERTS; e++) {
            before[e] += r[i].demand[e];
            after[e] += r[i].demand_after[e];
        }
    }
    table_t *t = table_new("Expert load before and after the load-balancing loss (assignments, all ranks)");
    table_column(t, "expert", NULL, "%d");
    table_column(t, "before", NULL, "%d");
    table_column(t, "after", NULL, "%d");
    for (int e = 0; e < EXPERTS; e++)
        table_row(t, e, before[e], after[e]);
    table_show(t);
    int assignments = WORLD * s->tokens * TOP_K, dropped_before = 0;
    for (int i = 0; i < WORLD; i++)
        dropped_before += r[i].pass[0].dropped;
    double rate_before = 100.0 * dropped_before / assignments, rate_after = 100.0 * dropped_after / assignments;
    int padded_before = r[0].pass[CAPACITIES].capacity, padded_after = r[0].padded_after;
    t = table_new("The load-balancing loss: before and after its %d steps", AUX_STEPS);
    table_column(t, "router", NULL, "%s");
    table_column(t, "auxiliary loss", NULL, "%.3f");
    table_column(t, "drop rate at factor 1.0", "%", "%.1f");
    table_column(t, "padded capacity", "rows", "%d");
    table_row(t, "before", (double)r[0].aux_loss[0], rate_before, padded_before);
    table_row(t, "after", (double)r[0].aux_loss[AUX_STEPS], rate_after, padded_after);
    table_show(t);
    note("The loss went from %.3f to %.3f. At factor 1.0 the drop rate fell from %.1f%% to %.1f%%, and "
         "the padded capacity (the largest count on any rank) from %d to %d rows.",
         quoted(r[0].aux_loss[0]), quoted(r[0].aux_loss[AUX_STEPS]), quoted(rate_before), quoted(rate_after),
         quoted(padded_before), quoted(padded_after));
    check(r[0].aux_loss[AUX_STEPS] < r[0].aux_loss[0] && dropped_after < dropped_before && padded_after < padded_before,
          "load-balancing loss: the loss (%.3f -> %.3f), drops (%d -> %d) and padded capacity (%d -> %d) fall",
          r[0].aux_loss[0], r[0].aux_loss[AUX_STEPS], dropped_before, dropped_after, padded_before, padded_after);
    note("In training the loss is added, scaled by a small factor (0.01 in Switch), to the model's own: "
         "the router learns its task and to spread the load at once.");
}

/* ------------------------------------------------------------------ */
/* Tensor and sequence parallelism                                     */
/* ------------------------------------------------------------------ */

static void tp_main(int rank, int world_size, void *args);

typedef struct tp_result {
    int64_t nominal[2], measured[2], calls[2]; /* tensor parallel, sequence parallel */
    int64_t norm_rows[2];                      /* rows LayerNorm and the residual work on */
    int measured_ok;
} tp_result;

static void tp_table(void);
static void attention_backward(void);

static void tensor_and_sequence_parallelism(void) {
    progress("tensor and sequence parallelism");
    note("## Tensor and sequence parallelism");
    see("https://arxiv.org/abs/1909.08053", "Shoeybi et al.: Megatron-LM (2019)");
    note("Megatron cuts the block's two sub-blocks the way lecture_08 cut its MLP pairs:\n"
         "- **Attention**: heads are independent, so W_q, W_k, W_v are cut by columns, a "
         "head or more per rank, and the output projection W_o by rows. Rank r's heads "
         "times its rows of W_o is a *partial* output; one all-reduce adds the partials.\n"
         "- **MLP**: W1 by columns (GELU acts elementwise on its own columns), W2 by rows; "
         "one all-reduce.\n\n"
         "Forward, that is two all-reduces of a whole activation (sequence x d) per block. "
         "Everything between them, LayerNorm and the residual additions, is repeated on every "
         "rank, on the whole sequence.");
    see("https://arxiv.org/abs/2205.05198", "Korthikanti et al.: Reducing Activation Recomputation in Large "
                                            "Transformer Models (2022)");
    note("**Sequence parallelism** removes that repetition. An all-reduce is a "
         "reduce-scatter followed by an all-gather. Cut it in two: after the sub-block, a "
         "reduce-scatter leaves rank r the *summed* rows of its quarter of the sequence; "
         "LayerNorm and the residual, which work token by token, run on that quarter; an "
         "all-gather rebuilds the whole sequence just before the next attention or MLP, "
         "which needs it. The same bytes, a quarter of the LayerNorm work, and a quarter "
         "of the activations kept between the sub-blocks.");
    spawn(tp_main, WORLD, NULL, 0);
    tp_table();
    attention_backward();
}

/* Rank r's part of the block: heads [r h/p, (r+1) h/p) (columns of wq, wk,
 * wv), the matching rows of wo; columns of w1 and rows of w2. */
static block block_shard(int rank, int world_size, int device) {
    block_sizes sz = block_sizes_now();
    block full = block_full(device), b;
    int64_t c = sz.dim / world_size, h = sz.hidden / world_size;
    b.wq = col_slice(full.wq, rank * c, (rank + 1) * c);
    b.wk = col_slice(full.wk, rank * c, (rank + 1) * c);
    b.wv = col_slice(full.wv, rank * c, (rank + 1) * c);
    tensor *o = row_slice(full.wo, rank * c, (rank + 1) * c), *w2 = row_slice(full.w2, rank * h, (rank + 1) * h);
    b.wo = to_device(o, device);
    b.w2 = to_device(w2, device);
    b.w1 = col_slice(full.w1, rank * h, (rank + 1) * h);
    b.heads = sz.heads / world_size;
    tensor_free(o);
    tensor_free(w2);
    block_free(&full);
    return b;
}

/* Megatron: the whole sequence on every rank, one all-reduce per sub-block. */
static tensor *block_tensor_parallel(const tensor *x, const block *w) {
    tensor *a = layer_norm(x, LN_EPS), *y = attention_part(a, w);
    dist_all_reduce(y, DIST_SUM); /* the heads' partial outputs add up */
    add_(y, x);
    tensor *b = layer_norm(y, LN_EPS), *z = mlp_forward(b, w->w1, w->w2);
    dist_all_reduce(z, DIST_SUM); /* the MLP's partial outputs add up */
    add_(z, y);
    tensor_free(a);
    tensor_free(b);
    tensor_free(y);
    return z;
}

/* The rows of the whole sequence, gathered from every rank's quarter. */
static tensor *gather_sequence(const tensor *mine) {
    tensor *all = empty(mine->shape[0] * dist_world_size(), mine->shape[1], mine->device);
    dist_all_gather(all, mine);
    return all;
}

/* Partial outputs of the whole sequence summed, this rank's quarter kept. */
static tensor *reduce_scatter_sequence(const tensor *partial) {
    tensor *mine = empty(partial->shape[0] / dist_world_size(), partial->shape[1], partial->device);
    dist_reduce_scatter(mine, partial, DIST_SUM);
    return mine;
}

/* Sequence parallel: x_mine is this rank's quarter of the sequence; so is
 * the result. LayerNorm and the residuals work on the quarter only. */
static tensor *block_sequence_parallel(const tensor *x_mine, const block *w) {
    tensor *a_mine = layer_norm(x_mine, LN_EPS), *a = gather_sequence(a_mine);
    tensor *partial = attention_part(a, w), *y = reduce_scatter_sequence(partial);
    add_(y, x_mine);
    tensor *b_mine = layer_norm(y, LN_EPS), *b = gather_sequence(b_mine);
    tensor *partial2 = mlp_forward(b, w->w1, w->w2), *z = reduce_scatter_sequence(partial2);
    add_(z, y);
    tensor *all[] = {a_mine, a, partial, y, b_mine, b, partial2};
    for (int i = 0; i < 7; i++)
        tensor_free(all[i]);
    return z;
}

static void count_traffic(tp_result *r, int which, const dist_traffic *d) {
    r->nominal[which] = dist_traffic_nominal(d);
    r->measured[which] = dist_traffic_sent(d);
    r->calls[which] = dist_traffic_calls(d);
    r->measured_ok = d->measured_collectives;
}

static void tp_main(int rank, int world_size, void *args) {
    block_sizes sz = block_sizes_now();
    int device = get_device(rank);
    int64_t quarter = sz.seq / world_size;
    tensor *x = input(sz.seq, sz.dim, SEED_X, device);
    block full = block_full(device), mine = block_shard(rank, world_size, device);
    tensor *expected = block_forward(x, &full);
    tp_result r;
    memset(&r, 0, sizeof r);

    dist_traffic before = dist_traffic_now();
    tensor *z = block_tensor_parallel(x, &mine);
    dist_traffic d = dist_traffic_since(&before);
    count_traffic(&r, 0, &d);
    r.norm_rows[0] = sz.seq;
    compare("tensor parallelism: the block's output", rank, z, expected, block_sum_lengths());

    tensor *x_mine = row_slice(x, rank * quarter, (rank + 1) * quarter);
    before = dist_traffic_now();
    tensor *z_mine = block_sequence_parallel(x_mine, &mine);
    d = dist_traffic_since(&before);
    count_traffic(&r, 1, &d);
    r.norm_rows[1] = quarter;
    tensor *expected_mine = row_slice(expected, rank * quarter, (rank + 1) * quarter);
    compare("sequence parallelism: the block's output, this rank's quarter", rank, z_mine, expected_mine,
            block_sum_lengths());
    check(r.nominal[1] == r.nominal[0], "sequence parallelism: the same bytes as tensor parallelism (%lld = %lld)",
          (long long)r.nominal[1], (long long)r.nominal[0]);
    spawn_return(&r, sizeof r);
    tensor *all[] = {expected_mine, z_mine, x_mine, z, expected, x};
    for (int i = 0; i < 6; i++)
        tensor_free(all[i]);
    block_free(&full);
    block_free(&mine);
}

static void tp_table(void) {
    block_sizes sz = block_sizes_now();
    tp_result r;
    if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("rank 0 returned no result");
    table_t *t = table_new("One block forward on %d ranks, rank 0's traffic", WORLD);
    table_column(t, "strategy", NULL, "%s");
    table_column(t, "collective calls", NULL, "%lld");
    table_column(t, "formula", NULL, "%s");
    table_column(t, "bytes sent, formula", "bytes", "%lld");
    table_column(t, "bytes sent, measured", "bytes", "%lld");
    table_column(t, "rows per LayerNorm", NULL, "%lld");
    const char *names[2] = {"tensor parallel (all-reduce)", "sequence parallel (reduce-scatter + all-gather)"};
    const char *formulas[2] = {"2 x 2 (p-1)/p b", "4 x (p-1)/p b"};
    char question[400];
    snprintf(question, sizeof question,
             "An activation here is %d x %d floats, b = %.0f bytes, on p = %d ranks. Tensor parallelism makes "
             "%lld all-reduces of an activation per block forward, 2 (p-1)/p b each by the ring's formula. Sequence "
             "parallelism cuts each all-reduce into a reduce-scatter and an all-gather. How many bytes does rank 0 "
             "send with sequence parallelism, by the formula?",
             sz.seq, sz.dim, (double)sz.seq * sz.dim * sizeof(float), WORLD, (long long)r.calls[0]);
    predict(question, (double)r.nominal[1], "bytes");
    for (int i = 0; i < 2; i++)
        table_row(t, names[i], (long long)r.calls[i], formulas[i], (long long)r.nominal[i], (long long)r.measured[i],
                  (long long)r.norm_rows[i]);
    table_show(t);
    double activation = (double)sz.seq * sz.dim * sizeof(float);
    note("An activation here is %d x %d floats, b = %.0f bytes (%.3g MiB). Tensor parallelism sends two "
         "all-reduces, 2 x 2 (p-1)/p b = %.0f bytes by the formula; sequence parallelism two "
         "reduce-scatters and two all-gathers of (p-1)/p b each, the same %.0f bytes in twice "
         "the calls (rank 0 made %lld and %lld). Its LayerNorms ran on %lld rows instead of %lld.",
         sz.seq, sz.dim, activation, activation / (1 << 20), 4.0 * (WORLD - 1) / WORLD * activation,
         4.0 * (WORLD - 1) / WORLD * activation, (long long)r.calls[0], (long long)r.calls[1],
         (long long)r.norm_rows[1], (long long)r.norm_rows[0]);
    if (r.measured_ok)
        note("Open MPI's counters measured %lld and %lld bytes, against the formula's %lld and %lld. The formula is "
             "what a bandwidth-optimal (ring) algorithm sends; Open MPI picks its algorithm by message size and "
             "may pick one that sends more bytes in fewer rounds (for small messages) or that splits the "
             "message differently.",
             (long long)r.measured[0], (long long)r.measured[1], (long long)r.nominal[0], (long long)r.nominal[1]);
}

/* ---- backward: the conjugate collectives ---- */

/* The attention sub-block alone, y = x + Attention(gain LN(x) + bias) W_o,
 * its LayerNorm with a learned gain and bias so the backward has weight
 * gradients outside the tensor-parallel region too. Forward and backward
 * on one device, then with tensor parallelism, then with sequence
 * parallelism; every gradient compared with one device's. */

static void tpb_main(int rank, int world_size, void *args);
static void tpb_table(void);

/* Collectives of one pass, by kind: the three SP and TP use. */
enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, KINDS };
static const dist_call_kind KIND_OF[KINDS] = {DIST_CALL_ALL_REDUCE, DIST_CALL_ALL_GATHER, DIST_CALL_REDUCE_SCATTER};
static const char *const KIND_NAME[KINDS] = {"all-reduce", "all-gather", "reduce-scatter"};

typedef struct pass_traffic {
    int64_t calls[KINDS], nominal[KINDS], measured[KINDS];
} pass_traffic;

typedef struct tpb_result {
    pass_traffic pass[2][2]; /* [tensor parallel, sequence parallel][forward, backward] */
    int64_t formula[2][2][KINDS];
    int measured_ok;
} tpb_result;

/* The gradients of the sub-block's weights and input. */
typedef struct attn_grads {
    tensor *dx, *dwq, *dwk, *dwv, *dwo, *dgain, *dbias;
} attn_grads;

static void attention_backward(void) {
    note("### Backward: the conjugate collectives");
    note("Training needs the backward pass, and each collective of the forward has a *conjugate* in the "
         "backward: the collective that moves the gradient back the way the activation came. Megatron names "
         "the two for tensor parallelism f and g: f is the identity forward (every rank takes the whole "
         "input) and an all-reduce backward (each rank's heads give a *partial* gradient of the input, and "
         "they add up); g is an all-reduce forward (the partial outputs) and the identity backward (every "
         "rank needs the whole output gradient, and has it). Sequence parallelism cuts each all-reduce in "
         "two, and the duality turns them round: the backward of an all-gather is a reduce-scatter (every "
         "rank used the whole sequence, so every rank holds a partial gradient of every row; each row's "
         "owner needs their sum), and the backward of a reduce-scatter is an all-gather (each rank kept the "
         "sum of its rows; the gradient of that sum is the same for every partial, so every rank needs "
         "every row's gradient). LayerNorm now works on a quarter of the sequence on each rank, so its gain "
         "and bias gradients, sums over the tokens, are partial too: one all-reduce adds them.");
    note("Here the attention sub-block alone, y = x + Attention(gain LN(x) + bias) W_o, forward and "
         "backward for an output gradient dy drawn from its own seed: `attention_heads_backward` and "
         "`layer_norm_affine_backward` in `lectures/lecture_scaling/transformer.c`, each tested against "
         "float64 central differences in `tests/lectures/test_transformer.c`.");
    spawn(tpb_main, WORLD, NULL, 0);
    tpb_table();
}

/* The sums on the way to a gradient of the sub-block: the forward to the
 * heads (LayerNorm 2 d, the projections d, a score d / heads, the weighted
 * values seq); the backward: dy W_o^T (d) and dW_o (seq), dP and dS
 * (2 d / heads), the row sum and dq, dk, dv (2 seq), the weight gradients
 * (seq), dx through three projections (3 d), LayerNorm's two means (2 d),
 * its gain's gradient (seq). */
static int attention_backward_sum_lengths(void) {
    block_sizes sz = block_sizes_now();
    return 2 * sz.dim + sz.dim + sz.dim / sz.heads + sz.seq + sz.dim + sz.seq + 2 * sz.dim / sz.heads + 2 * sz.seq +
           sz.seq + 3 * sz.dim + 2 * sz.dim + sz.seq;
}

static tensor *ln_param(uint64_t seed, float base, int device) {
    block_sizes sz = block_sizes_now();
    tensor *p = input(1, sz.dim, seed, device);
    scale_(p, 0.2f);
    add_scalar_(p, base); /* a gain near 1, a bias near 0: not the identity */
    return p;
}

/* Between the collectives: the heads of a (the whole sequence, normalised)
 * and this rank's rows of W_o; backward for the output gradient dy (the
 * whole sequence) it sets dW_q, dW_k, dW_v, dW_o and returns da, this
 * rank's heads' part of the input's gradient. */
static tensor *heads_backward(const tensor *a, const block *w, const tensor *dy, attn_grads *g) {
    tensor *heads = attention_heads(a, w->wq, w->wk, w->wv, w->heads, 1);
    tensor *dheads = empty(dy->shape[0], w->wo->shape[0], dy->device);
    g->dwo = empty(w->wo->shape[0], w->wo->shape[1], dy->device);
    matmul_into(g->dwo, heads, dy, 1, 0, 1.0f, 0.0f); /* heads^T dy */
    matmul_into(dheads, dy, w->wo, 0, 1, 1.0f, 0.0f); /* dy W_o^T */
    tensor *da = attention_heads_backward(a, w->wq, w->wk, w->wv, w->heads, 1, dheads, &g->dwq, &g->dwk, &g->dwv);
    tensor_free(heads);
    tensor_free(dheads);
    return da;
}

/* LayerNorm's backward and the residual's: dx = LN'(da) + dy. */
static void norm_backward(const tensor *x, const tensor *gain, const tensor *da, const tensor *dy, attn_grads *g) {
    g->dx = layer_norm_affine_backward(x, gain, da, LN_EPS, &g->dgain, &g->dbias);
    add_(g->dx, dy);
}

static attn_grads attention_one_device(const tensor *x, const tensor *dy, const block *w, const tensor *gain,
                                       const tensor *bias, tensor **y) {
    attn_grads g;
    tensor *a = layer_norm_affine(x, gain, bias, LN_EPS);
    *y = attention_part(a, w);
    add_(*y, x);
    tensor *da = heads_backward(a, w, dy, &g);
    norm_backward(x, gain, da, dy, &g);
    tensor_free(a);
    tensor_free(da);
    return g;
}

/* Tensor parallel: the whole sequence on every rank. Forward, g: the
 * partial outputs all-reduced. a is kept for the backward. */
static tensor *tp_attention_forward(const tensor *x, const block *w, const tensor *gain, const tensor *bias,
                                    tensor **a) {
    *a = layer_norm_affine(x, gain, bias, LN_EPS);
    tensor *y = attention_part(*a, w);
    dist_all_reduce(y, DIST_SUM); /* g forward: the heads' partial outputs add up */
    add_(y, x);
    return y;
}

/* Backward, g is the identity (dy is whole on every rank); f's conjugate:
 * the heads' partial input gradients all-reduced. */
static attn_grads tp_attention_backward(const tensor *x, const tensor *dy, const block *w, const tensor *gain,
                                        const tensor *a) {
    attn_grads g;
    tensor *da = heads_backward(a, w, dy, &g);
    dist_all_reduce(da, DIST_SUM); /* f backward: the heads' partial input gradients add up */
    norm_backward(x, gain, da, dy, &g);
    tensor_free(da);
    return g;
}

/* Sequence parallel: x_mine is this rank's quarter. Forward: all-gather
 * before the heads, reduce-scatter after. a (gathered) kept. */
static tensor *sp_attention_forward(const tensor *x_mine, const block *w, const tensor *gain, const tensor *bias,
                                    tensor **a) {
    tensor *a_mine = layer_norm_affine(x_mine, gain, bias, LN_EPS);
    *a = gather_sequence(a_mine); /* all-gather: every rank's heads need every token */
    tensor *partial = attention_part(*a, w), *y = reduce_scatter_sequence(partial); /* the sum of my rows */
    add_(y, x_mine);
    tensor_free(a_mine);
    tensor_free(partial);
    return y;
}

/* Backward, the conjugates in reverse order: an all-gather of the output
 * gradient (where the forward reduce-scattered), a reduce-scatter of the
 * input gradient (where it all-gathered), and LayerNorm's weight gradients,
 * sums over this rank's rows only, all-reduced. */
static attn_grads sp_attention_backward(const tensor *x_mine, const tensor *dy_mine, const block *w, const tensor *gain,
                                        const tensor *a) {
    attn_grads g;
    tensor *dy = gather_sequence(dy_mine); /* the reduce-scatter's conjugate */
    tensor *da = heads_backward(a, w, dy, &g);
    tensor *da_mine = reduce_scatter_sequence(da); /* the all-gather's conjugate */
    norm_backward(x_mine, gain, da_mine, dy_mine, &g);
    tensor *parts[2] = {g.dgain, g.dbias}, *both = cat_cols(parts, 2);
    dist_all_reduce(both, DIST_SUM); /* LayerNorm's gain and bias: every quarter's share added */
    tensor_free(g.dgain);
    tensor_free(g.dbias);
    int64_t d = x_mine->shape[1];
    g.dgain = col_slice(both, 0, d);
    g.dbias = col_slice(both, d, 2 * d);
    tensor_free(both);
    tensor_free(dy);
    tensor_free(da);
    tensor_free(da_mine);
    return g;
}

static void attn_grads_free(attn_grads *g) {
    tensor *all[] = {g->dx, g->dwq, g->dwk, g->dwv, g->dwo, g->dgain, g->dbias};
    for (int i = 0; i < 7; i++)
        tensor_free(all[i]);
}

/* This rank's gradients against its share of one device's: rows
 * [row0, row0 + rows) of dx, its columns of dW_q, dW_k, dW_v, its rows of
 * dW_o, all of dgain and dbias. */
static void compare_grads(const char *how, int rank, int world_size, const attn_grads *g, const attn_grads *ref,
                          int64_t row0, int64_t rows) {
    block_sizes sz = block_sizes_now();
    int64_t c = sz.dim / world_size;
    int n = attention_backward_sum_lengths();
    tensor *expected[7] = {row_slice(ref->dx, row0, row0 + rows),
                           col_slice(ref->dwq, rank * c, (rank + 1) * c),
                           col_slice(ref->dwk, rank * c, (rank + 1) * c),
                           col_slice(ref->dwv, rank * c, (rank + 1) * c),
                           row_slice(ref->dwo, rank * c, (rank + 1) * c),
                           ref->dgain,
                           ref->dbias};
    const tensor *got[7] = {g->dx, g->dwq, g->dwk, g->dwv, g->dwo, g->dgain, g->dbias};
    const char *names[7] = {"dx, this rank's rows",      "dW_q, this rank's columns", "dW_k, this rank's columns",
                            "dW_v, this rank's columns", "dW_o, this rank's rows",    "LayerNorm's dgain",
                            "LayerNorm's dbias"};
    for (int i = 0; i < 7; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s backward: %s", how, names[i]);
        compare(what, rank, got[i], expected[i], n);
    }
    for (int i = 0; i < 5; i++)
        tensor_free(expected[i]);
}

/* The collectives of one pass, by kind, and the formula's bytes for them. */
static void pass_of(pass_traffic *p, const dist_traffic *before) {
    dist_traffic d = dist_traffic_since(before);
    for (int k = 0; k < KINDS; k++) {
        p->calls[k] = d.calls[KIND_OF[k]];
        p->nominal[k] = d.nominal_sent[KIND_OF[k]];
        p->measured[k] = d.bytes_sent[KIND_OF[k]];
    }
}

/* What each pass must call, and the ring's bytes for it: an activation is
 * b = seq d 4 bytes; an all-reduce sends 2 (p-1)/p of its tensor, an
 * all-gather or reduce-scatter (p-1)/p of the whole sequence. SP's backward
 * all-reduce is of LayerNorm's gain and bias, 2 d floats. */
static void expected_passes(int p, int64_t calls[2][2][KINDS], int64_t bytes[2][2][KINDS]) {
    block_sizes sz = block_sizes_now();
    int64_t b = (int64_t)sz.seq * sz.dim * sizeof(float), ln = 2 * sz.dim * (int64_t)sizeof(float);
    int64_t want[2][2][KINDS] = {{{1, 0, 0}, {1, 0, 0}}, {{0, 1, 1}, {1, 1, 1}}};
    memcpy(calls, want, sizeof want);
    for (int s = 0; s < 2; s++)
        for (int dir = 0; dir < 2; dir++) {
            bytes[s][dir][K_ALL_REDUCE] = want[s][dir][K_ALL_REDUCE] * 2 * (p - 1) * (s == 0 ? b : ln) / p;
            bytes[s][dir][K_ALL_GATHER] = want[s][dir][K_ALL_GATHER] * (p - 1) * b / p;
            bytes[s][dir][K_REDUCE_SCATTER] = want[s][dir][K_REDUCE_SCATTER] * (p - 1) * b / p;
        }
}

static const char *const STRATEGY[2] = {"tensor parallel", "sequence parallel"};
/* expected_passes' formulas, as the tables write them beside the bytes. */
static const char *const FORMULA_TEXT[2][KINDS] = {
        {"2 (p-1)/p b", "", ""}, {"2 (p-1)/p 2d 4 (LayerNorm's gain, bias)", "(p-1)/p b", "(p-1)/p b"}};
static const char *const DIRECTION[2] = {"forward", "backward"};

/* Each pass made exactly its collectives, each moving the formula's bytes. */
static void check_passes(tpb_result *r) {
    int64_t calls[2][2][KINDS];
    expected_passes(dist_world_size(), calls, r->formula);
    for (int s = 0; s < 2; s++)
        for (int dir = 0; dir < 2; dir++) {
            const pass_traffic *p = &r->pass[s][dir];
            int ok = 1;
            for (int k = 0; k < KINDS; k++)
                ok = ok && p->calls[k] == calls[s][dir][k] && p->nominal[k] == r->formula[s][dir][k];
            check(ok,
                  "%s %s: %lld all-reduce, %lld all-gather, %lld reduce-scatter, each of the formula's bytes "
                  "(made %lld, %lld, %lld)",
                  STRATEGY[s], DIRECTION[dir], (long long)calls[s][dir][0], (long long)calls[s][dir][1],
                  (long long)calls[s][dir][2], (long long)p->calls[0], (long long)p->calls[1], (long long)p->calls[2]);
        }
}

static void tpb_main(int rank, int world_size, void *args) {
    (void)args;
    block_sizes sz = block_sizes_now();
    int device = get_device(rank);
    int64_t quarter = sz.seq / world_size;
    tensor *x = input(sz.seq, sz.dim, SEED_X, device), *dy = input(sz.seq, sz.dim, SEED_DY, device);
    tensor *gain = ln_param(SEED_GAIN, 1.0f, device), *bias = ln_param(SEED_BIAS, 0.0f, device);
    block full = block_full(device), mine = block_shard(rank, world_size, device);
    tensor *y_ref;
    attn_grads ref = attention_one_device(x, dy, &full, gain, bias, &y_ref);
    tpb_result r;
    memset(&r, 0, sizeof r);

    tensor *a;
    dist_traffic before = dist_traffic_now();
    tensor *y = tp_attention_forward(x, &mine, gain, bias, &a);
    pass_of(&r.pass[0][0], &before);
    before = dist_traffic_now();
    attn_grads g = tp_attention_backward(x, dy, &mine, gain, a);
    pass_of(&r.pass[0][1], &before);
    compare("tensor parallel attention forward: the output", rank, y, y_ref, attention_backward_sum_lengths());
    compare_grads("tensor parallel attention", rank, world_size, &g, &ref, 0, sz.seq);
    attn_grads_free(&g);
    tensor_free(y);
    tensor_free(a);

    tensor *x_mine = row_slice(x, rank * quarter, (rank + 1) * quarter);
    tensor *dy_mine = row_slice(dy, rank * quarter, (rank + 1) * quarter);
    before = dist_traffic_now();
    y = sp_attention_forward(x_mine, &mine, gain, bias, &a);
    pass_of(&r.pass[1][0], &before);
    before = dist_traffic_now();
    g = sp_attention_backward(x_mine, dy_mine, &mine, gain, a);
    pass_of(&r.pass[1][1], &before);
    tensor *y_ref_mine = row_slice(y_ref, rank * quarter, (rank + 1) * quarter);
    compare("sequence parallel attention forward: the output, this rank's rows", rank, y, y_ref_mine,
            attention_backward_sum_lengths());
    compare_grads("sequence parallel attention", rank, world_size, &g, &ref, rank * quarter, quarter);
    r.measured_ok = dist_traffic_now().measured_collectives;
    check_passes(&r);
    if (rank == 0) spawn_return(&r, sizeof r);

    attn_grads_free(&g);
    attn_grads_free(&ref);
    tensor *all[] = {y_ref_mine, y, a, dy_mine, x_mine, y_ref, gain, bias, dy, x};
    for (int i = 0; i < 10; i++)
        tensor_free(all[i]);
    block_free(&full);
    block_free(&mine);
}

static void tpb_table(void) {
    block_sizes sz = block_sizes_now();
    tpb_result r;
    if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("rank 0 returned no result");
    double b = (double)sz.seq * sz.dim * sizeof(float);
    char question[600];
    snprintf(question, sizeof question,
             "Sequence parallelism's forward all-gathers LayerNorm's output: each of the p = %d ranks holds %d of "
             "the %d tokens, and the whole sequence is %d x %d floats, b = %.0f bytes. In the backward pass 1 "
             "collective call carries the gradient back through that all-gather. Which collective is it, and how "
             "many bytes does each rank send in it, by the ring's formula?",
             WORLD, sz.seq / WORLD, sz.seq, sz.seq, sz.dim, b);
    predict(question, (double)r.formula[1][1][K_REDUCE_SCATTER], "bytes");
    table_t *t = table_new("Attention forward and backward on %d ranks, rank 0's collectives", WORLD);
    table_column(t, "strategy", NULL, "%s");
    table_column(t, "pass", NULL, "%s");
    table_column(t, "collective", NULL, "%s");
    table_column(t, "calls", NULL, "%lld");
    table_column(t, "formula", NULL, "%s");
    table_column(t, "bytes sent, formula", "bytes", "%lld");
    table_column(t, "bytes sent, the runtime's nominal", "bytes", "%lld");
    table_column(t, "bytes sent, measured", "bytes", "%lld");
    const int issued[KINDS] = {K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_REDUCE}; /* the order the code calls them */
    int rows = 0, differ = 0; /* rows, and rows whose measured bytes are not the formula's */
    for (int s = 0; s < 2; s++)
        for (int dir = 0; dir < 2; dir++)
            for (int i = 0; i < KINDS; i++) {
                const pass_traffic *p = &r.pass[s][dir];
                int k = issued[i];
                if (p->calls[k] == 0) continue;
                rows++;
                differ += p->measured[k] != r.formula[s][dir][k];
                table_row(t, STRATEGY[s], DIRECTION[dir], KIND_NAME[k], (long long)p->calls[k], FORMULA_TEXT[s][k],
                          (long long)r.formula[s][dir][k], (long long)p->nominal[k], (long long)p->measured[k]);
            }
    table_show(t);
    note("Read the sequence-parallel rows in pairs: the forward's all-gather (%lld bytes) comes back as the "
         "backward's reduce-scatter (%lld bytes), the forward's reduce-scatter (%lld) as the backward's "
         "all-gather (%lld): the same (p-1)/p b = %.0f bytes each way, for b = %.0f. The one call more, "
         "the backward's all-reduce of %lld bytes, adds LayerNorm's gain and bias gradients (2 x %d floats) "
         "over the quarters. Tensor parallelism's two all-reduces, f's and g's, send %lld bytes each: the "
         "sum of a reduce-scatter and an all-gather. Every gradient above equals one device's within its "
         "rounding tolerance, on every rank.",
         (long long)r.formula[1][0][K_ALL_GATHER], (long long)r.formula[1][1][K_REDUCE_SCATTER],
         (long long)r.formula[1][0][K_REDUCE_SCATTER], (long long)r.formula[1][1][K_ALL_GATHER],
         (WORLD - 1.0) / WORLD * b, b, (long long)r.formula[1][1][K_ALL_REDUCE], sz.dim,
         (long long)r.formula[0][0][K_ALL_REDUCE]);
    if (r.measured_ok)
        note("The measured column is Open MPI's own count; its algorithm, chosen by message size, may send more "
             "or fewer bytes than the ring's formula: here %d of the %d rows differ from it.",
             differ, rows);
}

/* ------------------------------------------------------------------ */
/* Context parallelism: ring attention                                 */
/* ------------------------------------------------------------------ */

/* The section's sizes: a sequence cut in 2p chunks, heads that split over
 * the ranks (Ulysses). */
typedef struct cp_sizes {
    int seq, dim, heads;
} cp_sizes;
enum { CP_MAX_HEADS = 16 };
/* The rings timed again after the checked one, each layout in turn: a ring
 * of the full sizes takes this machine about a second. */
enum { CP_TIMED_RINGS = 2, CP_TIMED_RINGS_QUICK = 6 };
static cp_sizes cp_sizes_now(void);

static void ring_main(int rank, int world_size, void *args);
static void ring_timing(void);
static void context_tables(const cp_sizes *s, double seconds);

static void context_parallelism(void) {
    progress("context parallelism");
    cp_sizes s = cp_sizes_now();
    note("## Context parallelism: ring attention");
    note("Sequence parallelism still gathers the whole sequence for attention. With a long enough context, one "
         "rank cannot hold that: each layer keeps activations of sequence x d numbers for backward, and the "
         "attention's work grows with the square of the sequence (flash attention, below, never stores the "
         "sequence^2 scores, but it still reads every key and value). **Context parallelism** keeps the "
         "sequence cut everywhere, attention included. Rank r holds the queries, keys and values of its chunk. "
         "The keys and values travel round a ring: at each of p steps every rank sends the chunk it holds to the "
         "next rank and receives the previous rank's (`dist_isend`, `dist_irecv`), *before* it attends its "
         "queries to the chunk it holds, and waits for the transfer after. The chunk travels while the block "
         "computes: that overlap is what lets ring attention scale, as long as a block's compute takes at least "
         "as long as passing the block on.");
    see("https://arxiv.org/abs/2310.01889", "Liu, Zaharia, Abbeel: Ring Attention with Blockwise Transformers (2023)");
    image("assets/lecture_scaling_ring.svg", 0.8);
    note("A softmax needs every score of a row before it can divide. The *online softmax* "
         "does without: it keeps, per query, the largest score so far m, the sum l of "
         "exp(score - m) and the weighted sum of values; a chunk with a larger maximum "
         "rescales both by exp(m_old - m_new). After the last chunk, the weighted sum over l "
         "is the attention, whatever order the chunks came in (`online_attention_add` in "
         "`lectures/lecture_scaling/transformer.c`; flash attention does the same inside one GPU).");
    note("**Backward.** The forward keeps, per query, its output O and its log-sum-exp m + log l: with them any "
         "chunk's softmax weights come back alone, P = exp(scores - lse), without the other chunks. The keys and "
         "values go round the ring a second time. Each rank adds to its own queries' gradient dQ the share of "
         "every chunk it is handed; the chunk's dK and dV need every rank's queries, so they travel *with* the "
         "chunk: a rank adds its queries' share and passes the partial sums on, and after p steps each chunk's "
         "dK and dV arrive home, complete (`attention_chunk_backward` in `transformer.c`: dS = P (dO V^T - D), "
         "D = rowsum(dO O), dQ += dS K, dK += dS^T Q, dV += P^T dO). The next chunk's keys and values are sent "
         "before the block's compute, as in the forward; the partial dK, dV leave right after it and travel "
         "while the next block computes.");
    note("Causal attention of %d heads of width %d (model width %d) over a sequence of %d tokens, %d per rank, "
         "as 2p = %d chunks of %d tokens: rank r holds two of them. %s",
         s.heads, s.dim / s.heads, s.dim, s.seq, s.seq / WORLD, 2 * WORLD, s.seq / (2 * WORLD),
         lecture_quick() ? "(--quick: the lecture's full run has 1,024 tokens of width 256 in 8 heads.)" : "");
    double t0 = now_seconds();
    spawn(ring_main, WORLD, &s, sizeof s);
    context_tables(&s, now_seconds() - t0);
    ring_timing();
}

/* The sizes of this section: the real ones where a class waits for them,
 * small ones for tests (--quick). heads must split over the ranks for
 * Ulysses, and the sequence into 2p chunks. */
static cp_sizes cp_sizes_now(void) { return lecture_quick() ? (cp_sizes){128, 64, 8} : (cp_sizes){1024, 256, 8}; }

/* A rank's keys and values travel as one tensor, the keys' rows above the
 * values': one message a step each way, not two (each message costs its
 * start and its wait). */
static tensor *keys_of(tensor *kv) { return row_slice(kv, 0, kv->shape[0] / 2); }
static tensor *values_of(tensor *kv) { return row_slice(kv, kv->shape[0] / 2, kv->shape[0]); }

/* Keys above values, in one tensor of their own. */
static tensor *stacked(const tensor *k, const tensor *v) {
    tensor *kv = empty(2 * k->shape[0], k->shape[1], k->device), *top = keys_of(kv), *bottom = values_of(kv);
    tensor_copy(top, k);
    tensor_copy(bottom, v);
    tensor_free(top);
    tensor_free(bottom);
    return kv;
}

/* One ring step's transfer, started: this rank's chunk to the next rank, the
 * previous rank's into `in` (a buffer kept for the whole ring: two of them,
 * the chunk held and the chunk arriving, as ring attention keeps them). */
typedef struct ring_pass {
    dist_request *recv, *send;
} ring_pass;

static ring_pass start_pass(const tensor *kv, tensor *in) {
    int rank = dist_rank(), p = dist_world_size();
    ring_pass r = {dist_irecv(in, (rank + p - 1) % p), dist_isend(kv, (rank + 1) % p)};
    return r;
}

/* Waits for the step's transfer; then the chunk that arrived is the one held,
 * and the next arrives where the old one was. */
static void finish_pass(ring_pass *r, tensor **kv, tensor **in) {
    dist_wait(r->recv);
    dist_wait(r->send);
    tensor *old = *kv;
    *kv = *in, *in = old;
}

/* A chunk of rows [r c, (r+1) c) of t, as a tensor of its own. */
static tensor *chunk_of(tensor *t, int r, int64_t c) {
    tensor *view = row_slice(t, r * c, (r + 1) * c), *copy = to_device(view, t->device);
    tensor_free(view);
    return copy;
}

/* ---- a rank's pieces of the sequence ---- */

/* Every tensor of this section is one head after another: a whole
 * sequence's q is heads x seq rows of width dh, head h's rows
 * [h seq, (h+1) seq). The sequence is cut in 2p chunks of c2 tokens and a
 * rank holds two of them, in one of two layouts: the plain split (rank r
 * holds chunks 2r and 2r + 1, the contiguous quarter) or the zig-zag
 * (chunks r and 2p - 1 - r, one from each end). A rank's tensor keeps its
 * pieces head by head, [head][piece][token]: piece a of head h is rows
 * [(2h + a) c2, (2h + a + 1) c2), each contiguous, so a view reaches it. */
enum { PLAIN, ZIGZAG, LAYOUTS };
static const char *const LAYOUT_NAME[LAYOUTS] = {"plain split", "zig-zag"};

/* The chunk (of 2p) that piece a of rank `rank` holds. */
static int chunk_at(int layout, int rank, int a, int p) {
    if (layout == PLAIN) return 2 * rank + a;
    return a == 0 ? rank : 2 * p - 1 - rank;
}

static tensor *piece(tensor *t, int h, int a, int64_t c2) {
    return row_slice(t, (2 * h + a) * c2, (2 * h + a + 1) * c2);
}

/* A rank's two chunks of every head of `full`, as a tensor of its own. */
static tensor *pieces_of(tensor *full, const cp_sizes *s, int layout, int rank) {
    int p = dist_world_size();
    int64_t c2 = s->seq / (2 * p);
    tensor *mine = empty(s->heads * 2 * c2, full->shape[1], full->device);
    for (int h = 0; h < s->heads; h++)
        for (int a = 0; a < 2; a++) {
            int64_t from = (int64_t)h * s->seq + chunk_at(layout, rank, a, p) * c2;
            tensor *src = row_slice(full, from, from + c2), *dst = piece(mine, h, a, c2);
            tensor_copy(dst, src);
            tensor_free(src);
            tensor_free(dst);
        }
    return mine;
}

/* One device: each head's causal attention over the whole sequence, and
 * its backward for dout, the same functions with one chunk of everything. */
typedef struct cp_full {
    tensor *out, *dq, *dk, *dv;
} cp_full;

static cp_full one_device_attention(tensor *q, tensor *k, tensor *v, tensor *dout, const cp_sizes *s) {
    int64_t T = s->seq, dh = s->dim / s->heads;
    cp_full f = {empty(s->heads * T, dh, q->device), zeros(s->heads * T, dh, q->device),
                 zeros(s->heads * T, dh, q->device), zeros(s->heads * T, dh, q->device)};
    float *lse = malloc((size_t)T * sizeof(float));
    if (!lse) lecture_fail("out of memory for %lld log-sum-exps", (long long)T);
    for (int h = 0; h < s->heads; h++) {
        tensor *t[8], *const all[8] = {q, k, v, dout, f.out, f.dq, f.dk, f.dv};
        for (int i = 0; i < 8; i++)
            t[i] = row_slice(all[i], h * T, (h + 1) * T);
        online_attention *st = online_attention_new(T, dh);
        online_attention_add(st, t[0], t[1], t[2], 1, 0, 0);
        online_attention_lse(st, lse);
        tensor *o = online_attention_result(st, q->device);
        tensor_copy(t[4], o);
        attention_chunk_backward(t[0], t[1], t[2], t[4], t[3], lse, 1, 0, 0, t[5], t[6], t[7]);
        tensor_free(o);
        online_attention_free(st);
        for (int i = 0; i < 8; i++)
            tensor_free(t[i]);
    }
    free(lse);
    return f;
}

/* ---- the ring, forward and backward ---- */

/* A rank's part of the ring: its pieces, its online-softmax states, what
 * the forward keeps for the backward, and what the lecture reports. */
typedef struct cp_rank {
    const cp_sizes *s;
    int layout, rank, p;
    int64_t c2, dh;
    tensor *q, *kv, *dout; /* this rank's pieces; kv: the keys above the values */
    online_attention *st[CP_MAX_HEADS][2];
    tensor *out, *dq; /* the forward's output, the backward's dQ (pieces) */
    float *lse;       /* the forward's log-sum-exp, heads x 2 x c2 */
    int useful;       /* (query chunk, key chunk) pairs with a key to see */
    double compute_s; /* CPU seconds of this rank's thread in its blocks */
} cp_rank;

/* The CPU time of the calling thread: what a rank computes, not the time
 * other ranks on the same cores take from it (4 ranks share 2 cores here;
 * each rank's OpenBLAS runs in its own thread when the cores are fewer than
 * 2 per rank, runtime/ranks/spawn_rank.c). */
static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One ring step's compute: this rank's query pieces against the pieces of
 * rank `owner` that it holds, head by head. dkv NULL: the forward (into
 * the online states); else the backward, dQ into r->dq and these queries'
 * share of the held chunks' dK, dV into dkv. A key chunk after a query
 * chunk is hidden whole by the causal mask: no work at all. */
static void ring_blocks(cp_rank *r, tensor *kv, int owner, tensor *dkv) {
    double t0 = thread_seconds();
    int heads = r->s->heads;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int qc = chunk_at(r->layout, r->rank, a, r->p), kc = chunk_at(r->layout, owner, b, r->p);
            if (kc > qc) continue;
            r->useful += !dkv;
            for (int h = 0; h < heads; h++) {
                tensor *qa = piece(r->q, h, a, r->c2), *kb = piece(kv, h, b, r->c2),
                       *vb = piece(kv, heads + h, b, r->c2);
                if (!dkv) online_attention_add(r->st[h][a], qa, kb, vb, 1, qc * r->c2, kc * r->c2);
                else {
                    tensor *oa = piece(r->out, h, a, r->c2), *ga = piece(r->dout, h, a, r->c2),
                           *dqa = piece(r->dq, h, a, r->c2), *dkb = piece(dkv, h, b, r->c2),
                           *dvb = piece(dkv, heads + h, b, r->c2);
                    attention_chunk_backward(qa, kb, vb, oa, ga, r->lse + (2 * h + a) * r->c2, 1, qc * r->c2,
                                             kc * r->c2, dqa, dkb, dvb);
                    tensor *t[] = {oa, ga, dqa, dkb, dvb};
                    for (int i = 0; i < 5; i++)
                        tensor_free(t[i]);
                }
                tensor_free(qa);
                tensor_free(kb);
                tensor_free(vb);
            }
        }
    r->compute_s += thread_seconds() - t0;
}

/* Ring attention's forward: this rank's queries against every chunk of
 * keys, the next chunk's transfer in flight while this one is attended to.
 * Keeps the output and the log-sum-exp for the backward. */
static void ring_forward(cp_rank *r) {
    tensor *kv = to_device(r->kv, r->kv->device), *in = empty(kv->shape[0], kv->shape[1], kv->device);
    for (int step = 0; step < r->p; step++) {
        int owner = (r->rank - step + r->p) % r->p; /* whose chunks this rank holds now */
        ring_pass pass;
        if (step + 1 < r->p) pass = start_pass(kv, in); /* before the compute */
        ring_blocks(r, kv, owner, NULL);
        if (step + 1 < r->p) finish_pass(&pass, &kv, &in);
    }
    r->out = empty(r->q->shape[0], r->dh, r->q->device);
    r->lse = malloc((size_t)r->q->shape[0] * sizeof(float));
    if (!r->lse) lecture_fail("out of memory for the log-sum-exps");
    for (int h = 0; h < r->s->heads; h++)
        for (int a = 0; a < 2; a++) {
            tensor *o = online_attention_result(r->st[h][a], r->q->device), *dst = piece(r->out, h, a, r->c2);
            tensor_copy(dst, o);
            online_attention_lse(r->st[h][a], r->lse + (2 * h + a) * r->c2);
            tensor_free(o);
            tensor_free(dst);
        }
    tensor_free(kv);
    tensor_free(in);
}

/* Ring attention's backward. The keys and values go round again, each
 * step's pass started before the step's compute; this rank's share of the
 * held chunks' dK, dV is added to the partial sums that arrived with them
 * and sent on right after the compute, so each chunk's gradient travels one
 * step behind its keys and arrives home after p steps (the last send goes
 * to the owner). Both go to the next rank, and without tags messages
 * between two ranks match in the order they were posted (MPI's
 * non-overtaking rule; NCCL's one stream): the sender sends keys 0, dK 0,
 * keys 1, dK 1, ..., so each step posts the receive of the partial sums
 * before that of the next keys. Two buffers of partial sums: one in
 * flight while the next step fills the other. Returns this rank's chunks'
 * dK above dV (the layout of r->kv); sets r->dq. */
static tensor *ring_backward(cp_rank *r) {
    int next = (r->rank + 1) % r->p, prev = (r->rank + r->p - 1) % r->p;
    int64_t rows = r->kv->shape[0];
    tensor *kv = to_device(r->kv, r->kv->device), *in = empty(rows, r->dh, kv->device),
           *arrived = empty(rows, r->dh, kv->device),
           *part[2] = {empty(rows, r->dh, kv->device), empty(rows, r->dh, kv->device)};
    dist_request *sent[2] = {NULL, NULL};
    r->dq = zeros(r->q->shape[0], r->dh, r->q->device);
    for (int step = 0; step < r->p; step++) {
        int owner = (r->rank - step + r->p) % r->p, slot = step % 2;
        dist_request *partial = step > 0 ? dist_irecv(arrived, prev) : NULL; /* the ranks before: their shares */
        ring_pass pass;
        if (step + 1 < r->p) pass = start_pass(kv, in); /* before the compute */
        if (sent[slot]) dist_wait(sent[slot]);          /* the buffer sent two steps ago */
        fill_(part[slot], 0.0f);
        ring_blocks(r, kv, owner, part[slot]);
        if (partial) {
            dist_wait(partial);
            add_(part[slot], arrived);
        }
        sent[slot] = dist_isend(part[slot], next); /* on with the chunk; home after the last step */
        if (step + 1 < r->p) finish_pass(&pass, &kv, &in);
    }
    tensor *home = empty(rows, r->dh, kv->device);
    dist_wait(dist_irecv(home, prev)); /* this rank's chunks' dK and dV, every rank's share in */
    for (int i = 0; i < 2; i++)
        if (sent[i]) dist_wait(sent[i]);
    tensor *t[] = {kv, in, arrived, part[0], part[1]};
    for (int i = 0; i < 5; i++)
        tensor_free(t[i]);
    return home;
}

/* ---- Ulysses: all-to-all instead of a ring ---- */

/* in, a x b blocks of `rows` rows in the order [a][b], as a new tensor in
 * the order [b][a]: the local shuffle between an all-to-all's pieces (by
 * rank) and the heads' whole sequences. */
static tensor *regroup(tensor *in, int a, int b, int64_t rows) {
    tensor *out = empty(in->shape[0], in->shape[1], in->device);
    for (int x = 0; x < a; x++)
        for (int y = 0; y < b; y++) {
            tensor *src = row_slice(in, (x * b + y) * rows, (x * b + y + 1) * rows),
                   *dst = row_slice(out, (y * a + x) * rows, (y * a + x + 1) * rows);
            tensor_copy(dst, src);
            tensor_free(src);
            tensor_free(dst);
        }
    return out;
}

/* Ulysses (DeepSpeed): q, k, v arrive cut along the sequence (this rank's
 * contiguous quarter, every head: [head][token]). An all-to-all each makes
 * them cut along the heads instead: piece j of the input, heads
 * [j h/p, (j+1) h/p) of this rank's tokens, goes to rank j, and piece j of
 * the output is rank j's tokens of this rank's heads. Regrouped, those are
 * whole sequences of h/p heads: plain causal attention, no ring. One more
 * all-to-all takes the outputs back to the sequence cut. A rank must take
 * whole heads: heads % p == 0, or the method does not apply. */
static tensor *ulysses_attention(tensor *q, tensor *k, tensor *v, const cp_sizes *s) {
    int p = dist_world_size();
    if (s->heads % p != 0)
        lecture_fail("Ulysses attention: %d heads do not split over %d ranks (each rank attends to whole heads, so "
                     "heads %% ranks must be 0)",
                     s->heads, p);
    int hp = s->heads / p;
    int64_t c = s->seq / p, T = s->seq;
    tensor *const in[3] = {q, k, v};
    tensor *heads[3];
    for (int i = 0; i < 3; i++) {
        tensor *got = empty(q->shape[0], q->shape[1], q->device);
        dist_all_to_all(got, in[i]);       /* [rank j][head of mine][token] */
        heads[i] = regroup(got, p, hp, c); /* [head of mine][rank j][token]: whole sequences */
        tensor_free(got);
    }
    tensor *o = empty(q->shape[0], q->shape[1], q->device);
    for (int h = 0; h < hp; h++) {
        tensor *qh = row_slice(heads[0], h * T, (h + 1) * T), *kh = row_slice(heads[1], h * T, (h + 1) * T),
               *vh = row_slice(heads[2], h * T, (h + 1) * T), *oh = row_slice(o, h * T, (h + 1) * T);
        tensor *a = attention(qh, kh, vh, 1, 0, 0);
        tensor_copy(oh, a);
        tensor *t[] = {qh, kh, vh, oh, a};
        for (int i = 0; i < 5; i++)
            tensor_free(t[i]);
    }
    tensor *back = regroup(o, hp, p, c), *out = empty(q->shape[0], q->shape[1], q->device);
    dist_all_to_all(out, back); /* rank j's heads of this rank's tokens: [head][token] */
    for (int i = 0; i < 3; i++)
        tensor_free(heads[i]);
    tensor_free(o);
    tensor_free(back);
    return out;
}

/* ---- the spawn ---- */

/* The forward's sums: a score (dh terms), the weighted values (seq terms),
 * the online merges (2p chunks, a rescaling each). The backward's: a score,
 * dP and D (dh each), the log-sum-exp (seq), dQ, dK, dV over the keys or
 * the queries (seq at most), the p partial sums added round the ring and
 * the 2p chunks' shares of dQ. */
static int cp_forward_sums(const cp_sizes *s, int p) { return s->dim / s->heads + s->seq + 2 * p; }
static int cp_backward_sums(const cp_sizes *s, int p) { return 3 * (s->dim / s->heads) + 2 * s->seq + 3 * p; }

typedef struct cp_figures {
    int useful[LAYOUTS];
    double compute_ms[LAYOUTS];
    int64_t ring_bytes[2], ring_calls[2]; /* forward, backward: point to point, sent */
    int64_t ulysses_bytes, ulysses_nominal, ulysses_calls;
} cp_figures;

static void compare_pieces(const char *what, int rank, const tensor *got, tensor *full, const cp_sizes *s, int layout,
                           int sums) {
    tensor *expected = pieces_of(full, s, layout, rank);
    compare(what, rank, got, expected, sums);
    tensor_free(expected);
}

/* One layout's ring, forward and backward, checked against one device;
 * its bytes against the formula. */
/* A rank's part of one layout's ring, its pieces cut from the whole
 * tensors (q, k, v, dout). */
static cp_rank cp_rank_new(int layout, tensor *const *full, const cp_sizes *s) {
    int rank = dist_rank(), p = dist_world_size();
    cp_rank r = {.s = s, .layout = layout, .rank = rank, .p = p, .c2 = s->seq / (2 * p), .dh = s->dim / s->heads};
    tensor *k = pieces_of(full[1], s, layout, rank), *v = pieces_of(full[2], s, layout, rank);
    r.q = pieces_of(full[0], s, layout, rank);
    r.kv = stacked(k, v);
    r.dout = pieces_of(full[3], s, layout, rank);
    for (int h = 0; h < s->heads; h++)
        for (int a = 0; a < 2; a++)
            r.st[h][a] = online_attention_new(r.c2, r.dh);
    tensor_free(k);
    tensor_free(v);
    return r;
}

static void cp_rank_free(cp_rank *r) {
    for (int h = 0; h < r->s->heads; h++)
        for (int a = 0; a < 2; a++)
            online_attention_free(r->st[h][a]);
    free(r->lse);
    tensor *t[] = {r->q, r->kv, r->dout, r->out, r->dq};
    for (int i = 0; i < 5; i++)
        tensor_free(t[i]);
}

static void ring_run(int layout, tensor *const *full, const cp_full *ref, const cp_sizes *s, cp_figures *f) {
    int rank = dist_rank(), p = dist_world_size();
    cp_rank r = cp_rank_new(layout, full, s);
    dist_traffic before = dist_traffic_now();
    ring_forward(&r);
    dist_traffic fwd = dist_traffic_since(&before);
    before = dist_traffic_now();
    tensor *dkv = ring_backward(&r);
    dist_traffic bwd = dist_traffic_since(&before);

    char what[96];
    snprintf(what, sizeof what, "ring attention, %s: this rank's rows", LAYOUT_NAME[layout]);
    compare_pieces(what, rank, r.out, ref->out, s, layout, cp_forward_sums(s, p));
    tensor *dk = keys_of(dkv), *dv = values_of(dkv);
    tensor *const got[3] = {r.dq, dk, dv}, *const want[3] = {ref->dq, ref->dk, ref->dv};
    const char *const grad[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "ring attention backward, %s: %s", LAYOUT_NAME[layout], grad[i]);
        compare_pieces(what, rank, got[i], want[i], s, layout, cp_backward_sums(s, p));
    }
    int64_t chunk = (int64_t)r.kv->numel * (int64_t)sizeof(float); /* this rank's keys and values */
    int64_t formula[2] = {(p - 1) * chunk, (p - 1) * chunk + p * chunk};
    const dist_traffic *d[2] = {&fwd, &bwd};
    for (int b = 0; b < 2; b++) {
        f->ring_bytes[b] = d[b]->bytes_sent[DIST_CALL_SEND];
        f->ring_calls[b] = d[b]->calls[DIST_CALL_SEND];
    }
    note_verbatim("Rank %d, %s: %d (query, key) chunk pairs with work; sent %lld bytes forward in %lld isends "
                  "(formula (p-1) x %lld) and %lld backward in %lld (formula (2p-1) x %lld = %lld)",
                  rank, LAYOUT_NAME[layout], r.useful, (long long)f->ring_bytes[0], (long long)f->ring_calls[0],
                  (long long)chunk, (long long)f->ring_bytes[1], (long long)f->ring_calls[1], (long long)chunk,
                  (long long)formula[1]);
    check(f->ring_bytes[0] == formula[0] && fwd.sent_to[(rank + 1) % p] == formula[0],
          "ring attention, %s, forward: every chunk of keys and values passed on once, to the next rank (%lld bytes)",
          LAYOUT_NAME[layout], (long long)formula[0]);
    check(f->ring_bytes[1] == formula[1] && bwd.sent_to[(rank + 1) % p] == formula[1],
          "ring attention, %s, backward: the keys and values again, and their dK and dV p steps round to their "
          "home (%lld bytes)",
          LAYOUT_NAME[layout], (long long)formula[1]);
    f->useful[layout] = r.useful;
    f->compute_ms[layout] = 1e3 * r.compute_s;
    tensor *t[] = {dkv, dk, dv};
    for (int i = 0; i < 3; i++)
        tensor_free(t[i]);
    cp_rank_free(&r);
}

/* The compute time of each layout's ring, forward and backward: the fastest
 * of the checked run and CP_TIMED_RINGS more, the layouts in turn. A thread's
 * CPU time leaves out the time other ranks take from it, but not what sharing
 * a core costs it (its caches refilled, its fresh pages faulted in): that
 * only adds, so the fastest of a few is the ring's own. */
static void time_rings(tensor *const *full, const cp_sizes *s, cp_figures *f) {
    int reps = lecture_quick() ? CP_TIMED_RINGS_QUICK : CP_TIMED_RINGS;
    for (int n = 0; n < reps; n++)
        for (int layout = 0; layout < LAYOUTS; layout++) {
            cp_rank r = cp_rank_new(layout, full, s);
            ring_forward(&r);
            tensor *dkv = ring_backward(&r);
            f->compute_ms[layout] = fmin(f->compute_ms[layout], 1e3 * r.compute_s);
            tensor_free(dkv);
            cp_rank_free(&r);
        }
}

static void ulysses_run(tensor *const *full, const cp_full *ref, const cp_sizes *s, cp_figures *f) {
    int rank = dist_rank(), p = dist_world_size();
    tensor *q = pieces_of(full[0], s, PLAIN, rank), *k = pieces_of(full[1], s, PLAIN, rank),
           *v = pieces_of(full[2], s, PLAIN, rank);
    dist_traffic before = dist_traffic_now();
    tensor *out = ulysses_attention(q, k, v, s);
    dist_traffic d = dist_traffic_since(&before);
    compare_pieces("Ulysses attention: this rank's rows", rank, out, ref->out, s, PLAIN, cp_forward_sums(s, p));
    f->ulysses_bytes = d.bytes_sent[DIST_CALL_ALL_TO_ALL];
    f->ulysses_nominal = d.nominal_sent[DIST_CALL_ALL_TO_ALL];
    f->ulysses_calls = d.calls[DIST_CALL_ALL_TO_ALL];
    int64_t formula = 4 * (int64_t)(p - 1) * (q->numel / p) * (int64_t)sizeof(float);
    note_verbatim("Rank %d, Ulysses: %lld all-to-alls sent %lld bytes (the runtime's nominal figure %lld; formula "
                  "4 x (p-1)/p x %lld floats x 4 = %lld)",
                  rank, (long long)f->ulysses_calls, (long long)f->ulysses_bytes, (long long)f->ulysses_nominal,
                  (long long)q->numel, (long long)formula);
    check(f->ulysses_calls == 4 && f->ulysses_nominal == formula,
          "Ulysses attention: four all-to-alls (q, k, v there, the output back), each sending (p-1)/p of this rank's "
          "%lld floats (%lld bytes)",
          (long long)q->numel, (long long)formula);
    tensor *t[] = {q, k, v, out};
    for (int i = 0; i < 4; i++)
        tensor_free(t[i]);
}

static void ring_main(int rank, int world_size, void *args) {
    const cp_sizes *s = args;
    int device = get_device(rank);
    int64_t rows = (int64_t)s->heads * s->seq, dh = s->dim / s->heads;
    if (s->seq % (2 * world_size) != 0 || s->heads > CP_MAX_HEADS)
        lecture_fail("context parallelism: %d tokens do not cut into 2 x %d chunks, or %d heads are more than %d",
                     s->seq, world_size, s->heads, CP_MAX_HEADS);
    tensor *full[4] = {input(rows, dh, SEED_Q, device), input(rows, dh, SEED_K, device),
                       input(rows, dh, SEED_V, device), input(rows, dh, SEED_DO, device)};
    cp_full ref = one_device_attention(full[0], full[1], full[2], full[3], s);
    cp_figures f = {0};
    for (int layout = 0; layout < LAYOUTS; layout++)
        ring_run(layout, full, &ref, s, &f);
    ulysses_run(full, &ref, s, &f);
    time_rings(full, s, &f);
    spawn_return(&f, sizeof f);
    tensor *t[] = {full[0], full[1], full[2], full[3], ref.out, ref.dq, ref.dk, ref.dv};
    for (int i = 0; i < 8; i++)
        tensor_free(t[i]);
}

/* ---- what the spawn measured ---- */

static double ratio_of(const double *t, int n) {
    double lo = t[0], hi = t[0];
    for (int i = 1; i < n; i++)
        lo = fmin(lo, t[i]), hi = fmax(hi, t[i]);
    return hi / lo;
}

static void context_tables(const cp_sizes *s, double seconds) {
    cp_figures f[WORLD];
    for (int r = 0; r < WORLD; r++)
        if (spawn_result(r, &f[r], sizeof f[r]) != sizeof f[r]) lecture_fail("rank %d returned no result", r);
    note("Equal to one device on every rank, forward and backward, in both layouts. The sends are exact counts "
         "(the runtime counts point-to-point bytes as it hands them over): forward, p - 1 passes of a rank's keys "
         "and values; backward, p - 1 passes again and p of their dK, dV (the last one home). Each rank also made "
         "the whole sequence from the seeds, only to cut out its pieces and to compute one device's answer for "
         "the check: the ring itself needs no more than its own pieces and the ones passing through.");
    note("### Zig-zag: a balanced causal ring");
    note("With a causal mask a query sees only the keys before it: a key chunk after a query chunk is hidden "
         "whole, and its block is skipped. Under the plain split rank r's chunks 2r and 2r + 1 see 4r + 3 (query, "
         "key) chunk pairs (a pair on the diagonal is half masked, but its block is computed whole), so the last "
         "rank computes %d pairs to the first rank's 3 while every rank waits for all p steps. The **zig-zag** "
         "split gives rank r chunks r and 2p - 1 - r, one from each end: r + 1 pairs and 2p - r pairs, "
         "2p + 1 = %d on every rank. Both layouts ran above, and %d times more each, in turn: the time is the "
         "fastest of those rings' CPU time of each rank's thread in its blocks, forward and backward (its own "
         "arithmetic, not the time the other ranks on these cores took from it).",
         4 * (WORLD - 1) + 3, 2 * WORLD + 1, lecture_quick() ? CP_TIMED_RINGS_QUICK : CP_TIMED_RINGS);
    see("https://arxiv.org/abs/2407.21783", "Llama Team: The Llama 3 Herd of Models (2024), context parallelism");
    table_t *t = table_new("Causal ring attention on %d ranks, %d tokens in %d chunks: the (query, key) chunk pairs "
                           "each rank computes and its CPU time in them, forward and backward",
                           WORLD, s->seq, 2 * WORLD);
    table_column(t, "rank", NULL, "%s");
    table_column(t, "pairs, plain split", NULL, "%.3g");
    table_column(t, "pairs, zig-zag", NULL, "%.3g");
    table_column(t, "compute, plain split", "ms", "%.3g");
    table_column(t, "compute, zig-zag", "ms", "%.3g");
    double ms[LAYOUTS][WORLD], pairs[LAYOUTS][WORLD];
    for (int r = 0; r < WORLD; r++) {
        char name[16];
        snprintf(name, sizeof name, "%d", r);
        table_row(t, name, (double)f[r].useful[PLAIN], (double)f[r].useful[ZIGZAG], f[r].compute_ms[PLAIN],
                  f[r].compute_ms[ZIGZAG]);
        for (int l = 0; l < LAYOUTS; l++)
            ms[l][r] = f[r].compute_ms[l], pairs[l][r] = f[r].useful[l];
    }
    double ratio[LAYOUTS] = {ratio_of(ms[PLAIN], WORLD), ratio_of(ms[ZIGZAG], WORLD)};
    table_row(t, "slowest / fastest", ratio_of(pairs[PLAIN], WORLD), ratio_of(pairs[ZIGZAG], WORLD), ratio[PLAIN],
              ratio[ZIGZAG]);
    int balanced = 1;
    for (int r = 0; r < WORLD; r++)
        balanced &= f[r].useful[ZIGZAG] == 2 * WORLD + 1;
    table_show(t);
    check(balanced, "zig-zag: every rank computes 2p + 1 = %d (query, key) chunk pairs", 2 * WORLD + 1);
    check(ratio[ZIGZAG] < ratio[PLAIN],
          "zig-zag: the slowest rank's compute over the fastest's is smaller than the plain split's (%.2f < %.2f)",
          ratio[ZIGZAG], ratio[PLAIN]);
    note("Measured in this run: under the plain split the busiest rank spent %.3g times the compute of the least "
         "busy; under the zig-zag %.3g times. The ring's time is its slowest rank's, so the zig-zag finishes "
         "causal attention in about the time of the average rank.",
         quoted(ratio[PLAIN]), quoted(ratio[ZIGZAG]));

    note("### Ulysses: all-to-all instead of a ring");
    note("DeepSpeed-Ulysses cuts the other way for attention. q, k and v arrive cut along the sequence; one "
         "all-to-all each re-cuts them along the heads, so each rank holds %d of the %d heads for the whole "
         "sequence and runs ordinary attention on them; one more all-to-all takes the output back to the "
         "sequence cut. It needs heads %% p == 0 (each rank takes whole heads: `ulysses_attention` refuses "
         "anything else), and it cannot use more ranks than heads. Its bytes per rank fall as p grows, (p-1)/p of "
         "4 x the rank's chunk, where the ring's grow with p, (p - 1) x 2 x the chunk.",
         s->heads / WORLD, s->heads);
    see("https://arxiv.org/abs/2309.14509", "Jacobs et al.: DeepSpeed Ulysses (2023)");
    int64_t chunk = (int64_t)s->seq / WORLD * s->dim * (int64_t)sizeof(float); /* one of q, k, v: a rank's rows */
    int64_t ring_fwd = (WORLD - 1) * 2 * chunk, ring_bwd = (WORLD - 1) * 2 * chunk + WORLD * 2 * chunk,
            uly = 4 * (WORLD - 1) * chunk / WORLD;
    double ulysses_measured = (double)f[0].ulysses_bytes;
    table_t *b = table_new("Bytes each rank sends for one attention layer on %d ranks, %d tokens of width %d in %d "
                           "heads: a rank's chunk of q (or k, or v) is %lld bytes; rank 0's counts",
                           WORLD, s->seq, s->dim, s->heads, (long long)chunk);
    table_column(b, "method", NULL, "%s");
    table_column(b, "calls", NULL, "%lld");
    table_column(b, "formula", "bytes", "%lld");
    table_column(b, "measured", "bytes", "%lld");
    table_column(b, "against Ulysses", NULL, "%.2f");
    char ask[300];
    snprintf(ask, sizeof ask,
             "On %d ranks ring attention's forward passes each rank's keys and values on in %d sends (p - 1); "
             "Ulysses re-cuts q, k, v and the output with all-to-alls instead. How many times Ulysses' bytes per "
             "rank does the ring's forward send?",
             WORLD, WORLD - 1);
    double ring_over = (double)f[0].ring_bytes[0] / ulysses_measured;
    predict(ask, ring_over, "x");
    table_row(b, "ring attention, forward: (p-1) x keys and values", (long long)f[0].ring_calls[0], (long long)ring_fwd,
              (long long)f[0].ring_bytes[0], ring_over);
    table_row(b, "ring attention, backward: (p-1) x keys and values, p x dK and dV", (long long)f[0].ring_calls[1],
              (long long)ring_bwd, (long long)f[0].ring_bytes[1], (double)f[0].ring_bytes[1] / ulysses_measured);
    table_row(b, "Ulysses, forward: q, k, v and the output, (p-1)/p each", (long long)f[0].ulysses_calls,
              (long long)uly, (long long)f[0].ulysses_bytes, 1.0);
    table_show(b);
    note("On %d ranks the ring's forward sends %.2f times Ulysses' bytes (p / 2 by the formulas); at 8 ranks it "
         "would be 4 times. What Ulysses pays instead: all-to-alls, which cross every link at once and cannot "
         "overlap a block's compute the way the ring's passes do, and the limit of p <= heads. Real systems "
         "combine them (Ulysses inside a node, the ring across nodes). The whole section (one device's answer on "
         "every rank, both rings forward and backward, Ulysses) ran for %.1f s on this machine's %ld cores.",
         WORLD, quoted(ring_over), seconds, sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---- does the ring hide its transfers? ---- */

static void ring_timing_main(int rank, int world_size, void *args);

/* The timed ring: one head of width 128, no mask (so every block is a whole
 * block's work). With real arithmetic, chunks of 256 tokens (a block's
 * attention takes this CPU about 10 ms; a chunk's keys and values are
 * 2 x 128 KiB). With modelled compute the arithmetic costs nothing, so the
 * chunks are 4096 tokens (2 x 2 MiB): a pass of a few milliseconds, of
 * which what each request costs to start and to wait for (about 0.25 ms a
 * step here) is a small part.
 * Each ring is timed as a timed region (dist_timer), where the runtime
 * neither checks repeated calls nor hashes a send's buffer (lectern.h):
 * those would be the runtime's time, not the transfer's. */
enum { RING_T_ROWS = 256, RING_T_ROWS_MODELLED = 4096, RING_T_DH = 128, RING_T_REPS = 5 };
/* The modelled block: RING_T_TIMES a pass of the block's keys and values
 * here (measured in the same run), at least RING_T_MIN_MS: ring attention's
 * condition, a block's compute at least its transfer, with room. */
#define RING_T_TIMES 4.0
#define RING_T_MIN_MS 5.0
/* The bound the modelled run must meet: the overlapped ring hides at least
 * 70% of the time the blocking ring spends passing chunks on (1 - time in
 * its transfers overlapped / blocking; each the fastest of RING_T_REPS
 * rings, since other work can only slow a ring down). Each of the p - 1 = 3
 * transfers is started before a block's compute, RING_T_TIMES times a
 * pass's time at least, so all of them can hide: at best 100%, less what
 * starting and waiting for two requests a step costs. 70% leaves 30% to what
 * a loaded machine adds (a start that waits for the progress thread to let
 * go of the library, a rank that wakes late). Seen here on 2 cores (soaks
 * of the whole lecture, docs/lecture_scaling.md): 97 to 99% in 20 of 20
 * runs at loads of 7 to 12, and 98.8 to 99.6% in 8 of 8 beside two busy
 * loops; with chunks half as large and the fastest of 3, one rank of one
 * run in 20 saw 65%. A ring that sends only after its compute (the blocking
 * form) hides 0% and fails. */
#define RING_HIDDEN_AT_LEAST 0.70
/* A modelled round in which some rank hid less than that is run again, up to
 * RING_T_ROUNDS rounds (as lecture_08's modelled runs are): a round that a
 * busy machine disturbed (seen once: 67% on one rank while other builds and
 * lectures ran beside it) is not the lesson; a ring that cannot hide fails
 * every round. The caption says which round it shows. */
#define RING_T_ROUNDS 3

typedef struct ring_figures {
    double step[2][2];      /* [real, modelled][blocking, overlapped]: the slowest rank's ring, fastest, s */
    double transfers[2][2]; /* this rank's time in its transfers (sendrecv, or starting and waiting), fastest, s */
    double pass_alone;      /* one pass of a modelled run's chunk's keys and values, median of 5, s */
    double block_ms;        /* the modelled block */
    int rounds;             /* the modelled round shown (1 .. RING_T_ROUNDS) */
} ring_figures;

static void ring_timing(void) {
    progress("ring attention, timed");
    note("### Does the ring hide its transfers?");
    note("The rings above carry a causal mask, several heads and one device's answer for the check. To time the "
         "overlap alone, here the forward ring with one head of width %d without the mask "
         "(every block a whole block's work), in two forms taken in turn %d times each: "
         "**blocking** (attend to the chunk held, then `dist_sendrecv` it on) and **overlapped** (`dist_isend` "
         "and `dist_irecv` first, attend, then wait). Twice: with this CPU's arithmetic, and with each block's "
         "attention **modelled** (`model_compute`), sized from this run's own transfers, on chunks of %d tokens "
         "(the real run's are %d: its arithmetic would take this CPU seconds on the larger). What counts is the "
         "time a rank spends in its transfers: in the sendrecvs, or starting the requests and waiting for them.",
         RING_T_DH, RING_T_REPS, RING_T_ROWS_MODELLED, RING_T_ROWS);
    spawn(ring_timing_main, WORLD, NULL, 0);
    ring_figures f;
    if (spawn_result(0, &f, sizeof f) != sizeof f) lecture_fail("rank 0 returned no result");
    table_t *t = table_new("Ring attention on %d ranks, one head of width %d, rank 0: the fastest of %d rings each; "
                           "the modelled rings' round %d of at most %d (a round in which a rank hid less than %.0f%% "
                           "is run again)",
                           WORLD, RING_T_DH, RING_T_REPS, f.rounds, RING_T_ROUNDS, 100 * RING_HIDDEN_AT_LEAST);
    table_column(t, "compute", NULL, "%s");
    table_column(t, "chunk", "tokens", "%d");
    table_column(t, "ring, blocking", "ms", "%.2f");
    table_column(t, "ring, overlapped", "ms", "%.2f");
    table_column(t, "time in transfers, blocking", "ms", "%.2f");
    table_column(t, "time in transfers, overlapped", "ms", "%.2f");
    table_column(t, "the transfers' time hidden", NULL, "%.0f%%");
    char modelled[80];
    snprintf(modelled, sizeof modelled, "modelled: %.1f ms a block", f.block_ms);
    const char *names[2] = {"real: this CPU's arithmetic", modelled};
    double hidden[2];
    for (int m = 0; m < 2; m++)
        hidden[m] = 1 - f.transfers[m][1] / f.transfers[m][0];
    char question[400];
    snprintf(question, sizeof question,
             "With each block's attention modelled at %.1f ms, %.1f times a pass of its keys and values on to the "
             "next rank (%.2f ms), what percentage of the time the blocking ring spends in its transfers does the "
             "overlapped ring hide?",
             f.block_ms, f.block_ms / (f.pass_alone * 1e3), f.pass_alone * 1e3);
    predict(question, 100 * hidden[1], "%");
    for (int m = 0; m < 2; m++) {
        table_row(t, names[m], m ? RING_T_ROWS_MODELLED : RING_T_ROWS, f.step[m][0] * 1e3, f.step[m][1] * 1e3,
                  f.transfers[m][0] * 1e3, f.transfers[m][1] * 1e3, 100 * hidden[m]);
    }
    table_show(t);
    char real_said[160];
    if (hidden[0] >= 0) snprintf(real_said, sizeof real_said, "the overlapped ring hid %.0f%% of it", 100 * hidden[0]);
    else
        snprintf(real_said, sizeof real_said,
                 "the overlapped ring spent %.0f%% more time in its transfers than the blocking one", -100 * hidden[0]);
    note("The modelled run shows the method: with each block's attention %.1f ms (%.1f times a pass of its keys and "
         "values here, %.2f ms), the overlapped ring hid %.0f%% of the time the blocking ring spent passing chunks "
         "on, and took %.2f ms against %.2f. The real run says what this machine does: %s, with %d ranks computing "
         "on %ld cores, where a transfer waits for a core the other ranks' arithmetic holds, and a rank's wait "
         "also waits for the rank it receives from to finish its block.",
         quoted(f.block_ms), f.block_ms / (f.pass_alone * 1e3), f.pass_alone * 1e3, quoted(100 * hidden[1]),
         quoted(f.step[1][1] * 1e3), quoted(f.step[1][0] * 1e3), real_said, WORLD, sysconf(_SC_NPROCESSORS_ONLN));
}

/* One block: the real attention of the queries to a chunk, or its model. */
static void ring_block(online_attention *s, const tensor *q, tensor *kv, double block_ms) {
    if (block_ms > 0) {
        model_compute(block_ms);
        return;
    }
    tensor *k = keys_of(kv), *v = values_of(kv);
    online_attention_add(s, q, k, v, 0, 0, 0);
    tensor_free(k);
    tensor_free(v);
}

/* One ring, timed: the slowest rank's time, and this rank's time in its
 * transfers into *transfers. Blocking: each block, then its chunk passed on
 * with dist_sendrecv. Overlapped: the pass started, the block, the wait. */
static double timed_ring(const tensor *q, tensor **kv, tensor **in, int overlapped, double block_ms,
                         double *transfers) {
    int rank = dist_rank(), p = dist_world_size();
    online_attention *s = online_attention_new(q->shape[0], RING_T_DH);
    *transfers = 0;
    dist_timer timer = {0};
    dist_timer_start(&timer);
    for (int step = 0; step < p; step++) {
        int last = step + 1 == p;
        double t0 = now_seconds();
        ring_pass pass;
        if (overlapped && !last) pass = start_pass(*kv, *in);
        *transfers += now_seconds() - t0;
        ring_block(s, q, *kv, block_ms);
        t0 = now_seconds();
        if (overlapped && !last) finish_pass(&pass, kv, in);
        if (!overlapped && !last) {
            dist_sendrecv(*kv, (rank + 1) % p, *in, (rank + p - 1) % p);
            tensor *old = *kv;
            *kv = *in, *in = old;
        }
        *transfers += now_seconds() - t0;
    }
    double seconds = dist_timer_stop(&timer);
    online_attention_free(s);
    return seconds;
}

/* One pass of a chunk's keys and values, the median of 5 after a warm-up:
 * what sizes the modelled block. */
static double one_pass_seconds(tensor **kv, tensor **in) {
    double t[5];
    for (int n = -1; n < 5; n++) {
        dist_timer timer = {0};
        if (n >= 0) dist_timer_start(&timer);
        ring_pass pass = start_pass(*kv, *in);
        finish_pass(&pass, kv, in);
        if (n >= 0) t[n] = dist_timer_stop(&timer);
    }
    return median_of(t, 5);
}

/* One round of run m (0 real, 1 modelled): a warm-up of each form, then
 * RING_T_REPS rings of each in turn; the fastest of each into f. The
 * modelled block is sized once, in the first round. */
static void ring_round(ring_figures *f, int m, int rank, int device) {
    int64_t rows = m ? RING_T_ROWS_MODELLED : RING_T_ROWS;
    uint64_t seed = 10 * (uint64_t)rank;
    tensor *q = input(rows, RING_T_DH, SEED_Q + seed, device), *kv = input(2 * rows, RING_T_DH, SEED_K + seed, device),
           *in = empty(2 * rows, RING_T_DH, device);
    if (m && f->block_ms == 0) {
        f->pass_alone = one_pass_seconds(&kv, &in);
        f->block_ms = fmax(RING_T_MIN_MS, RING_T_TIMES * f->pass_alone * 1e3);
    }
    double ms = m ? f->block_ms : 0, step[2][RING_T_REPS], transfers[2][RING_T_REPS], unused;
    timed_ring(q, &kv, &in, 0, ms, &unused); /* warm-up: every call's check made once */
    timed_ring(q, &kv, &in, 1, ms, &unused);
    for (int r = 0; r < RING_T_REPS; r++)
        for (int o = 0; o < 2; o++) /* in turn: blocking, overlapped */
            step[o][r] = timed_ring(q, &kv, &in, o, ms, &transfers[o][r]);
    for (int o = 0; o < 2; o++) {
        f->step[m][o] = fastest_of(step[o], RING_T_REPS);
        f->transfers[m][o] = fastest_of(transfers[o], RING_T_REPS);
    }
    tensor_free(q);
    tensor_free(kv);
    tensor_free(in);
}

/* The least share of its transfers' time any rank hid in the modelled round. */
static double hidden_everywhere(const ring_figures *f, int device) {
    float mine = (float)(1 - f->transfers[1][1] / f->transfers[1][0]);
    tensor *h = tensor_from(&mine, 1, 0, device);
    dist_all_reduce(h, DIST_MIN);
    double least = tensor_item(h, 0);
    tensor_free(h);
    return least;
}

static void ring_timing_main(int rank, int world_size, void *args) {
    int device = get_device(rank);
    ring_figures f = {0};
    for (int m = 0; m < 2; m++)
        for (f.rounds = 1;; f.rounds++) { /* the real run once; a modelled round that missed, again */
            ring_round(&f, m, rank, device);
            if (!m || f.rounds == RING_T_ROUNDS || hidden_everywhere(&f, device) >= RING_HIDDEN_AT_LEAST) break;
        }
    double hidden = 1 - f.transfers[1][1] / f.transfers[1][0];
    check(hidden >= RING_HIDDEN_AT_LEAST,
          "ring attention, modelled compute: the transfers' time hidden is at least %.0f%% (%.0f%%: %.2f ms "
          "against %.2f ms blocking)",
          100 * RING_HIDDEN_AT_LEAST, 100 * hidden, f.transfers[1][1] * 1e3, f.transfers[1][0] * 1e3);
    if (rank == 0) spawn_return(&f, sizeof f);
}

/* ------------------------------------------------------------------ */
/* A 2-D mesh: data x tensor parallelism                               */
/* ------------------------------------------------------------------ */

static void mesh_main(int rank, int world_size, void *args);
static void mesh_on_the_twin(void);

/* The mesh's MLP, lib/mlp.h's layers: y = gelu(gelu(x A) B), A d x
 * MESH_HIDDEN, B MESH_HIDDEN x d, loss mean(y^2). */
static mlp_config mesh_config(void) {
    mlp_config c = {.batch = MESH_BATCH, .width = MESH_HIDDEN, .layers = 2, .steps = 1, .lr = 0};
    return c;
}

static void mesh_2d(void) {
    progress("2-D mesh");
    note("## A 2-D mesh: data x tensor parallelism");
    note("Large runs combine strategies on a *mesh* of ranks: tensor parallelism inside a "
         "node, where links are fast, and data parallelism across nodes. Four ranks as a "
         "2 x 2 mesh: rank = 2 dp + tp.\n"
         "- The **tensor-parallel groups** {0, 1} and {2, 3} share one batch half and cut "
         "the MLP Megatron's way (A by columns, B by rows): one all-reduce forward, in "
         "the group (and one backward, but not for a first block like this one, whose "
         "input is the data).\n"
         "- The **data-parallel groups** {0, 2} and {1, 3} hold the same slice of the weights "
         "and different batch halves: their gradients are averaged in the group.\n\n"
         "`dist_new_group` makes each group; a collective `_in` a group involves its ranks "
         "only.");
    note("The MLP here is y = gelu(gelu(x A) B) with A %d x %d and B %d x %d, loss mean(y^2), "
         "a batch of %d, the forward and backward passes of `lectures/lib/mlp.c`.",
         MESH_DIM, MESH_HIDDEN, MESH_HIDDEN, MESH_DIM, MESH_BATCH);
    spawn(mesh_main, WORLD, NULL, 0);
    note("Every rank's slice of both gradients equals one device's, with two kinds of "
         "traffic that never cross: the tensor-parallel all-reduces of activations (in "
         "every block, forward and, past the first block, backward) and the data-parallel "
         "all-reduces of gradients (once per step). That is why the mesh puts the first on the fastest links.");
    mesh_on_the_twin();
}

/* The twin's row for the mesh's all-reduce over `ranks` ranks (docs/twin.md). */
static const twin_collective *mesh_row(const twin_result *t, int ranks) {
    for (int i = 0; i < t->n_collectives; i++)
        if (!strcmp(t->collectives[i].op, "all_reduce") && t->collectives[i].ranks == ranks) return &t->collectives[i];
    return NULL;
}

/* The same step, without its check, recorded and replayed on the simulated
 * 8-GPU node and on 64 GPUs by the mesh's rule (tools/twin/extend.cpp):
 * tensor-parallel groups kept 2 wide inside a node, data parallelism grown. */
static void mesh_on_the_twin(void) {
    note("### The mesh on 8 and 64 GPUs, simulated\n\n"
         "This machine runs the 2 x 2 mesh. The twin (docs/twin.md) replays the same step, recorded here, on "
         "`h100-node` (8 H100s on NVLink) as a 4 x 2 mesh and on `scaled` (8 GPUs a node, nodes over InfiniBand) "
         "as 32 x 2, by the mesh's rule: each tensor-parallel pair stays two neighbouring GPUs of one node, and "
         "data parallelism grows, its groups every second GPU, across nodes. Every rank keeps the recorded work and "
         "bytes; compute is replayed as the roofline of the work counted here.");
    static const int step_only = 1;
    twin_record(1);
    spawn(mesh_main, WORLD, &step_only, sizeof step_only);
    twin_record(0);
    twin_result node, cluster;
    if (!twin_last_spawn("h100-node", 8, &node) || !twin_last_spawn("scaled", 64, &cluster)) {
        note("Not simulated: %s.", node.ran ? cluster.why : node.why);
        return;
    }
    const twin_collective *tp = mesh_row(&cluster, 2), *dp4 = mesh_row(&node, 4), *dp32 = mesh_row(&cluster, 32);
    if (!tp || !dp4 || !dp32) {
        lecture_fail("the twin of the mesh has no all-reduce over 2, 4 or 32 ranks");
        return;
    }
    predict("Simulated on scaled@64 (a 32 x 2 mesh), how many microseconds will the step take?",
            cluster.simulated_s * 1e6, "us");
    table_t *tab =
            table_new("The mesh's step, simulated (measured here on the 2 x 2 mesh: %.0f us)", node.measured_s * 1e6);
    table_column(tab, "mesh (data x tensor)", NULL, "%s");
    table_column(tab, "simulated step", "us", "%.1f");
    table_column(tab, "tensor-parallel all-reduce", "us", "%.2f");
    table_column(tab, "data-parallel all-reduce (one of 2)", "us", "%.2f");
    table_column(tab, "platform", NULL, "%s");
    const twin_collective *tp8 = mesh_row(&node, 2);
    table_row(tab, "4 x 2", node.simulated_s * 1e6, tp8 ? tp8->time_s * 1e6 : NAN, dp4->time_s * 1e6, node.label);
    table_row(tab, "32 x 2", cluster.simulated_s * 1e6, tp->time_s * 1e6, dp32->time_s * 1e6, cluster.label);
    table_show(tab);
    int ring_steps = 2 * (32 - 1); /* the data-parallel ring of scaled@64's 32 x 2 mesh: 2 (n - 1) */
    note("Simulated: the step takes %.1f us on h100-node@8 and %.1f us on scaled@64, against %.0f us measured here. "
         "The tensor-parallel all-reduce (%.0f KiB, 2 GPUs of one node) takes %.2f us; a data-parallel all-reduce "
         "of %.0f KiB takes %.2f us over 4 GPUs of one node and %.2f us over 32 across 8 nodes, %.0f times as "
         "long. At this lecture's few KiB a ring's latencies, 2 (n - 1) steps, set the time, not its bytes: the "
         "32-rank ring has %d steps, each as long as its slowest hop, between nodes: %.2f us a step. A "
         "tensor-parallel all-reduce comes in every block, forward and backward; the data-parallel one once a step: "
         "the mesh keeps the frequent one in the node. Measured here, 4 ranks share 2 cores and Open MPI: not a "
         "GPU's figure.",
         quoted(node.simulated_s * 1e6), quoted(cluster.simulated_s * 1e6), node.measured_s * 1e6, tp->bytes / 1024,
         quoted(tp->time_s * 1e6), dp4->bytes / 1024, quoted(dp4->time_s * 1e6), quoted(dp32->time_s * 1e6),
         dp32->time_s / dp4->time_s, ring_steps, dp32->time_s * 1e6 / ring_steps);
}

/* One device: the gradients of A and B on the whole batch. */
static void mesh_one_device(int device, tensor **ga, tensor **gb) {
    tensor *x = input(MESH_BATCH, MESH_DIM, SEED_MESH_X, device);
    tensor *w[2] = {init_weight(MESH_DIM, MESH_HIDDEN, SEED_MESH_A, device),
                    init_weight(MESH_HIDDEN, MESH_DIM, SEED_MESH_B, device)};
    tensor *acts[3], *pre[2], *grads[2] = {empty(MESH_DIM, MESH_HIDDEN, device), empty(MESH_HIDDEN, MESH_DIM, device)};
    forward(w, 2, x, acts, pre);
    backward(w, 2, acts, pre, grads);
    free_saved(2, acts, pre);
    *ga = grads[0];
    *gb = grads[1];
    tensor_free(w[0]);
    tensor_free(w[1]);
    tensor_free(x);
}

/* Forward and backward of the Megatron MLP on this rank's batch half with
 * its slices a (columns of A) and b (rows of B); gradients into ga, gb. */
static void mesh_step(dist_group *tp, const tensor *x, const tensor *a, const tensor *b, tensor *ga, tensor *gb) {
    tensor *h, *z = layer_forward(x, a, &h); /* z = gelu(x A_r), its columns */
    tensor *pre = matmul(z, b);              /* z_r B_r: a partial sum */
    dist_all_reduce_in(tp, pre, DIST_SUM);   /* x A B, whole, in the group */
    tensor *y = gelu(pre), *dy = mse_loss_backward(y), *dz;
    layer_backward(z, pre, b, dy, gb, &dz, 0.0f);
    layer_backward(x, h, a, dz, ga, NULL, 0.0f); /* the data needs no gradient: no backward all-reduce */
    tensor *all[] = {h, z, pre, y, dy, dz};
    for (int i = 0; i < 6; i++)
        tensor_free(all[i]);
}

static void mesh_main(int rank, int world_size, void *args) {
    static const int tp_groups[2][2] = {{0, 1}, {2, 3}}, dp_groups[2][2] = {{0, 2}, {1, 3}};
    if (world_size != 4) lecture_fail("the mesh is 2 x 2: 4 ranks, not %d", world_size);
    int device = get_device(rank), dp = rank / 2, tp_rank = rank % 2;
    dist_group *tp = dist_new_group(tp_groups[dp], 2), *dpg = dist_new_group(dp_groups[tp_rank], 2);
    int64_t half = MESH_BATCH / 2, cols = MESH_HIDDEN / 2;
    tensor *data = input(MESH_BATCH, MESH_DIM, SEED_MESH_X, device);
    tensor *x = row_slice(data, dp * half, (dp + 1) * half);
    tensor *A = init_weight(MESH_DIM, MESH_HIDDEN, SEED_MESH_A, device),
           *B = init_weight(MESH_HIDDEN, MESH_DIM, SEED_MESH_B, device);
    tensor *a = col_slice(A, tp_rank * cols, (tp_rank + 1) * cols),
           *b_view = row_slice(B, tp_rank * cols, (tp_rank + 1) * cols);
    tensor *b = to_device(b_view, device), *ga = empty(MESH_DIM, cols, device), *gb = empty(cols, MESH_DIM, device);
    mesh_step(tp, x, a, b, ga, gb);
    dist_all_reduce_in(dpg, ga, DIST_AVG); /* the batch halves' gradients averaged */
    dist_all_reduce_in(dpg, gb, DIST_AVG);
    if (args && *(const int *)args) { /* the step alone, for the twin: no check */
        tensor *step[] = {a, b_view, b, ga, gb, A, B, x, data};
        for (int i = 0; i < 9; i++)
            tensor_free(step[i]);
        dist_group_free(tp);
        dist_group_free(dpg);
        return;
    }

    tensor *full_ga, *full_gb;
    mesh_one_device(device, &full_ga, &full_gb);
    tensor *ea = col_slice(full_ga, tp_rank * cols, (tp_rank + 1) * cols);
    tensor *eb_view = row_slice(full_gb, tp_rank * cols, (tp_rank + 1) * cols), *eb = to_device(eb_view, device);
    mlp_config c = mesh_config();
    double size = fmax(largest(ea), largest(eb)), diff = fmax(max_abs_diff(ga, ea), max_abs_diff(gb, eb));
    double tol = gradient_tolerance(&c) * size; /* lib/mlp.h derives it */
    note_verbatim("Rank %d (dp %d, tp %d): gradients of A's columns and B's rows %lld-%lld: max |mesh - one "
                  "device| = %.3g (largest %.3g, tolerance %.3g)",
                  rank, dp, tp_rank, (long long)(tp_rank * cols), (long long)((tp_rank + 1) * cols - 1), diff, size,
                  tol);
    check(diff <= tol, "2-D mesh: the gradients equal one device's (%.3g <= %.3g)", diff, tol);
    tensor *all[] = {ea, eb_view, eb, full_ga, full_gb, a, b_view, b, ga, gb, A, B, x, data};
    for (int i = 0; i < 14; i++)
        tensor_free(all[i]);
    dist_group_free(tp);
    dist_group_free(dpg);
}

/* ------------------------------------------------------------------ */
/* ZeRO-1, ZeRO-2 and ZeRO-3 with prefetch                             */
/* ------------------------------------------------------------------ */

static void zero_main(int rank, int world_size, void *args);

/* lib/mlp.h's model: 4 square layers, AdamW. */
static mlp_config zero_config(void) {
    mlp_config c = {.batch = 32, .width = 64, .layers = 4, .steps = 1, .lr = 1e-3f};
    return c;
}

enum { DDP, ZERO1, ZERO2, ZERO3, METHODS };
static const char *const METHOD_NAMES[METHODS] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3, prefetch"};

/* What one method holds at its peak, by the bookkeeping beside each step
 * function (floats), and what it sent, by the runtime's tally (bytes). */
typedef struct zero_figures {
    int64_t weights, grads, state; /* floats held at the peak */
    int64_t nominal, calls;
} zero_figures;

static void zero_table(void);
static void prefetch_timing(void);

static void zero_stages(void) {
    progress("ZeRO");
    note("## ZeRO-1, ZeRO-2 and ZeRO-3 with prefetch");
    note("lecture_08 ran ZeRO-3. Here are the stages before it, and ZeRO-3 the way FSDP "
         "runs it. Each rank keeps piece r (a band of rows) of what a stage shards:\n"
         "- **ZeRO-1** shards AdamW's state. The full gradient is computed as in DDP; then, "
         "instead of an all-reduce, a **reduce-scatter** gives each rank the average of its "
         "piece only; it updates its piece of the weights; an **all-gather** gives every "
         "rank the whole updated weights. A reduce-scatter and an all-gather are the two "
         "halves of an all-reduce: the same bytes as DDP.\n"
         "- **ZeRO-2** also shards the gradients: each layer's gradient is reduce-scattered "
         "as soon as backward makes it, and the full gradient freed. The same calls, the same "
         "bytes; only one layer's full gradient is alive at a time.\n"
         "- **ZeRO-3** also shards the weights: each layer is all-gathered before its "
         "forward and again before its backward. With **prefetch**, the all-gather of the "
         "next layer is issued (`dist_all_gather_async`) before this layer computes and "
         "waited for after, so the transfer can run during the compute.");
    see("https://arxiv.org/abs/1910.02054", "Rajbhandari et al.: ZeRO: Memory Optimizations Toward Training "
                                            "Trillion Parameter Models (2019)");
    mlp_config c = zero_config();
    note("%d ranks, lecture_08's model (lib/mlp.h) at %d layers of %d x %d, a batch of %d, one AdamW "
         "step (lr %g) from the same weights in each method.",
         WORLD, c.layers, c.width, c.width, c.batch, (double)c.lr);
    spawn(zero_main, WORLD, NULL, 0);
    zero_table();
    prefetch_timing();
}

/* Every rank's model: the full weights, or its band of rows of each layer. */
static void zero_weights(const mlp_config *c, int rank, int world_size, int pieces, tensor **w) {
    int64_t rows = c->width / world_size;
    for (int i = 0; i < c->layers; i++) {
        w[i] = init_layer(c, i, get_device(rank));
        if (!pieces) continue;
        tensor *band = row_slice(w[i], rank * rows, (rank + 1) * rows), *mine = to_device(band, w[i]->device);
        tensor_free(band);
        tensor_free(w[i]);
        w[i] = mine;
    }
}

static void adamw_all(const mlp_config *c, tensor **w, tensor *const *g) {
    for (int i = 0; i < c->layers; i++) {
        adamw *opt = adamw_new(w[i], c->lr); /* its state: 2 floats per weight it updates */
        adamw_step(opt, w[i], g[i]);
        adamw_free(opt);
    }
}

/* DDP: full gradients, one all-reduce each, AdamW on everything. */
static void ddp_step(const mlp_config *c, tensor *x, tensor **w, tensor **g, zero_figures *f) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    forward(w, c->layers, x, acts, pre);
    backward(w, c->layers, acts, pre, g);
    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++)
        dist_all_reduce(g[i], DIST_AVG);
    adamw_all(c, w, g);
    int64_t n = (int64_t)c->layers * c->width * c->width;
    f->weights = n, f->grads = n, f->state = 2 * n;
}

/* ZeRO-1: full gradients, then reduce-scatter, AdamW on my band, all-gather. */
static void zero1_step(const mlp_config *c, tensor *x, tensor **w, tensor **gp, zero_figures *f) {
    int p = dist_world_size(), r = dist_rank();
    int64_t rows = c->width / p;
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *g[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        g[i] = empty(c->width, c->width, x->device);
    forward(w, c->layers, x, acts, pre);
    backward(w, c->layers, acts, pre, g);
    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++) {
        dist_reduce_scatter(gp[i], g[i], DIST_AVG); /* my band of the average */
        tensor *band = row_slice(w[i], r * rows, (r + 1) * rows), *mine = to_device(band, x->device);
        adamw_all(&(mlp_config){.layers = 1, .lr = c->lr}, &mine, &gp[i]);
        dist_all_gather(w[i], mine); /* every band, updated, to every rank */
        tensor_free(band);
        tensor_free(mine);
        tensor_free(g[i]);
    }
    int64_t n = (int64_t)c->layers * c->width * c->width;
    f->weights = n, f->grads = n, f->state = 2 * n / p;
}

/* ZeRO-2: each layer's gradient reduce-scattered as backward makes it. */
static void zero2_step(const mlp_config *c, tensor *x, tensor **w, tensor **gp, zero_figures *f) {
    int p = dist_world_size(), r = dist_rank();
    int64_t rows = c->width / p, layer = (int64_t)c->width * c->width;
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    forward(w, c->layers, x, acts, pre);
    tensor *dy = mse_loss_backward(acts[c->layers]);
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *g = empty(c->width, c->width, x->device), *dx = NULL;
        layer_backward(acts[i], pre[i], w[i], dy, g, i > 0 ? &dx : NULL, 0.0f);
        dist_reduce_scatter(gp[i], g, DIST_AVG); /* at once: the full gradient goes */
        tensor_free(g);
        tensor_free(dy);
        dy = dx;
    }
    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++) {
        tensor *band = row_slice(w[i], r * rows, (r + 1) * rows), *mine = to_device(band, x->device);
        adamw_all(&(mlp_config){.layers = 1, .lr = c->lr}, &mine, &gp[i]);
        dist_all_gather(w[i], mine);
        tensor_free(band);
        tensor_free(mine);
    }
    f->weights = c->layers * layer, f->grads = layer + c->layers * layer / p, f->state = 2 * c->layers * layer / p;
}

/* ZeRO-3's order of events, for the check that each gather is issued
 * before the compute it should overlap. */
typedef struct event_log {
    char text[512];
    int issued[MAX_LAYERS]; /* event number of the forward gather of layer i */
    int computed[MAX_LAYERS];
    int n;
} event_log;

static void log_event(event_log *log, const char *what, int layer, int *slot) {
    if (!log) return;
    char item[48];
    snprintf(item, sizeof item, "%s%s %d", log->n ? ", " : "", what, layer);
    strncat(log->text, item, sizeof log->text - strlen(log->text) - 1);
    if (slot) slot[layer] = log->n;
    log->n++;
}

/* How one ZeRO-3 step runs: with prefetch or not, its compute real or
 * modelled, and the time it spent in its all-gathers. */
typedef struct zero3_run {
    int prefetch;      /* each gather issued before the compute before it */
    double forward_ms; /* > 0: a layer's forward is model_compute(forward_ms), each product of its backward the
                          same (layer 0's one, the others' two); 0: the real arithmetic */
    double gathers;    /* seconds this rank spent in all-gathers: issuing them and waiting for them */
    event_log *log;    /* the order of events, or NULL */
    dist_request *backward_first; /* with prefetch: the backward's first gather, issued in the forward */
    tensor *backward_whole;
} zero3_run;

/* Issues the all-gather of layer i's band into a new whole layer; the time
 * the call took counts as time in the gathers. */
static dist_request *gather(zero3_run *run, const tensor *band, tensor **whole) {
    double t0 = now_seconds();
    *whole = empty(band->shape[0] * dist_world_size(), band->shape[1], band->device);
    dist_request *req = dist_all_gather_async(*whole, band);
    run->gathers += now_seconds() - t0;
    return req;
}

/* Waits for a gather: the time it had not finished by. */
static void gathered(zero3_run *run, dist_request *req) {
    double t0 = now_seconds();
    dist_wait(req);
    run->gathers += now_seconds() - t0;
}

/* ZeRO-3 forward. With prefetch, layer i+1's all-gather is in flight while
 * layer i computes, and during the last layer the backward's first gather
 * is; without, each layer is gathered, whole, just before its compute. */
static void zero3_forward(const mlp_config *c, tensor *x, tensor **band, tensor **acts, tensor **pre, zero3_run *run) {
    int layers = c->layers;
    tensor *whole[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
    acts[0] = x;
    if (run->prefetch) {
        req[0] = gather(run, band[0], &whole[0]);
        log_event(run->log, "gather", 0, run->log ? run->log->issued : NULL);
    }
    for (int i = 0; i < layers; i++) {
        if (!run->prefetch) req[i] = gather(run, band[i], &whole[i]);
        gathered(run, req[i]);
        if (run->prefetch && i + 1 < layers) {
            req[i + 1] = gather(run, band[i + 1], &whole[i + 1]); /* the next layer, before this one computes */
            log_event(run->log, "gather", i + 1, run->log ? run->log->issued : NULL);
        }
        if (run->prefetch && i + 1 == layers) { /* the backward's first layer, before the forward's last computes */
            run->backward_first = gather(run, band[i], &run->backward_whole);
            log_event(run->log, "gather for the backward", i, NULL);
        }
        if (run->forward_ms > 0) model_compute(run->forward_ms);
        else acts[i + 1] = layer_forward(acts[i], whole[i], &pre[i]);
        log_event(run->log, "compute", i, run->log ? run->log->computed : NULL);
        tensor_free(whole[i]); /* used: freed at once */
    }
}

/* ZeRO-3 backward: each layer gathered again (but layer 0: its weights are
 * not needed for the data's gradient), with prefetch the next one while
 * this one computes; each gradient reduce-scattered at once. */
static void zero3_backward(const mlp_config *c, tensor **band, tensor **acts, tensor **pre, tensor **gp,
                           zero3_run *run) {
    int layers = c->layers, modelled = run->forward_ms > 0;
    tensor *whole[MAX_LAYERS] = {0}, *dy = modelled ? NULL : mse_loss_backward(acts[layers]);
    dist_request *req[MAX_LAYERS] = {0};
    if (run->prefetch) req[layers - 1] = run->backward_first, whole[layers - 1] = run->backward_whole;
    for (int i = layers - 1; i >= 0; i--) {
        if (i > 0 && !run->prefetch) req[i] = gather(run, band[i], &whole[i]);
        if (i > 0) gathered(run, req[i]);
        if (run->prefetch && i - 1 >= 1) req[i - 1] = gather(run, band[i - 1], &whole[i - 1]);
        tensor *g = modelled ? zeros(c->width, c->width, gp[i]->device) : empty(c->width, c->width, dy->device),
               *dx = NULL;
        if (modelled) model_compute((i > 0 ? 2 : 1) * run->forward_ms); /* dW, and dx but for layer 0 */
        else layer_backward(acts[i], pre[i], i > 0 ? whole[i] : NULL, dy, g, i > 0 ? &dx : NULL, 0.0f);
        dist_reduce_scatter(gp[i], g, DIST_AVG);
        if (i > 0) tensor_free(whole[i]);
        tensor_free(g);
        if (dy) tensor_free(dy);
        dy = dx;
    }
}

static void zero3_step(const mlp_config *c, tensor *x, tensor **band, tensor **gp, zero_figures *f, event_log *log) {
    int p = dist_world_size();
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    zero3_run run = {.prefetch = 1, .log = log};
    zero3_forward(c, x, band, acts, pre, &run);
    zero3_backward(c, band, acts, pre, gp, &run);
    free_saved(c->layers, acts, pre);
    adamw_all(c, band, gp);
    int64_t layer = (int64_t)c->width * c->width;
    /* my bands, plus two whole layers alive at once: the one computing and the one arriving */
    f->weights = c->layers * layer / p + 2 * layer, f->grads = layer + c->layers * layer / p;
    f->state = 2 * c->layers * layer / p;
}

/* Of n floats, the share where |a - b| > by (b NULL: where |a| <= by). */
static double share_where(const tensor *a, const tensor *b, double by) {
    int64_t n = a->numel, count = 0;
    float *ah = malloc((size_t)n * sizeof(float)), *bh = malloc((size_t)n * sizeof(float));
    if (!ah || !bh) lecture_fail("out of memory comparing %lld floats", (long long)n);
    tensor_to_host(a, ah);
    if (b) tensor_to_host(b, bh);
    for (int64_t i = 0; i < n; i++)
        count += b ? fabsf(ah[i] - bh[i]) > by : fabsf(ah[i]) <= by;
    free(ah);
    free(bh);
    return (double)count / (double)n;
}

/* This rank's band of rows of t, as a tensor of its own. */
static tensor *band_of(tensor *t, int rank, int world_size) { return chunk_of(t, rank, t->shape[0] / world_size); }

/* A ZeRO method against DDP on this rank: its gradient pieces (rounding:
 * lib/mlp.h's gradient_tolerance) and its weights after AdamW. AdamW's
 * first step moves a weight by lr g / (|g| + eps), about lr sign(g): two
 * runs whose gradients differ by rounding e can be more than lr/2 apart
 * only where a gradient is within e of zero and its sign may flip. So the
 * share of weights more than lr/2 from DDP's is at most the share of DDP's
 * gradients within 2e of zero; a band never gathered or never updated
 * leaves about all of its weights lr away. */
static void against_ddp(int m, int rank, const mlp_config *c, tensor **w, tensor **gp, tensor **w_ddp, tensor **g_ddp,
                        int banded_weights) {
    int p = dist_world_size();
    double diff = 0, size = 0, off = 0, near_zero = 0;
    for (int i = 0; i < c->layers; i++)
        size = fmax(size, largest(g_ddp[i]));
    double tol = gradient_tolerance(c) * size;
    for (int i = 0; i < c->layers; i++) {
        tensor *g_band = band_of(g_ddp[i], rank, p), *w_ref = banded_weights ? band_of(w_ddp[i], rank, p) : w_ddp[i];
        tensor *g_ref = banded_weights ? g_band : g_ddp[i];
        diff = fmax(diff, max_abs_diff(gp[i], g_band));
        off += share_where(w[i], w_ref, c->lr / 2) / c->layers;
        near_zero += share_where(g_ref, NULL, 2 * tol) / c->layers;
        if (banded_weights) tensor_free(w_ref);
        tensor_free(g_band);
    }
    note_verbatim("Rank %d: %s: gradient pieces max |ZeRO - DDP| = %.3g (tolerance %.3g); weights more than "
                  "lr/2 from DDP's: %.4f%% (at most %.4f%%)",
                  rank, METHOD_NAMES[m], diff, tol, 100 * off, 100 * near_zero);
    check(diff <= tol, "%s: the gradient pieces equal DDP's (%.3g <= %.3g)", METHOD_NAMES[m], diff, tol);
    /* The weights, by the share rule above. */
    check(off <= near_zero, "%s: the weights after AdamW equal DDP's (%.4f%% <= %.4f%% off by lr/2)", METHOD_NAMES[m],
          100 * off, 100 * near_zero);
}

static void counted(zero_figures *f, const dist_traffic *before) {
    dist_traffic d = dist_traffic_since(before);
    f->nominal = dist_traffic_nominal(&d);
    f->calls = dist_traffic_calls(&d);
}

static void free_layers(int n, tensor **t) {
    for (int i = 0; i < n; i++)
        tensor_free(t[i]);
}

static void zero_main(int rank, int world_size, void *args) {
    mlp_config c = zero_config();
    int device = get_device(rank);
    int64_t local = c.batch / world_size, rows = c.width / world_size;
    tensor *data = make_data(&c, device), *x = row_slice(data, rank * local, (rank + 1) * local);
    tensor *w[METHODS][MAX_LAYERS], *g[METHODS][MAX_LAYERS];
    zero_figures f[METHODS];
    memset(f, 0, sizeof f);
    event_log log;
    memset(&log, 0, sizeof log);
    for (int m = 0; m < METHODS; m++) {
        zero_weights(&c, rank, world_size, m == ZERO3, w[m]);
        for (int i = 0; i < c.layers; i++)
            g[m][i] = m == DDP ? empty(c.width, c.width, device) : empty(rows, c.width, device);
        dist_traffic before = dist_traffic_now();
        if (m == DDP) ddp_step(&c, x, w[m], g[m], &f[m]);
        if (m == ZERO1) zero1_step(&c, x, w[m], g[m], &f[m]);
        if (m == ZERO2) zero2_step(&c, x, w[m], g[m], &f[m]);
        if (m == ZERO3) zero3_step(&c, x, w[m], g[m], &f[m], &log);
        counted(&f[m], &before);
        if (m != DDP) against_ddp(m, rank, &c, w[m], g[m], w[DDP], g[DDP], m == ZERO3);
    }
    int prefetched = 1;
    for (int i = 1; i < c.layers; i++)
        prefetched &= log.issued[i] < log.computed[i - 1];
    if (rank == 0) note_verbatim("Rank 0, ZeRO-3 forward, in order: %s", log.text);
    check(prefetched, "ZeRO-3: each layer's all-gather issued before the layer before it computes");
    /* An all-reduce is a reduce-scatter and an all-gather: the same bytes. */
    check(f[ZERO1].nominal == f[DDP].nominal && f[ZERO2].nominal == f[DDP].nominal,
          "ZeRO-1 and ZeRO-2: the same bytes as DDP (%lld, %lld, %lld)", (long long)f[ZERO1].nominal,
          (long long)f[ZERO2].nominal, (long long)f[DDP].nominal);
    spawn_return(f, sizeof f);
    for (int m = 0; m < METHODS; m++) {
        free_layers(c.layers, w[m]);
        free_layers(c.layers, g[m]);
    }
    tensor_free(x);
    tensor_free(data);
}

static void zero_table(void) {
    zero_figures f[METHODS];
    if (spawn_result(0, f, sizeof f) != sizeof f) lecture_fail("rank 0 returned no result");
    mlp_config c = zero_config();
    table_t *t = table_new("One step on %d ranks, rank 0: model state held at the peak, and bytes sent", WORLD);
    table_column(t, "method", NULL, "%s");
    table_column(t, "weights", "floats", "%lld");
    table_column(t, "gradients", "floats", "%lld");
    table_column(t, "AdamW state", "floats", "%lld");
    table_column(t, "bytes sent, formula", "bytes", "%lld");
    table_column(t, "calls", NULL, "%lld");
    for (int m = 0; m < METHODS; m++)
        table_row(t, METHOD_NAMES[m], (long long)f[m].weights, (long long)f[m].grads, (long long)f[m].state,
                  (long long)f[m].nominal, (long long)f[m].calls);
    table_show(t);
    double layer = (double)c.width * c.width * sizeof(float), p = WORLD;
    note("A layer is %.0f bytes. DDP all-reduces each of the %d layers' gradients, "
         "2 (p-1)/p of a layer each: %.0f bytes. ZeRO-1 and ZeRO-2 send the same %.0f (a "
         "reduce-scatter and an all-gather per layer) and hold less: AdamW's state for "
         "their piece only, and ZeRO-2 one layer's full gradient at a time. ZeRO-3 "
         "gathers %d layers forward and %d backward and reduce-scatters %d gradients, "
         "(p-1)/p of a layer each: %.0f bytes, %.2f times DDP's. The floats are accounting: "
         "what each step function keeps at its peak, written beside it, not a measurement "
         "of memory; the bytes are the runtime's tally of the calls each rank made.",
         layer, c.layers, 2 * c.layers * (p - 1) / p * layer, 2 * c.layers * (p - 1) / p * layer, c.layers,
         c.layers - 1, c.layers, (3 * c.layers - 1) * (p - 1) / p * layer, (3 * c.layers - 1) / (2.0 * c.layers));
    check(f[ZERO3].nominal == (int64_t)((3 * c.layers - 1) * (p - 1) / p * layer),
          "ZeRO-3: %lld bytes sent, as the formula says", (long long)f[ZERO3].nominal);
    note("Prefetch keeps two whole layers alive at once (the one computing, the one arriving): that is its "
         "memory price. The order above is checked; whether the transfer really hides behind the compute is a "
         "matter of time, measured next.");
}

/* ---- does the prefetch hide the gathers? ---- */

static void prefetch_main(int rank, int world_size, void *args);

/* Layers large enough that a gather takes a measurable time, and enough of
 * them that the one gather nothing can hide (the first) is a small part:
 * 8 of 512 x 512 (1 MiB each; a rank's band 256 KiB), a batch of 64. */
static mlp_config prefetch_config(void) {
    mlp_config c = {.batch = 64, .width = 512, .layers = 8, .steps = 1, .lr = 1e-3f};
    return c;
}

/* The modelled compute is sized from this run's own communication: a
 * layer's forward takes PREFETCH_TIMES as long as one gather of a layer
 * took here (at least PREFETCH_MIN_MS), each product of its backward the
 * same. A gather then has several times its own length to hide in, as on
 * GPUs where FSDP's layers are large enough for their compute to cover
 * their gathers. */
#define PREFETCH_TIMES 4.0
#define PREFETCH_MIN_MS 10.0
enum { PREFETCH_REPS = 5 };

/* The bound the modelled run must meet: the prefetch hides at least 70% of
 * the gathers' time, measured against the same step without prefetch
 * (1 - time in gathers with prefetch / time in gathers without; each the
 * fastest of PREFETCH_REPS steps, since other work can only slow a step
 * down). A step of L = 8 layers gathers 2L - 1 = 15 times (every layer
 * forward, all but layer 0 backward), all of the same bytes. With prefetch
 * only the first, layer 0's forward, has no compute before it to hide
 * behind: 1/15 of the time, so at best 14/15 = 93% is hidden. Every other
 * gather is issued a whole layer's compute before it is waited for,
 * PREFETCH_TIMES times a gather's time at least: one slowed by the load up
 * to that many times still hides. 70% leaves another 23% of the gathers'
 * time (three gathers' worth) to what a loaded machine adds: a gather's
 * start that waits for the progress thread to let go of the library, a rank
 * that wakes late. The steps are timed regions (dist_timer), where the
 * runtime does not hash a send's buffer: its reads would count as exposed
 * gather time. Seen here on 2 cores (soaks of the whole lecture,
 * docs/lecture_scaling.md): 85 to 94% on rank 0 in 20 of 20 runs at loads
 * of 7 to 12, and 93 to 99% in 8 of 8 beside two busy loops (model_compute
 * moves the transfers in flight itself); with the fastest of 3, one rank of
 * one run in 20 saw 53%. A step that waits for each gather at once (or
 * prefetches nothing) hides about 0% and fails. */
#define PREFETCH_HIDDEN_AT_LEAST 0.70

typedef struct prefetch_figures {
    double step[2][2];    /* [real, modelled][as needed, prefetched]: the slowest rank's step, fastest, s */
    double gathers[2][2]; /* this rank's time in its gathers (issuing and waiting), fastest, s */
    double gather_alone;  /* one layer's all-gather, blocking, median of 5, s */
    double forward_ms;    /* the modelled forward of a layer */
} prefetch_figures;

static void prefetch_timing(void) {
    progress("ZeRO-3 prefetch, timed");
    note("### Does the prefetch hide the gathers?");
    mlp_config c = prefetch_config();
    note("The same ZeRO-3 step, timed with the gathers issued as needed (each waited for at once) and "
         "prefetched, taken in turn %d times each (so load on the machine falls on both alike), on %d layers of "
         "%d x %d. Twice: once with the MLP's real arithmetic on this CPU, once with each layer's compute "
         "**modelled** (`model_compute`: the rank sleeps, its core free, as a GPU computes while its host and "
         "network are free), sized from this run's own gathers. What counts is the time a rank spends in its "
         "gathers: issuing them and waiting for them to finish.",
         PREFETCH_REPS, c.layers, c.width, c.width);
    spawn(prefetch_main, WORLD, NULL, 0);
    prefetch_figures f;
    if (spawn_result(0, &f, sizeof f) != sizeof f) lecture_fail("rank 0 returned no result");
    table_t *t = table_new("ZeRO-3 on %d ranks, %d layers of %d x %d, rank 0: the fastest of %d steps each", WORLD,
                           c.layers, c.width, c.width, PREFETCH_REPS);
    table_column(t, "compute", NULL, "%s");
    table_column(t, "step, gathers as needed", "ms", "%.2f");
    table_column(t, "step, prefetched", "ms", "%.2f");
    table_column(t, "time in gathers, as needed", "ms", "%.2f");
    table_column(t, "time in gathers, prefetched", "ms", "%.2f");
    table_column(t, "the gathers' time hidden", NULL, "%.0f%%");
    char modelled[96];
    snprintf(modelled, sizeof modelled, "modelled: %.1f ms a layer forward, per product backward", f.forward_ms);
    const char *names[2] = {"real: this CPU's arithmetic", modelled};
    double hidden[2];
    for (int m = 0; m < 2; m++) {
        hidden[m] = 1 - f.gathers[m][1] / f.gathers[m][0];
        table_row(t, names[m], f.step[m][0] * 1e3, f.step[m][1] * 1e3, f.gathers[m][0] * 1e3, f.gathers[m][1] * 1e3,
                  100 * hidden[m]);
    }
    table_show(t);
    char real_said[160];
    if (hidden[0] >= 0)
        snprintf(real_said, sizeof real_said, "the prefetch hid %.0f%% of the gathers' time", 100 * hidden[0]);
    else
        snprintf(real_said, sizeof real_said,
                 "with prefetch the step spent %.0f%% more time in its gathers than without", -100 * hidden[0]);
    note("The modelled run shows the lesson: with each layer's compute %.1f ms (%.1f times one gather of a "
         "layer here, %.2f ms), the prefetch hid %.0f%% of the time rank 0 spent in gathers without it, and its step "
         "took %.2f ms against %.2f. At best it hides %d of the %d gathers: layer 0's, the first, has nothing before "
         "it to hide behind. The real run says what this machine does with real arithmetic: %s. Four ranks share "
         "%ld cores, so while a rank multiplies, the gather it started waits for a core, as the other ranks' "
         "arithmetic does; a GPU computes on the device and leaves its host, and the link, free.",
         quoted(f.forward_ms), f.forward_ms / (f.gather_alone * 1e3), f.gather_alone * 1e3, quoted(100 * hidden[1]),
         quoted(f.step[1][1] * 1e3), quoted(f.step[1][0] * 1e3), 2 * c.layers - 2, 2 * c.layers - 1, real_said,
         sysconf(_SC_NPROCESSORS_ONLN));
}

/* One layer's all-gather, blocking, the median of 5 after a warm-up: what
 * sizes the modelled compute. */
static double one_gather_seconds(const tensor *band) {
    tensor *whole = empty(band->shape[0] * dist_world_size(), band->shape[1], band->device);
    double t[5];
    dist_all_gather(whole, band); /* warm-up: carries the runtime's check */
    for (int k = 0; k < 5; k++) {
        dist_timer timer = {0};
        dist_timer_start(&timer);
        dist_all_gather(whole, band);
        t[k] = dist_timer_stop(&timer);
    }
    tensor_free(whole);
    return median_of(t, 5);
}

/* One ZeRO-3 step, forward and backward, timed: the slowest rank's time,
 * and this rank's time in its gathers into *gathers. */
static double timed_zero3_step(const mlp_config *c, tensor *x, tensor **band, tensor **gp, int prefetch,
                               double forward_ms, double *gathers) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    zero3_run run = {.prefetch = prefetch, .forward_ms = forward_ms};
    dist_timer timer = {0};
    dist_timer_start(&timer);
    zero3_forward(c, x, band, acts, pre, &run);
    zero3_backward(c, band, acts, pre, gp, &run);
    double seconds = dist_timer_stop(&timer);
    if (forward_ms == 0) free_saved(c->layers, acts, pre);
    *gathers = run.gathers;
    return seconds;
}

static void prefetch_main(int rank, int world_size, void *args) {
    mlp_config c = prefetch_config();
    int device = get_device(rank);
    int64_t local = c.batch / world_size;
    tensor *data = make_data(&c, device), *x = row_slice(data, rank * local, (rank + 1) * local);
    tensor *band[MAX_LAYERS], *gp[MAX_LAYERS];
    zero_weights(&c, rank, world_size, 1, band);
    for (int i = 0; i < c.layers; i++)
        gp[i] = empty(c.width / world_size, c.width, device);
    prefetch_figures f = {0};
    f.gather_alone = one_gather_seconds(band[0]);
    f.forward_ms = fmax(PREFETCH_MIN_MS, PREFETCH_TIMES * f.gather_alone * 1e3);
    for (int m = 0; m < 2; m++) {
        double ms = m ? f.forward_ms : 0, step[2][PREFETCH_REPS], gathers[2][PREFETCH_REPS], unused;
        timed_zero3_step(&c, x, band, gp, 1, ms, &unused); /* warm-up: every call's check made once */
        for (int k = 0; k < PREFETCH_REPS; k++)
            for (int pf = 0; pf < 2; pf++) /* in turn: as needed, prefetched */
                step[pf][k] = timed_zero3_step(&c, x, band, gp, pf, ms, &gathers[pf][k]);
        for (int pf = 0; pf < 2; pf++) {
            f.step[m][pf] = fastest_of(step[pf], PREFETCH_REPS);
            f.gathers[m][pf] = fastest_of(gathers[pf], PREFETCH_REPS);
        }
    }
    double hidden = 1 - f.gathers[1][1] / f.gathers[1][0];
    check(hidden >= PREFETCH_HIDDEN_AT_LEAST,
          "ZeRO-3 prefetch, modelled compute: the gathers' time hidden is at least %.0f%% (%.0f%%: %.2f ms waiting "
          "against %.2f ms without prefetch)",
          100 * PREFETCH_HIDDEN_AT_LEAST, 100 * hidden, f.gathers[1][1] * 1e3, f.gathers[1][0] * 1e3);
    if (rank == 0) spawn_return(&f, sizeof f);
    free_layers(c.layers, band);
    free_layers(c.layers, gp);
    tensor_free(x);
    tensor_free(data);
}

/* ------------------------------------------------------------------ */
/* Memory: activations, recomputation, mixed precision                 */
/* ------------------------------------------------------------------ */

/* A batch of 256 of width 256: 256 KiB per activation. */
static mlp_config memory_config(void) {
    mlp_config c = {.batch = 256, .width = 256, .layers = 4, .steps = 1, .lr = 1e-3f};
    return c;
}

/* The real steps: MEMORY_REPS of each, taken in turn (plain, recomputed,
 * plain, ...), so that load on the machine, and whatever the first run
 * warms up, falls on both alike; each method's fastest is its time, the
 * fastest and the slowest its spread. */
enum { MEMORY_REPS = 5 };

/* The modelled steps: every matrix product model_compute(PRODUCT_MS) and
 * nothing else, MODELLED_REPS of each in turn. On a GPU the products are
 * the step's time; GELU and the loss, elementwise, are a small part. */
#define PRODUCT_MS 30.0
enum { MODELLED_REPS = 5, MODELLED_ROUNDS = 3, TIMED_MAX = MODELLED_REPS * MODELLED_ROUNDS };
/* The bound: the modelled step with recomputation takes (4L - 1) / (3L - 1)
 * = 15/11 = 1.36 times as long (L = 4), within 0.1. A sleep never ends
 * early, so each step is at least its products' time; what it adds is the
 * time between them (waking up, recording the span), e on the plain step's
 * 11 products and e' on the recomputed step's 15. The ratio stays within
 * 0.1 while e' <= 11 x 30 x 1.464 - 15 x 30 = 33 ms and
 * e <= 15 x 30 / 1.264 - 11 x 30 = 26 ms: 2.2 ms a product, against the
 * 0.1 ms a sleep overshoots on a quiet machine. Each method's time is the
 * fastest of its MODELLED_REPS steps (other work can only slow a step
 * down). Seen here: at loads of 7 to 12, 20 of 20 runs within 0.03 with
 * 20 ms products; with two busy loops beside a lecture run at nice 5, a
 * product woke 2 to 3 ms late and 20 ms products fell outside (1.25, 1.26,
 * 1.51, 1.53), hence 30: 1.34 to 1.40 in 8 of 8 such runs. At loads of
 * 12 to 15 (several test suites beside it) the fastest of 5 still missed
 * once (1.553: every one of the recomputed steps woke late): a round
 * outside the bound is followed by another MODELLED_REPS steps of each, up
 * to MODELLED_ROUNDS rounds, the fastest of all counting, and the table
 * says how many ran. A step that recomputes nothing (11 products: 1.0) or
 * recomputes twice (19: 1.73) fails whatever the rounds: more steps only
 * bring each method's time down to its products' own. */
#define RECOMPUTE_RATIO_WITHIN 0.1

/* Forward that keeps only each layer's input: the pre-activation h = x W
 * is dropped as soon as GELU has used it. */
static void forward_checkpointed(tensor *const *w, int layers, tensor *x, tensor **acts) {
    acts[0] = x;
    for (int i = 0; i < layers; i++) {
        tensor *h;
        acts[i + 1] = layer_forward(acts[i], w[i], &h);
        tensor_free(h); /* recomputed in backward */
    }
}

/* Backward that recomputes each layer's h = x W from its saved input: one
 * more matrix product per layer. */
static void backward_recomputing(tensor *const *w, int layers, tensor **acts, tensor **grads) {
    tensor *dy = mse_loss_backward(acts[layers]);
    for (int i = layers - 1; i >= 0; i--) {
        tensor *h = matmul(acts[i], w[i]), *dx = NULL; /* the recomputation */
        layer_backward(acts[i], h, w[i], dy, grads[i], i > 0 ? &dx : NULL, 0.0f);
        tensor_free(h);
        tensor_free(dy);
        dy = dx;
    }
}

/* One step, plain or with recomputation: the bytes of tensor storage on the
 * CPU that forward left alive for backward (the step's peak of saved
 * activations), counted by the runtime (tensor_bytes_live). */
static int64_t one_step(const mlp_config *c, tensor *const *w, tensor *x, tensor **g, int recompute) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    int64_t before = tensor_bytes_live(-1);
    if (recompute) forward_checkpointed(w, c->layers, x, acts);
    else forward(w, c->layers, x, acts, pre);
    int64_t alive = tensor_bytes_live(-1) - before;
    if (recompute) backward_recomputing(w, c->layers, acts, g);
    else backward(w, c->layers, acts, pre, g);
    for (int i = 1; i <= c->layers; i++)
        tensor_free(acts[i]);
    if (!recompute)
        for (int i = 0; i < c->layers; i++)
            tensor_free(pre[i]);
    return alive;
}

/* The matrix products of one step: forward's L, backward's dW for every
 * layer and dx for all but layer 0 (the data needs no gradient), and with
 * recomputation each layer's h again. */
static int products(int layers, int recompute) { return layers + 2 * layers - 1 + (recompute ? layers : 0); }

/* The same step with every product modelled, in the same order, and no
 * arithmetic: forward's products, then per layer from the last the
 * recomputed h, dW, and dx (not for layer 0). */
static void modelled_step(int layers, int recompute) {
    for (int i = 0; i < layers; i++)
        model_compute(PRODUCT_MS); /* h = x W */
    for (int i = layers - 1; i >= 0; i--) {
        if (recompute) model_compute(PRODUCT_MS); /* h = x W again */
        model_compute(PRODUCT_MS);                /* dW = x^T dh */
        if (i > 0) model_compute(PRODUCT_MS);     /* dx = dh W^T */
    }
}

/* What the timings found: [plain, recomputed] medians and spreads. */
typedef struct step_timing {
    double median[2], fastest[2], slowest[2];
    int steps; /* of each method */
} step_timing;

static void summarize_times(double t[2][TIMED_MAX], int n, step_timing *s) {
    s->steps = n;
    for (int r = 0; r < 2; r++) {
        s->fastest[r] = s->slowest[r] = t[r][0];
        for (int k = 1; k < n; k++)
            s->fastest[r] = fmin(s->fastest[r], t[r][k]), s->slowest[r] = fmax(s->slowest[r], t[r][k]);
        s->median[r] = median_of(t[r], n);
    }
}

static step_timing time_real_steps(const mlp_config *c, tensor *const *w, tensor *x, tensor **g) {
    double t[2][TIMED_MAX];
    step_timing s;
    one_step(c, w, x, g, 0); /* untimed: they also warm the BLAS up */
    one_step(c, w, x, g, 1);
    for (int k = 0; k < MEMORY_REPS; k++)
        for (int r = 0; r < 2; r++) {
            double start = now_seconds();
            one_step(c, w, x, g, r);
            t[r][k] = now_seconds() - start;
        }
    summarize_times(t, MEMORY_REPS, &s);
    return s;
}

static step_timing time_modelled_steps(int layers) {
    double t[2][TIMED_MAX], want = (double)products(layers, 1) / products(layers, 0);
    step_timing s;
    int n = 0;
    for (int round = 0; round < MODELLED_ROUNDS; round++) {
        for (int k = 0; k < MODELLED_REPS; k++, n++)
            for (int r = 0; r < 2; r++) {
                double start = now_seconds();
                modelled_step(layers, r);
                t[r][n] = now_seconds() - start;
            }
        summarize_times(t, n, &s);
        if (fabs(s.fastest[1] / s.fastest[0] - want) <= RECOMPUTE_RATIO_WITHIN || round + 1 == MODELLED_ROUNDS) break;
        progress("memory: modelled steps %.3f times apart against %.3f: %d more of each", s.fastest[1] / s.fastest[0],
                 want, MODELLED_REPS);
    }
    return s;
}

/* One matrix product of the step's shape (all of them are B x W by W x W
 * here, B = W), the median of 11: what the extra products cost alone. */
static double one_product_seconds(const tensor *x, const tensor *w) {
    double t[11];
    for (int k = -1; k < 11; k++) {
        double start = now_seconds();
        tensor *h = matmul(x, w);
        if (k >= 0) t[k] = now_seconds() - start;
        tensor_free(h);
    }
    return median_of(t, 11);
}

static void activation_memory(void);
static void mixed_precision(void);

static void memory(void) {
    progress("memory");
    note("## Memory: activations and recomputation");
    note("Sharding model state (ZeRO) leaves the *activations*: what forward keeps for "
         "backward. In this MLP, layer i keeps its input x and its pre-activation h = x W "
         "(GELU's derivative needs h): for L layers of a batch B of width W, the outputs of "
         "all layers and the L pre-activations, 2 L B W floats. **Recomputation** "
         "(activation checkpointing) keeps only each layer's input and computes h = x W "
         "again in backward: half the activations, for one more matrix product per layer. "
         "Forward makes L products, backward 2 L - 1 (each layer's dW, and dx for all but the "
         "first, whose input is the data): 4 L - 1 against 3 L - 1, about a third more.");
    see("https://arxiv.org/abs/1604.06174", "Chen et al.: Training Deep Nets with Sublinear Memory Cost (2016)");
    activation_memory();
    mixed_precision();
}

static void activation_memory(void) {
    mlp_config c = memory_config();
    tensor *x = make_data(&c, -1), *w[MAX_LAYERS], *g[MAX_LAYERS];
    for (int i = 0; i < c.layers; i++) {
        w[i] = init_layer(&c, i, -1);
        g[i] = empty(c.width, c.width, -1);
    }
    int64_t kept[2] = {one_step(&c, w, x, g, 0), one_step(&c, w, x, g, 1)};
    double act = (double)c.batch * c.width * sizeof(float), formula[2] = {2 * c.layers * act, c.layers * act};
    table_t *t = table_new("One step of %d layers, batch %d, width %d, on the CPU", c.layers, c.batch, c.width);
    table_column(t, "method", NULL, "%s");
    table_column(t, "activations kept, measured", "bytes", "%lld");
    table_column(t, "formula", "bytes", "%.0f");
    table_column(t, "matrix products", NULL, "%d");
    const char *names[2] = {"keep everything", "recompute h"};
    for (int r = 0; r < 2; r++)
        table_row(t, names[r], (long long)kept[r], formula[r], products(c.layers, r));
    table_show(t);
    /* The count is of tensor storage only (no headers, stacks or allocator
     * rounding), so it equals the formula to the byte; a step that kept one
     * activation more or fewer would be 256 KiB off. */
    check((double)kept[0] == formula[0] && (double)kept[1] == formula[1],
          "activations: the tensors alive hold what the formula says (%lld and %lld bytes, formula %.0f and %.0f)",
          (long long)kept[0], (long long)kept[1], formula[0], formula[1]);
    note("Measured between forward and backward as the bytes of tensor storage alive "
         "(`tensor_bytes_live()`: the tensors' data, not their headers or the allocator's "
         "rounding, so the table compares it with the formula to the byte): recomputation "
         "kept %.0f bytes against %.0f, half.",
         quoted((double)kept[1]), quoted((double)kept[0]));
    step_timing real = time_real_steps(&c, w, x, g), modelled = time_modelled_steps(c.layers);
    double product = one_product_seconds(x, w[0]);
    table_t *tt = table_new("The step's time, plain and with recomputation, taken in turn");
    table_column(tt, "compute", NULL, "%s");
    table_column(tt, "keep everything, median", "ms", "%.2f");
    table_column(tt, "fastest", "ms", "%.2f");
    table_column(tt, "slowest", "ms", "%.2f");
    table_column(tt, "recompute h, median", "ms", "%.2f");
    table_column(tt, "fastest", "ms", "%.2f");
    table_column(tt, "slowest", "ms", "%.2f");
    table_column(tt, "recompute / keep, fastest", NULL, "%.2f");
    table_column(tt, "one product", "ms", "%.3f");
    table_column(tt, "products, of a plain step", NULL, "%.0f%%");
    table_column(tt, "recompute / keep, by the products alone", NULL, "%.2f");
    char real_name[64], modelled_name[96];
    snprintf(real_name, sizeof real_name, "real: this CPU, %d steps each", MEMORY_REPS);
    snprintf(modelled_name, sizeof modelled_name, "modelled: each product %.0f ms, %d steps each", PRODUCT_MS,
             modelled.steps);
    const step_timing *rows[2] = {&real, &modelled};
    const char *row_names[2] = {real_name, modelled_name};
    /* What the products alone would take: each one's time (measured for the
     * real run, the modelled one's PRODUCT_MS) times their count, against
     * the plain step; and the ratio the extra L products alone would give. */
    double product_s[2] = {product, PRODUCT_MS * 1e-3}, share[2], by_products[2];
    for (int m = 0; m < 2; m++) {
        share[m] = products(c.layers, 0) * product_s[m] / rows[m]->fastest[0];
        by_products[m] = 1 + c.layers * product_s[m] / rows[m]->fastest[0];
        table_row(tt, row_names[m], rows[m]->median[0] * 1e3, rows[m]->fastest[0] * 1e3, rows[m]->slowest[0] * 1e3,
                  rows[m]->median[1] * 1e3, rows[m]->fastest[1] * 1e3, rows[m]->slowest[1] * 1e3,
                  rows[m]->fastest[1] / rows[m]->fastest[0], product_s[m] * 1e3, 100 * share[m], by_products[m]);
    }
    table_show(tt);
    double ratio = modelled.fastest[1] / modelled.fastest[0],
           want = (double)products(c.layers, 1) / products(c.layers, 0);
    check(fabs(ratio - want) <= RECOMPUTE_RATIO_WITHIN,
          "recomputation, modelled compute: the step takes (4L - 1) / (3L - 1) = %.3f times as long, within %.1f "
          "(%.3f)",
          want, RECOMPUTE_RATIO_WITHIN, ratio);
    note("The modelled run shows the cost the lesson names: with every matrix product %.0f ms of modelled compute "
         "and nothing else, the step with recomputation took %.2f times as long, its %d products against %d "
         "(%.2f).",
         PRODUCT_MS, quoted(ratio), quoted(products(c.layers, 1)), quoted(products(c.layers, 0)), want);
    /* The measured ratio against the products' own, "within" the steps'
     * spread: the larger of the two methods' (slowest - fastest) / median. */
    double measured = real.fastest[1] / real.fastest[0], expected = by_products[0];
    double spread = fmax((real.slowest[0] - real.fastest[0]) / real.fastest[0],
                         (real.slowest[1] - real.fastest[1]) / real.fastest[1]);
    const char *verdict = fabs(measured - expected) <= spread
                                  ? "within the steps' own spread of what the products predict"
                          : measured > expected ? "more than the products alone account for: the rest is not the "
                                                  "products' arithmetic, and the steps' spread says how much of it "
                                                  "this machine's other work can be"
                                                : "less than the products alone account for, by more than the steps' "
                                                  "spread";
    note("The real run says what this CPU shows. Taken in turn, recomputation's step took %.2f times as long as "
         "keeping everything (the fastest of each; each method's steps spread from %.2f to %.2f ms and from %.2f to "
         "%.2f). One "
         "product of these shapes takes %.3f ms here, so the %d products of a plain step are %.0f%% of it, and the "
         "%d extra ones alone would make it %.2f times as long: the measured %.2f is %s. %s",
         quoted(measured), quoted(real.fastest[0] * 1e3), quoted(real.slowest[0] * 1e3), quoted(real.fastest[1] * 1e3),
         quoted(real.slowest[1] * 1e3), quoted(product * 1e3), quoted(products(c.layers, 0)), quoted(100 * share[0]),
         quoted(c.layers), quoted(expected), quoted(measured), verdict,
         share[0] < 0.5 ? "On this CPU the products are the smaller part of a step (GELU, its derivative and the "
                          "allocations, in plain loops, take the rest), so the third more products the lesson names "
                          "is not a third more time here. On a GPU the products are most of a step: the modelled run "
                          "is the nearer picture."
                        : "The products are most of the step here, as on a GPU.");
    free_layers(c.layers, w);
    free_layers(c.layers, g);
    tensor_free(x);
}

static void mixed_precision(void) {
    note("### Mixed precision: bytes per parameter (accounting)");
    note("Training in bf16 with AdamW keeps, per parameter: the bf16 weight (2 bytes) and "
         "gradient (2), and in fp32 a master copy of the weight and AdamW's two moments "
         "(4 + 4 + 4 = 12): 16 bytes in the ZeRO paper's accounting, the same as fp32 training's "
         "4 + 4 + 8. Stacks that accumulate gradients in fp32 (Megatron-LM's default for bf16, a "
         "4-byte gradient instead of a 2-byte one) keep 18. The saving of mixed precision is in "
         "the activations (2 bytes each instead of 4) and in the speed of bf16 matrix products, "
         "not in model state; FP8 training, on recent GPUs, takes the products' inputs down to 1 "
         "byte and, in the common recipes, keeps the same fp32 master weights and moments. This is "
         "accounting, nothing here is measured: lecture_precision measures these bytes on the heap.");
    table_t *t = table_new("Model state per parameter, bytes");
    table_column(t, "training", NULL, "%s");
    table_column(t, "weights", "bytes", "%d");
    table_column(t, "gradients", "bytes", "%d");
    table_column(t, "fp32 master weights", "bytes", "%d");
    table_column(t, "AdamW moments", "bytes", "%d");
    table_column(t, "total", "bytes", "%d");
    table_column(t, "per rank, ZeRO-3 on 4 ranks", "bytes", "%.1f");
    table_row(t, "fp32", 4, 4, 0, 8, 16, 16.0 / WORLD);
    table_row(t, "bf16 mixed precision", 2, 2, 4, 8, 16, 16.0 / WORLD);
    table_row(t, "bf16, fp32 gradients (Megatron-LM)", 2, 4, 4, 8, 18, 18.0 / WORLD);
    table_show(t);
}

/* ------------------------------------------------------------------ */
/* Summary                                                             */
/* ------------------------------------------------------------------ */

static void summary(void) {
    mlp_config z = zero_config();
    note("## Summary");
    note("| strategy | what is cut | communication |\n"
         "|---|---|---|\n"
         "| expert parallel | the experts | two all-to-alls of tokens per MoE layer |\n"
         "| tensor parallel | heads, MLP columns | an all-reduce per sub-block |\n"
         "| sequence parallel | tokens outside attention and MLP | reduce-scatter + all-gather, the same bytes |\n"
         "| context parallel, ring | tokens everywhere | keys and values round a ring, dK and dV round with them |\n"
         "| context parallel, Ulysses | tokens, heads for attention | four all-to-alls per attention layer |\n"
         "| 2-D mesh | both, on separate groups | each kind on its own links |\n"
         "| ZeRO-1, ZeRO-2 | optimizer state, gradients | DDP's bytes, as reduce-scatter + all-gather |\n"
         "| ZeRO-3 | the weights too | up to 1.5 times DDP's bytes (%.3g here), gathers prefetched |",
         (3 * z.layers - 1) / (2.0 * z.layers));
    if (gpu_count() == 0)
        note("Each strategy ran on 4 CPU ranks here, over Open MPI. On GPUs the same calls go "
             "to NCCL; that path compiles but has not been run for this lecture, and the "
             "row-wise steps of `lectures/lecture_scaling/transformer.c` copy to the host there.");
    else
        note("This run had %d GPU(s). The GPU path of this lecture had not been run before it "
             "was written: the results above say whether it agrees, and the row-wise steps of "
             "`lectures/lecture_scaling/transformer.c` copy to the host, so no timing here speaks for a GPU.",
             gpu_count());
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_scaling); }
