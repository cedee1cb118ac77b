/* Fixture: dist_timer across 3 ranks (tests/test_timer.py). Rank 0 arrives
 * late (it sleeps before starting the timer); inside the region rank r
 * sleeps (r + 1) * 40 ms. Every rank prints its own figures and the
 * gathered ones with full precision. */
#include <time.h>

#include "lectern.h"

static void nap(double seconds) {
    struct timespec ts = {0, (long)(seconds * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

static void ranks(int rank, int world_size, void *args) {
    if (rank == 0) {
        nap(0.2);
        note_verbatim("rank 0 starts the timer at %.9f", now_seconds());
    }
    dist_timer t = {0};
    dist_timer_start(&t);
    nap(0.04 * (rank + 1));
    double max = dist_timer_stop(&t);
    note_verbatim("rank %d started %.9f seconds %.9g max %.9g mean %.9g min %.9g world %d returned %.9g", rank,
                  t.started, t.seconds, t.max, t.mean, t.min, t.world_size, max);
}

static void body(void) {
    spawn(ranks, 3, NULL, 0);
    dist_timer t = {0};
    dist_timer_start(&t);
    nap(0.01);
    dist_timer_stop(&t);
    note_verbatim("lecture seconds %.9g max %.9g mean %.9g min %.9g world %d", t.seconds, t.max, t.mean, t.min,
                  t.world_size);
    dist_timer never = {0};
    dist_timer_stop(&never);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
