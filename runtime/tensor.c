/*
 * tensor.c: small float32 tensors on the host or on a GPU.
 *
 * A tensor is 1-D or 2-D, row-major, float32. Its data lives on the host
 * (device -1) or on cuda:N. This file owns the structs, checks shapes and
 * devices, and does the host work; every operation on a device tensor is
 * handed to tensor_cuda.cu (through tensor_impl.h), so each function below
 * reads as "check, then host loop or GPU call".
 *
 * Libraries do what they are for: OpenBLAS on the host and cuBLAS on the GPU
 * do the matrix products and the BLAS-shaped vector work (scale, axpy, dot).
 * What BLAS has no routine for (GELU, AdamW, adding a scalar) is a plain loop
 * here and a kernel there, written from the same formulas.
 *
 * Mistakes in lecture code (mismatched shapes, a GPU that is not there, an
 * index out of range) stop the lecture through lx_fatal(), which names the
 * lecture line that asked.
 */
#include <cblas.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lectern.h"
#include "tensor_impl.h"

/* ------------------------------------------------------------------ */
/* Devices and shapes                                                  */
/* ------------------------------------------------------------------ */

#ifndef LECTERN_CUDA
void lx_tensor_no_cuda(void)
{
    lx_fatal("this lectern was built without CUDA (no nvcc at build time): "
             "tensors can only live on the CPU (device -1)");
}
#endif

static int on_gpu(const tensor *t) { return t->device >= 0; }

/* Every tensor is made through here, so a device that does not exist is
 * caught where the lecture asks for it. */
static void check_device(int device)
{
    if (device < -1)
        lx_fatal("device %d does not exist: use -1 for the CPU or N >= 0 for cuda:N", device);
    if (device < 0)
        return;
#ifndef LECTERN_CUDA
    lx_fatal("cuda:%d asked for, but this lectern was built without CUDA (no nvcc at build "
             "time): use device -1 (the CPU), or get_device(rank)",
             device);
#else
    int n = gpu_count();
    if (n == 0)
        lx_fatal("cuda:%d asked for, but no GPU is visible on this machine "
                 "(cudaGetDeviceCount found none): use device -1 (the CPU), or get_device(rank)",
                 device);
    if (device >= n)
        lx_fatal("cuda:%d asked for, but only %d GPU%s visible (cuda:0 to cuda:%d)", device, n,
                 n == 1 ? " is" : "s are", n - 1);
#endif
}

/* "128x1024" (1-D: "1024"), for messages. */
typedef struct shape_text {
    char s[64];
} shape_text;

static shape_text shape_of(const tensor *t)
{
    shape_text out;
    if (t->ndim == 1)
        snprintf(out.s, sizeof out.s, "%" PRId64, t->shape[0]);
    else
        snprintf(out.s, sizeof out.s, "%" PRId64 "x%" PRId64, t->shape[0], t->shape[1]);
    return out;
}

