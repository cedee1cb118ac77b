/*
 * ranks/ranks_mpi.h: the part of the ranks layer's contract that speaks
 * MPI's types, for the files that call MPI themselves (spawn_rank.c, the
 * comm layer, tests and benchmarks comparing with bare MPI calls). The rest
 * include ranks.h alone and never see <mpi.h>.
 */
#ifndef LECTERN_RANKS_MPI_H
#define LECTERN_RANKS_MPI_H

#include <mpi.h>

#include "ranks/ranks.h"

/* In a rank: the communicator of the current spawn's ranks (pool ranks
 * 0..world_size-1). MPI_COMM_WORLD is the whole pool, more ranks than the
 * spawn has: the comm layer runs the spawn's collectives over this, and
 * code that talks MPI directly (a benchmark comparing with bare MPI calls)
 * uses it too. MPI_COMM_NULL outside a rank (spawn_rank.c). */
MPI_Comm lx_rank_comm(void);

#endif /* LECTERN_RANKS_MPI_H */
