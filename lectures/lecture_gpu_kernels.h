/*
 * lecture_gpu_kernels.h: the CUDA kernels lecture_gpu writes itself
 * (lectures/lecture_gpu_kernels.cu), as the lecture calls them.
 *
 * The .cu file is compiled with nvcc and linked into lecture_gpu only in a
 * CUDA build (the Makefile's LECTURE_CU); the lecture calls these functions
 * only under #ifdef LECTERN_CUDA, and only when gpu_count() > 0. Pointers are
 * device pointers: the `data` of tensors made on a GPU. Every launch and CUDA
 * call is checked (runtime/check.h): a failure is an error step naming the
 * file and line, and the lecture stops.
 *
 * Compiled here, but not yet run on a GPU: unverified.
 */
#ifndef LECTURE_GPU_KERNELS_H
#define LECTURE_GPU_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one GPU is made of, as the CUDA runtime reports it. */
typedef struct gpu_facts {
    char name[256];
    int sms;              /* streaming multiprocessors */
    int threads_per_sm;   /* resident threads one SM can hold */
    int registers_per_sm; /* 32-bit registers */
    int shared_per_sm;    /* bytes of shared memory (on-chip, per SM) */
    int l2_bytes;         /* the L2 cache all SMs share */
    double global_bytes;  /* HBM / GDDR: the GPU's own memory */
} gpu_facts;

void gpu_facts_of(int device, gpu_facts *f);

/* out[i] = x[i] + y[i], one thread per element, 256 threads per block. */
void gpu_vector_add(int device, const float *x, const float *y, float *out, int64_t n);

/* c = a b for n x n row-major matrices, with TILE x TILE tiles of a and b
 * staged in shared memory (TILE is 16). */
void gpu_tiled_matmul(int device, const float *a, const float *b, float *c, int n);

/* STREAM's copy (c[i] = a[i]) and triad (a[i] = b[i] + s c[i]) over n
 * floats: the roofline's memory bandwidth, measured apart from the kernels
 * placed under it. */
void gpu_stream_copy(int device, float *c, const float *a, int64_t n);
void gpu_stream_triad(int device, float *a, const float *b, const float *c, float s, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* LECTURE_GPU_KERNELS_H */
