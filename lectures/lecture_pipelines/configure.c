/*
 * configure.c: choosing a configuration for two published training runs with the lecture's formulas.
 *
 * Everything here is arithmetic on figures the two papers state (and a GPU's datasheet), so every number it
 * prints is modelled, and says so. The formulas, per rank (b = 1 sequence a micro-batch, s its tokens, h the
 * hidden size, L layers, t = TP, p = PP, d = DP, e = EP; a parameter in 16-bit weights and gradients, AdamW's
 * fp32 master copy and two moments: 2 + 2 + 12 bytes, the ZeRO paper's count):
 *   parameters a rank   (N - N_e) / (t p) + N_e / (t p e)         (N_e: the routed experts' parameters)
 *   activations         L x 34 s b h / t bytes; L x 2 s b h / t with full recomputation (Korthikanti et al.
 *                       2022; 1F1B's stage 0 holds p micro-batches of L / p layers, L layers' worth)
 *   micro-batches       m = sequences a step / (d b); bubble (p - 1) / (m + p - 1) (1F1B, above)
 *   tensor bytes        4 all-reduces a layer a micro-batch (2 forward, 2 backward) of s b h 16-bit values,
 *                       2 (t - 1) / t of each sent: over NVLink
 *   pipeline bytes      2 m s b h 2 / t (an activation forward, its gradient backward): over the network
 *   data bytes          2 (d - 1) / d of the 16-bit gradients (experts: over their d / e replicas)
 *   expert bytes        each MoE layer's tokens dispatched (FP8, 1 byte) and combined (BF16, 2), forward and
 *                       backward, to k copies: 4 nodes at most over the network (e > 8), top-8 inside a node
 *   step time           6 N_active tokens / (GPUs x peak) (x 8/6 with recomputation: a second forward) / (1 -
 *                       bubble) + the tensor bytes / NVLink's bandwidth + alpha a call (inside each layer: on the
 *                       critical path) + the time of the other bytes, each on its link, beyond the compute (DDP's
 *                       buckets, 1F1B's sends and DualPipe's all-to-all overlap the compute, up to its length)
 *   MFU                 6 N_active tokens / (step time x GPUs x peak)
 */
#include <math.h>
#include <stdio.h>

#include "lecture_pipelines/configure.h"
#include "lectern.h"

#define GB 1e9

/* A published run: its model and cluster, as its paper states them. */
typedef struct model {
    const char *name, *source;
    double params, active, layers, hidden, seq, gpus, sequences; /* sequences: one step's global batch */
    double experts, expert_hidden, moe_layers;                   /* routed experts a layer; 0: a dense model */
    double memory_gb, peak_tflops, nvlink_gbps, network_gbps;
    int shard_gradients; /* 1: FSDP shards gradients and optimizer over DP; 0: ZeRO-1, the optimizer only */
} model;

/* Llama 3 405B: "The Llama 3 Herd of Models" (2024), tables 3 and 4 and its infrastructure section: 126 layers of
 * width 16384, 8192-token sequences, 16M tokens a step (DP 128 x 16 sequences), 16384 H100s of 80 GB, 400 Gbps
 * a GPU between servers, FSDP. DeepSeek-V3: "DeepSeek-V3 Technical Report" (2024): 671B parameters, 37B active, 61
 * layers of width 7168, the first 3 dense, 256 routed experts of width 2048 a layer, 4096-token sequences, 15360 a
 * step at most, 2048 H800s, NVLink 160 GB/s, InfiniBand 50 GB/s, ZeRO-1. Peak: the H100 SXM datasheet's 989
 * TFLOP/s dense BF16 (the H800 has its compute) and 900 GB/s NVLink both ways (450 one way). */
static const model MODELS[] = {
        {"Llama 3 405B", "The Llama 3 Herd of Models, 2024", 405e9, 405e9, 126, 16384, 8192, 16384, 128 * 16, 0, 0, 0,
         80, 989, 450, 50, 1},
        {"DeepSeek-V3", "DeepSeek-V3 Technical Report, 2024", 671e9, 37e9, 61, 7168, 4096, 2048, 15360, 256, 2048,
         61 - 3, 80, 989, 160, 50, 0},
};
enum { LLAMA, DEEPSEEK, N_MODELS };

