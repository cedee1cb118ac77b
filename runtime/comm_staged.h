/*
 * comm_staged.h: the copy interface of comm_staged.c's pipeline, shared
 * with tensor_cuda.cu (which implements it on a GPU) without the MPI and
 * cJSON headers the rest of spawn_impl.h brings. Not for lectures.
 */
#ifndef LECTERN_COMM_STAGED_H
#define LECTERN_COMM_STAGED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* comm_staged.c: the copies its pipeline needs. On a GPU (tensor_cuda.cu):
 * cudaMemcpyAsync on a "down" (device to host) and an "up" stream, an event
 * per slot and direction. On the host (the test hook): memcpy, and the marks
 * do nothing. Counts are floats. */
typedef struct lx_stage_copier {
    const char *name;
    void (*begin)(void);      /* the device work queued so far comes before the copies */
    void (*to_host)(float *host, const float *dev, size_t n);     /* queued on "down" */
    void (*to_device)(float *dev, const float *host, size_t n);   /* queued on "up" */
    void (*mark_down)(int slot);   /* the down copies queued for slot... */
    void (*wait_down)(int slot);   /* ...are done (the host waits) */
    void (*mark_up)(int slot);
    void (*wait_up)(int slot);
    void (*sync_to_host)(float *host, const float *dev, size_t n);     /* blocking, any host memory */
    void (*sync_to_device)(float *dev, const float *host, size_t n);
    float *(*host_alloc)(size_t bytes);   /* pinned on a GPU */
    void (*host_free)(float *p);
    void (*device_sync)(void);                         /* the device's queued work is done */
    void (*divide)(float *dev, size_t n, float by);    /* AVG on device memory (the direct path) */
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

#endif /* LECTERN_COMM_STAGED_H */
