/* table() and the chart helpers: values recorded as data (tests/test_table.py). */
#include <math.h>
#include <stdint.h>

#include "lectern.h"

static void good(void) {
    table_t *t = table_new("all-reduce on %d ranks", 4);
    table_column(t, "size", "MiB", "%g");
    table_column(t, "time", "ms", "%.3f");
    table_column(t, "calls", NULL, "%d");
    table_column(t, "bytes", "B", "%lld");
    table_column(t, "operation", "", "%s");
    table_row(t, 0.25, 1.23456, 3, (long long)262144, "all-reduce");
    table_row(t, 4.0, 0.5, 10, (long long)INT64_C(4194304), "reduce-scatter");
    table_row(t, 1.0, NAN, 7, (long long)1048576, "broadcast");
    table_show(t);

    double xs[] = {1, 2, 4, 0}, ys[] = {10, 20, 40, 5};
    chart_t *c = chart_new("size (MiB)", "time (ms)", "time on %d ranks", 2);
    chart_log_x(c, 2);
    chart_line(c, "measured", xs, ys, 4); /* x = 0 is left out on a log axis */
    chart_line(c, "model", xs, ys, 3);
    chart_show(c);

    chart_t *g = chart_new("time (ms)", "stage", "timeline");
    chart_span(g, "stage 0", "forward", "micro-batch 0", 0.0, 1.5);
    chart_span(g, "stage 1", "backward", NULL, 1.5, 2.0);
    chart_show(g);

    chart_t *m = chart_new("time (ms)", "stage", "measured and modelled");
    chart_span(m, "real: stage 0", "forward", "micro-batch 0", 0.0, 1.5);
    chart_span_modelled(m, "modelled: stage 0", "forward", "micro-batch 0", 0.0, 20.0);
    chart_show(m);

    chart_t *only = chart_new("time (ms)", "stage", "modelled only");
    chart_span_modelled(only, "stage 0", "backward", NULL, 20.0, 60.0);
    chart_show(only);
}

static void bad(void) {
    table_t *t = table_new(NULL);
    table_column(t, "x", NULL, "%p"); /* not a conversion a table reads */
    table_show(t);
    chart_t *c = chart_new("x", "y", "mixed");
    double v[] = {1};
    chart_line(c, "a", v, v, 1);
    chart_span(c, "row", "b", NULL, 0, 1); /* lines and spans in one chart */
    chart_show(c);
    chart_t *d = chart_new("x", "y", "mixed again");
    chart_line(d, "a", v, v, 1);
    chart_span_modelled(d, "row", "b", NULL, 0, 1); /* a modelled span among lines */
    chart_show(d);
}

static void body(void) {
    good();
    if (lecture_flag("bad")) bad();
    for (int i = 0; lecture_flag("spans") && i < 1200; i++) /* more than the trace keeps of one process */
        model_compute(0.0);
}

LECTURE_OPTIONS({"bad", NULL, "make the mistakes too"}, {"spans", NULL, "1200 empty spans of modelled compute"});

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