/* A configuration: the model and its degrees; `published` marks the paper's own. */
typedef struct config {
    int model, tp, pp, ep, published;
} config;

static const config CONFIGS[] = {
        {LLAMA, 1, 1, 1, 0},    {LLAMA, 8, 1, 1, 0},     {LLAMA, 8, 8, 1, 0},     {LLAMA, 8, 16, 1, 1},
        {DEEPSEEK, 1, 1, 1, 0}, {DEEPSEEK, 1, 16, 1, 0}, {DEEPSEEK, 1, 16, 8, 0}, {DEEPSEEK, 1, 16, 64, 1},
};
enum { N_CONFIGS = sizeof CONFIGS / sizeof CONFIGS[0] };
enum { LLAMA_PP8 = 2, LLAMA_PUBLISHED = 3, DEEPSEEK_EP8 = 6, DEEPSEEK_PUBLISHED = 7 }; /* rows the notes quote */

enum { FITS, FITS_RECOMPUTED, DOES_NOT_FIT };
static const char *const FIT[] = {"yes", "with recomputation", "no"};
static const double ALPHA_S = 10e-6; /* a call's fixed cost inside a node (assumed: a small NCCL all-reduce) */

/* What the formulas give for one configuration (bytes, seconds). */
typedef struct figures {
    double dp, expert_params, params, weights, gradients, optimizer, acts, acts_recomputed, total, total_recomputed;
    int fit;
    double micro, tokens, bubble;
    double tensor, pipeline, data, expert, expert_on_nvlink, compute, step, mfu;
} figures;

static figures work_out(const config *c) {
    const model *m = &MODELS[c->model];
    figures f = {0};
    double t = c->tp, p = c->pp, e = c->ep, b = 1, sbh = m->seq * b * m->hidden;
    f.dp = m->gpus / (t * p);
    f.expert_params = m->moe_layers * m->experts * 3 * m->hidden * m->expert_hidden; /* 3 matrices an expert */
    double dense = (m->params - f.expert_params) / (t * p), experts = f.expert_params / (t * p * e);
    f.params = dense + experts;
    f.weights = 2 * f.params;
    f.gradients = 2 * f.params / (m->shard_gradients ? f.dp : 1);
    f.optimizer = 12 * (dense / f.dp + experts / (f.dp / e));
    f.acts = m->layers * 34 * sbh / t;
    f.acts_recomputed = m->layers * 2 * sbh / t;
    f.total = f.weights + f.gradients + f.optimizer + f.acts;
    f.total_recomputed = f.weights + f.gradients + f.optimizer + f.acts_recomputed;
    f.fit = f.total <= m->memory_gb * GB              ? FITS
            : f.total_recomputed <= m->memory_gb * GB ? FITS_RECOMPUTED
                                                      : DOES_NOT_FIT;

    f.micro = m->sequences / (f.dp * b);
    f.tokens = m->sequences * m->seq;
    f.bubble = (p - 1) / (f.micro + p - 1);

    double per_stage = m->layers / p, calls = 4 * per_stage * f.micro;
    f.tensor = t > 1 ? calls * 2 * (t - 1) / t * sbh * 2 : 0;
    f.pipeline = p > 1 ? 2 * f.micro * sbh * 2 / t : 0;
    double de = f.dp / e;
    f.data = 2 * (f.dp - 1) / f.dp * 2 * dense + (de > 1 ? 2 * (de - 1) / de * 2 * experts : 0);
    double copies = e > 8 ? 4 : 8; /* node-limited routing across nodes; every chosen expert inside one */
    f.expert = e > 1 ? m->moe_layers / p * f.micro * m->seq * b * copies * m->hidden * (1 + 2) * 2 : 0;
    f.expert_on_nvlink = e > 1 && e <= 8;

    double flops = 6 * m->active * f.tokens, peak = m->peak_tflops * 1e12;
    f.compute = flops / (m->gpus * peak) * (f.fit == FITS_RECOMPUTED ? 8.0 / 6 : 1);
    double critical = f.tensor / (m->nvlink_gbps * GB) + (t > 1 ? calls * ALPHA_S : 0);
    double overlapped = (f.pipeline + f.data + (f.expert_on_nvlink ? 0 : f.expert)) / (m->network_gbps * GB) +
                        (f.expert_on_nvlink ? f.expert : 0) / (m->nvlink_gbps * GB);
    f.step = f.compute / (1 - f.bubble) + critical + fmax(0, overlapped - f.compute);
    f.mfu = flops / (f.step * m->gpus * peak);
    return f;
}