static int same_shape(const tensor *a, const tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static void check_same_shape(const char *op, const tensor *a, const tensor *b)
{
    if (!same_shape(a, b))
        lx_fatal("%s: shapes differ: %s and %s", op, shape_of(a).s, shape_of(b).s);
}

static const char *device_name(int device, char buf[32])
{
    if (device < 0)
        snprintf(buf, 32, "cpu");
    else
        snprintf(buf, 32, "cuda:%d", device);
    return buf;
}

static void check_same_device(const char *op, const tensor *a, const tensor *b)
{
    char da[32], db[32];
    if (a->device != b->device)
        lx_fatal("%s: tensors on different devices (%s and %s): move one with to_device()", op,
                 device_name(a->device, da), device_name(b->device, db));
}

static void check_2d(const char *op, const tensor *t)
{
    if (t->ndim != 2)
        lx_fatal("%s: needs a 2-D tensor, got shape %s", op, shape_of(t).s);
}

/* BLAS counts in int: refuse (rather than wrap) anything past 2^31 - 1. */
static int blas_int(const char *op, int64_t n)
{
    if (n > INT_MAX)
        lx_fatal("%s: %" PRId64 " is more than BLAS can index (%d)", op, n, INT_MAX);
    return (int)n;
}

static size_t bytes_of(const tensor *t) { return (size_t)t->numel * sizeof(float); }

/* ------------------------------------------------------------------ */
/* Making and freeing                                                  */
/* ------------------------------------------------------------------ */

/* A new tensor of the given shape with uninitialised data. ndim is 1
 * (rows elements) or 2 (rows x cols). */
static tensor *new_tensor(int ndim, int64_t rows, int64_t cols, int device)
{
    if (rows < 0 || cols < 0)
        lx_fatal("a tensor cannot have a negative size (%" PRId64 ", %" PRId64 ")", rows, cols);
    if (ndim == 2 && cols > 0 && rows > INT64_MAX / 4 / cols)
        lx_fatal("a %" PRId64 "x%" PRId64 " tensor is too large", rows, cols);
    check_device(device);

    tensor *t = calloc(1, sizeof *t);
    if (!t)
        lx_fatal("out of memory for a tensor");
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = ndim == 2 ? cols : 0;
    t->numel = ndim == 2 ? rows * cols : rows;
    t->device = device;
    t->owns_data = 1;
    if (t->numel == 0)
        return t; /* data stays NULL: nothing to point at */
    if (on_gpu(t)) {
        t->data = lx_cuda_alloc(device, bytes_of(t));
    } else {
        /* 64-byte aligned: a cache line, and what AVX-512 loads like best. */
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes_of(t)) != 0)
            lx_fatal("out of memory for a %s tensor (%zu bytes)", shape_of(t).s, bytes_of(t));
        t->data = p;
    }
    return t;
}

static tensor *new_like(const tensor *t)
{
    return new_tensor(t->ndim, t->shape[0], t->shape[1], t->device);
}

tensor *empty(int64_t rows, int64_t cols, int device)
{
    return new_tensor(cols == 0 ? 1 : 2, rows, cols, device);
}

tensor *zeros(int64_t rows, int64_t cols, int device)
{
    tensor *t = empty(rows, cols, device);
    if (t->numel == 0)
        return t;
    if (on_gpu(t))
        lx_cuda_zero(t->device, t->data, bytes_of(t));
    else
        memset(t->data, 0, bytes_of(t));
    return t;
}

/* Host values into a tensor's storage, wherever it lives. */
static void fill_from_host(tensor *t, const float *values)
{
    if (t->numel == 0)
        return;
    if (on_gpu(t))
        lx_cuda_copy(t->data, t->device, values, -1, bytes_of(t));
    else
        memcpy(t->data, values, bytes_of(t));
}

tensor *tensor_from(const float *values, int64_t rows, int64_t cols, int device)
{
    tensor *t = empty(rows, cols, device);
    fill_from_host(t, values);
    return t;
}

/* A host buffer of n floats (NULL for n == 0); the caller frees it. */
static float *host_buffer(int64_t n)
{
    if (n == 0)
        return NULL;
    float *p = malloc((size_t)n * sizeof(float));
    if (!p)
        lx_fatal("out of memory for %" PRId64 " floats", n);
    return p;
}

/* Small and made once: built on the host and copied, like randn. */
tensor *arange(int64_t n, int device)
{
    if (n < 0)
        lx_fatal("arange: n must be >= 0, got %" PRId64, n);
    float *values = host_buffer(n);
    for (int64_t i = 0; i < n; i++)
        values[i] = (float)i;
    tensor *t = tensor_from(values, n, 0, device);
    free(values);
    return t;
}

void tensor_free(tensor *t)
{
    if (!t)
        return;
    if (t->owns_data && t->data) {
        if (on_gpu(t))
            lx_cuda_free(t->device, t->data);
        else
            free(t->data);
    }
    free(t->str);
    free(t);
}

/* ------------------------------------------------------------------ */
/* Random numbers                                                      */
/* ------------------------------------------------------------------ */

/*
 * randn must give the same numbers whatever device the tensor lands on, so
 * that a run on GPUs and a run on CPUs train the same model. They are
 * therefore always drawn here on the host, in order, and then copied.
 *
 * Generator: xoshiro256** (Blackman and Vigna), 256 bits of state, seeded
 * from the 64-bit seed through splitmix64 as its authors advise (so nearby
 * seeds give unrelated states). Normals: Box-Muller, which turns two
 * uniforms into two independent standard normals; the second is kept for
 * the next draw, so randn(3) then randn(3) gives the numbers of randn(6).
 */
