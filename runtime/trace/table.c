/*
 * table.c: table(), a table of values recorded as data.
 *
 * A lecture builds a table column by column, fills it row by row and shows
 * it: one step whose rendering ("type": "table") holds the caption, the
 * columns (name, unit, printf format, kind) and the rows twice, as values
 * (numbers as JSON numbers, text as strings) and as the text each cell
 * shows (the value through its column's format). The viewer sorts by the
 * values and shows the text; a test reads the values.
 *
 * A column's format has one printf conversion and decides what table_row()
 * reads for it, as printf would: %d / %i an int, %ld / %lld a long / long
 * long (int64_t is one of them), %f %e %g a double, %s a string.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

typedef enum { CELL_INT, CELL_LONG, CELL_LLONG, CELL_DOUBLE, CELL_TEXT } cell_kind;

typedef struct table_col {
    char *name, *unit, *format;
    cell_kind kind;
} table_col;

struct table {
    char *caption;
    cJSON *caption_args; /* the caption's arguments by name, or NULL */
    table_col cols[TABLE_MAX_COLUMNS];
    int n_cols;
    cJSON *rows;    /* [[value, ...], ...] */
    cJSON *display; /* [["text", ...], ...] */
    int bad;        /* an error was recorded: show nothing */
};

/* The kind of value a one-conversion printf format reads, or -1 when the
 * format does not have exactly one conversion this table understands. */
static int format_kind(const char *f) {
    int kind = -1, conversions = 0;
    for (const char *p = f; *p; p++) {
        if (*p != '%') continue;
        if (p[1] == '%') {
            p++;
            continue;
        }
        p++;
        p += strspn(p, "-+ #0'");
        p += strspn(p, "0123456789");
        if (*p == '.') {
            p++;
            p += strspn(p, "0123456789");
        }
        int longs = 0;
        while (*p == 'l') {
            longs++;
            p++;
        }
        if (!*p) return -1;
        conversions++;
        switch (*p) {
        case 'd':
        case 'i': kind = longs == 0 ? CELL_INT : longs == 1 ? CELL_LONG : longs == 2 ? CELL_LLONG : -1; break;
        case 'f':
        case 'e':
        case 'g':
        case 'F':
        case 'E':
        case 'G': kind = longs == 0 ? CELL_DOUBLE : -1; break;
        case 's': kind = longs == 0 ? CELL_TEXT : -1; break;
        default: return -1;
        }
    }
    return conversions == 1 ? kind : -1;
}

/* table_new(...) is lx_table_new(#__VA_ARGS__, __VA_ARGS__) (lectern.h):
 * the caption's numbers are kept by name, as a note's are (note_args.c). */
table_t *lx_table_new(const char *args_text, const char *caption_fmt, ...) {
    table_t *t = calloc(1, sizeof *t);
    if (!t) lx_fatal("table_new: out of memory");
    if (caption_fmt) {
        va_list ap;
        va_start(ap, caption_fmt);
        t->caption_args = lx_note_args(args_text, caption_fmt, ap);
        t->caption = lx_vfmt(caption_fmt, ap);
        va_end(ap);
    }
    t->rows = cJSON_CreateArray();
    t->display = cJSON_CreateArray();
    return t;
}

void table_column(table_t *t, const char *name, const char *unit, const char *format) {
    if (!t) {
        lx_error("table_column: the table is NULL");
        return;
    }
    if (t->bad) return;
    if (!name || !format) {
        lx_error("table_column: %s is NULL", !name ? "the name" : "the format");
        t->bad = 1;
        return;
    }
    if (cJSON_GetArraySize(t->rows) > 0) {
        lx_error("table_column: column '%s' added after the first row", name);
        t->bad = 1;
        return;
    }
    if (t->n_cols == TABLE_MAX_COLUMNS) {
        lx_error("table_column: more than %d columns", TABLE_MAX_COLUMNS);
        t->bad = 1;
        return;
    }
    int kind = format_kind(format);
    if (kind < 0) {
        lx_error("table_column: format '%s' of column '%s' is not one conversion of "
                 "%%d, %%ld, %%lld, %%f, %%e, %%g or %%s",
                 format, name);
        t->bad = 1;
        return;
    }
    table_col *c = &t->cols[t->n_cols++];
    c->name = strdup(name);
    c->unit = unit && *unit ? strdup(unit) : NULL;
    c->format = strdup(format);
    c->kind = (cell_kind)kind;
}

