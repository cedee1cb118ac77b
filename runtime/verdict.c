/*
 * verdict.c: check() and check_close(), the steps that say right or wrong.
 *
 * A check is a step like a note, with a "check" rendering: whether it
 * passed, what was checked, and for check_close() the numbers that decided
 * it (the largest absolute and relative differences and where they are).
 * A failed check never stops the lecture: it marks the run failed, so the
 * lecture exits 1 at the end, and the console's last line counts the checks.
 *
 * Counting happens where steps are appended to the trace (lx_check_tally,
 * called by trace.c): the lecture's own checks and those its ranks send
 * arrive there alike, so a check inside a spawned rank counts in the one
 * lecture-wide total. A rank itself counts nothing.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tensor_impl.h"

static int passed_count, failed_count;   /* the lecture process's totals */

void lx_check_tally(const cJSON *step) {
    lx_grade_step(step);
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

void lx_check_counts(int *passed, int *failed) {
    *passed = passed_count;
    *failed = failed_count;
}

/* Emits the check step at the lecture's line; a failure is also said on
 * stderr with that line, so a student sees it without opening the viewer. */
static int emit_check(cJSON *r, int ok, const char *summary) {
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (!ok) {
        char where[600] = "";
        if (n > 0) snprintf(where, sizeof where, "%s:%d: ", frames[n - 1].path, frames[n - 1].line);
        if (lx_rank() >= 0)
            fprintf(stderr, "lectern: rank %d: check failed: %s%s\n", lx_rank(), where, summary);
        else
            fprintf(stderr, "lectern: check failed: %s%s\n", where, summary);
    }
    lx_add_text(r, "data", summary);
    lx_emit_frames(frames, n, r);
    return ok;
}

static cJSON *check_rendering(int ok, const char *what) {
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

int check(int condition, const char *fmt, ...) {
    if (!fmt) {
        lx_error("check: the format is NULL");
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    char *what = lx_vfmt(fmt, ap);
    va_end(ap);
    int ok = condition != 0;
    cJSON *r = check_rendering(ok, what);
    char *summary = lx_fmt("%s: %s", ok ? "PASS" : "FAIL", what);
    emit_check(r, ok, summary);
    free(summary);
    free(what);
    return ok;
}

/* "[3, 7]" for element i of a 2-D tensor, "[i]" for 1-D. */
static cJSON *index_json(const tensor *t, int64_t i) {
    cJSON *a = cJSON_CreateArray();
    if (t->ndim == 2 && t->shape[1] > 0) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(i / t->shape[1])));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(i % t->shape[1])));
    } else {
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)i));
    }
    return a;
}

static void index_text(const tensor *t, int64_t i, char buf[64]) {
    if (t->ndim == 2 && t->shape[1] > 0)
        snprintf(buf, 64, "[%" PRId64 ", %" PRId64 "]", i / t->shape[1], i % t->shape[1]);
    else
        snprintf(buf, 64, "[%" PRId64 "]", i);
}

static void shape_text(const tensor *t, char buf[64]) {
    if (t->ndim == 2)
        snprintf(buf, 64, "%" PRId64 "x%" PRId64, t->shape[0], t->shape[1]);
    else
        snprintf(buf, 64, "%" PRId64, t->shape[0]);
}

/* A failed check without numbers: shapes that differ, bad
 * tolerances. It is still a check step (and counts as failed): the student's
 * code produced something that cannot be right. */
static int check_refused(const char *what, const char *why) {
    cJSON *r = check_rendering(0, what);
    lx_add_text(r, "reason", why);
    char *summary = lx_fmt("FAIL: %s: %s", what, why);
    emit_check(r, 0, summary);
    free(summary);
    return 0;
}

/*
 * Element i passes when |actual - expected| <= atol + rtol * |expected|
 * (numpy's isclose, torch's allclose). Computed on the host in double,
 * wherever the tensors live. Two infinities of the same sign are equal; a
 * NaN on either side never is. The numbers reported are over the finite
 * pairs: the largest absolute difference, the largest relative one
 * (|a - e| / |e|, over elements where e != 0), each with its index, and how
 * many elements are outside the tolerance.
 */
