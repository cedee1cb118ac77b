/*
 * bench_shared_gpu.c: the collectives of ranks sharing one GPU, through the
 * shared-GPU protocol on the device (CUDA IPC, runtime/comm/shared_ipc.c)
 * against the staged host path (LECTERN_SHARED_IPC=0), in the same run, and
 * both as a fraction of the device-to-device copy rate measured first in
 * the same run.
 *
 * busbw as nccl-tests defines it, `bytes` the full vector:
 *   all_reduce                             algbw * 2(n-1)/n
 *   reduce_scatter, all_gather, all_to_all algbw * (n-1)/n
 * copy rate: 2 x bytes / time of a 256 MiB tensor_copy (a copy reads and
 * writes every byte), as bench_gpu measures it. Each figure is the median of
 * several runs; a run is the slowest rank's time (a barrier, the call, a
 * device_synchronize, an MPI_MAX).
 *
 *   build/bench/bench_shared_gpu          on a machine with one GPU (or fewer than 4)
 *   build/bench/bench_shared_gpu --cpu    no GPU: host tensors, the protocol over
 *                                         shared memory against the staged pipeline
 *                                         with memcpy (LECTERN_STAGE_TEST), 1 and 16 MiB
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"
#include "comm/shared_ipc.h"
#include "ranks/ranks_mpi.h"

enum { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, N_OPS, MAX_RUNS = 21 };
static const char *const NAMES[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};
static const double MiB = 1024.0 * 1024.0;

typedef struct bench_args {
    int cpu;
    double copy_gbs; /* the device-to-device copy rate, measured in the parent's first spawn */
} bench_args;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static double slowest(double s) {
    double worst = 0;
    MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, lx_rank_comm());
    return worst;
}

/* One call on the full vector (and its 1/n part): all-to-all from `full` into `other`. */
static void call(int op, tensor *full, tensor *part, tensor *other) {
    if (op == ALL_REDUCE) dist_all_reduce(full, DIST_SUM);
    else if (op == REDUCE_SCATTER) dist_reduce_scatter(part, full, DIST_SUM);
    else if (op == ALL_GATHER) dist_all_gather(full, part);
    else dist_all_to_all(other, full);
}

static double factor(int op, int n) { return op == ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n; }

static void measure(int rank, int world, void *p) {
    bench_args *a = p;
    int dev = get_device(rank);
    const int sizes_gpu[] = {1, 16, 256}, sizes_cpu[] = {1, 16};
    const int *sizes = a->cpu ? sizes_cpu : sizes_gpu;
    int n_sizes = a->cpu ? 2 : 3;
    const char *path = lx_ipc_active() ? "protocol" : "staged";
    for (int op = 0; op < N_OPS; op++)
        for (int k = 0; k < n_sizes; k++) {
            int64_t n = (int64_t)(sizes[k] * MiB / sizeof(float));
            n -= n % world;
            tensor *full = zeros(n, 0, dev), *part = zeros(n / world, 0, dev), *other = NULL;
            if (op == ALL_TO_ALL) other = zeros(n, 0, dev);
            int runs = sizes[k] <= 1 ? MAX_RUNS : sizes[k] <= 16 ? 7 : 3;
            double t[MAX_RUNS];
            for (int i = -1; i < runs; i++) { /* run -1: the warm-up */
                dist_barrier();
                double t0 = now_seconds();
                call(op, full, part, other);
                device_synchronize();
                double s = slowest(now_seconds() - t0);
                if (i >= 0) t[i] = s;
            }
            double secs = median(t, runs);
            double bus = (double)n * sizeof(float) / secs * factor(op, world) / 1e9;
            if (rank == 0) {
                printf("%-15s %8d %5d %-9s %5d %11.6f %11.3f", NAMES[op], sizes[k], world, path, runs, secs, bus);
                if (a->copy_gbs > 0) printf(" %9.4f", bus / a->copy_gbs);
                printf("\n");
                fflush(stdout);
                note("%s %d MiB on %d ranks sharing %s, %s path: busbw %.3f GB/s", NAMES[op], sizes[k], world,
                     dev >= 0 ? "cuda:0" : "the CPU", path, bus);
            }
            tensor_free(full);
            tensor_free(part);
            tensor_free(other);
        }
}

/* The device-to-device copy rate (GB/s) of rank 0's GPU: 2 x bytes / time. */
static void copy_rate(int rank, int world, void *p) {
    (void)world, (void)p;
    if (rank != 0) return;
    int64_t n = (int64_t)(256 * MiB / sizeof(float));
    tensor *src = zeros(n, 0, 0), *dst = zeros(n, 0, 0);
    double t[9];
    tensor_copy(dst, src);
    for (int i = 0; i < 9; i++) {
        device_synchronize();
        double t0 = now_seconds();
        tensor_copy(dst, src);
        device_synchronize();
        t[i] = now_seconds() - t0;
    }
    double gbs = 2.0 * (double)n * sizeof(float) / median(t, 9) / 1e9;
    printf("device-to-device copy of 256 MiB on cuda:0: %.1f GB/s (2 x bytes / time, median of 9)\n", gbs);
    fflush(stdout);
    FILE *f = fopen(getenv("BENCH_SHARED_COPY_FILE"), "w");
    if (f) {
        fprintf(f, "%.6f\n", gbs);
        fclose(f);
    }
    tensor_free(src);
    tensor_free(dst);
}

static bench_args A;

static void body(void) {
    int gpus = gpu_count();
    if (!A.cpu && gpus == 0) {
        printf("bench_shared_gpu: skipped: no GPU (--cpu runs the protocol over shared memory on host tensors)\n");
        return;
    }
    if (!A.cpu && gpus >= 2) {
        printf("bench_shared_gpu: skipped: %d GPUs; the spawns of 2 ranks would not share one\n", gpus);
        return;
    }
    if (A.cpu) {
        setenv("LECTERN_STAGE_TEST", "1", 1);
        setenv("LECTERN_BACKEND", "mpi", 1);
    } else {
        char file[] = "/tmp/lectern-bench-copy-XXXXXX";
        int fd = mkstemp(file);
        if (fd >= 0) close(fd);
        setenv("BENCH_SHARED_COPY_FILE", file, 1);
        spawn(copy_rate, 1, &A, sizeof A);
        FILE *f = fopen(file, "r");
        if (!f || fscanf(f, "%lf", &A.copy_gbs) != 1) A.copy_gbs = 0;
        if (f) fclose(f);
        remove(file);
    }
    printf("%-15s %8s %5s %-9s %5s %11s %11s%s\n", "collective", "size_MiB", "ranks", "path", "runs", "seconds",
           "busbw_GBs", A.cpu ? "" : " of_copy");
    fflush(stdout);
    for (int world = 2; world <= 4; world += 2)
        for (int ipc = 1; ipc >= 0; ipc--) {
            if (A.cpu) setenv("LECTERN_SHARED_IPC_CPU", ipc ? "1" : "0", 1);
            else setenv("LECTERN_SHARED_IPC", ipc ? "1" : "0", 1);
            spawn(measure, world, &A, sizeof A);
        }
    unsetenv("LECTERN_SHARED_IPC");
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--cpu") == 0) {
            A.cpu = 1;
            for (int j = i; j < argc - 1; j++)
                argv[j] = argv[j + 1];
            argc--;
            break;
        }
    return lecture_main(argc, argv, body);
}
