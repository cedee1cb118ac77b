/*
 * test_tensor.c: the tensors of runtime/tensor/tensor.c, checked against values the
 * test computes its own way: a naive triple loop for matrix products, finite
 * differences for derivatives, the textbook AdamW formulas, and torch's
 * printed forms written out by hand.
 *
 * Everything runs on the CPU; the last test repeats the operations on cuda:0
 * and compares with the CPU when a GPU is visible, and is skipped otherwise.
 * Errors that stop a lecture are checked in a forked child that runs a tiny
 * lecture through lecture_main.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lectern.h"

/* ---------------- helpers ---------------- */

static tensor *from_values(int64_t rows, int64_t cols, int device, const float *v) {
    return tensor_from(v, rows, cols, device);
}

/* A rows x cols tensor of values drawn from randn on the host. */
static tensor *random_host(int64_t rows, int64_t cols) { return randn(rows, cols, -1); }

/* op(X)[i][j] for a row-major X with `cols` columns, transposed or not. */
static double op_at(const tensor *x, int trans, int64_t i, int64_t j) {
    int64_t cols = x->shape[1];
    return trans ? x->data[j * cols + i] : x->data[i * cols + j];
}

/* ---------------- making tensors ---------------- */

static void test_shapes_and_values(void **state) {
    (void)state;
    tensor *v = zeros(5, 0, -1);
    assert_int_equal(v->ndim, 1);
    assert_int_equal(v->shape[0], 5);
    assert_int_equal(v->numel, 5);
    assert_int_equal(v->device, -1);
    assert_true(v->owns_data);
    for (int i = 0; i < 5; i++)
        assert_true(v->data[i] == 0.0f);

    tensor *m = zeros(3, 4, -1);
    assert_int_equal(m->ndim, 2);
    assert_int_equal(m->shape[0], 3);
    assert_int_equal(m->shape[1], 4);
    assert_int_equal(m->numel, 12);

    tensor *a = arange(6, -1);
    for (int i = 0; i < 6; i++)
        assert_true(tensor_item(a, i) == (float)i);

    const float vals[] = {1.5f, -2.0f, 3.25f, 0.0f};
    tensor *f = from_values(2, 2, -1, vals);
    float back[4];
    tensor_to_host(f, back);
    assert_memory_equal(back, vals, sizeof vals);

    tensor *e = empty(0, 0, -1);
    assert_int_equal(e->numel, 0);

    tensor *c = to_device(f, -1);
    assert_ptr_not_equal(c->data, f->data);
    assert_true(max_abs_diff(c, f) == 0.0);
    c->data[0] = 100.0f; /* a copy, not a view */
    assert_true(f->data[0] == 1.5f);
    tensor_copy(c, f);
    assert_true(c->data[0] == 1.5f);
    assert_true(max_abs_diff(c, f) == 0.0);
    c->data[3] = -0.5f;
    assert_true(fabs(max_abs_diff(c, f) - 0.5) < 1e-12);

    tensor_free(v);
    tensor_free(m);
    tensor_free(a);
    tensor_free(f);
    tensor_free(e);
    tensor_free(c);
    tensor_free(NULL);
}

/* A NaN anywhere makes the difference NaN: "no difference" must never hide
 * a NaN, wherever it sits and whichever side has it. */
static void test_max_abs_diff_sees_nan(void **state) {
    (void)state;
    const float good[] = {1.0f, 2.0f, 3.0f, 4.0f};
    for (int at = 0; at < 4; at++) {
        float bad[4];
        memcpy(bad, good, sizeof bad);
        bad[at] = NAN;
        tensor *g = from_values(4, 0, -1, good), *b = from_values(4, 0, -1, bad);
        assert_true(isnan(max_abs_diff(g, b)));
        assert_true(isnan(max_abs_diff(b, g)));
        assert_true(isnan(max_abs_diff(b, b)));
        tensor_free(g);
        tensor_free(b);
    }
    /* Infinities: an infinite difference, not a NaN, unless both are the same infinity. */
    const float inf[] = {1.0f, INFINITY, 3.0f, 4.0f};
    tensor *g = from_values(4, 0, -1, good), *i = from_values(4, 0, -1, inf);
    assert_true(isinf(max_abs_diff(g, i)));
    assert_true(isnan(max_abs_diff(i, i))); /* inf - inf */
    tensor_free(g);
    tensor_free(i);
}

/* Tensors with no elements go through every operation and give empty (or,
 * for a product over an empty inner dimension, zero) results. */
static void test_empty_tensors(void **state) {
    (void)state;
    tensor *e1 = zeros(0, 0, -1), *e2 = zeros(0, 3, -1), *r = arange(0, -1), *n = randn(0, 4, -1);
    assert_int_equal(e1->numel, 0);
    assert_int_equal(e2->numel, 0);
    assert_int_equal(r->numel, 0);
    assert_int_equal(n->numel, 0);
    assert_string_equal(tensor_str(r), "tensor([], device='cpu')");
    assert_string_equal(summarize(e1), "0[]");

    add_scalar_(e1, 1.0f);
    scale_(e1, 2.0f);
    add_(e2, e2);
    assert_true(max_abs_diff(e2, e2) == 0.0);
    assert_true(isnan(mse_loss(e1))); /* the mean of nothing */
    tensor *g = gelu(e2), *gb = gelu_backward(e2, e2), *mb = mse_loss_backward(e2);
    assert_int_equal(g->numel, 0);
    assert_int_equal(gb->numel, 0);
    assert_int_equal(mb->numel, 0);

    /* 0x3 @ 3x2 is 0x2; 2x0 @ 0x3 is a 2x3 of zeros (an empty sum is 0). */
    tensor *a = zeros(3, 2, -1), *p = matmul(e2, a);
    assert_int_equal(p->shape[0], 0);
    assert_int_equal(p->shape[1], 2);
    const float nines[] = {9, 9, 9, 9, 9, 9};
    tensor *left = empty(2, 0, -1), *left2 = tensor_from(NULL, 0, 4, -1); /* nothing to copy */
    left->ndim = 2; /* empty(2, 0) is 1-D: make the 2x0 shape by hand */
    left->shape[1] = 0;
    left->numel = 0;
    tensor *right = empty(0, 3, -1), *out = tensor_from(nines, 2, 3, -1);
    matmul_into(out, left, right, 0, 0, 1.0f, 0.0f);
    for (int i = 0; i < 6; i++)
        assert_true(out->data[i] == 0.0f);

    tensor *rows = row_slice(a, 1, 1), *cols = col_slice(a, 1, 1);
    assert_int_equal(rows->numel, 0);
    assert_int_equal(cols->shape[0], 3);
    assert_int_equal(cols->shape[1], 0);
    tensor *parts[2] = {cols, a}, *both = cat_cols(parts, 2);
    assert_true(max_abs_diff(both, a) == 0.0);

    adamw *opt = adamw_new(e2, 0.1f);
    adamw_step(opt, e2, e2);
    assert_int_equal(opt->step, 1);
    float nothing[1];
    tensor_to_host(e2, nothing);
    tensor_to_host(e2, NULL); /* nothing to write: no buffer needed */

    tensor *ts[] = {e1, e2, r, n, g, gb, mb, a, p, left, left2, right, out, rows, cols, both};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_free(ts[i]);
    adamw_free(opt);
}

