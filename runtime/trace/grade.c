/*
 * grade.c: --grade FILE, a homework's checks as a course autograder's score.
 *
 * Gradescope (and autograders that copy its format) read one JSON file,
 * results.json: a total score, an output for the whole run, and one entry
 * per test with its name, score, max_score and output. Here every check of
 * the run is one test: its score is its weight when it passed, 0 when it
 * failed; its output is the check's verdict with the numbers that decided it
 * and the lecture line that made it. Its name is the check's name
 * (check_named) or text, and the rank: a name that stays the same from run
 * to run, so that an autograder's statistics per test hold, while what was
 * measured this time goes in the output.
 *
 * Weights: every check weighs 1 point unless the homework groups checks
 * into exercises (grade_exercise(prefix, points, checks), lectern.h): the
 * checks whose name starts with the prefix share the points equally. An
 * exercise also says how many checks a complete run makes, so a run that
 * stops early (a crash, a deadlock, an exercise past its time limit, an
 * autograder's SIGTERM) still lists what it did not reach, worth 0, with
 * the reason: the errors of that exercise's own spawn (spawn_exercise,
 * which brackets it with lx_grade_begin / lx_grade_end), else the run's.
 * The exercises' counts are kept with or without --grade: the console's
 * last line counts the checks not reached too (lx_grade_not_reached).
 *
 * The file is written whenever the trace is (lx_grade_listen makes
 * lx_grade_write a listener of lx_trace_write): at the normal end, at a
 * fatal error, and from the crash handler, so every way a run ends but
 * SIGKILL leaves one. The console's last lines go in its output: with
 * --grade, stderr and stdout (and so the ranks' printf and errors, which
 * reach the lecture's streams) go through pipes that a thread copies to the
 * real streams, keeping the tail.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"

#define TAIL_BYTES 8192 /* the console tail kept for the output */
#define MAX_ERRORS 8    /* error messages kept for the reason, the run's and each exercise's */

typedef struct exercise {
    char *prefix;
    double points;
    int checks; /* how many checks a complete run makes */
    int seen;   /* how many this run made */
    char *errors[MAX_ERRORS];
    int n_errors;
} exercise;

typedef struct record {
    int rank; /* -1: the lecture's own check */
    int passed;
    char *what;
    char *output;
    int exercise;           /* index into exercises, -1 none */
    const char *visibility; /* grade_visibility's, for results.json */
} record;

static char *path; /* NULL: no --grade */
static exercise *exercises;
static int n_exercises;
static record *records;
static int n_records;
static char *errors[MAX_ERRORS];
static int n_errors;
static int current = -1; /* the exercise whose spawn runs (lx_grade_begin), -1 none */

/* ---- the console tail ---- */

static pthread_mutex_t tail_lock = PTHREAD_MUTEX_INITIALIZER;
/* Stream 0 is stdout, 1 stderr: each through a pipe of its own, copied to
 * the real stream (so each stays what it was for whoever reads it) and
 * into the one tail, in the order the copier reads them. */
static int pipe_read[2] = {-1, -1}, real_fd[2] = {-1, -1};
static char tail[TAIL_BYTES];
static size_t tail_len;

static void keep(const char *buf, size_t n) {
    if (n > TAIL_BYTES) { /* only the end of a large write stays */
        buf += n - TAIL_BYTES;
        n = TAIL_BYTES;
    }
    if (tail_len + n > TAIL_BYTES) {
        size_t drop = tail_len + n - TAIL_BYTES;
        memmove(tail, tail + drop, tail_len - drop);
        tail_len -= drop;
    }
    memcpy(tail + tail_len, buf, n);
    tail_len += n;
}

/* Everything in the pipes now, to the real streams and the tail. The
 * caller holds tail_lock. */
static void drain(void) {
    char buf[4096];
    for (int k = 0; k < 2; k++) {
        if (pipe_read[k] < 0) continue;
        for (;;) {
            ssize_t n = read(pipe_read[k], buf, sizeof buf);
            if (n <= 0) break;
            for (ssize_t done = 0; done < n;) {
                ssize_t w = write(real_fd[k], buf + done, (size_t)(n - done));
                if (w <= 0) break;
                done += w;
            }
            keep(buf, (size_t)n);
        }
    }
}

