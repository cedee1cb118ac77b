/*
 * transformer.c: the pieces of transformer.h. See there for what each
 * function computes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transformer.h"

/* ---- host copies for the row-wise steps ---- */

static float *host_copy(const tensor *t) {
    float *h = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    if (!h) lecture_fail("out of memory copying a %lld-element tensor to the host", (long long)t->numel);
    tensor_to_host(t, h);
    return h;
}

/* t's elements replaced by the host array h (freed). */
static void put_back(tensor *t, float *h) {
    tensor *src = tensor_from(h, t->shape[0], t->ndim == 2 ? t->shape[1] : 0, -1);
    tensor_copy(t, src);
    tensor_free(src);
    free(h);
}

static int64_t cols_of(const tensor *t) { return t->ndim == 2 ? t->shape[1] : 1; }

tensor *init_weight(int64_t rows, int64_t cols, uint64_t seed, int device) {
    manual_seed(seed);
    tensor *w = randn(rows, cols, device);
    scale_(w, 1.0f / sqrtf((float)rows));
    return w;
}

void softmax_rows(tensor *x) {
    int64_t rows = x->shape[0], cols = cols_of(x);
    float *h = host_copy(x);
    for (int64_t i = 0; i < rows; i++) {
        float *row = h + i * cols, max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < cols; j++)
            max = fmaxf(max, row[j]);
        for (int64_t j = 0; j < cols; j++)
            sum += row[j] = expf(row[j] - max);
        for (int64_t j = 0; j < cols; j++)
            row[j] /= sum;
    }
    put_back(x, h);
}

tensor *layer_norm(const tensor *x, float eps) {
    int64_t rows = x->shape[0], cols = cols_of(x);
    float *h = host_copy(x);
    for (int64_t i = 0; i < rows; i++) {
        float *row = h + i * cols, mean = 0, var = 0;
        for (int64_t j = 0; j < cols; j++)
            mean += row[j];
        mean /= (float)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (row[j] - mean) * (row[j] - mean);
        var /= (float)cols;
        float inv = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < cols; j++)
            row[j] = (row[j] - mean) * inv;
    }
    tensor *y = empty(rows, x->ndim == 2 ? cols : 0, x->device);
    put_back(y, h);
    return y;
}

/* scores = q k^T / sqrt(d), n x m. */
static tensor *scores_of(const tensor *q, const tensor *k) {
    tensor *s = empty(q->shape[0], k->shape[0], q->device);
    matmul_into(s, q, k, 0, 1, 1.0f / sqrtf((float)q->shape[1]), 0.0f);
    return s;
}

static int visible(int causal, int64_t q_pos, int64_t i, int64_t k_pos, int64_t j) {
    return !causal || k_pos + j <= q_pos + i;
}

tensor *attention(const tensor *q, const tensor *k, const tensor *v, int causal, int64_t q_pos, int64_t k_pos) {
    online_attention *s = online_attention_new(q->shape[0], cols_of(v));
    online_attention_add(s, q, k, v, causal, q_pos, k_pos);
    tensor *out = online_attention_result(s, q->device);
    online_attention_free(s);
    return out;
}

tensor *attention_heads(const tensor *x, const tensor *wq, const tensor *wk, const tensor *wv, int heads, int causal) {
    int64_t dh = wq->shape[1] / heads;
    tensor *q = matmul(x, wq), *k = matmul(x, wk), *v = matmul(x, wv);
    tensor *out[LECTERN_MAX_WORLD];
    if (heads > LECTERN_MAX_WORLD) lecture_fail("attention_heads: %d heads, at most %d", heads, LECTERN_MAX_WORLD);
    for (int h = 0; h < heads; h++) {
        tensor *qh = col_slice(q, h * dh, (h + 1) * dh), *kh = col_slice(k, h * dh, (h + 1) * dh),
               *vh = col_slice(v, h * dh, (h + 1) * dh);
        out[h] = attention(qh, kh, vh, causal, 0, 0);
        tensor_free(qh);
        tensor_free(kh);
        tensor_free(vh);
    }
    tensor *all = cat_cols(out, heads);
    for (int h = 0; h < heads; h++)
        tensor_free(out[h]);
    tensor_free(q);
    tensor_free(k);
    tensor_free(v);
    return all;
}

