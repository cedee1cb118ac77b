/*
 * lecture_checkpoints: a sharded checkpoint of ZeRO-3 training, a rank that
 * dies while writing one, a restart from the last complete checkpoint, the
 * checkpoint loaded by fewer and by more ranks, damaged shards refused and
 * training resumed from the checkpoint before, and a checkpoint written in
 * the background (a thread per rank) while training goes on.
 *
 *     make run LECTURE=lecture_checkpoints
 *
 * Every checkpoint is real files under the lecture's output folder
 * (lecture_out_dir(), in lecture_checkpoints.tmp.files/), removed when the
 * lecture ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "lib/mlp.h"

/* 4 ranks, a checkpoint every 2 steps; rank 2 dies writing the one at step 4.
 * The blocking and asynchronous checkpoints are timed over TIMED steps. */
enum {
    WORLD = 4,
    RESHARD = 2,
    STEPS = 6,
    EVERY = 2,
    CRASH_RANK = 2,
    CRASH_STEP = 4,
    TIMED = 40,
    GROW = 8,
    SLOW_RANK = 3
};
enum { BATCH = 64, WIDTH = 64, LAYERS = 3, PATH_LEN = 512 };

static mlp_config config(void) {
    return (mlp_config){.batch = BATCH, .width = WIDTH, .layers = LAYERS, .steps = STEPS, .lr = 1e-2f};
}

/* ------------------------------------------------------------------ */
/* The training state and one ZeRO-3 step                              */
/* ------------------------------------------------------------------ */

/* A rank's shard: rows [first, first + rows) of every layer, with AdamW's
 * two moments for those rows and its step count. */
typedef struct shard {
    int64_t first, rows;
    tensor *piece[MAX_LAYERS], *grad[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
} shard;

static shard shard_new(const mlp_config *c, int rank, int world, int device) {
    shard s = {.rows = c->width / world, .first = rank * (c->width / world)};
    for (int i = 0; i < c->layers; i++) {
        tensor *w = init_layer(c, i, device);
        tensor *band = row_slice(w, s.first, s.first + s.rows);
        s.piece[i] = to_device(band, device);
        tensor_free(band);
        tensor_free(w);
        s.grad[i] = empty(s.rows, c->width, device);
        s.opt[i] = adamw_new(s.piece[i], c->lr);
    }
    return s;
}

static void shard_free(shard *s, const mlp_config *c) {
    for (int i = 0; i < c->layers; i++) {
        tensor_free(s->piece[i]);
        tensor_free(s->grad[i]);
        adamw_free(s->opt[i]);
    }
}

static tensor *gather_layer(const tensor *piece, const mlp_config *c) {
    tensor *w = empty(c->width, c->width, piece->device);
    dist_all_gather(w, piece); /* the pieces are bands of rows, in rank order */
    return w;
}

/* One step of ZeRO-3 on this rank's slice of the batch; returns the loss of
 * the whole batch (every rank's mean, averaged: the slices are equal). */
static float zero3_step(const mlp_config *c, shard *s, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    acts[0] = x;
    for (int i = 0; i < c->layers; i++) {
        tensor *w = gather_layer(s->piece[i], c);
        acts[i + 1] = layer_forward(acts[i], w, &pre[i]);
        tensor_free(w);
    }
    float mine = mse_loss(acts[c->layers]);
    tensor *loss = tensor_from(&mine, 1, 0, x->device);
    dist_all_reduce(loss, DIST_AVG);
    float whole = tensor_item(loss, 0);
    tensor_free(loss);
    tensor *dy = mse_loss_backward(acts[c->layers]);
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *w = gather_layer(s->piece[i], c);
        tensor *grad = empty(c->width, c->width, x->device), *dx = NULL;
        layer_backward(acts[i], pre[i], w, dy, grad, i > 0 ? &dx : NULL, 0.0f);
        dist_reduce_scatter(s->grad[i], grad, DIST_AVG); /* my rows of the average */
        tensor_free(w);
        tensor_free(grad);
        tensor_free(dy);
        dy = dx;
    }
    for (int i = 0; i < c->layers; i++)
        adamw_step(s->opt[i], s->piece[i], s->grad[i]);
    free_saved(c->layers, acts, pre);
    return whole;
}

/* ------------------------------------------------------------------ */
/* The checkpoint on disk                                              */
/* ------------------------------------------------------------------ */

/* A shard file: this header, then for each layer its rows of the weights,
 * of AdamW's first moment and of its second, float32, row by row. */
typedef struct shard_header {
    char magic[8]; /* "LXSHARD1" */
    int32_t rank, world, layers, width, rows, step;
} shard_header;

static int64_t shard_bytes(const mlp_config *c, int world) {
    return (int64_t)sizeof(shard_header) + 3LL * c->layers * (c->width / world) * c->width * (int64_t)sizeof(float);
}

/* What a manifest says: the step the checkpoint holds, the loss of every
 * step before it (the run's log), and each shard's file size and xxh64. */
typedef struct manifest {
    int step, world;
    double loss[TIMED];
    int64_t bytes[LECTERN_MAX_WORLD];
    uint64_t hash[LECTERN_MAX_WORLD];
} manifest;

static void step_dir(char *out, const char *run, int step) { snprintf(out, PATH_LEN, "%s/step-%d", run, step); }
static void shard_path(char *out, const char *dir, int k) { snprintf(out, PATH_LEN, "%s/rank-%d.shard", dir, k); }

/* Write `n` bytes to `path` so that `path` is either its old self or all of
 * them: into path.tmp, flushed to the disk, then renamed over path (a rename
 * within one folder is atomic). `die_after` >= 0: abort() after that many
 * bytes, as a machine that dies mid-write. */
static void write_atomically(const char *path, const void *data, size_t n, long die_after) {
    char tmp[PATH_LEN + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) lecture_fail("cannot create %s: %s", tmp, strerror(errno));
    if (die_after >= 0) {
        fwrite(data, 1, (size_t)die_after, f);
        fflush(f);
        abort(); /* the rank dies here: half a temporary file, no rename */
    }
    if (fwrite(data, 1, n, f) != n || fflush(f) != 0 || fsync(fileno(f)) != 0)
        lecture_fail("cannot write %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0) lecture_fail("cannot close %s: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) lecture_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}

static void make_dir(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) lecture_fail("cannot create %s: %s", path, strerror(errno));
}

/* This rank's shard as bytes: header, then weights, m, v of each layer. */
static unsigned char *shard_to_bytes(const mlp_config *c, const shard *s, int rank, int world, int step, int64_t *n) {
    *n = shard_bytes(c, world);
    unsigned char *buf = malloc((size_t)*n);
    if (!buf) lecture_fail("out of memory for a shard of %lld bytes", (long long)*n);
    shard_header h = {.magic = "LXSHARD1", rank, world, c->layers, c->width, (int32_t)s->rows, step};
    memcpy(buf, &h, sizeof h);
    float *at = (float *)(buf + sizeof h);
    for (int i = 0; i < c->layers; i++) {
        const tensor *parts[3] = {s->piece[i], s->opt[i]->m, s->opt[i]->v};
        for (int j = 0; j < 3; j++, at += s->rows * c->width)
            tensor_to_host(parts[j], at);
    }
    return buf;
}

