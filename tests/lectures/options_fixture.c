/* Fixture: a lecture's own options (tests/test_options.py).
 * LECTERN_FIXTURE_CASE=undeclared reads options the lecture does not declare. */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

LECTURE_OPTIONS({"naive", NULL, "use the naive ring"}, {"n", "N", "elements per rank (default 8)"},
                {"label", "TEXT", "a word to print"});

static void ranks(int rank, int world_size, void *args) {
    note_verbatim("rank %d: naive=%d n=%s", rank, lecture_flag("naive"), lecture_option("n", "8"));
}

static void body(void) {
    note_verbatim("lecture: naive=%d n=%s label=%s", lecture_flag("naive"), lecture_option("n", "8"),
                  lecture_option("label", "(none)"));
    spawn(ranks, 2, NULL, 0);
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    if (c && strcmp(c, "undeclared") == 0) {
        lecture_flag("fast");
        lecture_option("naive", "x");
        lecture_flag("n");
    }
    note("after");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
