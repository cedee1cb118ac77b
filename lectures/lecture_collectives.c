/*
 * lecture_collectives: how ranks talk, from one message to an all-reduce.
 *
 * Point-to-point messages (blocking and not), the two mistakes that hang a
 * program, all-reduce built four ways by hand and checked against the
 * library's, the alpha-beta cost model fitted to this machine, and the
 * machine's topology. Run it with
 *
 *     make run LECTURE=lecture_collectives
 *
 * and open viewer/index.html?trace=lecture_collectives.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"

static void point_to_point(void);
static void non_blocking(void);
static void mistakes(void);
static void all_reduce_by_hand(void);
static void alpha_beta(void);
static void topology(void);

static void lecture_collectives(void) {
    note("# Collectives from scratch");
    note("Ranks that train one model together have to exchange numbers: gradients, "
         "parameters, activations. This lecture starts from the smallest exchange, one "
         "rank handing one tensor to another, and builds the all-reduce of data-parallel "
         "training out of it four different ways. Then it measures what a message costs "
         "on this machine and uses that to predict which way wins.");
    point_to_point();
    non_blocking();
    mistakes();
    all_reduce_by_hand();
    alpha_beta();
    topology();
    note("## Summary");
    note("- `send`/`recv` pair up by source and destination; the non-blocking pair lets a "
         "rank compute while the message travels, as long as it leaves the tensor alone "
         "until `wait`.\n"
         "- Two ranks that both block in a large send wait for each other for ever; pair "
         "the calls by rank, or use a combined send-receive.\n"
         "- All-reduce can move everything to everyone, funnel through one root, pass "
         "chunks round a ring or climb a tree. They give the same sums and very different "
         "costs: the ring moves the fewest bytes, the tree takes the fewest steps.\n"
         "- With time = alpha + beta x bytes per message (beta the time per byte), small "
         "messages favour the tree and large ones the ring. The crossover that alpha and beta "
         "predict assumes a core per rank and one protocol; where ranks share cores, or a "
         "message crosses the transport's eager limit, the measured one moves, and the "
         "alpha-beta section says by how much.");
}

/* ------------------------------------------------------------------ */
/* Point-to-point                                                      */
/* ------------------------------------------------------------------ */

/* Rank 0 fills a tensor and sends it; rank 1 receives into its own. */
static void send_recv_main(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) {
        add_scalar_(t, 7.0f);
        dist_send(t, 1);
        inspect(t);
        note("rank 0 sent %s", tensor_str(t));
    } else {
        note("rank 1 before receiving: %s", tensor_str(t));
        inspect(t);
        dist_recv(t, 0);
        note("rank 1 received %s", tensor_str(t));
        inspect(t);
    }
    tensor_free(t);
}

static void point_to_point(void) {
    note("## Point-to-point: send and receive");
    note("A collective involves every rank. A *point-to-point* message involves two: one "
         "rank calls `dist_send(t, dst)`, and the rank `dst` calls `dist_recv(t, src)` "
         "naming the sender. Both calls block: the sender until its data has left its "
         "tensor, the receiver until the data has arrived in its own.");
    note("The two sides must agree: if rank 0 sends to rank 1, rank 1 must receive from "
         "rank 0, and take as many floats as were sent. The runtime checks this and names "
         "both lines when they differ.");
    spawn(send_recv_main, 2, NULL, 0);
}

/* While the message travels the ranks multiply matrices; only after
 * dist_wait() may the tensors be read or changed. */
static void isend_irecv_main(int rank, int world_size, void *args) {
    int dev = get_device(rank);
    tensor *t = zeros(4, 0, dev);
    tensor *a = randn(64, 64, dev);
    dist_request *req;
    if (rank == 0) {
        add_scalar_(t, 3.0f);
        req = dist_isend(t, 1);
    } else {
        req = dist_irecv(t, 0);
    }
    tensor *busy = matmul(a, a); /* work that does not touch t */
    dist_wait(req);
    note("rank %d after wait: %s (and a 64x64 matmul done meanwhile)", rank, tensor_str(t));
    inspect(t);
    tensor_free(busy);
    tensor_free(a);
    tensor_free(t);
}

