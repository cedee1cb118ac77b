/* lecture_08: distributed training. Part 1: how accelerators talk (hardware, collectives, their speed, streams).
 * Part 2: one model trained every way, each checked against one device. Everything runs for real on CPU ranks (the
 * committed trace); the GPU path is compiled in, unverified across ranks (docs/gpu.md). Plumbing: lecture_08/, lib/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lectern.h"
#include "lecture_08/at_scale.h"
#include "lecture_08/collective_bench.h"
#include "lecture_08/pipeline.h"
#include "lecture_08/streams.h"
#include "lecture_08/train.h"
#include "lecture_08/zero3.h"
#include "lib/buckets.h"
#include "lib/mlp.h"

static void introduction(void), hardware(void), collective_operations(void), our_runtime_and_nccl(void),
        benchmarking(void), cuda_streams(void), parallelism_overview(void), one_device(void), ddp(void),
        ddp_zero3(void), tensor_parallelism(void), pipeline_parallelism(void), summary(void);
static void collective_examples_main(int, int, void *), bench_main(int, int, void *), ddp_main(int, int, void *),
        ddp_buckets_main(int, int, void *), zero3_main(int, int, void *), tensor_parallel_main(int, int, void *),
        megatron_main(int, int, void *), pipeline_main(int, int, void *), pipeline_schedule_main(int, int, void *);

LECTURE_OPTIONS({"batch", "N",
                 "examples per training step in Part 2 (default 128); every strategy cuts them "
                 "into equal pieces (4 ranks, 2 micro-batches each), so N must divide by 8"});

static baseline_run baseline; /* what one device computed: every strategy is judged against it */

static void lecture_08(void) {
    training_config(); /* a bad --batch stops the lecture before anything runs */
    note("# Distributed training");
    introduction();
    note("## Part 1 (first sitting): the building blocks of distributed communication");
    hardware();              /* how accelerators are wired to each other */
    collective_operations(); /* the programming model: a handful of patterns */
    our_runtime_and_nccl();  /* how those patterns are carried out */
    benchmarking();          /* how fast they are */
    cuda_streams();          /* overlapping communication with computation */
    note("## Part 2 (second sitting): distributed training");
    parallelism_overview();
    one_device();           /* the answer every strategy must reproduce */
    ddp();                  /* split the batch */
    ddp_zero3();            /* split the batch, shard the model state */
    tensor_parallelism();   /* split every layer along its width */
    pipeline_parallelism(); /* split the stack of layers along its depth */
    summary();
    baseline_free(&baseline);
}

static void introduction(void) {
    progress("introduction");
    note("This lecture: training one model on many accelerators at once. The setting: arithmetic is spread over many "
         "devices, and moving data between them is slow compared with computing on it.");
    if (gpu_count() == 0)
        note("*This run found no GPU.* Every example still runs for real: each rank is a CPU process, tensors live "
             "in host memory, collectives go through Open MPI and matrix products through OpenBLAS. On a machine "
             "with GPUs the same code uses NCCL and cuBLAS. Timings below are this machine's, not a GPU's.");
    else if (gpu_count() < 4)
        note("*This machine has %d GPU%s for spawns of up to 4 ranks.* NCCL wants one GPU per rank, so a spawn with "
             "more ranks than GPUs puts rank r on cuda:(r mod %d): every rank's tensors live there and its matmuls "
             "run in cuBLAS, but the ranks take turns on the device. Their collectives go through Open MPI via pinned "
             "host memory, in chunks that overlap with the transfer: the bandwidth is host memory's, a few GB/s, not "
             "NVLink's. Each spawn's note says which way it ran.",
             gpu_count(), gpu_count() == 1 ? "" : "s", gpu_count());
    note("Memory comes in a hierarchy, each level larger and slower than the one above:\n\n"
         "- L1 cache and shared memory, next to the arithmetic units (small, fast)\n"
         "- L2 cache, shared by the whole chip\n"
         "- DRAM (HBM) on the same package\n"
         "- other GPUs in the same node\n"
         "- GPUs in other nodes (huge in total, slowest to reach)");
    image("assets/lecture_08_memory_hierarchy.svg", 0.55);
    note("The previous lecture cut DRAM traffic inside one GPU (fusion, tiling). This one cuts traffic between GPUs "
         "and nodes, by choosing what to keep a copy of everywhere (replicate) and what to cut into pieces (shard). "
         "The game throughout: arrange the computation so that as little data as possible has to cross the slow "
         "links.\n\n**Two sittings.** Part 1 is how accelerators talk (hardware, collectives, their speed, streams); "
         "Part 2 trains one model every way, each checked against one device. Between them a class reads "
         "lecture_collectives and lecture_ddp (docs/course.md).");
}

static void hardware(void) {
    progress("hardware");
    note("## One GPU\n\n"
         "Inside one GPU the bottleneck is usually DRAM: NVIDIA's datasheet gives the H100 NVL 7.8 TB/s of memory "
         "bandwidth (a figure for its pair of boards; about 3.9 TB/s per GPU).");
    see("https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet");
    image("assets/lecture_08_gpu.svg", 0.6);
    see("https://miro.medium.com/v2/resize:fit:2000/format:webp/1*6xoBKi5kL2dZpivFe1-zgw.jpeg",
        "the H100 chip's block diagram");
    note("## Many GPUs, many nodes: PCIe and Ethernet\n\n"
         "The classic layout: GPUs hang off the CPU, and the CPU and network card sit in the middle of each transfer.");
    image("assets/lecture_08_pcie_ethernet.svg", 0.65);
    see("https://media.springernature.com/lw685/springer-static/image/art%3A10.1186%2Fs42774-021-00098-3/MediaObjects/42774_2021_98_Fig1_HTML.png?as=webp",
        "a multi-GPU cluster's node layout");
    note("- GPUs in one node share a PCI Express bus. The newest generation specified, PCIe 7.0 (published in 2025; "
         "no devices ship with it yet), gives 242 GB/s each way over 16 lanes; an H100 uses PCIe 5.0, about 64 GB/s "
         "each way.\n"
         "- GPUs in different nodes go through the network. Commodity Ethernet runs at 1 to 10 Gb/s (0.125 to 1.25 "
         "GB/s); data-centre Ethernet and InfiniBand at 100 to 800 Gb/s (12.5 to 100 GB/s) per port, 800 Gb/s "
         "InfiniBand (XDR) and Ethernet shipping from 2025.\n\n"
         "Both are far slower than a GPU's own memory. The turning point in hardware was to let GPUs reach each "
         "other *directly*, without the CPU in the way.");
    see("https://en.wikipedia.org/wiki/PCI_Express");
    note("## InfiniBand and RDMA\n\n"
         "InfiniBand is a network standard from 1999. Mellanox built most of its hardware; NVIDIA agreed to buy "
         "Mellanox in 2019 and completed the purchase in 2020. Its key idea is Remote Direct Memory Access (RDMA): a "
         "network card writes straight into another machine's memory (GPU memory, with GPUDirect RDMA) without "
         "either CPU or operating system copying the bytes.");
    image("assets/lecture_08_rdma.svg", 0.65);
    see("https://lambdalabs.com/hubfs/Imported_Blog_Media/nvlink-diagram-update.png",
        "GPUs, NVLink and network cards in a server");
    note("## NVLink and NVSwitch\n\n"
         "NVLink is NVIDIA's own GPU-to-GPU link, announced in 2014; inside a node it joins GPUs to each other with "
         "no CPU on the path. For the H100 generation (fourth-generation NVLink) NVIDIA quotes its NVLink Switch "
         "System at 9 times the bisection bandwidth of HDR InfiniBand (200 Gb/s a port), so about 4.5 times NDR's "
         "(400 Gb/s): a vendor's figure, and the generations compared matter.");
    see("https://developer.nvidia.com/blog/upgrading-multi-gpu-interconnectivity-with-the-third-generation-nvidia-nvswitch/");
    image("assets/lecture_08_nvlink_generations.svg", 0.55);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-generations-1.png", "NVLink generations");
    note("NVSwitch chips connect every GPU to every other at full NVLink speed, and the NVLink Switch System carries "
         "that across nodes, sidestepping Ethernet. An H100 (Hopper) has 18 fourth-generation NVLink links: 900 GB/s "
         "in total, counting both directions, so 450 GB/s each way. A measured bandwidth of one direction's traffic "
         "(busbw, below) is to be compared with the 450.");
    image("assets/lecture_08_nvswitch.svg", 0.6);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-all-to-all-connectivity-1.png",
        "NVLink all-to-all connectivity");
    note("## SHARP: reducing inside the switch\n\n"
         "NVSwitch can do the additions of an all-reduce itself (SHARP, in-network reduction). Each GPU then sends "
         "its data once and receives the sum once, instead of taking part in every step: about half the traffic. "
         "Expect more such changes: the hardware moves fast, but the hierarchy stays.");
    image("assets/lecture_08_sharp.svg", 0.65);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-SHARP-acceleration-1.png",
        "NVLink SHARP acceleration");
    note("## Our hardware\n\n"
         "What is this lecture running on?");
    see("https://guide.ncloud-docs.com/docs/en/server-baremetal-a100-check-vpc");
    if (gpu_count() > 0) {
        note_system("nvidia-smi topo -m");
        note("Read the matrix row by row: `NV#` means the two GPUs share # bonded NVLinks; `PIX`, `PXB`, `PHB`, "
             "`NODE` and `SYS` are PCIe paths that cross more and more of the machine (a PCIe bridge, several, the "
             "host bridge, the NUMA node, the link between sockets). NICs are the network cards.");
        return;
    }
    note("No GPU here, so `nvidia-smi topo -m` has nothing to show. The CPU's topology instead, as hwloc sees it: "
         "sockets (packages), NUMA nodes, caches, cores, and the PCI devices (disk, network card).");
    note_system("lstopo-no-graphics --of console");
    note("On a GPU server the same tool lists the GPUs and NICs under their PCIe bridges; `nvidia-smi topo -m` "
         "condenses that into who-reaches-whom-how: `NV18` between two H100s means 18 bonded NVLinks.");
}

