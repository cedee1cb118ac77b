/* Fixture: spawns inside a Slurm allocation (tests/test_slurm.py). Two
 * spawns: 2 ranks (not with SLURM_FIXTURE_ONE=1), then SLURM_FIXTURE_WORLD
 * ranks (default 4). Each rank
 * notes its host, the Slurm job its environment names (mpirun hands the
 * allocation's variables on) and the sum an all-reduce gave it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"

static void worker(int rank, int world_size, void *p) {
    (void)p;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID");
    /* Rank r holds r+1 in each of 4 elements: the sum is n(n+1)/2. */
    tensor *t = zeros(4, 0, get_device(rank));
    fill_(t, (float)(rank + 1));
    dist_all_reduce(t, DIST_SUM);
    note("rank %d/%d on %s in job %s: sum %g %g %g %g", rank, world_size, host, job ? job : "none", tensor_item(t, 0),
         tensor_item(t, 1), tensor_item(t, 2), tensor_item(t, 3));
    tensor_free(t);
}

static void body(void) {
    const char *w = getenv("SLURM_FIXTURE_WORLD");
    int world = w && *w ? atoi(w) : 4;
    const char *one = getenv("SLURM_FIXTURE_ONE");
    note("before the spawns");
    if (!one || strcmp(one, "1") != 0) spawn(worker, 2, NULL, 0);
    spawn(worker, world, NULL, 0); /* MARK:second */
    note("after the spawns");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
