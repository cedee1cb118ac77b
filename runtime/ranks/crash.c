/*
 * crash.c: a lecture that crashes still leaves its trace.
 *
 * On SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (a failed assert), SIGTERM or
 * SIGINT we stop the pool of ranks (pool.c), add one last step, an error
 * naming the signal and the lecture line that was running, and write the
 * trace. A crash then exits with status 1, the status of a lecture that
 * failed (not 139 "Segmentation fault" from the shell). SIGTERM and SIGINT
 * are requests from outside, not failures of the lecture: after the trace,
 * they take their normal course, so a shell loop stopped with Ctrl-C stops.
 *
 * Formatting JSON inside a signal handler is not async-signal-safe. We accept
 * that: the process is going down anyway, and a trace written in all but the
 * rarest cases (a crash inside malloc) is worth far more than none. A second
 * signal while we write goes straight to the default action.
 */
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

static volatile sig_atomic_t handling;
static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT};

static const char *describe(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (abort: a failed assert or abort())";
    case SIGTERM: return "SIGTERM (terminated)";
    case SIGINT: return "SIGINT (interrupted)";
    default: return "a signal";
    }
}

static void on_signal(int sig, siginfo_t *info, void *ucontext) {
    if (handling) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    /* Ctrl-C while the ranks wait: spawn() says first where each rank is,
     * which only the board (gone with the pool) can tell. A second signal
     * meanwhile, or one spawn() has handed back, takes the path below. */
    if ((sig == SIGINT || sig == SIGTERM) && !lx_in_rank() && lx_spawn_waiting && !lx_spawn_interrupt) {
        lx_spawn_interrupt = sig;
        return;
    }
    handling = 1;
    if (!lx_in_rank()) lx_pool_kill_from_signal();

    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture_signal(frames, LX_MAX_FRAMES, ucontext);
    char *msg;
    /* tensor_free points a freed tensor's data at LX_POISON (tensor_track.c):
     * a fault there is a tensor used after it was freed. */
    uintptr_t addr = info ? (uintptr_t)info->si_addr : 0;
    const char *uaf = sig == SIGSEGV && addr >= LX_POISON && addr - LX_POISON < LX_POISON_SPAN
                              ? " (a freed tensor's data: a tensor used after tensor_free)"
                              : "";
    if (n > 0)
        msg = lx_fmt("%s%s at %s:%d in %s()", describe(sig), uaf, frames[n - 1].path, frames[n - 1].line,
                     frames[n - 1].function);
    else msg = lx_fmt("%s%s outside the lecture's own code", describe(sig), uaf);
    lx_mark_failed();
    lx_emit_frames(frames, n, lx_rendering_error(msg));
    if (!lx_in_rank()) {
        fprintf(stderr, "lectern: the lecture stopped: %s\n", msg);
        if (lx_trace_write() == 0) {
            char *path = lx_trace_path("json");
            fprintf(stderr, "lectern: the trace so far is in %s\n", path);
            free(path);
        }
    }
    free(msg);
    if (!lx_in_rank() && sig != SIGTERM && sig != SIGINT) {
        fflush(stdout);
        LX_COVERAGE_FLUSH();
        _exit(1);
    }
    LX_COVERAGE_FLUSH();
    signal(sig, SIG_DFL);
    raise(sig);
}

void lx_install_crash_handlers(void) {
    /* A stack overflow (runaway recursion) leaves no stack to run the handler
     * on: give it one of its own, large enough for a cold libdw lookup. */
    static char *alt;
    if (!alt) {
        size_t size = 1024 * 1024;
        alt = malloc(size);
        stack_t ss = {.ss_sp = alt, .ss_size = size, .ss_flags = 0};
        if (alt) sigaltstack(&ss, NULL);
    }
    /* backtrace() loads libgcc on first use; do it now, not inside a handler. */
    void *warm[4];
    backtrace(warm, 4);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        sigaction(signals[i], &sa, NULL);
}
