/*
 * test_transformer.c: the transformer pieces lectures share
 * (lectures/lecture_scaling/transformer.c), checked against float64 loops written here
 * from the formulas, sharing none of its code (cmocka).
 *
 * Every tolerance is derived from float32 rounding, u = 2^-24 (half the
 * spacing of floats near 1):
 *   - a product or quotient of two floats is exact to u relatively, as is
 *     expf in glibc to 2u (under one unit in the last place);
 *   - a sum of n terms, in any order (a BLAS kernel's or a loop's), is
 *     exact to n u times the sum of the terms' sizes;
 *   - exp turns an absolute error e of its argument into a relative error
 *     of about e of its result.
 * Each test computes the sizes those bounds need (sums of |terms|) in
 * float64 from the same inputs, so the bound is the worst case for these
 * very numbers, and a wrong formula (a missing 1/sqrt(d), a mask one
 * position off, a head taken from the wrong columns, a token sent to the
 * wrong expert) is off by far more: each test says by how much it passed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lectern.h"
#include "lecture_scaling/transformer.h"

static const double U = 1.0 / 16777216.0; /* 2^-24 */

/* ---------------- float64 helpers ---------------- */

static double *values(const tensor *t) {
    float *f = malloc((size_t)t->numel * sizeof(float));
    double *d = malloc((size_t)t->numel * sizeof(double));
    assert_non_null(f);
    assert_non_null(d);
    tensor_to_host(t, f);
    for (int64_t i = 0; i < t->numel; i++)
        d[i] = f[i];
    free(f);
    return d;
}

static tensor *random_tensor(int64_t rows, int64_t cols, float scale, uint64_t seed) {
    manual_seed(seed);
    tensor *t = randn(rows, cols, -1);
    scale_(t, scale);
    return t;
}

/* c (n x m) = a (n x k) b (k x m), and the sizes sum_j |a_ij b_jl| in size. */
static void matmul64(const double *a, const double *b, double *c, double *size, int n, int k, int m) {
    for (int i = 0; i < n; i++)
        for (int l = 0; l < m; l++) {
            double s = 0, abs_s = 0;
            for (int j = 0; j < k; j++) {
                s += a[i * k + j] * b[j * m + l];
                abs_s += fabs(a[i * k + j] * b[j * m + l]);
            }
            c[i * m + l] = s;
            if (size) size[i * m + l] = abs_s;
        }
}

static double gelu64(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

/* ---------------- softmax ---------------- */

/* Per element: exp's argument x - max is rounded (u |x - max| absolute),
 * exp adds 2u, the sum of n terms n u, the division u: the relative error
 * of each probability is under (max |x - max| + n + 3) u. */
static void softmax_matches_float64(void **state) {
    (void)state;
    const int rows = 6, cols = 40;
    tensor *x = random_tensor(rows, cols, 3.0f, 11);
    double *in = values(x);
    softmax_rows(x);
    double *out = values(x), worst = 0;
    for (int i = 0; i < rows; i++) {
        double max = -INFINITY, sum = 0, range = 0;
        for (int j = 0; j < cols; j++)
            max = fmax(max, in[i * cols + j]);
        for (int j = 0; j < cols; j++) {
            sum += exp(in[i * cols + j] - max);
            range = fmax(range, max - in[i * cols + j]);
        }
        double tol = (range + cols + 3) * U;
        for (int j = 0; j < cols; j++) {
            double p = exp(in[i * cols + j] - max) / sum, rel = fabs(out[i * cols + j] - p) / p;
            assert_true(rel <= tol);
            worst = fmax(worst, rel / tol);
        }
    }
    print_message("softmax: worst error %.3g of its tolerance\n", worst);
    free(in);
    free(out);
    tensor_free(x);
}

/* ---------------- LayerNorm ---------------- */

/* Per row of n: the mean is a sum of n terms, off by n u mean|x|; that
 * moves every output by that over sigma. The variance is a sum of n
 * squares, (n + 3) u relatively, which scales the outputs by half of it;
 * sqrt, the division and the product add 3u. So
 *   |y - y64| <= n u mean|x| / sigma + ((n + 3) / 2 + 3) u |y|. */
static void layer_norm_matches_float64(void **state) {
    (void)state;
    const int rows = 5, cols = 48;
    const float eps = 1e-5f;
    tensor *x = random_tensor(rows, cols, 2.0f, 12);
    add_scalar_(x, 0.5f); /* a mean away from 0 */
    double *in = values(x);
    tensor *y = layer_norm(x, eps);
    double *out = values(y), worst = 0;
    for (int i = 0; i < rows; i++) {
        double mean = 0, var = 0, mean_abs = 0;
        for (int j = 0; j < cols; j++)
            mean += in[i * cols + j] / cols;
        for (int j = 0; j < cols; j++) {
            var += (in[i * cols + j] - mean) * (in[i * cols + j] - mean) / cols;
            mean_abs += fabs(in[i * cols + j]) / cols;
        }
        double sigma = sqrt(var + (double)eps);
        for (int j = 0; j < cols; j++) {
            double ref = (in[i * cols + j] - mean) / sigma;
            double tol = cols * U * mean_abs / sigma + ((cols + 3) / 2.0 + 3) * U * fabs(ref);
            assert_true(fabs(out[i * cols + j] - ref) <= tol);
            worst = fmax(worst, fabs(out[i * cols + j] - ref) / tol);
        }
    }
    print_message("layer_norm: worst error %.3g of its tolerance\n", worst);
    free(in);
    free(out);
    tensor_free(y);
    tensor_free(x);
}

/* ---------------- attention ---------------- */

/* float64 attention of one head, plus what the tolerance needs: the
 * largest sum of |q_ic k_jc| / sqrt(d) over visible pairs (the size of a
 * score's terms) and the largest |score|. */
static void attention64(const double *q, const double *k, const double *v, int n, int m, int d, int dv, int causal,
                        int q_pos, int k_pos, double *out, double *term_size, double *score_size) {
    double *s = malloc((size_t)m * sizeof(double));
    assert_non_null(s);
    *term_size = *score_size = 0;
    for (int i = 0; i < n; i++) {
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < m; j++) {
            if (causal && k_pos + j > q_pos + i) continue;
            double dot = 0, abs_dot = 0;
            for (int c = 0; c < d; c++) {
                dot += q[i * d + c] * k[j * d + c];
                abs_dot += fabs(q[i * d + c] * k[j * d + c]);
            }
            s[j] = dot / sqrt((double)d);
            *term_size = fmax(*term_size, abs_dot / sqrt((double)d));
            *score_size = fmax(*score_size, fabs(s[j]));
            max = fmax(max, s[j]);
        }
        for (int c = 0; c < dv; c++)
            out[i * dv + c] = 0;
        if (max == -INFINITY) continue; /* sees no key: zeros */
        for (int j = 0; j < m; j++) {
            if (causal && k_pos + j > q_pos + i) continue;
            double p = exp(s[j] - max);
            sum += p;
            for (int c = 0; c < dv; c++)
                out[i * dv + c] += p * v[j * dv + c];
        }
        for (int c = 0; c < dv; c++)
            out[i * dv + c] /= sum;
    }
    free(s);
}

