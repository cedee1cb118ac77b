/*
 * comm_layer.c: the comm layer's start and stop in a rank, and the table
 * the ranks layer reaches it through (lx_comm_hooks).
 *
 * A spawn's start fills the world (comm_world.c) and picks the backend:
 *
 *   comm_mpi.c     Open MPI on host memory, over the spawn's communicator
 *   comm_nccl.c    NCCL on device memory, one GPU per rank (or on its CPU
 *                  emulator, nccl_emu.c, on host memory)
 *   comm_staged.c  Open MPI on device memory staged through pinned host
 *                  buffers, for ranks that share a GPU
 *
 * behind the traffic counters (comm_stats.c). Its stop completes the
 * requests never waited for (comm_requests.c), frees the groups left
 * (comm_groups.c) and puts the world back to "outside a spawn": a pool rank
 * runs many spawns. This file is the top of the layer: it uses the others,
 * none uses it.
 */
#include "check.h"
#include "comm/comm_calls.h"
#include "comm/comm_progress.h"

void lx_comm_start(lx_backend b, int rank, int world_size, int device) {
    lx_backend_error_set_rank_active(lx_comm_active);
    lx_world_set((lx_world){.rank = rank, .size = world_size, .backend = b, .device = device, .comm = lx_rank_comm()});
    lx_agree_start();
    if (lx_backend_is_nccl(b)) {
        lx_ops = lx_comm_stats_wrap(lx_comm_nccl_start(b == LX_BACKEND_NCCL_EMULATED));
        return;
    }
    if (b == LX_BACKEND_SHARED || b == LX_BACKEND_SHARED_CUDA_AWARE) {
#ifdef LECTERN_CUDA
        if (device < 0) lx_fatal("rank %d of a spawn on shared GPUs sees no GPU (CUDA_VISIBLE_DEVICES?)", rank);
        lx_ops = lx_comm_stats_wrap(
                lx_comm_staged_start(lx_cuda_stage_copier(device), b == LX_BACKEND_SHARED_CUDA_AWARE));
        return;
#else
        lx_fatal("a spawn on shared GPUs reached a rank built without CUDA");
#endif
    }
    if (b == LX_BACKEND_STAGED_HOST) {
        lx_ops = lx_comm_stats_wrap(lx_comm_staged_start(lx_stage_host_copier(), 0));
        return;
    }
    lx_ops = lx_comm_stats_wrap(lx_comm_mpi_start());
}

void lx_comm_stop(void) {
    lx_comm_finish_requests();
    if (lx_ops) lx_comm_free_groups();
    if (lx_ops) lx_ops->stop();
    lx_agree_stop();
    lx_world_reset();
}

/* The pool rank leaves: what the comm layer kept from one spawn to the next. */
static void pool_rank_leaves(void) {
    lx_progress_stop();
    lx_comm_nccl_release();
    lx_comm_staged_release();
}

const lx_comm_hooks *lx_comm_layer(void) {
    static const lx_comm_hooks hooks = {
            .mpi_ready = lx_progress_init,
            .start = lx_comm_start,
            .finish_requests = lx_comm_finish_requests,
            .stop = lx_comm_stop,
            .leave = pool_rank_leaves,
            .mpi_cuda_aware_built = lx_mpi_cuda_aware_built,
            .nccl_usable = lx_nccl_usable,
    };
    return &hooks;
}
