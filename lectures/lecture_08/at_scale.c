/*
 * at_scale.c: lecture_08's figures at a scale this machine cannot run,
 * from the run's twin (twin_record, twin_last_spawn; docs/twin.md): one DDP
 * step on 8 to 512 simulated GPUs, blocking and overlapped, and a GPipe
 * schedule on 4 to 16 simulated stages. Every figure says "simulated" and
 * names its platform; without SimGrid each section says why it has none.
 */
#include <stdio.h>

#include "at_scale.h"
#include "pipeline.h"

/* One DDP step at the scale this machine cannot run: a step with modelled compute recorded here on 4 ranks, then
 * replayed on the simulated cluster at 8, 64 and 512 GPUs, its all-reduces after backward or during it. */
#define SCALE_BUCKETS 2
#define SCALE_BUCKET_FLOATS (4 << 20) /* 16 MiB of gradient a bucket */
#define SCALE_FORWARD_MS 2.0          /* modelled: a forward, and a bucket's share of backward */
#define SCALE_BACKWARD_MS 2.0

static void ddp_scale_main(int rank, int world_size, void *args) {
    int overlap = *(const int *)args;
    tensor *grad[SCALE_BUCKETS];
    dist_request *req[SCALE_BUCKETS];
    for (int b = 0; b < SCALE_BUCKETS; b++)
        grad[b] = zeros(SCALE_BUCKET_FLOATS, 0, get_device(rank));
    model_compute(SCALE_FORWARD_MS);
    for (int b = SCALE_BUCKETS - 1; b >= 0; b--) { /* backward: the last layers' bucket fills first */
        model_compute(SCALE_BACKWARD_MS);
        if (overlap) req[b] = dist_all_reduce_async(grad[b], DIST_SUM); /* while backward goes on */
    }
    for (int b = SCALE_BUCKETS - 1; b >= 0; b--) {
        if (overlap) dist_wait(req[b]);
        else dist_all_reduce(grad[b], DIST_SUM); /* after backward */
    }
    free_tensors(grad, SCALE_BUCKETS);
    (void)world_size;
}

void ddp_at_scale(void) {
    note("### DDP on 8 to 512 GPUs, simulated\n\n"
         "This machine runs 4 ranks. To see DDP where it is used, one step is recorded here and replayed on the "
         "simulated cluster `scaled` (H100s, 8 to a node on NVLink, nodes over InfiniBand; docs/twin.md) by DDP's "
         "rule: every GPU runs the same step, so the replay repeats it on P GPUs and only the ring grows. The step's "
         "compute is modelled (%g ms forward, %g ms of backward per bucket, replayed unchanged), its %d buckets of "
         "%d MiB all-reduced for real here. Twice: all-reduces after backward (blocking), and each bucket's started "
         "the moment backward filled it (`dist_all_reduce_async`), waited for before the optimizer step.",
         SCALE_FORWARD_MS, SCALE_BACKWARD_MS, SCALE_BUCKETS, SCALE_BUCKET_FLOATS * 4 >> 20);
    static const int gpus[] = {8, 64, 512};
    twin_result t[2][3]; /* [blocking, overlapped][P] */
    for (int overlap = 0; overlap < 2; overlap++) {
        progress("DDP at scale: spawn 4 ranks, %s", overlap ? "overlapped" : "blocking");
        twin_record(1);
        spawn(ddp_scale_main, 4, &overlap, sizeof overlap);
        twin_record(0);
        for (int k = 0; k < 3; k++) {
            progress("DDP at scale: replay on scaled@%d (simulated)", gpus[k]);
            if (!twin_last_spawn("scaled", gpus[k], &t[overlap][k])) {
                note("Not simulated on scaled: %s.", t[overlap][k].why);
                return;
            }
        }
    }
    predict("On 512 GPUs (simulated on scaled@512), how many ms will the blocking step take, all-reduces after "
            "backward?",
            t[0][2].simulated_s * 1e3, "ms");
    table_t *tab = table_new("One DDP step, simulated on scaled at P GPUs (modelled compute %g ms)",
                             SCALE_FORWARD_MS + SCALE_BUCKETS * SCALE_BACKWARD_MS);
    table_column(tab, "GPUs P", NULL, "%d");
    table_column(tab, "blocking: simulated step", "ms", "%.3f");
    table_column(tab, "overlapped: simulated step", "ms", "%.3f");
    table_column(tab, "overlap saves", "ms", "%.3f");
    table_column(tab, "platform", NULL, "%s");
    for (int k = 0; k < 3; k++)
        table_row(tab, gpus[k], t[0][k].simulated_s * 1e3, t[1][k].simulated_s * 1e3,
                  (t[0][k].simulated_s - t[1][k].simulated_s) * 1e3, t[0][k].label);
    table_show(tab);
    note("Simulated on scaled: the blocking step takes %.3f ms on 8 GPUs and %.3f ms on 512; overlapped, %.3f and "
         "%.3f. A ring all-reduce carries 2(P - 1)/P of a bucket per GPU, nearly twice the bucket whatever P, but "
         "takes 2(P - 1) steps, each with its latency: on one node the buckets cross NVLink in microseconds, beyond "
         "it the ring's slowest hop is one 50 GB/s InfiniBand port and at 512 GPUs its 1022 latencies dominate. "
         "Overlapping hides each bucket's all-reduce behind the backward still to run: all but the last one's, while "
         "an all-reduce is shorter than a bucket's backward (%g ms). The replay plays one ring where NCCL would run "
         "several channels and switch to trees at this scale (docs/twin.md): the shape, not NCCL's figures.",
         quoted(t[0][0].simulated_s * 1e3), quoted(t[0][2].simulated_s * 1e3), quoted(t[1][0].simulated_s * 1e3),
         quoted(t[1][2].simulated_s * 1e3), SCALE_BACKWARD_MS);
}

