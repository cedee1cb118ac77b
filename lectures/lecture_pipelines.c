/*
 * lecture_pipelines: pipeline schedules as they are run today. Interleaved 1F1B (each stage holds v model chunks)
 * and zero-bubble (ZB-H1: the backward split into B, the input's gradient, and W, the weights'), each order made
 * by a function, checked by rules and by a simulation that must complete, run on 4 real ranks (the MLP's layers
 * cut into chunks; gradients against one device's) and with modelled compute (bubble against its formula).
 * Then a data x pipeline x tensor mesh on 8 ranks (lecture_pipelines/mesh.c) and the choice of a configuration for
 * two published runs (lecture_pipelines/configure.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "lib/mlp.h"
#include "lecture_pipelines/configure.h"
#include "lecture_pipelines/mesh.h"
#include "lecture_pipelines/schedule.h"

enum { P = 4, V = 2, M = 8, LAYERS = 8 };             /* stages, chunks a stage (interleaved), micro-batches, layers */
enum { MAX_OPS = 3 * V * M, PASSES = 3, SPAWNS = 3 }; /* a stage's ops; passes a spawn; spawns a modelled shape */
enum { GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, N_SCHEDULES };
static const char *const NAME[N_SCHEDULES] = {"GPipe", "1F1B", "interleaved 1F1B", "ZB-H1"};

/* A schedule (lecture_pipelines/schedule.h): every stage's ops in the order it runs them. Model part q = chunk * P + stage:
 * chunk c of stage s holds layers q * LAYERS / (v P) onward, so a micro-batch visits stage 0, 1, .., P-1, then 0
 * again for chunk 1. check_order (lecture_pipelines/schedule.c) proves an order keeps the rules and replays it. */
_Static_assert((int)P <= (int)SCHED_MAX_STAGES && (int)V <= (int)SCHED_MAX_CHUNKS && (int)M <= (int)SCHED_MAX_MICRO,
               "a schedule holds the shape");

/* ---- the orders ---- */

/* 1F1B (v = 1) and interleaved 1F1B (v > 1), as Megatron-LM orders them. A stage's i-th forward is chunk
 * (i / P) % v of micro-batch (i / (P v)) P + i % P: P micro-batches through chunk 0, the same P through chunk 1,
 * then the next P. Backwards go through the chunks in reverse. Stage s first runs `warmup` forwards, then
 * alternates one forward and one backward, then drains the backwards. */
static void push_nth(schedule *s, int st, int kind, int i) {
    int chunk = (i / P) % s->v, micro = (i / (P * s->v)) * P + i % P;
    schedule_push(s, st, kind, kind == OP_F ? chunk : s->v - 1 - chunk, micro);
}

static void megatron_order(schedule *s, int v) {
    *s = (schedule){.which = v == 1 ? ONE_F_ONE_B : INTERLEAVED, .p = P, .v = v, .m = M};
    int total = v * M;
    for (int st = 0; st < P; st++) {
        int warmup = v == 1 ? P - st - 1 : (P - st - 1) * 2 + (v - 1) * P;
        if (warmup > total) warmup = total;
        int f = 0, b = 0;
        while (f < warmup)
            push_nth(s, st, OP_F, f++);
        while (f < total) {
            push_nth(s, st, OP_F, f++);
            push_nth(s, st, OP_BW, b++);
        }
        while (b < total)
            push_nth(s, st, OP_BW, b++);
    }
}

/* GPipe (Huang et al. 2019): every forward, then every backward; a stage holds all m micro-batches at once. */
static void gpipe_order(schedule *s) {
    *s = (schedule){.which = GPIPE, .p = P, .v = 1, .m = M};
    for (int st = 0; st < P; st++) {
        for (int k = 0; k < M; k++)
            schedule_push(s, st, OP_F, 0, k);
        for (int k = 0; k < M; k++)
            schedule_push(s, st, OP_BW, 0, k);
    }
}

/* ZB-H1 (Qi et al. 2023) on unit times F = B = W (the lecture's costs). The B's are the critical path: each
 * stage waits for the one after it. So they are placed first, in the rhythm that keeps stage 0 busy: the first B
 * leaves the last stage once the first forward is there (time p) and climbs one stage a slot; then one B every 3
 * slots (a stage's F, B and W of a micro-batch) while forwards remain (k <= m - p), and one every 2 (a B and a W)
 * in the cool-down. b_slot is when stage st starts the B of micro-batch k. Needs m >= p. */
static int b_slot(int st, int k) {
    int first = 2 * P - 1 - st, steady = M - P;
    return k <= steady ? first + 3 * k : first + 3 * steady + 2 * (k - steady);
}

/* Between its B's a stage runs a forward if one has come from the stage before and it holds fewer than p
 * micro-batches' activations (1F1B's most, on its stage 0: the memory stays 1F1B's), else the oldest W still held
 * back, else nothing. W waits for nothing, so holding it back costs nothing: the W's left when the forwards run
 * out fill the cool-down, where 1F1B's stages wait for their backwards. */
