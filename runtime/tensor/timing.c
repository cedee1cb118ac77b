/*
 * timing.c: a clock, and the median of what it measured.
 *
 * Timing GPU work needs device_synchronize() too (device.c): kernel launches
 * return at once, so a measurement is now_seconds(), the work,
 * device_synchronize(), now_seconds() (without the synchronize one would time
 * the launch, not the work).
 */
#include <stdlib.h>
#include <time.h>

#include "lectern.h"
#include "trace/trace.h"

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_of(double *values, int n) {
    if (!values) lx_fatal("median_of: values is NULL");
    if (n < 1) lx_fatal("median_of: of %d values (needs at least one)", n);
    qsort(values, (size_t)n, sizeof *values, by_value);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* Monotonic: never jumps when the wall clock is set, so differences are
 * true durations. */
double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
