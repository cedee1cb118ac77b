/*
 * tensor_track.c: which tensors are alive, where each was made, and what
 * became of the freed ones.
 *
 * Every tensor header (tensor.c's new tensors and views) is allocated here,
 * inside a record that also holds the lecture stack at the call that made
 * it, and the record sits in a list of live tensors. That gives two things
 * a student otherwise learns from a crash or an out-of-memory much later:
 *
 *  - leaks: at the end of each rank's function and of the lecture, tensors
 *    still alive become one warning step per line that made them (count and
 *    bytes), stamped with the stack of that line;
 *  - double free and use after free: tensor_free does not give the header
 *    back at once. It frees the data, marks the header freed (remembering
 *    where), points its data at an address no mapping uses (LX_POISON), and
 *    keeps it in a quarantine of the last LX_QUARANTINE freed headers. A
 *    second tensor_free, or a tensor call given it, is then named as what it
 *    is; a raw access through ->data (or a collective) faults at LX_POISON,
 *    which crash.c names too.
 *
 * The same list answers tensor_bytes_live(device): the bytes of storage the
 * live tensors on a device own.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "trace/trace.h"

#define MAGIC_LIVE 0x7e45a11eu
#define MAGIC_FREED 0xf8eedbadu
#define LX_QUARANTINE 4096

typedef struct rec {
    tensor t; /* first: a tensor * is a rec * */
    uint32_t magic;
    int n_made;
    lx_frame *made;          /* the lecture stack at the making call */
    lx_frame freed;          /* the tensor_free call (line 0: unknown) */
    int busy;                /* requests still using the data (dist_isend, ...) */
    int busy_written;        /* of those, the ones the library writes into */
    const char *busy_call;   /* the latest such request's call ... */
    lx_frame busy_at;        /* ... and the line that made it (line 0: unknown) */
    struct rec *prev, *next; /* the live list */
} rec;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rec *live; /* newest first */
static rec *quarantine[LX_QUARANTINE];
static int q_next;

tensor *lx_tensor_alloc(void) {
    rec *r = calloc(1, sizeof *r);
    if (!r) lx_fatal("out of memory for a tensor");
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    if (n > 0) {
        r->made = malloc((size_t)n * sizeof *r->made);
        if (!r->made) lx_fatal("out of memory for a tensor");
        memcpy(r->made, frames, (size_t)n * sizeof *frames);
        r->n_made = n;
    }
    r->magic = MAGIC_LIVE;
    pthread_mutex_lock(&lock);
    r->next = live;
    if (live) live->prev = r;
    live = r;
    pthread_mutex_unlock(&lock);
    return &r->t;
}

