/*
 * lecture_gpu: what a GPU is, how a kernel uses its memory, what limits a
 * computation (the roofline), and how training spreads over many GPUs.
 *
 *     make run LECTURE=lecture_gpu
 *
 * and open viewer/index.html?trace=lecture_gpu. The kernels it teaches are
 * in lectures/lecture_gpu_kernels.cu, compiled by nvcc in a CUDA build and
 * run where a GPU is present; everywhere else the lecture runs the CPU
 * versions and says that the GPU part did not run, and why. Every result is
 * checked against the runtime's own operations (OpenBLAS or cuBLAS), and
 * every number in the roofline is measured on the machine that ran it.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/mlp.h"
#ifdef LECTERN_CUDA
#include "lecture_gpu_kernels.h"
#endif

LECTURE_OPTIONS({"matmul-n", "N",
                 "size of the matrices the tiles section multiplies (default 512; 128 with --quick); "
                 "any N from 1 to 2048, a multiple of the tile or not"});

static void why_gpus(void);
static void memory_hierarchy(void);
static void vector_add_section(void);
static void matmul_section(void);
static void intensity_section(void);
static void roofline_section(void);
static void many_gpus_section(void);
static void many_machines_section(void);
static void summary(void);

static void lecture_gpu(void) {
    note("# GPUs: one, then many");
    note("A GPU is a processor built for throughput: tens of thousands of threads "
         "running the same small program on different data. This lecture looks at "
         "what that buys and what it costs: the chip and its memory, two kernels "
         "written by hand (a vector add and a tiled matrix multiply), the roofline "
         "that says whether a computation is limited by arithmetic or by memory, "
         "and what changes when one model is trained on many GPUs (DDP against "
         "FSDP) and on many machines.");
    why_gpus();
    memory_hierarchy();
    vector_add_section();
    matmul_section();
    intensity_section();
    roofline_section();
    many_gpus_section();
    many_machines_section();
    summary();
}

/* ------------------------------------------------------------------ */
/* Small tools                                                         */
/* ------------------------------------------------------------------ */

/* A growing piece of markdown (a table) built row by row. */
typedef struct text {
    char s[16384];
    size_t n;
} text;

static void add_text(text *t, const char *fmt, ...) LECTERN_PRINTF(2, 3);
static void add_text(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
    va_end(ap);
    if (k > 0) t->n += (size_t)k < sizeof t->s - t->n ? (size_t)k : sizeof t->s - t->n - 1;
}

/* The device the single-device sections run on: cuda:0 where there is a
 * GPU, else the CPU. */
static int main_device(void) { return get_device(0); }

static const char *device_name(int device) { return device >= 0 ? "the GPU (cuda:0)" : "the CPU"; }

/* Why the GPU part is not running here, or NULL when it is. */
static const char *no_gpu_reason(void) {
#ifdef LECTERN_CUDA
    if (gpu_count() == 0)
        return "this build has CUDA, but the CUDA runtime finds no GPU on this machine (gpu_count() is 0)";
    return NULL;
#else
    return "this build has no CUDA (nvcc was not found when it was built, or `make CUDA=0`)";
#endif
}

/* Times `reps` runs of work(arg), each finished on the device
 * (device_synchronize) before the clock is read: a kernel launch returns
 * long before the kernel is done. `warm`: run it once untimed first, so
 * first-call costs (a cuBLAS handle, page faults) stay out of the figures.
 * Returns the median; *fastest gets the fastest run. */
static double time_runs(void (*work)(void *), void *arg, int reps, int warm, double *fastest) {
    double t[64];
    if (reps > 64) reps = 64;
    if (warm) work(arg);
    device_synchronize();
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        work(arg);
        device_synchronize();
        t[r] = now_seconds() - t0;
    }
    double m = median_of(t, reps); /* sorts t */
    *fastest = t[0];
    return m;
}

/* The typical time of a piece of work: the median of its runs. */
static double time_median(void (*work)(void *), void *arg, int reps, int warm) {
    double fastest;
    return time_runs(work, arg, reps, warm, &fastest);
}

/* What the machine can do: the fastest run. Another program on the machine
 * can only slow a run down, never speed it up, so for a roof (the best this
 * device reaches) the fastest of several runs is the honest estimate. */
static double time_fastest(void (*work)(void *), void *arg, int reps) {
    double fastest;
    time_runs(work, arg, reps, 1, &fastest);
    return fastest;
}

/* The text between "lecture: NAME" and "lecture: end" in the kernels file,
 * so the lecture shows exactly what nvcc compiles; NULL if missing. The
 * caller frees it. */
static char *kernel_source(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/lectures/lecture_gpu_kernels.cu", lecture_root());
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char all[16384];
    size_t n = fread(all, 1, sizeof all - 1, f);
    fclose(f);
    all[n] = 0;
    char start[64];
    snprintf(start, sizeof start, "/* lecture: %s */\n", name);
    char *from = strstr(all, start);
    char *to = from ? strstr(from, "/* lecture: end */") : NULL;
    if (!to) return NULL;
    from += strlen(start);
    char *out = malloc((size_t)(to - from) + 1);
    memcpy(out, from, (size_t)(to - from));
    out[to - from] = 0;
    return out;
}

static void show_kernel(const char *name) {
    char *src = kernel_source(name);
    check(src != NULL, "the kernel `%s` is in lectures/lecture_gpu_kernels.cu", name);
    if (src == NULL) return;
    note("```cuda\n%s```", src);
    free(src);
}

/* rows x cols standard normal float32 numbers (cols 0: a vector of rows)
 * from the runtime's generator, as a plain host array the caller frees. */
static float *host_randn(int rows, int cols) {
    tensor *t = randn(rows, cols, -1);
    float *p = malloc(sizeof(float) * (size_t)t->numel);
    tensor_to_host(t, p);
    tensor_free(t);
    return p;
}

/* ------------------------------------------------------------------ */
/* Why GPUs                                                            */
/* ------------------------------------------------------------------ */

typedef struct add_work {
    tensor *x, *y;
} add_work;

static void add_in_place(void *arg) {
    add_work *w = arg;
    add_(w->x, w->y);
}

static void latency_and_throughput(void) {
    note("## Latency and throughput");
    note("Every operation has a fixed cost (deciding what to run, launching it) and a "
         "cost per element. A CPU core keeps the fixed cost tiny and makes one thread "
         "fast; a GPU pays more to start (a kernel launch crosses PCIe and takes "
         "microseconds) and then runs thousands of elements at once. Here is the same "
         "`add_()` on one element and on many, on %s:",
         device_name(main_device()));
    int device = main_device();
    int64_t big = lecture_quick() ? (1 << 20) : (1 << 22);
    if (device >= 0) big *= 16;
    add_work one = {zeros(1, 0, device), zeros(1, 0, device)};
    add_work many = {zeros(big, 0, device), zeros(big, 0, device)};
    double t1 = time_median(add_in_place, &one, 51, 1);
    double tn = time_median(add_in_place, &many, 7, 1);
    char question[300];
    snprintf(question, sizeof question,
             "`add_()` on 1 element and on %lld elements, on %s: how many times as long as the 1-element call "
             "does the %lld-element call take?",
             (long long)big, device_name(device), (long long)big);
    predict(question, tn / t1, "");
    table_t *t = table_new("add_() on one element and on many, on %s", device_name(device));
    table_column(t, "elements", NULL, "%lld");
    table_column(t, "time", "us", "%.2f");
    table_column(t, "per element", "ns", "%.4f");
    table_column(t, "time / time of 1 element", NULL, "%.1f");
    table_row(t, 1LL, t1 * 1e6, t1 * 1e9, t1 / t1);
    table_row(t, (long long)big, tn * 1e6, tn * 1e9 / (double)big, tn / t1);
    table_show(t);
    note("One element costs %.2f us, almost all of it fixed cost; %lld elements cost %.0f times "
         "as much, not %lld times. A GPU is the extreme of this trade: give it large "
         "batches of the same work, or its fixed costs dominate.",
         quoted(t1 * 1e6), (long long)big, quoted(tn / t1), (long long)big);
    tensor_free(many.y);
    tensor_free(many.x);
    tensor_free(one.y);
    tensor_free(one.x);
}

static void this_machine(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    note("This machine's CPU has %ld cores online.", cores);
#ifdef LECTERN_CUDA
    if (gpu_count() > 0) {
        gpu_facts f;
        gpu_facts_of(0, &f);
        note("Its GPU 0 is a %s: %d SMs, each holding up to %d resident threads, so **%d "
             "threads** at once; %d registers and %d KiB of shared memory per SM, %d MiB "
             "of L2 cache shared by all SMs, and %.1f GiB of its own memory (HBM).",
             f.name, f.sms, f.threads_per_sm, f.sms * f.threads_per_sm, f.registers_per_sm, f.shared_per_sm / 1024,
             f.l2_bytes >> 20, f.global_bytes / (1 << 30));
        return;
    }
#endif
    note("There is no GPU to describe here: %s.", no_gpu_reason());
}

