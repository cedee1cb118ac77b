/*
 * note.c: the authoring API. Each call checks its input, makes one
 * rendering and hands it to lx_emit(), which stamps it with the lecture's
 * call stack and records it as a step.
 *
 * Bad input from a lecture (a missing image, a width out of range, a plot
 * that is not JSON) is not a crash: it becomes an error step at the lecture
 * line that made it, and the run ends with a non-zero status.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "trace/trace.h"

/* note(...) is lx_note(#__VA_ARGS__, __VA_ARGS__) (lectern.h): the step
 * keeps, beside the markdown, which expression printed each number
 * (note_args.c). */
void lx_note(const char *args_text, const char *fmt, ...) {
    if (!fmt) {
        lx_error("note: the format is NULL");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    cJSON *args = lx_note_args(args_text, fmt, ap);
    char *md = lx_vfmt(fmt, ap);
    va_end(ap);
    cJSON *r = lx_rendering_markdown(md);
    if (args) cJSON_AddItemToObject(r, "args", args);
    lx_emit(r);
    free(md);
}

void lx_note_verbatim(const char *args_text, const char *fmt, ...) {
    if (!fmt) {
        lx_error("note_verbatim: the format is NULL");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    cJSON *args = lx_note_args(args_text, fmt, ap);
    char *text = lx_vfmt(fmt, ap);
    va_end(ap);
    cJSON *r = lx_rendering_text(text);
    if (args) cJSON_AddItemToObject(r, "args", args);
    lx_emit(r);
    free(text);
}

static int is_url(const char *s) { return strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0; }

void image(const char *src, double width) {
    if (!src || !*src) {
        lx_error("image: %s", src ? "the source is empty" : "src is NULL");
        return;
    }
    if (!(width > 0.0 && width <= 1.0)) {
        lx_error("image: width %g for '%s' is not in (0, 1] (a fraction of the page)", width, src);
        return;
    }
    int remote = is_url(src);
    if (!remote) {
        /* Local images live in assets/ so a trace and its viewer stay self-contained. */
        struct stat st;
        char *full = lx_fmt("%s/%s", lx_repo_root(), src);
        int found = stat(full, &st) == 0 && S_ISREG(st.st_mode);
        free(full);
        if (strncmp(src, "assets/", 7) != 0 || strstr(src, "..")) {
            lx_error("image: '%s' is neither a file under assets/ nor an http(s) URL", src);
            return;
        }
        if (!found) {
            lx_error("image: no such file '%s'", src);
            return;
        }
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "image");
    lx_add_text(r, "src", src);
    cJSON_AddNumberToObject(r, "width", width);
    cJSON_AddBoolToObject(r, "remote", remote);
    lx_emit(r);
}

/* see(url) and see(url, title) both land here (lectern.h); an empty title
 * is no title. */
void lx_see(const char *url, const char *title) {
    if (!url || !*url) {
        lx_error("see: %s", url ? "the link is empty" : "url is NULL");
        return;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "link");
    lx_add_text(r, "url", url);
    if (title && *title) lx_add_text(r, "title", title);
    lx_emit(r);
}

/* Drops terminal escape sequences (colours, cursor moves): ESC [ ... final
 * byte, ESC ] ... BEL or ESC \, and lone two-byte ESC sequences. */
static void strip_ansi(char *s) {
    char *o = s;
    for (char *p = s; *p;) {
        if (*p != '\x1b') {
            *o++ = *p++;
            continue;
        }
        p++;
        if (*p == '[') {
            p++;
            while (*p && !(*p >= 0x40 && *p <= 0x7e))
                p++;
            if (*p) p++;
        } else if (*p == ']') {
            p++;
            while (*p && *p != '\a' && !(p[0] == '\x1b' && p[1] == '\\'))
                p++;
            if (*p == '\a') p++;
            else if (*p) p += 2;
        } else if (*p) {
            p++;
        }
    }
    *o = '\0';
}

int note_system(const char *command) {
    if (!command || !*command) {
        lx_error("note_system: %s", command ? "the command is empty" : "command is NULL");
        return -1;
    }
    char *wrapped = lx_fmt("( %s ) 2>&1", command);
    fflush(NULL);
    FILE *p = popen(wrapped, "r");
    free(wrapped);
    if (!p) {
        lx_error("note_system: cannot run '%s'", command);
        return -1;
    }
    lx_sb sb = {0};
    lx_sb_add(&sb, "", 0);
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, p)) > 0)
        lx_sb_add(&sb, chunk, got);
    char *out = sb.s;
    int raw = pclose(p);
    int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0);
    strip_ansi(out);

    cJSON *r = lx_rendering_text(out);
    lx_add_text(r, "command", command);
    cJSON_AddNumberToObject(r, "exit_status", status);
    lx_emit(r);
    if (status == 127) lx_error("note_system: command not found: %s", command);
    else if (status != 0) lx_error("note_system: '%s' exited with status %d", command, status);
    free(out);
    return status;
}

void plot(const char *vega_lite_json) {
    if (!vega_lite_json) {
        lx_error("plot: vega_lite_json is NULL");
        return;
    }
    const char *end = NULL;
    cJSON *spec = cJSON_ParseWithOpts(vega_lite_json, &end, 1);
    if (!spec || !cJSON_IsObject(spec)) {
        long at = end ? (long)(end - vega_lite_json) : 0;
        lx_error("plot: the specification is not a JSON object (error near byte %ld)", at);
        cJSON_Delete(spec);
        return;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "plot");
    cJSON_AddItemToObject(r, "spec", spec);
    lx_emit(r);
}
