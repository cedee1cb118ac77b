/*
 * comm/nccl_api.h: what comm_nccl.c asks of NCCL and of the GPU's streams
 * and events, as one table of functions. Not for lectures.
 *
 * comm_nccl.c (the NCCL backend's logic: which communicator and stream each
 * call goes on, what waits for what) calls nothing else of NCCL or CUDA.
 * The table has two implementations:
 *
 *   nccl_library.c  the real NCCL, loaded with dlopen at the first NCCL
 *                   spawn (never linked: a binary runs where no libnccl
 *                   exists), and the CUDA runtime's streams and events;
 *                   built where CUDA and NCCL's header are
 *   nccl_emu.c      an emulator on the CPU with NCCL's worst-case rules
 *                   (below), over Open MPI; built everywhere
 *
 * so that the shipping logic runs, and is tested, on a machine without a
 * GPU (LECTERN_NCCL_EMULATE=1 with LECTERN_BACKEND=nccl: docs/gpu.md).
 *
 * The rules both honour, which comm_nccl.c relies on and nothing more:
 *   - a stream runs its operations one after the other, in the order they
 *     were queued; an operation starts only when it reaches the stream's head;
 *   - the operations between group_start and group_end (or one alone) start
 *     together, when each has reached its stream's head, and complete as one;
 *   - a send completes only when its receive runs (no buffering assumed);
 *     the k-th send from a to b on a communicator meets b's k-th receive
 *     from a on it;
 *   - a communicator runs its operations in the order they were queued,
 *     whatever streams they are on: one starts after the one before ended;
 *     the ranks of a communicator queue its collectives in the same order;
 *   - an event records a stream's position; a stream told to wait for it
 *     runs nothing queued after the wait until the stream recorded has got
 *     there. The stream NULL is the compute stream (CUDA's default stream:
 *     tensor kernels and cuBLAS; on the emulator, the host itself, whose
 *     tensor work is done by the time the call returns).
 *
 * Status codes are NCCL's (ncclResult_t) for the communication functions
 * and CUDA's (cudaError_t) for the device functions, as ints, so that the
 * real table passes them through unchanged; the emulator uses the same
 * numbers. error_string and device_error_string name them.
 */
#ifndef LECTERN_NCCL_API_H
#define LECTERN_NCCL_API_H

#include <stddef.h>

#include "lectern.h" /* dist_op, dtype */

enum {
    LX_NCCL_OK = 0,             /* ncclSuccess */
    LX_NCCL_SYSTEM_ERROR = 2,   /* ncclSystemError */
    LX_NCCL_INVALID_USAGE = 5,  /* ncclInvalidUsage */
    LX_NCCL_REMOTE_ERROR = 6,   /* ncclRemoteError */
    LX_NCCL_IN_PROGRESS = 7,    /* ncclInProgress */
    LX_DEVICE_OK = 0,           /* cudaSuccess */
    LX_DEVICE_NOT_READY = 600,  /* cudaErrorNotReady: an event not reached yet */
    LX_NCCL_SPLIT_NOCOLOR = -1, /* NCCL_SPLIT_NOCOLOR: this rank joins no communicator */
};

/* The oldest NCCL lectern runs on: ncclCommSplit came in 2.18.1. Encoded
 * as ncclGetVersion encodes it (major * 10000 + minor * 100 + patch). */
#define LX_NCCL_VERSION_FLOOR 21800

typedef struct lx_nccl_comm_s *lx_nccl_comm;     /* ncclComm_t */
typedef struct lx_nccl_stream_s *lx_nccl_stream; /* cudaStream_t; NULL: the compute stream */
typedef struct lx_nccl_event_s *lx_nccl_event;   /* cudaEvent_t */

/* ncclUniqueId's 128 bytes: made by rank 0, carried to the others by MPI. */
typedef struct lx_nccl_id {
    char bytes[128];
} lx_nccl_id;

