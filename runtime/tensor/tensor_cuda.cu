/*
 * tensor_cuda.cu: the device half of the tensors (see tensor/tensor.h).
 *
 * Memory and copies go through the CUDA runtime, matrix products and the
 * BLAS-shaped vector operations (scale, axpy, dot) through cuBLAS, and the
 * element-wise operations cuBLAS has no routine for (GELU and its backward,
 * AdamW, adding a scalar) and randn's generator are the small kernels below.
 *
 * Every kernel is a grid-stride loop: a fixed, modest grid whose threads step
 * through the array by the total thread count, so one launch shape serves
 * every size, and a 64-bit index serves arrays past 2^31 elements.
 *
 * Every CUDA and cuBLAS call is checked (check.h): a failed call stops the
 * program with the call, the library's message and file:line. A kernel launch
 * returns nothing, so KERNEL_CHECK() right after it is the check: the launch's
 * error at once, the kernel's own at the same line under LECTERN_CUDA_SYNC=1
 * (cuda_sync.c), else at the next call that waits for the GPU.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "tensor/tensor.h"
#include "tensor/philox.h"
#include "tensor/tensor.h"

/* ---------------- launch shape ---------------- */

#define THREADS 256
#define MAX_BLOCKS 4096 /* enough to fill an H100 (132 SMs x 2048 threads) */

static int blocks_for(int64_t n) {
    int64_t blocks = (n + THREADS - 1) / THREADS;
    return blocks > MAX_BLOCKS ? MAX_BLOCKS : (int)blocks;
}

#define GRID_STRIDE_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---------------- memory ---------------- */

static int in_use;

extern "C" int lx_cuda_in_use(void) { return in_use; }

/* Stream-ordered allocation. cudaFree may wait for the whole device to be
 * idle, and cudaMalloc may too: a DDP step that frees a gradient while a
 * bucket's all-reduce is in flight would stall its compute stream behind
 * the transfer, and the overlap the lecture measures would be lost.
 * cudaMallocAsync / cudaFreeAsync on the tensors' stream (the default
 * stream, where every tensor kernel runs) take and give back memory in
 * that stream's order instead, without waiting for other streams: the
 * NCCL and staging streams that use a tensor wait for the default stream's
 * position at each call (an event), and the host has waited for their
 * work before a tensor can be freed (dist_wait). The device's default pool
 * keeps what was freed (release threshold: no limit) for the next tensor,
 * as torch's caching allocator does; without it the pool would hand memory
 * back to the driver at every synchronization. A device without memory
 * pools (cudaDevAttrMemoryPoolsSupported 0) gets plain cudaMalloc.
 * Verified on GPU (2026-11-28, H200): bench_alloc, the C tests and memcheck
 * with the pool (docs/gpu.md). */
#define MAX_DEVICES 64
static signed char pooled[MAX_DEVICES]; /* 0 not asked yet, 1 pool, -1 plain */

static int uses_pool(int device) {
    if (device < 0 || device >= MAX_DEVICES) return 0;
    if (pooled[device] == 0) {
        int supported = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
        const char *env = getenv("LECTERN_CUDA_POOL"); /* 0: plain cudaMalloc (bench_alloc compares) */
        if (env && strcmp(env, "0") == 0) supported = 0;
        if (supported) {
            cudaMemPool_t pool;
            uint64_t keep = UINT64_MAX; /* cuuint64_t: a byte count */
            CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
            CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        }
        pooled[device] = supported ? 1 : -1;
    }
    return pooled[device] == 1;
}

extern "C" int lx_cuda_pool_in_use(int device) { return uses_pool(device); }

extern "C" float *lx_cuda_alloc(int device, size_t bytes) {
    float *p = NULL;
    CUDA_CHECK(cudaSetDevice(device));
    if (uses_pool(device)) CUDA_CHECK(cudaMallocAsync((void **)&p, bytes, 0));
    else CUDA_CHECK(cudaMalloc((void **)&p, bytes));
    in_use = 1;
    return p;
}