int check_close(const tensor *actual, const tensor *expected, double rtol, double atol,
                const char *what) {
    const char *name = what && *what ? what : "check_close";
    /* A NULL is a mistake in the lecture's code, not a wrong answer: an
     * error step like any NULL given to the runtime. */
    if (!actual || !expected) {
        lx_error("check_close: %s is NULL", !actual ? "actual" : "expected");
        return 0;
    }
    lx_tensor_read(actual, "check_close");
    lx_tensor_read(expected, "check_close");
    if (!(rtol >= 0) || !(atol >= 0) || isinf(rtol) || isinf(atol)) {
        char *why = lx_fmt("the tolerances must be finite and >= 0 (rtol %g, atol %g)", rtol, atol);
        int rc = check_refused(name, why);
        free(why);
        return rc;
    }
    int same = actual->ndim == expected->ndim && actual->numel == expected->numel;
    for (int d = 0; same && d < actual->ndim; d++) same = actual->shape[d] == expected->shape[d];
    if (!same) {
        char sa[64], se[64];
        shape_text(actual, sa);
        shape_text(expected, se);
        char *why = lx_fmt("shapes differ: actual %s, expected %s", sa, se);
        int rc = check_refused(name, why);
        free(why);
        return rc;
    }

    int64_t n = actual->numel;
    float *a = lx_host_buffer(n), *e = lx_host_buffer(n);
    tensor_to_host(actual, a);
    tensor_to_host(expected, e);
    double max_abs = 0, max_rel = 0, actual_at_max = 0, expected_at_max = 0;
    int64_t abs_at = -1, rel_at = -1, bad = 0, first_bad = -1, nonfinite = 0;
    /* Which elements are wrong, as runs of flat indices: "0-3, 8-11" says
     * at a glance whether a whole chunk (a rank's share) is off or one
     * element. The first few runs are kept, all are counted. */
    enum { KEPT_RUNS = 4 };
    int64_t run_lo[KEPT_RUNS], run_hi[KEPT_RUNS], runs = 0, last_bad = -2;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = e[i];
        int ok;
        if (!isfinite(x) || !isfinite(y)) {
            ok = !isnan(x) && !isnan(y) && x == y;   /* same infinity */
            if (!ok) nonfinite++;
        } else {
            double d = fabs(x - y);
            ok = d <= atol + rtol * fabs(y);
            if (d > max_abs || abs_at < 0) {
                max_abs = d;
                abs_at = i;
                actual_at_max = x;
                expected_at_max = y;
            }
            if (y != 0) {
                double rel = d / fabs(y);
                if (rel > max_rel || rel_at < 0) { max_rel = rel; rel_at = i; }
            }
        }
        if (!ok) {
            bad++;
            if (first_bad < 0) first_bad = i;
            if (i == last_bad + 1 && runs > 0) {
                if (runs <= KEPT_RUNS) run_hi[runs - 1] = i;
            } else {
                if (runs < KEPT_RUNS) run_lo[runs] = run_hi[runs] = i;
                runs++;
            }
            last_bad = i;
        }
    }
    free(a);
    free(e);

    int ok = bad == 0;
    cJSON *r = check_rendering(ok, name);
    cJSON_AddNumberToObject(r, "rtol", rtol);
    cJSON_AddNumberToObject(r, "atol", atol);
    cJSON_AddNumberToObject(r, "numel", (double)n);
    cJSON_AddNumberToObject(r, "bad", (double)bad);
    if (nonfinite) cJSON_AddNumberToObject(r, "nonfinite", (double)nonfinite);
    if (abs_at >= 0) {
        cJSON_AddNumberToObject(r, "max_abs", max_abs);
        cJSON_AddItemToObject(r, "max_abs_at", index_json(actual, abs_at));
    }
    if (rel_at >= 0) {
        cJSON_AddNumberToObject(r, "max_rel", max_rel);
        cJSON_AddItemToObject(r, "max_rel_at", index_json(actual, rel_at));
    }
    if (first_bad >= 0) cJSON_AddItemToObject(r, "first_bad_at", index_json(actual, first_bad));
    if (!ok && abs_at >= 0) {
        cJSON_AddNumberToObject(r, "actual_at_max", actual_at_max);
        cJSON_AddNumberToObject(r, "expected_at_max", expected_at_max);
    }
    if (runs > 0) {
        cJSON *list = cJSON_AddArrayToObject(r, "bad_ranges");
        for (int64_t k = 0; k < runs && k < KEPT_RUNS; k++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)run_lo[k]));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)run_hi[k]));
            cJSON_AddItemToArray(list, pair);
        }
        cJSON_AddNumberToObject(r, "bad_runs", (double)runs);
    }

    lx_sb sb = {0};
    lx_sb_printf(&sb, "%s: %s:", ok ? "PASS" : "FAIL", name);
    char at[64];
    if (abs_at >= 0) {
        index_text(actual, abs_at, at);
        lx_sb_printf(&sb, " max abs diff %.3g at %s", max_abs, at);
        if (!ok) lx_sb_printf(&sb, " (actual %.7g, expected %.7g)", actual_at_max, expected_at_max);
    }
    if (rel_at >= 0) {
        index_text(actual, rel_at, at);
        lx_sb_printf(&sb, ", max rel diff %.3g at %s", max_rel, at);
    }
    if (n == 0) lx_sb_str(&sb, " no elements");
    lx_sb_printf(&sb, " (rtol %g, atol %g)", rtol, atol);
    if (!ok) {
        index_text(actual, first_bad, at);
        lx_sb_printf(&sb, "; %" PRId64 " of %" PRId64 " elements outside, first at %s", bad, n, at);
        if (nonfinite) lx_sb_printf(&sb, ", %" PRId64 " NaN or infinite", nonfinite);
        lx_sb_str(&sb, "; wrong elements (flat indices):");
        for (int64_t k = 0; k < runs && k < KEPT_RUNS; k++) {
            if (run_lo[k] == run_hi[k]) lx_sb_printf(&sb, "%s %" PRId64, k ? "," : "", run_lo[k]);
            else lx_sb_printf(&sb, "%s %" PRId64 "-%" PRId64, k ? "," : "", run_lo[k], run_hi[k]);
        }
        if (runs > KEPT_RUNS) lx_sb_printf(&sb, " and %" PRId64 " more range%s", runs - KEPT_RUNS,
                                           runs - KEPT_RUNS == 1 ? "" : "s");
    }
    emit_check(r, ok, sb.s);
    free(sb.s);
    return ok;
}
