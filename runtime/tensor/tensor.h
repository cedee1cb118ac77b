/*
 * tensor/tensor.h: the tensor layer's contract. Not for lectures. It sits
 * above the trace layer (whose lx_fatal, steps and stacks it uses) and below
 * the ranks and comm layers (make check-layers).
 *
 * The tensor layer is the public tensor API (tensor.c: host tensors and the
 * checks of every call; tensor_print.c; tensor_check.c: check_close), the
 * device side (tensor_cuda.cu, cublas_lazy.c: cuBLAS loaded on first use),
 * the tracking of every tensor's life (tensor_track.c: tensor_free, leaks,
 * double frees, use after free, tensors a request still uses), randn's
 * generator (philox.h), timing (timing.c: now_seconds, median_of) and the
 * device facts (device.c: gpu_count, device_synchronize). Callers: lectures (lectern.h), the comm layer (the
 * staging copier, lx_tensor_busy/idle/read), the ranks layer (leaks at the
 * end of a spawn, the generator's reset), lecture_main (leaks at exit).
 *
 * Below: what tensor.c (host side) asks of tensor_cuda.cu (device side).
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
#ifndef LECTERN_TENSOR_LAYER_H
#define LECTERN_TENSOR_LAYER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tensor.c, for tensor_print.c: "cpu" or "cuda:N" into buf; a host buffer of
 * n floats (NULL for 0; out of memory stops the lecture). */
const char *lx_device_name(int device, char buf[32]);
float *lx_host_buffer(int64_t n);

/* Host tensors' storage (host_pool.c): 64-byte aligned, NULL when out of
 * memory. A freed block of 64 KiB or more is kept for the next allocation
 * of the same size (not with LECTERN_HOST_POOL=0, nor under ASan). */
float *lx_host_alloc(size_t bytes);
void lx_host_free(float *p, size_t bytes);

#ifdef LECTERN_CUDA

/* 1 once this process has put anything on a GPU (then device_synchronize()
 * has something to wait for). */
int lx_cuda_in_use(void);

float *lx_cuda_alloc(int device, size_t bytes);
void lx_cuda_free(int device, float *p);
/* Loads the runtime's own CUDA kernels now rather than at their first
 * launch (NCCL ranks: tensor_cuda.cu says why). */
void lx_cuda_preload_kernels(int device);
/* 1 when device memory comes from the device's stream-ordered pool
 * (cudaMallocAsync), 0 for plain cudaMalloc (no pools, or LECTERN_CUDA_POOL=0). */
int lx_cuda_pool_in_use(int device);
void lx_cuda_zero(int device, float *p, size_t bytes);

/* Copies between any two places; a device of -1 means host memory. */
void lx_cuda_copy(float *dst, int dst_device, const float *src, int src_device, size_t bytes);

/* `height` rows of `width` bytes from src (rows `spitch` bytes apart) to dst
 * (rows `dpitch` bytes apart), both on `device`: a column block of a
 * row-major matrix. */
void lx_cuda_copy_2d(int device, float *dst, size_t dpitch, const float *src, size_t spitch, size_t width,
                     size_t height);

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
void lx_cuda_sgemm(int device, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc);

/* The same with bf16 (half16 0) or fp16 (half16 1) inputs a and b, fp32 c,
 * fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F). */
void lx_cuda_gemm_16(int device, int half16, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
                     int lda, const void *b, int ldb, float beta, float *c, int ldc);

/* Normals number first .. first + n - 1 of `seed` (philox.h) into x[0 .. n),
 * made on the GPU: the same floats as lx_normals() on the host. */
void lx_cuda_randn(int device, float *x, int64_t n, uint64_t seed, uint64_t first);

void lx_cuda_gelu(int device, float *y, const float *x, int64_t n);
void lx_cuda_gelu_backward(int device, float *dx, const float *x, const float *dy, int64_t n);

/* Keeps `device` busy for `ms` milliseconds: one kernel, queued on the
 * default stream (where every tensor kernel runs), that spins on the GPU's
 * global timer; the host returns at once (model_compute, comm layer). */
void lx_cuda_spin(int device, double ms);

/* One AdamW step on n elements. The scalars are computed once on the host
 * (tensor.c, adamw_step): decay = 1 - lr * weight_decay,
 * step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t). */
void lx_cuda_adamw(int device, float *param, float *m, float *v, const float *grad, int64_t n, float beta1, float beta2,
                   float eps, float decay, float step_size, float bias2_sqrt);

#else /* !LECTERN_CUDA */

/* A CPU-only build: tensor.c refuses every device >= 0 when a tensor is made,
 * so none of these is ever reached; they exist so that tensor.c reads the
 * same in both builds. Each stops with the same clear error (device.c). */
void lx_tensor_no_cuda(void) __attribute__((noreturn));

static inline int lx_cuda_in_use(void) { return 0; }
static inline void lx_cuda_preload_kernels(int device) {}
static inline float *lx_cuda_alloc(int device, size_t bytes) { lx_tensor_no_cuda(); }
static inline void lx_cuda_free(int device, float *p) { lx_tensor_no_cuda(); }
static inline void lx_cuda_zero(int device, float *p, size_t bytes) { lx_tensor_no_cuda(); }
static inline void lx_cuda_copy(float *dst, int dst_device, const float *src, int src_device, size_t bytes) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_copy_2d(int device, float *dst, size_t dpitch, const float *src, size_t spitch, size_t width,
                                   size_t height) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_add_scalar(int device, float *x, int64_t n, float s) { lx_tensor_no_cuda(); }