static uint64_t rng[4];
static int rng_seeded;
static int have_spare;
static double spare;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro256ss(void)
{
    uint64_t result = rotl(rng[1] * 5, 7) * 9;
    uint64_t t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return result;
}

void manual_seed(uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng[i] = splitmix64(&x);
    rng_seeded = 1;
    have_spare = 0;
}

/* Uniform in [0, 1): the top 53 bits, one per bit of a double's mantissa. */
static double uniform(void) { return (double)(xoshiro256ss() >> 11) * 0x1.0p-53; }

static double standard_normal(void)
{
    if (!rng_seeded)
        manual_seed(0); /* like a fresh torch process: seed 0 until told otherwise */
    if (have_spare) {
        have_spare = 0;
        return spare;
    }
    double u1 = 1.0 - uniform(); /* in (0, 1], so log(u1) is finite */
    double u2 = uniform();
    double r = sqrt(-2.0 * log(u1));
    double angle = 2.0 * M_PI * u2;
    spare = r * sin(angle);
    have_spare = 1;
    return r * cos(angle);
}

tensor *randn(int64_t rows, int64_t cols, int device)
{
    tensor *t = empty(rows, cols, device);
    float *values = host_buffer(t->numel);
    for (int64_t i = 0; i < t->numel; i++)
        values[i] = (float)standard_normal();
    fill_from_host(t, values);
    free(values);
    return t;
}

/* ------------------------------------------------------------------ */
/* Copies and views                                                    */
/* ------------------------------------------------------------------ */

void tensor_copy(tensor *dst, const tensor *src)
{
    check_same_shape("tensor_copy", dst, src);
    if (src->numel == 0 || dst->data == src->data)
        return;
    if (!on_gpu(dst) && !on_gpu(src))
        memmove(dst->data, src->data, bytes_of(src));
    else
        lx_cuda_copy(dst->data, dst->device, src->data, src->device, bytes_of(src));
}

tensor *to_device(const tensor *t, int device)
{
    tensor *out = new_tensor(t->ndim, t->shape[0], t->shape[1], device);
    tensor_copy(out, t);
    return out;
}

void tensor_to_host(const tensor *t, float *out)
{
    if (t->numel == 0)
        return;
    if (on_gpu(t))
        lx_cuda_copy(out, -1, t->data, t->device, bytes_of(t));
    else
        memcpy(out, t->data, bytes_of(t));
}

/* Row-major, so rows [start, end) are one contiguous run: the view is just a
 * pointer into the same storage, and writes through it reach the original.
 * The original must outlive the view. */
tensor *row_slice(tensor *t, int64_t start, int64_t end)
{
    if (start < 0 || end < start || end > t->shape[0])
        lx_fatal("row_slice: rows [%" PRId64 ", %" PRId64 ") are not within the %" PRId64
                 " rows of a %s tensor",
                 start, end, t->shape[0], shape_of(t).s);
    tensor *v = calloc(1, sizeof *v);
    if (!v)
        lx_fatal("out of memory for a tensor");
    *v = *t;
    int64_t row = t->ndim == 2 ? t->shape[1] : 1;
    v->shape[0] = end - start;
    v->numel = (end - start) * row;
    v->data = v->numel ? t->data + start * row : NULL;
    v->owns_data = 0;
    v->str = NULL;
    return v;
}

/* height rows of width floats between two row-major matrices on one device;
 * the pitches are the full row lengths of each. */
static void copy_block(int device, float *dst, int64_t dst_row, const float *src,
                       int64_t src_row, int64_t width, int64_t height)
{
    if (width == 0 || height == 0)
        return;
    size_t w = (size_t)width * sizeof(float);
    if (device >= 0) {
        lx_cuda_copy_2d(device, dst, (size_t)dst_row * sizeof(float), src,
                        (size_t)src_row * sizeof(float), w, (size_t)height);
        return;
    }
    for (int64_t r = 0; r < height; r++)
        memcpy(dst + r * dst_row, src + r * src_row, w);
}

