/*
 * spawn_rank.c: a pool rank, one of the processes mpirun starts for the
 * lecture (pool.c).
 *
 * The same executable as the lecture, started with
 * --lectern-rank ADDRESS BOARD HOST. lecture_main() hands it to
 * lx_spawn_child_entry() at once, and it never returns to the lecture:
 *
 *   connect to the lecture, say hello     (wire.c; the lecture's stdout and
 *                                          stderr come back over the socket)
 *   MPI_Init_thread                       (once: the pool is MPI_COMM_WORLD;
 *                                          THREAD_MULTIPLE for comm_progress.c)
 *   snapshot the lecture's globals        (globals.c)
 *   say "ready"
 *   loop: wait for a spawn (a blocking read: no CPU while idle)
 *         put the globals back, reset what a fresh process would have fresh
 *         run fn(rank, world_size, args) on the spawn's communicator
 *         say "done"
 *   the socket closes: MPI_Finalize, exit
 *
 * A spawn of world size w runs on pool ranks 0..w-1 over a communicator of
 * those ranks, made once per world size with MPI_Comm_create_group (only
 * its members take part, so the other pool ranks stay asleep).
 *
 * Every step the rank makes goes to the parent as JSON text (rank_sink);
 * the parent adds it to the one trace. See spawn.c for the parent's side.
 */
#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "check.h"
#include "trace/trace.h"
#include "ranks/ranks_mpi.h"

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif

static int parent_fd = -1;
static board *my_board;
static board_slot *my_slot;
/* A rank on another host: its slot lives here, and a thread sends copies
 * (relay_board below). One lock keeps a copy from cutting into a step. */
static board_slot remote_slot;
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;
static spawn_desc my_desc;
static int pool_rank = -1;
static int console[2] = {-1, -1};      /* the lecture's stdout and stderr (ranks on its host) */
static int launcher_out[2] = {-1, -1}; /* what mpirun gave us: its pipes */

/* One communicator per world size, made at the first spawn of that size. */
static MPI_Comm world_comm[LECTERN_MAX_WORLD + 1];
static int world_device[LECTERN_MAX_WORLD + 1];

/* The parent is gone: nothing left to report to, nobody to wait for. */
static void __attribute__((noreturn)) parent_gone(void) { _exit(1); }

/* Every message to the parent goes through here: the lecture's thread and,
 * on another host, the board relay both send. */
static void send_parent(uint32_t type, const void *a, size_t na, const void *b, size_t nb) {
    pthread_mutex_lock(&send_lock);
    int rc = lx_wire_send(parent_fd, type, a, na, b, nb);
    pthread_mutex_unlock(&send_lock);
    if (rc != 0) parent_gone();
}

/* The board relay of a rank on another host. While a spawn runs it sends
 * the slot when it changed (checked every 50 ms) and at least every
 * BOARD_KEEPALIVE seconds: the parent's deadlock detector then sees this
 * rank like the ones on its own host, and its silence means the host or
 * the link is gone. A copy torn by the lecture's thread writing (its
 * sequence lock odd or moved) waits for the next look. It never sends
 * outside a spawn: an idle rank that speaks looks dead to the pool. */
static void *relay_board(void *unused) {
    (void)unused;
    static board_slot copy;
    unsigned sent_version = 0, sent_progress = 0;
    int sent_waiting = -1, sent_state = -1;
    double sent_at = 0;
    for (;;) {
        lx_sleep_seconds(0.05);
        pthread_mutex_lock(&send_lock);
        int state = __atomic_load_n(&remote_slot.state, __ATOMIC_ACQUIRE);
        unsigned v = __atomic_load_n(&remote_slot.version, __ATOMIC_ACQUIRE);
        if (state != SLOT_RUNNING || (v & 1u)) {
            pthread_mutex_unlock(&send_lock);
            continue;
        }
        memcpy(&copy, (const void *)&remote_slot, sizeof copy);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        double now = now_seconds();
        int torn = __atomic_load_n(&remote_slot.version, __ATOMIC_ACQUIRE) != v;
        int changed = v != sent_version || copy.progress != sent_progress || copy.waiting != sent_waiting ||
                      state != sent_state;
        int rc = 0;
        if (!torn && (changed || now - sent_at >= BOARD_KEEPALIVE)) {
            int32_t id = my_desc.spawn_id;
            copy.pid = 0;
            rc = lx_wire_send(parent_fd, MSG_BOARD, &id, sizeof id, &copy, sizeof copy);
            sent_version = v;
            sent_progress = copy.progress;
            sent_waiting = copy.waiting;
            sent_state = state;
            sent_at = now;
        }
        pthread_mutex_unlock(&send_lock);
        if (rc != 0) parent_gone();
    }
    return NULL;
}

