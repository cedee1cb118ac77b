/*
 * ranks/ranks.h: the ranks layer's contract: how ranks come to exist and
 * report. Not for lectures. It sits above the trace and tensor layers and
 * below the comm layer (make check-layers).
 *
 *   spawn.c        the parent's spawn(): picks the backend, hands the spawn to
 *                  the pool's first world_size ranks, waits for them
 *   spawn_relay.c  the parent: the ranks' steps and results into the trace
 *   spawn_watch.c  the parent: what stops a spawn (a rank died, stragglers,
 *                  a host lost, no progress, a time limit, Ctrl-C), said
 *   spawn_deadlock.c the parent: ranks waiting for each other, proven
 *                  from the board (spawn_run.h: what these four share)
 *   spawn_backend.c the parent's choice of backend (MPI, NCCL, shared GPUs)
 *   pool.c         the parent's pool of rank processes: started with mpirun
 *                  at the first spawn, grown or replaced when needed, stopped
 *                  at exit
 *   wire.c         framed messages between the parent and a rank over a
 *                  socket (Unix on one machine, TCP across machines)
 *   spawn_rank.c   a pool rank: MPI_Init once, then one spawn after another;
 *                  the rank's counters and status slot the comm layer writes
 *   globals.c      a rank's copy of the lecture's globals at start, put back
 *                  before every spawn
 *   spawn_board.c  the status board a rank writes and the parent reads
 *   spawn_result.c what ranks return (spawn_return) kept for spawn_result
 *   crash.c        signals: an error step at the last lecture line, the pool
 *                  stopped, then exit
 *   ranks_mpi.h    lx_rank_comm(), the one declaration with an MPI type
 *
 * Who calls it: lecture_main (lx_spawn_child_entry, lx_spawn_shutdown,
 * lx_install_crash_handlers, lx_ranks_set_comm), the comm layer (the board,
 * lx_rank_enter/leave and the counters), tests and benchmarks (lx_pool_*,
 * lx_choose_backend). It starts and stops a rank's communication through
 * lx_comm_hooks, never by name. No MPI type here: lx_rank_comm(), the
 * spawn's communicator, is in ranks_mpi.h, for the files that call MPI.
 */
#ifndef LECTERN_RANKS_LAYER_H
#define LECTERN_RANKS_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"
#include "trace/trace.h"

#include "lectern.h"

/* How a spawn's ranks compute and communicate (spawn_backend.c chooses):
 *   MPI     the CPU: host tensors, Open MPI on host memory
 *   NCCL    one GPU per rank: device tensors, NCCL
 *   SHARED  more ranks than GPUs: rank r on cuda:(r mod GPUs), device
 *           tensors, Open MPI through pinned host buffers (comm_staged.c)
 *   SHARED_CUDA_AWARE  the same where Open MPI is CUDA-aware: device
 *           pointers go straight to it
 *   STAGED_HOST  a test hook (LECTERN_STAGE_TEST=1): the CPU, host tensors,
 *           run through comm_staged.c's pipeline with memcpy as the copies
 *   NCCL_EMULATED  LECTERN_BACKEND=nccl with LECTERN_NCCL_EMULATE=1: the CPU,
 *           host tensors, comm_nccl.c's logic on the NCCL emulator
 *           (comm/nccl_emu.c); "nccl" in the trace and in dist_backend() */
typedef enum {
    LX_BACKEND_MPI = 0,
    LX_BACKEND_NCCL = 1,
    LX_BACKEND_SHARED = 2,
    LX_BACKEND_STAGED_HOST = 3,
    LX_BACKEND_SHARED_CUDA_AWARE = 4, /* SHARED, device pointers straight to CUDA-aware Open MPI */
    LX_BACKEND_NCCL_EMULATED = 5,
} lx_backend;

/* ---------------- small helpers of this layer ---------------- */

/* "s" after a count that is not one: "1 rank", "4 ranks". */
static inline const char *lx_plural(int n) { return n == 1 ? "" : "s"; }

/* Seconds cut to whole microseconds (toward zero), as times and durations
 * are written into the trace. */
