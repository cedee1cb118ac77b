/*
 * lectern.h: the one header a lecture includes.
 *
 * A lecture is a C program whose main is
 *
 *     int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
 *
 * Running it gives the lecture: every note(), image(), see(), plot() ... call
 * becomes a *step* of a JSON trace (traces/<lecture>.json, plus a .js twin the
 * viewer loads from file://). Each step is stamped with the real call stack of
 * lecture frames (file, line, function), read from the program's debug info:
 * lecture code needs no macro at each call.
 *
 * Sections:
 *   1. authoring API      (runtime/note.c, runtime/trace.c, runtime/stack.c)
 *   2. spawn              (runtime/spawn.c)
 *   3. tensors            (runtime/tensor.c, runtime/tensor_cuda.cu)
 *   4. collectives        (runtime/comm.c)
 *   5. timing helpers     (runtime/timing.c)
 *
 * Errors in lecture input (a missing image, a bad plot spec, a bad spawn
 * argument) become an error step naming the lecture file and line, and the
 * lecture exits non-zero at the end (or at once, for errors that make going
 * on meaningless). See docs/authoring.md.
 */
#ifndef LECTERN_H
#define LECTERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LECTERN_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ------------------------------------------------------------------ */
/* 1. Authoring API                                                    */
/* ------------------------------------------------------------------ */

/* printf-style markdown; rendered to HTML with md4c when recorded (both the
 * markdown and the HTML are kept in the trace). */