static inline void lx_cuda_scale(int device, float *x, int n, float s) { lx_tensor_no_cuda(); }
static inline void lx_cuda_axpy(int device, float *y, const float *x, int n, float alpha) { lx_tensor_no_cuda(); }
static inline float lx_cuda_sumsq(int device, const float *x, int n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_fill(int device, float *x, int64_t n, float v) { lx_tensor_no_cuda(); }
static inline double lx_cuda_sum(int device, const float *x, int64_t n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_sgemm(int device, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_gemm_16(int device, int half16, int trans_a, int trans_b, int m, int n, int k, float alpha,
                                   const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_randn(int device, float *x, int64_t n, uint64_t seed, uint64_t first) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_gelu(int device, float *y, const float *x, int64_t n) { lx_tensor_no_cuda(); }
static inline void lx_cuda_gelu_backward(int device, float *dx, const float *x, const float *dy, int64_t n) {
    lx_tensor_no_cuda();
}
static inline void lx_cuda_spin(int device, double ms) { lx_tensor_no_cuda(); }
static inline void lx_cuda_adamw(int device, float *param, float *m, float *v, const float *grad, int64_t n,
                                 float beta1, float beta2, float eps, float decay, float step_size, float bias2_sqrt) {
    lx_tensor_no_cuda();
}

#endif /* LECTERN_CUDA */

/* comm_staged.c: the copies its pipeline needs. On a GPU (tensor_cuda.cu):
 * cudaMemcpyAsync on a "down" (device to host) and an "up" stream, an event
 * per slot and direction. On the host (the test hook): memcpy, and the marks
 * do nothing. Counts are floats. */
typedef struct lx_stage_copier {
    const char *name;
    void (*begin)(void); /* the device work queued so far comes before the copies */
    void (*to_host)(float *host, const float *dev, size_t n);   /* queued on "down" */
    void (*to_device)(float *dev, const float *host, size_t n); /* queued on "up" */
    void (*mark_down)(int slot);                                /* the down copies queued for slot... */
    void (*wait_down)(int slot);                                /* ...are done (the host waits) */
    void (*mark_up)(int slot);
    void (*wait_up)(int slot);
    void (*sync_to_host)(float *host, const float *dev, size_t n); /* blocking, any host memory */
    void (*sync_to_device)(float *dev, const float *host, size_t n);
    float *(*host_alloc)(size_t bytes); /* pinned on a GPU */
    void (*host_free)(float *p);
    void (*device_sync)(void);                      /* the device's queued work is done */
    void (*divide)(float *dev, size_t n, float by); /* AVG on device memory (the direct path) */
} lx_stage_copier;

#ifdef LECTERN_CUDA
/* tensor_cuda.cu: the copier for `device` (its streams and events made once
 * per process and kept). */
const lx_stage_copier *lx_cuda_stage_copier(int device);
/* How many cuBLAS handles this process has made in its life (returned), and
 * sets of staging streams (*stagings): a pool rank that keeps them from one
 * spawn to the next makes each once. For tests. */
int lx_cuda_made(int *stagings);
#endif

#ifdef __cplusplus
}
#endif

#ifndef __cplusplus
#include "trace/trace.h"

/* dtype.c: n values converted on the host. narrow: fp32 values, each times
 * scale (in double), rounded once into dtype d (lectern.h says how); widen:
 * dtype d's values into fp32, each times scale (1: exact). */
void lx_dtype_narrow(dtype d, void *dst, const float *src, int64_t n, double scale);
void lx_dtype_widen(dtype d, float *dst, const void *src, int64_t n, double scale);

/* ---------------- tensor_track.c, tensor.c (C only: the .cu file does not need them) ---------------- */

/* tensor_track.c. Every tensor header is made by lx_tensor_alloc (zeroed,
 * registered as alive, the lecture stack of the making call kept) and given
 * up by tensor_free, also there: a double free, or a tensor a request still
 * uses (whose memory a progress thread may be reading), is named before
 * anything is freed; then the data goes, and the header is poisoned and kept
 * for a while, so a second free is named too. lx_tensor_check stops the
 * lecture when `t` was freed.
 * lx_tensor_leaks makes a warning step per line whose tensors are still
 * alive at the end of `when` ("the lecture", "rank 2's function ranks()"),
 * frees them when `release`, and returns how many there were. */
#define LX_POISON \
    ((uintptr_t)0x3ead00000000ull) /* freed tensors' data: below the 47-bit user space top, far from heap, stacks and libraries */
#define LX_POISON_SPAN ((uintptr_t)1 << 36) /* faults in [LX_POISON, + 64 GiB) are "use after free" */
tensor *lx_tensor_alloc(void);

/* tensor.c: a shape as text, "128x1024" (1-D: "1024"), for messages:
 * lx_shape_of(t).s, good until the end of the statement. */
typedef struct lx_shape_text {
    char s[64];
} lx_shape_text;
lx_shape_text lx_shape_of(const tensor *t);
void lx_tensor_check(const tensor *t, const char *op);
/* A request still using a tensor: comm_requests.c marks it at the call (library_writes:
 * the library writes into it, as dist_irecv does) and unmarks it at the wait.
 * lx_tensor_read stops the lecture when `t` is being written by a request,
 * lx_tensor_write when any request uses it; both also do lx_tensor_check. */
void lx_tensor_busy(const tensor *t, const char *call, const lx_frame *at, int library_writes);
void lx_tensor_idle(const tensor *t, int library_writes);
void lx_tensor_read(const tensor *t, const char *op);
void lx_tensor_write(const tensor *t, const char *op);
int lx_tensor_leaks(const char *when, int release);

/* randn's generator back to its state at process start (unseeded: seed 0
 * at the first draw). A pool rank calls it before each spawn. */
void lx_tensor_reset_rng(void);

#endif /* !__cplusplus */

#endif /* LECTERN_TENSOR_LAYER_H */