extern "C" void lx_cuda_free(int device, float *p) {
    CUDA_CHECK(cudaSetDevice(device));
    if (uses_pool(device)) CUDA_CHECK(cudaFreeAsync(p, 0));
    else CUDA_CHECK(cudaFree(p));
}

extern "C" void lx_cuda_zero(int device, float *p, size_t bytes) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMemset(p, 0, bytes));
}

extern "C" void lx_cuda_copy(float *dst, int dst_device, const float *src, int src_device, size_t bytes) {
    if (dst_device < 0 && src_device < 0) {
        memcpy(dst, src, bytes);
    } else if (src_device < 0) {
        CUDA_CHECK(cudaSetDevice(dst_device));
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    } else if (dst_device < 0) {
        CUDA_CHECK(cudaSetDevice(src_device));
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    } else if (dst_device == src_device) {
        CUDA_CHECK(cudaSetDevice(dst_device));
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    } else {
        /* Between two GPUs: directly over NVLink/PCIe where peer access is
         * possible, staged through the host otherwise; the driver chooses. */
        CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, bytes));
    }
}

extern "C" void lx_cuda_copy_2d(int device, float *dst, size_t dpitch, const float *src, size_t spitch, size_t width,
                                size_t height) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice));
}

/* ---------------- cuBLAS ---------------- */

/* A cuBLAS handle is tied to the device that was current when it was made,
 * so there is one per device this process uses (in practice one: a rank
 * drives one GPU). Made on first use, destroyed at exit. */
#define MAX_GPUS 64
static cublasHandle_t handles[MAX_GPUS];
static int handles_made; /* in this process's life: a pool rank makes one per device, once */

static void destroy_handles(void) {
    /* At exit a failure can only be reported: exiting again from inside an
     * atexit handler is undefined, so no CUBLAS_CHECK here. */
    for (int d = 0; d < MAX_GPUS; d++) {
        if (!handles[d]) continue;
        cudaError_t rc = cudaSetDevice(d);
        cublasStatus_t st = rc == cudaSuccess ? cublasDestroy(handles[d]) : CUBLAS_STATUS_SUCCESS;
        if (rc != cudaSuccess || st != CUBLAS_STATUS_SUCCESS)
            fprintf(stderr, "lectern: warning: releasing cuBLAS on cuda:%d at exit: %s\n", d,
                    rc != cudaSuccess ? cudaGetErrorString(rc) : cublasGetStatusString(st));
        handles[d] = NULL;
    }
}

static cublasHandle_t cublas_for(int device) {
    static int registered;
    if (device >= MAX_GPUS) {
        fprintf(stderr, "lectern: cuda:%d is past the %d GPUs this build handles\n", device, MAX_GPUS);
        exit(1);
    }
    CUDA_CHECK(cudaSetDevice(device));
    if (!handles[device]) {
        CUBLAS_CHECK(cublasCreate(&handles[device]));
        handles_made++;
        if (!registered) {
            atexit(destroy_handles);
            registered = 1;
        }
    }
    return handles[device];
}

extern "C" void lx_cuda_scale(int device, float *x, int n, float s) {
    CUBLAS_CHECK(cublasSscal(cublas_for(device), n, &s, x, 1));
}

extern "C" void lx_cuda_axpy(int device, float *y, const float *x, int n, float alpha) {
    CUBLAS_CHECK(cublasSaxpy(cublas_for(device), n, &alpha, x, 1, y, 1));
}

extern "C" float lx_cuda_sumsq(int device, const float *x, int n) {
    /* The result goes to a host variable (the default pointer mode), so this
     * call waits for the GPU: a loss is wanted on the host anyway. */
    float result = 0.0f;
    CUBLAS_CHECK(cublasSdot(cublas_for(device), n, x, 1, x, 1, &result));
    return result;
}

