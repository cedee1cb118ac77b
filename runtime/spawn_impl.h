/*
 * spawn_impl.h: what spawn.c (process start, step forwarding, failure
 * watch) shares with the collectives (comm.c, comm_mpi.c, comm_nccl.c).
 * Not for lectures.
 *
 * Inside a rank the picture is:
 *
 *   spawn.c      MPI_Init, receives the spawn description, starts the
 *                backend (lx_comm_start), runs fn, stops it (lx_comm_stop)
 *   comm.c       the public dist_* calls: argument checks, then one of
 *   comm_mpi.c   Open MPI on host buffers (MPI_COMM_WORLD of the ranks)
 *   comm_nccl.c  NCCL on device buffers (built with LECTERN_CUDA only)
 */
#ifndef LECTERN_SPAWN_IMPL_H
#define LECTERN_SPAWN_IMPL_H

#include <stddef.h>

#include "lectern.h"

typedef enum { LX_BACKEND_MPI = 0, LX_BACKEND_NCCL = 1 } lx_backend;

/* ---------------- spawn.c (inside a rank) ---------------- */

/* Before a call that can block on other ranks, a rank writes where it is
 * (its lecture stack and the operation's name) to its status slot, which
 * the parent reads when it has to explain a deadlock or a crash. Cheap: one
 * stack capture (a few microseconds) and a copy. Nothing outside a rank. */
void lx_rank_where(const char *operation);

/* ---------------- comm.c ---------------- */

/* Starts the collectives of this rank on `backend` (the parent chose it),
 * and stops them before the rank leaves. `device` is the GPU of this rank
 * under NCCL (-1 under Open MPI). */
void lx_comm_start(lx_backend backend, int rank, int world_size, int device);
void lx_comm_stop(void);

/* ---------------- comm_mpi.c / comm_nccl.c ---------------- */

/* One backend's collectives on `count` floats. Arguments were checked by
 * comm.c: counts fit an int, buffers live where the backend wants them,
 * roots are valid ranks. `out` and `in` may be the same buffer only where
 * noted. AVG is passed down as is: each backend knows how to average. */
typedef struct lx_comm_ops {
    void (*barrier)(void);
    void (*all_reduce)(float *buf, size_t count, dist_op op);
    void (*reduce)(float *buf, size_t count, int root, dist_op op);
    void (*broadcast)(float *buf, size_t count, int root);
    /* out: count floats; in: world_size * count floats */
    void (*reduce_scatter)(float *out, const float *in, size_t count, dist_op op);
    /* out: world_size * count floats; in: count floats */
    void (*all_gather)(float *out, const float *in, size_t count);
    /* in (root only, else NULL): world_size * count; out: count */
    void (*scatter)(float *out, const float *in, size_t count, int root);
    /* in: count; out (root only, else NULL): world_size * count */
    void (*gather)(float *out, const float *in, size_t count, int root);
    void (*send)(const float *buf, size_t count, int peer);
    void (*recv)(float *buf, size_t count, int peer);
    /* Non-blocking pair: returns the backend's request; wait frees it. */
    void *(*isend)(const float *buf, size_t count, int peer);
    void *(*irecv)(float *buf, size_t count, int peer);
    void (*wait)(void *request);
    void (*stop)(void);
} lx_comm_ops;

const lx_comm_ops *lx_comm_mpi_start(int rank, int world_size);
#ifdef LECTERN_CUDA
const lx_comm_ops *lx_comm_nccl_start(int rank, int world_size, int device);
#endif

#endif /* LECTERN_SPAWN_IMPL_H */
