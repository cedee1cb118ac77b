/*
 * dist_timer.c: timing a region of work across the ranks of a spawn.
 *
 * One rank's clock says little about distributed work: ranks reach the
 * region at different moments (one was still finishing the last step), and
 * the step is as slow as its slowest rank. So the timer starts behind a
 * barrier (every rank starts together; waiting for a late rank is not
 * counted as work) and at the stop gathers every rank's time: the maximum
 * is what the step cost, the mean and minimum show how uneven it was.
 * Device work is waited for at both ends (kernel launches return at once).
 *
 * Built on the public collectives only (dist_barrier, dist_all_gather), so
 * it works on both backends like any lecture code would.
 */
#include <math.h>

#include <stdlib.h>

#include "comm/comm.h"
#include "trace/trace.h"
#include "tensor/tensor.h"

void dist_timer_start(dist_timer *timer) {
    if (!timer) {
        lx_error("%s: timer is NULL", __func__);
        return;
    }
    device_synchronize();
    if (lx_rank() >= 0) {
        dist_barrier();
        dist_timed_begin(); /* repeated calls skip their agreement check (comm_agree.c) */
    }
    timer->running = 1;
    timer->started = now_seconds();
}

double dist_timer_stop(dist_timer *timer) {
    if (!timer) {
        lx_error("%s: timer is NULL", __func__);
        return NAN;
    }
    if (!timer->running) {
        lx_error("%s: the timer was not started (call dist_timer_start first)", __func__);
        return NAN;
    }
    device_synchronize();
    timer->seconds = now_seconds() - timer->started;
    timer->running = 0;
    timer->max = timer->mean = timer->min = timer->seconds;
    timer->world_size = 1;
    if (lx_rank() < 0) return timer->max; /* the lecture's own process: one "rank" */
    dist_timed_end();                     /* outside the time: the ranks compare what they skipped */

    /* Every rank's time, gathered to every rank. Float32 keeps a time to
     * 2^-24 of itself: far below a clock's resolution for any region. */
    int w = dist_world_size(), device = get_device(dist_rank());
    float mine = (float)timer->seconds;
    tensor *in = tensor_from(&mine, 1, 0, device);
    tensor *all = empty(w, 0, device);
    dist_all_gather(all, in);
    float *times = lx_host_buffer(w);
    tensor_to_host(all, times);
    double total = 0, hi = times[0], lo = times[0];
    for (int r = 0; r < w; r++) {
        total += times[r];
        if (times[r] > hi) hi = times[r];
        if (times[r] < lo) lo = times[r];
    }
    timer->max = hi;
    timer->min = lo;
    timer->mean = total / w;
    timer->world_size = w;
    free(times);
    tensor_free(in);
    tensor_free(all);
    return timer->max;
}
