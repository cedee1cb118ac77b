/* Fixture: predict(question, measured, unit) (tests/test_predict.py,
 * tests/viewer/test_predict.py). Questions in the lecture with a unit,
 * without one, a large integer and a small value, and one per rank in a
 * spawn of two, each rank's value its own. LECTERN_FIXTURE_CASE picks a
 * misuse instead: "empty" (an empty question), "nan", "inf" (a value that
 * is not finite). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

/* Kept in volatiles so the compiler cannot see what they are. */
static volatile double not_a_number = NAN, minus_infinity = -INFINITY;

/* Rank r measured 10 (r + 1) ms. */
static void ranks(int rank, int world_size, void *args) {
    (void)args;
    (void)world_size;
    double ms = 10.0 * (rank + 1);
    predict("How long did *this rank* take?", ms, "ms");
    note("rank %d took %g ms", rank, ms);
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_CASE");
    if (c && strcmp(c, "empty") == 0) {
        predict("", 1.0, "s");
        note("after");
        return;
    }
    if (c && strcmp(c, "nan") == 0) {
        predict("How fast?", not_a_number, "GB/s");
        note("after");
        return;
    }
    if (c && strcmp(c, "inf") == 0) {
        predict("How fast?", minus_infinity, "GB/s");
        note("after");
        return;
    }
    note("## Predict, then see");
    double busbw = 12.3;
    predict("What bus bandwidth did the **all-reduce** reach?", busbw, "GB/s");
    note("It reached %.1f GB/s.", busbw);
    predict("How many bytes does each rank send?", 25165824.0, "bytes");
    predict("What fraction of the time is bubble?", 0.375, "");
    predict("How long is one message's latency?", 0.0000123, "s");
    spawn(ranks, 2, NULL, 0);
    note("done");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
