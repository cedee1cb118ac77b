/*
 * options.c: a lecture's own command-line options.
 *
 * A lecture that reads options declares them once, at file scope:
 *
 *     LECTURE_OPTIONS({"naive", NULL, "run the naive ring instead of the fast one"},
 *                     {"n", "N", "elements per rank (default 8)"});
 *
 * which defines the array `lecture_options` that this file finds through a
 * weak reference (a lecture without it has none). Declaring them is what
 * lets --help list them and lets an unknown option be an error at once,
 * before minutes of lecture run with a typo ignored. lecture_flag() and
 * lecture_option() read what was given; asking for a name the declaration
 * lacks is an error at the lecture's line, so the help never lies.
 *
 * Ranks read the same options: the parent sends what was given with each
 * spawn (lx_options_text), and the rank takes it in (lx_options_load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

/* Defined by LECTURE_OPTIONS in the lecture; NULL when it declares none. */
extern const lecture_opt lecture_options[] __attribute__((weak));

typedef struct given {
    char *name;
    char *value; /* NULL for a flag */
} given;

static given *given_list;
static int n_given;

static const lecture_opt *declared(const char *name, size_t len) {
    if (!lecture_options) return NULL;
    for (const lecture_opt *o = lecture_options; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
}

static void remember(const char *name, size_t len, const char *value) {
    given *g = realloc(given_list, (size_t)(n_given + 1) * sizeof *g);
    if (!g) lx_fatal("out of memory for options");
    given_list = g;
    given_list[n_given].name = strndup(name, len);
    given_list[n_given].value = value ? strdup(value) : NULL;
    n_given++;
}

void lx_options_usage(FILE *f) {
    if (!lecture_options || !lecture_options[0].name) return;
    fprintf(f, "\nOptions of this lecture:\n");
    for (const lecture_opt *o = lecture_options; o->name; o++) {
        char left[96];
        if (o->value) snprintf(left, sizeof left, "--%s=%s", o->name, o->value);
        else snprintf(left, sizeof left, "--%s", o->name);
        fprintf(f, "  %-18s %s\n", left, o->help ? o->help : "");
    }
}

/* "--naive, --n=N": the declared options, for a message. */
static char *declared_list(void) {
    lx_sb sb = {0};
    lx_sb_str(&sb, "");
    for (const lecture_opt *o = lecture_options; o && o->name; o++)
        lx_sb_printf(&sb, "%s--%s%s%s", o == lecture_options ? "" : ", ", o->name, o->value ? "=" : "",
                     o->value ? o->value : "");
    return sb.s;
}

char *lx_option_accept(const char *arg) {
    if (strncmp(arg, "--", 2) != 0 || !arg[2]) return lx_fmt("unknown argument '%s'", arg);
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    /* --inspect-collectives: every lecture takes it (lectern.h, inspect). Kept
     * with the lecture's own options so that the ranks receive it too. */
    /* --twin-record likewise (docs/twin.md): the ranks record what they do. */
    if (!eq && (strcmp(name, LX_INSPECT_COLLECTIVES) == 0 || strcmp(name, LX_TWIN_RECORD) == 0)) {
        remember(name, len, NULL);
        return NULL;
    }
    /* --variant=SEED likewise (variant.c reads it): every rank picks the
     * same values. lecture_main has checked the seed. */
    if (eq && len == strlen(LX_VARIANT) && strncmp(name, LX_VARIANT, len) == 0) {
        remember(name, len, eq + 1);
        return NULL;
    }
    const lecture_opt *o = declared(name, len);
    if (!o) {
        char *list = declared_list();
        char *msg = *list ? lx_fmt("unknown option '%s' (this lecture reads %s)", arg, list)
                          : lx_fmt("unknown option '%s' (this lecture reads no options of its own)", arg);
        free(list);
        return msg;
    }
    if (o->value && !eq) return lx_fmt("option --%s needs a value: --%s=%s", o->name, o->name, o->value);
    if (!o->value && eq) return lx_fmt("option --%s is a flag and takes no value (got '%s')", o->name, arg);
    remember(name, len, eq ? eq + 1 : NULL);
    return NULL;
}

/* The latest --name given (a later one wins, as in most programs). */
static const given *find_given(const char *name) {
    for (int i = n_given - 1; i >= 0; i--)
        if (strcmp(given_list[i].name, name) == 0) return &given_list[i];
    return NULL;
}

int lecture_flag(const char *name) {
    if (!name) {
        lx_error("lecture_flag: name is NULL");
        return 0;
    }
    const lecture_opt *o = declared(name, strlen(name));
    if (!o) {
        lx_error("lecture_flag: --%s is not declared: add {\"%s\", NULL, \"what it does\"} to "
                 "LECTURE_OPTIONS so that --help lists it",
                 name, name);
        return 0;
    }
    if (o->value) {
        lx_error("lecture_flag: --%s is declared with a value (--%s=%s): read it with lecture_option()", name, name,
                 o->value);
        return 0;
    }
    return find_given(name) != NULL;
}

const char *lecture_option(const char *name, const char *fallback) {
    if (!name) {
        lx_error("lecture_option: name is NULL");
        return fallback;
    }
    const lecture_opt *o = declared(name, strlen(name));
    if (!o) {
        lx_error("lecture_option: --%s is not declared: add {\"%s\", \"VALUE\", \"what it does\"} to "
                 "LECTURE_OPTIONS so that --help lists it",
                 name, name);
        return fallback;
    }
    if (!o->value) {
        lx_error("lecture_option: --%s is declared as a flag: read it with lecture_flag()", name);
        return fallback;
    }
    const given *g = find_given(name);
    return g ? g->value : fallback;
}

const char *lx_option_given(const char *name) {
    const given *g = find_given(name);
    return g ? g->value : NULL;
}

int lx_inspect_collectives(void) { return find_given(LX_INSPECT_COLLECTIVES) != NULL; }
/* twin_record(1) (twin_run.c) asks for the record without the option: the
 * lecture then records as if it were given, and so do its ranks, which get
 * it in the options text below (a rank's own copy is never set). */
static int twin_requested;

void lx_twin_request(int on) { twin_requested = on != 0; }
int lx_twin_record_given(void) { return find_given(LX_TWIN_RECORD) != NULL; }
int lx_twin_recording(void) { return twin_requested || lx_twin_record_given(); }

/* "naive\nn=8\n": what was given, for the ranks. */
char *lx_options_text(void) {
    lx_sb sb = {0};
    lx_sb_str(&sb, "");
    for (int i = 0; i < n_given; i++)
        lx_sb_printf(&sb, "%s%s%s\n", given_list[i].name, given_list[i].value ? "=" : "",
                     given_list[i].value ? given_list[i].value : "");
    if (twin_requested && !lx_twin_record_given()) lx_sb_printf(&sb, "%s\n", LX_TWIN_RECORD);
    return sb.s;
}

void lx_options_load(const char *text) {
    lx_options_free();
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq) {
            char *value = strndup(eq + 1, len - (size_t)(eq - p) - 1);
            remember(p, (size_t)(eq - p), value);
            free(value);
        } else {
            remember(p, len, NULL);
        }
        p = nl ? nl + 1 : p + len;
    }
}