typedef struct write_figures {
    int64_t bytes;
    double seconds;
} write_figures;

static void manifest_path(char *out, const char *dir) { snprintf(out, PATH_LEN + 16, "%s/manifest", dir); }

/* The manifest of the checkpoint at `step`, agreed by every rank: each hands
 * rank 0 its shard's size and xxh64 in a gather, which completes only once
 * every rank has come to it, and each comes only when its shard's file is
 * renamed into place. Rank 0 gets the manifest's text (*len bytes, the
 * caller writes and frees it); the other ranks get NULL. */
static char *manifest_text(int step, const double *loss, int64_t n, uint64_t hash, int *len) {
    int rank = dist_rank(), world = dist_world_size();
    /* size and hash to rank 0, the hash as four exact 16-bit pieces */
    float mine[5] = {(float)n};
    for (int k = 0; k < 4; k++)
        mine[1 + k] = (float)((hash >> (16 * k)) & 0xffff);
    tensor *in = tensor_from(mine, 1, 5, get_device(rank)), *all = zeros(world, 5, get_device(rank));
    dist_gather(all, in, 0);
    char *text = NULL;
    if (rank == 0) {
        enum { CAP = 8192 };
        text = malloc(CAP);
        if (!text) lecture_fail("out of memory for a manifest");
        *len = snprintf(text, CAP, "lectern checkpoint 1\nstep %d\nworld %d\n", step, world);
        for (int t = 0; t < step; t++)
            *len += snprintf(text + *len, CAP - (size_t)*len, "loss %d %a\n", t, loss[t]);
        for (int k = 0; k < world; k++) {
            uint64_t h = 0;
            for (int j = 0; j < 4; j++)
                h |= (uint64_t)tensor_item(all, k * 5 + 1 + j) << (16 * j);
            *len += snprintf(text + *len, CAP - (size_t)*len, "shard %d %lld %016llx\n", k,
                             (long long)tensor_item(all, k * 5), (unsigned long long)h);
        }
    }
    tensor_free(in);
    tensor_free(all);
    return text;
}

/* Every rank writes its shard; then rank 0, having every shard's size and
 * hash (which it can only have once every rank has renamed its file),
 * writes the manifest: last, so a manifest names only complete shards. */
static write_figures save_checkpoint(const mlp_config *c, const shard *s, const char *run, int step, const double *loss,
                                     int crash) {
    int rank = dist_rank(), world = dist_world_size();
    char dir[PATH_LEN], path[PATH_LEN], manifest_at[PATH_LEN + 16];
    step_dir(dir, run, step);
    make_dir(dir);
    shard_path(path, dir, rank);
    manifest_path(manifest_at, dir);
    double t0 = now_seconds();
    int64_t n;
    unsigned char *bytes = shard_to_bytes(c, s, rank, world, step, &n);
    uint64_t hash = XXH64(bytes, (size_t)n, 0);
    write_atomically(path, bytes, (size_t)n, crash && rank == CRASH_RANK && step == CRASH_STEP ? n / 2 : -1);
    write_figures f = {n, now_seconds() - t0};
    free(bytes);
    int len;
    char *text = manifest_text(step, loss, n, hash, &len);
    if (text) write_atomically(manifest_at, text, (size_t)len, -1);
    free(text);
    return f;
}

/* ------------------------------------------------------------------ */
/* The asynchronous checkpoint                                          */
/* ------------------------------------------------------------------ */

/* A file written on a thread of its own, from a buffer that thread owns
 * until it is joined, while the rank's training goes on. */
typedef struct writer {
    pthread_t thread;
    int running;
    char path[PATH_LEN + 16];
    unsigned char *bytes;
    int64_t n;
    long die_after;          /* >= 0: die after that many bytes (as write_atomically) */
    const atomic_int *steps; /* the training steps made, which a dying write waits on */
    int steps_at_start;
    double seconds; /* the write, on the writer's thread */
} writer;

static void *write_in_background(void *arg) {
    writer *w = arg;
    /* A write that dies, dies while training goes on: after the rank has
     * made one more step than when the write began. */
    while (w->die_after >= 0 && atomic_load(w->steps) == w->steps_at_start)
        usleep(1000);
    double t0 = now_seconds();
    write_atomically(w->path, w->bytes, (size_t)w->n, w->die_after);
    w->seconds = now_seconds() - t0;
    return NULL;
}

static void writer_start(writer *w, const char *path, unsigned char *bytes, int64_t n, long die_after,
                         const atomic_int *steps) {
    snprintf(w->path, sizeof w->path, "%s", path);
    w->bytes = bytes, w->n = n, w->die_after = die_after, w->steps = steps;
    w->steps_at_start = atomic_load(steps);
    int rc = pthread_create(&w->thread, NULL, write_in_background, w);
    if (rc != 0) lecture_fail("cannot start a thread to write %s: %s", path, strerror(rc));
    w->running = 1;
}

/* Waits until the writer's file is renamed into place and frees its buffer;
 * the seconds the write took on its thread (0: none was running). */
static double writer_join(writer *w) {
    if (!w->running) return 0;
    int rc = pthread_join(w->thread, NULL);
    if (rc != 0) lecture_fail("cannot join the thread writing %s: %s", w->path, strerror(rc));
    w->running = 0;
    free(w->bytes);
    w->bytes = NULL;
    return w->seconds;
}

/* A rank's checkpoint in the background: its shard being written, and (on
 * rank 0) the manifest of the checkpoint before being written. */
typedef struct background {
    writer shard, manifest;
    int step; /* the checkpoint whose shard is being written (0: none) */
    char dir[PATH_LEN];
    uint64_t hash;
    atomic_int steps; /* the training steps this rank made */
} background;

/* Finishes the checkpoint begun last: this rank's shard on the disk (the
 * join), then the agreement (the gather: every rank's shard is on the disk)
 * and rank 0's manifest, handed to a thread as well. The seconds the shard's
 * write took on its thread. */
static double finish_async(background *bg, const double *loss) {
    if (!bg->step) return 0;
    double seconds = writer_join(&bg->shard);
    int len;
    char *text = manifest_text(bg->step, loss, bg->shard.n, bg->hash, &len);
    if (text) {
        char path[PATH_LEN + 16];
        manifest_path(path, bg->dir);
        writer_join(&bg->manifest); /* the manifest before, long written */
        writer_start(&bg->manifest, path, (unsigned char *)text, len, -1, &bg->steps);
    }
    bg->step = 0;
    return seconds;
}

/* Begins the checkpoint at `step`: finishes the one before, copies this
 * rank's shard to host memory and hashes the copy (the stall: training
 * waits for this copy alone), and hands the copy to a writer thread.
 * Returns the seconds the previous shard's write took on its thread. */