static double largest64(const double *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* A score is a d-term sum scaled by 1/sqrt(d): off by (d + 1) u times its
 * terms' size A; exp's argument s - max is rounded by u |s - max| <= 2u S
 * (S the largest |score|), and exp adds 2u: each weight p_j is off by
 * e = ((d + 1) A + 2 S + 2) u relatively. The output is a weighted mean of
 * rows of v, so weights off by e relatively move it by at most 2 e max|v|.
 * The two sums over the m keys (of p v and of p) add m u each relatively
 * to max|v|, the division u; each merge of a chunk (the online form)
 * rescales the sum and the accumulator by the same rounded factor, 2u
 * more each:
 *   tol = (2 e / u + 2 m + 1 + 2 chunks) u max|v|. */
static double attention_tol(double term_size, double score_size, int d, int m, int chunks, double v_size) {
    double e = ((d + 1) * term_size + 2 * score_size + 2) * U;
    return (2 * e + (2.0 * m + 1 + 2.0 * chunks) * U) * v_size;
}

static void check_attention(int n, int m, int d, int dv, int causal, int q_pos, int k_pos, int chunks) {
    tensor *q = random_tensor(n, d, 1.5f, 21), *k = random_tensor(m, d, 1.5f, 22), *v = random_tensor(m, dv, 1.0f, 23);
    double *q64 = values(q), *k64 = values(k), *v64 = values(v);
    double *ref = malloc((size_t)n * dv * sizeof(double)), term, score;
    assert_non_null(ref);
    attention64(q64, k64, v64, n, m, d, dv, causal, q_pos, k_pos, ref, &term, &score);
    tensor *out;
    if (chunks == 1) {
        out = attention(q, k, v, causal, q_pos, k_pos);
    } else {
        /* The 4 key chunks in a scrambled order. */
        static const int order[4] = {2, 0, 3, 1};
        assert_int_equal(chunks, 4);
        online_attention *s = online_attention_new(n, dv);
        int per = m / chunks;
        for (int i = 0; i < chunks; i++) {
            int c = order[i];
            tensor *kc = row_slice(k, c * per, (c + 1) * per), *vc = row_slice(v, c * per, (c + 1) * per);
            online_attention_add(s, q, kc, vc, causal, q_pos, k_pos + c * per);
            tensor_free(kc);
            tensor_free(vc);
        }
        out = online_attention_result(s, -1);
        online_attention_free(s);
    }
    double *got = values(out);
    double tol = attention_tol(term, score, d, m, chunks, largest64(v64, (int64_t)m * dv)), worst = 0;
    for (int i = 0; i < n * dv; i++)
        worst = fmax(worst, fabs(got[i] - ref[i]));
    print_message("attention %dx%d keys %d, causal %d at %d/%d, %d chunks: max error %.3g (tolerance %.3g)\n", n, d, m,
                  causal, q_pos, k_pos, chunks, worst, tol);
    assert_true(worst <= tol);
    /* The output is not trivially small: a wrong answer could not pass. */
    assert_true(largest64(ref, (int64_t)n * dv) > 1000 * tol);
    free(got);
    free(ref);
    free(q64);
    free(k64);
    free(v64);
    tensor_free(out);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
}

static void attention_matches_float64(void **state) {
    (void)state;
    check_attention(12, 12, 16, 8, 0, 0, 0, 1); /* plain */
    check_attention(12, 12, 16, 8, 1, 0, 0, 1); /* causal, the whole sequence */
    check_attention(6, 16, 16, 8, 1, 8, 0, 1);  /* causal, the queries are positions 8..13 */
}

static void online_attention_in_chunks_matches_float64(void **state) {
    (void)state;
    check_attention(12, 16, 16, 8, 0, 0, 0, 4);
    check_attention(16, 16, 16, 8, 1, 0, 0, 4);
    check_attention(4, 16, 16, 8, 1, 8, 0, 4); /* chunks after the queries are wholly masked */
}

/* A query that sees no key gets zeros, not NaN. */
static void query_seeing_no_key_gives_zeros(void **state) {
    (void)state;
    tensor *q = random_tensor(2, 4, 1.0f, 31), *k = random_tensor(2, 4, 1.0f, 32), *v = random_tensor(2, 3, 1.0f, 33);
    tensor *out = attention(q, k, v, 1, 0, 5); /* keys at 5, 6; queries at 0, 1 */
    tensor *zero = zeros(2, 3, -1);
    assert_true(max_abs_diff(out, zero) == 0);
    tensor_free(zero);
    tensor_free(out);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
}

/* Head h's columns [h dh, (h + 1) dh) of the T x d projections q, k, v,
 * as T x dh matrices. */
static void head_columns(const double *q, const double *k, const double *v, int T, int d, int h, int dh, double *qh,
                         double *kh, double *vh) {
    for (int t = 0; t < T; t++)
        for (int c = 0; c < dh; c++) {
            qh[t * dh + c] = q[t * d + h * dh + c];
            kh[t * dh + c] = k[t * d + h * dh + c];
            vh[t * dh + c] = v[t * d + h * dh + c];
        }
}

/* Several heads: q, k, v are x @ w (d-term sums, d u of their terms' size
 * P, relatively to it), which moves a score by up to 2 d u P Q / sqrt(dh)
 * (Q the largest |q| or |k|) and v by d u P. On top of attention_tol for
 * each head: a heuristic with that first-order term, checked here. */
static void attention_heads_match_float64(void **state) {
    (void)state;
    const int T = 10, d = 16, heads = 4, dh = d / heads;
    tensor *x = random_tensor(T, d, 1.0f, 41);
    tensor *wq = init_weight(d, d, 42, -1), *wk = init_weight(d, d, 43, -1), *wv = init_weight(d, d, 44, -1);
    double *x64 = values(x), *wq64 = values(wq), *wk64 = values(wk), *wv64 = values(wv);
    double q[T * d], k[T * d], v[T * d], sq[T * d], sk[T * d], sv[T * d];
    matmul64(x64, wq64, q, sq, T, d, d);
    matmul64(x64, wk64, k, sk, T, d, d);
    matmul64(x64, wv64, v, sv, T, d, d);
    double p = fmax(largest64(sq, T * d), fmax(largest64(sk, T * d), largest64(sv, T * d)));
    double qk = fmax(largest64(q, T * d), largest64(k, T * d));
    tensor *out = attention_heads(x, wq, wk, wv, heads, 1);
    double *got = values(out), worst = 0, slack = 0, smallest_tol = INFINITY, out_size = 0;
    for (int h = 0; h < heads; h++) {
        double qh[T * dh], kh[T * dh], vh[T * dh], ref[T * dh], term, score;
        head_columns(q, k, v, T, d, h, dh, qh, kh, vh);
        attention64(qh, kh, vh, T, T, dh, dh, 1, 0, 0, ref, &term, &score);
        double vmax = largest64(vh, T * dh);
        double tol = attention_tol(term, score, dh, T, 1, vmax) + 2 * (2 * d * U * p * qk * dh / sqrt(dh)) * vmax +
                     d * U * p;
        smallest_tol = fmin(smallest_tol, tol);
        out_size = fmax(out_size, largest64(ref, T * dh));
        for (int t = 0; t < T; t++)
            for (int c = 0; c < dh; c++) {
                double e = fabs(got[t * d + h * dh + c] - ref[t * dh + c]);
                assert_true(e <= tol);
                worst = fmax(worst, e);
                slack = fmax(slack, e / tol);
            }
    }
    print_message("attention_heads: max error %.3g (at most %.3g of the tolerance, %.3g or more)\n", worst, slack,
                  smallest_tol);
    assert_true(out_size > 100 * smallest_tol); /* a head from the wrong columns could not pass */
    free(got);
    free(x64);
    free(wq64);
    free(wk64);
    free(wv64);
    tensor_free(out);
    tensor_free(x);
    tensor_free(wq);
    tensor_free(wk);
    tensor_free(wv);
}

/* ---------------- backward passes, against float64 finite differences ---------------- */

/* The gradients are checked against central differences of a float64
 * forward, (L(w + h) - L(w - h)) / 2h with L = sum(dout * forward): an
 * independent route to the same derivative (no backward formula in it).
 * With h = 1e-6 and values of size 1, the difference's own error is about
 * h^2 times L's third derivative (1e-12) plus 2^-53 |L| / h (1e-10):
 * nothing beside float32's. The float32 gradient's error: each is a chain
 * of sums, and a sum of n terms is exact to n u of its terms' size; the
 * chains' lengths add up. As lecture_scaling's rounding_tolerance does,
 * the largest gradient stands for the terms' size and the bound is doubled:
 *     2 (sum of the lengths) u max|gradient|,
 * a heuristic with room (the errors sit far under it, printed below); a
 * gradient with a term left out is off by a share of the gradient itself,
 * and the gradient is over 100 times the tolerance (asserted). */
static double fd_tol(int sum_lengths, const double *g, int n) { return 2.0 * sum_lengths * U * largest64(g, n); }

/* L = sum(dout * attention_heads(x)), causal, in float64. */
static double heads_loss64(const double *x, const double *wq, const double *wk, const double *wv, const double *dout,
                           int T, int d, int heads) {
    int dh = d / heads;
    double *q = malloc(sizeof(double) * T * d), *k = malloc(sizeof(double) * T * d),
           *v = malloc(sizeof(double) * T * d);
    double *qh = malloc(sizeof(double) * T * dh), *kh = malloc(sizeof(double) * T * dh),
           *vh = malloc(sizeof(double) * T * dh), *o = malloc(sizeof(double) * T * dh), term, score, L = 0;
    matmul64(x, wq, q, NULL, T, d, d);
    matmul64(x, wk, k, NULL, T, d, d);
    matmul64(x, wv, v, NULL, T, d, d);
    for (int h = 0; h < heads; h++) {
        head_columns(q, k, v, T, d, h, dh, qh, kh, vh);
        attention64(qh, kh, vh, T, T, dh, dh, 1, 0, 0, o, &term, &score);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < dh; c++)
                L += dout[t * d + h * dh + c] * o[t * dh + c];
    }
    free(q);
    free(k);
    free(v);
    free(qh);
    free(kh);
    free(vh);
    free(o);
    return L;
}

