/*
 * tensor.c: small tensors on the host or on a GPU: float32, or bf16, fp16,
 * fp8 made by to_dtype (their conversions: dtype.c).
 *
 * A tensor is 1-D or 2-D, row-major, float32. Its data lives on the host
 * (device -1) or on cuda:N. This file owns the structs, checks shapes and
 * devices, and does the host work; every operation on a device tensor is
 * handed to tensor_cuda.cu (through tensor/tensor.h), so each function below
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

#include "trace/trace.h"
#include "lectern.h"
#include "tensor/philox.h"
#include "tensor/tensor.h"

/* ------------------------------------------------------------------ */
/* Devices and shapes                                                  */
/* ------------------------------------------------------------------ */

static int on_gpu(const tensor *t) { return t->device >= 0; }

/* Every tensor is made through here, so a device that does not exist is
 * caught where the lecture asks for it. */
static void check_device(int device) {
    if (device < -1) lx_fatal("device %d does not exist: use -1 for the CPU or N >= 0 for cuda:N", device);
    if (device < 0) return;
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

/* "128x1024" (1-D: "1024"), for messages (tensor.h). */
lx_shape_text lx_shape_of(const tensor *t) {
    lx_shape_text out;
    if (t->ndim == 1) snprintf(out.s, sizeof out.s, "%" PRId64, t->shape[0]);
    else snprintf(out.s, sizeof out.s, "%" PRId64 "x%" PRId64, t->shape[0], t->shape[1]);
    return out;
}

static int same_shape(const tensor *a, const tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static void check_same_shape(const char *op, const tensor *a, const tensor *b) {
    if (!same_shape(a, b)) lx_fatal("%s: shapes differ: %s and %s", op, lx_shape_of(a).s, lx_shape_of(b).s);
}

const char *lx_device_name(int device, char buf[32]) {
    if (device < 0) snprintf(buf, 32, "cpu");
    else snprintf(buf, 32, "cuda:%d", device);
    return buf;
}

static void check_same_device(const char *op, const tensor *a, const tensor *b) {
    char da[32], db[32];
    if (a->device != b->device)
        lx_fatal("%s: tensors on different devices (%s and %s): move one with to_device()", op,
                 lx_device_name(a->device, da), lx_device_name(b->device, db));
}

static void check_2d(const char *op, const tensor *t) {
    if (t->ndim != 2) lx_fatal("%s: needs a 2-D tensor, got shape %s", op, lx_shape_of(t).s);
}

/* A NULL where a tensor (or buffer) belongs: named, with the lecture line,
 * rather than a segfault somewhere inside. */
#define NEED(p, op)                                   \
    do {                                              \
        if (!(p)) lx_fatal("%s: %s is NULL", op, #p); \
    } while (0)

/* The same for a tensor, which must also still be alive (not freed):
 * tensor_track.c names a use after free. */
#define NEED_T(p, op)             \
    do {                          \
        NEED(p, op);              \
        lx_tensor_check((p), op); \
    } while (0)

/* The same, for an operation that reads the tensor's values (one a request
 * may still be writing: an error) or changes them (one a request still uses:
 * an error). tensor_track.c names the request and its line. */
#define NEED_R(p, op)            \
    do {                         \
        NEED(p, op);             \
        lx_tensor_read((p), op); \
    } while (0)
#define NEED_W(p, op)             \
    do {                          \
        NEED(p, op);              \
        lx_tensor_write((p), op); \
    } while (0)

/* BLAS counts in int: refuse (rather than wrap) anything past 2^31 - 1. */
static int blas_int(const char *op, int64_t n) {
    if (n > INT_MAX) lx_fatal("%s: %" PRId64 " is more than BLAS can index (%d)", op, n, INT_MAX);
    return (int)n;
}

static size_t bytes_of(const tensor *t) { return (size_t)t->numel * dtype_size(t->dt); }

dtype tensor_dtype(const tensor *t) {
    NEED_T(t, "tensor_dtype");
    return t->dt;
}

/* The short names the messages use: "bf16", "fp8 e4m3". */
static const char *short_name(dtype d) {
    static const char *names[] = {"fp32", "bf16", "fp16", "fp8 e4m3", "fp8 e5m2"};
    return names[d];
}

/* An operation that computes on fp32 alone (gelu): any other dtype is
 * refused at the lecture's line, naming the conversion that makes it work. */
static void need_f32(const char *op, const char *name, const tensor *t) {
    if (t->dt != DTYPE_F32)
        lx_fatal("%s: %s is %s; to_dtype(%s, DTYPE_F32) first (%s computes in fp32 only)", op, name, short_name(t->dt),
                 name, op);
}

/* ------------------------------------------------------------------ */
/* Making and freeing                                                  */
/* ------------------------------------------------------------------ */

/* A new tensor of the given shape and dtype with uninitialised data. ndim
 * is 1 (rows elements) or 2 (rows x cols). Its storage is at t->raw; t->data
 * points there too for fp32 and is NULL otherwise (lectern.h says why). */
static tensor *new_tensor_of(int ndim, int64_t rows, int64_t cols, int device, dtype d) {
    if (rows < 0 || cols < 0) lx_fatal("a tensor cannot have a negative size (%" PRId64 ", %" PRId64 ")", rows, cols);
    if (ndim == 2 && cols > 0 && rows > INT64_MAX / 4 / cols)
        lx_fatal("a %" PRId64 "x%" PRId64 " tensor is too large", rows, cols);
    check_device(device);

    tensor *t = lx_tensor_alloc();
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = ndim == 2 ? cols : 0;
    t->numel = ndim == 2 ? rows * cols : rows;
    t->device = device;
    t->owns_data = 1;
    t->dt = d;
    if (t->numel == 0) return t; /* data stays NULL: nothing to point at */
    float *p;
    if (on_gpu(t)) {
        p = lx_cuda_alloc(device, bytes_of(t));
    } else {
        /* 64-byte aligned (a cache line, and what AVX-512 loads like best),
         * from the blocks earlier tensors freed where one fits (host_pool.c). */
        p = lx_host_alloc(bytes_of(t));
        if (!p) lx_fatal("out of memory for a %s tensor (%zu bytes)", lx_shape_of(t).s, bytes_of(t));
    }
    t->raw = p;
    t->data = d == DTYPE_F32 ? p : NULL;
    return t;
}

static tensor *new_tensor(int ndim, int64_t rows, int64_t cols, int device) {
    return new_tensor_of(ndim, rows, cols, device, DTYPE_F32);
}

/* Same shape, device and dtype. */
static tensor *new_like(const tensor *t) { return new_tensor_of(t->ndim, t->shape[0], t->shape[1], t->device, t->dt); }

tensor *empty(int64_t rows, int64_t cols, int device) { return new_tensor(cols == 0 ? 1 : 2, rows, cols, device); }

tensor *zeros(int64_t rows, int64_t cols, int device) {
    tensor *t = empty(rows, cols, device);
    if (t->numel == 0) return t;
    if (on_gpu(t)) lx_cuda_zero(t->device, t->raw, bytes_of(t));
    else memset(t->raw, 0, bytes_of(t));
    return t;
}

/* Host values into a tensor's storage, wherever it lives. */
static void fill_from_host(tensor *t, const float *values) {
    if (t->numel == 0) return;
    if (on_gpu(t)) lx_cuda_copy(t->data, t->device, values, -1, bytes_of(t));
    else memcpy(t->data, values, bytes_of(t));
}

tensor *tensor_from(const float *values, int64_t rows, int64_t cols, int device) {
    tensor *t = empty(rows, cols, device);
    if (!values && t->numel > 0) lx_fatal("tensor_from: values is NULL (for %" PRId64 " numbers)", t->numel);
    fill_from_host(t, values);
    return t;
}

/* A host buffer of n floats (NULL for n == 0); the caller frees it. */
float *lx_host_buffer(int64_t n) {
    if (n == 0) return NULL;
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) lx_fatal("out of memory for %" PRId64 " floats", n);
    return p;
}

/* Small and made once: built on the host and copied. */
tensor *arange(int64_t n, int device) {
    if (n < 0) lx_fatal("arange: n must be >= 0, got %" PRId64, n);
    float *values = lx_host_buffer(n);
    for (int64_t i = 0; i < n; i++)
        values[i] = (float)i;
    tensor *t = tensor_from(values, n, 0, device);
    free(values);
    return t;
}

/* ------------------------------------------------------------------ */
/* Random numbers                                                      */
/* ------------------------------------------------------------------ */

/*
 * randn gives the same numbers whatever device the tensor lands on, so that
 * a run on GPUs and a run on CPUs train the same model; and it makes them
 * where the tensor lives, so a large tensor on a GPU costs a kernel launch,
 * not minutes of host work and a copy.
 *
 * The generator is counter-based (runtime/tensor/philox.h): normal number i of a
 * seed is a pure function of (seed, i), computed by the same code on the host
 * and in the GPU kernel. The state is therefore just the seed and how many
 * normals have been drawn since manual_seed(): randn(3) then randn(3) gives
 * the numbers of randn(6).
 */
static uint64_t rng_seed;  /* a fresh process is seeded 0, like torch */
static uint64_t rng_drawn; /* normals drawn since the seed was set */

void manual_seed(uint64_t seed) {
    rng_seed = seed;
    rng_drawn = 0;
}

/* A pool rank starts each spawn as a fresh process would: seed 0, nothing
 * drawn. */
void lx_tensor_reset_rng(void) {
    rng_seed = 0;
    rng_drawn = 0;
}

tensor *randn(int64_t rows, int64_t cols, int device) {
    tensor *t = empty(rows, cols, device);
    if (t->numel > 0) {
        if (on_gpu(t)) lx_cuda_randn(t->device, t->data, t->numel, rng_seed, rng_drawn);
        else lx_normals(t->data, t->numel, rng_seed, rng_drawn);
    }
    rng_drawn += (uint64_t)t->numel;
    return t;
}

/* ------------------------------------------------------------------ */
/* Copies and views                                                    */
/* ------------------------------------------------------------------ */

/* A tensor's bytes, wherever it lives, into host memory (bytes_of(t)). */
static void raw_to_host(const tensor *t, void *out) {
    if (on_gpu(t)) lx_cuda_copy(out, -1, t->raw, t->device, bytes_of(t));
    else memcpy(out, t->raw, bytes_of(t));
}

static void *host_bytes(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) lx_fatal("out of memory for %zu bytes", n);
    return p;
}

/* A host copy of t's bytes (to free). */
static void *raw_on_host(const tensor *t) {
    void *p = host_bytes(bytes_of(t));
    raw_to_host(t, p);
    return p;
}

/* Between dtypes the values are converted on the host (the source widened
 * exactly to fp32, then each times scale rounded once into dst's dtype)
 * and the result copied to dst's device. */
static void convert_into(tensor *dst, const tensor *src, double scale) {
    if (!on_gpu(src) && !on_gpu(dst) && (src->dt == DTYPE_F32 || dst->dt == DTYPE_F32)) {
        /* Both on the host, one of them fp32: one pass from one storage into
         * the other, no copies in between (the same roundings: widening is
         * exact, then each value times scale is rounded once). */
        if (src->dt == DTYPE_F32) lx_dtype_narrow(dst->dt, dst->raw, src->data, dst->numel, scale);
        else lx_dtype_widen(src->dt, dst->data, src->raw, dst->numel, scale);
        return;
    }
    float *wide = lx_host_buffer(src->numel);
    void *bytes = raw_on_host(src);
    lx_dtype_widen(src->dt, wide, bytes, src->numel, 1.0);
    free(bytes);
    void *narrow = host_bytes(bytes_of(dst));
    lx_dtype_narrow(dst->dt, narrow, wide, dst->numel, scale);
    free(wide);
    if (on_gpu(dst)) lx_cuda_copy(dst->raw, dst->device, narrow, -1, bytes_of(dst));
    else memcpy(dst->raw, narrow, bytes_of(dst));
    free(narrow);
}

void tensor_copy(tensor *dst, const tensor *src) {
    NEED_W(dst, "tensor_copy");
    NEED_R(src, "tensor_copy");
    check_same_shape("tensor_copy", dst, src);
    if (src->numel == 0 || (dst->raw == src->raw && dst->dt == src->dt)) return;
    lx_twin_work(0, (double)bytes_of(src) + (double)bytes_of(dst));
    if (dst->dt != src->dt) convert_into(dst, src, 1.0);
    else if (!on_gpu(dst) && !on_gpu(src)) memmove(dst->raw, src->raw, bytes_of(src));
    else lx_cuda_copy(dst->raw, dst->device, src->raw, src->device, bytes_of(src));
}

tensor *to_device(const tensor *t, int device) {
    NEED_R(t, "to_device");
    tensor *out = new_tensor_of(t->ndim, t->shape[0], t->shape[1], device, t->dt);
    tensor_copy(out, t);
    return out;
}

tensor *to_dtype_scaled(const tensor *t, dtype d, double scale) {
    NEED_R(t, "to_dtype_scaled");
    dtype_size(d); /* a dtype that does not exist stops here, named */
    if (!isfinite(scale) || scale == 0.0) lx_fatal("to_dtype_scaled: scale is %g; it must be finite and not 0", scale);
    tensor *out = new_tensor_of(t->ndim, t->shape[0], t->shape[1], t->device, d);
    if (t->numel) {
        lx_twin_work((double)t->numel, (double)bytes_of(t) + (double)bytes_of(out));
        convert_into(out, t, scale);
    }
    return out;
}

tensor *to_dtype(const tensor *t, dtype d) {
    NEED_R(t, "to_dtype");
    return to_dtype_scaled(t, d, 1.0);
}

void tensor_to_host(const tensor *t, float *out) {
    NEED_R(t, "tensor_to_host");
    if (t->numel > 0) NEED(out, "tensor_to_host");
    if (t->numel == 0) return;
    if (t->dt == DTYPE_F32) {
        raw_to_host(t, out);
        return;
    }
    void *bytes = raw_on_host(t);
    lx_dtype_widen(t->dt, out, bytes, t->numel, 1.0);
    free(bytes);
}

/* Row-major, so rows [start, end) are one contiguous run: the view is just a
 * pointer into the same storage, and writes through it reach the original.
 * The original must outlive the view. */
tensor *row_slice(tensor *t, int64_t start, int64_t end) {
    NEED_T(t, "row_slice");
    if (start < 0 || end < start || end > t->shape[0])
        lx_fatal("row_slice: rows [%" PRId64 ", %" PRId64 ") are not within the %" PRId64 " rows of a %s tensor", start,
                 end, t->shape[0], lx_shape_of(t).s);
    tensor *v = lx_tensor_alloc();
    *v = *t;
    int64_t row = t->ndim == 2 ? t->shape[1] : 1;
    v->shape[0] = end - start;
    v->numel = (end - start) * row;
    v->raw = v->numel ? (char *)t->raw + start * row * (int64_t)dtype_size(t->dt) : NULL;
    v->data = t->dt == DTYPE_F32 ? v->raw : NULL;
    v->owns_data = 0;
    v->str = NULL;
    return v;
}

/* A view is a new header over the same storage: it never owns it, writes
 * through it reach the original, and the original must outlive it. */
static tensor *view_of(tensor *t, int64_t offset, int ndim, int64_t rows, int64_t cols) {
    tensor *v = lx_tensor_alloc();
    *v = *t;
    v->ndim = ndim;
    v->shape[0] = rows;
    v->shape[1] = ndim == 2 ? cols : 0;
    v->numel = ndim == 2 ? rows * cols : rows;
    v->raw = v->numel ? (char *)t->raw + offset * (int64_t)dtype_size(t->dt) : NULL;
    v->data = t->dt == DTYPE_F32 ? v->raw : NULL;
    v->owns_data = 0;
    v->str = NULL;
    return v;
}

/* Any run of numel consecutive elements is a tensor of its own in
 * row-major storage: this is how one flat buffer holds many parameters
 * (a DDP bucket, a ZeRO shard) and each is still used with its shape. */
tensor *tensor_view(tensor *t, int64_t offset, int64_t rows, int64_t cols) {
    NEED_T(t, "tensor_view");
    if (rows < 0 || cols < 0) lx_fatal("tensor_view: a negative size (%" PRId64 ", %" PRId64 ")", rows, cols);
    int64_t n = cols == 0 ? rows : rows * cols;
    if (cols > 0 && rows > INT64_MAX / cols) lx_fatal("tensor_view: %" PRId64 "x%" PRId64 " is too large", rows, cols);
    if (offset < 0 || offset > t->numel || n > t->numel - offset)
        lx_fatal("tensor_view: elements [%" PRId64 ", %" PRId64 ") are not within the %" PRId64
                 " elements of a %s tensor",
                 offset, offset + n, t->numel, lx_shape_of(t).s);
    return view_of(t, offset, cols == 0 ? 1 : 2, rows, cols);
}

tensor *reshape(tensor *t, int64_t rows, int64_t cols) {
    NEED_T(t, "reshape");
    int64_t n = cols == 0 ? rows : (rows >= 0 && cols > 0 && rows <= INT64_MAX / cols ? rows * cols : -1);
    if (rows < 0 || cols < 0 || n != t->numel)
        lx_fatal("reshape: a %s tensor (%" PRId64 " elements) cannot be %" PRId64 "%s%.0" PRId64 " (%" PRId64
                 " elements)",
                 lx_shape_of(t).s, t->numel, rows, cols ? "x" : "", cols, n);
    return view_of(t, 0, cols == 0 ? 1 : 2, rows, cols);
}

/* height rows of width elements of `size` bytes between two row-major
 * matrices on one device; the pitches are the full row lengths of each. */
static void copy_block(int device, size_t size, void *dst, int64_t dst_row, const void *src, int64_t src_row,
                       int64_t width, int64_t height) {
    if (width == 0 || height == 0) return;
    size_t w = (size_t)width * size;
    if (device >= 0) {
        lx_cuda_copy_2d(device, dst, (size_t)dst_row * size, src, (size_t)src_row * size, w, (size_t)height);
        return;
    }
    for (int64_t r = 0; r < height; r++)
        memcpy((char *)dst + (size_t)(r * dst_row) * size, (const char *)src + (size_t)(r * src_row) * size, w);
}

/* The address of element i of t's storage. */
static void *element(const tensor *t, int64_t i) { return (char *)t->raw + (size_t)i * dtype_size(t->dt); }

/* Columns are not contiguous in row-major storage, so this is a copy. */
tensor *col_slice(const tensor *t, int64_t start, int64_t end) {
    NEED_R(t, "col_slice");
    check_2d("col_slice", t);
    if (start < 0 || end < start || end > t->shape[1])
        lx_fatal("col_slice: columns [%" PRId64 ", %" PRId64 ") are not within the %" PRId64 " columns of a %s tensor",
                 start, end, t->shape[1], lx_shape_of(t).s);
    tensor *out = new_tensor_of(2, t->shape[0], end - start, t->device, t->dt);
    if (t->numel)
        copy_block(t->device, dtype_size(t->dt), out->raw, end - start, element(t, start), t->shape[1], end - start,
                   t->shape[0]);
    return out;
}

tensor *cat_cols(tensor *const *parts, int n) {
    NEED(parts, "cat_cols");
    if (n < 1) lx_fatal("cat_cols: needs at least one tensor, got %d", n);
    int64_t cols = 0;
    for (int i = 0; i < n; i++) {
        if (!parts[i]) lx_fatal("cat_cols: part %d is NULL", i);
        lx_tensor_read(parts[i], "cat_cols");
        check_2d("cat_cols", parts[i]);
        check_same_device("cat_cols", parts[0], parts[i]);
        if (parts[i]->dt != parts[0]->dt)
            lx_fatal("cat_cols: part %d is %s but part 0 is %s: convert one with to_dtype()", i,
                     short_name(parts[i]->dt), short_name(parts[0]->dt));
        if (parts[i]->shape[0] != parts[0]->shape[0])
            lx_fatal("cat_cols: part %d is %s but part 0 is %s: the row counts must match", i, lx_shape_of(parts[i]).s,
                     lx_shape_of(parts[0]).s);
        cols += parts[i]->shape[1];
    }
    tensor *out = new_tensor_of(2, parts[0]->shape[0], cols, parts[0]->device, parts[0]->dt);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i]->numel)
            copy_block(out->device, dtype_size(out->dt), element(out, at), cols, parts[i]->raw, parts[i]->shape[1],
                       parts[i]->shape[1], out->shape[0]);
        at += parts[i]->shape[1];
    }
    return out;
}