/* Columns are not contiguous in row-major storage, so this is a copy. */
tensor *col_slice(const tensor *t, int64_t start, int64_t end)
{
    check_2d("col_slice", t);
    if (start < 0 || end < start || end > t->shape[1])
        lx_fatal("col_slice: columns [%" PRId64 ", %" PRId64 ") are not within the %" PRId64
                 " columns of a %s tensor",
                 start, end, t->shape[1], shape_of(t).s);
    tensor *out = new_tensor(2, t->shape[0], end - start, t->device);
    if (t->numel)
        copy_block(t->device, out->data, end - start, t->data + start, t->shape[1], end - start,
                   t->shape[0]);
    return out;
}

tensor *cat_cols(tensor *const *parts, int n)
{
    if (n < 1)
        lx_fatal("cat_cols: needs at least one tensor, got %d", n);
    int64_t cols = 0;
    for (int i = 0; i < n; i++) {
        check_2d("cat_cols", parts[i]);
        check_same_device("cat_cols", parts[0], parts[i]);
        if (parts[i]->shape[0] != parts[0]->shape[0])
            lx_fatal("cat_cols: part %d is %s but part 0 is %s: the row counts must match", i,
                     shape_of(parts[i]).s, shape_of(parts[0]).s);
        cols += parts[i]->shape[1];
    }
    tensor *out = new_tensor(2, parts[0]->shape[0], cols, parts[0]->device);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i]->numel)
            copy_block(out->device, out->data + at, cols, parts[i]->data, parts[i]->shape[1],
                       parts[i]->shape[1], out->shape[0]);
        at += parts[i]->shape[1];
    }
    return out;
}

float item(const tensor *t, int64_t i)
{
    if (i < 0 || i >= t->numel)
        lx_fatal("item: index %" PRId64 " is outside a tensor of %" PRId64 " elements", i,
                 t->numel);
    if (!on_gpu(t))
        return t->data[i];
    float v;
    lx_cuda_copy(&v, -1, t->data + i, t->device, sizeof v);
    return v;
}

/* Compared on the host in double, wherever the two tensors live. */
double max_abs_diff(const tensor *a, const tensor *b)
{
    check_same_shape("max_abs_diff", a, b);
    float *x = host_buffer(a->numel), *y = host_buffer(b->numel);
    tensor_to_host(a, x);
    tensor_to_host(b, y);
    double worst = 0.0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (isnan(d)) {
            worst = NAN;
            break;
        }
        if (d > worst)
            worst = d;
    }
    free(x);
    free(y);
    return worst;
}

/* ------------------------------------------------------------------ */
/* Arithmetic                                                          */
/* ------------------------------------------------------------------ */

void add_scalar(tensor *t, float s)
{
    if (on_gpu(t)) {
        lx_cuda_add_scalar(t->device, t->data, t->numel, s);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] += s;
}

void scale(tensor *t, float s)
{
    int n = blas_int("scale", t->numel);
    if (n == 0)
        return;
    if (on_gpu(t))
        lx_cuda_scale(t->device, t->data, n, s);
    else
        cblas_sscal(n, s, t->data, 1);
}

void add_(tensor *t, const tensor *u)
{
    check_same_shape("add_", t, u);
    check_same_device("add_", t, u);
    int n = blas_int("add_", t->numel);
    if (n == 0)
        return;
    if (on_gpu(t))
        lx_cuda_axpy(t->device, t->data, u->data, n, 1.0f);
    else
        cblas_saxpy(n, 1.0f, u->data, 1, t->data, 1);
}

/*
 * c = alpha * op(a) op(b) + beta * c, everything row-major, where op(x) is x
 * or its transpose. The transposes are never materialised: BLAS reads the
 * same storage the other way round. The backward pass of y = x W uses both:
 * dW = x^T dy (trans_a) and dx = dy W^T (trans_b).
 */