/* Each step goes to the parent as JSON text, stamped with the parent's clock
 * (CLOCK_MONOTONIC is one clock for all processes of a host). */
static void rank_sink(cJSON *step) {
    double t = now_seconds() - my_desc.clock_zero;
    cJSON *time = cJSON_CreateNumber(lx_round_us(t));
    if (cJSON_GetObjectItemCaseSensitive(step, "time")) cJSON_ReplaceItemInObjectCaseSensitive(step, "time", time);
    else cJSON_AddItemToObject(step, "time", time);

    if (my_slot) { /* the step's line is this rank's latest known place */
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
    send_parent(MSG_STEP, text, strlen(text), NULL, 0);
    lx_links_step_sent(); /* the parent counts the same steps: a call names its rank's last */
    free(text);
}

/* A span of modelled compute goes to the parent as it happens (one small
 * message; the span itself lasts milliseconds), which stamps it with this
 * spawn and rank. */
static void rank_modelled_sink(cJSON *span) {
    char *text = cJSON_PrintUnformatted(span);
    cJSON_Delete(span);
    send_parent(MSG_MODELLED, text, strlen(text), NULL, 0);
    free(text);
}

/* ---- spawn_return: bytes for the lecture ---- */

static int returned; /* this spawn's fn called spawn_return() already */

void spawn_return(const void *data, size_t size) {
    if (!data && size > 0) {
        lx_error("spawn_return(): data is NULL but size is %zu", size);
        return;
    }
    if (!lx_in_rank() || parent_fd < 0 || my_desc.world_size <= 0) {
        lx_error("spawn_return() outside a spawned rank: a rank's function calls it to hand bytes to the "
                 "lecture");
        return;
    }
    if (returned) {
        lx_error("spawn_return() called a second time in rank %d's function: a rank returns one value "
                 "(put everything into one struct)",
                 pool_rank);
        return;
    }
    if (size > LECTERN_MAX_SPAWN_RESULT) {
        lx_error("spawn_return(): %zu bytes exceed the limit of %u bytes (LECTERN_MAX_SPAWN_RESULT); nothing "
                 "returned",
                 size, (unsigned)LECTERN_MAX_SPAWN_RESULT);
        return;
    }
    returned = 1;
    send_parent(MSG_RESULT, data, size, NULL, 0);
}

void lx_rank_error_for(int rank, const char *frames_text, const char *message) {
    if (parent_fd < 0) return;
    cJSON *step = cJSON_CreateObject();
    cJSON_AddItemToObject(step, "stack", lx_frames_text_to_json(frames_text));
    cJSON_AddNumberToObject(step, "as_rank", rank);
    double t = now_seconds() - my_desc.clock_zero;
    cJSON_AddNumberToObject(step, "time", lx_round_us(t));
    cJSON *list = cJSON_AddArrayToObject(step, "renderings");
    cJSON_AddItemToArray(list, lx_rendering_error(message));
    char *text = cJSON_PrintUnformatted(step);
    cJSON_Delete(step);
    send_parent(MSG_STEP, text, strlen(text), NULL, 0);
    lx_links_step_sent(); /* the parent counts the same steps: a call names its rank's last */
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

/* The deadlock detector's fields are written between two increments of
 * `version` (odd meanwhile): the parent reads a consistent picture or
 * knows it did not. Only the lecture's thread of a rank writes them. */
static void board_write_begin(void) { __atomic_add_fetch(&my_slot->version, 1, __ATOMIC_ACQ_REL); }
static void board_write_end(void) {
    __atomic_add_fetch(&my_slot->version, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&my_slot->progress, 1, __ATOMIC_RELEASE);
}

void lx_rank_enter(const char *operation, const lx_frame *frames, int n, int peer) {
    if (!my_slot) return;
    board_write_begin();
    snprintf(my_slot->operation, sizeof my_slot->operation, "%s", operation);
    lx_frames_to_text(frames, n, my_slot->where, sizeof my_slot->where);
    my_slot->peer = peer;
    my_slot->need_kind[0] = my_slot->need_kind[1] = LX_NEED_NONE;
    __atomic_store_n(&my_slot->waiting, 1, __ATOMIC_RELEASE);
    board_write_end();
}

void lx_rank_leave(void) {
    if (!my_slot) return;
    board_write_begin();
    __atomic_store_n(&my_slot->waiting, 0, __ATOMIC_RELEASE);
    my_slot->need_kind[0] = my_slot->need_kind[1] = LX_NEED_NONE;
    board_write_end();
}

/* This spawn's counts, kept here as well as on the board (a rank on
 * another host has no board, and its sequence numbers still pair acks). */
static int sends_to[LECTERN_MAX_WORLD], recvs_from[LECTERN_MAX_WORLD], collectives;

void lx_rank_counts_reset(void) {
    memset(sends_to, 0, sizeof sends_to);
    memset(recvs_from, 0, sizeof recvs_from);
    collectives = 0;
}

static int count(int *counter, int *on_board) {
    int v = ++*counter;
    if (my_slot) {
        board_write_begin();
        *on_board = v;
        board_write_end();
    }
    return v;
}

int lx_spawn_shared_ipc(void) { return my_desc.shared_ipc; }

int lx_rank_count_send(int peer) { return count(&sends_to[peer], my_slot ? &my_slot->sends_to[peer] : NULL); }

int lx_rank_count_recv(int peer) { return count(&recvs_from[peer], my_slot ? &my_slot->recvs_from[peer] : NULL); }

int lx_rank_count_collective(void) { return count(&collectives, my_slot ? &my_slot->collectives : NULL); }

void lx_rank_needs(int i, int kind, int peer, int seq) {
    if (!my_slot || i < 0 || i > 1) return;
    board_write_begin();
    my_slot->need_kind[i] = kind;
    my_slot->need_peer[i] = peer;
    my_slot->need_seq[i] = seq;
    board_write_end();
}

/* The parent's "progress" (spawn_watch.c), as this rank can see it: the
 * sum of every slot's progress counter, and whether another rank of the
 * spawn works (runs, and is not inside a waiting call). A backend's own
 * wait that must tell "slow" from "stuck" (comm_nccl.c) stops only when
 * neither has moved for its limit, as the parent does. */
int lx_spawn_progress(unsigned *sum, int *others_working) {
    *sum = 0;
    *others_working = 0;
    if (!my_board || my_slot == &remote_slot || my_desc.world_size <= 0) return -1;
    for (int r = 0; r < my_desc.world_size && r < LECTERN_MAX_WORLD; r++) {
        board_slot *s = &my_board->slot[r];
        *sum += __atomic_load_n(&s->progress, __ATOMIC_ACQUIRE);
        if (r == pool_rank) continue;
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_RUNNING &&
            !__atomic_load_n(&s->waiting, __ATOMIC_ACQUIRE))
            *others_working = 1;
    }
    return 0;
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
 * (the default action). The board is marked failed first, with the last
 * known place, so that even if finding the exact faulting line goes wrong
 * (symbolizing runs libdw inside a signal handler) the parent still learns
 * the signal. A second signal meanwhile goes straight to the default action. */
static volatile sig_atomic_t handling_signal;

static void rank_on_signal(int sig, siginfo_t *info, void *ucontext) {
    if (handling_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    handling_signal = 1;
    if (my_slot && (my_slot->state == SLOT_RUNNING || my_slot->state == SLOT_IDLE)) {
        memcpy(my_slot->failure_frames, my_slot->where, sizeof my_slot->where);
        /* A fault at LX_POISON is a freed tensor's data (tensor_track.c). */
        uintptr_t addr = info ? (uintptr_t)info->si_addr : 0;
        int uaf = sig == SIGSEGV && addr >= LX_POISON && addr - LX_POISON < LX_POISON_SPAN;
        snprintf(my_slot->failure, sizeof my_slot->failure, "died with %s%s", signal_name(sig),
                 uaf ? " (a freed tensor's data: a tensor used after tensor_free)" : "");
        my_slot->failed_at = now_seconds();
        __atomic_store_n(&my_slot->state, SLOT_FAILED, __ATOMIC_RELEASE);
        lx_frame frames[LX_MAX_FRAMES];
        int n = lx_stack_capture_signal(frames, LX_MAX_FRAMES, ucontext);
        if (n > 0) {
            char text[FRAMES_TEXT];
            lx_frames_to_text(frames, n, text, sizeof text);
            memcpy(my_slot->failure_frames, text, sizeof text);
        }
    }
    if (!my_board) {
        /* No board (a rank on another host): stderr is all we have. */
        char msg[128];
        int len = snprintf(msg, sizeof msg, "lectern: rank %d died with %s\n", pool_rank, signal_name(sig));
        if (len > 0) (void)!write(2, msg, (size_t)len);
    }
    LX_COVERAGE_FLUSH();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* exit() before fn returned (exit(3) in the lecture, a failed MPI_CHECK,
 * lx_fatal in the rank): record the status and the line. */
static void rank_on_exit(int status, void *arg) {
    (void)arg;
    if (!my_slot || my_slot->state != SLOT_RUNNING) return;
    lx_frame frames[LX_MAX_FRAMES];
    /* Where its error was put, when an error stopped it (the caller's line
     * for an error inside given code: lx_fatal_at), else where it exits. */
    int n = lx_fatal_frames(frames, LX_MAX_FRAMES);
    if (n == 0) n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (n > 0) lx_frames_to_text(frames, n, my_slot->failure_frames, sizeof my_slot->failure_frames);
    else memcpy(my_slot->failure_frames, my_slot->where, sizeof my_slot->where);
    snprintf(my_slot->failure, sizeof my_slot->failure, "exited with status %d before its function returned", status);
    my_slot->failed_at = now_seconds();
    __atomic_store_n(&my_slot->state, SLOT_FAILED, __ATOMIC_RELEASE);
}

/* SIGUSR2 from the lecture (spawn_watch.c, on Ctrl-C): where is this rank now?
 * The stack of the interrupted code goes to the slot's `sample`; the rank
 * then goes on as if nothing happened. Symbolizing inside a handler is the
 * same accepted risk as in rank_on_signal: the lecture stops it next. */
static void rank_on_sample(int sig, siginfo_t *info, void *ucontext) {
    (void)sig;
    (void)info;
    if (!my_slot) return;
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture_signal(frames, LX_MAX_FRAMES, ucontext);
    lx_frames_to_text(frames, n, my_slot->sample, sizeof my_slot->sample);
    __atomic_store_n(&my_slot->sampled, 1, __ATOMIC_RELEASE);
}

#if defined(__SANITIZE_ADDRESS__)
/* Built with the sanitizers (make SAN=1): a report of AddressSanitizer or
 * UBSan ends the rank with _exit, which no exit hook sees ("too abruptly
 * to say how"). Their death callback says so on the board, at the line the
 * report is about. GCC links each sanitizer's runtime as a library of its
 * own, each with its own callback: UBSan's is set through its library. */
static void rank_on_sanitizer_death(void) {
    if (!my_slot || my_slot->state != SLOT_RUNNING) return;
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (n > 0) lx_frames_to_text(frames, n, my_slot->failure_frames, sizeof my_slot->failure_frames);
    snprintf(my_slot->failure, sizeof my_slot->failure,
             "was stopped by a sanitizer's report (AddressSanitizer or UBSan: it is on the console above)");
    my_slot->failed_at = now_seconds();
    __atomic_store_n(&my_slot->state, SLOT_FAILED, __ATOMIC_RELEASE);
}
#endif

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
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    sa.sa_sigaction = rank_on_sample;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    on_exit(rank_on_exit, NULL);
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_set_death_callback(rank_on_sanitizer_death);
    void *ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*set_ubsan)(void (*)(void)) =
            ubsan ? (void (*)(void (*)(void)))dlsym(ubsan, "__sanitizer_set_death_callback") : NULL;
    if (set_ubsan) set_ubsan(rank_on_sanitizer_death);
#endif
}

/* ---- the spawn's communicator ---- */

/* Pool ranks 0..w-1, made by those ranks alone. */
static MPI_Comm comm_for(int w) {
    if (world_comm[w] != MPI_COMM_NULL) return world_comm[w];
    MPI_Group all, first;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &all));
    int range[1][3] = {{0, w - 1, 1}};
    MPI_CHECK(MPI_Group_range_incl(all, 1, range, &first));
    MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, first, w, &world_comm[w]));
    MPI_CHECK(MPI_Group_free(&first));
    MPI_CHECK(MPI_Group_free(&all));
    return world_comm[w];
}

