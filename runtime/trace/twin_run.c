/*
 * twin_run.c: the twin at run time (lectern.h, twin_record and
 * twin_last_spawn; docs/twin.md). A lecture that teaches with a simulated
 * figure needs it while it runs: to predict() it, chart it, say it.
 *
 *   twin_record(1)        the ranks of the following spawns record what they
 *                         do (twin_record.c), as --twin-record makes them
 *   twin_last_spawn(...)  the last spawn's events to a temporary file,
 *                         SimGrid's replay (tools/twin/) run on it, its
 *                         output read into a twin_result and added to the
 *                         trace's spawn as its "twin" (the entry
 *                         tools/twin/attach.py writes for `make twin`)
 *
 * The replay is a program of its own (C++, SimGrid): found beside the
 * lecture's build (build/lectures/NAME -> build/tools/twin/twin_replay) or
 * at $LECTERN_TWIN_REPLAY. A build without SimGrid has none; then, or with
 * LECTERN_TWIN=0, nothing is simulated and the result says why: the lecture
 * notes it and goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lectern.h"
#include "trace/trace.h"

extern char **environ;

/* A replay at 512 ranks has 512 timelines: the trace keeps the first
 * TIMELINES_KEPT, which a viewer can draw, and says so (as attach.py). */
#define TIMELINES_KEPT 16

void twin_record(int on) {
    if (lx_in_rank()) {
        lx_error("twin_record: call it in the lecture, before the spawn it should record, not in a rank");
        return;
    }
    lx_twin_request(on);
}

/* $LECTERN_TWIN_REPLAY, or tools/twin/twin_replay in the build folder the
 * binary lives under: build/lectures/NAME and build/tests/fixtures/NAME
 * both find build/tools/twin/twin_replay, the nearest folder up that has
 * one. NULL when no folder up to the root has it. */
static char *replay_path(void) {
    const char *env = getenv("LECTERN_TWIN_REPLAY");
    if (env && *env) return lx_fmt("%s", env);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    for (char *slash; (slash = strrchr(exe, '/')) != NULL;) {
        *slash = '\0'; /* the binary's folder, then each one up */
        char *path = lx_fmt("%s/tools/twin/twin_replay", exe);
        if (access(path, X_OK) == 0) return path;
        free(path);
    }
    return NULL;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    lx_sb sb = {0};
    lx_sb_str(&sb, "");
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        lx_sb_add(&sb, buf, got);
    fclose(f);
    return sb.s;
}

/* A temporary file's path (made, empty), or NULL. */
static char *temp_file(const char *what) {
    const char *dir = getenv("TMPDIR");
    char *path = lx_fmt("%s/lectern-twin-%s-XXXXXX", dir && *dir ? dir : "/tmp", what);
    int fd = mkstemp(path);
    if (fd < 0) {
        free(path);
        return NULL;
    }
    close(fd);
    return path;
}

/* Runs argv with stdout to /dev/null and stderr into err_path; its exit
 * status, or -1 when it could not start or died of a signal. */