static void why_gpus(void) {
    note("## Why GPUs");
    note("A CPU has a few cores (from 4 in a laptop to a few hundred in the largest server parts), each built to run one thread as fast as "
         "possible: large caches, branch prediction, out-of-order execution. A GPU "
         "spends its transistors on arithmetic instead. It is made of *streaming "
         "multiprocessors* (SMs; an H100 has 132), each holding up to 2048 threads at "
         "once; threads run in groups of 32 (a *warp*) that execute the same "
         "instruction together. While one warp waits for memory, the SM runs another: "
         "the GPU hides memory latency with more work, not with bigger caches.");
    note("That suits deep learning: a layer is a matrix product or an element-wise "
         "function over millions of numbers, the same operation on every element. "
         "A programmer writes a *kernel*, the code of one thread, and launches it "
         "on a *grid* of *blocks* of threads; each thread finds its own element from "
         "its block and thread index.");
    this_machine();
    latency_and_throughput();
}

/* ------------------------------------------------------------------ */
/* Memory hierarchy                                                    */
/* ------------------------------------------------------------------ */

static void memory_hierarchy(void) {
    note("## The memory hierarchy");
    note("Arithmetic is cheap; moving data is what costs. Each level of a GPU's memory "
         "is larger and slower than the one above it:");
    image("assets/lecture_gpu_memory.svg", 0.9);
    note("- **Registers**: private to a thread, read in a cycle. A kernel's local "
         "variables live here (the `acc` of the matrix multiply below).\n"
         "- **Shared memory**: on the SM, shared by the threads of one block, a few "
         "cycles away; the programmer decides what goes in it (the tiles below).\n"
         "- **L2 cache**: on the chip, shared by all SMs, managed by the hardware.\n"
         "- **HBM** (or GDDR on gaming cards): the GPU's own memory, tens of GB, "
         "several TB/s on data-centre GPUs, but hundreds of cycles away.\n"
         "- **Host memory**, over PCIe: the CPU's RAM, reached at tens of GB/s. Data "
         "crosses it when a tensor moves between devices (`to_device()`), which is why "
         "a training loop moves the model once and each batch once, and nothing else.");
    note("A fast kernel is one that reads each number from HBM as few times as "
         "possible and reuses it from registers and shared memory.");
}

/* ------------------------------------------------------------------ */
/* Vector add                                                          */
/* ------------------------------------------------------------------ */

/* The CPU version: one loop, one element per iteration. */
static void cpu_vector_add(const float *x, const float *y, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] + y[i];
}

#ifdef LECTERN_CUDA
static void vector_add_on_gpu(const float *x, const float *y, int64_t n, const tensor *expected_host) {
    tensor *dx = tensor_from(x, n, 0, 0), *dy = tensor_from(y, n, 0, 0);
    tensor *out = empty(n, 0, 0);
    gpu_vector_add(0, dx->data, dy->data, out->data, n);
    device_synchronize();
    /* Reference: the runtime's add_ on the GPU (cuBLAS axpy with alpha 1). */
    tensor *ref = to_device(dx, 0);
    add_(ref, dy);
    check_close(out, ref, 0, 0, "vector_add kernel vs add_() on the GPU");
    check_close(out, expected_host, 0, 0, "vector_add kernel on the GPU vs the CPU loop");
    tensor_free(ref);
    tensor_free(out);
    tensor_free(dy);
    tensor_free(dx);
}
#endif

static void vector_add_section(void) {
    note("## A first kernel: vector add");
    note("Adding two vectors is the simplest parallel work there is: every element is "
         "independent. On a CPU it is a loop:");
    int64_t n = lecture_quick() ? 100000 : 1000000;
    float *x = host_randn((int)n, 0), *y = host_randn((int)n, 0);
    float *out = malloc(sizeof(float) * (size_t)n);
    cpu_vector_add(x, y, out, n);
    tensor *got = tensor_from(out, n, 0, -1);
    tensor *ref = tensor_from(x, n, 0, -1), *ty = tensor_from(y, n, 0, -1);
    add_(ref, ty);
    /* Tolerance 0: each element is one float addition of the same two floats,
     * and IEEE 754 rounds it the same way on every machine. */
    check_close(got, ref, 0, 0, "the CPU loop vs the runtime's add_()");
    note("On a GPU the loop disappears. The kernel is the body of the loop for one "
         "element; the launch makes one thread per element, in blocks of 256, and "
         "each thread works out which element is its own:");
    show_kernel("vector_add");
    const char *why = no_gpu_reason();
    if (why) {
        note("**The GPU part did not run on this machine**: %s. The kernel above is "
             "compiled wherever nvcc is present; on a machine with a GPU this section "
             "runs it on the same %lld elements and checks it, exactly, against the CPU "
             "loop and against `add_()` on the GPU.",
             why, (long long)n);
    } else {
#ifdef LECTERN_CUDA
        vector_add_on_gpu(x, y, n, ref);
#endif
    }
    tensor_free(ty);
    tensor_free(ref);
    tensor_free(got);
    free(out);
    free(y);
    free(x);
}

/* FLOPs and the fewest bytes that must move between memory and the chip
 * (each input read once, each output written once), float32. */
static double add_flops(double n) { return n; }
static double add_bytes(double n) { return 3 * 4 * n; }
static double mm_flops(double n) { return 2 * n * n * n; }
static double mm_bytes(double n) { return 3 * 4 * n * n; }

enum { MAX_POINTS = 12, MAX_THREADS = 64, STREAM_RUNS = 10 };

typedef struct roof_point {
    const char *kernel;
    int n;
    double intensity, gflops;
} roof_point;

/* The kernels the lecture ran before the roofline, kept to be placed under
 * it: the vector add's and matrix products' own loops (or kernels, on a GPU). */
static roof_point earlier[4];
static int n_earlier;

static void keep_point(const char *kernel, int n, double flops, double bytes, double seconds) {
    if (n_earlier < (int)(sizeof earlier / sizeof earlier[0]))
        earlier[n_earlier++] = (roof_point){kernel, n, flops / bytes, flops / seconds / 1e9};
}

/* ------------------------------------------------------------------ */
/* Matrix multiply                                                     */
/* ------------------------------------------------------------------ */

/* c = a b, n x n row-major: the textbook triple loop. Each c[i][j] walks a
 * row of a and a column of b; the column is n floats apart in memory, so
 * for large n every step of k is a cache miss. */
static void matmul_naive(const float *a, const float *b, float *c, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int k = 0; k < n; k++)
                acc += a[i * n + k] * b[k * n + j];
            c[i * n + j] = acc;
        }
}

/* The same product in CPU_TILE x CPU_TILE blocks: three 32x32 tiles (12 KiB)
 * fit in a core's L1 cache, so each number brought in from memory is used
 * CPU_TILE times before it is evicted: the CPU's version of the shared-memory
 * tiles of the GPU kernel. Inside a tile the loops run i, k, j, so the
 * innermost loop reads b and writes c along rows (consecutive addresses). */
enum { CPU_TILE = 32 };

static void matmul_tiled(const float *a, const float *b, float *c, int n) {
    memset(c, 0, sizeof(float) * (size_t)n * (size_t)n);
    for (int i0 = 0; i0 < n; i0 += CPU_TILE)
        for (int k0 = 0; k0 < n; k0 += CPU_TILE)
            for (int j0 = 0; j0 < n; j0 += CPU_TILE)
                for (int i = i0; i < i0 + CPU_TILE && i < n; i++)
                    for (int k = k0; k < k0 + CPU_TILE && k < n; k++) {
                        float aik = a[i * n + k];
                        for (int j = j0; j < j0 + CPU_TILE && j < n; j++)
                            c[i * n + j] += aik * b[k * n + j];
                    }
}

/* How far two float32 computations of a b may be apart, element by element.
 * A float32 sum of n products, added in any order, is within
 * gamma_n = n u / (1 - n u) (u = 2^-24) of the exact sum times
 * sum_k |a_ik| |b_kj|; two such computations are within twice that. The
 * largest sum_k |a_ik| |b_kj| is computed with matmul() of |a| and |b|. A
 * real mistake (a tile skipped, an index off by one) is off by a whole
 * product, orders of magnitude more. */
static double matmul_tolerance(const float *a, const float *b, int n, double *largest_sum) {
    size_t nn = (size_t)n * (size_t)n;
    float *aa = malloc(sizeof(float) * nn), *bb = malloc(sizeof(float) * nn);
    for (size_t i = 0; i < nn; i++) {
        aa[i] = fabsf(a[i]);
        bb[i] = fabsf(b[i]);
    }
    tensor *ta = tensor_from(aa, n, n, -1), *tb = tensor_from(bb, n, n, -1);
    tensor *s = matmul(ta, tb);
    double smax = largest(s);
    *largest_sum = smax;
    tensor_free(s);
    tensor_free(tb);
    tensor_free(ta);
    free(bb);
    free(aa);
    double u = FLT_EPSILON / 2, gamma = n * u / (1 - n * u);
    return 2 * gamma * smax;
}

typedef struct mm_work {
    const float *a, *b;
    float *c;
    int n;
    void (*fn)(const float *, const float *, float *, int);
} mm_work;

static void run_mm(void *arg) {
    mm_work *w = arg;
    w->fn(w->a, w->b, w->c, w->n);
}

typedef struct blas_work {
    tensor *a, *b, *c;
} blas_work;

static void run_blas(void *arg) {
    blas_work *w = arg;
    matmul_into(w->c, w->a, w->b, 0, 0, 1.0f, 0.0f);
}