/* got (n floats) against the central difference of `loss` in each element
 * of params[which]; returns the worst error as a share of the tolerance. */
typedef double (*loss64)(double *const *params, const void *ctx);
static double against_differences(const char *name, const tensor *got, double **params, int which, int n,
                                  int sum_lengths, loss64 loss, const void *ctx) {
    const double h = 1e-6;
    double *g = values(got), *fd = malloc(sizeof(double) * n), *p = params[which];
    assert_non_null(fd);
    for (int i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = loss(params, ctx);
        p[i] = keep - h;
        double down = loss(params, ctx);
        p[i] = keep;
        fd[i] = (up - down) / (2 * h);
    }
    double tol = fd_tol(sum_lengths, fd, n), worst = 0;
    for (int i = 0; i < n; i++) {
        assert_true(fabs(g[i] - fd[i]) <= tol);
        worst = fmax(worst, fabs(g[i] - fd[i]) / tol);
    }
    assert_true(largest64(fd, n) > 100 * tol); /* a real gradient, not rounding */
    print_message("%s: worst error %.3g of its tolerance %.3g\n", name, worst, tol);
    free(g);
    free(fd);
    return worst;
}

typedef struct heads_ctx {
    int T, d, heads;
} heads_ctx;

static double heads_loss(double *const *p, const void *ctx) {
    const heads_ctx *c = ctx;
    return heads_loss64(p[0], p[1], p[2], p[3], p[4], c->T, c->d, c->heads);
}