/* ---------------- random numbers ---------------- */

static void test_randn_is_seeded(void **state) {
    (void)state;
    manual_seed(1234);
    tensor *a = randn(1000, 0, -1);
    manual_seed(1234);
    tensor *b = randn(10, 100, -1);
    manual_seed(1235);
    tensor *c = randn(1000, 0, -1);
    /* Same seed: the same numbers, whatever the shape. */
    assert_memory_equal(a->data, b->data, 1000 * sizeof(float));
    /* Another seed: other numbers. */
    int same = 0;
    for (int i = 0; i < 1000; i++)
        same += a->data[i] == c->data[i];
    assert_true(same < 5);

    /* Draws continue the stream: two randn(3) give the numbers of randn(6). */
    manual_seed(7);
    tensor *six = randn(6, 0, -1);
    manual_seed(7);
    tensor *first = randn(3, 0, -1), *second = randn(3, 0, -1);
    assert_memory_equal(six->data, first->data, 3 * sizeof(float));
    assert_memory_equal(six->data + 3, second->data, 3 * sizeof(float));

    /* manual_seed starts afresh, whatever was drawn before: after an odd
     * number of draws too (nothing half-used carries over). */
    manual_seed(7);
    tensor *odd = randn(3, 0, -1);
    manual_seed(7);
    tensor *again = randn(6, 0, -1);
    assert_memory_equal(six->data, again->data, 6 * sizeof(float));
    tensor_free(odd);
    tensor_free(again);

    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(six);
    tensor_free(first);
    tensor_free(second);
}

/* Runs this program afresh (exec, not only fork: the runtime's per-process
 * state starts anew) in helper mode `mode`, with LECTERN_HOST_POOL=pool
 * unless pool is NULL, and reads the `size` bytes it writes. */
static void read_from_fresh_process(const char *mode, const char *pool, void *buf, size_t size) {
    fflush(NULL);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (pool) setenv("LECTERN_HOST_POOL", pool, 1);
        char fd_text[16];
        snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
        execl("/proc/self/exe", "test_tensor", mode, fd_text, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], buf, size);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(got, (ssize_t)size);
}

static void test_randn_default_seed_is_zero(void **state) {
    (void)state;
    /* A fresh process starts as if manual_seed(0) had been called. A forked
     * child would inherit this process's stream, so run a fresh one. */
    float fresh[8];
    read_from_fresh_process("--print-first-randn", NULL, fresh, sizeof fresh);

    manual_seed(0);
    tensor *t = randn(8, 0, -1);
    assert_memory_equal(fresh, t->data, sizeof fresh);
    tensor_free(t);
}

static void test_randn_statistics(void **state) {
    (void)state;
    manual_seed(0);
    const int n = 100000;
    tensor *t = random_host(n, 0);
    double sum = 0, sumsq = 0;
    int within_one = 0;
    for (int i = 0; i < n; i++) {
        double x = t->data[i];
        sum += x;
        sumsq += x * x;
        within_one += fabs(x) < 1.0;
    }
    double mean = sum / n;
    double std = sqrt(sumsq / n - mean * mean);
    /* Standard errors: 0.003 for the mean, 0.002 for the std, 0.0015 for
     * the share within one sigma (0.6827 for a normal distribution). */
    assert_true(fabs(mean) < 0.02);
    assert_true(fabs(std - 1.0) < 0.02);
    assert_true(fabs((double)within_one / n - 0.6827) < 0.01);
    tensor_free(t);
}

/* ---------------- views and slices ---------------- */

static void test_row_slice_is_a_view(void **state) {
    (void)state;
    tensor *t = arange(12, -1);
    tensor *m = zeros(4, 3, -1);
    tensor_copy(m, m); /* same storage: nothing happens */
    memcpy(m->data, t->data, 12 * sizeof(float));

    tensor *v = row_slice(m, 1, 3);
    assert_int_equal(v->ndim, 2);
    assert_int_equal(v->shape[0], 2);
    assert_int_equal(v->shape[1], 3);
    assert_int_equal(v->numel, 6);
    assert_false(v->owns_data);
    assert_ptr_equal(v->data, m->data + 3);

    scale_(v, 10.0f); /* writes through to m's rows 1 and 2 only */
    for (int i = 0; i < 12; i++) {
        float expect = (i >= 3 && i < 9) ? 10.0f * i : (float)i;
        assert_true(m->data[i] == expect);
    }
    tensor_free(v); /* frees the view, not m's data */
    assert_true(m->data[11] == 11.0f);

    tensor *w = row_slice(t, 2, 5); /* 1-D: elements */
    assert_int_equal(w->ndim, 1);
    assert_int_equal(w->numel, 3);
    assert_true(tensor_item(w, 0) == 2.0f && tensor_item(w, 2) == 4.0f);
    tensor *none = row_slice(t, 4, 4);
    assert_int_equal(none->numel, 0);

    tensor_free(w);
    tensor_free(none);
    tensor_free(m);
    tensor_free(t);
}