/* Formats with a format checked by format_kind(); the compiler cannot see it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static char *cell_text(const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    char *s = lx_vfmt(format, ap);
    va_end(ap);
    return s;
}

void table_row(table_t *t, ...) {
    if (!t) {
        lx_error("table_row: the table is NULL");
        return;
    }
    if (t->bad) return;
    if (t->n_cols == 0) {
        lx_error("table_row: the table has no columns (table_column first)");
        t->bad = 1;
        return;
    }
    cJSON *row = cJSON_CreateArray(), *shown = cJSON_CreateArray();
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->n_cols; i++) {
        const table_col *c = &t->cols[i];
        char *text = NULL;
        cJSON *value = NULL;
        switch (c->kind) {
        case CELL_INT: {
            int v = va_arg(ap, int);
            value = cJSON_CreateNumber(v);
            text = cell_text(c->format, v);
            break;
        }
        case CELL_LONG: {
            long v = va_arg(ap, long);
            value = cJSON_CreateNumber((double)v);
            text = cell_text(c->format, v);
            break;
        }
        case CELL_LLONG: {
            long long v = va_arg(ap, long long);
            value = cJSON_CreateNumber((double)v);
            text = cell_text(c->format, v);
            break;
        }
        case CELL_DOUBLE: {
            double v = va_arg(ap, double);
            value = isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); /* JSON has no NaN */
            text = cell_text(c->format, v);
            break;
        }
        case CELL_TEXT: {
            const char *v = va_arg(ap, const char *);
            char *repaired = lx_utf8_repair(v ? v : "");
            value = cJSON_CreateString(repaired);
            free(repaired);
            text = cell_text(c->format, v ? v : "");
            break;
        }
        }
        cJSON_AddItemToArray(row, value);
        char *repaired = lx_utf8_repair(text);
        cJSON_AddItemToArray(shown, cJSON_CreateString(repaired));
        free(repaired);
        free(text);
    }
    va_end(ap);
    cJSON_AddItemToArray(t->rows, row);
    cJSON_AddItemToArray(t->display, shown);
}
#pragma GCC diagnostic pop

static const char *const KIND_NAMES[] = {"number", "number", "number", "number", "text"};

static void table_free(table_t *t) {
    for (int i = 0; i < t->n_cols; i++) {
        free(t->cols[i].name);
        free(t->cols[i].unit);
        free(t->cols[i].format);
    }
    cJSON_Delete(t->rows);
    cJSON_Delete(t->display);
    free(t->caption);
    cJSON_Delete(t->caption_args);
    free(t);
}

void table_show(table_t *t) {
    if (!t) {
        lx_error("table_show: the table is NULL");
        return;
    }
    if (!t->bad && t->n_cols == 0) lx_error("table_show: the table has no columns");
    if (t->bad || t->n_cols == 0) {
        table_free(t);
        return;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "table");
    if (t->caption) lx_add_text(r, "caption", t->caption);
    if (t->caption_args) {
        cJSON_AddItemToObject(r, "caption_args", t->caption_args);
        t->caption_args = NULL;
    }
    cJSON *cols = cJSON_AddArrayToObject(r, "columns");
    for (int i = 0; i < t->n_cols; i++) {
        const table_col *c = &t->cols[i];
        cJSON *col = cJSON_CreateObject();
        lx_add_text(col, "name", c->name);
        if (c->unit) lx_add_text(col, "unit", c->unit);
        lx_add_text(col, "format", c->format);
        cJSON_AddStringToObject(col, "kind", KIND_NAMES[c->kind]);
        cJSON_AddItemToArray(cols, col);
    }
    cJSON_AddItemToObject(r, "rows", t->rows);
    cJSON_AddItemToObject(r, "display", t->display);
    t->rows = t->display = NULL;
    lx_emit(r);
    table_free(t);
}
