/*
 * memory.h: how many bytes the C heap holds in use, for a lecture that
 * measures what its tensors cost (host tensors live on the heap: the
 * runtime allocates them with posix_memalign).
 *
 * The runtime keeps a list of live tensors (runtime/tensor/tensor_track.c)
 * but lectern.h offers no count of their bytes; glibc's own count
 * (mallinfo2) stands in for it. It counts every allocation, not only
 * tensors: a tensor's header and the stack recorded with it (a few hundred
 * bytes to a few KiB) come with it, and anything else the process
 * allocates in between does too, so measure around a region that makes
 * only tensors.
 */
#ifndef LECTERN_MEMORY_H
#define LECTERN_MEMORY_H

#include <stdint.h>

/* Bytes in use on the heap now (small blocks in use plus blocks mapped on
 * their own), or -1 where the allocator does not report them (a
 * sanitizer's allocator replaces glibc's: heap_counts() says whether the
 * count moves). */
int64_t heap_bytes_in_use(void);

/* 1 when heap_bytes_in_use() follows allocations here: a 1 MiB block
 * allocated and touched moves it by at least 1 MiB. */
int heap_counts(void);

#endif /* LECTERN_MEMORY_H */