MPI_Comm lx_rank_comm(void) {
    return lx_in_rank() && my_desc.world_size > 0 ? comm_for(my_desc.world_size) : MPI_COMM_NULL;
}

/* This rank's GPU under NCCL: its index among the spawn's ranks on its host. */
static int device_for(int w, MPI_Comm comm) {
    if (world_device[w] >= 0) return world_device[w];
    MPI_Comm node;
    int r = 0;
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &r));
    MPI_CHECK(MPI_Comm_free(&node));
    world_device[w] = r;
    return r;
}

/* ---- output ---- */

/* While fn runs, the rank writes to the lecture's own stdout and stderr (on
 * its host): a student's printf() reaches the console as from any child
 * process. Between spawns they point back at mpirun's pipes, where what
 * Open MPI itself prints is kept out of sight (pool.c). */
static void output_to_console(int on) {
    if (console[0] < 0) return;
    fflush(stdout);
    fflush(stderr);
    dup2(on ? console[0] : launcher_out[0], 1);
    dup2(on ? console[1] : launcher_out[1], 2);
}

/* ---- one spawn ---- */

/* What a fresh process would have had fresh, beyond the lecture's own
 * globals: the working directory, the random generators (ours and libc's),
 * the runtime's per-rank settings. */
static void fresh_state(void) {
    lx_globals_restore();
    lx_tensor_reset_rng();
    srand(1); /* C's rand() and random() start from seed 1 */
    srandom(1);
    srand48(0x1234ABCD); /* drand48's documented initial state, 0x1234ABCD330E */
    if (my_desc.cwd[0] && chdir(my_desc.cwd) != 0)
        lx_fatal("rank %d cannot enter the lecture's folder %s: %s", pool_rank, my_desc.cwd, strerror(errno));
}

