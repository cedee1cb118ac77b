/*
 * comm_progress.c: a thread per rank that keeps non-blocking transfers
 * moving while the lecture's thread computes.
 *
 * Open MPI has no progress of its own for shared memory: a message moves,
 * a fragment is acknowledged, a step of a non-blocking collective's schedule
 * is taken, only while some thread of the rank is inside an MPI call. A rank
 * that isent 4 MiB and then computed for 300 ms delivered nothing until its
 * dist_wait: the receiver waited the whole 300 ms. gloo runs its collectives
 * on worker threads, NCCL on its own stream; this is the CPU path's answer.
 *
 * The rank runs MPI_THREAD_MULTIPLE. A backend hands each non-blocking
 * call's requests here as a *group*, in one of two ways:
 *   - watch: the lecture's thread started them (MPI_Isend, MPI_Irecv: these
 *     stay on the lecture's thread, so that messages between two ranks keep
 *     the order the lecture sent them in);
 *   - launch: the thread starts them, by a function the backend gives, in
 *     the order of the launches. A non-blocking collective's start can take
 *     a while: Open MPI's MPI_Iallreduce of 16 MiB on 2 ranks took 27-36 ms
 *     to return here, copying through shared memory, time the lecture's
 *     thread would otherwise spend before it computes.
 * While any group is in flight the thread goes over them in order: it starts
 * the ones not started, and calls MPI_Testall on the others, every
 * LECTERN_PROGRESS_US microseconds (default 20). Each MPI_Testall runs Open
 * MPI's progress engine once, which moves every transfer of the rank (the
 * libnbc schedules, the point-to-point protocol steps). A group that
 * completes leaves the list; with none left the thread sleeps on a condition
 * variable and costs nothing, so ranks that make only blocking calls run as
 * they did.
 *
 * The lecture's thread never touches a group's requests while the thread
 * works on them: the thread marks a group busy (under the lock) before it
 * calls MPI on it, without the lock held, so the lecture's thread is never
 * kept waiting on a long MPI call to start or watch another; at its wait the
 * lecture's thread takes the group back (lx_progress_claim) once it is
 * started and not busy, then calls MPI_Waitall itself, which drives progress
 * at full speed for the rest. A request the thread saw complete is
 * MPI_REQUEST_NULL by then, which MPI_Waitall skips.
 *
 * Why a polling thread, with a sleep between polls, and not
 *   - a thread that owns MPI and runs every call for the lecture's thread
 *     (MPI_THREAD_FUNNELED): every blocking call would pay a hand-over
 *     between threads, several microseconds, in the latency the lectures
 *     measure;
 *   - a worker thread per non-blocking call running its blocking twin
 *     (gloo's way): a thread inside a blocking Open MPI call spins on a
 *     core for the whole transfer, taking it from the compute it overlaps,
 *     and there would be as many spinning threads as calls in flight;
 *   - Open MPI's own progress threads: only its TCP transport has one
 *     (btl_tcp_progress_thread), not shared memory, and none drives the
 *     non-blocking collectives.
 * The sleep keeps the thread's share of a core small (a poll is a few
 * microseconds) while a large transfer still advances every few tens of
 * microseconds: docs/design.md and docs/benchmarks.md give the figures.
 *
 * The thread runs at the lowest priority, nice 19 (LECTERN_PROGRESS_NICE,
 * 0 to 19; Linux gives each thread its own nice value). At the lecture's
 * priority, the thread woken by a dist_isend on a machine whose cores were
 * all busy often ran before the caller got its core back: a 64 KiB isend
 * took 35 us instead of 7 (bench/bench_stage_msg.c), once per message of a
 * pipeline stage. At nice 19 it still runs whenever a core has room (a rank
 * sleeping or waiting), and bench/bench_overlap.c's overlap of an async
 * all-reduce with matmuls did not change (docs/benchmarks.md).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/comm_progress.h"
#include "trace/trace.h"

struct lx_progress_group {
    MPI_Request *reqs;
    int n;
    int (*start)(void *ctx); /* NULL once started (or for a watch) */
    void *ctx;
    int busy;                       /* the thread is in an MPI call on it */
    int error;                      /* an MPI error code met on the thread */
    struct lx_progress_group *next; /* in launch order */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;    /* the thread: work arrived, or stop */