#ifdef LECTERN_CUDA
typedef struct gpu_mm_work {
    tensor *a, *b, *c;
} gpu_mm_work;

static void run_gpu_tiled(void *arg) {
    gpu_mm_work *w = arg;
    gpu_tiled_matmul(0, w->a->data, w->b->data, w->c->data, (int)w->a->shape[0]);
}

static void matmul_on_gpu(const float *a, const float *b, int n, double tol) {
    gpu_mm_work w = {tensor_from(a, n, n, 0), tensor_from(b, n, n, 0), empty(n, n, 0)};
    double t = time_median(run_gpu_tiled, &w, 5, 1);
    tensor *ref = matmul(w.a, w.b); /* cuBLAS */
    check_close(w.c, ref, 0, tol, "tiled_matmul kernel vs matmul() (cuBLAS)");
    keep_point("tiled_matmul kernel", n, mm_flops(n), mm_bytes(n), t);
    blas_work bw = {w.a, w.b, ref};
    double tb = time_median(run_blas, &bw, 5, 1);
    double flops = 2.0 * n * n * n;
    note("| on the GPU | time (ms) | GFLOP/s |\n|---|---|---|\n| tiled_matmul kernel | %.3f | %.1f |\n"
         "| cuBLAS (matmul) | %.3f | %.1f |",
         t * 1e3, flops / t / 1e9, tb * 1e3, flops / tb / 1e9);
    tensor_free(ref);
    tensor_free(w.c);
    tensor_free(w.b);
    tensor_free(w.a);
}
#endif

static void matmul_section(void) {
    note("## Matrix multiply: tiles and shared memory");
    const char *size = lecture_option("matmul-n", lecture_quick() ? "128" : "512");
    char *end = NULL;
    long n_given = strtol(size, &end, 10);
    if (*size == '\0' || *end != '\0' || n_given < 1 || n_given > 2048)
        lecture_fail("--matmul-n %s: give a whole number from 1 to 2048", size);
    int n = (int)n_given;
    size_t nn = (size_t)n * (size_t)n;
    float *a = host_randn(n, n), *b = host_randn(n, n);
    float *c_naive = malloc(sizeof(float) * nn), *c_tiled = malloc(sizeof(float) * nn);
    double s_max, tol = matmul_tolerance(a, b, n, &s_max);
    note("The product of two %d x %d matrices of standard normal numbers, three ways on "
         "the CPU: the textbook loop, the same loop cut into %d x %d tiles, and "
         "OpenBLAS (the runtime's `matmul()`). Each is checked against `matmul()`; they "
         "may differ only by rounding: at most 2 n u / (1 - n u) S = %.6g, where u = 2^-24 "
         "and S = %.6g is the largest sum of |a_ik||b_kj| (see `matmul_tolerance()`).",
         n, n, CPU_TILE, CPU_TILE, tol, s_max);
    mm_work naive = {a, b, c_naive, n, matmul_naive}, tiled = {a, b, c_tiled, n, matmul_tiled};
    /* Plain loops need no warming up; the naive one is slow at the full size,
     * so it runs once there. */
    double t_naive = time_median(run_mm, &naive, lecture_quick() ? 3 : 1, 0);
    double t_tiled = time_median(run_mm, &tiled, 3, 0);
    tensor *ta = tensor_from(a, n, n, -1), *tb = tensor_from(b, n, n, -1);
    tensor *ref = matmul(ta, tb);
    blas_work bw = {ta, tb, ref};
    double t_blas = time_median(run_blas, &bw, 5, 1);
    tensor *got_naive = tensor_from(c_naive, n, n, -1), *got_tiled = tensor_from(c_tiled, n, n, -1);
    check_close(got_naive, ref, 0, tol, "the naive loop vs matmul() (OpenBLAS)");
    check_close(got_tiled, ref, 0, tol, "the tiled loop vs matmul() (OpenBLAS)");
    double flops = 2.0 * n * n * n;
    if (main_device() < 0) {
        keep_point("naive loop (1 thread)", n, mm_flops(n), mm_bytes(n), t_naive);
        keep_point("tiled loop (1 thread)", n, mm_flops(n), mm_bytes(n), t_tiled);
    }
    note("| on the CPU | time (ms) | GFLOP/s |\n|---|---|---|\n| naive loop | %.2f | %.2f |\n"
         "| tiled loop | %.2f | %.2f |\n| OpenBLAS (matmul) | %.3f | %.1f |",
         t_naive * 1e3, flops / t_naive / 1e9, t_tiled * 1e3, flops / t_tiled / 1e9, t_blas * 1e3,
         flops / t_blas / 1e9);
    note("The tiled loop ran %.1f times as fast as the naive one%s. Tiling is about "
         "reuse, not about arithmetic: both loops do the same %.0f multiply-adds. OpenBLAS adds the rest of what a CPU offers (vector "
         "instructions, both cores, tiles sized for each cache level); the lecture's "
         "own loops are compiled without vectorisation (`-O1`), so they show the "
         "memory effect only.",
         t_naive / t_tiled,
         t_naive / t_tiled < 1.5 ? " (little: at this size the three matrices fit in this CPU's caches, so "
                                   "the naive loop's column walks hardly miss)"
                                 : "",
         flops / 2);
    note("The GPU kernel does the same thing with shared memory. Each block computes a "
         "16 x 16 tile of the result; its 256 threads load one tile of `a` and one of "
         "`b` into shared memory together, wait for each other (`__syncthreads()`), and "
         "then each thread reads 16 numbers of each from shared memory instead of HBM. "
         "Each number fetched from HBM is used 16 times.");
    show_kernel("tiled_matmul");
    const char *why = no_gpu_reason();
    if (why) {
        note("**The GPU part did not run on this machine**: %s. On a machine with a GPU "
             "this section runs `tiled_matmul` on the same matrices, checks it against "
             "`matmul()` on the GPU (cuBLAS) with the same tolerance, and times both.",
             why);
    } else {
#ifdef LECTERN_CUDA
        matmul_on_gpu(a, b, n, tol);
#endif
    }
    tensor_free(got_tiled);
    tensor_free(got_naive);
    tensor_free(ref);
    tensor_free(tb);
    tensor_free(ta);
    free(c_tiled);
    free(c_naive);
    free(b);
    free(a);
}

/* ------------------------------------------------------------------ */
/* Arithmetic intensity                                                */
/* ------------------------------------------------------------------ */

static void intensity_section(void) {
    note("## Arithmetic intensity");
    note("*Arithmetic intensity* is the work a computation does per byte it must move: "
         "FLOPs divided by bytes read and written. A vector add of n floats does n "
         "additions and moves 3n floats (two in, one out): 1/12 FLOP per byte, whatever n "
         "is. A product of two n x n matrices does 2n^3 FLOPs (a multiply and an add per "
         "term) and moves at least 3n^2 floats: n/6 FLOP per byte, growing with n.");
    table_t *t = table_new("Arithmetic intensity of a vector add of n floats and an n x n matrix product");
    table_column(t, "n", NULL, "%d");
    table_column(t, "vector add FLOPs", NULL, "%.0f");
    table_column(t, "vector add bytes", NULL, "%.0f");
    table_column(t, "vector add FLOP/byte", NULL, "%.4f");
    table_column(t, "matmul FLOPs", NULL, "%.0f");
    table_column(t, "matmul bytes", NULL, "%.0f");
    table_column(t, "matmul FLOP/byte", NULL, "%.2f");
    for (int n = 64; n <= 4096; n *= 4)
        table_row(t, n, add_flops(n), add_bytes(n), add_flops(n) / add_bytes(n), mm_flops(n), mm_bytes(n),
                  mm_flops(n) / mm_bytes(n));
    table_show(t);
    note("So a vector add can never keep the arithmetic units busy: it waits on memory. "
         "A large matrix product can, provided the kernel really reuses what it loads "
         "(the tiles): a naive kernel that re-reads `a` and `b` from memory for every "
         "term has an intensity of 1/4 whatever n is.");
}

/* ------------------------------------------------------------------ */
/* The roofline                                                        */
/* ------------------------------------------------------------------ */

/* STREAM (McCalpin's memory benchmark) measures bandwidth with simple loops
 * over arrays far larger than the caches. Two of them make the roof here:
 *   copy:  c[i] = a[i]            counted as 2 x 4 bytes per element
 *   triad: a[i] = b[i] + s c[i]   counted as 3 x 4 bytes per element
 * STREAM counts the bytes the program names, each read and each write once;
 * a CPU that first reads a cache line it is about to overwrite (a
 * write-allocate) moves one array more: 3 and 4 x 4 bytes. A third loop,
 * a[i] += b[i], is the same in-place update add_() makes, in the lecture's
 * own code: it reads the line it writes, so it moves what it names. On the
 * CPU the loops are split over every online core, one thread each, as STREAM
 * splits them with OpenMP: the roof is the whole chip's, not one core's. On a
 * GPU they are the grid-stride kernels in lecture_gpu_kernels.cu. */
enum stream_kind { STREAM_COPY, STREAM_TRIAD, ADD_IN_PLACE };

typedef struct stream_work {
    tensor *a, *b, *c;
    enum stream_kind kind;
    int threads;
} stream_work;

typedef struct stream_slice {
    const stream_work *w;
    int64_t from, to;
} stream_slice;