/* ---- backward of the heads ---- */

/* One head's backward, query row i: the weights p over the visible keys
 * (recomputed as the forward made them), then dS, and its share of dq,
 * dk, dv. q, k, v, dq, dk, dv are T x ld host arrays, this head's columns
 * at offset `col`; p and dp hold T floats. */
static void head_row_backward(const float *q, const float *k, const float *v, const float *dout, float *dq, float *dk,
                              float *dv, int64_t i, int64_t T, int64_t ld, int64_t col, int64_t dh, int causal,
                              float *p, float *dp) {
    const float scale = 1.0f / sqrtf((float)dh);
    const float *qi = q + i * ld + col, *doi = dout + i * ld + col;
    float max = -INFINITY, sum = 0, r = 0;
    int64_t seen = 0;
    for (int64_t j = 0; j < T && visible(causal, 0, i, 0, j); j++, seen++) {
        float dot = 0;
        for (int64_t c = 0; c < dh; c++)
            dot += qi[c] * k[j * ld + col + c];
        p[j] = dot * scale;
        max = fmaxf(max, p[j]);
    }
    for (int64_t j = 0; j < seen; j++)
        sum += p[j] = expf(p[j] - max);
    for (int64_t j = 0; j < seen; j++) {
        p[j] /= sum;
        float dot = 0; /* dP_ij = dO_i . V_j */
        for (int64_t c = 0; c < dh; c++)
            dot += doi[c] * v[j * ld + col + c];
        dp[j] = dot;
        r += p[j] * dot;
    }
    for (int64_t j = 0; j < seen; j++) {
        float ds = p[j] * (dp[j] - r) * scale; /* dS_ij / sqrt(dh) */
        for (int64_t c = 0; c < dh; c++) {
            dq[i * ld + col + c] += ds * k[j * ld + col + c];
            dk[j * ld + col + c] += ds * qi[c];
            dv[j * ld + col + c] += p[j] * doi[c];
        }
    }
}

tensor *attention_heads_backward(const tensor *x, const tensor *wq, const tensor *wk, const tensor *wv, int heads,
                                 int causal, const tensor *dout, tensor **dwq, tensor **dwk, tensor **dwv) {
    int64_t T = x->shape[0], ld = wq->shape[1], dh = ld / heads;
    if (dout->shape[0] != T || cols_of(dout) != ld)
        lecture_fail("attention_heads_backward: dout %lld x %lld, the heads' output is %lld x %lld",
                     (long long)dout->shape[0], (long long)cols_of(dout), (long long)T, (long long)ld);
    tensor *qt = matmul(x, wq), *kt = matmul(x, wk), *vt = matmul(x, wv);
    float *q = host_copy(qt), *k = host_copy(kt), *v = host_copy(vt), *d = host_copy(dout);
    float *dq = calloc((size_t)(T * ld), sizeof(float)), *dk = calloc((size_t)(T * ld), sizeof(float)),
          *dv = calloc((size_t)(T * ld), sizeof(float)), *p = malloc((size_t)T * sizeof(float)),
          *dp = malloc((size_t)T * sizeof(float));
    if (!dq || !dk || !dv || !p || !dp) lecture_fail("out of memory for attention's backward");
    for (int h = 0; h < heads; h++)
        for (int64_t i = 0; i < T; i++)
            head_row_backward(q, k, v, d, dq, dk, dv, i, T, ld, h * dh, dh, causal, p, dp);
    tensor *grads[3], *const w[3] = {(tensor *)wq, (tensor *)wk, (tensor *)wv};
    float *host[3] = {dq, dk, dv};
    tensor **dw[3] = {dwq, dwk, dwv};
    tensor *dx = empty(T, x->shape[1], x->device);
    for (int n = 0; n < 3; n++) {
        grads[n] = tensor_from(host[n], T, ld, x->device);
        *dw[n] = empty(x->shape[1], ld, x->device);
        matmul_into(*dw[n], x, grads[n], 1, 0, 1.0f, 0.0f);                /* x^T dQ */
        matmul_into(dx, grads[n], w[n], 0, 1, 1.0f, n == 0 ? 0.0f : 1.0f); /* += dQ wq^T */
        tensor_free(grads[n]);
        free(host[n]);
    }
    free(q);
    free(k);
    free(v);
    free(d);
    free(p);
    free(dp);
    tensor_free(qt);
    tensor_free(kt);
    tensor_free(vt);
    return dx;
}

