/*
 * zero3.c: ZeRO-3's step timed without gathers, gathering when needed, and
 * prefetching (zero3.h), for lecture_08.
 */
#include <stdlib.h>

#include "train.h"
#include "zero3.h"

const char *const Z3_MODE_NAMES[Z3_MODES] = {"no gathers (every layer already whole)", "gather each layer when needed",
                                             "prefetch the next layer's gather"};

/* What a step runs: the pieces, and either the real model's data (x, and every layer whole for the no-gathers
 * way) or the modelled compute's times. */
typedef struct z3_work {
    int layers, width, world;
    tensor *const *piece;
    tensor *whole[MAX_LAYERS];
    tensor *x;                      /* real: this rank's slice of the batch */
    double forward_ms, backward_ms; /* modelled: a layer's (x NULL) */
} z3_work;

/* Layer i's whole weights, gathered from every rank's piece (async). */
static tensor *gather_start(const z3_work *z, int i, dist_request **req) {
    tensor *w = empty(z->width, z->width, z->piece[i]->device);
    *req = dist_all_gather_async(w, z->piece[i]);
    return w;
}

/* Layer i's weights for `mode`: already whole, gathered now, or the gather prefetched before (waited for). Then,
 * prefetching, the gather of layer `next_i` (-1: none) starts, to move while layer i computes. */
static tensor *layer_weights(const z3_work *z, int mode, int i, tensor **next, dist_request **next_req, int next_i) {
    tensor *w;
    dist_request *req;
    if (mode == Z3_NO_GATHERS) {
        w = z->whole[i];
    } else if (*next) {
        dist_wait(*next_req);
        w = *next;
    } else {
        w = gather_start(z, i, &req);
        dist_wait(req);
    }
    *next = mode == Z3_PREFETCH && next_i >= 0 ? gather_start(z, next_i, next_req) : NULL;
    return w;
}

/* One step: forward layer by layer, backward from the last layer (layer 0 needs no weights: its input is the
 * data), each layer's gradient reduce-scattered as soon as it is made, all waited for at the end. */
static void z3_step(const z3_work *z, int mode) {
    int n = z->layers, device = z->piece[0]->device;
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *next = NULL, *grad[MAX_LAYERS], *mine[MAX_LAYERS];
    dist_request *next_req = NULL, *rs[MAX_LAYERS];
    acts[0] = z->x;
    for (int i = 0; i < n; i++) {
        /* the last forward prefetches the backward's first layer: the same one, freed after its forward */
        tensor *w = layer_weights(z, mode, i, &next, &next_req, i + 1 < n ? i + 1 : n - 1);
        if (!z->x) model_compute(z->forward_ms);
        else acts[i + 1] = layer_forward(acts[i], w, &pre[i]);
        if (mode != Z3_NO_GATHERS) tensor_free(w);
    }
    tensor *dy = z->x ? mse_loss_backward(acts[n]) : NULL;
    for (int i = n - 1; i >= 0; i--) {
        tensor *w = i > 0 ? layer_weights(z, mode, i, &next, &next_req, i - 1 > 0 ? i - 1 : -1) : NULL;
        grad[i] = zeros(z->width, z->width, device);
        mine[i] = empty(z->width / z->world, z->width, device);
        if (!z->x) {
            model_compute(z->backward_ms);
        } else {
            tensor *dx = NULL;
            layer_backward(acts[i], pre[i], w, dy, grad[i], i > 0 ? &dx : NULL, 0.0f);
            tensor_free(dy);
            dy = dx;
        }
        rs[i] = dist_reduce_scatter_async(mine[i], grad[i], DIST_AVG);
        if (w && mode != Z3_NO_GATHERS) tensor_free(w);
    }
    for (int i = n - 1; i >= 0; i--) {
        dist_wait(rs[i]);
        tensor_free(grad[i]);
        tensor_free(mine[i]);
    }
    if (z->x) free_saved(n, acts, pre);
}

static void time_steps(const z3_work *z, int trials, double median_ms[Z3_MODES]) {
    double *ms = malloc(sizeof(double) * Z3_MODES * trials);
    for (int mode = 0; mode < Z3_MODES; mode++)
        z3_step(z, mode); /* warm-up */
    for (int trial = 0; trial < trials; trial++)
        for (int mode = 0; mode < Z3_MODES; mode++) {
            dist_timer t = {0};
            dist_timer_start(&t);
            z3_step(z, mode);
            ms[mode * trials + trial] = dist_timer_stop(&t) * 1e3; /* the slowest rank's time */
        }
    for (int mode = 0; mode < Z3_MODES; mode++)
        median_ms[mode] = median_of(ms + mode * trials, trials);
    free(ms);
}