/*
 * cuBLAS reads matrices column-major; ours are row-major. A row-major matrix
 * read column-major is its transpose, so instead of C = op(A) op(B) we ask
 * for C^T = op(B)^T op(A)^T: swap the operands (and m with n), keep each
 * operand's own transpose flag, and cuBLAS writes C^T column-major, which is
 * exactly C row-major. No data is moved.
 */
extern "C" void lx_cuda_sgemm(int device, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                              int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasSgemm(cublas_for(device), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
}

/* bf16 or fp16 inputs (half16: 1 for fp16), fp32 output, products summed
 * in fp32 (CUBLAS_COMPUTE_32F: tensor cores, fp32 accumulation). The same
 * row-major trick as lx_cuda_sgemm: C^T = B^T A^T in column-major terms. */
extern "C" void lx_cuda_gemm_16(int device, int half16, int trans_a, int trans_b, int m, int n, int k, float alpha,
                                const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc) {
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t in = half16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasGemmEx(cublas_for(device), op_b, op_a, n, m, k, &alpha, b, in, ldb, a, in, lda, &beta, c,
                              CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---------------- element-wise kernels ---------------- */

static __global__ void add_scalar_kernel(float *x, int64_t n, float s) { GRID_STRIDE_LOOP(i, n) x[i] += s; }

extern "C" void lx_cuda_add_scalar(int device, float *x, int64_t n, float s) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    add_scalar_kernel<<<blocks_for(n), THREADS>>>(x, n, s);
    KERNEL_CHECK();
}

static __global__ void fill_kernel(float *x, int64_t n, float v) { GRID_STRIDE_LOOP(i, n) x[i] = v; }

extern "C" void lx_cuda_fill(int device, float *x, int64_t n, float v) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    fill_kernel<<<blocks_for(n), THREADS>>>(x, n, v);
    KERNEL_CHECK();
}

/* Each thread adds its grid-stride share in double, each block adds its
 * threads' sums in shared memory, and thread 0 of each block adds
 * the block's sum into *out with a double atomicAdd (sm_60 and later). The
 * order of the blocks' additions varies from run to run; in double that
 * moves the float result by far less than its last bit. */
static __global__ void sum_kernel(const float *x, int64_t n, double *out) {
    __shared__ double part[THREADS];
    double acc = 0.0;
    GRID_STRIDE_LOOP(i, n) acc += (double)x[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

/* The sum's double lives in a scratch kept per device for the process's
 * life: a cudaFree per call would wait for the whole device, NCCL's
 * transfers in flight on other streams included, which may wait in turn
 * for a peer that waits for this rank (docs/gpu.md). Everything here is on
 * the default stream, so the next call's memset waits for this one's copy.
 * Compiled only: not yet run on a GPU. */
static double *sum_scratch[MAX_DEVICES];

extern "C" double lx_cuda_sum(int device, const float *x, int64_t n) {
    if (n == 0) return 0.0;
    CUDA_CHECK(cudaSetDevice(device));
    int kept = device < MAX_DEVICES; /* (more GPUs than that on one host: a buffer per call) */
    if (kept && !sum_scratch[device]) sum_scratch[device] = (double *)(void *)lx_cuda_alloc(device, sizeof(double));
    double *d_out = kept ? sum_scratch[device] : (double *)(void *)lx_cuda_alloc(device, sizeof(double));
    double result = 0.0;
    CUDA_CHECK(cudaMemsetAsync(d_out, 0, sizeof(double), 0));
    sum_kernel<<<blocks_for(n), THREADS>>>(x, n, d_out);
    KERNEL_CHECK();
    CUDA_CHECK(cudaMemcpy(&result, d_out, sizeof(double), cudaMemcpyDeviceToHost));
    if (!kept) lx_cuda_free(device, (float *)(void *)d_out);
    return result;
}

/* GELU, tanh form (torch's approximate='tanh'; torch's default is the erf
 * form, which differs by at most about 1e-3):
 *     gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * written, as the CPU loops in tensor.c write it, through the logistic
 * function s = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh(u)): gelu(x) = x s. */
#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* s = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
static __device__ inline float gelu_s(float v) {
    return 1.0f / (1.0f + expf(-2.0f * GELU_C * (v + GELU_A * v * v * v)));
}

static __global__ void gelu_kernel(float *y, const float *x, int64_t n) {
    GRID_STRIDE_LOOP(i, n) {
        float v = x[i];
        float s = gelu_s(v);
        y[i] = v * s;
    }
}

/* d/dx gelu(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx = s + 2 x s (1 - s) du/dx,
 * t = tanh(u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
static __global__ void gelu_backward_kernel(float *dx, const float *x, const float *dy, int64_t n) {
    GRID_STRIDE_LOOP(i, n) {
        float v = x[i];
        float s = gelu_s(v);
        float du = GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
    }
}

extern "C" void lx_cuda_gelu(int device, float *y, const float *x, int64_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    gelu_kernel<<<blocks_for(n), THREADS>>>(y, x, n);
    KERNEL_CHECK();
}

extern "C" void lx_cuda_gelu_backward(int device, float *dx, const float *x, const float *dy, int64_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    gelu_backward_kernel<<<blocks_for(n), THREADS>>>(dx, x, dy, n);
    KERNEL_CHECK();
}

/* AdamW, in the order torch.optim.AdamW applies it: decoupled weight decay
 * on the parameter first, then the moment updates, then the bias-corrected
 * step. One thread per element, each element independent. */
static __global__ void adamw_kernel(float *param, float *m, float *v, const float *grad, int64_t n, float beta1,
                                    float beta2, float eps, float decay, float step_size, float bias2_sqrt) {
    GRID_STRIDE_LOOP(i, n) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = m[i] + (1.0f - beta1) * (g - m[i]);
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
    }
}

extern "C" void lx_cuda_adamw(int device, float *param, float *m, float *v, const float *grad, int64_t n, float beta1,
                              float beta2, float eps, float decay, float step_size, float bias2_sqrt) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    adamw_kernel<<<blocks_for(n), THREADS>>>(param, m, v, grad, n, beta1, beta2, eps, decay, step_size, bias2_sqrt);
    KERNEL_CHECK();
}

/* ---------------- modelled compute ---------------- */

/* model_compute(ms) on a GPU: the device is busy for `ns` nanoseconds while
 * the host goes on, as torch.cuda._sleep does in torch's own overlap tests.
 * One thread reads the GPU's global timer (%globaltimer, nanoseconds) until
 * the time has passed, resting __nanosleep between reads; kernels queued
 * after it on the default stream, and the communication streams that wait
 * for that stream's position, start after it. One thread holds one SM, not
 * the whole GPU as a real kernel would: NCCL's kernels find SMs free, so
 * the overlap it models is the best case. UNVERIFIED: written on a machine
 * without a GPU (docs/gpu.md). */
static __global__ void spin_kernel(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

extern "C" void lx_cuda_spin(int device, double ms) {
    CUDA_CHECK(cudaSetDevice(device));
    in_use = 1; /* device_synchronize() now has something to wait for */
    spin_kernel<<<1, 1>>>((unsigned long long)(ms * 1e6));
    KERNEL_CHECK();
}

/* ---------------- random normals ---------------- */

/* Normals number first .. first + n - 1 of `seed` into x[0 .. n): one Philox
 * block (four normals) per step of the grid-stride loop, with the very code
 * the host runs (philox.h), so the floats are the host's bit for bit. The
 * blocks at either end may be shared with the draws before and after: only
 * the normals inside [first, first + n) are written. */
static __global__ void randn_kernel(float *x, int64_t n, uint64_t seed, uint64_t first) {
    uint64_t first_block = first / 4, last_block = (first + (uint64_t)n - 1) / 4;
    int64_t blocks = (int64_t)(last_block - first_block) + 1;
    GRID_STRIDE_LOOP(b, blocks) {
        uint64_t block = first_block + (uint64_t)b;
        float four[4];
        lx_normal4(seed, block, four);
        for (int j = 0; j < 4; j++) {
            int64_t i = (int64_t)(block * 4 + (uint64_t)j - first);
            if (block * 4 + (uint64_t)j >= first && i < n) x[i] = four[j];
        }
    }
}

extern "C" void lx_cuda_randn(int device, float *x, int64_t n, uint64_t seed, uint64_t first) {
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device));
    int64_t blocks = (int64_t)((first + (uint64_t)n - 1) / 4 - first / 4) + 1;
    randn_kernel<<<blocks_for(blocks), THREADS>>>(x, n, seed, first);
    KERNEL_CHECK();
}

