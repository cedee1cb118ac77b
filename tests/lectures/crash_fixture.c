/* Fixture: a lecture that crashes in the way LECTERN_FIXTURE_CRASH names
 * (segv, abort, assert, fpe, overflow) after two notes; with
 * LECTERN_FIXTURE_SPAWN set, after a spawn too, so a pool of ranks is up
 * when the lecture's own process crashes. */
#include <assert.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static volatile int zero = 0;

static int recurse(int n) {
    volatile char pad[1024];
    pad[0] = (char)n;
    if (n < 0) return 0; /* never true; it keeps the compiler from calling this a bug */
    return recurse(n + 1) + pad[0];
}

static void crash(const char *how) {
    if (strcmp(how, "segv") == 0) {
        /* Page zero is never mapped: a real fault, not undefined behaviour the
         * compiler or UBSan could see at compile time. */
        volatile int *volatile p = (volatile int *)(uintptr_t)64;
        *p = 42;
    } else if (strcmp(how, "abort") == 0) {
        abort();
    } else if (strcmp(how, "assert") == 0) {
        assert(zero == 1);
    } else if (strcmp(how, "fpe") == 0) {
        raise(SIGFPE);
    } else if (strcmp(how, "overflow") == 0) {
        recurse(0);
    }
}

static void rank_says_hello(int rank, int world_size, void *args) { note("rank %d of %d is up", rank, world_size); }

static void body(void) {
    note("before the crash");
    note_verbatim("still fine");
    if (getenv("LECTERN_FIXTURE_SPAWN")) spawn(rank_says_hello, 2, NULL, 0);
    const char *how = getenv("LECTERN_FIXTURE_CRASH");
    crash(how ? how : "segv");
    note("never reached");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
