/*
 * charts.c: charts of measured numbers, built as Vega-Lite here so a
 * lecture never writes JSON. A chart is lines (series of (x, y) points) or
 * spans (bars from a start to an end on named rows: a timeline); its
 * data.values hold the numbers as given ({"series", "x", "y"} per point,
 * {"series", "row", "label", "start", "end"} per span), so a test reads them back
 * from the trace. chart_show() records it through plot()'s rendering. A span
 * of modelled compute (chart_span_modelled) also carries "modelled": true and
 * is drawn so that nobody takes it for a measured one (mark_modelled).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

struct chart {
    char *title, *x_label, *y_label;
    cJSON *title_args; /* the title's arguments by name, or NULL */
    int log_x, log_y;  /* base, or 0 for a linear axis */
    int lines, spans;  /* how many of each were added */
    int modelled;      /* spans added by chart_span_modelled */
    int dropped;       /* points left out: not finite, or <= 0 on a log axis */
    int bad;
    cJSON *values;
};

/* chart_new(x, y, ...) is lx_chart_new(#__VA_ARGS__, x, y, __VA_ARGS__)
 * (lectern.h): the title's numbers are kept by name, as a note's are. */
chart_t *lx_chart_new(const char *args_text, const char *x_label, const char *y_label, const char *title_fmt, ...) {
    chart_t *c = calloc(1, sizeof *c);
    if (!c) lx_fatal("chart_new: out of memory");
    if (title_fmt) {
        va_list ap;
        va_start(ap, title_fmt);
        c->title_args = lx_note_args(args_text, title_fmt, ap);
        c->title = lx_vfmt(title_fmt, ap);
        va_end(ap);
    }
    c->x_label = lx_utf8_repair(x_label ? x_label : "");
    c->y_label = lx_utf8_repair(y_label ? y_label : "");
    c->values = cJSON_CreateArray();
    return c;
}

static void set_log(chart_t *c, int *axis, int base, const char *who) {
    if (!c) {
        lx_error("%s: the chart is NULL", who);
        return;
    }
    if (base < 2) {
        lx_error("%s: base %d is not a logarithm's base (2, 10, ...)", who, base);
        c->bad = 1;
        return;
    }
    *axis = base;
}

void chart_log_x(chart_t *c, int base) { set_log(c, c ? &c->log_x : NULL, base, "chart_log_x"); }
void chart_log_y(chart_t *c, int base) { set_log(c, c ? &c->log_y : NULL, base, "chart_log_y"); }

static int keep(const chart_t *c, double x, double y) {
    return isfinite(x) && isfinite(y) && !(c->log_x && x <= 0) && !(c->log_y && y <= 0);
}

void chart_line(chart_t *c, const char *series, const double *xs, const double *ys, int n) {
    if (!c || !series || !xs || !ys) {
        lx_error("chart_line: %s is NULL", !c ? "the chart" : !series ? "the series' name" : !xs ? "xs" : "ys");
        if (c) c->bad = 1;
        return;
    }
    if (n < 1 || c->spans) {
        lx_error(n < 1 ? "chart_line: series '%s' has no points"
                       : "chart_line: series '%s' added to a "
                         "chart of spans (a chart is lines or spans)",
                 series);
        c->bad = 1;
        return;
    }
    c->lines++;
    for (int i = 0; i < n; i++) {
        if (!keep(c, xs[i], ys[i])) {
            c->dropped++;
            continue;
        }
        cJSON *p = cJSON_CreateObject();
        lx_add_text(p, "series", series);
        cJSON_AddNumberToObject(p, "x", xs[i]);
        cJSON_AddNumberToObject(p, "y", ys[i]);
        cJSON_AddItemToArray(c->values, p);
    }
}

