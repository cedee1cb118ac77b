/*
 * pipeline.c: pipeline stages' bookkeeping, clock stamps and report
 * (pipeline.h), for lecture_08.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline.h"

const char *const SCHEDULE_NAMES[2] = {"GPipe", "1F1B"};

double bubble_fraction(int stages, int micro_batches) { return (double)(stages - 1) / (micro_batches + stages - 1); }

double pipeline_bubble(const double *busy, int stages, double span, double *mean) {
    double most = 0, sum = 0;
    for (int r = 0; r < stages; r++) {
        most = fmax(most, busy[r]);
        sum += 1 - busy[r] / span;
    }
    if (mean) *mean = sum / stages;
    return 1 - most / span;
}

stage *stage_new(const train_args *a, int rank, int world_size) {
    const mlp_config *c = &a->cfg;
    stage *s = calloc(1, sizeof *s);
    *s = (stage){.a = a, .rank = rank, .world = world_size, .m = a->micro_batches, .device = get_device(rank)};
    s->per_stage = c->layers / world_size;
    s->first_layer = rank * s->per_stage;
    s->mb = c->batch / s->m;
    s->modelled = a->forward_ms > 0;
    s->runs = !s->modelled ? PIPE_RUNS : lecture_quick() ? 1 : MODELLED_RUNS;
    if (rank < world_size - 1) s->recv_grad = empty(s->mb, c->width, s->device);
    if (s->modelled) return s; /* no layers, no data: only messages of an activation's shape */
    for (int j = 0; j < s->per_stage; j++) {
        s->w[j] = init_layer(c, s->first_layer + j, s->device); /* only this stage's layers */
        s->grads[j] = empty(c->width, c->width, s->device);
    }
    /* Messages land in buffers the stage reuses, as a pipeline engine does
     * (every micro-batch's messages have the same shape): on the 2-core VM
     * a 256 KiB receive into a new buffer the rank had just written took
     * 0.14-0.21 ms, into memory never touched 0.9 ms, into a buffer it had
     * received into before 0.02-0.03 ms (bench/bench_stage_msg.c: Open
     * MPI's receive is a kernel copy, process_vm_readv, and that VM pays
     * for the first time the kernel writes a page). */
    if (rank == 0) s->data = make_data(c, s->device);                        /* only stage 0 reads data */
    if (rank == world_size - 1) s->expected = expected_output(a, s->device); /* the last compares */
    return s;
}

void stage_free(stage *s) {
    for (int j = 0; j < s->per_stage; j++) {
        tensor_free(s->w[j]);
        tensor_free(s->grads[j]);
    }
    while (s->n_spare > 0)
        tensor_free(s->spare[--s->n_spare]);
    if (s->recv_grad) tensor_free(s->recv_grad);
    if (s->data) tensor_free(s->data);
    if (s->expected) tensor_free(s->expected);
    free(s);
}

mlp_config pipeline_config(const mlp_config *base) {
    mlp_config c = *base;
    /* A micro-batch's work must be long against a message's (~0.1 ms): 128 rows (~0.3 ms a micro-batch) measured 4
     * times the formula's bubble, 1024 (~7 ms) near it; more depth lengthens the work, not the messages (2-core VM). */
    c.batch = lecture_quick() ? 256 : 1024;
    c.layers = 2 * base->layers;
    return c;
}

void stage_begin_pass(stage *s) {
    s->n_events = 0;
    s->backwards_done = 0; /* gradients start again from zero */
    s->loss = 0;
}

double ms_since(const stage *s) { return (now_seconds() - s->a->clock_base) * 1e3; }

void stamp(stage *s, int backward, int k, double start) {
    device_synchronize(); /* on a GPU, the work has really ended */
    s->events[s->run][s->n_events++] = (pipe_event){(float)backward, (float)k, (float)start, (float)ms_since(s)};
}