static void *copier(void *arg) {
    (void)arg;
    struct pollfd p[2] = {{.fd = pipe_read[0], .events = POLLIN}, {.fd = pipe_read[1], .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR) return NULL;
        pthread_mutex_lock(&tail_lock);
        drain();
        pthread_mutex_unlock(&tail_lock);
        for (int k = 0; k < 2; k++)
            if (p[k].revents & (POLLHUP | POLLERR)) p[k].fd = -1; /* that stream is closed for good */
        if (p[0].fd < 0 && p[1].fd < 0) return NULL;
    }
}

/* Stream `fd` (1 or 2) into a pipe; its real target kept in real_fd. */
static int tee_stream(int fd) {
    int k = fd - 1, fds[2];
    if (pipe(fds) != 0) return -1;
    real_fd[k] = dup(fd);
    if (real_fd[k] < 0 || dup2(fds[1], fd) < 0) {
        close(fds[0]);
        close(fds[1]);
        if (real_fd[k] >= 0) close(real_fd[k]);
        real_fd[k] = -1;
        return -1;
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(real_fd[k], F_SETFD, FD_CLOEXEC);
    pipe_read[k] = fds[0];
    return 0;
}

static void start_tee(void) {
    fflush(stdout);
    fflush(stderr);
    int out = tee_stream(STDOUT_FILENO), err = tee_stream(STDERR_FILENO);
    if (out != 0 && err != 0) return;
    pthread_t t;
    if (pthread_create(&t, NULL, copier, NULL) == 0) pthread_detach(t);
}

/* ---- what the run did ---- */

int lx_grade_open(const char *file) {
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return -1;
    close(fd);
    path = strdup(file);
    start_tee();
    return 0;
}

static int exercise_of(const char *name) {
    for (int i = 0; i < n_exercises; i++)
        if (strncmp(name, exercises[i].prefix, strlen(exercises[i].prefix)) == 0) return i;
    return -1;
}

void grade_exercise(const char *prefix, double points, int checks) {
    if (!prefix || !*prefix) {
        lx_error("grade_exercise: the prefix is NULL or empty");
        return;
    }
    if (!(points >= 0) || isinf(points) || checks < 1) {
        lx_error("grade_exercise(\"%s\"): points must be finite and >= 0 (got %g) and checks >= 1 (got %d)", prefix,
                 points, checks);
        return;
    }
    if (lx_in_rank()) {
        lx_error("grade_exercise(\"%s\") inside a spawned rank: declare exercises in the lecture, before the spawn",
                 prefix);
        return;
    }
    for (int i = 0; i < n_exercises; i++)
        if (strcmp(exercises[i].prefix, prefix) == 0) {
            lx_error("grade_exercise(\"%s\"): that exercise is declared already", prefix);
            return;
        }
    exercise *e = realloc(exercises, (size_t)(n_exercises + 1) * sizeof *e);
    if (!e) lx_fatal("out of memory");
    exercises = e;
    exercises[n_exercises++] = (exercise){.prefix = strdup(prefix), .points = points, .checks = checks};
    lx_grade_visibility_exercise(prefix); /* grade_visibility's prefixes start with one */
}

int lx_grade_begin(const char *prefix) {
    current = -1;
    for (int i = 0; i < n_exercises; i++)
        if (strcmp(exercises[i].prefix, prefix) == 0) current = i;
    return current >= 0 ? 0 : -1;
}

void lx_grade_end(void) { current = -1; }

int lx_grade_not_reached(void) {
    if (n_exercises == 0) return -1;
    int missing = 0;
    for (int i = 0; i < n_exercises; i++)
        if (exercises[i].seen < exercises[i].checks) missing += exercises[i].checks - exercises[i].seen;
    return missing;
}

/* "checks: 40 passed, 0 failed", with ", 4 not reached" when the lecture
 * declared exercises (grade_exercise): the one line the console, the
 * trace's meta.checks, the viewer's header and --grade's results all give. */
char *lx_check_summary(void) {
    int not_reached = lx_grade_not_reached(), passed_count, failed_count;
    lx_check_counts(&passed_count, &failed_count);
    if (passed_count + failed_count == 0 && not_reached < 0) return NULL;
    if (not_reached < 0) return lx_fmt("checks: %d passed, %d failed", passed_count, failed_count);
    return lx_fmt("checks: %d passed, %d failed, %d not reached", passed_count, failed_count, not_reached);
}

void lx_check_summary_print(void) {
    char *line = lx_check_summary();
    if (line) fprintf(stderr, "%s\n", line);
    free(line);
}

/* meta.checks of the trace: the counts the verdict line gives. */
static void checks_meta(cJSON *meta) {
    int checks_passed, checks_failed;
    lx_check_counts(&checks_passed, &checks_failed);
    cJSON *checks = cJSON_CreateObject();
    cJSON_AddNumberToObject(checks, "passed", checks_passed);
    cJSON_AddNumberToObject(checks, "failed", checks_failed);
    int not_reached = lx_grade_not_reached(); /* only where the lecture declared exercises */
    if (not_reached >= 0) cJSON_AddNumberToObject(checks, "not_reached", not_reached);
    lx_json_set(meta, "checks", checks);
}

void lx_grade_listen(void) {
    lx_trace_listen(&(lx_trace_listener){
            .step = lx_grade_step, .meta = checks_meta, .written = lx_grade_write, .fatal = lx_check_summary_print});
}

/* The check's line as the console said it (PASS or FAIL, its name and the
 * numbers of this run), check_close's count of elements outside the
 * tolerance or why nothing could be compared, and the lecture line. */
static char *check_output(const cJSON *step, const cJSON *r, int passed) {
    /* A check the student does not see: its whole rendering is here. */
    const cJSON *withheld = cJSON_GetObjectItemCaseSensitive(r, "withheld");
    if (cJSON_IsObject(withheld)) r = withheld;
    lx_sb sb = {0};
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "data"));
    const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "what"));
    if (data) lx_sb_str(&sb, data);
    else lx_sb_printf(&sb, "%s: %s", passed ? "PASS" : "FAIL", what ? what : "");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(r, "reason");
    const cJSON *bad = cJSON_GetObjectItemCaseSensitive(r, "bad");
    if (cJSON_IsString(reason) && !(data && strstr(data, reason->valuestring))) {
        lx_sb_printf(&sb, "\n%s", reason->valuestring);
    } else if (cJSON_IsNumber(bad)) {
        const cJSON *max_abs = cJSON_GetObjectItemCaseSensitive(r, "max_abs");
        lx_sb_printf(&sb, "\n%.0f of %.0f elements outside the tolerance (rtol %g, atol %g)", bad->valuedouble,
                     cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "numel")),
                     cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "rtol")),
                     cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "atol")));
        if (cJSON_IsNumber(max_abs)) lx_sb_printf(&sb, "; largest difference %.3g", max_abs->valuedouble);
    }
    const cJSON *stack = cJSON_GetObjectItemCaseSensitive(step, "stack");
    const cJSON *inner = cJSON_GetArrayItem(stack, cJSON_GetArraySize(stack) - 1);
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(inner, "path"));
    const cJSON *line = cJSON_GetObjectItemCaseSensitive(inner, "line");
    if (file && cJSON_IsNumber(line)) lx_sb_printf(&sb, "\nat %s:%d", file, line->valueint);
    return sb.s;
}

