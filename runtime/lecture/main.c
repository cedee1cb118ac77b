/*
 * main.c: lecture_main, the whole main of a lecture.
 *
 *   int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
 *
 * It reads the options, opens the trace, runs the body, and writes the trace.
 * A process started by spawn() runs here too: lx_spawn_child_entry() takes it
 * over at once, runs its rank and exits, so the same binary is both the
 * lecture and each of its ranks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <dlfcn.h>

#include "check.h"
#include "comm/comm.h"
#include "ranks/ranks.h"
#include "tensor/tensor.h"
#include "trace/trace.h"

static int quick, quiet;

/* 1 when this program was built into a folder named bench (build/bench/). */
static int is_benchmark(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0;
    slash = strrchr(exe, '/');
    return strcmp(slash ? slash + 1 : exe, "bench") == 0;
}

static void usage(FILE *f, const char *prog, const char *name) {
    fprintf(f,
            "usage: %s [--out DIR] [--grade FILE] [--variant SEED] [--quick] [--quiet] [--help] [lecture options]\n"
            "\n"
            "Runs the lecture %s and writes its trace: DIR/%s.json and DIR/%s.js\n"
            "(the twin the viewer loads from file://). A run that fails writes\n"
            "DIR/%s.failed.json instead and leaves the last good trace alone.\n"
            "\n"
            "  --out DIR   where to write the trace (default: $LECTERN_OUT, else\n"
            "              %s/%s)\n"
            "  --grade FILE  also write the checks as a course autograder's score:\n"
            "              Gradescope's results.json format (docs/homework.md)\n"
            "  --variant SEED  a homework's values for this seed (variant_int;\n"
            "              a whole number, 0 to 4294967295)\n"
            "  --quick     reduced sizes, for tests\n"
            "  --quiet     no progress lines on stderr\n"
            "  --inspect-collectives  every blocking collective inspects its tensors\n"
            "              before and after (the viewer's variables panel, per rank)\n"
            "  --help      this text\n"
            "\n"
            "Environment: LECTERN_TIMEOUT=SECONDS stops a spawn whose ranks make no\n"
            "progress for that long (default 120). LECTERN_CUDA_SYNC=1 waits for\n"
            "every GPU kernel the runtime launches and reports a faulting one at its\n"
            "launch line (slow: for debugging and compute-sanitizer, docs/gpu.md).\n"
            "Exit status: 0 ok, 1 the lecture failed (see the error steps), 2 bad usage\n"
            "or an unwritable output folder.\n",
            prog, name, name, name, name, lx_repo_root(), is_benchmark() ? "bench/results" : "traces/local");
}

/* mkdir -p */
static int make_dirs(const char *path) {
    char *p = strdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = (mkdir(p, 0755) != 0 && errno != EEXIST) ? -1 : 0;
    free(p);
    return rc;
}

/* Fails early, before the lecture runs for minutes, if the trace cannot be written. */
static int check_writable(const char *dir) {
    if (make_dirs(dir) != 0) return -1;
    char *probe = lx_fmt("%s/.lectern-write-test.%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int saved = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    free(probe);
    errno = saved;
    return fd >= 0 ? 0 : -1;
}

/* lectures/lecture_08.c -> lecture_08 */
static char *name_of(void (*body)(void), const char *argv0) {
    const char *path = lx_function_path((const void *)body);
    const char *src = path ? path : argv0;
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    char *name = strdup(base);
    char *dot = strrchr(name, '.');
    if (dot && path) *dot = '\0';
    return name;
}

static void add_meta(int argc, char **argv) {
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    lx_trace_meta("start_time", cJSON_CreateString(when));
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    lx_trace_meta("host", cJSON_CreateString(host));
    lx_trace_meta("gpus", cJSON_CreateNumber(gpu_count()));
    /* Which BLAS kernels computed the CPU numbers: OpenBLAS picks them per
     * CPU (or as OPENBLAS_CORETYPE says), and they set the order of sums. */
    char *blas = lx_fmt("%s (%s)", openblas_get_config(), openblas_get_corename());
    lx_trace_meta("blas", cJSON_CreateString(blas));
    free(blas);
    lx_trace_meta("backend", cJSON_CreateString("none")); /* spawn() sets the real one */
    char *cmd = strdup(argv[0]);
    for (int i = 1; i < argc; i++) {
        char *next = lx_fmt("%s %s", cmd, argv[i]);
        free(cmd);
        cmd = next;
    }
    lx_trace_meta("command", cJSON_CreateString(cmd));
    free(cmd);
    lx_trace_meta("quick", cJSON_CreateBool(quick));
    cJSON *variant = lx_variant_record(); /* the seed, before any value is picked */
    if (variant) lx_trace_meta("variant", variant);
    /* Read here, so a bad value is an error before any kernel runs. */
    lx_trace_meta("cuda_sync", cJSON_CreateBool(lx_cuda_sync()));
}

/* Built with gcc's -fsanitize=address,undefined, a program loads libasan
 * and libubsan apart, and UBSan's reports are written by libubsan, which
 * reads the ubsan flags of UBSAN_OPTIONS but never takes its log_path: its
 * reports go to stderr whatever the option says (gcc 12), so a harness that
 * collects reports from log_path files (scripts/test.sh) would miss them.
 * Give libubsan the path itself. Nothing happens in other builds (no
 * libubsan loaded) or without a log_path. */
static void ubsan_reports_to_log_path(void) {
#if defined(__SANITIZE_ADDRESS__)
    const char *options = getenv("UBSAN_OPTIONS");
    void *ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!options || !ubsan) return;
    void (*set_path)(const char *) = (void (*)(const char *))dlsym(ubsan, "__sanitizer_set_report_path");
    /* Options are separated by ':' (as scripts/test.sh writes them), ',' or blanks. */
    for (const char *o = options; set_path && *o;) {
        size_t n = strcspn(o, ": ,\t");
        if (n > 9 && strncmp(o, "log_path=", 9) == 0) {
            char *path = strndup(o + 9, n - 9);
            set_path(path); /* the library keeps its own copy */
            free(path);
        }
        o += n;
        o += *o != 0;
    }
    dlclose(ubsan);
#endif
}

