/* Fixture: does communication move while its rank computes?
 * (tests/test_progress.py; bench/bench_progress.c measures the same cases)
 *
 *   --case=isend      rank 0 isends 4 MiB to rank 1, then computes (sleeps,
 *                     leaving the core free; with --busy=1 it spins on its
 *                     core, as a matmul would) for --compute seconds before
 *                     its wait; rank 1 receives at once. Printed: how long
 *                     after rank 0's isend returned rank 1's receive returned.
 *   --case=modelled   as isend, but rank 0's compute is model_compute() of
 *                     --compute seconds (the runtime's modelled compute: a
 *                     sleep here); the lecture process first models 5 ms of
 *                     its own. Printed: when rank 1's receive returned and
 *                     when rank 0's wait did, after its isend returned,
 *                     and the CPU time rank 0's thread used in the call.
 *   --case=mechanism  rank 0 prints the single-copy mechanism the pool gave
 *                     Open MPI (OMPI_MCA_btl_vader_single_copy_mechanism).
 *   --case=nice       rank 0 isends to rank 1 (which starts its progress
 *                     thread) and, before its wait, prints each of its
 *                     threads' name and nice value as the kernel reports
 *                     them (/proc/self/task/TID/stat).
 *   --case=allreduce  every rank starts a --mib MiB all-reduce, computes
 *                     (sleeps) --compute seconds, then waits; printed: that
 *                     total, and the same all-reduce alone (blocking).
 *   --case=order      async collectives in flight together, between blocking
 *                     ones and sends, waited for out of order: each result
 *                     checked against the sum the fixture works out.
 *   --case=timed      a warm-up, then a timed region of 50 all-reduces and 50
 *                     send/receive pairs: printed, the checks each rank made
 *                     and skipped inside the region.
 *   --case=timed_mismatch  rank 0 sums where rank 1 takes the maximum inside a
 *                     timed region (both calls were agreed before it): an
 *                     error at the line that ends the region.
 *
 * The ranks hand their clock readings back with spawn_return()
 * (CLOCK_MONOTONIC is one clock for every process of a host); the lecture
 * prints one "result ..." line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lectern.h"

LECTURE_OPTIONS({"case", "NAME", "isend, modelled, mechanism, nice, allreduce, order, timed or timed_mismatch"},
                {"compute", "SECONDS", "how long a rank computes (default 0.3)"},
                {"mib", "N", "MiB the all-reduce moves (default 16)"}, {"world", "N", "ranks (default 2)"},
                {"busy", "0|1", "the isend case's sender spins on its core instead of sleeping (default 0)"},
                {"repeat", "N", "spawns of the order case, 2 to --world ranks in turn (default 1): a soak"});

typedef struct {
    double compute;
    int mib, busy;
} cfg;
typedef struct {
    double a, b;
} times;
typedef struct {
    double total, alone, async_alone;
} times3;
typedef struct {
    double at;   /* rank 0: its isend returned; rank 1: its receive did */
    double then; /* rank 0: its wait returned; rank 1: the sum it received */
    double cpu;  /* rank 0: CPU seconds its thread used inside model_compute() */
} modelled_times;

