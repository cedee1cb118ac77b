/*
 * strbuf.c: strings. A formatted new string (lx_fmt), one that grows as
 * text is added to it (lx_sb), and text made valid UTF-8 (lx_utf8_repair).
 *
 * The one string builder of the runtime: markdown's HTML, a command's
 * output, a tensor's printed form all come in pieces of unknown size.
 * b.s is always NUL-terminated once anything (even "") was added; the
 * owner frees it. This file calls nothing else of the runtime: every
 * other file may use it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

/* Measured, then allocated here rather than by vasprintf: glibc has no
   frame pointers, so the sanitizer pass's fast unwinder (scripts/test.sh)
   would stop inside vasprintf, and a leaked string would not name the code
   that made it. */
char *lx_vfmt(const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = n < 0 ? NULL : malloc((size_t)n + 1);
    if (s) vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    if (!s) {
        fputs(n < 0 ? "lectern: a note's format could not be applied\n" : "lectern: out of memory formatting a note\n",
              stderr);
        abort();
    }
    return s;
}

char *lx_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = lx_vfmt(fmt, ap);
    va_end(ap);
    return s;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        min = 0x80;
        c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        min = 0x800;
        c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        min = 0x10000;
        c &= 0x07;
    } else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return n;
}

char *lx_utf8_repair(const char *in) {
    size_t len = strlen(in);
    /* Worst case every byte becomes U+FFFD (3 bytes). */
    char *out = malloc(len * 3 + 1);
    if (!out) abort();
    const unsigned char *s = (const unsigned char *)in;
    char *o = out;
    while (*s) {
        int n = utf8_len(s);
        if (n == 0) {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            s++;
        } else {
            memcpy(o, s, n);
            o += n;
            s += n;
        }
    }
    *o = '\0';
    return out;
}

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