static void unlink_live(rec *r) {
    if (r->prev) r->prev->next = r->next;
    else live = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* "lectures/x.c:12" or "an unknown line". */
static char *site(const lx_frame *f, int known) {
    return known ? lx_fmt("%s:%d", f->path, f->line) : strdup("a line outside the lecture's code");
}

void lx_tensor_check(const tensor *t, const char *op) {
    const rec *r = (const rec *)t;
    if (r->magic == MAGIC_LIVE) return;
    if (r->magic == MAGIC_FREED) {
        char *made = site(r->n_made ? &r->made[r->n_made - 1] : NULL, r->n_made > 0);
        char *freed = site(&r->freed, r->freed.line > 0);
        char *msg = lx_fmt("%s: use after free: this tensor (made at %s) was freed at %s", op, made, freed);
        free(made);
        free(freed);
        lx_fatal("%s", msg);
    }
    lx_fatal("%s: this is not a tensor made by lectern (freed long ago, or never made by "
             "zeros/randn/tensor_from/...)",
             op);
}

int tensor_was_freed(const tensor *t) {
    if (!t) {
        lx_error("tensor_was_freed: the tensor is NULL");
        return 0;
    }
    const rec *r = (const rec *)t;
    if (r->magic == MAGIC_FREED) return 1;
    if (r->magic != MAGIC_LIVE) lx_error("tensor_was_freed: this is not a tensor made by lectern");
    return 0;
}

/* ---- tensors a request is still using ----
 *
 * After dist_isend(t) the library may still be reading t; after dist_irecv(t)
 * or an *_async collective it may still be writing it. Until dist_wait, the
 * lecture must not change the first kind nor touch the second: doing so
 * races with the transfer and fails silently (the receiver gets the old
 * value, the new one or a mix). comm_requests.c marks the tensors a request uses and
 * unmarks them at its wait; the runtime's tensor operations ask here first
 * (lx_tensor_read / lx_tensor_write), so the mistake is an error at its own
 * line, naming the request's. */

void lx_tensor_busy(const tensor *t, const char *call, const lx_frame *at, int library_writes) {
    rec *r = (rec *)t;
    pthread_mutex_lock(&lock);
    r->busy++;
    if (library_writes) r->busy_written++;
    r->busy_call = call;
    if (at) r->busy_at = *at;
    else memset(&r->busy_at, 0, sizeof r->busy_at);
    pthread_mutex_unlock(&lock);
}

void lx_tensor_idle(const tensor *t, int library_writes) {
    rec *r = (rec *)t;
    if (r->magic != MAGIC_LIVE) return; /* freed meanwhile: named elsewhere */
    pthread_mutex_lock(&lock);
    if (r->busy > 0) r->busy--;
    if (library_writes && r->busy_written > 0) r->busy_written--;
    pthread_mutex_unlock(&lock);
}

/* The use of a tensor a request still uses, an error at the line of the
 * use. When that line is inside a function the request's own function
 * calls (a homework's given zero3_layer(), called by the student's
 * zero3_forward(), which started the gather), the call in the request's
 * function is the line to change: the error is put there, and names the
 * line inside too. */
static void busy_error(const rec *r, const char *op, const char *verb) {
    char *at = site(&r->busy_at, r->busy_at.line > 0);
    int written = r->busy_written > 0;
    const char *doing = written ? "writing into" : "sending";
    const char *risk = written ? "the tensor may hold the old value, the new one, or a mix"
                               : "the receiver may get the old value, the new one, or a mix";
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    int caller = -1;
    for (int k = n - 2; k >= 0 && r->busy_at.line > 0; k--)
        if (frames[k].path == r->busy_at.path && strcmp(frames[k].function, r->busy_at.function) == 0) {
            caller = k;
            break;
        }
    if (caller >= 0) {
        const lx_frame *in = &frames[n - 1];
        lx_fatal_at(frames, caller + 1,
                    "%s: %s a tensor that %s at %s is still %s: this call runs %s(), whose %s at %s:%d %s it; "
                    "call dist_wait on that request before this call (until it returns, %s)",
                    in->function, verb, r->busy_call, at, doing, in->function, op, in->path, in->line,
                    written ? "reads" : "changes", risk);
    }
    lx_fatal("%s: %s a tensor that %s at %s is still %s: call dist_wait on that request first (until it returns, %s)",
             op, verb, r->busy_call, at, doing, risk);
}

void lx_tensor_read(const tensor *t, const char *op) {
    lx_tensor_check(t, op);
    const rec *r = (const rec *)t;
    if (r->busy_written > 0) busy_error(r, op, "reads");
}

void lx_tensor_write(const tensor *t, const char *op) {
    lx_tensor_check(t, op);
    const rec *r = (const rec *)t;
    if (r->busy > 0) busy_error(r, op, "changes");
}

/* Gives the header back for good (the quarantine's oldest, or at exit). */
static void destroy(rec *r) {
    free(r->made);
    free(r);
}

/* Before any of t's memory goes: a second free, or a tensor a request still
 * uses (a progress thread may be reading it at this moment), stop here. */
static void may_free(tensor *t) {
    rec *r = (rec *)t;
    if (r->magic == MAGIC_FREED) {
        char *made = site(r->n_made ? &r->made[r->n_made - 1] : NULL, r->n_made > 0);
        char *freed = site(&r->freed, r->freed.line > 0);
        char *msg = lx_fmt("tensor_free: double free: this tensor (made at %s) was already freed at %s", made, freed);
        free(made);
        free(freed);
        lx_fatal("%s", msg);
    }
    lx_tensor_write(t, "tensor_free");
}

static void quarantine_header(tensor *t) {
    rec *r = (rec *)t;
    may_free(t);
    lx_frame frames[LX_MAX_FRAMES];
    int n = lx_stack_capture(frames, LX_MAX_FRAMES);
    pthread_mutex_lock(&lock);
    unlink_live(r);
    r->magic = MAGIC_FREED;
    if (n > 0) r->freed = frames[n - 1];
    t->data = (float *)LX_POISON;
    t->raw = (void *)LX_POISON;
    t->str = NULL;
    t->owns_data = 0;
    rec *old = quarantine[q_next];
    quarantine[q_next] = r;
    q_next = (q_next + 1) % LX_QUARANTINE;
    pthread_mutex_unlock(&lock);
    if (old) destroy(old);
}

/* Here, beside lx_tensor_alloc, so a header's life is in one file: its
 * data goes back at once, the header is kept a while (quarantine_header). */
void tensor_free(tensor *t) {
    if (!t) return;
    may_free(t); /* a double free or a busy tensor is named before its memory goes */
    if (t->owns_data && t->raw) {
        if (t->device >= 0) lx_cuda_free(t->device, t->raw);
        else lx_host_free(t->raw, (size_t)t->numel * dtype_size(t->dt));
    }
    free(t->str);
    quarantine_header(t); /* poisoned and kept a while: a second free is named */
}

/* The bytes of storage a tensor owns: none for a view (row_slice,
 * tensor_view, reshape), whose storage is its original's. */
static int64_t storage_bytes(const rec *r) { return r->t.owns_data ? r->t.numel * (int64_t)dtype_size(r->t.dt) : 0; }

int64_t tensor_bytes_live(int device) {
    if (device < -1) lx_fatal("tensor_bytes_live: device %d is neither the CPU (-1) nor a GPU (0, 1, ...)", device);
    int64_t bytes = 0;
    pthread_mutex_lock(&lock);
    for (const rec *r = live; r; r = r->next)
        if (r->t.device == device) bytes += storage_bytes(r);
    pthread_mutex_unlock(&lock);
    return bytes;
}

/* One site's leaked tensors. */
typedef struct leak {
    rec *first; /* its stack stands for the site */
    int64_t count, bytes;
} leak;

static int same_site(const rec *a, const rec *b) {
    if (a->n_made == 0 || b->n_made == 0) return a->n_made == b->n_made;
    const lx_frame *x = &a->made[a->n_made - 1], *y = &b->made[b->n_made - 1];
    return x->line == y->line && x->path == y->path; /* paths are interned */
}

static char *bytes_text(int64_t b) {
    if (b >= (1 << 20)) return lx_fmt("%.1f MB", (double)b / (1 << 20));
    if (b >= 1024) return lx_fmt("%.1f kB", (double)b / 1024);
    return lx_fmt("%" PRId64 " bytes", b);
}

int lx_tensor_leaks(const char *when, int release) {
    pthread_mutex_lock(&lock);
    int n_sites = 0, cap = 0;
    leak *sites = NULL;
    int64_t total = 0, total_bytes = 0;
    for (rec *r = live; r; r = r->next) {
        int64_t b = storage_bytes(r);
        int k = 0;
        while (k < n_sites && !same_site(sites[k].first, r))
            k++;
        if (k == n_sites) {
            if (n_sites == cap) {
                cap = cap ? 2 * cap : 16;
                leak *grown = realloc(sites, (size_t)cap * sizeof *sites);
                if (!grown) abort();
                sites = grown;
            }
            sites[n_sites++] = (leak){r, 0, 0};
        }
        sites[k].first = r; /* the list is newest first: end on the oldest */
        sites[k].count++;
        sites[k].bytes += b;
        total++;
        total_bytes += b;
    }
    pthread_mutex_unlock(&lock);
    if (total == 0) {
        free(sites);
        return 0;
    }
    char *all = bytes_text(total_bytes);
    if (lx_rank() >= 0)
        fprintf(stderr, "lectern: rank %d: warning: %" PRId64 " tensor%s (%s) still alive at the end of %s\n",
                lx_rank(), total, total == 1 ? "" : "s", all, when);
    else
        fprintf(stderr, "lectern: warning: %" PRId64 " tensor%s (%s) still alive at the end of %s\n", total,
                total == 1 ? "" : "s", all, when);
    free(all);
    /* Oldest site first, in the order the lecture made them. */
    for (int k = n_sites - 1; k >= 0; k--) {
        rec *r = sites[k].first;
        char *b = bytes_text(sites[k].bytes);
        char *where = site(r->n_made ? &r->made[r->n_made - 1] : NULL, r->n_made > 0);
        char *msg = lx_fmt("%s: %" PRId64 " tensor%s (%s) made here %s still alive at the end of %s: "
                           "free each with tensor_free() when done with it",
                           where, sites[k].count, sites[k].count == 1 ? "" : "s", b, sites[k].count == 1 ? "is" : "are",
                           when);
        /* The line on the console as in the viewer: the summary above
         * says how many, each of these says where. */
        if (lx_rank() >= 0) fprintf(stderr, "lectern: rank %d: warning: %s\n", lx_rank(), msg);
        else fprintf(stderr, "lectern: warning: %s\n", msg);
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "type", "warning");
        lx_add_text(w, "data", msg);
        lx_emit_frames(r->made, r->n_made, w);
        free(msg);
        free(where);
        free(b);
    }
    free(sites);
    /* A pool rank lives on for the next spawn: give the memory back, as the
     * end of a process would, and keep the headers poisoned. */
    if (release) {
        for (;;) {
            pthread_mutex_lock(&lock);
            rec *r = live;
            pthread_mutex_unlock(&lock);
            if (!r) break;
            tensor_free(&r->t);
            r->freed.line = 0; /* freed by the runtime, not at a lecture line */
        }
    }
    return (int)total;
}