/* The sums on attention's backward: the q, k, v projections (d), a score
 * and dP (dh each), the row sum r and dq, dk, dv over the keys (T each),
 * the weight gradients over the rows (T), dx over three projections (3 d). */
static void attention_heads_backward_matches_differences(void **state) {
    (void)state;
    const int T = 7, d = 8, heads = 2;
    heads_ctx ctx = {T, d, heads};
    tensor *x = random_tensor(T, d, 1.0f, 61), *dout = random_tensor(T, d, 1.0f, 62);
    tensor *wq = init_weight(d, d, 63, -1), *wk = init_weight(d, d, 64, -1), *wv = init_weight(d, d, 65, -1);
    double *p[5] = {values(x), values(wq), values(wk), values(wv), values(dout)};
    tensor *dwq, *dwk, *dwv, *dx = attention_heads_backward(x, wq, wk, wv, heads, 1, dout, &dwq, &dwk, &dwv);
    int lengths = d + 2 * (d / heads) + 3 * T + 3 * d;
    against_differences("attention_heads_backward dx", dx, p, 0, T * d, lengths, heads_loss, &ctx);
    against_differences("attention_heads_backward dwq", dwq, p, 1, d * d, lengths, heads_loss, &ctx);
    against_differences("attention_heads_backward dwk", dwk, p, 2, d * d, lengths, heads_loss, &ctx);
    against_differences("attention_heads_backward dwv", dwv, p, 3, d * d, lengths, heads_loss, &ctx);
    for (int i = 0; i < 5; i++)
        free(p[i]);
    tensor *all[] = {x, dout, wq, wk, wv, dx, dwq, dwk, dwv};
    for (int i = 0; i < 9; i++)
        tensor_free(all[i]);
}

/* ---- attention's backward a chunk at a time ---- */

typedef struct chunk_ctx {
    int T, d;
} chunk_ctx;

/* L = sum(dout * attention(q, k, v)), one causal head over T tokens, in
 * float64 (attention64: no chunks, no log-sum-exp). p: q, k, v, dout. */
static double chunk_loss(double *const *p, const void *ctx) {
    const chunk_ctx *c = ctx;
    double *o = malloc(sizeof(double) * c->T * c->d), term, score, L = 0;
    attention64(p[0], p[1], p[2], c->T, c->T, c->d, c->d, 1, 0, 0, o, &term, &score);
    for (int i = 0; i < c->T * c->d; i++)
        L += p[3][i] * o[i];
    free(o);
    return L;
}

/* The queries in 2 chunks, the keys in 4, each pair's backward on its own
 * (its q_pos, k_pos, and the query chunk's log-sum-exp from the online
 * forward over all 4 key chunks): the shares added up are the gradients of
 * q, k and v, against central differences of the float64 forward. The sums:
 * a score and dP (d each), D (d), the weights' log-sum-exp over the keys
 * (T), and dq, dk, dv over the keys or queries (T each), as
 * attention_heads_backward's test counts them. */