tensor *stage_input(stage *s, int k) {
    if (s->rank == 0) return s->modelled ? NULL : row_slice(s->data, k * s->mb, (k + 1) * s->mb);
    return s->n_spare > 0 ? s->spare[--s->n_spare] : empty(s->mb, s->a->cfg.width, s->device);
}

tensor *stage_forward(stage *s, int k, tensor *x) {
    if (s->modelled) { /* the layers as a device would take them, and the activation they make */
        for (int j = 0; j < s->per_stage; j++) {
            s->acts[k][j] = j ? NULL : x;
            s->pre[k][j] = NULL;
        }
        s->acts[k][s->per_stage] = zeros(s->mb, s->a->cfg.width, s->device);
        model_compute(s->a->forward_ms);
    } else {
        forward(s->w, s->per_stage, x, s->acts[k], s->pre[k]);
        if (s->rank == s->world - 1) s->loss += mse_loss(s->acts[k][s->per_stage]) / s->m; /* the last's work */
    }
    return s->acts[k][s->per_stage];
}

void stage_forward_done(stage *s, int k) {
    if (s->rank == s->world - 1 && s->run == 0 && !s->modelled) {
        /* Checked on the first pass only: the later passes compute the same
         * numbers (same weights, data and order), and a check is not the
         * pipeline's work: it took ~0.1 ms a micro-batch on the last stage,
         * between two of its operations, in every pass timed. */
        tensor *rows = row_slice(s->expected, k * s->mb, (k + 1) * s->mb);
        s->out_diff = fmax(s->out_diff, max_abs_diff(s->acts[k][s->per_stage], rows));
        tensor_free(rows);
    }
    if (++s->in_flight > s->most_in_flight) s->most_in_flight = s->in_flight;
}

tensor *stage_backward(stage *s, int k, tensor *dy) {
    if (s->modelled) { /* every layer's gradients as a device would take them, and the input's it sends back */
        model_compute(s->a->backward_ms);
        return s->rank > 0 ? zeros(s->mb, s->a->cfg.width, s->device) : NULL;
    }
    if (!dy) { /* the last stage starts from the loss: its work, timed with the rest */
        dy = mse_loss_backward(s->acts[k][s->per_stage]);
        scale_(dy, 1.0f / s->m); /* d(mean over micro-batches) */
    }
    /* Every stage computes its input's gradient, stage 0 too, though
     * nothing uses the data's: the bubble formula assumes stages of
     * equal work. */
    for (int j = s->per_stage - 1; j >= 0; j--) {
        tensor *dx = NULL;
        layer_backward(s->acts[k][j], s->pre[k][j], s->w[j], dy, s->grads[j], &dx,
                       s->backwards_done == 0 ? 0.0f : 1.0f);
        if (dy != s->recv_grad) tensor_free(dy);
        dy = dx;
    }
    return dy;
}

void stage_backward_done(stage *s, int k, tensor *dx) {
    s->backwards_done++;
    s->dx_out[k] = dx;                     /* kept until its send is done (the schedule's end) */
    if (s->sent[k]) dist_wait(s->sent[k]); /* its activation went out long ago */
    free_saved(s->per_stage, s->acts[k], s->pre[k]);
    if (s->rank == 0) tensor_free(s->acts[k][0]); /* its rows of the data: a view */
    else s->spare[s->n_spare++] = s->acts[k][0];  /* a receive buffer, for a later micro-batch */
    s->in_flight--;
}

/* The bubble the schedule would have with each operation's measured time
 * and nothing in between: each stage runs its operations in the order it
 * ran them, each starting when the stage is free and what it needs is done
 * (a forward needs the previous stage's forward of that micro-batch, a
 * backward the next stage's backward). Events: stage r's at v[r * stride]. */
