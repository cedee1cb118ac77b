/*
 * note_args.c: what a note's numbers are. note() is a macro (lectern.h)
 * that hands lx_note() its own arguments as source text beside their
 * values, so a note's step can say, for every conversion of its format,
 * which expression of the lecture filled it, the value it had (cJSON writes
 * it to 2^-52 relative) and the characters it printed:
 *
 *     note("Speed-up %.2f on %d ranks.", quoted(speedup), world);
 *     -> "args": [{"expr": "speedup", "quoted": true, "value": 1.0312, "printed": "1.03"},
 *                 {"expr": "world", "value": 4, "printed": "4"}]
 *
 * A test then reads a lecture's figure by its name, not by a regex over
 * the sentence that prints it, and a reader (or the viewer) can ask where
 * a number came from. Only what the format's conversions consume is read
 * from the va_list, in order, as printf itself would; a format this file
 * does not know (positional "%1$d", "%n", a stray '%') gives no "args"
 * rather than a guess.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

#define ARGS_MAX 32
#define STRING_VALUE_MAX 1024 /* longer strings (a printed tensor) keep only their expression */

/* Splits "fmt, a, f(b, c), \"x,y\"" at its top-level commas: brackets and
 * string or character literals hide theirs. Returns the number of pieces
 * (at most max), each trimmed, written into out (the caller frees them). */
static int split_args(const char *text, char **out, int max) {
    int n = 0, depth = 0;
    const char *start = text;
    for (const char *p = text;; p++) {
        char c = *p;
        if (c == '"' || c == '\'') {
            for (p++; *p && *p != c; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) break;
            continue;
        }
        if (c == '(' || c == '[' || c == '{') depth++;
        else if (c == ')' || c == ']' || c == '}') depth--;
        if (c == '\0' || (c == ',' && depth == 0)) {
            if (n == max) return -1;
            const char *a = start, *b = p;
            while (a < b && (*a == ' ' || *a == '\t' || *a == '\n'))
                a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\n'))
                b--;
            out[n] = malloc((size_t)(b - a) + 1);
            if (!out[n]) abort();
            memcpy(out[n], a, (size_t)(b - a));
            out[n][b - a] = '\0';
            n++;
            start = p + 1;
        }
        if (c == '\0') break;
    }
    return n;
}

/* quoted(x) -> x, and says so. */
static const char *unquote(char *expr, int *quoted) {
    size_t len = strlen(expr);
    *quoted = 0;
    if (strncmp(expr, "quoted(", 7) == 0 && len > 8 && expr[len - 1] == ')') {
        expr[len - 1] = '\0';
        *quoted = 1;
        char *inner = expr + 7;
        while (*inner == ' ')
            inner++;
        return inner;
    }
    return expr;
}

/* One conversion: its spec with every '*' replaced by the int it took. */
typedef struct {
    char spec[64];
    char length[3];
    char conv;
} conversion;

static cJSON *arg_object(const char *expr, int quoted) {
    cJSON *o = cJSON_CreateObject();
    lx_add_text(o, "expr", expr);
    if (quoted) cJSON_AddBoolToObject(o, "quoted", 1);
    return o;
}

static void add_printed(cJSON *o, const char *fmt, ...) LECTERN_PRINTF(2, 3);
static void add_printed(cJSON *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = lx_vfmt(fmt, ap);
    va_end(ap);
    lx_add_text(o, "printed", s);
    free(s);
}