static double save_async(background *bg, const mlp_config *c, const shard *s, const char *run, int step,
                         const double *loss, int crash) {
    double previous = finish_async(bg, loss);
    int rank = dist_rank(), world = dist_world_size();
    char path[PATH_LEN];
    step_dir(bg->dir, run, step);
    make_dir(bg->dir);
    shard_path(path, bg->dir, rank);
    int64_t n;
    unsigned char *snapshot = shard_to_bytes(c, s, rank, world, step, &n);
    bg->hash = XXH64(snapshot, (size_t)n, 0);
    bg->step = step;
    writer_start(&bg->shard, path, snapshot, n, crash && rank == CRASH_RANK && step == CRASH_STEP ? n / 2 : -1,
                 &bg->steps);
    return previous;
}

/* The whole of a file, or NULL (errno set). */
static unsigned char *read_file(const char *path, int64_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)*n + 1);
    if (buf && fread(buf, 1, (size_t)*n, f) != (size_t)*n) free(buf), buf = NULL;
    fclose(f);
    if (buf) buf[*n] = 0;
    return buf;
}

/* Reads dir's manifest into *m: 0, or 1 with why it cannot. */
static int read_manifest(const char *dir, manifest *m, char *why, size_t cap) {
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/manifest", dir);
    int64_t n;
    char *text = (char *)read_file(path, &n);
    if (!text) return snprintf(why, cap, "%s: no manifest (%s)", path, strerror(errno)), 1;
    memset(m, 0, sizeof *m);
    int ok = sscanf(text, "lectern checkpoint 1\nstep %d\nworld %d\n", &m->step, &m->world) == 2 && m->step >= 0 &&
             m->step <= TIMED && m->world >= 1 && m->world <= LECTERN_MAX_WORLD;
    int losses = 0, shards = 0;
    for (char *line = strtok(text, "\n"); ok && line; line = strtok(NULL, "\n")) {
        int k;
        double v;
        long long bytes;
        unsigned long long h;
        if (sscanf(line, "loss %d %la", &k, &v) == 2 && k >= 0 && k < m->step) m->loss[k] = v, losses++;
        else if (sscanf(line, "shard %d %lld %llx", &k, &bytes, &h) == 3 && k >= 0 && k < m->world)
            m->bytes[k] = bytes, m->hash[k] = h, shards++;
    }
    free(text);
    if (!ok || losses != m->step || shards != m->world)
        return snprintf(why, cap, "%s: not a complete manifest", path), 1;
    return 0;
}

/* Shard k of the checkpoint in dir, checked against its manifest: its
 * bytes, or NULL with why (the file and the shard named). */
static unsigned char *read_shard(const char *dir, const manifest *m, int k, char *why, size_t cap) {
    char path[PATH_LEN];
    shard_path(path, dir, k);
    int64_t n;
    unsigned char *bytes = read_file(path, &n);
    if (!bytes) return snprintf(why, cap, "%s (shard %d of %d): %s", path, k, m->world, strerror(errno)), NULL;
    if (n != m->bytes[k])
        snprintf(why, cap, "%s (shard %d of %d): %lld bytes, the manifest says %lld: truncated", path, k, m->world,
                 (long long)n, (long long)m->bytes[k]);
    else if (XXH64(bytes, (size_t)n, 0) != m->hash[k])
        snprintf(why, cap, "%s (shard %d of %d): xxh64 %016llx, the manifest says %016llx: corrupted", path, k,
                 m->world, (unsigned long long)XXH64(bytes, (size_t)n, 0), (unsigned long long)m->hash[k]);
    else return bytes;
    free(bytes);
    return NULL;
}

/* The newest checkpoint of `run` whose manifest and every shard check out
 * (its step; 0: none, start from scratch). The first refusal met on the
 * way, if any, goes to `refused`. */
static int latest_good(const char *run, char *refused, size_t cap) {
    refused[0] = 0;
    for (int step = STEPS; step > 0; step -= EVERY) {
        char dir[PATH_LEN], why[1024];
        step_dir(dir, run, step);
        struct stat st;
        if (stat(dir, &st) != 0) continue;
        manifest m;
        int bad = read_manifest(dir, &m, why, sizeof why);
        for (int k = 0; !bad && k < m.world; k++) {
            unsigned char *b = read_shard(dir, &m, k, why, sizeof why);
            bad = b == NULL;
            free(b);
        }
        if (!bad) return step;
        if (!refused[0]) snprintf(refused, cap, "%s", why);
    }
    return 0;
}

/* Loads this rank's rows from the checkpoint at dir, whatever the world
 * that wrote it: each old shard holds a band of rows; copy the overlap. */
static void load_checkpoint(const mlp_config *c, shard *s, const char *dir, manifest *m) {
    char why[1024];
    if (read_manifest(dir, m, why, sizeof why)) lecture_fail("%s", why);
    int64_t old_rows = c->width / m->world, n = s->rows * c->width;
    float *host = malloc(3 * (size_t)c->layers * (size_t)n * sizeof(float));
    if (!host) lecture_fail("out of memory loading a checkpoint");
    int step = -1;
    for (int k = 0; k < m->world; k++) {
        int64_t lo = k * old_rows > s->first ? k * old_rows : s->first;
        int64_t hi = (k + 1) * old_rows < s->first + s->rows ? (k + 1) * old_rows : s->first + s->rows;
        if (lo >= hi) continue;
        unsigned char *bytes = read_shard(dir, m, k, why, sizeof why);
        if (!bytes) lecture_fail("refusing the checkpoint: %s", why);
        shard_header h;
        memcpy(&h, bytes, sizeof h);
        if (memcmp(h.magic, "LXSHARD1", 8) != 0 || h.layers != c->layers || h.width != c->width || h.rows != old_rows)
            lecture_fail("%s/rank-%d.shard (shard %d): a shard of another model", dir, k, k);
        step = h.step;
        const float *from = (const float *)(bytes + sizeof h);
        for (int i = 0; i < c->layers; i++)
            for (int j = 0; j < 3; j++)
                memcpy(host + ((size_t)i * 3 + (size_t)j) * (size_t)n + (size_t)(lo - s->first) * (size_t)c->width,
                       from + ((size_t)i * 3 + (size_t)j) * (size_t)(old_rows * c->width) +
                               (size_t)(lo - k * old_rows) * (size_t)c->width,
                       (size_t)(hi - lo) * (size_t)c->width * sizeof(float));
        free(bytes);
    }
    for (int i = 0; i < c->layers; i++) {
        tensor *dst[3] = {s->piece[i], s->opt[i]->m, s->opt[i]->v};
        for (int j = 0; j < 3; j++) {
            tensor *t = tensor_from(host + ((size_t)i * 3 + (size_t)j) * (size_t)n, s->rows, c->width, dst[j]->device);
            tensor_copy(dst[j], t);
            tensor_free(t);
        }
        s->opt[i]->step = step; /* AdamW's bias correction depends on it */
    }
    free(host);
}

/* ------------------------------------------------------------------ */
/* A training run on ranks                                             */
/* ------------------------------------------------------------------ */

typedef struct run_args {
    mlp_config cfg;
    char run[PATH_LEN]; /* this run's checkpoint folder */
    int resume;         /* the checkpoint step to start from (0: from scratch) */
    int crash;          /* 1: CRASH_RANK dies writing the CRASH_STEP checkpoint */
    int keep;           /* the step whose state the result keeps (at): after that many steps, or as loaded */
    int every;          /* a checkpoint every that many steps (0: EVERY) */
    int async;          /* 1: checkpoints written in the background */
    double slow_ms;     /* > 0: rank SLOW_RANK's device takes that much longer each step (modelled compute) */
} run_args;

