/*
 * streams.c: lecture_08's CUDA streams example (streams.h).
 *
 * The two streams are non-blocking (cudaStreamNonBlocking): they are not
 * ordered after the default stream's work, nor it after theirs. So what
 * orders the work is the events alone: the compute and copy streams start
 * after the default stream's "started" event, and the add on the default
 * stream waits for "computed" and "copied". Remove a wait and the add may
 * read z1 or z2 before they are written (a blocking stream would have hidden
 * that, the legacy default stream waiting for it anyway).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lectern.h"
#include "streams.h"

#ifdef LECTERN_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"

typedef struct streams_work {
    int n;
    float *x1, *x2, *z1, *z2, *sum; /* device, n x n each */
    float *y_host;                  /* pinned (page-locked) host memory */
    cublasHandle_t blas;
    cudaStream_t compute, copy;
    cudaEvent_t started, computed, copied;
} streams_work;

/* z1 = x1 @ x2 on whatever stream the handle is set to (row-major, so cuBLAS
 * computes the transposed product in its column-major view). */
static void multiply(streams_work *w) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(w->blas, CUBLAS_OP_N, CUBLAS_OP_N, w->n, w->n, w->n, &one, w->x2, w->n, w->x1, w->n, &zero,
                             w->z1, w->n));
}

static void add_results(streams_work *w) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSgeam(w->blas, CUBLAS_OP_N, CUBLAS_OP_N, w->n, w->n, &one, w->z1, w->n, &one, w->z2, w->n,
                             w->sum, w->n));
}

/* Both jobs on the default stream: the copy waits for the matmul. */
static void run_one_stream(streams_work *w) {
    size_t bytes = (size_t)w->n * w->n * sizeof(float);
    CUBLAS_CHECK(cublasSetStream(w->blas, 0));
    multiply(w);
    CUDA_CHECK(cudaMemcpyAsync(w->z2, w->y_host, bytes, cudaMemcpyHostToDevice, 0));
    add_results(w);
}

/* The matmul on one stream, the copy on another, both after what the
 * default stream did before (the previous run's add read z1 and z2); the
 * default stream waits for both (through events) before adding. */
static void run_two_streams(streams_work *w) {
    size_t bytes = (size_t)w->n * w->n * sizeof(float);
    CUDA_CHECK(cudaEventRecord(w->started, 0));
    CUDA_CHECK(cudaStreamWaitEvent(w->compute, w->started, 0));
    CUDA_CHECK(cudaStreamWaitEvent(w->copy, w->started, 0));
    CUBLAS_CHECK(cublasSetStream(w->blas, w->compute));
    multiply(w);
    CUDA_CHECK(cudaEventRecord(w->computed, w->compute));
    CUDA_CHECK(cudaMemcpyAsync(w->z2, w->y_host, bytes, cudaMemcpyHostToDevice, w->copy));
    CUDA_CHECK(cudaEventRecord(w->copied, w->copy));
    CUDA_CHECK(cudaStreamWaitEvent(0, w->computed, 0));
    CUDA_CHECK(cudaStreamWaitEvent(0, w->copied, 0));
    CUBLAS_CHECK(cublasSetStream(w->blas, 0));
    add_results(w);
}

/* Each job alone on the default stream, to compare the two ways against. */
static void run_multiply_alone(streams_work *w) {
    CUBLAS_CHECK(cublasSetStream(w->blas, 0));
    multiply(w);
}

static void run_copy_alone(streams_work *w) {
    CUDA_CHECK(cudaMemcpyAsync(w->z2, w->y_host, (size_t)w->n * w->n * sizeof(float), cudaMemcpyHostToDevice, 0));
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Times `run` with CUDA events: warm-ups first (the first runs pay for
 * allocation and cuBLAS set-up), then several trials, sorted, and their mean,
 * which it returns (ms). */
static double benchmark(const char *description, void (*run)(streams_work *), streams_work *w, int warmups,
                        int trials) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmups; i++)
        run(w);
    CUDA_CHECK(cudaDeviceSynchronize());
    float ms[16], mean = 0;
    if (trials > 16) trials = 16;
    for (int i = 0; i < trials; i++) {
        CUDA_CHECK(cudaEventRecord(start, 0));
        run(w);
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop)); /* wait for the GPU, then read the clock */
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
        mean += ms[i] / trials;
    }
    qsort(ms, trials, sizeof ms[0], compare_floats);
    char list[256];
    int len = 0;
    for (int i = 0; i < trials; i++)
        len += snprintf(list + len, sizeof list - len, "%s%.1f", i ? ", " : "", ms[i]);
    note_verbatim("%s: [%s] (mean %.1f ms)", description, list, mean);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return mean;
}