static inline double lx_round_us(double seconds) { return (double)(long long)(seconds * 1e6) / 1e6; }

/* The NCCL backend, on GPUs or on its emulator. */
static inline int lx_backend_is_nccl(lx_backend b) { return b == LX_BACKEND_NCCL || b == LX_BACKEND_NCCL_EMULATED; }

/* spawn_backend.c: the parent's choice for a spawn of world_size ranks on a
 * machine with `gpus` GPUs whose compute mode is `compute_mode` (the worst
 * of those the spawn would use: 0 default, 1 exclusive-thread (obsolete),
 * 2 prohibited, 3 exclusive-process, as cudaComputeMode numbers them),
 * `parent_on_gpu` when the lecture process itself holds a CUDA context,
 * `forced` LECTERN_BACKEND (NULL or "" when unset), `nccl_built` (1: this
 * build has NCCL support and, where the spawn would use it, the library
 * loads; 0: no NCCL support built; -1: built, but the library cannot be
 * loaded or is too old, which the caller adds to the reason),
 * `hostfile` (LECTERN_HOSTFILE is set) and `nccl_emulate` (LECTERN_NCCL_EMULATE
 * is 1: a spawn forced to NCCL runs on the emulator, whatever the GPUs).
 * Returns the backend; *reason (malloc'd)
 * says what the spawn's note says. A forced backend that cannot work is an
 * lx_fatal at the spawn() line. A pure function of its arguments, so a test
 * can try every case on any machine. */
lx_backend lx_choose_backend(int world_size, int gpus, int compute_mode, int parent_on_gpu, const char *forced,
                             int nccl_built, int hostfile, int stage_test, int mpi_cuda_aware, int nccl_emulate,
                             char **reason);
/* The facts it needs from CUDA: the deciding compute mode over the visible
 * GPUs (read without making a context), and whether this process holds one. */
int lx_gpu_compute_mode(void);
int lx_gpu_held_here(void);

/* ---------------- how a pool rank is started ---------------- */

/* mpirun starts every pool rank as
 *     EXE --lectern-rank ADDRESS BOARD HOST
 * ADDRESS: where the parent listens ("unix:NAME", an abstract Unix socket,
 * or "tcp:HOST:PORT"); BOARD: the status board's shm name; HOST: the
 * parent's host name (ranks there use the board). The environment variable
 * LECTERN_POOL_TOKEN carries a secret the rank repeats in its hello, so the
 * parent talks only to its own ranks. */
#define RANK_FLAG "--lectern-rank"
#define POOL_TOKEN_ENV "LECTERN_POOL_TOKEN"

/* ---------------- wire.c: messages between the parent and a rank ---------------- */

/* Each message is a header {type, size} and `size` bytes. */
enum {
    MSG_HELLO = 1, /* rank -> parent: pool_hello, right after connecting */
    MSG_READY,     /* rank -> parent: MPI is up, the rank waits for work */
    MSG_SPAWN,     /* parent -> rank: spawn_desc, then args_size bytes */
    MSG_STEP,      /* rank -> parent: one step as JSON text */
    MSG_DONE,      /* rank -> parent: fn returned */
    MSG_RESULT,    /* rank -> parent: the bytes of spawn_return(), before MSG_DONE */
    MSG_BOARD,     /* rank on another host -> parent: int32 spawn id, then its board_slot */
    MSG_MODELLED,  /* rank -> parent: one span of model_compute() as JSON text (trace.h) */
    MSG_TWIN,      /* rank -> parent: --twin-record's events of the spawn as JSON text, before MSG_DONE */
    MSG_LINKS,     /* rank -> parent: the spawn's calls for the message links as JSON text (trace.h), before MSG_DONE */
};

/* A rank on another host has no board to write to: it keeps its slot in its
 * own memory and sends a copy while a spawn runs, when the slot changes and
 * at least every BOARD_KEEPALIVE seconds. The parent mirrors it into its
 * board (so the deadlock detector sees every rank) and takes HOST_SILENCE
 * seconds without a word from such a rank as its host lost. */
#define BOARD_KEEPALIVE 0.5
#define HOST_SILENCE 10.0