static void test_col_slice_and_cat_cols(void **state) {
    (void)state;
    float v[15];
    for (int i = 0; i < 15; i++)
        v[i] = (float)i; /* 3x5: row r is 5r .. 5r+4 */
    tensor *m = from_values(3, 5, -1, v);

    tensor *mid = col_slice(m, 1, 4);
    assert_int_equal(mid->shape[0], 3);
    assert_int_equal(mid->shape[1], 3);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            assert_true(mid->data[r * 3 + c] == (float)(5 * r + c + 1));

    tensor *left = col_slice(m, 0, 2), *right = col_slice(m, 2, 5);
    tensor *parts[] = {left, right};
    tensor *whole = cat_cols(parts, 2);
    assert_int_equal(whole->shape[0], 3);
    assert_int_equal(whole->shape[1], 5);
    assert_memory_equal(whole->data, v, sizeof v);

    tensor *three[] = {mid, mid, left};
    tensor *wide = cat_cols(three, 3);
    assert_int_equal(wide->shape[1], 8);
    assert_true(wide->data[8 + 0] == 6.0f); /* row 1, first column of mid */
    assert_true(wide->data[8 + 7] == 6.0f); /* row 1, last column of left */

    tensor_free(m);
    tensor_free(mid);
    tensor_free(left);
    tensor_free(right);
    tensor_free(whole);
    tensor_free(wide);
}

/* ---------------- arithmetic ---------------- */

static void test_elementwise(void **state) {
    (void)state;
    manual_seed(3);
    tensor *a = random_host(4, 5), *b = random_host(4, 5);
    float a0[20], b0[20];
    memcpy(a0, a->data, sizeof a0);
    memcpy(b0, b->data, sizeof b0);

    add_scalar_(a, 1.5f);
    for (int i = 0; i < 20; i++)
        assert_true(a->data[i] == a0[i] + 1.5f);
    scale_(a, -2.0f);
    for (int i = 0; i < 20; i++)
        assert_true(a->data[i] == (a0[i] + 1.5f) * -2.0f);
    add_(a, b);
    for (int i = 0; i < 20; i++)
        assert_float_equal(a->data[i], (a0[i] + 1.5f) * -2.0f + b0[i], 1e-6);
    tensor_free(a);
    tensor_free(b);
}

static void check_matmul(int64_t m, int64_t k, int64_t n, int ta, int tb, float alpha, float beta) {
    /* Stored shapes so that op(a) is m x k and op(b) is k x n. */
    tensor *a = ta ? random_host(k, m) : random_host(m, k);
    tensor *b = tb ? random_host(n, k) : random_host(k, n);
    tensor *c = random_host(m, n);
    float *c0 = malloc(sizeof(float) * (size_t)(m * n));
    memcpy(c0, c->data, sizeof(float) * (size_t)(m * n));

    matmul_into(c, a, b, ta, tb, alpha, beta);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += op_at(a, ta, i, p) * op_at(b, tb, p, j);
            double expect = alpha * s + beta * c0[i * n + j];
            assert_float_equal(c->data[i * n + j], expect, 1e-4 * (1 + fabs(expect)));
        }
    free(c0);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}

/* tensor_view, reshape, sub_, fill_, sum, norm against loops over the
 * values the test put in. */
static void test_views_and_reductions(void **state) {
    (void)state;
    tensor *flat = arange(12, -1);          /* 0, 1, ..., 11 */
    tensor *v = tensor_view(flat, 5, 2, 3); /* elements 5..10 as 2x3 */
    assert_int_equal(v->ndim, 2);
    assert_int_equal(v->shape[0], 2);
    assert_int_equal(v->shape[1], 3);
    assert_int_equal(v->numel, 6);
    assert_false(v->owns_data);
    for (int i = 0; i < 6; i++)
        assert_true(v->data[i] == (float)(5 + i));
    fill_(v, -1.0f); /* writes reach the buffer */
    for (int i = 0; i < 12; i++)
        assert_true(flat->data[i] == ((i >= 5 && i < 11) ? -1.0f : (float)i));
    tensor *one_d = tensor_view(flat, 11, 1, 0);
    assert_int_equal(one_d->ndim, 1);
    assert_true(one_d->data[0] == 11.0f);
    tensor *empty_view = tensor_view(flat, 12, 0, 0); /* the end is a valid place for nothing */
    assert_int_equal(empty_view->numel, 0);

    tensor *m = reshape(flat, 3, 4);
    assert_int_equal(m->shape[0], 3);
    assert_int_equal(m->shape[1], 4);
    assert_true(m->data == flat->data);
    tensor *back = reshape(m, 12, 0);
    assert_int_equal(back->ndim, 1);
    assert_int_equal(back->numel, 12);

    /* sub_: t - u elementwise, against the values computed here. */
    float a_vals[6] = {1.5f, -2.0f, 3.25f, 0.0f, 10.0f, -7.5f};
    float b_vals[6] = {0.5f, 2.0f, -1.0f, 4.0f, 2.5f, -7.5f};
    tensor *a = tensor_from(a_vals, 2, 3, -1), *b = tensor_from(b_vals, 2, 3, -1);
    sub_(a, b);
    for (int i = 0; i < 6; i++)
        assert_true(a->data[i] == a_vals[i] - b_vals[i]); /* exact: every value is a short binary fraction */

    /* sum and norm of a random tensor against double loops here. */
    manual_seed(3);
    tensor *r = randn(37, 11, -1);
    double s = 0, sq = 0;
    for (int64_t i = 0; i < r->numel; i++) {
        s += r->data[i];
        sq += (double)r->data[i] * r->data[i];
    }
    /* sum adds the same floats in double in the same order: equal. norm's
     * squares go through OpenBLAS's dsdot, whose kernels may round each
     * product to float before adding it in double (this machine's does):
     * each square then moves by up to 2^-24 of itself, and the order of the
     * additions by n 2^-53 of the total; sqrt and squaring back add 2^-51. */
    double bound = sq * (ldexp(1.0, -24) + (double)r->numel * ldexp(1.0, -53) + ldexp(1.0, -51));
    assert_true(tensor_sum(r) == s);
    double n2 = tensor_norm(r) * tensor_norm(r);
    assert_true(fabs(n2 - sq) <= bound);
    assert_true(tensor_sum(empty_view) == 0.0);
    assert_true(tensor_norm(empty_view) == 0.0);

    tensor_free(r);
    tensor_free(a);
    tensor_free(b);
    tensor_free(back);
    tensor_free(m);
    tensor_free(empty_view);
    tensor_free(one_d);
    tensor_free(v);
    tensor_free(flat);
}

/* ---------------- bytes of storage alive ---------------- */

