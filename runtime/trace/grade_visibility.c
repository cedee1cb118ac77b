/*
 * grade_visibility.c: which checks a student sees, and when.
 *
 * An autograder shows each test to the student at once ("visible"), never
 * ("hidden"), once the due date has passed ("after_due_date") or once the
 * grades are published ("after_published"): Gradescope's four values. A
 * homework sets them by check name prefix, in the lecture before its
 * spawns:
 *
 *     grade_exercise("exercise 2:", 30, 5 * world);
 *     grade_visibility("exercise 2: at 8 ranks", "hidden");
 *
 * The longest declared prefix a check's name starts with decides; a check
 * no prefix matches is visible. Each prefix must start with the prefix of
 * an exercise declared before it (grade_exercise), so a visibility always
 * belongs to checks that are graded.
 *
 * What a check that is not visible shows while the run happens: its name
 * and whether it passed, nothing of what it saw. lx_check_withhold (called
 * by check.c as the check step is made, in the lecture or in a rank) moves
 * the rendering's message and numbers into its "withheld" member, which the
 * trace's listeners (grade.c: results.json's test output) hear and the
 * written trace never holds (trace.c drops it), and the console's FAIL line
 * says only that a check with that name, at that line, failed. The names
 * are the program's own text, which the student has; what was measured is
 * what stays with the instructor.
 *
 * Ranks are processes of their own: the table goes to them with each spawn
 * as text (lx_grade_visibility_text / _load, as the lecture's options do).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

#define MAX_RULES 32

typedef struct rule {
    char *prefix;
    const char *visibility; /* one of VISIBILITIES */
} rule;

static const char *const VISIBILITIES[] = {"visible", "hidden", "after_due_date", "after_published"};
static rule rules[MAX_RULES];
static int n_rules;
static char **exercises; /* grade_exercise's prefixes, as it declared them */
static int n_exercises;

void lx_grade_visibility_exercise(const char *prefix) {
    char **grown = realloc(exercises, (size_t)(n_exercises + 1) * sizeof *grown);
    if (!grown) lx_fatal("out of memory");
    exercises = grown;
    exercises[n_exercises++] = strdup(prefix);
}

/* 1 when an exercise declared so far has a prefix that `prefix` starts with. */
static int declared(const char *prefix) {
    for (int i = 0; i < n_exercises; i++)
        if (strncmp(prefix, exercises[i], strlen(exercises[i])) == 0) return 1;
    return 0;
}

static const char *known_visibility(const char *v) {
    for (size_t i = 0; v && i < sizeof VISIBILITIES / sizeof *VISIBILITIES; i++)
        if (strcmp(v, VISIBILITIES[i]) == 0) return VISIBILITIES[i];
    return NULL;
}

static void add_rule(const char *prefix, const char *visibility) {
    rules[n_rules++] = (rule){.prefix = strdup(prefix), .visibility = visibility};
}

void grade_visibility(const char *prefix, const char *visibility) {
    if (!prefix || !*prefix) {
        lx_error("grade_visibility: the prefix is NULL or empty");
        return;
    }
    const char *v = known_visibility(visibility);
    if (!v) {
        char *given = visibility ? lx_fmt("\"%s\"", visibility) : strdup("NULL");
        lx_error("grade_visibility(\"%s\", %s): the visibility must be \"visible\", \"hidden\", "
                 "\"after_due_date\" or \"after_published\" (Gradescope's values)",
                 prefix, given);
        free(given);
        return;
    }
    if (lx_in_rank()) {
        lx_error("grade_visibility(\"%s\") inside a spawned rank: set visibilities in the lecture, before the spawn",
                 prefix);
        return;
    }
    if (!declared(prefix)) {
        lx_error("grade_visibility(\"%s\"): it does not start with the prefix of an exercise declared so "
                 "far; declare the exercise with grade_exercise() first, and give its prefix or a longer one (a "
                 "check's name)",
                 prefix);
        return;
    }
    for (int i = 0; i < n_rules; i++)
        if (strcmp(rules[i].prefix, prefix) == 0) {
            lx_error("grade_visibility(\"%s\"): that prefix has a visibility already (\"%s\")", prefix,
                     rules[i].visibility);
            return;
        }
    if (n_rules == MAX_RULES) {
        lx_error("grade_visibility(\"%s\"): more than %d prefixes", prefix, MAX_RULES);
        return;
    }
    add_rule(prefix, v);
}

const char *lx_grade_visibility_of(const char *name) {
    const char *v = "visible";
    size_t best = 0;
    for (int i = 0; name && i < n_rules; i++) {
        size_t len = strlen(rules[i].prefix);
        if (len > best && strncmp(name, rules[i].prefix, len) == 0) {
            best = len;
            v = rules[i].visibility;
        }
    }
    return v;
}

/* "visibility<TAB>prefix\n" lines. */
char *lx_grade_visibility_text(void) {
    lx_sb sb = {0};
    lx_sb_str(&sb, "");
    for (int i = 0; i < n_rules; i++)
        lx_sb_printf(&sb, "%s\t%s\n", rules[i].visibility, rules[i].prefix);
    return sb.s;
}

void lx_grade_visibility_load(const char *text) {
    for (int i = 0; i < n_rules; i++)
        free(rules[i].prefix);
    n_rules = 0;
    for (const char *line = text; line && *line && n_rules < MAX_RULES;) {
        const char *tab = strchr(line, '\t'), *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        if (tab && tab < end) {
            char v[32];
            snprintf(v, sizeof v, "%.*s", (int)(tab - line), line);
            char *prefix = lx_fmt("%.*s", (int)(end - tab - 1), tab + 1);
            if (known_visibility(v)) add_rule(prefix, known_visibility(v));
            free(prefix);
        }
        line = *end ? end + 1 : end;
    }
}

/* Keeps only the check's name, verdict and visibility in `r`; the rest,
 * with `summary` as its data, goes to r.withheld. Returns the line the
 * console and the trace show in place of `summary` (free it). */
char *lx_check_withhold(cJSON *r, int ok, const char *summary) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name"));
    if (!name) name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "what"));
    const char *v = lx_grade_visibility_of(name);
    if (strcmp(v, "visible") == 0) return NULL;
    cJSON *withheld = cJSON_Duplicate(r, 1);
    lx_json_set(withheld, "data", cJSON_CreateString(summary));
    char *shown_name = strdup(name ? name : "check");
    /* Everything but type, passed and name goes. */
    for (cJSON *k = r->child; k;) {
        cJSON *next = k->next;
        if (strcmp(k->string, "type") != 0 && strcmp(k->string, "passed") != 0 && strcmp(k->string, "name") != 0)
            cJSON_Delete(cJSON_DetachItemViaPointer(r, k));
        k = next;
    }
    lx_add_text(r, "what", shown_name);
    cJSON_AddStringToObject(r, "visibility", v);
    cJSON_AddItemToObject(r, "withheld", withheld);
    const char *which = strcmp(v, "hidden") == 0           ? "a hidden check"
                        : strcmp(v, "after_due_date") == 0 ? "a check shown after the due date"
                                                           : "a check shown once grades are published";
    char *line = lx_fmt("%s: %s (%s: what it saw is for the grader only)", ok ? "PASS" : "FAIL", shown_name, which);
    free(shown_name);
    return line;
}