static void zb_h1_order(schedule *s) {
    *s = (schedule){.which = ZB_H1, .p = P, .v = 1, .m = M, .split = 1};
    int f_end[P][M]; /* the slot each forward ended */
    for (int st = 0; st < P; st++) {
        int f = 0, b = 0, w = 0;
        for (int t = st; s->n[st] < 3 * M && t < 4 * (3 * M + P); t++) {
            int fits = b == M || t + 1 <= b_slot(st, b); /* an op started now ends before the next B is due */
            if (b < M && t == b_slot(st, b)) schedule_push(s, st, OP_B, 0, b++);
            else if (fits && f < M && f - w < P && (st == 0 || f_end[st - 1][f] <= t)) {
                f_end[st][f] = t + 1;
                schedule_push(s, st, OP_F, 0, f++);
            } else if (fits && w < b) schedule_push(s, st, OP_W, 0, w++);
        }
    }
}

/* The bubble's formula, of the total time: GPipe and 1F1B (p - 1) / (m + p - 1); interleaved with v chunks, each
 * 1/v of a stage's work, (p - 1) / (v m + p - 1); ZB-H1 with F = B = W = t, stage 0 idle (p - 1) t (its first B's
 * way back up) against 3 m t of work: (p - 1) / (3 m + p - 1). */
static double formula(int which) {
    return which == GPIPE || which == ONE_F_ONE_B ? (double)(P - 1) / (M + P - 1)
           : which == INTERLEAVED                 ? (double)(P - 1) / (V * M + P - 1)
                                                  : (double)(P - 1) / (3 * M + P - 1);
}

/* Modelled times of one op (ms): a stage's forward of a micro-batch F = 20 ms, its backward 2F (B = W = F when
 * split); an interleaved chunk is half a stage's layers, so half of each. */
static void op_times(const schedule *s, double dur[4]) {
    double f = 20.0 / s->v;
    dur[OP_F] = f, dur[OP_B] = f, dur[OP_W] = f, dur[OP_BW] = 2 * f;
}

/* ---- the ranks ---- */

typedef struct run_args {
    schedule sched;
    mlp_config cfg;
    int modelled;
    double clock_base, dur[4];
    float expected[]; /* one device's gradient of every layer, LAYERS x width x width */
} run_args;

/* What a rank hands back: each pass's op stamps (ms from the spawn's clock), the sends it made, its most
 * activations held, its gradients against one device's. */
typedef struct rank_out {
    int n, sends, held;
    float start[PASSES][MAX_OPS], end[PASSES][MAX_OPS];
    double diff, size;
} rank_out;

/* One rank's chunks: their layers, gradients, and what a micro-batch keeps between its ops. */
typedef struct chunks {
    const run_args *a;
    int rank, per, mb, width, first_grad[V][LAYERS];
    tensor *w[V][LAYERS], *g[V][LAYERS], *data;
    tensor *acts[V][M][LAYERS + 1], *pre[V][M][LAYERS], *dh[V][M][LAYERS], *dy[V][M];
    dist_request *req[2 * MAX_OPS];
    tensor *sent[2 * MAX_OPS];
    int n_req, in_flight, held, sends;
    double started; /* when the op being run began computing: after its message came (ms from the clock base) */
} chunks;

static double ms_now(const chunks *k) { return (now_seconds() - k->a->clock_base) * 1e3; }

static int first_layer(const chunks *k, int c) { return (c * P + k->rank) * k->per; }

static void send_to(chunks *k, tensor *t, int to) {
    k->sent[k->n_req] = t;
    k->req[k->n_req++] = dist_isend(t, to);
    k->sends++;
}

/* Forward of chunk c, micro-batch m: receive (the model's first part reads the data), its layers, send on. */
static void run_forward(chunks *k, int c, int m) {
    int pc, from = prev_part(&k->a->sched, k->rank, c, &pc), nc, to = next_part(&k->a->sched, k->rank, c, &nc);
    tensor *x = from < 0 && !k->a->modelled ? row_slice(k->data, m * k->mb, (m + 1) * k->mb)
                                            : empty(k->mb, k->width, get_device(k->rank));
    if (from >= 0) dist_recv(x, from);
    k->started = ms_now(k); /* the wait for the message is idle time, not the op's */
    tensor *y;
    if (k->a->modelled) {
        model_compute(k->a->dur[OP_F]);
        k->acts[c][m][0] = x;
        y = zeros(k->mb, k->width, get_device(k->rank));
    } else {
        forward(k->w[c], k->per, x, k->acts[c][m], k->pre[c][m]);
        y = k->acts[c][m][k->per];
    }
    if (to >= 0 && !k->a->modelled) { /* a copy: the activation itself is freed at W, maybe before it has gone */
        tensor *copy = empty(k->mb, k->width, get_device(k->rank));
        tensor_copy(copy, y);
        send_to(k, copy, to);
    } else if (to >= 0) send_to(k, y, to);
    else if (!k->a->modelled) { /* the model's end: d(mean of the micro-batches' losses) */
        k->dy[c][m] = mse_loss_backward(y);
        scale_(k->dy[c][m], 1.0f / M);
    }
    if (k->a->modelled && to < 0) tensor_free(y);
    if (++k->in_flight > k->held) k->held = k->in_flight;
}