/* ---- LayerNorm with a gain and a bias ---- */

tensor *layer_norm_affine(const tensor *x, const tensor *gain, const tensor *bias, float eps) {
    int64_t rows = x->shape[0], cols = cols_of(x);
    if (gain->numel != cols || bias->numel != cols)
        lecture_fail("layer_norm_affine: gain of %lld and bias of %lld for rows of %lld", (long long)gain->numel,
                     (long long)bias->numel, (long long)cols);
    tensor *n = layer_norm(x, eps);
    float *h = host_copy(n), *g = host_copy(gain), *b = host_copy(bias);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            h[i * cols + j] = h[i * cols + j] * g[j] + b[j];
    put_back(n, h);
    free(g);
    free(b);
    return n;
}

tensor *layer_norm_affine_backward(const tensor *x, const tensor *gain, const tensor *dy, float eps, tensor **dgain,
                                   tensor **dbias) {
    int64_t rows = x->shape[0], cols = cols_of(x);
    float *h = host_copy(x), *g = host_copy(gain), *d = host_copy(dy);
    float *dg = calloc((size_t)cols, sizeof(float)), *db = calloc((size_t)cols, sizeof(float));
    if (!dg || !db) lecture_fail("out of memory for LayerNorm's backward");
    for (int64_t i = 0; i < rows; i++) {
        float *row = h + i * cols, *dyi = d + i * cols, mean = 0, var = 0, mg = 0, mgx = 0;
        for (int64_t j = 0; j < cols; j++)
            mean += row[j];
        mean /= (float)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (row[j] - mean) * (row[j] - mean);
        var /= (float)cols;
        float inv = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < cols; j++) {
            float xh = (row[j] - mean) * inv, gj = dyi[j] * g[j];
            dg[j] += dyi[j] * xh;
            db[j] += dyi[j];
            mg += gj;
            mgx += gj * xh;
        }
        mg /= (float)cols;
        mgx /= (float)cols;
        for (int64_t j = 0; j < cols; j++) {
            float xh = (row[j] - mean) * inv;
            row[j] = inv * (dyi[j] * g[j] - mg - xh * mgx); /* dx, over x's own row */
        }
    }
    *dgain = tensor_from(dg, 1, cols, x->device);
    *dbias = tensor_from(db, 1, cols, x->device);
    tensor *dx = empty(rows, x->ndim == 2 ? cols : 0, x->device);
    put_back(dx, h);
    free(g);
    free(d);
    free(dg);
    free(db);
    return dx;
}

/* ---- the online softmax ---- */

online_attention *online_attention_new(int64_t rows, int64_t dv) {
    online_attention *s = calloc(1, sizeof *s);
    if (!s) lecture_fail("out of memory for an online attention state");
    s->rows = rows;
    s->dv = dv;
    s->max = malloc((size_t)rows * sizeof(float));
    s->sum = calloc((size_t)rows, sizeof(float));
    s->acc = calloc((size_t)(rows * dv), sizeof(float));
    if (!s->max || !s->sum || !s->acc) lecture_fail("out of memory for an online attention state");
    for (int64_t i = 0; i < rows; i++)
        s->max[i] = -INFINITY;
    return s;
}

/* One query row takes a chunk of scores (m of them) and values. */
static void merge_row(online_attention *s, int64_t i, float *score, const float *v, int64_t m, int causal,
                      int64_t q_pos, int64_t k_pos) {
    float chunk_max = -INFINITY;
    for (int64_t j = 0; j < m; j++)
        if (visible(causal, q_pos, i, k_pos, j)) chunk_max = fmaxf(chunk_max, score[j]);
    if (chunk_max == -INFINITY) return; /* no key of this chunk is visible */
    float new_max = fmaxf(s->max[i], chunk_max);
    float rescale = expf(s->max[i] - new_max); /* 0 for the first chunk (exp(-inf)) */
    float *acc = s->acc + i * s->dv;
    s->sum[i] *= rescale;
    for (int64_t c = 0; c < s->dv; c++)
        acc[c] *= rescale;
    for (int64_t j = 0; j < m; j++) {
        if (!visible(causal, q_pos, i, k_pos, j)) continue;
        float p = expf(score[j] - new_max);
        s->sum[i] += p;
        for (int64_t c = 0; c < s->dv; c++)
            acc[c] += p * v[j * s->dv + c];
    }
    s->max[i] = new_max;
}

