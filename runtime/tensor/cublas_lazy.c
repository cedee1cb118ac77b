/*
 * cublas_lazy.c: cuBLAS is loaded the first time it is called, not at start.
 *
 * libcublas pulls in libcublasLt, over half a gigabyte of code: merely
 * loading them costs each process about 70 ms here, before main() runs.
 * Every spawned rank is a new process, and on a machine without a GPU (or a
 * spawn on the Open MPI path) no rank ever calls cuBLAS. So the lecture is
 * not linked against libcublas; instead each cuBLAS function lectern uses
 * is defined here with cuBLAS's own prototype (the compiler checks them
 * against cublas_api.h), and forwards to the real one, found with dlopen()
 * and dlsym() on first use.
 *
 * To call another cuBLAS function, add one LAZY line below.
 */
#ifdef LECTERN_CUDA

#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static void *library;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    library = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr, "lectern: cannot load cuBLAS (%s): %s\n", CUBLAS_SONAME, dlerror());
        exit(1);
    }
}

void *lx_cublas_symbol(const char *name) {
    pthread_once(&once, load);
    void *sym = dlsym(library, name);
    if (!sym) {
        fprintf(stderr, "lectern: %s has no %s: %s\n", CUBLAS_SONAME, name, dlerror());
        exit(1);
    }
    return sym;
}

/* Defines `ret name(params)` that calls the library's `name` with `args`. */
#define LAZY(ret, name, params, args)                             \
    ret name params {                                             \
        static ret(*real) params;                                 \
        if (!real) real = (ret(*) params)lx_cublas_symbol(#name); \
        return real args;                                         \
    }

LAZY(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
LAZY(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
LAZY(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
LAZY(const char *, cublasGetStatusString, (cublasStatus_t status), (status))
LAZY(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
LAZY(cublasStatus_t, cublasSgemm_v2,
     (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
      const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc),
     (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
LAZY(cublasStatus_t, cublasGemmEx,
     (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void *alpha,
      const void *A, cudaDataType Atype, int lda, const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
      cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo),
     (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo))
LAZY(cublasStatus_t, cublasSgeam,
     (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, const float *alpha,
      const float *A, int lda, const float *beta, const float *B, int ldb, float *C, int ldc),
     (handle, transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc))
LAZY(cublasStatus_t, cublasSscal_v2, (cublasHandle_t handle, int n, const float *alpha, float *x, int incx),
     (handle, n, alpha, x, incx))
LAZY(cublasStatus_t, cublasSaxpy_v2,
     (cublasHandle_t handle, int n, const float *alpha, const float *x, int incx, float *y, int incy),
     (handle, n, alpha, x, incx, y, incy))
LAZY(cublasStatus_t, cublasSdot_v2,
     (cublasHandle_t handle, int n, const float *x, int incx, const float *y, int incy, float *result),
     (handle, n, x, incx, y, incy, result))

#else
/* A CPU-only build has no cuBLAS to load; ISO C wants something in a file. */
typedef int lx_cublas_lazy_unused;
#endif /* LECTERN_CUDA */