void note(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* Monospace text: whitespace and newlines kept as they are. */
void note_verbatim(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* An image. `src` is a file under assets/ ("assets/ring.svg"), checked to
 * exist (a missing file is an error step naming the lecture line), or an
 * http(s) URL, kept as a link and never downloaded. `width` is a fraction of
 * the page in (0, 1]. */
void image(const char *src, double width);

/* A reference link, shown beside the step before it: see(url) or
 * see(url, title). The viewer shows the title, when there is one, with the
 * link's host. see() is a macro over lx_see() so that both forms work; the
 * step is stamped with the line of the see() call like any other. */
void lx_see(const char *url, const char *title);
#define LX_SEE_PICK(one, two, name, ...) name
#define LX_SEE_URL_ONLY(url) lx_see((url), NULL)
#define see(...) LX_SEE_PICK(__VA_ARGS__, lx_see, LX_SEE_URL_ONLY, unused)(__VA_ARGS__)

/* Runs `command` through /bin/sh and records its output (stdout and stderr,
 * ANSI escapes removed) verbatim. Returns the exit status (127 when the
 * command is not found; a non-zero status is also recorded as an error
 * rendering, never a crash). */
int note_system(const char *command);

/* A chart the viewer draws: a Vega-Lite specification as JSON text. Invalid
 * JSON is an error step naming the lecture line. */
void plot(const char *vega_lite_json);

/* The whole main of a lecture. The lecture's name is its source file's name
 * (lectures/lecture_00.c -> lecture_00). Options: --out DIR, --quick (reduced
 * sizes for tests; see lecture_quick()), --quiet, --help. Returns the exit
 * status: 0 ok, 1 the lecture failed (error steps, crash), 2 bad usage or
 * an unwritable --out. */
int lecture_main(int argc, char **argv, void (*body)(void));

/* 1 when the lecture was started with --quick: lectures use it to pick
 * smaller sizes for tests. The full lecture is what `make run` gives. */
int lecture_quick(void);

/* Progress on stderr ("[lecture_08 12.3s] DDP: spawn 4 ranks"); never in the
 * trace. Silent with --quiet. */
void progress(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* ------------------------------------------------------------------ */
/* 2. spawn: real ranks, like torch.multiprocessing.spawn              */
/* ------------------------------------------------------------------ */

#define LECTERN_MAX_WORLD 16               /* 2 nodes x 8 GPUs */
#define LECTERN_MAX_SPAWN_ARGS (64u << 20) /* bytes copied to each rank */

typedef void (*spawn_fn)(int rank, int world_size, void *args);

/* Runs fn(rank, world_size, args) in world_size real processes, each on its
 * own copy of the args_size bytes at args, and returns when all are done.
 * The processes are a pool started with Open MPI's mpirun at the lecture's
 * first spawn and reused by the later ones (grown when a spawn needs more
 * ranks); before each spawn a rank's copy of the lecture's global and static
 * variables is put back as it was at program start, so fn sees what a fresh
 * process would (docs/authoring.md). Their notes land in this trace, marked
 * with rank and world_size, their stacks starting with this process's frames
 * down to the spawn() line. A rank that crashes or fails stops its siblings,
 * adds an error step, and the lecture exits 1. A spawn that makes no
 * progress for LECTERN_TIMEOUT seconds (default 120) is stopped as a deadlock.
 * Collectives inside fn use NCCL on device memory when world_size <= GPUs
 * visible and the build has NCCL, else Open MPI on host memory; a note says
 * which and why. LECTERN_BACKEND=nccl|mpi forces one; a forced NCCL without a
 * GPU per rank (or in a build without NCCL) is an error at the spawn() line
 * before any rank starts. */
void spawn(spawn_fn fn, int world_size, const void *args, size_t args_size);

/* ------------------------------------------------------------------ */
/* 3. Tensors: small float32 tensors on host or device                 */
/* ------------------------------------------------------------------ */

#define LECTERN_MAX_DIMS 4

typedef struct tensor {
    float *data;                      /* host or device pointer */
    int ndim;
    int64_t shape[LECTERN_MAX_DIMS];
    int64_t numel;
    int device;                       /* -1: cpu, N >= 0: cuda:N */
    int owns_data;                    /* 0 for views */
    char *str;                        /* buffer behind tensor_str()/summarize() */
} tensor;

/* The device a lecture should put rank `rank`'s tensors on: cuda:rank when
 * the current spawn runs on NCCL, else the CPU (-1). Outside spawn: cuda:0
 * when a GPU is present, else the CPU. */
int get_device(int rank);
int gpu_count(void);                  /* GPUs visible (0 without CUDA or driver) */

tensor *empty(int64_t rows, int64_t cols, int device);   /* cols 0 => 1-D */
tensor *zeros(int64_t rows, int64_t cols, int device);
tensor *arange(int64_t n, int device);                    /* [0, 1, ..., n-1] */
/* Standard normal numbers from a seeded, counter-based generator
 * (Philox4x32-10 and Box-Muller, runtime/philox.h) that gives the same floats,
 * bit for bit, on the CPU and on every GPU: made where the tensor lives (a
 * kernel fills a device tensor; nothing is copied). Draws continue one stream:
 * after manual_seed(s), randn(3) then randn(3) gives the numbers of randn(6).
 * A fresh process starts as if manual_seed(0) had been called. */
tensor *randn(int64_t rows, int64_t cols, int device);
void manual_seed(uint64_t seed);
tensor *tensor_from(const float *values, int64_t rows, int64_t cols, int device);
tensor *to_device(const tensor *t, int device);           /* a copy */
void tensor_copy(tensor *dst, const tensor *src);          /* same shape, any devices */
tensor *row_slice(tensor *t, int64_t start, int64_t end);  /* view of rows [start, end) */
tensor *col_slice(const tensor *t, int64_t start, int64_t end); /* a copy of columns */
tensor *cat_cols(tensor *const *parts, int n);             /* concatenate along dim 1 */
void tensor_free(tensor *t);
void tensor_to_host(const tensor *t, float *out);          /* numel floats */

void add_scalar(tensor *t, float s);                       /* in place */
void scale(tensor *t, float s);                            /* in place */
void add_(tensor *t, const tensor *u);                     /* t += u */
tensor *matmul(const tensor *a, const tensor *b);          /* cuBLAS or OpenBLAS */
void matmul_into(tensor *c, const tensor *a, const tensor *b, int trans_a, int trans_b,
                 float alpha, float beta);                 /* c = alpha*op(a)op(b) + beta*c */
tensor *gelu(const tensor *x);                             /* tanh approximation */
/* dx = dy * gelu'(x) */
tensor *gelu_backward(const tensor *x, const tensor *dy);
float mse_loss(const tensor *x);                           /* mean(x^2) */
tensor *mse_loss_backward(const tensor *x);                /* 2x / numel */
float item(const tensor *t, int64_t i);                    /* one element to host */
double max_abs_diff(const tensor *a, const tensor *b);

typedef struct adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
    tensor *m, *v;
} adamw;
adamw *adamw_new(const tensor *param, float lr);          /* torch defaults otherwise */
void adamw_step(adamw *opt, tensor *param, const tensor *grad);
void adamw_free(adamw *opt);

/* "tensor([ 6., 10., 14., 18.], device='cuda:0')" in torch's format; the
 * string lives in t->str until the next call on t. */
const char *tensor_str(tensor *t);
/* "1024x1024[-0.0239...]": shape and first element (4 decimals). */
const char *summarize(tensor *t);

/* ------------------------------------------------------------------ */
/* 4. Collectives (inside a spawned function)                          */
/* ------------------------------------------------------------------ */

typedef enum { DIST_SUM, DIST_AVG, DIST_MIN, DIST_MAX } dist_op;

int dist_rank(void);
int dist_world_size(void);
const char *dist_backend(void);       /* "nccl" or "mpi" */

void dist_barrier(void);
void dist_all_reduce(tensor *t, dist_op op);                          /* in place */
void dist_reduce(tensor *t, int dst, dist_op op);                     /* result on dst */
void dist_broadcast(tensor *t, int src);
/* output (numel/world) = reduce(input) chunk `rank` */
void dist_reduce_scatter(tensor *output, const tensor *input, dist_op op);
/* output (world*numel) = concat over ranks of input */
void dist_all_gather(tensor *output, const tensor *input);
/* rank `src`'s input split in world_size chunks, chunk r to rank r's output */
void dist_scatter(tensor *output, const tensor *input, int src);
/* concat over ranks of input into dst's output (output ignored elsewhere) */
void dist_gather(tensor *output, const tensor *input, int dst);
void dist_send(const tensor *t, int dst);
void dist_recv(tensor *t, int src);

typedef struct dist_request dist_request;
dist_request *dist_isend(const tensor *t, int dst);
dist_request *dist_irecv(tensor *t, int src);
void dist_wait(dist_request *req);                                   /* frees req */

/* This rank's traffic since its spawn started: the bytes it sent and the
 * calls it made (collectives, sends, receives, barriers). Bytes are counted
 * as a bandwidth-optimal algorithm sends them, whatever the library picked,
 * so they can be checked by hand: for p ranks and b bytes, all-reduce
 * 2(p-1)/p b; reduce-scatter and all-gather (p-1)/p of the whole (input,
 * resp. output); broadcast and reduce b, from every rank but one (a chain);
 * scatter (p-1) pieces at the root; gather one piece from every other rank;
 * send and isend b; receives and barriers 0. Read it before and after a
 * step for the step's traffic. 0 outside a spawn. */
int64_t dist_bytes_sent(void);
int64_t dist_calls(void);

/* ------------------------------------------------------------------ */
/* 5. Timing helpers                                                   */
/* ------------------------------------------------------------------ */

double now_seconds(void);             /* monotonic clock */
void device_synchronize(void);        /* cudaDeviceSynchronize, or nothing on CPU */

#ifdef __cplusplus
}
#endif

#endif /* LECTERN_H */