/* tensor_bytes_live(-1) moves by what each tensor's storage takes, numel *
 * 4 bytes, computed here from the shapes; a view shares its original's
 * storage and moves it by nothing, whether made or freed. */
static void test_bytes_live_counts_each_storage_once(void **state) {
    (void)state;
    const int64_t f = (int64_t)sizeof(float);
    int64_t base = tensor_bytes_live(-1); /* whatever earlier tests left */
    tensor *a = zeros(5, 7, -1);
    assert_int_equal(tensor_bytes_live(-1), base + 5 * 7 * f);
    tensor *b = arange(13, -1), *none = empty(0, 3, -1);
    int64_t made = (5 * 7 + 13) * f;
    assert_int_equal(tensor_bytes_live(-1), base + made);

    tensor *views[] = {row_slice(a, 1, 4), tensor_view(a, 2, 3, 2), reshape(a, 7, 5), row_slice(b, 2, 9),
                       tensor_view(b, 0, 13, 0)};
    enum { N_VIEWS = sizeof views / sizeof views[0] };
    tensor *of_view = reshape(views[1], 6, 0); /* a view of a view */
    assert_int_equal(tensor_bytes_live(-1), base + made);

    tensor *cols = col_slice(a, 1, 3); /* a copy: 5 x 2 */
    tensor *parts[] = {a, cols};
    tensor *joined = cat_cols(parts, 2);            /* 5 x 9 */
    tensor *w = randn(7, 3, -1), *y = matmul(a, w); /* 7 x 3, 5 x 3 */
    made += (5 * 2 + 5 * 9 + 7 * 3 + 5 * 3) * f;
    assert_int_equal(tensor_bytes_live(-1), base + made);
    adamw *opt = adamw_new(w, 1e-3f); /* its two moments, each w's shape */
    assert_int_equal(tensor_bytes_live(-1), base + made + 2 * 7 * 3 * f);
    adamw_free(opt);
    assert_int_equal(tensor_bytes_live(-1), base + made);
    assert_int_equal(tensor_bytes_live(0), 0); /* nothing here went to a GPU */

    tensor_free(of_view);
    for (int i = 0; i < N_VIEWS; i++)
        tensor_free(views[i]);
    assert_int_equal(tensor_bytes_live(-1), base + made);
    tensor_free(joined);
    made -= 5 * 9 * f;
    assert_int_equal(tensor_bytes_live(-1), base + made);
    tensor_free(a); /* cols, a copy, stays */
    made -= 5 * 7 * f;
    assert_int_equal(tensor_bytes_live(-1), base + made);
    tensor *rest[] = {b, none, cols, w, y};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        tensor_free(rest[i]);
    assert_int_equal(tensor_bytes_live(-1), base);

    if (gpu_count() > 0) { /* device storage is counted on its own device */
        int64_t dev_base = tensor_bytes_live(0);
        tensor *d = zeros(6, 4, 0), *dv = row_slice(d, 1, 3);
        assert_int_equal(tensor_bytes_live(0), dev_base + 6 * 4 * f);
        assert_int_equal(tensor_bytes_live(-1), base);
        tensor *back = to_device(d, -1);
        assert_int_equal(tensor_bytes_live(-1), base + 6 * 4 * f);
        tensor_free(dv);
        tensor_free(d);
        tensor_free(back);
        assert_int_equal(tensor_bytes_live(0), dev_base);
        assert_int_equal(tensor_bytes_live(-1), base);
    }
}

static void test_matmul_against_triple_loop(void **state) {
    (void)state;
    manual_seed(11);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(7, 5, 3, ta, tb, 1.0f, 0.0f);
            check_matmul(6, 9, 4, ta, tb, 0.5f, -2.0f);
            check_matmul(33, 17, 65, ta, tb, -1.25f, 1.0f);
        }

    /* matmul() itself: a fresh product. */
    tensor *a = random_host(8, 6), *b = random_host(6, 10);
    tensor *c = matmul(a, b);
    assert_int_equal(c->shape[0], 8);
    assert_int_equal(c->shape[1], 10);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 10; j++) {
            double s = 0;
            for (int p = 0; p < 6; p++)
                s += (double)a->data[i * 6 + p] * b->data[p * 10 + j];
            assert_float_equal(c->data[i * 10 + j], s, 1e-4 * (1 + fabs(s)));
        }
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}

/* GELU, tanh form, in double: the reference. */
static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void test_gelu(void **state) {
    (void)state;
    enum { N = 201 };
    float xs[N];
    for (int i = 0; i < N; i++)
        xs[i] = -6.0f + 0.06f * i;
    tensor *x = from_values(N, 0, -1, xs);
    tensor *y = gelu(x);
    for (int i = 0; i < N; i++) {
        double x64 = xs[i];
        assert_float_equal(y->data[i], gelu_ref(x64), 2e-6);
        /* and close to the exact erf form (torch's default) */
        double exact = 0.5 * x64 * (1.0 + erf(x64 / sqrt(2.0)));
        assert_true(fabs(y->data[i] - exact) < 1e-3);
    }

    /* gelu_backward against central differences of the reference, with an
     * upstream gradient that is not all ones. */
    float dys[N];
    for (int i = 0; i < N; i++)
        dys[i] = 0.5f + 0.01f * i;
    tensor *dy = from_values(N, 0, -1, dys);
    tensor *dx = gelu_backward(x, dy);
    const double h = 1e-4;
    for (int i = 0; i < N; i++) {
        double x64 = xs[i];
        double slope = (gelu_ref(x64 + h) - gelu_ref(x64 - h)) / (2 * h);
        assert_float_equal(dx->data[i], dys[i] * slope, 2e-5);
    }
    tensor_free(x);
    tensor_free(y);
    tensor_free(dy);
    tensor_free(dx);
}

static double mean_square(const float *x, int n, int bump, double h) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        double v = x[i] + (i == bump ? h : 0.0);
        s += v * v;
    }
    return s / n;
}

static void test_mse(void **state) {
    (void)state;
    manual_seed(5);
    tensor *x = random_host(16, 8);
    int n = 128;
    assert_float_equal(mse_loss(x), mean_square(x->data, n, -1, 0), 1e-6);

    tensor *dx = mse_loss_backward(x);
    assert_int_equal(dx->shape[0], 16);
    assert_int_equal(dx->shape[1], 8);
    const double h = 1e-3;
    for (int i = 0; i < n; i++) {
        double slope = (mean_square(x->data, n, i, h) - mean_square(x->data, n, i, -h)) / (2 * h);
        assert_float_equal(dx->data[i], slope, 1e-6);
    }
    tensor_free(x);
    tensor_free(dx);
}

