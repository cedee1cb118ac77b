/* Fixture: a lecture that crashes in the way LECTERN_FIXTURE_CRASH names
 * (segv, abort, assert, fpe, overflow) after two notes. */
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
    if (n < 0) return 0;   /* never true; it keeps the compiler from calling this a bug */
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

static void body(void) {
    note("before the crash");
    note_verbatim("still fine");
    const char *how = getenv("LECTERN_FIXTURE_CRASH");
    crash(how ? how : "segv");
    note("never reached");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
