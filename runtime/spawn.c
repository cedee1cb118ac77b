/*
 * spawn.c: real ranks, started by Open MPI, whose steps land in this trace.
 *
 * spawn(fn, 4, args, size) in the lecture (the parent):
 *
 *   1. MPI_Init once (the lecture becomes an MPI "singleton"), then
 *      MPI_Comm_spawn starts 4 copies of this same executable with the
 *      argument --lectern-rank. They share MPI_COMM_WORLD among themselves
 *      and reach the parent through an intercommunicator.
 *   2. The parent broadcasts the spawn description (which function, the args
 *      bytes, the backend, the clock) over that intercommunicator.
 *   3. Each rank runs fn(rank, 4, its own copy of args). Its steps (note(),
 *      ...) are sent to the parent as JSON text; the parent puts its own
 *      frames down to the spawn() line in front of each step's stack, stamps
 *      rank / world_size / spawn and appends it to the trace.
 *   4. A rank says "done" when fn returns; spawn() returns when all have.
 *
 * Failures must be loud and lose nothing. Each rank also owns a slot on a
 * small status board, a shared-memory file the parent creates on its host:
 * the rank writes its pid there, where it is before each call that can block
 * (lx_rank_where), and, from its signal handler or exit hook, how it died.
 * Writing to memory is safe in a signal handler, where sending an MPI
 * message is not. The parent polls: messages first, then every 20 ms the
 * board. A rank whose process is gone without "done" stops the spawn: the
 * others are killed, an error step names the rank, the signal or exit status
 * and the lecture line, and the lecture ends with status 1 and its trace
 * written. No progress at all (no step, no collective entered) for
 * LECTERN_TIMEOUT seconds is reported as a deadlock, with each rank's last
 * lecture line.
 *
 * Facts about Open MPI 4.1.4 (Debian, external PMIx 4.2.2) this file leans on,
 * measured on a 2-core machine:
 *  - a singleton's first MPI_Init takes ~0.3 s; spawning 4 ranks ~0.35 s;
 *  - when a spawned rank dies, Open MPI aborts the ranks' job (about 1 s
 *    later) but the parent survives and can still write its trace;
 *  - the ranks' PMIx_Init sometimes never returns when several ranks start
 *    at the same instant (5 of 228 spawns of 4 ranks in our runs), and
 *    MPI_Comm_spawn in the parent then never returns either. Starting the
 *    ranks 3 ms apart made it vanish (0 of 300, and 0 of 120 more through
 *    spawn() itself); as a second line of defence the
 *    parent calls MPI_Comm_spawn from a helper thread, and if it has not
 *    returned in time, kills the stuck ranks and spawns again (a fresh
 *    MPI_Comm_spawn from another thread works after one hung).
 *
 * This file is the parent's side; spawn_rank.c is the rank's, and
 * spawn_board.c the status board they share.
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"
#include "spawn_impl.h"

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* ------------------------------------------------------------------ */
/* In the parent                                                        */
/* ------------------------------------------------------------------ */

static int mpi_started;      /* MPI_Init done in this process */
static int mpi_unusable;     /* a spawn failed or hung: no MPI_Finalize at exit */
static int threads_ok;       /* MPI_THREAD_MULTIPLE: spawn from a helper thread */
static int used_mpi, used_nccl;

