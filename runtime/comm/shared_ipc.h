/*
 * comm/shared_ipc.h: the collectives of ranks that share one GPU, done on
 * the device through memory the ranks map from each other ("windows"),
 * written once over a small device interface. Not for lectures.
 *
 * Ranks that share a GPU are processes on one device: once a buffer is
 * mapped with CUDA IPC, any rank's kernel can read every rank's buffer, and
 * the data never has to leave the device. The protocol (shared_ipc.c) needs
 * only four things of the device, and lx_ipc_dev names them:
 *
 *   windows  memory a rank exports and its peers open once: on a GPU
 *            cudaMalloc + cudaIpcGetMemHandle / cudaIpcOpenMemHandle
 *            (shared_ipc_cuda.cu); on the CPU test backend a POSIX
 *            shared-memory segment, shm_open + mmap (shared_ipc_shm.c)
 *   events   "the work this rank queued so far is done", recorded by the
 *            owner with a sequence number and waited for by peers: on a GPU
 *            an inter-process cudaEvent (cudaStreamWaitEvent); on the CPU a
 *            counter in shared memory
 *   copies   between a tensor and a window, queued in order (stream 0)
 *   reduce   one kernel: the element-wise SUM/MIN/MAX of n inputs written to
 *            m outputs, AVG dividing the sum as the host does
 *
 * The host carries only small control messages, over the spawn's (or the
 * group's) MPI communicator: sequence numbers, window handles.
 *
 * A GPU's inter-process event has one rule that shapes the protocol:
 * cudaStreamWaitEvent waits for the record made *before* the call, so a
 * peer's record must precede the wait in real time. The host notification
 * (an MPI_Allgather of the sequence numbers) orders it. The CPU backend's
 * wait does not spin: it checks that the peer has recorded the sequence
 * number it is told, and stops the rank with an error otherwise, so a
 * missing notification fails the CPU tests instead of racing on a GPU.
 */