/* ---------------- AdamW ---------------- */

static void test_adamw_against_formulas(void **state) {
    (void)state;
    const float p0[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    const float grads[3][4] = {
            {0.1f, -0.2f, 0.3f, 0.0f},
            {-0.05f, 0.4f, 0.0f, 1.0f},
            {0.2f, 0.2f, -0.1f, -3.0f},
    };
    const double lr = 0.01;
    tensor *p = from_values(2, 2, -1, p0);
    adamw *opt = adamw_new(p, (float)lr);
    assert_float_equal(opt->beta1, 0.9, 1e-9);
    assert_float_equal(opt->beta2, 0.999, 1e-9);
    assert_float_equal(opt->eps, 1e-8, 1e-15);
    assert_float_equal(opt->weight_decay, 0.01, 1e-9);

    /* The textbook form: bias-corrected moments, decoupled decay. */
    double ref[4], m[4] = {0}, v[4] = {0};
    for (int i = 0; i < 4; i++)
        ref[i] = p0[i];
    for (int t = 1; t <= 3; t++) {
        tensor *g = from_values(2, 2, -1, grads[t - 1]);
        adamw_step(opt, p, g);
        tensor_free(g);
        for (int i = 0; i < 4; i++) {
            double gi = grads[t - 1][i];
            ref[i] -= lr * 0.01 * ref[i];
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.999 * v[i] + 0.001 * gi * gi;
            double m_hat = m[i] / (1 - pow(0.9, t));
            double v_hat = v[i] / (1 - pow(0.999, t));
            ref[i] -= lr * m_hat / (sqrt(v_hat) + 1e-8);
        }
        assert_int_equal(opt->step, t);
        for (int i = 0; i < 4; i++)
            assert_float_equal(p->data[i], ref[i], 2e-6);
        if (t == 1) /* Adam's first step is lr in the direction of -sign(g) */
            assert_float_equal(p->data[0], p0[0] * (1 - lr * 0.01) - lr, 1e-6);
    }
    adamw_free(opt);
    tensor_free(p);
}

/* ---------------- printing ---------------- */

static void check_str(tensor *t, const char *expect) {
    const char *got = tensor_str(t);
    if (strcmp(got, expect) != 0) print_error("expected:\n%s\ngot:\n%s\n", expect, got);
    assert_string_equal(got, expect);
}

static void check_str_of(int64_t rows, int64_t cols, const float *v, const char *expect) {
    tensor *t = from_values(rows, cols, -1, v);
    check_str(t, expect);
    tensor_free(t);
}

static void test_tensor_str_small(void **state) {
    (void)state;
    tensor *a = arange(4, -1);
    check_str(a, "tensor([0., 1., 2., 3.], device='cpu')");
    check_str(a, "tensor([0., 1., 2., 3.], device='cpu')"); /* again: the buffer is reused */
    tensor_free(a);

    check_str_of(4, 0, (const float[]){6, 10, 14, 18}, "tensor([ 6., 10., 14., 18.], device='cpu')");
    check_str_of(2, 0, (const float[]){-0.0239f, 1.2f}, "tensor([-0.0239,  1.2000], device='cpu')");
    check_str_of(2, 0, (const float[]){-1, 10}, "tensor([-1., 10.], device='cpu')");
    check_str_of(3, 0, (const float[]){0, 0, 0}, "tensor([0., 0., 0.], device='cpu')");
    check_str_of(3, 0, (const float[]){NAN, 1, INFINITY}, "tensor([nan, 1., inf], device='cpu')");
    check_str_of(2, 0, (const float[]){0.5f, 0}, "tensor([0.5000, 0.0000], device='cpu')");
    /* below 1e-4, or spanning more than 1000x: scientific */
    check_str_of(2, 0, (const float[]){1e-5f, 1}, "tensor([1.0000e-05, 1.0000e+00], device='cpu')");
    check_str_of(2, 0, (const float[]){1, 2000}, "tensor([1.0000e+00, 2.0000e+03], device='cpu')");
    check_str_of(1, 0, (const float[]){42}, "tensor([42.], device='cpu')");

    tensor *e = empty(0, 0, -1);
    check_str(e, "tensor([], device='cpu')");
    tensor_free(e);
    e = empty(0, 3, -1);
    check_str(e, "tensor([], device='cpu', size=(0, 3))");
    tensor_free(e);

    check_str_of(2, 3, (const float[]){0, 1, 2, 3, 4, 5},
                 "tensor([[0., 1., 2.],\n"
                 "        [3., 4., 5.]], device='cpu')");
    check_str_of(2, 2, (const float[]){-1.5f, 2, 3, 0.25f},
                 "tensor([[-1.5000,  2.0000],\n"
                 "        [ 3.0000,  0.2500]], device='cpu')");
}

static void test_tensor_str_wrapping(void **state) {
    (void)state;
    float v[20];
    for (int i = 0; i < 20; i++)
        v[i] = i + 0.5f;
    /* 8 elements of width 7 fit in 80 columns after "tensor([" */
    check_str_of(20, 0, v,
                 "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
                 "         8.5000,  9.5000, 10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000,\n"
                 "        16.5000, 17.5000, 18.5000, 19.5000], device='cpu')");
    /* a full line leaves no room for the device: it goes on its own line */
    check_str_of(9, 0, v,
                 "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000, 6.5000, 7.5000, 8.5000],\n"
                 "       device='cpu')");
}

static void test_tensor_str_summarised(void **state) {
    (void)state;
    tensor *a = arange(2000, -1);
    check_str(a, "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
                 "        1.9990e+03], device='cpu')");
    tensor_free(a);

    /* 50x50 of (r + c) mod 10: only the edge rows and columns are shown, and
     * only they decide the format (the large middle value does not). */
    float *v = malloc(sizeof(float) * 2500);
    for (int r = 0; r < 50; r++)
        for (int c = 0; c < 50; c++)
            v[r * 50 + c] = (float)((r + c) % 10);
    v[25 * 50 + 25] = 12345.5f;
    check_str_of(50, 50, v,
                 "tensor([[0., 1., 2.,  ..., 7., 8., 9.],\n"
                 "        [1., 2., 3.,  ..., 8., 9., 0.],\n"
                 "        [2., 3., 4.,  ..., 9., 0., 1.],\n"
                 "        ...,\n"
                 "        [7., 8., 9.,  ..., 4., 5., 6.],\n"
                 "        [8., 9., 0.,  ..., 5., 6., 7.],\n"
                 "        [9., 0., 1.,  ..., 6., 7., 8.]], device='cpu')");
    free(v);

    tensor *big = arange(10000, -1);
    tensor *m = zeros(100, 100, -1);
    memcpy(m->data, big->data, 10000 * sizeof(float));
    check_str(m, "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.7000e+01, 9.8000e+01,\n"
                 "         9.9000e+01],\n"
                 "        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.9700e+02, 1.9800e+02,\n"
                 "         1.9900e+02],\n"
                 "        [2.0000e+02, 2.0100e+02, 2.0200e+02,  ..., 2.9700e+02, 2.9800e+02,\n"
                 "         2.9900e+02],\n"
                 "        ...,\n"
                 "        [9.7000e+03, 9.7010e+03, 9.7020e+03,  ..., 9.7970e+03, 9.7980e+03,\n"
                 "         9.7990e+03],\n"
                 "        [9.8000e+03, 9.8010e+03, 9.8020e+03,  ..., 9.8970e+03, 9.8980e+03,\n"
                 "         9.8990e+03],\n"
                 "        [9.9000e+03, 9.9010e+03, 9.9020e+03,  ..., 9.9970e+03, 9.9980e+03,\n"
                 "         9.9990e+03]], device='cpu')");
    tensor_free(big);
    tensor_free(m);
}

static void check_summary(int64_t rows, int64_t cols, float first, const char *expect) {
    tensor *t = zeros(rows, cols, -1);
    t->data[0] = first;
    assert_string_equal(summarize(t), expect);
    tensor_free(t);
}

static void test_summarize(void **state) {
    (void)state;
    check_summary(1024, 1024, -0.02391f, "1024x1024[-0.0239...]");
    check_summary(4, 0, 0.5f, "4[0.5...]");
    check_summary(2, 3, 1.0f, "2x3[1.0...]");
    check_summary(2, 3, 0.0f, "2x3[0.0...]");
    check_summary(8, 0, 123.45678f, "8[123.4568...]");
    check_summary(8, 0, 0.03125f, "8[0.0312...]"); /* an exact tie rounds to even */
    check_summary(8, 0, 2.675f, "8[2.675...]");    /* float 2.67499995...: no tie */
    check_summary(8, 0, 0.0001f, "8[0.0001...]");
    check_summary(8, 0, 0.00004f, "8[0.0...]");
    check_summary(8, 0, -0.00004f, "8[-0.0...]"); /* Python keeps the sign of zero */
    check_summary(8, 0, 1e20f, "8[1.0000000200408773e+20...]");
    check_summary(8, 0, 3e15f, "8[3000000028082176.0...]");
    check_summary(8, 0, -7.0f, "8[-7.0...]");

    tensor *e = empty(0, 5, -1);
    assert_string_equal(summarize(e), "0x5[]");
    /* summarize and tensor_str share one buffer, replaced by each call */
    assert_string_equal(tensor_str(e), "tensor([], device='cpu', size=(0, 5))");
    tensor_free(e);
}

/* ---------------- errors stop the lecture ---------------- */

/* Runs `body` as a lecture in a child process (its trace in a temporary
 * folder); returns the exit status and what it wrote on stderr. */
static int run_lecture(void (*body)(void), char *err, size_t cap) {
    char dir[] = "/tmp/lectern-test-tensor-XXXXXX";
    assert_non_null(mkdtemp(dir));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {"test_tensor", "--out", dir, "--quiet", NULL};
        exit(lecture_main(4, argv, body));
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fds[0], err + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);

    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_failure(void (*body)(void), int line, const char *message) {
    char err[8192];
    int status = run_lecture(body, err, sizeof err);
    char where[64];
    snprintf(where, sizeof where, "tests/tensor/test_tensor.c:%d: ", line);
    if (status != 1 || !strstr(err, where) || !strstr(err, message))
        print_error("status %d, stderr:\n%s\nexpected '%s%s'\n", status, err, where, message);
    assert_int_equal(status, 1);
    assert_non_null(strstr(err, where));
    assert_non_null(strstr(err, message));
}

static void ask_for_cuda0(void) { zeros(2, 2, 0); }
enum { ASK_FOR_CUDA0_LINE = __LINE__ - 1 };

/* Each wrong call stops the lecture at its own line, so the tensors it is
 * given are made on that line and never freed here. */
static void multiply_mismatched(void) { matmul(zeros(2, 3, -1), zeros(2, 3, -1)); }
enum { MULTIPLY_MISMATCHED_LINE = __LINE__ - 1 };

static void add_mismatched(void) { add_(zeros(4, 0, -1), zeros(5, 0, -1)); }
enum { ADD_MISMATCHED_LINE = __LINE__ - 1 };

static void slice_out_of_range(void) { row_slice(zeros(4, 2, -1), 2, 6); }
enum { SLICE_OUT_OF_RANGE_LINE = __LINE__ - 1 };

static void view_out_of_range(void) { tensor_view(zeros(4, 2, -1), 5, 2, 2); }
enum { VIEW_OUT_OF_RANGE_LINE = __LINE__ - 1 };

static void reshape_wrong_count(void) { reshape(zeros(4, 2, -1), 3, 3); }
enum { RESHAPE_WRONG_COUNT_LINE = __LINE__ - 1 };

static void sub_mismatched(void) { sub_(zeros(2, 2, -1), zeros(4, 0, -1)); }
enum { SUB_MISMATCHED_LINE = __LINE__ - 1 };

static void bytes_live_of_no_device(void) { tensor_bytes_live(-2); }
enum { BYTES_LIVE_OF_NO_DEVICE_LINE = __LINE__ - 1 };

static void test_errors_name_the_lecture_line(void **state) {
    (void)state;
    expect_failure(multiply_mismatched, MULTIPLY_MISMATCHED_LINE, "matmul: shapes 2x3 and 2x3 cannot be multiplied");
    expect_failure(add_mismatched, ADD_MISMATCHED_LINE, "add_: shapes differ: 4 and 5");
    expect_failure(slice_out_of_range, SLICE_OUT_OF_RANGE_LINE,
                   "row_slice: rows [2, 6) are not within the 4 rows of a 4x2 tensor");
    expect_failure(view_out_of_range, VIEW_OUT_OF_RANGE_LINE,
                   "tensor_view: elements [5, 9) are not within the 8 elements of a 4x2 tensor");
    expect_failure(reshape_wrong_count, RESHAPE_WRONG_COUNT_LINE,
                   "reshape: a 4x2 tensor (8 elements) cannot be 3x3 (9 elements)");
    expect_failure(sub_mismatched, SUB_MISMATCHED_LINE, "sub_: shapes differ: 2x2 and 4");
    expect_failure(bytes_live_of_no_device, BYTES_LIVE_OF_NO_DEVICE_LINE,
                   "tensor_bytes_live: device -2 is neither the CPU (-1) nor a GPU (0, 1, ...)");
}

static void test_no_gpu_is_a_clear_error(void **state) {
    (void)state;
    if (gpu_count() > 0) {
        print_message("skipped: a GPU is visible, so cuda:0 is no error here\n");
        skip();
    }
    expect_failure(ask_for_cuda0, ASK_FOR_CUDA0_LINE, "cuda:0 asked for, but");
    char err[8192];
    run_lecture(ask_for_cuda0, err, sizeof err);
    assert_true(strstr(err, "no GPU is visible") || strstr(err, "built without CUDA"));
}

/* ---------------- timing ---------------- */

static void test_timing(void **state) {
    (void)state;
    double t0 = now_seconds();
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    device_synchronize();
    double t1 = now_seconds();
    assert_true(t1 - t0 >= 0.019);
    assert_true(t1 - t0 < 5.0);
    /* median: the middle value of an odd count, the mean of the two middle
     * ones of an even count, whatever the order given. */
    double odd[] = {9.0, 1.0, 5.0, 3.0, 7.0};
    assert_true(median_of(odd, 5) == 5.0);
    double even[] = {4.0, 1.0, 3.0, 2.0};
    assert_true(median_of(even, 4) == 2.5);
    double one[] = {-1.5};
    assert_true(median_of(one, 1) == -1.5);
}

/* ---------------- the same on a GPU ---------------- */

/* Why there is no GPU to test on, for the skip message. */
static const char *gpu_count_reason(void) {
#ifdef LECTERN_CUDA
    return "no GPU visible (gpu_count() is 0): the GPU half of the tests cannot run here";
#else
    return "this build has no CUDA (make CUDA=0 or no nvcc): no GPU half to test";
#endif
}

static void assert_close(tensor *gpu, tensor *cpu, double tol) {
    double d = max_abs_diff(gpu, cpu);
    if (!(d <= tol)) print_error("max_abs_diff %g > %g\n", d, tol);
    assert_true(d <= tol);
}

static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (gpu_count() == 0) {
        print_message("skipped: %s\n", gpu_count_reason());
        skip();
    }
    const int dev = 0;

    /* randn: the same numbers on both, made on each (tests/tensor/test_random.c
     * checks the generator itself) */
    manual_seed(99);
    tensor *hx = randn(64, 48, -1);
    manual_seed(99);
    tensor *dx = randn(64, 48, dev);
    assert_int_equal(dx->device, dev);
    assert_close(dx, hx, 0.0);

    tensor *ha = arange(4, -1), *da = arange(4, dev);
    add_scalar_(da, 1.0f);
    add_scalar_(ha, 1.0f);
    assert_string_equal(tensor_str(da), "tensor([1., 2., 3., 4.], device='cuda:0')");
    assert_string_equal(summarize(da), "4[1.0...]");
    assert_true(tensor_item(da, 3) == 4.0f);
    scale_(da, 3.0f);
    scale_(ha, 3.0f);
    add_(da, da);
    add_(ha, ha);
    assert_close(da, ha, 0.0);

    /* matmul with every transpose, alpha and beta */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            tensor *a = ta ? randn(37, 29, -1) : randn(29, 37, -1);
            tensor *b = tb ? randn(41, 37, -1) : randn(37, 41, -1);
            tensor *c = randn(29, 41, -1);
            tensor *ga = to_device(a, dev), *gb = to_device(b, dev), *gc = to_device(c, dev);
            matmul_into(c, a, b, ta, tb, 0.75f, -0.5f);
            matmul_into(gc, ga, gb, ta, tb, 0.75f, -0.5f);
            assert_close(gc, c, 1e-4);
            tensor_free(a);
            tensor_free(b);
            tensor_free(c);
            tensor_free(ga);
            tensor_free(gb);
            tensor_free(gc);
        }

    tensor *ha2 = randn(16, 24, -1), *hb2 = randn(24, 8, -1);
    tensor *da2 = to_device(ha2, dev), *db2 = to_device(hb2, dev);
    tensor *hp = matmul(ha2, hb2), *dp = matmul(da2, db2);
    assert_int_equal(dp->device, dev);
    assert_close(dp, hp, 1e-4);
    tensor *more[] = {ha2, hb2, da2, db2, hp, dp};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        tensor_free(more[i]);

    /* gelu, its backward, the loss and its backward */
    tensor *hy = gelu(hx), *dy = gelu(dx);
    assert_close(dy, hy, 1e-6);
    tensor *hg = gelu_backward(hx, hy), *dg = gelu_backward(dx, dy);
    assert_close(dg, hg, 1e-5);
    assert_float_equal(mse_loss(dx), mse_loss(hx), 1e-5);
    tensor *hl = mse_loss_backward(hx), *dl = mse_loss_backward(dx);
    assert_close(dl, hl, 1e-7);

    /* slices and concatenation */
    tensor *hs = col_slice(hx, 5, 20), *ds = col_slice(dx, 5, 20);
    assert_close(ds, hs, 0.0);
    tensor *hparts[] = {hs, hx}, *dparts[] = {ds, dx};
    tensor *hc = cat_cols(hparts, 2), *dc = cat_cols(dparts, 2);
    assert_close(dc, hc, 0.0);
    tensor *hv = row_slice(hx, 3, 9), *dv = row_slice(dx, 3, 9);
    assert_close(dv, hv, 0.0);

    /* AdamW, a few steps, from the very same gradient (Adam divides by the
     * gradient's size, so tiny rounding differences in near-zero gradients
     * would be magnified) */
    tensor *hg_on_dev = to_device(hg, dev);
    adamw *ho = adamw_new(hx, 1e-3f), *dop = adamw_new(dx, 1e-3f);
    for (int s = 0; s < 5; s++) {
        adamw_step(ho, hx, hg);
        adamw_step(dop, dx, hg_on_dev);
    }
    device_synchronize();
    assert_close(dx, hx, 1e-5);

    tensor *back = to_device(dx, -1);
    assert_int_equal(back->device, -1);
    assert_close(back, hx, 1e-5);

    adamw_free(ho);
    adamw_free(dop);
    tensor *all[] = {hx, dx, ha, da, hy, dy, hg, dg, hl, dl, hs, ds, hc, dc, hv, dv, back, hg_on_dev};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
}