static pthread_cond_t settled = PTHREAD_COND_INITIALIZER; /* the lecture's thread: a group changed */
static lx_progress_group *head, *tail;                    /* in flight, oldest first (under lock) */
static pthread_t thread;
static int running, stopping;
static int held;                 /* lx_progress_hold: the caller drives, the thread waits */
static int multiple = 0;         /* Open MPI gave MPI_THREAD_MULTIPLE */
static int enabled = 1;          /* LECTERN_PROGRESS, lx_progress_set */
static long interval_ns = 20000; /* LECTERN_PROGRESS_US */
static int thread_nice = 19;     /* LECTERN_PROGRESS_NICE */

static void nap_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void unlink_group(lx_progress_group *g) {
    lx_progress_group **link = &head, *prev = NULL;
    while (*link && *link != g) {
        prev = *link;
        link = &(*link)->next;
    }
    if (!*link) return;
    *link = g->next;
    if (tail == g) tail = prev;
    g->next = NULL;
}

/* One pass over the groups in flight: start what waits to start, test the
 * rest. Called and returns with the lock held; drops it around MPI calls.
 * Two threads may pass (the progress thread, and model_compute's through
 * lx_progress_drive): a group the other has in hand (busy) is skipped, and
 * a pass stops at one the other is still starting, so that collectives
 * start in the order they were launched, on every rank. */
static void one_pass(void) {
    lx_progress_group *g = head;
    while (g) {
        if (g->busy) {
            if (g->start) break;
            g = g->next;
            continue;
        }
        g->busy = 1;
        int (*start)(void *) = g->start;
        pthread_mutex_unlock(&lock);
        int done = 0, rc = MPI_SUCCESS;
        if (start) {
            /* An error waits for the wait, on the lecture's thread (MPI_CHECK
             * here would exit from this thread). */
            rc = start(g->ctx);
        } else {
            rc = MPI_Testall(g->n, g->reqs, &done, MPI_STATUSES_IGNORE);
        }
        pthread_mutex_lock(&lock);
        g->start = NULL;
        g->busy = 0;
        if (rc != MPI_SUCCESS) {
            g->error = rc;
            done = 1;
        }
        lx_progress_group *next = g->next;
        if (done) unlink_group(g); /* its wait finds it complete */
        pthread_cond_broadcast(&settled);
        g = next;
    }
}

static void *progress_main(void *unused) {
    (void)unused;
    /* The default timer slack (50 us) would stretch every short sleep. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    /* This thread only (its kernel id): the rank's other threads keep theirs.
     * A value below the rank's own needs privilege; the thread then keeps
     * the rank's, which is no higher. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), thread_nice);
    pthread_setname_np(pthread_self(), "lx-progress"); /* in top -H, ps -L */
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!stopping && (!head || held))
            pthread_cond_wait(&wake, &lock);
        if (stopping) break;
        one_pass();
        if (!head) continue;
        pthread_mutex_unlock(&lock);
        if (interval_ns > 0) nap_ns(interval_ns);
        else sched_yield();
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

void lx_progress_init(int provided) {
    multiple = provided >= MPI_THREAD_MULTIPLE;
    const char *on = getenv("LECTERN_PROGRESS");
    if (on && strcmp(on, "0") == 0) enabled = 0;
}

/* The thread's settings, read when it first starts: inside a spawned
 * function, whose stderr is the lecture's console, so a bad value is said
 * where it is seen (at MPI_Init a rank's stderr goes to the pool's log). */
static void read_settings(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *us = getenv("LECTERN_PROGRESS_US");
    if (us && *us) {
        char *end;
        double v = strtod(us, &end);
        if (*end == '\0' && v >= 0 && v <= 1e6) interval_ns = (long)(v * 1000);
        else
            fprintf(stderr,
                    "lectern: rank %d: LECTERN_PROGRESS_US=%s is not a number of microseconds (0 to 1e6): "
                    "using %ld\n",
                    lx_rank(), us, interval_ns / 1000);
    }
    const char *ni = getenv("LECTERN_PROGRESS_NICE");
    if (ni && *ni) {
        char *end;
        long v = strtol(ni, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 19) thread_nice = (int)v;
        else
            fprintf(stderr, "lectern: rank %d: LECTERN_PROGRESS_NICE=%s is not a nice value from 0 to 19: using %d\n",
                    lx_rank(), ni, thread_nice);
    }
}