void matmul_into(tensor *c, const tensor *a, const tensor *b, int trans_a, int trans_b,
                 float alpha, float beta)
{
    check_2d("matmul", a);
    check_2d("matmul", b);
    check_2d("matmul", c);
    check_same_device("matmul", a, b);
    check_same_device("matmul", a, c);
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = trans_b ? b->shape[1] : b->shape[0];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    if (k != kb || c->shape[0] != m || c->shape[1] != n)
        lx_fatal("matmul: cannot compute op(a) op(b) into c with a %s%s, b %s%s, c %s "
                 "(op(a) is %" PRId64 "x%" PRId64 ", op(b) is %" PRId64 "x%" PRId64 ")",
                 shape_of(a).s, trans_a ? " transposed" : "", shape_of(b).s,
                 trans_b ? " transposed" : "", shape_of(c).s, m, k, kb, n);
    if (c->numel == 0)
        return;
    /* Leading dimensions are the stored row lengths (at least 1, as BLAS
     * insists even for empty operands). */
    int lda = blas_int("matmul", a->shape[1] > 0 ? a->shape[1] : 1);
    int ldb = blas_int("matmul", b->shape[1] > 0 ? b->shape[1] : 1);
    int ldc = blas_int("matmul", n);
    int im = blas_int("matmul", m), in = blas_int("matmul", n), ik = blas_int("matmul", k);
    if (on_gpu(c))
        lx_cuda_sgemm(c->device, trans_a, trans_b, im, in, ik, alpha, a->data, lda, b->data,
                      ldb, beta, c->data, ldc);
    else
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, im, in, ik, alpha, a->data, lda,
                    b->data, ldb, beta, c->data, ldc);
}

tensor *matmul(const tensor *a, const tensor *b)
{
    check_2d("matmul", a);
    check_2d("matmul", b);
    if (a->shape[1] != b->shape[0])
        lx_fatal("matmul: shapes %s and %s cannot be multiplied (%" PRId64 " != %" PRId64 ")",
                 shape_of(a).s, shape_of(b).s, a->shape[1], b->shape[0]);
    check_same_device("matmul", a, b);
    tensor *c = new_tensor(2, a->shape[0], b->shape[1], a->device);
    matmul_into(c, a, b, 0, 0, 1.0f, 0.0f);
    return c;
}

/*
 * GELU, tanh approximation (what torch computes with approximate='tanh';
 * torch's default, approximate='none', is the exact x * Phi(x) with erf;
 * the two differ by less than 1e-3):
 *
 *     gelu(x)  = 0.5 x (1 + tanh(u)),        u = sqrt(2/pi) (x + 0.044715 x^3)
 *     gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 *                t = tanh(u)
 *
 * The kernels in tensor_cuda.cu compute the same expressions in float.
 */
#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

tensor *gelu(const tensor *x)
{
    tensor *y = new_like(x);
    if (on_gpu(x)) {
        lx_cuda_gelu(x->device, y->data, x->data, x->numel);
        return y;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        float u = GELU_C * (v + GELU_A * v * v * v);
        y->data[i] = 0.5f * v * (1.0f + tanhf(u));
    }
    return y;
}