float tensor_item(const tensor *t, int64_t i) {
    NEED_R(t, "tensor_item");
    if (i < 0 || i >= t->numel)
        lx_fatal("item: index %" PRId64 " is outside a tensor of %" PRId64 " elements", i, t->numel);
    unsigned char bits[4];
    if (on_gpu(t)) lx_cuda_copy((float *)bits, -1, element(t, i), t->device, dtype_size(t->dt));
    else memcpy(bits, element(t, i), dtype_size(t->dt));
    float v;
    lx_dtype_widen(t->dt, &v, bits, 1, 1.0);
    return v;
}

/* Compared on the host in double, wherever the two tensors live. */
double max_abs_diff(const tensor *a, const tensor *b) {
    NEED_R(a, "max_abs_diff");
    NEED_R(b, "max_abs_diff");
    check_same_shape("max_abs_diff", a, b);
    float *x = lx_host_buffer(a->numel), *y = lx_host_buffer(b->numel);
    tensor_to_host(a, x);
    tensor_to_host(b, y);
    double worst = 0.0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (isnan(d)) {
            worst = NAN;
            break;
        }
        if (d > worst) worst = d;
    }
    free(x);
    free(y);
    return worst;
}

/* ------------------------------------------------------------------ */
/* Arithmetic                                                          */
/* ------------------------------------------------------------------ */

