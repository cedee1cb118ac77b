/*
 * modelled.c: the record of modelled compute (model_compute(), lectern.h
 * section 5). A span of modelled compute is time the lecture *said* a
 * device computed, not arithmetic anything measured; the trace keeps every
 * span apart from the steps, marked as modelled, so that a reader (and the
 * viewer) can tell a figure that rests on one from a measured one.
 *
 * Flow of one span:
 *   model_compute(ms)  comm/model_compute.c: checks ms, keeps the device busy
 *   -> lx_modelled_record(start, end, ms, device)
 *        the innermost lecture frame of the calling thread, the times
 *   -> the modelled sink   the lecture's own: lx_trace_modelled_append (trace.c)
 *                          a rank: spawn_rank.c sends it to the lecture, which
 *                          stamps spawn and rank and appends it
 * The trace's top-level "modelled" array holds the spans, in the order they
 * reached the lecture; meta.modelled_compute says whether there are any
 * (docs/trace-format.md).
 */
#include <math.h>
#include <stdio.h>

#include "trace/trace.h"

static lx_modelled_sink sink;

void lx_set_modelled_sink(lx_modelled_sink s) { sink = s; }

/* Seconds since the lecture started, to the microsecond, as a step's time. */
static double micro(double seconds) { return (double)(long long)(seconds * 1e6) / 1e6; }

void lx_modelled_record(double start, double end, double ms, int device) {
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    cJSON *span = cJSON_CreateObject();
    cJSON_AddNullToObject(span, "spawn");
    cJSON_AddNullToObject(span, "rank");
    cJSON_AddNumberToObject(span, "start", micro(start));
    cJSON_AddNumberToObject(span, "end", micro(end));
    cJSON_AddNumberToObject(span, "ms", ms);
    char where[32];
    if (device < 0) snprintf(where, sizeof where, "cpu");
    else snprintf(where, sizeof where, "cuda:%d", device);
    cJSON_AddStringToObject(span, "device", where);
    if (n > 0) { /* the line that asked: the innermost lecture frame */
        lx_add_text(span, "path", frames[n - 1].path);
        cJSON_AddNumberToObject(span, "line", frames[n - 1].line);
        lx_add_text(span, "function", frames[n - 1].function);
    }
    if (sink) sink(span);
    else lx_trace_modelled_append(span);
}