/* One spawn on this rank (the parent's side is spawn.c's run_spawn): the
 * description and args from MSG_SPAWN, fn run, "done" sent. */
static void rank_run_spawn(const char *body, size_t size) {
    if (size < sizeof my_desc) {
        fprintf(stderr, "lectern: rank %d got a malformed spawn\n", pool_rank);
        exit(1);
    }
    memcpy(&my_desc, body, sizeof my_desc);
    if (size != sizeof my_desc + my_desc.args_size || my_desc.world_size <= pool_rank) {
        fprintf(stderr, "lectern: rank %d got a malformed spawn\n", pool_rank);
        exit(1);
    }
    /* fn gets its own copy of the args, aligned as malloc aligns. */
    void *args = NULL;
    if (my_desc.args_size) {
        args = malloc(my_desc.args_size);
        if (!args) lx_fatal("out of memory for %llu bytes of spawn args", (unsigned long long)my_desc.args_size);
        memcpy(args, body + sizeof my_desc, my_desc.args_size);
    }
    int w = my_desc.world_size;
    returned = 0;
    lx_rank_counts_reset();
    if (my_slot == &remote_slot) lx_board_slot_reset(&remote_slot); /* the parent resets the others */
    if (my_slot) __atomic_store_n(&my_slot->state, SLOT_RUNNING, __ATOMIC_RELEASE);

    /* From here on, an error of this rank is an error step of this spawn. */
    spawn_fn fn = (spawn_fn)(void *)((uintptr_t)(void *)&lx_spawn_child_entry + (uintptr_t)my_desc.fn_offset);
    lx_stack_set_root((const void *)fn);
    lx_set_in_rank(pool_rank, w);
    lx_rank_init(my_desc.lecture, my_desc.clock_zero, my_desc.quick, my_desc.quiet);
    lx_rank_errors_expected(my_desc.expect_failure);
    my_desc.options[sizeof my_desc.options - 1] = '\0';
    lx_options_load(my_desc.options); /* lecture_flag() and lecture_option() as in the lecture */
    my_desc.visibility[sizeof my_desc.visibility - 1] = '\0';
    lx_grade_visibility_load(my_desc.visibility); /* which checks say what they saw */
    lx_set_step_sink(rank_sink);
    lx_set_modelled_sink(rank_modelled_sink);
    output_to_console(1);
    fresh_state();

    /* OpenBLAS starts one spinning thread per core in every process; four
     * ranks on two cores would fight over them (3.5x slower, measured).
     * Share the cores out instead. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores > w ? (int)(cores / w) : 1;
    openblas_set_num_threads(threads);

    MPI_Comm comm = comm_for(w);
    /* NCCL: a GPU per rank; shared GPUs: rank r on cuda:(r mod GPUs). The
     * CUDA context and cuBLAS handle a rank makes stay with the process, so
     * the next spawn on this pool rank finds them made. */
    int device = my_desc.backend == LX_BACKEND_NCCL ? device_for(w, comm)
                 : my_desc.backend == LX_BACKEND_SHARED || my_desc.backend == LX_BACKEND_SHARED_CUDA_AWARE
                         ? (gpu_count() > 0 ? pool_rank % gpu_count() : -1)
                         : -1;
    lx_ranks_comm()->start((lx_backend)my_desc.backend, pool_rank, w, device);

    lx_twin_begin();
    lx_links_begin();
    fn(pool_rank, w, args);
    /* Requests never waited for first: their transfers may still use
     * tensors the next lines free. */
    lx_ranks_comm()->finish_requests();
    /* --twin-record: what this rank did, for the lecture's NAME.events.json. */
    char *twin = lx_twin_recording() ? lx_twin_rank_text() : NULL;
    /* Every call it made, for the trace's message links. */
    char *links = lx_links_rank_text();
    /* Tensors the function left alive: a warning step per line that made
     * them, and freed, as the end of a process would. */
    char *when = lx_fmt("rank %d's function %s()", pool_rank, lx_function_name((const void *)fn));
    lx_tensor_leaks(when, 1);
    free(when);

    lx_ranks_comm()->stop();
    output_to_console(0);
    free(args);
    /* Under the send lock: the relay sends nothing of this spawn after "done".
     * A rank on another host sends its slot a last time first: the parent
     * then has this rank's final counters, which tell whether a rank still
     * waiting waits for a call this one never made or only for data it sent
     * (spawn_watch.c, waits_on_returned). Only this thread writes the slot. */
    pthread_mutex_lock(&send_lock);
    int rc = 0;
    if (my_slot == &remote_slot) {
        static board_slot last;
        int32_t id = my_desc.spawn_id;
        memcpy(&last, (const void *)&remote_slot, sizeof last);
        last.pid = 0;
        rc = lx_wire_send(parent_fd, MSG_BOARD, &id, sizeof id, &last, sizeof last);
    }
    if (my_slot) __atomic_store_n(&my_slot->state, SLOT_IDLE, __ATOMIC_RELEASE);
    if (rc == 0 && twin) rc = lx_wire_send(parent_fd, MSG_TWIN, twin, strlen(twin), NULL, 0);
    if (rc == 0) rc = lx_wire_send(parent_fd, MSG_LINKS, links, strlen(links), NULL, 0);
    if (rc == 0) rc = lx_wire_send(parent_fd, MSG_DONE, NULL, 0, NULL, 0);
    pthread_mutex_unlock(&send_lock);
    free(twin);
    free(links);
    if (rc != 0) parent_gone();
}