static double replayed_bubble(const float *v, int stride, int world, int m, double *mean) {
    double done[LECTERN_MAX_WORLD][2][MAX_MICRO_BATCHES], free_at[LECTERN_MAX_WORLD] = {0},
                                                          busy[LECTERN_MAX_WORLD] = {0};
    int next[LECTERN_MAX_WORLD] = {0}, left = world * 2 * m;
    for (int r = 0; r < world; r++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < m; k++)
                done[r][b][k] = -1;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < world; r++) {
            while (next[r] < 2 * m) {
                const pipe_event *e = (const pipe_event *)(v + r * stride) + next[r];
                int b = e->backward > 0, k = (int)e->micro_batch, from = b ? r + 1 : r - 1;
                double need = 0;
                if (from >= 0 && from < world) {
                    if (done[from][b][k] < 0) break; /* not replayed yet */
                    need = done[from][b][k];
                }
                double d = e->end_ms - e->start_ms, start = fmax(free_at[r], need);
                done[r][b][k] = free_at[r] = start + d;
                busy[r] += d;
                next[r]++;
                left--;
                moved = 1;
            }
        }
        if (!moved) return *mean = NAN; /* an order no schedule allows: cannot happen for the ones here */
    }
    double span = 0;
    for (int r = 0; r < world; r++)
        span = fmax(span, free_at[r]);
    return pipeline_bubble(busy, world, span, mean);
}

/* How long stages a and b computed at the same time: the overlap of their
 * operations' intervals, summed. */
static double together(const pipe_event *a, const pipe_event *b, int n) {
    double t = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            t += fmax(0, fmin(a[i].end_ms, b[j].end_ms) - fmax(a[i].start_ms, b[j].start_ms));
    return t;
}

/* A modelled pass's lateness (see LATE_SLACK_MS): each operation's time beyond its asked time, and its start beyond
 * the moment it could start (its stage's previous operation ended, and the operation it waits for on the
 * neighbouring stage: a forward the previous stage's forward of that micro-batch, a backward the next stage's
 * backward), each beyond LATE_SLACK_MS (a message and a wake-up take 0.1-0.5 ms), summed over every stage. */
static double pass_lateness(const pipe_result *res, double forward_ms, double backward_ms) {
    float done[MAX_STAGES][2][MAX_MICRO_BATCHES]; /* [stage][backward][micro-batch]: when it ended */
    for (int r = 0; r < res->stages; r++)
        for (int i = 0; i < 2 * res->m; i++) {
            const pipe_event *e = &res->timeline[r][i];
            done[r][e->backward > 0][(int)e->micro_batch] = e->end_ms;
        }
    double late = 0;
    for (int r = 0; r < res->stages; r++)
        for (int i = 0; i < 2 * res->m; i++) {
            const pipe_event *e = &res->timeline[r][i];
            int bw = e->backward > 0, k = (int)e->micro_batch;
            double ready = i > 0 ? res->timeline[r][i - 1].end_ms : e->start_ms; /* the first: nothing before */
            if (!bw && r > 0) ready = fmax(ready, done[r - 1][0][k]);
            if (bw && r < res->stages - 1) ready = fmax(ready, done[r + 1][1][k]);
            late += fmax(0, e->start_ms - ready - LATE_SLACK_MS);
            late += fmax(0, e->end_ms - e->start_ms - (bw ? backward_ms : forward_ms) - LATE_SLACK_MS);
        }
    return late;
}