static void non_blocking(void) {
    note("## The non-blocking pair");
    note("`dist_isend` and `dist_irecv` return at once with a request; the transfer goes "
         "on in the background and `dist_wait(req)` returns when it is complete. Between "
         "the two the rank can do other work: that is how communication is hidden behind "
         "computation in training.");
    spawn(isend_irecv_main, 2, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* Two mistakes                                                        */
/* ------------------------------------------------------------------ */

/* 4 MiB: far above what Open MPI buffers for a blocking send, so the
 * send returns only once the receiver has started taking the data. */
#define BIG (1 << 20)

/* Both ranks send first: each send waits for a receive that never comes. */
static void both_send_first_main(int rank, int world_size, void *args) {
    tensor *mine = zeros(BIG, 0, get_device(rank));
    tensor *theirs = zeros(BIG, 0, get_device(rank));
    dist_send(mine, 1 - rank); /* both ranks block here */
    dist_recv(theirs, 1 - rank);
    tensor_free(theirs);
    tensor_free(mine);
}

/* The same exchange ordered by rank: the even rank sends first, the odd
 * one receives first, so each send meets a waiting receive. */
static void ordered_main(int rank, int world_size, void *args) {
    tensor *mine = zeros(BIG, 0, get_device(rank));
    tensor *theirs = zeros(BIG, 0, get_device(rank));
    add_scalar_(mine, (float)rank + 1);
    if (rank % 2 == 0) {
        dist_send(mine, 1 - rank);
        dist_recv(theirs, 1 - rank);
    } else {
        dist_recv(theirs, 1 - rank);
        dist_send(mine, 1 - rank);
    }
    note("ordered by rank: rank %d got %s from rank %d", rank, summarize(theirs), 1 - rank);
    tensor_free(theirs);
    tensor_free(mine);
}

/* dist_sendrecv posts both halves at once: no order to get wrong. */
static void sendrecv_main(int rank, int world_size, void *args) {
    tensor *mine = zeros(BIG, 0, get_device(rank));
    tensor *theirs = zeros(BIG, 0, get_device(rank));
    add_scalar_(mine, (float)rank + 1);
    dist_sendrecv(mine, 1 - rank, theirs, 1 - rank);
    note("sendrecv: rank %d got %s from rank %d", rank, summarize(theirs), 1 - rank);
    tensor_free(theirs);
    tensor_free(mine);
}

/* Changes the tensor it sent before waiting: a race with the transfer.
 * The runtime knows the request still reads the tensor and stops the rank
 * at the add_scalar_ line, naming the isend's. */
static void touch_then_wait_main(int rank, int world_size, void *args) {
    tensor *t = zeros(BIG, 0, get_device(rank));
    if (rank == 0) {
        add_scalar_(t, 1.0f);
        dist_request *req = dist_isend(t, 1);
        add_scalar_(t, 100.0f); /* too early: the message may not have left */
        dist_wait(req);
    } else {
        dist_request *req = dist_irecv(t, 0);
        dist_wait(req);
    }
    tensor_free(t);
}

/* Waits before changing the tensor it sent: the receiver gets the value
 * the sender meant. */
static void wait_then_touch_main(int rank, int world_size, void *args) {
    tensor *t = zeros(BIG, 0, get_device(rank));
    if (rank == 0) {
        add_scalar_(t, 1.0f);
        dist_request *req = dist_isend(t, 1);
        dist_wait(req);
        add_scalar_(t, 100.0f); /* safe: the message has left */
    } else {
        dist_request *req = dist_irecv(t, 0);
        dist_wait(req);
        note("rank 1 received %s: the value before rank 0 changed its tensor", summarize(t));
    }
    tensor_free(t);
}

static void mistakes(void) {
    note("## Two ways to hang");
    note("### Both ranks send first");
    note("A blocking send of a large message cannot finish until the other side starts "
         "receiving: the library will not buffer megabytes on its own. If both ranks send "
         "first, each waits in its send for a receive the other will only make after *its* "
         "send returns. Neither moves, for ever.");
    note("Here is that program, `both_send_first_main`, run with `spawn_expect_failure`: "
         "a spawn whose failure is the point. Each rank writes on a status board what its "
         "call waits for; as soon as every rank waits for a call another will never make, "
         "the runtime sees the cycle, stops the spawn and names each rank's line; the lecture "
         "goes on. In lectern a blocking send returns only once its receive is posted, "
         "whatever the size, so this mistake shows with small tensors too, where a library "
         "that buffers them would let it pass until the tensors grow.");
    spawn_expect_failure(both_send_first_main, 2, NULL, 0);
    note("Two fixes. Order the calls by rank, so every send meets a receive that is "
         "already waiting:");
    spawn(ordered_main, 2, NULL, 0);
    note("or use `dist_sendrecv`, which posts the send and the receive together:");
    spawn(sendrecv_main, 2, NULL, 0);
    note("### Touching a buffer before `wait`");
    note("After `dist_isend(t, dst)` the library may still be reading `t`; after "
         "`dist_irecv(t, src)` it may still be writing it. Changing or reading `t` before "
         "`dist_wait` races with the transfer: the receiver may get the old value, the new "
         "one, or a mix. With MPI or NCCL alone nothing fails; the program computes "
         "something else, some of the time.");
    note("The runtime keeps track of which tensors a request still uses, so here the race "
         "is an error at the line that touches the tensor, naming the `dist_isend` that "
         "still reads it. (A change made through `->data`, which no tensor operation sees, "
         "is caught at the `dist_wait` instead: the runtime compares the tensor's contents "
         "there with those at the send.)");
    spawn_expect_failure(touch_then_wait_main, 2, NULL, 0);
    note("The fix is the rule: wait first, then touch.");
    spawn(wait_then_touch_main, 2, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* All-reduce by hand                                                  */
/* ------------------------------------------------------------------ */

/* What this rank did in the current hand-built all-reduce: communication
 * calls made one after the other. A global, so it is zero again at the
 * start of every spawn. (The bytes it sent are the runtime's measured count,
 * dist_traffic_since() around the all-reduce: by_hand_main.) */
typedef struct {
    int steps;
} tally;
static tally mine;

static void counted_send(const tensor *t, int dst) {
    dist_send(t, dst);
    mine.steps++;
}

static void counted_recv(tensor *t, int src) {
    dist_recv(t, src);
    mine.steps++;
}

static void counted_sendrecv(const tensor *send, int dst, tensor *recv, int src) {
    dist_sendrecv(send, dst, recv, src);
    mine.steps++;
}

/* Everyone to everyone: in round k each rank sends its whole tensor k ranks
 * to the right and receives the one from k ranks to the left, adding it up. */
static void all_to_all_all_reduce(tensor *x, int rank, int n) {
    tensor *sum = to_device(x, x->device);
    tensor *got = zeros(x->numel, 0, x->device);
    for (int k = 1; k < n; k++) {
        counted_sendrecv(x, (rank + k) % n, got, (rank - k + n) % n);
        add_(sum, got);
    }
    tensor_copy(x, sum);
    tensor_free(got);
    tensor_free(sum);
}

/* Reduce then broadcast: rank 0 receives every other tensor, one at a time,
 * adds them, and sends the sum back to each rank, one at a time. */
static void root_all_reduce(tensor *x, int rank, int n) {
    if (rank == 0) {
        tensor *got = zeros(x->numel, 0, x->device);
        for (int src = 1; src < n; src++) {
            counted_recv(got, src);
            add_(x, got);
        }
        for (int dst = 1; dst < n; dst++)
            counted_send(x, dst);
        tensor_free(got);
    } else {
        counted_send(x, 0);
        counted_recv(x, 0);
    }
}

/* Chunk `i` of the n equal chunks of x, as a view. */
static tensor *chunk(tensor *x, int i, int n) {
    int64_t c = x->numel / n;
    return row_slice(x, i * c, (i + 1) * c);
}

/* Reduce-scatter round `s` of the ring: send the chunk summed so far to
 * the right, add the left neighbour's partial sum of the next one. */
static void ring_reduce_step(tensor *x, tensor *got, int s, int rank, int n) {
    tensor *out = chunk(x, (rank - s + n) % n, n);
    tensor *in = chunk(x, (rank - s - 1 + 2 * n) % n, n);
    counted_sendrecv(out, (rank + 1) % n, got, (rank - 1 + n) % n);
    add_(in, got);
    tensor_free(in);
    tensor_free(out);
}

/* All-gather round `s`: pass on the finished chunk received last round. */
static void ring_gather_step(tensor *x, int s, int rank, int n) {
    tensor *out = chunk(x, (rank + 1 - s + n) % n, n);
    tensor *in = chunk(x, (rank - s + n) % n, n);
    counted_sendrecv(out, (rank + 1) % n, in, (rank - 1 + n) % n);
    tensor_free(in);
    tensor_free(out);
}

/* Ring: n-1 reduce-scatter rounds leave rank r with the full sum of chunk
 * r+1; n-1 all-gather rounds hand every finished chunk round the ring. */
static void ring_all_reduce(tensor *x, int rank, int n) {
    tensor *got = zeros(x->numel / n, 0, x->device);
    for (int s = 0; s < n - 1; s++)
        ring_reduce_step(x, got, s, rank, n);
    for (int s = 0; s < n - 1; s++)
        ring_gather_step(x, s, rank, n);
    tensor_free(got);
}

/* Binary (binomial) tree, n a power of two. Going up, in round `mask` a
 * rank whose bit `mask` is set sends its partial sum to rank - mask and is
 * done; the others add what rank + mask sends. Going down the sum retraces
 * the same edges from rank 0. */
static void tree_all_reduce(tensor *x, int rank, int n) {
    tensor *got = zeros(x->numel, 0, x->device);
    int mask;
    for (mask = 1; mask < n; mask <<= 1) {
        if (rank & mask) {
            counted_send(x, rank - mask);
            break;
        }
        counted_recv(got, rank + mask);
        add_(x, got);
    }
    for (mask = n / 2; mask >= 1; mask >>= 1) {
        if (rank % (2 * mask) == mask) counted_recv(x, rank - mask);
        else if (rank % (2 * mask) == 0) counted_send(x, rank + mask);
    }
    tensor_free(got);
}

typedef void (*all_reduce_fn)(tensor *x, int rank, int n);

typedef struct {
    int64_t floats; /* D: elements per rank, a multiple of the world size */
    int which;      /* index into ALGORITHMS */
} by_hand_args;

static const struct {
    const char *name;
    all_reduce_fn fn;
} ALGORITHMS[] = {
        {"everyone to everyone", all_to_all_all_reduce},
        {"reduce + broadcast", root_all_reduce},
        {"ring", ring_all_reduce},
        {"tree", tree_all_reduce},
};

/* Rank r's input: whole numbers from -6 to 6, different on every rank. */
static tensor *whole_numbers(int rank, int64_t d) {
    float *v = malloc((size_t)d * sizeof *v);
    for (int64_t i = 0; i < d; i++)
        v[i] = (float)((i * 7 + rank * 3) % 13) - 6.0f;
    tensor *t = tensor_from(v, d, 0, get_device(rank));
    free(v);
    return t;
}

/* Every rank's steps, bytes and difference from dist_all_reduce, gathered
 * to rank 0 (which prints them as a table). */
static void report_tally(const char *name, tensor *x, tensor *expect, int64_t bytes_sent, int rank, int n) {
    float row[3] = {(float)mine.steps, (float)bytes_sent, (float)max_abs_diff(x, expect)};
    tensor *r = tensor_from(row, 3, 0, x->device);
    tensor *all = zeros(3 * n, 0, x->device);
    dist_all_gather(all, r);
    if (rank == 0) {
        float v[3 * LECTERN_MAX_WORLD];
        tensor_to_host(all, v);
        long long d = x->numel;
        table_t *t = table_new("%s, D = %lld floats on %d ranks; result %s", name, d, n, summarize(x));
        table_column(t, "rank", NULL, "%d");
        table_column(t, "steps", NULL, "%.0f");
        table_column(t, "bytes sent (measured)", "B", "%.0f");
        table_column(t, "max abs difference from dist_all_reduce", NULL, "%g");
        for (int q = 0; q < n; q++)
            table_row(t, q, (double)v[3 * q], (double)v[3 * q + 1], (double)v[3 * q + 2]);
        char question[256];
        snprintf(question, sizeof question,
                 "**%s** on %d ranks, D = %lld floats of 4 bytes each: how many bytes "
                 "did rank 0 send? (the formulas are in the table at the start of this section)",
                 name, n, d);
        predict(question, (double)v[1], "bytes");
        table_show(t);
        /* Tolerance 0. The inputs are whole numbers from -6 to 6, so every
         * partial sum of up to LECTERN_MAX_WORLD of them is a whole number
         * far below 2^24, exact in float32 whatever the order of the
         * additions. Any difference is a wrong algorithm: a partial sum
         * overwritten instead of added, a child left out, a chunk passed to
         * the wrong rank (each off by at least 1). */
        double worst = 0;
        for (int q = 0; q < n; q++)
            worst = fmax(worst, (double)v[3 * q + 2]);
        check(worst == 0, "%s: every rank's result equals dist_all_reduce's bit for bit (largest difference %g)", name,
              worst);
    }
    tensor_free(all);
    tensor_free(r);
}

static void by_hand_main(int rank, int n, void *args) {
    const by_hand_args *a = args;
    tensor *input = whole_numbers(rank, a->floats);
    inspect(input);
    tensor *expect = to_device(input, input->device);
    dist_all_reduce(expect, DIST_SUM);
    tensor *x = to_device(input, input->device);
    dist_traffic before = dist_traffic_now();
    ALGORITHMS[a->which].fn(x, rank, n);
    inspect(x);
    dist_traffic d = dist_traffic_since(&before);
    report_tally(ALGORITHMS[a->which].name, x, expect, dist_traffic_sent(&d), rank, n);
    tensor_free(x);
    tensor_free(expect);
    tensor_free(input);
}

static void run_by_hand(int which, int64_t floats) {
    by_hand_args a = {.floats = floats, .which = which};
    spawn(by_hand_main, 4, &a, sizeof a);
}

/* The four algorithms, each with its note, below all_reduce_by_hand(): a
 * reader (and the viewer, which shows notes in source order) meets the
 * section's heading before its parts. */
static void run_all_reduces(int64_t floats);

static void all_reduce_by_hand(void) {
    note("## All-reduce by hand");
    note("All-reduce leaves on every rank the sum of every rank's tensor. Below it is "
         "built from `dist_send`, `dist_recv` and `dist_sendrecv` alone, four ways, on 4 "
         "ranks, and each result is compared with `dist_all_reduce`'s.");
    note("The inputs are whole numbers (small integers stored as floats). Their sums are "
         "exact in float32, whatever the order of the additions, so the hand-built results "
         "must equal the library's bit for bit; with arbitrary floats, a different order "
         "of additions would round differently and only a tolerance could compare them.");
    note("Each rank counts its own *steps* (communication calls it makes, one after the "
         "other), and the runtime measures the *bytes* it sent (`dist_traffic_since()` "
         "around the all-reduce: what each send handed the transport, to whom). For D "
         "floats of 4 bytes on N ranks the notes' arithmetic is:\n\n"
         "| algorithm | steps | bytes sent per rank |\n|---|---|---|\n"
         "| everyone to everyone | N-1 | (N-1) x 4D |\n"
         "| reduce + broadcast at a root | 2(N-1) at the root | (N-1) x 4D at the root, 4D elsewhere |\n"
         "| ring | 2(N-1) | 2(N-1) x 4D/N |\n"
         "| binary tree | 2 log2 N on the root's path | 4D per child, and 4D to the parent |");
    run_all_reduces(lecture_quick() ? 1024 : 65536);
}

static void everyone_to_everyone(int64_t floats) {
    note("### Everyone to everyone");
    note("The simplest plan: every rank sends its whole tensor to every other rank and "
         "adds up what it receives. N-1 rounds, but each rank sends N-1 full copies: the "
         "bytes grow with the number of ranks.");
    run_by_hand(0, floats);
}

static void reduce_then_broadcast(int64_t floats) {
    note("### Reduce, then broadcast, at a root");
    note("Rank 0 collects and sums every tensor, then sends the sum back to each rank. "
         "The other ranks send and receive one copy each, but the root handles 2(N-1) "
         "messages one after the other, and its link carries all of them: it is the "
         "bottleneck, while the other links sit idle.");
    run_by_hand(1, floats);
}

static void ring(int64_t floats) {
    note("### Ring: reduce-scatter, then all-gather");
    note("Cut each tensor into N chunks and arrange the ranks in a circle. In each of N-1 "
         "rounds every rank passes one chunk to its right neighbour and adds the chunk "
         "arriving from its left: after the last round each rank holds one chunk summed "
         "over all ranks (a reduce-scatter). N-1 more rounds pass those finished chunks "
         "round the circle (an all-gather). Every link is busy in every round, and each "
         "rank sends only 2(N-1) chunks of D/N floats: about twice its tensor, whatever N "
         "is. The price: 2(N-1) rounds, growing with N.");
    image("assets/lecture_collectives_ring.svg", 0.6);
    run_by_hand(2, floats);
}

static void tree(int64_t floats) {
    note("### Tree");
    note("Pair the ranks up: in the first round the odd ranks send to their even "
         "neighbour, in the next rank 2 sends to rank 0, and so on; after log2 N rounds "
         "rank 0 has the sum, and the same edges carry it back down. Only 2 log2 N rounds, "
         "but each message is the whole tensor, and at any time many ranks are idle.");
    image("assets/lecture_collectives_tree.svg", 0.6);
    run_by_hand(3, floats);
    note("NCCL's *double binary tree* mends the idle leaves: it builds two trees in which "
         "every rank that is a leaf in one is an inner node in the other, and sends half "
         "the data down each, so every rank works in both halves and the links are shared "
         "evenly. It keeps the tree's logarithmic number of steps.");
}

static void run_all_reduces(int64_t floats) {
    everyone_to_everyone(floats);
    reduce_then_broadcast(floats);
    ring(floats);
    tree(floats);
}

/* ------------------------------------------------------------------ */
/* Alpha-beta                                                          */
/* ------------------------------------------------------------------ */

/* Message sizes of the sweeps, in floats (4 bytes each), multiples of 4 so
 * the ring can cut them in 4 chunks. */
static const int64_t PING_SIZES[] = {1, 16, 256, 4096, 65536, 262144};
static const int64_t SWEEP_SIZES[] = {4, 64, 1024, 4096, 16384, 65536, 262144};
#define N_PING (int)(sizeof PING_SIZES / sizeof PING_SIZES[0])
#define N_SWEEP (int)(sizeof SWEEP_SIZES / sizeof SWEEP_SIZES[0])

typedef struct {
    int reps; /* timed repetitions per size; the median is kept */
} timing_args;

/* Rank 0 sends t to rank 1, which sends it back. */
static void round_trip(int rank, tensor *t) {
    if (rank == 0) {
        dist_send(t, 1);
        dist_recv(t, 1);
    } else {
        dist_recv(t, 0);
        dist_send(t, 0);
    }
}

/* One-way times of messages of `sizes` floats between ranks 0 and 1: half
 * the round trip, median over reps. The sizes take turns, one round trip of
 * each, reps times over, so that load on the machine while they are
 * measured falls on all of them alike (measured one size after the other,
 * a burst of load during the smallest once made it slower than the
 * largest, and beta came out negative). One round first carries the
 * runtime's check that both sides agree on each message; in the timed
 * region (`timed`) the repeated sends then skip it, so the figures are the
 * transport's. Without it, every send pays the check too. */
static void ping_pongs(int rank, const int64_t *sizes, int n, int reps, int timed, double *one_way) {
    tensor *t[N_PING];
    double *times = malloc((size_t)n * (size_t)reps * sizeof *times);
    for (int s = 0; s < n; s++) {
        t[s] = zeros(sizes[s], 0, get_device(rank));
        round_trip(rank, t[s]);
    }
    if (timed) dist_timed_begin();
    for (int i = 0; i < reps; i++)
        for (int s = 0; s < n; s++) {
            double t0 = now_seconds();
            round_trip(rank, t[s]);
            times[s * reps + i] = (now_seconds() - t0) / 2;
        }
    if (timed) dist_timed_end();
    for (int s = 0; s < n; s++) {
        one_way[s] = median_of(times + s * reps, reps);
        tensor_free(t[s]);
    }
    free(times);
}

/* Time of one hand-built all-reduce of `floats` on every rank: from a
 * barrier to a barrier, median over reps (the same for every rank). */
static double time_all_reduce(all_reduce_fn fn, int rank, int n, int64_t floats, int reps) {
    tensor *x = whole_numbers(rank, floats);
    double *times = malloc((size_t)reps * sizeof *times);
    fn(x, rank, n); /* a warm-up: it carries the runtime's checks, which the timed region then skips */
    tensor_free(x);
    x = whole_numbers(rank, floats);
    dist_timed_begin();
    for (int i = 0; i < reps; i++) {
        dist_barrier();
        double t0 = now_seconds();
        fn(x, rank, n);
        dist_barrier();
        times[i] = now_seconds() - t0;
        tensor_free(x);
        x = whole_numbers(rank, floats);
    }
    dist_timed_end();
    double m = median_of(times, reps);
    free(times);
    tensor_free(x);
    return m;
}

/* alpha: the one-way time of the smallest message, where the bytes cost
 * next to nothing. beta: what the largest message took beyond alpha, per
 * byte. Two points of the line rather than a least-squares fit, which the
 * large sizes would dominate, and which could give a negative alpha. */
static void fit_alpha_beta(const double *one_way, double *alpha, double *beta) {
    *alpha = one_way[0];
    double bytes = 4.0 * (double)PING_SIZES[N_PING - 1];
    *beta = (one_way[N_PING - 1] - *alpha) / bytes;
}

static void note_ping_pong(const double *one_way, double alpha, double beta) {
    predict("Rank 0 sent one float (4 bytes) to rank 1 and got it back, many times. Half a round "
            "trip is alpha, the fixed price of a message. How many microseconds is it here?",
            alpha * 1e6, "us");
    if (beta > 0) /* a noisy run can fit none */
        predict("Beta, the time per byte, comes from the largest message (1 MiB). What bandwidth, one over "
                "beta, is that?",
                1e-9 / beta, "GB/s");
    table_t *t = table_new("ping-pong: one-way time against the alpha-beta model");
    table_column(t, "bytes", NULL, "%.0f");
    table_column(t, "one-way time", "us", "%.2f");
    table_column(t, "model alpha + beta x bytes", "us", "%.2f");
    for (int i = 0; i < N_PING; i++) {
        double bytes = 4.0 * (double)PING_SIZES[i];
        table_row(t, bytes, one_way[i] * 1e6, (alpha + beta * bytes) * 1e6);
    }
    table_show(t);
    table_t *fit = table_new("the alpha-beta model, fitted to the ping-pong");
    table_column(fit, "alpha", "us", "%.2f");
    table_column(fit, "beta", "ns/byte", "%.4f");
    table_column(fit, "bandwidth 1 / beta", "GB/s", "%.2f");
    table_row(fit, alpha * 1e6, beta * 1e9, 1e-9 / beta);
    table_show(fit);
    note("alpha = %.4g s, beta = %.4g s/byte (a bandwidth of %.3g GB/s)", alpha, beta, 1e-9 / beta);
}

/* Ring: 2(N-1) steps of D/N floats. Tree: 2 log2 N steps of D floats on the
 * root's path. Equal at bytes B = 4D where
 *   2(N-1)(alpha + beta B/N) = 2 log2N (alpha + beta B),
 *   B = alpha (N-1-log2N) / (beta (log2N - (N-1)/N)). */
static double ring_model(double alpha, double beta, int n, double bytes) {
    return 2.0 * (n - 1) * (alpha + beta * bytes / n);
}

static double tree_model(double alpha, double beta, int n, double bytes) {
    return 2.0 * log2(n) * (alpha + beta * bytes);
}

/* A measured all-reduce's time over its steps, in us: what one step cost. */
static double ring_step_us(double seconds, int n) { return seconds * 1e6 / (2.0 * (n - 1)); }
static double tree_step_us(double seconds, int n) { return seconds * 1e6 / (2.0 * log2(n)); }

static double crossover_bytes(double alpha, double beta, int n) {
    double l = log2(n);
    return alpha * (n - 1 - l) / (beta * (l - (double)(n - 1) / n));
}

static void plot_sweep(const double *ring_s, const double *tree_s, double alpha, double beta, int n) {
    double bytes[N_SWEEP], us[4][N_SWEEP];
    for (int i = 0; i < N_SWEEP; i++) {
        bytes[i] = 4.0 * (double)SWEEP_SIZES[i];
        us[0][i] = ring_s[i] * 1e6;
        us[1][i] = tree_s[i] * 1e6;
        us[2][i] = ring_model(alpha, beta, n, bytes[i]) * 1e6;
        us[3][i] = tree_model(alpha, beta, n, bytes[i]) * 1e6;
    }
    chart_t *c = chart_new("bytes per rank", "all-reduce time (us)",
                           "all-reduce on %d ranks: ring and tree, "
                           "measured and modelled",
                           n);
    chart_log_x(c, 10);
    chart_log_y(c, 10);
    const char *names[] = {"ring measured", "tree measured", "ring model", "tree model"};
    for (int k = 0; k < 4; k++)
        chart_line(c, names[k], bytes, us[k], N_SWEEP);
    chart_show(c);
}

/* Where the ring takes over: the smallest swept size from which on the
 * ring was faster at every larger size too (the tree won just below it);
 * 0 when the ring was faster everywhere, -1 when the tree won at the
 * largest size. */
static double measured_crossover(const double *ring_s, const double *tree_s) {
    if (tree_s[N_SWEEP - 1] <= ring_s[N_SWEEP - 1]) return -1;
    int i = N_SWEEP - 1;
    while (i > 0 && ring_s[i - 1] < tree_s[i - 1])
        i--;
    return i == 0 ? 0 : 4.0 * (double)SWEEP_SIZES[i];
}

/* What the sweep measured, in words that hold for any order of winners: a
 * sweep need not cross once (a message crossing the transport's eager limit
 * can hand one algorithm a window of sizes in the middle). */
static void note_measured_winners(const double *ring_s, const double *tree_s) {
    char ring[256] = "";
    int wins = 0, first_win = -1;
    for (int i = 0; i < N_SWEEP; i++) {
        if (ring_s[i] >= tree_s[i]) continue;
        char size[32];
        snprintf(size, sizeof size, "%s%.0f", wins ? ", " : "", 4.0 * (double)SWEEP_SIZES[i]);
        strncat(ring, size, sizeof ring - strlen(ring) - 1);
        if (first_win < 0) first_win = i;
        wins++;
    }
    double m = measured_crossover(ring_s, tree_s);
    if (wins == N_SWEEP) note("measured: the ring was faster at every swept size");
    else if (wins == 0) note("measured: the tree was faster at every swept size");
    else if (m < 0)
        note("measured: the ring was faster at %s bytes, the tree at every other size, the largest included", ring);
    else if (wins == N_SWEEP - first_win) /* one crossover: the tree below, the ring from there on */
        note("measured: the tree was faster below %.0f bytes, the ring from there on", m);
    else
        note("measured: the ring was faster at %s bytes, the tree at every other size: no single crossover. From "
             "%.0f bytes on the ring won at every size; below it the winner changed with the size (the notes "
             "below say why).",
             ring, m);
}

static void note_sweep(const double *ring_s, const double *tree_s, double alpha, double beta, int n) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    table_t *t = table_new("all-reduce on %d ranks sharing %ld cores: ring against tree", n, cores);
    table_column(t, "bytes", NULL, "%.0f");
    table_column(t, "ring", "us", "%.1f");
    table_column(t, "tree", "us", "%.1f");
    table_column(t, "faster", NULL, "%s");
    table_column(t, "model: ring", "us", "%.1f");
    table_column(t, "model: tree", "us", "%.1f");
    table_column(t, "ring, per step", "us", "%.1f");
    table_column(t, "tree, per step", "us", "%.1f");
    for (int i = 0; i < N_SWEEP; i++) {
        double b = 4.0 * (double)SWEEP_SIZES[i];
        table_row(t, b, ring_s[i] * 1e6, tree_s[i] * 1e6, tree_s[i] < ring_s[i] ? "tree" : "ring",
                  ring_model(alpha, beta, n, b) * 1e6, tree_model(alpha, beta, n, b) * 1e6, ring_step_us(ring_s[i], n),
                  tree_step_us(tree_s[i], n));
    }
    if (beta > 0)
        predict("The ring takes 2(N-1) steps of B/N bytes, the tree 2 log2 N steps of B bytes, each step "
                "costing alpha + beta x bytes. With the alpha and beta above, below how many bytes per rank "
                "does the model say the tree beats the ring on 4 ranks?",
                crossover_bytes(alpha, beta, n), "bytes");
    table_show(t);
    plot_sweep(ring_s, tree_s, alpha, beta, n);
    double predicted = crossover_bytes(alpha, beta, n), m = measured_crossover(ring_s, tree_s);
    table_t *cross = table_new("where the ring takes over on %d ranks", n);
    table_column(cross, "where", NULL, "%s");
    table_column(cross, "bytes per rank", NULL, "%.0f");
    table_row(cross, "the model: the tree wins below", predicted);
    if (m > 0) table_row(cross, "measured: the ring won at this size and every larger one", m);
    table_show(cross);
    note("predicted: on %d ranks the tree beats the ring below %.0f bytes", n, quoted(predicted));
    note_measured_winners(ring_s, tree_s);
    double model0 = ring_model(alpha, beta, n, 4.0 * (double)SWEEP_SIZES[0]);
    if (ring_s[0] > 2 * model0)
        note("The measured times are well above the model here (%.0f us against %.0f us for the "
             "ring's smallest message): on this machine the ranks outnumber the cores, so each "
             "step waits for the operating system to run the rank that should answer, a cost "
             "the ping-pong between two ranks did not see. Treat the measured crossover as this "
             "machine's, and the model's as what a core per rank would give.",
             ring_s[0] * 1e6, model0 * 1e6);
}

/* What rank 0 measured, handed back to the lecture (spawn_return), which
 * fits the model and draws the plot once, in its own process. */
typedef struct timings {
    double one_way[N_PING], ring_s[N_SWEEP], tree_s[N_SWEEP];
    double one_way_checked; /* the smallest message with the runtime's check on every send */
} timings;

static void timing_main(int rank, int n, void *args) {
    const timing_args *a = args;
    timings t;
    if (rank < 2) {
        ping_pongs(rank, PING_SIZES, N_PING, 4 * a->reps, 1, t.one_way);
        ping_pongs(rank, PING_SIZES, 1, 4 * a->reps, 0, &t.one_way_checked);
    }
    dist_barrier();
    for (int i = 0; i < N_SWEEP; i++) {
        t.ring_s[i] = time_all_reduce(ring_all_reduce, rank, n, SWEEP_SIZES[i], a->reps);
        t.tree_s[i] = time_all_reduce(tree_all_reduce, rank, n, SWEEP_SIZES[i], a->reps);
    }
    if (rank == 0) spawn_return(&t, sizeof t);
}

/* Why the crossover the ping-pong predicts and the one the sweep measured
 * differ, from this run's own numbers. The model is two ranks, one line
 * alpha + beta x bytes; the sweep is n ranks, each step also an addition,
 * and its messages on both sides of the transport's eager limit. */
static void explain_crossover(const timings *t, double alpha, double beta, int n) {
    double predicted = crossover_bytes(alpha, beta, n), measured = measured_crossover(t->ring_s, t->tree_s);
    char said[400]; /* room for any double in %.0f */
    if (measured > 0) snprintf(said, sizeof said, "the ring won for good from %.0f bytes", measured);
    else
        snprintf(said, sizeof said, "%s",
                 measured == 0 ? "the ring won at every size" : "the tree won at the largest size");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double ring_step = ring_step_us(t->ring_s[0], n), tree_step = tree_step_us(t->tree_s[0], n);
    int off = 1; /* the ping-pong size furthest above the line */
    for (int i = 1; i < N_PING - 1; i++) {
        double b = 4.0 * (double)PING_SIZES[i], bo = 4.0 * (double)PING_SIZES[off];
        if (t->one_way[i] / (alpha + beta * b) > t->one_way[off] / (alpha + beta * bo)) off = i;
    }
    double off_b = 4.0 * (double)PING_SIZES[off], off_ratio = t->one_way[off] / (alpha + beta * off_b);
    double big = 4.0 * (double)SWEEP_SIZES[N_SWEEP - 1];
    double tree_over = t->tree_s[N_SWEEP - 1] / tree_model(alpha, beta, n, big);
    double ring_over = t->ring_s[N_SWEEP - 1] / ring_model(alpha, beta, n, big);
    const char *waits = cores < n ? "wait for the operating system to run the rank that should answer"
                                  : "also wait for the slowest of them at every step";
    const char *longer = ring_step > tree_step ? "the ring, whose every step needs every rank at once, waits the longer"
                                               : "here the tree's steps waited the longer";
    note("Why the crossovers differ (%.0f bytes predicted; measured, %s): alpha and beta come from two "
         "ranks bouncing one message, the sweep ran on %d, and the line alpha + beta x bytes leaves out "
         "three things that matter here.\n\n"
         "- **Shared cores.** On the smallest tensor a ring step took %.1f us and a tree step %.1f us "
         "(the measured time over the steps), against alpha = %.1f us: %d ranks on %ld cores %s, and %s.",
         quoted(predicted), said, n, ring_step, tree_step, alpha * 1e6, n, cores, waits, longer);
    if (gpu_count() == 0 && off_ratio > 1.5)
        note("- **Two protocols.** Open MPI's shared-memory transport (vader) sends a message of up to "
             "4 KiB, header included (its default `btl_vader_eager_limit`), at once (*eager*); a larger "
             "one waits until the receiver is ready and is then copied across (*rendezvous*), which "
             "costs more than alpha again. The ping-pong's %.0f-byte message took %.1f times what the "
             "line through its smallest and largest messages gives. The tree's messages are the whole "
             "tensor and the ring's a quarter of it, so for tensors from 4 to 16 KiB only the tree pays it.",
             off_b, off_ratio);
    else
        note("- **One line for every size.** The ping-pong's messages stayed within %.1f times the line "
             "through its smallest and largest (the worst at %.0f bytes).",
             off_ratio, off_b);
    note("- **Additions and copies.** The model counts neither the addition each step makes of what it "
         "received nor, for a rendezvous, the wait for both ranks to be running at once. The tree adds "
         "and copies whole tensors, the ring a quarter at a time. At %.0f bytes the tree took %.1f times "
         "its model and the ring %.1f times.\n\n"
         "So the predicted crossover is the one for a core per rank and one protocol; this machine's is "
         "the measured one.",
         big, tree_over, ring_over);
}

static void fit_and_compare(const timings *t, int n, int reps) {
    double alpha, beta;
    fit_alpha_beta(t->one_way, &alpha, &beta);
    note_ping_pong(t->one_way, alpha, beta);
    double checked_us = t->one_way_checked * 1e6, plain_us = t->one_way[0] * 1e6;
    double check_us = (t->one_way_checked - t->one_way[0]) * 1e6, check_percent = 100 * check_us / checked_us;
    note("The same smallest message with the runtime's check on every send took %.2f us one way, "
         "against %.2f us without: the check costs %.2f us a message here, %.0f%% of such a message's time "
         "through the runtime. The timed loops leave it out, so alpha is Open MPI's price of a message.",
         checked_us, quoted(plain_us), check_us, check_percent);
    note("lecture_08 fits the same two letters to another measurement: whole all-reduces of 2 and 4 ranks over "
         "seven sizes, a least-squares line through all of them, each size timed as one collective. Its alpha and "
         "beta describe that operation and are not these: each of its steps also adds what it received (a cost "
         "per byte the ping-pong has not, which lands in beta), Open MPI picks its algorithm by size (so the steps "
         "and bytes behind the line change along it), and a line fitted to seven sizes weighs them all, where "
         "this one goes through two. Here alpha is one message between two ranks, beta the time per byte of one "
         "copy across.");
    note("The hand-built ring and tree of the section before, timed on %d ranks (median of %d runs "
         "each), against the model:",
         n, reps);
    note_sweep(t->ring_s, t->tree_s, alpha, beta, n);
    explain_crossover(t, alpha, beta, n);
}

static void measure_alpha_beta(int quick) {
    note("Ranks 0 and 1 bounce messages of growing size (a ping-pong; half the round trip is "
         "one message). The smallest message gives alpha, the largest the slope beta. The "
         "runtime checks that both sides agree on each message (a small description sent "
         "ahead of the data); the first round trip carries that check, and the timed ones "
         "run in a timed region (`dist_timed_begin`), where repeated messages skip it, so "
         "alpha is the price of a message through Open MPI.");
    note("This machine runs 4 ranks on its CPU cores; where there are fewer cores than "
         "ranks, a rank waiting for a message shares its core with the one that should "
         "send it, which makes alpha larger and noisier than on a machine with a core (or "
         "a GPU) per rank.");
    timing_args a = {.reps = quick ? 5 : 21};
    spawn(timing_main, 4, &a, sizeof a);
    timings t;
    if (spawn_result(0, &t, sizeof t) == sizeof t) fit_and_compare(&t, 4, a.reps);
    note("Below the crossover, the ring's extra steps cost more than the tree's extra bytes; "
         "above it the bytes dominate, and the ring wins. With more ranks the ring's step "
         "count grows like N and the tree's like log2 N, so the crossover moves to larger "
         "messages: that is why NCCL switches to trees for small messages at scale.");
}

static void alpha_beta(void) {
    note("## The alpha-beta model");
    note("A message of n bytes costs about `alpha + beta x n`: alpha is the fixed price "
         "of any message (calls, handshakes, waking the other side), beta the time per "
         "byte (one over the bandwidth). An algorithm's time is its steps times alpha "
         "plus the bytes on its slowest path times beta.");
    measure_alpha_beta(lecture_quick());
}

/* ------------------------------------------------------------------ */
/* Topology                                                            */
/* ------------------------------------------------------------------ */

static void topology(void) {
    note("## Topology");
    note("How fast two ranks talk depends on the path between them. On a GPU machine "
         "`nvidia-smi topo -m` prints a matrix with one entry per pair of GPUs:\n\n"
         "| entry | path between the two GPUs |\n|---|---|\n"
         "| X | the GPU itself |\n"
         "| NV# | # NVLink links, GPU to GPU directly |\n"
         "| PIX | one PCIe switch |\n"
         "| PXB | several PCIe switches, no CPU |\n"
         "| PHB | through the PCIe host bridge, that is through the CPU |\n"
         "| NODE | across host bridges within one NUMA node |\n"
         "| SYS | across NUMA nodes (the link between CPU sockets) |\n\n"
         "NVLink carries many times what PCIe does, so which pairs share a link decides "
         "how well a ring or tree over them runs.");
    if (gpu_count() > 0) {
        note("This machine has %d GPU(s); their matrix:", gpu_count());
        note_system("nvidia-smi topo -m");
    } else {
        note("This machine has no GPU, so there is no such matrix to show. Its ranks "
             "are processes on CPU cores talking through shared memory; hwloc's "
             "`lstopo` shows the cores and caches they share:");
        note_system("if command -v lstopo-no-graphics >/dev/null; then lstopo-no-graphics --no-io; "
                    "else echo 'hwloc is not installed; from /proc/cpuinfo:'; "
                    "grep -m1 'model name' /proc/cpuinfo; nproc; fi");
    }
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_collectives); }