static void collective_operations(void) {
    progress("collective operations");
    note("## Collective operations\n\n"
         "Collective operations are the vocabulary of distributed programs.");
    see("https://en.wikipedia.org/wiki/Collective_operation");
    note("- *Collective*: every rank calls the same operation, and together they describe one communication pattern "
         "across all of them (4, 256, 10 000 ranks).\n"
         "- They come from the parallel-computing literature of the 1980s (later, MPI).\n"
         "- They suit SPMD programs (single program, multiple data): every rank runs the same code on its own data.\n"
         "- They are simpler to use, and faster, than arranging point-to-point sends and receives yourself.\n\n"
         "Two words used everywhere below: a **rank** is one device (a GPU, here a process) and its number, 0, 1, 2, "
         "...; the **world size** is how many ranks there are. In the pictures, each row is a rank; before on the "
         "left, after on the right.");
    note("### Broadcast\n\n"
         "One rank's tensor is copied to every rank.");
    image("assets/lecture_08_broadcast.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/broadcast.png");
    note("### Scatter\n\n"
         "One rank's tensor is cut into world-size pieces; rank *i* receives piece *i*.");
    image("assets/lecture_08_scatter.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/scatter.png");
    note("### Gather\n\n"
         "The reverse of scatter: every rank's piece is collected, in rank order, on one rank.");
    image("assets/lecture_08_gather.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/gather.png");
    note("### Reduce\n\n"
         "Every rank's tensor is combined elementwise (sum, average, min, max) and the result lands on one rank.");
    image("assets/lecture_08_reduce.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/reduce.png");
    note("### All-gather\n\n"
         "A gather whose result lands on every rank.");
    image("assets/lecture_08_all_gather.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/all_gather.png");
    note("### Reduce-scatter\n\n"
         "A reduce whose result is cut into pieces: rank *i* gets piece *i* of the sum.");
    image("assets/lecture_08_reduce_scatter.svg", 0.3);
    see("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/_images/reducescatter.png");
    note("### All-reduce = reduce-scatter + all-gather\n\n"
         "A reduce whose result lands on every rank. It can be done as a reduce-scatter (each rank sums one piece) "
         "followed by an all-gather (everyone collects all pieces), which is how the ring algorithm below does it.");
    image("assets/lecture_08_all_reduce.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/all_reduce.png");
    note("How to keep them apart:\n\n"
         "- *reduce* means combining with an associative, commutative operation (sum, min, max; average is a sum "
         "divided by the world size)\n"
         "- *scatter* and *gather* undo each other, as do *broadcast* and *reduce* in shape\n"
         "- *all-* means every rank gets the result");
}

static void our_runtime_and_nccl(void) {
    progress("runtime and NCCL");
    note("## Collectives in this runtime (our `torch.distributed`)\n\n"
         "PyTorch gives programs `torch.distributed`; this lecture's runtime gives C the same calls: "
         "`dist_all_reduce`, `dist_reduce_scatter`, `dist_all_gather`, `dist_broadcast`, `dist_reduce`, "
         "`dist_scatter`, `dist_gather`, `dist_send`, `dist_recv`, the non-blocking `dist_isend` and `dist_irecv` "
         "completed by `dist_wait`, and `dist_barrier`; SUM, AVG, MIN or MAX where they reduce.");
    see("https://pytorch.org/docs/stable/distributed.html");
    note("`spawn(fn, world_size, &args, sizeof args)` runs `fn(rank, world_size, args)` in world-size real "
         "processes, each on its own copy of the arguments, like `torch.multiprocessing.spawn`. The processes come "
         "from a pool that Open MPI's `mpirun` starts once, at the first spawn; each spawn finds the lecture's "
         "globals as a fresh process would. Like PyTorch it has two backends, picked per spawn:\n\n"
         "| call | with a GPU per rank: NCCL | otherwise: Open MPI (host memory) |\n"
         "|---|---|---|\n"
         "| `dist_all_reduce` | `ncclAllReduce` | `MPI_Allreduce` |\n"
         "| `dist_reduce_scatter` | `ncclReduceScatter` | `MPI_Reduce_scatter_block` |\n"
         "| `dist_all_gather` | `ncclAllGather` | `MPI_Allgather` |\n"
         "| `dist_broadcast` | `ncclBroadcast` | `MPI_Bcast` |\n"
         "| `dist_reduce` | `ncclReduce` | `MPI_Reduce` |\n"
         "| `dist_scatter`, `dist_gather` | `ncclSend`/`ncclRecv` in a group | `MPI_Scatter`, `MPI_Gather` |\n"
         "| `dist_send`, `dist_recv` | `ncclSend`, `ncclRecv` | `MPI_Send`, `MPI_Recv` |\n"
         "| `dist_isend`, `dist_irecv`, `dist_wait` | `ncclSend`, `ncclRecv` on the stream, then a stream wait | "
         "`MPI_Isend`, `MPI_Irecv`, `MPI_Wait` |\n\n"
         "Open MPI plays the part of PyTorch's gloo backend (CPU); NCCL is the GPU backend in both worlds. NCCL has "
         "`ncclAvg` for averages; with MPI an average is a sum divided by the world size. Higher-level tools "
         "(PyTorch's FSDP, DeepSpeed) are built from these same calls, as Part 2 does by hand.");
    note("## NCCL: the NVIDIA Collective Communication Library\n\n"
         "NCCL turns each collective into the transfers and small reduction kernels that carry it out on the actual "
         "machine.");
    see("https://www.nvidia.com/en-us/on-demand/session/gtcspring21-s31880/");
    note("1. It detects the topology: nodes, switches, which GPUs share NVLink or PCIe, which network card is "
         "closest to which GPU.\n"
         "2. It plans the paths between ranks. Two classic plans for all-reduce:");
    image("assets/lecture_08_ring_vs_tree.svg", 0.6);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2019/02/DBtree.png");
    note("- **Ring**: the data is cut into N chunks that travel around a ring; N-1 steps of reduce-scatter then N-1 "
         "steps of all-gather. Each rank sends 2(N-1)/N times the data, and when the ranks do the additions "
         "themselves no all-reduce can send less (Patarasuk and Yuan, 2009, prove it; lecture_collectives counts the "
         "bytes of four all-reduces built by hand). The ring meets that bound exactly: it is *bandwidth*-optimal "
         "among algorithms that only move data between ranks. In-network reduction (SHARP, above) does better, because the switch adds: each GPU sends its data "
         "once and receives the sum once. And 2(N-1) steps in a row means latency grows linearly with N.\n"
         "- **Tree**: reduce up a tree and broadcast back down, in about 2 log2(N) steps, so it is "
         "*latency*-friendly. A single tree leaves the leaves' outgoing links idle, so NCCL uses a *double binary "
         "tree*: two trees where every interior node of one is a leaf of the other, keeping all links busy.\n\n"
         "3. It launches CUDA kernels that move and add the data, on a CUDA stream, so a collective is just more GPU "
         "work in the queue. (lecture_collectives builds the ring, the tree and two other all-reduces from sends and "
         "receives, and measures each.)");
    note("## Examples\n\n"
         "Four ranks run `collective_examples_main`; each prints its tensors before and after each operation. Rank "
         "*r* starts from [0, 1, 2, 3] + *r*.");
    progress("examples: spawn 4 ranks");
    spawn(collective_examples_main, 4, NULL, 0);
}

/* The ring, from point-to-point messages: world_size chunks of one number; each step, one chunk to the right. */
static void ring_all_reduce_by_hand(int rank, int world_size) {
    int device = get_device(rank);
    if (rank == 0)
        note("### All-reduce by hand: a ring of sends and receives\n\n"
             "Every rank sends to its right neighbour and receives from its left one at the same time. A blocking "
             "`dist_send` may wait until the matching receive is posted (MPI does so for large messages); with every "
             "rank sending first, each would wait for a receive nobody has posted yet (a deadlock), so the sends are "
             "non-blocking (`dist_isend`), completed with `dist_wait`.");
    dist_barrier();
    tensor *x = arange(world_size, device);
    add_scalar_(x, (float)rank);
    tensor *incoming = zeros(1, 0, device);
    int right = (rank + 1) % world_size, left = (rank + world_size - 1) % world_size;
    /* Reduce-scatter phase: after step s, chunk (rank - s - 1) holds s + 2 ranks' contributions; after world_size -
     * 1 steps, chunk (rank + 1) holds the sum. Then the all-gather phase passes the finished sums around the ring. */
    for (int s = 0; s < 2 * (world_size - 1); s++) {
        int gather = s >= world_size - 1, t = gather ? s - (world_size - 1) : s;
        int send_chunk = (rank + gather - t + world_size) % world_size;
        int recv_chunk = (rank + gather - t - 1 + world_size) % world_size;
        tensor *out = row_slice(x, send_chunk, send_chunk + 1);
        tensor *in = row_slice(x, recv_chunk, recv_chunk + 1);
        dist_request *req = dist_isend(out, right);
        dist_recv(gather ? in : incoming, left);
        dist_wait(req);
        if (!gather) add_(in, incoming);
        free_tensors((tensor *[]){out, in}, 2);
    }
    note_verbatim("Rank %d [after ring all-reduce]: %s", rank, tensor_str(x));
    if (rank == 0)
        note("Same [6, 10, 14, 18], in 2(N-1) = %d steps, each moving one chunk per rank.", 2 * (world_size - 1));
    free_tensors((tensor *[]){incoming, x}, 2);
}

