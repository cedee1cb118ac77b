/*
 * memory.c: the heap count of memory.h, from glibc's mallinfo2.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"

int64_t heap_bytes_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 m = mallinfo2();
    return (int64_t)(m.uordblks + m.hblkhd);
#else
    return -1;
#endif
}

int heap_counts(void) {
    const size_t probe = 1u << 20;
    int64_t before = heap_bytes_in_use();
    if (before < 0) return 0;
    char *p = malloc(probe);
    if (!p) return 0;
    memset(p, 1, probe);
    int64_t during = heap_bytes_in_use();
    free(p);
    return during - before >= (int64_t)probe;
}
