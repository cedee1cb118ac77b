/*
 * strbuf.c: a string that grows as text is added to it.
 *
 * The one string builder of the runtime: markdown's HTML, a command's
 * output, a tensor's printed form all come in pieces of unknown size.
 * b.s is always NUL-terminated once anything (even "") was added; the
 * owner frees it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

void lx_sb_add(lx_sb *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            fputs("lectern: out of memory\n", stderr);
            abort();
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void lx_sb_str(lx_sb *b, const char *s) { lx_sb_add(b, s, strlen(s)); }

void lx_sb_printf(lx_sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = lx_vfmt(fmt, ap);
    va_end(ap);
    lx_sb_str(b, s);
    free(s);
}