/* ---------------- host memory kept once freed ---------------- */

/* A training step's pattern: KEPT_TENSORS activations of 256 KiB each
 * made, written and freed, again and again. Returns the page faults of the
 * rounds after the first two (the first makes the blocks; glibc, without the
 * pool, adapts to what it has seen freed by the second). */
enum { KEPT_TENSORS = 16, KEPT_ROUNDS = 6 };
static long faults_of_kept_rounds(void) {
    long counted = 0;
    for (int round = 0; round < KEPT_ROUNDS; round++) {
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        tensor *t[KEPT_TENSORS];
        for (int i = 0; i < KEPT_TENSORS; i++)
            t[i] = zeros(128, 512, -1); /* every page written */
        for (int i = 0; i < KEPT_TENSORS; i++)
            tensor_free(t[i]);
        getrusage(RUSAGE_SELF, &after);
        if (round >= 2) counted += after.ru_minflt - before.ru_minflt;
    }
    return counted;
}

/* The rounds' faults in a fresh process with LECTERN_HOST_POOL as given
 * (the choice is made once per process, at its first host tensor). */
static long faults_in_fresh_process(const char *pool) {
    long faults = -1;
    read_from_fresh_process("--count-kept-faults", pool, &faults, sizeof faults);
    return faults;
}

