/*
 * spawn_rank.c: inside a rank started by spawn().
 *
 * The same executable as the lecture, started by Open MPI with
 * --lectern-rank BOARD. lecture_main() hands it to lx_spawn_child_entry()
 * at once, which: registers on the status board, joins MPI, receives the
 * spawn description and the args from the parent, starts the collectives,
 * runs fn(rank, world_size, args), says "done" and exits. Every step the
 * rank makes goes to the parent as JSON text (rank_sink); the parent adds
 * it to the one trace. See spawn.c for the parent's side.
 */
#include <cblas.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"
#include "spawn_impl.h"

static MPI_Comm to_parent = MPI_COMM_NULL;
static board_slot *my_slot;
static spawn_desc my_desc;
static int my_rank = -1;

/* Each step goes to the parent as JSON text, stamped with the parent's clock
 * (CLOCK_MONOTONIC is one clock for all processes of a host). */
static void rank_sink(cJSON *step) {
    double t = now_seconds() - my_desc.clock_zero;
    cJSON *time = cJSON_CreateNumber((double)(long long)(t * 1e6) / 1e6);
    if (cJSON_GetObjectItemCaseSensitive(step, "time"))
        cJSON_ReplaceItemInObjectCaseSensitive(step, "time", time);
    else
        cJSON_AddItemToObject(step, "time", time);

    if (my_slot) {   /* the step's line is this rank's latest known place */
        lx_frame frames[LX_MAX_FRAMES];
        int n = 0;
        cJSON *f;
        cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(step, "stack")) {
            if (n == LX_MAX_FRAMES) break;
            frames[n].path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path"));
            frames[n].function = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "function"));
            cJSON *line = cJSON_GetObjectItemCaseSensitive(f, "line");
            frames[n].line = cJSON_IsNumber(line) ? line->valueint : 0;
            n++;
        }
        snprintf(my_slot->operation, sizeof my_slot->operation, "%s", "a step");
        lx_frames_to_text(frames, n, my_slot->where, sizeof my_slot->where);
        __atomic_add_fetch(&my_slot->progress, 1, __ATOMIC_RELEASE);
    }

    char *text = cJSON_PrintUnformatted(step);
    cJSON_Delete(step);
    MPI_CHECK(MPI_Send(text, (int)strlen(text) + 1, MPI_CHAR, 0, TAG_STEP, to_parent));
    free(text);
}

void lx_rank_where(const char *operation) {
    if (!my_slot) return;
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    snprintf(my_slot->operation, sizeof my_slot->operation, "%s", operation);
    lx_frames_to_text(frames, n, my_slot->where, sizeof my_slot->where);
    __atomic_add_fetch(&my_slot->progress, 1, __ATOMIC_RELEASE);
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
    }
}

/* A rank's crash: note how and where on the board, then die of the signal
 * (the default action), so Open MPI sees it too. The board is marked failed
 * first, with the last known place, so that even if finding the exact
 * faulting line goes wrong (symbolizing runs libdw inside a signal handler)
 * the parent still learns the signal. A second signal meanwhile goes straight
 * to the default action. */
static volatile sig_atomic_t handling_signal;