static void nap(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Computes for `seconds` on this core: nothing else of this thread runs. */
static void spin(double seconds) {
    volatile double x = 0;
    double end = now_seconds() + seconds;
    while (now_seconds() < end)
        for (int i = 0; i < 1000; i++)
            x += 1e-9 * i;
}

static void isend_case(int rank, int world_size, void *args) {
    const cfg *c = args;
    tensor *t = zeros(1 << 20, 0, get_device(rank)); /* 4 MiB */
    times out = {0, 0};
    dist_barrier();
    if (rank == 0) {
        fill_(t, 3.0f);
        dist_request *r = dist_isend(t, 1);
        out.a = now_seconds();
        if (c->busy) spin(c->compute);
        else nap(c->compute);
        dist_wait(r);
    } else if (rank == 1) {
        dist_recv(t, 0);
        out.a = now_seconds();
        out.b = tensor_sum(t);
    }
    spawn_return(&out, sizeof out);
    tensor_free(t);
}

/* The CPU time the calling thread has used, in seconds. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A layer's compute, modelled: a frame between the rank's function and the
 * call, so the span's line is the innermost frame's, not the outermost's. */
static void modelled_layer(double seconds) { model_compute(seconds * 1e3); /* RANK MODELLED LINE */ }

/* A 4 MiB isend, then modelled compute before the wait. */
static void modelled_case(int rank, int world_size, void *args) {
    const cfg *c = args;
    tensor *t = zeros(1 << 20, 0, get_device(rank)); /* 4 MiB */
    modelled_times out = {0, 0, 0};
    dist_barrier();
    if (rank == 0) {
        fill_(t, 3.0f);
        dist_request *r = dist_isend(t, 1);
        out.at = now_seconds();
        double cpu = thread_cpu();
        modelled_layer(c->compute);
        out.cpu = thread_cpu() - cpu;
        dist_wait(r);
        out.then = now_seconds();
    } else if (rank == 1) {
        dist_recv(t, 0);
        out.at = now_seconds();
        out.then = tensor_sum(t);
    }
    spawn_return(&out, sizeof out);
    tensor_free(t);
}

/* One all-reduce three ways, each the median of 3 (every rank's slowest
 * figure is what the lecture keeps): blocking; async and waited for at once;
 * async with the compute in between. */
static void allreduce_case(int rank, int world_size, void *args) {
    const cfg *c = args;
    tensor *t = zeros((int64_t)c->mib << 18, 0, get_device(rank));
    fill_(t, 1.0f);
    dist_all_reduce(t, DIST_SUM); /* warm-up: connections, buffers */
    dist_request *w = dist_all_reduce_async(t, DIST_SUM);
    dist_wait(w);
    double alone[3], async_alone[3], total[3];
    for (int i = 0; i < 3; i++) {
        dist_barrier();
        double start = now_seconds();
        dist_all_reduce(t, DIST_SUM);
        alone[i] = now_seconds() - start;
        dist_barrier();
        start = now_seconds();
        dist_request *r = dist_all_reduce_async(t, DIST_SUM);
        dist_wait(r);
        async_alone[i] = now_seconds() - start;
        dist_barrier();
        start = now_seconds();
        r = dist_all_reduce_async(t, DIST_SUM);
        nap(c->compute);
        dist_wait(r);
        total[i] = now_seconds() - start;
    }
    times3 out = {median_of(total, 3), median_of(alone, 3), median_of(async_alone, 3)};
    spawn_return(&out, sizeof out);
    tensor_free(t);
}

/* rank r holds r + 1 + k/1000 at element k: the sum over p ranks is
 * p(p+1)/2 + p k/1000, worked out here, not by the runtime. */
static tensor *ramp(int rank, int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t k = 0; k < n; k++)
        v[k] = scale * ((float)(rank + 1) + (float)k / 1000.0f);
    tensor *t = tensor_from(v, n, 0, get_device(rank));
    free(v);
    return t;
}

static tensor *ramp_sum(int world, int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t k = 0; k < n; k++)
        v[k] = scale * ((float)(world * (world + 1) / 2) + (float)world * (float)k / 1000.0f);
    tensor *t = tensor_from(v, n, 0, -1);
    free(v);
    return t;
}