/*
 * Low precision: an operation on a bf16, fp16 or fp8 tensor runs on an fp32
 * copy of it (exact: every value of those dtypes is an fp32 value), through
 * the fp32 code below, and the result is rounded once, on the way back
 * (tensor_copy between dtypes). What an fp32 result would be, rounded: the
 * rule of mixed-precision arithmetic, and one code path for every device.
 */
static tensor *widened(const tensor *t) { return t->dt == DTYPE_F32 ? NULL : to_dtype(t, DTYPE_F32); }

static void store_rounded(tensor *t, tensor *wide) {
    tensor_copy(t, wide);
    tensor_free(wide);
}

void add_scalar_(tensor *t, float s) {
    NEED_W(t, "add_scalar_");
    tensor *w = widened(t);
    if (w) {
        add_scalar_(w, s);
        store_rounded(t, w);
        return;
    }
    lx_twin_work((double)t->numel, 2.0 * (double)bytes_of(t));
    if (on_gpu(t)) {
        lx_cuda_add_scalar(t->device, t->data, t->numel, s);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] += s;
}

void scale_(tensor *t, float s) {
    NEED_W(t, "scale_");
    tensor *w = widened(t);
    if (w) {
        scale_(w, s);
        store_rounded(t, w);
        return;
    }
    int n = blas_int("scale_", t->numel);
    if (n == 0) return;
    lx_twin_work((double)n, 2.0 * (double)bytes_of(t));
    if (on_gpu(t)) lx_cuda_scale(t->device, t->data, n, s);
    else cblas_sscal(n, s, t->data, 1);
}

