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
 * Sections, and the runtime's layer folder that holds each (docs/design.md,
 * "Layers", says what each folder holds):
 *   1. authoring API      (runtime/trace/; lecture_main: runtime/lecture/)
 *   2. spawn              (runtime/ranks/)
 *   3. tensors            (runtime/tensor/)
 *   4. collectives        (runtime/comm/)
 *   5. timing helpers     (runtime/tensor/; model_compute, dist_timer: runtime/comm/)
 *   6. checks             (runtime/trace/; check_close: runtime/tensor/)
 *   7. tables and charts  (runtime/trace/)
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

/* note(fmt, ...): printf-style markdown; rendered to HTML with md4c when
 * recorded (both the markdown and the HTML are kept in the trace). The step
 * also keeps its arguments by name: for each conversion of the format, the
 * expression that filled it as the lecture wrote it, its value and what it
 * printed ("args" in docs/trace-format.md), so a test or a reader finds a
 * number by what it is rather than by the sentence around it. note() is a
 * macro for that reason: it hands lx_note() its own argument text. */
void lx_note(const char *args_text, const char *fmt, ...) LECTERN_PRINTF(2, 3);
#define note(...) lx_note(#__VA_ARGS__, __VA_ARGS__)

/* quoted(x) is x. Around a note() argument it says that the number is one
 * the lecture shows in a table or chart of the same section (a figure), so
 * that the sentence guard (tests/lectures/test_sentences.py, docs/authoring.md,
 * "Sentences that quote") checks the printed text against those figures:
 *
 *     note("The ring took %.1f us at 4 KiB.", quoted(ring_us[2]));
 *
 * A sentence holding the word "measured" is checked so without the mark. */
#define quoted(x) (x)

/* Monospace text: whitespace and newlines kept as they are. */
void lx_note_verbatim(const char *args_text, const char *fmt, ...) LECTERN_PRINTF(2, 3);
/* A macro, as note() is: its arguments are kept by name ("args"). */
#define note_verbatim(...) lx_note_verbatim(#__VA_ARGS__, __VA_ARGS__)

/* An image. `src` is a file under assets/ ("assets/lecture_08_gpu.svg"), checked to
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

/* Predict, then see: asks the reader a question whose answer the lecture has
 * just measured. Call it right after the measurement and before the note
 * that states the number:
 *
 *     predict("What bus bandwidth will the 64 MB all-reduce reach?", busbw, "GB/s");
 *
 * Records one step at this line (in a rank too, like note()) holding the
 * question (markdown, as in note(), but not a printf format), `measured` and
 * its `unit` ("" for a plain number or a ratio). The viewer shows the
 * question and an answer field ("Your answer (GB/s)") and keeps the value
 * hidden until the reader presses Reveal; it then says how close the answer
 * was ("measured 12.3 GB/s; your answer 10 is 19% low"). A NULL or empty
 * question, a NULL unit, or a measured value that is NaN or infinite is an
 * error step at this line (the lecture exits 1 at the end), and no question
 * is recorded. */
void predict(const char *question, double measured, const char *unit);

/* The whole main of a lecture. The lecture's name is its source file's name
 * (lectures/lecture_00.c -> lecture_00). Options: --out DIR, --grade FILE
 * (the checks as an autograder's score: grade_exercise()), --variant SEED
 * (a homework's values for that seed: variant_int()), --quick (reduced
 * sizes for tests; see lecture_quick()), --quiet, --help. Returns the exit
 * status: 0 ok, 1 the lecture failed (error steps, crash), 2 bad usage or
 * an unwritable --out. */
int lecture_main(int argc, char **argv, void (*body)(void));

/* 1 when the lecture was started with --quick: lectures use it to pick
 * smaller sizes for tests. The full lecture is what `make run` gives. */
int lecture_quick(void);

/* A lecture's own options. Declare them once, at file scope:
 *
 *     LECTURE_OPTIONS({"naive", NULL, "the naive ring instead of the fast one"},
 *                     {"n", "N", "elements per rank (default 8)"});
 *
 * `value` NULL makes a flag (--naive); a placeholder ("N") makes an option
 * with a value (--n=8). --help lists them; an option that is not declared,
 * a flag given a value or an option given none is bad usage (exit 2, the
 * message naming what the lecture reads) before the lecture runs. Ranks see
 * the same options as the lecture. `make run LECTURE=x ARGS="--naive --n=8"`
 * passes them. */
typedef struct lecture_opt {
    const char *name;  /* "naive" for --naive, "n" for --n=VALUE */
    const char *value; /* NULL for a flag, else what --help shows after '=' */
    const char *help;  /* one line for --help */
} lecture_opt;
#define LECTURE_OPTIONS(...) const lecture_opt lecture_options[] = {__VA_ARGS__, {NULL, NULL, NULL}}

/* 1 when --name was given, else 0. A name LECTURE_OPTIONS does not declare
 * as a flag is an error step at the calling line (and 0). */
int lecture_flag(const char *name);

/* The VALUE of --name=VALUE (the last one given), or `fallback` (which may
 * be NULL) when it was not given. A name LECTURE_OPTIONS does not declare as
 * an option with a value is an error step at the calling line (and
 * `fallback`). The string lives until the lecture ends. */
const char *lecture_option(const char *name, const char *fallback);

/* The folder the lecture's repository is in (the one holding lectures/ and
 * assets/), for reading one of its files at run time: LECTERN_ROOT_DIR when
 * set, else the repository above the running binary (a build carried to
 * another folder or machine beside its sources), else the folder it was
 * built in, else ".". Never NULL; lives until the program ends. */
const char *lecture_root(void);

/* The folder the trace is written to (--out, else $LECTERN_OUT, else
 * traces/local/), as given: the one place a lecture may write files of its
 * own (a checkpoint, a log), in a folder named after itself that it removes
 * when done. In the lecture only: a rank gets the path through spawn's args
 * (called in a rank it is an error step at the line, and NULL). */
const char *lecture_out_dir(void);

/* Progress on stderr ("[lecture_08 12.3s] DDP: spawn 4 ranks"); never in the
 * trace. Silent with --quiet. */