static void mpi_start(void) {
    if (mpi_started) return;
    /* Open MPI reads these at MPI_Init; an explicit setting by the user wins.
     * Oversubscribe: 4 ranks on a 2-core machine is the point of the lecture.
     * Root: containers often run as root, which Open MPI refuses by default. */
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    /* Shared-memory transfers through the kernel (CMA) are refused inside
     * most containers and Open MPI then warns on every run; plain copies
     * through the shared segment work everywhere. */
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided));
    threads_ok = provided >= MPI_THREAD_MULTIPLE;
    /* A spawn that cannot start (a host of the hostfile unreachable, the
     * program missing there) becomes an error step, not an abort. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    mpi_started = 1;
}

void lx_spawn_shutdown(void) {
    if (!mpi_started || mpi_unusable) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_CHECK(MPI_Finalize());
}

static double timeout_seconds(void) {
    const char *s = getenv("LECTERN_TIMEOUT");
    if (s && *s) {
        char *end;
        double t = strtod(s, &end);
        if (*end == '\0' && t > 0) return t;
        lx_fatal("LECTERN_TIMEOUT='%s' is not a positive number of seconds", s);
    }
    return 120.0;
}

/* NCCL when every rank can have a GPU of its own; else Open MPI on host
 * memory. LECTERN_BACKEND=mpi|nccl overrides (e.g. nccl across machines,
 * where the GPUs of the other hosts are not visible here). */
static lx_backend choose_backend(int world_size, char **reason) {
    int gpus = gpu_count();
    const char *forced = getenv("LECTERN_BACKEND");
    if (forced && *forced) {
        if (strcmp(forced, "mpi") == 0) {
            *reason = lx_fmt("LECTERN_BACKEND=mpi: Open MPI on host memory (%d ranks, %d GPU%s)",
                             world_size, gpus, gpus == 1 ? "" : "s");
            return LX_BACKEND_MPI;
        }
        if (strcmp(forced, "nccl") == 0) {
#if LECTERN_NCCL
            *reason = lx_fmt("LECTERN_BACKEND=nccl: NCCL on device memory (%d ranks, %d GPU%s here)",
                             world_size, gpus, gpus == 1 ? "" : "s");
            return LX_BACKEND_NCCL;
#else
            lx_fatal("LECTERN_BACKEND=nccl, but this build has no NCCL (no CUDA, or no NCCL found at build time)");
#endif
        }
        lx_fatal("LECTERN_BACKEND='%s': expected 'mpi' or 'nccl'", forced);
    }
    if (LECTERN_NCCL && gpus > 0 && world_size <= gpus) {   /* no NCCL: as if not possible */
        *reason = lx_fmt("%d rank%s, %d GPU%s: NCCL on device memory", world_size,
                         world_size == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s");
        return LX_BACKEND_NCCL;
    }
    *reason = lx_fmt("%d rank%s, %d GPU%s: Open MPI on host memory%s", world_size,
                     world_size == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s",
                     gpus > 0 && !LECTERN_NCCL ? " (this build has no NCCL)" : "");
    return LX_BACKEND_MPI;
}

typedef struct held_step held_step;

/* One spawn, as the parent sees it. */
typedef struct spawn_run {
    int id, world_size;
    lx_backend backend;
    lx_frame parent[LX_MAX_FRAMES];
    int n_parent;
    cJSON *entry;                     /* its object in the trace's "spawns" */
    double started;
    char board_name[96];
    board *board;
    MPI_Comm inter;
    int done[LECTERN_MAX_WORLD];
    int n_done;
    unsigned last_progress_sum;
    double last_progress;
    held_step *held;                  /* steps received, not yet appended (see release) */
    int n_held, cap_held;
    unsigned long seq;
} spawn_run;

/* ---- starting the ranks ---- */

typedef struct start_call {
    char exe[4096];
    char *argv[3];
    int world_size;
    MPI_Info info;
    MPI_Comm inter;
    int rc;
    volatile int finished;
} start_call;

static void *start_thread(void *p) {
    start_call *c = p;
    c->rc = MPI_Comm_spawn(c->exe, c->argv, c->world_size, c->info, 0, MPI_COMM_SELF, &c->inter,
                           MPI_ERRCODES_IGNORE);
    __atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void set_number(cJSON *obj, const char *key, double v) {
    cJSON *n = cJSON_CreateNumber(v);
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, n);
    else cJSON_AddItemToObject(obj, key, n);
}

static void finish_entry(spawn_run *run, const char *status) {
    cJSON_ReplaceItemInObjectCaseSensitive(run->entry, "status", cJSON_CreateString(status));
    set_number(run->entry, "seconds", (double)(long long)((now_seconds() - run->started) * 1e6) / 1e6);
}

static void board_remove(spawn_run *run) {
    if (run->board) munmap(run->board, sizeof(board));
    run->board = NULL;
    shm_unlink(run->board_name);
}

static void board_create(spawn_run *run, int attempt) {
    snprintf(run->board_name, sizeof run->board_name, "/lectern-%d-%d-%d", (int)getpid(), run->id, attempt);
    shm_unlink(run->board_name);   /* a leftover of a crashed run with our pid */
    run->board = lx_board_map(run->board_name, 1);
    if (!run->board)
        fprintf(stderr, "lectern: no status board in /dev/shm (%s): crashes will be found by the timeout only\n",
                strerror(errno));
}

/* MPI_Info for MPI_Comm_spawn: run in our directory (relative asset paths
 * work the same in ranks), and on the hosts of LECTERN_HOSTFILE if set. */
static MPI_Info spawn_info(void) {
    MPI_Info info;
    MPI_CHECK(MPI_Info_create(&info));
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) MPI_CHECK(MPI_Info_set(info, "wdir", cwd));
    const char *hostfile = getenv("LECTERN_HOSTFILE");
    if (hostfile && *hostfile) {
        if (access(hostfile, R_OK) != 0)
            lx_fatal("LECTERN_HOSTFILE='%s' cannot be read: %s", hostfile, strerror(errno));
        MPI_CHECK(MPI_Info_set(info, "add-hostfile", hostfile));
    }
    return info;
}