typedef struct pool_hello {
    char token[40];
    int32_t pool_rank;
    int32_t pid;
    char host[256];
} pool_hello;

/* Sends one message whose body is `a` then `b` (either may be empty).
 * Returns 0, or -1 when the peer is gone. Never raises SIGPIPE. */
int lx_wire_send(int fd, uint32_t type, const void *a, size_t na, const void *b, size_t nb);

/* Receives one message; *body is malloc'd (NUL-terminated for convenience)
 * and the caller frees it. Returns 0, or -1 at end of stream or on error. */
int lx_wire_recv(int fd, uint32_t *type, char **body, size_t *size);

/* Passes open file descriptors over a Unix socket (SCM_RIGHTS): the parent
 * gives a local rank its stdout and stderr. Return 0 or -1. */
int lx_wire_send_fds(int fd, const int *fds, int n);
int lx_wire_recv_fds(int fd, int *fds, int n);

/* The parent's listening socket: an abstract Unix socket, or TCP on every
 * interface (any free port). `address` receives what ranks connect to.
 * Returns the socket or -1 (errno set). */
int lx_wire_listen(int tcp, const char *tag, char *address, size_t size);

/* A rank connects to `address`. Returns the socket or -1 (errno set). */
int lx_wire_connect(const char *address);

/* ---------------- the spawn description ---------------- */

/* What the parent tells the ranks of one spawn. */
typedef struct spawn_desc {
    int64_t fn_offset; /* fn - &lx_spawn_child_entry: the same in every copy of the binary */
    int32_t spawn_id;
    int32_t world_size;
    int32_t backend; /* lx_backend */
    int32_t quick;
    int32_t quiet;
    int32_t expect_failure; /* spawn_expect_failure(): a rank's errors are the lesson */
    int32_t shared_ipc;     /* ranks sharing a GPU: lx_shared_ipc_mode */
    double clock_zero;      /* the parent's monotonic time at lecture start */
    uint64_t args_size;
    char lecture[128];     /* the lecture's name, for a rank's progress lines */
    char cwd[4096];        /* the parent's working directory: ranks start each spawn there */
    char options[2048];    /* the lecture's own options, "name[=value]\n" lines (options.c) */
    char visibility[2048]; /* grade_visibility's prefixes, "visibility\tprefix\n" lines (grade_visibility.c) */
} spawn_desc;

/* The shared-GPU protocol (comm/shared_ipc.c), as the parent decides it
 * for a spawn: OFF (not tried: no shared GPU, or LECTERN_SHARED_IPC=0),
 * DEVICE (tried on the GPU, the staged host path where its probe fails),
 * SHM (the test hook LECTERN_SHARED_IPC_CPU=1 under LECTERN_STAGE_TEST=1:
 * host tensors through the protocol over shared memory). A rank reads its
 * spawn's with lx_spawn_shared_ipc (spawn_rank.c). */
enum lx_shared_ipc_mode { LX_SHARED_IPC_OFF = 0, LX_SHARED_IPC_DEVICE = 1, LX_SHARED_IPC_SHM = 2 };
int lx_spawn_shared_ipc(void);

/* ---------------- spawn_board.c: the status board ---------------- */

/* One slot per pool rank, in shared memory on the parent's host. */
enum { SLOT_EMPTY = 0, SLOT_IDLE, SLOT_RUNNING, SLOT_FAILED };

/* Frames as text, "line<TAB>path<TAB>function<NEWLINE>", outermost first:
 * plain bytes, so a signal handler can write them and the parent read them. */
#define FRAMES_TEXT 3072

