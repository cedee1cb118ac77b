/*
 * spawn_result.c: values a rank hands back to the lecture.
 *
 * torch's mp.spawn returns nothing; people pass a queue. Here a rank calls
 * spawn_return(data, size) inside its function: the bytes travel over the
 * rank's socket to the lecture (a MSG_RESULT message, ahead of its "done"
 * on the same stream, so they are in by the time spawn() returns), and the
 * lecture reads them with spawn_result(rank, out, cap). The rank side is in
 * spawn_rank.c; this file keeps what arrived, for the latest spawn only.
 */
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

static struct {
    char *data; /* NULL: the rank returned nothing */
    size_t size;
    int returned;
} results[LECTERN_MAX_WORLD];
static int results_world; /* the latest spawn's world size (0: no spawn yet) */

void lx_spawn_results_clear(int world_size) {
    for (int r = 0; r < LECTERN_MAX_WORLD; r++) {
        free(results[r].data);
        results[r].data = NULL;
        results[r].size = 0;
        results[r].returned = 0;
    }
    results_world = world_size;
}

void lx_spawn_results_put(int rank, char *body, size_t size) {
    if (rank < 0 || rank >= LECTERN_MAX_WORLD || results[rank].returned) {
        free(body); /* the rank side refuses a second return: a stray message */
        return;
    }
    results[rank].data = body;
    results[rank].size = size;
    results[rank].returned = 1;
}

size_t spawn_result(int rank, void *out, size_t cap) {
    if (!out && cap > 0) {
        lx_error("spawn_result(%d): out is NULL but cap is %zu", rank, cap);
        return 0;
    }
    if (lx_in_rank()) {
        lx_error("spawn_result() inside a spawned rank: it reads, in the lecture, what the ranks of the last "
                 "spawn returned");
        return 0;
    }
    if (results_world == 0) {
        lx_error("spawn_result(%d): no spawn has run yet", rank);
        return 0;
    }
    if (rank < 0 || rank >= results_world) {
        lx_error("spawn_result(%d): the last spawn had ranks 0 to %d", rank, results_world - 1);
        return 0;
    }
    size_t size = results[rank].size;
    if (!out) return size; /* out NULL and cap 0: asking for the size */
    if (size > cap) {
        lx_error("spawn_result(%d): rank %d returned %zu bytes, more than the %zu of out: nothing copied", rank, rank,
                 size, cap);
        return size;
    }
    if (size) memcpy(out, results[rank].data, size);
    return size;
}