static const float TRIAD_SCALAR = 3.0f;

/* Four floats at a time, in SSE registers (every x86-64 CPU has them).
 * The lecture is compiled without vectorisation (-O1), and a loop that
 * moves one float per instruction is limited by the core, not by the
 * memory: it would measure the wrong roof. aligned(4): the vectors may
 * start at any float. */
typedef float float4 __attribute__((vector_size(16), aligned(4)));

static void *stream_slice_run(void *arg) {
    const stream_slice *s = arg;
    float *a = s->w->a->data, *b = s->w->b->data, *c = s->w->c->data;
    int64_t i = s->from, to = s->to - (s->to - s->from) % 4;
    if (s->w->kind == STREAM_TRIAD) {
        float4 k = {TRIAD_SCALAR, TRIAD_SCALAR, TRIAD_SCALAR, TRIAD_SCALAR};
        for (; i < to; i += 4)
            *(float4 *)(a + i) = *(const float4 *)(b + i) + k * *(const float4 *)(c + i);
        for (; i < s->to; i++)
            a[i] = b[i] + TRIAD_SCALAR * c[i];
    } else if (s->w->kind == STREAM_COPY) {
        for (; i < to; i += 4)
            *(float4 *)(c + i) = *(const float4 *)(a + i);
        for (; i < s->to; i++)
            c[i] = a[i];
    } else {
        for (; i < to; i += 4)
            *(float4 *)(a + i) += *(const float4 *)(b + i);
        for (; i < s->to; i++)
            a[i] += b[i];
    }
    return NULL;
}

static void run_stream(void *arg) {
    stream_work *w = arg;
    int64_t n = w->a->numel;
#ifdef LECTERN_CUDA
    if (w->a->device >= 0) {
        if (w->kind == STREAM_TRIAD)
            gpu_stream_triad(w->a->device, w->a->data, w->b->data, w->c->data, TRIAD_SCALAR, n);
        else gpu_stream_copy(w->a->device, w->c->data, w->a->data, n);
        return;
    }
#endif
    pthread_t th[MAX_THREADS];
    stream_slice sl[MAX_THREADS];
    for (int t = 0; t < w->threads; t++) {
        sl[t] = (stream_slice){w, n * t / w->threads, n * (t + 1) / w->threads};
        if (pthread_create(&th[t], NULL, stream_slice_run, &sl[t]) != 0)
            lecture_fail("could not start STREAM thread %d of %d", t + 1, w->threads);
    }
    for (int t = 0; t < w->threads; t++)
        pthread_join(th[t], NULL);
}

typedef struct vadd_work {
    tensor *x, *y, *out;
} vadd_work;

/* The vector add placed under the roof: the lecture's own loop on the CPU
 * (one thread), its kernel on a GPU. */
static void run_vector_add(void *arg) {
    vadd_work *w = arg;
#ifdef LECTERN_CUDA
    if (w->x->device >= 0) {
        gpu_vector_add(w->x->device, w->x->data, w->y->data, w->out->data, w->x->numel);
        return;
    }
#endif
    cpu_vector_add(w->x->data, w->y->data, w->out->data, w->x->numel);
}

/* The last-level cache the operating system reports for CPU 0: the highest
 * level of data (or unified) cache under /sys/devices/system/cpu/cpu0/cache,
 * in bytes, and its level in *level; 0 when it reports none. */
static double last_level_cache(int *level) {
    double bytes = 0;
    *level = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], type[32] = "", size[32] = "";
        int lv = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &lv) != 1) lv = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%31s", type) != 1) type[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%31s", size) != 1) size[0] = 0;
            fclose(f);
        }
        if (strcmp(type, "Instruction") == 0 || lv < *level) continue;
        double v = atof(size), unit = strchr(size, 'K') ? 1024.0 : strchr(size, 'M') ? 1048576.0 : 1.0;
        *level = lv;
        bytes = v * unit;
    }
    return bytes;
}

/* STREAM's rule: each array at least 4 times the last-level cache, so what a
 * run reads comes from memory, not from a cache the run before filled. The
 * arrays here are 64 MiB or 4 times the cache the system reports, whichever
 * is larger, up to 256 MiB each (768 MiB for the triad's three: a few seconds
 * of the lecture, and memory left to the other programs of a shared
 * machine); --quick keeps 32 MiB. Where the cap or --quick wins, the rule is
 * broken and the lecture says so beside the roof. */
enum { STREAM_MIN_FLOATS = 16 << 20, STREAM_MAX_FLOATS = 64 << 20, STREAM_QUICK_FLOATS = 8 << 20 };

static int64_t stream_floats(int device, double cache) {
    if (device >= 0) return 64 << 20; /* 256 MiB: past any L2 */
    if (lecture_quick()) return STREAM_QUICK_FLOATS;
    int64_t n = (int64_t)ceil(4 * cache / 4 / (1 << 20)) << 20; /* whole Mi floats */
    return n < STREAM_MIN_FLOATS ? STREAM_MIN_FLOATS : n > STREAM_MAX_FLOATS ? STREAM_MAX_FLOATS : n;
}

/* What the memory measurements found: STREAM's copy and triad (GB/s as
 * STREAM counts, named bytes), the arrays and the cache they are judged
 * against. */
typedef struct memory_roof {
    double copy, triad, bw; /* bw: the better of the two, the roof */
    int64_t n;              /* floats per array */
    double cache;           /* the last-level cache the system reports, bytes */
    int cache_level;
    double cpuid_cache; /* what the CPU itself says (glibc's sysconf), bytes; 0 unknown */
    int threads;        /* the STREAM loops' threads: one per online core */
} memory_roof;

static void stream_table(int device, const memory_roof *m) {
    double mib = 4.0 * (double)m->n / (1 << 20);
    table_t *t = device >= 0 ? table_new("The memory roof: STREAM on %s, %.0f MiB per array, the fastest of %d runs",
                                         device_name(device), mib, STREAM_RUNS)
                             : table_new("The memory roof: STREAM on %s, %.0f MiB per array, %d threads (one per "
                                         "core), the fastest of %d runs",
                                         device_name(device), mib, m->threads, STREAM_RUNS);
    table_column(t, "loop", NULL, "%s");
    table_column(t, "as STREAM counts", "GB/s", "%.1f");
    if (device < 0) table_column(t, "moved, with write-allocate", "GB/s", "%.1f");
    if (device < 0) {
        table_row(t, "copy: c = a", m->copy, m->copy * 3 / 2);
        table_row(t, "triad: a = b + s c", m->triad, m->triad * 4 / 3);
    } else {
        table_row(t, "copy: c = a", m->copy);
        table_row(t, "triad: a = b + s c", m->triad);
    }
    table_show(t);
    if (device >= 0) return;
    table_t *c = table_new("The arrays against the last-level cache");
    table_column(c, "array", "MiB", "%.0f");
    table_column(c, "last-level cache, as the system reports it", "MiB", "%.1f");
    table_column(c, "cache level", NULL, "%d");
    table_column(c, "array / cache", NULL, "%.2f");
    table_column(c, "the CPU's own figure (CPUID)", "MiB", "%.1f");
    table_row(c, mib, m->cache / (1 << 20), m->cache_level, m->cache > 0 ? 4.0 * (double)m->n / m->cache : NAN,
              m->cpuid_cache / (1 << 20));
    table_show(c);
}

/* The memory roof: the better of STREAM's copy and triad, each the fastest
 * of STREAM_RUNS runs. Then, over the same arrays, the points of the vector
 * add (the lecture's loop or kernel), of the runtime's add_() and, on the
 * CPU, of the lecture's in-place loop on every core. */
static memory_roof measure_bandwidth(int device, roof_point *pts, int *count) {
    memory_roof m = {0};
    m.cache = last_level_cache(&m.cache_level);
    m.cpuid_cache = (double)sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (m.cpuid_cache < 0) m.cpuid_cache = 0;
    int64_t n = m.n = stream_floats(device, m.cache);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = device >= 0 ? 1 : (int)(cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : cores);
    m.threads = threads;
    stream_work sw = {zeros(n, 0, device), zeros(n, 0, device), zeros(n, 0, device), STREAM_COPY, threads};
    add_scalar_(sw.a, 1.0f); /* STREAM's starting values */
    add_scalar_(sw.b, 2.0f);
    double t_copy = time_fastest(run_stream, &sw, STREAM_RUNS);
    sw.kind = STREAM_TRIAD;
    double t_triad = time_fastest(run_stream, &sw, STREAM_RUNS);
    m.copy = 2 * 4.0 * n / t_copy / 1e9, m.triad = 3 * 4.0 * n / t_triad / 1e9;
    m.bw = m.copy > m.triad ? m.copy : m.triad;
    vadd_work vw = {sw.b, sw.c, sw.a};
    double t_vadd = time_fastest(run_vector_add, &vw, 5);
    add_work aw = {sw.a, sw.b};
    double t_add = time_fastest(add_in_place, &aw, 5);
    pts[(*count)++] = (roof_point){device >= 0 ? "vector_add kernel" : "vector add loop (1 thread)", (int)n,
                                   add_flops(n) / add_bytes(n), add_flops(n) / t_vadd / 1e9};
    pts[(*count)++] = (roof_point){device >= 0 ? "add_() (cuBLAS axpy)" : "add_() (OpenBLAS saxpy)", (int)n,
                                   add_flops(n) / add_bytes(n), add_flops(n) / t_add / 1e9};
    if (device < 0) {
        sw.kind = ADD_IN_PLACE;
        double t_in_place = time_fastest(run_stream, &sw, 5);
        pts[(*count)++] = (roof_point){"in-place add loop (all cores)", (int)n, add_flops(n) / add_bytes(n),
                                       add_flops(n) / t_in_place / 1e9};
    }
    tensor_free(sw.a);
    tensor_free(sw.b);
    tensor_free(sw.c);
    stream_table(device, &m);
    return m;
}

