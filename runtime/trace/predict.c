/*
 * predict.c: predict(question, measured, unit), a question whose answer the
 * lecture has just measured (lectern.h, section 1).
 *
 * One step, stamped at the call's line like a note, whose rendering
 * ("type": "predict") holds the question (markdown, and md4c's HTML), the
 * measured value and its unit. The viewer shows the question and an answer
 * field, and the value only when the reader asks for it.
 *
 * The value is written in the fewest digits that read back as the same
 * double. A question that is NULL or empty, a NULL unit or a value that is
 * not finite is an error step at the lecture's line, and no predict step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

/* The shortest %g text that reads back as v (v finite). */
static void shortest(char buf[40], double v) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, 40, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void predict(const char *question, double measured, const char *unit) {
    if (!question) {
        lx_error("predict: the question is NULL");
        return;
    }
    if (!*question) {
        lx_error("predict: the question is empty");
        return;
    }
    if (!unit) {
        lx_error("predict: the unit is NULL (\"\" for a number without a unit)");
        return;
    }
    if (!isfinite(measured)) {
        lx_error("predict: the measured value is %s, not a number a reader can guess", isnan(measured) ? "NaN"
                                                                                       : measured > 0  ? "infinite"
                                                                                                       : "-infinite");
        return;
    }
    cJSON *r = lx_rendering_markdown(question);
    /* The markdown rendering's fields, renamed: the question, then the answer. */
    cJSON_ReplaceItemInObject(r, "type", cJSON_CreateString("predict"));
    cJSON *md = cJSON_DetachItemFromObject(r, "data");
    cJSON *html = cJSON_DetachItemFromObject(r, "html");
    cJSON_AddItemToObject(r, "question", md);
    cJSON_AddItemToObject(r, "html", html);
    char buf[40];
    shortest(buf, measured);
    cJSON_AddItemToObject(r, "value", cJSON_CreateRaw(buf));
    lx_add_text(r, "unit", unit);
    lx_emit(r);
}
