/*
 * shared_ipc_shm.c: the CPU test backend of the shared-GPU protocol
 * (shared_ipc.h). The protocol in shared_ipc.c runs on it unchanged, so
 * `make test` checks every case of it on a machine without a GPU
 * (LECTERN_SHARED_IPC_CPU=1, docs/gpu.md):
 *
 *   windows  POSIX shared-memory segments (shm_open + mmap), named
 *            /lectern-ipc-PID-N; the handle is the name. The owner unlinks
 *            the name as soon as every peer has opened it (or when it frees
 *            the window), so a rank that dies leaves nothing in /dev/shm;
 *            the mappings stay valid until unmapped.
 *   events   a 64-bit counter in a segment of its own: record stores the
 *            sequence number (release), and wait checks (acquire) that the
 *            peer has stored at least the number it is told. It does not
 *            spin: on a GPU, waiting for an event the peer has not recorded
 *            yet returns at once, so a protocol that let that happen would
 *            race there. Here it stops the rank with an error.
 *   copies, the reduction  host loops, done at once (the host is the
 *            "stream"; everything queued is done when the call returns)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm/shared_ipc.h"
#include "trace/trace.h"

/* This process's segments, to unlink their names when freed. */
typedef struct made {
    void *p;
    char name[LX_IPC_HANDLE_BYTES];
    struct made *next;
} made;
static made *mine;
static unsigned made_count;

static void say(char *why, size_t size, const char *what, const char *name) {
    snprintf(why, size, "%s %s: %s", what, name, strerror(errno));
}

static void *segment_new(size_t bytes, lx_ipc_handle *h, char *why, size_t why_size) {
    if (bytes == 0) bytes = 1;
    made *m = calloc(1, sizeof *m);
    if (!m) lx_fatal("out of memory");
    snprintf(m->name, sizeof m->name, "/lectern-ipc-%d-%u", (int)getpid(), made_count++);
    int fd = shm_open(m->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        say(why, why_size, "shm_open", m->name);
        free(m);
        return NULL;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        say(why, why_size, "ftruncate", m->name);
        close(fd);
        shm_unlink(m->name);
        free(m);
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        say(why, why_size, "mmap", m->name);
        shm_unlink(m->name);
        free(m);
        return NULL;
    }
    m->p = p;
    m->next = mine;
    mine = m;
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, m->name, strlen(m->name) + 1);
    return p;
}

static void *segment_open(const lx_ipc_handle *h, size_t bytes, char *why, size_t why_size) {
    if (bytes == 0) bytes = 1;
    char name[LX_IPC_HANDLE_BYTES];
    memcpy(name, h->bytes, sizeof name);
    name[sizeof name - 1] = '\0';
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        say(why, why_size, "shm_open", name[0] ? name : "(no name)");
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        say(why, why_size, "mmap", name);
        return NULL;
    }
    return p;
}

/* Unlinks the name of `p` (once): its mappings stay. */
static void forget(void *p) {
    for (made **at = &mine; *at; at = &(*at)->next)
        if ((*at)->p == p) {
            made *m = *at;
            *at = m->next;
            shm_unlink(m->name);
            free(m);
            return;
        }
}

static void segment_free(void *p, size_t bytes) {
    forget(p);
    munmap(p, bytes ? bytes : 1);
}

static float *window_new(size_t bytes, lx_ipc_handle *h, char *why, size_t why_size) {
    return segment_new(bytes, h, why, why_size);
}
static float *window_open(const lx_ipc_handle *h, size_t bytes, char *why, size_t why_size) {
    return segment_open(h, bytes, why, why_size);
}
static void window_close(float *p, size_t bytes) { munmap(p, bytes ? bytes : 1); }
static void window_free(float *p, size_t bytes) { segment_free(p, bytes); }

typedef _Atomic uint64_t counter;

static void *event_new(lx_ipc_handle *h, char *why, size_t why_size) {
    counter *c = segment_new(sizeof *c, h, why, why_size);
    if (c) atomic_store(c, 0);
    return c;
}
static void *event_open(const lx_ipc_handle *h, char *why, size_t why_size) {
    return segment_open(h, sizeof(counter), why, why_size);
}
static void event_close(void *ev) { munmap(ev, sizeof(counter)); }
static void event_free(void *ev) { segment_free(ev, sizeof(counter)); }

static void record(void *ev, uint64_t seq) { atomic_store_explicit((counter *)ev, seq, memory_order_release); }

static void wait_for(void *ev, uint64_t seq) {
    uint64_t now = atomic_load_explicit((counter *)ev, memory_order_acquire);
    if (now < seq)
        lx_fatal("shared-GPU protocol: a wait for a peer's event %llu, which it has recorded only up to %llu: the "
                 "host was told of a record not yet made (on a GPU the wait would not wait)",
                 (unsigned long long)seq, (unsigned long long)now);
}

static void copy(float *dst, const float *src, size_t n) {
    if (n) memmove(dst, src, n * sizeof(float));
}

static void reduce(float *const *out, int n_out, const float *const *in, int n_in, size_t n, int op, float divide_by) {
    for (size_t i = 0; i < n; i++) {
        float acc = in[0][i];
        for (int k = 1; k < n_in; k++) {
            float x = in[k][i];
            if (op == LX_IPC_MIN) acc = x < acc ? x : acc;
            else if (op == LX_IPC_MAX) acc = x > acc ? x : acc;
            else acc += x;
        }
        if (op == LX_IPC_AVG) acc /= divide_by;
        for (int k = 0; k < n_out; k++)
            out[k][i] = acc;
    }
}

static void finish(void) {}

static const lx_ipc_dev shm_dev = {
        .name = "shared memory (the CPU test backend)",
        .window_new = window_new,
        .window_open = window_open,
        .window_close = window_close,
        .window_free = window_free,
        .opened_by_all = forget,
        .event_new = event_new,
        .event_open = event_open,
        .event_close = event_close,
        .event_free = event_free,
        .record = record,
        .wait = wait_for,
        .copy = copy,
        .reduce = reduce,
        .finish = finish,
};

const lx_ipc_dev *lx_ipc_shm_dev(void) { return &shm_dev; }