table_t *report_timeline(stage *s, int schedule, double grad_diff, double grad_tol) {
    /* per rank: the runs' events, then the most held, the gradients' difference and tolerance */
    int per_run = 2 * s->m * 4, per_rank = PIPE_RUNS * per_run + 3;
    float mine[PIPE_RUNS * 2 * MAX_MICRO_BATCHES * 4 + 3];
    for (int k = 0; k < PIPE_RUNS; k++)
        memcpy(mine + k * per_run, s->events[k], sizeof(pipe_event) * 2 * s->m);
    mine[per_rank - 3] = (float)s->most_in_flight;
    mine[per_rank - 2] = (float)grad_diff;
    mine[per_rank - 1] = (float)grad_tol;
    tensor *local = tensor_from(mine, per_rank, 0, s->device);
    tensor *all = s->rank == 0 ? empty((int64_t)per_rank * s->world, 0, s->device) : NULL;
    dist_gather(all, local, 0);
    tensor_free(local);
    if (s->rank != 0) return NULL;
    float *v = malloc(sizeof(float) * per_rank * s->world);
    tensor_to_host(all, v);
    tensor_free(all);
    int best = 0;
    double first = 0, last = 0, best_span = 1e30;
    for (int k = 0; k < s->runs; k++) {
        double f = 1e30, l = -1e30;
        for (int r = 0; r < s->world; r++) {
            const pipe_event *e = (const pipe_event *)(v + r * per_rank + k * per_run);
            for (int i = 0; i < 2 * s->m; i++) {
                f = fmin(f, e[i].start_ms);
                l = fmax(l, e[i].end_ms);
            }
        }
        if (l - f < best_span) {
            best_span = l - f;
            best = k;
            first = f;
            last = l;
        }
    }
    pipe_result res = {.formula = bubble_fraction(s->world, s->m),
                       .span_ms = last - first,
                       .load = -1,
                       .cores = sysconf(_SC_NPROCESSORS_ONLN),
                       .stages = s->world,
                       .m = s->m,
                       .modelled = s->modelled,
                       .schedule = schedule};
    double busy[LECTERN_MAX_WORLD] = {0}, stage0_last_forward = 0, stage1_first_forward = 1e30;
    for (int r = 0; r < s->world; r++) {
        const pipe_event *e = (const pipe_event *)(v + r * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++) {
            busy[r] += e[i].end_ms - e[i].start_ms;
            if (e[i].backward == 0 && r == 0) stage0_last_forward = fmax(stage0_last_forward, e[i].end_ms);
            if (e[i].backward == 0 && r == 1) stage1_first_forward = fmin(stage1_first_forward, e[i].start_ms);
            res.timeline[r][i] = (pipe_event){e[i].backward, e[i].micro_batch, e[i].start_ms - (float)first,
                                              e[i].end_ms - (float)first};
        }
        res.held[r] = (int)v[r * per_rank + per_rank - 3];
    }
    res.bubble = pipeline_bubble(busy, s->world, res.span_ms, &res.mean);
    if (s->modelled) res.late_ms = pass_lateness(&res, s->a->forward_ms, s->a->backward_ms);
    res.stage0_held = res.held[0];
    res.overlapped = stage1_first_forward < stage0_last_forward;
    res.together_ms = together(res.timeline[0], res.timeline[1], 2 * s->m);
    res.busy0_ms = busy[0];
    const char *copy = getenv("OMPI_MCA_btl_vader_single_copy_mechanism"); /* what the pool told Open MPI */
    res.single_copy = copy && strcmp(copy, "cma") == 0;
    res.replayed = replayed_bubble(v + best * per_run, per_rank, s->world, s->m, &res.replayed_mean);
    table_t *t = NULL; /* a modelled run shows none */
    if (!s->modelled) {
        /* the caption holds every figure the notes after it state (the sentence guard, docs/authoring.md) */
        t = table_new("%s on %d stages (quickest of %d runs): span %.2f ms, bubble %.3f of the total (the "
                      "busiest stage's idle time; formula %.3f, %+.0f%%), idle time averaged over the stages "
                      "%.3f; replayed with each stage's own operation times and nothing between them: bubble "
                      "%.3f (%.3f left to the time between operations), averaged %.3f",
                      SCHEDULE_NAMES[schedule], s->world, s->runs, res.span_ms, res.bubble, res.formula,
                      100 * (res.bubble / res.formula - 1), res.mean, res.replayed, res.bubble - res.replayed,
                      res.replayed_mean);
        table_column(t, "stage", NULL, "%d");
        table_column(t, "idle, of the total", NULL, "%.3f");
        table_column(t, "most micro-batches' activations held at once", NULL, "%d");
        table_column(t, "layers", NULL, "%s");
        table_column(t, "gradients over the micro-batches: max |PP - one device|", NULL, "%.3g");
        table_column(t, "tolerance", NULL, "%.3g");
        for (int r = 0; r < s->world; r++) {
            const float *tail = v + r * per_rank + per_rank - 3;
            char range[32];
            layer_range(r * s->per_stage, (r + 1) * s->per_stage - 1, range, sizeof range);
            table_row(t, r, 1 - busy[r] / res.span_ms, (int)tail[0], range, (double)tail[1], (double)tail[2]);
        }
    }
    getloadavg(&res.load, 1);
    for (int k = 0; k < 2; k++) { /* the first stage (k = 0) and the last */
        const pipe_event *e = (const pipe_event *)(v + (k ? s->world - 1 : 0) * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++)
            res.op_ms[k][e[i].backward > 0] += (e[i].end_ms - e[i].start_ms) / s->m;
    }
    spawn_return(&res, sizeof res);
    free(v);
    return t;
}