/* The input's gradient of chunk c, micro-batch m (B), and, when `whole`, the weights' too (BW): through the
 * layers backwards, dh = dy gelu'(h), dx = dh w^T; dw += x^T dh now (BW) or kept for W. */
static void run_backward(chunks *k, int c, int m, int whole) {
    int nc, from = next_part(&k->a->sched, k->rank, c, &nc), pc, to = prev_part(&k->a->sched, k->rank, c, &pc);
    int device = get_device(k->rank);
    tensor *dy = from >= 0 ? empty(k->mb, k->width, device) : k->dy[c][m];
    if (from >= 0) dist_recv(dy, from);
    k->started = ms_now(k);
    if (k->a->modelled) {
        model_compute(k->a->dur[whole ? OP_BW : OP_B]);
        tensor_free(dy);
        if (to >= 0) send_to(k, zeros(k->mb, k->width, device), to);
    } else {
        for (int j = k->per - 1; j >= 0; j--) {
            tensor *dh = gelu_backward(k->pre[c][m][j], dy);
            tensor_free(dy);
            dy = empty(k->mb, k->width, device);
            matmul_into(dy, dh, k->w[c][j], 0, 1, 1.0f, 0.0f); /* dx = dh w^T */
            k->dh[c][m][j] = dh;
        }
        if (to >= 0) send_to(k, dy, to);
        else tensor_free(dy);
    }
    k->dy[c][m] = NULL;
}

/* The weights' gradients of chunk c, micro-batch m (W): dw += x^T dh, layer by layer; then its activations go. */
static void run_weights(chunks *k, int c, int m, int alone) {
    if (k->a->modelled) {
        if (alone) model_compute(k->a->dur[OP_W]); /* within a BW, its time is the BW's */
    } else
        for (int j = 0; j < k->per; j++) {
            matmul_into(k->g[c][j], k->acts[c][m][j], k->dh[c][m][j], 1, 0, 1.0f, k->first_grad[c][j] ? 0.0f : 1.0f);
            k->first_grad[c][j] = 0;
            tensor_free(k->dh[c][m][j]);
        }
    if (!k->a->modelled) free_saved(k->per, k->acts[c][m], k->pre[c][m]);
    tensor_free(k->acts[c][m][0]);
    k->in_flight--;
}

static void run_op(chunks *k, const op *o) {
    k->started = ms_now(k); /* a W waits for nothing; F and B restamp after their receive */
    if (o->kind == OP_F) run_forward(k, o->chunk, o->micro);
    else if (o->kind == OP_B) run_backward(k, o->chunk, o->micro, 0);
    else if (o->kind == OP_W) run_weights(k, o->chunk, o->micro, 1);
    else {
        run_backward(k, o->chunk, o->micro, 1);
        run_weights(k, o->chunk, o->micro, 0); /* BW: both at once, timed as one op */
    }
}

static void pipeline_main(int rank, int world_size, void *args) {
    const run_args *a = args;
    const schedule *s = &a->sched;
    chunks *k = calloc(1, sizeof *k);
    k->a = a, k->rank = rank, k->width = a->cfg.width, k->mb = a->cfg.batch / M, k->per = LAYERS / (s->v * P);
    int device = get_device(rank);
    if (!a->modelled) {
        for (int c = 0; c < s->v; c++)
            for (int j = 0; j < k->per; j++) {
                k->w[c][j] = init_layer(&a->cfg, first_layer(k, c) + j, device);
                k->g[c][j] = zeros(k->width, k->width, device);
            }
        if (rank == 0) k->data = make_data(&a->cfg, device);
    }
    rank_out *out = calloc(1, sizeof *out);
    out->n = s->n[rank];
    for (int pass = 0; pass < PASSES; pass++) {
        for (int c = 0; c < s->v; c++)
            for (int j = 0; j < k->per; j++)
                k->first_grad[c][j] = 1; /* each pass sums its micro-batches from zero */
        k->sends = 0;
        dist_barrier(); /* every stage ready before the clock matters */
        for (int i = 0; i < s->n[rank]; i++) {
            run_op(k, &s->ops[rank][i]);
            device_synchronize(); /* on a GPU, the work has really ended */
            out->start[pass][i] = (float)k->started;
            out->end[pass][i] = (float)ms_now(k);
        }
        for (int i = 0; i < k->n_req; i++) {
            dist_wait(k->req[i]);
            tensor_free(k->sent[i]);
        }
        k->n_req = 0;
    }
    out->sends = k->sends, out->held = k->held;
    for (int c = 0; c < s->v && !a->modelled; c++)
        for (int j = 0; j < k->per; j++) {
            size_t n = (size_t)k->width * k->width;
            tensor *want = tensor_from(a->expected + (first_layer(k, c) + j) * n, k->width, k->width, device);
            out->diff = fmax(out->diff, max_abs_diff(k->g[c][j], want));
            out->size = fmax(out->size, largest(want));
            tensor_free(want);
            tensor_free(k->w[c][j]);
            tensor_free(k->g[c][j]);
        }
    if (k->data) tensor_free(k->data);
    spawn_return(out, sizeof *out);
    free(out);
    free(k);
}