void add_(tensor *t, const tensor *u) {
    NEED_W(t, "add_");
    NEED_R(u, "add_");
    check_same_shape("add_", t, u);
    check_same_device("add_", t, u);
    if (t->dt != DTYPE_F32 || u->dt != DTYPE_F32) {
        tensor *tw = widened(t), *uw = widened(u);
        add_(tw ? tw : t, uw ? uw : u);
        tensor_free(uw);
        if (tw) store_rounded(t, tw);
        return;
    }
    int n = blas_int("add_", t->numel);
    if (n == 0) return;
    lx_twin_work((double)n, 3.0 * (double)bytes_of(t));
    if (on_gpu(t)) lx_cuda_axpy(t->device, t->data, u->data, n, 1.0f);
    else cblas_saxpy(n, 1.0f, u->data, 1, t->data, 1);
}

void sub_(tensor *t, const tensor *u) {
    NEED_W(t, "sub_");
    NEED_R(u, "sub_");
    check_same_shape("sub_", t, u);
    check_same_device("sub_", t, u);
    if (t->dt != DTYPE_F32 || u->dt != DTYPE_F32) {
        tensor *tw = widened(t), *uw = widened(u);
        sub_(tw ? tw : t, uw ? uw : u);
        tensor_free(uw);
        if (tw) store_rounded(t, tw);
        return;
    }
    int n = blas_int("sub_", t->numel);
    if (n == 0) return;
    lx_twin_work((double)n, 3.0 * (double)bytes_of(t));
    if (on_gpu(t)) lx_cuda_axpy(t->device, t->data, u->data, n, -1.0f);
    else cblas_saxpy(n, -1.0f, u->data, 1, t->data, 1);
}

