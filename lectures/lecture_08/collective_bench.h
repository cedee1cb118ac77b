/*
 * collective_bench.h: timing collectives and reading the times, for
 * lecture_08's benchmarking section: one warm-up then trials in a row, the
 * mean over ranks, algbw and busbw as nccl-tests defines them, the
 * alpha-beta cost model fitted to the times, and the tables and charts that
 * show them.
 */
#ifndef LECTERN_COLLECTIVE_BENCH_H
#define LECTERN_COLLECTIVE_BENCH_H

#include <stdint.h>

#include "lectern.h"

#define MAX_SIZES 8 /* message sizes one benchmark runs */

/* One row of results. */
typedef struct bench_result {
    double bytes, seconds, algbw, busbw;
} bench_result;

/* The alpha-beta model of a ring all-reduce, t = 2(p-1)(alpha + n beta / p),
 * with beta the time per byte (the series' one meaning of beta; 1/beta is
 * the bandwidth), fitted to measured times: t = A + B n is linear in
 * A = 2(p-1) alpha and B = 2(p-1) beta / p. Least squares on relative errors (each equation
 * divided by its t), so a 4 KiB message weighs as much as a 16 MiB one. A
 * negative A (times that grow faster than linearly, as on an oversubscribed
 * CPU) is not a latency: then A = 0 and B is fitted alone; a B <= 0
 * (times that do not grow with size, noise on a busy machine) likewise
 * gives B = 0 and A alone. `clamped` says which. */
typedef struct cost_model {
    double alpha, beta;          /* seconds; seconds per byte (0: not resolved) */
    double rms_error, max_error; /* relative, over the sizes fitted */
    int clamped;                 /* 1: alpha held at 0; 2: beta held at 0 */
} cost_model;

/* The model's time for an all-reduce of `bytes` on p ranks. */
double model_seconds(const cost_model *m, double bytes, int p);
/* alpha and beta fitted to n measured all-reduce times on p ranks. */
cost_model fit_cost_model(const bench_result *r, int n, int p);

/* The mean over the spawn's ranks of a per-rank number, by all-reduce. */
double mean_over_ranks(double value, int device);
/* Seconds per all-reduce of `bytes`: one warm-up, then `trials` in a row,
 * the collective alone (a timed region), averaged over the ranks. */
double time_all_reduce(int64_t bytes, int trials, int device);
/* Seconds per reduce-scatter whose whole input is `bytes`, likewise. */
double time_reduce_scatter(int64_t bytes, int trials, int world_size, int device);
/* A row of results: algbw = bytes / seconds, busbw = algbw * bus_factor. */
bench_result bandwidths(int64_t bytes, double seconds, double bus_factor);

/* A sweep over message sizes: each size timed `trials` times or more (see
 * bench_sweep). */
typedef struct bench_args {
    int n_sizes;
    int64_t bytes[MAX_SIZES]; /* message sizes, as nccl-tests counts them */
    int trials;
} bench_args;

/* Inside a spawn, every rank calling it: all-reduce then reduce-scatter
 * timed at every size of the sweep, busbw with each operation's factor
 * (2(n-1)/n, (n-1)/n). Small messages get more trials (up to 50, about
 * 1 MiB moved in all), since one stall of a busy machine would otherwise
 * dominate a few short ones. */
void bench_sweep(const bench_args *a, int world_size, bench_result *all_reduce, bench_result *reduce_scatter);
/* One operation's results as a table (for the caller to show): size, time, algbw, busbw. */
table_t *bench_table(const char *op, int world_size, const bench_result *r, int n);
/* What rank 0 of a sweep hands back (spawn_return) for the lecture's chart. */
typedef struct bench_report {
    int n;
    char backend[32]; /* dist_backend() in the ranks */
    bench_result all_reduce[MAX_SIZES], reduce_scatter[MAX_SIZES];
} bench_report;
/* busbw against message size, one line per operation, and the twin's
 * all-reduce beside them when it ran (NULL: none): a chart for the caller to show. */
chart_t *busbw_chart(int world_size, const bench_report *r, const twin_result *twin);
/* Rank 0 of a sweep: its results and backend handed to the lecture (spawn_return) as a bench_report. */
void return_report(const bench_result *all_reduce, const bench_result *reduce_scatter, int n);
/* In the lecture after a sweep's spawn: its busbw chart from rank 0's
 * bench_report, with `node` (the sweep replayed on h100-node; NULL: none)
 * beside it: a predict() before, a note after, or a note why not. */
void show_busbw(int world_size, const twin_result *node);
/* The twin's simulated all-reduce of `bytes` (NULL when it has none). */
const twin_collective *twin_all_reduce(const twin_result *t, double bytes);
/* Measured all-reduce times against the fitted model, log-log: a chart for the caller to show. */
chart_t *cost_model_chart(int world_size, const bench_result *r, int n, const cost_model *m);
/* Rank 0's notes on a sweep: busbw of both operations, where all-reduce's
 * peaked, and (on CPUs) the size step where reduce-scatter's time grew
 * most against its bytes when it grew more than twice as fast; and the
 * alpha-beta fit against the measurements. */
void note_bandwidths(int world_size, const bench_result *all_reduce, const bench_result *reduce_scatter, int n);
void note_cost_model(int world_size, const bench_result *all_reduce, int n, const cost_model *m);
/* Rank 0, before its tables: the question (predict) whose answer is the
 * largest all-reduce's busbw on 2 ranks. */
void predict_busbw(const bench_result *largest);

#endif
