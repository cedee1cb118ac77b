/*
 * spawn_backend.c: how a spawn's ranks compute and talk, chosen in the
 * parent before any rank starts, from facts of the machine:
 *
 *   GPUs >= ranks (and NCCL built)  NCCL: rank r on cuda:r
 *   1 <= GPUs < ranks               shared GPUs: rank r on cuda:(r mod GPUs),
 *                                   Open MPI through pinned host buffers
 *   no GPU                          the CPU, Open MPI on host memory
 *
 * A GPU in exclusive-process compute mode (one process per GPU, as some
 * clusters set it; `nvidia-smi -q` shows "Compute Mode") cannot be shared:
 * the second rank's first CUDA call would fail inside the rank. So a spawn
 * that would share one, or use one the lecture process itself already holds,
 * runs on the CPU and its note says why. A prohibited GPU (no process may
 * use it) likewise.
 *
 * On shared GPUs the collectives stage device memory through pinned host
 * buffers, or, where Open MPI was built CUDA-aware, hand it the device
 * pointers (comm_staged.c); the note says which.
 *
 * LECTERN_BACKEND=mpi|nccl forces a backend: mpi the CPU path, nccl NCCL (an
 * error at the spawn() line when there are fewer GPUs than ranks), or, with
 * LECTERN_NCCL_EMULATE=1, NCCL's logic on the CPU emulator (comm/nccl_emu.c).
 */
#include <stdlib.h>
#include <string.h>

#ifdef LECTERN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "check.h"
#include "trace/trace.h"
#include "ranks/ranks.h"
#include "tensor/tensor.h"

enum { MODE_DEFAULT = 0, MODE_PROHIBITED = 2, MODE_EXCLUSIVE_PROCESS = 3 };

/* "cuda:0" or "cuda:0-1" for the GPUs the ranks share. */
static char *gpu_list(int gpus) { return gpus == 1 ? lx_fmt("cuda:0") : lx_fmt("cuda:0-%d", gpus - 1); }