void progress(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* ------------------------------------------------------------------ */
/* 2. spawn: real ranks, like torch.multiprocessing.spawn              */
/* ------------------------------------------------------------------ */

#define LECTERN_MAX_WORLD 64               /* 8 nodes x 8 GPUs */
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
 * visible and the build has NCCL (its library loaded at the first NCCL
 * spawn, 2.18 or newer); with fewer GPUs than ranks (at least one)
 * the ranks share the GPUs (rank r on cuda:(r mod GPUs)) and the collectives
 * run on Open MPI, staged through pinned host memory (or given the device
 * memory where Open MPI is CUDA-aware); without a GPU, or with GPUs in
 * exclusive-process or prohibited compute mode that cannot be shared, Open
 * MPI on host memory. A note says which and why. LECTERN_BACKEND=nccl|mpi
 * forces one (mpi: the CPU); a forced NCCL without a GPU per rank (or in a
 * build without NCCL, or with no loadable NCCL) is an error at the spawn()
 * line before any rank starts. LECTERN_BACKEND=nccl with
 * LECTERN_NCCL_EMULATE=1 runs NCCL's code on a CPU emulator, with host
 * tensors, on any machine (docs/gpu.md). */
void spawn(spawn_fn fn, int world_size, const void *args, size_t args_size);

/* A spawn whose failure is the lesson: a deadlock, a crash, ranks that make
 * different calls. Runs fn as spawn() does; when the spawn fails, the
 * ranks' error steps are recorded as they would be, each marked as
 * expected ("expected": true in the trace; the viewer shows "caught, as
 * expected"), the lecture goes on and the run is not failed by them.
 * Returns 1 then. A deadlock is called after LECTERN_EXPECT_TIMEOUT seconds
 * of every rank waiting (default 3; never more than LECTERN_TIMEOUT); the
 * pool's start is not bounded by it. The ranks are stopped, and the next
 * spawn starts fresh ones (about 0.4 s). If the spawn succeeds, that is the
 * lecture's error: an error step at this line, the run fails (exit 1), and
 * it returns 0. Bad arguments are errors as for spawn(). */
int spawn_expect_failure(spawn_fn fn, int world_size, const void *args, size_t args_size);

/* One exercise of a homework in a spawn of its own, so that its failure
 * costs only its own points: runs fn as spawn() does and returns 1 when
 * every rank's function returned. When the spawn fails (a rank crashes or
 * stops at an error, a deadlock, or ranks still running `seconds` after
 * they got their work), the ranks' error steps are recorded as by spawn()
 * and the run is failed (exit 1 at its end), but the lecture goes on to
 * its next exercise: 0. Past `seconds` each rank still running is named
 * at its line, working or waiting (and for whom), and for how long it has
 * been there: a loop that never returns is found, which no deadlock
 * detector does (a computing rank is progress). 0: no limit but
 * LECTERN_TIMEOUT's. A spawn after a failed one starts fresh ranks (about
 * 0.4 s).
 *
 * `exercise` is a prefix declared with grade_exercise() ("exercise 1:"):
 * the checks of it that the spawn did not reach count as "not reached"
 * (the console's last line, the trace, --grade's results), with this
 * spawn's errors as the reason. A NULL or never declared prefix, a
 * negative or non-finite `seconds`, or bad arguments as for spawn() are an
 * error at this line that stops the lecture. */
int spawn_exercise(const char *exercise, double seconds, spawn_fn fn, int world_size, const void *args,
                   size_t args_size);

#define LECTERN_MAX_SPAWN_RESULT (16u << 20) /* bytes one rank may return */

/* In a rank's function: hands `size` bytes at `data` to the lecture (copied
 * at once; the rank may free them after). One value per rank per spawn: a
 * second call, more than LECTERN_MAX_SPAWN_RESULT bytes, NULL data with a
 * size, or a call outside a rank is an error step at the line and returns
 * nothing. Pass numbers, not pointers: the lecture is another process. */
void spawn_return(const void *data, size_t size);

/* In the lecture, after spawn() (or spawn_expect_failure()) returned: copies
 * what `rank` of that spawn gave spawn_return() into `out` and returns its
 * size; 0 when the rank returned nothing (or 0 bytes). out NULL and cap 0:
 * only the size. A value larger than `cap` is an error step at the line and
 * nothing is copied (the size is returned). A rank outside the last spawn,
 * no spawn yet, or a call inside a rank: an error step, 0. Results are kept
 * until the next spawn starts; a rank of a failed spawn that returned before
 * it failed keeps its value. */
size_t spawn_result(int rank, void *out, size_t cap);

/* The run's twin at run time (docs/twin.md): the last spawn's calls replayed
 * on a simulated platform (tools/twin/platforms/), for a lecture that
 * teaches with a simulated figure: to predict() it, chart it, say it.
 *
 *     twin_record(1);                        // record the spawns that follow
 *     spawn(ddp_step, 4, &args, sizeof args);
 *     twin_record(0);
 *     twin_result t;
 *     if (twin_last_spawn("scaled", 512, &t))  // DDP's rule: the same step on 512 ranks
 *         note("%s: a step takes %.2f ms", t.label, quoted(t.simulated_s * 1e3));
 *     else
 *         note("Not simulated: %s.", t.why);
 *
 * twin_record(on): each rank of the spawns that follow records what it did,
 * as --twin-record makes every spawn do (a run with --twin-record records
 * them all whatever this says; only --twin-record writes NAME.events.json).
 *
 * twin_last_spawn(platform, ranks, out): replays the last spawn on
 * `platform` (a file tools/twin/platforms/PLATFORM.xml) with SimGrid's
 * replay (build/tools/twin/twin_replay beside the lecture's build, or
 * $LECTERN_TWIN_REPLAY); `ranks` 0 replays it at its own world size, P > 0
 * at P ranks by its strategy's extension rule (DDP: the same step on a
 * bigger ring; pipeline (GPipe or 1F1B): the same schedule over more
 * stages; mesh: a data x tensor mesh with more data-parallel groups). Returns 1 and
 * fills *out; the trace's spawn gets the same "twin" entry `make twin`
 * writes (docs/trace-format.md), named as out->platform ("scaled@512").
 * Returns 0 with out->why when it could not simulate: SimGrid's replay not
 * built, or LECTERN_TWIN=0 in the environment (a lecture says so in a note
 * and goes on; the run does not fail and the trace gets no twin); or bad
 * input, which is also an error step at this line naming the problem: an
 * unknown platform, no spawn yet, a last spawn that was not recorded, a
 * spawn its rule cannot extend to `ranks`, a replay that fails. */
void twin_record(int on);

#define TWIN_MAX_COLLECTIVES 64

typedef struct twin_collective {
    char op[24];       /* "all_reduce", as dist_call_name spells it */
    double bytes;      /* the call's size (docs/twin.md, as nccl-tests counts it) */
    int ranks;         /* the ranks it spanned */
    int calls;         /* calls of this op and size in the spawn */
    double time_s;     /* their median simulated time */
    double algbw_GBps; /* bytes / time_s, GB = 1e9 bytes */
    double busbw_GBps; /* algbw times nccl-tests' bus factor */
} twin_collective;

typedef struct twin_result {
    int ran;            /* 1: the figures below are the replay's */
    char why[512];      /* ran 0: why not ("SimGrid's replay is not built: ...") */
    char platform[64];  /* "h100-node", or "scaled@512" for ranks > 0 */
    char label[96];     /* "simulated on scaled@512": every figure's caption carries it */
    int ranks;          /* ranks simulated */
    int recorded_ranks; /* ranks that ran here */
    char rule[16];      /* "ddp", "pipeline", "1f1b" or "mesh" when extended; "" when not */
    double simulated_s; /* the spawn on the platform, simulated */
    double measured_s;  /* the same spawn here, measured */
    double busy_max_s;  /* the most simulated time any rank spent computing (compute and modelled spans) */
    int n_collectives;  /* per collective op and size (at most TWIN_MAX_COLLECTIVES, smallest first) */
    twin_collective collectives[TWIN_MAX_COLLECTIVES];
} twin_result;

int twin_last_spawn(const char *platform, int ranks, twin_result *out);

/* ------------------------------------------------------------------ */
/* 3. Tensors: small tensors on host or device, fp32 unless to_dtype()  */
/* ------------------------------------------------------------------ */

/* A tensor is a vector (ndim 1) or a matrix (ndim 2): every call takes one
 * or the other, so two dimensions are all a shape holds. */
#define LECTERN_MAX_DIMS 2

/* The element type. DTYPE_F32 (IEEE binary32) is every tensor's unless
 * to_dtype made it otherwise. The others hold their raw bits:
 *   DTYPE_BF16     bfloat16: 8 exponent bits, 7 mantissa bits (fp32's range)
 *   DTYPE_F16      IEEE binary16: 5 exponent bits, 10 mantissa bits, max 65504
 *   DTYPE_F8_E4M3  OCP FP8 E4M3 ("fn"): bias 7, no infinity, max 448
 *   DTYPE_F8_E5M2  OCP FP8 E5M2: bias 15, infinities, max 57344 */
typedef enum { DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_F8_E4M3, DTYPE_F8_E5M2 } dtype;

typedef struct tensor {
    /* fp32 tensors: the host or device pointer to the numel floats. Any
     * other dtype: NULL, so that code reading a bf16 tensor as floats
     * stops at once instead of reading half-floats as garbage; its bytes
     * are at `raw`. Lecture code reads values through tensor_item,
     * tensor_to_host or to_dtype(t, DTYPE_F32), which work for every dtype. */
    float *data;
    int ndim;
    int64_t shape[LECTERN_MAX_DIMS];
    int64_t numel;
    int device;    /* -1: cpu, N >= 0: cuda:N */
    int owns_data; /* 0 for views */
    char *str;     /* buffer behind tensor_str()/summarize() */
    dtype dt;      /* read it with tensor_dtype(t) */
    void *raw;     /* the storage, numel * dtype_size(dt) bytes, whatever the dtype (== data for fp32) */
} tensor;

/* The device a lecture should put rank `rank`'s tensors on: cuda:rank when
 * the current spawn runs on NCCL, cuda:(rank mod GPUs) when its ranks share
 * fewer GPUs, else the CPU (-1; the NCCL emulator's spawns too). Outside
 * spawn: cuda:0 when a GPU is present, else the CPU. */
int get_device(int rank);
int gpu_count(void); /* GPUs visible (0 without CUDA or driver) */

tensor *empty(int64_t rows, int64_t cols, int device); /* cols 0 => 1-D */
tensor *zeros(int64_t rows, int64_t cols, int device);
tensor *arange(int64_t n, int device); /* [0, 1, ..., n-1] */
/* Standard normal numbers from a seeded, counter-based generator
 * (Philox4x32-10 and Box-Muller, runtime/tensor/) that gives the same floats,
 * bit for bit, on the CPU and on every GPU: made where the tensor lives (a
 * kernel fills a device tensor; nothing is copied). Draws continue one stream:
 * after manual_seed(s), randn(3) then randn(3) gives the numbers of randn(6).
 * A fresh process starts as if manual_seed(0) had been called. */
tensor *randn(int64_t rows, int64_t cols, int device);
void manual_seed(uint64_t seed);
tensor *tensor_from(const float *values, int64_t rows, int64_t cols, int device);
tensor *to_device(const tensor *t, int device);                 /* a copy */
void tensor_copy(tensor *dst, const tensor *src);               /* same shape, any devices */
tensor *row_slice(tensor *t, int64_t start, int64_t end);       /* view of rows [start, end) */
tensor *col_slice(const tensor *t, int64_t start, int64_t end); /* a copy of columns */
/* A view of the rows*cols elements of t starting at element `offset`
 * (row-major order), shaped rows x cols (cols 0: 1-D of `rows`). It shares
 * t's storage: writes through either reach both; t must outlive it; free it
 * with tensor_free (which leaves t's storage alone). Elements outside t stop
 * the lecture with an error at the calling line. The way one flat buffer
 * holds several parameters (a DDP bucket, a ZeRO shard). */
tensor *tensor_view(tensor *t, int64_t offset, int64_t rows, int64_t cols);
/* A view of all of t with another shape (cols 0: 1-D); the element count
 * must stay the same. */
tensor *reshape(tensor *t, int64_t rows, int64_t cols);
tensor *cat_cols(tensor *const *parts, int n); /* concatenate along dim 1 */
void tensor_free(tensor *t);
/* 1 when t has been given to tensor_free, 0 while it is alive: for code
 * that checks what another function did with tensors it does not own (a
 * homework's "never free x"), without the error a second tensor_free or
 * a use would be. A freed header is kept to answer for the next 4096
 * frees of the process; a pointer that was never a tensor is an error
 * step, and 0. */
int tensor_was_freed(const tensor *t);
void tensor_to_host(const tensor *t, float *out); /* numel floats, exactly, whatever the dtype */
/* Bytes of tensor storage this process holds on `device` (-1: the CPU, N:
 * cuda:N): numel * dtype_size of every tensor made and not yet freed that owns its
 * storage. A view (row_slice, tensor_view, reshape) owns none: its bytes are
 * its original's, counted once. Headers, recorded stacks and the allocator's
 * rounding are not counted: torch.cuda.memory_allocated(device), exact. */
int64_t tensor_bytes_live(int device);

/* ---- Precision (runtime/tensor/dtype.c; docs/authoring.md, "Precision") ----
 *
 * Every tensor is made fp32 (empty, zeros, randn, ...); to_dtype makes a
 * copy in another dtype. Conversion rounds to nearest, ties to even, once:
 *   bf16, fp16: as IEEE does, with subnormals; beyond the largest finite
 *     value the result is +-inf; NaN stays NaN.
 *   fp8 (both): saturating, as the OCP FP8 spec's saturation mode and
 *     CUDA's __NV_SATFINITE: anything beyond +-max (inf included) becomes
 *     +-max (448 for E4M3, 57344 for E5M2); NaN becomes NaN; subnormals kept.
 * Back to fp32 is exact for every dtype (each value is an fp32 value). */
dtype tensor_dtype(const tensor *t);
size_t dtype_size(dtype d);      /* bytes per element: 4, 2, 2, 1, 1 */
const char *dtype_name(dtype d); /* "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2" (torch's) */
tensor *to_dtype(const tensor *t, dtype d); /* a copy in dtype d, same device */
/* A copy in dtype d of t * scale: each element x becomes round_d(x * scale),
 * the product taken in double and rounded once. FP8's per-tensor scaling:
 * q = to_dtype_scaled(x, DTYPE_F8_E4M3, 448 / amax) uses the format's whole
 * range; to_dtype_scaled(q, DTYPE_F32, amax / 448) reads it back. */
tensor *to_dtype_scaled(const tensor *t, dtype d, double scale);
/*
 * What the operations below do with dtypes other than fp32:
 *   - tensor_copy between dtypes converts (rounding as to_dtype); views
 *     (row_slice, tensor_view, reshape) and col_slice, cat_cols keep the dtype.
 *   - add_, sub_, scale_, add_scalar_, fill_, adamw_step (param and grad;
 *     its m and v are always fp32): computed in fp32, the result rounded once
 *     when stored into the low-precision tensor; the other operand of add_ or
 *     sub_ may be any dtype.
 *   - tensor_sum, tensor_norm, mse_loss, max_abs_diff, tensor_item,
 *     tensor_to_host, check_close, inspect: read the values exactly as fp32.
 *     mse_loss_backward gives x's dtype.
 *   - matmul(a, b): a and b of one dtype, any; the products are exact in
 *     fp32 and summed in fp32 (as tensor cores do) and the result is fp32,
 *     always. matmul_into's c must be fp32. On the CPU the inputs are
 *     widened to fp32 and OpenBLAS's sgemm runs; on a GPU bf16 and fp16 go to
 *     cublasGemmEx with CUBLAS_COMPUTE_32F, fp8 is refused.
 *   - gelu, gelu_backward: refused (an error at the line naming the
 *     conversion: to_dtype(x, DTYPE_F32) first).
 *   - collectives and point to point (section 4), on Open MPI and on NCCL
 *     (and its CPU emulator): bf16 and fp16 move 2 bytes per element
 *     (dist_traffic counts them); a sum adds two buffers in fp32 and rounds
 *     once to the dtype at each step of the algorithm (Open MPI: an MPI user
 *     op; NCCL: ncclBfloat16 / ncclFloat16 sums), so a sum over p ranks
 *     rounds p - 1 times. AVG on Open MPI divides the sum in fp32 and rounds
 *     once more; on NCCL it is ncclAvg, which multiplies each rank's
 *     contribution by 1/p (rounded to the dtype) and rounds it before the
 *     sum. All tensors of a call, and the sender's and receiver's, have one
 *     dtype (checked, named at both lines). fp8 is refused, and so are 16-bit
 *     tensors on shared GPUs (not carried there yet). NCCL's 16-bit path is
 *     verified on the NCCL emulator; unverified on GPU.
 */

void add_scalar_(tensor *t, float s);             /* in place */
void scale_(tensor *t, float s);                  /* in place */
void add_(tensor *t, const tensor *u);            /* t += u */
void sub_(tensor *t, const tensor *u);            /* t -= u (same shape and device) */
void fill_(tensor *t, float value);               /* every element = value */
double tensor_sum(const tensor *t);               /* added in double; 0 when empty */
double tensor_norm(const tensor *t);              /* sqrt(sum of squares); 0 when empty */
tensor *matmul(const tensor *a, const tensor *b); /* cuBLAS or OpenBLAS */
void matmul_into(tensor *c, const tensor *a, const tensor *b, int trans_a, int trans_b, float alpha,
                 float beta);  /* c = alpha*op(a)op(b) + beta*c */
tensor *gelu(const tensor *x); /* tanh approximation */
/* dx = dy * gelu'(x) */
tensor *gelu_backward(const tensor *x, const tensor *dy);
float mse_loss(const tensor *x);               /* mean(x^2) */
tensor *mse_loss_backward(const tensor *x);    /* 2x / numel */
float tensor_item(const tensor *t, int64_t i); /* one element to host */
double max_abs_diff(const tensor *a, const tensor *b);

typedef struct adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
    tensor *m, *v;
} adamw;
adamw *adamw_new(const tensor *param, float lr); /* torch defaults otherwise */
void adamw_step(adamw *opt, tensor *param, const tensor *grad);
void adamw_free(adamw *opt);