/* ---- the pool rank's life ---- */

static int connect_to_parent(const char *address) {
    /* The parent listens before it starts mpirun: the first try works. A
     * few more cover a parent busy for a moment. */
    for (int attempt = 0; attempt < 200; attempt++) {
        int fd = lx_wire_connect(address);
        if (fd >= 0) return fd;
        lx_sleep_seconds(0.01);
    }
    return -1;
}

/* A rank reached over TCP (a hostfile, or an allocation beyond this host)
 * becomes a session of its own. Linux shares the CPUs first between
 * sessions (the scheduler's autogroups), then among each session's
 * processes: the ranks mpirun starts here share the lecture's session,
 * those an orted starts on another host share the session of the ssh
 * login that started it. Where those hosts share cores (the test's two
 * hosts on one machine, or any oversubscribed host), a session whose ranks
 * spin in their waits kept the other session's ranks, and the relay and
 * the lecture with them, off the cores for up to 11 s at a time, while
 * each waited for the other (docs/multinode.md): one session per rank
 * shares the cores per rank. A rank is the leader of a process group of
 * its own (Open MPI makes it one), which may not start a session, so it
 * first joins its launcher's group. Where that fails it runs on as it
 * was: only the sharing of the cores is at stake. */
static void own_session(void) {
    if (getpgid(0) == getpid() && setpgid(0, getpgid(getppid())) != 0) return;
    (void)setsid();
}

