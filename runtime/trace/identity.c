/*
 * identity.c: who this process is, the lecture or rank r of a spawn of w
 * ranks. Steps carry it, errors and failed checks say it, and the stack
 * walk roots itself by it; a rank sets it once (spawn_rank.c) before its
 * spawned function runs.
 */
#include "trace/trace.h"

static int in_rank, my_rank = -1, my_world = -1;

int lx_in_rank(void) { return in_rank; }
int lx_rank(void) { return in_rank ? my_rank : -1; }
int lx_world_size(void) { return in_rank ? my_world : -1; }

void lx_set_in_rank(int rank, int world_size) {
    in_rank = 1;
    my_rank = rank;
    my_world = world_size;
}

void lx_set_in_lecture(void) { in_rank = 0; }