tensor *gelu_backward(const tensor *x, const tensor *dy)
{
    check_same_shape("gelu_backward", x, dy);
    check_same_device("gelu_backward", x, dy);
    tensor *dx = new_like(x);
    if (on_gpu(x)) {
        lx_cuda_gelu_backward(x->device, dx->data, x->data, dy->data, x->numel);
        return dx;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        float t = tanhf(GELU_C * (v + GELU_A * v * v * v));
        float du = GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        dx->data[i] = dy->data[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
    return dx;
}

/* mean(x^2): the "loss" of the lecture's toy MLP, whose target is zero. The
 * sum of squares is a dot product of x with itself; on the host dsdot adds
 * in double, so the sum does not drift over 10^5 terms. */
float mse_loss(const tensor *x)
{
    int n = blas_int("mse_loss", x->numel);
    if (n == 0)
        return NAN; /* the mean of nothing, as torch says too */
    double sum = on_gpu(x) ? (double)lx_cuda_sumsq(x->device, x->data, n)
                           : cblas_dsdot(n, x->data, 1, x->data, 1);
    return (float)(sum / n);
}

/* d mean(x^2) / dx = 2x / numel */
tensor *mse_loss_backward(const tensor *x)
{
    tensor *dx = new_like(x);
    tensor_copy(dx, x);
    if (x->numel)
        scale(dx, (float)(2.0 / (double)x->numel));
    return dx;
}

/* ------------------------------------------------------------------ */
/* AdamW                                                               */
/* ------------------------------------------------------------------ */

/* torch.optim.AdamW's defaults. */
adamw *adamw_new(const tensor *param, float lr)
{
    adamw *opt = calloc(1, sizeof *opt);
    if (!opt)
        lx_fatal("out of memory for an optimizer");
    opt->lr = lr;
    opt->beta1 = 0.9f;
    opt->beta2 = 0.999f;
    opt->eps = 1e-8f;
    opt->weight_decay = 0.01f;
    opt->step = 0;
    opt->m = new_like(param);
    opt->v = new_like(param);
    tensor *zero[2] = {opt->m, opt->v};
    for (int i = 0; i < 2; i++) {
        if (zero[i]->numel == 0)
            continue;
        if (on_gpu(zero[i]))
            lx_cuda_zero(zero[i]->device, zero[i]->data, bytes_of(zero[i]));
        else
            memset(zero[i]->data, 0, bytes_of(zero[i]));
    }
    return opt;
}

/*
 * One step, as torch.optim.AdamW does it (t = the step number, from 1):
 *
 *     p  = p * (1 - lr * weight_decay)          decoupled weight decay
 *     m  = beta1 m + (1 - beta1) g              first moment
 *     v  = beta2 v + (1 - beta2) g^2            second moment
 *     p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * The bias corrections undo the pull of m and v towards their zero start
 * in the first steps. The per-step scalars are computed here in double,
 * once; the element-wise part is a loop here or a kernel on the GPU.
 */
void adamw_step(adamw *opt, tensor *param, const tensor *grad)
{
    check_same_shape("adamw_step", param, grad);
    check_same_shape("adamw_step", param, opt->m);
    check_same_device("adamw_step", param, grad);
    check_same_device("adamw_step", param, opt->m);
    opt->step++;
    float decay = (float)(1.0 - (double)opt->lr * opt->weight_decay);
    float step_size = (float)(opt->lr / (1.0 - pow(opt->beta1, opt->step)));
    float bias2_sqrt = (float)sqrt(1.0 - pow(opt->beta2, opt->step));
    float beta1 = opt->beta1, beta2 = opt->beta2, eps = opt->eps;
    if (on_gpu(param)) {
        lx_cuda_adamw(param->device, param->data, opt->m->data, opt->v->data, grad->data,
                      param->numel, beta1, beta2, eps, decay, step_size, bias2_sqrt);
        return;
    }
    float *p = param->data, *m = opt->m->data, *v = opt->v->data;
    const float *g = grad->data;
    for (int64_t i = 0; i < param->numel; i++) {
        float mi = m[i] + (1.0f - beta1) * (g[i] - m[i]);
        float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
    }
}

void adamw_free(adamw *opt)
{
    if (!opt)
        return;
    tensor_free(opt->m);
    tensor_free(opt->v);
    free(opt);
}

/* ------------------------------------------------------------------ */
/* Printing, in torch's format                                         */
/* ------------------------------------------------------------------ */

/*
 * torch prints float tensors so that a reader can compare them at a glance:
 *
 *   - one format for the whole tensor, chosen from its finite non-zero
 *     values (of the part shown): all integral -> "3." style; otherwise 4
 *     decimals; scientific "1.2346e+05" when the values span more than 1000x,
 *     exceed 1e8, or (non-integral) go below 1e-4;
 *   - every element right-aligned to the widest one;
 *   - lines of at most 80 characters, rows of a matrix one per line;
 *   - more than 1000 elements: only the first and last 3 of each dimension,
 *     with "..." between.
 *
 * We always add the device (torch leaves out 'cpu'): the lecture shows where
 * a number was computed.
 */
#define PRINT_PRECISION 4
#define PRINT_THRESHOLD 1000
#define PRINT_EDGE 3
#define PRINT_LINEWIDTH 80

/* A growing string. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            lx_fatal("out of memory printing a tensor");
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_spaces(sbuf *b, int n)
{
    for (int i = 0; i < n; i++)
        sb_add(b, " ", 1);
}

static void sb_printf(sbuf *b, const char *fmt, ...) LECTERN_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sb_add(b, buf, n < (int)sizeof buf ? (size_t)n : sizeof buf - 1);
}

typedef struct number_format {
    int int_mode; /* every shown value integral: "3." */
    int sci_mode; /* "1.2346e+05" */
    int width;    /* every element right-aligned to this */
} number_format;

/* One value in the chosen format, unpadded; Python's spelling of nan/inf. */
static int format_bare(const number_format *f, double v, char out[64])
{
    if (isnan(v))
        return snprintf(out, 64, "nan");
    if (isinf(v))
        return snprintf(out, 64, v < 0 ? "-inf" : "inf");
    if (f->sci_mode)
        return snprintf(out, 64, "%.*e", PRINT_PRECISION, v);
    if (f->int_mode)
        return snprintf(out, 64, "%.0f.", v);
    return snprintf(out, 64, "%.*f", PRINT_PRECISION, v);
}

static void format_padded(const number_format *f, double v, char out[80])
{
    char bare[64];
    int n = format_bare(f, v, bare);
    int pad = f->width > n ? f->width - n : 0;
    snprintf(out, 80, "%*s%s", pad, "", bare);
}

/* The format for the values shown (torch decides from those alone). */
static number_format choose_format(const float *vals, int64_t n)
{
    number_format f = {1, 0, 1};
    double lo = INFINITY, hi = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v) || v == 0.0)
            continue;
        count++;
        lo = fmin(lo, fabs(v));
        hi = fmax(hi, fabs(v));
        if (v != ceil(v))
            f.int_mode = 0;
    }
    if (count == 0)
        return f; /* only zeros, nan, inf: "0." style, width 1 */
    f.sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || (!f.int_mode && lo < 1.0e-4);
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v) || v == 0.0)
            continue;
        char buf[64];
        int len = format_bare(&f, v, buf);
        if (len > f.width)
            f.width = len;
    }
    return f;
}