/* Keeps `msg` in a list of at most MAX_ERRORS: the first and the latest. */
static void keep_error(char **list, int *n, const char *msg) {
    if (*n == MAX_ERRORS) {
        free(list[1]);
        memmove(list + 1, list + 2, (MAX_ERRORS - 2) * sizeof list[0]);
        (*n)--;
    }
    list[(*n)++] = strdup(msg);
}

/* A check's name: what check_named() named it, else its text. */
static const char *check_name(const cJSON *r) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name"));
    if (!name) name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "what"));
    return name ? name : "check";
}

void lx_grade_step(const cJSON *step) {
    lx_leaderboard_step(step);
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(step, "rank");
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(step, "renderings")) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "type"));
        if (type && strcmp(type, "error") == 0) {
            const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "data"));
            /* An error a spawn_expect_failure() spawn was made to show is
             * no reason for anything to fail. */
            if (!msg || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "expected"))) continue;
            char *said = cJSON_IsNumber(rank) ? lx_fmt("rank %d: %s", rank->valueint, msg) : strdup(msg);
            keep_error(errors, &n_errors, said);
            if (current >= 0) keep_error(exercises[current].errors, &exercises[current].n_errors, said);
            free(said);
            continue;
        }
        if (!type || strcmp(type, "check") != 0) continue;
        const char *name = check_name(r);
        int ex = exercise_of(name);
        if (ex >= 0) exercises[ex].seen++;
        if (!path) continue;
        record *grown = realloc(records, (size_t)(n_records + 1) * sizeof *grown);
        if (!grown) return;
        records = grown;
        record *rec = &records[n_records++];
        rec->rank = cJSON_IsNumber(rank) ? rank->valueint : -1;
        rec->passed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "passed"));
        rec->what = strdup(name);
        rec->output = check_output(step, r, rec->passed);
        rec->exercise = ex;
        rec->visibility = lx_grade_visibility_of(name);
    }
}