typedef struct board_slot {
    volatile int pid;           /* 0 until the rank has started */
    volatile int state;         /* SLOT_* */
    volatile unsigned progress; /* +1 at each step and each blocking call entered */
    double failed_at;           /* monotonic seconds */
    char operation[48];         /* the blocking call last entered, "dist_recv" */
    volatile int waiting;       /* 1 while inside a call that waits for other ranks */
    volatile int peer;          /* whom it waits for: a rank, or -1 for all (a collective) */
    char where[FRAMES_TEXT];    /* lecture stack at the last step or blocking call */
    char failure[160];          /* "died with SIGSEGV", "exited with status 3" */
    char failure_frames[FRAMES_TEXT];
    /* What the deadlock detector reads (spawn_deadlock.c), written by the lecture's
     * thread of the rank only. `version` is a sequence lock: odd while the
     * rank writes the fields below, so the parent can tell a torn read.
     * Counters of this spawn: point-to-point sends started to each rank,
     * receives posted from each rank, collectives entered. `need`: what the
     * call the rank waits in needs from others (LX_NEED_*), up to two
     * conditions (dist_sendrecv); none while it waits for something no
     * counter shows (a dist_wait on a collective's request). */
    volatile unsigned version;
    int sends_to[LECTERN_MAX_WORLD];
    int recvs_from[LECTERN_MAX_WORLD];
    int collectives;
    int need_kind[2], need_peer[2], need_seq[2];
    /* On Ctrl-C the lecture asks a working rank where it is (SIGUSR2): its
     * handler writes its stack here and raises `sampled`. */
    volatile int sampled;
    char sample[FRAMES_TEXT];
} board_slot;

/* What a waiting call needs before it can return:
 *   RECV_POSTED  rank `peer` has posted at least `seq` receives from this
 *                rank (this rank's seq-th send to it is matched)
 *   SEND_STARTED rank `peer` has started at least `seq` sends to this rank
 *   COLLECTIVE   every rank has entered at least `seq` collectives */
enum { LX_NEED_NONE = 0, LX_NEED_RECV_POSTED, LX_NEED_SEND_STARTED, LX_NEED_COLLECTIVE };

typedef struct board {
    board_slot slot[LECTERN_MAX_WORLD];
} board;

/* Maps the board `name`; creates it (zeroed) when `create`. NULL when it
 * cannot: a rank on another host has no board, and runs without one. */
board *lx_board_map(const char *name, int create);

/* Clears a slot for a new spawn (the parent, before it hands the spawn out). */
void lx_board_slot_reset(board_slot *s);

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

/* ---------------- spawn.c ---------------- */

/* SIGINT or SIGTERM while spawn() waits for its ranks: the crash handler
 * (crash.c) leaves the signal in lx_spawn_interrupt instead of acting, and
 * spawn()'s loop, woken within 20 ms, reads the board while the ranks are
 * still there, writes where each rank is, stops them, and raises the
 * signal again for the handler to finish (the trace, the exit). */
extern volatile int lx_spawn_waiting;   /* 1 inside spawn()'s wait loop */
extern volatile int lx_spawn_interrupt; /* the signal left for it, or 0 (an int: sig_atomic_t) */

/* ---------------- spawn_result.c ---------------- */

/* Forgets the previous spawn's results; a spawn of `world_size` ranks
 * starts (the parent). */
void lx_spawn_results_clear(int world_size);
/* Keeps `body` (malloc'd; taken over) as what `rank` returned. */
void lx_spawn_results_put(int rank, char *body, size_t size);

/* ---------------- pool.c: the parent's pool of ranks ---------------- */

/* Makes sure a pool of at least `world_size` ranks is up, every rank
 * connected and waiting: starts one with mpirun (the first time), or a
 * bigger one in place of one too small or broken. Returns 0, or -1 with
 * *error set (malloc'd) to a sentence saying why, the pool then stopped.
 * Fills *started_now with 1 when this call started a pool. */
int lx_pool_ensure(int world_size, double limit_seconds, int *started_now, char **error);

/* The smallest pool started: LECTERN_POOL_MIN, default 4 (a bad value is
 * an error at the spawn() line). */
int lx_pool_min_ranks(void);

/* A Slurm allocation the lecture runs in (inside salloc or sbatch: SLURM_JOB_ID
 * is set). mpirun then places the pool's ranks on the allocation's nodes, as
 * many on each as it has tasks there (Open MPI's ras/slurm component reads
 * SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE; no hostfile is needed), and
 * the pool never asks for more ranks than the allocation's tasks. */
