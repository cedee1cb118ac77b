/*
 * mesh.c: data x pipeline x tensor parallelism on one mesh of 8 ranks, trained and checked against one device.
 *
 * rank = dp * 4 + pp * 2 + tp. Tensor parallelism is innermost because its all-reduces come in every layer pair
 * of every micro-batch: consecutive ranks share a node when a launcher fills nodes in rank order (mpirun, Slurm),
 * so the busiest group gets the node's fastest links (NVLink). Pipeline stages send one activation per
 * micro-batch, and data-parallel replicas all-reduce gradients once a step: both can cross nodes.
 *
 * Each stage holds half the MLP's layers, as pairs: the first of a pair cut by columns, the second by rows
 * (Megatron-LM), so a pair needs one all-reduce forward (the row-parallel product's partial sums) and one
 * backward (the column-parallel layer's input gradient). Micro-batches run 1F1B across the two stages; the
 * data-parallel replicas each take half the batch and average their gradients before AdamW's step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "lib/mlp.h"
#include "lecture_pipelines/mesh.h"

enum { DP = 2, PP = 2, TP = 2, WORLD = DP * PP * TP };
enum { MESH_LAYERS = 8, PER_STAGE = MESH_LAYERS / PP, PAIRS = PER_STAGE / 2, MICRO = 4, STEPS = 3 };
enum { AX_TP, AX_PP, AX_DP, AXES };
static const char *const AXIS[AXES] = {"tensor", "pipeline", "data"};
static const int STRIDE[AXES] = {1, TP, TP *PP}; /* rank = dp * 4 + pp * 2 + tp */
static const int SIZE[AXES] = {TP, PP, DP};
_Static_assert(MESH_LAYERS <= MAX_LAYERS && PER_STAGE % 2 == 0, "each stage holds whole layer pairs");

static int coord(int rank, int axis) { return rank / STRIDE[axis] % SIZE[axis]; }

/* The ranks that differ from `rank` only along `axis`, in that axis's order. */
static void axis_ranks(int rank, int axis, int *out) {
    for (int k = 0; k < SIZE[axis]; k++)
        out[k] = rank + (k - coord(rank, axis)) * STRIDE[axis];
}

static dist_group *axis_group(int rank, int axis) {
    int ranks[WORLD];
    axis_ranks(rank, axis, ranks);
    return dist_new_group(ranks, SIZE[axis]);
}

typedef struct mesh_args {
    mlp_config cfg;
    float ref[]; /* one device's step-0 gradients, then its trained weights: 2 x MESH_LAYERS x width x width */
} mesh_args;

/* What a rank hands back: where it sits, its figures against one device's, its traffic per axis in step 0. */
typedef struct mesh_out {
    int rank, coord[AXES], peer[AXES], measured_collectives;
    double grad_diff, grad_size, param_diff, dp_spread;
    long long measured[AXES], to_peer[AXES], nominal[AXES], calls[AXES]; /* to_peer: of measured, to peer[axis] */
} mesh_out;

/* One rank's part of the model and what a micro-batch keeps between its forward and its backward. */
typedef struct mesh_rank {
    const mesh_args *a;
    int rank, stage, width, mb, counting;
    dist_group *tp, *dp;
    int pp_peer; /* the other stage's rank with this dp and tp */
    tensor *w[PER_STAGE], *g[PER_STAGE], *data;
    tensor *x[MICRO][PAIRS], *h[MICRO][PAIRS], *z[MICRO][PAIRS], *pre[MICRO][PAIRS], *dy[MICRO];
    tensor *sent[2 * MICRO];
    dist_request *req[2 * MICRO];
    int n_req;
    mesh_out *out;
} mesh_rank;

/* The traffic of one call, put down to its axis (step 0 only: one step's bytes). */
static void count(mesh_rank *k, int axis, const dist_traffic *before) {
    if (!k->counting) return;
    dist_traffic d = dist_traffic_since(before);
    k->out->measured[axis] += dist_traffic_sent(&d);
    k->out->to_peer[axis] += d.sent_to[k->out->peer[axis]];
    k->out->nominal[axis] += dist_traffic_nominal(&d);
    k->out->calls[axis] += dist_traffic_calls(&d);
    k->out->measured_collectives = d.measured_collectives;
}

static void tp_all_reduce(mesh_rank *k, tensor *t) {
    dist_traffic before = dist_traffic_now();
    dist_all_reduce_in(k->tp, t, DIST_SUM); /* the partial sums of the two column halves, whole */
    count(k, AX_TP, &before);
}