/* ---- results.json ---- */

static double round3(double x) { return round(x * 1000) / 1000; }
/* A test's share: 35 points over 16 checks is 2.1875 each, which three
 * decimals would make 2.188 and the 16 of them 35.008. Six keep the tests'
 * sum within a thousandth of the total for up to a thousand tests. */
static double round6(double x) { return round(x * 1e6) / 1e6; }

static cJSON *test(const char *name, double score, double max, const char *output, int passed, const char *visibility) {
    cJSON *t = cJSON_CreateObject();
    lx_add_text(t, "name", name);
    cJSON_AddNumberToObject(t, "score", round6(score));
    cJSON_AddNumberToObject(t, "max_score", round6(max));
    cJSON_AddStringToObject(t, "status", passed ? "passed" : "failed");
    lx_add_text(t, "output", output);
    cJSON_AddStringToObject(t, "visibility", visibility);
    return t;
}

/* Records of exercise `ex` (or, for -1, of none), ranks in order, each
 * rank's in the order they came. */
static void add_records(cJSON *tests, int ex, double weight, double *total) {
    int max_rank = -1;
    for (int i = 0; i < n_records; i++)
        if (records[i].rank > max_rank) max_rank = records[i].rank;
    for (int rank = -1; rank <= max_rank; rank++) {
        for (int i = 0; i < n_records; i++) {
            const record *rec = &records[i];
            if (rec->exercise != ex || rec->rank != rank) continue;
            char *name = rank >= 0 ? lx_fmt("rank %d: %s", rank, rec->what) : strdup(rec->what);
            double score = rec->passed ? weight : 0;
            *total += score;
            cJSON_AddItemToArray(tests, test(name, score, weight, rec->output, rec->passed, rec->visibility));
            free(name);
        }
    }
}

/* Why the run ended early, when it did: the error messages in `list`. */
static char *reason(char *const *list, int n) {
    lx_sb sb = {0};
    lx_sb_str(&sb, "");
    for (int i = 0; i < n; i++)
        lx_sb_printf(&sb, "%s%s", i ? "\n" : "", list[i]);
    return sb.s;
}

/* The variant this run was given (--variant SEED, variant.c): the line
 * under the counts in the output, which the student sees, and
 * Gradescope's free-form top-level extra_data, which the instructor's
 * export keeps: {"variant": {"seed": S, "values": {name: value}}}. */
static void add_variant(cJSON *root, lx_sb *out) {
    cJSON *record = lx_variant_record();
    char *text = lx_variant_text();
    if (text) lx_sb_printf(out, "%s\n", text);
    if (record) {
        cJSON *extra = cJSON_CreateObject();
        cJSON_AddItemToObject(extra, "variant", record);
        cJSON_AddItemToObject(root, "extra_data", extra);
    }
    free(text);
}