enum { PEAK_RUNS = 5 };

/* The compute roof in GFLOP/s: the BLAS's matrix product (OpenBLAS or
 * cuBLAS sgemm) at three large sizes, the fastest of PEAK_RUNS runs at
 * each, in runs of its own: the best rate this device's best-tuned code
 * reached. Several sizes, not one, because the best size depends on the
 * machine (on a CPU shared with other programs, a product whose matrices
 * stay in the caches can beat a larger one that competes for memory). */
static double measure_peak(int device, int *n_out) {
    /* None of them a size placed under the roof (measure_matmuls). */
    static const int cpu_full[] = {384, 768, 2048}, cpu_quick[] = {384, 512, 1024};
    static const int gpu_sizes[] = {3072, 6144, 8192};
    const int *sizes = device >= 0 ? gpu_sizes : lecture_quick() ? cpu_quick : cpu_full;
    double best = 0;
    for (int i = 0; i < 3; i++) {
        int n = sizes[i];
        blas_work w = {randn(n, n, device), randn(n, n, device), empty(n, n, device)};
        double rate = mm_flops(n) / time_fastest(run_blas, &w, PEAK_RUNS) / 1e9;
        if (rate > best) best = rate, *n_out = n;
        tensor_free(w.a);
        tensor_free(w.b);
        tensor_free(w.c);
    }
    return best;
}

/* matmul() GFLOP/s at each size, every one smaller than the roof's. */
static void measure_matmuls(int device, roof_point *pts, int *count) {
    static const int cpu_full[] = {64, 128, 256, 512, 1024}, cpu_quick[] = {64, 128, 256};
    static const int gpu_sizes[] = {256, 512, 1024, 2048, 4096};
    const int *sizes = device >= 0 ? gpu_sizes : lecture_quick() ? cpu_quick : cpu_full;
    int k = device >= 0 ? 5 : lecture_quick() ? 3 : 5;
    for (int i = 0; i < k; i++) {
        int n = sizes[i];
        blas_work w = {randn(n, n, device), randn(n, n, device), empty(n, n, device)};
        double t = time_fastest(run_blas, &w, n >= 1024 ? 3 : 5);
        pts[(*count)++] = (roof_point){"matmul()", n, mm_flops(n) / mm_bytes(n), mm_flops(n) / t / 1e9};
        tensor_free(w.a);
        tensor_free(w.b);
        tensor_free(w.c);
    }
}

static double roof(double peak, double bw, double intensity) {
    double mem = bw * intensity;
    return mem < peak ? mem : peak;
}

static void roofline_plot(const roof_point *pts, int count, double peak, double bw) {
    text v = {.n = 0};
    double ridge = peak / bw, right = ridge;
    for (int i = 0; i < count; i++)
        if (pts[i].intensity > right) right = pts[i].intensity;
    /* The roof: the slope bw x intensity up to the ridge, then flat. */
    double xs[] = {1.0 / 64, 1.0 / 12, ridge, 4 * right};
    for (int i = 0; i < 4; i++)
        add_text(&v, "%s{\"series\": \"roof (measured)\", \"intensity\": %.6g, \"gflops\": %.6g}", i ? ", " : "", xs[i],
                 roof(peak, bw, xs[i]));
    for (int i = 0; i < count; i++)
        add_text(&v, ", {\"series\": \"%s\", \"n\": %d, \"intensity\": %.6g, \"gflops\": %.6g}", pts[i].kernel,
                 pts[i].n, pts[i].intensity, pts[i].gflops);
    char spec[20000];
    snprintf(spec, sizeof spec,
             "{\"$schema\": \"https://vega.github.io/schema/vega-lite/v6.json\","
             " \"description\": \"Roofline of this device, measured\","
             " \"data\": {\"values\": [%s]},"
             " \"encoding\": {\"x\": {\"field\": \"intensity\", \"type\": \"quantitative\","
             " \"scale\": {\"type\": \"log\"}, \"title\": \"arithmetic intensity (FLOP/byte)\"},"
             " \"y\": {\"field\": \"gflops\", \"type\": \"quantitative\", \"scale\": {\"type\": \"log\"},"
             " \"title\": \"GFLOP/s\"}, \"color\": {\"field\": \"series\", \"type\": \"nominal\"}},"
             " \"layer\": [{\"transform\": [{\"filter\": \"datum.series === 'roof (measured)'\"}],"
             " \"mark\": \"line\"},"
             " {\"transform\": [{\"filter\": \"datum.series !== 'roof (measured)'\"}],"
             " \"mark\": {\"type\": \"point\", \"filled\": true, \"size\": 80}}]}",
             v.s);
    plot(spec);
}

/* The point of a kernel by name, or NULL. */
static const roof_point *point_named(const roof_point *pts, int count, const char *prefix) {
    for (int i = 0; i < count; i++)
        if (strncmp(pts[i].kernel, prefix, strlen(prefix)) == 0) return &pts[i];
    return NULL;
}

/* Whether the arrays keep STREAM's rule, from the numbers of the table. */
static void cache_sentence(const memory_roof *m) {
    double ratio = 4.0 * (double)m->n / m->cache, mib = m->cache / (1 << 20);
    if (m->cache <= 0)
        note("The system reports no cache sizes here, so the arrays cannot be checked against STREAM's rule "
             "(each array at least 4 times the last-level cache).");
    else if (ratio >= 4)
        note("Each array is %.2f times the last-level cache the system reports (L%d, %.1f MiB): STREAM's rule, at "
             "least 4 times, holds, so what the loops read comes from memory, not from a cache.",
             quoted(ratio), quoted(m->cache_level), quoted(mib));
    else
        note("Each array is only %.2f times the last-level cache the system reports (L%d, %.1f MiB), where STREAM "
             "asks for at least 4 (%s): part of what the loops read may come from the cache, so this roof may be "
             "above the memory's.",
             quoted(ratio), quoted(m->cache_level), quoted(mib),
             lecture_quick() ? "--quick keeps the arrays small" : "the lecture caps them at 256 MiB");
    if (m->cache > 0 && m->cpuid_cache > 0 && fabs(m->cpuid_cache / m->cache - 1) > 0.5)
        note("The CPU's own report of its cache (CPUID, as glibc reads it) says %.1f MiB instead: the two "
             "disagree, as they can in a virtual machine, which may pass the host processor's figures through. "
             "The check above uses the system's.",
             quoted(m->cpuid_cache / (1 << 20)));
}

/* Why an in-place update (add_(), and the lecture's own in-place loop) can
 * come out above the memory roof, from this run's numbers: it moves only the
 * bytes it names, while STREAM's copy and triad also read each line they
 * overwrite (write-allocate). Past that, the roof is not the memory's limit
 * for it, and the two in-place points say whether it is the speed of the
 * lecture's loops (4 floats an instruction, compiled at -O1) or what the
 * memory gives an in-place update. 15%: more than two runs of the same loop
 * moved apart here under load. */
static void in_place_sentence(const roof_point *axpy, const roof_point *loop, const memory_roof *m) {
    double moved = fmax(m->copy * 3 / 2, m->triad * 4 / 3); /* GB/s the memory moved for STREAM */
    double add_gbs = axpy->gflops / axpy->intensity, loop_gbs = loop ? loop->gflops / loop->intensity : 0;
    double top = fmax(add_gbs, loop_gbs);
    if (top <= 1.1 * moved) {
        note("An in-place update came out above the roof, and within a tenth of what the memory moved for "
             "STREAM's loops (%.1f GB/s, counted with write-allocate: a CPU reads each cache line it is about to "
             "overwrite, an array STREAM does not count). `add_()` and the lecture's in-place loop read each line they write, "
             "so they move what they name: %.1f and %.1f GB/s.",
             quoted(moved), add_gbs, loop_gbs);
        return;
    }
    char why[600] = "";
    if (loop && add_gbs > 1.15 * loop_gbs)
        snprintf(why, sizeof why,
                 " `add_()` beat the lecture's own loop making the same in-place update on every core (%.1f GB/s "
                 "against %.1f): the roof is the speed of the lecture's loops (4 floats an instruction, compiled "
                 "without vectorisation), not the memory's. OpenBLAS's loop uses this CPU's widest vector "
                 "instructions.",
                 add_gbs, loop_gbs);
    else if (loop)
        snprintf(why, sizeof why,
                 " The lecture's own loop making the same in-place update on every core kept up with `add_()` "
                 "(%.1f GB/s against %.1f): what differs from STREAM is how the memory is used (two arrays, "
                 "updated in place), not the loop.",
                 loop_gbs, add_gbs);
    note("An in-place update came out above even what the memory moved for STREAM's loops (%.1f GB/s against "
         "%.1f, counted with write-allocate): this roof is not the memory's limit for it.%s%s",
         top, quoted(moved), why,
         4.0 * (double)m->n < 4 * m->cache
                 ? " The arrays are smaller than STREAM's rule asks (above): a cache can serve "
                   "part of either."
                 : "");
}