typedef struct lx_slurm {
    int present;              /* SLURM_JOB_ID is set */
    char job[32];             /* SLURM_JOB_ID */
    char nodes[256];          /* SLURM_JOB_NODELIST, as Slurm writes it ("node[1-4]") */
    int n_nodes;              /* SLURM_JOB_NUM_NODES; 0 when unset */
    char tasks_per_node[128]; /* SLURM_TASKS_PER_NODE ("4", "2(x3),1") */
    int tasks;                /* their sum; 0 when it cannot be read */
    int here_only;            /* one node, this host: ranks reach the lecture by a Unix socket */
} lx_slurm;

/* Fills *out from the environment; returns out->present. */
int lx_pool_slurm(lx_slurm *out);

/* The sum of a SLURM_TASKS_PER_NODE value ("2(x3),1" is 7), or -1 when it is
 * not of that form. */
int lx_slurm_count_tasks(const char *tasks_per_node);

int lx_pool_size(void);
/* The single-copy mechanism (btl_vader_single_copy_mechanism) the running
 * pool's Open MPI was given: "cma" where the probe saw one process read
 * another's memory and every rank is on this host (a message then moves
 * while its sender computes: the receiver copies it), else "none" (the
 * sender's side moves it, from inside an MPI call or its progress thread),
 * or what the environment set. */
const char *lx_pool_single_copy(void);
int lx_pool_fd(int rank);           /* the socket to pool rank `rank` */
int lx_pool_pid(int rank);          /* its pid when on this host, else 0 */
const char *lx_pool_host(int rank); /* its host as it names itself, with the address it connected from */
board *lx_pool_board(void);         /* NULL when shared memory is unavailable */

/* Kills every pool process now and reaps mpirun (a failed spawn). */
void lx_pool_kill(void);

/* The same from a signal handler: SIGKILL to the ranks of this host, SIGTERM
 * to mpirun (which stops those elsewhere). Async-signal-safe. */
void lx_pool_kill_from_signal(void);

/* Ends the pool cleanly at exit: the ranks leave MPI and exit, mpirun ends. */
void lx_pool_stop(void);

/* What mpirun printed, made into a sentence a student can act on, or NULL
 * when it printed nothing of use. Caller frees. */
char *lx_pool_explain(void);

/* Counters for benchmarks: pools started, and start attempts that had to be
 * repeated because a pool did not come up in time. */
typedef struct lx_pool_stats {
    int starts;
    int retries;
} lx_pool_stats;
lx_pool_stats lx_pool_get_stats(void);

/* ---------------- globals.c ---------------- */

/* In a rank, at pool start: copies the bytes of every global and static
 * variable defined in a lecture source file (lx_is_lecture_path), found
 * through the binary's DWARF. Returns how many variables (or -1 when the
 * debug information cannot be read). */
int lx_globals_snapshot(void);

/* Puts those bytes back: before each spawn's fn, the lecture's globals are
 * as they were when the process started. */
void lx_globals_restore(void);

/* Bytes held by the snapshot (for tests and benchmarks). */
size_t lx_globals_bytes(void);

/* ---------------- spawn_rank.c ---------------- */

/* Before a call that can block on other ranks, a rank writes where it is
 * (its lecture stack and the operation's name) to its status slot, which
 * the parent reads when it has to explain a deadlock or a crash. Cheap: one
 * stack capture (a few microseconds) and a copy. Nothing outside a rank. */
void lx_rank_where(const char *operation);

/* The same with the stack already captured, and the rank marked as waiting
 * until lx_rank_leave(): inside a collective (peer -1: it needs every rank)
 * or a receive or send (peer: the other rank). The parent uses this to tell
 * a rank that waits for a rank that has returned (it never will complete)
 * from a rank that computes (spawn_watch.c). Both count as progress. */
void lx_rank_enter(const char *operation, const lx_frame *frames, int n, int peer);
void lx_rank_leave(void);

/* The counters the deadlock detector compares (board_slot): each returns
 * the new count, the sequence number of this send, receive or collective
 * in this spawn. Kept in the rank too, so they work without a board. */
int lx_rank_count_send(int peer);
int lx_rank_count_recv(int peer);
int lx_rank_count_collective(void);
/* What the call the rank waits in needs (LX_NEED_*): condition `i` (0 or
 * 1) of the current wait. lx_rank_enter clears both. */