static void pp_send(mesh_rank *k, tensor *t) {
    dist_traffic before = dist_traffic_now();
    k->sent[k->n_req] = t;
    k->req[k->n_req++] = dist_isend(t, k->pp_peer); /* not waited here: the other stage may be sending too */
    count(k, AX_PP, &before);
}

/* This rank's slice of its stage's layer j: columns tp of a pair's first layer, rows tp of its second. */
static tensor *slice(const mesh_rank *k, tensor *full, int j) {
    int tp = coord(k->rank, AX_TP), part = k->width / TP;
    if (j % 2 == 0) return col_slice(full, tp * part, (tp + 1) * part);
    tensor *rows = row_slice(full, tp * part, (tp + 1) * part), *copy = to_device(rows, full->device);
    tensor_free(rows);
    return copy;
}

/* Forward of micro-batch m through this stage's pairs: z = gelu(x A_tp), then z B_tp summed over the group. */
static void mesh_forward(mesh_rank *k, int m) {
    int device = get_device(k->rank), dp = coord(k->rank, AX_DP);
    tensor *x;
    if (k->stage == 0) x = row_slice(k->data, (dp * MICRO + m) * k->mb, (dp * MICRO + m + 1) * k->mb);
    else {
        x = empty(k->mb, k->width, device);
        dist_recv(x, k->pp_peer);
    }
    for (int i = 0; i < PAIRS; i++) {
        k->x[m][i] = x;
        k->z[m][i] = layer_forward(x, k->w[2 * i], &k->h[m][i]);
        k->pre[m][i] = matmul(k->z[m][i], k->w[2 * i + 1]);
        tp_all_reduce(k, k->pre[m][i]);
        x = gelu(k->pre[m][i]);
    }
    if (k->stage < PP - 1) pp_send(k, x);
    else {
        k->dy[m] = mse_loss_backward(x); /* the model's end: d(the mean of the micro-batches' losses) */
        scale_(k->dy[m], 1.0f / MICRO);
        tensor_free(x);
    }
}

/* Backward of micro-batch m: each pair's row-parallel layer (its input gradient comes out in column halves, as
 * the layer before needs it), then the column-parallel one, whose input gradient is summed over the group. The
 * data needs no gradient, so stage 0's first pair skips that all-reduce. Gradients add up over micro-batches. */
static void mesh_backward(mesh_rank *k, int m) {
    float beta = m == 0 ? 0.0f : 1.0f;
    tensor *dy = k->dy[m];
    if (k->stage < PP - 1) {
        dy = empty(k->mb, k->width, get_device(k->rank));
        dist_recv(dy, k->pp_peer);
    }
    for (int i = PAIRS - 1; i >= 0; i--) {
        tensor *dz, *dx = NULL;
        int need_dx = k->stage > 0 || i > 0;
        layer_backward(k->z[m][i], k->pre[m][i], k->w[2 * i + 1], dy, k->g[2 * i + 1], &dz, beta);
        layer_backward(k->x[m][i], k->h[m][i], k->w[2 * i], dz, k->g[2 * i], need_dx ? &dx : NULL, beta);
        if (dx) tp_all_reduce(k, dx);
        tensor_free(dy), tensor_free(dz);
        tensor_free(k->x[m][i]); /* stage 0's first input is a view of the data: freeing it frees no data */
        tensor_free(k->h[m][i]), tensor_free(k->z[m][i]), tensor_free(k->pre[m][i]);
        dy = dx;
    }
    if (k->stage > 0) pp_send(k, dy);
    k->dy[m] = NULL;
}

/* 1F1B on PP stages: stage s runs PP - s - 1 forwards first, then one forward and one backward in turn. */
static void mesh_step(mesh_rank *k) {
    int warmup = PP - k->stage - 1, f = 0, b = 0;
    while (f < warmup)
        mesh_forward(k, f++);
    while (f < MICRO) {
        mesh_forward(k, f++);
        mesh_backward(k, b++);
    }
    while (b < MICRO)
        mesh_backward(k, b++);
    for (int i = 0; i < k->n_req; i++) {
        dist_wait(k->req[i]);
        tensor_free(k->sent[i]);
    }
    k->n_req = 0;
}

