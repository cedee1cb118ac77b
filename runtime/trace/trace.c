/*
 * trace.c: renderings -> steps -> one JSON document on disk.
 *
 * The trace is kept in memory as a cJSON tree and written at the end (and
 * on a crash). Writing is atomic: the text goes to a temporary file in the
 * same folder, which is then renamed over the old trace, so a reader (or a
 * later run that fails half-way) never sees half a file. A run that failed
 * writes <name>.failed.json instead and leaves the last good trace alone.
 *
 * Format: docs/trace-format.md, schema: docs/trace.schema.json.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cJSON *trace; /* {version, lecture, meta, files, spawns, modelled, steps} */
static cJSON *steps, *spawns, *modelled, *meta;
static int n_steps;                      /* cJSON_GetArraySize walks the list: counted here */
static int n_modelled, modelled_dropped; /* spans kept, and left out beyond LX_MODELLED_PER_SPAWN */
static int *modelled_kept, n_kept;       /* spans kept per spawn: [0] the lecture's own, [1 + id] spawn id's */
static char *lecture_name;
static char *out_dir;
static int failed;
static struct timespec t0;
static lx_step_sink sink;
static lx_trace_listener listeners[4]; /* check.c's and grade.c's (lx_trace_listen) */
static int n_listeners;

/* ---- state ---- */

double lx_elapsed(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
}

void lx_trace_init(const char *name, const char *dir) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    free(lecture_name);
    free(out_dir);
    lecture_name = strdup(name);
    out_dir = strdup(dir);
    if (trace) cJSON_Delete(trace);
    trace = cJSON_CreateObject();
    cJSON_AddNumberToObject(trace, "version", 1);
    cJSON_AddStringToObject(trace, "lecture", name);
    meta = cJSON_AddObjectToObject(trace, "meta");
    cJSON_AddObjectToObject(trace, "files");
    spawns = cJSON_AddArrayToObject(trace, "spawns");
    modelled = cJSON_AddArrayToObject(trace, "modelled");
    steps = cJSON_AddArrayToObject(trace, "steps");
    n_steps = 0;
    n_modelled = modelled_dropped = 0;
    free(modelled_kept);
    modelled_kept = NULL;
    n_kept = 0;
    failed = 0;
}

const char *lx_lecture_name(void) { return lecture_name ? lecture_name : "lecture"; }
const char *lx_out_dir(void) { return out_dir; }

const char *lecture_out_dir(void) {
    if (lx_in_rank() || !out_dir) {
        lx_error("lecture_out_dir() is the lecture's own: a rank is given the folder through spawn's args");
        return NULL;
    }
    return out_dir;
}

void lx_trace_rank_init(const char *name, double clock_zero) {
    free(lecture_name);
    lecture_name = strdup(name);
    t0.tv_sec = (time_t)clock_zero;
    t0.tv_nsec = (long)((clock_zero - (double)t0.tv_sec) * 1e9);
}

void lx_set_step_sink(lx_step_sink s) { sink = s; }

void lx_trace_listen(const lx_trace_listener *l) {
    for (int i = 0; i < n_listeners; i++)
        if (!memcmp(&listeners[i], l, sizeof *l)) return; /* once is enough */
    if (n_listeners == (int)(sizeof listeners / sizeof *listeners)) {
        fputs("lectern: too many trace listeners\n", stderr);
        abort();
    }
    listeners[n_listeners++] = *l;
}

/* Tells every listener of a step that reached this process's trace. */
static void heard(const cJSON *step) {
    for (int i = 0; i < n_listeners; i++)
        if (listeners[i].step) listeners[i].step(step);
}

void lx_mark_failed(void) { failed = 1; }
int lx_failed(void) { return failed; }
int lx_trace_step_count(void) { return steps ? n_steps : 0; }

/* obj[key] = value, replacing what was there. */
void lx_json_set(cJSON *obj, const char *key, cJSON *value) {
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, value);
    else cJSON_AddItemToObject(obj, key, value);
}

void lx_trace_meta(const char *key, cJSON *value) {
    pthread_mutex_lock(&lock);
    if (!trace) lx_trace_init("lecture", ".");
    lx_json_set(meta, key, value);
    pthread_mutex_unlock(&lock);
}

