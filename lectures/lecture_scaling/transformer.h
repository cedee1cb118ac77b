/*
 * transformer.h: the pieces of a transformer block, written out so a
 * lecture can cut each one across ranks: softmax over rows, LayerNorm
 * (plain, and with a learned gain and bias, forward and backward), scaled
 * dot-product attention (one head, several heads side by side, forward and
 * backward, and the online-softmax form that takes the keys a chunk at a
 * time, and its backward a chunk at a time), a GELU MLP (forward and backward), a top-1 mixture of experts, and
 * the routing of a top-2 one with a capacity.
 *
 * Tensors may live on the host or a device: the matrix products run where
 * the tensors are (cuBLAS or OpenBLAS); the row-wise steps (softmax,
 * LayerNorm, the online merge, routing) copy to the host, work there and
 * copy back. On a GPU that is correct but slow, and unverified here.
 *
 * tests/lectures/test_transformer.c checks every piece against float64 loops of its
 * own.
 */
#ifndef LECTERN_TRANSFORMER_H
#define LECTERN_TRANSFORMER_H

#include <stdint.h>

#include "lectern.h"

/* u = 2^-24: half the spacing of float32 numbers near 1. */
#define FLOAT32_UNIT (1.0 / 16777216.0)

/* A rows x cols weight matrix, standard normal from `seed`, scaled by
 * 1/sqrt(rows) so that x @ w keeps the size of x. Every rank that asks for
 * the same seed gets the same numbers. */
tensor *init_weight(int64_t rows, int64_t cols, uint64_t seed, int device);

/* Each row of x replaced by its softmax, in place: exp(x - max) / sum. */
void softmax_rows(tensor *x);

/* LayerNorm of each row, without the learned gain and bias (gain 1, bias 0):
 * (x - mean) / sqrt(var + eps), var the biased variance. A new tensor. */
tensor *layer_norm(const tensor *x, float eps);

/* One head of scaled dot-product attention: softmax(q k^T / sqrt(d)) v,
 * q n x d, k m x d, v m x dv; a new n x dv tensor. With `causal`, query i
 * sees key j only when k_pos + j <= q_pos + i: q_pos and k_pos are the
 * positions in the whole sequence of q's and k's first rows (0 and 0 for a
 * whole sequence). A query that sees no key gets zeros. */
tensor *attention(const tensor *q, const tensor *k, const tensor *v, int causal, int64_t q_pos, int64_t k_pos);

/* `heads` heads side by side: x (T x d) projected by wq, wk, wv (d x heads
 * dh each), head h using columns [h dh, (h+1) dh) of each; the result is the
 * heads' outputs concatenated (T x heads dh). Multiplying it by the output
 * projection wo gives multi-head attention. */
tensor *attention_heads(const tensor *x, const tensor *wq, const tensor *wk, const tensor *wv, int heads, int causal);

/* The backward of attention_heads for an upstream gradient dout (T x heads
 * dh): returns dx (T x d) and sets dwq, dwk, dwv (d x heads dh, new). Per
 * head, with P the causal softmax weights of the forward (recomputed):
 *     dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),
 *     dQ = dS K / sqrt(dh),  dK = dS^T Q / sqrt(dh);
 * then dwq = x^T dQ (likewise k, v) and dx = dQ wq^T + dK wk^T + dV wv^T.
 * Given a rank's columns of wq, wk, wv (its heads), dx is that rank's
 * part of the input's gradient: the parts of all ranks add up to it. */
tensor *attention_heads_backward(const tensor *x, const tensor *wq, const tensor *wk, const tensor *wv, int heads,
                                 int causal, const tensor *dout, tensor **dwq, tensor **dwk, tensor **dwv);

/* LayerNorm with a learned gain and bias (1 x d each): gain * LN(x) + bias,
 * row by row. A new tensor. */
tensor *layer_norm_affine(const tensor *x, const tensor *gain, const tensor *bias, float eps);

/* Its backward for dy (rows x d): returns dx and sets dgain = sum over the
 * rows of dy * LN(x) and dbias = sum over the rows of dy (1 x d, new).
 * With xh = LN(x), g = dy * gain and s = 1 / sqrt(var + eps):
 *     dx = s (g - mean(g) - xh mean(g * xh)), the means over the row.
 * The weight gradients are sums over the rows: given some of a sequence's
 * rows, they are those rows' share of the whole sequence's. */
tensor *layer_norm_affine_backward(const tensor *x, const tensor *gain, const tensor *dy, float eps, tensor **dgain,
                                   tensor **dbias);

/* Attention over keys that arrive a chunk at a time (the online softmax):
 * for each query row, the running maximum score m, the running sum of
 * exp(score - m) l, and the running sum of exp(score - m) v. A new chunk
 * with a larger maximum rescales what came before by exp(m_old - m_new).
 * The result after every chunk has been added, in any order, is attention()
 * over all the keys. */
typedef struct online_attention {
    int64_t rows, dv;
    float *max, *sum, *acc; /* host: rows, rows, rows x dv */
} online_attention;
online_attention *online_attention_new(int64_t rows, int64_t dv);
void online_attention_add(online_attention *s, const tensor *q, const tensor *k, const tensor *v, int causal,
                          int64_t q_pos, int64_t k_pos);