#ifndef LECTERN_SHARED_IPC_H
#define LECTERN_SHARED_IPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a peer needs to open a window or an event: at most 64 bytes
 * (cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64; the CPU backend
 * sends a shared-memory segment's name). */
enum { LX_IPC_HANDLE_BYTES = 64 };
typedef struct lx_ipc_handle {
    unsigned char bytes[LX_IPC_HANDLE_BYTES];
} lx_ipc_handle;

/* The reduction a kernel applies (the values of dist_op in lectern.h). */
enum { LX_IPC_SUM = 0, LX_IPC_AVG = 1, LX_IPC_MIN = 2, LX_IPC_MAX = 3 };

typedef struct lx_ipc_dev {
    const char *name; /* "CUDA IPC", "shared memory (CPU test backend)": for notes */
    /* A window of `bytes` this process owns, its handle in *h. NULL on
     * failure, with why it failed in why[why_size]. */
    float *(*window_new)(size_t bytes, lx_ipc_handle *h, char *why, size_t why_size);
    /* A peer's window, mapped here (NULL on failure, why said). */
    float *(*window_open)(const lx_ipc_handle *h, size_t bytes, char *why, size_t why_size);
    void (*window_close)(float *peer, size_t bytes); /* before the owner frees it */
    void (*window_free)(float *mine, size_t bytes);
    /* Every peer that will open this window or event of mine has: on the
     * CPU its name goes now, so a rank that dies leaves nothing behind. */
    void (*opened_by_all)(void *mine);
    /* An event this process records (its handle in *h), and a peer's. */
    void *(*event_new)(lx_ipc_handle *h, char *why, size_t why_size);
    void *(*event_open)(const lx_ipc_handle *h, char *why, size_t why_size);
    void (*event_close)(void *peer_event);
    void (*event_free)(void *mine);
    /* After the work queued so far: `seq` (increasing) is recorded. */
    void (*record)(void *mine, uint64_t seq);
    /* The work queued from now on waits for the peer's record of `seq`,
     * which the host has been told was made. */
    void (*wait)(void *peer_event, uint64_t seq);
    /* Queued in order: n floats from src to dst (any of the two a window). */
    void (*copy)(float *dst, const float *src, size_t n);
    /* Queued in order: for each i < n, r = in[0][i] op ... op in[n_in-1][i]
     * (in that order; AVG sums then divides by `divide_by`), written to
     * out[0][i] ... out[n_out-1][i]. An output may be one of the inputs. */
    void (*reduce)(float *const *out, int n_out, const float *const *in, int n_in, size_t n, int op, float divide_by);
    /* The rank's queued work is done (before its windows are freed). */
    void (*finish)(void);
} lx_ipc_dev;

/* The backends. lx_ipc_shm_dev: always built (tests). lx_ipc_cuda_dev: in
 * a CUDA build only, on `device`. */
const lx_ipc_dev *lx_ipc_shm_dev(void);
#ifdef LECTERN_CUDA
const lx_ipc_dev *lx_ipc_cuda_dev(int device);
#endif

/* ---------------- the protocol (shared_ipc.c) ----------------
 * (LX_IPC_DEV_ONLY: the device interface alone, for shared_ipc_cuda.cu,
 * which nvcc compiles without MPI's headers.) */
#ifndef LX_IPC_DEV_ONLY
#include <mpi.h>

/* Every rank of the spawn at once, over `comm` (rank `rank` of `size`):
 * exports a window of `window_floats` floats and its events, opens every
 * peer's, and agrees whether all of that worked everywhere (the probe). 1:
 * the collectives below run on `dev` until lx_ipc_stop. 0: nothing is left
 * open, and why[] says what failed and on which rank (the same text on
 * every rank). `chunk`: floats per round (0: the window's size). */
int lx_ipc_start(const lx_ipc_dev *dev, MPI_Comm comm, int rank, int size, size_t window_floats, size_t chunk,
                 char *why, size_t why_size);
/* Every rank of the spawn at once: completes the point-to-point traffic,
 * closes the peers' windows, then frees this rank's. */
void lx_ipc_stop(void);
/* 1 between a successful lx_ipc_start and lx_ipc_stop. */
int lx_ipc_active(void);
/* Floats per round from now on (0: the window's size); at most the window. */
void lx_ipc_set_chunk(size_t floats);

/* The calls run over `comm`, a group's, whose rank q is world rank
 * world_of[q]; MPI_COMM_NULL: the spawn's world again. */
void lx_ipc_use(MPI_Comm comm, int size, int rank, const int *world_of);

/* The collectives, as lx_comm_ops has them (comm/comm.h); op is a dist_op. */
void lx_ipc_all_reduce(float *buf, size_t count, int op);
void lx_ipc_reduce(float *buf, size_t count, int root, int op);
void lx_ipc_broadcast(float *buf, size_t count, int root);
void lx_ipc_reduce_scatter(float *out, const float *in, size_t count, int op);
void lx_ipc_all_gather(float *out, const float *in, size_t count);
void lx_ipc_scatter(float *out, const float *in, size_t count, int root);
void lx_ipc_gather(float *out, const float *in, size_t count, int root);
void lx_ipc_all_to_all(float *out, const float *in, size_t count);

/* Point to point, world ranks. A send never waits for its receiver: the
 * data goes into a window of the sender's kept for that receiver (grown or
 * added as needed), and a control message says where. A receive waits for
 * that message, then copies out of the sender's window. */
void lx_ipc_send(const float *buf, size_t count, int peer);
void lx_ipc_recv(float *buf, size_t count, int peer);
/* 1 when the control message of the next message from `peer` has come
 * (lx_ipc_recv would not wait): dist_test on an irecv. */
int lx_ipc_recv_ready(int peer);

/* Rounds and messages this process has run since it started: tests check
 * that results came through the protocol. */
int64_t lx_ipc_steps_run(void);
#endif /* LX_IPC_DEV_ONLY */

#ifdef __cplusplus
}
#endif

#endif /* LECTERN_SHARED_IPC_H */