/* "tensor([ 6., 10., 14., 18.], device='cuda:0')" in torch's format; the
 * string lives in t->str until the next call on t. */
const char *tensor_str(tensor *t);
/* "1024x1024[-0.0239...]": shape and first element (4 decimals); a dtype
 * other than fp32 follows the shape: "1024x1024 bfloat16[-0.0239...]".
 * tensor_str adds torch's suffix: ", dtype=torch.bfloat16". */
const char *summarize(tensor *t);

/* ------------------------------------------------------------------ */
/* 3b. inspect(x): a variable's value at this step (runtime/tensor/,   */
/*     runtime/trace/)                                                 */
/* ------------------------------------------------------------------ */

/* inspect(x) records a step holding x's name as written in the source
 * ("grad" for inspect(grad), "w->data[0]" for inspect(w->data[0])) and its
 * value, for the viewer's variables panel. x is one of
 *
 *     tensor *            its shape, device and values (a device tensor is
 *                         copied to the host); up to 256 elements whole,
 *                         larger ones as min, max, mean, norm and a picture
 *                         of at most 16 x 16 block means (64 for 1-D)
 *     int, int64_t        the exact integer
 *     float, double       the number
 *
 * Another type does not compile (the _Generic has no branch for it: cast,
 * inspect((double)n)). Works in the lecture and in a spawned rank (the step
 * carries its rank; the viewer shows one column per rank). A small value
 * costs what a note costs. A NULL tensor is an error step at the line; a
 * freed tensor stops the lecture with an error naming where it was freed.
 * x is evaluated once. */
