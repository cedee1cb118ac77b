/*
 * streams.h: lecture_08's CUDA streams example, the CUDA plumbing (device
 * buffers, cuBLAS handle, streams, events, the error checks) kept out of
 * the lecture.
 */
#ifndef LECTERN_STREAMS_H
#define LECTERN_STREAMS_H

/* Times two independent jobs, a matrix product and a host-to-device copy,
 * first on one stream, then on two (the copy engine working while the SMs
 * multiply), with CUDA events, and notes both timings. Needs a GPU: in a
 * build without CUDA, or on a machine without a GPU, it does nothing and
 * returns 0; it returns 1 when it ran. */
int streams_example(void);

#endif