/* The largest difference between this rank's slices and the same slices of one device's tensors `ref`. */
static double diff_from(const mesh_rank *k, tensor *const *mine, const float *ref, double *size) {
    size_t n = (size_t)k->width * k->width;
    double diff = 0;
    for (int j = 0; j < PER_STAGE; j++) {
        int layer = k->stage * PER_STAGE + j;
        tensor *full = tensor_from(ref + layer * n, k->width, k->width, get_device(k->rank)), *want = slice(k, full, j);
        diff = fmax(diff, max_abs_diff(mine[j], want));
        if (size) *size = fmax(*size, largest(want));
        tensor_free(want), tensor_free(full);
    }
    return diff;
}

static void mesh_main(int rank, int world_size, void *args) {
    const mesh_args *a = args;
    if (world_size != WORLD) lecture_fail("the mesh is %d x %d x %d: %d ranks, not %d", DP, PP, TP, WORLD, world_size);
    mesh_out out = {.rank = rank};
    mesh_rank k = {.a = a, .rank = rank, .stage = coord(rank, AX_PP), .width = a->cfg.width, .out = &out};
    k.mb = a->cfg.batch / (DP * MICRO);
    for (int ax = 0; ax < AXES; ax++) {
        int ranks[WORLD];
        axis_ranks(rank, ax, ranks);
        out.coord[ax] = coord(rank, ax);
        out.peer[ax] = ranks[1 - coord(rank, ax)]; /* every axis has 2 ranks: the other one */
    }
    k.tp = axis_group(rank, AX_TP);
    k.dp = axis_group(rank, AX_DP);
    k.pp_peer = out.peer[AX_PP];
    int device = get_device(rank);
    adamw *opt[PER_STAGE];
    for (int j = 0; j < PER_STAGE; j++) {
        tensor *full = init_layer(&a->cfg, k.stage * PER_STAGE + j, device);
        k.w[j] = slice(&k, full, j);
        k.g[j] = zeros(k.w[j]->shape[0], k.w[j]->shape[1], device);
        opt[j] = adamw_new(k.w[j], a->cfg.lr);
        tensor_free(full);
    }
    if (k.stage == 0) k.data = make_data(&a->cfg, device);
    for (int step = 0; step < a->cfg.steps; step++) {
        k.counting = step == 0;
        mesh_step(&k);
        for (int j = 0; j < PER_STAGE; j++) {
            dist_traffic before = dist_traffic_now();
            dist_all_reduce_in(k.dp, k.g[j], DIST_AVG); /* the two replicas' batch halves, averaged */
            count(&k, AX_DP, &before);
        }
        if (step == 0) out.grad_diff = diff_from(&k, k.g, a->ref, &out.grad_size);
        for (int j = 0; j < PER_STAGE; j++)
            adamw_step(opt[j], k.w[j], k.g[j]);
    }
    size_t n = (size_t)k.width * k.width;
    out.param_diff = diff_from(&k, k.w, a->ref + MESH_LAYERS * n, NULL);
    for (int j = 0; j < PER_STAGE; j++) { /* the replicas' weights: the same floats, or the averaging is missing */
        tensor *hi = to_device(k.w[j], device), *lo = to_device(k.w[j], device);
        dist_all_reduce_in(k.dp, hi, DIST_MAX);
        dist_all_reduce_in(k.dp, lo, DIST_MIN);
        out.dp_spread = fmax(out.dp_spread, max_abs_diff(hi, lo));
        tensor_free(hi), tensor_free(lo);
    }
    spawn_return(&out, sizeof out);
    for (int j = 0; j < PER_STAGE; j++) {
        adamw_free(opt[j]);
        tensor_free(k.w[j]), tensor_free(k.g[j]);
    }
    if (k.data) tensor_free(k.data);
    dist_group_free(k.tp);
    dist_group_free(k.dp);
}

/* One device: the whole batch through all the layers; its step-0 gradients, then its weights after the steps. */
static void one_device(const mlp_config *c, float *ref) {
    int device = get_device(0);
    size_t n = (size_t)c->width * c->width;
    tensor *w[MESH_LAYERS], *g[MESH_LAYERS], *acts[MESH_LAYERS + 1], *pre[MESH_LAYERS];
    adamw *opt[MESH_LAYERS];
    tensor *x = make_data(c, device);
    for (int j = 0; j < MESH_LAYERS; j++) {
        w[j] = init_layer(c, j, device);
        g[j] = empty(c->width, c->width, device);
        opt[j] = adamw_new(w[j], c->lr);
    }
    for (int step = 0; step < c->steps; step++) {
        forward(w, MESH_LAYERS, x, acts, pre);
        backward(w, MESH_LAYERS, acts, pre, g);
        free_saved(MESH_LAYERS, acts, pre);
        for (int j = 0; j < MESH_LAYERS; j++) {
            if (step == 0) tensor_to_host(g[j], ref + j * n);
            adamw_step(opt[j], w[j], g[j]);
        }
    }
    for (int j = 0; j < MESH_LAYERS; j++) {
        tensor_to_host(w[j], ref + (MESH_LAYERS + j) * n);
        adamw_free(opt[j]);
        tensor_free(w[j]), tensor_free(g[j]);
    }
    tensor_free(x);
}

