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

#include "trace/trace.h"

static void put(const MD_CHAR *text, MD_SIZE size, void *userdata) { lx_sb_add(userdata, text, size); }

char *lx_markdown_to_html(const char *md) {
    lx_sb b = {0};
    lx_sb_add(&b, "", 0); /* an empty note still gives "" */
    unsigned parser = MD_DIALECT_GITHUB | MD_FLAG_NOHTML;
    if (md_html(md, (MD_SIZE)strlen(md), put, &b, parser, 0) != 0) {
        /* md4c only fails on out-of-memory; keep the text, escaped by the viewer. */
        b.len = 0;
        b.s[0] = '\0';
    }
    return b.s;
}