static void attention_chunk_backward_matches_differences(void **state) {
    (void)state;
    enum { T = 16, d = 8, QC = 2, KC = 4 };
    chunk_ctx ctx = {T, d};
    tensor *q = random_tensor(T, d, 1.0f, 71), *k = random_tensor(T, d, 1.0f, 72), *v = random_tensor(T, d, 1.0f, 73),
           *dout = random_tensor(T, d, 1.0f, 74);
    tensor *dq = zeros(T, d, -1), *dk = zeros(T, d, -1), *dv = zeros(T, d, -1);
    const int64_t qn = T / QC, kn = T / KC;
    for (int a = 0; a < QC; a++) {
        tensor *qa = row_slice(q, a * qn, (a + 1) * qn), *ga = row_slice(dout, a * qn, (a + 1) * qn),
               *dqa = row_slice(dq, a * qn, (a + 1) * qn);
        online_attention *s = online_attention_new(qn, d);
        for (int b = KC - 1; b >= 0; b--) { /* any order */
            tensor *kb = row_slice(k, b * kn, (b + 1) * kn), *vb = row_slice(v, b * kn, (b + 1) * kn);
            online_attention_add(s, qa, kb, vb, 1, a * qn, b * kn);
            tensor_free(kb);
            tensor_free(vb);
        }
        float lse[T];
        online_attention_lse(s, lse);
        tensor *oa = online_attention_result(s, -1);
        for (int b = 0; b < KC; b++) {
            tensor *kb = row_slice(k, b * kn, (b + 1) * kn), *vb = row_slice(v, b * kn, (b + 1) * kn),
                   *dkb = row_slice(dk, b * kn, (b + 1) * kn), *dvb = row_slice(dv, b * kn, (b + 1) * kn);
            attention_chunk_backward(qa, kb, vb, oa, ga, lse, 1, a * qn, b * kn, dqa, dkb, dvb);
            tensor *all[] = {kb, vb, dkb, dvb};
            for (int i = 0; i < 4; i++)
                tensor_free(all[i]);
        }
        online_attention_free(s);
        tensor *all[] = {qa, ga, dqa, oa};
        for (int i = 0; i < 4; i++)
            tensor_free(all[i]);
    }
    double *p[4] = {values(q), values(k), values(v), values(dout)};
    int lengths = 3 * d + 4 * T;
    against_differences("attention_chunk_backward dq", dq, p, 0, T * d, lengths, chunk_loss, &ctx);
    against_differences("attention_chunk_backward dk", dk, p, 1, T * d, lengths, chunk_loss, &ctx);
    against_differences("attention_chunk_backward dv", dv, p, 2, T * d, lengths, chunk_loss, &ctx);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    tensor *all[] = {q, k, v, dout, dq, dk, dv};
    for (int i = 0; i < 7; i++)
        tensor_free(all[i]);
}

typedef struct ln_ctx {
    int rows, cols;
    double eps;
} ln_ctx;

/* L = sum(dy * (gain LN(x) + bias)), float64. p: x, gain, bias, dy. */
static double ln_loss(double *const *p, const void *ctx) {
    const ln_ctx *c = ctx;
    double L = 0;
    for (int i = 0; i < c->rows; i++) {
        const double *row = p[0] + i * c->cols;
        double mean = 0, var = 0;
        for (int j = 0; j < c->cols; j++)
            mean += row[j] / c->cols;
        for (int j = 0; j < c->cols; j++)
            var += (row[j] - mean) * (row[j] - mean) / c->cols;
        for (int j = 0; j < c->cols; j++)
            L += p[3][i * c->cols + j] * (p[1][j] * (row[j] - mean) / sqrt(var + c->eps) + p[2][j]);
    }
    return L;
}

/* The sums on LayerNorm's backward: the mean and the variance (d each),
 * the two means of the backward (d each), the weight gradients over the
 * rows (rows). The forward is checked the same way: L's gradient in dy is
 * the forward's output, its sums the mean and the variance. */
static void layer_norm_affine_backward_matches_differences(void **state) {
    (void)state;
    const int rows = 6, cols = 16;
    const float eps = 1e-5f;
    ln_ctx ctx = {rows, cols, eps};
    tensor *x = random_tensor(rows, cols, 2.0f, 71), *dy = random_tensor(rows, cols, 1.0f, 72);
    add_scalar_(x, 0.5f); /* a mean away from 0 */
    tensor *gain = random_tensor(1, cols, 0.5f, 73), *bias = random_tensor(1, cols, 0.5f, 74);
    add_scalar_(gain, 1.0f);
    double *p[4] = {values(x), values(gain), values(bias), values(dy)};
    tensor *dgain, *dbias, *dx = layer_norm_affine_backward(x, gain, dy, eps, &dgain, &dbias);
    int lengths = 4 * cols + rows;
    against_differences("layer_norm_affine_backward dx", dx, p, 0, rows * cols, lengths, ln_loss, &ctx);
    against_differences("layer_norm_affine_backward dgain", dgain, p, 1, cols, lengths, ln_loss, &ctx);
    against_differences("layer_norm_affine_backward dbias", dbias, p, 2, cols, lengths, ln_loss, &ctx);
    tensor *y = layer_norm_affine(x, gain, bias, eps);
    against_differences("layer_norm_affine", y, p, 3, rows * cols, 2 * cols, ln_loss, &ctx);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    tensor *all[] = {x, dy, gain, bias, dx, dgain, dbias, y};
    for (int i = 0; i < 8; i++)
        tensor_free(all[i]);
}

/* ---------------- the MLP and the mixture of experts ---------------- */

/* y = gelu(x w1) w2. h = x w1 is off by d u A (A its terms' size); GELU's
 * slope is under 1.13 and its float32 evaluation (tanh and a few products)
 * adds about 8u |h|; that error goes through w2 scaled by sum_j |w2_jc|;
 * the second sum adds h u B (B its terms' size):
 *   |y - y64| <= (1.13 d u A + 8 u max|h|) max_c sum_j |w2_jc| + hidden u B. */