cJSON *lx_trace_spawns(void) {
    if (!trace) lx_trace_init("lecture", ".");
    return spawns;
}

int lx_trace_append(cJSON *step) {
    pthread_mutex_lock(&lock);
    if (!trace) lx_trace_init("lecture", ".");
    heard(step);
    cJSON_AddItemToArray(steps, step);
    int index = n_steps++;
    pthread_mutex_unlock(&lock);
    return index;
}

void lx_trace_modelled_append(cJSON *span) {
    pthread_mutex_lock(&lock);
    if (!trace) lx_trace_init("lecture", ".");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(span, "spawn");
    int k = cJSON_IsNumber(id) && id->valueint >= 0 ? 1 + id->valueint : 0;
    if (k >= n_kept) { /* spawns come in order: grow to this one */
        int *more = realloc(modelled_kept, sizeof *more * (size_t)(k + 64));
        if (!more) abort();
        memset(more + n_kept, 0, sizeof *more * (size_t)(k + 64 - n_kept));
        modelled_kept = more;
        n_kept = k + 64;
    }
    if (modelled_kept[k] < LX_MODELLED_PER_SPAWN) {
        cJSON_AddItemToArray(modelled, span);
        modelled_kept[k]++;
        n_modelled++;
    } else {
        cJSON_Delete(span);
        modelled_dropped++;
    }
    pthread_mutex_unlock(&lock);
}

void lx_trace_tally(const cJSON *step) {
    pthread_mutex_lock(&lock);
    heard(step);
    pthread_mutex_unlock(&lock);
}

/* ---- renderings ---- */

static cJSON *rendering(const char *type) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", type);
    return r;
}

/* Adds `s` as a string, first made valid UTF-8 so the JSON stays valid. */
void lx_add_text(cJSON *obj, const char *key, const char *s) {
    char *ok = lx_utf8_repair(s);
    cJSON_AddStringToObject(obj, key, ok);
    free(ok);
}

cJSON *lx_rendering_text(const char *text) {
    cJSON *r = rendering("text");
    lx_add_text(r, "data", text);
    return r;
}

cJSON *lx_rendering_error(const char *message) {
    cJSON *r = rendering("error");
    lx_add_text(r, "data", message);
    return r;
}


cJSON *lx_rendering_markdown(const char *md) {
    cJSON *r = rendering("markdown");
    char *ok = lx_utf8_repair(md);
    cJSON_AddStringToObject(r, "data", ok);
    char *html = lx_markdown_to_html(ok);
    cJSON_AddStringToObject(r, "html", html);
    free(html);
    free(ok);
    return r;
}

/* ---- steps ---- */

static cJSON *make_step(const lx_frame *frames, int n, cJSON *rendering) {
    cJSON *step = cJSON_CreateObject();
    cJSON_AddItemToObject(step, "stack", lx_stack_to_json(frames, n));
    if (lx_in_rank()) {
        cJSON_AddNumberToObject(step, "rank", lx_rank());
        cJSON_AddNumberToObject(step, "world_size", lx_world_size());
    } else {
        cJSON_AddNullToObject(step, "rank");
        cJSON_AddNullToObject(step, "world_size");
    }
    cJSON_AddNullToObject(step, "spawn"); /* set by the parent for a rank's step */
    /* Microseconds are plenty and keep the file small. */
    cJSON_AddNumberToObject(step, "time", (double)(long long)(lx_elapsed() * 1e6) / 1e6);
    cJSON *list = cJSON_AddArrayToObject(step, "renderings");
    cJSON_AddItemToArray(list, rendering);
    return step;
}

void lx_emit_frames(const lx_frame *frames, int n, cJSON *rendering) {
    cJSON *step = make_step(frames, n, rendering);
    if (sink) sink(step);
    else lx_trace_append(step);
}

void lx_emit(cJSON *rendering) {
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    lx_emit_frames(frames, n, rendering);
}

/* ---- errors ---- */

/* "lectures/x.c:12: message": where the lecture was when it went wrong. */
static char *located(const lx_frame *frames, int n, const char *msg) {
    if (n > 0) return lx_fmt("%s:%d: %s", frames[n - 1].path, frames[n - 1].line, msg);
    return strdup(msg);
}

static int errors_expected;

