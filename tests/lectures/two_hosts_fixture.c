/* Fixture: one spawn whose ranks may sit on two hosts (tests/test_two_hosts.py).
 * Each rank notes the host it runs on and the sum an all-reduce gave it; the
 * second spawn reuses the pool. With TWO_HOSTS_PAUSE=FILE set, the lecture
 * creates FILE.waiting between the spawns and waits (at most 60 s) for FILE,
 * so that the test can stop a host while the pool is up. With
 * TWO_HOSTS_DEADLOCK=1 the second spawn has rank 0 (this host) and rank 4
 * (the other) each receive from the other first: a deadlock across hosts. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"

static void worker(int rank, int world_size, void *p) {
    (void)p;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    /* Rank r holds r+1 in each of 4 elements: the sum is n(n+1)/2. */
    tensor *t = zeros(4, 0, get_device(rank));
    fill_(t, (float)(rank + 1));
    dist_all_reduce(t, DIST_SUM);
    note("rank %d/%d on %s: sum %g %g %g %g", rank, world_size, host, tensor_item(t, 0), tensor_item(t, 1),
         tensor_item(t, 2), tensor_item(t, 3));
    tensor_free(t);
}

/* Each waits for the other's message before sending its own. */
static void crossed(int rank, int world_size, void *p) {
    (void)world_size;
    (void)p;
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) {
        dist_recv(t, 4);
        dist_send(t, 4);
    } else if (rank == 4) {
        dist_recv(t, 0);
        dist_send(t, 0);
    }
    tensor_free(t);
}

static void body(void) {
    note("before the first spawn");
    spawn(worker, 8, NULL, 0);
    note("between the spawns");
    const char *flag = getenv("TWO_HOSTS_PAUSE");
    if (flag && *flag && strlen(flag) < 4000) {
        char waiting[4096];
        strcpy(waiting, flag);
        strcat(waiting, ".waiting");
        int fd = open(waiting, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
        for (int i = 0; i < 1200 && access(flag, F_OK) != 0; i++)
            usleep(50000);
    }
    const char *deadlock = getenv("TWO_HOSTS_DEADLOCK");
    spawn(deadlock && strcmp(deadlock, "1") == 0 ? crossed : worker, 8, NULL, 0);
    note("after the spawns");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