void online_attention_add(online_attention *s, const tensor *q, const tensor *k, const tensor *v, int causal,
                          int64_t q_pos, int64_t k_pos) {
    if (q->shape[0] != s->rows || cols_of(v) != s->dv || k->shape[0] != v->shape[0] || cols_of(q) != cols_of(k))
        lecture_fail("online_attention_add: q %lld x %lld, k %lld x %lld, v %lld x %lld do not fit a state of "
                     "%lld rows x %lld",
                     (long long)q->shape[0], (long long)cols_of(q), (long long)k->shape[0], (long long)cols_of(k),
                     (long long)v->shape[0], (long long)cols_of(v), (long long)s->rows, (long long)s->dv);
    tensor *sc = scores_of(q, k);
    float *score = host_copy(sc), *vh = host_copy(v);
    int64_t m = k->shape[0];
    for (int64_t i = 0; i < s->rows; i++)
        merge_row(s, i, score + i * m, vh, m, causal, q_pos, k_pos);
    free(score);
    free(vh);
    tensor_free(sc);
}

tensor *online_attention_result(const online_attention *s, int device) {
    float *h = malloc((size_t)(s->rows * s->dv > 0 ? s->rows * s->dv : 1) * sizeof(float));
    if (!h) lecture_fail("out of memory for an attention result");
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t c = 0; c < s->dv; c++)
            h[i * s->dv + c] = s->sum[i] > 0 ? s->acc[i * s->dv + c] / s->sum[i] : 0.0f;
    tensor *out = tensor_from(h, s->rows, s->dv, device);
    free(h);
    return out;
}

void online_attention_lse(const online_attention *s, float *lse) {
    for (int64_t i = 0; i < s->rows; i++)
        lse[i] = s->sum[i] > 0 ? s->max[i] + logf(s->sum[i]) : -INFINITY;
}

void attention_chunk_backward(const tensor *q, const tensor *k, const tensor *v, const tensor *out, const tensor *dout,
                              const float *lse, int causal, int64_t q_pos, int64_t k_pos, tensor *dq, tensor *dk,
                              tensor *dv) {
    int64_t n = q->shape[0], m = k->shape[0], d = cols_of(q), dv_cols = cols_of(v);
    if (cols_of(k) != d || v->shape[0] != m || out->shape[0] != n || cols_of(out) != dv_cols || dout->shape[0] != n ||
        cols_of(dout) != dv_cols || dq->shape[0] != n || cols_of(dq) != d || dk->shape[0] != m || cols_of(dk) != d ||
        dv->shape[0] != m || cols_of(dv) != dv_cols)
        lecture_fail("attention_chunk_backward: q %lld x %lld, k %lld x %lld, v %lld x %lld, out and dout %lld x "
                     "%lld: the gradients must have q's, k's and v's shapes, out and dout q's rows and v's columns",
                     (long long)n, (long long)d, (long long)m, (long long)cols_of(k), (long long)v->shape[0],
                     (long long)dv_cols, (long long)out->shape[0], (long long)cols_of(out));
    const float scale = 1.0f / sqrtf((float)d);
    tensor *sc = scores_of(q, k), *dpt = empty(n, m, q->device);
    matmul_into(dpt, dout, v, 0, 1, 1.0f, 0.0f); /* dP = dout v^T */
    float *p = host_copy(sc), *ds = host_copy(dpt), *o = host_copy(out), *g = host_copy(dout);
    for (int64_t i = 0; i < n; i++) {
        float delta = 0; /* D_i = dout_i . out_i */
        for (int64_t c = 0; c < dv_cols; c++)
            delta += g[i * dv_cols + c] * o[i * dv_cols + c];
        for (int64_t j = 0; j < m; j++) {
            float w = visible(causal, q_pos, i, k_pos, j) && lse[i] > -INFINITY ? expf(p[i * m + j] - lse[i]) : 0;
            p[i * m + j] = w;
            ds[i * m + j] = w * (ds[i * m + j] - delta) * scale; /* dS / sqrt(d) */
        }
    }
    put_back(sc, p);
    put_back(dpt, ds);
    matmul_into(dq, dpt, k, 0, 0, 1.0f, 1.0f);   /* dq += dS k / sqrt(d) */
    matmul_into(dk, dpt, q, 1, 0, 1.0f, 1.0f);   /* dk += dS^T q / sqrt(d) */
    matmul_into(dv, sc, dout, 1, 0, 1.0f, 1.0f); /* dv += P^T dout */
    free(o);
    free(g);
    tensor_free(sc);
    tensor_free(dpt);
}