typedef struct run_result {
    double loss[TIMED];    /* the steps this run made: resume .. steps - 1 */
    double step_s[TIMED];  /* each step's seconds on the training thread, its checkpoint's work included */
    double write_s[TIMED]; /* each checkpoint's shard write, on whichever thread wrote it */
    int writes;
    write_figures first_write;
    float piece[LAYERS * WIDTH * WIDTH];  /* this rank's trained rows, layer by layer */
    float at[3 * LAYERS * WIDTH * WIDTH]; /* its rows, first and second moments at step `keep`, layer by layer */
    int64_t rows;
} run_result;

/* This rank's state (rows, AdamW's two moments, layer by layer) into r->at. */
static void keep_state(const mlp_config *c, const shard *s, run_result *r) {
    size_t n = (size_t)(s->rows * c->width);
    for (int i = 0; i < c->layers; i++) {
        const tensor *what[3] = {s->piece[i], s->opt[i]->m, s->opt[i]->v};
        for (int j = 0; j < 3; j++)
            tensor_to_host(what[j], r->at + ((size_t)i * 3 + (size_t)j) * n);
    }
}

static void train_main(int rank, int world, void *args) {
    const run_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);
    shard s = shard_new(c, rank, world, device);
    static run_result r; /* large: not on the stack */
    memset(&r, 0, sizeof r);
    if (a->resume) {
        char dir[PATH_LEN];
        step_dir(dir, a->run, a->resume);
        manifest m;
        load_checkpoint(c, &s, dir, &m);
        memcpy(r.loss, m.loss, sizeof m.loss); /* the log up to the checkpoint */
    }
    if (a->keep && a->keep == a->resume) keep_state(c, &s, &r);
    int every = a->every ? a->every : EVERY;
    background bg = {0};
    dist_barrier(); /* every rank's clock starts together, to a barrier's skew */
    for (int step = a->resume; step < c->steps; step++) {
        double t0 = now_seconds();
        if (a->slow_ms > 0 && rank == SLOW_RANK) model_compute(a->slow_ms); /* a slow device */
        r.loss[step] = zero3_step(c, &s, x);
        atomic_fetch_add(&bg.steps, 1);
        int done = step + 1;
        if (done == a->keep) keep_state(c, &s, &r);
        int due = done % every == 0 && done < c->steps;
        if (due && !a->async) {
            write_figures f = save_checkpoint(c, &s, a->run, done, r.loss, a->crash);
            if (done == EVERY) r.first_write = f;
            r.write_s[r.writes++] = f.seconds;
        }
        if (due && a->async) { /* the snapshot now, before the next step changes the shard */
            int writing = bg.step != 0;
            double previous = save_async(&bg, c, &s, a->run, done, r.loss, a->crash);
            if (writing) r.write_s[r.writes++] = previous;
        }
        r.step_s[step] = now_seconds() - t0;
    }
    if (bg.step) r.write_s[r.writes++] = finish_async(&bg, r.loss); /* the last checkpoint's manifest */
    writer_join(&bg.manifest);
    r.rows = s.rows;
    for (int i = 0; i < c->layers; i++)
        tensor_to_host(s.piece[i], r.piece + (size_t)i * (size_t)(s.rows * c->width));
    spawn_return(&r, sizeof r);
    shard_free(&s, c);
    tensor_free(x);
    tensor_free(data);
}

static run_result results[GROW];

static void collect(int world) {
    for (int k = 0; k < world; k++)
        if (spawn_result(k, &results[k], sizeof results[k]) != sizeof results[k])
            lecture_fail("rank %d returned no result", k);
}

/* ------------------------------------------------------------------ */
/* The lecture                                                         */
/* ------------------------------------------------------------------ */

static char files[PATH_LEN - 64];

static void run_folder(char *out, const char *name) {
    snprintf(out, PATH_LEN, "%s/%s", files, name);
    make_dir(out);
}

static double straight_loss[STEPS];
static float straight_state[WORLD][3 * LAYERS * WIDTH * WIDTH]; /* each rank's at step CRASH_STEP */

static void sharded_checkpoint(const mlp_config *c) {
    note("## A sharded checkpoint");
    note("ZeRO-3 leaves each rank only its rows of every layer, with AdamW's two moments for them. So each rank "
         "saves what it holds, and nobody gathers the model: %d ranks write %d files at once. A checkpoint is "
         "complete only when every shard is, so one more file, the *manifest*, is written last by rank 0, after "
         "it has every shard's size and xxh64 checksum (a gather that only completes once each rank has renamed "
         "its file). Each file is written to a temporary name, flushed to the disk (`fsync`), then renamed: a "
         "rename within one folder is atomic, so a reader sees the old file or the whole new one, never half.",
         WORLD, WORLD);
    run_args a = {.cfg = *c, .keep = CRASH_STEP};
    run_folder(a.run, "uninterrupted");
    progress("uninterrupted run: %d ranks", WORLD);
    spawn(train_main, WORLD, &a, sizeof a);
    collect(WORLD);
    memcpy(straight_loss, results[0].loss, sizeof straight_loss);
    for (int k = 0; k < WORLD; k++)
        memcpy(straight_state[k], results[k].at, sizeof straight_state[k]);
    int64_t header = (int64_t)sizeof(shard_header), formula = shard_bytes(c, WORLD);
    table_t *t = table_new("The step-%d checkpoint, rank by rank", EVERY);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "shard", "bytes", "%lld");
    table_column(t, "write", "ms", "%.3f");
    int all_match = 1;
    for (int k = 0; k < WORLD; k++) {
        table_row(t, k, (long long)results[k].first_write.bytes, results[k].first_write.seconds * 1e3);
        all_match &= results[k].first_write.bytes == formula;
    }
    table_show(t);
    note("A shard is a %lld-byte header and, for each of the %d layers, its %d rows of %d floats three times "
         "(weights, first moment, second moment): %lld + 3 x %d x %d x %d x 4 = %lld bytes. The write time is one "
         "rank's, temporary file to rename, `fsync` included, on this machine's disk, while the other ranks write "
         "theirs.",
         (long long)header, c->layers, c->width / WORLD, c->width, (long long)header, c->layers, c->width / WORLD,
         c->width, (long long)formula);
    check(all_match, "every shard is %lld bytes, the formula's", (long long)formula);
}