/* Runs in every rank. The numbers are small on purpose: the point is where they end up. */
static void collective_examples_main(int rank, int world_size, void *args) {
    (void)args;
    int device = get_device(rank);
    if (rank == 0) note("### All-reduce");
    dist_barrier(); /* the heading is sent before any rank prints numbers */
    tensor *t = arange(world_size, device);
    add_scalar_(t, (float)rank); /* [0, 1, 2, 3] + rank */
    note_verbatim("Rank %d [before all-reduce]: %s", rank, tensor_str(t));
    dist_all_reduce(t, DIST_SUM); /* in place: t becomes the sum */
    note_verbatim("Rank %d [after all-reduce]: %s", rank, tensor_str(t));
    tensor_free(t);
    if (rank == 0) note("### Reduce-scatter");
    dist_barrier();
    tensor *input = arange(world_size, device);
    add_scalar_(input, (float)rank);
    tensor *output = zeros(1, 0, device); /* one element: this rank's piece */
    note_verbatim("Rank %d [before reduce-scatter]: input = %s, output = %s", rank, tensor_str(input),
                  tensor_str(output));
    dist_reduce_scatter(output, input, DIST_SUM);
    note_verbatim("Rank %d [after reduce-scatter]: input = %s, output = %s", rank, tensor_str(input),
                  tensor_str(output));
    if (rank == 0) note("### All-gather");
    dist_barrier();
    tensor *gathered = zeros(world_size, 0, device); /* the input: what reduce-scatter left here */
    note_verbatim("Rank %d [before all-gather]: input = %s, output = %s", rank, tensor_str(output),
                  tensor_str(gathered));
    dist_all_gather(gathered, output);
    note_verbatim("Rank %d [after all-gather]: input = %s, output = %s", rank, tensor_str(output),
                  tensor_str(gathered));
    if (rank == 0)
        note("Every rank now holds [6, 10, 14, 18] again: reduce-scatter followed by all-gather *is* an all-reduce.");
    free_tensors((tensor *[]){input, output, gathered}, 3);
    ring_all_reduce_by_hand(rank, world_size);
}

static void benchmarking(void) {
    progress("benchmarking");
    note("## Benchmarking\n\n"
         "How fast is communication? We time all-reduce and reduce-scatter on one node, with 2 and then 4 ranks, "
         "over a range of message sizes.");
    see("https://github.com/stas00/ml-engineering/blob/master/network/benchmarks/all_reduce_bench.py");
    note("Two bandwidths are reported, as nccl-tests defines them (GB = 10^9 bytes; message sizes in MiB, 2^20 "
         "bytes):\n\n"
         "- **algbw** = S / t, where S is the message size and t the time of one operation. For reduce-scatter S is "
         "the size of the *whole input* (world size times the output), because that is what gets reduced.\n"
         "- **busbw** = algbw times a factor that turns it into the traffic on the busiest link: 2(n-1)/n for "
         "all-reduce, (n-1)/n for reduce-scatter and all-gather. busbw can be compared with the hardware's link "
         "speed, whatever the world size.");
    see("https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md#allreduce");
    note("A correction to the lecture this one follows. Its all-reduce estimate, S 2(n-1) / (n t), is exactly busbw. "
         "Its reduce-scatter estimate started from the *output* size S/n: (S/n)(n-1) / (n t), which is busbw / n, so "
         "2 times too low on 2 ranks and 4 times on 4. Counted from the whole input S, reduce-scatter's busbw is on "
         "the same scale as all-reduce's. Each rank times `trials` operations back to back after one warm-up; the "
         "times are averaged over the ranks with an all-reduce (as nccl-tests does by default).");
    note("A model to read the times with, the alpha-beta model: sending n bytes costs alpha + n beta, a fixed cost "
         "alpha (latency: software, synchronisation, the wire's delay) plus beta, the time per byte, for each byte "
         "(1 / beta is the bandwidth). A ring all-reduce on p ranks takes 2(p-1) steps, each sending n/p bytes, so "
         "it costs **t = 2(p-1) (alpha + n beta / p)**. Each spawn below fits alpha and beta to its own all-reduce "
         "times (least squares on relative errors, so that small messages count as much as large ones) and plots the "
         "model against the measurements. lecture_collectives fits them to a ping-pong of one message between two "
         "ranks instead (no reduction): the same letters for another measurement, so expect other values. An "
         "all-reduce's step also adds, copies, and waits for its partner's turn on a core; this fit folds all that "
         "into its alpha and beta.");
    /* 4 KiB (latency-bound) to 16 MiB (bandwidth-bound): the fit's two regimes, in a few seconds on 2 cores */
    bench_args args = {
            .n_sizes = 7, .bytes = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}, .trials = 5};
    if (lecture_quick())
        args = (bench_args){.n_sizes = 4, .bytes = {4 << 10, 64 << 10, 256 << 10, 1 << 20}, .trials = 2};
    note("### 2 ranks");
    progress("benchmarking: spawn 2 ranks");
    spawn(bench_main, 2, &args, sizeof args);
    show_busbw(2, NULL);
    note("### 4 ranks");
    progress("benchmarking: spawn 4 ranks");
    twin_record(1); /* its calls, replayed below on a simulated 8-GPU node */
    spawn(bench_main, 4, &args, sizeof args);
    twin_record(0);
    progress("benchmarking: the 4-rank sweep replayed on h100-node (simulated)");
    twin_result node;
    twin_last_spawn("h100-node", 8, &node); /* DDP's rule: the same calls on 8 ranks (docs/twin.md) */
    show_busbw(4, &node);                   /* lecture_08/collective_bench.c: the chart, with the twin beside it */
    if (gpu_count() == 0)
        note("On this machine the ranks are processes sharing a few CPU cores, and every transfer is a copy through "
             "shared memory: busbw is a few GB/s at best, against hundreds of GB/s for NVLink. What carries over is "
             "how to read the numbers: time for small messages (a fixed cost per operation), busbw for large ones. "
             "Why reduce-scatter can come out slower than the whole all-reduce here, which a ring could not: the "
             "runtime calls Open MPI's MPI_Reduce_scatter_block, and Open MPI 4.1 has no ring for it (its choices, "
             "`ompi_info --all`: basic_linear, recursive doubling, recursive halving, butterfly). basic_linear "
             "reduces the whole input to one rank, then scatters it, so that rank alone moves p times the bytes: "
             "what Open MPI's pick reached, not a ring.");
}

static void bench_main(int rank, int world_size, void *args) {
    const bench_args *a = args;
    bench_result all_reduce[MAX_SIZES], reduce_scatter[MAX_SIZES];
    bench_sweep(a, world_size, all_reduce, reduce_scatter); /* lecture_08/collective_bench.c */
    if (rank != 0) return;                                  /* the numbers are the same everywhere: one rank reports */
    if (world_size == 2) predict_busbw(&all_reduce[a->n_sizes - 1]); /* lecture_08/collective_bench.c */
    table_show(bench_table("all-reduce", world_size, all_reduce, a->n_sizes));
    table_show(bench_table("reduce-scatter", world_size, reduce_scatter, a->n_sizes));
    note_bandwidths(world_size, all_reduce, reduce_scatter, a->n_sizes); /* lecture_08/collective_bench.c */
    cost_model m = fit_cost_model(all_reduce, a->n_sizes, world_size);
    note_cost_model(world_size, all_reduce, a->n_sizes, &m);
    chart_show(cost_model_chart(world_size, all_reduce, a->n_sizes, &m));
    return_report(all_reduce, reduce_scatter, a->n_sizes); /* for the lecture's busbw chart, after the spawn */
}


#ifdef LECTERN_CUDA
/* Both jobs on the default stream (0): the copy waits for the matmul, the add for both. */
static void run_one_stream(streams_work *w) {
    multiply_on(w, 0);
    copy_on(w, 0);
    add_on(w, 0);
}

/* The matmul on one stream, the copy on another; both non-blocking (unordered with stream 0), so events alone order
 * them: both after stream 0's "started", the add on stream 0 after "computed" and "copied". The host never waits. */
static void run_two_streams(streams_work *w) {
    event_record(w->started, 0);
    stream_wait(w->compute, w->started);
    stream_wait(w->copy, w->started);
    multiply_on(w, w->compute);
    event_record(w->computed, w->compute);
    copy_on(w, w->copy);
    event_record(w->copied, w->copy);
    stream_wait(0, w->computed);
    stream_wait(0, w->copied);
    add_on(w, 0);
}
#endif

static void cuda_streams(void) {
    progress("CUDA streams");
    note("## CUDA streams\n\n"
         "How a GPU runs work: a kernel launch (a matmul, say) spreads over a grid of blocks of threads. Launches "
         "return at once; the host queues kernels while the GPU works through them asynchronously. The host waits only "
         "at synchronisation points: `cudaDeviceSynchronize()` (in PyTorch `torch.cuda.synchronize()`), or copying a "
         "result back to the CPU. Those stop the whole pipeline; we want a finer ordering that stays on the GPU.");
    note("A **CUDA stream** is a queue of operations that run in order. Operations in *different* streams may run at "
         "the same time; events (`cudaEventRecord`, `cudaStreamWaitEvent`) order one stream after another without "
         "the host waiting.");
    image("assets/lecture_08_streams.svg", 0.9);
    note("- **One stream**: each operation starts when the one before it ends, so a matmul and an unrelated copy "
         "take the sum of their times.\n"
         "- **Two streams**: the copy engine moves the bytes while the SMs multiply. The add needs both results, so "
         "stream 0 waits for an event recorded at the end of each: the ordering stays on the GPU, and the host is "
         "never blocked. The two should take about the longer of the two times, not their sum (an H200 in docs/gpu.md's "
         "check of 2026-11-28: 27.2 ms on one stream, 21.9 on two; the product alone 21.5 ms).\n"
         "- **DDP on NCCL** is the same picture: `dist_all_reduce_async` puts the all-reduce on a communication "
         "stream that first waits (an event) for the kernels queued before it, so the layers below compute beside "
         "it; `dist_wait` makes the compute stream (and the host) wait for its event.\n\n"
         "The example: a matrix product and an unrelated copy from CPU to GPU, on one stream, then on two "
         "(`run_one_stream`, `run_two_streams` above).");
#ifdef LECTERN_CUDA
    if (gpu_count() > 0) {
        streams_example(run_one_stream, run_two_streams); /* set-up and timing: lecture_08/streams.c */
        return;
    }
    note("*Not run here: this machine has no GPU* (`gpu_count()` is 0). The example's code (above, and "
         "lectures/lecture_08/streams.c) is compiled into the lecture, and on a GPU it times both versions with CUDA "
         "events here; without one there is no stream and no copy engine, so there are no timings to show.");
#else
    note("*Not run here: this build has no CUDA support*, so there is no stream to show. Built with the CUDA toolkit "
         "and run on a GPU, the lecture times both versions here.");
#endif
    note("On a CPU rank an Open MPI transfer's copies and sums are work for the same cores as the matmuls, and Open "
         "MPI's shared-memory path moves a transfer only while some thread of the rank is inside an MPI call (a "
         "property of that library, not of CPUs). So each rank has a progress thread that keeps its non-blocking "
         "calls moving while it computes (docs/design.md): a CPU rank's second queue. Part 2 measures what overlap "
         "buys twice: with this machine's arithmetic, and with modelled compute that leaves the cores free.");
}