void lx_rank_errors_expected(int expected) { errors_expected = expected; }

/* The error step at `frames` (n of them), or where the lecture is when
 * frames is NULL. */
static void error_step_at(const lx_frame *at, int n_at, const char *fmt, va_list ap) {
    char *msg = lx_vfmt(fmt, ap);
    lx_frame frames[LX_MAX_FRAMES];
    int n = at ? n_at : lx_stack_capture(frames, LX_MAX_FRAMES);
    if (at) memcpy(frames, at, (size_t)n * sizeof *frames);
    char *full = located(frames, n, msg);
    if (lx_in_rank())
        fprintf(stderr, "lectern: rank %d: %s: %s\n", lx_rank(),
                errors_expected ? "error, as the lecture expects (spawn_expect_failure)" : "error", full);
    else fprintf(stderr, "lectern: error: %s\n", full);
    lx_emit_frames(frames, n, lx_rendering_error(full));
    failed = 1;
    free(full);
    free(msg);
}

void lx_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_step_at(NULL, 0, fmt, ap);
    va_end(ap);
}

static void __attribute__((noreturn)) fatal_end(void);

/* Where the error that stops this process was put (lx_fatal_frames). */
static lx_frame fatal_at[LX_MAX_FRAMES];
static int n_fatal_at = -1;

void lx_fatal(const char *fmt, ...) {
    n_fatal_at = lx_stack_capture(fatal_at, LX_MAX_FRAMES);
    va_list ap;
    va_start(ap, fmt);
    error_step_at(fatal_at, n_fatal_at, fmt, ap);
    va_end(ap);
    fatal_end();
}

void lx_fatal_at(const lx_frame *frames, int n, const char *fmt, ...) {
    n_fatal_at = n < 0 ? 0 : n > LX_MAX_FRAMES ? LX_MAX_FRAMES : n;
    memcpy(fatal_at, frames, (size_t)n_fatal_at * sizeof *frames);
    va_list ap;
    va_start(ap, fmt);
    error_step_at(fatal_at, n_fatal_at, fmt, ap);
    va_end(ap);
    fatal_end();
}

int lx_fatal_frames(lx_frame *frames, int max) {
    int n = n_fatal_at < max ? n_fatal_at : max;
    if (n > 0) memcpy(frames, fatal_at, (size_t)n * sizeof *frames);
    return n < 0 ? 0 : n;
}

static void fatal_end(void) {
    /* A rank's error step has gone to the parent; its exit status tells the
     * parent the rank failed. The parent writes what it has. */
    if (!lx_in_rank()) {
        lx_trace_write();
        /* Then the listeners: grade.c says the verdict line a good run ends
         * with (the trace has the counts, the console says them too). */
        for (int i = 0; i < n_listeners; i++)
            if (listeners[i].fatal) listeners[i].fatal();
    }
    exit(1);
}

/* ---- writing ---- */

/* Adds the text of repo file `path` to `files` once. */
static void embed_file(const char *path, void *ctx) {
    cJSON *files = ctx;
    if (!path || cJSON_GetObjectItemCaseSensitive(files, path)) return;
    char *full = lx_fmt("%s/%s", lx_repo_root(), path);
    FILE *f = fopen(full, "rb");
    free(full);
    char *text = NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc(size > 0 ? (size_t)size + 1 : 1);
        if (!text) abort();
        size_t got = size > 0 ? fread(text, 1, (size_t)size, f) : 0;
        text[got] = '\0';
        fclose(f);
    }
    lx_add_text(files, path, text ? text : "");
    free(text);
}

static void collect_paths(cJSON *stack, cJSON *files) {
    cJSON *frame;
    cJSON_ArrayForEach(frame, stack)
            embed_file(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(frame, "path")), files);
}

/* The full text of every file a stack names, and of every lecture source the
 * executable was built from, so the viewer needs nothing else. */
static void embed_files(void) {
    cJSON *files = cJSON_CreateObject();
    cJSON *item;
    cJSON_ArrayForEach(item, steps) collect_paths(cJSON_GetObjectItemCaseSensitive(item, "stack"), files);
    cJSON_ArrayForEach(item, spawns) collect_paths(cJSON_GetObjectItemCaseSensitive(item, "stack"), files);
    cJSON_ArrayForEach(item, modelled) {
        const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(item, "path"));
        if (path) embed_file(path, files);
    }
    lx_lecture_sources(embed_file, files); /* the lecture's own library code, too */
    lx_json_set(trace, "files", files);
}