static void crash_and_resume(const mlp_config *c) {
    note("## A rank dies; the run resumes");
    note("The same training again, but rank %d dies (`abort()`) half-way through writing its shard of the step-%d "
         "checkpoint: half a temporary file, no rename. The other ranks wait in the gather for its checksum; "
         "the runtime names the dead rank and stops them.",
         CRASH_RANK, CRASH_STEP);
    run_args a = {.cfg = *c, .crash = 1};
    run_folder(a.run, "interrupted");
    progress("interrupted run: rank %d dies at step %d", CRASH_RANK, CRASH_STEP);
    spawn_expect_failure(train_main, WORLD, &a, sizeof a);
    char dir[PATH_LEN], manifest_path[PATH_LEN + 16], refused[1024];
    step_dir(dir, a.run, CRASH_STEP);
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest", dir);
    check(access(manifest_path, F_OK) != 0,
          "the crash left no manifest for step %d: the incomplete checkpoint is invisible to a loader", CRASH_STEP);
    int resume = latest_good(a.run, refused, sizeof refused);
    check(resume == CRASH_STEP - EVERY, "the newest complete checkpoint is step %d (expected %d)", resume,
          CRASH_STEP - EVERY);
    note("A fresh spawn of %d ranks finds the newest checkpoint whose manifest and shards check out: step %d. "
         "Each rank loads its rows, AdamW's moments and step count, and the run goes on from there; the steps "
         "between that checkpoint and the crash are done again.",
         WORLD, resume);
    a.crash = 0;
    a.resume = resume;
    progress("resumed run from step %d", resume);
    spawn(train_main, WORLD, &a, sizeof a);
    collect(WORLD);
    table_t *t = table_new("The loss, uninterrupted and interrupted at step %d then resumed from step %d", CRASH_STEP,
                           resume);
    table_column(t, "step", NULL, "%d");
    table_column(t, "uninterrupted", NULL, "%.9g");
    table_column(t, "interrupted, resumed", NULL, "%.9g");
    table_column(t, "from", NULL, "%s");
    int equal = 1;
    for (int s = 0; s < c->steps; s++) {
        table_row(t, s, straight_loss[s], results[0].loss[s], s < resume ? "the checkpoint's log" : "the resumed run");
        equal &= straight_loss[s] == results[0].loss[s];
    }
    table_show(t);
    check(equal, "the resumed run's loss equals the uninterrupted run's at every step, bit for bit");
    note("Bit for bit, not merely close: the resumed ranks hold the same bytes the uninterrupted ranks held at "
         "step %d (weights, moments and AdamW's step count, saved as float32 bytes, not printed), see the same "
         "data, and do the same arithmetic in the same order: the same %d ranks, so the same slices of the batch, "
         "and collectives that Open MPI runs by the same algorithm for the same sizes and ranks. Restore "
         "the weights but not the moments, or not the step count, and the next step differs.",
         resume, WORLD);
}

/* One device, the whole batch, all the steps: the reference for resharding. */
static void one_device(const mlp_config *c, tensor **w) {
    tensor *x = make_data(c, -1), *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) {
        w[i] = init_layer(c, i, -1);
        grads[i] = empty(c->width, c->width, -1);
        opt[i] = adamw_new(w[i], c->lr);
    }
    for (int s = 0; s < c->steps; s++) {
        forward(w, c->layers, x, acts, pre);
        backward(w, c->layers, acts, pre, grads);
        for (int i = 0; i < c->layers; i++)
            adamw_step(opt[i], w[i], grads[i]);
        free_saved(c->layers, acts, pre);
    }
    for (int i = 0; i < c->layers; i++) {
        tensor_free(grads[i]);
        adamw_free(opt[i]);
    }
    tensor_free(x);
}

/* The `world` ranks' state as loaded, row by row, against the 4 ranks' state
 * as it was in memory at that step (kept by the uninterrupted run, never read
 * from a file): a row taken from the wrong shard or the wrong place in one,
 * or a moment from the wrong band, is a difference. */
static void loaded_as_trained(const mlp_config *c, int step, int world) {
    int64_t old_rows = c->width / WORLD, new_rows = c->width / world;
    int64_t differ = 0, compared = 0;
    for (int i = 0; i < c->layers; i++)
        for (int j = 0; j < 3; j++)
            for (int64_t row = 0; row < c->width; row++) {
                int old_k = (int)(row / old_rows), new_k = (int)(row / new_rows);
                const float *was =
                        straight_state[old_k] +
                        (((size_t)i * 3 + (size_t)j) * (size_t)old_rows + (size_t)(row % old_rows)) * (size_t)c->width;
                const float *got =
                        results[new_k].at +
                        (((size_t)i * 3 + (size_t)j) * (size_t)new_rows + (size_t)(row % new_rows)) * (size_t)c->width;
                differ += memcmp(was, got, (size_t)c->width * sizeof(float)) != 0;
                compared++;
            }
    note("First, what was loaded: before their first step, each of the %d ranks' rows and AdamW moments, row by "
         "row, against what the %d ranks held in memory at step %d (kept by the uninterrupted run, not read back "
         "from its files). %lld of %lld rows differ.",
         world, WORLD, step, (long long)differ, (long long)compared);
    check(differ == 0,
          "the %d ranks loaded, bit for bit, the rows and moments the %d ranks held at step %d: %lld of %lld rows "
          "differ",
          world, WORLD, step, (long long)differ, (long long)compared);
}

/* The `world` ranks' trained weights (results) against one device's, in a
 * table and a check; the largest difference, and the bound in *bound. */
static double trained_against_one_device(const mlp_config *c, int world, double *bound) {
    tensor *w[MAX_LAYERS];
    one_device(c, w);
    double diff = 0;
    for (int k = 0; k < world; k++)
        for (int i = 0; i < c->layers; i++) {
            int64_t rows = results[k].rows;
            tensor *mine = tensor_from(results[k].piece + (size_t)i * (size_t)(rows * c->width), rows, c->width, -1);
            tensor *ref = row_slice(w[i], k * rows, (k + 1) * rows);
            double d = max_abs_diff(mine, ref);
            diff = d > diff ? d : diff;
            tensor_free(ref);
            tensor_free(mine);
        }
    *bound = adamw_rounding_bound(c);
    table_t *t =
            table_new("Trained weights: %d ranks resumed from a %d-rank checkpoint, against one device", world, WORLD);
    table_column(t, "largest difference", NULL, "%.3g");
    table_column(t, "AdamW rounding bound", NULL, "%.3g");
    table_row(t, diff, *bound);
    table_show(t);
    check(diff <= *bound, "%d ranks' resharded weights within AdamW's rounding bound of one device: %.3g <= %.3g",
          world, diff, *bound);
    for (int i = 0; i < c->layers; i++)
        tensor_free(w[i]);
    return diff;
}

static void reshard(const mlp_config *c) {
    int from = CRASH_STEP;
    note("## Resharding: %d ranks load a %d-rank checkpoint", RESHARD, WORLD);
    note("A restarted job may not get the same number of GPUs. The manifest says how many shards there are, so "
         "each shard's rows are known: rank r of %d needs rows [%d r, %d (r + 1)) of every layer, and reads "
         "them (weights and moments) from the shards that hold them. The uninterrupted run's step-%d checkpoint, "
         "loaded by %d ranks, trains on to step %d; one device trains the whole batch from the start.",
         RESHARD, c->width / RESHARD, c->width / RESHARD, from, RESHARD, c->steps);
    run_args a = {.cfg = *c, .resume = from, .keep = from};
    run_folder(a.run, "uninterrupted");
    progress("resharded run: %d ranks from step %d", RESHARD, from);
    spawn(train_main, RESHARD, &a, sizeof a);
    collect(RESHARD);
    loaded_as_trained(c, from, RESHARD);
    double bound, diff = trained_against_one_device(c, RESHARD, &bound);
    note("Not bit for bit this time: %d ranks sum gradients over other slices of the batch than %d ranks or one "
         "device do, so the sums round differently. AdamW can carry a rounding-level difference in a gradient "
         "to at most %.3g in a weight over %d steps (lib/mlp.h derives it); the largest difference is %.3g.",
         RESHARD, WORLD, quoted(bound), c->steps, quoted(diff));
}