static void order_case(int rank, int world_size, void *args) {
    enum { N = 4096, K = 6 };
    tensor *a[K];
    dist_request *req[K];
    for (int i = 0; i < K; i++) {
        a[i] = ramp(rank, N, (float)(i + 1));
        req[i] = dist_all_reduce_async(a[i], DIST_SUM);
    }
    /* A blocking all-reduce and a ring of sends while those are in flight. */
    tensor *b = ramp(rank, N, 10.0f);
    dist_all_reduce(b, DIST_SUM);
    tensor *out = ramp(rank, N, 1.0f), *in = zeros(N, 0, get_device(rank));
    dist_request *rr = dist_irecv(in, (rank + world_size - 1) % world_size);
    dist_send(out, (rank + 1) % world_size);
    dist_wait(rr);
    tensor *g = zeros((int64_t)N * world_size, 0, get_device(rank));
    dist_request *gr = dist_all_gather_async(g, out);
    for (int i = K - 1; i >= 0; i -= 2)
        dist_wait(req[i]); /* out of order */
    for (int i = 0; i < K; i += 2)
        dist_wait(req[i]);
    dist_wait(gr);
    for (int i = 0; i < K; i++) {
        tensor *want = ramp_sum(world_size, N, (float)(i + 1));
        check_close(a[i], want, 1e-6, 0, "async all-reduce in flight with others");
        tensor_free(want);
        tensor_free(a[i]);
    }
    tensor *want = ramp_sum(world_size, N, 10.0f);
    check_close(b, want, 1e-6, 0, "blocking all-reduce between async ones");
    tensor_free(want);
    tensor *left = ramp((rank + world_size - 1) % world_size, N, 1.0f);
    check_close(in, left, 0, 0, "the left neighbour's send");
    for (int r = 0; r < world_size; r++) {
        tensor *part = tensor_view(g, (int64_t)r * N, N, 0), *expect = ramp(r, N, 1.0f);
        check_close(part, expect, 0, 0, "all-gather piece");
        tensor_free(part);
        tensor_free(expect);
    }
    tensor_free(left);
    tensor_free(g);
    tensor_free(b);
    tensor_free(out);
    tensor_free(in);
}

int64_t lx_agree_checks_made(void); /* runtime/comm/comm_agree.h: not a lecture's API */
int64_t lx_agree_checks_skipped(void);

static void timed_case(int rank, int world_size, void *args) {
    tensor *t = ramp(rank, 4, 1.0f);
    dist_all_reduce(t, DIST_SUM); /* warm-ups: each checked once */
    if (rank == 0) dist_send(t, 1);
    if (rank == 1) dist_recv(t, 0);
    int64_t made = lx_agree_checks_made(), skipped = lx_agree_checks_skipped();
    dist_timed_begin();
    for (int i = 0; i < 50; i++) {
        dist_all_reduce(t, DIST_SUM);
        if (rank == 0) dist_send(t, 1);
        if (rank == 1) dist_recv(t, 0);
    }
    tensor *other = zeros(8, 0, get_device(rank));
    dist_all_reduce(other, DIST_SUM); /* not seen before: checked */
    int64_t in_made = lx_agree_checks_made() - made, in_skipped = lx_agree_checks_skipped() - skipped;
    dist_timed_end();
    note_verbatim("result rank %d made %lld skipped %lld", rank, (long long)in_made, (long long)in_skipped);
    tensor_free(other);
    tensor_free(t);
}

static void timed_mismatch_case(int rank, int world_size, void *args) {
    tensor *t = ramp(rank, 4, 1.0f);
    dist_all_reduce(t, DIST_SUM);
    dist_all_reduce(t, DIST_MAX);
    dist_timed_begin();
    dist_all_reduce(t, rank == 0 ? DIST_SUM : DIST_MAX);
    dist_timed_end(); /* MISMATCH LINE */
    tensor_free(t);
}

/* What the pool told Open MPI about its single-copy path, the
 * point-to-point layers to leave out and how long to wait before killing
 * a rank, and hwloc about the components it loads (runtime/ranks/pool.c),
 * as a rank sees it. */
static void mechanism_case(int rank, int world_size, void *args) {
    (void)world_size, (void)args;
    const char *m = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    const char *h = getenv("HWLOC_COMPONENTS"), *pml = getenv("OMPI_MCA_pml");
    const char *kill = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    if (rank == 0)
        note_verbatim("result mechanism %s hwloc %s pml %s kill_wait %s", m ? m : "unset", h ? h : "unset",
                      pml ? pml : "unset", kill ? kill : "unset");
}

/* "name:nice" of each thread of this process, from the kernel: the name is
 * field 2 of /proc/self/task/TID/stat (in parentheses), the nice value the
 * 17th field after it (proc(5)). */