int lx_write_atomic(const char *path, const char *const *parts, int nparts) {
    char *tmp = lx_fmt("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "lectern: cannot write %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int ok = 1;
    for (int i = 0; i < nparts && ok; i++) {
        const char *p = parts[i];
        size_t left = strlen(p);
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR) continue;
                ok = 0;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (ok && fsync(fd) != 0) ok = 0;
    if (close(fd) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "lectern: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

char *lx_trace_path(const char *ext) {
    return lx_fmt("%s/%s%s.%s", out_dir ? out_dir : ".", lx_lecture_name(), failed ? ".failed" : "", ext);
}

/* A check's "withheld" member (grade_visibility.c) is for the listeners,
 * who heard it as the step came: what a check the student does not see
 * measured never reaches the trace the student reads. A step can gain one
 * after it was appended (a folded pass takes its worst numbers), so every
 * write looks again. Under the trace's lock. */
static void drop_withheld(void) {
    const cJSON *step;
    cJSON_ArrayForEach(step, steps) {
        cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
            cJSON_DeleteItemFromObjectCaseSensitive(r, "withheld");
        }
    }
}

int lx_trace_write(void) {
    pthread_mutex_lock(&lock);
    if (!trace) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    lx_json_set(meta, "status", cJSON_CreateString(failed ? "failed" : "ok"));
    for (int i = 0; i < n_listeners; i++) /* grade.c: meta.checks */
        if (listeners[i].meta) listeners[i].meta(meta);
    /* Whether any figure of this run may rest on modelled compute. */
    lx_json_set(meta, "modelled_compute", cJSON_CreateBool(n_modelled + modelled_dropped > 0));
    if (modelled_dropped) lx_json_set(meta, "modelled_dropped", cJSON_CreateNumber(modelled_dropped));
    lx_json_set(meta, "duration_s", cJSON_CreateNumber((double)(long long)(lx_elapsed() * 1e3) / 1e3));
    embed_files();
    drop_withheld();
    char *json = cJSON_PrintUnformatted(trace);
    pthread_mutex_unlock(&lock);
    if (!json) {
        fputs("lectern: out of memory printing the trace\n", stderr);
        return -1;
    }

    /* The .js twin: a <script> can load it from file://, where fetch() cannot. */
    char *json_path = lx_trace_path("json");
    char *js_path = lx_trace_path("js");
    char *js_head = lx_fmt("(window.lecternTraces = window.lecternTraces || {})[\"%s%s\"] = ", lx_lecture_name(),
                           failed ? ".failed" : "");
    const char *json_parts[] = {json, "\n"};
    const char *js_parts[] = {js_head, json, ";\n"};
    int rc = lx_write_atomic(json_path, json_parts, 2);
    if (rc == 0) rc = lx_write_atomic(js_path, js_parts, 3);
    if (rc == 0 && !failed) {
        /* A good run makes an older failed trace stale. */
        char *old_json = lx_fmt("%s/%s.failed.json", out_dir, lx_lecture_name());
        char *old_js = lx_fmt("%s/%s.failed.js", out_dir, lx_lecture_name());
        unlink(old_json);
        unlink(old_js);
        free(old_json);
        free(old_js);
    }
    free(js_head);
    free(json_path);
    free(js_path);
    cJSON_free(json);
    /* Every way the lecture ends writes the trace: the grade goes with it
     * (grade.c listens). */
    if (!lx_in_rank())
        for (int i = 0; i < n_listeners; i++)
            if (listeners[i].written) listeners[i].written();
    return rc;
}

void lx_trace_free(void) {
    pthread_mutex_lock(&lock);
    cJSON_Delete(trace);
    trace = steps = spawns = modelled = meta = NULL;
    n_steps = 0;
    free(modelled_kept);
    modelled_kept = NULL;
    n_kept = 0;
    free(lecture_name);
    free(out_dir);
    lecture_name = out_dir = NULL;
    lx_set_in_lecture(); /* a new trace starts in the lecture, not in a rank */
    pthread_mutex_unlock(&lock);
}