/* The 4-rank checkpoint loaded by GROW ranks: each new band lies inside one
 * old shard. */
static void grow(const mlp_config *c) {
    int from = CRASH_STEP;
    note("## And on %d ranks", GROW);
    note("A job may come back with more GPUs, too. On %d ranks each rank's %d rows lie inside one shard of the "
         "%d-rank checkpoint: the same load, each rank reading one shard where the %d ranks read two. Checked as "
         "before: the loaded state row by row, then %d ranks training on to step %d against one device.",
         GROW, c->width / GROW, WORLD, RESHARD, GROW, c->steps);
    run_args a = {.cfg = *c, .resume = from, .keep = from};
    run_folder(a.run, "uninterrupted");
    progress("resharded run: %d ranks from step %d", GROW, from);
    spawn(train_main, GROW, &a, sizeof a);
    collect(GROW);
    loaded_as_trained(c, from, GROW);
    double bound, diff = trained_against_one_device(c, GROW, &bound);
    note("The largest difference from one device is %.3g, within the same bound, %.3g.", quoted(diff), quoted(bound));
}

/* Elastic training, told and not run: what the resharded resumes above
 * already are, and what a launcher adds. */
static void elastic(const mlp_config *c) {
    note("## When a rank does not come back: elastic training (described, not run)");
    note("The resumes on %d and %d ranks above are what elastic training does after a loss: the run goes on with "
         "the ranks it has, from the newest good checkpoint, each rank reading the rows it now owns. The global "
         "batch stayed %d examples: each of %d ranks took %d, each of %d took %d.",
         RESHARD, GROW, c->batch, RESHARD, c->batch / RESHARD, GROW, c->batch / GROW);
    note("What this lecture does not run is the restart itself. An elastic launcher (PyTorch's `torchrun "
         "--nnodes=MIN:MAX`, with its rendezvous) notices a lost node, waits for the ones left, and starts the "
         "training script again with the new world size; the script finds the newest good checkpoint and "
         "reshards it, as above. Survivors whose memory cannot hold the larger share of the batch keep the global "
         "batch by gradient accumulation instead: %d micro-batches of %d examples a step on each of %d ranks, "
         "gradients summed before the reduce-scatter. The same sums in another order, so equal to one device "
         "within the same rounding bound (lecture_08 accumulates this way with DDP's `no_sync`). Here a "
         "lecture's next `spawn()` is the restart: the runtime restarts nothing by itself.",
         WORLD / RESHARD, c->batch / WORLD, RESHARD);
}

/* Damages shard k of `run`'s newest checkpoint (in path): cut to half, or
 * one bit flipped. Returns the shard's bytes as they were (*n of them). */
static unsigned char *damage(const char *run, int k, int cut, char *path, int64_t *n) {
    char dir[PATH_LEN];
    step_dir(dir, run, CRASH_STEP);
    shard_path(path, dir, k);
    unsigned char *keep = read_file(path, n);
    if (!keep) lecture_fail("cannot read %s: %s", path, strerror(errno));
    if (cut) {
        if (truncate(path, *n / 2) != 0) lecture_fail("cannot truncate %s: %s", path, strerror(errno));
    } else {
        FILE *f = fopen(path, "r+b");
        if (!f) lecture_fail("cannot open %s: %s", path, strerror(errno));
        long at = (long)(*n * 3 / 4);
        fseek(f, at, SEEK_SET);
        fputc(keep[at] ^ 0x01, f); /* one bit of one float */
        fclose(f);
    }
    return keep;
}

/* Damages one shard of `run`'s newest checkpoint, asks for the newest good
 * checkpoint, and puts the shard back. */
static int refused_with(const char *run, int k, int cut, char *why, size_t cap) {
    char path[PATH_LEN];
    int64_t n;
    unsigned char *keep = damage(run, k, cut, path, &n);
    int step = latest_good(run, why, cap);
    write_atomically(path, keep, (size_t)n, -1);
    free(keep);
    return step;
}

static void damaged(void) {
    note("## Damaged shards are refused");
    note("A disk or a copy can damage a file after it was written. The loader checks each shard's size and "
         "xxh64 against the manifest before it trusts it, and falls back to the previous checkpoint when one "
         "fails. The uninterrupted run's step-%d checkpoint, damaged two ways:",
         CRASH_STEP);
    char run[PATH_LEN], why[1024];
    run_folder(run, "uninterrupted");
    int truncated = refused_with(run, 1, 1, why, sizeof why);
    note_verbatim("%s", why);
    check(truncated == CRASH_STEP - EVERY && strstr(why, "rank-1.shard (shard 1 of 4)") && strstr(why, "truncated"),
          "a truncated shard 1 is refused, named, and step %d used instead (got step %d)", CRASH_STEP - EVERY,
          truncated);
    int flipped = refused_with(run, 3, 0, why, sizeof why);
    note_verbatim("%s", why);
    check(flipped == CRASH_STEP - EVERY && strstr(why, "rank-3.shard (shard 3 of 4)") && strstr(why, "corrupted"),
          "a shard 3 with one flipped bit is refused, named, and step %d used instead (got step %d)",
          CRASH_STEP - EVERY, flipped);
    int intact = latest_good(run, why, sizeof why);
    check(intact == CRASH_STEP, "put back, the step-%d checkpoint loads again (got step %d)", CRASH_STEP, intact);
    note("A flipped bit in a float changes no size, so only the checksum sees it; a truncated file the size "
         "alone would catch. With the shards put back, the step-%d checkpoint loads again: the refusals were the "
         "damage, nothing else.",
         CRASH_STEP);
}

/* The newest checkpoint damaged and left so: a spawn resumes from the one
 * before and trains to the end, writing the newest checkpoint anew. */