const int MODELLED_SHAPES[N_MODELLED_SHAPES][3] = {{2, 8, GPIPE},       {2, 8, ONE_F_ONE_B}, {4, 8, GPIPE},
                                                   {4, 8, ONE_F_ONE_B}, {4, 32, GPIPE},      {4, 32, ONE_F_ONE_B}};

void run_modelled_pipelines(spawn_fn fn, const mlp_config *c, pipe_result twin[N_MODELLED_SHAPES]) {
    train_args a = {.cfg = *c, .forward_ms = MODELLED_F_MS, .backward_ms = 2 * MODELLED_F_MS};
    for (int k = 0; k < N_MODELLED_SHAPES; k++) {
        int p = MODELLED_SHAPES[k][0], m = MODELLED_SHAPES[k][1];
        a.micro_batches = m, a.schedule = MODELLED_SHAPES[k][2], a.clock_base = now_seconds();
        progress("pipeline parallelism: modelled %s, %d stages, %d micro-batches", SCHEDULE_NAMES[a.schedule], p, m);
        if (c->batch % m) lecture_fail("the batch (%d) does not divide into %d micro-batches", c->batch, m);
        /* spawned again while its quickest pass misses the bound (see MODELLED_SPAWNS); the quickest pass of all
         * counts */
        for (int n = 1; n <= MODELLED_SPAWNS; n++) {
            if (n > 1)
                progress("pipeline parallelism: modelled %s, %d stages, %d micro-batches: bubble %.4f against %.4f, "
                         "spawned again (%d of at most %d)",
                         SCHEDULE_NAMES[a.schedule], p, m, twin[k].bubble, twin[k].formula, n, MODELLED_SPAWNS);
            a.clock_base = now_seconds();
            spawn(fn, p, &a, sizeof a);
            pipe_result r;
            if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("no modelled pipeline result");
            if (n == 1 || r.span_ms < twin[k].span_ms) twin[k] = r;
            twin[k].spawns = n;
            if (fabs(twin[k].bubble / twin[k].formula - 1) <= MODELLED_BOUND) break; /* no lateness needed */
        }
    }
}

double modelled_upper(const pipe_result *r) { return (1 + MODELLED_BOUND) * r->formula + r->late_ms / r->span_ms; }

double modelled_lower(const pipe_result *r) { return (1 - MODELLED_BOUND) * r->formula - r->late_ms / r->span_ms; }

