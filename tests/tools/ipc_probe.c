/*
 * ipc_probe: whether ranks sharing this machine's GPU run their collectives
 * on the device through CUDA IPC (runtime/comm/shared_ipc.c), and at what
 * rate. scripts/gpu-check.sh runs it first on a GPU machine. Two ranks on
 * cuda:0; rank 0 prints:
 *
 *   ipc_probe: protocol on (CUDA IPC)         or   ipc_probe: protocol off: WHY
 *   ipc_probe: all-reduce of 1048573 floats on 2 ranks: exact      (or: WRONG at i)
 *   ipc_probe: all-reduce of 64 MiB: 0.000123 s, busbw 123.4 GB/s (median of 5)
 *
 * Exit status 0 when the protocol ran and the result was exact; 1 otherwise.
 * Without a GPU: "ipc_probe: skipped: no GPU", status 0, unless the CPU test
 * backend is asked for (LECTERN_STAGE_TEST=1 LECTERN_SHARED_IPC_CPU=1), which
 * runs the same on host tensors over shared memory (so make test runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"
#include "comm/comm.h"
#include "comm/shared_ipc.h"

enum { ODD = 1048573, RUNS = 5 }; /* a count no world size divides: ragged slices */

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void probe(int rank, int world, void *args) {
    (void)args;
    int dev = get_device(rank);
    if (rank == 0) {
        if (lx_ipc_active()) printf("ipc_probe: protocol on (%s)\n", dev >= 0 ? "CUDA IPC" : "shared memory");
        else printf("ipc_probe: protocol off: %s\n", *lx_stage_ipc_why_not() ? lx_stage_ipc_why_not() : "not tried");
        fflush(stdout);
    }
    if (!lx_ipc_active()) exit(1);
    /* Rank r holds r + 1 + (i mod 7): the sum is exact in float. */
    float *v = malloc(ODD * sizeof(float));
    if (!v) exit(1);
    for (int64_t i = 0; i < ODD; i++)
        v[i] = (float)(rank + 1 + i % 7);
    tensor *t = tensor_from(v, ODD, 0, dev);
    dist_all_reduce(t, DIST_SUM);
    tensor_to_host(t, v);
    int64_t bad = -1;
    for (int64_t i = 0; i < ODD && bad < 0; i++)
        if (v[i] != (float)(world * (world + 1) / 2 + world * (i % 7))) bad = i;
    if (rank == 0) {
        if (bad < 0) printf("ipc_probe: all-reduce of %d floats on %d ranks: exact\n", ODD, world);
        else printf("ipc_probe: all-reduce of %d floats on %d ranks: WRONG at %lld\n", ODD, world, (long long)bad);
        fflush(stdout);
    }
    free(v);
    tensor_free(t);
    if (bad >= 0) exit(1);

    int64_t n = 16 << 20; /* 64 MiB */
    tensor *big = zeros(n, 0, dev);
    double s[RUNS];
    dist_all_reduce(big, DIST_SUM); /* warm-up */
    for (int k = 0; k < RUNS; k++) {
        dist_barrier();
        double t0 = now_seconds();
        dist_all_reduce(big, DIST_SUM);
        device_synchronize();
        s[k] = now_seconds() - t0;
    }
    qsort(s, RUNS, sizeof s[0], cmp);
    if (rank == 0) {
        double bus = (double)n * sizeof(float) / s[RUNS / 2] * 2.0 * (world - 1) / world / 1e9;
        printf("ipc_probe: all-reduce of 64 MiB: %.6f s, busbw %.1f GB/s (median of %d)\n", s[RUNS / 2], bus, RUNS);
        fflush(stdout);
    }
    tensor_free(big);
}

static void body(void) {
    const char *stage = getenv("LECTERN_STAGE_TEST"), *cpu = getenv("LECTERN_SHARED_IPC_CPU");
    int on_cpu = stage && strcmp(stage, "1") == 0 && cpu && strcmp(cpu, "1") == 0;
    if (gpu_count() == 0 && !on_cpu) {
        printf("ipc_probe: skipped: no GPU\n");
        return;
    }
    if (on_cpu) setenv("LECTERN_BACKEND", "mpi", 1);
    spawn(probe, 2, NULL, 0);
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