typedef enum {
    LX_INSPECT_TENSOR,
    LX_INSPECT_INT,
    LX_INSPECT_INT64,
    LX_INSPECT_FLOAT,
    LX_INSPECT_DOUBLE
} lx_inspect_kind;
void lx_inspect(const char *name, lx_inspect_kind kind, const tensor *t, int64_t i, double d);
#define LX_INSPECT_KIND(x) \
    _Generic((x), tensor *: LX_INSPECT_TENSOR, const tensor *: LX_INSPECT_TENSOR, \
    int: LX_INSPECT_INT, long: LX_INSPECT_INT64, long long: LX_INSPECT_INT64, \
    float: LX_INSPECT_FLOAT, double: LX_INSPECT_DOUBLE)
#define LX_INSPECT_T(x) _Generic((x), tensor * : (x), const tensor * : (x), default : (const tensor *)0)
#define LX_INSPECT_I(x) _Generic((x), int : (x), long : (x), long long : (x), default : 0)
#define LX_INSPECT_D(x) _Generic((x), float : (x), double : (x), default : 0.0)
#define inspect(x) lx_inspect(#x, LX_INSPECT_KIND(x), LX_INSPECT_T(x), LX_INSPECT_I(x), LX_INSPECT_D(x))

/* ------------------------------------------------------------------ */
/* 4. Collectives (inside a spawned function)                          */
/* ------------------------------------------------------------------ */

typedef enum { DIST_SUM, DIST_AVG, DIST_MIN, DIST_MAX } dist_op;

int dist_rank(void);
int dist_world_size(void);
/* "nccl" (on GPUs, or on the NCCL emulator) or "mpi" (ranks sharing a GPU:
 * "mpi"; get_device() says where the tensors live) */
const char *dist_backend(void);

void dist_barrier(void);
void dist_all_reduce(tensor *t, dist_op op);      /* in place */
void dist_reduce(tensor *t, int dst, dist_op op); /* result on dst */
void dist_broadcast(tensor *t, int src);
/* output (numel/world) = reduce(input) chunk `rank` */
void dist_reduce_scatter(tensor *output, const tensor *input, dist_op op);
/* output (world*numel) = concat over ranks of input */
void dist_all_gather(tensor *output, const tensor *input);
/* rank `src`'s input split in world_size chunks, chunk r to rank r's output */
void dist_scatter(tensor *output, const tensor *input, int src);
/* concat over ranks of input into dst's output (output ignored elsewhere) */
void dist_gather(tensor *output, const tensor *input, int dst);
/* A blocking send returns only once rank dst has posted the matching
 * receive (dist_recv, dist_irecv or dist_sendrecv), however small the
 * tensor: the semantics of MPI_Ssend. Two ranks that both send first then
 * deadlock at every size, and the runtime names both lines within about
 * two seconds, where buffering by the transport would otherwise hide the
 * bug until the tensors grow. */
