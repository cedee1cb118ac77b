/*
 * bench_nccl_emu.c: what the NCCL backend's communicators cost to make and
 * to keep, measured on the NCCL emulator (runtime/comm/nccl_emu.c), the only
 * NCCL this machine can run.
 *
 * A spawn's ranks make, at the first NCCL spawn of each world size w, the
 * world's communicator and 2 (w - 1) two-rank point-to-point communicators
 * (one per ordered pair of ranks the rank is in: runtime/comm/comm_nccl.c),
 * each with a stream, and keep them for the later spawns of that size. For
 * w = 2, 3, 4 and 8, on a pool of 8 ranks started first:
 *
 *   first    the first emulated spawn of w ranks (an empty function): the
 *            making, by 2 (w - 1) splits (2w for w odd) and a first message
 *            on each pair
 *   kept     the median of 11 later ones (found made)
 *   mpi      the median of 11 spawns of w ranks on Open MPI, the same pool
 *   rss      how much each rank's resident memory grew from the MPI spawn
 *            before to the first emulated spawn, per communicator made
 *
 * These are the emulator's costs (MPI_Comm_split and a thread): they say
 * nothing of NCCL's own, whose init is about a second and whose buffers are
 * device memory (docs/gpu.md). Medians: this machine is shared and noisy.
 *
 *   build/bench/bench_nccl_emu
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { REPEATS = 11 };

/* This rank's resident memory in KiB (VmRSS), handed back to the lecture. */
static void rss(int rank, int world_size, void *args) {
    (void)rank;
    (void)world_size;
    (void)args;
    long kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    spawn_return(&kib, sizeof kib);
}

static void nothing(int rank, int world_size, void *args) {
    (void)rank;
    (void)world_size;
    (void)args;
}

static void on(const char *backend) {
    setenv("LECTERN_BACKEND", backend, 1);
    if (strcmp(backend, "nccl") == 0) setenv("LECTERN_NCCL_EMULATE", "1", 1);
    else unsetenv("LECTERN_NCCL_EMULATE");
}

static double timed(spawn_fn fn, int w) {
    double t = now_seconds();
    spawn(fn, w, NULL, 0);
    return now_seconds() - t;
}

static double median_spawn(int w) {
    double t[REPEATS];
    for (int i = 0; i < REPEATS; i++)
        t[i] = timed(nothing, w);
    return median_of(t, REPEATS);
}

/* The mean over the ranks of what rss() returned. */
static double mean_rss(int w) {
    double sum = 0;
    for (int r = 0; r < w; r++) {
        long kib = 0;
        spawn_result(r, &kib, sizeof kib);
        sum += (double)kib;
    }
    return sum / w;
}

static void body(void) {
    on("mpi");
    timed(nothing, 8); /* the pool of 8, started once */
    printf("NCCL emulator: making and keeping the communicators (medians of %d)\n", REPEATS);
    printf("%5s %6s %10s %10s %10s %14s\n", "ranks", "comms", "first_ms", "kept_ms", "mpi_ms", "rss_KiB/comm");
    table_t *t = table_new("The NCCL backend's communicators on the NCCL emulator (CPU): the first spawn of a size "
                           "makes them, later ones find them");
    table_column(t, "ranks", NULL, "%d");
    table_column(t, "communicators per rank", NULL, "%d");
    table_column(t, "first emulated spawn", "ms", "%.1f");
    table_column(t, "later emulated spawn, median", "ms", "%.2f");
    table_column(t, "Open MPI spawn, median", "ms", "%.2f");
    table_column(t, "resident memory per communicator", "KiB", "%.1f");
    const int sizes[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int w = sizes[i];
        int comms = 1 + 2 * (w - 1);
        on("mpi");
        spawn(rss, w, NULL, 0);
        double before = mean_rss(w);
        double mpi = median_spawn(w);
        on("nccl");
        double first = timed(nothing, w);
        spawn(rss, w, NULL, 0);
        double grown = mean_rss(w) - before;
        double kept = median_spawn(w);
        printf("%5d %6d %10.1f %10.2f %10.2f %14.1f\n", w, comms, 1e3 * first, 1e3 * kept, 1e3 * mpi, grown / comms);
        table_row(t, w, comms, 1e3 * first, 1e3 * kept, 1e3 * mpi, grown / comms);
    }
    table_show(t);
    on("mpi");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