static void train_on_after_damage(const mlp_config *c) {
    note("## Training on from the previous checkpoint");
    note("Refusing a damaged checkpoint is half of it; the run must go on from the one before. Shard 3 of the "
         "step-%d checkpoint gets one flipped bit again, and this time stays so: a fresh spawn of %d ranks asks "
         "for the newest good checkpoint, resumes from it and trains to step %d, writing the step-%d checkpoint "
         "again on its way.",
         CRASH_STEP, WORLD, c->steps, CRASH_STEP);
    run_args a = {.cfg = *c};
    run_folder(a.run, "uninterrupted");
    char path[PATH_LEN], why[1024];
    int64_t n;
    unsigned char *was = damage(a.run, 3, 0, path, &n);
    a.resume = latest_good(a.run, why, sizeof why);
    check(a.resume == CRASH_STEP - EVERY, "with shard 3 damaged, the newest good checkpoint is step %d (expected %d)",
          a.resume, CRASH_STEP - EVERY);
    progress("resumed from step %d after damage", a.resume);
    spawn(train_main, WORLD, &a, sizeof a);
    collect(WORLD);
    table_t *t = table_new("The loss, uninterrupted and resumed from step %d after step %d was refused", a.resume,
                           CRASH_STEP);
    table_column(t, "step", NULL, "%d");
    table_column(t, "uninterrupted", NULL, "%.9g");
    table_column(t, "resumed after damage", NULL, "%.9g");
    int equal = 1;
    for (int s = 0; s < c->steps; s++) {
        table_row(t, s, straight_loss[s], results[0].loss[s]);
        equal &= straight_loss[s] == results[0].loss[s];
    }
    table_show(t);
    check(equal, "the run resumed from the fallback checkpoint has the uninterrupted run's loss at every step, bit "
                 "for bit");
    int64_t m;
    unsigned char *now = read_file(path, &m);
    if (!now) lecture_fail("cannot read %s: %s", path, strerror(errno));
    char before[17], after[17];
    snprintf(before, sizeof before, "%016llx", (unsigned long long)XXH64(was, (size_t)n, 0));
    snprintf(after, sizeof after, "%016llx", (unsigned long long)XXH64(now, (size_t)m, 0));
    note("The step-%d shard 3 it wrote again has xxh64 %s; the one the uninterrupted run wrote, before the "
         "damage, had %s.",
         CRASH_STEP, after, before);
    check(m == n && strcmp(before, after) == 0 && memcmp(was, now, (size_t)n) == 0,
          "the rewritten step-%d shard 3 is the uninterrupted run's, byte for byte", CRASH_STEP);
    free(was);
    free(now);
    note("Steps %d to %d were done twice, and the same arithmetic on the same bytes gave the same bytes: the "
         "damage cost those %d steps, nothing else.",
         CRASH_STEP - EVERY, CRASH_STEP - 1, EVERY);
}

/* The median, over a run's checkpoints, of the seconds of the step that
 * made one and the step after it: a blocking checkpoint's cost lands in
 * both (rank 0's manifest is written after the others have gone on, to wait
 * for it in the next step's first collective). */
static double checkpoint_median(const run_result *r, int steps) {
    double v[TIMED];
    int n = 0;
    for (int s = EVERY - 1; s + 1 < steps; s += EVERY)
        v[n++] = r->step_s[s] + r->step_s[s + 1];
    return median_of(v, n);
}

/* Every shard of every checkpoint of two runs: checked against its own
 * manifest, then compared, xxh64 and bytes. The number alike. */
static int same_shards(const char *one, const char *two, int steps, int *compared) {
    int same = 0;
    *compared = 0;
    for (int step = EVERY; step < steps; step += EVERY) {
        char dir[2][PATH_LEN], why[1024];
        manifest m[2];
        step_dir(dir[0], one, step);
        step_dir(dir[1], two, step);
        for (int j = 0; j < 2; j++)
            if (read_manifest(dir[j], &m[j], why, sizeof why)) lecture_fail("%s", why);
        for (int k = 0; k < WORLD; k++, (*compared)++) {
            unsigned char *a = read_shard(dir[0], &m[0], k, why, sizeof why);
            if (!a) lecture_fail("%s", why);
            unsigned char *b = read_shard(dir[1], &m[1], k, why, sizeof why);
            if (!b) lecture_fail("%s", why);
            same += m[0].hash[k] == m[1].hash[k] && m[0].bytes[k] == m[1].bytes[k] &&
                    memcmp(a, b, (size_t)m[0].bytes[k]) == 0;
            free(a);
            free(b);
        }
    }
    return same;
}

static void async_checkpoint(const mlp_config *c) {
    note("## An asynchronous checkpoint");
    note("A blocking checkpoint stops training while every rank writes and `fsync`s its shard. An asynchronous "
         "one stops it only to copy the shard to host memory (a *snapshot*, hashed there), then hands the copy "
         "to a thread of the rank's own, which writes it as before (temporary file, `fsync`, rename) while the "
         "next steps run. The manifest still comes last: at the next checkpoint (or the end of training) each "
         "rank joins its writer thread, and only then joins the gather that gives rank 0 every shard's size and "
         "checksum; rank 0 writes the manifest on a thread too. A snapshot must be taken before the next step "
         "changes the weights, and a manifest only once every write finished.");
    run_args a = {.cfg = *c, .async = 1, .crash = 1};
    run_folder(a.run, "async-interrupted");
    progress("asynchronous run: rank %d's writer dies at step %d", CRASH_RANK, CRASH_STEP);
    note("First a crash while a background write runs: rank %d's writer thread dies half-way through its shard "
         "of the step-%d checkpoint, once the rank has trained one more step.",
         CRASH_RANK, CRASH_STEP);
    spawn_expect_failure(train_main, WORLD, &a, sizeof a);
    char dir[PATH_LEN], manifest_at[PATH_LEN + 16], why[1024];
    step_dir(dir, a.run, CRASH_STEP);
    manifest_path(manifest_at, dir);
    check(access(manifest_at, F_OK) != 0, "the crash during the background write left no manifest for step %d",
          CRASH_STEP);
    int resume = latest_good(a.run, why, sizeof why);
    check(resume == CRASH_STEP - EVERY,
          "after the background crash the newest complete checkpoint is step %d "
          "(expected %d)",
          resume, CRASH_STEP - EVERY);

    mlp_config timed = *c;
    timed.steps = TIMED;
    run_args blocking = {.cfg = timed}, async = {.cfg = timed, .async = 1};
    run_folder(blocking.run, "blocking");
    run_folder(async.run, "async");
    progress("timing: %d steps, blocking checkpoints", TIMED);
    spawn(train_main, WORLD, &blocking, sizeof blocking);
    collect(WORLD);
    static run_result kept[WORLD];
    memcpy(kept, results, sizeof kept);
    progress("timing: %d steps, asynchronous checkpoints", TIMED);
    spawn(train_main, WORLD, &async, sizeof async);
    collect(WORLD);
    table_t *t = table_new("A checkpoint every %d steps, blocking and asynchronous: the step that makes one and "
                           "the step after it (medians over %d checkpoints)",
                           EVERY, (TIMED - 1) / EVERY);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "blocking", "ms", "%.3f");
    table_column(t, "async", "ms", "%.3f");
    table_column(t, "hidden", "ms", "%.3f");
    table_column(t, "shard write, on its thread", "ms", "%.3f");
    double blocked[WORLD], stalled[WORLD], hidden[WORLD], written[WORLD];
    for (int k = 0; k < WORLD; k++) {
        blocked[k] = checkpoint_median(&kept[k], TIMED);
        stalled[k] = checkpoint_median(&results[k], TIMED);
        hidden[k] = blocked[k] - stalled[k];
        written[k] = median_of(results[k].write_s, results[k].writes);
        table_row(t, k, blocked[k] * 1e3, stalled[k] * 1e3, hidden[k] * 1e3, written[k] * 1e3);
    }
    table_show(t);
    double blocked_ms = median_of(blocked, WORLD) * 1e3, stalled_ms = median_of(stalled, WORLD) * 1e3;
    double hidden_ms = median_of(hidden, WORLD) * 1e3, written_ms = median_of(written, WORLD) * 1e3;
    table_t *m = table_new("The same, medians over the %d ranks", WORLD);
    table_column(m, "blocking", "ms", "%.3f");
    table_column(m, "async", "ms", "%.3f");
    table_column(m, "hidden", "ms", "%.3f");
    table_column(m, "shard write, on its thread", "ms", "%.3f");
    table_row(m, blocked_ms, stalled_ms, hidden_ms, written_ms);
    table_show(m);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    note("A step that checkpoints and the step after it took %.3f ms blocking and %.3f ms asynchronous; "
         "blocking minus asynchronous, rank by rank, is %.3f ms, %s. A shard's write took %.3f ms on its thread "
         "(each a median over the ranks). The machine "
         "that ran this lecture has %ld cores, shared by %d ranks, their writer threads and whatever else it "
         "runs. An `fsync` waits for the disk without holding a core: that wait is what a writer thread hides. "
         "Copying the bytes into the file does hold a core, and where ranks outnumber cores it is taken from "
         "some rank's training.",
         quoted(blocked_ms), quoted(stalled_ms), quoted(hidden_ms),
         hidden_ms > 0 ? "time the asynchronous checkpoint hid" : "no time hidden here", quoted(written_ms), cores,
         WORLD);
    int compared, same = same_shards(blocking.run, async.run, TIMED, &compared);
    note("Both runs trained the same steps from the same start, so their checkpoints should be the same bytes: "
         "%d of the %d shards (every rank's, every checkpoint's) have equal xxh64 and equal bytes.",
         same, compared);
    check(same == compared, "every asynchronous checkpoint's shard equals the blocking one's: %d of %d", same,
          compared);
}