static double mlp64(const double *x, const double *w1, const double *w2, int n, int d, int hidden, double *y) {
    double *h = malloc((size_t)n * hidden * sizeof(double)), *sh = malloc((size_t)n * hidden * sizeof(double));
    double *sy = malloc((size_t)n * d * sizeof(double));
    assert_non_null(h);
    assert_non_null(sh);
    assert_non_null(sy);
    matmul64(x, w1, h, sh, n, d, hidden);
    double hmax = largest64(h, (int64_t)n * hidden);
    for (int i = 0; i < n * hidden; i++)
        h[i] = gelu64(h[i]);
    matmul64(h, w2, y, sy, n, hidden, d);
    double col = 0;
    for (int c = 0; c < d; c++) {
        double s = 0;
        for (int j = 0; j < hidden; j++)
            s += fabs(w2[j * d + c]);
        col = fmax(col, s);
    }
    double tol = (1.13 * d * U * largest64(sh, (int64_t)n * hidden) + 8 * U * hmax) * col +
                 hidden * U * largest64(sy, (int64_t)n * d);
    free(h);
    free(sh);
    free(sy);
    return tol;
}

static void mlp_matches_float64(void **state) {
    (void)state;
    const int n = 8, d = 16, hidden = 64;
    tensor *x = random_tensor(n, d, 1.0f, 51), *w1 = init_weight(d, hidden, 52, -1),
           *w2 = init_weight(hidden, d, 53, -1);
    double *x64 = values(x), *w164 = values(w1), *w264 = values(w2), y[n * d];
    double tol = mlp64(x64, w164, w264, n, d, hidden, y);
    tensor *out = mlp_forward(x, w1, w2);
    double *got = values(out), worst = 0;
    for (int i = 0; i < n * d; i++)
        worst = fmax(worst, fabs(got[i] - y[i]));
    print_message("mlp: max error %.3g (tolerance %.3g)\n", worst, tol);
    assert_true(worst <= tol);
    assert_true(largest64(y, n * d) > 1000 * tol);
    free(got);
    free(x64);
    free(w164);
    free(w264);
    tensor_free(out);
    tensor_free(x);
    tensor_free(w1);
    tensor_free(w2);
}

/* Rows copied by index are copied exactly. */
static void gather_and_scatter_rows_are_exact(void **state) {
    (void)state;
    tensor *x = random_tensor(5, 3, 1.0f, 61);
    const int rows[3] = {4, 0, 2};
    const float scale[3] = {1.0f, 2.0f, 0.5f};
    tensor *g = gather_rows(x, rows, 3);
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 3; c++)
            assert_true(tensor_item(g, i * 3 + c) == tensor_item(x, rows[i] * 3 + c));
    tensor *out = zeros(5, 3, -1);
    scatter_rows(out, g, rows, scale, 3);
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 3; c++)
            assert_true(tensor_item(out, rows[i] * 3 + c) == scale[i] * tensor_item(x, rows[i] * 3 + c));
    for (int c = 0; c < 3; c++)
        assert_true(tensor_item(out, 1 * 3 + c) == 0 && tensor_item(out, 3 * 3 + c) == 0);
    tensor_free(out);
    tensor_free(g);
    tensor_free(x);
}

/* The router's logits x router in float64 (tokens x experts), and each
 * one's sum of |terms|: the scale of its float32 twin's error. */
static void router_logits64(const tensor *x, const tensor *router, double *logits, double *size) {
    double *x64 = values(x), *r64 = values(router);
    matmul64(x64, r64, logits, size, (int)x->shape[0], (int)x->shape[1], (int)router->shape[1]);
    free(x64);
    free(r64);
}

/* Top-1 routing in float64, then each token through its expert. The float32
 * logits (d-term sums) are off by d u times their terms' size: the test
 * first asserts that every token's two best logits are further apart than
 * twice that, so both must pick the same expert. The gate is a softmax
 * probability, off by (range + E + 3) u relatively (see softmax above). */
static void moe_matches_float64(void **state) {
    (void)state;
    enum { N = 24, D = 16, HIDDEN = 32, E = 4 };
    tensor *x = random_tensor(N, D, 1.0f, 71), *router = init_weight(D, E, 72, -1), *w1[E], *w2[E];
    for (int e = 0; e < E; e++) {
        w1[e] = init_weight(D, HIDDEN, 100 + e, -1);
        w2[e] = init_weight(HIDDEN, D, 200 + e, -1);
    }
    double *x64 = values(x), logits[N * E], lsize[N * E];
    router_logits64(x, router, logits, lsize);
    tensor *out = moe_forward(x, router, w1, w2, E);
    double *got = values(out), worst = 0;
    int used[E] = {0};
    for (int t = 0; t < N; t++) {
        int best = 0;
        for (int e = 1; e < E; e++)
            if (logits[t * E + e] > logits[t * E + best]) best = e;
        double second = -INFINITY, sum = 0, range = 0, ltol = 0;
        for (int e = 0; e < E; e++) {
            if (e != best) second = fmax(second, logits[t * E + e]);
            sum += exp(logits[t * E + e] - logits[t * E + best]);
            range = fmax(range, logits[t * E + best] - logits[t * E + e]);
            ltol = fmax(ltol, D * U * lsize[t * E + e]);
        }
        assert_true(logits[t * E + best] - second > 2 * ltol); /* no near tie: the route is certain */
        used[best]++;
        double gate = 1 / sum, *w164 = values(w1[best]), *w264 = values(w2[best]), y[D];
        double tol = mlp64(x64 + t * D, w164, w264, 1, D, HIDDEN, y);
        /* The gate's relative error: the softmax's, plus the logits' errors
         * (2 ltol: the chosen one and another) turned relative by exp. */
        double gate_rel = (range + E + 3) * U + 2 * ltol;
        for (int c = 0; c < D; c++) {
            double e = fabs(got[t * D + c] - gate * y[c]);
            double allowed = gate * tol + (gate_rel + U) * gate * fabs(y[c]);
            assert_true(e <= allowed);
            worst = fmax(worst, e / allowed);
        }
        free(w164);
        free(w264);
    }
    int experts_used = 0;
    for (int e = 0; e < E; e++)
        experts_used += used[e] > 0;
    print_message("moe: %d tokens over %d experts (%d %d %d %d), worst error %.3g of its tolerance\n", N, experts_used,
                  used[0], used[1], used[2], used[3], worst);
    assert_true(experts_used >= 3); /* the test exercises the routing, not one expert */
    free(got);
    free(x64);
    tensor_free(out);
    for (int e = 0; e < E; e++) {
        tensor_free(w1[e]);
        tensor_free(w2[e]);
    }
    tensor_free(router);
    tensor_free(x);
}

