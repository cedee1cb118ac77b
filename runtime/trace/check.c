/*
 * check.c: check(), and the check steps check_close() (tensor/tensor_check.c)
 * makes too: the steps that say right or wrong.
 *
 * A check is a step like a note, with a "check" rendering: whether it
 * passed, what was checked, and for check_close() the numbers that decided
 * it (the largest absolute and relative differences and where they are).
 * A failed check never stops the lecture: it marks the run failed, so the
 * lecture exits 1 at the end, and the console's last line counts the checks.
 *
 * Counting happens where steps are appended to the trace (lx_check_tally,
 * a listener of trace.c): the lecture's own checks and those its ranks send
 * arrive there alike, so a check inside a spawned rank counts in the one
 * lecture-wide total. A rank itself counts nothing.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

static int passed_count, failed_count; /* the lecture process's totals */

void lx_check_tally(const cJSON *step) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (!type || strcmp(type, "check") != 0) continue;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "passed"))) {
            passed_count++;
        } else {
            failed_count++;
            lx_mark_failed();
        }
    }
}

void lx_check_listen(void) { lx_trace_listen(&(lx_trace_listener){.step = lx_check_tally}); }

void lx_check_counts(int *passed, int *failed) {
    *passed = passed_count;
    *failed = failed_count;
}

/* Emits the check step at the lecture's line; a failure is also said on
 * stderr with that line, so a student sees it without opening the viewer. */
int lx_check_emit(cJSON *r, int ok, const char *summary) {
    /* A check the student does not see yet (grade_visibility) says its
     * name and verdict only; what it saw goes to the grader. */
    char *shown = lx_check_withhold(r, ok, summary);
    if (shown) summary = shown;
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (!ok) {
        char where[600] = "";
        if (n > 0) snprintf(where, sizeof where, "%s:%d: ", frames[n - 1].path, frames[n - 1].line);
        if (lx_rank() >= 0) fprintf(stderr, "lectern: rank %d: check failed: %s%s\n", lx_rank(), where, summary);
        else fprintf(stderr, "lectern: check failed: %s%s\n", where, summary);
    }
    lx_add_text(r, "data", summary);
    lx_emit_frames(frames, n, r);
    free(shown);
    return ok;
}

cJSON *lx_check_rendering(int ok, const char *what) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "check");
    cJSON_AddBoolToObject(r, "passed", ok);
    lx_add_text(r, "what", what);
    return r;
}

void lecture_fail(const char *fmt, ...) {
    if (!fmt) lx_fatal("lecture_fail: fmt is NULL");
    va_list ap;
    va_start(ap, fmt);
    char *msg = lx_vfmt(fmt, ap);
    va_end(ap);
    lx_fatal("%s", msg);
}

static int check_text(int condition, const char *name, const char *fmt, va_list ap) {
    char *seen = lx_vfmt(fmt, ap);
    char *what = name && *seen ? lx_fmt("%s: %s", name, seen) : strdup(name ? name : seen);
    int ok = condition != 0;
    cJSON *r = lx_check_rendering(ok, what);
    if (name) lx_add_text(r, "name", name);
    char *summary = lx_fmt("%s: %s", ok ? "PASS" : "FAIL", what);
    lx_check_emit(r, ok, summary);
    free(summary);
    free(what);
    free(seen);
    return ok;
}

int check(int condition, const char *fmt, ...) {
    if (!fmt) {
        lx_error("check: the format is NULL");
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    int ok = check_text(condition, NULL, fmt, ap);
    va_end(ap);
    return ok;
}

int check_named(int condition, const char *name, const char *fmt, ...) {
    if (!name || !*name || !fmt) {
        lx_error("check_named: the %s is NULL%s", !fmt ? "format" : "name", !fmt ? "" : " or empty");
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    int ok = check_text(condition, name, fmt, ap);
    va_end(ap);
    return ok;
}

/* A failed check without numbers: shapes that differ, bad
 * tolerances. It is still a check step (and counts as failed): the student's
 * code produced something that cannot be right. */
int lx_check_refused(const char *what, const char *why) {
    cJSON *r = lx_check_rendering(0, what);
    lx_add_text(r, "reason", why);
    char *summary = lx_fmt("FAIL: %s: %s", what, why);
    lx_check_emit(r, 0, summary);
    free(summary);
    return 0;
}