typedef struct lx_nccl_api {
    const char *name; /* "NCCL 2.28.9 (/usr/lib/.../libnccl.so.2)", "the NCCL emulator (CPU)" */
    int version;      /* as ncclGetVersion gives it */
    int emulated;     /* 1: host memory, no GPU */

    /* ---- communicators (NCCL) ---- */
    int (*get_unique_id)(lx_nccl_id *id);
    /* Collective over the `nranks` processes that pass the same id. */
    int (*comm_init_rank)(lx_nccl_comm *comm, int nranks, const lx_nccl_id *id, int rank);
    /* Collective over `comm`'s ranks: those of one `color` form a new
     * communicator, ordered by `key`; LX_NCCL_SPLIT_NOCOLOR gives NULL. */
    int (*comm_split)(lx_nccl_comm comm, int color, int key, lx_nccl_comm *out);
    int (*comm_destroy)(lx_nccl_comm comm);
    int (*comm_abort)(lx_nccl_comm comm);
    /* An error found after a call returned (a peer lost): *error is
     * LX_NCCL_OK, LX_NCCL_IN_PROGRESS or the error. */
    int (*comm_async_error)(lx_nccl_comm comm, int *error);
    const char *(*error_string)(int status);
    /* NCCL's own account of its last error (ncclGetLastError); "" if none. */
    const char *(*last_error)(lx_nccl_comm comm);

    /* ---- operations: queued on `stream`, never waited for here ----
     *
     * Buffers hold `count` elements of `dt` (DTYPE_F32, DTYPE_BF16 or
     * DTYPE_F16: ncclFloat, ncclBfloat16, ncclFloat16), counts in elements.
     * The 16-bit reductions add (or compare) in fp32 and round the result
     * to the 16-bit type once per step of the algorithm, per element; AVG
     * on them is ncclAvg: each rank's contribution times 1/nranks (itself
     * rounded to the type), rounded, then summed so (nccl_emu.c says it in
     * full). */
    int (*group_start)(void);
    int (*group_end)(void);
    int (*send)(const void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream);
    int (*recv)(void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream);
    int (*all_reduce)(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                      lx_nccl_stream stream);
    int (*reduce)(const void *in, void *out, size_t count, dtype dt, dist_op op, int root, lx_nccl_comm comm,
                  lx_nccl_stream stream);
    int (*broadcast)(const void *in, void *out, size_t count, dtype dt, int root, lx_nccl_comm comm,
                     lx_nccl_stream stream);
    /* in: nranks * count elements; out: count */
    int (*reduce_scatter)(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                          lx_nccl_stream stream);
    /* in: count elements; out: nranks * count */
    int (*all_gather)(const void *in, void *out, size_t count, dtype dt, lx_nccl_comm comm, lx_nccl_stream stream);

    /* ---- the device: streams, events, memory ---- */
    int (*set_device)(int device);
    int (*stream_create)(lx_nccl_stream *stream); /* non-blocking: no implicit order with the compute stream */
    int (*stream_destroy)(lx_nccl_stream stream);
    int (*event_create)(lx_nccl_event *event);
    int (*event_destroy)(lx_nccl_event event);
    int (*event_record)(lx_nccl_event event, lx_nccl_stream stream);
    /* LX_DEVICE_OK when the stream recorded has got there, else
     * LX_DEVICE_NOT_READY (or an error). Never waits. */
    int (*event_query)(lx_nccl_event event);
    int (*stream_wait_event)(lx_nccl_stream stream, lx_nccl_event event);
    int (*alloc)(void **p, size_t bytes);
    int (*release)(void *p);
    int (*zero)(void *p, size_t bytes); /* before any use: the host waits for it */
    /* Device to device, queued on `stream`. */
    int (*copy)(void *dst, const void *src, size_t bytes, lx_nccl_stream stream);
    const char *(*device_error_string)(int status);
} lx_nccl_api;

/* nccl_emu.c: the emulator (every build). Needs MPI_THREAD_MULTIPLE (a
 * pool rank has it). */
const lx_nccl_api *lx_nccl_emulator(void);

/* nccl_library.c: the real NCCL, loaded on the first call (LECTERN_NCCL_LIBRARY
 * names the file, default libnccl.so.2, found as the loader finds libraries).
 * NULL when this build has no NCCL support, or the library cannot be loaded,
 * lacks a function, or is older than LX_NCCL_VERSION_FLOOR: `why` then says
 * which, naming the version. Loaded once per process; later calls give the
 * same answer. */
const lx_nccl_api *lx_nccl_library(char *why, size_t why_size);

/* "2.28.9" from an ncclGetVersion code (into buf). */
const char *lx_nccl_version_text(int code, char *buf, size_t size);

#endif /* LECTERN_NCCL_API_H */