static void rank_on_signal(int sig, siginfo_t *info, void *ucontext) {
    (void)info;
    if (handling_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    handling_signal = 1;
    if (my_slot && my_slot->state == SLOT_RUNNING) {
        memcpy(my_slot->failure_frames, my_slot->where, sizeof my_slot->where);
        snprintf(my_slot->failure, sizeof my_slot->failure, "died with %s", signal_name(sig));
        my_slot->failed_at = now_seconds();
        __atomic_store_n(&my_slot->state, SLOT_FAILED, __ATOMIC_RELEASE);
        lx_frame frames[LX_MAX_FRAMES];
        int n = lx_stack_capture_signal(frames, LX_MAX_FRAMES, ucontext);
        if (n > 0) {
            char text[FRAMES_TEXT];
            lx_frames_to_text(frames, n, text, sizeof text);
            memcpy(my_slot->failure_frames, text, sizeof text);
        }
    } else if (!my_slot) {
        /* No board (a rank on another host): stderr is all we have. */
        char msg[128];
        int len = snprintf(msg, sizeof msg, "lectern: rank %d died with %s\n", my_rank, signal_name(sig));
        if (len > 0) (void)!write(2, msg, (size_t)len);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* exit() before fn returned (exit(3) in the lecture, a failed MPI_CHECK,
 * lx_fatal in the rank): record the status and the line. */
static void rank_on_exit(int status, void *arg) {
    (void)arg;
    if (!my_slot || my_slot->state != SLOT_RUNNING) return;
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (n > 0) lx_frames_to_text(frames, n, my_slot->failure_frames, sizeof my_slot->failure_frames);
    else memcpy(my_slot->failure_frames, my_slot->where, sizeof my_slot->where);
    snprintf(my_slot->failure, sizeof my_slot->failure, "exited with status %d before its function returned",
             status);
    my_slot->failed_at = now_seconds();
    __atomic_store_n(&my_slot->state, SLOT_FAILED, __ATOMIC_RELEASE);
}

static void rank_install_handlers(void) {
    /* A stack for the handler, for when the rank's own overflowed. Generous:
     * symbolizing a cold pc with libdw takes a good deal of it. */
    static char alt[1024 * 1024];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rank_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    /* After MPI_Init: these replace Open MPI's own handlers, which print a raw backtrace. */
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    on_exit(rank_on_exit, NULL);
}

/* This rank's GPU under NCCL: its index among the ranks on its host. */
static int local_rank(void) {
    MPI_Comm node;
    int r = 0;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &r));
    MPI_CHECK(MPI_Comm_free(&node));
    return r;
}

static void run_rank(const char *board_name) {
    /* Register on the board before MPI_Init, so a parent whose spawn hangs
     * knows whom to stop; then start a few ms after the rank before us. */
    board *b = lx_board_map(board_name, 0);
    if (b) {
        int i = __atomic_fetch_add(&b->started, 1, __ATOMIC_ACQ_REL);
        if (i < LECTERN_MAX_WORLD) b->started_pid[i] = getpid();
    }
    const char *launch_rank = getenv("OMPI_COMM_WORLD_RANK");
    if (launch_rank) lx_sleep_seconds(0.003 * atoi(launch_rank));

    MPI_CHECK(MPI_Init(NULL, NULL));
    MPI_CHECK(MPI_Comm_get_parent(&to_parent));
    if (to_parent == MPI_COMM_NULL) {
        fprintf(stderr, "lectern: %s is for processes started by spawn()\n", RANK_FLAG);
        MPI_Finalize();
        exit(2);
    }
    MPI_CHECK(MPI_Bcast(&my_desc, (int)sizeof my_desc, MPI_BYTE, 0, to_parent));
    void *args = malloc(my_desc.args_size ? my_desc.args_size : 1);
    if (!args) {
        fprintf(stderr, "lectern: out of memory for %llu bytes of spawn args\n",
                (unsigned long long)my_desc.args_size);
        exit(1);
    }
    if (my_desc.args_size)
        MPI_CHECK(MPI_Bcast(args, (int)my_desc.args_size, MPI_BYTE, 0, to_parent));

    int world_size = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &my_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (b && strcmp(host, my_desc.host) == 0 && my_rank < LECTERN_MAX_WORLD) {
        my_slot = &b->slot[my_rank];
        my_slot->pid = getpid();
        __atomic_store_n(&my_slot->state, SLOT_RUNNING, __ATOMIC_RELEASE);
    }
    rank_install_handlers();

    spawn_fn fn = (spawn_fn)(void *)((uintptr_t)(void *)&lecture_main + (uintptr_t)my_desc.fn_offset);
    lx_stack_set_root((const void *)fn);
    lx_set_in_rank(my_rank, world_size);
    lx_rank_init(my_desc.lecture, my_desc.clock_zero, my_desc.quick, my_desc.quiet);
    lx_set_step_sink(rank_sink);

    /* OpenBLAS starts one spinning thread per core in every process; four
     * ranks on two cores would fight over them (3.5x slower, measured).
     * Share the cores out instead. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores > world_size ? (int)(cores / world_size) : 1;
    openblas_set_num_threads(threads);

    int device = -1;
    if (my_desc.backend == LX_BACKEND_NCCL) device = local_rank();
    lx_comm_start((lx_backend)my_desc.backend, my_rank, world_size, device);

    fn(my_rank, world_size, my_desc.args_size ? args : NULL);

    lx_comm_stop();
    free(args);
    if (my_slot) __atomic_store_n(&my_slot->state, SLOT_DONE, __ATOMIC_RELEASE);
    int ok = 0;
    MPI_CHECK(MPI_Send(&ok, 1, MPI_INT, 0, TAG_DONE, to_parent));
    MPI_CHECK(MPI_Comm_disconnect(&to_parent));
    MPI_CHECK(MPI_Finalize());
    exit(0);   /* the board stays mapped: the exit hook still looks at it */
}

void lx_spawn_child_entry(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], RANK_FLAG) == 0) run_rank(argv[2]);
}