void lx_rank_needs(int i, int kind, int peer, int seq);
/* What the parent's deadlock watch counts as progress, read from the
 * board: *sum moves whenever any rank of the spawn takes a step or enters
 * or leaves a waiting call; *others_working is 1 while another rank of the
 * spawn runs its own code (it is inside no waiting call). A wait of the
 * rank's own (comm_nccl.c's polls) that sees neither move for its limit is
 * stuck, by the parent's rule. Returns 0, or -1 where this rank has no
 * board (a rank on another host): then only the wait's own time counts. */
int lx_spawn_progress(unsigned *sum, int *others_working);
/* Forgets the counters: a new spawn starts. */
void lx_rank_counts_reset(void);

/* An error step for another rank of the spawn, at `frames_text` (that
 * rank's lecture stack): a receiver that finds its sender's call does not
 * match writes the sender's step too, since the sender may be blocked in
 * its send or gone on. The step travels on this rank's socket marked
 * "as_rank"; the parent stamps it with that rank. */
void lx_rank_error_for(int rank, const char *frames_text, const char *message);

/* ---------------- spawn.c, spawn_rank.c ---------------- */

/* Called first thing by lecture_main: when this process is a pool rank
 * (started by mpirun with --lectern-rank), runs it and exits; otherwise
 * returns. */
void lx_spawn_child_entry(int argc, char **argv);

/* Called by lecture_main at exit: stops the pool of ranks cleanly. */
void lx_spawn_shutdown(void);

/* ---------------- crash.c (signals) ---------------- */


/* Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM,
 * SIGINT: an error step naming the signal and the last lecture line, the
 * trace written (parent) or sent (rank), then exit. */
void lx_install_crash_handlers(void);

/* ---------------- what the ranks layer asks of the comm layer ---------------- */

/* The ranks layer runs a rank's life (MPI up, one spawn after another, MPI
 * down) and the parent's choice of backend, but it sits below the comm
 * layer and never calls it by name: it calls this table, which
 * lecture_main (runtime/lecture/main.c, the top layer) registers with
 * lx_ranks_set_comm before anything else (the comm layer's table is
 * lx_comm_layer(), comm/comm.h). */
typedef struct lx_comm_hooks {
    /* A pool rank, right after MPI_Init_thread: `provided` is the thread
     * level Open MPI gave (the progress thread starts only at MULTIPLE). */
    void (*mpi_ready)(int provided);
    /* A spawn's fn is about to run on this rank: its collectives on
     * `backend` over the spawn's communicator (lx_rank_comm(), ranks_mpi.h);
     * `device` its GPU under NCCL, else -1. */
    void (*start)(lx_backend backend, int rank, int world_size, int device);
    /* fn returned: requests never waited for are reported and completed. */
    void (*finish_requests)(void);
    /* After the leaked tensors are freed: the spawn's collectives end. */
    void (*stop)(void);
    /* The pool rank leaves, before MPI_Finalize: the progress thread stops,
     * NCCL communicators and staging buffers kept across spawns are freed. */
    void (*leave)(void);
    /* The parent, choosing a backend: Open MPI was built CUDA-aware. */
    int (*mpi_cuda_aware_built)(void);
    /* The parent, about to choose NCCL: 1 when the NCCL library loads and
     * is recent enough, else 0 with `why` saying why (comm/nccl_api.h). */
    int (*nccl_usable)(char *why, size_t size);
} lx_comm_hooks;

/* spawn_rank.c: registers the comm layer's table (lecture_main), and the
 * table (the parent's spawn.c and the rank's spawn_rank.c call through it;
 * an lx_fatal when nothing was registered). */
void lx_ranks_set_comm(const lx_comm_hooks *hooks);
const lx_comm_hooks *lx_ranks_comm(void);

/* cma.c: 1 when a process here may read a sibling's memory with
 * process_vm_readv (Open MPI's single-copy path between ranks); probed once. */
int lx_cma_works(void);

#endif /* LECTERN_RANKS_LAYER_H */
