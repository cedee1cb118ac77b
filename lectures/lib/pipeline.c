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
    if (rank < world_size - 1) s->recv_grad = empty(s->mb, c->width, s->device);
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

double ms_since(const stage *s) { return (now_seconds() - s->a->clock_base) * 1e3; }

void stamp(stage *s, int backward, int k, double start) {
    device_synchronize(); /* on a GPU, the work has really ended */
    s->events[s->run][s->n_events++] = (pipe_event){(float)backward, (float)k, (float)start, (float)ms_since(s)};
}

/* Forward of micro-batch k through this stage's layers. */
void stage_forward(stage *s, int k) {
    tensor *x;
    if (s->rank == 0) {
        x = row_slice(s->data, k * s->mb, (k + 1) * s->mb);
    } else {
        x = s->n_spare > 0 ? s->spare[--s->n_spare] : empty(s->mb, s->a->cfg.width, s->device);
        dist_recv(x, s->rank - 1);
    }
    double start = ms_since(s);
    forward(s->w, s->per_stage, x, s->acts[k], s->pre[k]);
    if (s->rank == s->world - 1) s->loss += mse_loss(s->acts[k][s->per_stage]) / s->m; /* the last stage's work */
    stamp(s, 0, k, start); /* the timeline shows it: no note per micro-batch */
    if (s->rank == s->world - 1 && s->run == 0) {
        /* Checked on the first pass only: the later passes compute the same
         * numbers (same weights, data and order), and a check is not the
         * pipeline's work: it took ~0.1 ms a micro-batch on the last stage,
         * between two of its operations, in every pass timed. */
        tensor *rows = row_slice(s->expected, k * s->mb, (k + 1) * s->mb);
        s->out_diff = fmax(s->out_diff, max_abs_diff(s->acts[k][s->per_stage], rows));
        tensor_free(rows);
    }
    s->sent[k] = s->rank < s->world - 1 ? dist_isend(s->acts[k][s->per_stage], s->rank + 1) : NULL;
    if (++s->in_flight > s->most_in_flight) s->most_in_flight = s->in_flight;
}