static void add_span(chart_t *c, const char *row, const char *series, const char *label, double start, double end,
                     int modelled) {
    const char *who = modelled ? "chart_span_modelled" : "chart_span";
    if (!c || !row || !series) {
        lx_error("%s: %s is NULL", who, !c ? "the chart" : !row ? "the row" : "the series' name");
        if (c) c->bad = 1;
        return;
    }
    if (c->lines) {
        lx_error("%s: a span added to a chart of lines (a chart is lines or spans)", who);
        c->bad = 1;
        return;
    }
    c->spans++;
    if (!isfinite(start) || !isfinite(end)) {
        c->dropped++;
        return;
    }
    cJSON *p = cJSON_CreateObject();
    lx_add_text(p, "series", series);
    lx_add_text(p, "row", row);
    if (label) lx_add_text(p, "label", label);
    cJSON_AddNumberToObject(p, "start", start);
    cJSON_AddNumberToObject(p, "end", end);
    if (modelled) {
        cJSON_AddBoolToObject(p, "modelled", 1);
        c->modelled++;
    }
    cJSON_AddItemToArray(c->values, p);
}

void chart_span(chart_t *c, const char *row, const char *series, const char *label, double start, double end) {
    add_span(c, row, series, label, start, end, 0);
}

void chart_span_modelled(chart_t *c, const char *row, const char *series, const char *label, double start, double end) {
    add_span(c, row, series, label, start, end, 1);
}

static cJSON *axis(const char *field, const char *type, const char *title, int log) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "field", field);
    cJSON_AddStringToObject(a, "type", type);
    if (title && *title) cJSON_AddStringToObject(a, "title", title);
    if (log) {
        cJSON *scale = cJSON_AddObjectToObject(a, "scale");
        cJSON_AddStringToObject(scale, "type", "log");
        cJSON_AddNumberToObject(scale, "base", log);
    }
    return a;
}

static cJSON *nominal(const char *field, const char *title) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "field", field);
    cJSON_AddStringToObject(a, "type", "nominal");
    if (title) cJSON_AddStringToObject(a, "title", title);
    return a;
}

/* A field (opacity, strokeDash) that tells modelled spans from measured
 * ones: `range` gives the measured look, then the modelled one. Ordinal,
 * its order the domain's: Vega-Lite warns of opacity on an unsorted
 * (nominal) field. */
static cJSON *by_compute(int measured, cJSON *range) {
    cJSON *a = nominal("compute", "compute");
    cJSON_ReplaceItemInObject(a, "type", cJSON_CreateString("ordinal"));
    cJSON *scale = cJSON_AddObjectToObject(a, "scale");
    cJSON *domain = cJSON_AddArrayToObject(scale, "domain");
    if (measured) cJSON_AddItemToArray(domain, cJSON_CreateString("measured"));
    cJSON_AddItemToArray(domain, cJSON_CreateString("modelled"));
    if (!measured) cJSON_DeleteItemFromArray(range, 0);
    cJSON_AddItemToObject(scale, "range", range);
    return a;
}

/* Spans of modelled compute must not pass for measured arithmetic: each
 * value gets "compute" ("modelled" or "measured"), drawn pale with a dashed
 * outline, with a legend entry of its own ("compute") and a line in the
 * tooltip; the chart's description (its accessible name) says what they
 * are, and the viewer adds a caption that says it in words. */
static void mark_modelled(cJSON *spec, cJSON *enc, int measured) {
    cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(spec, "data"), "values"))
            cJSON_AddStringToObject(v, "compute",
                                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "modelled")) ? "modelled"
                                                                                                  : "measured");
    cJSON_DeleteItemFromObject(spec, "mark");
    cJSON *mark = cJSON_AddObjectToObject(spec, "mark");
    cJSON_AddStringToObject(mark, "type", "bar");
    cJSON_AddStringToObject(mark, "stroke", "#333333");
    cJSON_AddNumberToObject(mark, "strokeWidth", 1);
    double opacity[2] = {1.0, 0.4};
    cJSON_AddItemToObject(enc, "opacity", by_compute(measured, cJSON_CreateDoubleArray(opacity, 2)));
    cJSON *dashes = cJSON_CreateArray();
    int solid[2] = {1, 0}, dashed[2] = {4, 2};
    cJSON_AddItemToArray(dashes, cJSON_CreateIntArray(solid, 2));
    cJSON_AddItemToArray(dashes, cJSON_CreateIntArray(dashed, 2));
    cJSON_AddItemToObject(enc, "strokeDash", by_compute(measured, dashes));
    cJSON_AddStringToObject(spec, "description",
                            "Pale bars with dashed outlines are modelled compute: time the lecture said a device "
                            "computed (model_compute), not arithmetic that was measured.");
}