lx_backend lx_choose_backend(int world_size, int gpus, int compute_mode, int parent_on_gpu, const char *forced,
                             int nccl_built, int hostfile, int stage_test, int mpi_cuda_aware, int nccl_emulate,
                             char **reason) {
    if (forced && *forced) {
        /* The emulator needs no GPU and no NCCL: host tensors, comm_nccl.c's logic. */
        if (strcmp(forced, "nccl") == 0 && nccl_emulate) {
            *reason = lx_fmt("LECTERN_BACKEND=nccl, LECTERN_NCCL_EMULATE=1: NCCL's logic (comm_nccl.c) on the NCCL "
                             "emulator, on the CPU with host tensors (%d rank%s)",
                             world_size, lx_plural(world_size));
            return LX_BACKEND_NCCL_EMULATED;
        }
        if (strcmp(forced, "mpi") == 0) {
            *reason = lx_fmt("LECTERN_BACKEND=mpi: Open MPI on host memory (%d rank%s, %d GPU%s)%s", world_size,
                             lx_plural(world_size), gpus, lx_plural(gpus),
                             stage_test ? " (staged in chunks: LECTERN_STAGE_TEST)" : "");
            return stage_test ? LX_BACKEND_STAGED_HOST : LX_BACKEND_MPI;
        }
        if (strcmp(forced, "nccl") == 0) {
            if (nccl_built <= 0)
                lx_fatal("LECTERN_BACKEND=nccl needs a build with CUDA and NCCL, and this one has none "
                         "(no nvcc, or no NCCL found at build time: see `make print-nccl`); "
                         "LECTERN_BACKEND=mpi runs on the CPU, and LECTERN_NCCL_EMULATE=1 runs NCCL's logic on "
                         "its CPU emulator");
            if (hostfile) { /* the other hosts' GPUs cannot be counted from here */
                *reason = lx_fmt("LECTERN_BACKEND=nccl: NCCL on device memory (%d rank%s on the hosts of "
                                 "LECTERN_HOSTFILE)",
                                 world_size, lx_plural(world_size));
                return LX_BACKEND_NCCL;
            }
            if (gpus < world_size)
                lx_fatal("LECTERN_BACKEND=nccl needs one GPU per rank: %d rank%s, %d GPU%s%s", world_size,
                         lx_plural(world_size), gpus, lx_plural(gpus),
                         gpus == 0 ? " (no GPU or no CUDA driver here; LECTERN_BACKEND=mpi runs on the CPU)"
                                   : "; spawn fewer ranks, or leave LECTERN_BACKEND unset to share the GPUs");
            *reason = lx_fmt("LECTERN_BACKEND=nccl: NCCL on device memory (%d rank%s, %d GPU%s)", world_size,
                             lx_plural(world_size), gpus, lx_plural(gpus));
            return LX_BACKEND_NCCL;
        }
        lx_fatal("LECTERN_BACKEND='%s': expected 'mpi' or 'nccl'", forced);
    }
    if (gpus > 0 && compute_mode == MODE_PROHIBITED) {
        *reason = lx_fmt("%d rank%s, %d GPU%s in prohibited compute mode (no process may use it; "
                         "nvidia-smi -c DEFAULT allows it): Open MPI on host memory",
                         world_size, lx_plural(world_size), gpus, lx_plural(gpus));
        return LX_BACKEND_MPI;
    }
    int exclusive = gpus > 0 && compute_mode == MODE_EXCLUSIVE_PROCESS;
    if (nccl_built > 0 && gpus > 0 && world_size <= gpus && !(exclusive && parent_on_gpu)) {
        *reason = lx_fmt("%d rank%s, %d GPU%s: NCCL on device memory", world_size, lx_plural(world_size), gpus,
                         lx_plural(gpus));
        return LX_BACKEND_NCCL;
    }
    if (exclusive) {
        *reason = lx_fmt("%d rank%s, %d GPU%s in exclusive-process compute mode (one process per GPU%s; "
                         "nvidia-smi -c DEFAULT allows sharing): Open MPI on host memory",
                         world_size, lx_plural(world_size), gpus, lx_plural(gpus),
                         parent_on_gpu ? ", and the lecture process holds it already" : "");
        return LX_BACKEND_MPI;
    }
    /* Ranks on other hosts cannot be given this host's GPUs: the CPU. */
    if (gpus > 0 && !hostfile) {
        char *list = gpu_list(gpus);
        /* Without NCCL, ranks that could each have a GPU use Open MPI too. */
        *reason = lx_fmt("%d rank%s %s %d GPU%s (%s); collectives through %s%s", world_size, lx_plural(world_size),
                         world_size > gpus ? "share" : "on", gpus, lx_plural(gpus), list,
                         mpi_cuda_aware ? "CUDA-aware Open MPI" : "Open MPI via host memory",
                         world_size > gpus ? ""
                         : nccl_built < 0  ? " (NCCL could not be loaded)"
                                           : " (this build has no NCCL)");
        free(list);
        return mpi_cuda_aware ? LX_BACKEND_SHARED_CUDA_AWARE : LX_BACKEND_SHARED;
    }
    *reason = lx_fmt("%d rank%s, %d GPU%s: Open MPI on host memory%s", world_size, lx_plural(world_size), gpus,
                     lx_plural(gpus), stage_test ? " (staged in chunks: LECTERN_STAGE_TEST)" : "");
    return stage_test ? LX_BACKEND_STAGED_HOST : LX_BACKEND_MPI;
}

/* The compute mode that decides for the spawn, over every visible GPU: 2
 * (prohibited) if one is, else 3 (exclusive) if one is exclusive-process (or
 * the old exclusive-thread), else 0. cudaDeviceGetAttribute reads a device
 * attribute without making a context on the device, so asking does not
 * itself take an exclusive GPU away from the ranks. */
int lx_gpu_compute_mode(void) {
#ifdef LECTERN_CUDA
    int worst = MODE_DEFAULT;
    for (int d = 0; d < gpu_count(); d++) {
        int mode = cudaComputeModeDefault;
        CUDA_CHECK(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d));
        if (mode == cudaComputeModeProhibited) worst = MODE_PROHIBITED;
        else if ((mode == cudaComputeModeExclusiveProcess || mode == 1) && worst != MODE_PROHIBITED)
            worst = MODE_EXCLUSIVE_PROCESS;
    }
    return worst;
#else
    return MODE_DEFAULT;
#endif
}

/* 1 when this process has put something on a GPU (it holds a context). */
int lx_gpu_held_here(void) { return lx_cuda_in_use(); }
