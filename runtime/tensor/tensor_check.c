/*
 * tensor_check.c: check_close(), a check step (trace/check.c) over two
 * tensors, wherever they live: the numbers that decided it (the largest
 * absolute and relative differences and where they are) go in the step.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "trace/trace.h"

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
    else snprintf(buf, 64, "[%" PRId64 "]", i);
}

/* The factor r when actual is r times expected at every element (and r is
 * not 1), else 0: "4.00x the expected everywhere" names a sum where an
 * average was asked for (or a step taken twice) at once, where the largest
 * difference alone does not. Element i agrees with r when
 * |a_i - r e_i| <= atol + 1e-4 |r| max|e|: float32 sums of the same terms
 * in another order differ by about k 2^-24 of their size (1e-6 for a few
 * ranks), a hundred times less, while a different mistake (a chunk summed
 * twice, values of another element) is off by the values' own size. r is
 * read where |e| is largest, so it is exact to that rounding too; at least
 * two elements must carry weight (|e| above a tenth of the largest). */
static double constant_ratio(const float *a, const float *e, int64_t n, double atol) {
    double emax = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(e[i])) return 0;
        if (fabs(e[i]) > emax) {
            emax = fabs(e[i]);
            at = i;
        }
    }
    if (at < 0 || emax == 0) return 0;
    double r = (double)a[at] / e[at];
    if (!isfinite(r) || fabs(r - 1) < 1e-3) return 0;
    int64_t weighty = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - r * e[i]) > atol + 1e-4 * fabs(r) * emax) return 0;
        weighty += fabs(e[i]) > 0.1 * emax;
    }
    return weighty >= 2 ? r : 0;
}

/* ", the world size (4)?": a factor a distributed step gets wrong most
 * often, said where the check runs in a rank. */
static const char *ratio_hint(double r) {
    int w = lx_world_size();
    if (w < 2) return "";
    if (fabs(r - w) < 1e-3 * w) return ": the world size? (a sum where the average is asked for)";
    if (fabs(r - 1.0 / w) < 1e-3 / w) return ": 1 over the world size? (divided by it once too often)";
    return "";
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
int check_close(const tensor *actual, const tensor *expected, double rtol, double atol, const char *what) {
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
        int rc = lx_check_refused(name, why);
        free(why);
        return rc;
    }
    int same = actual->ndim == expected->ndim && actual->numel == expected->numel;
    for (int d = 0; same && d < actual->ndim; d++)
        same = actual->shape[d] == expected->shape[d];
    if (!same) {
        char *why = lx_fmt("shapes differ: actual %s, expected %s", lx_shape_of(actual).s, lx_shape_of(expected).s);
        int rc = lx_check_refused(name, why);
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
            ok = !isnan(x) && !isnan(y) && x == y; /* same infinity */
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
                if (rel > max_rel || rel_at < 0) {
                    max_rel = rel;
                    rel_at = i;
                }
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
    int ok = bad == 0;
    double ratio = ok ? 0 : constant_ratio(a, e, n, atol);
    free(a);
    free(e);

    cJSON *r = lx_check_rendering(ok, name);
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
    if (ratio != 0) cJSON_AddNumberToObject(r, "ratio", ratio);
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
        if (runs > KEPT_RUNS)
            lx_sb_printf(&sb, " and %" PRId64 " more range%s", runs - KEPT_RUNS, runs - KEPT_RUNS == 1 ? "" : "s");
        if (ratio != 0)
            lx_sb_printf(&sb, "; actual is %.2fx the expected at every element%s", ratio, ratio_hint(ratio));
    }
    lx_check_emit(r, ok, sb.s);
    free(sb.s);
    return ok;
}
