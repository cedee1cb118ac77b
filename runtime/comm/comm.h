/*
 * comm/comm.h: the comm layer's contract, the highest layer below
 * lecture_main. Not for lectures.
 *
 * The comm layer is the public dist_* calls (comm.c, comm_requests.c,
 * comm_groups.c over comm_calls.c's descriptors and argument checks, see
 * comm_calls.h; the agreement checks of comm_agree.c, then one backend's
 * table), the rank's world (comm_world.c), its start and stop
 * (comm_layer.c), the backends
 * (comm_mpi.c: Open MPI on host buffers; comm_nccl.c: NCCL, through the
 * table of nccl_api.h, over the real library (nccl_library.c) or the CPU
 * emulator (nccl_emu.c); comm_staged.c: device tensors of ranks sharing a
 * GPU, on the device through the shared-GPU protocol (shared_ipc.c, over
 * CUDA IPC or, for tests, shared memory) or through pinned host buffers or
 * CUDA-aware Open MPI), the traffic counters (comm_stats.c, comm_pvars.c),
 * the progress thread (comm_progress.c) and dist_timer (dist_timer.c).
 *
 * It calls the layers below (ranks/ranks.h for the board and the rank's
 * counters, tensor/tensor.h, trace/trace.h) and is called by lecture_main
 * (runtime/lecture/main.c), which registers lx_comm_layer() with the ranks
 * layer: the ranks layer reaches this one only through that table.
 *
 * Who calls what here: spawn_rank.c (through lx_comm_hooks) starts and stops
 * a spawn's communication; lectures call the dist_* functions (lectern.h);
 * tests and benchmarks use the lx_stage_* and lx_progress_* hooks.
 */
#ifndef LECTERN_COMM_H
#define LECTERN_COMM_H

#include <mpi.h>

#include "ranks/ranks_mpi.h"
#include "tensor/tensor.h"

/* ---------------- the rank's world ---------------- */

/* One struct holds what a rank knows of its spawn's world; comm_world.c
 * keeps the one instance, lx_the_world, filled by lx_comm_start from what
 * the ranks layer passed and put back to these defaults by lx_comm_stop.
 * Every file of this layer reads it (no file keeps its own copy of the rank
 * or the size); the backends keep only their duplicates of `comm`. */
typedef struct lx_world {
    int rank;           /* this rank, 0 .. size-1 (0 outside a spawn) */
    int size;           /* the spawn's world size (1 outside a spawn) */
    lx_backend backend; /* what the parent chose (ranks.h); LX_BACKEND_MPI outside */
    int device;         /* this rank's GPU under NCCL or shared GPUs, else -1 */
    MPI_Comm comm;      /* the spawn's communicator (pool ranks 0 .. size-1), MPI_COMM_NULL outside */
} lx_world;
extern lx_world lx_the_world;

/* The backend's table behind the traffic counters (comm_stats.c), set by
 * lx_comm_start; NULL outside a spawn. */
struct lx_comm_ops;
extern const struct lx_comm_ops *lx_ops;

/* comm_world.c: the world set at a spawn's start (the group back to the
 * world's), and back to the defaults outside one (lx_ops NULL too). */
void lx_world_set(lx_world w);
void lx_world_reset(void);
/* 1 between lx_comm_start and lx_comm_stop: the rank runs a spawned function. */
int lx_comm_active(void);

/* The group the calls run over: lx_use_group(g) switches the backend to
 * g's ranks (lx_comm_ops.use_group) until lx_use_group(NULL) brings back
 * the world. The front brackets each group call with the two. */
struct dist_group;
void lx_use_group(const struct dist_group *g);
/* The size of what the calls run over now (the world's or the group's),
 * and this rank's place in it: what the backends and the counters read. */
int lx_current_size(void);
int lx_current_rank(void);
/* The group the calls run over now, NULL for the world. */
const struct dist_group *lx_current_group(void);
/* The element type of the call being made: lx_check_tensor (comm_calls.c)
 * sets it from the call's tensors, which all have one dtype, before the
 * backend is reached; the backends and the counters read it (the buffers
 * they are given are `count` elements of it, whatever their C type says).
 * A request keeps what it needs of it until its wait. */