static int run_replay(char *const argv[], const char *err_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path, O_WRONLY | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double number(const cJSON *o, const char *key) {
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static const char *string(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    return s ? s : "";
}

/* The replay's spawn into *out: figures, collectives, the busiest rank. */
static void read_result(const cJSON *s, twin_result *out) {
    out->ranks = (int)number(s, "world_size");
    out->simulated_s = number(s, "simulated_s");
    out->measured_s = number(s, "measured_s");
    if (cJSON_GetObjectItemCaseSensitive(s, "rule")) {
        snprintf(out->rule, sizeof out->rule, "%s", string(s, "rule"));
        out->recorded_ranks = (int)number(s, "recorded_ranks");
    } else {
        out->recorded_ranks = out->ranks;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(s, "collectives")) {
        if (out->n_collectives == TWIN_MAX_COLLECTIVES) break; /* the struct's size; the trace keeps them all */
        twin_collective *t = &out->collectives[out->n_collectives++];
        snprintf(t->op, sizeof t->op, "%s", string(c, "op"));
        t->bytes = number(c, "bytes");
        t->ranks = (int)number(c, "ranks");
        t->calls = (int)number(c, "calls");
        t->time_s = number(c, "time_s");
        t->algbw_GBps = number(c, "algbw_GBps");
        t->busbw_GBps = number(c, "busbw_GBps");
    }
    const cJSON *rank, *span;
    cJSON_ArrayForEach(rank, cJSON_GetObjectItemCaseSensitive(s, "ranks")) {
        double busy = 0;
        cJSON_ArrayForEach(span, rank) {
            const char *op = string(span, "op");
            if (!strcmp(op, "compute") || !strcmp(op, "modelled")) busy += number(span, "end") - number(span, "start");
        }
        if (busy > out->busy_max_s) out->busy_max_s = busy;
    }
}

/* The trace's spawns[id].twin[platform]: what attach.py writes for make twin. */
static void attach(int id, const cJSON *replay, const cJSON *s, const char *name) {
    cJSON *spawn = cJSON_GetArrayItem(lx_trace_spawns(), id);
    if (!spawn) return;
    cJSON *twins = cJSON_GetObjectItemCaseSensitive(spawn, "twin");
    if (!twins) twins = cJSON_AddObjectToObject(spawn, "twin");
    cJSON_DeleteItemFromObjectCaseSensitive(twins, name);
    cJSON *t = cJSON_AddObjectToObject(twins, name);
    char *label = lx_fmt("simulated on %s", name);
    cJSON_AddStringToObject(t, "label", label);
    free(label);
    cJSON_AddNumberToObject(t, "simulated_s", number(s, "simulated_s"));
    cJSON_AddNumberToObject(t, "measured_s", number(s, "measured_s"));
    cJSON_AddNumberToObject(t, "world_size", number(s, "world_size"));
    cJSON_AddStringToObject(t, "compute", string(replay, "compute"));
    cJSON_AddStringToObject(t, "modelled", string(replay, "modelled"));
    cJSON_AddItemToObject(t, "collectives", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(s, "collectives"), 1));
    cJSON *ranks = cJSON_AddArrayToObject(t, "ranks");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "ranks"), *rank, *span;
    int kept = 0;
    cJSON_ArrayForEach(rank, all) {
        if (kept++ == TIMELINES_KEPT) break;
        cJSON *r = cJSON_CreateArray();
        cJSON_ArrayForEach(span, rank) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "op", string(span, "op"));
            cJSON_AddNumberToObject(o, "start", (double)llround(number(span, "start") * 1e9) / 1e9);
            cJSON_AddNumberToObject(o, "end", (double)llround(number(span, "end") * 1e9) / 1e9);
            cJSON_AddItemToArray(r, o);
        }
        cJSON_AddItemToArray(ranks, r);
    }
    int n = cJSON_GetArraySize(all);
    if (n > TIMELINES_KEPT) {
        char *of = lx_fmt("the first %d of %d ranks", TIMELINES_KEPT, n);
        cJSON_AddStringToObject(t, "timelines_of", of);
        free(of);
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "rule")) {
        cJSON_AddStringToObject(t, "rule", string(s, "rule"));
        cJSON_AddNumberToObject(t, "recorded_ranks", number(s, "recorded_ranks"));
    }
}

/* Bad input: an error step at the lecture's line, and the same words in why. */
static int refuse(twin_result *out, const char *fmt, ...) LECTERN_PRINTF(2, 3);
static int refuse(twin_result *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->why, sizeof out->why, fmt, ap);
    va_end(ap);
    lx_error("twin_last_spawn: %s", out->why);
    return 0;
}

/* "the replay's last stderr line" without its "twin_replay: " prefix and newline. */
static char *replay_message(const char *err_path) {
    char *text = read_file(err_path);
    if (!text) return lx_fmt("(no message)");
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    char *line = strrchr(text, '\n');
    line = line ? line + 1 : text;
    if (!strncmp(line, "twin_replay: ", 13)) line += 13;
    char *msg = lx_fmt("%s", *line ? line : "(no message)");
    free(text);
    return msg;
}