/* ---- the lecture ---- */

/* A spawn's figures, from every rank's stamps: the quickest pass (the one the machine's other work disturbed
 * least), its bubble (1 - the busiest stage's busy time / span), the most activations held, the sends. */
typedef struct result {
    int which, modelled, spawns, held[P], sends;
    double bubble, span, diff, tol;
    double overrun; /* modelled: the busiest stage's busy time beyond the time its ops asked for (ms) */
    double late;    /* modelled: every op's start beyond its readiness and time beyond its asked time (ms, summed) */
    float start[P][MAX_OPS], end[P][MAX_OPS];
    int n[P];
} result;

/* A late wake-up on a loaded machine: how far a modelled pass ran behind what the order allows. Each op can start
 * when its stage's previous op has ended and its input has come (a forward: the part before's forward of that
 * micro-batch; a B or BW: the part after's; a W: its own B, earlier on the stage; a stage's first op without an
 * input: the pass's first start). Its own delay is its start beyond that moment (the message and the wake-up) plus
 * its time beyond what it asked. An op ends at most its delays along the longest chain of such dependencies later
 * than in the order's simulation with the asked times (by induction over the ops in the order they started: its
 * ready time is a max of ends, each at most that far behind). So the span ran at most the largest such chain's
 * delay longer than the order gives: that is the lateness. A wrong order is not late: its ops start when they can
 * and take their time, and its span is its own. */
typedef struct stamp {
    float start;
    int st, i;
} stamp;