/* The verdict beside each comparison: a strategy that drifts from one device fails the run (exit status 1). */
static void agrees(const char *what, double diff, double tolerance) {
    check(diff <= tolerance, "%s equal to one device's (%.3g <= %.3g)", what, diff, tolerance);
}

/* Work not in world-size equal pieces stops the lecture before the spawn (an error step; the last good trace kept). */
static void must_divide(int64_t n, int world_size, const char *what) {
    if (world_size > 0 && n % world_size == 0) return;
    lecture_fail("%s (%lld) do not divide into %d equal parts for the spawn() below", what, (long long)n, world_size);
}

static void parallelism_overview(void) {
    progress("parallelism overview");
    note("Three ways to cut up training, and the ones this part builds:\n\n"
         "- **data parallel**: every rank has the whole model and a slice of the batch\n"
         "- **tensor parallel**: every layer's matrix is cut along its width\n"
         "- **pipeline parallel**: the stack of layers is cut along its depth into stages");
    image("assets/lecture_08_parallelism.svg", 0.7);
    see("https://uvadlc-notebooks.readthedocs.io/en/latest/_images/parallelism_strategies_overview.svg");
    mlp_config c = training_config();
    note("One model for all of them: %d layers, each a %d x %d matrix followed by GELU; loss = mean(output^2) (push "
         "the output to zero); AdamW with learning rate %g; one data set of %d examples; %d steps. Each layer's "
         "initial weights come from its own seed, scaled by 1/sqrt(%d), so any rank can make any layer and get the "
         "same numbers. The backward pass is written out by hand: for y = gelu(x W), dh = dy * gelu'(x W), dW = x^T "
         "dh and dx = dh W^T.",
         c.layers, c.width, c.width, c.lr, c.batch, c.steps, c.width);
}

/* The reference: the whole batch on one device, no communication at all. */
static void one_device(void) {
    progress("one device");
    note("## One device first\n\n"
         "Before splitting anything, train on one device (lectures/lecture_08/train.c: forward, backward, AdamW, no "
         "communication). Every strategy below must reproduce these numbers.");
    baseline.cfg = training_config();
    table_show(one_device_train(&baseline)); /* lecture_08/train.c; the table: a row per step */
}

/* DDP as PyTorch runs it: buckets of layers, each rank's slice run as micro-batches. */
enum { LAYERS_PER_BUCKET = 2, ACCUMULATION_STEPS = 2, BUCKET_STEPS = 2, OVERLAP_TRIALS = 9, Z3_TRIALS = 5 };
enum { MODELLED_BUCKETS = 16, MODELLED_LAYERS = 8 }; /* the modelled DDP step's buckets, ZeRO-3 step's layers */

static void ddp(void) {
    progress("DDP");
    note("## Distributed data parallel (DDP)\n\n"
         "Every rank holds the whole model and takes 1/world-size of the batch. After backward the ranks average "
         "their gradients, one all-reduce per layer: from the same weights, with the same averaged gradient, they stay "
         "identical, and the average of per-slice mean gradients is the whole batch's, one device's. Each rank hands "
         "back what it held, sent and computed (`spawn_return`), shown in one table; on 2 ranks each shows its "
         "layer-0 gradient before and after the all-reduce. (lecture_ddp builds DDP step by step from plain SGD.)");
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    int worlds[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        progress("DDP: spawn %d ranks", worlds[k]);
        must_divide(baseline.cfg.batch, worlds[k], "the batch's examples");
        spawn(ddp_main, worlds[k], args, size);
        table_show(results_table(worlds[k], "DDP on %d %s", worlds[k], plural(worlds[k], "rank", "ranks")));
    }
    free(args);
    mlp_config c = baseline.cfg;
    note("What to notice:\n\n"
         "- Losses differ between ranks: each is computed on that rank's own slice; their mean is the whole batch's "
         "loss, the one device's.\n"
         "- The averaged gradient is one device's, up to the order of float32 sums (each rank sums its own slice; "
         "the BLAS library picks its kernel, and so its order, per CPU). The tolerance, 2 (layers + 1) max(batch, "
         "width) 2^-24 = %.2g of the largest gradient, is a heuristic, not a bound (lectures/lib/mlp.h derives it). "
         "Measured differences sit far under it; a wrong method lands far over it: a doubled gradient or a sum for an "
         "average is off by 100%% or more of the largest gradient, a skipped layer by all of it "
         "(tests/lectures/test_lecture_08_planted.py plants each).\n"
         "- Gradients are averaged, so parameters are *exactly* the same on every rank (max - min over ranks is 0).\n"
         "- Against one device the parameters differ a little: AdamW divides each gradient by its own running size, "
         "so a gradient that rounding tips from +1e-12 to -1e-12 moves its parameter the other way, by at most 2 lr "
         "R_t in step t (R_t about 1; lectures/lib/mlp.h): %.3g over these %d steps, each table's `trained_bound`. "
         "That check is blind to scale (AdamW divides it out: a doubled gradient trains the same parameters), so the "
         "step-0 checks compare gradients.",
         gradient_tolerance(&c), adamw_rounding_bound(&c), c.steps);
    note("### Buckets and gradient accumulation\n\n"
         "PyTorch's `DistributedDataParallel` does two more things. It groups the gradients into **buckets** (25 MB "
         "by default), each one contiguous tensor, all-reduced, asynchronously, as soon as backward has filled it: "
         "fewer fixed costs alpha than one all-reduce a layer, and the transfer runs while backward computes the "
         "layers below. With **gradient accumulation** (a batch run as k micro-batches before one step) it adds up "
         "the gradients locally and skips the all-reduce (`no_sync`) on all but the last micro-batch. lecture_ddp "
         "builds both step by step and measures how the bucket size trades the two costs.");
    note("Below, 4 ranks, buckets of %d layers, each rank's slice run as %d micro-batches: each bucket's all-reduce "
         "starts with `dist_all_reduce_async` the moment backward has filled it, and `dist_wait` completes them all "
         "before the optimizer step. Shown: the calls per micro-batch, the result still one device's (the step-0 "
         "gradient, the loss over %d steps), then the same step timed, the ways taking turns: no all-reduce, "
         "all-reducing after backward, and during it. A step costs what its slowest rank costs (`dist_timer`).",
         LAYERS_PER_BUCKET, ACCUMULATION_STEPS, BUCKET_STEPS);
    args = baseline_args(&baseline, 0, &size);
    args->cfg.steps = BUCKET_STEPS < args->cfg.steps ? BUCKET_STEPS : args->cfg.steps;
    progress("DDP with buckets: spawn 4 ranks");
    must_divide(baseline.cfg.batch, 4 * ACCUMULATION_STEPS, "the batch's examples");
    spawn(ddp_buckets_main, 4, args, size);
    table_show(buckets_table(4, "DDP with buckets, %d micro-batches", ACCUMULATION_STEPS));
    free(args);
    ddp_at_scale(); /* lecture_08/at_scale.c: 8 to 512 GPUs, simulated */
}

static void ddp_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local); /* this rank's slice of the batch */
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    rank_result r = {.rows = c->width, .steps = c->steps}; /* this rank's row of the lecture's table */
    for (int i = 0; i < c->layers; i++) {
        w[i] = layer_part(c, i, 'w', 0, 0, device); /* the whole model, the same on every rank */
        grads[i] = empty(c->width, c->width, device);
        opt[i] = adamw_new(w[i], c->lr);
        r.state_bytes += 4.0 * w[i]->numel * sizeof(float); /* weights, gradients, AdamW's two moments */
    }
    for (int step = 0; step < c->steps; step++) {
        int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
        forward(w, c->layers, x, acts, pre);
        r.loss[step] = mse_loss(acts[c->layers]);
        backward(w, c->layers, acts, pre, grads);
        if (step == 0 && world_size == 2) inspect(grads[0]); /* before: each rank's gradient of its own examples */
        for (int i = 0; i < c->layers; i++)
            dist_all_reduce(grads[i], DIST_AVG);             /* the one line that makes it DDP */
        if (step == 0 && world_size == 2) inspect(grads[0]); /* after: the average, the same on every rank */
        if (step == 0) {
            r.bytes = (double)(dist_bytes_nominal() - bytes_before), r.calls = (double)(dist_calls() - calls_before);
            r.grad_diff = diff_from_one_device(a, STEP0_GRADS, grads, c->layers, NULL, 0, 0, &r.grad_max);
            r.grad_tol = gradient_tolerance(c) * r.grad_max;
            agrees("DDP: step-0 gradients", r.grad_diff, r.grad_tol);
        }
        adamw_step_layers(opt, w, grads, c->layers);
        free_saved(c->layers, acts, pre);
    }
    r.trained_diff = diff_from_one_device(a, TRAINED, w, c->layers, NULL, 0, 0, NULL);
    r.trained_bound = adamw_rounding_bound(c);
    agrees("DDP: the trained parameters (within AdamW's rounding bound, blind to scale)", r.trained_diff,
           r.trained_bound);
    spawn_return(&r, sizeof r); /* the lecture shows every rank's in one table */
    char buf[512];
    double spread = spread_over_ranks(w, c->layers);
    if (rank == 0)
        note_verbatim("Rank 0: params = %s; across %d %s, max |params(max) - params(min)| = %.3g",
                      summaries(w, c->layers, buf, sizeof buf), world_size, plural(world_size, "rank", "ranks"),
                      spread);
    adamw_free_layers(opt, c->layers);
    free_tensors((tensor *[]){x, data}, 2), free_tensors(w, c->layers), free_tensors(grads, c->layers);
}