void online_attention_free(online_attention *s) {
    if (!s) return;
    free(s->max);
    free(s->sum);
    free(s->acc);
    free(s);
}

tensor *mlp_forward(const tensor *x, const tensor *w1, const tensor *w2) {
    tensor *h = matmul(x, w1), *a = gelu(h), *y = matmul(a, w2);
    tensor_free(h);
    tensor_free(a);
    return y;
}

/* ---- mixture of experts ---- */

void moe_route(const tensor *x, const tensor *router, int *expert, float *gate) {
    tensor *logits = matmul(x, router);
    int64_t tokens = logits->shape[0], experts = logits->shape[1];
    float *h = host_copy(logits);
    for (int64_t t = 0; t < tokens; t++) {
        float *row = h + t * experts;
        int best = 0;
        for (int64_t e = 1; e < experts; e++)
            if (row[e] > row[best]) best = (int)e;
        float sum = 0;
        for (int64_t e = 0; e < experts; e++)
            sum += expf(row[e] - row[best]);
        expert[t] = best;
        gate[t] = 1.0f / sum; /* exp(0) / sum: the chosen expert's probability */
    }
    free(h);
    tensor_free(logits);
}

tensor *gather_rows(const tensor *x, const int *rows, int n) {
    int64_t cols = cols_of(x);
    float *h = host_copy(x), *g = malloc((size_t)(n > 0 ? n : 1) * (size_t)cols * sizeof(float));
    if (!g) lecture_fail("out of memory gathering %d rows", n);
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= x->shape[0])
            lecture_fail("gather_rows: row %d of a %lld-row tensor", rows[i], (long long)x->shape[0]);
        memcpy(g + (int64_t)i * cols, h + (int64_t)rows[i] * cols, (size_t)cols * sizeof(float));
    }
    tensor *out = tensor_from(g, n, cols, x->device);
    free(g);
    free(h);
    return out;
}

void scatter_rows(tensor *out, const tensor *y, const int *rows, const float *scale, int n) {
    int64_t cols = cols_of(out);
    float *h = host_copy(out), *yh = host_copy(y);
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= out->shape[0])
            lecture_fail("scatter_rows: row %d of a %lld-row tensor", rows[i], (long long)out->shape[0]);
        for (int64_t c = 0; c < cols; c++)
            h[(int64_t)rows[i] * cols + c] = scale[i] * yh[(int64_t)i * cols + c];
    }
    free(yh);
    put_back(out, h);
}

tensor *moe_forward(const tensor *x, const tensor *router, tensor *const *w1, tensor *const *w2, int experts) {
    int tokens = (int)x->shape[0];
    int *expert = malloc((size_t)tokens * sizeof(int)), *rows = malloc((size_t)tokens * sizeof(int));
    float *gate = malloc((size_t)tokens * sizeof(float)), *scale = malloc((size_t)tokens * sizeof(float));
    if (!expert || !rows || !gate || !scale) lecture_fail("out of memory routing %d tokens", tokens);
    moe_route(x, router, expert, gate);
    tensor *out = zeros(tokens, x->shape[1], x->device);
    for (int e = 0; e < experts; e++) {
        int n = 0;
        for (int t = 0; t < tokens; t++)
            if (expert[t] == e) {
                rows[n] = t;
                scale[n++] = gate[t];
            }
        if (n == 0) continue;
        tensor *mine = gather_rows(x, rows, n), *y = mlp_forward(mine, w1[e], w2[e]);
        scatter_rows(out, y, rows, scale, n);
        tensor_free(mine);
        tensor_free(y);
    }
    free(expert);
    free(rows);
    free(gate);
    free(scale);
    return out;
}

