/*
 * spawn_impl.h: what the spawn files (spawn.c: the parent; spawn_rank.c:
 * a rank; spawn_board.c: the status board) share with each other and with
 * the collectives (comm.c, comm_mpi.c, comm_nccl.c).
 * Not for lectures.
 *
 * Inside a rank the picture is:
 *
 *   spawn_rank.c MPI_Init, receives the spawn description, starts the
 *                backend (lx_comm_start), runs fn, stops it (lx_comm_stop)
 *   spawn_board.c the status board the rank writes and the parent reads
 *   comm.c       the public dist_* calls: argument checks, then one of
 *   comm_mpi.c   Open MPI on host buffers (MPI_COMM_WORLD of the ranks)
 *   comm_nccl.c  NCCL on device buffers (built where NCCL is: LECTERN_NCCL)
 */
#ifndef LECTERN_SPAWN_IMPL_H
#define LECTERN_SPAWN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#include "lectern.h"

typedef enum { LX_BACKEND_MPI = 0, LX_BACKEND_NCCL = 1 } lx_backend;

/* ---------------- between the parent (spawn.c) and its ranks (spawn_rank.c) ---------------- */

#define RANK_FLAG "--lectern-rank"

/* Message tags on the parent <-> ranks intercommunicator. */
enum { TAG_STEP = 1, TAG_DONE = 2 };

/* What the parent tells its ranks at start (one MPI_Bcast). */
typedef struct spawn_desc {
    int64_t fn_offset;      /* fn - &lecture_main: the same in every copy of the binary */
    int32_t spawn_id;
    int32_t world_size;
    int32_t backend;        /* lx_backend */
    int32_t quick;
    int32_t quiet;
    double clock_zero;      /* the parent's monotonic time at lecture start */
    uint64_t args_size;
    char host[256];         /* the parent's host: ranks there use the board */
    char lecture[128];      /* the lecture's name, for a rank's progress lines */
} spawn_desc;

/* The status board (spawn_board.c): one slot per rank, in shared memory on
 * the parent's host. */
enum { SLOT_EMPTY = 0, SLOT_RUNNING, SLOT_DONE, SLOT_FAILED };

/* Frames as text, "line<TAB>path<TAB>function<NEWLINE>", outermost first:
 * plain bytes, so a signal handler can write them and the parent read them. */
#define FRAMES_TEXT 3072

typedef struct board_slot {
    volatile int pid;               /* 0 until the rank has started */
    volatile int state;             /* SLOT_* */
    volatile unsigned progress;     /* +1 at each step and each blocking call entered */
    double failed_at;               /* monotonic seconds */
    char operation[48];             /* the blocking call last entered, "dist_recv" */
    char where[FRAMES_TEXT];        /* lecture stack at the last step or blocking call */
    char failure[160];              /* "died with SIGSEGV", "exited with status 3" */
    char failure_frames[FRAMES_TEXT];
} board_slot;

typedef struct board {
    volatile int started;                     /* processes that registered, in any order */
    volatile int started_pid[LECTERN_MAX_WORLD];
    board_slot slot[LECTERN_MAX_WORLD];
} board;

/* Maps the board `name`; creates it (zeroed) when `create`. NULL when it
 * cannot: a rank on another host has no board, and runs without one. */
board *lx_board_map(const char *name, int create);

/* Frames to text (cut short rather than overflowing), and back as the stack
 * JSON of a step. */
void lx_frames_to_text(const lx_frame *frames, int n, char *out, size_t size);
cJSON *lx_frames_text_to_json(const char *text);

/* The innermost frame of a frames text: where the rank was. */
typedef struct place {
    int known;
    int line;
    char path[512];
    char function[256];
} place;
place lx_innermost(const char *text);

void lx_sleep_seconds(double seconds);

/* ---------------- spawn_rank.c ---------------- */

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
#if LECTERN_NCCL
const lx_comm_ops *lx_comm_nccl_start(int rank, int world_size, int device);
#endif

#endif /* LECTERN_SPAWN_IMPL_H */