/* A freed host block goes to the next tensor of its size, and only of its
 * size (runtime/tensor/host_pool.c). */
static void test_freed_host_block_goes_to_the_next_tensor_of_its_size(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip(); /* the pool is off under ASan (host_pool.c) */
#endif
    const char *env = getenv("LECTERN_HOST_POOL");
    if (env && strcmp(env, "0") == 0) skip();
    tensor *a = zeros(128, 512, -1); /* 256 KiB */
    float *block = a->data;
    tensor_free(a);
    tensor *other = zeros(256, 512, -1); /* another size: not that block */
    assert_ptr_not_equal(other->data, block);
    tensor *b = zeros(512, 128, -1); /* the same bytes, another shape */
    assert_ptr_equal(b->data, block);
    assert_int_equal((uintptr_t)b->data % 64, 0);
    for (int i = 0; i < 512 * 128; i++)
        assert_true(b->data[i] == 0.0f); /* zeros() wrote it whole */
    tensor_free(b);
    tensor_free(other);
}

static void test_freed_host_memory_is_kept(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip(); /* the pool is off under ASan (host_pool.c) */
#endif
    /* 4 counted rounds of 16 tensors of 64 pages: 4,096 pages if none were
     * reused. Kept blocks come back whole; the allowance, one page per
     * tensor, covers the runtime's small records beside each tensor. */
    long kept = faults_in_fresh_process("1");
    assert_in_range(kept, 0, 4 * KEPT_TENSORS);
    /* The control: with the pool off the same rounds fault (about 900 a
     * round with Debian's glibc 2.41 on the 2-core machine), so the count
     * above can tell the two apart. At least one tensor's pages a round. */
    long plain = faults_in_fresh_process("0");
    assert_true(plain >= 4 * 64);
}