/* Whether index i of a dimension of size n is printed: all are, unless the
 * tensor is summarised and the dimension long, when only the first and last
 * PRINT_EDGE are. */
static int is_shown(int64_t i, int64_t n, int summarize)
{
    return !summarize || n <= 2 * PRINT_EDGE || i < PRINT_EDGE || i >= n - PRINT_EDGE;
}

/* Appends one element of a row: ", " between elements, or ",\n" and the
 * indent after every per_line of them. */
static void add_element(sbuf *b, const char *text, int *count, int per_line, int indent)
{
    if (*count > 0) {
        if (*count % per_line == 0) {
            sb_str(b, ",\n");
            sb_spaces(b, indent + 1);
        } else {
            sb_str(b, ", ");
        }
    }
    sb_str(b, text);
    (*count)++;
}

/* "[a, b, c]" for one row, wrapped to the line width; `indent` is the column
 * the row's "[" stands in. */
static void format_row(sbuf *b, const float *row, int64_t n, int summarize,
                       const number_format *f, int indent)
{
    int per_line = (PRINT_LINEWIDTH - indent) / (f->width + 2);
    if (per_line < 1)
        per_line = 1;
    int count = 0;
    sb_str(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (!is_shown(i, n, summarize)) {
            add_element(b, " ...", &count, per_line, indent);
            i = n - PRINT_EDGE; /* jump over the middle */
        }
        char text[80];
        format_padded(f, row[i], text);
        add_element(b, text, &count, per_line, indent);
    }
    sb_str(b, "]");
}

/* The format is chosen from the values that will be shown: all of them, or
 * only the edges when the tensor is summarised. */
static number_format format_for(const tensor *t, const float *vals, int summarize)
{
    if (!summarize)
        return choose_format(vals, t->numel);
    int64_t rows = t->ndim == 2 ? t->shape[0] : 1;
    int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
    /* At most 2 * PRINT_EDGE shown along each dimension. */
    float shown[4 * PRINT_EDGE * PRINT_EDGE];
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (t->ndim == 2 && !is_shown(r, rows, 1))
            continue;
        for (int64_t c = 0; c < cols; c++)
            if (is_shown(c, cols, 1))
                shown[n++] = vals[r * cols + c];
    }
    return choose_format(shown, n);
}

/* Python's str(float): the shortest digits that read back as the same
 * double, positional between 1e-4 and 1e16, scientific outside. */