static void threads_nice(char *out, size_t size) {
    out[0] = '\0';
    DIR *d = opendir("/proc/self/task");
    if (!d) lecture_fail("cannot list /proc/self/task");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], line[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[n] = '\0';
        char *open = strchr(line, '('), *close = strrchr(line, ')');
        if (!open || !close) continue;
        *close = '\0';
        long field[17];
        if (sscanf(close + 2, "%*c %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld", &field[0],
                   &field[1], &field[2], &field[3], &field[4], &field[5], &field[6], &field[7], &field[8], &field[9],
                   &field[10], &field[11], &field[12], &field[13], &field[14], &field[15]) != 16)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s:%ld", used ? " " : "", open + 1, field[15]);
    }
    closedir(d);
}

/* The nice value of each of rank 0's threads while its progress thread runs. */
static void nice_case(int rank, int world_size, void *args) {
    (void)world_size, (void)args;
    tensor *t = zeros(1 << 16, 0, get_device(rank));
    if (rank == 0) {
        dist_request *r = dist_isend(t, 1);
        /* The thread names itself once its priority is set: wait for that
         * (up to 5 s), the send still in flight. */
        char threads[2048];
        for (int i = 0; i < 500; i++) {
            threads_nice(threads, sizeof threads);
            if (strstr(threads, "lx-progress:")) break;
            nap(0.01);
        }
        dist_wait(r);
        note_verbatim("result threads %s", threads);
    } else if (rank == 1) {
        nap(0.5); /* the send stays in flight meanwhile */
        dist_recv(t, 0);
    }
    tensor_free(t);
}

static void body(void) {
    cfg c = {atof(lecture_option("compute", "0.3")), atoi(lecture_option("mib", "16")),
             atoi(lecture_option("busy", "0"))};
    const char *which = lecture_option("case", "isend");
    int world = atoi(lecture_option("world", "2"));
    if (strcmp(which, "isend") == 0) {
        spawn(isend_case, world, &c, sizeof c);
        times r0, r1;
        spawn_result(0, &r0, sizeof r0);
        spawn_result(1, &r1, sizeof r1);
        note_verbatim("result recv_after %.6f compute %.6f sum %.1f", r1.a - r0.a, c.compute, r1.b);
    } else if (strcmp(which, "modelled") == 0) {
        model_compute(200.0); /* LECTURE MODELLED LINE */
        spawn(modelled_case, world, &c, sizeof c);
        modelled_times r0, r1;
        spawn_result(0, &r0, sizeof r0);
        spawn_result(1, &r1, sizeof r1);
        note_verbatim("result recv_after %.6f wait_after %.6f compute %.6f sum %.1f cpu %.6f", r1.at - r0.at,
                      r0.then - r0.at, c.compute, r1.then, r0.cpu);
    } else if (strcmp(which, "order") == 0) {
        int repeat = atoi(lecture_option("repeat", "1"));
        /* A soak cycles through 2 .. world ranks on one pool. */
        for (int i = 0; i < repeat; i++)
            spawn(order_case, repeat == 1 || world < 3 ? world : 2 + i % (world - 1), NULL, 0);
    } else if (strcmp(which, "mechanism") == 0) {
        spawn(mechanism_case, world, NULL, 0);
    } else if (strcmp(which, "nice") == 0) {
        spawn(nice_case, world, NULL, 0);
    } else if (strcmp(which, "timed") == 0) {
        spawn(timed_case, world, NULL, 0);
    } else if (strcmp(which, "timed_mismatch") == 0) {
        spawn(timed_mismatch_case, world, NULL, 0);
    } else {
        spawn(allreduce_case, world, &c, sizeof c);
        times3 most = {0, 0, 0};
        for (int r = 0; r < world; r++) {
            times3 x;
            spawn_result(r, &x, sizeof x);
            if (x.total > most.total) most.total = x.total;
            if (x.alone > most.alone) most.alone = x.alone;
            if (x.async_alone > most.async_alone) most.async_alone = x.async_alone;
        }
        note_verbatim("result total %.6f alone %.6f async_alone %.6f compute %.6f", most.total, most.alone,
                      most.async_alone, c.compute);
    }
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
