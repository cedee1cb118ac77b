/*
 * check.h: every CUDA, cuBLAS and MPI call goes through one of these (NCCL's,
 * which go through a table, nccl_api.h, through comm_nccl.c's NCCL_TRY and
 * DEVICE_TRY, which end in lx_backend_error too, with NCCL's own last error).
 * A failure prints the call, the library's own message and file:line, adds
 * them to the trace as an error step, and exits 1: a wrong number silently
 * produced is worse than a stop.
 */
#ifndef LECTERN_CHECK_H
#define LECTERN_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's own message reaches the trace: an error step at the lecture
 * line (in the rank where it happened), then exit 1 (trace/backend_error.c). */
void lx_backend_error(const char *lib, const char *msg, const char *file, int line, const char *expr)
        __attribute__((noreturn));

/* 1 when LECTERN_CUDA_SYNC=1: every kernel launch is waited for and checked
 * at its line (tensor/cuda_sync.c). A value other than 0 or 1 is an error. */
int lx_cuda_sync(void);

#ifdef __cplusplus
}
#endif

#define MPI_CHECK(call)                                                   \
    do {                                                                  \
        int mpi_rc_ = (call);                                             \
        if (mpi_rc_ != MPI_SUCCESS) {                                     \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                          \
            int mpi_len_ = 0;                                             \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);               \
            lx_backend_error("MPI", mpi_msg_, __FILE__, __LINE__, #call); \
        }                                                                 \
    } while (0)

#ifdef LECTERN_CUDA
#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t cuda_rc_ = (call);                                                         \
        if (cuda_rc_ != cudaSuccess)                                                           \
            lx_backend_error("CUDA", cudaGetErrorString(cuda_rc_), __FILE__, __LINE__, #call); \
    } while (0)

/* Right after a kernel launch (a launch returns no status): the launch's
 * own error, and under LECTERN_CUDA_SYNC=1 the kernel's too, both named at
 * this line rather than at the next call that waits for the GPU. */
#define KERNEL_CHECK()                                           \
    do {                                                         \
        CUDA_CHECK(cudaGetLastError());                          \
        if (lx_cuda_sync()) CUDA_CHECK(cudaDeviceSynchronize()); \
    } while (0)

#define CUBLAS_CHECK(call)                                                                            \
    do {                                                                                              \
        cublasStatus_t cublas_rc_ = (call);                                                           \
        if (cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                      \
            lx_backend_error("cuBLAS", cublasGetStatusString(cublas_rc_), __FILE__, __LINE__, #call); \
    } while (0)
#endif

#endif /* LECTERN_CHECK_H */