tensor *online_attention_result(const online_attention *s, int device); /* acc / sum */
/* Each row's log-sum-exp, max + log(sum), into lse (rows floats): what a
 * backward needs to rebuild the softmax weights of any chunk of keys
 * without the others, P_ij = exp(score_ij - lse_i). -inf for a row that
 * saw no key. */
void online_attention_lse(const online_attention *s, float *lse);
void online_attention_free(online_attention *s);

/* The backward of attention one chunk of keys at a time (flash attention's
 * backward, ring attention's): queries q (n x d) at q_pos whose forward over
 * all their keys gave `out` (n x dv) with log-sum-exp `lse` (n host floats,
 * online_attention_lse), the upstream gradient dout (n x dv), and one chunk
 * of keys k (m x d) and values v (m x dv) at k_pos. With the chunk's
 * weights P = exp(q k^T / sqrt(d) - lse) (0 where the mask hides a key) and
 * D_i = dout_i . out_i (the rowsum(P * dP) of the whole row, all chunks):
 *     dP = dout v^T,  dS = P * (dP - D),
 *     dq += dS k / sqrt(d),  dk += dS^T q / sqrt(d),  dv += P^T dout.
 * dq gets this chunk's share of the queries' gradient (the chunks' shares
 * add up to it); dk and dv get these queries' share of the chunk's (the
 * queries' shares add up to it). dq, dk, dv are accumulated into (beta 1):
 * zero them first. */
void attention_chunk_backward(const tensor *q, const tensor *k, const tensor *v, const tensor *out, const tensor *dout,
                              const float *lse, int causal, int64_t q_pos, int64_t k_pos, tensor *dq, tensor *dk,
                              tensor *dv);

/* The MLP of a block: gelu(x w1) w2 (w1 d x h, w2 h x d). */
tensor *mlp_forward(const tensor *x, const tensor *w1, const tensor *w2);

/* ---- mixture of experts, top-1 ---- */

/* Routing: logits = x router (T x E); token t goes to the expert with the
 * largest logit (the first on a tie), and its output is scaled by that
 * expert's softmax probability, gate[t]. */
void moe_route(const tensor *x, const tensor *router, int *expert, float *gate);

/* Rows rows[0..n) of x, in that order, as a new n x cols tensor. */
tensor *gather_rows(const tensor *x, const int *rows, int n);

/* out[rows[i]] = scale[i] * y[i] for i < n (the other rows untouched). */
void scatter_rows(tensor *out, const tensor *y, const int *rows, const float *scale, int n);

/* The whole layer on one device: every token through its expert,
 * mlp_forward(x_t, w1[e], w2[e]) scaled by its gate. A new T x d tensor. */
tensor *moe_forward(const tensor *x, const tensor *router, tensor *const *w1, tensor *const *w2, int experts);

/* The MLP's backward for an upstream gradient dy (rows x d): the weight
 * gradients dw1 = x^T dh, dw2 = a^T dy (a = gelu(x w1), dh = gelu'(x w1) *
 * dy w2^T) and the input's gradient dx = dh w1^T. Three new tensors. */
void mlp_backward(const tensor *x, const tensor *w1, const tensor *w2, const tensor *dy, tensor **dx, tensor **dw1,
                  tensor **dw2);

/* ---- mixture of experts, top-2 with a capacity ---- */

/* Top-2 routing (GShard, Mixtral): the router's softmax over the E logits
 * of x router; each token goes to its two likeliest experts (the first on a
 * tie), with gates renormalised over the two: g_k = p_k / (p_0 + p_1), a
 * softmax over the two chosen logits. Every expert takes at most `capacity`
 * rows (moe_assign): first choices are seated before second choices, each
 * in token order, so a token loses its second expert before any token
 * loses its first; a dropped assignment adds nothing to the token's output
 * (in a block the residual carries the token past the layer). Host arrays. */
typedef struct moe_routing {
    int tokens, experts, capacity;
    int *choice; /* tokens x 2: the two experts, the likelier first */
    float *gate; /* tokens x 2: renormalised, g_0 + g_1 = 1 */
    float *prob; /* tokens x experts: the router's softmax */
    int *slot;   /* tokens x 2: row in the experts x capacity layout (expert e's
                     rows are [e capacity, (e + 1) capacity)), -1 dropped */
    int *demand; /* experts: how many assignments chose it */
    int *kept;   /* experts: how many of those it took (min(demand, capacity)) */
} moe_routing;
moe_routing *moe_route_top2(const tensor *x, const tensor *router);
/* Seats the assignments in experts x capacity rows (slot, kept); may be
 * called again with another capacity. */
void moe_assign(moe_routing *r, int capacity);
int moe_dropped(const moe_routing *r); /* assignments past the capacity */
void moe_routing_free(moe_routing *r);

/* The capacity of a factor cf: ceil(cf tokens k / experts) rows, the even
 * share of the tokens' k assignments, times cf. */
int moe_capacity(double cf, int tokens, int k, int experts);

#endif /* LECTERN_TRANSFORMER_H */