/* Starts the ranks. Returns 0, or -1 when Open MPI did not finish starting
 * them within `limit` seconds (the stuck call is left behind in its thread,
 * the processes it started are killed). */
static int start_ranks(spawn_run *run, double limit) {
    start_call *c = calloc(1, sizeof *c);
    if (!c) lx_fatal("out of memory");
    ssize_t len = readlink("/proc/self/exe", c->exe, sizeof c->exe - 1);
    if (len <= 0) lx_fatal("cannot find this program's path (/proc/self/exe): %s", strerror(errno));
    c->exe[len] = '\0';
    c->argv[0] = RANK_FLAG;
    c->argv[1] = run->board_name;
    c->argv[2] = NULL;
    c->world_size = run->world_size;
    c->info = spawn_info();

    if (!threads_ok) {   /* no helper thread possible: plain blocking call */
        start_thread(c);
    } else {
        pthread_t th;
        if (pthread_create(&th, NULL, start_thread, c) != 0) lx_fatal("cannot create a thread");
        double t0 = now_seconds();
        double nap = 0.0002;
        while (!__atomic_load_n(&c->finished, __ATOMIC_ACQUIRE) && now_seconds() - t0 < limit) {
            lx_sleep_seconds(nap);
            if (nap < 0.005) nap *= 2;
        }
        if (!__atomic_load_n(&c->finished, __ATOMIC_ACQUIRE)) {
            /* Open MPI is stuck starting them. Leave the call (and `c`, which it
             * still writes to) behind, stop what it started. */
            pthread_detach(th);
            mpi_unusable = 1;   /* a thread is inside MPI for good: never MPI_Finalize */
            if (run->board) {
                for (int i = 0; i < run->board->started && i < LECTERN_MAX_WORLD; i++)
                    if (run->board->started_pid[i] > 0) kill(run->board->started_pid[i], SIGKILL);
            }
            return -1;
        }
        pthread_join(th, NULL);
    }
    MPI_CHECK(MPI_Info_free(&c->info));
    int rc = c->rc;
    run->inter = c->inter;
    free(c);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        mpi_unusable = 1;
        board_remove(run);
        finish_entry(run, "failed");
        lx_fatal("spawn of %d rank%s failed: Open MPI could not start them: %s", run->world_size,
                 plural(run->world_size), msg);
    }
    return 0;
}

/* ---- steps from the ranks ---- */