void dist_send(const tensor *t, int dst);
void dist_recv(tensor *t, int src);
/* For the rare lecture that means to show the transport's buffering: from
 * this call until the spawned function returns, this rank's sends (dist_send,
 * dist_isend's wait) return as soon as the transport lets them, as a plain
 * MPI_Send does (small messages before their receive is posted). Call it in
 * every rank that relies on it; each spawn starts with it off. */
void dist_buffered_sends(int on);

/* Sends `send` to rank dst and receives `recv` from rank src in one call:
 * a ring step (every rank sends right and receives from the left) that
 * cannot deadlock whatever order the ranks arrive in. */
void dist_sendrecv(const tensor *send, int dst, tensor *recv, int src);

/* Non-blocking calls (torch's async_op=True, isend, irecv): each returns a
 * request at once and the transfer goes on while the rank computes; the
 * tensors must stay untouched (and alive) until dist_wait(req) returns with
 * the result in place. dist_wait frees the request. Under Open MPI they are
 * MPI's non-blocking calls (MPI_Iallreduce, ...); under NCCL they run on a
 * communication stream ordered after the compute stream's queued work, so
 * kernels queued before the wait overlap them. A request never waited for
 * when the spawned function returns is an error step at the line that made
 * it (and is then completed). */
typedef struct dist_request dist_request;
dist_request *dist_isend(const tensor *t, int dst);
dist_request *dist_irecv(tensor *t, int src);
dist_request *dist_all_reduce_async(tensor *t, dist_op op);
dist_request *dist_broadcast_async(tensor *t, int src);
dist_request *dist_reduce_scatter_async(tensor *output, const tensor *input, dist_op op);
dist_request *dist_all_gather_async(tensor *output, const tensor *input);
void dist_wait(dist_request *req); /* frees req */

/* Process groups and all-to-all (torch's new_group, all_to_all_single).
 *
 * dist_new_group: every rank of the spawn calls it at the same point, each
 * with the list of the group it belongs to (its own rank among them); ranks
 * that pass the same list form one group, in the list's order. A 2 x 2 mesh
 * is two calls on every rank:
 *
 *     static const int rows[2][2] = {{0, 1}, {2, 3}}, cols[2][2] = {{0, 2}, {1, 3}};
 *     dist_group *tp = dist_new_group(rows[rank / 2], 2);   // {0,1} or {2,3}
 *     dist_group *dp = dist_new_group(cols[rank % 2], 2);   // {0,2} or {1,3}
 *
 * Lists that disagree (rank 1 says {0,1}, rank 0 says {0,2}), a list without
 * the caller, a rank listed twice or out of range: an error at the call's
 * line naming the ranks. dist_group_rank: this rank's place in the list;
 * dist_group_size: the list's length. A NULL group is all ranks. The _in
 * forms are the collectives above over a group's ranks only: sizes (input =
 * group size x output, ...) and src are the group's, and the ranks of the
 * group must make the same calls in the same order (checked, as above, over
 * the group). dist_group_free: every rank of the group, once no request on
 * it is outstanding; the groups left are freed when the spawned function
 * returns.
 *
 * dist_all_to_all: `input` is world_size (group size) equal pieces; piece r
 * goes to rank r, and `output`'s piece r comes from rank r: a transpose of
 * the pieces across the ranks. Output and input have the same element
 * count and must not share memory. */
typedef struct dist_group dist_group;
dist_group *dist_new_group(const int *ranks, int n);
int dist_group_rank(const dist_group *g);
int dist_group_size(const dist_group *g);
void dist_group_free(dist_group *g);
void dist_all_reduce_in(dist_group *g, tensor *t, dist_op op);
void dist_reduce_scatter_in(dist_group *g, tensor *output, const tensor *input, dist_op op);
void dist_all_gather_in(dist_group *g, tensor *output, const tensor *input);
void dist_broadcast_in(dist_group *g, tensor *t, int src); /* src: a rank of the group (0 .. size-1) */
void dist_all_to_all(tensor *output, const tensor *input);
void dist_all_to_all_in(dist_group *g, tensor *output, const tensor *input);
dist_request *dist_all_reduce_in_async(dist_group *g, tensor *t, dist_op op);
dist_request *dist_reduce_scatter_in_async(dist_group *g, tensor *output, const tensor *input, dist_op op);
dist_request *dist_all_gather_in_async(dist_group *g, tensor *output, const tensor *input);
dist_request *dist_broadcast_in_async(dist_group *g, tensor *t, int src);
dist_request *dist_all_to_all_async(tensor *output, const tensor *input);
dist_request *dist_all_to_all_in_async(dist_group *g, tensor *output, const tensor *input);

/* 1 when the request's transfer has completed, 0 while it is in flight
 * (torch's Work.is_completed, MPI_Test): never waits. The request stays:
 * dist_wait it still, to free it and take the result (an AVG's division,
 * a receive's check, a device copy happen there). */
int dist_test(dist_request *req);

/* Every collective and every send/receive pair checks that the ranks made
 * the same call (the same collective, element count, op and root; a
 * receive as many floats as its send): a mismatch is an error step on the
 * ranks involved naming both lecture lines, and the spawn fails before any
 * result of that call is recorded (docs/authoring.md). */

/* What this rank communicated, measured where the bytes move, per kind of
 * call and per peer (runtime/comm/). A homework checks *how* the
 * ranks communicated with it, a lecture shows what a method costs:
 *
 *     dist_traffic before = dist_traffic_now();
 *     ring_all_reduce(t);
 *     dist_traffic d = dist_traffic_since(&before);
 *     check(d.calls[DIST_CALL_ALL_REDUCE] == 0, "...");
 *     check(d.sent_to[next] == t->numel * 4 / world, "...");
 *
 * calls: the calls this rank made of each kind. A non-blocking call counts
 * with its blocking twin (dist_isend as DIST_CALL_SEND, dist_irecv as
 * DIST_CALL_RECV, dist_all_reduce_async as DIST_CALL_ALL_REDUCE, ...);
 * dist_wait is no call of its own. waited: the non-blocking calls of each
 * kind whose dist_wait has returned (the collectives', and dist_isend's as
 * DIST_CALL_SEND, dist_irecv's as DIST_CALL_RECV). So, where a kind was
 * made only in its non-blocking form, calls - waited of it are in flight,
 * and calls == waited at the end says no blocking call of that kind was
 * made: an order of events that bytes cannot give (two collectives in
 * flight share the bytes that move during either's wait, see below; a
 * receive posted before a compute and waited for after it).
 *
 * Point to point (send, recv, sendrecv and their non-blocking forms): the
 * bytes lectern hands the transport, to and from each peer: exact.
 *
 * Collectives: the bytes Open MPI's own algorithm sent, read from Open MPI's
 * MPI_T performance variables (the pml "monitoring" layer's per-peer count of
 * bytes sent) around each call and put down to the call's kind. Open MPI counts
 * what a rank sends, not what it receives: bytes_received of a collective
 * kind stays 0 (what rank r received from q is what q's own traffic shows as
 * sent_to[r]). A non-blocking collective's bytes are counted at its wait:
 * everything sent between its start and the end of its wait that no other
 * call of this rank accounts for (another transfer started in between by
 * the library on its own, such as the few-byte agreement check of a call in
 * between, counts with it). Its transfer moves during the compute (the
 * rank's progress thread), so a collective made while it is in flight may
 * take some of its bytes: the split between overlapping collectives is
 * approximate, their total is not. measured_collectives is 1 when these counters back the
 * collectives' bytes; 0 where Open MPI's monitoring is not available (another
 * MPI, OMPI_MCA_pml_monitoring_enable=0, or NCCL, whose traffic Open MPI does
 * not see): the collectives' bytes are then 0, never a guess.
 *
 * nominal_sent: what a bandwidth-optimal algorithm sends for the same calls,
 * the textbook figure (the convention of nccl-tests' busbw), to compare with
 * the measured one: for p ranks and b bytes, all-reduce 2(p-1)/p b;
 * reduce-scatter and all-gather (p-1)/p of the whole (input, resp. output);
 * broadcast and reduce b, from every rank but one (a chain); scatter (p-1)
 * pieces at the root; gather one piece from every other rank; send b;
 * receives and barriers 0; sendrecv its send.
 *
 * dist_traffic_now(): the totals since this rank's spawn started (all zero
 * outside a spawn). dist_traffic_since(&start): now minus `start`, the
 * traffic between the two points. */