table_t *pipeline_pairs_table(const pipe_result real[3], const pipe_result modelled[N_MODELLED_SHAPES]) {
    table_t *t = table_new("Pipeline bubbles, real and modelled compute (the quickest pass of each; a modelled shape "
                           "whose quickest pass missed its bound spawned again, at most %d times)",
                           MODELLED_SPAWNS);
    table_column(t, "schedule", NULL, "%s");
    table_column(t, "stages p", NULL, "%d");
    table_column(t, "micro-batches m", NULL, "%d");
    table_column(t, "formula (p - 1) / (m + p - 1)", NULL, "%.4f");
    table_column(t, "real: measured bubble", NULL, "%.4f");
    table_column(t, "modelled: measured bubble", NULL, "%.4f");
    table_column(t, "modelled / formula - 1", NULL, "%+.3f");
    table_column(t, "modelled: span", "ms", "%.1f");
    table_column(t, "real: stage 0's activations held", NULL, "%.0f");
    table_column(t, "modelled: stage 0's activations held", NULL, "%d");
    table_column(t, "modelled: spawns", NULL, "%d");
    table_column(t, "modelled: late beyond 0.5 ms, summed", "ms", "%.1f"); /* ends and starts */
    table_column(t, "modelled: lower bound, (1 - 0.1) formula - late / span", NULL, "%.4f");
    table_column(t, "modelled: bound, (1 + 0.1) formula + late / span", NULL, "%.4f");
    for (int k = 0; k < N_MODELLED_SHAPES; k++) {
        const pipe_result *md = &modelled[k], *r = NULL;
        for (int j = 0; j < 3; j++) /* the real run of the same schedule and shape, if there is one */
            if (real[j].stages == md->stages && real[j].m == md->m && real[j].schedule == md->schedule) r = &real[j];
        table_row(t, SCHEDULE_NAMES[md->schedule], md->stages, md->m, md->formula, r ? r->bubble : NAN, md->bubble,
                  md->bubble / md->formula - 1, md->span_ms, r ? (double)r->stage0_held : NAN, md->stage0_held,
                  md->spawns, md->late_ms, modelled_lower(md), modelled_upper(md));
    }
    return t;
}

chart_t *pipelines_chart(const pipe_result *real, const pipe_result *modelled, const char *schedule) {
    chart_t *c = chart_new("time (ms, from each pass's first start)", "stage",
                           "%s timeline, %d stages, %d micro-batches: real and modelled compute", schedule,
                           real->stages, real->m);
    for (int twin = 0; twin < 2; twin++) {
        const pipe_result *p = twin ? modelled : real;
        for (int r = 0; r < p->stages; r++)
            for (int i = 0; i < 2 * p->m; i++) {
                const pipe_event *e = &p->timeline[r][i];
                char row[32], label[32];
                snprintf(row, sizeof row, "%s: stage %d", twin ? "modelled" : "real", r);
                snprintf(label, sizeof label, "micro-batch %d", (int)e->micro_batch);
                (twin ? chart_span_modelled : chart_span)(c, row, e->backward > 0 ? "backward" : "forward", label,
                                                          e->start_ms, e->end_ms);
            }
    }
    return c;
}

/* Why the measured bubble is where it is against the formula, which gives every stage a core, equal work and
 * free messages. Replayed with the measured operations and free messages, a bubble below the formula means the
 * slowest stage set the pace and the fill and drain were a faster stage's shorter operations. */
const char *bubble_why(const pipe_result *r, int stages) {
    double off = r->bubble / r->formula - 1;
    if (stages > r->cores) /* both ways at once: the wait for a core is idle time, the turns lost inside an
                            * operation count as its work */
        return fabs(off) <= 0.15
                       ? "Within 15% of the formula, though the ranks outnumber the cores: a stage that is ready waits "
                         "for a core another stage holds (idle time the formula does not have), and an operation's "
                         "recorded time includes the turns its rank lost to others (work it did not do); the two partly "
                         "cancel, on this machine, not by the schedule"
               : off > 0 ? "Larger than the formula: the ranks outnumber the cores, so a stage that is ready to work "
                           "waits for its turn on a core another stage holds; that wait is this machine's, not the "
                           "schedule's"
                         : "Smaller than the formula: the ranks outnumber the cores, so an operation's recorded time "
                           "includes the turns its rank waited for a core, counted here as work, not idle; that is "
                           "this machine's, not the schedule's";
    int unequal = fabs(r->replayed / r->formula - 1) > 0.05;
    if (fabs(off) <= 0.15)
        return unequal ? "Within 15% of the formula, though the stages ran at unequal speeds, which moves it too: the "
                         "replay below splits the two"
                       : "Within 15% of the formula: what is left over is the time between operations (the "
                         "messages, mostly), which the formula leaves out";
    if (off < 0)
        return "Smaller than the formula: the stage that set the pace was the slower, so what it waited through at "
               "the start and end was a faster stage's shorter operations (the replay below)";
    if (r->load > r->cores + stages) /* the load average counts this lecture's own ranks too */
        return "Larger than the formula: the machine was busy with other work (a load average above its cores plus "
               "this spawn's ranks), so a stage that was ready waited for a core; the formula assumes every stage has "
               "one";
    return "Larger than the formula by more than the messages would explain: the replay below splits the gap";
}