/* ---------------- staging copies for ranks that share a GPU ---------------- */

/* comm_staged.c's copy interface (tensor/tensor.h, lx_stage_copier) on one
 * device: a "down" stream for device -> host copies and an "up" stream for
 * host -> device, so a chunk going down and another coming up move at once
 * (the H100 has a copy engine for each direction), and an event per slot
 * and direction the host waits on. The order with the tensor operations
 * (kernels and cuBLAS calls on the default stream) is said, not implied:
 * the streams are non-blocking, and stage_begin records an event on the
 * default stream that both copy streams wait for, so the copies read what
 * the kernels queued before the call wrote, and nothing depends on the
 * legacy default stream's implicit ordering (which a per-thread default
 * stream, --default-stream per-thread, would not give). Copies coming up
 * are waited for by the host (wait_up) before the call returns, so later
 * kernels see them. Made once per process and kept (a pool rank runs many
 * spawns). Verified on one GPU, ranks sharing it (2026-11-28, H200:
 * test_comm_staged, test_groups.py, lecture_08; docs/gpu.md). */
#define STAGE_SLOTS 3

static int stage_device = -1;
static int stagings_made; /* stream and event sets made in this process's life */
static cudaStream_t stage_down_stream, stage_up_stream;
static cudaEvent_t stage_down_done[STAGE_SLOTS], stage_up_done[STAGE_SLOTS];
static cudaEvent_t stage_queued; /* "the default stream got this far" */