typedef enum {
    DIST_CALL_BARRIER,
    DIST_CALL_ALL_REDUCE,
    DIST_CALL_REDUCE,
    DIST_CALL_BROADCAST,
    DIST_CALL_REDUCE_SCATTER,
    DIST_CALL_ALL_GATHER,
    DIST_CALL_SCATTER,
    DIST_CALL_GATHER,
    DIST_CALL_SEND,
    DIST_CALL_RECV,
    DIST_CALL_SENDRECV,
    DIST_CALL_ALL_TO_ALL,
    DIST_CALL_KINDS
} dist_call_kind;

typedef struct dist_traffic {
    int64_t calls[DIST_CALL_KINDS];
    int64_t waited[DIST_CALL_KINDS];          /* non-blocking calls waited for */
    int64_t bytes_sent[DIST_CALL_KINDS];      /* measured (collectives: see measured_collectives) */
    int64_t bytes_received[DIST_CALL_KINDS];  /* measured; point to point only */
    int64_t sent_to[LECTERN_MAX_WORLD];       /* measured, every kind, per peer */
    int64_t received_from[LECTERN_MAX_WORLD]; /* measured, point to point, per peer */
    int64_t nominal_sent[DIST_CALL_KINDS];    /* the formula's figure, per kind */
    int measured_collectives;                 /* 1: Open MPI's counters back the collectives' bytes */
} dist_traffic;

dist_traffic dist_traffic_now(void);
dist_traffic dist_traffic_since(const dist_traffic *start);
/* "all_reduce", "send", ...: the kind's name as dist_<name> spells it. */
const char *dist_call_name(dist_call_kind kind);
/* Sums over the kinds: every byte this rank sent (measured), the nominal
 * figure, every call. */
int64_t dist_traffic_sent(const dist_traffic *t);
int64_t dist_traffic_nominal(const dist_traffic *t);
int64_t dist_traffic_calls(const dist_traffic *t);
/* The calls counted in t, kind by kind in dist_call_kind's order, as a
 * check's message says them: "1 dist_all_gather call, 2 dist_send calls",
 * or "no calls". Written into buf (size bytes, cut short if it does not
 * fit, always terminated when size > 0); returns buf. A NULL t or buf is
 * an error at the caller's line. */
const char *dist_traffic_text(const dist_traffic *t, char *buf, size_t size);

/* Since this rank's spawn started: the nominal bytes (the formula's figure
 * above, summed over every call: dist_traffic_now().nominal_sent added up)
 * and the number of calls. 0 outside a spawn. */
int64_t dist_bytes_nominal(void);
int64_t dist_calls(void);

/* ------------------------------------------------------------------ */
/* 5. Timing helpers                                                   */
/* ------------------------------------------------------------------ */

double now_seconds(void); /* monotonic clock */
/* Waits for the GPU's compute stream (every tensor operation, cuBLAS call
 * and copy; a stream the lecture made itself needs cudaStreamSynchronize),
 * or nothing on the CPU. */
void device_synchronize(void);

/* Modelled compute (runtime/comm/model_compute.c): the calling rank's device
 * is busy for `ms` milliseconds without holding a CPU core, so that a speed
 * lesson shows the schedule rather than how many cores this machine has:
 *
 *     dist_request *r = dist_all_reduce_async(bucket, DIST_SUM);
 *     model_compute(20.0);          // the next layer's backward, as a GPU would take it
 *     dist_wait(r);                 // the all-reduce moved meanwhile
 *
 * On the CPU the calling thread sleeps for ms (the core is free for other
 * ranks), waking every 0.1 ms while transfers are in flight to move them
 * (a few microseconds each; the rank's progress thread, at nice 19, can be
 * starved by other processes' load, a device's communication is not);
 * on a GPU one kernel on the rank's compute stream spins on the device for
 * ms and the call returns at once, work queued after it starting after it
 * (as torch.cuda._sleep; UNVERIFIED on a GPU, docs/gpu.md). The device is
 * the rank's (get_device), the lecture's own outside a spawn. No arithmetic
 * is done: a figure that rests on it is *modelled*, and the lecture says so.
 * Every call is a span of the trace's "modelled" array (its rank, start, end,
 * the ms asked and the calling line) and the trace's meta.modelled_compute
 * is true; chart_span_modelled() draws such spans marked as modelled
 * (docs/trace-format.md). ms NaN, below 0 or above LECTERN_MAX_MODEL_MS is
 * an error step at the calling line (the lecture exits 1 at the end) and
 * nothing is slept or recorded; 0 records an empty span. */
#define LECTERN_MAX_MODEL_MS 10000.0 /* 10 s: no lesson's step is longer */
void model_compute(double ms);

/* The median of n timings (sorts `values` in place): the middle one, or the
 * mean of the two middle ones when n is even. One slow repetition (the
 * machine busy with something else) does not move it, as it moves a mean.
 * n < 1 or NULL values is an error step. */
double median_of(double *values, int n);

/* Times a region of work across the ranks of a spawn (runtime/comm/):
 *
 *     dist_timer t = {0};
 *     dist_timer_start(&t);      // every rank: device work done, a barrier, the clock
 *     train_step(...);
 *     dist_timer_stop(&t);       // device work done, the clock, every rank's time gathered
 *     if (rank == 0) note("step: max %.1f ms, mean %.1f ms", t.max * 1e3, t.mean * 1e3);
 *
 * Both calls are collective: every rank of the spawn must make them. The
 * region between them is a timed region (dist_timed_begin below): make one
 * warm-up call of what you time before the start, as any benchmark does. After
 * dist_timer_stop every rank holds the same max, mean and min over the
 * ranks (float32 precision) and its own `seconds`. Outside a spawn it
 * times the lecture's own process (max = mean = min = seconds). stop
 * returns max; a stop without a start is an error step (and NAN). */