static void run_pool_rank(const char *address, const char *board_name, const char *parent_host) {
    const char *launch_rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *token = getenv(POOL_TOKEN_ENV);
    if (!launch_rank || !token) {
        fprintf(stderr, "lectern: %s is for the processes spawn() starts with mpirun\n", RANK_FLAG);
        exit(2);
    }
    pool_rank = atoi(launch_rank);
    lx_set_in_rank(pool_rank, 0); /* no lecture line runs here until a spawn's fn */
    /* Should mpirun die without stopping us, we go too. */
    pid_t launcher = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    if (strncmp(address, "tcp:", 4) == 0) own_session();

    for (int w = 0; w <= LECTERN_MAX_WORLD; w++) {
        world_comm[w] = MPI_COMM_NULL;
        world_device[w] = -1;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (strcmp(host, parent_host) == 0 && pool_rank < LECTERN_MAX_WORLD) {
        my_board = lx_board_map(board_name, 0);
        if (my_board) {
            my_slot = &my_board->slot[pool_rank];
            my_slot->pid = getpid();
            __atomic_store_n(&my_slot->state, SLOT_IDLE, __ATOMIC_RELEASE);
        }
    } else if (pool_rank < LECTERN_MAX_WORLD) {
        my_slot = &remote_slot; /* its copies go to the parent: relay_board() */
        lx_board_slot_reset(my_slot);
    }

    parent_fd = connect_to_parent(address);
    if (parent_fd < 0) {
        fprintf(stderr, "lectern: rank %d cannot reach the lecture at %s: %s\n", pool_rank, address, strerror(errno));
        exit(1);
    }
    pool_hello hello;
    memset(&hello, 0, sizeof hello);
    snprintf(hello.token, sizeof hello.token, "%s", token);
    hello.pool_rank = pool_rank;
    hello.pid = getpid();
    snprintf(hello.host, sizeof hello.host, "%s", host);
    if (lx_wire_send(parent_fd, MSG_HELLO, &hello, sizeof hello, NULL, 0) != 0) parent_gone();
    if (strncmp(address, "unix:", 5) == 0) {
        if (lx_wire_recv_fds(parent_fd, console, 2) != 0) parent_gone();
        launcher_out[0] = dup(1);
        launcher_out[1] = dup(2);
    }

    /* MPI_THREAD_MULTIPLE: the rank's progress thread tests non-blocking
     * requests while the lecture's thread computes or makes other calls
     * (comm_progress.c). */
    int provided = MPI_THREAD_SINGLE;
#if defined(__SANITIZE_ADDRESS__)
    /* What Open MPI keeps from its start is its own. The sanitizer pass
     * unwinds a block's stack with frame pointers (scripts/test.sh), which
     * Open MPI's plugins and glibc lack: a string a plugin's constructor
     * keeps, in a plugin unloaded again, has a stack that names no library
     * a suppression could. Nothing of ours runs inside MPI_Init_thread. */
    __lsan_disable();
#endif
    MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided));