/* 1 - the busiest stage's computing time over the whole, as the lecture measures the bubble. */
static double simulated_bubble(const twin_result *t) { return 1 - t->busy_max_s / t->simulated_s; }

void pipeline_at_scale(spawn_fn schedule, const mlp_config *cfg) {
    note("### More stages, simulated\n\n"
         "This machine has cores for 4 stages. The replay (docs/twin.md) takes the modelled GPipe run on 4 stages "
         "with 8 micro-batches, recorded below, and plays the same schedule over P stages on the simulated cluster "
         "`scaled` (H100s, NVLink in a node, InfiniBand between): the first stage as recorded stage 0, the last as "
         "stage 3, every stage between as stage 1, each stage's modelled compute times 4 / P, so that the model stays "
         "the same, split finer. At a fixed m the formula says the bubble grows with the stages: (P - 1) / (m + P - "
         "1).");
    train_args a = {.cfg = *cfg,
                    .micro_batches = 8,
                    .schedule = GPIPE,
                    .forward_ms = MODELLED_F_MS,
                    .backward_ms = 2 * MODELLED_F_MS};
    progress("pipeline parallelism: modelled GPipe, 4 stages, recorded for the replay");
    twin_record(1);
    a.clock_base = now_seconds();
    spawn(schedule, 4, &a, sizeof a);
    twin_record(0);
    static const int stages[] = {4, 8, 16};
    twin_result t[3];
    for (int k = 0; k < 3; k++) {
        progress("pipeline parallelism: replay on scaled@%d (simulated)", stages[k]);
        if (!twin_last_spawn("scaled", stages[k], &t[k])) {
            note("Not simulated on scaled: %s.", t[k].why);
            return;
        }
    }
    predict("Simulated on scaled@16: with the same 8 micro-batches on 16 stages, what fraction of the time will the "
            "busiest stage idle?",
            simulated_bubble(&t[2]), "");
    table_t *tab =
            table_new("GPipe, %d micro-batches, simulated on scaled at P stages (modelled compute)", a.micro_batches);
    table_column(tab, "stages P", NULL, "%d");
    table_column(tab, "formula (P - 1) / (m + P - 1)", NULL, "%.4f");
    table_column(tab, "simulated bubble", NULL, "%.4f");
    table_column(tab, "simulated time", "ms", "%.1f");
    table_column(tab, "platform", NULL, "%s");
    for (int k = 0; k < 3; k++)
        table_row(tab, stages[k], bubble_fraction(stages[k], a.micro_batches), simulated_bubble(&t[k]),
                  t[k].simulated_s * 1e3, t[k].label);
    table_show(tab);
    note("Simulated on scaled: the bubble grows from %.3f on 4 stages to %.3f on 8 and %.3f on 16, the formula's "
         "%.3f, %.3f and %.3f: the same work split over more stages waits longer to fill and drain the pipe, and "
         "the time falls only from %.0f ms to %.0f ms for 4 times the devices. More micro-batches per batch (m) are "
         "what shrink it again.",
         quoted(simulated_bubble(&t[0])), quoted(simulated_bubble(&t[1])), quoted(simulated_bubble(&t[2])),
         bubble_fraction(4, a.micro_batches), bubble_fraction(8, a.micro_batches), bubble_fraction(16, a.micro_batches),
         quoted(t[0].simulated_s * 1e3), quoted(t[2].simulated_s * 1e3));
}