typedef struct dist_timer {
    double started;        /* this rank's clock at the start */
    double seconds;        /* this rank's time for the region */
    double max, mean, min; /* over the ranks, after the stop */
    int world_size;        /* ranks the figures are over */
    int running;           /* 1 between start and stop */
} dist_timer;
void dist_timer_start(dist_timer *timer);
double dist_timer_stop(dist_timer *timer);

/* A timed region: time a collective alone, without the runtime's check.
 *
 * Every collective and send/receive first checks that the ranks made the
 * same call (section 4): one small all-reduce of a few numbers, a few
 * microseconds, which a loop timing a small message would mostly measure.
 * Between dist_timed_begin() and dist_timed_end(), a call the ranks already
 * agreed on earlier in this spawn (same collective, element count, op and
 * root; for a send or receive the same peer and count) skips its check; a
 * call not seen before is checked as usual. So the warm-up call before the
 * loop carries the check, and the loop times the library:
 *
 *     dist_all_reduce(t, DIST_SUM);              // warm-up, checked
 *     dist_timed_begin();
 *     for (int i = 0; i < reps; i++) dist_all_reduce(t, DIST_SUM);   // not checked
 *     dist_timed_end();
 *
 * Every rank that takes part in what the region times makes both (a
 * ping-pong between ranks 0 and 1 of four: those two); regions nest;
 * dist_timer_start/stop open and close one. A group's calls (dist_*_in)
 * skip theirs likewise, against what the group's ranks agreed on before.
 * When the region skipped checks of collectives, dist_timed_end compares
 * what the ranks skipped (one small all-reduce over every rank, and one over
 * each group that skipped some, outside the timing; a group freed inside the
 * region compares at dist_group_free): ranks that made different calls in
 * the region are an error at its line. A mismatch that
 * hangs the transfer itself is reported as a deadlock. A non-blocking
 * send's buffer is hashed at the call and at its wait, so that a change
 * through ->data before the wait is caught there; inside a region it is
 * not (the hashes read the whole buffer on the lecture's thread, time an
 * overlap would count as exposed transfer), and such a change goes
 * unnoticed; a tensor operation's change is still refused. Outside a spawn
 * both do nothing. */
void dist_timed_begin(void);
void dist_timed_end(void);

/* ------------------------------------------------------------------ */
/* 6. Checks: right or wrong, said by the lecture                      */
/* ------------------------------------------------------------------ */

/* Each check records a step (rendering type "check") at the line that calls
 * it, whether it passed or not, and returns 1 when it passed, 0 when it
 * failed. A failed check does not stop the lecture: it is said on stderr
 * with its file:line, the lecture goes on, and at the end the run counts as
 * failed (exit status 1, the trace written as NAME.failed.json). After the
 * run the console's last line is "checks: N passed, M failed" (when any
 * check ran; ", K not reached" too where the lecture declared exercises
 * with grade_exercise: the checks their counts promise that the run never
 * made); the trace's meta.checks holds the same counts, however the run
 * ended. Checks work
 * in the lecture and inside spawned ranks alike (a rank's check counts in
 * the lecture's totals and is shown in its rank's column). */

/* Passes when every element satisfies
 *     |actual - expected| <= atol + rtol * |expected|
 * (numpy.isclose, torch.allclose), compared on the host in double whatever
 * devices the tensors are on. Two equal infinities match; a NaN never does.
 * The step records the largest absolute difference and the largest relative
 * difference (|a - e| / |e|, over elements where e != 0), each with its
 * index, how many elements are outside the tolerance and the first of them.
 * Different shapes, or a negative or non-finite tolerance, are a failed
 * check saying so; a NULL tensor is an error step (a mistake in the code,
 * like any NULL given to the runtime). `what` names the comparison ("gradients of
 * layer 0"); NULL or "" gives "check_close". */
int check_close(const tensor *actual, const tensor *expected, double rtol, double atol, const char *what);

/* Passes when `condition` is non-zero; `fmt` (printf-style) says what was
 * checked, best written as what should be true ("loss went down: %g < %g").
 * A NULL fmt is an error step. */
int check(int condition, const char *fmt, ...) LECTERN_PRINTF(2, 3);

/* check() with a name that stays the same from run to run: `name` says
 * which check it is ("exercise 1: the ring's traffic"), `fmt` what this run
 * saw ("sent 7000 bytes to rank 1"). The step's text is "name: what was
 * seen" and its rendering keeps the name apart ("name"): --grade calls the
 * test by the name alone, so a pass and a fail of one check, and two runs of
 * one submission, are the same test, and grade_exercise's prefix is
 * matched against it. A NULL or empty name, or a NULL fmt, is an error
 * step. */
int check_named(int condition, const char *name, const char *fmt, ...) LECTERN_PRINTF(3, 4);

/* Stops the lecture (or the rank) at once with an error step at the line
 * that calls it: `fmt` (printf-style) says what is wrong, as the runtime's
 * own errors do ("the batch (6) does not divide into 4 equal parts"). Exit
 * status 1; the trace is written as NAME.failed.json with every step
 * recorded so far, and the last good trace stays. For input the lecture
 * cannot go on with (an option's value, a size that does not divide); a
 * NULL fmt is an error step too. Does not return. */
void lecture_fail(const char *fmt, ...) LECTERN_PRINTF(1, 2) __attribute__((noreturn));

/* A grade for a course's autograder. `--grade FILE` (every lecture takes
 * it) writes FILE in Gradescope's results.json format: one test per check
 * and rank, named by the check's name (check_named) or its text, so the
 * same check has the same name in every run; its output PASS or FAIL with
 * the numbers that decided it and the lecture line; the total score; and
 * the run's console tail (stdout and stderr, the ranks' printf included).
 * The file is written however the run ends (a failed check, an error, a
 * crash, a deadlock, an exercise past its time limit, a SIGTERM from the
 * autograder's own time limit); a FILE that cannot be written is bad usage
 * (exit 2) before the lecture runs. docs/homework.md has the autograder's
 * script.
 *
 * Every check weighs 1 point unless the lecture groups checks into
 * exercises, in the lecture (not in a rank), before the checks run:
 *
 *     grade_exercise("exercise 1:", 30, 3 * world);   // 3 checks per rank
 *
 * The checks whose name starts with `prefix` share `points` equally, over
 * `checks` checks: how many a complete run makes, so that a run that stops
 * early lists those it did not reach as one test worth 0 ("exercise 1:
 * checks not reached"), with the reason: the errors of the exercise's own
 * spawn_exercise(), else the run's. A prefix declared twice, a NULL or
 * empty prefix, negative or non-finite points or checks < 1 are error
 * steps. Without --grade it records the weights and counts the checks not
 * reached (the console's last line, meta.checks). */
void grade_exercise(const char *prefix, double points, int checks);

/* When the student sees a check: Gradescope's test visibility, "visible"
 * (the default), "hidden" (never), "after_due_date" or "after_published",
 * for the checks whose name starts with `prefix`; the longest prefix set
 * decides. Call it in the lecture (not in a rank), before the spawns, after
 * the grade_exercise() whose prefix `prefix` starts with: the exercise's
 * prefix sets all its checks, a longer one (a check's name) one check.
 *
 *     grade_exercise("exercise 2:", 30, 5 * world);
 *     grade_visibility("exercise 2: at another size", "after_due_date");
 *
 * --grade's results.json gives each test its "visibility". A check that is
 * not visible keeps what it saw for the grader: its test's output in
 * results.json has the whole verdict, while the console's FAIL line and
 * the trace give its name, its line and whether it passed, nothing else
 * (the trace's check rendering carries "visibility"; docs/homework.md).
 * Give such a check a name (check_named) that holds no measured value: its
 * name is shown. A NULL or empty prefix, a visibility other than the four,
 * a prefix no declared exercise's prefix starts, the same prefix twice, or
 * a call in a rank is an error step at the call's line. */