#if defined(__SANITIZE_ADDRESS__)
    __lsan_enable();
#endif
    lx_ranks_comm()->mpi_ready(provided);
    /* Errors come back as codes, so MPI_CHECK names the call and line. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (lx_globals_snapshot() < 0)
        fprintf(stderr,
                "lectern: rank %d cannot read the lecture's debug information: its globals keep "
                "their values from one spawn to the next\n",
                pool_rank);
    rank_install_handlers();
    if (lx_wire_send(parent_fd, MSG_READY, NULL, 0, NULL, 0) != 0) parent_gone();
    if (my_slot == &remote_slot) {
        pthread_t relay;
        if (pthread_create(&relay, NULL, relay_board, NULL) != 0)
            lx_fatal("rank %d cannot start the thread that reports its state to the lecture", pool_rank);
        pthread_detach(relay);
    }

    for (;;) {
        uint32_t type;
        char *body;
        size_t size;
        if (lx_wire_recv(parent_fd, &type, &body, &size) != 0) break; /* the pool ends */
        if (type == MSG_SPAWN) rank_run_spawn(body, size);
        free(body);
    }

    lx_ranks_comm()->leave();
    for (int w = 1; w <= LECTERN_MAX_WORLD; w++)
        if (world_comm[w] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&world_comm[w]));