/* Reads one value of conversion c from ap into o (value and printed). */
static void take_value(cJSON *o, const conversion *c, va_list *ap) {
    const char *len = c->length;
    switch (c->conv) {
    case 'd':
    case 'i': {
        intmax_t v;
        if (!strcmp(len, "ll")) v = va_arg(*ap, long long);
        else if (!strcmp(len, "l")) v = va_arg(*ap, long);
        else if (!strcmp(len, "j")) v = va_arg(*ap, intmax_t);
        else if (!strcmp(len, "z") || !strcmp(len, "t")) v = va_arg(*ap, ptrdiff_t);
        else v = va_arg(*ap, int);
        if (!strcmp(len, "hh")) v = (signed char)v;
        else if (!strcmp(len, "h")) v = (short)v;
        cJSON_AddNumberToObject(o, "value", (double)v);
        char spec[72];
        snprintf(spec, sizeof spec, "%.*sj%c", (int)(strlen(c->spec) - strlen(len) - 1), c->spec, c->conv);
        add_printed(o, spec, v);
        return;
    }
    case 'u':
    case 'o':
    case 'x':
    case 'X': {
        uintmax_t v;
        if (!strcmp(len, "ll")) v = va_arg(*ap, unsigned long long);
        else if (!strcmp(len, "l")) v = va_arg(*ap, unsigned long);
        else if (!strcmp(len, "j")) v = va_arg(*ap, uintmax_t);
        else if (!strcmp(len, "z") || !strcmp(len, "t")) v = va_arg(*ap, size_t);
        else v = va_arg(*ap, unsigned);
        if (!strcmp(len, "hh")) v = (unsigned char)v;
        else if (!strcmp(len, "h")) v = (unsigned short)v;
        cJSON_AddNumberToObject(o, "value", (double)v);
        char spec[72];
        snprintf(spec, sizeof spec, "%.*sj%c", (int)(strlen(c->spec) - strlen(len) - 1), c->spec, c->conv);
        add_printed(o, spec, v);
        return;
    }
    case 'c': {
        int v = va_arg(*ap, int);
        char s[2] = {(char)v, '\0'};
        lx_add_text(o, "value", s);
        return;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
    case 'a':
    case 'A': {
        double v;
        char spec[72];
        if (!strcmp(len, "L")) v = (double)va_arg(*ap, long double);
        else v = va_arg(*ap, double);
        snprintf(spec, sizeof spec, "%.*s%c", (int)(strlen(c->spec) - strlen(len) - 1), c->spec, c->conv);
        /* JSON has no NaN or infinity: cJSON would write null; the printed text says which. */
        cJSON_AddNumberToObject(o, "value", v);
        add_printed(o, spec, v);
        return;
    }
    case 's': {
        const char *v = va_arg(*ap, const char *);
        if (!v) cJSON_AddNullToObject(o, "value");
        else if (strlen(v) <= STRING_VALUE_MAX) lx_add_text(o, "value", v);
        return;
    }
    case 'p': (void)va_arg(*ap, void *); return;
    }
}

/* Parses the conversion at fmt (just past '%'); returns the character after
 * it, or NULL for one this file does not read. */
static const char *parse_conversion(const char *fmt, conversion *c, int *stars) {
    const char *p = fmt;
    *stars = 0;
    while (*p && strchr("-+ #0'", *p))
        p++;
    if (*p == '*') {
        (*stars)++;
        p++;
    } else {
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == '$') return NULL;
    if (*p == '.') {
        p++;
        if (*p == '*') {
            (*stars)++;
            p++;
        } else {
            while (*p >= '0' && *p <= '9')
                p++;
        }
    }
    const char *lstart = p;
    if ((p[0] == 'h' && p[1] == 'h') || (p[0] == 'l' && p[1] == 'l')) p += 2;
    else if (*p && strchr("hljztL", *p)) p++;
    if (!*p || !strchr("diuoxXcfFeEgGaAsp", *p)) return NULL;
    size_t n = (size_t)(p - fmt) + 2; /* '%' + what we read + the conversion */
    if (n >= sizeof c->spec || (size_t)(p - lstart) >= sizeof c->length) return NULL;
    c->spec[0] = '%';
    memcpy(c->spec + 1, fmt, n - 1);
    c->spec[n] = '\0';
    memcpy(c->length, lstart, (size_t)(p - lstart));
    c->length[p - lstart] = '\0';
    c->conv = *p;
    return p + 1;
}

/* Replaces the '*'s of spec by the widths they took. */
static void fill_stars(conversion *c, const int *widths, int stars) {
    if (!stars) return;
    char out[64];
    size_t o = 0;
    int k = 0;
    for (const char *p = c->spec; *p && o + 12 < sizeof out; p++) {
        if (*p == '*' && k < stars) o += (size_t)snprintf(out + o, sizeof out - o, "%d", widths[k++]);
        else out[o++] = *p;
    }
    out[o] = '\0';
    memcpy(c->spec, out, o + 1);
}

cJSON *lx_note_args(const char *args_text, const char *fmt, va_list ap) {
    if (!args_text || !fmt) return NULL;
    char *exprs[ARGS_MAX + 1];
    int n = split_args(args_text, exprs, ARGS_MAX + 1);
    if (n <= 0) return NULL;
    cJSON *out = cJSON_CreateArray();
    va_list a;
    va_copy(a, ap);
    int next = 1, ok = 1; /* exprs[0] is the format itself */
    for (const char *p = fmt; ok && *p;) {
        if (*p++ != '%') continue;
        if (*p == '%') {
            p++;
            continue;
        }
        conversion c;
        int stars, widths[2] = {0, 0};
        const char *after = parse_conversion(p, &c, &stars);
        if (!after || next + stars >= n) {
            ok = 0;
            break;
        }
        for (int k = 0; k < stars; k++) {
            widths[k] = va_arg(a, int);
            next++;
        }
        fill_stars(&c, widths, stars);
        int quoted;
        const char *expr = unquote(exprs[next++], &quoted);
        cJSON *o = arg_object(expr, quoted);
        take_value(o, &c, &a);
        cJSON_AddItemToArray(out, o);
        p = after;
    }
    va_end(a);
    if (next != n) ok = 0; /* arguments the format never used: not a format we read */
    for (int i = 0; i < n; i++)
        free(exprs[i]);
    if (!ok || cJSON_GetArraySize(out) == 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}
