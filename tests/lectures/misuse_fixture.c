/* Fixture: misuse of the public API (tests/test_misuse.py).
 * LECTERN_FIXTURE_CASE names the case:
 *   "function.parameter"  that function given NULL for that parameter; the
 *                         test checks this covers every pointer parameter
 *                         declared in runtime/lectern.h, and that each ends
 *                         in a clear error at its line (or, for the free
 *                         functions, in nothing);
 *   "misuse:what"         a collective called wrongly (a peer that is not a
 *                         rank, sizes that do not fit, ...), in a spawn of
 *                         two ranks. */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

/* Kept in a volatile so the compiler cannot see the NULL and warn. */
static void *volatile nothing = NULL;
#define NUL ((void *)nothing)

LECTURE_OPTIONS({"level", "N", "an option for the lecture_option case"});

static tensor *small(void) { return arange(4, -1); }

static void c_note(void) { note(NUL); }
static void c_note_verbatim(void) { note_verbatim(NUL); }
static void c_image(void) { image(NUL, 0.5); }
static void c_see(void) { see(NUL); }
static void c_see_title(void) { see("https://example.org/", NUL); }
static void c_note_system(void) { note_system(NUL); }
static void c_plot(void) { plot(NUL); }
static void c_progress(void) { progress(NUL); }
static void c_spawn_fn(void) { spawn(NUL, 1, NULL, 0); }
static void c_spawn_args(void) { spawn((spawn_fn)(void (*)(void))c_note, 1, NUL, 8); }
static void c_spawn_expect_failure_fn(void) { spawn_expect_failure(NUL, 1, NULL, 0); }
static void c_spawn_expect_failure_args(void) { spawn_expect_failure((spawn_fn)(void (*)(void))c_note, 1, NUL, 8); }
static void c_spawn_exercise_exercise(void) { spawn_exercise(NUL, 0, (spawn_fn)(void (*)(void))c_note, 1, NULL, 0); }
static void c_spawn_exercise_fn(void) {
    grade_exercise("e:", 1, 1);
    spawn_exercise("e:", 0, NUL, 1, NULL, 0);
}
static void c_spawn_exercise_args(void) {
    grade_exercise("e:", 1, 1);
    spawn_exercise("e:", 0, (spawn_fn)(void (*)(void))c_note, 1, NUL, 8);
}
static void c_spawn_return(void) { spawn_return(NUL, 8); }
static void c_spawn_result(void) { spawn_result(0, NUL, 8); }
static void c_tensor_from(void) { tensor_from(NUL, 2, 2, -1); }
static void c_to_device(void) { to_device(NUL, -1); }
static void c_tensor_copy_dst(void) { tensor_copy(NUL, small()); }
static void c_tensor_copy_src(void) { tensor_copy(small(), NUL); }
static void c_row_slice(void) { row_slice(NUL, 0, 1); }
static void c_col_slice(void) { col_slice(NUL, 0, 1); }
static void c_cat_cols(void) { cat_cols(NUL, 2); }
static void c_cat_cols_part(void) {
    tensor *parts[2] = {zeros(2, 2, -1), NUL};
    cat_cols(parts, 2);
}
static void c_tensor_free(void) { tensor_free(NUL); }
static void c_tensor_was_freed(void) { tensor_was_freed(NUL); }
static void c_tensor_to_host_t(void) {
    static float host[4]; /* not malloc'd: the lecture ends at the error, and the sanitizer would name it a leak */
    tensor_to_host(NUL, host);
}
static void c_tensor_to_host_out(void) { tensor_to_host(small(), NUL); }
static void c_add_scalar(void) { add_scalar(NUL, 1.0f); }
static void c_scale(void) { scale_(NUL, 2.0f); }
static void c_add_t(void) { add_(NUL, small()); }
static void c_add_u(void) { add_(small(), NUL); }
static void c_matmul_a(void) { matmul(NUL, zeros(2, 2, -1)); }
static void c_matmul_b(void) { matmul(zeros(2, 2, -1), NUL); }
static void c_matmul_into_c(void) { matmul_into(NUL, zeros(2, 2, -1), zeros(2, 2, -1), 0, 0, 1, 0); }
static void c_matmul_into_a(void) { matmul_into(zeros(2, 2, -1), NUL, zeros(2, 2, -1), 0, 0, 1, 0); }
static void c_matmul_into_b(void) { matmul_into(zeros(2, 2, -1), zeros(2, 2, -1), NUL, 0, 0, 1, 0); }
static void c_gelu(void) { gelu(NUL); }
static void c_gelu_backward_x(void) { gelu_backward(NUL, small()); }
static void c_gelu_backward_dy(void) { gelu_backward(small(), NUL); }
static void c_mse_loss(void) { mse_loss(NUL); }
static void c_mse_loss_backward(void) { mse_loss_backward(NUL); }
static void c_item(void) { tensor_item(NUL, 0); }
static void c_max_abs_diff_a(void) { max_abs_diff(NUL, small()); }
static void c_max_abs_diff_b(void) { max_abs_diff(small(), NUL); }
static void c_adamw_new(void) { adamw_new(NUL, 0.1f); }
static void c_adamw_step_opt(void) { adamw_step(NUL, small(), small()); }
static void c_adamw_step_param(void) { adamw_step(adamw_new(small(), 0.1f), NUL, small()); }
static void c_adamw_step_grad(void) { adamw_step(adamw_new(small(), 0.1f), small(), NUL); }
static void c_adamw_free(void) { adamw_free(NUL); }
static void c_tensor_str(void) { tensor_str(NUL); }
static void c_summarize(void) { summarize(NUL); }
static void c_check_close_actual(void) { check_close(NUL, small(), 0, 0, "x"); }
static void c_check_close_expected(void) { check_close(small(), NUL, 0, 0, "x"); }
static void c_check_close_what(void) {
    tensor *a = small();
    check_close(a, a, 0, 0, NUL);
    tensor_free(a);
}
static void c_check_fmt(void) { check(1, NUL); }
static void c_check_named_name(void) { check_named(1, NUL, "x"); }
static void c_check_named_fmt(void) { check_named(1, "x", NUL); }
static void c_lecture_fail(void) { lecture_fail(NUL); }
static void c_median(void) { median_of(NUL, 3); }
static void c_lecture_flag(void) { lecture_flag(NUL); }
static void c_tensor_view(void) { tensor_view(NUL, 0, 1, 0); }
static void c_reshape(void) { reshape(NUL, 1, 0); }
static void c_sub_t(void) { sub_(NUL, small()); }
static void c_sub_u(void) { sub_(small(), NUL); }
static void c_fill(void) { fill_(NUL, 1.0f); }
static void c_sum(void) { tensor_sum(NUL); }
static void c_norm(void) { tensor_norm(NUL); }
static void c_dist_timer_start(void) { dist_timer_start(NUL); }
static void c_dist_timer_stop(void) { dist_timer_stop(NUL); }
static void c_dist_traffic_since(void) { dist_traffic_since(NUL); }
static void c_dist_traffic_sent(void) { dist_traffic_sent(NUL); }
static void c_dist_traffic_nominal(void) { dist_traffic_nominal(NUL); }
static void c_dist_traffic_calls(void) { dist_traffic_calls(NUL); }
static void c_grade_exercise(void) { grade_exercise(NUL, 10, 1); }
static void c_lecture_option_name(void) { lecture_option(NUL, "x"); }
static void c_lecture_option_fallback(void) { lecture_option("level", NUL); }