/* What the table says, written from its numbers. */
static void roofline_sentences(const roof_point *pts, int count, double peak, const memory_roof *m) {
    double bw = m->bw, lo = INFINITY, hi = 0, most = 0;
    int n_lo = 0, n_hi = 0, over = 0, i_most = 0;
    for (int i = 0; i < count; i++) {
        double share = pts[i].gflops / roof(peak, bw, pts[i].intensity);
        over += share > 1;
        if (share > most) most = share, i_most = i;
        if (strcmp(pts[i].kernel, "matmul()") != 0) continue;
        if (share < lo) lo = share, n_lo = pts[i].n;
        if (share > hi) hi = share, n_hi = pts[i].n;
    }
    const roof_point *vadd = &pts[0], *axpy = &pts[1], *in_place = point_named(pts, count, "in-place add loop");
    double v_share = vadd->gflops / roof(peak, bw, vadd->intensity),
           a_share = axpy->gflops / roof(peak, bw, axpy->intensity);
    note("The vector add reached %.0f%% of the memory roof and `add_()` %.0f%%: both are far left of the "
         "ridge, where only the memory limits them.%s",
         quoted(100 * v_share), quoted(100 * a_share),
         v_share < 0.7 && strstr(vadd->kernel, "1 thread")
                 ? " The lecture's loop runs on one core, and one core cannot draw all the bandwidth the "
                   "STREAM threads drew together."
                 : "");
    double l_share = in_place ? in_place->gflops / roof(peak, bw, in_place->intensity) : 0;
    if (a_share > 1 || l_share > 1) in_place_sentence(axpy, in_place, m);
    note("`matmul()` reached from %.0f%% (n = %d) to %.0f%% (n = %d) of the compute roof. %s", quoted(100 * lo),
         quoted(n_lo), quoted(100 * hi), quoted(n_hi),
         n_hi < n_lo ? "Here the smaller products were the faster: their matrices stay in the caches, "
                       "while a larger one streams through memory that other programs on this machine "
                       "were using too."
                     : "A small product is too little work to fill the machine (the fixed costs of the "
                       "first section); a larger one comes closer to what the BLAS reached on its own.");
    if (over)
        note("%d of the %d points came out above their roof; the highest, %s, at %.0f%% of it. A roof is a "
             "measurement too, the fastest of a few runs, taken at another moment than the point, on a machine "
             "whose %ld cores other work shares: a point a few percent above its roof says the roof was measured "
             "low. A point far above it says more: that this roof, measured with STREAM's loops or at the BLAS's "
             "best size, is not the limit for that kernel%s.",
             over, count, pts[i_most].kernel, quoted(100 * most), sysconf(_SC_NPROCESSORS_ONLN),
             pts + i_most == axpy || pts + i_most == in_place ? " (for an in-place update, the note above says why)"
                                                              : "");
}

static void roofline_section(void) {
    note("## The roofline");
    int device = main_device();
    note("How fast can a kernel of a given intensity run? At most the device's peak "
         "arithmetic rate, and at most its memory bandwidth times the intensity (it "
         "cannot compute on data that has not arrived). The lower of the two is the "
         "*roof*. Both are measured here, on %s, not taken from a data sheet, and "
         "apart from the kernels placed under them: the bandwidth with STREAM's copy and "
         "triad, the peak with %s's matrix product at large sizes, in runs of their own; each "
         "the fastest of a few runs, since other work on the machine can only slow a run "
         "down.",
         device_name(device), device >= 0 ? "cuBLAS" : "OpenBLAS");
    roof_point pts[MAX_POINTS];
    int count = 0;
    memory_roof m = measure_bandwidth(device, pts, &count);
    note("Memory: the roof is the better of STREAM's copy and triad, **%.1f GB/s** as STREAM counts bytes (the "
         "ones the loop names, each once).",
         quoted(m.bw));
    if (device < 0) cache_sentence(&m);
    int roof_n;
    double peak = measure_peak(device, &roof_n), bw = m.bw;
    note("Compute: %s's matrix product, the fastest of %d runs at each of three large sizes, reached "
         "**%.1f GFLOP/s** (at n = %d). "
         "The ridge, where the two roofs meet, is at %.1f FLOP/byte: a matrix product is "
         "compute-bound from about n = 6 x %.1f = %.0f on, if its kernel reuses what it loads.",
         device >= 0 ? "cuBLAS" : "OpenBLAS", PEAK_RUNS, peak, roof_n, peak / bw, peak / bw, 6 * peak / bw);
    char question[400];
    snprintf(question, sizeof question,
             "The memory moves %.1f GB/s and %s's product reaches %.1f GFLOP/s. A vector add does 1/12 FLOP per "
             "byte it moves: at most how many GFLOP/s can it reach on this machine (its roof)?",
             bw, device >= 0 ? "cuBLAS" : "OpenBLAS", peak);
    predict(question, roof(peak, bw, pts[0].intensity), "GFLOP/s");
    for (int i = 0; i < n_earlier && count < MAX_POINTS; i++)
        pts[count++] = earlier[i];
    measure_matmuls(device, pts, &count);
    table_t *t = table_new("Every kernel against the roofs, each point measured on its own (the fastest of a few "
                           "runs; the loops of the sections before, as they were timed there)");
    table_column(t, "kernel", NULL, "%s");
    table_column(t, "n", NULL, "%d");
    table_column(t, "FLOP/byte", NULL, "%.4f");
    table_column(t, "GFLOP/s", NULL, "%.3f");
    table_column(t, "roof", "GFLOP/s", "%.3f");
    table_column(t, "of the roof", NULL, "%.0f%%");
    for (int i = 0; i < count; i++) {
        double r = roof(peak, bw, pts[i].intensity);
        table_row(t, pts[i].kernel, pts[i].n, pts[i].intensity, pts[i].gflops, r, 100 * pts[i].gflops / r);
    }
    table_show(t);
    roofline_plot(pts, count, peak, bw);
    roofline_sentences(pts, count, peak, &m);
}

/* ------------------------------------------------------------------ */
/* Many GPUs: DDP and FSDP                                             */
/* ------------------------------------------------------------------ */

enum { WORLD = 4 };
static const float LR = 1e-3f;

typedef struct dist_args {
    mlp_config cfg;
    int timed_steps;
} dist_args;

static double bytes_of(const tensor *t) { return 4.0 * (double)t->numel; }

/* One DDP step on this rank's part of the batch: full gradients, averaged
 * with one all-reduce per layer, the same AdamW step on every rank. */
static void ddp_step(const mlp_config *c, tensor **w, tensor **g, adamw **opt, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    forward(w, c->layers, x, acts, pre);
    backward(w, c->layers, acts, pre, g);
    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++) {
        dist_all_reduce(g[i], DIST_AVG);
        adamw_step(opt[i], w[i], g[i]);
    }
}

/* Layer i's full weights, gathered from every rank's shard (the caller frees). */
static tensor *gather_layer(const mlp_config *c, tensor *shard) {
    tensor *full = empty(c->width, c->width, shard->device);
    dist_all_gather(full, shard);
    return full;
}

/* One FSDP (ZeRO-3) step: each rank keeps only its shard of every layer's
 * weights, gradients and AdamW state. A layer's full weights exist only
 * while it runs: gathered for the forward, freed, gathered again for the
 * backward; its full gradient is reduce-scattered at once, leaving each
 * rank the averaged gradient of its own shard. `peak` gets the most bytes
 * of full layers (weights and gradient) alive at one time. */
static void fsdp_step(const mlp_config *c, tensor **ws, tensor **gs, adamw **opt, tensor *x, double *peak) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    acts[0] = x;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = gather_layer(c, ws[i]);
        acts[i + 1] = layer_forward(acts[i], full, &pre[i]);
        tensor_free(full);
    }
    tensor *dy = mse_loss_backward(acts[c->layers]);
    *peak = 0;
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *full = gather_layer(c, ws[i]);
        tensor *dw = empty(c->width, c->width, x->device), *dx = NULL;
        layer_backward(acts[i], pre[i], full, dy, dw, i > 0 ? &dx : NULL, 0.0f);
        double alive = bytes_of(full) + bytes_of(dw);
        if (alive > *peak) *peak = alive;
        tensor_free(full);
        dist_reduce_scatter(gs[i], dw, DIST_AVG);
        tensor_free(dw);
        tensor_free(dy);
        dy = dx;
    }
    for (int i = 0; i < c->layers; i++)
        adamw_step(opt[i], ws[i], gs[i]);
    free_saved(c->layers, acts, pre);
}

