/*
 * streams.h: lecture_08's CUDA streams example: the CUDA plumbing (device
 * buffers, cuBLAS handle, streams, events, timing, the error checks) kept
 * out of the lecture, which writes the two ways to run the jobs, one
 * stream and two, with the calls below. CUDA builds only.
 */
#ifndef LECTERN_STREAMS_H
#define LECTERN_STREAMS_H

#ifdef LECTERN_CUDA
#include <cuda_runtime.h>

/* Two independent jobs: z1 = x1 @ x2 (cuBLAS) and a host-to-device copy of
 * pinned host memory into z2; then sum = z1 + z2. */
typedef struct streams_work streams_work;
struct streams_work {
    cudaStream_t compute, copy;            /* non-blocking: ordered by events alone */
    cudaEvent_t started, computed, copied; /* timing disabled: only for ordering */
    struct streams_buffers *buffers;       /* the matrices and the cuBLAS handle (streams.c) */
};

/* Each job queued on `stream` (0: the default stream), checked; none waits. */
void multiply_on(streams_work *w, cudaStream_t stream);
void copy_on(streams_work *w, cudaStream_t stream);
void add_on(streams_work *w, cudaStream_t stream);
/* cudaEventRecord and cudaStreamWaitEvent, checked (file and line). */
void event_record(cudaEvent_t event, cudaStream_t stream);
void stream_wait(cudaStream_t stream, cudaEvent_t event);

/* On a GPU: sets the work up, times each job alone, then one_stream and
 * two_streams (the lecture's), with CUDA events, notes every timing and what
 * they say, and frees it all. */
void streams_example(void (*one_stream)(streams_work *), void (*two_streams)(streams_work *));
#endif

#endif