void lx_grade_write(void) {
    if (!path) return;
    /* What is still in the pipe belongs to the tail: the copier may be
     * copying the console's last line right now (it holds the lock while
     * it does), so wait for it, but not for ever: a signal handler may
     * have stopped the copier itself with the lock held, and then the tail
     * is what it has. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 500 * 1000 * 1000;
    if (until.tv_nsec >= 1000 * 1000 * 1000) {
        until.tv_sec++;
        until.tv_nsec -= 1000 * 1000 * 1000;
    }
    if ((pipe_read[0] >= 0 || pipe_read[1] >= 0) && pthread_mutex_timedlock(&tail_lock, &until) == 0) {
        fflush(stdout);
        fflush(stderr);
        drain();
        pthread_mutex_unlock(&tail_lock);
    }
    char *why = reason(errors, n_errors);
    cJSON *tests = cJSON_CreateArray();
    double total = 0, max_total = 0;
    for (int ex = 0; ex < n_exercises; ex++) {
        const exercise *e = &exercises[ex];
        int shares = e->seen > e->checks ? e->seen : e->checks;
        double weight = e->points / shares;
        add_records(tests, ex, weight, &total);
        if (e->seen < e->checks) {
            int missing = e->checks - e->seen;
            /* "exercise 1:" -> "exercise 1" */
            int len = (int)strlen(e->prefix);
            while (len > 0 && (e->prefix[len - 1] == ':' || e->prefix[len - 1] == ' '))
                len--;
            /* The name is the same whatever stopped the run and wherever:
             * the counts go in the output. */
            char *name = lx_fmt("%.*s: checks not reached", len, e->prefix);
            char *own = reason(e->errors, e->n_errors);
            const char *because = *own ? own : why;
            char *out = lx_fmt("%d of %d checks not reached: the run of %.*s ended before them, score 0.%s%s", missing,
                               e->checks, len, e->prefix, *because ? "\n" : "", because);
            cJSON_AddItemToArray(tests, test(name, 0, weight * missing, out, 0, lx_grade_visibility_of(e->prefix)));
            free(own);
            free(name);
            free(out);
        }
        max_total += e->points;
    }
    int others = 0;
    for (int i = 0; i < n_records; i++)
        others += records[i].exercise < 0;
    add_records(tests, -1, 1, &total);
    max_total += others;

    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "score", round3(total));
    cJSON_AddNumberToObject(root, "max_score", round3(max_total));
    cJSON_AddNumberToObject(root, "execution_time", round3(lx_elapsed()));
    lx_sb out = {0};
    /* The counts the console's last line and the trace give. */
    char *counts = lx_check_summary();
    lx_sb_printf(&out, "%s: %.3g of %.3g points; %s%s\n", lx_lecture_name(), round3(total), round3(max_total),
                 counts ? counts : "checks: none", lx_failed() ? "; the run failed" : "");
    free(counts);
    add_variant(root, &out);
    if (*why) lx_sb_printf(&out, "\nWhy the run failed:\n%s\n", why);
    if (tail_len) {
        lx_sb_str(&out, "\nConsole (last lines):\n");
        lx_sb_add(&out, tail, tail_len);
    }
    lx_add_text(root, "output", out.s);
    cJSON_AddStringToObject(root, "visibility", "visible");
    cJSON_AddStringToObject(root, "stdout_visibility", "visible");
    cJSON_AddItemToObject(root, "tests", tests);
    cJSON *leaderboard = lx_leaderboard_json();
    if (leaderboard) cJSON_AddItemToObject(root, "leaderboard", leaderboard);
    char *json = cJSON_Print(root);
    cJSON_Delete(root);
    free(out.s);
    free(why);

    /* Atomically: an autograder never reads half a file. */
    char *tmp = lx_fmt("%s.tmp.%d", path, (int)getpid());
    FILE *f = json ? fopen(tmp, "w") : NULL;
    int ok = f && fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        unlink(tmp);
        fprintf(stderr, "lectern: cannot write the grade to %s: %s\n", path, strerror(errno));
    }
    free(tmp);
    cJSON_free(json);
}