typedef struct model_state {
    tensor *w[MAX_LAYERS], *g[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
} model_state;

/* Bytes this rank holds for parameters, gradients and optimizer state,
 * summed over the tensors themselves. */
static void held_bytes(const mlp_config *c, const model_state *s, double *params, double *grads, double *state) {
    *params = *grads = *state = 0;
    for (int i = 0; i < c->layers; i++) {
        *params += bytes_of(s->w[i]);
        *grads += bytes_of(s->g[i]);
        *state += bytes_of(s->opt[i]->m) + bytes_of(s->opt[i]->v);
    }
}

static void make_ddp(const mlp_config *c, int device, model_state *s) {
    for (int i = 0; i < c->layers; i++) {
        s->w[i] = init_layer(c, i, device);
        s->g[i] = empty(c->width, c->width, device);
        s->opt[i] = adamw_new(s->w[i], LR);
    }
}

/* Each rank's shard: the rank-th 1/world of every layer's weights. */
static void make_fsdp(const mlp_config *c, int device, int rank, int world, model_state *s) {
    int64_t shard = (int64_t)c->width * c->width / world;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = init_layer(c, i, device);
        tensor *mine = tensor_view(full, rank * shard, shard, 0);
        s->w[i] = empty(shard, 0, device);
        tensor_copy(s->w[i], mine);
        tensor_free(mine);
        tensor_free(full);
        s->g[i] = empty(shard, 0, device);
        s->opt[i] = adamw_new(s->w[i], LR);
    }
}

static void free_state(const mlp_config *c, model_state *s) {
    for (int i = 0; i < c->layers; i++) {
        tensor_free(s->w[i]);
        tensor_free(s->g[i]);
        adamw_free(s->opt[i]);
    }
}

/* The host copy of a tensor's numbers (the caller frees). */
static float *host_copy(const tensor *t) {
    float *p = malloc(sizeof(float) * (size_t)t->numel);
    tensor_to_host(t, p);
    return p;
}

/* After one step from the same start on the same data, this rank's FSDP
 * shards must equal the matching part of the DDP model: the same averaged
 * gradients (up to the order of their sums) and the same AdamW step.
 *
 * The weights' check is not "within a tolerance of DDP's": AdamW's first
 * step moves each weight by lr g / (|g| + eps) (its bias corrections make
 * m^ = g and v^ = g^2), about lr whatever the gradient's size, so any
 * tolerance near lr would pass a skipped update, and AdamW hides a
 * gradient's scale (a gradient summed instead of averaged moves the weights
 * as far; the gradient check catches that). Instead: two correct runs, whose
 * gradients differ by at most gtol, put a weight more than lr/2 apart only
 * where |g| <= gtol + eps (the two gradients may differ in sign there);
 * elsewhere the two moves differ by eps |dg| / ((|g| + eps)(|g| - gtol + eps))
 * < 1/2 of lr. So the weights more than lr/2 apart must be no more than the
 * elements whose DDP gradient is within gtol + eps of 0 (a handful here,
 * exact zeros behind a ReLU that was off). A skipped, doubled or misplaced
 * update puts nearly every element of its layer about lr apart. */
static void compare_shards(const mlp_config *c, int rank, int world, model_state *ddp, model_state *fsdp) {
    int64_t shard = (int64_t)c->width * c->width / world;
    double gdiff = 0, gsize = 0;
    for (int i = 0; i < c->layers; i++)
        gsize = fmax(gsize, largest(ddp->g[i]));
    /* Tolerances from lectures/lib/mlp.h: the gradients differ only in the
     * order of their float32 sums (reduce-scatter against all-reduce). */
    double gtol = gradient_tolerance(c) * gsize;
    long long far = 0, near_zero = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *gpart = tensor_view(ddp->g[i], rank * shard, shard, 0);
        tensor *wpart = tensor_view(ddp->w[i], rank * shard, shard, 0);
        gdiff = fmax(gdiff, max_abs_diff(fsdp->g[i], gpart));
        float *fw = host_copy(fsdp->w[i]), *dw = host_copy(wpart), *dg = host_copy(gpart);
        for (int64_t k = 0; k < shard; k++) {
            far += fabs((double)fw[k] - dw[k]) > LR / 2;
            near_zero += fabs(dg[k]) <= gtol + fsdp->opt[i]->eps;
        }
        free(dg);
        free(dw);
        free(fw);
        tensor_free(wpart);
        tensor_free(gpart);
    }
    check(gdiff <= gtol, "rank %d: FSDP's gradient shards equal DDP's averaged gradients (%.3g <= %.3g)", rank, gdiff,
          gtol);
    check(far <= near_zero,
          "rank %d: FSDP's weight shards equal DDP's weights after the step (%lld weights more than lr/2 apart "
          "<= %lld with a gradient within %.3g of 0)",
          rank, far, near_zero, gtol + fsdp->opt[0]->eps);
}

/* Median time of `steps` steps, as the slowest rank saw each. */
static double time_steps(const dist_args *a, model_state *s, tensor *x, int fsdp) {
    double t[16], peak;
    int n = a->timed_steps > 16 ? 16 : a->timed_steps;
    for (int k = 0; k < n; k++) {
        dist_timer timer = {0};
        dist_timer_start(&timer);
        if (fsdp) fsdp_step(&a->cfg, s->w, s->g, s->opt, x, &peak);
        else ddp_step(&a->cfg, s->w, s->g, s->opt, x);
        t[k] = dist_timer_stop(&timer);
    }
    return median_of(t, n);
}

/* The collectives of `steps` steps alone, without the compute: DDP's
 * all-reduce of each layer's gradient, or FSDP's all-gather of each layer
 * for the forward, and again for the backward with the reduce-scatter of
 * its gradient. `floats` is a whole layer's: width^2 (the real sizes), or
 * one float per rank (what the calls cost by themselves). The median over
 * the steps of the slowest rank's time, as time_steps() measures a step. */
static double time_collectives(const dist_args *a, int fsdp, int64_t floats, int device) {
    int world = dist_world_size(), n = a->timed_steps > 16 ? 16 : a->timed_steps;
    tensor *whole = zeros(floats, 0, device), *piece = zeros(floats / world, 0, device);
    double t[16];
    for (int k = -1; k < n; k++) { /* k = -1: a warm-up, untimed */
        dist_timer timer = {0};
        dist_timer_start(&timer);
        for (int i = 0; i < a->cfg.layers; i++)
            if (fsdp) dist_all_gather(whole, piece);
            else dist_all_reduce(whole, DIST_AVG);
        for (int i = 0; fsdp && i < a->cfg.layers; i++) {
            dist_all_gather(whole, piece);
            dist_reduce_scatter(piece, whole, DIST_AVG);
        }
        double seconds = dist_timer_stop(&timer);
        if (k >= 0) t[k] = seconds;
    }
    tensor_free(whole);
    tensor_free(piece);
    return median_of(t, n);
}

/* What the ranks measured, for rank 0's tables. */
typedef struct step_times {
    double step, alone, one_float; /* seconds: a step, its collectives alone, the same calls of one float */
} step_times;

/* Rank 0's tables and sentences: the step of each method and the parts of
 * FSDP's extra time, from the runs' medians. */
static void show_ddp_vs_fsdp(const dist_args *a, int world, const step_times *ddp, const step_times *fsdp,
                             int64_t ddp_bytes, int64_t fsdp_bytes) {
    const mlp_config *c = &a->cfg;
    int calls[2] = {c->layers, 3 * c->layers};
    table_t *t = table_new("One step on %d ranks, per rank: the slowest rank's time, median of %d steps", world,
                           a->timed_steps);
    table_column(t, "method", NULL, "%s");
    table_column(t, "collective calls", NULL, "%d");
    table_column(t, "bytes sent, nominal (dist_bytes_nominal)", NULL, "%lld");
    table_column(t, "step", "ms", "%.3f");
    table_column(t, "its collectives alone", "ms", "%.3f");
    table_column(t, "the same calls, one float each", "ms", "%.3f");
    table_column(t, "examples per second", NULL, "%.0f");
    table_row(t, "DDP", calls[0], (long long)ddp_bytes, ddp->step * 1e3, ddp->alone * 1e3, ddp->one_float * 1e3,
              c->batch / ddp->step);
    table_row(t, "FSDP", calls[1], (long long)fsdp_bytes, fsdp->step * 1e3, fsdp->alone * 1e3, fsdp->one_float * 1e3,
              c->batch / fsdp->step);
    table_show(t);
    /* What FSDP's collectives cost more than DDP's, timed alone: the calls
     * with one float each (their fixed price), and the bytes (the same calls
     * at their real sizes, less that). Not the step's difference cut in
     * parts: four ranks on fewer cores do not add up their times (a rank
     * spinning in a collective takes the core another rank would compute
     * on), so the step's own difference is shown beside it, not split. */
    double by_calls = (fsdp->one_float - ddp->one_float) * 1e3;
    double by_bytes = (fsdp->alone - ddp->alone) * 1e3 - by_calls;
    note("FSDP's step took %.2f times as long as DDP's here (%.3f ms against %.3f). Timed alone, without the "
         "compute, FSDP's %d collective calls took %.3f ms against DDP's %d in %.3f ms, and the same calls with one "
         "float each %.3f ms against %.3f: of what FSDP's collectives cost more, %.3f ms is the calls themselves "
         "and %.3f ms their bytes (%.2f MB a step for FSDP, %.2f for DDP). %s",
         fsdp->step / ddp->step, quoted(fsdp->step * 1e3), quoted(ddp->step * 1e3), quoted(calls[1]),
         quoted(fsdp->alone * 1e3), quoted(calls[0]), quoted(ddp->alone * 1e3), quoted(fsdp->one_float * 1e3),
         quoted(ddp->one_float * 1e3), by_calls, by_bytes, (double)fsdp_bytes / 1e6, (double)ddp_bytes / 1e6,
         by_calls > by_bytes ? "Here the calls cost more than the bytes: the messages are small and the ranks "
                               "share this machine's CPU cores, so each call's fixed price outweighs copying."
                             : "Here the bytes cost more than the calls, though the messages are small: the "
                               "ranks share this machine's CPU cores, and a copy between processes is made by "
                               "a core that some rank is also waiting for.");
    note("On GPUs linked by NVLink the bytes cost far less, and an FSDP that prefetches (gathers the next layer "
         "while the current one computes, as PyTorch's FSDP does) is expected to hide much of its extra traffic. "
         "That is an expectation, not a measurement: `fsdp_step` above gathers each layer only when it runs, with "
         "no prefetch, and this section has not yet run with a GPU per rank.");
}

