/*
 * model_compute.c: model_compute(ms), compute that leaves the core
 * (lectern.h, section 5).
 *
 * A speed lesson (overlap hides communication, a pipeline's bubble, a
 * prefetch) is about a device that computes while the host and the network
 * are free. Four ranks on two CPU cores are not that: a rank that multiplies
 * matrices holds a core, and the communication it started waits for one. So
 * a lecture can say "this operation keeps the device busy for ms" instead
 * of doing the arithmetic, and the schedule, not the machine's cores, sets
 * the time:
 *
 *   the CPU  the calling thread sleeps until ms have passed (clock_nanosleep
 *            to an absolute time on CLOCK_MONOTONIC, so a signal that wakes
 *            it early only makes it sleep again). The core is free meanwhile:
 *            the other ranks use it, and a message in flight moves
 *            (docs/design.md). While transfers are in flight it wakes every
 *            DRIVE_MS to move them itself (lx_progress_drive: one pass of the progress
 *            thread's work, a few microseconds), as a GPU's copy engines and
 *            NCCL's kernels move them whatever the host does: the rank's
 *            progress thread runs at nice 19, and other processes' load
 *            starves it (an 8-bucket all-reduce hid half its time behind
 *            modelled compute at load 5, measured, instead of all of it);
 *            it is held meanwhile (lx_progress_hold), so that it is not
 *            preempted in the middle of a call this thread then waits for.
 *   a GPU    one kernel on the rank's compute stream (the default stream)
 *            spins on the device for ms (tensor_cuda.cu, lx_cuda_spin): the
 *            host returns at once, and work queued after it on that stream,
 *            or waiting for it (a collective's stream), starts after it.
 *            UNVERIFIED: no GPU was available where this was written.
 *
 * Each call is recorded as a span of the trace's "modelled" array
 * (trace/modelled.c): on the CPU from the clock read before the sleep to the
 * one read after it (so it includes how late the thread woke up); on a GPU
 * from the launch to the launch plus ms (the host never sees the kernel run).
 * Its device is the calling rank's (get_device), the lecture's own outside a
 * spawn: one device computing alone is a lesson too.
 */
#include <errno.h>
#include <math.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/comm_progress.h"

/* How often a sleeping span wakes to move what is in flight: a modelled DDP step's 16 async all-reduces hid behind
 * its backward in 7 of 8 runs waking every 0.1 ms, 5 of 8 every 0.2 ms (load 2-3, 2-core VM). */
#define DRIVE_MS 0.1

/* Sleeps until CLOCK_MONOTONIC reads `until` (seconds). */
static void sleep_until(double until) {
    struct timespec t;
    t.tv_sec = (time_t)until;
    t.tv_nsec = (long)((until - (double)t.tv_sec) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {}
}

void model_compute(double ms) {
    if (isnan(ms)) {
        lx_error("model_compute: ms is NaN, not a time");
        return;
    }
    if (ms < 0) {
        lx_error("model_compute: ms is %g, below 0 (a time the device computes, in milliseconds)", ms);
        return;
    }
    if (!(ms <= LECTERN_MAX_MODEL_MS)) {
        lx_error("model_compute: %g ms is more than LECTERN_MAX_MODEL_MS (%g ms): longer than any lesson needs "
                 "(a value in microseconds or nanoseconds?)",
                 ms, (double)LECTERN_MAX_MODEL_MS);
        return;
    }
    int device = get_device(dist_rank());
    double start = lx_elapsed(), end;
    if (device >= 0) {
        lx_cuda_spin(device, ms);
        end = start + ms * 1e-3; /* asked for, not seen: the host does not wait */
    } else {
        double until = now_seconds() + ms * 1e-3;
        lx_progress_hold(1);
        int in_flight = lx_progress_drive();
        for (double t = now_seconds(); t < until; t = now_seconds()) {
            sleep_until(in_flight && t + DRIVE_MS * 1e-3 < until ? t + DRIVE_MS * 1e-3 : until);
            in_flight = lx_progress_drive();
        }
        lx_progress_hold(0);
        end = lx_elapsed();
    }
    lx_modelled_record(start, end, ms, device);
    lx_twin_modelled(start, end, ms); /* --twin-record: the replay computes ms there too */
}
