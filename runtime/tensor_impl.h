/*
 * tensor_impl.h: what tensor.c (host side) asks of tensor_cuda.cu (device
 * side). Not for lectures.
 *
 * tensor.c owns the tensor structs, shapes and checks; it calls these only for
 * tensors whose device is >= 0, after checking shapes. Pointers are device
 * pointers on `device` unless said otherwise. Every function makes `device`
 * current first (cudaSetDevice), so a process may hold tensors on several
 * GPUs. All work goes to the default stream, in order: nothing here waits for
 * the GPU except the copies to the host and lx_cuda_sumsq, which return values.
 *
 * Without LECTERN_CUDA (a CPU-only build) these are stubs that stop with an
 * error; tensor.c refuses device tensors before any could be reached.
 */
#ifndef LECTERN_TENSOR_IMPL_H
#define LECTERN_TENSOR_IMPL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tensor.c, for tensor_print.c: "cpu" or "cuda:N" into buf; a host buffer of
 * n floats (NULL for 0; out of memory stops the lecture). */
const char *lx_device_name(int device, char buf[32]);
float *lx_host_buffer(int64_t n);

#ifdef LECTERN_CUDA

/* 1 once this process has put anything on a GPU (then device_synchronize()
 * has something to wait for). */
int lx_cuda_in_use(void);

float *lx_cuda_alloc(int device, size_t bytes);
void lx_cuda_free(int device, float *p);
void lx_cuda_zero(int device, float *p, size_t bytes);

/* Copies between any two places; a device of -1 means host memory. */
void lx_cuda_copy(float *dst, int dst_device, const float *src, int src_device, size_t bytes);

/* `height` rows of `width` bytes from src (rows `spitch` bytes apart) to dst
 * (rows `dpitch` bytes apart), both on `device`: a column block of a
 * row-major matrix. */
void lx_cuda_copy_2d(int device, float *dst, size_t dpitch, const float *src, size_t spitch,
                     size_t width, size_t height);

/* x += s */
void lx_cuda_add_scalar(int device, float *x, int64_t n, float s);
/* x *= s (cublasSscal) */
void lx_cuda_scale(int device, float *x, int n, float s);
/* y += alpha * x (cublasSaxpy) */
void lx_cuda_axpy(int device, float *y, const float *x, int n, float alpha);
/* sum of x[i]^2 (cublasSdot), returned to the host */
float lx_cuda_sumsq(int device, const float *x, int n);
/* x[i] = v */
void lx_cuda_fill(int device, float *x, int64_t n, float v);
/* sum of x[i], added in double, returned to the host */
double lx_cuda_sum(int device, const float *x, int64_t n);

/* Row-major C (m x n) = alpha * op(A) op(B) + beta * C, with op(A) m x k and
 * op(B) k x n; lda, ldb, ldc are the row lengths of A, B, C as stored. The
 * same arguments as cblas_sgemm(CblasRowMajor, ...). */
void lx_cuda_sgemm(int device, int trans_a, int trans_b, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Normals number first .. first + n - 1 of `seed` (philox.h) into x[0 .. n),
 * made on the GPU: the same floats as lx_normals() on the host. */
void lx_cuda_randn(int device, float *x, int64_t n, uint64_t seed, uint64_t first);

void lx_cuda_gelu(int device, float *y, const float *x, int64_t n);
void lx_cuda_gelu_backward(int device, float *dx, const float *x, const float *dy, int64_t n);

/* One AdamW step on n elements. The scalars are computed once on the host
 * (tensor.c, adamw_step): decay = 1 - lr * weight_decay,
 * step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t). */
void lx_cuda_adamw(int device, float *param, float *m, float *v, const float *grad, int64_t n,
                   float beta1, float beta2, float eps, float decay, float step_size,
                   float bias2_sqrt);

#else /* !LECTERN_CUDA */

/* A CPU-only build: tensor.c refuses every device >= 0 when a tensor is made,
 * so none of these is ever reached; they exist so that tensor.c reads the
 * same in both builds. Each stops with the same clear error. */
void lx_tensor_no_cuda(void) __attribute__((noreturn));

static inline int lx_cuda_in_use(void) { return 0; }
static inline float *lx_cuda_alloc(int device, size_t bytes) { lx_tensor_no_cuda(); }
static inline void lx_cuda_free(int device, float *p) { lx_tensor_no_cuda(); }
static inline void lx_cuda_zero(int device, float *p, size_t bytes) { lx_tensor_no_cuda(); }
static inline void lx_cuda_copy(float *dst, int dst_device, const float *src, int src_device,
                                size_t bytes) { lx_tensor_no_cuda(); }
static inline void lx_cuda_copy_2d(int device, float *dst, size_t dpitch, const float *src,
                                   size_t spitch, size_t width, size_t height) { lx_tensor_no_cuda(); }
static inline void lx_cuda_add_scalar(int device, float *x, int64_t n, float s) { lx_tensor_no_cuda(); }
static inline void lx_cuda_scale(int device, float *x, int n, float s) { lx_tensor_no_cuda(); }
static inline void lx_cuda_axpy(int device, float *y, const float *x, int n, float alpha) { lx_tensor_no_cuda(); }
static inline float lx_cuda_sumsq(int device, const float *x, int n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_fill(int device, float *x, int64_t n, float v) { lx_tensor_no_cuda(); }
static inline double lx_cuda_sum(int device, const float *x, int64_t n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_sgemm(int device, int trans_a, int trans_b, int m, int n, int k,
                                 float alpha, const float *a, int lda, const float *b, int ldb,
                                 float beta, float *c, int ldc) { lx_tensor_no_cuda(); }
static inline void lx_cuda_randn(int device, float *x, int64_t n, uint64_t seed, uint64_t first) { lx_tensor_no_cuda(); }
static inline void lx_cuda_gelu(int device, float *y, const float *x, int64_t n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_gelu_backward(int device, float *dx, const float *x, const float *dy,
                                         int64_t n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_adamw(int device, float *param, float *m, float *v, const float *grad,
                                 int64_t n, float beta1, float beta2, float eps, float decay,
                                 float step_size, float bias2_sqrt) { lx_tensor_no_cuda(); }

#endif /* LECTERN_CUDA */

#ifdef __cplusplus
}
#endif

#endif /* LECTERN_TENSOR_IMPL_H */
