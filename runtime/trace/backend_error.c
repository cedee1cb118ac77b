/*
 * backend_error.c: what MPI_CHECK, CUDA_CHECK, CUBLAS_CHECK and comm_nccl.c's NCCL_TRY do when
 * a library call fails (check.h).
 *
 * Where there is a trace to write to (the lecture, or a rank while it runs
 * a spawned function), the library's message becomes an error step at the
 * lecture's line, so "MPI_ERR_TRUNCATE: message truncated" is in the trace
 * and not only on a console nobody kept. Elsewhere (a pool rank between
 * spawns, start-up) it goes to stderr. Either way the process exits 1; a
 * failure while already dying of one goes straight to exit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "trace/trace.h"

/* In a rank: whether it runs a spawned function (the comm layer's
 * lx_comm_active, registered at its start); NULL before then, when a rank
 * is between spawns or starting up. */
static int (*rank_active)(void);

void lx_backend_error_set_rank_active(int (*active)(void)) { rank_active = active; }

void lx_backend_error(const char *lib, const char *msg, const char *file, int line, const char *expr) {
    static int dying;
    int traced = lx_in_rank() ? (rank_active && rank_active()) : lx_out_dir() != NULL;
    if (!dying && traced) {
        dying = 1;
        lx_fatal("%s error: %s (in %s, at %s:%d)", lib, msg, expr, lx_repo_relative(file), line);
    }
    fprintf(stderr, "lectern: %s error at %s:%d: %s\n  in: %s\n", lib, file, line, msg, expr);
    exit(1);
}