int lx_progress_active(void) { return multiple && enabled; }

void lx_progress_set(int on) { enabled = on != 0; }

static int ensure_thread(void) {
    if (running) return 1;
    read_settings();
    stopping = 0;
    if (pthread_create(&thread, NULL, progress_main, NULL) != 0) {
        fprintf(stderr,
                "lectern: rank %d: no progress thread (pthread_create failed): non-blocking transfers "
                "move only inside MPI calls\n",
                lx_rank());
        multiple = 0;
        return 0;
    }
    running = 1;
    /* A rank that exits (an error step, then exit(1)) stops the thread first,
     * so no library's exit-time clean-up runs under it. */
    static int registered;
    if (!registered && atexit(lx_progress_stop) == 0) registered = 1;
    return 1;
}

static lx_progress_group *add(int (*start)(void *), void *ctx, MPI_Request *reqs, int n) {
    lx_progress_group *g = calloc(1, sizeof *g);
    if (!g) lx_fatal("out of memory");
    g->reqs = reqs;
    g->n = n;
    g->start = start;
    g->ctx = ctx;
    g->error = MPI_SUCCESS;
    pthread_mutex_lock(&lock);
    if (tail) tail->next = g;
    else head = g;
    tail = g;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    return g;
}

lx_progress_group *lx_progress_watch(MPI_Request *reqs, int n) {
    if (!lx_progress_active() || n <= 0 || !ensure_thread()) return NULL;
    return add(NULL, NULL, reqs, n);
}

/* An MPI error code as MPI_CHECK reports it. */
static void __attribute__((noreturn)) die(int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    lx_backend_error("MPI", msg, __FILE__, __LINE__, call);
}

lx_progress_group *lx_progress_launch(int (*start)(void *ctx), void *ctx, MPI_Request *reqs, int n) {
    if (!lx_progress_active() || !ensure_thread()) {
        int rc = start(ctx);
        if (rc != MPI_SUCCESS) die(rc, "starting a non-blocking collective");
        return NULL;
    }
    return add(start, ctx, reqs, n);
}


void lx_progress_claim(lx_progress_group *g, const char *call) {
    if (!g) return;
    pthread_mutex_lock(&lock);
    while (g->busy || g->start)
        pthread_cond_wait(&settled, &lock);
    unlink_group(g);
    pthread_mutex_unlock(&lock);
    int rc = g->error;
    free(g);
    if (rc != MPI_SUCCESS) die(rc, call);
}

int lx_progress_test(lx_progress_group *g, const char *call) {
    if (!g) return 1;
    int done = 0, rc = MPI_SUCCESS;
    pthread_mutex_lock(&lock);
    /* A test drives progress, as MPI_Test does: a collective the thread has
     * not started yet is started here, in launch order (one_pass). At nice 19
     * a loaded machine can keep the thread off its core for as long as the
     * caller polls: a loop of 10^8 dist_test calls once never saw an async
     * all-reduce start, at load 13 on 2 cores. */
    if (g->start && !g->busy) one_pass();
    /* Not busy: the thread makes no MPI call on these requests until the
     * lock is released (it marks them busy under the lock first). */
    if (!g->busy && !g->start && g->error == MPI_SUCCESS) rc = MPI_Testall(g->n, g->reqs, &done, MPI_STATUSES_IGNORE);
    else if (g->error != MPI_SUCCESS) rc = g->error;
    pthread_mutex_unlock(&lock);
    if (rc != MPI_SUCCESS) die(rc, call);
    return done;
}

void lx_progress_hold(int on) {
    if (!running) return;
    pthread_mutex_lock(&lock);
    held = on;
    if (!on) pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

int lx_progress_drive(void) {
    if (!running) return 0;
    pthread_mutex_lock(&lock);
    if (head) one_pass();
    int left = head != NULL;
    pthread_mutex_unlock(&lock);
    return left;
}

void lx_progress_stop(void) {
    if (!running) return;
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    /* What is left belongs to requests never waited for: their owners free
     * the groups (a rank that exits frees nothing). */
    head = tail = NULL;
    running = 0;
}