void lx_use_dtype(dtype d);
dtype lx_current_dtype(void);

/* ---------------- groups (comm_groups.c) ---------------- */

/* A process group (lectern.h, dist_new_group): made by every rank of the
 * spawn at once, each with the list of its own group. comm_groups.c keeps the
 * groups of this spawn in a list and frees those left when the spawned
 * function returns. */
struct dist_group {
    int size, rank;                /* the group's size; this rank's place in it */
    int ranks[LECTERN_MAX_WORLD];  /* the world ranks, in group order */
    char name[40];                 /* "{0,2}": for messages and the status board */
    MPI_Comm comm;                 /* the group's ranks in group order (MPI_Comm_split) */
    MPI_Comm check_comm;           /* comm_agree.c's checks over the group: comm itself */
    void *backend;                 /* the backend's part (lx_comm_ops.group_new) */
    int busy;                      /* requests on it not yet waited for */
    struct lx_agree_group *agreed; /* comm_agree.c: its calls agreed on, what a timed region skipped */
    struct dist_group *next;
};

/* ---------------- comm_layer.c, comm_requests.c ---------------- */

/* Starts the collectives of this rank on `backend` (the parent chose it),
 * over lx_rank_comm(), the spawn's communicator (its world_size ranks), and stops
 * them when fn has returned. `device` is the GPU of this rank under NCCL
 * (-1 under Open MPI). */
void lx_comm_start(lx_backend backend, int rank, int world_size, int device);
/* Requests the function never waited for: an error step each at the line
 * that made it, then completed (before the tensors they use are freed). */
void lx_comm_finish_requests(void);
void lx_comm_stop(void);

/* ---------------- comm_mpi.c / comm_nccl.c ---------------- */

/* One backend's collectives on `count` elements of lx_current_dtype() (the
 * float pointers hold bf16 or fp16 bits when it is not DTYPE_F32). Arguments were checked by
 * comm_calls.c: counts fit an int, buffers live where the backend wants them,
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
    /* 1 when the request's transfer has completed (wait then does not
     * block); the request stays until its wait. */
    int (*test)(void *request);
    /* Non-blocking collectives: as their blocking twins, completed by wait. */
    void *(*iall_reduce)(float *buf, size_t count, dist_op op);
    void *(*ibroadcast)(float *buf, size_t count, int root);
    void *(*ireduce_scatter)(float *out, const float *in, size_t count, dist_op op);
    void *(*iall_gather)(float *out, const float *in, size_t count);
    /* send to dst and receive from src at once (no ordering deadlock) */
    void (*sendrecv)(const float *send, size_t send_count, int dst, float *recv, size_t recv_count, int src);
    /* out, in: size * count floats (size: the world's or the group's);
     * piece r of `in` goes to rank r, piece r of `out` comes from rank r. */
    void (*all_to_all)(float *out, const float *in, size_t count);
    void *(*iall_to_all)(float *out, const float *in, size_t count);
    /* Groups. group_new: the backend's communicators for g (g->comm holds
     * its ranks), called by every rank of the world at once (each for its
     * own group), before g is used; group_free undoes it. use_group: the
     * calls that follow run over g's ranks (ranks, roots and sizes are the
     * group's), until use_group(NULL) brings back the world. The group
     * calls bracket themselves with the two (lx_use_group, which also tells
     * lx_current_size); a request started in a group keeps what it needs
     * of it until its wait. The size and rank a backend counts in are
     * lx_current_size() and lx_current_rank(). */
    void *(*group_new)(const struct dist_group *g);
    void (*group_free)(void *backend_group);
    void (*use_group)(const struct dist_group *g);
    void (*stop)(void);
} lx_comm_ops;