/* Collectives: the NULL is passed inside a one-rank spawn. */
static const char *dist_case;

static void dist_body(int rank, int world_size, void *args) {
    const char *c = args;
    tensor *t = small(), *big = arange(4 * world_size, -1);
    if (strcmp(c, "dist_all_reduce.t") == 0) dist_all_reduce(NUL, DIST_SUM);
    if (strcmp(c, "dist_reduce.t") == 0) dist_reduce(NUL, 0, DIST_SUM);
    if (strcmp(c, "dist_broadcast.t") == 0) dist_broadcast(NUL, 0);
    if (strcmp(c, "dist_reduce_scatter.output") == 0) dist_reduce_scatter(NUL, big, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter.input") == 0) dist_reduce_scatter(t, NUL, DIST_SUM);
    if (strcmp(c, "dist_all_gather.output") == 0) dist_all_gather(NUL, t);
    if (strcmp(c, "dist_all_gather.input") == 0) dist_all_gather(big, NUL);
    if (strcmp(c, "dist_scatter.output") == 0) dist_scatter(NUL, big, 0);
    if (strcmp(c, "dist_scatter.input") == 0) dist_scatter(t, NUL, 0);
    if (strcmp(c, "dist_gather.output") == 0) dist_gather(NUL, t, 0);
    if (strcmp(c, "dist_gather.input") == 0) dist_gather(big, NUL, 0);
    if (strcmp(c, "dist_send.t") == 0) dist_send(NUL, 0);
    if (strcmp(c, "dist_recv.t") == 0) dist_recv(NUL, 0);
    if (strcmp(c, "dist_isend.t") == 0) dist_isend(NUL, 0);
    if (strcmp(c, "dist_irecv.t") == 0) dist_irecv(NUL, 0);
    if (strcmp(c, "dist_wait.req") == 0) dist_wait(NUL);
    if (strcmp(c, "dist_test.req") == 0) dist_test(NUL);
    if (strcmp(c, "dist_sendrecv.send") == 0) dist_sendrecv(NUL, 0, t, 0);
    if (strcmp(c, "dist_sendrecv.recv") == 0) dist_sendrecv(t, 0, NUL, 0);
    if (strcmp(c, "dist_all_reduce_async.t") == 0) dist_all_reduce_async(NUL, DIST_SUM);
    if (strcmp(c, "dist_broadcast_async.t") == 0) dist_broadcast_async(NUL, 0);
    if (strcmp(c, "dist_reduce_scatter_async.output") == 0) dist_reduce_scatter_async(NUL, big, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_async.input") == 0) dist_reduce_scatter_async(t, NUL, DIST_SUM);
    if (strcmp(c, "dist_all_gather_async.output") == 0) dist_all_gather_async(NUL, t);
    if (strcmp(c, "dist_all_gather_async.input") == 0) dist_all_gather_async(big, NUL);
    /* Groups: a NULL group is all ranks (fine); a NULL list or tensor is not. */
    static const int me[1] = {0};
    dist_group *g = dist_new_group(me, 1);
    tensor *same = arange(4 * world_size, -1);
    if (strcmp(c, "dist_new_group.ranks") == 0) dist_new_group(NUL, 1);
    if (strcmp(c, "dist_group_rank.g") == 0) note("group rank %d", dist_group_rank(NUL));
    if (strcmp(c, "dist_group_size.g") == 0) note("group size %d", dist_group_size(NUL));
    if (strcmp(c, "dist_group_free.g") == 0) dist_group_free(NUL);
    if (strcmp(c, "dist_all_reduce_in.g") == 0) dist_all_reduce_in(NUL, t, DIST_SUM);
    if (strcmp(c, "dist_all_reduce_in.t") == 0) dist_all_reduce_in(g, NUL, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_in.g") == 0) dist_reduce_scatter_in(NUL, t, big, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_in.output") == 0) dist_reduce_scatter_in(g, NUL, big, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_in.input") == 0) dist_reduce_scatter_in(g, t, NUL, DIST_SUM);
    if (strcmp(c, "dist_all_gather_in.g") == 0) dist_all_gather_in(NUL, big, t);
    if (strcmp(c, "dist_all_gather_in.output") == 0) dist_all_gather_in(g, NUL, t);
    if (strcmp(c, "dist_all_gather_in.input") == 0) dist_all_gather_in(g, big, NUL);
    if (strcmp(c, "dist_broadcast_in.g") == 0) dist_broadcast_in(NUL, t, 0);
    if (strcmp(c, "dist_broadcast_in.t") == 0) dist_broadcast_in(g, NUL, 0);
    if (strcmp(c, "dist_all_to_all.output") == 0) dist_all_to_all(NUL, big);
    if (strcmp(c, "dist_all_to_all.input") == 0) dist_all_to_all(same, NUL);
    if (strcmp(c, "dist_all_to_all_in.g") == 0) dist_all_to_all_in(NUL, same, big);
    if (strcmp(c, "dist_all_to_all_in.output") == 0) dist_all_to_all_in(g, NUL, big);
    if (strcmp(c, "dist_all_to_all_in.input") == 0) dist_all_to_all_in(g, same, NUL);
    if (strcmp(c, "dist_all_reduce_in_async.g") == 0) dist_wait(dist_all_reduce_in_async(NUL, t, DIST_SUM));
    if (strcmp(c, "dist_all_reduce_in_async.t") == 0) dist_all_reduce_in_async(g, NUL, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_in_async.g") == 0)
        dist_wait(dist_reduce_scatter_in_async(NUL, t, big, DIST_SUM));
    if (strcmp(c, "dist_reduce_scatter_in_async.output") == 0) dist_reduce_scatter_in_async(g, NUL, big, DIST_SUM);
    if (strcmp(c, "dist_reduce_scatter_in_async.input") == 0) dist_reduce_scatter_in_async(g, t, NUL, DIST_SUM);
    if (strcmp(c, "dist_all_gather_in_async.g") == 0) dist_wait(dist_all_gather_in_async(NUL, big, t));
    if (strcmp(c, "dist_all_gather_in_async.output") == 0) dist_all_gather_in_async(g, NUL, t);
    if (strcmp(c, "dist_all_gather_in_async.input") == 0) dist_all_gather_in_async(g, big, NUL);
    if (strcmp(c, "dist_broadcast_in_async.g") == 0) dist_wait(dist_broadcast_in_async(NUL, t, 0));
    if (strcmp(c, "dist_broadcast_in_async.t") == 0) dist_broadcast_in_async(g, NUL, 0);
    if (strcmp(c, "dist_all_to_all_async.output") == 0) dist_all_to_all_async(NUL, big);
    if (strcmp(c, "dist_all_to_all_async.input") == 0) dist_all_to_all_async(same, NUL);
    if (strcmp(c, "dist_all_to_all_in_async.g") == 0) dist_wait(dist_all_to_all_in_async(NUL, same, big));
    if (strcmp(c, "dist_all_to_all_in_async.output") == 0) dist_all_to_all_in_async(g, NUL, big);
    if (strcmp(c, "dist_all_to_all_in_async.input") == 0) dist_all_to_all_in_async(g, same, NUL);
    dist_group_free(g);
    tensor_free(same);
    note("rank %d of %d: no error", rank, world_size);
    tensor_free(t);
    tensor_free(big);
}

static void c_dist(void) { spawn(dist_body, 1, dist_case, strlen(dist_case) + 1); }

/* Collectives called wrongly, on two ranks; only rank 1 errs where it can,
 * so the error is not one every rank repeats. */
static void misuse_body(int rank, int world_size, void *args) {
    const char *c = args;
    tensor *t = arange(4, -1), *odd = arange(5, -1), *big = arange(4 * world_size, -1);
    if (strcmp(c, "misuse:outside_spawn") == 0) note("unreachable");
    if (rank == 1 && strcmp(c, "misuse:send_to_self") == 0) dist_send(t, 1);
    if (rank == 1 && strcmp(c, "misuse:recv_from_self") == 0) dist_recv(t, 1);
    if (rank == 1 && strcmp(c, "misuse:send_to_no_rank") == 0) dist_send(t, 2);
    if (rank == 1 && strcmp(c, "misuse:recv_from_no_rank") == 0) dist_recv(t, -1);
    if (rank == 1 && strcmp(c, "misuse:broadcast_from_no_rank") == 0) dist_broadcast(t, 7);
    if (rank == 1 && strcmp(c, "misuse:reduce_to_no_rank") == 0) dist_reduce(t, 2, DIST_SUM);
    if (rank == 1 && strcmp(c, "misuse:unknown_op") == 0) dist_all_reduce(t, (dist_op)42);
    if (rank == 1 && strcmp(c, "misuse:reduce_scatter_sizes") == 0) dist_reduce_scatter(t, odd, DIST_SUM);
    if (rank == 1 && strcmp(c, "misuse:send_recv_one_chunk") == 0) {
        dist_isend(row_slice(big, 0, 4), 0);
        dist_irecv(row_slice(big, 0, 4), 0);
    }
    if (rank == 1 && strcmp(c, "misuse:reduce_scatter_same_memory") == 0)
        dist_reduce_scatter(row_slice(big, 0, 4), big, DIST_SUM);
    if (rank == 1 && strcmp(c, "misuse:all_gather_sizes") == 0) dist_all_gather(odd, t);
    if (rank == 1 && strcmp(c, "misuse:all_gather_same_memory") == 0) dist_all_gather(big, row_slice(big, 0, 4));
    if (rank == 1 && strcmp(c, "misuse:scatter_sizes") == 0) dist_scatter(t, odd, 1);
    if (rank == 1 && strcmp(c, "misuse:gather_sizes") == 0) dist_gather(odd, t, 1);
    if (rank == 1 && strcmp(c, "misuse:scatter_from_no_rank") == 0) dist_scatter(t, big, 5);
    if (rank == 1 && strcmp(c, "misuse:gather_to_no_rank") == 0) dist_gather(big, t, -3);
    if (rank == 1 && strcmp(c, "misuse:isend_to_self") == 0) dist_isend(t, 1);
    if (rank == 1 && strcmp(c, "misuse:irecv_from_no_rank") == 0) dist_irecv(t, 9);
    /* A time that is not one: the divisions make NaN and infinity at run time. */
    volatile double zero = 0.0;
    if (rank == 1 && strcmp(c, "misuse:model_compute_nan") == 0) model_compute(zero / zero);
    if (rank == 1 && strcmp(c, "misuse:model_compute_negative") == 0) model_compute(-5.0);
    if (rank == 1 && strcmp(c, "misuse:model_compute_infinite") == 0) model_compute(1.0 / zero);
    if (rank == 1 && strcmp(c, "misuse:model_compute_too_long") == 0) model_compute(20000.0);
    note("rank %d of %d: no error", rank, world_size);
    tensor_free(t);
    tensor_free(odd);
    tensor_free(big);
}

/* A collective in the lecture itself, outside any spawn. */
static void c_outside_spawn(void) {
    tensor *t = arange(4, -1);
    dist_all_reduce(t, DIST_SUM);
    tensor_free(t);
}

typedef struct fixture_case {
    const char *name; /* "function.parameter" */
    void (*run)(void);
} fixture_case;

/* table() and the charts: a NULL table or chart, name or format is an error
 * at the line; a NULL caption, title, unit, axis label or span label means
 * "none". Each case shows what it built, so nothing is left allocated. */
static const double XS[2] = {1, 2}, YS[2] = {3, 4};
static void c_table_new(void) {
    table_t *t = table_new(NUL);
    table_column(t, "x", "", "%d");
    table_row(t, 1);
    table_show(t);
}
static void c_table_column_t(void) { table_column(NUL, "x", "", "%d"); }
static void c_table_column_name(void) {
    table_t *t = table_new("c");
    table_column(t, NUL, "", "%d");
    table_show(t);
}
static void c_table_column_unit(void) {
    table_t *t = table_new("c");
    table_column(t, "x", NUL, "%d");
    table_row(t, 1);
    table_show(t);
}
static void c_table_column_format(void) {
    table_t *t = table_new("c");
    table_column(t, "x", "", NUL);
    table_show(t);
}
static void c_table_row(void) { table_row(NUL, 1); }
static void c_table_show(void) { table_show(NUL); }
static void fine_chart(chart_t *c) {
    chart_line(c, "s", XS, YS, 2);
    chart_show(c);
}
static void c_chart_new_x(void) { fine_chart(chart_new(NUL, "y", "t")); }
static void c_chart_new_y(void) { fine_chart(chart_new("x", NUL, "t")); }
static void c_chart_new_title(void) { fine_chart(chart_new("x", "y", NUL)); }
static void c_chart_log_x(void) { chart_log_x(NUL, 10); }
static void c_chart_log_y(void) { chart_log_y(NUL, 10); }
static void c_chart_line_c(void) { chart_line(NUL, "s", XS, YS, 2); }
static void c_chart_line_series(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_line(c, NUL, XS, YS, 2);
    chart_show(c);
}
static void c_chart_line_xs(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_line(c, "s", NUL, YS, 2);
    chart_show(c);
}
static void c_chart_line_ys(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_line(c, "s", XS, NUL, 2);
    chart_show(c);
}
static void c_chart_span_c(void) { chart_span(NUL, "r", "s", "l", 0, 1); }
static void c_chart_span_row(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span(c, NUL, "s", "l", 0, 1);
    chart_show(c);
}
static void c_chart_span_series(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span(c, "r", NUL, "l", 0, 1);
    chart_show(c);
}
static void c_chart_span_label(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span(c, "r", "s", NUL, 0, 1);
    chart_show(c);
}
static void c_chart_span_modelled_c(void) { chart_span_modelled(NUL, "r", "s", "l", 0, 1); }
static void c_chart_span_modelled_row(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span_modelled(c, NUL, "s", "l", 0, 1);
    chart_show(c);
}
static void c_chart_span_modelled_series(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span_modelled(c, "r", NUL, "l", 0, 1);
    chart_show(c);
}
static void c_chart_span_modelled_label(void) {
    chart_t *c = chart_new("x", "y", "t");
    chart_span_modelled(c, "r", "s", NUL, 0, 1);
    chart_show(c);
}
static void c_chart_show(void) { chart_show(NUL); }

/* inspect(x) passes x's name as written: lx_inspect is what it expands to. */
static void c_inspect_name(void) { lx_inspect(NUL, LX_INSPECT_INT, NULL, 1, 0); }
static void c_inspect_t(void) {
    tensor *t = NUL;
    inspect(t);
}

static void c_predict_question(void) { predict(NUL, 1.0, "GB/s"); }
static void c_predict_unit(void) { predict("How many?", 1.0, NUL); }

static const fixture_case cases[] = {
        {"note.fmt", c_note},
        {"check_close.actual", c_check_close_actual},
        {"check_close.expected", c_check_close_expected},
        {"check_close.what", c_check_close_what},
        {"check.fmt", c_check_fmt},
        {"check_named.name", c_check_named_name},
        {"check_named.fmt", c_check_named_fmt},
        {"lecture_fail.fmt", c_lecture_fail},
        {"median_of.values", c_median},
        {"lecture_flag.name", c_lecture_flag},
        {"tensor_view.t", c_tensor_view},
        {"reshape.t", c_reshape},
        {"sub_.t", c_sub_t},
        {"sub_.u", c_sub_u},
        {"fill_.t", c_fill},
        {"tensor_sum.t", c_sum},
        {"tensor_norm.t", c_norm},
        {"dist_timer_start.timer", c_dist_timer_start},
        {"dist_timer_stop.timer", c_dist_timer_stop},
        {"dist_traffic_since.start", c_dist_traffic_since},
        {"dist_traffic_sent.t", c_dist_traffic_sent},
        {"dist_traffic_nominal.t", c_dist_traffic_nominal},
        {"dist_traffic_calls.t", c_dist_traffic_calls},
        {"grade_exercise.prefix", c_grade_exercise},
        {"lecture_option.name", c_lecture_option_name},
        {"lecture_option.fallback", c_lecture_option_fallback},
        {"note_verbatim.fmt", c_note_verbatim},
        {"image.src", c_image},
        {"see.url", c_see},
        {"see.title", c_see_title},
        {"note_system.command", c_note_system},
        {"plot.vega_lite_json", c_plot},
        {"predict.question", c_predict_question},
        {"predict.unit", c_predict_unit},
        {"progress.fmt", c_progress},
        {"spawn.fn", c_spawn_fn},
        {"spawn.args", c_spawn_args},
        {"spawn_expect_failure.fn", c_spawn_expect_failure_fn},
        {"spawn_expect_failure.args", c_spawn_expect_failure_args},
        {"spawn_exercise.exercise", c_spawn_exercise_exercise},
        {"spawn_exercise.fn", c_spawn_exercise_fn},
        {"spawn_exercise.args", c_spawn_exercise_args},
        {"spawn_return.data", c_spawn_return},
        {"spawn_result.out", c_spawn_result},
        {"tensor_from.values", c_tensor_from},
        {"to_device.t", c_to_device},
        {"tensor_copy.dst", c_tensor_copy_dst},
        {"tensor_copy.src", c_tensor_copy_src},
        {"row_slice.t", c_row_slice},
        {"col_slice.t", c_col_slice},
        {"cat_cols.parts", c_cat_cols},
        {"cat_cols.parts[i]", c_cat_cols_part},
        {"tensor_free.t", c_tensor_free},
        {"tensor_was_freed.t", c_tensor_was_freed},
        {"tensor_to_host.t", c_tensor_to_host_t},
        {"tensor_to_host.out", c_tensor_to_host_out},
        {"add_scalar.t", c_add_scalar},
        {"scale_.t", c_scale},
        {"add_.t", c_add_t},
        {"add_.u", c_add_u},
        {"matmul.a", c_matmul_a},
        {"matmul.b", c_matmul_b},
        {"matmul_into.c", c_matmul_into_c},
        {"matmul_into.a", c_matmul_into_a},
        {"matmul_into.b", c_matmul_into_b},
        {"gelu.x", c_gelu},
        {"gelu_backward.x", c_gelu_backward_x},
        {"gelu_backward.dy", c_gelu_backward_dy},
        {"mse_loss.x", c_mse_loss},
        {"mse_loss_backward.x", c_mse_loss_backward},
        {"tensor_item.t", c_item},
        {"max_abs_diff.a", c_max_abs_diff_a},
        {"max_abs_diff.b", c_max_abs_diff_b},
        {"adamw_new.param", c_adamw_new},
        {"adamw_step.opt", c_adamw_step_opt},
        {"adamw_step.param", c_adamw_step_param},
        {"adamw_step.grad", c_adamw_step_grad},
        {"adamw_free.opt", c_adamw_free},
        {"tensor_str.t", c_tensor_str},
        {"summarize.t", c_summarize},
        {"inspect.name", c_inspect_name},
        {"inspect.t", c_inspect_t},
        {"table_new.caption_fmt", c_table_new},
        {"table_column.t", c_table_column_t},
        {"table_column.name", c_table_column_name},
        {"table_column.unit", c_table_column_unit},
        {"table_column.format", c_table_column_format},
        {"table_row.t", c_table_row},
        {"table_show.t", c_table_show},
        {"chart_new.x_label", c_chart_new_x},
        {"chart_new.y_label", c_chart_new_y},
        {"chart_new.title_fmt", c_chart_new_title},
        {"chart_log_x.c", c_chart_log_x},
        {"chart_log_y.c", c_chart_log_y},
        {"chart_line.c", c_chart_line_c},
        {"chart_line.series", c_chart_line_series},
        {"chart_line.xs", c_chart_line_xs},
        {"chart_line.ys", c_chart_line_ys},
        {"chart_span.c", c_chart_span_c},
        {"chart_span.row", c_chart_span_row},
        {"chart_span.series", c_chart_span_series},
        {"chart_span.label", c_chart_span_label},
        {"chart_span_modelled.c", c_chart_span_modelled_c},
        {"chart_span_modelled.row", c_chart_span_modelled_row},
        {"chart_span_modelled.series", c_chart_span_modelled_series},
        {"chart_span_modelled.label", c_chart_span_modelled_label},
        {"chart_show.c", c_chart_show},
};

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    c = c ? c : "";
    note("case %s", c);
    if (strncmp(c, "dist_", 5) == 0) {
        dist_case = c;
        c_dist();
    }
    if (strcmp(c, "misuse:outside_spawn") == 0) c_outside_spawn();
    else if (strncmp(c, "misuse:", 7) == 0) spawn(misuse_body, 2, c, strlen(c) + 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].name, c) == 0) cases[i].run();
    note("after");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