void lx_options_free(void) {
    for (int i = 0; i < n_given; i++) {
        free(given_list[i].name);
        free(given_list[i].value);
    }
    free(given_list);
    given_list = NULL;
    n_given = 0;
}

/* ---- --quick and --quiet (lecture_main sets them; a rank takes the parent's) ---- */

static int quick, quiet;

int lecture_quick(void) { return quick; }

int lx_quiet(void) { return quiet; }

void lx_set_run_flags(int is_quick, int is_quiet) {
    quick = is_quick;
    quiet = is_quiet;
}

void lx_rank_init(const char *lecture, double clock_zero, int is_quick, int is_quiet) {
    quick = is_quick;
    quiet = is_quiet;
    lx_trace_rank_init(lecture, clock_zero);
}

void progress(const char *fmt, ...) {
    if (!fmt) {
        lx_error("progress: the format is NULL");
        return;
    }
    if (quiet) return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = lx_vfmt(fmt, ap);
    va_end(ap);
    if (lx_rank() >= 0) fprintf(stderr, "[%s %6.1fs rank %d] %s\n", lx_lecture_name(), lx_elapsed(), lx_rank(), msg);
    else fprintf(stderr, "[%s %6.1fs] %s\n", lx_lecture_name(), lx_elapsed(), msg);
    free(msg);
}