static void python_float_str(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    if (v == 0.0) {
        snprintf(out, cap, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    char sci[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    /* sci is "-d.ddde+XX": pull out the sign, the digits and the exponent. */
    const char *s = sci;
    int negative = *s == '-';
    if (negative)
        s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(s + 1);

    sbuf b = {0};
    if (negative)
        sb_str(&b, "-");
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            sb_str(&b, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                sb_str(&b, "0");
            sb_str(&b, digits);
        } else {
            for (int i = 0; i <= exp10; i++)
                sb_add(&b, i < nd ? &digits[i] : "0", 1);
            sb_str(&b, ".");
            sb_str(&b, nd > exp10 + 1 ? digits + exp10 + 1 : "0");
        }
    } else {
        sb_add(&b, digits, 1);
        if (nd > 1) {
            sb_str(&b, ".");
            sb_str(&b, digits + 1);
        }
        sb_printf(&b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(out, cap, "%s", b.s);
    free(b.s);
}

static void keep_string(tensor *t, sbuf *b)
{
    free(t->str);
    t->str = b->s;
}

const char *tensor_str(tensor *t)
{
    static const char prefix[] = "tensor(";
    const int indent = (int)sizeof prefix - 1;
    sbuf b = {0};
    sb_str(&b, prefix);

    float *vals = host_buffer(t->numel);
    tensor_to_host(t, vals);
    int summarize = t->numel > PRINT_THRESHOLD;

    if (t->numel == 0) {
        sb_str(&b, "[]");
    } else if (t->ndim == 1) {
        number_format f = format_for(t, vals, summarize);
        format_row(&b, vals, t->numel, summarize, &f, indent);
    } else {
        /* A matrix: one row per line, each row indented under the first. */
        number_format f = format_for(t, vals, summarize);
        int64_t rows = t->shape[0], cols = t->shape[1];
        sb_str(&b, "[");
        for (int64_t r = 0; r < rows; r++) {
            if (r > 0) {
                sb_str(&b, ",\n");
                sb_spaces(&b, indent + 1);
            }
            if (!is_shown(r, rows, summarize)) {
                sb_str(&b, "...,\n");
                sb_spaces(&b, indent + 1);
                r = rows - PRINT_EDGE; /* jump over the middle */
            }
            format_row(&b, vals + r * cols, cols, summarize, &f, indent + 1);
        }
        sb_str(&b, "]");
    }
    free(vals);

    /* Suffixes, wrapped onto their own line the way torch decides it (its
     * estimate of the last line's length included). */
    char suffixes[2][64];
    int nsuffix = 0;
    char dev[32];
    snprintf(suffixes[nsuffix++], 64, "device='%s'", device_name(t->device, dev));
    if (t->numel == 0 && t->ndim == 2)
        snprintf(suffixes[nsuffix++], 64, "size=(%" PRId64 ", %" PRId64 ")", t->shape[0],
                 t->shape[1]);
    const char *nl = strrchr(b.s, '\n');
    long last_line = (long)b.len - (nl ? (long)(nl - b.s) : -1) + 1;
    for (int i = 0; i < nsuffix; i++) {
        long len = (long)strlen(suffixes[i]);
        if (last_line + len + 2 > PRINT_LINEWIDTH) {
            sb_str(&b, ",\n");
            sb_spaces(&b, indent);
            last_line = indent + len;
        } else {
            sb_str(&b, ", ");
            last_line += len + 2;
        }
        sb_str(&b, suffixes[i]);
    }
    sb_str(&b, ")");
    keep_string(t, &b);
    return t->str;
}

/* "1024x1024[-0.0239...]": the shape, then the first element rounded to 4
 * decimals and spelled as Python would (round(x, 4), then str()). */
const char *summarize(tensor *t)
{
    sbuf b = {0};
    sb_printf(&b, "%" PRId64, t->shape[0]);
    if (t->ndim == 2)
        sb_printf(&b, "x%" PRId64, t->shape[1]);
    if (t->numel == 0) {
        sb_str(&b, "[]");
    } else {
        /* Round to 4 decimals exactly (printf rounds the exact binary value,
         * ties to even, as Python's round does), read back, print shortest. */
        char fixed[64], text[64];
        double first = item(t, 0);
        snprintf(fixed, sizeof fixed, "%.4f", first);
        python_float_str(strtod(fixed, NULL), text, sizeof text);
        sb_printf(&b, "[%s...]", text);
    }
    keep_string(t, &b);
    return t->str;
}