/* ---------------- the MLP's backward, top-2 routing ---------------- */

static double gelu_grad64(double x) {
    const double s = sqrt(2 / M_PI), t = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x);
}

/* c (n x m) = sum_j a(i, j) b(j, l) with a and b read through strides, so
 * that a transpose is a swap of strides; size the same over |a| |b|. */
static void product64(const double *a, int ar, int ac, const double *b, int br, int bc, double *c, double *size, int n,
                      int k, int m) {
    for (int i = 0; i < n; i++)
        for (int l = 0; l < m; l++) {
            double v = 0, sz = 0;
            for (int j = 0; j < k; j++) {
                v += a[i * ar + j * ac] * b[j * br + l * bc];
                sz += fabs(a[i * ar + j * ac]) * fabs(b[j * br + l * bc]);
            }
            c[i * m + l] = v;
            size[i * m + l] = sz;
        }
}

/* Each gradient is a chain of three sums at most (x w1, dy w2^T, then one
 * over the tokens, the hidden units or the width): in float32 it is exact to
 * the chain's summed lengths times u times the float64 sum of |terms| along
 * it (first order; + 16 for the elementwise gelu and its derivative, a few
 * u each). gelu' moves by at most |gelu''| <= 0.8 times its argument's
 * error, d u |x| |w1|: that is added to dh's size. */
static void mlp_backward_matches_float64(void **state) {
    (void)state;
    enum { N = 12, D = 16, H = 48 };
    tensor *x = random_tensor(N, D, 1.0f, 61), *w1 = init_weight(D, H, 62, -1), *w2 = init_weight(H, D, 63, -1),
           *dy = random_tensor(N, D, 1.0f, 64), *dx, *dw1, *dw2;
    mlp_backward(x, w1, w2, dy, &dx, &dw1, &dw2);
    double *x64 = values(x), *w164 = values(w1), *w264 = values(w2), *dy64 = values(dy);
    static double h[N * H], hs[N * H], a[N * H], as[N * H], da[N * H], das[N * H], dh[N * H], dhs[N * H];
    static double ex[N * D], exs[N * D], e1[D * H], e1s[D * H], e2[H * D], e2s[H * D];
    product64(x64, D, 1, w164, H, 1, h, hs, N, D, H);    /* h = x w1 */
    product64(dy64, D, 1, w264, 1, D, da, das, N, D, H); /* da = dy w2^T */
    for (int i = 0; i < N * H; i++) {
        a[i] = gelu64(h[i]);
        as[i] = 1.13 * hs[i]; /* |gelu(x)| <= 1.13 |x| */
        dh[i] = da[i] * gelu_grad64(h[i]);
        dhs[i] = das[i] * (1.13 + 0.8 * D * U * hs[i]); /* |gelu'| <= 1.13; gelu'' times h's error */
    }
    product64(dh, H, 1, w164, 1, H, ex, exs, N, H, D); /* dx = dh w1^T */
    product64(x64, 1, D, dh, H, 1, e1, e1s, D, N, H);  /* dw1 = x^T dh */
    product64(a, 1, H, dy64, D, 1, e2, e2s, H, N, D);  /* dw2 = a^T dy */
    /* the sizes along the chain: the same products over the sizes of dh and a */
    static double ax[N * D], aw1[D * H], ady[N * D], scratch[D * H];
    for (int i = 0; i < N * D; i++) {
        ax[i] = fabs(x64[i]);
        ady[i] = fabs(dy64[i]);
    }
    for (int i = 0; i < D * H; i++)
        aw1[i] = fabs(w164[i]);
    product64(dhs, H, 1, aw1, 1, H, exs, scratch, N, H, D);
    product64(ax, 1, D, dhs, H, 1, e1s, scratch, D, N, H);
    product64(as, 1, H, ady, D, 1, e2s, scratch, H, N, D);
    double chain = (D + H + N + 16) * U, worst = 0;
    struct {
        const char *name;
        tensor *got;
        double *want, *size;
        int n;
    } parts[] = {{"dx", dx, ex, exs, N * D}, {"dw1", dw1, e1, e1s, D * H}, {"dw2", dw2, e2, e2s, H * D}};
    for (int p = 0; p < 3; p++) {
        double *got = values(parts[p].got), part_worst = 0;
        for (int i = 0; i < parts[p].n; i++) {
            double allowed = chain * parts[p].size[i] + U;
            assert_true(fabs(got[i] - parts[p].want[i]) <= allowed);
            part_worst = fmax(part_worst, fabs(got[i] - parts[p].want[i]) / allowed);
        }
        /* the results stand far above the tolerance: a wrong formula cannot hide in it */
        assert_true(largest64(parts[p].want, parts[p].n) > 100 * chain * largest64(parts[p].size, parts[p].n));
        print_message("mlp backward: %s worst error %.3g of its tolerance\n", parts[p].name, part_worst);
        worst = fmax(worst, part_worst);
        free(got);
    }
    (void)worst;
    free(x64);
    free(w164);
    free(w264);
    free(dy64);
    tensor_free(dx);
    tensor_free(dw1);
    tensor_free(dw2);
    tensor_free(x);
    tensor_free(w1);
    tensor_free(w2);
    tensor_free(dy);
}