static void ddp_buckets_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank), k_micro = ACCUMULATION_STEPS;
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size, mb = local / k_micro;
    /* Each bucket is one tensor; the layers' gradients are views into it, so the backward pass writes them in place
     * and one all-reduce covers them. */
    buckets *g = buckets_new(c, LAYERS_PER_BUCKET, device);
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    dist_request *req[MAX_LAYERS]; /* each bucket's all-reduce in flight */
    adamw *opt[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) {
        w[i] = layer_part(c, i, 'w', 0, 0, device);
        opt[i] = adamw_new(w[i], c->lr);
    }
    if (rank == 0) note_verbatim("Rank 0: %d buckets, in the order backward fills them: %s", g->n, g->order);
    rank_result r = {.steps = c->steps}; /* this rank's row of the lecture's table */
    for (int step = 0; step < c->steps; step++) {
        for (int k = 0; k < k_micro; k++) {
            int sync = k == k_micro - 1; /* no_sync on all micro-batches but the last */
            int64_t calls_before = dist_calls();
            tensor *x = row_slice(data, rank * local + k * mb, rank * local + (k + 1) * mb);
            forward(w, c->layers, x, acts, pre);
            r.loss[step] += mse_loss(acts[c->layers]) / k_micro;
            tensor *dy = mse_loss_backward(acts[c->layers]);
            scale_(dy, 1.0f / k_micro); /* the slice's mean loss is the mean over micro-batches */
            for (int i = c->layers - 1; i >= 0; i--) {
                tensor *dx = NULL;
                layer_backward(acts[i], pre[i], w[i], dy, g->grads[i], i > 0 ? &dx : NULL, k == 0 ? 0.0f : 1.0f);
                tensor_free(dy);
                dy = dx;
                /* The bucket is complete once its first layer is done: start its all-reduce now, while the layers
                 * below are still to compute. The layers below write other buckets, never this one. */
                if (sync && i == g->bucket_first[g->bucket_of[i]])
                    req[g->bucket_of[i]] = dist_all_reduce_async(g->bucket[g->bucket_of[i]], DIST_AVG);
            }
            if (sync) /* every bucket averaged before anyone reads a gradient */
                for (int b = 0; b < g->n; b++)
                    dist_wait(req[b]);
            free_saved(c->layers, acts, pre);
            tensor_free(x);
            if (step == 0) r.calls_mb[k] = (double)(dist_calls() - calls_before);
        }
        if (step == 0) {
            r.grad_diff = diff_from_one_device(a, STEP0_GRADS, g->grads, c->layers, NULL, 0, 0, &r.grad_max);
            r.grad_tol = gradient_tolerance(c) * r.grad_max;
            agrees("DDP with buckets and accumulation: step-0 gradients", r.grad_diff, r.grad_tol);
        }
        adamw_step_layers(opt, w, g->grads, c->layers);
    }
    spawn_return(&r, sizeof r);
    step_times real, modelled;                                     /* lectures/lib/buckets.c times the four ways */
    tensor *x = row_slice(data, rank * local, (rank + 1) * local); /* the whole slice, one step */
    time_ddp_steps(c, w, g, x, OVERLAP_TRIALS, &real);
    time_modelled_ddp_steps(MODELLED_BUCKETS, MODELLED_LAYER_ROWS * MODELLED_LAYER_COLS, OVERLAP_TRIALS, &modelled);
    if (rank == 0) {
        table_show(overlap_table(world_size, local, OVERLAP_TRIALS, g->n, MODELLED_BUCKETS, &real, &modelled));
        check(modelled.over_longer <= OVERLAP_OVER_LONGER_MAX,
              "modelled DDP step: the async all-reduces during backward took at most %.2f x the longer of compute "
              "alone and communication alone (%.2f x; round %d of at most %d)",
              OVERLAP_OVER_LONGER_MAX, modelled.over_longer, modelled.rounds, MODELLED_ROUNDS);
        check(modelled.speedup >= OVERLAP_SPEEDUP_MIN,
              "modelled DDP step: all-reducing after backward took at least %.1f x the overlapped step (%.2f x; "
              "round %d of at most %d)",
              OVERLAP_SPEEDUP_MIN, modelled.speedup, modelled.rounds, MODELLED_ROUNDS);
        note("What each row proves. Modelled: started during backward, the buckets' all-reduces took %.2f ms beside "
             "%.2f ms of compute alone and %.2f ms of communication alone (%.2f x the longer), %.2f times faster "
             "than started after backward. Real (this machine's arithmetic): speed-up %.2f.",
             modelled.ms[DURING_BACKWARD], modelled.ms[NO_ALL_REDUCE], modelled.ms[COMM_ALONE], modelled.over_longer,
             modelled.speedup, real.speedup);
        explain_overlap_here(world_size, device, real.speedup);
    }
    adamw_free_layers(opt, c->layers);
    free_tensors((tensor *[]){x, data}, 2), free_tensors(w, c->layers), buckets_free(g);
}

static void ddp_zero3(void) {
    progress("ZeRO-3");
    note("## Distributed data parallel with ZeRO stage 3\n\n"
         "In DDP every rank keeps a full copy of everything: weights, gradients and optimizer state. ZeRO (the Zero "
         "Redundancy Optimizer) removes the copies in three stages:\n\n"
         "- stage 1: shard the optimizer state (for AdamW, two numbers per parameter)\n"
         "- stage 2: shard the optimizer state and the gradients\n"
         "- stage 3: shard the optimizer state, the gradients and the parameters (what PyTorch's FSDP does)");
    image("assets/lecture_08_zero_stages.svg", 0.6);
    see("https://production-media.paperswithcode.com/methods/Screen_Shot_2021-07-26_at_3.17.43_PM_3oyU7Qb.png",
        "ZeRO's three stages (Rajbhandari et al.)");
    mlp_config c = training_config();
    int ranks = 4;
    double params = (double)model_floats(&c), layer = (double)c.width * c.width;
    table_show(zero_stages_table(params, ranks)); /* 16 bytes a parameter, divided as each stage shards */
    note("That is model state per rank for this model (%.0f parameters, fp32, AdamW: 16 bytes a parameter in DDP; "
         "MB = 10^6 bytes); ZeRO-3 also needs, for a moment, one layer's gathered weights and full gradient (%.3f MB). "
         "Below, each rank adds up the tensors it really holds. Stage 3 as FSDP does it, and this section:\n\n"
         "- Each layer's weights are cut into world-size equal pieces: rank *r* keeps piece *r* of every layer "
         "(here, a band of rows), with AdamW's state for it.\n"
         "- Forward, layer by layer: **all-gather** the pieces into the whole layer, use it, free it.\n"
         "- Backward, layer by layer: all-gather the layer again (it was freed), compute the full gradient of this "
         "rank's slice of the batch, then **reduce-scatter**: each rank receives only its piece of the averaged "
         "gradient. Free the rest.\n"
         "- Step: each rank runs AdamW on its own piece. AdamW works element by element, so the pieces together are "
         "exactly the full update.\n\n"
         "Layer 0 needs no gathering in the backward pass: its input is the data, which needs no gradient, and its "
         "weight gradient x^T dh does not use the weights.",
         params, 2 * 4 * layer / 1e6);
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    progress("ZeRO-3: spawn %d ranks", ranks);
    must_divide(c.width, ranks, "the rows of a layer");
    must_divide(c.batch, ranks, "the batch's examples");
    spawn(zero3_main, ranks, args, size);
    table_show(results_table(ranks, "ZeRO-3 on %d ranks", ranks));
    free(args);
    double p = ranks, ddp_bytes = c.layers * 2 * (p - 1) / p * 4 * layer;
    double zero3_bytes = (2 * c.layers - 1 + c.layers) * (p - 1) / p * 4 * layer;
    note("The price is communication. Per rank and step, by the ring's count (a layer is %.0f bytes): DDP "
         "all-reduces each layer's gradient once, 2(p-1)/p of it, %.0f bytes in all. ZeRO-3 all-gathers each layer "
         "in the forward pass and all but layer 0 again in the backward pass, and reduce-scatters each gradient, "
         "(p-1)/p of a layer each: %.0f bytes, %.3f times DDP's. (FSDP gathers layer 0 again too: 3 against 2, 1.5 "
         "times.) The runtime's counts in the tables (a nominal tally: each call adds what a bandwidth-optimal "
         "algorithm sends for it, `dist_bytes_nominal()`) show which calls each rank made, with which sizes. Each "
         "rank's piece of the averaged gradient is one device's, to float32 rounding, and its piece of the weights "
         "ends where one device's did, within AdamW's rounding bound. This code gathers a layer only when it needs "
         "it; PyTorch's FSDP prefetches, gathering the next layer while the current one computes, to hide the extra "
         "traffic: the table above times both.",
         4 * layer, ddp_bytes, zero3_bytes, zero3_bytes / ddp_bytes);
}