void note_replay(const pipe_result *r) {
    /* The formula assumes equal stages and free messages; the replay keeps the first breach, drops the second */
    note("The same schedule replayed with each stage's own measured forward and backward times, and nothing between "
         "one operation and the next, gives a bubble of %.3f: the time between operations (messages, the bookkeeping "
         "around them, waiting for a core) accounts for the other %.3f of the %.3f measured. Stages of unequal speed "
         "show in the idle time averaged over the stages, %.3f measured (%.3f replayed): a faster stage waits for the "
         "slowest, which sets the pace. Stage 0's forwards took %.2f ms and its backwards %.2f ms on average, stage "
         "%d's %.2f and %.2f: the stages do the same arithmetic (the last adds its loss, tens of microseconds), so a "
         "gap between them is the machine's: %d ranks taking turns on %ld cores (with their progress threads and "
         "other processes), and CPUs that run the same code at different speeds (a 2-core VM's were 16%% apart with "
         "nothing else running: docs/benchmarks.md).",
         r->replayed, r->bubble - r->replayed, r->bubble, r->mean, r->replayed_mean, r->op_ms[0][0], r->op_ms[0][1],
         r->stages - 1, r->op_ms[1][0], r->op_ms[1][1], r->stages, r->cores);
}

table_t *bubble_conventions_table(int m) {
    table_t *t = table_new("the bubble two ways");
    table_column(t, "stages p", NULL, "%d");
    table_column(t, "micro-batches m", NULL, "%d");
    table_column(t, "of the total (p - 1) / (m + p - 1)", NULL, "%.3f");
    table_column(t, "of the ideal (p - 1) / m", NULL, "%.3f");
    int shapes[][2] = {{2, m}, {4, m}, {4, 32}};
    for (int k = 0; k < 3; k++)
        table_row(t, shapes[k][0], shapes[k][1], bubble_fraction(shapes[k][0], shapes[k][1]),
                  (double)(shapes[k][0] - 1) / shapes[k][1]);
    return t;
}

/* A modelled run's checks: its bubble against the formula, and 1F1B's activations per stage against p - s. */
void check_modelled(const pipe_result *r) {
    check(r->bubble >= modelled_lower(r) && r->bubble <= modelled_upper(r),
          "modelled %s, %d stages, %d micro-batches: measured bubble %.4f within %.0f%% of (p-1)/(m+p-1) = %.4f "
          "give or take lateness %.1f ms / span %.1f ms: %.4f to %.4f (quickest pass of %d spawn%s)",
          SCHEDULE_NAMES[r->schedule], r->stages, r->m, r->bubble, 100 * MODELLED_BOUND, r->formula, r->late_ms,
          r->span_ms, modelled_lower(r), modelled_upper(r), r->spawns, r->spawns == 1 ? "" : "s");
    int over = 0; /* stages s that held more than p - s */
    for (int s = 0; s < r->stages; s++)
        over += r->held[s] > r->stages - s;
    if (r->schedule == ONE_F_ONE_B)
        check(over == 0,
              "modelled 1F1B, %d stages, %d micro-batches: stage s held at most p - s micro-batches' "
              "activations (stage 0: %d, stage %d: %d)",
              r->stages, r->m, r->held[0], r->stages - 1, r->held[r->stages - 1]);
}