#if defined(__SANITIZE_ADDRESS__)
    /* A sanitizer build checks for leaks here, while Open MPI's and NCCL's
     * memory is still reachable from their own state: at exit, after
     * MPI_Finalize has unloaded their components, hundreds of their
     * blocks would be reported from "<unknown module>" frames no
     * suppression can name, burying the lecture's own leaks. Once this
     * check has run, the one at exit does not. */
    output_to_console(1);
    __lsan_do_leak_check();
#endif
    MPI_CHECK(MPI_Finalize());
    /* What is said at exit is ours. */
    output_to_console(1);
    exit(0); /* the board stays mapped: the exit hook still looks at it */
}

static const lx_comm_hooks *comm_hooks;

void lx_ranks_set_comm(const lx_comm_hooks *hooks) { comm_hooks = hooks; }

const lx_comm_hooks *lx_ranks_comm(void) {
    if (!comm_hooks) lx_fatal("lectern: the comm layer was not registered (lecture_main does it)");
    return comm_hooks;
}

void lx_spawn_child_entry(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], RANK_FLAG) == 0) {
        /* A student's printf() line reaches the console when it is
         * printed: stdout here is a pipe (mpirun's, or an autograder's),
         * which stdio would fill 4 kB at a time, and a rank the lecture
         * stops is killed with what it held. */
        setvbuf(stdout, NULL, _IOLBF, 0);
        run_pool_rank(argv[2], argv[3], argv[4]);
    }
    if (argc >= 2 && strcmp(argv[1], RANK_FLAG) == 0) {
        fprintf(stderr, "lectern: %s is for the processes spawn() starts with mpirun\n", RANK_FLAG);
        exit(2);
    }
}
