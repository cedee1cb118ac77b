/*
 * markdown.c: a note's markdown to HTML, once, when it is recorded.
 *
 * md4c does the work (CommonMark with GitHub's tables, strikethrough and
 * autolinks). Raw HTML in a note is shown as text, not passed through: a
 * note about `<T>` or `a<b` must not turn into a broken tag in the viewer.
 */
#include <md4c-html.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct { char *buf; size_t len, cap; } html_buf;

static void put(const MD_CHAR *text, MD_SIZE size, void *userdata) {
    html_buf *b = userdata;
    if (b->len + size + 1 > b->cap) {
        b->cap = (b->len + size + 1) * 2;
        b->buf = realloc(b->buf, b->cap);
        if (!b->buf) abort();
    }
    memcpy(b->buf + b->len, text, size);
    b->len += size;
    b->buf[b->len] = '\0';
}

char *lx_markdown_to_html(const char *md) {
    html_buf b = {0};
    put("", 0, &b);   /* an empty note still gives "" */
    unsigned parser = MD_DIALECT_GITHUB | MD_FLAG_NOHTML;
    if (md_html(md, (MD_SIZE)strlen(md), put, &b, parser, 0) != 0) {
        /* md4c only fails on out-of-memory; keep the text, escaped by the viewer. */
        b.len = 0;
        b.buf[0] = '\0';
    }
    return b.buf;
}