static void stage_begin(void) {
    CUDA_CHECK(cudaSetDevice(stage_device));
    CUDA_CHECK(cudaEventRecord(stage_queued, 0));
    CUDA_CHECK(cudaStreamWaitEvent(stage_down_stream, stage_queued, 0));
    CUDA_CHECK(cudaStreamWaitEvent(stage_up_stream, stage_queued, 0));
}

static void stage_to_host(float *host, const float *dev, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, stage_down_stream));
}

static void stage_to_device(float *dev, const float *host, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, stage_up_stream));
}

static void stage_mark_down(int slot) { CUDA_CHECK(cudaEventRecord(stage_down_done[slot], stage_down_stream)); }
static void stage_wait_down(int slot) { CUDA_CHECK(cudaEventSynchronize(stage_down_done[slot])); }
static void stage_mark_up(int slot) { CUDA_CHECK(cudaEventRecord(stage_up_done[slot], stage_up_stream)); }
static void stage_wait_up(int slot) { CUDA_CHECK(cudaEventSynchronize(stage_up_done[slot])); }

/* The async forms' copies: plain cudaMemcpy on the default stream, ordered
 * with everything else; they return when the copy is done. */
static void stage_sync_to_host(float *host, const float *dev, size_t n) {
    CUDA_CHECK(cudaSetDevice(stage_device));
    CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static void stage_sync_to_device(float *dev, const float *host, size_t n) {
    CUDA_CHECK(cudaSetDevice(stage_device));
    CUDA_CHECK(cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

/* Pinned memory: the copy engines read and write it directly, at full
 * speed and asynchronously (pageable memory would be staged once more by
 * the driver, and cudaMemcpyAsync on it is not asynchronous). */
static float *stage_host_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaSetDevice(stage_device));
    CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
    return (float *)p;
}

static void stage_host_free(float *p) { CUDA_CHECK(cudaFreeHost(p)); }

/* The direct path (CUDA-aware Open MPI): Open MPI's own copies are not
 * ordered after this rank's kernels, so the device's queued work is done
 * first; and AVG's division happens where the sum is, on the device. */
static void stage_device_sync(void) {
    CUDA_CHECK(cudaSetDevice(stage_device));
    CUDA_CHECK(cudaDeviceSynchronize());
}

/* x / by, as the host divides (not x * (1/by), which rounds differently
 * for a world size that is not a power of two). */
static __global__ void divide_kernel(float *x, int64_t n, float by) { GRID_STRIDE_LOOP(i, n) x[i] = x[i] / by; }

static void stage_divide(float *x, size_t n, float by) {
    CUDA_CHECK(cudaSetDevice(stage_device));
    divide_kernel<<<blocks_for((int64_t)n), THREADS>>>(x, (int64_t)n, by);
    KERNEL_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
}

static const lx_stage_copier cuda_copier = {
        "cudaMemcpyAsync on two streams",
        stage_begin,
        stage_to_host,
        stage_to_device,
        stage_mark_down,
        stage_wait_down,
        stage_mark_up,
        stage_wait_up,
        stage_sync_to_host,
        stage_sync_to_device,
        stage_host_alloc,
        stage_host_free,
        stage_device_sync,
        stage_divide,
};

extern "C" const lx_stage_copier *lx_cuda_stage_copier(int device) {
    if (stage_device != device) {
        if (stage_device >= 0) { /* another device than before: the old ones go */
            CUDA_CHECK(cudaSetDevice(stage_device));
            CUDA_CHECK(cudaStreamDestroy(stage_down_stream));
            CUDA_CHECK(cudaStreamDestroy(stage_up_stream));
            for (int s = 0; s < STAGE_SLOTS; s++) {
                CUDA_CHECK(cudaEventDestroy(stage_down_done[s]));
                CUDA_CHECK(cudaEventDestroy(stage_up_done[s]));
            }
            CUDA_CHECK(cudaEventDestroy(stage_queued));
        }
        CUDA_CHECK(cudaSetDevice(device));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stage_down_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stage_up_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&stage_queued, cudaEventDisableTiming));
        for (int s = 0; s < STAGE_SLOTS; s++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&stage_down_done[s], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&stage_up_done[s], cudaEventDisableTiming));
        }
        stage_device = device;
        stagings_made++;
    }
    in_use = 1;
    return &cuda_copier;
}