/* The parent's frames, then the rank's. */
static cJSON *joined_stack(const spawn_run *run, cJSON *rank_stack) {
    cJSON *stack = lx_stack_to_json(run->parent, run->n_parent);
    cJSON *f;
    cJSON_ArrayForEach(f, rank_stack) cJSON_AddItemToArray(stack, cJSON_Duplicate(f, 1));
    return stack;
}

static int has_error(cJSON *step) {
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (type && strcmp(type, "error") == 0) return 1;
    }
    return 0;
}

static void append_rank_step(spawn_run *run, int rank, cJSON *step) {
    cJSON *stack = joined_stack(run, cJSON_GetObjectItemCaseSensitive(step, "stack"));
    if (cJSON_GetObjectItemCaseSensitive(step, "stack"))
        cJSON_ReplaceItemInObjectCaseSensitive(step, "stack", stack);
    else
        cJSON_AddItemToObject(step, "stack", stack);
    set_number(step, "rank", rank);
    set_number(step, "world_size", run->world_size);
    set_number(step, "spawn", run->id);
    if (has_error(step)) lx_mark_failed();   /* lx_error in a rank fails the lecture */
    lx_trace_append(step);
}

/* A step waiting to be appended. Steps from different ranks can arrive out
 * of order (a rank stamps a step, then loses its core before sending it), so
 * each is held for a short while and released in the order of the ranks'
 * clock, which on one host is the parent's clock too. */
#define HOLD_SECONDS 0.05

struct held_step {
    double time;
    unsigned long seq;      /* arrival order: breaks ties, keeps one rank's steps in order */
    int rank;
    cJSON *step;
};

static int by_time(const void *a, const void *b) {
    const held_step *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the held steps older than HOLD_SECONDS (all of them when `all`),
 * oldest first. */
static void release(spawn_run *run, int all) {
    if (run->n_held == 0) return;
    qsort(run->held, (size_t)run->n_held, sizeof run->held[0], by_time);
    double cutoff = lx_elapsed() - HOLD_SECONDS;
    int n = 0;
    while (n < run->n_held && (all || run->held[n].time <= cutoff)) {
        append_rank_step(run, run->held[n].rank, run->held[n].step);
        n++;
    }
    memmove(run->held, run->held + n, (size_t)(run->n_held - n) * sizeof run->held[0]);
    run->n_held -= n;
}

static void hold(spawn_run *run, int rank, cJSON *step) {
    if (run->n_held == run->cap_held) {
        int cap = run->cap_held ? 2 * run->cap_held : 64;
        held_step *h = realloc(run->held, (size_t)cap * sizeof *h);
        if (!h) lx_fatal("out of memory holding steps");
        run->held = h;
        run->cap_held = cap;
    }
    cJSON *t = cJSON_GetObjectItemCaseSensitive(step, "time");
    held_step *h = &run->held[run->n_held++];
    h->time = cJSON_IsNumber(t) ? t->valuedouble : 0.0;
    h->seq = run->seq++;
    h->rank = rank;
    h->step = step;
}

/* Receives every message waiting now. Returns how many there were. */
static int drain(spawn_run *run) {
    int messages = 0;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, run->inter, &flag, &st));
        if (!flag) break;
        messages++;
        if (st.MPI_TAG == TAG_DONE) {
            int code;
            MPI_CHECK(MPI_Recv(&code, 1, MPI_INT, st.MPI_SOURCE, TAG_DONE, run->inter, MPI_STATUS_IGNORE));
            if (!run->done[st.MPI_SOURCE]) run->n_done++;
            run->done[st.MPI_SOURCE] = 1;
            continue;
        }
        int count = 0;
        MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        char *text = malloc((size_t)count + 1);
        if (!text) lx_fatal("out of memory for a step of %d bytes", count);
        MPI_CHECK(MPI_Recv(text, count, MPI_CHAR, st.MPI_SOURCE, TAG_STEP, run->inter, MPI_STATUS_IGNORE));
        text[count] = '\0';
        cJSON *step = cJSON_Parse(text);
        free(text);
        if (!step) {
            fprintf(stderr, "lectern: rank %d sent a step that is not JSON; dropped\n", st.MPI_SOURCE);
            continue;
        }
        hold(run, st.MPI_SOURCE, step);
    }
    release(run, 0);
    return messages;
}