static void ddp_vs_fsdp_main(int rank, int world, void *args) {
    const dist_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);

    model_state ddp, fsdp;
    make_ddp(c, device, &ddp);
    make_fsdp(c, device, rank, world, &fsdp);
    double dp[3], fp[3], peak = 0;
    held_bytes(c, &ddp, &dp[0], &dp[1], &dp[2]);
    held_bytes(c, &fsdp, &fp[0], &fp[1], &fp[2]);

    int64_t b0 = dist_bytes_nominal();
    ddp_step(c, ddp.w, ddp.g, ddp.opt, x);
    int64_t b1 = dist_bytes_nominal();
    fsdp_step(c, fsdp.w, fsdp.g, fsdp.opt, x, &peak);
    int64_t b2 = dist_bytes_nominal();
    compare_shards(c, rank, world, &ddp, &fsdp);

    step_times td = {time_steps(a, &ddp, x, 0), 0, 0}, tf = {time_steps(a, &fsdp, x, 1), 0, 0};
    int64_t layer = (int64_t)c->width * c->width;
    td.alone = time_collectives(a, 0, layer, device), tf.alone = time_collectives(a, 1, layer, device);
    td.one_float = time_collectives(a, 0, world, device), tf.one_float = time_collectives(a, 1, world, device);
    if (rank == 0) {
        double mb = 1e6;
        table_t *t = table_new("Memory per rank (MB)");
        table_column(t, "per rank", NULL, "%s");
        table_column(t, "DDP", "MB", "%.4f");
        table_column(t, "FSDP", "MB", "%.4f");
        table_row(t, "parameters", dp[0] / mb, fp[0] / mb);
        table_row(t, "gradients", dp[1] / mb, fp[1] / mb);
        table_row(t, "optimizer state (AdamW m, v)", dp[2] / mb, fp[2] / mb);
        table_row(t, "total kept between steps", (dp[0] + dp[1] + dp[2]) / mb, (fp[0] + fp[1] + fp[2]) / mb);
        table_row(t, "full layers alive at once during a step", 0.0, peak / mb);
        table_show(t);
        /* The traffic, from the byte counter's rules (runtime/lectern.h), per
         * layer: an all-reduce of the W x W gradient; two all-gathers of the
         * W x W weights and a reduce-scatter of the W x W gradient. */
        double share = (double)(world - 1) / world;
        check(b1 - b0 == (int64_t)(c->layers * 2 * share * 4.0 * layer), "DDP sent 2(N-1)/N x 4P = %.0f bytes per rank",
              c->layers * 2 * share * 4.0 * layer);
        check(b2 - b1 == (int64_t)(c->layers * 3 * share * 4.0 * layer),
              "FSDP sent 3(N-1)/N x 4P = %.0f bytes per rank", c->layers * 3 * share * 4.0 * layer);
        show_ddp_vs_fsdp(a, world, &td, &tf, b1 - b0, b2 - b1);
    }
    free_state(c, &fsdp);
    free_state(c, &ddp);
    tensor_free(x);
    tensor_free(data);
}

static void many_gpus_section(void) {
    note("## Many GPUs: DDP and FSDP");
    note("When the model fits on one GPU, the simplest way to use eight is *data "
         "parallelism*: every GPU holds the whole model, works on its own slice of the "
         "batch, and the gradients are averaged with an all-reduce before every GPU "
         "takes the same optimizer step (DDP). Every GPU then keeps a full copy of the "
         "parameters, the gradients and the optimizer state: N copies of the same "
         "numbers.");
    note("*Fully sharded* data parallelism (PyTorch's FSDP, ZeRO stage 3) keeps only "
         "one copy, cut into N shards. A layer's full weights are gathered just before "
         "it runs and dropped after; its gradient is reduce-scattered so each GPU gets "
         "the averaged gradient of its own shard, and updates only that. Memory per GPU "
         "falls by N; the price is more communication: two all-gathers of the weights "
         "(forward and backward) and a reduce-scatter, against DDP's one all-reduce.");
    dist_args a = {.cfg = {.batch = 64, .width = lecture_quick() ? 64 : 128, .layers = 4, .steps = 1, .lr = LR},
                   .timed_steps = lecture_quick() ? 3 : 7};
    note("Both, for real, on %d ranks: a model of %d layers of %d x %d float32 weights "
         "(lectures/lib/mlp.h), batch %d split over the ranks, AdamW. One step of each "
         "from the same start, the FSDP shards compared with the DDP model; the bytes "
         "come from the tensors each rank holds, the traffic from `dist_bytes_nominal()` (the nominal figure: what a "
         "bandwidth-optimal algorithm sends for each call).",
         WORLD, a.cfg.layers, a.cfg.width, a.cfg.width, a.cfg.batch);
    spawn(ddp_vs_fsdp_main, WORLD, &a, sizeof a);
    note("What the tables say, with P = %d x %d x %d = %d parameters and N = %d ranks: "
         "DDP keeps 16P bytes per rank (4 bytes each of weights, gradients, and AdamW's two "
         "moments), FSDP 16P/N plus one full layer and its gradient while it runs. Per "
         "step DDP sends 2(N-1)/N x 4P bytes per rank (the all-reduce), FSDP "
         "3(N-1)/N x 4P (gather, gather again, reduce-scatter): 1.5 times as much.",
         a.cfg.layers, a.cfg.width, a.cfg.width, a.cfg.layers * a.cfg.width * a.cfg.width, WORLD);
    note("| in short | DDP | FSDP |\n|---|---|---|\n"
         "| memory per GPU | a full copy of model, gradients and optimizer state | 1/N of each, "
         "plus the layer that is running |\n"
         "| communication | one all-reduce of the gradients (PyTorch's DDP overlaps it with the "
         "backward pass; `ddp_step` here runs it after) | "
         "all-gathers in the forward and the backward, a reduce-scatter of the gradients |\n"
         "| use it when | the model and its activations fit on one GPU | they do not, or a larger "
         "batch per GPU is wanted |");
}

/* ------------------------------------------------------------------ */
/* M machines x N GPUs                                                 */
/* ------------------------------------------------------------------ */

static void many_machines_section(void) {
    note("## M machines x N GPUs");
    note("Nothing in the lecture's code changes when the ranks are on several "
         "machines: `spawn()` starts them with Open MPI, and a *hostfile* says where "
         "they go (docs/multinode.md). For M = 2 machines with N = 4 GPUs each:");
    note_verbatim("$ cat hosts\nnode1 slots=4\nnode2 slots=4\n\n"
                  "$ LECTERN_BACKEND=nccl LECTERN_HOSTFILE=$PWD/hosts build/lectures/lecture_gpu");
    int machines = 2, per_machine = 4;
    note("Open MPI fills each machine's slots in order, so the world of %d ranks is "
         "numbered machine by machine, and each rank uses the GPU numbered by its "
         "place on its own machine (`get_device(rank)`):",
         machines * per_machine);
    table_t *t = table_new("Where each rank runs: M = %d machines x N = %d GPUs", machines, per_machine);
    table_column(t, "rank", NULL, "%d");
    table_column(t, "machine", NULL, "node%d");
    table_column(t, "GPU on that machine", NULL, "cuda:%d");
    for (int rank = 0; rank < machines * per_machine; rank++)
        table_row(t, rank, rank / per_machine + 1, rank % per_machine);
    table_show(t);
    note("DDP's all-reduce then spans all M x N GPUs, and part of it crosses the "
         "network between machines, which is slower than NVLink inside one; FSDP "
         "shards over all M x N GPUs and gathers across machines in the forward and "
         "backward passes too. Ring and tree all-reduce (lecture_collectives) are how "
         "NCCL keeps that traffic efficient.");
}

static void summary(void) {
    note("## Summary");
    note("- A GPU trades single-thread speed for many threads: feed it large, uniform "
         "work.\n"
         "- Memory is a hierarchy; fast kernels reuse data from registers and shared "
         "memory (tiles) instead of going back to HBM.\n"
         "- Arithmetic intensity says which roof limits a kernel: a vector add is "
         "memory-bound everywhere, a large matrix product compute-bound.\n"
         "- DDP copies everything to every GPU and all-reduces the gradients; FSDP "
         "shards it and pays for that with 1.5 times the traffic.\n"
         "- More machines change the hostfile, not the program.");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_gpu); }