void time_zero3_steps(const mlp_config *c, tensor *const *piece, tensor *x, int trials, double median_ms[Z3_MODES]) {
    z3_work z = {.layers = c->layers, .width = c->width, .world = dist_world_size(), .piece = piece, .x = x};
    for (int i = 0; i < z.layers; i++) {
        dist_request *req;
        z.whole[i] = gather_start(&z, i, &req);
        dist_wait(req);
    }
    time_steps(&z, trials, median_ms);
    free_tensors(z.whole, z.layers);
}

/* The modelled compute's size. Of the 2 L - 1 gathers of a step (every layer forward, all but layer 0 backward),
 * prefetching can hide all but the first: nothing computes before it. So at best (2 L - 2) / (2 L - 1) of the
 * gathers' time is hidden, 14/15 = 0.93 with L = 8 layers, while each gather g takes less than the layer's compute
 * it hides behind. With a layer's forward f = 3 g and backward b = 2 f (measured g: one layer's gather alone, the
 * slowest rank's median here), a gather can take 3 times as long as it did alone (sharing the link with a
 * reduce-scatter in backward, the machine busier) and still be hidden; the lesson's bound, 70% hidden, leaves room
 * for the first gather and three more exposed in full. */
enum { FORWARD_PER_GATHER = 3 };

void time_modelled_zero3_steps(int width, int layers, int trials, double *forward_ms, double *backward_ms,
                               double median_ms[Z3_MODES]) {
    int rank = dist_rank(), world = dist_world_size(), device = get_device(rank);
    tensor *piece[MAX_LAYERS];
    for (int i = 0; i < layers; i++)
        piece[i] = zeros(width / world, width, device);
    z3_work z = {.layers = layers, .width = width, .world = world, .piece = piece};
    double alone[5];
    for (int k = -3; k < 5; k++) { /* three warm-ups (new buffers' first transfers are slower), then five */
        dist_request *req;
        dist_timer t = {0};
        dist_timer_start(&t);
        tensor *w = gather_start(&z, 0, &req);
        dist_wait(req);
        double ms = dist_timer_stop(&t) * 1e3; /* the slowest rank's */
        if (k >= 0) alone[k] = ms;
        tensor_free(w);
    }
    z.forward_ms = *forward_ms = FORWARD_PER_GATHER * median_of(alone, 5);
    z.backward_ms = *backward_ms = 2 * *forward_ms;
    time_steps(&z, trials, median_ms);
    free_tensors(piece, layers);
}

double z3_hidden(const double median_ms[Z3_MODES]) {
    return (median_ms[Z3_GATHER_WHEN_NEEDED] - median_ms[Z3_PREFETCH]) /
           (median_ms[Z3_GATHER_WHEN_NEEDED] - median_ms[Z3_NO_GATHERS]);
}

void show_prefetch(int world_size, int trials, int real_layers, int modelled_layers, double forward_ms,
                   double backward_ms, const double real_ms[Z3_MODES], const double modelled_ms[Z3_MODES]) {
    table_t *t = table_new("Prefetch: one ZeRO-3 step on %d ranks (%s), slowest rank, median of %d steps each way. "
                           "Real: the model above. Modelled: %d layers of 512 x 512, really gathered and "
                           "reduce-scattered; each layer's forward %.2f ms and backward %.2f ms of modelled compute "
                           "(three times one layer's gather alone, measured just before, and twice that)",
                           world_size, dist_backend(), trials, modelled_layers, forward_ms, backward_ms);
    table_column(t, "compute", NULL, "%s");
    table_column(t, "layers", NULL, "%d");
    table_column(t, "no gathers", "ms", "%.2f");
    table_column(t, "gather when needed", "ms", "%.2f");
    table_column(t, "prefetch", "ms", "%.2f");
    table_column(t, "the gathers' time (when needed - no gathers)", "ms", "%.2f");
    table_column(t, "hidden by prefetch", NULL, "%.2f");
    for (int k = 0; k < 2; k++) {
        const double *ms = k ? modelled_ms : real_ms;
        table_row(t, k ? "modelled" : "real", k ? modelled_layers : real_layers, ms[Z3_NO_GATHERS],
                  ms[Z3_GATHER_WHEN_NEEDED], ms[Z3_PREFETCH], ms[Z3_GATHER_WHEN_NEEDED] - ms[Z3_NO_GATHERS],
                  z3_hidden(ms));
    }
    table_show(t);
}
