/* Fixture: lines that ranks print at one line of the lecture become one step
 * per round, each rank's line kept (tests/test_spawn.py RankTexts). */
#include <time.h>

#include "lectern.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void worker(int rank, int world_size, void *p) {
    (void)p;
    /* The highest rank prints first and the lowest last, with no barrier
     * between rounds: rank 3 is in round 2 before rank 0 has said round 0. */
    for (int k = 0; k < 3; k++) {
        sleep_ms(rank == 0 ? 60 : 5 * (world_size - rank));
        note_verbatim("rank %d round %d", rank, k);
    }
    if (rank % 2 == 1) note_verbatim("odd rank %d", rank);
    dist_barrier();
}

static void body(void) {
    spawn(worker, 4, NULL, 0);
    note_verbatim("the lecture's own line");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
