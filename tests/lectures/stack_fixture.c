/* Fixture: stack shapes the trace must record exactly (tests/test_foundation.py).
 * Its layout is what the tests check (each call on a line of its own, a
 * call over two lines), so make format leaves it as written. */
/* clang-format off */
#include "lectern.h"
#include "stack_helper.h"

static int fib(int n);

static void leaf(const char *who) {
    note("leaf called by %s", who);
}

static void middle(void) {
    leaf("middle");
    helper_note(2);
}

/* Not static: an exported function is a frame like any other. */
void exported(void) {
    middle();
}

static int fib(int n) {
    if (n < 2) {
        note_verbatim("fib(%d) = %d", n, n);
        return n;
    }
    return fib(n - 1) + fib(n - 2);
}

static void through_pointer(void (*fn)(const char *)) {
    fn("a function pointer");
}

static void body(void) {
    note("top level");
    leaf("body");
    exported();
    fib(3);
    through_pointer(leaf);
    for (int i = 0; i < 3; i++)
        note_verbatim("loop %d", i);
    note("a call "
         "over two lines");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