/* ---- failures ---- */

static void kill_ranks(spawn_run *run) {
    if (!run->board) return;
    for (int r = 0; r < run->world_size; r++) {
        int pid = run->board->slot[r].pid;
        if (pid > 0 && !run->done[r]) kill(pid, SIGKILL);
    }
}

/* An error step located in a rank: the parent's frames, then `frames_text`. */
static void rank_error_step(spawn_run *run, int rank, const char *frames_text, const char *message) {
    cJSON *rank_stack = lx_frames_text_to_json(frames_text);
    cJSON *step = cJSON_CreateObject();
    cJSON_AddItemToObject(step, "stack", joined_stack(run, rank_stack));
    cJSON_Delete(rank_stack);
    cJSON_AddNumberToObject(step, "rank", rank);
    cJSON_AddNumberToObject(step, "world_size", run->world_size);
    cJSON_AddNumberToObject(step, "spawn", run->id);
    cJSON_AddNumberToObject(step, "time", (double)(long long)(lx_elapsed() * 1e6) / 1e6);
    cJSON *list = cJSON_AddArrayToObject(step, "renderings");
    cJSON_AddItemToArray(list, lx_rendering_error(message));
    fprintf(stderr, "lectern: %s\n", message);
    lx_trace_append(step);
    lx_mark_failed();
}

/* Gives the ranks' last messages a moment to arrive: the steps a failing
 * rank made before it failed belong in the trace. */
static void drain_briefly(spawn_run *run) {
    double t0 = now_seconds(), last = t0;
    while (now_seconds() - last < 0.1 && now_seconds() - t0 < 1.0) {
        if (drain(run) > 0) last = now_seconds();
        lx_sleep_seconds(0.002);
    }
    release(run, 1);
}

static void __attribute__((noreturn)) fail_rank(spawn_run *run, int rank) {
    board_slot *s = &run->board->slot[rank];
    /* Its signal handler may still be writing where it was: wait (a little)
     * for the process to be gone. Meanwhile take the last steps of all. */
    double t0 = now_seconds();
    while (s->pid > 0 && kill(s->pid, 0) == 0 && now_seconds() - t0 < 2.0) {
        drain(run);
        lx_sleep_seconds(0.005);
    }
    drain_briefly(run);
    kill_ranks(run);
    mpi_unusable = 1;
    const char *frames = s->failure_frames[0] ? s->failure_frames : s->where;
    /* Copied: the board goes away before lx_fatal. */
    int silent = s->failure[0] == '\0';
    char *how = strdup(silent ? "ended before its function returned, too abruptly to say how "
                                "(SIGKILL, the out-of-memory killer, or _exit)"
                              : s->failure);
    place at = lx_innermost(frames);
    char *msg = at.known ? lx_fmt("%s:%d: rank %d of %d %s, in %s()%s", at.path, at.line, rank,
                                  run->world_size, how, at.function,
                                  silent ? " (the last line it reported)" : "")
                         : lx_fmt("rank %d of %d %s (no lecture line known)", rank, run->world_size, how);
    rank_error_step(run, rank, frames, msg);
    free(msg);
    finish_entry(run, "failed");
    board_remove(run);
    char *summary = at.known ? lx_fmt("spawn of %d rank%s failed: rank %d %s, %s %s:%d", run->world_size,
                                      plural(run->world_size), rank, how, silent ? "last seen at" : "at",
                                      at.path, at.line)
                             : lx_fmt("spawn of %d rank%s failed: rank %d %s", run->world_size,
                                      plural(run->world_size), rank, how);
    free(how);
    lx_fatal("%s", summary);
}