/* What the four timings say, in words that follow from them. */
static void explain_streams(double one, double two, double alone_mm, double alone_copy) {
    double longer = alone_mm > alone_copy ? alone_mm : alone_copy;
    double shorter = alone_mm > alone_copy ? alone_copy : alone_mm;
    if (two < one)
        note("One stream took %.1f ms: about the matmul alone (%.1f ms) plus the copy alone (%.1f ms), and the add. "
             "Two streams took %.1f ms, against %.1f ms for the longer job alone: %.0f%% of the shorter job's "
             "time was hidden behind the longer.",
             one, alone_mm, alone_copy, two, longer, fmin(100.0, 100.0 * (one - two) / shorter));
    else
        note("One stream took %.1f ms (the matmul alone %.1f ms, the copy alone %.1f ms); two streams took %.1f ms, "
             "no less: here the copy was not hidden behind the matmul.",
             one, alone_mm, alone_copy, two);
}

static void run_streams_example(void) {
    streams_work w = {.n = lecture_quick() ? 2048 : 8192};
    size_t bytes = (size_t)w.n * w.n * sizeof(float);
    /* randn makes its numbers where the tensor lives: on the GPU here. */
    tensor *x1 = randn(w.n, w.n, 0), *x2 = randn(w.n, w.n, 0);
    w.x1 = x1->data;
    w.x2 = x2->data;
    CUDA_CHECK(cudaMalloc((void **)&w.z1, bytes));
    CUDA_CHECK(cudaMalloc((void **)&w.z2, bytes));
    CUDA_CHECK(cudaMalloc((void **)&w.sum, bytes));
    /* Pinned memory: the copy engine reads it directly, so the copy is truly
     * asynchronous (from pageable memory the driver stages it and the host waits).
     * The data to copy in starts on the host: made on the GPU, brought over once. */
    CUDA_CHECK(cudaMallocHost((void **)&w.y_host, bytes));
    tensor *y = randn(w.n, w.n, 0);
    tensor_to_host(y, w.y_host);
    tensor_free(y);
    CUBLAS_CHECK(cublasCreate(&w.blas));
    CUDA_CHECK(cudaStreamCreateWithFlags(&w.compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&w.copy, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.started, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.computed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.copied, cudaEventDisableTiming));

    note("Matrices of %d x %d floats (%.0f MB each):", w.n, w.n, bytes / 1e6);
    double alone_mm = benchmark("matmul alone", run_multiply_alone, &w, 1, 3);
    double alone_copy = benchmark("copy alone", run_copy_alone, &w, 1, 3);
    double one = benchmark("one stream", run_one_stream, &w, 1, 3);
    double two = benchmark("two streams", run_two_streams, &w, 1, 3);
    explain_streams(one, two, alone_mm, alone_copy);

    CUDA_CHECK(cudaEventDestroy(w.started));
    CUDA_CHECK(cudaEventDestroy(w.computed));
    CUDA_CHECK(cudaEventDestroy(w.copied));
    CUDA_CHECK(cudaStreamDestroy(w.compute));
    CUDA_CHECK(cudaStreamDestroy(w.copy));
    CUBLAS_CHECK(cublasDestroy(w.blas));
    CUDA_CHECK(cudaFreeHost(w.y_host));
    CUDA_CHECK(cudaFree(w.z1));
    CUDA_CHECK(cudaFree(w.z2));
    CUDA_CHECK(cudaFree(w.sum));
    tensor_free(x1);
    tensor_free(x2);
}
#endif

int streams_example(void) {
#ifdef LECTERN_CUDA
    if (gpu_count() > 0) {
        run_streams_example();
        return 1;
    }
#endif
    return 0;
}
