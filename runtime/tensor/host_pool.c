/*
 * host_pool.c: host tensors' memory, kept once freed for the next tensor of
 * the same size, as the device's stream-ordered pool keeps device memory
 * (tensor_cuda.cu) and as torch's caching allocators do.
 *
 * Why: glibc gives a block of 128 KiB or more an mmap of its own and unmaps
 * it at free (or, once it has seen such blocks freed, takes them from its
 * heap and hands the heap's top back to the kernel). Every new activation of
 * a training step (256 KiB for a micro-batch of lecture_08's pipeline) then
 * costs a page fault and a page of zeros per 4 KiB at first touch, inside
 * the matmul that writes it: a third of a pipeline stage's forward on the
 * 2-core machine, and more on the stage that made more new tensors, so two
 * stages doing the same arithmetic took unequal times
 * (bench/bench_host_alloc.c measures it). A training loop makes the same
 * sizes step after step, so a freed block is kept, by its exact size, and
 * handed to the next tensor of that size: its pages are already there.
 *
 * Bounds: blocks of at least 64 KiB (smaller ones glibc keeps well), at most
 * HOST_POOL_SIZES distinct sizes and HOST_POOL_BYTES in all; beyond those a
 * block is freed. LECTERN_HOST_POOL=0 turns the pool off (the benchmark
 * compares). Under AddressSanitizer the pool is off: ASan's allocator
 * keeps freed memory in quarantine to report a stale pointer, and its leak
 * check counts a kept block as lost.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

enum { HOST_POOL_SIZES = 64, ALIGNMENT = 64 };
#define HOST_POOL_MIN ((size_t)64 << 10)
#define HOST_POOL_BYTES ((size_t)256 << 20)

/* A kept block holds the link to the next one of its size in its first bytes. */
typedef struct kept {
    struct kept *next;
} kept;

static struct {
    size_t bytes; /* 0: an unused bin */
    kept *first;
} bins[HOST_POOL_SIZES];
static size_t kept_bytes;
static int enabled = -1; /* -1: LECTERN_HOST_POOL not read yet */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int pool_on(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 0;
#endif
    if (enabled < 0) {
        const char *env = getenv("LECTERN_HOST_POOL");
        enabled = !(env && strcmp(env, "0") == 0);
    }
    return enabled;
}

/* The bin of blocks of `bytes`, made if `make` and there is room; NULL if none. */
static int bin_of(size_t bytes, int make) {
    int free_bin = -1;
    for (int i = 0; i < HOST_POOL_SIZES; i++) {
        if (bins[i].bytes == bytes) return i;
        if (free_bin < 0 && (bins[i].bytes == 0 || (make && !bins[i].first))) free_bin = i;
    }
    if (!make || free_bin < 0) return -1;
    bins[free_bin].bytes = bytes; /* an empty bin of another size is taken over */
    return free_bin;
}

float *lx_host_alloc(size_t bytes) {
    if (bytes >= HOST_POOL_MIN) {
        pthread_mutex_lock(&lock);
        kept *k = NULL;
        if (pool_on()) {
            int b = bin_of(bytes, 0);
            if (b >= 0 && bins[b].first) {
                k = bins[b].first;
                bins[b].first = k->next;
                kept_bytes -= bytes;
            }
        }
        pthread_mutex_unlock(&lock);
        if (k) return (float *)k;
    }
    void *p = NULL;
    if (posix_memalign(&p, ALIGNMENT, bytes) != 0) return NULL;
    return p;
}

void lx_host_free(float *p, size_t bytes) {
    if (!p) return;
    if (bytes >= HOST_POOL_MIN) {
        pthread_mutex_lock(&lock);
        int b = pool_on() && kept_bytes + bytes <= HOST_POOL_BYTES ? bin_of(bytes, 1) : -1;
        if (b >= 0) {
            kept *k = (kept *)(void *)p;
            k->next = bins[b].first;
            bins[b].first = k;
            kept_bytes += bytes;
        }
        pthread_mutex_unlock(&lock);
        if (b >= 0) return;
    }
    free(p);
}