int main(int argc, char **argv) {
    /* Helper mode for test_randn_default_seed_is_zero: a fresh process
     * writes its first 8 normals to the given file descriptor. */
    if (argc == 3 && strcmp(argv[1], "--print-first-randn") == 0) {
        tensor *t = randn(8, 0, -1);
        ssize_t n = write(atoi(argv[2]), t->data, 8 * sizeof(float));
        tensor_free(t);
        return n == (ssize_t)(8 * sizeof(float)) ? 0 : 1;
    }
    /* Helper mode for test_freed_host_memory_is_kept. */
    if (argc == 3 && strcmp(argv[1], "--count-kept-faults") == 0) {
        long faults = faults_of_kept_rounds();
        ssize_t n = write(atoi(argv[2]), &faults, sizeof faults);
        return n == (ssize_t)sizeof faults ? 0 : 1;
    }
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_shapes_and_values),
            cmocka_unit_test(test_max_abs_diff_sees_nan),
            cmocka_unit_test(test_empty_tensors),
            cmocka_unit_test(test_randn_is_seeded),
            cmocka_unit_test(test_randn_default_seed_is_zero),
            cmocka_unit_test(test_randn_statistics),
            cmocka_unit_test(test_row_slice_is_a_view),
            cmocka_unit_test(test_col_slice_and_cat_cols),
            cmocka_unit_test(test_elementwise),
            cmocka_unit_test(test_views_and_reductions),
            cmocka_unit_test(test_bytes_live_counts_each_storage_once),
            cmocka_unit_test(test_matmul_against_triple_loop),
            cmocka_unit_test(test_gelu),
            cmocka_unit_test(test_mse),
            cmocka_unit_test(test_adamw_against_formulas),
            cmocka_unit_test(test_tensor_str_small),
            cmocka_unit_test(test_tensor_str_wrapping),
            cmocka_unit_test(test_tensor_str_summarised),
            cmocka_unit_test(test_summarize),
            cmocka_unit_test(test_errors_name_the_lecture_line),
            cmocka_unit_test(test_no_gpu_is_a_clear_error),
            cmocka_unit_test(test_timing),
            cmocka_unit_test(test_gpu_matches_cpu),
            cmocka_unit_test(test_freed_host_block_goes_to_the_next_tensor_of_its_size),
            cmocka_unit_test(test_freed_host_memory_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