static void __attribute__((noreturn)) fail_deadlock(spawn_run *run, double timeout) {
    drain_briefly(run);
    kill_ranks(run);
    mpi_unusable = 1;
    int waiting = 0;
    for (int r = 0; r < run->world_size; r++) {
        if (run->done[r]) continue;
        waiting++;
        const char *frames = run->board ? run->board->slot[r].where : "";
        const char *op = run->board ? run->board->slot[r].operation : "";
        place at = lx_innermost(frames);
        char *msg = at.known ? lx_fmt("%s:%d: rank %d of %d made no progress for %g s, last in %s, in %s() "
                                      "(a deadlock? each rank waiting for another)",
                                      at.path, at.line, r, run->world_size, timeout, op, at.function)
                             : lx_fmt("rank %d of %d made no progress for %g s (no lecture line known)", r,
                                      run->world_size, timeout);
        rank_error_step(run, r, frames, msg);
        free(msg);
    }
    finish_entry(run, "failed");
    board_remove(run);
    lx_fatal("spawn of %d rank%s stopped: %d rank%s made no progress for %g s (LECTERN_TIMEOUT)",
             run->world_size, plural(run->world_size), waiting, plural(waiting), timeout);
}

/* Every 20 ms: did any rank move, and is any rank gone without "done"? */
static void watch_board(spawn_run *run, double now) {
    if (!run->board) return;
    unsigned sum = 0;
    int failed = -1;
    double failed_at = 0;
    for (int r = 0; r < run->world_size; r++) {
        board_slot *s = &run->board->slot[r];
        sum += __atomic_load_n(&s->progress, __ATOMIC_ACQUIRE);
        if (run->done[r]) continue;
        int state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
        if (state == SLOT_FAILED) {
            if (failed < 0 || s->failed_at < failed_at) { failed = r; failed_at = s->failed_at; }
        } else if (state == SLOT_RUNNING && s->pid > 0 && kill(s->pid, 0) != 0 && errno == ESRCH) {
            if (failed < 0) { failed = r; failed_at = now; }
        }
    }
    if (sum != run->last_progress_sum) {
        run->last_progress_sum = sum;
        run->last_progress = now;
    }
    if (failed >= 0) fail_rank(run, failed);
}

/* ---- spawn() ---- */

static void check_arguments(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    if (lx_in_rank()) lx_fatal("spawn() inside a spawned rank: ranks cannot start ranks of their own");
    if (!fn) lx_fatal("spawn(): the function to run is NULL");
    if (world_size <= 0 || world_size > LECTERN_MAX_WORLD)
        lx_fatal("spawn(): world_size %d is out of range: 1 to %d ranks (LECTERN_MAX_WORLD)", world_size,
                 LECTERN_MAX_WORLD);
    if (args_size > LECTERN_MAX_SPAWN_ARGS)
        lx_fatal("spawn(): args of %zu bytes exceed the limit of %u bytes (LECTERN_MAX_SPAWN_ARGS); "
                 "pass sizes and let each rank make its data",
                 args_size, (unsigned)LECTERN_MAX_SPAWN_ARGS);
    if (!args && args_size > 0) lx_fatal("spawn(): args is NULL but args_size is %zu", args_size);
}

static void record_backend(lx_backend backend) {
    if (backend == LX_BACKEND_NCCL) used_nccl = 1;
    else used_mpi = 1;
    const char *all = used_nccl && used_mpi ? "nccl+mpi" : used_nccl ? "nccl" : "mpi";
    lx_trace_meta("backend", cJSON_CreateString(all));
}

