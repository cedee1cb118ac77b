/*
 * comm_world.c: what a rank knows of its spawn, in one place.
 *
 * The world (lx_the_world: rank, size, backend, GPU, communicator), the
 * backend's table that carries the calls (lx_ops), and the group the calls
 * run over now (lx_use_group). Every other file of the comm layer reads
 * these, and this file reads none of them: the backends and the counters
 * below the dist_* calls can depend on it without depending on the calls.
 */
#include "comm/comm.h"

#define OUTSIDE ((lx_world){.rank = 0, .size = 1, .backend = LX_BACKEND_MPI, .device = -1, .comm = MPI_COMM_NULL})

lx_world lx_the_world = OUTSIDE;
const lx_comm_ops *lx_ops; /* NULL outside a rank */

/* NULL: the world. A group between lx_use_group(g) and lx_use_group(NULL). */
static const dist_group *current;
/* The element type of the call being made (lx_use_dtype). */
static dtype current_dtype = DTYPE_F32;

void lx_world_set(lx_world w) {
    lx_the_world = w;
    current = NULL;
    current_dtype = DTYPE_F32;
}

void lx_world_reset(void) {
    lx_the_world = OUTSIDE;
    lx_ops = NULL;
    current = NULL;
    current_dtype = DTYPE_F32;
}

int lx_comm_active(void) { return lx_ops != NULL; }

void lx_use_group(const dist_group *g) {
    current = g;
    lx_ops->use_group(g);
}

int lx_current_size(void) { return current ? current->size : lx_the_world.size; }
int lx_current_rank(void) { return current ? current->rank : lx_the_world.rank; }
const dist_group *lx_current_group(void) { return current; }

void lx_use_dtype(dtype d) { current_dtype = d; }
dtype lx_current_dtype(void) { return current_dtype; }
