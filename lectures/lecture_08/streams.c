/*
 * streams.c: the plumbing of lecture_08's CUDA streams example
 * (streams.h): the buffers, cuBLAS handle, streams and events made and
 * freed, each job queued on a stream with its checks, and the timing with
 * CUDA events. The two ways of running the jobs, and why the events order
 * them, are in the lecture (run_one_stream, run_two_streams).
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

struct streams_buffers {
    int n;
    float *x1, *x2, *z1, *z2, *sum; /* device, n x n each */
    float *y_host;                  /* pinned (page-locked) host memory */
    cublasHandle_t blas;
};

/* z1 = x1 @ x2 on `stream` (row-major, so cuBLAS computes the transposed
 * product in its column-major view). */
void multiply_on(streams_work *w, cudaStream_t stream) {
    const struct streams_buffers *b = w->buffers;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSetStream(b->blas, stream));
    CUBLAS_CHECK(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_N, b->n, b->n, b->n, &one, b->x2, b->n, b->x1, b->n, &zero,
                             b->z1, b->n));
}

void copy_on(streams_work *w, cudaStream_t stream) {
    const struct streams_buffers *b = w->buffers;
    CUDA_CHECK(cudaMemcpyAsync(b->z2, b->y_host, (size_t)b->n * b->n * sizeof(float), cudaMemcpyHostToDevice, stream));
}

void add_on(streams_work *w, cudaStream_t stream) {
    const struct streams_buffers *b = w->buffers;
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSetStream(b->blas, stream));
    CUBLAS_CHECK(cublasSgeam(b->blas, CUBLAS_OP_N, CUBLAS_OP_N, b->n, b->n, &one, b->z1, b->n, &one, b->z2, b->n,
                             b->sum, b->n));
}

void event_record(cudaEvent_t event, cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event, stream)); }

void stream_wait(cudaStream_t stream, cudaEvent_t event) { CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0)); }

/* Each job alone on the default stream, to compare the two ways against. */
static void run_multiply_alone(streams_work *w) { multiply_on(w, 0); }

static void run_copy_alone(streams_work *w) { copy_on(w, 0); }

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

void streams_example(void (*one_stream)(streams_work *), void (*two_streams)(streams_work *)) {
    struct streams_buffers b = {.n = lecture_quick() ? 2048 : 8192};
    streams_work w = {.buffers = &b};
    size_t bytes = (size_t)b.n * b.n * sizeof(float);
    /* randn makes its numbers where the tensor lives: on the GPU here. */
    tensor *x1 = randn(b.n, b.n, 0), *x2 = randn(b.n, b.n, 0);
    b.x1 = x1->data;
    b.x2 = x2->data;
    CUDA_CHECK(cudaMalloc((void **)&b.z1, bytes));
    CUDA_CHECK(cudaMalloc((void **)&b.z2, bytes));
    CUDA_CHECK(cudaMalloc((void **)&b.sum, bytes));
    /* Pinned memory: the copy engine reads it directly, so the copy is truly
     * asynchronous (from pageable memory the driver stages it and the host waits).
     * The data to copy in starts on the host: made on the GPU, brought over once. */
    CUDA_CHECK(cudaMallocHost((void **)&b.y_host, bytes));
    tensor *y = randn(b.n, b.n, 0);
    tensor_to_host(y, b.y_host);
    tensor_free(y);
    CUBLAS_CHECK(cublasCreate(&b.blas));
    CUDA_CHECK(cudaStreamCreateWithFlags(&w.compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&w.copy, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.started, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.computed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.copied, cudaEventDisableTiming));

    note("Matrices of %d x %d floats (%.0f MB each):", b.n, b.n, bytes / 1e6);
    double alone_mm = benchmark("matmul alone", run_multiply_alone, &w, 1, 3);
    double alone_copy = benchmark("copy alone", run_copy_alone, &w, 1, 3);
    double one = benchmark("one stream", one_stream, &w, 1, 3);
    double two = benchmark("two streams", two_streams, &w, 1, 3);
    explain_streams(one, two, alone_mm, alone_copy);

    CUDA_CHECK(cudaEventDestroy(w.started));
    CUDA_CHECK(cudaEventDestroy(w.computed));
    CUDA_CHECK(cudaEventDestroy(w.copied));
    CUDA_CHECK(cudaStreamDestroy(w.compute));
    CUDA_CHECK(cudaStreamDestroy(w.copy));
    CUBLAS_CHECK(cublasDestroy(b.blas));
    CUDA_CHECK(cudaFreeHost(b.y_host));
    CUDA_CHECK(cudaFree(b.z1));
    CUDA_CHECK(cudaFree(b.z2));
    CUDA_CHECK(cudaFree(b.sum));
    tensor_free(x1);
    tensor_free(x2);
}
#endif