void fill_(tensor *t, float value) {
    NEED_W(t, "fill_");
    tensor *w = widened(t);
    if (w) {
        fill_(w, value);
        store_rounded(t, w);
        return;
    }
    lx_twin_work(0, (double)bytes_of(t));
    if (on_gpu(t)) {
        lx_cuda_fill(t->device, t->data, t->numel, value);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = value;
}

/* Added in double on either device, so a sum of 10^7 floats keeps the
 * float's precision instead of losing digits to the running total. */
double tensor_sum(const tensor *t) {
    NEED_R(t, "tensor_sum");
    tensor *w = widened(t);
    if (w) {
        double sum = tensor_sum(w);
        tensor_free(w);
        return sum;
    }
    if (on_gpu(t)) return lx_cuda_sum(t->device, t->data, t->numel);
    double acc = 0.0;
    for (int64_t i = 0; i < t->numel; i++)
        acc += (double)t->data[i];
    return acc;
}

/* sqrt(sum of squares): on the host the squares are added in double
 * (dsdot); on a GPU cublasSdot adds them in float. */
double tensor_norm(const tensor *t) {
    NEED_R(t, "tensor_norm");
    tensor *w = widened(t);
    if (w) {
        double norm = tensor_norm(w);
        tensor_free(w);
        return norm;
    }
    int n = blas_int("tensor_norm", t->numel);
    if (n == 0) return 0.0;
    double sq = on_gpu(t) ? (double)lx_cuda_sumsq(t->device, t->data, n) : cblas_dsdot(n, t->data, 1, t->data, 1);
    return sqrt(sq);
}

/*
 * c = alpha * op(a) op(b) + beta * c, everything row-major, where op(x) is x
 * or its transpose. The transposes are never materialised: BLAS reads the
 * same storage the other way round. The backward pass of y = x W uses both:
 * dW = x^T dy (trans_a) and dx = dy W^T (trans_b).
 */
/*
 * bf16, fp16 and fp8 inputs: each product of two such values is exact in fp32
 * (8 + 8 significant bits at most need 16; fp32 has 24), so an fp32 GEMM of
 * the widened inputs computes the exact products and sums them in fp32, as
 * tensor cores do. On the CPU: widen and call sgemm (Debian's OpenBLAS has no
 * bf16 kernels). On a GPU, bf16 and fp16 go to cublasGemmEx with fp32
 * accumulation; FP8 needs cublasLt's scaled GEMM, which lectern does not
 * call: refused. sizes: m, n, k, lda, ldb, ldc, checked by the caller.
 */
static void matmul_low(tensor *c, const tensor *a, const tensor *b, int trans_a, int trans_b, float alpha, float beta,
                       const int *sizes) {
    if (on_gpu(c)) {
        if (a->dt != DTYPE_BF16 && a->dt != DTYPE_F16)
            lx_fatal("matmul: a and b are %s, which a GPU matmul here does not take: to_dtype(a, DTYPE_BF16) "
                     "(or DTYPE_F32) first",
                     short_name(a->dt));
        lx_cuda_gemm_16(c->device, a->dt == DTYPE_F16, trans_a, trans_b, sizes[0], sizes[1], sizes[2], alpha, a->raw,
                        sizes[3], b->raw, sizes[4], beta, c->data, sizes[5]);
        return;
    }
    tensor *wa = to_dtype(a, DTYPE_F32), *wb = to_dtype(b, DTYPE_F32);
    matmul_into(c, wa, wb, trans_a, trans_b, alpha, beta);
    tensor_free(wa);
    tensor_free(wb);
}

void matmul_into(tensor *c, const tensor *a, const tensor *b, int trans_a, int trans_b, float alpha, float beta) {
    NEED_W(c, "matmul_into");
    NEED_R(a, "matmul_into");
    NEED_R(b, "matmul_into");
    check_2d("matmul", a);
    check_2d("matmul", b);
    check_2d("matmul", c);
    check_same_device("matmul", a, b);
    check_same_device("matmul", a, c);
    if (a->dt != b->dt)
        lx_fatal("matmul: a is %s but b is %s: convert one with to_dtype() so both are the same", short_name(a->dt),
                 short_name(b->dt));
    if (c->dt != DTYPE_F32)
        lx_fatal("matmul_into: c is %s; a matmul's output is fp32 (to_dtype(c, %s) afterwards, if needed)",
                 short_name(c->dt), c->dt == DTYPE_BF16 ? "DTYPE_BF16" : "its dtype");
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = trans_b ? b->shape[1] : b->shape[0];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    if (k != kb || c->shape[0] != m || c->shape[1] != n)
        lx_fatal("matmul: cannot compute op(a) op(b) into c with a %s%s, b %s%s, c %s "
                 "(op(a) is %" PRId64 "x%" PRId64 ", op(b) is %" PRId64 "x%" PRId64 ")",
                 lx_shape_of(a).s, trans_a ? " transposed" : "", lx_shape_of(b).s, trans_b ? " transposed" : "",
                 lx_shape_of(c).s, m, k, kb, n);
    if (c->numel == 0) return;
    /* The replay's work (docs/twin.md): 2mnk FLOPs, each operand read or written once. */
    lx_twin_work(2.0 * (double)m * (double)n * (double)k,
                 (double)(a->numel + b->numel + c->numel * (beta != 0.0f ? 2 : 1)) * sizeof(float));
    /* Leading dimensions are the stored row lengths (at least 1, as BLAS
     * insists even for empty operands). */
    int lda = blas_int("matmul", a->shape[1] > 0 ? a->shape[1] : 1);
    int ldb = blas_int("matmul", b->shape[1] > 0 ? b->shape[1] : 1);
    int ldc = blas_int("matmul", n);
    int im = blas_int("matmul", m), in = blas_int("matmul", n), ik = blas_int("matmul", k);
    if (a->dt != DTYPE_F32) {
        matmul_low(c, a, b, trans_a, trans_b, alpha, beta, (int[]){im, in, ik, lda, ldb, ldc});
        return;
    }
    if (on_gpu(c))
        lx_cuda_sgemm(c->device, trans_a, trans_b, im, in, ik, alpha, a->data, lda, b->data, ldb, beta, c->data, ldc);
    else
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, im, in, ik,
                    alpha, a->data, lda, b->data, ldb, beta, c->data, ldc);
}