/* A layer's whole weights from every rank's piece, freed as soon as used: the memory ZeRO-3 saves. */
static tensor *gather_layer(const tensor *piece, const mlp_config *c) {
    tensor *w = empty(c->width, c->width, piece->device);
    dist_all_gather(w, piece); /* the pieces are bands of rows, in rank order */
    return w;
}

static void zero3_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t rows = c->width / world_size, first = rank * rows, last = (rank + 1) * rows; /* my piece's rows */
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);
    /* Only the pieces exist here, each with its gradient piece and AdamW state. */
    tensor *piece[MAX_LAYERS], *grad_piece[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    rank_result r = {.first = (double)first, .rows = (double)rows, .steps = c->steps}; /* my row of the table */
    for (int i = 0; i < c->layers; i++) {
        piece[i] = layer_part(c, i, 'r', first, last, device);
        grad_piece[i] = empty(rows, c->width, device);
        opt[i] = adamw_new(piece[i], c->lr);
        r.state_bytes += 4.0 * piece[i]->numel * sizeof(float); /* weights, gradient, AdamW's two moments */
    }
    for (int step = 0; step < c->steps; step++) {
        int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
        /* Forward: gather each layer, use it, free it. */
        acts[0] = x;
        for (int i = 0; i < c->layers; i++) {
            tensor *w = gather_layer(piece[i], c);
            acts[i + 1] = layer_forward(acts[i], w, &pre[i]);
            tensor_free(w);
        }
        r.loss[step] = mse_loss(acts[c->layers]);
        /* Backward: gather again, compute the full gradient of my slice of the batch, keep my piece of the average,
         * free the rest. */
        tensor *dy = mse_loss_backward(acts[c->layers]);
        for (int i = c->layers - 1; i >= 0; i--) {
            tensor *w = i > 0 ? gather_layer(piece[i], c) : NULL;
            tensor *grad = empty(c->width, c->width, device);
            tensor *dx = NULL;
            layer_backward(acts[i], pre[i], w, dy, grad, i > 0 ? &dx : NULL, 0.0f);
            dist_reduce_scatter(grad_piece[i], grad, DIST_AVG); /* my rows of the average */
            if (step == 0 && i == 0) inspect(grad_piece[i]);    /* each rank: its own band of rows */
            if (w) tensor_free(w);
            tensor_free(grad);
            tensor_free(dy);
            dy = dx;
        }
        if (step == 0) { /* checked after the loop, every layer: a layer the loop skipped fails here */
            r.bytes = (double)(dist_bytes_nominal() - bytes_before), r.calls = (double)(dist_calls() - calls_before);
            r.grad_diff =
                    diff_from_one_device(a, STEP0_GRADS, grad_piece, c->layers, "rrrrrrrr", first, last, &r.grad_max);
            r.grad_tol = gradient_tolerance(c) * r.grad_max;
            agrees("ZeRO-3: the step-0 gradient pieces", r.grad_diff, r.grad_tol);
        }
        if (step == 0 && rank == 0) predict_zero3_bytes(world_size, c, r.bytes); /* lecture_08/train.c */
        adamw_step_layers(opt, piece, grad_piece, c->layers);
        free_saved(c->layers, acts, pre);
    }
    r.trained_diff = diff_from_one_device(a, TRAINED, piece, c->layers, "rrrrrrrr", first, last, NULL);
    r.trained_bound = adamw_rounding_bound(c);
    agrees("ZeRO-3: the trained parameter pieces (within AdamW's rounding bound, blind to scale)", r.trained_diff,
           r.trained_bound);
    spawn_return(&r, sizeof r);
    z3_times real, modelled; /* lecture_08/zero3.c times the three ways */
    time_zero3_steps(c, piece, x, Z3_TRIALS, &real);
    time_modelled_zero3_steps(512, MODELLED_LAYERS, Z3_TRIALS, &modelled);
    if (rank == 0) {
        table_show(prefetch_table(world_size, Z3_TRIALS, c->layers, MODELLED_LAYERS, &real, &modelled));
        check(modelled.hidden >= PREFETCH_HIDDEN_MIN,
              "modelled ZeRO-3 step: prefetch hid %.2f of the gathers' time (at least %.1f; round %d of at most %d)",
              modelled.hidden, PREFETCH_HIDDEN_MIN, modelled.rounds, PREFETCH_ROUNDS);
        note("The table times the step with every layer already whole (no gathers), gathering each layer when "
             "needed (the code above), and prefetching: the next layer's `dist_all_gather_async` started before the "
             "current layer computes, waited for when that layer is next. Modelled: prefetching hid %.2f of the "
             "gathers' %.2f ms. All but the first of the 2L - 1 gathers can hide, (2L - 2) / (2L - 1) = %.2f of "
             "them; above that is noise (each way a median of its own steps). Real (this machine's arithmetic): "
             "%.2f of %.2f ms.",
             modelled.hidden, modelled.ms[Z3_GATHER_WHEN_NEEDED] - modelled.ms[Z3_NO_GATHERS],
             (2.0 * MODELLED_LAYERS - 2) / (2.0 * MODELLED_LAYERS - 1), real.hidden,
             real.ms[Z3_GATHER_WHEN_NEEDED] - real.ms[Z3_NO_GATHERS]);
    }
    adamw_free_layers(opt, c->layers);
    free_tensors((tensor *[]){x, data}, 2), free_tensors(piece, c->layers), free_tensors(grad_piece, c->layers);
}

static void tensor_parallelism(void) {
    progress("tensor parallelism");
    note("## Tensor parallelism\n\n"
         "Cut each layer's matrix by columns: with 4 ranks, rank *r* keeps columns [r w/4, (r+1) w/4) of every W. "
         "Every rank sees the *whole* batch.\n\n"
         "- Forward, per layer: each rank computes its columns of the output, gelu(x W_r); an all-gather and a "
         "column concatenation give every rank the full activation for the next layer.\n"
         "- Backward, per layer: each rank takes its columns of dy, computes its columns of dW (x^T dh_r) and a "
         "*partial* dx = dh_r W_r^T; the full dx is the sum of the partials, one all-reduce.\n\n"
         "Communication happens inside every layer, twice per layer per step (once forward, once backward), so "
         "tensor parallelism wants the fastest links (NVLink, within a node).");
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    progress("tensor parallelism: spawn 4 ranks");
    must_divide(baseline.cfg.width, 4, "the columns of a layer");
    spawn(tensor_parallel_main, 4, args, size);
    table_show(tp_table(4, "column-only TP on 4 ranks (first_col: the first column held)"));
    free(args);
    note("Same activations and the same gradients as one device, with each rank holding a quarter of the weights.");
    note("### Megatron: a column-parallel layer, then a row-parallel one\n\n"
         "Cutting every layer by columns gathers the whole activation after every layer. Megatron-LM needs fewer "
         "collectives by taking the layers in pairs, an MLP block y = gelu(gelu(x A) B):\n\n"
         "- A is cut by **columns**: rank *r* computes z_r = gelu(x A_r), its columns of the hidden activation, "
         "without communication (GELU acts elementwise).\n"
         "- B is cut by **rows**: z_r B_r is rank *r*'s *partial* pre-activation, and x A B = sum over r of z_r B_r. "
         "One all-reduce adds the partials; every rank then applies the last GELU to the whole.\n"
         "- Backward mirrors it: the output gradient is whole on every rank, so the gradients of B_r and of z_r need "
         "nothing from other ranks; the input gradient is a sum of partials dh_r A_r^T, one all-reduce.");
    see("https://arxiv.org/abs/1909.08053", "Megatron-LM (Shoeybi et al., 2019)");
    note("One all-reduce forward and one backward per block of two layers (none backward for the first block, whose "
         "input is the data), against an all-gather and an all-reduce per layer when every layer is cut by columns. "
         "Both count the bytes each rank sends as the runtime's nominal figure (`dist_bytes_nominal()`): what a "
         "bandwidth-optimal algorithm sends for each call, whichever algorithm Open MPI or NCCL picked.");
    args = baseline_args(&baseline, 0, &size);
    progress("Megatron tensor parallelism: spawn 4 ranks");
    must_divide(baseline.cfg.layers, 2, "the layers (in pairs)");
    spawn(megatron_main, 4, args, size);
    table_show(tp_table(4, "Megatron TP on 4 ranks (first_col: the first column of the even layers, row of the odd)"));
    free(args);
    mlp_config c = baseline.cfg;
    double b = (double)c.batch * c.width * sizeof(float), p = 4;
    double column_only = c.layers * (p - 1) / p * b + (c.layers - 1) * 2 * (p - 1) / p * b;
    double megatron = (c.layers / 2 + c.layers / 2 - 1) * 2 * (p - 1) / p * b;
    note("Per rank and step, by the ring's count (an activation is %d x %d floats, b = %.0f bytes): column-only %d "
         "all-gathers of (p-1)/p b and %d all-reduces of 2(p-1)/p b, %.0f bytes; Megatron %d all-reduces, %.0f "
         "bytes, %.2f times less. Compare the nominal tallies the ranks made above (`dist_bytes_nominal()`).",
         c.batch, c.width, b, c.layers, c.layers - 1, column_only, c.layers - 1, megatron, column_only / megatron);
}