/* Bytes one rank sends in one step along each axis, by the nominal formula (lectern.h, dist_traffic): an
 * all-reduce over 2 ranks sends 2 (2 - 1) / 2 = 1 times its buffer; a send its buffer. */
static long long formula_bytes(const mlp_config *c, int axis, int stage) {
    long long act = (long long)c->batch / (DP * MICRO) * c->width * 4; /* one micro-batch's activation */
    if (axis == AX_TP) return (long long)MICRO * (2 * PAIRS - (stage == 0)) * act;
    if (axis == AX_PP) return (long long)MICRO * act;
    return (long long)PER_STAGE * c->width / TP * c->width * 4; /* this rank's gradients */
}

static const char *const LINK[AXES] = {"NVLink, inside a node", "InfiniBand or RoCE, across nodes",
                                       "InfiniBand or RoCE, across nodes"};

void mesh_section(void) {
    progress("3-D mesh");
    mlp_config c = {.batch = lecture_quick() ? 64 : 128,
                    .width = lecture_quick() ? 64 : 128,
                    .layers = MESH_LAYERS,
                    .steps = STEPS,
                    .lr = 1e-3f};
    note("## A 3-D mesh: data x pipeline x tensor\n\n"
         "Large runs use all three at once. %d ranks as a %d x %d x %d mesh, rank = 4 dp + 2 pp + tp:\n\n"
         "- **tensor** groups {0, 1}, {2, 3}, ..: each pair of layers cut Megatron's way (the first by columns, "
         "the second by rows), one all-reduce forward and one backward a pair, in every micro-batch;\n"
         "- **pipeline** stages: ranks 4 dp + tp and 4 dp + 2 + tp hold layers 0-%d and %d-%d, and pass one "
         "activation (forward) or its gradient (backward) a micro-batch, 1F1B, %d micro-batches;\n"
         "- **data** groups {r, r + 4}: each replica takes half the batch; the gradients are averaged once a step.\n\n"
         "Tensor parallelism is innermost because it talks the most and the most often: launchers fill a node "
         "with consecutive ranks, so its groups land inside a node, on NVLink.",
         WORLD, DP, PP, TP, PER_STAGE - 1, PER_STAGE, MESH_LAYERS - 1, MICRO);
    note("The model: the MLP above, %d layers %d wide, a batch of %d (micro-batches of %d rows), trained %d AdamW "
         "steps (learning rate %g) on every rank and on one device.",
         c.layers, c.width, c.batch, c.batch / (DP * MICRO), c.steps, c.lr);
    size_t n = (size_t)c.width * c.width, size = sizeof(mesh_args) + sizeof(float) * 2 * MESH_LAYERS * n;
    mesh_args *a = calloc(1, size);
    a->cfg = c;
    one_device(&c, a->ref);
    double start = now_seconds();
    spawn(mesh_main, WORLD, a, size);
    double seconds = now_seconds() - start;
    free(a);
    mesh_out r[WORLD];
    for (int q = 0; q < WORLD; q++)
        if (spawn_result(q, &r[q], sizeof r[q]) != sizeof r[q]) lecture_fail("rank %d of the mesh returned nothing", q);

    /* The gradients: gradient_tolerance (lib/mlp.h) of the largest one. The mesh changes only the order of the
     * sums: a layer's columns or rows cut in two and summed by the all-reduce, the batch cut into micro-batches
     * and replicas and added up (in float32, as one device's BLAS does in its own order), which lib/mlp.h's
     * 2 (layers + 1) max(batch, width) 2^-24 covers. A group built on the wrong axis sums the wrong halves, a
     * missing average leaves each replica its own half batch's gradient: off by about the gradient itself. */
    double grad_tol = gradient_tolerance(&c), bound = adamw_rounding_bound(&c);
    table_t *t = table_new("the %d x %d x %d mesh after %d steps: every rank's slices against one device's", DP, PP, TP,
                           c.steps);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "dp", NULL, "%d");
    table_column(t, "pp", NULL, "%d");
    table_column(t, "tp", NULL, "%d");
    table_column(t, "max |step-0 gradient - one device|", NULL, "%.3g");
    table_column(t, "gradient tolerance", NULL, "%.3g");
    table_column(t, "max |weights - one device|", NULL, "%.3g");
    table_column(t, "AdamW rounding bound", NULL, "%.3g");
    table_column(t, "max |weights - other replica|", NULL, "%.3g");
    int grads_ok = 1, params_ok = 1, same = 1;
    for (int q = 0; q < WORLD; q++) {
        double tol = grad_tol * r[q].grad_size;
        grads_ok &= r[q].grad_diff <= tol;
        params_ok &= r[q].param_diff <= bound;
        same &= r[q].dp_spread == 0;
        table_row(t, q, r[q].coord[AX_DP], r[q].coord[AX_PP], r[q].coord[AX_TP], r[q].grad_diff, tol, r[q].param_diff,
                  bound, r[q].dp_spread);
    }
    table_show(t);
    check(grads_ok, "3-D mesh: every rank's step-0 gradients equal one device's (within gradient_tolerance)");
    /* AdamW divides a gradient by its own running size: blind to scale, so this check follows the gradients'. */
    check(params_ok,
          "3-D mesh: every rank's weights after %d steps equal one device's (within %.3g, AdamW's "
          "rounding bound)",
          c.steps, bound);
    check(same, "3-D mesh: the two data-parallel replicas hold the same weights, to the bit");

    table_t *b = table_new("bytes one rank sends in one step, along each axis of the mesh: measured "
                           "(dist_traffic_since around each call), nominal, and the formula; where it would go");
    table_column(b, "axis", NULL, "%s");
    table_column(b, "rank", NULL, "%d");
    table_column(b, "stage", NULL, "%d");
    table_column(b, "peer", NULL, "%d");
    table_column(b, "calls", NULL, "%lld");
    table_column(b, "measured", "bytes", "%lld");
    table_column(b, "measured to the peer", "bytes", "%lld");
    table_column(b, "nominal", "bytes", "%lld");
    table_column(b, "formula", "bytes", "%lld");
    table_column(b, "on a cluster", NULL, "%s");
    int bytes_ok = 1, to_peer = 1;
    for (int ax = 0; ax < AXES; ax++)
        for (int q = 0; q < WORLD; q += TP) { /* the tp = 0 rank of each (dp, pp): the tp = 1 one mirrors it */
            long long want = formula_bytes(&c, ax, r[q].coord[AX_PP]);
            bytes_ok &= r[q].nominal[ax] == want;
            to_peer &= r[q].to_peer[ax] == r[q].measured[ax] && (r[q].measured[ax] > 0 || !r[q].measured_collectives);
            table_row(b, AXIS[ax], q, r[q].coord[AX_PP], r[q].peer[ax], r[q].calls[ax], r[q].measured[ax],
                      r[q].to_peer[ax], r[q].nominal[ax], want, LINK[ax]);
        }
    table_show(b);
    check(bytes_ok, "3-D mesh: every axis's nominal bytes equal the formula's, on every stage");
    /* Measured where the bytes move: an axis's calls must reach its own peer and no other rank (a group built on
     * the wrong axis sends its all-reduces to a rank of another axis). Without Open MPI's counters a collective
     * measures 0 bytes, to every rank alike, and only the point-to-point bytes say anything. */
    check(to_peer, "3-D mesh: each axis's measured bytes all went to that axis's peer");
    long long tp0 = r[0].nominal[AX_TP], pp0 = r[0].nominal[AX_PP], dp0 = r[0].nominal[AX_DP];
    note("Every rank's gradients and weights equal one device's, and the replicas' weights are the same floats. Rank "
         "0 sends %lld bytes a step to its tensor peer, %lld to the next stage and %lld to its data peer: the tensor "
         "axis carries %.1f times the pipeline's, in %lld calls a step against %lld. The collectives' bytes come from Open "
         "MPI's counters, %s. The spawn took %.1f s on this machine.",
         quoted(tp0), quoted(pp0), quoted(dp0), (double)tp0 / (double)pp0, quoted(r[0].calls[AX_TP]),
         quoted(r[0].calls[AX_PP]),
         r[0].measured_collectives ? "which this run had" : "not available in this run: 0, never a guess", seconds);
}