const lx_comm_ops *lx_comm_mpi_start(void);
/* comm_mpi.c's pieces that the staged backend (comm_staged.c) shares: the
 * MPI_Op of a dist_op (AVG sums), and AVG's division on host memory, for
 * fp32; lx_mpi_average_as divides count elements of dtype d (bf16, fp16:
 * widened, divided in fp32, rounded once). */
MPI_Op lx_mpi_op(dist_op op);
void lx_mpi_average(float *x, size_t count, dist_op op, int world_size);
void lx_mpi_average_as(dtype d, void *x, size_t count, dist_op op, int world_size);
/* The MPI type and op of a call on dtype d: MPI_FLOAT and MPI's own ops for
 * fp32; for bf16 and fp16, types of 2 bytes an element and user ops that
 * widen both operands to fp32, combine them and round the result once (one
 * rounding per application: per step of the algorithm). The 16-bit types
 * and ops are made once per process by lx_mpi_make_16_bit_types (on the
 * thread that calls MPI first: lx_comm_mpi_start, the NCCL emulator's
 * first communicator) and kept. The NCCL emulator reduces with them too. */
void lx_mpi_make_16_bit_types(void);
MPI_Datatype lx_mpi_type_as(dtype d);
MPI_Op lx_mpi_op_as(dtype d, dist_op op);
/* comm_stats.c: a table in front of `ops` that counts this rank's calls and
 * bytes (dist_traffic_now) and passes every call on; resets the counters. */
const lx_comm_ops *lx_comm_stats_wrap(const lx_comm_ops *ops);
/* comm_pvars.c: Open MPI's per-peer count of bytes sent (MPI_T). open: 1
 * when available (tried once per process; why_not says why not); read:
 * bytes sent so far to world ranks 0 .. n - 1, 1 when read. */
int lx_pvars_open(void);
int lx_pvars_read(uint64_t *sent, int n);
const char *lx_pvars_why_not(void);
/* comm_staged.c (the copy interface, lx_stage_copier, is in tensor/tensor.h). */

/* cuda_aware: the parent chose device pointers straight to Open MPI (the
 * rank checks that Open MPI agrees at run time, and stages if not). */
const lx_comm_ops *lx_comm_staged_start(const lx_stage_copier *copier, int cuda_aware);
/* Open MPI was built CUDA-aware and LECTERN_CUDA_AWARE is not 0. */
int lx_mpi_cuda_aware_built(void);
/* For tests, in a rank: the direct path on (1) or off (0) from now on. */
void lx_stage_set_direct(int on);
/* Frees the staging buffers kept from one spawn to the next (the pool rank leaves). */
void lx_comm_staged_release(void);
const lx_stage_copier *lx_stage_host_copier(void);
/* In a rank of a spawn on shared GPUs: why the shared-GPU protocol's probe
 * failed ("" when it did not fail, or was not tried). lx_ipc_active()
 * (comm/shared_ipc.h) says whether it runs. */
const char *lx_stage_ipc_why_not(void);
/* Pipeline steps (chunks) this process has run: tests check that the
 * pipeline, not something else, produced a result. */
int64_t lx_stage_chunks_run(void);
/* For tests, in a rank: chunks of `floats` from now on in this process (0:
 * back to LECTERN_STAGE_CHUNK or the default), the current spawn included. */
void lx_stage_set_chunk(size_t floats);

/* comm_nccl.c: NCCL, on the real library (one GPU per rank) or, when
 * `emulated`, on the CPU emulator (nccl_emu.c, host tensors). Built in every
 * build; the real library only where this build has NCCL support. */
const lx_comm_ops *lx_comm_nccl_start(int emulated);
/* The NCCL communicators kept from one spawn to the next, destroyed when
 * the pool rank leaves. */
void lx_comm_nccl_release(void);
/* The parent: whether the real NCCL loads and is recent enough (why not, if not). */
int lx_nccl_usable(char *why, size_t size);

/* The table the ranks layer calls this layer through (ranks.h,
 * lx_comm_hooks): lecture_main registers it with lx_ranks_set_comm. */
const lx_comm_hooks *lx_comm_layer(void);

#endif /* LECTERN_COMM_H */