static void tensor_parallel_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t shard = c->width / world_size, first = rank * shard, last = (rank + 1) * shard; /* my columns */
    tensor *data = make_data(c, device); /* the whole batch on every rank */
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *grads[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++)
        w[i] = layer_part(c, i, 'c', first, last, device);
    int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
    acts[0] = data; /* forward */
    for (int i = 0; i < c->layers; i++) {
        tensor *mine = layer_forward(acts[i], w[i], &pre[i]); /* batch x shard */
        acts[i + 1] = all_gather_columns(mine, world_size);   /* batch x width */
        tensor_free(mine);
    }
    rank_result r = {.first = (double)first, .one_loss = a->first_loss}; /* my row of the lecture's table */
    r.out_diff = output_diff(a, acts[c->layers], &r.out_tol);
    agrees("column-parallel TP: the output", r.out_diff, r.out_tol);
    tensor *dy = mse_loss_backward(acts[c->layers]); /* backward: dy is whole, the same on every rank */
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *dy_mine = col_slice(dy, first, last);
        tensor *dx = NULL;
        grads[i] = empty(c->width, shard, device);
        layer_backward(acts[i], pre[i], w[i], dy_mine, grads[i], i > 0 ? &dx : NULL, 0.0f);
        if (dx) dist_all_reduce(dx, DIST_SUM); /* partial input gradients add up */
        tensor_free(dy_mine);
        tensor_free(dy);
        dy = dx;
    }
    r.bytes = (double)(dist_bytes_nominal() - bytes_before), r.calls = (double)(dist_calls() - calls_before);
    r.loss0 = mse_loss(acts[c->layers]);
    r.grad_diff = diff_from_one_device(a, STEP0_GRADS, grads, c->layers, "cccccccc", first, last, &r.grad_max);
    r.grad_tol = gradient_tolerance(c) * r.grad_max;
    agrees("column-parallel TP: the gradients", r.grad_diff, r.grad_tol);
    spawn_return(&r, sizeof r);
    free_saved(c->layers, acts, pre);
    free_tensors(w, c->layers), free_tensors(grads, c->layers), tensor_free(data);
}

/* Megatron's MLP block over layers (2k, 2k+1): layer 2k cut by columns, layer 2k+1 by rows. acts[2k+1] holds only
 * this rank's columns of the hidden activation; acts[2k+2] and pre[2k+1] are whole on every rank. */
static void megatron_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t shard = c->width / world_size, first = rank * shard, last = (rank + 1) * shard;
    tensor *data = make_data(c, device);
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *grads[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) /* A_r (width x shard) for even layers, B_r (shard x width) for odd */
        w[i] = layer_part(c, i, i % 2 == 0 ? 'c' : 'r', first, last, device);
    int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
    /* Forward: one all-reduce per block. */
    acts[0] = data;
    for (int i = 0; i < c->layers; i += 2) {
        acts[i + 1] = layer_forward(acts[i], w[i], &pre[i]); /* z_r = gelu(x A_r) */
        pre[i + 1] = matmul(acts[i + 1], w[i + 1]);          /* z_r B_r: a partial sum */
        dist_all_reduce(pre[i + 1], DIST_SUM);               /* x A B, whole */
        acts[i + 2] = gelu(pre[i + 1]);
    }
    rank_result r = {.first = (double)first, .one_loss = a->first_loss}; /* my row of the lecture's table */
    r.out_diff = output_diff(a, acts[c->layers], &r.out_tol);
    agrees("Megatron TP: the output", r.out_diff, r.out_tol);
    /* Backward: one all-reduce per block, none for the first. */
    tensor *dy = mse_loss_backward(acts[c->layers]); /* whole, the same on every rank */
    for (int i = c->layers - 2; i >= 0; i -= 2) {
        tensor *dz = NULL, *dx = NULL;
        grads[i + 1] = empty(shard, c->width, device);
        layer_backward(acts[i + 1], pre[i + 1], w[i + 1], dy, grads[i + 1], &dz, 0.0f);
        grads[i] = empty(c->width, shard, device);
        layer_backward(acts[i], pre[i], w[i], dz, grads[i], i > 0 ? &dx : NULL, 0.0f);
        if (dx) dist_all_reduce(dx, DIST_SUM); /* the partial input gradients add up */
        tensor_free(dz);
        tensor_free(dy);
        dy = dx;
    }
    r.bytes = (double)(dist_bytes_nominal() - bytes_before), r.calls = (double)(dist_calls() - calls_before);
    r.loss0 = mse_loss(acts[c->layers]);
    r.grad_diff = diff_from_one_device(a, STEP0_GRADS, grads, c->layers, "crcrcrcr", first, last, &r.grad_max);
    r.grad_tol = gradient_tolerance(c) * r.grad_max;
    agrees("Megatron TP: the gradients", r.grad_diff, r.grad_tol);
    spawn_return(&r, sizeof r);
    free_saved(c->layers, acts, pre);
    free_tensors(w, c->layers), free_tensors(grads, c->layers), tensor_free(data);
}

/* What the spawn measured, beside the formula, with the load and cores. */
static pipe_result say_bubble(int stages, int schedule, int m) {
    pipe_result r;
    if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("the pipeline's rank 0 returned no result");
    double off = r.bubble / r.formula - 1;
    if (stages == 2)
        predict("What fraction of the pipeline's time will the busier of the 2 stages spend idle, with 8 "
                "micro-batches (the bubble, over the total time)?",
                r.bubble, "");
    note("%s, %d stages: measured bubble %.3f of the total against the formula's %.3f (%+.0f%%). %s. Stage 1 %s "
         "stage 0's last forward, and stages 0 and 1 computed at the same time for %.1f ms, %.2f of stage 0's work "
         "(%.2f where each stage has a device of its own: all but one of its forwards and backwards); messages went "
         "%s. Stage 0 held at most %d micro-batches' activations (m = %d, p = %d). Load average %.1f on %ld cores "
         "while it ran.",
         SCHEDULE_NAMES[schedule], stages, r.bubble, r.formula, 100 * off, bubble_why(&r, stages),
         r.overlapped ? "began its first forward before" : "began only after", r.together_ms,
         r.together_ms / r.busy0_ms, (m - 1.0) / m,
         r.single_copy ? "by the single-copy path (the receiver reads the sender's memory)"
                       : "without the single-copy path (the sender's progress thread hands them over)",
         r.stage0_held, m, stages, r.load, r.cores);
    note_replay(&r); /* lecture_08/pipeline.c: the schedule replayed with the stages' own times */
    return r;
}

static void pipeline_parallelism(void) {
    progress("pipeline parallelism");
    note("## Pipeline parallelism\n\n"
         "Cut the stack of layers into stages, one per rank; activations flow forward from stage to stage with "
         "`dist_send`/`dist_recv`, and gradients flow back.");
    see("https://pytorch.org/docs/stable/_images/pipe.png", "GPipe's schedule (PyTorch docs)");
    note("Sent as one batch, only one stage would work at a time. So the batch is cut into micro-batches: while "
         "stage 1 works on micro-batch 0, stage 0 already starts micro-batch 1. This is the GPipe schedule: all "
         "forwards, then all backwards, each stage's weight gradients summed over the micro-batches. A training run "
         "would then take one optimizer step per stage; this section stops at the gradients, which it compares with "
         "one device's.");
    image("assets/lecture_08_pipeline.svg", 0.7);
    int m = 8;
    note("The idle time (the *bubble*): with p stages and m micro-batches each pass takes m + p - 1 slots of which a "
         "stage is busy m. Two conventions name it: idle time over the *total* time, (p - 1) / (m + p - 1), which is "
         "what a timeline shows and what this lecture measures; and idle time over the *ideal* time (m slots, no "
         "bubble), (p - 1) / m, as the Megatron-LM paper (Narayanan et al. 2021) and the Ultra-Scale Playbook write "
         "it. Same bubble, different denominators:");
    table_show(bubble_conventions_table(m)); /* (p - 1) / (m + p - 1) and (p - 1) / m */
    note("More micro-batches shrink the bubble, at the cost of smaller matrix products (less efficient) and more "
         "messages. GPipe keeps every micro-batch's activations until its backward pass: all m of them, the whole "
         "batch's activations. **1F1B** (one forward, one backward) runs the same work in another order: stage *r* "
         "does p - r - 1 forwards to fill the pipe, then alternates one forward and one backward, then drains the "
         "last backwards. Activations are freed as soon as their backward is done, so stage *r* holds at most p - r "
         "micro-batches, not all m. The bubble is GPipe's, (p - 1) / (m + p - 1); what it saves is memory. "
         "(*Interleaved* 1F1B, not run here, gives each rank v non-adjacent groups of layers, dividing the bubble by "
         "v at the cost of v times more messages.)");
    baseline_run pipe = {.cfg = pipeline_config(&baseline.cfg)}; /* twice as deep, a larger batch (pipeline.c) */
    one_device_step0(&pipe);
    note("Each schedule runs twice. The **real** run computes (the same model twice as deep: %d layers; a batch of "
         "%d, %d a micro-batch; its gradients checked against one device's): what this machine's arithmetic does to "
         "the schedule. The **modelled** run sends the same messages but each stage's arithmetic is modelled compute "
         "(`model_compute`): its device busy %g ms a forward, %g ms a backward, host and links free, as where every "
         "stage has a GPU. Both stamp each forward and backward on the clock all ranks share. `forward_step` and "
         "`backward_step` below receive (`dist_recv`), compute, and send without waiting (`dist_isend`), so stage 1 "
         "can start micro-batch 0 while stage 0 computes micro-batch 1. A stage's idle fraction is 1 - (its busy "
         "time) / (first start to last end); the bubble is the busiest stage's (the *total* convention). The real "
         "stage 0 also computes its input's gradient, which nothing uses, so that the stages' work is equal.",
         pipe.cfg.layers, pipe.cfg.batch, pipe.cfg.batch / m, MODELLED_F_MS, 2 * MODELLED_F_MS);
    size_t size;
    must_divide(pipe.cfg.batch, m, "the batch's examples (in micro-batches)");
    train_args *args = baseline_args(&pipe, m, &size);
    static const int runs[3][2] = {{2, GPIPE}, {4, GPIPE}, {4, ONE_F_ONE_B}},
                     twin_of[3] = {0, 2, 3}; /* {p, schedule} */
    pipe_result real[3], twin[N_MODELLED_SHAPES];
    for (int k = 0; k < 3; k++) {
        int p = runs[k][0];
        note("### %s, %d stages, %d micro-batches: bubble %.1f%% of the total", SCHEDULE_NAMES[runs[k][1]], p, m,
             100 * bubble_fraction(p, m));
        progress("pipeline parallelism: %s, spawn %d ranks", SCHEDULE_NAMES[runs[k][1]], p);
        args->schedule = runs[k][1], args->clock_base = now_seconds();
        must_divide(pipe.cfg.layers, p, "the layers");
        spawn(pipeline_main, p, args, size);
        real[k] = say_bubble(p, runs[k][1], m);
    }
    free(args);
    note("### The modelled runs: GPipe and 1F1B on 2 and 4 stages, 8 and 32 micro-batches\n\n"
         "Each is checked: its measured bubble within 10%% of (p - 1) / (m + p - 1), and 1F1B's stage s holding at "
         "most p - s micro-batches' activations.");
    run_modelled_pipelines(pipeline_main, &pipe.cfg, twin); /* lecture_08/pipeline.c: GPipe and 1F1B, 6 shapes */
    for (int k = 0; k < N_MODELLED_SHAPES; k++)
        check_modelled(&twin[k]);
    table_show(pipeline_pairs_table(real, twin)); /* a row per schedule and shape, real beside modelled */
    for (int k = 0; k < 3; k++)
        chart_show(pipelines_chart(&real[k], &twin[twin_of[k]], SCHEDULE_NAMES[runs[k][1]]));
    note("What each run proves. The modelled runs show the schedules' lesson: the bubble is (p - 1) / (m + p - 1) "
         "for GPipe and 1F1B alike, within 10%%, shrinking from %.3f to %.3f as m grows from 8 to 32 on 4 stages; "
         "1F1B's stage 0 held %d activations where GPipe's held %d. The real runs show what this machine does to it: "
         "their bubbles (%.3f, %.3f, %.3f) also carry the ranks' turns on %ld cores. Forward and backward match one "
         "device in both schedules.",
         twin[2].bubble, twin[4].bubble, twin[3].held[0], twin[2].held[0], real[0].bubble, real[1].bubble,
         real[2].bubble, real[0].cores);
    pipeline_at_scale(pipeline_schedule_main, &pipe.cfg); /* lecture_08/at_scale.c: 4, 8, 16 stages, simulated */
    baseline_free(&pipe);
}