void spawn(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    check_arguments(fn, world_size, args, args_size);
    double timeout = timeout_seconds();

    spawn_run *run = calloc(1, sizeof *run);
    if (!run) lx_fatal("out of memory");
    run->world_size = world_size;
    run->started = now_seconds();
    run->n_parent = lx_stack_capture(run->parent, LX_MAX_FRAMES);
    char *reason = NULL;
    run->backend = choose_backend(world_size, &reason);

    /* The trace says which backend and why, before any rank speaks. */
    note("spawn: %s", reason);
    progress("spawn %d rank%s (%s)", world_size, world_size == 1 ? "" : "s",
             run->backend == LX_BACKEND_NCCL ? "NCCL" : "Open MPI");
    cJSON *spawns = lx_trace_spawns();
    run->id = cJSON_GetArraySize(spawns);
    run->entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(run->entry, "id", run->id);
    cJSON_AddNumberToObject(run->entry, "world_size", world_size);
    cJSON_AddStringToObject(run->entry, "backend", run->backend == LX_BACKEND_NCCL ? "nccl" : "mpi");
    cJSON_AddStringToObject(run->entry, "reason", reason);
    cJSON_AddItemToObject(run->entry, "stack", lx_stack_to_json(run->parent, run->n_parent));
    cJSON_AddStringToObject(run->entry, "status", "running");
    cJSON_AddNumberToObject(run->entry, "seconds", 0);
    cJSON_AddItemToArray(spawns, run->entry);
    record_backend(run->backend);
    free(reason);

    mpi_start();

    /* Normal start: well under a second per rank even on 2 busy cores. */
    double start_limit = 15.0 + 2.0 * world_size;
    if (start_limit > timeout) start_limit = timeout;
    for (int attempt = 0;; attempt++) {
        board_create(run, attempt);
        if (start_ranks(run, start_limit) == 0) {
            /* Every rank has mapped the board by now (before its MPI_Init):
             * the name can go, the memory stays until the last unmap, and
             * nothing is left in /dev/shm whatever happens next. */
            shm_unlink(run->board_name);
            break;
        }
        board_remove(run);
        if (attempt == 2) {
            finish_entry(run, "failed");
            lx_fatal("spawn of %d rank%s failed: Open MPI did not start them within %g s, three times",
                     world_size, plural(world_size), start_limit);
        }
        fprintf(stderr, "lectern: Open MPI did not start %d rank%s within %g s; trying again\n", world_size,
                plural(world_size), start_limit);
    }
    MPI_CHECK(MPI_Comm_set_errhandler(run->inter, MPI_ERRORS_RETURN));
    /* Start-up: from spawn() to every rank connected, retries included. */
    set_number(run->entry, "startup_s", (double)(long long)((now_seconds() - run->started) * 1e6) / 1e6);

    spawn_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.fn_offset = (int64_t)((uintptr_t)(void *)fn - (uintptr_t)(void *)&lecture_main);
    desc.spawn_id = run->id;
    desc.world_size = world_size;
    desc.backend = run->backend;
    desc.quick = lecture_quick();
    desc.quiet = lx_quiet();
    desc.clock_zero = now_seconds() - lx_elapsed();
    desc.args_size = args_size;
    gethostname(desc.host, sizeof desc.host - 1);
    snprintf(desc.lecture, sizeof desc.lecture, "%s", lx_lecture_name());
    MPI_CHECK(MPI_Bcast(&desc, (int)sizeof desc, MPI_BYTE, MPI_ROOT, run->inter));
    if (args_size) MPI_CHECK(MPI_Bcast((void *)args, (int)args_size, MPI_BYTE, MPI_ROOT, run->inter));

    /* Wait for "done" from every rank, forwarding steps as they come. Short
     * naps while idle: the ranks need the cores more than we do. */
    run->last_progress = now_seconds();
    double last_board = 0, nap = 0.00005;
    while (run->n_done < world_size) {
        double now = now_seconds();
        if (drain(run) > 0) {
            run->last_progress = now;
            nap = 0.00005;
            continue;
        }
        if (now - last_board >= 0.02) {
            last_board = now;
            watch_board(run, now);
        }
        if (now - run->last_progress > timeout) fail_deadlock(run, timeout);
        lx_sleep_seconds(nap);
        if (nap < 0.005) nap *= 2;
    }

    release(run, 1);
    MPI_CHECK(MPI_Comm_disconnect(&run->inter));
    board_remove(run);
    finish_entry(run, "ok");
    free(run->held);
    free(run);
}
