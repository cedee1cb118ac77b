/*
 * variant.c: one homework, other numbers for each student.
 *
 * A homework declares the values it may vary, each with a range and the
 * value it uses when no variant is asked for:
 *
 *     int n = 4 * variant_int("ring chunk", 200, 400, 250);
 *
 * Run with `--variant SEED` (scripts/run_autograder derives SEED from the
 * submission's metadata), each value is picked in its range from a hash of
 * the seed and its name: the same seed gives the same values in every run
 * and in every rank (the ranks receive the seed with the lecture's other
 * options), and another seed other values. The checks compute what they
 * expect from those same values, so no answer key exists to copy from, and
 * a copied answer fails where it hard-codes a size.
 *
 * The lecture's own calls are recorded: meta.variant in the trace, and
 * --grade's results (extra_data.variant, and a line of the output), so a
 * grade says which numbers it was given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "trace/trace.h"

/* Every value the lecture picked, by name, in the order it asked. */
typedef struct picked {
    char *name;
    int lo, hi, value;
} picked;

static picked *list;
static int n_list;

char *lx_variant_parse(const char *text, uint64_t *seed) {
    /* Digits only: strtoull alone would take " 12", "+12" and "-1" (as a
     * huge number), and a seed that is not what was typed is no seed. */
    size_t len = text ? strlen(text) : 0;
    if (len == 0) return lx_fmt("--variant needs a seed: --variant SEED, a whole number from 0 to %u", LX_VARIANT_MAX);
    if (len > 10 || strspn(text, "0123456789") != len)
        return lx_fmt("--variant needs a seed, a whole number from 0 to %u (got '%s')", LX_VARIANT_MAX, text);
    unsigned long long v = strtoull(text, NULL, 10);
    if (v > LX_VARIANT_MAX)
        return lx_fmt("--variant needs a seed, a whole number from 0 to %u (got '%s')", LX_VARIANT_MAX, text);
    if (seed) *seed = v;
    return NULL;
}

/* The seed given with --variant (lecture and ranks alike), 0 when none. */
static int seed_given(uint64_t *seed) {
    const char *text = lx_option_given(LX_VARIANT);
    return text && lx_variant_parse(text, seed) == NULL;
}

static cJSON *record_json(uint64_t seed) {
    cJSON *v = cJSON_CreateObject(), *values = cJSON_CreateObject();
    cJSON_AddNumberToObject(v, "seed", (double)seed);
    for (int i = 0; i < n_list; i++)
        cJSON_AddNumberToObject(values, list[i].name, list[i].value);
    cJSON_AddItemToObject(v, "values", values);
    return v;
}

int variant_int(const char *name, int lo, int hi, int fallback) {
    if (!name || !*name) {
        lx_error("variant_int: the name is %s", name ? "empty" : "NULL");
        return fallback;
    }
    if (lo > hi) {
        lx_error("variant_int(\"%s\"): the range %d to %d is empty (lo above hi)", name, lo, hi);
        return fallback;
    }
    if (fallback < lo || fallback > hi) {
        lx_error("variant_int(\"%s\"): the default %d must lie in the range %d to %d", name, fallback, lo, hi);
        return fallback;
    }
    /* The name is hashed with the seed: values of different names are
     * unrelated, and a homework that adds a value does not move the others.
     * The modulo's bias is (hi - lo + 1) / 2^64: none worth the name. */
    uint64_t seed;
    int given = seed_given(&seed);
    int value =
            given ? (int)((int64_t)lo + (int64_t)(XXH64(name, strlen(name), seed) % ((uint64_t)((int64_t)hi - lo) + 1)))
                  : fallback;
    if (lx_rank() >= 0) return value; /* the lecture's own calls are the record */
    /* Kept without a seed too, so that a name's second range is an error
     * in every run, not only in the autograder's. */
    for (int i = 0; i < n_list; i++) {
        if (strcmp(list[i].name, name) != 0) continue;
        if (list[i].lo != lo || list[i].hi != hi)
            lx_error("variant_int(\"%s\"): asked before with the range %d to %d, now %d to %d: one name, one range",
                     name, list[i].lo, list[i].hi, lo, hi);
        return list[i].value;
    }
    picked *grown = realloc(list, (size_t)(n_list + 1) * sizeof *grown);
    if (!grown) lx_fatal("out of memory for variant_int");
    list = grown;
    list[n_list++] = (picked){strdup(name), lo, hi, value};
    if (given) lx_trace_meta("variant", record_json(seed));
    return value;
}

cJSON *lx_variant_record(void) {
    uint64_t seed;
    return seed_given(&seed) ? record_json(seed) : NULL;
}

void lx_variant_free(void) {
    for (int i = 0; i < n_list; i++)
        free(list[i].name);
    free(list);
    list = NULL;
    n_list = 0;
}

char *lx_variant_text(void) {
    uint64_t seed;
    if (!seed_given(&seed)) return NULL;
    lx_sb sb = {0};
    lx_sb_printf(&sb, "Variant %llu:", (unsigned long long)seed);
    for (int i = 0; i < n_list; i++)
        lx_sb_printf(&sb, "%s %s = %d", i ? "," : "", list[i].name, list[i].value);
    if (n_list == 0) lx_sb_str(&sb, " no values picked");
    return sb.s;
}