void grade_visibility(const char *prefix, const char *visibility);

/* A number for the course's leaderboard: results.json's top-level
 * "leaderboard" list gets {"name", "value", "order"}, order "asc" (smaller
 * ranks first) or "desc" (larger first), as Gradescope reads it. Call it in
 * the lecture or in a rank: in a rank only rank 0's call makes the entry
 * (so all ranks can run the same code). The entry is also a note step
 * ("Leaderboard: NAME = VALUE, smaller ranks first"). The same name again
 * replaces the value; up to 64 names. A NULL or empty name, a NaN or
 * infinite value, or an order other than "asc" and "desc" is an error step
 * at the call's line. */
void grade_leaderboard(const char *name, double value, const char *order);

/* A value of a homework that differs from student to student: an integer
 * from lo to hi (inclusive) named `name` ("micro-batches"), picked from
 * `--variant SEED` (every lecture takes it; SEED a whole number from 0 to
 * 4294967295, anything else bad usage, exit 2). Without --variant it is
 * `fallback`, the homework's usual value, so runs without a seed keep
 * their numbers.
 *
 * The value is a hash of the seed and the name: the same seed gives the
 * same value in every run and in every rank (they receive the seed), and
 * values of different names are unrelated. The homework computes what its
 * checks expect from the values it is given, so the checks test the same
 * in every variant and no answer key is needed.
 *
 *     int m = variant_int("micro-batches", 6, 10, 8);
 *
 * Call it in the lecture before the spawns and pass the values to the
 * ranks in the spawn's arguments: the lecture's calls are recorded, in the
 * trace (meta.variant: {"seed": S, "values": {name: value}}) and in
 * --grade's results (extra_data.variant, and a line "Variant S: name =
 * value, ..." under the counts in the output); a rank's call returns the
 * same value but records nothing. A NULL or empty name, lo > hi or a
 * fallback outside lo..hi is an error step at the calling line (and
 * returns fallback); one name asked again with another range is one too. */
int variant_int(const char *name, int lo, int hi, int fallback);

/* ------------------------------------------------------------------ */
/* 7. Tables and charts: results as data (runtime/trace/)              */
/* ------------------------------------------------------------------ */

/* A table of results, recorded as data: the viewer shows it (sortable by
 * any column, by mouse or keyboard) and a test reads its numbers back from
 * the trace, not from prose. Build, fill, show:
 *
 *     table_t *t = table_new("all-reduce on %d ranks", world_size);
 *     table_column(t, "size", "MiB", "%g");
 *     table_column(t, "time", "ms", "%.3f");
 *     table_column(t, "operation", NULL, "%s");
 *     for (int i = 0; i < n; i++)
 *         table_row(t, bytes[i] / MiB, seconds[i] * 1e3, "all-reduce");
 *     table_show(t);                        // one step, at this line; frees t
 *
 * table_new: the caption, printf-style (NULL: none). table_column: the
 * column's name, its unit (NULL or "" for none; shown in the header as
 * "time (ms)") and a printf format with exactly one conversion, which also
 * says what table_row reads for the column, as printf would: %d or %i an
 * int, %ld a long, %lld a long long (an int64_t is one of the two), %f %e
 * %g a double, %s a string. table_row: one value per column, in order.
 * The trace holds each value (a number as a JSON number; a double that is
 * NaN or infinite as null) and its text through the format. Columns come
 * before rows; a bad format, a column after a row, more than
 * TABLE_MAX_COLUMNS columns or a table with no columns are error steps at
 * the calling line (and table_show shows nothing). */
#define TABLE_MAX_COLUMNS 16
typedef struct table table_t;
table_t *lx_table_new(const char *args_text, const char *caption_fmt, ...) LECTERN_PRINTF(2, 3);
/* A macro, as note() is: the caption's arguments are kept by name
 * ("caption_args", docs/trace-format.md). */
#define table_new(...) lx_table_new(#__VA_ARGS__, __VA_ARGS__)
void table_column(table_t *t, const char *name, const char *unit, const char *format);
void table_row(table_t *t, ...);
void table_show(table_t *t);

/* A chart of measured numbers: the runtime writes the Vega-Lite and records
 * it as plot() does. Axis labels carry their units.
 *
 *     chart_t *c = chart_new("message size (MiB)", "busbw (GB/s)", "busbw on %d ranks", p);
 *     chart_log_x(c, 2);                             // optional: log axes
 *     chart_line(c, "all-reduce", sizes, busbw, n);  // a series: n (x, y) points, with markers
 *     chart_line(c, "reduce-scatter", sizes, rs, n);
 *     chart_show(c);                                 // one step, at this line; frees c
 *
 * A chart is lines or spans. chart_span(c, row, series, label, start, end)
 * adds a bar from start to end (x) on the row named `row` (y), coloured by
 * series, `label` (NULL: none) shown when the pointer is on it: a timeline,
 * chart_span(c, "stage 0", "forward", "micro-batch 2", 1.2, 3.4). The spec's
 * data.values keep the numbers as given: {"series", "x", "y"} per point,
 * {"series", "row", "label", "start", "end"} per span; a point that is not finite, or <= 0 on a log
 * axis, is left out (counted in usermeta.dropped_points). Lines and spans in
 * one chart, a series of no points, a log base below 2 or a NULL argument
 * are error steps at the calling line (and chart_show shows nothing).
 *
 * chart_span_modelled: the same for a span of modelled compute (a stage's
 * forward that model_compute() stood for): its value also holds
 * "modelled": true, and in a chart with any such span every span's value
 * holds "compute" ("modelled" or "measured"), which the chart draws pale
 * with a dashed outline for modelled, solid for measured, with a legend
 * entry ("compute") and a line in the tooltip; the chart's description says
 * what a modelled span is, and the viewer writes it under the chart. One
 * chart may hold both, a real run's timeline beside a modelled one. */
typedef struct chart chart_t;
chart_t *lx_chart_new(const char *args_text, const char *x_label, const char *y_label, const char *title_fmt, ...)
        LECTERN_PRINTF(4, 5);
/* A macro, as note() is: the title's arguments are kept by name
 * ("title_args", docs/trace-format.md). */
#define chart_new(x_label, y_label, ...) lx_chart_new(#__VA_ARGS__, x_label, y_label, __VA_ARGS__)
void chart_log_x(chart_t *c, int base);
void chart_log_y(chart_t *c, int base);
void chart_line(chart_t *c, const char *series, const double *xs, const double *ys, int n);
void chart_span(chart_t *c, const char *row, const char *series, const char *label, double start, double end);
void chart_span_modelled(chart_t *c, const char *row, const char *series, const char *label, double start, double end);
void chart_show(chart_t *c);

#ifdef __cplusplus
}
#endif

#endif /* LECTERN_H */