static const char *label(const config *c, char *buf, size_t size) {
    int n = snprintf(buf, size, "%s TP %d PP %d", MODELS[c->model].name, c->tp, c->pp);
    if (c->ep > 1 && n >= 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, " EP %d", c->ep);
    return buf;
}

static void inputs_table(void) {
    table_t *t = table_new("the two published runs: the figures their papers state (the peak, Llama's NVLink and "
                           "DeepSeek's GPU memory: NVIDIA's H100 and H800 figures)");
    table_column(t, "model", NULL, "%s");
    table_column(t, "parameters", NULL, "%.4g");
    table_column(t, "active parameters", NULL, "%.4g");
    table_column(t, "layers", NULL, "%g");
    table_column(t, "hidden", NULL, "%g");
    table_column(t, "sequence", "tokens", "%g");
    table_column(t, "sequences a step", NULL, "%g");
    table_column(t, "GPUs", NULL, "%g");
    table_column(t, "routed experts a layer", NULL, "%g");
    table_column(t, "expert hidden", NULL, "%g");
    table_column(t, "MoE layers", NULL, "%g");
    table_column(t, "GPU memory", "GB", "%g");
    table_column(t, "peak BF16", "TFLOP/s", "%g");
    table_column(t, "NVLink", "GB/s", "%g");
    table_column(t, "network", "GB/s", "%g");
    table_column(t, "source", NULL, "%s");
    for (int i = 0; i < N_MODELS; i++) {
        const model *m = &MODELS[i];
        table_row(t, m->name, m->params, m->active, m->layers, m->hidden, m->seq, m->sequences, m->gpus, m->experts,
                  m->expert_hidden, m->moe_layers, m->memory_gb, m->peak_tflops, m->nvlink_gbps, m->network_gbps,
                  m->source);
    }
    table_show(t);
}

/* What the tables say, with the papers' own throughput beside the model's. Llama 3's paper reports 400 TFLOP/s a
 * GPU for this configuration; DeepSeek-V3's report 180K H800 GPU hours a trillion pre-training tokens, which is
 * 6 x 37e9 x 1e12 FLOP over 180e3 x 3600 GPU seconds. */
static void verdicts(const figures *f) {
    const double peak = 989e12, llama_reported = 400e12 / peak;
    const double deepseek_reported = 6 * 37e9 * 1e12 / (180e3 * 3600 * peak);
    note("What the three steps say (all modelled):\n\n"
         "- **Memory** rules out data parallelism alone and tensor parallelism alone for both models: the weights "
         "do not fit. Llama's TP 8 x PP 8 fits only by recomputing activations (%.1f GB a rank without); the "
         "published TP 8 x PP 16 fits without (%.1f GB). DeepSeek's experts need EP: with EP 8 a rank keeps %.1f "
         "GB without recomputation, with the published EP 64 %.1f GB.\n"
         "- **The global batch**: DP alone gives Llama more replicas (16384) than sequences a step (2048). The "
         "published configurations run %g and %g micro-batches a replica, so 1F1B's bubble is %.3f and %.3f.\n"
         "- **Throughput**: the published configurations come first among their model's candidates: Llama's "
         "modelled MFU %.3f against %.3f for PP 8 (a second forward to recompute, for a bubble of %.3f); "
         "DeepSeek's %.3f against %.3f for EP 8, which recomputes too. EP 8 keeps the all-to-all (%.0f GB a step) "
         "inside a node; EP 64 sends each token to 4 nodes at most, over the network, and still hides it under "
         "the compute.\n\n"
         "The model's MFU is an upper bound: every kernel at the GPU's peak, 6 N D counting no attention, every "
         "network byte hidden. Llama 3's paper reports 400 TFLOP/s a GPU for its configuration, %.3f of the peak; "
         "DeepSeek-V3's report 180K GPU hours a trillion tokens, %.3f of the BF16 peak (its matrix products run in "
         "FP8, whose peak is twice that). The gap is what the model leaves out; its ranking of configurations is "
         "what it is for. Interleaving (Llama 3 uses it) and DualPipe (DeepSeek-V3) shrink the 1F1B bubbles "
         "shown here, as the schedules above do.",
         quoted(f[LLAMA_PP8].total / GB), quoted(f[LLAMA_PUBLISHED].total / GB), quoted(f[DEEPSEEK_EP8].total / GB),
         quoted(f[DEEPSEEK_PUBLISHED].total / GB), quoted(f[LLAMA_PUBLISHED].micro),
         quoted(f[DEEPSEEK_PUBLISHED].micro), quoted(f[LLAMA_PUBLISHED].bubble), quoted(f[DEEPSEEK_PUBLISHED].bubble),
         quoted(f[LLAMA_PUBLISHED].mfu), quoted(f[LLAMA_PP8].mfu), quoted(f[LLAMA_PP8].bubble),
         quoted(f[DEEPSEEK_PUBLISHED].mfu), quoted(f[DEEPSEEK_EP8].mfu), quoted(f[DEEPSEEK_EP8].expert / GB),
         llama_reported, deepseek_reported);
}