/* Rank SLOW_RANK's device slower by slow_ms a step (modelled): every rank's
 * steps, with and without it. */
static void straggler(const mlp_config *c) {
    enum { SLOW_STEPS = 12 };
    const double slow_ms = 20.0;
    note("## A straggler");
    note("A synchronous job moves at the pace of its slowest rank: every step's collectives wait for every rank. "
         "Here rank %d's device is made %.0f ms slower each step, *modelled* (`model_compute`: the device kept "
         "busy for a set time, no arithmetic), and every rank's %d steps are timed, from a barrier, with and "
         "without it. No checkpoints are written.",
         SLOW_RANK, slow_ms, SLOW_STEPS);
    mlp_config short_run = *c;
    short_run.steps = SLOW_STEPS;
    run_args plain = {.cfg = short_run, .every = TIMED}, slow = {.cfg = short_run, .every = TIMED, .slow_ms = slow_ms};
    run_folder(plain.run, "straggler");
    snprintf(slow.run, sizeof slow.run, "%s", plain.run);
    progress("straggler: %d steps, then rank %d slower by %.0f ms (modelled)", SLOW_STEPS, SLOW_RANK, slow_ms);
    spawn(train_main, WORLD, &plain, sizeof plain);
    collect(WORLD);
    double before[WORLD];
    for (int k = 0; k < WORLD; k++) {
        before[k] = 0;
        for (int s = 0; s < SLOW_STEPS; s++)
            before[k] += results[k].step_s[s];
    }
    spawn(train_main, WORLD, &slow, sizeof slow);
    collect(WORLD);
    table_t *t = table_new("%d steps on every rank, without and with rank %d's device %.0f ms slower a step "
                           "(modelled)",
                           SLOW_STEPS, SLOW_RANK, slow_ms);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "no straggler", "ms", "%.1f");
    table_column(t, "rank 3 slower (modelled)", "ms", "%.1f");
    int all_wait = 1;
    double least = 1e30;
    for (int k = 0; k < WORLD; k++) {
        double after = 0;
        for (int s = 0; s < SLOW_STEPS; s++)
            after += results[k].step_s[s];
        table_row(t, k, before[k] * 1e3, after * 1e3);
        least = after < least ? after : least;
        all_wait &= after * 1e3 >= (SLOW_STEPS - 1) * slow_ms;
    }
    table_show(t);
    check(all_wait, "every rank's %d steps took at least %d x %.0f ms with rank %d slow (the least: %.1f ms)",
          SLOW_STEPS, SLOW_STEPS - 1, slow_ms, SLOW_RANK, least * 1e3);
    note("Every rank, not only rank %d, pays the modelled %.0f ms a step: the others wait for it in each step's "
         "first all-gather. (The check allows one step less than %d x %.0f ms: the ranks leave the starting "
         "barrier a little apart.) The runtime calls none of this a deadlock: rank %d's device is working, and a "
         "rank that works is progress. A rank that dies is named at once (as above); ranks that all wait and "
         "never move are stopped after `LECTERN_TIMEOUT` seconds; a rank stuck in its own code counts as working "
         "and is not stopped. A real job's watchdog does the same thing at scale: PyTorch's NCCL "
         "process group, for one, aborts a collective that has not finished within its timeout (10 minutes by "
         "default), which ends the job; the job is then restarted from its last checkpoint, as above. This "
         "paragraph describes; only the straggler's table was run.",
         SLOW_RANK, slow_ms, SLOW_STEPS, slow_ms, SLOW_RANK);
}

static void remove_files(void) {
    char command[PATH_LEN + 32];
    snprintf(command, sizeof command, "rm -rf '%s'", files);
    if (system(command) != 0) lecture_fail("cannot remove %s", files);
}

static void lecture_checkpoints(void) {
    note("# Checkpoints and failures");
    note("A job on thousands of GPUs loses one every few hours. It survives by saving its state often, in "
         "pieces, so that a restart loses only the steps since the last save; and a restart may come back with "
         "fewer or more GPUs. This lecture trains lecture_08's MLP with ZeRO-3 on %d ranks, saves sharded "
         "checkpoints to real files, kills a rank in the middle of one, resumes, loads the checkpoint on %d "
         "and on %d ranks, damages shards to see them refused and trains on from the checkpoint before, and "
         "writes checkpoints in the background while training goes on; last, a straggler.",
         WORLD, RESHARD, GROW);
    const char *out = lecture_out_dir();
    char *abs = out ? realpath(out, NULL) : NULL;
    if (!abs) lecture_fail("cannot resolve the output folder %s", out ? out : "(none)");
    snprintf(files, sizeof files, "%s/lecture_checkpoints.tmp.files", abs);
    free(abs);
    remove_files();
    make_dir(files);
    mlp_config c = config();
    note("The model: %d layers of %d x %d, a batch of %d (%d examples a rank), AdamW at lr %g, %d steps, a "
         "checkpoint every %d steps.",
         c.layers, c.width, c.width, c.batch, c.batch / WORLD, c.lr, c.steps, EVERY);
    sharded_checkpoint(&c);
    crash_and_resume(&c);
    reshard(&c);
    grow(&c);
    elastic(&c);
    damaged();
    train_on_after_damage(&c);
    async_checkpoint(&c);
    straggler(&c);
    remove_files();
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_checkpoints); }