/* Under CUDA's lazy loading (the default since CUDA 12.2) a kernel's module
 * is loaded at its first launch, and loading may wait for the device's
 * kernels in flight: an NCCL send waiting for its peer, whose receive comes
 * only after this rank's next kernel. NCCL ranks load the runtime's kernels
 * up front instead (cudaFuncGetAttributes loads a kernel's module).
 * cuBLAS's own kernels are not covered: CUDA_MODULE_LOADING=EAGER is the
 * way for those (docs/gpu.md). Compiled only: not yet run on a GPU. */
extern "C" void lx_cuda_preload_kernels(int device) {
    static int done[MAX_DEVICES];
    if (device < 0 || device >= MAX_DEVICES || done[device]) return;
    CUDA_CHECK(cudaSetDevice(device));
    const void *kernels[] = {
            (const void *)add_scalar_kernel, (const void *)fill_kernel,          (const void *)sum_kernel,
            (const void *)gelu_kernel,       (const void *)gelu_backward_kernel, (const void *)adamw_kernel,
            (const void *)randn_kernel,      (const void *)divide_kernel,
    };
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cudaFuncAttributes attributes;
        CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernels[i]));
    }
    done[device] = 1;
}

extern "C" int lx_cuda_made(int *stagings) {
    *stagings = stagings_made;
    return handles_made;
}