tensor *matmul(const tensor *a, const tensor *b) {
    NEED_R(a, "matmul");
    NEED_R(b, "matmul");
    check_2d("matmul", a);
    check_2d("matmul", b);
    if (a->shape[1] != b->shape[0])
        lx_fatal("matmul: shapes %s and %s cannot be multiplied (%" PRId64 " != %" PRId64 ")", lx_shape_of(a).s,
                 lx_shape_of(b).s, a->shape[1], b->shape[0]);
    check_same_device("matmul", a, b);
    if (a->dt != b->dt)
        lx_fatal("matmul: a is %s but b is %s: convert one with to_dtype() so both are the same", short_name(a->dt),
                 short_name(b->dt));
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
 * computed through the logistic function, which is the same thing:
 * 0.5 (1 + tanh(u)) = s = 1 / (1 + exp(-2u)) and 1 - t^2 = 4 s (1 - s), so
 *
 *     gelu(x)  = x s,        gelu'(x) = s + 2 x s (1 - s) du/dx.
 *
 * Why: glibc's tanhf takes longer the larger |u| is, so the same layer cost
 * more on a batch of larger values: lecture_08's first pipeline stage,
 * whose activations are the largest, took 10% longer than the second for
 * the same arithmetic (its GELUs 1.33 and 1.24 ms a micro-batch against
 * 1.17 and 1.00, the matmuls 0.66-0.70 each), and the bubble measured that
 * instead of the schedule. expf takes the same time for every value the
 * lectures meet; where exp(-2u) overflows (x below about -9) s is 0 and
 * both formulas give 0. The kernels in tensor_cuda.cu compute the same.
 */
#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* s = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
static inline float gelu_s(float v) { return 1.0f / (1.0f + expf(-2.0f * GELU_C * (v + GELU_A * v * v * v))); }

tensor *gelu(const tensor *x) {
    NEED_R(x, "gelu");
    need_f32("gelu", "x", x);
    tensor *y = new_like(x);
    lx_twin_work(12.0 * (double)x->numel,
                 2.0 * (double)bytes_of(x)); /* about 12 FLOPs an element (exp counted as one) */
    if (on_gpu(x)) {
        lx_cuda_gelu(x->device, y->data, x->data, x->numel);
        return y;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        float s = gelu_s(v);
        y->data[i] = v * s;
    }
    return y;
}

tensor *gelu_backward(const tensor *x, const tensor *dy) {
    NEED_R(x, "gelu_backward");
    NEED_R(dy, "gelu_backward");
    need_f32("gelu_backward", "x", x);
    need_f32("gelu_backward", "dy", dy);
    check_same_shape("gelu_backward", x, dy);
    check_same_device("gelu_backward", x, dy);
    tensor *dx = new_like(x);
    lx_twin_work(20.0 * (double)x->numel, 3.0 * (double)bytes_of(x)); /* about 20 FLOPs an element */
    if (on_gpu(x)) {
        lx_cuda_gelu_backward(x->device, dx->data, x->data, dy->data, x->numel);
        return dx;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        float s = gelu_s(v);
        float du = GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        dx->data[i] = dy->data[i] * (s + 2.0f * v * s * (1.0f - s) * du);
    }
    return dx;
}

/* mean(x^2): the "loss" of the lecture's toy MLP, whose target is zero. The
 * sum of squares is a dot product of x with itself; on the host dsdot adds
 * in double, so the sum does not drift over 10^5 terms. */
float mse_loss(const tensor *x) {
    NEED_R(x, "mse_loss");
    tensor *w = widened(x);
    if (w) {
        float loss = mse_loss(w);
        tensor_free(w);
        return loss;
    }
    int n = blas_int("mse_loss", x->numel);
    if (n == 0) return NAN; /* the mean of nothing, as torch says too */
    double sum = on_gpu(x) ? (double)lx_cuda_sumsq(x->device, x->data, n) : cblas_dsdot(n, x->data, 1, x->data, 1);
    return (float)(sum / n);
}

/* d mean(x^2) / dx = 2x / numel */
tensor *mse_loss_backward(const tensor *x) {
    NEED_R(x, "mse_loss_backward");
    tensor *dx = new_like(x);
    tensor_copy(dx, x);
    if (x->numel) scale_(dx, (float)(2.0 / (double)x->numel));
    return dx;
}

/* ------------------------------------------------------------------ */
/* AdamW                                                               */
/* ------------------------------------------------------------------ */

/* torch.optim.AdamW's defaults. */
adamw *adamw_new(const tensor *param, float lr) {
    NEED_R(param, "adamw_new");
    adamw *opt = calloc(1, sizeof *opt);
    if (!opt) lx_fatal("out of memory for an optimizer");
    opt->lr = lr;
    opt->beta1 = 0.9f;
    opt->beta2 = 0.999f;
    opt->eps = 1e-8f;
    opt->weight_decay = 0.01f;
    opt->step = 0;
    /* The moments are fp32 whatever param's dtype: their updates are far
     * below bf16's spacing (v moves by 0.001 g^2 a step). */
    opt->m = new_tensor(param->ndim, param->shape[0], param->shape[1], param->device);
    opt->v = new_tensor(param->ndim, param->shape[0], param->shape[1], param->device);
    tensor *zero[2] = {opt->m, opt->v};
    for (int i = 0; i < 2; i++) {
        if (zero[i]->numel == 0) continue;
        if (on_gpu(zero[i])) lx_cuda_zero(zero[i]->device, zero[i]->data, bytes_of(zero[i]));
        else memset(zero[i]->data, 0, bytes_of(zero[i]));
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
void adamw_step(adamw *opt, tensor *param, const tensor *grad) {
    NEED(opt, "adamw_step");
    NEED_W(param, "adamw_step");
    NEED_R(grad, "adamw_step");
    check_same_shape("adamw_step", param, grad);
    check_same_shape("adamw_step", param, opt->m);
    check_same_device("adamw_step", param, grad);
    check_same_device("adamw_step", param, opt->m);
    if (param->dt != DTYPE_F32 || grad->dt != DTYPE_F32) {
        /* The step computed in fp32 and param rounded once: without fp32
         * master weights, an update below half of param's spacing is lost. */
        tensor *pw = widened(param), *gw = widened(grad);
        adamw_step(opt, pw ? pw : param, gw ? gw : grad);
        tensor_free(gw);
        if (pw) store_rounded(param, pw);
        return;
    }
    opt->step++;
    float decay = (float)(1.0 - (double)opt->lr * opt->weight_decay);
    float step_size = (float)(opt->lr / (1.0 - pow(opt->beta1, opt->step)));
    float bias2_sqrt = (float)sqrt(1.0 - pow(opt->beta2, opt->step));
    float beta1 = opt->beta1, beta2 = opt->beta2, eps = opt->eps;
    lx_twin_work(16.0 * (double)param->numel, 7.0 * (double)bytes_of(param)); /* reads p, m, v, g; writes p, m, v */
    if (on_gpu(param)) {
        lx_cuda_adamw(param->device, param->data, opt->m->data, opt->v->data, grad->data, param->numel, beta1, beta2,
                      eps, decay, step_size, bias2_sqrt);
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

void adamw_free(adamw *opt) {
    if (!opt) return;
    tensor_free(opt->m);
    tensor_free(opt->v);
    free(opt);
}