/* Forward of micro-batch k: receive from the stage before (stage 0 reads the data), compute, stamp, send on. */
static void forward_step(stage *s, int k) {
    tensor *x = stage_input(s, k);
    if (s->rank > 0) dist_recv(x, s->rank - 1);
    double start = ms_since(s);
    tensor *y = stage_forward(s, k, x); /* this stage's layers (lecture_08/pipeline.c) */
    stamp(s, 0, k, start);              /* the timeline shows it: no note per micro-batch */
    s->sent[k] = s->rank < s->world - 1 ? dist_isend(y, s->rank + 1) : NULL;
    stage_forward_done(s, k);
}

/* Backward, the mirror: receive the output's gradient (the last stage starts from the loss), compute, stamp, send the
 * input's gradient back. Sends do not wait: the stage goes on while they travel, and waits at the schedule's end. */
static void backward_step(stage *s, int k) {
    tensor *dy = s->rank < s->world - 1 ? s->recv_grad : NULL;
    if (dy) dist_recv(dy, s->rank + 1);
    double start = ms_since(s);
    tensor *dx = stage_backward(s, k, dy); /* every layer's gradients, summed over the micro-batches */
    stamp(s, 1, k, start);
    s->sent_back[k] = s->rank > 0 ? dist_isend(dx, s->rank - 1) : NULL;
    stage_backward_done(s, k, dx);
}

/* One pass of the schedule: every micro-batch forward and backward. */
static void run_schedule(stage *s) {
    int m = s->m, world_size = s->world, rank = s->rank;
    stage_begin_pass(s); /* no stamps yet, gradients and loss from zero */
    if (s->a->schedule == GPIPE) {
        for (int k = 0; k < m; k++)
            forward_step(s, k);
        for (int k = m - 1; k >= 0; k--)
            backward_step(s, k);
    } else {
        int warmup = world_size - rank - 1 < m ? world_size - rank - 1 : m;
        for (int k = 0; k < warmup; k++)
            forward_step(s, k);
        for (int k = warmup; k < m; k++) {
            forward_step(s, k);
            backward_step(s, k - warmup);
        }
        for (int k = m - warmup; k < m; k++)
            backward_step(s, k);
    }
    for (int k = 0; k < m; k++) {
        if (s->sent_back[k]) dist_wait(s->sent_back[k]);
        tensor_free(s->dx_out[k]);
    }
}

/* The schedule once, for the replay: no timeline gathered (the pipeline rule takes neighbours' messages only). */
static void pipeline_schedule_main(int rank, int world_size, void *args) {
    stage *s = stage_new(args, rank, world_size);
    dist_barrier(); /* every stage ready before the clock matters */
    run_schedule(s);
    stage_free(s);
}

static void pipeline_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    stage *s = stage_new(a, rank, world_size); /* this stage's layers (lecture_08/pipeline.c) */
    for (s->run = 0; s->run < s->runs; s->run++) {
        dist_barrier(); /* every stage ready before the clock matters */
        run_schedule(s);
    }
    if (s->modelled) {                             /* no arithmetic to check: only the timeline */
        report_timeline(s, a->schedule, NAN, NAN); /* a modelled run: figures only, no table */
        stage_free(s);
        return;
    }
    if (rank == world_size - 1) {
        /* The batch loss is the mean of the micro-batch losses (equal sizes). */
        note_verbatim("Rank %d: %s: loss over %d micro-batches = %.9g (one device: %.9g), max |output - one "
                      "device| = %.3g (tolerance %.3g)",
                      rank, SCHEDULE_NAMES[a->schedule], s->m, s->loss, a->first_loss, s->out_diff,
                      output_tolerance(c) * largest(s->expected));
        agrees("the pipeline's output", s->out_diff, output_tolerance(c) * largest(s->expected));
    }
    double diff = 0, size = 0;
    for (int j = 0; j < s->per_stage; j++)
        diff = fmax(diff, grad_diff(a, s->grads[j], s->first_layer + j, &size));
    agrees("the pipeline's gradients", diff, gradient_tolerance(c) * size);
    table_t *t = report_timeline(s, a->schedule, diff, gradient_tolerance(c) * size); /* and the timeline */
    if (t) table_show(t);                                                             /* rank 0: a row per stage */
    stage_free(s);
}

static void summary(void) {
    progress("summary");
    note("## Summary\n\n"
         "Everything above trades two costs against each other:\n\n"
         "- memory: keep a copy here (replicate) and you need not fetch it\n"
         "- communication: keep it elsewhere (shard) and you must send it");
    note("| strategy | each rank holds | communicates | per step |\n"
         "|---|---|---|---|\n"
         "| DDP | whole model, slice of batch | gradients | all-reduce per layer, or per bucket of layers |\n"
         "| ZeRO-3 / FSDP | its piece of every layer's weights, gradients and AdamW state; slice of batch | weights "
         "and gradients | all-gather twice, reduce-scatter once, per layer |\n"
         "| tensor parallel, columns only | column slice of every layer, whole batch | activations | all-gather "
         "forward, all-reduce backward, per layer |\n"
         "| tensor parallel, Megatron | column slice, then row slice, of each pair of layers; whole batch | "
         "activations | one all-reduce forward, one backward, per pair |\n"
         "| pipeline parallel | some layers, micro-batches | activations at stage edges | send/recv per micro-batch "
         "|\n\n"
         "- Hardware keeps getting faster, but it will stay a hierarchy: fast and small close by, big and slow far "
         "away.\n"
         "- There are many ways to parallelise (data, tensor, pipeline, and their mixes), and large runs combine "
         "them: tensor parallel inside a node, pipeline and data parallel across nodes (lecture_scaling runs such a "
         "mesh).");
    note("## Further reading\n\n"
         "In this series: lecture_collectives (all-reduce built four ways, and the alpha-beta model fitted to a "
         "ping-pong), lecture_ddp (data parallelism step by step, and bucket sizes measured), lecture_scaling "
         "(after DDP: expert, sequence and context parallelism with ring attention, a 2-D mesh of data and tensor "
         "parallelism, ZeRO with prefetch, recomputation) and lecture_gpu (one GPU's kernels, memory and roofline, "
         "then many GPUs). Elsewhere: an [overview of parallelism "
         "strategies](https://github.com/stas00/ml-engineering/tree/master/training/model-parallelism) "
         "(ml-engineering); DeepSpeed and ZeRO, [on Microsoft's research "
         "blog](https://www.microsoft.com/en-us/research/blog/zero-deepspeed-new-system-optimizations-enable-training-models-with-over-100-billion-parameters/); "
         "[profiling with NVTX "
         "annotations](https://developer.nvidia.com/blog/nvidia-tools-extension-api-nvtx-annotation-tool-for-profiling-code-in-python-and-c-c/); "
         "[NCCL's user guide on "
         "collectives](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/collectives.html); "
         "InfiniBand, [an introduction (white "
         "paper)](https://network.nvidia.com/pdf/whitepapers/IB_Intro_WP_190.pdf) and two videos, [an introduction "
         "to its networks](https://www.youtube.com/watch?v=2gidd6lLiH8) and "
         "[another](https://www.youtube.com/watch?v=wecZb5lHkXk).");
    see("https://arxiv.org/pdf/2304.11277.pdf", "Libraries and systems: PyTorch FSDP");
    see("https://github.com/NVIDIA/Megatron-LM", "Libraries and systems: Megatron-LM");
    see("https://github.com/EleutherAI/gpt-neox", "Libraries and systems: GPT-NeoX");
    see("https://github.com/stanford-crfm/levanter", "Libraries and systems: Levanter");
    see("https://pytorch.org/tutorials/intermediate/dist_tuto.html", "Collective operations: PyTorch's tutorial");
    see("https://en.wikipedia.org/wiki/InfiniBand", "InfiniBand: Wikipedia");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_08); }
