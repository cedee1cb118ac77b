/*
 * leaderboard.c: grade_leaderboard(), a measured number for a course's
 * leaderboard.
 *
 * Gradescope shows a leaderboard column per name in results.json's
 * top-level "leaderboard" list, [{"name", "value", "order"}], ordered "asc"
 * (smaller ranks first: a bubble, a time) or "desc" (larger first: a
 * bandwidth). A homework enters the numbers it already measures.
 *
 * Where it is called: in the lecture, or in a rank, where only rank 0's
 * call makes an entry, so the ranks can run the same code without giving
 * one entry per rank. The entry is a step of its own, a note that says the
 * number ("Leaderboard: the 1F1B bubble = 0.31, smaller ranks first"),
 * carrying it as data under "leaderboard": a rank's step reaches the
 * lecture's trace like any other, and grade.c hands every step it hears to
 * lx_leaderboard_step, which keeps the entries. The same name entered
 * again replaces the earlier value: one column, one number.
 *
 * Bad input is an error step at the call's line: a NULL or empty name, a
 * value that is NaN or infinite, an order other than "asc" or "desc".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

#define MAX_ENTRIES 64 /* names; a lecture that enters more keeps its first 64 (lectern.h) */

typedef struct entry {
    char *name;
    double value;
    char order[5];
} entry;

static entry entries[MAX_ENTRIES]; /* the lecture process's, from the steps it heard */
static int n_entries;

void grade_leaderboard(const char *name, double value, const char *order) {
    if (!name || !*name) {
        lx_error("grade_leaderboard: the name is NULL or empty");
        return;
    }
    if (!isfinite(value)) {
        lx_error("grade_leaderboard(\"%s\"): the value is %g; a leaderboard ranks finite numbers", name, value);
        return;
    }
    if (!order || (strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)) {
        char *given = order ? lx_fmt("\"%s\"", order) : strdup("NULL");
        lx_error("grade_leaderboard(\"%s\"): the order is %s; it must be \"asc\" (smaller ranks first) or "
                 "\"desc\" (larger ranks first)",
                 name, given);
        free(given);
        return;
    }
    if (lx_in_rank() && lx_rank() != 0) return; /* rank 0's call is the entry */
    int asc = strcmp(order, "asc") == 0;
    char *md = lx_fmt("Leaderboard: %s = %.6g, %s ranks first", name, value, asc ? "smaller" : "larger");
    cJSON *r = lx_rendering_markdown(md);
    cJSON *e = cJSON_CreateObject();
    lx_add_text(e, "name", name);
    cJSON_AddNumberToObject(e, "value", value);
    cJSON_AddStringToObject(e, "order", order);
    cJSON_AddItemToObject(r, "leaderboard", e);
    lx_emit(r);
    free(md);
}

void lx_leaderboard_step(const cJSON *step) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "leaderboard");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const char *order = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "order"));
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(e, "value");
        if (!name || !order || !cJSON_IsNumber(value)) continue;
        int i = 0;
        while (i < n_entries && strcmp(entries[i].name, name) != 0)
            i++;
        if (i == MAX_ENTRIES) continue;
        if (i == n_entries) entries[n_entries++].name = strdup(name);
        entries[i].value = value->valuedouble;
        snprintf(entries[i].order, sizeof entries[i].order, "%s", order);
    }
}

cJSON *lx_leaderboard_json(void) {
    if (n_entries == 0) return NULL;
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < n_entries; i++) {
        cJSON *e = cJSON_CreateObject();
        lx_add_text(e, "name", entries[i].name);
        cJSON_AddNumberToObject(e, "value", entries[i].value);
        cJSON_AddStringToObject(e, "order", entries[i].order);
        cJSON_AddItemToArray(list, e);
    }
    return list;
}