static int by_start(const void *a, const void *b) {
    const stamp *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

static double pass_lateness(const schedule *s, const double dur[4], const float *start[P], const float *end[P],
                            double first) {
    static stamp order[P * MAX_OPS];
    int n = 0;
    for (int st = 0; st < P; st++)
        for (int i = 0; i < s->n[st]; i++)
            order[n++] = (stamp){start[st][i], st, i};
    qsort(order, (size_t)n, sizeof *order, by_start); /* an op's dependencies ended before it started */
    double behind[P][MAX_OPS], done[P][2][V][M], done_behind[P][2][V][M], late = 0;
    for (int k = 0; k < n; k++) {
        int st = order[k].st, i = order[k].i;
        const op *o = &s->ops[st][i];
        double ready = i > 0 ? end[st][i - 1] : first, chain = i > 0 ? behind[st][i - 1] : 0;
        int c, from = o->kind == OP_F                       ? prev_part(s, st, o->chunk, &c)
                      : o->kind == OP_B || o->kind == OP_BW ? next_part(s, st, o->chunk, &c)
                                                            : -1;
        if (from >= 0) {
            int bw = o->kind != OP_F;
            ready = i > 0 ? fmax(ready, done[from][bw][c][o->micro]) : done[from][bw][c][o->micro];
            chain = fmax(chain, done_behind[from][bw][c][o->micro]);
        }
        behind[st][i] = chain + fmax(0, start[st][i] - ready) + fmax(0, end[st][i] - start[st][i] - dur[o->kind]);
        if (o->kind != OP_W)
            done[st][o->kind != OP_F][o->chunk][o->micro] = end[st][i],
                                done_behind[st][o->kind != OP_F][o->chunk][o->micro] = behind[st][i];
        late = fmax(late, behind[st][i]);
    }
    return late;
}

static result gather(const schedule *s, int modelled, double tol) {
    result r = {.which = s->which, .modelled = modelled, .span = 1e30};
    double dur[4], asked = 0; /* a stage's ops' asked time: the same on every stage, m (F + B + W) of work */
    op_times(s, dur);
    for (int st = 0; st < P; st++) {
        double a = 0;
        for (int i = 0; i < s->n[st]; i++)
            a += dur[s->ops[st][i].kind];
        asked = fmax(asked, a);
    }
    rank_out *o = malloc(sizeof *o);
    static rank_out all[P];
    for (int st = 0; st < P; st++) {
        if (spawn_result(st, o, sizeof *o) != sizeof *o) lecture_fail("rank %d of the pipeline returned nothing", st);
        all[st] = *o;
    }
    free(o);
    for (int pass = 0; pass < PASSES; pass++) {
        double first = 1e30, last = -1e30, most = 0;
        for (int st = 0; st < P; st++) {
            double busy = 0;
            for (int i = 0; i < all[st].n; i++) {
                first = fmin(first, all[st].start[pass][i]);
                last = fmax(last, all[st].end[pass][i]);
                busy += all[st].end[pass][i] - all[st].start[pass][i];
            }
            most = fmax(most, busy);
        }
        if (last - first >= r.span) continue;
        r.span = last - first, r.bubble = 1 - most / r.span, r.overrun = fmax(0, most - asked);
        const float *st_start[P], *st_end[P];
        for (int st = 0; st < P; st++)
            st_start[st] = all[st].start[pass], st_end[st] = all[st].end[pass];
        r.late = modelled ? pass_lateness(s, dur, st_start, st_end, first) : 0;
        for (int st = 0; st < P; st++) {
            r.n[st] = all[st].n;
            for (int i = 0; i < all[st].n; i++) {
                r.start[st][i] = (float)(all[st].start[pass][i] - first);
                r.end[st][i] = (float)(all[st].end[pass][i] - first);
            }
        }
    }
    r.diff = 0, r.tol = tol, r.sends = 0;
    for (int st = 0; st < P; st++) {
        r.held[st] = all[st].held;
        r.sends += all[st].sends;
        r.diff = fmax(r.diff, all[st].diff);
        if (!modelled) r.tol = fmax(r.tol, tol * all[st].size);
    }
    return r;
}

static run_args *new_args(const schedule *s, const mlp_config *c, const float *expected, size_t *size) {
    *size = sizeof(run_args) + sizeof(float) * (size_t)LAYERS * c->width * c->width;
    run_args *a = calloc(1, *size);
    a->sched = *s, a->cfg = *c;
    op_times(s, a->dur);
    memcpy(a->expected, expected, *size - sizeof(run_args));
    return a;
}

/* The real run: this machine's arithmetic; the gradients against one device's (gradient_tolerance in
 * lib/mlp.h: two float32 orders of the same sums differ by about 2 (layers + 1) max(batch, width) 2^-24 of the
 * largest gradient; a missing micro-batch or a doubled one is off by a whole gradient, thousands of times that). */
static result run_real(const schedule *s, const mlp_config *c, const float *expected) {
    size_t size;
    run_args *a = new_args(s, c, expected, &size);
    a->clock_base = now_seconds();
    progress("%s: real compute, spawn %d ranks", NAME[s->which], P);
    spawn(pipeline_main, P, a, size);
    free(a);
    result r = gather(s, 0, gradient_tolerance(c));
    check(r.diff <= r.tol, "%s: every weight gradient equal to one device's (%.3g <= %.3g)", NAME[s->which], r.diff,
          r.tol);
    return r;
}

/* The modelled run: the same order and messages, each op model_compute (a device busy for its time, the cores
 * free). Its bubble must be within 10% of the formula; a spawn the machine disturbed is run again, up to SPAWNS
 * times, and the quickest pass of all counts.
 *
 * On a loaded machine a pass can still be disturbed, both ways. With B the asked busy time, S the span the order
 * gives, f = 1 - B / S its formula, and a pass whose busiest stage ran o longer and whose span ran d longer:
 * bubble - f = (B d - S o) / (S (S + d)), between -o / span and d / span. o is measured exactly (the busiest
 * stage's busy time beyond what its ops asked). d is at most the lateness L (pass_lateness: the most delay along
 * one chain of dependencies, messages and wake-ups included). So the bound is (1 - 10%) f - o / span to (1 + 10%)
 * f + L / span; on a quiet machine o and L are a few milliseconds of a span of about 500 and the bound is about
 * the 10%. A wrong order's ops start when they can and take their time: its bubble misses the bound by the
 * order's own error (ZB-H1's order swapped for 1F1B's: 0.27 against 0.11), not the machine's. */
static double modelled_lower(const result *r, double want) { return 0.90 * want - r->overrun / r->span; }
static double modelled_upper(const result *r, double want) { return 1.10 * want + r->late / r->span; }

static result run_modelled(const schedule *s, const mlp_config *c, const float *expected) {
    double want = formula(s->which);
    size_t size;
    run_args *a = new_args(s, c, expected, &size);
    a->modelled = 1;
    result best = {0};
    for (int k = 1; k <= SPAWNS; k++) {
        progress("%s: modelled compute, spawn %d ranks (%d)", NAME[s->which], P, k);
        a->clock_base = now_seconds();
        spawn(pipeline_main, P, a, size);
        result r = gather(s, 1, NAN);
        if (k == 1 || r.span < best.span) best = r;
        best.spawns = k;
        if (fabs(best.bubble - want) <= 0.10 * want) break; /* within the bound, undisturbed */
    }
    free(a);
    check(best.bubble >= modelled_lower(&best, want) && best.bubble <= modelled_upper(&best, want),
          "%s, modelled: bubble %.4f within 10%% of the formula's %.4f, give or take an overrun of %.1f ms and a "
          "lateness of %.1f ms over the span of %.1f ms: %.4f to %.4f (quickest pass of %d spawn%s)",
          NAME[s->which], best.bubble, want, best.overrun, best.late, best.span, modelled_lower(&best, want),
          modelled_upper(&best, want), best.spawns, best.spawns == 1 ? "" : "s");
    return best;
}

/* The order as text, "F0.0 F0.1 BW1.0 ..." (kind, chunk.micro-batch), for a table a reader (or a test) checks. */
static const char *order_text(const schedule *s, int st, char *buf, size_t size) {
    size_t at = 0;
    for (int i = 0; i < s->n[st] && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s%d.%d", i ? " " : "", OP_NAME[s->ops[st][i].kind],
                               s->ops[st][i].chunk, s->ops[st][i].micro);
    return buf;
}

static order_sim show_order(const schedule *s) {
    double dur[4];
    op_times(s, dur);
    order_sim r = check_order(s, dur);
    if (!check(r.ok, "the %s order: %s", NAME[s->which], r.why))
        lecture_fail("the %s order cannot run (%s): its ranks are not started", NAME[s->which], r.why);
    /* The times are whole multiples of 10 ms, so span and busy time are exact; the bubble is one division and one
     * subtraction, each rounded once (2^-53 relative), so 1e-12 is far above that and far below any order's miss
     * (a slot late is 1/27 or more of 4 stages' time here). */
    check(fabs(r.bubble - formula(s->which)) <= 1e-12, "the %s order's simulated bubble %.6f equals its formula's %.6f",
          NAME[s->which], r.bubble, formula(s->which));
    table_t *t = table_new("the %s order on %d stages, %d micro-batches (op chunk.micro-batch): simulated with the "
                           "modelled times, bubble %.4f (formula %.4f)",
                           NAME[s->which], P, M, r.bubble, formula(s->which));
    table_column(t, "stage", NULL, "%d");
    table_column(t, "order", NULL, "%s");
    table_column(t, "most activations held", NULL, "%d");
    static char buf[MAX_OPS * 10];
    for (int st = 0; st < P; st++)
        table_row(t, st, order_text(s, st, buf, sizeof buf), r.held[st]);
    table_show(t);
    return r;
}

static float *one_device_grads(const mlp_config *c) {
    tensor *w[LAYERS], *acts[LAYERS + 1], *pre[LAYERS], *g[LAYERS];
    size_t n = (size_t)c->width * c->width;
    float *host = malloc(sizeof(float) * n * LAYERS);
    tensor *x = make_data(c, get_device(0));
    for (int j = 0; j < LAYERS; j++) {
        w[j] = init_layer(c, j, get_device(0));
        g[j] = empty(c->width, c->width, get_device(0));
    }
    forward(w, LAYERS, x, acts, pre);
    backward(w, LAYERS, acts, pre, g);
    for (int j = 0; j < LAYERS; j++) {
        tensor_to_host(g[j], host + j * n);
        tensor_free(w[j]);
        tensor_free(g[j]);
    }
    free_saved(LAYERS, acts, pre);
    tensor_free(x);
    return host;
}

static void chart_result(chart_t *ch, const schedule *s, const result *r) {
    char row[64], label[48];
    for (int st = 0; st < P; st++)
        for (int i = 0; i < r->n[st]; i++) {
            const op *o = &s->ops[st][i];
            snprintf(row, sizeof row, "%s %s: stage %d", NAME[s->which], r->modelled ? "modelled" : "real", st);
            snprintf(label, sizeof label, "chunk %d micro-batch %d", o->chunk, o->micro);
            if (r->modelled) chart_span_modelled(ch, row, OP_NAME[o->kind], label, r->start[st][i], r->end[st][i]);
            else chart_span(ch, row, OP_NAME[o->kind], label, r->start[st][i], r->end[st][i]);
        }
}

static int most_held(const int held[P]) {
    int most = 0;
    for (int st = 0; st < P; st++)
        most = held[st] > most ? held[st] : most;
    return most;
}

static void lecture_pipelines(void) {
    note("# Pipeline schedules today");
    note("lecture_08 runs GPipe and 1F1B: with p stages and m micro-batches a stage idles (p - 1) / (m + p - 1) of "
         "the time. Two schedules used in training now cut that *bubble* further: interleaved 1F1B (Narayanan et "
         "al. 2021, Megatron-LM) and zero-bubble (Qi et al. 2023). Here each order is made by a function, checked "
         "by rules, and run on %d ranks, with this machine's arithmetic and with modelled compute. Then the "
         "pipeline joins data and tensor parallelism on a 2 x 2 x 2 mesh of 8 ranks, and the same formulas choose a "
         "configuration for two published runs, Llama 3 405B and DeepSeek-V3.",
         P);
    mlp_config c = {.batch = lecture_quick() ? 256 : 512, .width = lecture_quick() ? 128 : 256, .layers = LAYERS};
    note("The model: lecture_08's MLP, %d layers %d wide, a batch of %d cut into %d micro-batches; the loss is the "
         "mean of the output's squares. One device computes its gradients first; every schedule's must equal them.",
         c.layers, c.width, c.batch, M);
    float *expected = one_device_grads(&c);
    schedule s[N_SCHEDULES];
    order_sim sims[N_SCHEDULES];
    result real[N_SCHEDULES], modelled[N_SCHEDULES];

    note("## Interleaved 1F1B\n\n"
         "Give each stage v = %d chunks of layers that are not adjacent: stage s holds parts s and s + p of the "
         "model, so a micro-batch goes round the %d stages twice. Each chunk is 1/v of a stage's work, so the fill "
         "and drain shrink v times: the bubble is (p - 1) / (v m + p - 1) of the total time (the convention "
         "lecture_08 measures; of the ideal time it is (p - 1) / (v m)). The price: a micro-batch crosses v p - 1 "
         "stage boundaries each way, not p - 1.",
         V, P);
    gpipe_order(&s[GPIPE]);
    megatron_order(&s[ONE_F_ONE_B], 1);
    megatron_order(&s[INTERLEAVED], V);
    note("`megatron_order` makes both: stage s runs (p - s - 1) 2 + (v - 1) p forwards to fill the pipe (1F1B: p - "
         "s - 1), then one forward and one backward in turn, then drains. `check_order` checks every op once and "
         "replays the order with the modelled times, each message received in the order it was sent; an order "
         "that leaves a stage waiting for what never comes fails. GPipe, every forward and then every backward, is "
         "here to compare: 1F1B's bubble, but every stage holds all m micro-batches.");
    sims[GPIPE] = show_order(&s[GPIPE]);
    sims[ONE_F_ONE_B] = show_order(&s[ONE_F_ONE_B]);
    sims[INTERLEAVED] = show_order(&s[INTERLEAVED]);

    note("## Zero-bubble: B and W\n\n"
         "A layer's backward is two products: the input's gradient dx = dh w^T (**B**), which the stage before "
         "waits for, and the weights' gradient dw = x^T dh (**W**), which nothing waits for. ZB-H1 keeps the B's "
         "on the critical path and holds the W's back into what would be bubble, holding no more activations than "
         "1F1B does on its stage 0 (p micro-batches; a micro-batch's are kept until its W).");
    zb_h1_order(&s[ZB_H1]);
    note("`zb_h1_order` places the B's first, at the slots that keep stage 0 busy (`b_slot`): the first leaves the "
         "last stage at time p and climbs a stage a slot, then one every 3 slots (F, B, W) while forwards remain, "
         "one every 2 (B, W) after. Between them a stage runs a forward if it has come and the stage holds fewer "
         "than p, else its oldest held-back W. With F = B = W = t, stage 0 runs its p forwards, waits (p - 1) t "
         "for the first B to climb back, and is never idle again: the later stages, whose W's were held back, send "
         "a B every B + W in the cool-down. Its span is 3 m t + (p - 1) t, so the bubble is (p - 1) / (3 m + p - 1) "
         "of the total: %.4f here against 1F1B's %.4f, a third of 1F1B's idle time (p - 1)(F + B + W).",
         formula(ZB_H1), formula(ONE_F_ONE_B));
    sims[ZB_H1] = show_order(&s[ZB_H1]);
    check(most_held(sims[ZB_H1].held) <= most_held(sims[ONE_F_ONE_B].held) &&
                  sims[ZB_H1].held[0] == sims[ONE_F_ONE_B].held[0],
          "ZB-H1 holds %d micro-batches' activations at most on any stage (stage 0: %d), as 1F1B at most (%d, stage "
          "0: %d)",
          most_held(sims[ZB_H1].held), sims[ZB_H1].held[0], most_held(sims[ONE_F_ONE_B].held),
          sims[ONE_F_ONE_B].held[0]);

    note("## Run on %d ranks\n\n"
         "Each schedule runs twice. The **real** run computes the layers (the MLP's %d layers cut into p v chunks "
         "or p stages) and compares every weight gradient with one device's. The **modelled** run sends the same "
         "messages but each op is modelled compute (`model_compute`), as where every stage has a GPU: a stage's "
         "forward 20 ms, its backward 40 ms (B 20, W 20); an interleaved chunk half of each. Each spawn makes %d "
         "passes; the quickest is shown.",
         P, LAYERS, PASSES);
    for (int w = 0; w < N_SCHEDULES; w++) {
        real[w] = run_real(&s[w], &c, expected);
        modelled[w] = run_modelled(&s[w], &c, expected);
    }
    predict("What fraction of the time will ZB-H1's busiest stage idle, with modelled compute on 4 stages and 8 "
            "micro-batches?",
            modelled[ZB_H1].bubble, "");
    free(expected);
    check(modelled[ZB_H1].bubble < modelled[ONE_F_ONE_B].bubble, "ZB-H1's modelled bubble %.4f below 1F1B's %.4f",
          modelled[ZB_H1].bubble, modelled[ONE_F_ONE_B].bubble);
    check(most_held(real[ZB_H1].held) <= most_held(real[ONE_F_ONE_B].held) &&
                  real[ZB_H1].held[0] == real[ONE_F_ONE_B].held[0],
          "ZB-H1's ranks held %d activations at most (stage 0: %d), 1F1B's %d (stage 0: %d) (measured)",
          most_held(real[ZB_H1].held), real[ZB_H1].held[0], most_held(real[ONE_F_ONE_B].held),
          real[ONE_F_ONE_B].held[0]);
    check(real[INTERLEAVED].sends == 2 * M * (V * P - 1) && real[ONE_F_ONE_B].sends == 2 * M * (P - 1),
          "messages counted: interleaved %d = 2 m (v p - 1), 1F1B %d = 2 m (p - 1)", real[INTERLEAVED].sends,
          real[ONE_F_ONE_B].sends);

    table_t *t = table_new("bubbles on %d stages, %d micro-batches, of the total time (1 - the busiest stage's busy "
                           "time / span): the formula, the order simulated, the run measured; modelled compute: F "
                           "20 ms a stage, B = W = F; activations held: the most micro-batches a rank kept at once",
                           P, M);
    table_column(t, "schedule", NULL, "%s");
    table_column(t, "run", NULL, "%s");
    table_column(t, "formula", NULL, "%.4f");
    table_column(t, "simulated", NULL, "%.4f");
    table_column(t, "bubble", NULL, "%.4f");
    table_column(t, "span", "ms", "%.1f");
    table_column(t, "activations held, stage 0", NULL, "%d");
    table_column(t, "activations held, stage 1", NULL, "%d");
    table_column(t, "activations held, stage 2", NULL, "%d");
    table_column(t, "activations held, stage 3", NULL, "%d");
    table_column(t, "messages", NULL, "%d");
    table_column(t, "spawns", NULL, "%d");
    table_column(t, "max |gradient - one device|", NULL, "%.3g");
    table_column(t, "tolerance", NULL, "%.3g");
    for (int w = 0; w < N_SCHEDULES; w++)
        for (int mod = 0; mod < 2; mod++) {
            const result *r = mod ? &modelled[w] : &real[w];
            table_row(t, NAME[w], mod ? "modelled" : "real", formula(w), sims[w].bubble, r->bubble, r->span, r->held[0],
                      r->held[1], r->held[2], r->held[3], r->sends, mod ? r->spawns : 1, mod ? NAN : r->diff,
                      mod ? NAN : r->tol);
        }
    table_show(t);
    table_t *b = table_new("modelled runs against the formula's bound, (1 - 0.1) formula - overrun / span to (1 + "
                           "0.1) formula + lateness / span (the machine's disturbance of the quickest pass; see "
                           "run_modelled)");
    table_column(b, "schedule", NULL, "%s");
    table_column(b, "formula", NULL, "%.4f");
    table_column(b, "bubble", NULL, "%.4f");
    table_column(b, "span", "ms", "%.1f");
    table_column(b, "overrun: busiest stage beyond its asked time", "ms", "%.2f");
    table_column(b, "lateness: the longest chain's delay", "ms", "%.2f");
    table_column(b, "lower bound", NULL, "%.4f");
    table_column(b, "upper bound", NULL, "%.4f");
    table_column(b, "spawns", NULL, "%d");
    for (int w = 0; w < N_SCHEDULES; w++) {
        const result *r = &modelled[w];
        table_row(b, NAME[w], formula(w), r->bubble, r->span, r->overrun, r->late, modelled_lower(r, formula(w)),
                  modelled_upper(r, formula(w)), r->spawns);
    }
    table_show(b);
    chart_t *ch = chart_new("time (ms, from each pass's first start)", "stage",
                            "timelines on %d stages, %d micro-batches: real and modelled compute", P, M);
    for (int w = 0; w < N_SCHEDULES; w++) {
        chart_result(ch, &s[w], &real[w]);
        chart_result(ch, &s[w], &modelled[w]);
    }
    chart_show(ch);
    note("With modelled compute the bubbles follow their formulas: GPipe %.3f and 1F1B %.3f (formula %.3f), "
         "interleaved %.3f (%.3f), ZB-H1 %.3f (%.3f), ZB-H1 holding %d activations on stage 0 as 1F1B does (%d), "
         "GPipe %d. The interleaved run sent %d messages to 1F1B's %d. The real runs (GPipe %.3f, 1F1B %.3f, "
         "interleaved %.3f, ZB-H1 %.3f) also carry %d ranks' turns on this machine's cores; every gradient matched "
         "one device's.",
         modelled[GPIPE].bubble, modelled[ONE_F_ONE_B].bubble, formula(ONE_F_ONE_B), modelled[INTERLEAVED].bubble,
         formula(INTERLEAVED), modelled[ZB_H1].bubble, formula(ZB_H1), real[ZB_H1].held[0], real[ONE_F_ONE_B].held[0],
         real[GPIPE].held[0], real[INTERLEAVED].sends, real[ONE_F_ONE_B].sends, real[GPIPE].bubble,
         real[ONE_F_ONE_B].bubble, real[INTERLEAVED].bubble, real[ZB_H1].bubble, P);
    mesh_section();          /* lecture_pipelines/mesh.c */
    configuration_section(); /* lecture_pipelines/configure.c */
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_pipelines); }