void mlp_backward(const tensor *x, const tensor *w1, const tensor *w2, const tensor *dy, tensor **dx, tensor **dw1,
                  tensor **dw2) {
    tensor *h = matmul(x, w1), *a = gelu(h), *da = empty(dy->shape[0], w2->shape[0], dy->device);
    *dw2 = empty(w2->shape[0], w2->shape[1], dy->device);
    matmul_into(*dw2, a, dy, 1, 0, 1.0f, 0.0f); /* a^T dy */
    matmul_into(da, dy, w2, 0, 1, 1.0f, 0.0f);  /* dy w2^T */
    tensor *dh = gelu_backward(h, da);
    *dw1 = empty(w1->shape[0], w1->shape[1], dy->device);
    matmul_into(*dw1, x, dh, 1, 0, 1.0f, 0.0f); /* x^T dh */
    *dx = empty(x->shape[0], x->shape[1], dy->device);
    matmul_into(*dx, dh, w1, 0, 1, 1.0f, 0.0f); /* dh w1^T */
    tensor_free(h);
    tensor_free(a);
    tensor_free(da);
    tensor_free(dh);
}

/* ---- top-2 routing with a capacity ---- */

static void *alloc_or_fail(size_t n, size_t size) {
    void *p = calloc(n > 0 ? n : 1, size);
    if (!p) lecture_fail("out of memory routing tokens");
    return p;
}

moe_routing *moe_route_top2(const tensor *x, const tensor *router) {
    tensor *logits = matmul(x, router);
    int tokens = (int)logits->shape[0], experts = (int)logits->shape[1];
    if (experts < 2) lecture_fail("moe_route_top2: %d experts; top-2 needs at least 2", experts);
    moe_routing *r = alloc_or_fail(1, sizeof *r);
    r->tokens = tokens;
    r->experts = experts;
    r->choice = alloc_or_fail((size_t)tokens * 2, sizeof(int));
    r->gate = alloc_or_fail((size_t)tokens * 2, sizeof(float));
    r->slot = alloc_or_fail((size_t)tokens * 2, sizeof(int));
    r->prob = host_copy(logits);
    r->demand = alloc_or_fail((size_t)experts, sizeof(int));
    r->kept = alloc_or_fail((size_t)experts, sizeof(int));
    tensor_free(logits);
    for (int t = 0; t < tokens; t++) {
        float *p = r->prob + (int64_t)t * experts, max = -INFINITY, sum = 0;
        int first = 0, second = -1;
        for (int e = 0; e < experts; e++)
            max = fmaxf(max, p[e]);
        for (int e = 0; e < experts; e++)
            sum += p[e] = expf(p[e] - max);
        for (int e = 0; e < experts; e++)
            p[e] /= sum;
        for (int e = 1; e < experts; e++)
            if (p[e] > p[first]) first = e;
        for (int e = 0; e < experts; e++)
            if (e != first && (second < 0 || p[e] > p[second])) second = e;
        r->choice[2 * t] = first;
        r->choice[2 * t + 1] = second;
        r->gate[2 * t] = p[first] / (p[first] + p[second]);
        r->gate[2 * t + 1] = p[second] / (p[first] + p[second]);
        r->demand[first]++;
        r->demand[second]++;
    }
    return r;
}

void moe_assign(moe_routing *r, int capacity) {
    if (capacity < 1) lecture_fail("moe_assign: capacity %d; an expert takes at least 1 row", capacity);
    r->capacity = capacity;
    memset(r->kept, 0, (size_t)r->experts * sizeof(int));
    for (int k = 0; k < 2; k++) /* every first choice before any second */
        for (int t = 0; t < r->tokens; t++) {
            int e = r->choice[2 * t + k];
            r->slot[2 * t + k] = r->kept[e] < capacity ? e * capacity + r->kept[e]++ : -1;
        }
}

int moe_dropped(const moe_routing *r) {
    int n = 0;
    for (int i = 0; i < 2 * r->tokens; i++)
        n += r->slot[i] < 0;
    return n;
}

void moe_routing_free(moe_routing *r) {
    if (!r) return;
    free(r->choice);
    free(r->gate);
    free(r->prob);
    free(r->slot);
    free(r->demand);
    free(r->kept);
    free(r);
}

int moe_capacity(double cf, int tokens, int k, int experts) { return (int)ceil(cf * tokens * k / experts); }