int lecture_main(int argc, char **argv, void (*body)(void)) {
    ubsan_reports_to_log_path(); /* the lecture's and each rank's */
    /* The layers below call up only through what is registered here. */
    lx_ranks_set_comm(lx_comm_layer());
    lx_spawn_child_entry(argc, argv); /* a spawned rank never comes back */

    char *name = name_of(body, argv[0]);
    const char *out = NULL, *grade = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout, argv[0], name);
            lx_options_usage(stdout);
            lx_options_free();
            free(name);
            return 0;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strncmp(argv[i], "--out=", 6) == 0) {
            out = argv[i] + 6;
        } else if (strcmp(argv[i], "--grade") == 0 && i + 1 < argc) {
            grade = argv[++i];
        } else if (strncmp(argv[i], "--grade=", 8) == 0 && argv[i][8]) {
            grade = argv[i] + 8;
        } else if (strcmp(argv[i], "--grade") == 0 || strcmp(argv[i], "--grade=") == 0) {
            fprintf(stderr, "%s: --grade needs the results file: --grade FILE\n", argv[0]);
            lx_options_free();
            free(name);
            return 2;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else {
            /* The lecture's own options (LECTURE_OPTIONS); anything else is
             * said at once, with what the lecture does read. */
            char *why = NULL, *joined = NULL;
            if (strcmp(argv[i], "--variant") == 0 || strncmp(argv[i], "--variant=", 10) == 0) {
                /* --variant SEED or --variant=SEED, checked here; options.c
                 * keeps it with the options the ranks receive (variant_int). */
                const char *seed = argv[i][9] == '=' ? argv[i] + 10 : i + 1 < argc ? argv[++i] : "";
                why = lx_variant_parse(seed, NULL);
                if (!why) joined = lx_fmt("--%s=%s", LX_VARIANT, seed);
            }
            if (!why) why = lx_option_accept(joined ? joined : argv[i]);
            free(joined);
            if (why) {
                fprintf(stderr, "%s: %s\n", argv[0], why);
                fprintf(stderr, "(run %s --help for every option)\n", argv[0]);
                free(why);
                lx_options_free();
                free(name);
                return 2;
            }
        }
    }
    lx_set_run_flags(quick, quiet); /* lecture_quick(), lx_quiet() (options.c) */
    /* --out, else $LECTERN_OUT (benchmarks and scripts point it at a
     * temporary folder), else the repo's traces/local/ (ignored by git, what
     * `make run` writes and ?trace=NAME reads first: running a lecture by
     * hand never changes a committed trace) -- or, for a benchmark (a
     * program built into a bench/ folder), bench/results/, next to its
     * tables. The committed traces/ are written with --out traces. */
    const char *env_out = getenv("LECTERN_OUT");
    if (!out && env_out && *env_out) out = env_out;
    char *dir = out ? strdup(out) : lx_fmt("%s/%s", lx_repo_root(), is_benchmark() ? "bench/results" : "traces/local");
    if (!*dir || check_writable(dir) != 0) {
        fprintf(stderr, "%s: cannot write the trace to '%s': %s\n", argv[0], dir, strerror(errno));
        free(dir);
        free(name);
        return 2;
    }

    /* The grade file too, before the lecture runs: an autograder's run that
     * cannot write it should say so at once. */
    if (grade && lx_grade_open(grade) != 0) {
        fprintf(stderr, "%s: cannot write the grade to '%s': %s\n", argv[0], grade, strerror(errno));
        free(dir);
        free(name);
        lx_options_free();
        return 2;
    }

    lx_trace_init(name, dir);
    lx_check_listen(); /* the trace's checks counted, graded, in meta.checks */
    lx_grade_listen();
    add_meta(argc, argv);
    lx_stack_set_root((const void *)body);
    lx_install_crash_handlers();

    progress("start");
    body();
    lx_spawn_shutdown();
    lx_tensor_leaks("the lecture", 0);

    int written = lx_trace_write() == 0;
    char *path = lx_trace_path("json");
    int steps = lx_trace_step_count();
    int failed = lx_failed();
    if (written && !quiet) {
        fprintf(stderr, "[%s %6.1fs] %s: %d steps written to %s\n", name, lx_elapsed(), failed ? "FAILED" : "done",
                steps, path);
    }
    free(path);
    /* The verdict last, so it is the line a student sees. */
    lx_check_summary_print();
    lx_grade_write(); /* again, with the console's last line in its tail */
    lx_trace_free();
    lx_variant_free();
    lx_options_free();
    free(dir);
    free(name);
    if (!written) return 2;
    return failed ? 1 : 0;
}