int twin_last_spawn(const char *platform, int ranks, twin_result *out) {
    if (!out) {
        lx_error("twin_last_spawn: out is NULL");
        return 0;
    }
    memset(out, 0, sizeof *out);
    if (lx_in_rank()) return refuse(out, "call it in the lecture after spawn(), not in a rank");
    if (!platform) return refuse(out, "platform is NULL");
    if (!*platform || strchr(platform, '/') || strchr(platform, '@'))
        return refuse(out,
                      "platform '%s' is not a name of tools/twin/platforms/ (e.g. \"h100-node\"; ranks go in the "
                      "second argument)",
                      platform ? platform : "(null)");
    if (ranks < 0) return refuse(out, "ranks is %d: 0 for the spawn's own size, else the ranks to simulate", ranks);
    if (ranks > 0) snprintf(out->platform, sizeof out->platform, "%s@%d", platform, ranks);
    else snprintf(out->platform, sizeof out->platform, "%s", platform);
    snprintf(out->label, sizeof out->label, "simulated on %s", out->platform);

    char *xml = lx_fmt("%s/tools/twin/platforms/%s.xml", lx_repo_root(), platform);
    int have_platform = access(xml, R_OK) == 0;
    if (!have_platform) {
        free(xml);
        return refuse(out, "no platform '%s' (tools/twin/platforms/%s.xml does not exist)", platform, platform);
    }
    int id = cJSON_GetArraySize(lx_trace_spawns()) - 1;
    if (id < 0) {
        free(xml);
        return refuse(out, "no spawn yet: call it after the spawn() to simulate");
    }
    cJSON *events = lx_twin_spawn_events(id);
    if (!events) {
        free(xml);
        return refuse(out, "the last spawn (spawn %d) was not recorded: call twin_record(1) before it", id);
    }

    const char *off = getenv("LECTERN_TWIN");
    char *replay = replay_path();
    if (off && !strcmp(off, "0")) {
        snprintf(out->why, sizeof out->why, "LECTERN_TWIN=0 turns the simulation off");
    } else if (!replay || access(replay, X_OK) != 0) {
        snprintf(out->why, sizeof out->why,
                 "SimGrid's replay is not built (%s): install libsimgrid-dev (make setup "
                 "does) and build again",
                 replay ? replay : "build/tools/twin/twin_replay");
    }
    if (out->why[0]) {
        free(replay), free(xml);
        return 0;
    }

    /* The one spawn's events, in the file format of NAME.events.json. */
    char *in = temp_file("events"), *res = temp_file("out"), *err = temp_file("err");
    int ok = in && res && err;
    if (ok) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "version", 1);
        cJSON_AddStringToObject(root, "lecture", lx_lecture_name());
        cJSON *list = cJSON_AddArrayToObject(root, "spawns");
        cJSON_AddItemReferenceToArray(list, events);
        char *json = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        const char *parts[] = {json ? json : ""};
        ok = json && lx_write_atomic(in, parts, 1) == 0;
        cJSON_free(json);
    }
    char id_text[16], ranks_text[16];
    snprintf(id_text, sizeof id_text, "%d", id);
    snprintf(ranks_text, sizeof ranks_text, "%d", ranks);
    char *argv[] = {replay, in,        xml,     "--name",  out->platform, "--out",
                    res,    "--spawn", id_text, "--ranks", ranks_text,    NULL};
    if (ranks == 0) argv[9] = NULL;
    int rc = ok ? run_replay(argv, err) : -1;
    char *text = rc == 0 ? read_file(res) : NULL;
    cJSON *replayed = text ? cJSON_Parse(text) : NULL;
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(replayed, "spawns"), 0);
    if (!ok) {
        refuse(out, "cannot write the replay's temporary files: %s", strerror(errno));
    } else if (rc != 0) {
        char *msg = err ? replay_message(err) : lx_fmt("(no message)");
        refuse(out, "the replay on %s failed: %s", out->platform, msg);
        free(msg);
    } else if (!s || !cJSON_GetObjectItemCaseSensitive(s, "simulated_s")) {
        refuse(out, "the replay on %s wrote no figures for spawn %d%s", out->platform, id,
               s && cJSON_GetObjectItemCaseSensitive(s, "skipped") ? " (a rank sent no events)" : "");
    } else {
        read_result(s, out);
        attach(id, replayed, s, out->platform);
        out->ran = 1;
    }
    cJSON_Delete(replayed);
    free(text);
    for (char **p = (char *[]){in, res, err}, **end = p + 3; p < end; p++) {
        if (*p) unlink(*p);
        free(*p);
    }
    free(replay), free(xml);
    return out->ran;
}