static void chart_free(chart_t *c) {
    cJSON_Delete(c->values);
    free(c->title);
    cJSON_Delete(c->title_args);
    free(c->x_label);
    free(c->y_label);
    free(c);
}

void chart_show(chart_t *c) {
    if (!c) {
        lx_error("chart_show: the chart is NULL");
        return;
    }
    if (!c->bad && !c->lines && !c->spans) lx_error("chart_show: the chart has no lines and no spans");
    if (c->bad || (!c->lines && !c->spans)) {
        chart_free(c);
        return;
    }
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddStringToObject(spec, "$schema", "https://vega.github.io/schema/vega-lite/v6.json");
    if (c->title) lx_add_text(spec, "title", c->title);
    cJSON_AddNumberToObject(spec, "width", c->spans ? 480 : 360);
    cJSON_AddNumberToObject(spec, "height", c->spans ? 120 : 220);
    cJSON *data = cJSON_AddObjectToObject(spec, "data");
    cJSON_AddItemToObject(data, "values", c->values);
    c->values = NULL;
    cJSON *enc = cJSON_CreateObject();
    if (c->lines) {
        cJSON *mark = cJSON_AddObjectToObject(spec, "mark");
        cJSON_AddStringToObject(mark, "type", "line");
        cJSON_AddBoolToObject(mark, "point", 1);
        cJSON_AddItemToObject(enc, "x", axis("x", "quantitative", c->x_label, c->log_x));
        cJSON_AddItemToObject(enc, "y", axis("y", "quantitative", c->y_label, c->log_y));
        cJSON_AddItemToObject(enc, "color", nominal("series", NULL));
        if (c->lines > 1) cJSON_AddItemToObject(enc, "strokeDash", nominal("series", NULL));
    } else {
        cJSON_AddStringToObject(spec, "mark", "bar");
        cJSON_AddItemToObject(enc, "x", axis("start", "quantitative", c->x_label, c->log_x));
        cJSON *x2 = cJSON_CreateObject();
        cJSON_AddStringToObject(x2, "field", "end");
        cJSON_AddItemToObject(enc, "x2", x2);
        cJSON_AddItemToObject(enc, "y", axis("row", "ordinal", c->y_label, 0));
        cJSON_AddItemToObject(enc, "color", nominal("series", NULL));
        cJSON *tip = cJSON_AddArrayToObject(enc, "tooltip");
        const char *fields[] = {"row", "series", "label", "start", "end", "compute"};
        for (int i = 0; i < (c->modelled ? 6 : 5); i++) {
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "field", fields[i]);
            cJSON_AddItemToArray(tip, f);
        }
        if (c->modelled) mark_modelled(spec, enc, c->spans - c->modelled > 0);
    }
    cJSON_AddItemToObject(spec, "encoding", enc);
    if (c->dropped) {
        /* counted, for a test or a reader of the trace: points a chart cannot draw */
        cJSON *meta = cJSON_AddObjectToObject(spec, "usermeta");
        cJSON_AddNumberToObject(meta, "dropped_points", c->dropped);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "plot");
    cJSON_AddItemToObject(r, "spec", spec);
    if (c->title_args) {
        cJSON_AddItemToObject(r, "title_args", c->title_args);
        c->title_args = NULL;
    }
    lx_emit(r);
    chart_free(c);
}
