/*
 * bench_world.c: what a bigger world costs: for pools of 2, 4, 8, 16, 32
 * (and 64) ranks, the time of the spawn that starts the pool (mpirun, every
 * rank's MPI_Init, the handshake), the median of later spawns on it (a
 * function that does nothing, then one all-reduce of 4 floats, checked), and
 * the memory each idle pool rank holds: its resident set (RSS, which counts
 * the shared libraries again in every rank) and its proportional share (PSS,
 * shared pages divided among the processes that map them: what the ranks
 * add up to), from /proc/PID/smaps_rollup.
 *
 * Each size replaces the pool with one of exactly that size
 * (LECTERN_POOL_MIN=1, so 2 ranks are a pool of 2). Ranks outnumber the
 * cores on a small machine, so the start-up times grow with the ranks'
 * MPI_Init on shared cores, not with lectern's work.
 *
 *   build/bench/bench_world            2 .. 32 ranks
 *   build/bench/bench_world 64         2 .. 64 ranks
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"

enum { REPEATS = 5 };

static int max_world = 32;

static void nothing(int rank, int world_size, void *args) {
    (void)rank;
    (void)world_size;
    (void)args;
}

/* Every rank adds rank + 1; the sum must be n (n + 1) / 2. */
static void sum(int rank, int world_size, void *args) {
    (void)args;
    tensor *t = zeros(4, 0, get_device(rank));
    fill_(t, (float)(rank + 1));
    dist_all_reduce(t, DIST_SUM);
    if (tensor_item(t, 0) != (float)world_size * (float)(world_size + 1) / 2.0f) {
        fprintf(stderr, "bench_world: rank %d of %d got %g\n", rank, world_size, (double)tensor_item(t, 0));
        exit(1);
    }
    tensor_free(t);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_spawn(spawn_fn fn, int world_size) {
    double t[REPEATS];
    for (int i = 0; i < REPEATS; i++) {
        double t0 = now_seconds();
        spawn(fn, world_size, NULL, 0);
        t[i] = now_seconds() - t0;
    }
    qsort(t, REPEATS, sizeof t[0], cmp);
    return t[REPEATS / 2];
}

static int parent_of(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close = strrchr(buf, ')');
    int ppid = -1;
    if (!close || sscanf(close + 1, " %*c %d", &ppid) != 1) return -1;
    return ppid;
}

/* A field of /proc/PID/smaps_rollup in kB ("Rss:", "Pss:"), or -1. */
static long rollup_kb(int pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
    fclose(f);
    return kb;
}

/* The pool's ranks: this process's grandchildren (mpirun's children). */
static void rank_memory(int *n, double *rss_mb, double *pss_mb) {
    int me = (int)getpid();
    *n = 0;
    long rss = 0, pss = 0;
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        int ppid = parent_of(pid);
        if (ppid <= 0 || parent_of(ppid) != me) continue;
        long r = rollup_kb(pid, "Rss:"), p = rollup_kb(pid, "Pss:");
        if (r < 0 || p < 0) continue;
        rss += r;
        pss += p;
        (*n)++;
    }
    closedir(d);
    *rss_mb = *n ? rss / 1024.0 / *n : 0;
    *pss_mb = *n ? pss / 1024.0 / *n : 0;
}

static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static void body(void) {
    setenv("LECTERN_POOL_MIN", "1", 1); /* a pool of exactly the world size */
    printf("%d cores; sizes 2 to %d ranks; medians of %d spawns\n", (int)sysconf(_SC_NPROCESSORS_ONLN), max_world,
           REPEATS);
    printf("%5s %12s %14s %14s %9s %9s %9s %6s\n", "ranks", "start (s)", "empty (ms)", "all-reduce (ms)", "RSS/rank",
           "PSS/rank", "PSS all", "fds");
    table_t *t = table_new("Pools of 2 to %d ranks on %d cores", max_world, (int)sysconf(_SC_NPROCESSORS_ONLN));
    table_column(t, "ranks", NULL, "%d");
    table_column(t, "first spawn (starts the pool)", "s", "%.2f");
    table_column(t, "later empty spawn, median", "ms", "%.2f");
    table_column(t, "later all-reduce spawn, median", "ms", "%.2f");
    table_column(t, "RSS per idle rank", "MB", "%.1f");
    table_column(t, "PSS per idle rank", "MB", "%.1f");
    table_column(t, "PSS of all ranks", "MB", "%.0f");
    table_column(t, "lecture's open fds", NULL, "%d");
    for (int w = 2; w <= max_world; w *= 2) {
        double t0 = now_seconds();
        spawn(sum, w, NULL, 0);
        double start = now_seconds() - t0;
        double empty = median_spawn(nothing, w), reduce = median_spawn(sum, w);
        int n;
        double rss, pss;
        rank_memory(&n, &rss, &pss);
        if (n != w) fprintf(stderr, "bench_world: found %d rank processes for a pool of %d\n", n, w);
        int fds = open_fds();
        printf("%5d %12.2f %14.2f %14.2f %8.1fM %8.1fM %8.0fM %6d\n", w, start, 1e3 * empty, 1e3 * reduce, rss, pss,
               pss * n, fds);
        fflush(stdout);
        table_row(t, w, start, 1e3 * empty, 1e3 * reduce, rss, pss, pss * n, fds);
    }
    table_show(t);
}

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] != '-') {
        max_world = atoi(argv[1]);
        if (max_world < 2 || max_world > LECTERN_MAX_WORLD) {
            fprintf(stderr, "bench_world: the largest world is 2 to %d ranks\n", LECTERN_MAX_WORLD);
            return 2;
        }
        argv[1] = argv[0]; /* lecture_main sees the rest */
        argc--;
        argv++;
    }
    return lecture_main(argc, argv, body);
}