void configuration_section(void) {
    progress("choosing a configuration");
    note("## Choosing a configuration\n\n"
         "The mesh's three axes are three numbers to choose for a real run, in three steps (the Ultra-Scale "
         "Playbook's): **fit in memory** (weights, gradients, optimizer state and activations under the GPU's "
         "memory), **reach the global batch** (data-parallel replicas times micro-batches times sequences), "
         "**maximise throughput** (the bubble, and the bytes each link carries). Below, the formulas of this "
         "lecture worked for two published runs, *The Llama 3 Herd of Models* (2024): Llama 3 405B, dense, TP 8 x "
         "PP 16 x DP 128 on 16384 H100s; and the *DeepSeek-V3 Technical Report* (2024): a mixture of experts, PP "
         "16 x EP 64 with ZeRO-1 data parallelism on 2048 H800s, no tensor parallelism; each beside configurations "
         "it did not choose. Every figure is **modelled**: arithmetic on the papers' figures "
         "(lectures/lecture_pipelines/configure.c states each formula), not a measurement.");
    inputs_table();
    figures f[N_CONFIGS];
    for (int i = 0; i < N_CONFIGS; i++)
        f[i] = work_out(&CONFIGS[i]);
    note("Memory per rank, in bytes: a parameter's 16-bit weight and gradient and AdamW's fp32 master copy and two "
         "moments (2 + 2 + 12); Llama 3's FSDP shards the gradients and the optimizer state over the "
         "replicas and keeps the weights whole through a step (it does not reshard them after the forward), "
         "DeepSeek-V3's ZeRO-1 shards the optimizer state; an expert's state over its own replicas (DP / EP). Activations: 34 s b h / "
         "TP bytes a layer a micro-batch of b = 1 sequence (assumed: the papers do not give it), the count of "
         "Korthikanti et al. (2022) for a block with sequence parallelism and no attention scores kept; 2 s b h / "
         "TP with full recomputation (only each layer's input kept). 1F1B's first stage holds PP micro-batches of "
         "L / PP layers: L layers' worth, whatever PP. A dense block's count: DeepSeek's attention (MLA) and MoE "
         "layers keep other tensors, so its activations are an estimate.");
    predict("How many GB will each rank of Llama 3 405B's published configuration (TP 8 x PP 16 x DP 128) hold "
            "without recomputing activations: under the H100's 80 GB, or over?",
            f[LLAMA_PUBLISHED].total / GB, "GB");

    char name[64];
    table_t *t = table_new("step 1, fit in memory: GB a rank (modelled), GPU memory 80 GB");
    table_column(t, "configuration", NULL, "%s");
    table_column(t, "TP", NULL, "%d");
    table_column(t, "PP", NULL, "%d");
    table_column(t, "DP", NULL, "%g");
    table_column(t, "EP", NULL, "%d");
    table_column(t, "parameters a rank", NULL, "%.4g");
    table_column(t, "weights", "GB", "%.2f");
    table_column(t, "gradients", "GB", "%.2f");
    table_column(t, "optimizer", "GB", "%.2f");
    table_column(t, "activations", "GB", "%.2f");
    table_column(t, "activations, recomputed", "GB", "%.2f");
    table_column(t, "total", "GB", "%.2f");
    table_column(t, "total, recomputed", "GB", "%.2f");
    table_column(t, "fits", NULL, "%s");
    for (int i = 0; i < N_CONFIGS; i++) {
        const config *c = &CONFIGS[i];
        table_row(t, label(c, name, sizeof name), c->tp, c->pp, f[i].dp, c->ep, f[i].params, f[i].weights / GB,
                  f[i].gradients / GB, f[i].optimizer / GB, f[i].acts / GB, f[i].acts_recomputed / GB, f[i].total / GB,
                  f[i].total_recomputed / GB, FIT[f[i].fit]);
    }
    table_show(t);

    t = table_new("step 2, reach the global batch: micro-batches of 1 sequence a replica, and 1F1B's bubble "
                  "(modelled)");
    table_column(t, "configuration", NULL, "%s");
    table_column(t, "DP", NULL, "%g");
    table_column(t, "sequences a step", NULL, "%g");
    table_column(t, "tokens a step", NULL, "%.4g");
    table_column(t, "micro-batches a replica", NULL, "%g");
    table_column(t, "bubble", NULL, "%.4f");
    table_column(t, "reached", NULL, "%s");
    for (int i = 0; i < N_CONFIGS; i++)
        table_row(t, label(&CONFIGS[i], name, sizeof name), f[i].dp, MODELS[CONFIGS[i].model].sequences, f[i].tokens,
                  f[i].micro, f[i].bubble, f[i].micro >= 1 ? "yes" : "no: more replicas than sequences");
    table_show(t);

    t = table_new("step 3, maximise throughput: the configurations that fit and reach the batch, bytes a rank "
                  "sends in a step, a step's time and MFU (all modelled: compute at the GPU's peak, alpha %g us a "
                  "call inside a node)",
                  ALPHA_S * 1e6);
    table_column(t, "configuration", NULL, "%s");
    table_column(t, "recomputed", NULL, "%s");
    table_column(t, "tensor (NVLink)", "GB", "%.2f");
    table_column(t, "pipeline (network)", "GB", "%.2f");
    table_column(t, "data (network)", "GB", "%.2f");
    table_column(t, "expert", "GB", "%.2f");
    table_column(t, "expert link", NULL, "%s");
    table_column(t, "compute", "s", "%.3f");
    table_column(t, "step (modelled)", "s", "%.3f");
    table_column(t, "MFU (modelled)", NULL, "%.3f");
    table_column(t, "published", NULL, "%s");
    for (int i = 0; i < N_CONFIGS; i++) {
        if (f[i].fit == DOES_NOT_FIT || f[i].micro < 1) continue;
        table_row(t, label(&CONFIGS[i], name, sizeof name), f[i].fit == FITS_RECOMPUTED ? "yes" : "no",
                  f[i].tensor / GB, f[i].pipeline / GB, f[i].data / GB, f[i].expert / GB,
                  CONFIGS[i].ep == 1      ? "-"
                  : f[i].expert_on_nvlink ? "NVLink"
                                          : "network",
                  f[i].compute, f[i].step, f[i].mfu, CONFIGS[i].published ? "yes" : "no");
    }
    table_show(t);
    verdicts(f);
    /* The model's own ranking, which could come out otherwise (the bubble favours fewer stages): the paper's
     * configuration has the highest modelled MFU among its model's candidates. */
    for (int k = 0; k < N_MODELS; k++) {
        int best = -1;
        for (int i = 0; i < N_CONFIGS; i++)
            if (CONFIGS[i].model == k && f[i].fit != DOES_NOT_FIT && f[i].micro >= 1 &&
                (best < 0 || f[i].mfu > f[best].mfu))
                best = i;
        check(best >= 0 && CONFIGS[best].published,
              "%s: the published configuration has the highest modelled MFU "
              "of the candidates (best: %s)",
              MODELS[k].name, best >= 0 ? label(&CONFIGS[best], name, sizeof name) : "none");
    }
}
