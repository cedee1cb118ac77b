/*
 * lecture_test.h: a C test that runs its checks inside a lecture, so they can
 * spawn ranks (tests/comm/test_comm.c, tests/comm/test_comm_stats.c).
 */
#ifndef LECTERN_LECTURE_TEST_H
#define LECTERN_LECTURE_TEST_H

#include <stddef.h>

#include "lectern.h"

/* The test binary's main: in a rank (lectern starts ranks as the same
 * program with arguments), runs lecture_main as the rank. Otherwise makes a
 * fresh folder /tmp/lectern-<name>-XXXXXX into dir (size bytes; the ranks
 * may write their results there, the trace goes there too), runs body as a
 * quiet lecture, removes the folder and returns the lecture's exit status
 * (2 when the folder could not be made). */
int run_test_lecture(int argc, char **argv, void (*body)(void), char *dir, size_t size, const char *name);

/* A ring with blocking calls, in a rank of `world` (2 or more): sends mine
 * to rank + 1 and receives got from rank - 1. Even ranks send first, odd
 * ranks receive first, so no two neighbours both wait to receive. */
void ring_send_recv(tensor *mine, tensor *got, int rank, int world);

#endif /* LECTERN_LECTURE_TEST_H */