/* Backward of micro-batch k; weight gradients add up over micro-batches. */
void stage_backward(stage *s, int k) {
    tensor *dy = NULL;
    if (s->rank < s->world - 1) {
        dy = s->recv_grad;
        dist_recv(dy, s->rank + 1);
    }
    double start = ms_since(s);
    if (!dy) { /* the last stage starts from the loss: its work, timed with the rest */
        dy = mse_loss_backward(s->acts[k][s->per_stage]);
        scale_(dy, 1.0f / s->m); /* d(mean over micro-batches) */
    }
    /* Every stage computes its input's gradient, stage 0 too, though nothing
     * uses the data's: the bubble formula assumes stages of equal work. */
    for (int j = s->per_stage - 1; j >= 0; j--) {
        tensor *dx = NULL;
        layer_backward(s->acts[k][j], s->pre[k][j], s->w[j], dy, s->grads[j], &dx,
                       s->backwards_done == 0 ? 0.0f : 1.0f);
        if (dy != s->recv_grad) tensor_free(dy);
        dy = dx;
    }
    stamp(s, 1, k, start);
    s->backwards_done++;
    /* The gradient leaves without waiting: this stage goes on to its next
     * operation while the runtime delivers it, and waits at the end of the
     * schedule (dy must live until then). */
    s->sent_back[k] = s->rank > 0 ? dist_isend(dy, s->rank - 1) : NULL;
    s->dx_out[k] = dy;
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

void report_timeline(stage *s, int schedule, double grad_diff, double grad_tol) {
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
    if (s->rank != 0) return;
    float *v = malloc(sizeof(float) * per_rank * s->world);
    tensor_to_host(all, v);
    tensor_free(all);
    int best = 0;
    double first = 0, last = 0, best_span = 1e30;
    for (int k = 0; k < PIPE_RUNS; k++) {
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
    double busy[LECTERN_MAX_WORLD] = {0}, stage0_last_forward = 0, stage1_first_forward = 1e30;
    for (int r = 0; r < s->world; r++) {
        const pipe_event *e = (const pipe_event *)(v + r * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++) {
            busy[r] += e[i].end_ms - e[i].start_ms;
            if (e[i].backward == 0 && r == 0) stage0_last_forward = fmax(stage0_last_forward, e[i].end_ms);
            if (e[i].backward == 0 && r == 1) stage1_first_forward = fmin(stage1_first_forward, e[i].start_ms);
        }
    }
    double span = last - first, mean, bubble = pipeline_bubble(busy, s->world, span, &mean);
    table_t *t = table_new("%s on %d stages (quickest of %d runs): span %.2f ms, bubble %.3f of the total (the "
                           "busiest stage's idle time; formula %.3f), idle time averaged over the stages %.3f",
                           SCHEDULE_NAMES[schedule], s->world, PIPE_RUNS, span, bubble, bubble_fraction(s->world, s->m),
                           mean);
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
        table_row(t, r, 1 - busy[r] / span, (int)tail[0], range, (double)tail[1], (double)tail[2]);
    }
    table_show(t);

    chart_t *c = chart_new("time (ms)", "stage", "%s timeline, %d stages, %d micro-batches", SCHEDULE_NAMES[schedule],
                           s->world, s->m);
    for (int r = 0; r < s->world; r++) {
        const pipe_event *e = (const pipe_event *)(v + r * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++) {
            char row[24], label[32];
            snprintf(row, sizeof row, "stage %d", r);
            snprintf(label, sizeof label, "micro-batch %d", (int)e[i].micro_batch);
            chart_span(c, row, e[i].backward > 0 ? "backward" : "forward", label, e[i].start_ms - first,
                       e[i].end_ms - first);
        }
    }
    chart_show(c);
    pipe_result res = {bubble,
                       mean,
                       bubble_fraction(s->world, s->m),
                       span,
                       0,
                       0,
                       (int)v[per_rank - 3],
                       stage1_first_forward < stage0_last_forward,
                       {{0, 0}, {0, 0}},
                       -1,
                       sysconf(_SC_NPROCESSORS_ONLN)};
    res.replayed = replayed_bubble(v + best * per_run, per_rank, s->world, s->m, &res.replayed_mean);
    getloadavg(&res.load, 1);
    for (int k = 0; k < 2; k++) { /* the first stage (k = 0) and the last */
        const pipe_event *e = (const pipe_event *)(v + (k ? s->world - 1 : 0) * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++)
            res.op_ms[k][e[i].backward > 0] += (e[i].end_ms - e[i].start_ms) / s->m;
    }
    spawn_return(&res, sizeof res);
    free(v);
}

/* Why the measured bubble is where it is against the formula, which gives every stage a core, equal work and
 * free messages. Replayed with the measured operations and free messages, a bubble below the formula means the
 * slowest stage set the pace and the fill and drain were a faster stage's shorter operations. */
const char *bubble_why(const pipe_result *r, int stages) {
    double off = r->bubble / r->formula - 1;
    if (stages > r->cores) /* both ways at once: the wait for a core is idle time, the turns lost inside an
                            * operation count as its work */
        return fabs(off) <= 0.15
                       ? "within 15% of the formula, though the ranks outnumber the cores: a stage that is ready waits "
                         "for a core another stage holds (idle time the formula does not have), and an operation's "
                         "measured time includes the turns its rank lost to others (work it did not do); the two partly "
                         "cancel, on this machine, not by the schedule"
               : off > 0 ? "larger than the formula: the ranks outnumber the cores, so a stage that is ready to work "
                           "waits for its turn on a core another stage holds; that wait is this machine's, not the "
                           "schedule's"
                         : "smaller than the formula: the ranks outnumber the cores, so an operation's measured time "
                           "includes the turns its rank waited for a core, counted here as work, not idle; that is "
                           "this machine's, not the schedule's";
    int unequal = fabs(r->replayed / r->formula - 1) > 0.05;
    if (fabs(off) <= 0.15)
        return unequal ? "within 15% of the formula, though the stages ran at unequal speeds, which moves it too: the "
                         "replay below splits the two"
                       : "within 15% of the formula: what is left over is the time between operations (the "
                         "messages, mostly), which the formula leaves out";
    if (off < 0)
        return "smaller than the formula: the stage that set the pace was the slower, so what it waited through at "
               "the start and end was a faster stage's shorter operations (the replay below)";
    if (r->load > r->cores + stages) /* the load average counts this lecture's own ranks too */
        return "larger than the formula: the machine was busy with other work (a load average above its cores plus "
               "this spawn's ranks), so a stage that was ready waited for a core; the formula assumes every stage has "
               "one";
    return "larger than the formula by more than the messages would explain: the replay below splits the gap";
}

void show_bubble_conventions(int m) {
    table_t *t = table_new("the bubble two ways");
    table_column(t, "stages p", NULL, "%d");
    table_column(t, "micro-batches m", NULL, "%d");
    table_column(t, "of the total (p - 1) / (m + p - 1)", NULL, "%.3f");
    table_column(t, "of the ideal (p - 1) / m", NULL, "%.3f");
    int shapes[][2] = {{2, m}, {4, m}, {4, 32}};
    for (int k = 0; k < 3; k++)
        table_row(t, shapes[k][0], shapes[k][1], bubble_fraction(shapes[k][0], shapes[k][1]),
                  (double)(shapes[k][0] - 1) / shapes[k][1]);
    table_show(t);
}