/* Top-2 routing against float64: the two likeliest experts (every token's
 * first, second and third logits further apart than twice the float32
 * logits' error, so the choice is certain), the renormalised gates
 * g_0 = 1 / (1 + exp(l_1 - l_0)) (its derivative is at most 1/4, so 2 ltol
 * of logit error moves it by ltol / 2, plus the softmax's and the ratio's
 * own (E + 6) u), and the seating: an independent count per expert, first
 * choices before second, in token order. */
static void top2_routing_and_capacity(void **state) {
    (void)state;
    enum { N = 24, D = 16, E = 4, C = 7 };
    tensor *x = random_tensor(N, D, 1.0f, 81), *router = init_weight(D, E, 82, -1);
    double logits[N * E], lsize[N * E];
    router_logits64(x, router, logits, lsize);
    moe_routing *r = moe_route_top2(x, router);
    int demand[E] = {0};
    for (int t = 0; t < N; t++) {
        int order[E] = {0, 1, 2, 3};
        for (int i = 0; i < E; i++) /* sort the experts by logit, largest first */
            for (int j = i + 1; j < E; j++)
                if (logits[t * E + order[j]] > logits[t * E + order[i]]) {
                    int o = order[i];
                    order[i] = order[j];
                    order[j] = o;
                }
        double ltol = 0;
        for (int e = 0; e < E; e++)
            ltol = fmax(ltol, D * U * lsize[t * E + e]);
        assert_true(logits[t * E + order[0]] - logits[t * E + order[1]] > 2 * ltol);
        assert_true(logits[t * E + order[1]] - logits[t * E + order[2]] > 2 * ltol);
        assert_int_equal(r->choice[2 * t], order[0]);
        assert_int_equal(r->choice[2 * t + 1], order[1]);
        double g0 = 1 / (1 + exp(logits[t * E + order[1]] - logits[t * E + order[0]]));
        assert_true(fabs(r->gate[2 * t] - g0) <= ltol / 2 + (E + 6) * U);
        assert_true(fabs(r->gate[2 * t + 1] - (1 - g0)) <= ltol / 2 + (E + 6) * U);
        demand[order[0]]++;
        demand[order[1]]++;
    }
    moe_assign(r, C);
    int seated[E] = {0}, dropped = 0, second_seated_before_first_dropped = 0;
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < N; t++) {
            int e = r->choice[2 * t + k], want = seated[e] < C ? e * C + seated[e]++ : -1;
            assert_int_equal(r->slot[2 * t + k], want);
            dropped += want < 0;
            second_seated_before_first_dropped += k == 0 && want < 0 && seated[e] < C;
        }
    int expected_drops = 0;
    for (int e = 0; e < E; e++) {
        assert_int_equal(r->demand[e], demand[e]);
        assert_int_equal(r->kept[e], demand[e] < C ? demand[e] : C);
        expected_drops += demand[e] > C ? demand[e] - C : 0;
    }
    assert_int_equal(moe_dropped(r), expected_drops);
    assert_int_equal(dropped, expected_drops);
    assert_int_equal(second_seated_before_first_dropped, 0);
    assert_true(expected_drops > 0); /* the capacity binds: the test exercises the drops */
    assert_int_equal(moe_capacity(1.25, 256, 2, 4), 160);
    assert_int_equal(moe_capacity(1.0, 30, 2, 4), 15);
    assert_int_equal(moe_capacity(1.1, 10, 2, 4), 6); /* ceil(5.5) */
    print_message("top-2: %d tokens, demand %d %d %d %d, %d dropped at capacity %d\n", N, demand[0], demand[1],
                  demand[2], demand[3], expected_drops, C);
    moe_routing_free(r);
    tensor_free(x);
    tensor_free(router);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(softmax_matches_float64),
            cmocka_unit_test(layer_norm_matches_float64),
            cmocka_unit_test(attention_matches_float64),
            cmocka_unit_test(online_attention_in_chunks_matches_float64),
            cmocka_unit_test(query_seeing_no_key_gives_zeros),
            cmocka_unit_test(attention_heads_match_float64),
            cmocka_unit_test(attention_heads_backward_matches_differences),
            cmocka_unit_test(attention_chunk_backward_matches_differences),
            cmocka_unit_test(layer_norm_affine_backward_matches_differences),
            cmocka_unit_test(mlp_matches_float64),
            cmocka_unit_test(gather_and_scatter_rows_are_exact),
            cmocka_unit_test(moe_matches_float64),
            cmocka_unit_test(mlp_backward_matches_float64),
            cmocka_unit_test(top2_routing_and_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
