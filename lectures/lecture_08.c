/*
 * lecture_08: distributed training.
 *
 * Part 1 is about moving data: the hardware that links accelerators, the
 * collective operations programs use to talk over it, how fast they are, and
 * CUDA streams for overlapping talk with work, and a cost model fitted to
 * the measurements. Part 2 trains one small model every way (data parallel,
 * with buckets and gradient accumulation, ZeRO stage 3 as FSDP does it,
 * tensor parallel by columns and as Megatron pairs layers, pipeline parallel
 * with the GPipe and 1F1B schedules) and checks each against the same model
 * trained on one device, counting the bytes each rank sends.
 *
 * Every example runs for real on CPU processes with Open MPI and OpenBLAS:
 * that is how the committed trace was made. The same code has a GPU path
 * (NCCL, cuBLAS, CUDA streams), compiled in; its single-GPU parts and ranks
 * sharing one GPU have run on one H100 (docs/gpu.md, make gpu-check), its
 * multi-rank NCCL paths have not (unverified). Run it with
 *
 *     make run                 (the full lecture; --quick gives reduced sizes)
 *
 * and open viewer/index.html?trace=lecture_08.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lectern.h"
#include "lib/collective_bench.h"
#include "lib/mlp.h"
#include "lib/train.h"
#include "lib/streams.h"

static void introduction(void);
static void hardware(void);
static void collective_operations(void);
static void our_runtime_and_nccl(void);
static void benchmarking(void);
static void cuda_streams(void);
static void parallelism_overview(void);
static void one_device(void);
static void ddp(void);
static void ddp_zero3(void);
static void tensor_parallelism(void);
static void pipeline_parallelism(void);
static void summary(void);
static void further_reading(void);
static void free_one_device(void);

LECTURE_OPTIONS({"batch", "N", "examples per training step in Part 2 (default 128); every strategy cuts them "
                                "into equal pieces (4 ranks, 2 micro-batches each), so N must divide by 8"});

static mlp_config model_config(void);

static void lecture_08(void) {
    model_config();            /* a bad --batch stops the lecture before anything runs */
    note("# Distributed training");
    introduction();

    note("## Part 1: the building blocks of distributed communication");
    hardware();                /* how accelerators are wired to each other */
    collective_operations();   /* the programming model: a handful of patterns */
    our_runtime_and_nccl();    /* how those patterns are carried out */
    benchmarking();            /* how fast they are */
    cuda_streams();            /* overlapping communication with computation */

    note("## Part 2: distributed training");
    parallelism_overview();
    one_device();              /* the answer every strategy must reproduce */
    ddp();                     /* split the batch */
    ddp_zero3();               /* split the batch, shard the model state */
    tensor_parallelism();      /* split every layer along its width */
    pipeline_parallelism();    /* split the stack of layers along its depth */

    summary();
    further_reading();
    free_one_device();
}

/* ------------------------------------------------------------------ */
/* Introduction                                                        */
/* ------------------------------------------------------------------ */

static void introduction(void) {
    progress("introduction");
    note("This lecture: training one model on many accelerators at once.");
    note("The setting: arithmetic is spread over many devices, and moving data "
         "between them is slow compared with computing on it.");
    if (gpu_count() == 0)
        note("*This run found no GPU.* Every example still runs for real: each rank is a "
             "CPU process, tensors live in host memory, collectives go through Open MPI "
             "and matrix products through OpenBLAS. On a machine with GPUs the same code "
             "uses NCCL and cuBLAS. Timings below are this machine's, not a GPU's.");
    else if (gpu_count() < 4)
        note("*This machine has %d GPU%s for spawns of up to 4 ranks.* NCCL wants one GPU per "
             "rank, so a spawn with more ranks than GPUs puts rank r on cuda:(r mod %d): every "
             "rank's tensors live there and its matmuls run in cuBLAS, but the ranks take "
             "turns on the device, so 4 ranks are not 4 times faster than 1. Their collectives "
             "go through Open MPI via pinned host memory, copied off the GPU and back in "
             "chunks that overlap with the transfer: the bandwidth you see is host memory's, "
             "a few GB/s, not NVLink's. Each spawn's note says which way it ran.",
             gpu_count(), gpu_count() == 1 ? "" : "s", gpu_count());

    note("Memory comes in a hierarchy, each level larger and slower than the one above:");
    note("- L1 cache and shared memory, next to the arithmetic units (small, fast)\n"
         "- L2 cache, shared by the whole chip\n"
         "- DRAM (HBM) on the same package\n"
         "- other GPUs in the same node\n"
         "- GPUs in other nodes (huge in total, slowest to reach)");
    image("assets/lecture_08_memory_hierarchy.svg", 0.55);
    note("The previous lecture cut DRAM traffic inside one GPU (fusion, tiling). This "
         "one cuts traffic between GPUs and nodes, by choosing what to keep a copy of "
         "everywhere (replicate) and what to cut into pieces (shard).");
    note("The game throughout: arrange the computation so that as little data as "
         "possible has to cross the slow links.");
}

/* ------------------------------------------------------------------ */
/* Part 1: hardware                                                    */
/* ------------------------------------------------------------------ */

static void our_hardware(void);

static void hardware(void) {
    progress("hardware");
    note("## One GPU");
    image("assets/lecture_08_gpu.svg", 0.6);
    see("https://miro.medium.com/v2/resize:fit:2000/format:webp/1*6xoBKi5kL2dZpivFe1-zgw.jpeg",
        "the H100 chip's block diagram");
    note("Inside one GPU the bottleneck is usually DRAM: NVIDIA's datasheet gives the "
         "H100 NVL 7.8 TB/s of memory bandwidth (a figure for its pair of boards; "
         "about 3.9 TB/s per GPU).");
    see("https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet");

    note("## Many GPUs, many nodes: PCIe and Ethernet");
    note("The classic layout: GPUs hang off the CPU, and the CPU and network card "
         "sit in the middle of every transfer.");
    image("assets/lecture_08_pcie_ethernet.svg", 0.65);
    see("https://media.springernature.com/lw685/springer-static/image/art%3A10.1186%2Fs42774-021-00098-3/MediaObjects/42774_2021_98_Fig1_HTML.png?as=webp",
        "a multi-GPU cluster's node layout");
    note("- GPUs in one node share a PCI Express bus. The newest generation specified, PCIe "
         "7.0 (published in 2025; no devices ship with it yet), gives 242 GB/s each way over "
         "16 lanes; an H100 uses PCIe 5.0, about 64 GB/s each way.");
    see("https://en.wikipedia.org/wiki/PCI_Express");
    note("- GPUs in different nodes go through the network. Commodity Ethernet runs at "
         "1 to 10 Gb/s (0.125 to 1.25 GB/s); data-centre Ethernet and InfiniBand at "
         "100 to 400 Gb/s (12.5 to 50 GB/s) per port.");
    note("Both are far slower than a GPU's own memory. The turning point in hardware was "
         "to let GPUs reach each other *directly*, without the CPU in the way.");

    note("## InfiniBand and RDMA");
    note("InfiniBand is a network standard from 1999. Mellanox built most of its "
         "hardware; NVIDIA agreed to buy Mellanox in 2019 and completed the purchase in 2020.");
    note("Its key idea is Remote Direct Memory Access (RDMA): a network card writes "
         "straight into another machine's memory (GPU memory, with GPUDirect RDMA) "
         "without either CPU or operating system copying the bytes.");
    image("assets/lecture_08_rdma.svg", 0.65);
    see("https://lambdalabs.com/hubfs/Imported_Blog_Media/nvlink-diagram-update.png",
        "GPUs, NVLink and network cards in a server");

    note("## NVLink and NVSwitch");
    note("NVLink is NVIDIA's own GPU-to-GPU link, announced in 2014. For the H100 "
         "generation (fourth-generation NVLink) NVIDIA quotes its NVLink Switch System at 9 "
         "times the bisection bandwidth of HDR InfiniBand (200 Gb/s a port), so about 4.5 "
         "times NDR's (400 Gb/s): a vendor's figure, and the generations compared matter.");
    see("https://developer.nvidia.com/blog/upgrading-multi-gpu-interconnectivity-with-the-third-generation-nvidia-nvswitch/");
    note("Inside a node, NVLink joins GPUs to each other with no CPU on the path:");
    image("assets/lecture_08_nvlink_generations.svg", 0.55);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-generations-1.png",
        "NVLink generations");
    note("NVSwitch chips connect every GPU to every other at full NVLink speed, and the "
         "NVLink Switch System carries that across nodes, sidestepping Ethernet:");
    image("assets/lecture_08_nvswitch.svg", 0.6);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-all-to-all-connectivity-1.png",
        "NVLink all-to-all connectivity");
    note("An H100 (Hopper) has 18 fourth-generation NVLink links: 900 GB/s in total, "
         "counting both directions, so 450 GB/s each way. A measured bandwidth of one "
         "direction's traffic (busbw, below) is to be compared with the 450.");

    note("## SHARP: reducing inside the switch");
    note("NVSwitch can do the additions of an all-reduce itself (SHARP, in-network "
         "reduction). Each GPU then sends its data once and receives the sum once, "
         "instead of taking part in every step: about half the traffic.");
    image("assets/lecture_08_sharp.svg", 0.65);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2022/08/NVLink-SHARP-acceleration-1.png",
        "NVLink SHARP acceleration");
    note("Expect more such changes: the hardware moves fast, but the hierarchy stays.");

    our_hardware();
}

/* The machine this trace was made on. */
static void our_hardware(void) {
    note("## Our hardware");
    note("What is this lecture running on?");
    see("https://guide.ncloud-docs.com/docs/en/server-baremetal-a100-check-vpc");
    if (gpu_count() > 0) {
        note_system("nvidia-smi topo -m");
        note("Read the matrix row by row: `NV#` means the two GPUs share # bonded NVLinks; "
             "`PIX`, `PXB`, `PHB`, `NODE` and `SYS` are PCIe paths that cross more and more "
             "of the machine (a PCIe bridge, several, the host bridge, the NUMA node, "
             "the link between sockets). NICs are the network cards.");
        return;
    }
    note("No GPU here, so `nvidia-smi topo -m` has nothing to show. The CPU's topology "
         "instead, as hwloc sees it: sockets (packages), NUMA nodes, caches, cores, "
         "and the PCI devices (disk, network card).");
    note_system("lstopo-no-graphics --of console");
    note("On a GPU server the same tool lists the GPUs and NICs under their PCIe bridges; "
         "`nvidia-smi topo -m` condenses that into who-reaches-whom-how: `NV18` between "
         "two H100s means 18 bonded NVLinks.");
}

/* ------------------------------------------------------------------ */
/* Part 1: collective operations                                       */
/* ------------------------------------------------------------------ */

static void collective_operations(void) {
    progress("collective operations");
    note("## Collective operations");
    note("Collective operations are the vocabulary of distributed programs.");
    see("https://en.wikipedia.org/wiki/Collective_operation");
    note("- *Collective*: every rank calls the same operation, and together they "
         "describe one communication pattern across all of them (4, 256, 10 000 ranks).\n"
         "- They come from the parallel-computing literature of the 1980s (later, MPI).\n"
         "- They suit SPMD programs (single program, multiple data): every rank runs the "
         "same code on its own data.\n"
         "- They are simpler to use, and faster, than arranging point-to-point "
         "sends and receives yourself.");

    note("Two words used everywhere below:");
    note("- **rank**: one device (a GPU, here a process) and its number, 0, 1, 2, ...\n"
         "- **world size**: how many ranks there are.");

    note("In the pictures, each row is a rank; before on the left, after on the right.");

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
         "Every rank's tensor is combined elementwise (sum, average, min, max) and the "
         "result lands on one rank.");
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
         "A reduce whose result lands on every rank. It can be done as a reduce-scatter "
         "(each rank sums one piece) followed by an all-gather (everyone collects all "
         "pieces), which is how the ring algorithm below does it.");
    image("assets/lecture_08_all_reduce.svg", 0.3);
    see("https://pytorch.org/tutorials/_images/all_reduce.png");

    note("How to keep them apart:");
    note("- *reduce* means combining with an associative, commutative operation "
         "(sum, min, max; average is a sum divided by the world size)\n"
         "- *scatter* and *gather* undo each other, as do *broadcast* and *reduce* in shape\n"
         "- *all-* means every rank gets the result");
}

/* ------------------------------------------------------------------ */
/* Part 1: how collectives are carried out                             */
/* ------------------------------------------------------------------ */

static void collective_examples_main(int rank, int world_size, void *args);

static void our_runtime_and_nccl(void) {
    progress("runtime and NCCL");
    note("## Collectives in this runtime (our `torch.distributed`)");
    note("PyTorch gives programs `torch.distributed`; this lecture's runtime gives C the same "
         "calls: `dist_all_reduce`, `dist_reduce_scatter`, `dist_all_gather`, "
         "`dist_broadcast`, `dist_reduce`, `dist_scatter`, `dist_gather`, `dist_send`, "
         "`dist_recv`, the non-blocking `dist_isend` and `dist_irecv` completed by "
         "`dist_wait`, and `dist_barrier`; SUM, AVG, MIN or MAX where they reduce.");
    see("https://pytorch.org/docs/stable/distributed.html");
    note("`spawn(fn, world_size, &args, sizeof args)` runs `fn(rank, world_size, args)` in "
         "world-size real processes, each on its own copy of the arguments, like "
         "`torch.multiprocessing.spawn`. The processes come from a pool that Open MPI's "
         "`mpirun` starts once, at the first spawn; each spawn finds the lecture's globals "
         "as a fresh process would.");
    note("Like PyTorch it has two backends, picked per spawn:");
    note("| call | with a GPU per rank: NCCL | otherwise: Open MPI (host memory) |\n"
         "|---|---|---|\n"
         "| `dist_all_reduce` | `ncclAllReduce` | `MPI_Allreduce` |\n"
         "| `dist_reduce_scatter` | `ncclReduceScatter` | `MPI_Reduce_scatter_block` |\n"
         "| `dist_all_gather` | `ncclAllGather` | `MPI_Allgather` |\n"
         "| `dist_broadcast` | `ncclBroadcast` | `MPI_Bcast` |\n"
         "| `dist_reduce` | `ncclReduce` | `MPI_Reduce` |\n"
         "| `dist_scatter`, `dist_gather` | `ncclSend`/`ncclRecv` in a group | `MPI_Scatter`, `MPI_Gather` |\n"
         "| `dist_send`, `dist_recv` | `ncclSend`, `ncclRecv` | `MPI_Send`, `MPI_Recv` |\n"
         "| `dist_isend`, `dist_irecv`, `dist_wait` | `ncclSend`, `ncclRecv` on the stream, then a stream wait | `MPI_Isend`, `MPI_Irecv`, `MPI_Wait` |");
    note("Open MPI plays the part of PyTorch's gloo backend (CPU); NCCL is the GPU backend "
         "in both worlds. NCCL has `ncclAvg` for averages; with MPI an average is a sum "
         "divided by the world size. Higher-level tools (PyTorch's FSDP, DeepSpeed) are "
         "built from these same calls, as Part 2 does by hand.");

    note("## NCCL: the NVIDIA Collective Communication Library");
    note("NCCL turns each collective into the transfers and small reduction kernels that "
         "carry it out on the actual machine.");
    see("https://www.nvidia.com/en-us/on-demand/session/gtcspring21-s31880/");
    note("1. It detects the topology: nodes, switches, which GPUs share NVLink or PCIe, "
         "which network card is closest to which GPU.");
    note("2. It plans the paths between ranks. Two classic plans for all-reduce:");
    image("assets/lecture_08_ring_vs_tree.svg", 0.6);
    see("https://developer-blogs.nvidia.com/wp-content/uploads/2019/02/DBtree.png");
    note("- **Ring**: the data is cut into N chunks that travel around a ring; N-1 steps "
         "of reduce-scatter then N-1 steps of all-gather. Each rank sends 2(N-1)/N times "
         "the data. When the ranks do the additions themselves, no all-reduce can do with "
         "less (Patarasuk and Yuan, 2009): to sum its 1/N share a rank must receive the "
         "other ranks' parts of it ((N-1)/N of the data), then receive the sums of the other "
         "shares ((N-1)/N again); every byte received is a byte some rank sent, so on "
         "average a rank also sends 2(N-1)/N. The ring meets that bound exactly: it is "
         "*bandwidth*-optimal among algorithms that only move data between ranks. "
         "In-network reduction (SHARP, above) does better, because the switch adds: each "
         "GPU sends its data once and receives the sum once. And 2(N-1) "
         "steps in a row means latency grows linearly with N.\n"
         "- **Tree**: reduce up a tree and broadcast back down, in about 2 log2(N) steps, "
         "so it is *latency*-friendly. A single tree leaves the leaves' outgoing links "
         "idle, so NCCL uses a *double binary tree*: two trees where every interior "
         "node of one is a leaf of the other, keeping all links busy.");
    note("3. It launches CUDA kernels that move and add the data, on a CUDA stream, so a "
         "collective is just more GPU work in the queue.");

    note("## Examples");
    note("Four ranks run `collective_examples_main`; each prints its tensors before and "
         "after each operation. Rank *r* starts from [0, 1, 2, 3] + *r*.");
    progress("examples: spawn 4 ranks");
    spawn(collective_examples_main, 4, NULL, 0);
}

static void ring_all_reduce_by_hand(int rank, int world_size);

/* Runs in every rank. The numbers are small on purpose: the point is where
 * they end up. */
static void collective_examples_main(int rank, int world_size, void *args) {
    (void)args;
    int device = get_device(rank);

    if (rank == 0) note("### All-reduce");
    dist_barrier();   /* the heading is sent before any rank prints numbers */
    tensor *t = arange(world_size, device);
    add_scalar(t, (float)rank);                     /* [0, 1, 2, 3] + rank */
    note_verbatim("Rank %d [before all-reduce]: %s", rank, tensor_str(t));
    dist_all_reduce(t, DIST_SUM);                   /* in place: t becomes the sum */
    note_verbatim("Rank %d [after all-reduce]: %s", rank, tensor_str(t));
    tensor_free(t);

    if (rank == 0) note("### Reduce-scatter");
    dist_barrier();
    tensor *input = arange(world_size, device);
    add_scalar(input, (float)rank);
    tensor *output = zeros(1, 0, device);           /* one element: this rank's piece */
    note_verbatim("Rank %d [before reduce-scatter]: input = %s, output = %s", rank,
                  tensor_str(input), tensor_str(output));
    dist_reduce_scatter(output, input, DIST_SUM);
    note_verbatim("Rank %d [after reduce-scatter]: input = %s, output = %s", rank,
                  tensor_str(input), tensor_str(output));

    if (rank == 0) note("### All-gather");
    dist_barrier();
    tensor *piece = output;                          /* what reduce-scatter left here */
    tensor *gathered = zeros(world_size, 0, device);
    note_verbatim("Rank %d [before all-gather]: input = %s, output = %s", rank,
                  tensor_str(piece), tensor_str(gathered));
    dist_all_gather(gathered, piece);
    note_verbatim("Rank %d [after all-gather]: input = %s, output = %s", rank,
                  tensor_str(piece), tensor_str(gathered));
    if (rank == 0)
        note("Every rank now holds [6, 10, 14, 18] again: reduce-scatter followed by "
             "all-gather *is* an all-reduce.");
    tensor_free(input);
    tensor_free(piece);
    tensor_free(gathered);

    ring_all_reduce_by_hand(rank, world_size);
}

/* The ring algorithm, written with point-to-point messages only. Each rank
 * holds world_size chunks (one number each, to keep the output short); in each
 * step it sends one chunk to its right neighbour and receives one from its
 * left. */
static void ring_all_reduce_by_hand(int rank, int world_size) {
    int device = get_device(rank);
    if (rank == 0) {
        note("### All-reduce by hand: a ring of sends and receives");
        note("Every rank sends to its right neighbour and receives from its left one at "
             "the same time. A blocking `dist_send` may wait until the matching receive is "
             "posted (MPI does so for large messages); with every rank sending first, each "
             "would wait for a receive nobody has posted yet (a deadlock), so the sends are non-blocking "
             "(`dist_isend`), completed with `dist_wait`.");
    }
    dist_barrier();
    tensor *x = arange(world_size, device);
    add_scalar(x, (float)rank);
    tensor *incoming = zeros(1, 0, device);
    int right = (rank + 1) % world_size, left = (rank + world_size - 1) % world_size;

    /* Reduce-scatter phase: after step s, chunk (rank - s - 1) holds s + 2 ranks'
     * contributions; after world_size - 1 steps, chunk (rank + 1) holds the sum. */
    for (int s = 0; s < world_size - 1; s++) {
        int send_chunk = (rank - s + world_size) % world_size;
        int recv_chunk = (rank - s - 1 + world_size) % world_size;
        tensor *out = row_slice(x, send_chunk, send_chunk + 1);
        tensor *in = row_slice(x, recv_chunk, recv_chunk + 1);
        dist_request *req = dist_isend(out, right);
        dist_recv(incoming, left);
        dist_wait(req);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    /* All-gather phase: pass the finished sums around the ring. */
    for (int s = 0; s < world_size - 1; s++) {
        int send_chunk = (rank + 1 - s + world_size) % world_size;
        int recv_chunk = (rank - s + world_size) % world_size;
        tensor *out = row_slice(x, send_chunk, send_chunk + 1);
        tensor *in = row_slice(x, recv_chunk, recv_chunk + 1);
        dist_request *req = dist_isend(out, right);
        dist_recv(in, left);
        dist_wait(req);
        tensor_free(out);
        tensor_free(in);
    }
    note_verbatim("Rank %d [after ring all-reduce]: %s", rank, tensor_str(x));
    if (rank == 0)
        note("Same [6, 10, 14, 18], in 2(N-1) = %d steps, each moving one chunk per rank.",
             2 * (world_size - 1));
    tensor_free(incoming);
    tensor_free(x);
}

/* ------------------------------------------------------------------ */
/* Part 1: benchmarking                                                */
/* ------------------------------------------------------------------ */

typedef struct bench_args {
    int n_sizes;
    int64_t bytes[MAX_SIZES];   /* message sizes, as nccl-tests counts them */
    int trials;
} bench_args;

static void bench_main(int rank, int world_size, void *args);

static void benchmarking(void) {
    progress("benchmarking");
    note("## Benchmarking");
    see("https://github.com/stas00/ml-engineering/blob/master/network/benchmarks/all_reduce_bench.py");
    note("How fast is communication? We time all-reduce and reduce-scatter on one node, "
         "with 2 and then 4 ranks, over a range of message sizes.");
    note("Two bandwidths are reported, as nccl-tests defines them (GB = 10^9 bytes; message sizes in MiB, 2^20 bytes):");
    note("- **algbw** = S / t, where S is the message size and t the time of one "
         "operation. For reduce-scatter S is the size of the *whole input* "
         "(world size times the output), because that is what gets reduced.\n"
         "- **busbw** = algbw times a factor that turns it into the traffic on the busiest "
         "link: 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather. "
         "busbw can be compared with the hardware's link speed, whatever the world size.");
    see("https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md#allreduce");
    note("A correction to the lecture this one follows. Its all-reduce estimate, "
         "S 2(n-1) / (n t), is exactly busbw. Its reduce-scatter estimate started from the "
         "*output* size S/n: (S/n)(n-1) / (n t), which is busbw / n, so 2 times too low on "
         "2 ranks and 4 times on 4. Counted from the whole input S, reduce-scatter's busbw "
         "is on the same scale as all-reduce's, and the two can be compared.");
    note("Each rank times `trials` operations back to back after one warm-up; the times "
         "are averaged over the ranks with an all-reduce (as nccl-tests does by default).");

    note("A model to read the times with, the alpha-beta model: sending n bytes costs "
         "alpha + n beta, a fixed cost alpha (latency: software, synchronisation, the "
         "wire's delay) plus beta, the time per byte, for each byte (1 / beta is the "
         "bandwidth; lecture_collectives uses the same letters). A ring all-reduce on p ranks takes "
         "2(p-1) steps, each sending n/p bytes, so it costs "
         "**t = 2(p-1) (alpha + n beta / p)**. Each spawn below fits alpha and beta to its "
         "own all-reduce times (least squares on relative errors, so that small messages "
         "count as much as large ones) and plots the model against the measurements.");
    /* 4 KiB (latency-bound) to 16 MiB (bandwidth-bound), a factor of 4
     * apart: enough for the fit's two regimes, and a few seconds in all on a
     * 2-core machine (going on to 64 MiB cost about 2 s more, and added
     * nothing the fit needs) */
    bench_args args = {.n_sizes = 7, .bytes = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20},
                       .trials = 5};
    if (lecture_quick())
        args = (bench_args){.n_sizes = 4, .bytes = {4 << 10, 64 << 10, 256 << 10, 1 << 20}, .trials = 2};

    note("### 2 ranks");
    progress("benchmarking: spawn 2 ranks");
    spawn(bench_main, 2, &args, sizeof args);
    note("### 4 ranks");
    progress("benchmarking: spawn 4 ranks");
    spawn(bench_main, 4, &args, sizeof args);

    if (gpu_count() == 0)
        note("On this machine the ranks are processes sharing a few CPU cores, and every "
             "transfer is a copy through shared memory: busbw is a few GB/s at best, against "
             "hundreds of GB/s for NVLink. What carries over is how to read the numbers: time "
             "for small messages (a fixed cost per operation), busbw for large ones.");
}




/* One operation's results, as a table. */
static void show_results(const char *op, int world_size, const bench_result *r, int n) {
    table_t *t = table_new("%s on %d ranks", op, world_size);
    table_column(t, "size", "MiB", "%g");
    table_column(t, "time", "ms", "%.3f");
    table_column(t, "algbw", "GB/s", "%.2f");
    table_column(t, "busbw", "GB/s", "%.2f");
    for (int i = 0; i < n; i++)
        table_row(t, r[i].bytes / (1 << 20), r[i].seconds * 1e3, r[i].algbw, r[i].busbw);
    table_show(t);
}

/* busbw against message size, one line per operation. */
static void plot_busbw(int world_size, const bench_result *all_reduce, const bench_result *reduce_scatter, int n) {
    double mib[MAX_SIZES], ar[MAX_SIZES], rs[MAX_SIZES];
    for (int i = 0; i < n; i++) {
        mib[i] = all_reduce[i].bytes / (1 << 20);
        ar[i] = all_reduce[i].busbw;
        rs[i] = reduce_scatter[i].busbw;
    }
    chart_t *c = chart_new("message size (MiB)", "busbw (GB/s)", "busbw on %d ranks (%s)", world_size, dist_backend());
    chart_log_x(c, 2);
    chart_line(c, "all-reduce", mib, ar, n);
    chart_line(c, "reduce-scatter", mib, rs, n);
    chart_show(c);
}

/* Measured all-reduce times against the fitted model, log-log. */
static void plot_cost_model(int world_size, const bench_result *r, int n, const cost_model *m) {
    double mib[MAX_SIZES], measured[MAX_SIZES], model[MAX_SIZES];
    for (int i = 0; i < n; i++) {
        mib[i] = r[i].bytes / (1 << 20);
        measured[i] = r[i].seconds * 1e3;
        model[i] = model_seconds(m, r[i].bytes, world_size) * 1e3;
    }
    chart_t *c = chart_new("message size (MiB)", "all-reduce time (ms)",
                           "all-reduce on %d ranks: measured and alpha-beta model", world_size);
    chart_log_x(c, 2);
    chart_log_y(c, 10);
    chart_line(c, "measured", mib, measured, n);
    chart_line(c, "model", mib, model, n);
    chart_show(c);
}

/* Trials for size i: at least a->trials, more for small messages (up to 50,
 * about 1 MiB moved in all), whose times are short enough for one stall of
 * a busy machine to dominate a few trials. */
static int trials_for(const bench_args *a, int i) {
    int64_t more = (1 << 20) / a->bytes[i];
    return more > a->trials ? (more < 50 ? (int)more : 50) : a->trials;
}

static void bench_main(int rank, int world_size, void *args) {
    const bench_args *a = args;
    int device = get_device(rank);
    double n = world_size;
    bench_result all_reduce[MAX_SIZES], reduce_scatter[MAX_SIZES];
    for (int i = 0; i < a->n_sizes; i++) {
        double t = time_all_reduce(a->bytes[i], trials_for(a, i), device);
        all_reduce[i] = bandwidths(a->bytes[i], t, 2 * (n - 1) / n);
    }
    for (int i = 0; i < a->n_sizes; i++) {
        double t = time_reduce_scatter(a->bytes[i], trials_for(a, i), world_size, device);
        reduce_scatter[i] = bandwidths(a->bytes[i], t, (n - 1) / n);
    }
    if (rank != 0) return;   /* the numbers are the same everywhere: one rank reports */
    if (world_size == 2) {
        char question[256];
        snprintf(question, sizeof question,
                 "Before the table: what bus bandwidth will the largest all-reduce (%g MiB) reach on these "
                 "2 ranks, processes that share this machine's memory?",
                 all_reduce[a->n_sizes - 1].bytes / (1 << 20));
        predict(question, all_reduce[a->n_sizes - 1].busbw, "GB/s");
    }
    show_results("all-reduce", world_size, all_reduce, a->n_sizes);
    show_results("reduce-scatter", world_size, reduce_scatter, a->n_sizes);
    plot_busbw(world_size, all_reduce, reduce_scatter, a->n_sizes);
    int last = a->n_sizes - 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    note("busbw puts both operations on one scale: it counts the bytes the busiest link "
         "must carry, so two operations that each keep the links equally busy show the "
         "same busbw. Measured at %g MiB: all-reduce %.2f GB/s, reduce-scatter %.2f GB/s "
         "(ratio %.2f). The scale is shared; the speed is not: each number is what one "
         "implementation achieved (Open MPI picks a different algorithm per operation and "
         "size, NCCL a different kernel), and a gap says one of them is further from the "
         "link's limit.",
         all_reduce[last].bytes / (1 << 20), all_reduce[last].busbw, reduce_scatter[last].busbw,
         reduce_scatter[last].busbw / all_reduce[last].busbw);
    if (gpu_count() == 0)
        note("Why reduce-scatter can come out slower than the whole all-reduce here, which a "
             "ring could not: the runtime calls Open MPI's MPI_Reduce_scatter_block, and Open "
             "MPI 4.1 has no ring for it (its choices, `ompi_info --all`: basic_linear, "
             "recursive doubling, recursive halving, butterfly). For large blocks its fixed "
             "rules pick basic_linear, as its source reads: the whole input is reduced to one "
             "rank, then scattered, so that rank alone moves p times the bytes. Its busbw is "
             "what that algorithm reached, not a ring's.");
    int peak = 0;   /* the size where all-reduce's busbw was highest */
    for (int i = 1; i < a->n_sizes; i++)
        if (all_reduce[i].busbw > all_reduce[peak].busbw) peak = i;
    if (gpu_count() == 0)
        note("Here all-reduce's busbw peaks at %g MiB (%.2f GB/s) and is %.2f GB/s at %g MiB. "
             "On a real link it rises with size towards the link's limit, as the fixed cost "
             "per operation is spread over more bytes. On this machine (%ld CPU cores, %d "
             "ranks%s) larger messages no longer fit in the caches and go through the main "
             "memory all ranks share%s, which can make it fall instead.",
             all_reduce[peak].bytes / (1 << 20), all_reduce[peak].busbw, all_reduce[last].busbw,
             all_reduce[last].bytes / (1 << 20), cores, world_size,
             world_size > cores ? ": more ranks than cores, so they take turns" : "",
             world_size > cores ? "; and a rank that waits in a collective for a partner "
                                  "that is not running at the moment loses its time slice" : "");

    cost_model m = fit_cost_model(all_reduce, a->n_sizes, world_size);
    note("Alpha-beta fit on %d ranks: alpha = %.3g us, beta = %.3g ns per byte (a bandwidth "
         "1 / beta of %.3g GB/s)%s; the model is off "
         "by %.1f%% (root mean square) and at most %.1f%% over the %d sizes (error: model / "
         "measured - 1).",
         world_size, m.alpha * 1e6, m.beta * 1e9, m.beta > 0 ? 1e-9 / m.beta : INFINITY,
         m.clamped == 1 ? " (the best unconstrained fit had a negative alpha: fitted with alpha = 0)"
         : m.clamped == 2 ? " (the times did not grow with size: no bandwidth term could be fitted)" : "",
         100 * m.rms_error, 100 * m.max_error, a->n_sizes);
    plot_cost_model(world_size, all_reduce, a->n_sizes, &m);
    note("Two regimes make the model: alpha dominates while n beta / p is small (here "
         "below about %.0f KiB, where the two terms are equal), beta above. At %g MiB the "
         "model predicts %.3g ms, against %.3g ms measured. Where the points leave the model's line, "
         "the machine is not one link of fixed speed: %s",
         m.beta > 0 ? m.alpha * world_size / m.beta / 1024 : INFINITY, all_reduce[last].bytes / (1 << 20),
         model_seconds(&m, all_reduce[last].bytes, world_size) * 1e3, all_reduce[last].seconds * 1e3,
         gpu_count() > 0 ? "NCCL switches algorithm and protocol with the size (LL, LL128, Simple), "
                           "each with its own alpha and beta."
         : world_size > cores ? "here the ranks outnumber the CPU cores, so each of the ring's 2(p-1) "
                                "steps may wait for a partner to be scheduled, a cost the model has no "
                                "term for; and the ranks share caches and memory bandwidth, which the "
                                "largest messages exhaust."
                              : "the CPU ranks share caches and memory bandwidth, so the bytes of the "
                                "largest messages move at main memory's speed, not the cache's, and "
                                "the other processes on the machine take turns on the same cores.");
}

/* ------------------------------------------------------------------ */
/* Part 1: CUDA streams                                                */
/* ------------------------------------------------------------------ */

static void cuda_streams(void) {
    progress("CUDA streams");
    note("## CUDA streams");
    note("How a GPU runs work: a kernel launch (a matmul, say) spreads over a grid of "
         "blocks of threads. Launches return at once; the host queues kernels while the "
         "GPU works through them asynchronously.");
    note("The host waits only at synchronisation points: `cudaDeviceSynchronize()` "
         "(in PyTorch `torch.cuda.synchronize()`), or copying a result back to the CPU. "
         "Those stop the whole pipeline; we want finer-grained ordering that stays on the GPU.");
    note("A **CUDA stream** is a queue of operations that run in order. Operations in "
         "*different* streams may run at the same time; events (`cudaEventRecord`, "
         "`cudaStreamWaitEvent`) order one stream after another without the host waiting.");
    image("assets/lecture_08_streams.svg", 0.9);
    note("- **One stream**: each operation starts when the one before it ends, so a matmul "
         "and an unrelated copy take the sum of their times.\n"
         "- **Two streams**: the copy engine moves the bytes while the SMs multiply. The add "
         "needs both results, so stream 0 waits for an event recorded at the end of each: "
         "the ordering stays on the GPU, and the host is never blocked. The two take about "
         "the longer of the two times instead of their sum (expected: the lecture times it "
         "below when it runs on a GPU; no GPU trace of it is committed).\n"
         "- **DDP on NCCL** is the same picture. In this runtime `dist_all_reduce_async` "
         "puts the all-reduce on a communication stream that first waits (an event) for "
         "the kernels queued before the call, so the backward kernels of the layers below "
         "run beside it; `dist_wait` makes the compute stream wait for the all-reduce's "
         "event (and the host too, so the result is in place when it returns).");
    note("The example: two independent jobs, (1) a matrix product and (2) copying a "
         "matrix from CPU to GPU, first one after the other on one stream, then on two "
         "streams so that the copy engine works while the arithmetic units multiply.");
    if (streams_example()) return;   /* lectures/lib/streams.c: cuBLAS, streams, events */
#ifdef LECTERN_CUDA
    note("*Not run here: this machine has no GPU* (`gpu_count()` is 0). The example's code "
         "(lectures/lib/streams.c) is compiled into the lecture, and on a GPU it times both "
         "versions with CUDA events here; without one there is no stream and no copy engine, "
         "so there are no timings to show.");
#else
    note("*Not run here: this build has no CUDA support*, so there is no stream to show. "
         "Built with the CUDA toolkit and run on a GPU, the lecture times both versions here.");
#endif
    note("On a CPU rank an Open MPI transfer's copies and sums are work for the same cores as "
         "the matmuls. Open MPI's shared-memory path here moves a transfer only while some "
         "thread of the rank is inside an MPI call: a property of that library and of a "
         "single-threaded rank, not of CPUs (PyTorch's gloo runs collectives on worker "
         "threads; MPI libraries can run a progress thread). So this runtime gives each rank "
         "a progress thread of its own that keeps its non-blocking calls moving while the "
         "rank computes (docs/design.md): a CPU rank's second queue. The DDP section below "
         "measures what that buys when the all-reduce overlaps backward, on whichever "
         "backend the trace was made.");
}


/* ------------------------------------------------------------------ */
/* Part 2: the model every strategy trains                             */
/* ------------------------------------------------------------------ */

#define MAX_MICRO_BATCHES 16

/* The model (a stack of width x width linear layers with GELU, loss
 * mean(output^2)), its hand-written forward and backward passes, and the
 * tolerances for comparing float32 results live in lectures/lib/mlp.c:
 * every strategy below trains exactly that model. */
static mlp_config model_config(void) {
    mlp_config c = {.batch = 128, .width = 512, .layers = 4, .steps = 5, .lr = 1e-3f};
    if (lecture_quick()) {
        c.width = 256;
        c.steps = 2;
    }
    const char *batch = lecture_option("batch", "128");
    char *end;
    long n = strtol(batch, &end, 10);
    if (*end != '\0' || n < 1 || n > 1 << 16) {   /* bad usage, as for an undeclared option */
        fprintf(stderr, "lecture_08: --batch=%s: expected a number of examples from 1 to 65536\n", batch);
        exit(2);
    }
    c.batch = (int)n;
    return c;
}


/* "[0.51, 0.49, ...]": a rank's loss at each step, said once after training
 * rather than once a step (one line per rank, not one per rank and step). */
static const char *losses_text(const float *loss, int steps, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < steps && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%.9g", i ? ", " : "[", (double)loss[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* The verdict beside each printed comparison: a strategy that drifts from one
 * device fails the run (check() records a failed check and the lecture ends
 * with exit status 1), it does not only print a larger number. */
static void agrees(const char *what, double diff, double tolerance) {
    check(diff <= tolerance, "%s equal to one device's (%.3g <= %.3g)", what, diff, tolerance);
}

/* What one device computed (one_device() below fills it): every strategy's
 * ranks get it in their arguments (baseline_args). */
static baseline_run baseline;

/* Every strategy cuts something (the batch, the layers, a matrix's columns)
 * into world-size equal pieces. When it does not divide, the lecture stops
 * before any rank starts: an error step at the must_divide() call (the line
 * above its spawn()) saying what did not divide; the steps so far are kept
 * in lecture_08.failed.json and the last good trace stays. */
static void must_divide(int64_t n, int world_size, const char *what) {
    if (world_size > 0 && n % world_size == 0) return;
    lecture_fail("%s (%lld) do not divide into %d equal parts for the spawn() below", what, (long long)n,
                 world_size);
}



static void parallelism_overview(void) {
    progress("parallelism overview");
    note("Three ways to cut up training, and the ones this part builds:");
    image("assets/lecture_08_parallelism.svg", 0.7);
    see("https://uvadlc-notebooks.readthedocs.io/en/latest/_images/parallelism_strategies_overview.svg");
    note("- **data parallel**: every rank has the whole model and a slice of the batch\n"
         "- **tensor parallel**: every layer's matrix is cut along its width\n"
         "- **pipeline parallel**: the stack of layers is cut along its depth into stages");
    mlp_config c = model_config();
    note("One model for all of them: %d layers, each a %d x %d matrix followed by GELU; "
         "loss = mean(output^2) (push the output to zero); AdamW with learning rate %g; "
         "one data set of %d examples; %d steps. Each layer's initial weights come from its "
         "own seed, scaled by 1/sqrt(%d), so any rank can make any layer and get the same "
         "numbers.",
         c.layers, c.width, c.width, (double)c.lr, c.batch, c.steps, c.width);
    note("The backward pass is written out by hand: for y = gelu(x W), "
         "dh = dy * gelu'(x W), dW = x^T dh and dx = dh W^T.");
}

/* The reference: the whole batch on one device, no communication at all. */
static void one_device(void) {
    progress("one device");
    note("## One device first");
    note("Before splitting anything, train on one device. Every strategy below must "
         "reproduce these numbers.");
    mlp_config c = model_config();
    baseline.cfg = c;
    int device = get_device(0);
    int64_t ww = (int64_t)c.width * c.width;
    tensor *data = make_data(&c, device);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    for (int i = 0; i < c.layers; i++) {
        w[i] = init_layer(&c, i, device);
        grads[i] = empty(c.width, c.width, device);
        opt[i] = adamw_new(w[i], c.lr);
    }
    baseline.first_output = malloc((size_t)c.batch * c.width * sizeof(float));
    baseline.first_grads = malloc((size_t)model_floats(&c) * sizeof(float));
    baseline.trained = malloc((size_t)model_floats(&c) * sizeof(float));
    char buf[512];
    for (int step = 0; step < c.steps; step++) {
        forward(w, c.layers, data, acts, pre);
        float loss = mse_loss(acts[c.layers]);
        backward(w, c.layers, acts, pre, grads);
        if (step == 0) {   /* kept for tensor and pipeline parallelism */
            baseline.first_loss = loss;
            tensor_to_host(acts[c.layers], baseline.first_output);
            for (int i = 0; i < c.layers; i++)
                tensor_to_host(grads[i], baseline.first_grads + i * ww);
        }
        for (int i = 0; i < c.layers; i++) adamw_step(opt[i], w[i], grads[i]);
        note_verbatim("One device: step = %d, loss = %.9g, params = %s", step, loss,
                      summaries(w, c.layers, buf, sizeof buf));
        free_saved(c.layers, acts, pre);
    }
    for (int i = 0; i < c.layers; i++) {
        tensor_to_host(w[i], baseline.trained + i * ww);
        adamw_free(opt[i]);
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    tensor_free(data);
}

static void free_one_device(void) {
    free(baseline.first_output);
    free(baseline.first_grads);
    free(baseline.trained);
}

/* ------------------------------------------------------------------ */
/* Part 2: distributed data parallel (DDP)                             */
/* ------------------------------------------------------------------ */

static void ddp_main(int rank, int world_size, void *args);
static void ddp_buckets_main(int rank, int world_size, void *args);

/* DDP as PyTorch runs it: gradients in buckets of this many layers, each
 * rank's slice of the batch run as this many micro-batches per step. */
enum { LAYERS_PER_BUCKET = 2, ACCUMULATION_STEPS = 2, BUCKET_STEPS = 2 };

static void ddp(void) {
    progress("DDP");
    note("## Distributed data parallel (DDP)");
    note("Every rank holds the whole model and takes 1/world-size of the batch. After its "
         "backward pass, the ranks average their gradients with one all-reduce per layer; "
         "since all start from the same weights and apply the same averaged gradient, "
         "they stay identical. The average of per-slice mean gradients is the gradient "
         "of the whole batch, so the result is what one device gets.");
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    int worlds[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        progress("DDP: spawn %d ranks", worlds[k]);
        must_divide(baseline.cfg.batch, worlds[k], "the batch's examples");
        spawn(ddp_main, worlds[k], args, size);
    }
    free(args);
    mlp_config c = baseline.cfg;
    note("What to notice:");
    note("- Losses differ between ranks: each is computed on that rank's own slice; their "
         "mean is the whole batch's loss, the one device's.\n"
         "- The averaged gradient is one device's gradient, up to the order in which "
         "float32 sums are added (each rank sums its own slice; the BLAS library picks its "
         "kernel, and so its order, per CPU). The tolerance, 2 (layers + 1) max(batch, "
         "width) 2^-24 = %.2g of the largest gradient, is a heuristic, not a bound: a "
         "float32 sum of n terms is exact to n 2^-24 of the sum of the terms' *sizes*, "
         "and every gradient goes through one sum per layer plus one for the weight "
         "gradient; it takes the largest gradient for the size of what is summed. "
         "Measured differences sit far under it (below), and a wrong method lands far "
         "over it: a doubled gradient or a sum in place of an average is off by 100%% or "
         "more of the largest gradient, a skipped layer by all of it. "
         "(tests/test_lecture_08_planted.py plants each of these and sees the check "
         "fail.)\n"
         "- Gradients are averaged, so parameters are *exactly* the same on every rank "
         "(max - min over ranks is 0).",
         gradient_tolerance(&c));
    note("- Against one device the parameters differ a little, for a reason worth knowing: "
         "AdamW divides each gradient by its own running size, so a gradient that rounding "
         "tips from +1e-12 to -1e-12 moves its parameter the other way. Only parameters "
         "whose gradient is about zero can flip, and by at most 2 lr R_t in step t "
         "(R_t, AdamW's largest possible ratio of running mean to running size, is 1 in "
         "step 1 and about 1.01 by step 5; lectures/lib/mlp.h derives it): %.3g over these "
         "%d steps, the bound printed beside each difference. That check is blind to a "
         "gradient's scale, since AdamW divides the scale out: a doubled gradient trains "
         "the same parameters. Compare gradients, as the step-0 checks do, to check a "
         "strategy.",
         adamw_rounding_bound(&c), c.steps);
    note("### Buckets and gradient accumulation");
    note("PyTorch's `DistributedDataParallel` does two more things. It groups the "
         "gradients into **buckets** (25 MB by default), each one contiguous tensor, and "
         "all-reduces a bucket as soon as the backward pass has filled it. Many small "
         "all-reduces would each pay the fixed cost alpha; one big one at the end could "
         "start only when all of backward is done. With an asynchronous all-reduce, a "
         "bucket's transfer runs while backward computes the layers below it.");
    note("With **gradient accumulation** (a batch too big for memory, run as k "
         "micro-batches before one step), it adds up the gradients locally and skips the "
         "all-reduce (`no_sync`) on all but the last micro-batch: communication once per "
         "step, not once per micro-batch. (PyTorch itself gives them no name, only "
         "`no_sync()`; the Hugging Face Trainer and Accelerate count them as "
         "`gradient_accumulation_steps`.)");
    note("Below, 4 ranks, buckets of %d layers, each rank's slice run as %d micro-batches. "
         "Each bucket's all-reduce starts with `dist_all_reduce_async` the moment backward "
         "has filled it, and `dist_wait` completes them all before the optimizer step. "
         "Shown: the order of events, the number of calls, and that the result is still "
         "one device's (the step-0 gradient, and the loss over %d steps, to keep the "
         "lecture short). How much the transfer overlaps depends on the machine: with NCCL "
         "it runs on its own stream beside the backward kernels; with Open MPI on CPU "
         "cores it moves mostly inside MPI calls and needs the cores the matmuls use, so "
         "expect little gain there (docs/benchmarks.md, `bench_overlap`).",
         LAYERS_PER_BUCKET, ACCUMULATION_STEPS, BUCKET_STEPS);
    note("Then the ranks measure what overlap buys: the same step (forward and backward "
         "of the whole slice, the buckets' all-reduce; no optimizer step, which is the "
         "same either way) timed three ways, taking turns: without any all-reduce, with "
         "each bucket's blocking all-reduce after backward, and with each bucket's async "
         "all-reduce started during backward. A step costs what its slowest rank costs "
         "(`dist_timer`).");
    args = baseline_args(&baseline, 0, &size);
    args->cfg.steps = BUCKET_STEPS < args->cfg.steps ? BUCKET_STEPS : args->cfg.steps;
    progress("DDP with buckets: spawn 4 ranks");
    must_divide(baseline.cfg.batch, 4 * ACCUMULATION_STEPS, "the batch's examples");
    spawn(ddp_buckets_main, 4, args, size);
    free(args);
}

static void ddp_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);

    /* This rank's slice of the batch. */
    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);

    /* The whole model, the same on every rank. */
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) {
        w[i] = init_layer(c, i, device);
        grads[i] = empty(c->width, c->width, device);
        opt[i] = adamw_new(w[i], c->lr);
    }

    /* weights, gradients, AdamW's two moments (one float each per weight) */
    double held = 0;
    for (int i = 0; i < c->layers; i++) held += (double)(w[i]->numel + grads[i]->numel + 2 * w[i]->numel) * sizeof(float);
    note_verbatim("Rank %d: DDP holds %.0f bytes of model state", rank, held);

    char buf[512], lbuf[256];
    float losses[16];   /* c->steps is at most 5 (model_config) */
    for (int step = 0; step < c->steps; step++) {
        int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
        forward(w, c->layers, x, acts, pre);
        float loss = losses[step] = mse_loss(acts[c->layers]);
        backward(w, c->layers, acts, pre, grads);
        if (step == 0) inspect(grads[0]);   /* before: each rank's gradient of its own examples */
        for (int i = 0; i < c->layers; i++)
            dist_all_reduce(grads[i], DIST_AVG);   /* the one line that makes it DDP */
        if (step == 0) inspect(grads[0]);   /* after: the average, the same on every rank */
        if (step == 0)
            note_verbatim("Rank %d: DDP: nominal bytes sent in one step = %lld in %lld calls", rank,
                          (long long)(dist_bytes_nominal() - bytes_before), (long long)(dist_calls() - calls_before));
        if (step == 0) {
            double diff = 0, size = 0;
            for (int i = 0; i < c->layers; i++) diff = fmax(diff, grad_diff(a, grads[i], i, &size));
            note_verbatim("Rank %d: step 0: max |averaged gradient - one device| = %.3g "
                          "(largest gradient %.3g, tolerance %.3g)",
                          rank, diff, size, gradient_tolerance(c) * size);
            agrees("DDP: step-0 gradients", diff, gradient_tolerance(c) * size);
        }
        for (int i = 0; i < c->layers; i++) adamw_step(opt[i], w[i], grads[i]);
        if (rank == 0) progress("DDP %d ranks: step %d (loss %.4g)", world_size, step, loss);
        free_saved(c->layers, acts, pre);
    }
    note_verbatim("Rank %d: loss by step = %s, params = %s", rank, losses_text(losses, c->steps, lbuf, sizeof lbuf),
                  summaries(w, c->layers, buf, sizeof buf));

    double spread = spread_over_ranks(w, c->layers);
    double diff = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *expected = expected_trained(a, i, device);
        diff = fmax(diff, max_abs_diff(w[i], expected));
        tensor_free(expected);
    }
    note_verbatim("Rank %d: max |DDP - one device| = %.3g (AdamW's rounding bound %.3g)", rank, diff,
                  adamw_rounding_bound(c));
    agrees("DDP: the trained parameters (within AdamW's rounding bound, blind to scale)", diff, adamw_rounding_bound(c));
    if (rank == 0)
        note_verbatim("Rank 0: across %d %s, max |params(max) - params(min)| = %.3g",
                      world_size, plural(world_size, "rank", "ranks"), spread);

    for (int i = 0; i < c->layers; i++) {
        adamw_free(opt[i]);
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    tensor_free(x);
    tensor_free(data);
}

/* ---- DDP as PyTorch runs it: buckets, and no_sync for accumulation ---- */

/* Bucket b holds the gradients of layers [first, first + count), the layers
 * the backward pass reaches b-th (the last layers first). */
static void bucket_layers(const mlp_config *c, int b, int *first, int *count) {
    int end = c->layers - b * LAYERS_PER_BUCKET;
    *first = end - LAYERS_PER_BUCKET > 0 ? end - LAYERS_PER_BUCKET : 0;
    *count = end - *first;
}

/* ---- Overlap, measured: the same DDP step three ways ---- */

/* How a timed step communicates: not at all (the compute alone), each
 * bucket's blocking all-reduce after the whole backward pass, or each
 * bucket's async all-reduce started the moment backward has filled it. */
enum { NO_ALL_REDUCE, AFTER_BACKWARD, DURING_BACKWARD, STEP_MODES };
static const char *const STEP_MODE_NAMES[] = {
    "forward + backward, no all-reduce (the compute alone)",
    "blocking all-reduce of each bucket after backward",
    "async all-reduce of each bucket started during backward",
};
enum { OVERLAP_TRIALS = 5 };   /* steps timed per way; the median is shown */

/* The gradient buckets of ddp_buckets_main: bucket b is one tensor, and
 * layer i's gradient grads[i] a view into bucket bucket_of[i], whose first
 * (lowest) layer is bucket_first[b]. */
typedef struct buckets {
    int n;
    tensor *bucket[MAX_LAYERS], *grads[MAX_LAYERS];
    int bucket_of[MAX_LAYERS], bucket_first[MAX_LAYERS];
} buckets;

/* One DDP step's forward and backward on x (no optimizer step: it is the
 * same in every way), communicating as `mode` says. */
static void ddp_step(int mode, const mlp_config *c, tensor *const *w, buckets *g, tensor *x) {
    tensor *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    dist_request *req[MAX_LAYERS];
    forward(w, c->layers, x, acts, pre);
    tensor *dy = mse_loss_backward(acts[c->layers]);
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *dx = NULL;
        layer_backward(acts[i], pre[i], w[i], dy, g->grads[i], i > 0 ? &dx : NULL, 0.0f);
        tensor_free(dy);
        dy = dx;
        if (mode == DURING_BACKWARD && i == g->bucket_first[g->bucket_of[i]])
            req[g->bucket_of[i]] = dist_all_reduce_async(g->bucket[g->bucket_of[i]], DIST_AVG);
    }
    if (mode == DURING_BACKWARD)
        for (int b = 0; b < g->n; b++) dist_wait(req[b]);
    if (mode == AFTER_BACKWARD)
        for (int b = 0; b < g->n; b++) dist_all_reduce(g->bucket[b], DIST_AVG);
    free_saved(c->layers, acts, pre);
}

/* Times OVERLAP_TRIALS steps each way, the ways taking turns (so that a
 * busy spell of the machine hits all three alike), and shows the median of
 * the slowest rank's times side by side. */
static void measure_overlap(int rank, int world_size, const mlp_config *c, tensor *const *w, buckets *g,
                            tensor *x) {
    double ms[STEP_MODES][OVERLAP_TRIALS];
    for (int mode = 0; mode < STEP_MODES; mode++) ddp_step(mode, c, w, g, x);   /* warm-up */
    for (int trial = 0; trial < OVERLAP_TRIALS; trial++)
        for (int mode = 0; mode < STEP_MODES; mode++) {
            dist_timer t = {0};
            dist_timer_start(&t);
            ddp_step(mode, c, w, g, x);
            ms[mode][trial] = dist_timer_stop(&t) * 1e3;   /* the slowest rank's time */
        }
    if (rank != 0) return;
    double median_ms[STEP_MODES];
    for (int mode = 0; mode < STEP_MODES; mode++) median_ms[mode] = median_of(ms[mode], OVERLAP_TRIALS);
    table_t *t = table_new("Overlap, measured: one DDP step on %d ranks (%s), %lld examples per rank, slowest rank, "
                           "median of %d steps each", world_size, dist_backend(), (long long)x->shape[0], OVERLAP_TRIALS);
    table_column(t, "step", NULL, "%s");
    table_column(t, "time", "ms", "%.2f");
    for (int mode = 0; mode < STEP_MODES; mode++) table_row(t, STEP_MODE_NAMES[mode], median_ms[mode]);
    table_show(t);
    note("Overlap speed-up (blocking / async): %.2f ms / %.2f ms = %.2f. Without overlap the "
         "all-reduce adds %.2f ms to the compute's %.2f ms; perfect overlap would hide it "
         "behind backward, down to the longer of the two.",
         median_ms[AFTER_BACKWARD], median_ms[DURING_BACKWARD], median_ms[AFTER_BACKWARD] / median_ms[DURING_BACKWARD],
         median_ms[AFTER_BACKWARD] - median_ms[NO_ALL_REDUCE], median_ms[NO_ALL_REDUCE]);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (strcmp(dist_backend(), "nccl") == 0)
        note("On NCCL, each bucket's all-reduce runs on the communication stream while the "
             "compute stream goes on with the backward kernels of the layers below, so the "
             "async step can take less than the blocking one: the speed-up above is what "
             "that bought on this machine.");
    else if (x->device >= 0)   /* ranks sharing GPUs: matmuls on the GPU, the all-reduce staged through the host */
        note("Here (Open MPI, %d ranks sharing GPUs) the matmuls run on the GPU and each "
             "all-reduce is staged: copied to host memory, reduced by Open MPI on the CPU, "
             "copied back. The progress thread moves it while the GPU computes, so the overlap "
             "can hide the CPU's part; the copies use the GPU's copy engine beside the kernels. "
             "Read the speed-up above as this machine's (this path has run, on one H100, only "
             "in docs/gpu.md's checks, not in a committed trace).", world_size);
    else
        note("Here (Open MPI, %d ranks on %ld CPU cores) each rank's progress thread moves the "
             "non-blocking all-reduce while backward computes, but its copies and sums are CPU "
             "work on the same cores as the matmuls: overlap can hide the waiting for other "
             "ranks, not that work. Open MPI's non-blocking all-reduce is also a different "
             "algorithm from its blocking one, sometimes the slower. So read the speed-up above "
             "with care: %sother processes make each step's time depend on when the operating "
             "system runs each rank (docs/benchmarks.md, beside `bench_overlap`, times an async "
             "all-reduce behind matmuls over many runs). On GPUs with NCCL the same code is "
             "expected to overlap, since NCCL runs the all-reduce on its own stream beside the "
             "backward kernels; no GPU trace of it is committed yet.",
             world_size, cores, world_size > cores ? "more ranks than cores, and " : "");
}

static void ddp_buckets_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int n_buckets = (c->layers + LAYERS_PER_BUCKET - 1) / LAYERS_PER_BUCKET;
    int k_micro = ACCUMULATION_STEPS;

    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size, mb = local / k_micro;

    /* Each bucket is one tensor; the layers' gradients are views into it, so
     * the backward pass writes them in place and one all-reduce covers them. */
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    buckets g = {.n = n_buckets};
    dist_request *req[MAX_LAYERS];   /* each bucket's all-reduce in flight */
    adamw *opt[MAX_LAYERS];
    char list[256];
    int len = 0;
    for (int b = 0; b < n_buckets; b++) {
        int first, count;
        bucket_layers(c, b, &first, &count);
        g.bucket[b] = empty((int64_t)count * c->width, c->width, device);
        g.bucket_first[b] = first;
        for (int i = first; i < first + count; i++) {
            g.grads[i] = row_slice(g.bucket[b], (int64_t)(i - first) * c->width, (int64_t)(i - first + 1) * c->width);
            g.bucket_of[i] = b;
        }
        char range[32];
        len += snprintf(list + len, sizeof list - len, "%s%s", b ? ", " : "",
                        layer_range(first, first + count - 1, range, sizeof range));
    }
    for (int i = 0; i < c->layers; i++) {
        w[i] = init_layer(c, i, device);
        opt[i] = adamw_new(w[i], c->lr);
    }
    if (rank == 0) note_verbatim("Rank 0: %d buckets, in the order backward fills them: %s", n_buckets, list);

    float losses[16];   /* c->steps is at most BUCKET_STEPS */
    char calls[128] = "";   /* step 0's collective calls, micro-batch by micro-batch */
    size_t calls_len = 0;
    for (int step = 0; step < c->steps; step++) {
        float loss = 0;
        for (int k = 0; k < k_micro; k++) {
            int sync = k == k_micro - 1;   /* no_sync on all micro-batches but the last */
            int64_t calls_before = dist_calls();
            tensor *x = row_slice(data, rank * local + k * mb, rank * local + (k + 1) * mb);
            forward(w, c->layers, x, acts, pre);
            loss += mse_loss(acts[c->layers]) / k_micro;
            tensor *dy = mse_loss_backward(acts[c->layers]);
            scale_(dy, 1.0f / k_micro);   /* the slice's mean loss is the mean over micro-batches */
            for (int i = c->layers - 1; i >= 0; i--) {
                tensor *dx = NULL;
                layer_backward(acts[i], pre[i], w[i], dy, g.grads[i], i > 0 ? &dx : NULL, k == 0 ? 0.0f : 1.0f);
                tensor_free(dy);
                dy = dx;
                /* The bucket is complete once its first layer is done: start its
                 * all-reduce now, while the layers below are still to compute.
                 * The layers below write other buckets, never this one. */
                if (sync && i == g.bucket_first[g.bucket_of[i]])
                    req[g.bucket_of[i]] = dist_all_reduce_async(g.bucket[g.bucket_of[i]], DIST_AVG);
            }
            if (sync)   /* every bucket averaged before anyone reads a gradient */
                for (int b = 0; b < n_buckets; b++) dist_wait(req[b]);
            free_saved(c->layers, acts, pre);
            tensor_free(x);
            if (step == 0 && calls_len < sizeof calls)
                calls_len += (size_t)snprintf(calls + calls_len, sizeof calls - calls_len, "%s%lld%s", k ? ", " : "",
                                              (long long)(dist_calls() - calls_before), sync ? "" : " (no_sync)");
        }
        if (step == 0)
            note_verbatim("Rank %d: step 0: collective calls per micro-batch = %s", rank, calls);
        if (step == 0) {
            double diff = 0, size = 0;
            for (int i = 0; i < c->layers; i++) diff = fmax(diff, grad_diff(a, g.grads[i], i, &size));
            note_verbatim("Rank %d: buckets, %d micro-batches: step 0: max |averaged gradient - one device| = %.3g "
                          "(largest gradient %.3g, tolerance %.3g)",
                          rank, k_micro, diff, size, gradient_tolerance(c) * size);
            agrees("DDP with buckets and accumulation: step-0 gradients", diff, gradient_tolerance(c) * size);
        }
        for (int i = 0; i < c->layers; i++) adamw_step(opt[i], w[i], g.grads[i]);
        losses[step] = loss;
    }
    char lbuf[256];
    note_verbatim("Rank %d: buckets: loss by step = %s", rank, losses_text(losses, c->steps, lbuf, sizeof lbuf));

    tensor *x = row_slice(data, rank * local, (rank + 1) * local);   /* the whole slice, one step */
    measure_overlap(rank, world_size, c, w, &g, x);
    tensor_free(x);
    for (int i = 0; i < c->layers; i++) {
        adamw_free(opt[i]);
        tensor_free(w[i]);
        tensor_free(g.grads[i]);
    }
    for (int b = 0; b < n_buckets; b++) tensor_free(g.bucket[b]);
    tensor_free(data);
}

/* ------------------------------------------------------------------ */
/* Part 2: DDP with ZeRO stage 3                                       */
/* ------------------------------------------------------------------ */

static void zero3_main(int rank, int world_size, void *args);

/* Bytes of model state one rank holds, with `ranks` ranks and P
 * parameters in fp32 with AdamW: weights 4P, gradients 4P, AdamW's two
 * moments 8P; ZeRO stage s divides the first s of (optimizer state,
 * gradients, weights) by the world size. */
typedef struct state_bytes {
    double params, grads, optimizer;
} state_bytes;

static state_bytes zero_bytes(int stage, double params, int ranks) {
    state_bytes b = {4 * params, 4 * params, 8 * params};
    if (stage >= 1) b.optimizer /= ranks;
    if (stage >= 2) b.grads /= ranks;
    if (stage >= 3) b.params /= ranks;
    return b;
}

static void ddp_zero3(void) {
    progress("ZeRO-3");
    note("## Distributed data parallel with ZeRO stage 3");
    note("In DDP every rank keeps a full copy of everything: weights, gradients and "
         "optimizer state. ZeRO (the Zero Redundancy Optimizer) removes the copies in "
         "three stages:");
    image("assets/lecture_08_zero_stages.svg", 0.6);
    see("https://production-media.paperswithcode.com/methods/Screen_Shot_2021-07-26_at_3.17.43_PM_3oyU7Qb.png",
        "ZeRO's three stages (Rajbhandari et al.)");
    note("- stage 1: shard the optimizer state (for AdamW, two numbers per parameter)\n"
         "- stage 2: shard the optimizer state and the gradients\n"
         "- stage 3: shard the optimizer state, the gradients and the parameters "
         "(what PyTorch's FSDP does)");
    mlp_config c = model_config();
    int ranks = 4;
    double params = (double)model_floats(&c), layer = (double)c.width * c.width;
    note("Model state per rank for this model (%.0f parameters, fp32, AdamW: 16 bytes per "
         "parameter in DDP), MB = 10^6 bytes:", params);
    table_t *t = table_new("model state per rank, %d ranks", ranks);
    table_column(t, "method", NULL, "%s");
    table_column(t, "weights", "MB", "%.3f");
    table_column(t, "gradients", "MB", "%.3f");
    table_column(t, "AdamW state", "MB", "%.3f");
    table_column(t, "total", "MB", "%.3f");
    const char *names[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    for (int stage = 0; stage <= 3; stage++) {
        state_bytes b = zero_bytes(stage, params, ranks);
        table_row(t, names[stage], b.params / 1e6, b.grads / 1e6, b.optimizer / 1e6,
                  (b.params + b.grads + b.optimizer) / 1e6);
    }
    table_show(t);
    note("ZeRO-3 also needs, for a moment, one layer's gathered weights and its full "
         "gradient (%.3f MB) on top of its shards. Below, each rank adds up the tensors it "
         "really holds, in DDP and in ZeRO-3.", 2 * 4 * layer / 1e6);

    note("How FSDP does stage 3, and how this section does it:");
    note("- Each layer's weights, flattened, are cut into world-size equal pieces: rank *r* "
         "keeps piece *r* of every layer (here, a band of rows), with AdamW's state for it.\n"
         "- Forward, layer by layer: **all-gather** the pieces into the whole layer, use it, "
         "free it.\n"
         "- Backward, layer by layer: all-gather the layer again (it was freed), compute the "
         "full gradient of this rank's slice of the batch, then **reduce-scatter**: each rank "
         "receives only its piece of the averaged gradient. Free the rest.\n"
         "- Step: each rank runs AdamW on its own piece. AdamW works element by element, so "
         "the pieces together are exactly the full update.");
    note("Layer 0 needs no gathering in the backward pass: its input is the data, which "
         "needs no gradient, and its weight gradient x^T dh does not use the weights.");
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    progress("ZeRO-3: spawn %d ranks", ranks);
    must_divide(c.width, ranks, "the rows of a layer");
    must_divide(c.batch, ranks, "the batch's examples");
    spawn(zero3_main, ranks, args, size);
    free(args);
    note("Each rank's piece of the averaged gradient is one device's, to float32 rounding, "
         "and its piece of the weights ends where one device's did, within AdamW's "
         "rounding bound.");
    double p = ranks, ddp_bytes = c.layers * 2 * (p - 1) / p * 4 * layer;
    double zero3_bytes = (2 * c.layers - 1 + c.layers) * (p - 1) / p * 4 * layer;
    note("The price is communication. Per rank and step, by the ring's count (a layer is "
         "%.0f bytes): DDP all-reduces each layer's gradient once, 2(p-1)/p of it, "
         "%.0f bytes in all. ZeRO-3 all-gathers each layer in the forward pass and all but "
         "layer 0 again in the backward pass, and reduce-scatters each gradient, (p-1)/p of "
         "a layer each: %.0f bytes, %.3f times DDP's. (FSDP gathers layer 0 again too: "
         "3 against 2, 1.5 times.) The runtime's counts (a nominal tally: each call adds "
         "what a bandwidth-optimal algorithm sends for it, `dist_bytes_nominal()`) are "
         "printed above: they show which calls each rank made, with which sizes. This "
         "code gathers a layer only when it needs it, with no prefetch; PyTorch's FSDP "
         "gathers the next layer while the current one computes, which on fast links is "
         "expected to hide much of the extra traffic. This code would not hide it.",
         4 * layer, ddp_bytes, zero3_bytes, zero3_bytes / ddp_bytes);
}

/* Layer `layer`'s whole weights, gathered from every rank's piece. The
 * caller frees it as soon as it is used: that is the memory ZeRO-3 saves. */
static tensor *gather_layer(const tensor *piece, const mlp_config *c) {
    tensor *w = empty(c->width, c->width, piece->device);
    dist_all_gather(w, piece);   /* the pieces are bands of rows, in rank order */
    return w;
}

static void zero3_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t rows = c->width / world_size;         /* my piece: these rows of every layer */
    int64_t first = rank * rows, last = (rank + 1) * rows;

    tensor *data = make_data(c, device);
    int64_t local = c->batch / world_size;
    tensor *x = row_slice(data, rank * local, (rank + 1) * local);

    /* Only the pieces exist here, each with its gradient piece and AdamW state. */
    tensor *piece[MAX_LAYERS], *grad_piece[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    adamw *opt[MAX_LAYERS];
    double held = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = init_layer(c, i, device);
        tensor *band = row_slice(full, first, last);
        piece[i] = to_device(band, device);
        tensor_free(band);
        tensor_free(full);
        grad_piece[i] = empty(rows, c->width, device);
        opt[i] = adamw_new(piece[i], c->lr);
        /* weights, gradient, AdamW's two moments (one float each per weight) */
        held += (double)(piece[i]->numel + grad_piece[i]->numel + 2 * piece[i]->numel) * sizeof(float);
    }
    note_verbatim("Rank %d: ZeRO-3 holds %.0f bytes of model state (rows %lld-%lld of every layer)", rank,
                  held, (long long)first, (long long)last - 1);

    char buf[512], lbuf[256];
    float losses[16];   /* c->steps is at most 5 (model_config) */
    for (int step = 0; step < c->steps; step++) {
        int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();
        /* Forward: gather each layer, use it, free it. */
        acts[0] = x;
        for (int i = 0; i < c->layers; i++) {
            tensor *w = gather_layer(piece[i], c);
            acts[i + 1] = layer_forward(acts[i], w, &pre[i]);
            tensor_free(w);
        }
        float loss = losses[step] = mse_loss(acts[c->layers]);

        /* Backward: gather again, compute the full gradient of my slice of the
         * batch, keep my piece of the average, free the rest. */
        tensor *dy = mse_loss_backward(acts[c->layers]);
        for (int i = c->layers - 1; i >= 0; i--) {
            tensor *w = i > 0 ? gather_layer(piece[i], c) : NULL;
            tensor *grad = empty(c->width, c->width, device);
            tensor *dx = NULL;
            layer_backward(acts[i], pre[i], w, dy, grad, i > 0 ? &dx : NULL, 0.0f);
            dist_reduce_scatter(grad_piece[i], grad, DIST_AVG);   /* my rows of the average */
            if (step == 0 && i == 0) inspect(grad_piece[i]);       /* each rank: its own band of rows */
            if (w) tensor_free(w);
            tensor_free(grad);
            tensor_free(dy);
            dy = dx;
        }
        /* Checked after the loop, every layer: a backward that skipped a
         * layer leaves its piece unwritten, and fails here. */
        if (step == 0) {
            double diff = 0, size = 0;
            for (int i = 0; i < c->layers; i++) {
                tensor *full = expected_grad(a, i, device), *mine = row_slice(full, first, last);
                diff = fmax(diff, max_abs_diff(grad_piece[i], mine));
                size = fmax(size, largest(full));
                tensor_free(mine);
                tensor_free(full);
            }
            note_verbatim("Rank %d: step 0: all %d layers: max |averaged gradient piece - one device| = %.3g "
                          "(largest gradient %.3g, tolerance %.3g)", rank, c->layers, diff, size,
                          gradient_tolerance(c) * size);
            agrees("ZeRO-3: the step-0 gradient pieces", diff, gradient_tolerance(c) * size);
        }
        for (int i = 0; i < c->layers; i++) adamw_step(opt[i], piece[i], grad_piece[i]);
        if (step == 0 && rank == 0) {
            char question[320];
            snprintf(question, sizeof question,
                     "How many bytes does one rank send in one ZeRO-3 step here (%d ranks, %d layers of "
                     "%d x %d floats)? Each all-gather and each reduce-scatter sends (p - 1) / p of a "
                     "layer; the last layer's gathered weights stay from its forward to its backward.",
                     world_size, c->layers, c->width, c->width);
            predict(question, (double)(dist_bytes_nominal() - bytes_before), "bytes");
        }
        if (step == 0)
            note_verbatim("Rank %d: ZeRO-3: nominal bytes sent in one step = %lld in %lld calls", rank,
                          (long long)(dist_bytes_nominal() - bytes_before), (long long)(dist_calls() - calls_before));
        if (step == 0)
            note_verbatim("Rank %d: step 0: pieces = %s", rank, summaries(piece, c->layers, buf, sizeof buf));
        if (rank == 0) progress("ZeRO-3: step %d (loss %.4g)", step, loss);
        free_saved(c->layers, acts, pre);
    }
    note_verbatim("Rank %d: loss by step = %s, pieces = %s", rank, losses_text(losses, c->steps, lbuf, sizeof lbuf),
                  summaries(piece, c->layers, buf, sizeof buf));

    double diff = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = expected_trained(a, i, device), *mine = row_slice(full, first, last);
        diff = fmax(diff, max_abs_diff(piece[i], mine));
        tensor_free(mine);
        tensor_free(full);
        adamw_free(opt[i]);
        tensor_free(piece[i]);
        tensor_free(grad_piece[i]);
    }
    note_verbatim("Rank %d: max |ZeRO-3 piece - one device| = %.3g (AdamW's rounding bound %.3g)", rank, diff,
                  adamw_rounding_bound(c));
    agrees("ZeRO-3: the trained parameter pieces (within AdamW's rounding bound, blind to scale)", diff, adamw_rounding_bound(c));
    tensor_free(x);
    tensor_free(data);
}

/* ------------------------------------------------------------------ */
/* Part 2: tensor parallelism                                          */
/* ------------------------------------------------------------------ */

static void tensor_parallel_main(int rank, int world_size, void *args);
static void megatron_main(int rank, int world_size, void *args);

static void tensor_parallelism(void) {
    progress("tensor parallelism");
    note("## Tensor parallelism");
    note("Cut each layer's matrix by columns: with 4 ranks, rank *r* keeps columns "
         "[r w/4, (r+1) w/4) of every W. Every rank sees the *whole* batch.");
    note("Forward, per layer: each rank computes its columns of the output, "
         "gelu(x W_r); an all-gather and a column concatenation give every rank the "
         "full activation for the next layer.");
    note("Backward, per layer: each rank takes its columns of dy, computes its columns of "
         "dW (x^T dh_r, exactly its slice of the full gradient) and a *partial* dx = "
         "dh_r W_r^T; the full dx is the sum of the partials, one all-reduce.");
    note("Communication happens inside every layer, twice per layer per step (once "
         "forward, once backward), so tensor "
         "parallelism wants the fastest links (NVLink, within a node).");
    size_t size;
    train_args *args = baseline_args(&baseline, 0, &size);
    progress("tensor parallelism: spawn 4 ranks");
    must_divide(baseline.cfg.width, 4, "the columns of a layer");
    spawn(tensor_parallel_main, 4, args, size);
    free(args);
    note("Same activations and the same gradients as one device, with each rank holding "
         "a quarter of the weights.");

    note("### Megatron: a column-parallel layer, then a row-parallel one");
    see("https://arxiv.org/abs/1909.08053", "Megatron-LM (Shoeybi et al., 2019)");
    note("Cutting every layer by columns gathers the whole activation after every layer. "
         "Megatron-LM needs fewer collectives by taking the layers in pairs, an MLP block "
         "y = gelu(gelu(x A) B):");
    note("- A is cut by **columns**: rank *r* computes z_r = gelu(x A_r), its columns of "
         "the hidden activation, with no communication (GELU acts elementwise, so its "
         "columns need only its columns).\n"
         "- B is cut by **rows**: z_r B_r is rank *r*'s *partial* pre-activation, and "
         "x A B = sum over r of z_r B_r. One all-reduce adds the partials; every rank then "
         "applies the last GELU to the whole.\n"
         "- Backward mirrors it: the output gradient is whole on every rank, so the "
         "gradients of B_r and of z_r need nothing from other ranks; the input gradient "
         "is a sum of partials dh_r A_r^T, one all-reduce.");
    note("One all-reduce forward and one backward per block of two layers (none backward "
         "for the first block, whose input is the data), against an all-gather per layer "
         "forward and an all-reduce per layer backward when every layer is cut by columns. "
         "Both versions below count the bytes each rank sends as the runtime's nominal "
         "figure (`dist_bytes_nominal()`): what a bandwidth-optimal algorithm sends for "
         "each call, whichever algorithm Open MPI or NCCL picked.");
    args = baseline_args(&baseline, 0, &size);
    progress("Megatron tensor parallelism: spawn 4 ranks");
    must_divide(baseline.cfg.layers, 2, "the layers (in pairs)");
    spawn(megatron_main, 4, args, size);
    free(args);
    mlp_config c = baseline.cfg;
    double b = (double)c.batch * c.width * sizeof(float), p = 4;
    double column_only = c.layers * (p - 1) / p * b + (c.layers - 1) * 2 * (p - 1) / p * b;
    double megatron = (c.layers / 2 + c.layers / 2 - 1) * 2 * (p - 1) / p * b;
    note("Per rank and step, by the ring's count (an activation is %d x %d floats, b = %.0f "
         "bytes): column-only %d all-gathers of (p-1)/p b and %d all-reduces of 2(p-1)/p b, "
         "%.0f bytes; Megatron %d all-reduces, %.0f bytes, %.2f times less. Compare the "
         "counts the ranks measured above.",
         c.batch, c.width, b, c.layers, c.layers - 1, column_only, c.layers - 1, megatron,
         column_only / megatron);
}

/* Every rank's (rows x cols/world) piece, side by side: (rows x cols). The
 * all-gather stacks the pieces one under the other; cat_cols puts them side
 * by side. */
static tensor *all_gather_columns(tensor *piece, int world_size) {
    int64_t rows = piece->shape[0];
    tensor *stacked = empty(world_size * rows, piece->shape[1], piece->device);
    dist_all_gather(stacked, piece);
    tensor *parts[LECTERN_MAX_WORLD];
    for (int r = 0; r < world_size; r++) parts[r] = row_slice(stacked, r * rows, (r + 1) * rows);
    tensor *full = cat_cols(parts, world_size);
    for (int r = 0; r < world_size; r++) tensor_free(parts[r]);
    tensor_free(stacked);
    return full;
}

static void tensor_parallel_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t shard = c->width / world_size;
    int64_t first = rank * shard, last = (rank + 1) * shard;   /* my columns */

    tensor *data = make_data(c, device);   /* the whole batch on every rank */
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *grads[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) {
        tensor *full = init_layer(c, i, device);   /* the same full weights as everyone */
        w[i] = col_slice(full, first, last);
        tensor_free(full);
    }
    inspect(w[0]);   /* each rank holds its own columns of the first layer */

    int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();

    /* Forward. */
    acts[0] = data;
    for (int i = 0; i < c->layers; i++) {
        tensor *mine = layer_forward(acts[i], w[i], &pre[i]);   /* batch x shard */
        acts[i + 1] = all_gather_columns(mine, world_size);     /* batch x width */
        tensor_free(mine);
    }
    float loss = mse_loss(acts[c->layers]);
    tensor *expected = expected_output(a, device);
    double out_diff = max_abs_diff(acts[c->layers], expected), out_tol = output_tolerance(c) * largest(expected);
    note_verbatim("Rank %d: forward: loss = %.9g (one device: %.9g), activations %s, "
                  "max |TP - one device| = %.3g (tolerance %.3g)", rank, loss, a->first_loss,
                  summarize(acts[c->layers]), out_diff, out_tol);
    agrees("column-parallel TP: the output", out_diff, out_tol);
    tensor_free(expected);

    /* Backward. */
    tensor *dy = mse_loss_backward(acts[c->layers]);   /* full, the same on every rank */
    for (int i = c->layers - 1; i >= 0; i--) {
        tensor *dy_mine = col_slice(dy, first, last);
        tensor *dx = NULL;
        grads[i] = empty(c->width, shard, device);
        layer_backward(acts[i], pre[i], w[i], dy_mine, grads[i], i > 0 ? &dx : NULL, 0.0f);
        if (dx) dist_all_reduce(dx, DIST_SUM);   /* partial input gradients add up */
        tensor_free(dy_mine);
        tensor_free(dy);
        dy = dx;
    }
    double diff = 0, size = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = expected_grad(a, i, device);
        tensor *cols = col_slice(full, first, last);
        diff = fmax(diff, max_abs_diff(grads[i], cols));
        size = fmax(size, largest(cols));
        tensor_free(cols);
        tensor_free(full);
    }
    note_verbatim("Rank %d: backward: gradients of columns %lld-%lld of every layer, "
                  "max |TP - one device| = %.3g (largest gradient %.3g, tolerance %.3g)", rank,
                  (long long)first, (long long)last - 1, diff, size, gradient_tolerance(c) * size);
    agrees("column-parallel TP: the gradients", diff, gradient_tolerance(c) * size);

    note_verbatim("Rank %d: column-only: nominal bytes sent in one step = %lld in %lld calls", rank,
                  (long long)(dist_bytes_nominal() - bytes_before), (long long)(dist_calls() - calls_before));

    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++) {
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    tensor_free(data);
}

/* Megatron's MLP block over layers (2k, 2k+1): layer 2k cut by columns,
 * layer 2k+1 by rows. acts[2k+1] holds only this rank's columns of the
 * hidden activation; acts[2k+2] and pre[2k+1] are whole on every rank. */
static void megatron_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    int device = get_device(rank);
    int64_t shard = c->width / world_size;
    int64_t first = rank * shard, last = (rank + 1) * shard;

    tensor *data = make_data(c, device);
    tensor *w[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS], *grads[MAX_LAYERS];
    for (int i = 0; i < c->layers; i++) {
        tensor *full = init_layer(c, i, device);
        if (i % 2 == 0) {
            w[i] = col_slice(full, first, last);                /* A_r: width x shard */
        } else {
            tensor *rows = row_slice(full, first, last);       /* B_r: shard x width */
            w[i] = to_device(rows, device);
            tensor_free(rows);
        }
        tensor_free(full);
    }
    int64_t bytes_before = dist_bytes_nominal(), calls_before = dist_calls();

    /* Forward: one all-reduce per block. */
    acts[0] = data;
    for (int i = 0; i < c->layers; i += 2) {
        acts[i + 1] = layer_forward(acts[i], w[i], &pre[i]);   /* z_r = gelu(x A_r) */
        pre[i + 1] = matmul(acts[i + 1], w[i + 1]);            /* z_r B_r: a partial sum */
        dist_all_reduce(pre[i + 1], DIST_SUM);                  /* x A B, whole */
        acts[i + 2] = gelu(pre[i + 1]);
    }
    float loss = mse_loss(acts[c->layers]);
    tensor *expected = expected_output(a, device);
    double out_diff = max_abs_diff(acts[c->layers], expected), out_tol = output_tolerance(c) * largest(expected);
    note_verbatim("Rank %d: Megatron forward: loss = %.9g (one device: %.9g), max |Megatron - one device| "
                  "= %.3g (tolerance %.3g)", rank, loss, a->first_loss, out_diff, out_tol);
    agrees("Megatron TP: the output", out_diff, out_tol);
    tensor_free(expected);

    /* Backward: one all-reduce per block, none for the first. */
    tensor *dy = mse_loss_backward(acts[c->layers]);   /* whole, the same on every rank */
    for (int i = c->layers - 2; i >= 0; i -= 2) {
        tensor *dz = NULL, *dx = NULL;
        grads[i + 1] = empty(shard, c->width, device);
        layer_backward(acts[i + 1], pre[i + 1], w[i + 1], dy, grads[i + 1], &dz, 0.0f);
        grads[i] = empty(c->width, shard, device);
        layer_backward(acts[i], pre[i], w[i], dz, grads[i], i > 0 ? &dx : NULL, 0.0f);
        if (dx) dist_all_reduce(dx, DIST_SUM);   /* the partial input gradients add up */
        tensor_free(dz);
        tensor_free(dy);
        dy = dx;
    }
    int64_t bytes = dist_bytes_nominal() - bytes_before, calls = dist_calls() - calls_before;

    double diff = 0, size = 0;
    for (int i = 0; i < c->layers; i++) {
        tensor *full = expected_grad(a, i, device);
        tensor *mine = i % 2 == 0 ? col_slice(full, first, last) : row_slice(full, first, last);
        diff = fmax(diff, max_abs_diff(grads[i], mine));
        size = fmax(size, largest(mine));
        tensor_free(mine);
        tensor_free(full);
    }
    note_verbatim("Rank %d: Megatron backward: gradients of columns %lld-%lld of the even layers and "
                  "rows %lld-%lld of the odd ones, max |Megatron - one device| = %.3g (largest gradient "
                  "%.3g, tolerance %.3g)", rank, (long long)first, (long long)last - 1, (long long)first,
                  (long long)last - 1, diff, size, gradient_tolerance(c) * size);
    agrees("Megatron TP: the gradients", diff, gradient_tolerance(c) * size);
    note_verbatim("Rank %d: Megatron: nominal bytes sent in one step = %lld in %lld calls", rank, (long long)bytes,
                  (long long)calls);

    free_saved(c->layers, acts, pre);
    for (int i = 0; i < c->layers; i++) {
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    tensor_free(data);
}

/* ------------------------------------------------------------------ */
/* Part 2: pipeline parallelism                                        */
/* ------------------------------------------------------------------ */

static void pipeline_main(int rank, int world_size, void *args);

enum { GPIPE = 0, ONE_F_ONE_B = 1 };
static const char *const SCHEDULE_NAMES[] = {"GPipe", "1F1B"};

/* Fraction of a schedule's time that a stage sits idle, GPipe or 1F1B alike:
 * with p stages and m micro-batches each pass takes m + p - 1 slots, p - 1
 * of them empty. */
static double bubble_fraction(int stages, int micro_batches) {
    return (double)(stages - 1) / (micro_batches + stages - 1);
}

/* Rows of the batch the pipeline runs: a micro-batch's forward must take
 * long against what a message between stages costs (copying 1/m of the
 * batch's activations, waking the receiver, ~0.1 ms here), or the timeline
 * shows the messages and not the schedule. With 128 rows a micro-batch of
 * 16 took ~0.3 ms and the measured bubble was 4 times the formula's; 1024
 * rows (128 a micro-batch, two 512 x 512 layers: ~7 ms) put it near. */
static int pipeline_batch(void) { return lecture_quick() ? 256 : 1024; }

/* Step 0 of the model on one device, for the pipeline's batch: its output
 * and gradients, which the stages compare theirs with. */
static void one_device_step0(baseline_run *b) {
    mlp_config c = b->cfg;
    int device = get_device(0);
    int64_t ww = (int64_t)c.width * c.width;
    tensor *data = make_data(&c, device);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    for (int i = 0; i < c.layers; i++) {
        w[i] = init_layer(&c, i, device);
        grads[i] = empty(c.width, c.width, device);
    }
    b->first_output = malloc((size_t)c.batch * c.width * sizeof(float));
    b->first_grads = malloc((size_t)model_floats(&c) * sizeof(float));
    b->trained = calloc((size_t)model_floats(&c), sizeof(float));   /* no step taken: unused */
    forward(w, c.layers, data, acts, pre);
    b->first_loss = mse_loss(acts[c.layers]);
    backward(w, c.layers, acts, pre, grads);
    tensor_to_host(acts[c.layers], b->first_output);
    for (int i = 0; i < c.layers; i++) {
        tensor_to_host(grads[i], b->first_grads + i * ww);
        tensor_free(w[i]);
        tensor_free(grads[i]);
    }
    free_saved(c.layers, acts, pre);
    tensor_free(data);
}

/* Each spawn runs its schedule this many times and shows the run that took
 * the least time: the one the machine's other work disturbed least (as a
 * benchmark takes the best of several). */
enum { PIPE_RUNS = 3 };

/* What rank 0 of a pipeline spawn returns to the lecture (spawn_return). */
typedef struct pipe_result {
    double bubble, formula, span_ms;
    double replayed;               /* the schedule replayed with the stages' own times, messages free */
    int stage0_held, overlapped;   /* stage 1 began a forward before stage 0's last forward ended */
} pipe_result;

/* What the spawn just measured (its rank 0's spawn_return), said beside the
 * formula, with the machine's load and cores, which decide how near it can
 * be: the formula assumes every stage has a processor of its own. */
static void say_bubble(int stages, int schedule, int m) {
    pipe_result r;
    if (spawn_result(0, &r, sizeof r) != sizeof r) lecture_fail("the pipeline's rank 0 returned no result");
    double load[1] = {0};
    if (getloadavg(load, 1) != 1) load[0] = -1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double off = r.bubble / r.formula - 1;
    if (stages == 2)
        predict("What fraction of the pipeline's time will each of the 2 stages spend idle, with 8 "
                "micro-batches (the bubble, over the total time)?",
                r.bubble, "");
    const char *why;
    if (fabs(off) <= 0.15)
        why = "within 15% of the formula: what is left over is the messages' cost and the last stage's loss, "
              "which the formula leaves out";
    else if (stages > cores)
        why = "larger than the formula: the ranks outnumber the cores, so a stage that is ready to work waits "
              "for its turn on a core another stage holds; that wait is this machine's, not the schedule's";
    else if (load[0] > cores + stages)   /* the load average counts this lecture's own ranks too */
        why = "larger than the formula: the machine was busy with other work (a load average above its "
              "cores plus this spawn's ranks), so a stage that was ready waited for a core; the formula "
              "assumes every stage has one";
    else
        why = "larger than the formula by more than the messages and the last stage's loss would explain: "
              "the replay below splits the gap";
    note("%s, %d stages: measured bubble %.3f of the total against the formula's %.3f (%+.0f%%), %s. "
         "Stage 1 %s stage 0's last forward; stage 0 held at most %d micro-batches' activations "
         "(m = %d, p = %d). Load average %.1f on %ld cores while it ran.", SCHEDULE_NAMES[schedule], stages,
         r.bubble, r.formula, 100 * off, why, r.overlapped ? "began its first forward before" : "began only after",
         r.stage0_held, m, stages, load[0], cores);
    /* The formula assumes equal stages and free messages. Replaying the same
     * schedule with each operation's measured time and nothing between the
     * operations keeps the first assumption's breach and drops the second:
     * it splits the gap in two. */
    note("The same schedule replayed with each stage's own measured forward and backward times, "
         "and nothing between one operation and the next, gives a bubble of %.3f: unequal stages "
         "(the last adds the loss; ranks that share cores run at uneven speed) account for %.3f of the gap to the formula, the time between "
         "operations (messages, the bookkeeping around them, waiting for a core) for the other %.3f.",
         r.replayed, r.replayed - r.formula, r.bubble - r.replayed);
}

static void pipeline_parallelism(void) {
    progress("pipeline parallelism");
    note("## Pipeline parallelism");
    note("Cut the stack of layers into stages, one per rank; activations flow forward "
         "from stage to stage with `dist_send`/`dist_recv`, and gradients flow back.");
    see("https://pytorch.org/docs/stable/_images/pipe.png", "GPipe's schedule (PyTorch docs)");
    note("Sent as one batch, only one stage would work at a time. So the batch is cut "
         "into micro-batches: while stage 1 works on micro-batch 0, stage 0 already "
         "starts micro-batch 1. This is the GPipe schedule: all forwards, then all "
         "backwards, each stage's weight gradients summed over the micro-batches. A "
         "training run would then take one optimizer step per stage; this section stops "
         "at the gradients, which it compares with one device's.");
    image("assets/lecture_08_pipeline.svg", 0.7);
    int m = 8;
    note("The idle time (the *bubble*): with p stages and m micro-batches each pass "
         "takes m + p - 1 slots of which a stage is busy m. Two conventions name it: "
         "idle time over the *total* time, (p - 1) / (m + p - 1), which is what a "
         "timeline shows and what this lecture measures; and idle time over the *ideal* "
         "time (m slots, no bubble), (p - 1) / m, as the Megatron-LM paper (Narayanan et "
         "al. 2021) and the Ultra-Scale Playbook write it. Same bubble, different "
         "denominators:");
    table_t *t = table_new("the bubble two ways");
    table_column(t, "stages p", NULL, "%d");
    table_column(t, "micro-batches m", NULL, "%d");
    table_column(t, "of the total (p - 1) / (m + p - 1)", NULL, "%.3f");
    table_column(t, "of the ideal (p - 1) / m", NULL, "%.3f");
    int shapes[][2] = {{2, m}, {4, m}, {4, 32}};
    for (int k = 0; k < 3; k++)
        table_row(t, shapes[k][0], shapes[k][1], bubble_fraction(shapes[k][0], shapes[k][1]),
                  (double)(shapes[k][0] - 1) / shapes[k][1]);
    table_show(t);
    note("More micro-batches shrink the bubble, at the cost of smaller matrix products "
         "(less efficient) and more messages. GPipe keeps every micro-batch's activations "
         "until its backward pass: all m of them, the whole batch's activations.");
    note("**1F1B** (one forward, one backward) runs the same work in another order: stage "
         "*r* does p - r - 1 forwards to fill the pipe, then alternates one forward and one "
         "backward, then drains the last backwards. A micro-batch's activations are freed "
         "as soon as its backward is done, so stage *r* never holds more than p - r "
         "micro-batches, instead of all m: on stage 0, p instead of m. Its bubble is the "
         "same as GPipe's; what it saves is memory. (*Interleaved* 1F1B, not run here, "
         "gives each rank several non-adjacent groups of layers, v virtual stages, which "
         "divides the bubble by v at the cost of v times more messages.)");
    baseline_run pipe = {.cfg = baseline.cfg};
    pipe.cfg.batch = pipeline_batch();
    one_device_step0(&pipe);
    note("The stages below run the same model on a batch of %d examples (%d a "
         "micro-batch): a micro-batch's work must be long against a message's cost, or the "
         "timeline measures messages, not the schedule. Each rank stamps the start and "
         "end of every forward and backward with the machine's monotonic clock, shared "
         "by all ranks. Sends are non-blocking (`dist_isend`) and travel while the sender computes "
         "(here the receiver copies them out of the sender's memory), so stage 1 starts "
         "micro-batch 0 while stage 0 computes micro-batch 1. The measured bubble of a rank is 1 - (its "
         "busy time) / (the time from the first start to the last end, over all ranks): "
         "the *total* convention. The formula assumes stages of equal work, so stage 0 "
         "computes the gradient of its input too, which nothing uses and a real pipeline "
         "skips.", pipe.cfg.batch, pipe.cfg.batch / m);
    size_t size;
    train_args *args = baseline_args(&pipe, m, &size);
    struct { int stages, schedule; } runs[] = {{2, GPIPE}, {4, GPIPE}, {4, ONE_F_ONE_B}};
    for (int k = 0; k < 3; k++) {
        note("### %s, %d stages, %d micro-batches: bubble %.1f%% of the total", SCHEDULE_NAMES[runs[k].schedule],
             runs[k].stages, m, 100 * bubble_fraction(runs[k].stages, m));
        progress("pipeline parallelism: %s, spawn %d ranks", SCHEDULE_NAMES[runs[k].schedule], runs[k].stages);
        args->schedule = runs[k].schedule;
        args->clock_base = now_seconds();
        int p = runs[k].stages;
        must_divide(pipe.cfg.layers, p, "the layers");
        must_divide(pipe.cfg.batch, m, "the batch's examples (in micro-batches)");
        spawn(pipeline_main, p, args, size);
        say_bubble(p, runs[k].schedule, m);
    }
    free(args);
    free(pipe.first_output);
    free(pipe.first_grads);
    free(pipe.trained);
    note("Forward and backward match one device in both schedules, and 1F1B's stage 0 "
         "held p micro-batches' activations where GPipe's held m. On 4 GPUs, one stage "
         "each, no stage waits for a core (expected: no GPU run of this lecture is in the "
         "committed trace).");
}

/* One forward or backward of one micro-batch on one stage, in ms after the
 * spawn began; gathered on rank 0 for the timeline. */
typedef struct pipe_event {
    float backward, micro_batch, start_ms, end_ms;
} pipe_event;

/* Everything a stage keeps between its forwards and backwards. */
typedef struct stage {
    const train_args *a;
    int rank, world, first_layer, per_stage, m, device;
    int64_t mb;                                   /* rows per micro-batch */
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS];
    tensor *data;                                 /* stage 0 only */
    tensor *acts[MAX_MICRO_BATCHES][MAX_LAYERS + 1], *pre[MAX_MICRO_BATCHES][MAX_LAYERS];
    dist_request *sent[MAX_MICRO_BATCHES];        /* the forward send of each micro-batch */
    dist_request *sent_back[MAX_MICRO_BATCHES];   /* the backward send of each (stages > 0) */
    tensor *dx_out[MAX_MICRO_BATCHES];            /* what it sends: kept until it has gone */
    int backwards_done, in_flight, most_in_flight;
    float loss;                                   /* last stage: the batch's loss */
    double out_diff;                              /* last stage: max |output - one device| */
    tensor *expected;                             /* last stage: one device's output */
    pipe_event events[PIPE_RUNS][2 * MAX_MICRO_BATCHES];
    int run, n_events;
} stage;

static double ms_since(const stage *s) { return (now_seconds() - s->a->clock_base) * 1e3; }

static void stamp(stage *s, int backward, int k, double start) {
    device_synchronize();   /* on a GPU, the work has really ended */
    s->events[s->run][s->n_events++] = (pipe_event){(float)backward, (float)k, (float)start, (float)ms_since(s)};
}

/* Forward of micro-batch k through this stage's layers. */
static void stage_forward(stage *s, int k) {
    tensor *x;
    if (s->rank == 0) {
        x = row_slice(s->data, k * s->mb, (k + 1) * s->mb);
    } else {
        x = empty(s->mb, s->a->cfg.width, s->device);
        dist_recv(x, s->rank - 1);
    }
    double start = ms_since(s);
    forward(s->w, s->per_stage, x, s->acts[k], s->pre[k]);
    stamp(s, 0, k, start);   /* the timeline shows it: no note per micro-batch */
    if (s->rank == s->world - 1) {
        s->loss += mse_loss(s->acts[k][s->per_stage]) / s->m;
        tensor *rows = row_slice(s->expected, k * s->mb, (k + 1) * s->mb);
        s->out_diff = fmax(s->out_diff, max_abs_diff(s->acts[k][s->per_stage], rows));
        tensor_free(rows);
    }
    s->sent[k] = s->rank < s->world - 1 ? dist_isend(s->acts[k][s->per_stage], s->rank + 1) : NULL;
    if (++s->in_flight > s->most_in_flight) s->most_in_flight = s->in_flight;
}

/* Backward of micro-batch k; weight gradients add up over micro-batches. */
static void stage_backward(stage *s, int k) {
    tensor *dy;
    if (s->rank == s->world - 1) {
        dy = mse_loss_backward(s->acts[k][s->per_stage]);
        scale_(dy, 1.0f / s->m);   /* d(mean over micro-batches) */
    } else {
        dy = empty(s->mb, s->a->cfg.width, s->device);
        dist_recv(dy, s->rank + 1);
    }
    double start = ms_since(s);
    /* Every stage computes its input's gradient, stage 0 too, though nothing
     * uses the data's: the bubble formula assumes stages of equal work, and a
     * stage 0 that skipped it would finish its backwards early (idle time that
     * is the model's, not the schedule's). */
    for (int j = s->per_stage - 1; j >= 0; j--) {
        tensor *dx = NULL;
        layer_backward(s->acts[k][j], s->pre[k][j], s->w[j], dy, s->grads[j], &dx,
                       s->backwards_done == 0 ? 0.0f : 1.0f);
        tensor_free(dy);
        dy = dx;
    }
    stamp(s, 1, k, start);
    s->backwards_done++;
    /* The gradient leaves without waiting: this stage goes on to its next
     * operation while the runtime delivers it, and waits at the end of the
     * schedule (dy must live until then). */
    s->sent_back[k] = s->rank > 0 ? dist_isend(dy, s->rank - 1) : NULL;
    s->dx_out[k] = dy;
    if (s->sent[k]) dist_wait(s->sent[k]);   /* its activation went out long ago */
    free_saved(s->per_stage, s->acts[k], s->pre[k]);
    tensor_free(s->acts[k][0]);
    s->in_flight--;
}

/* The bubble the schedule would have with each operation's measured time
 * and nothing in between: each stage runs its operations in the order it
 * ran them, each starting when the stage is free and what it needs is done
 * (a forward needs the previous stage's forward of that micro-batch, a
 * backward the next stage's backward). Events: stage r's at e[r * stride]. */
static double replayed_bubble(const float *v, int stride, int world, int m) {
    double done[LECTERN_MAX_WORLD][2][MAX_MICRO_BATCHES], free_at[LECTERN_MAX_WORLD] = {0}, busy[LECTERN_MAX_WORLD] = {0};
    int next[LECTERN_MAX_WORLD] = {0}, left = world * 2 * m;
    for (int r = 0; r < world; r++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < m; k++) done[r][b][k] = -1;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < world; r++) {
            while (next[r] < 2 * m) {
                const pipe_event *e = (const pipe_event *)(v + r * stride) + next[r];
                int b = e->backward > 0, k = (int)e->micro_batch, from = b ? r + 1 : r - 1;
                double need = 0;
                if (from >= 0 && from < world) {
                    if (done[from][b][k] < 0) break;   /* not replayed yet */
                    need = done[from][b][k];
                }
                double d = e->end_ms - e->start_ms, start = fmax(free_at[r], need);
                done[r][b][k] = free_at[r] = start + d;
                busy[r] += d;
                next[r]++;
                left--;
                moved = 1;
            }
        }
        if (!moved) return NAN;   /* an order no schedule allows: cannot happen for the ones here */
    }
    double span = 0, mean = 0;
    for (int r = 0; r < world; r++) span = fmax(span, free_at[r]);
    for (int r = 0; r < world; r++) mean += (1 - busy[r] / span) / world;
    return mean;
}

/* Rank 0 gathers every stage's events, reports the bubble of the quickest
 * of the runs and plots its timeline: one bar per forward or backward, a row
 * per stage. */
static void report_timeline(stage *s, int schedule) {
    int per_run = 2 * s->m * 4, per_rank = PIPE_RUNS * per_run + 1;   /* the events, then the most held */
    float mine[PIPE_RUNS * 2 * MAX_MICRO_BATCHES * 4 + 1];
    for (int k = 0; k < PIPE_RUNS; k++) memcpy(mine + k * per_run, s->events[k], sizeof(pipe_event) * 2 * s->m);
    mine[per_rank - 1] = (float)s->most_in_flight;
    tensor *local = tensor_from(mine, per_rank, 0, s->device);
    tensor *all = s->rank == 0 ? empty((int64_t)per_rank * s->world, 0, s->device) : NULL;
    dist_gather(all, local, 0);
    tensor_free(local);
    if (s->rank != 0) return;
    float *v = malloc(sizeof(float) * per_rank * s->world);
    tensor_to_host(all, v);
    tensor_free(all);
    int best = 0;
    double first = 0, last = 0, best_span = 1e30;
    for (int k = 0; k < PIPE_RUNS; k++) {
        double f = 1e30, l = -1e30;
        for (int r = 0; r < s->world; r++) {
            const pipe_event *e = (const pipe_event *)(v + r * per_rank + k * per_run);
            for (int i = 0; i < 2 * s->m; i++) {
                f = fmin(f, e[i].start_ms);
                l = fmax(l, e[i].end_ms);
            }
        }
        if (l - f < best_span) {
            best_span = l - f;
            best = k;
            first = f;
            last = l;
        }
    }
    double busy[LECTERN_MAX_WORLD] = {0}, stage0_last_forward = 0, stage1_first_forward = 1e30;
    for (int r = 0; r < s->world; r++) {
        const pipe_event *e = (const pipe_event *)(v + r * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++) {
            busy[r] += e[i].end_ms - e[i].start_ms;
            if (e[i].backward == 0 && r == 0) stage0_last_forward = fmax(stage0_last_forward, e[i].end_ms);
            if (e[i].backward == 0 && r == 1) stage1_first_forward = fmin(stage1_first_forward, e[i].start_ms);
        }
    }
    double span = last - first, mean = 0;
    for (int r = 0; r < s->world; r++) mean += (1 - busy[r] / span) / s->world;
    table_t *t = table_new("%s on %d stages (quickest of %d runs): span %.2f ms, mean bubble %.3f of the total "
                           "(formula %.3f)", SCHEDULE_NAMES[schedule], s->world, PIPE_RUNS, span, mean,
                           bubble_fraction(s->world, s->m));
    table_column(t, "stage", NULL, "%d");
    table_column(t, "measured bubble", NULL, "%.3f");
    table_column(t, "most micro-batches' activations held at once", NULL, "%d");
    for (int r = 0; r < s->world; r++) table_row(t, r, 1 - busy[r] / span, (int)v[r * per_rank + per_rank - 1]);
    table_show(t);

    chart_t *c = chart_new("time (ms)", "stage", "%s timeline, %d stages, %d micro-batches", SCHEDULE_NAMES[schedule],
                           s->world, s->m);
    for (int r = 0; r < s->world; r++) {
        const pipe_event *e = (const pipe_event *)(v + r * per_rank + best * per_run);
        for (int i = 0; i < 2 * s->m; i++) {
            char row[24], label[32];
            snprintf(row, sizeof row, "stage %d", r);
            snprintf(label, sizeof label, "micro-batch %d", (int)e[i].micro_batch);
            chart_span(c, row, e[i].backward > 0 ? "backward" : "forward", label, e[i].start_ms - first,
                       e[i].end_ms - first);
        }
    }
    chart_show(c);
    pipe_result res = {mean, bubble_fraction(s->world, s->m), span,
                       replayed_bubble(v + best * per_run, per_rank, s->world, s->m), (int)v[per_rank - 1],
                       stage1_first_forward < stage0_last_forward};
    spawn_return(&res, sizeof res);
    free(v);
}

/* One pass of the schedule: every micro-batch forward and backward. */
static void run_schedule(stage *s) {
    int m = s->m, world_size = s->world, rank = s->rank;
    s->n_events = 0;
    s->backwards_done = 0;   /* gradients start again from zero */
    s->loss = 0;
    if (s->a->schedule == GPIPE) {
        for (int k = 0; k < m; k++) stage_forward(s, k);
        for (int k = m - 1; k >= 0; k--) stage_backward(s, k);
    } else {
        int warmup = world_size - rank - 1 < m ? world_size - rank - 1 : m;
        for (int k = 0; k < warmup; k++) stage_forward(s, k);
        for (int k = warmup; k < m; k++) {
            stage_forward(s, k);
            stage_backward(s, k - warmup);
        }
        for (int k = m - warmup; k < m; k++) stage_backward(s, k);
    }
    for (int k = 0; k < m; k++) {
        if (s->sent_back[k]) dist_wait(s->sent_back[k]);
        tensor_free(s->dx_out[k]);
    }
}

static void pipeline_main(int rank, int world_size, void *args) {
    const train_args *a = args;
    const mlp_config *c = &a->cfg;
    stage *s = calloc(1, sizeof *s);
    *s = (stage){.a = a, .rank = rank, .world = world_size, .m = a->micro_batches, .device = get_device(rank)};
    s->per_stage = c->layers / world_size;
    s->first_layer = rank * s->per_stage;
    s->mb = c->batch / s->m;
    for (int j = 0; j < s->per_stage; j++) {
        s->w[j] = init_layer(c, s->first_layer + j, s->device);   /* only this stage's layers */
        s->grads[j] = empty(c->width, c->width, s->device);
    }
    if (rank == 0) s->data = make_data(c, s->device);   /* only stage 0 reads data */
    if (rank == world_size - 1) s->expected = expected_output(a, s->device);
    for (s->run = 0; s->run < PIPE_RUNS; s->run++) {
        dist_barrier();   /* every stage ready before the clock matters */
        run_schedule(s);
    }

    char range[32];
    layer_range(s->first_layer, s->first_layer + s->per_stage - 1, range, sizeof range);
    if (rank == world_size - 1) {
        /* The batch loss is the mean of the micro-batch losses (equal sizes). */
        note_verbatim("Rank %d: %s: loss = %.9g (one device: %.9g), max |output - one device| = %.3g "
                      "(tolerance %.3g)", rank, SCHEDULE_NAMES[a->schedule], s->loss, a->first_loss, s->out_diff,
                      output_tolerance(c) * largest(s->expected));
        agrees("the pipeline's output", s->out_diff, output_tolerance(c) * largest(s->expected));
        tensor_free(s->expected);
    }
    double diff = 0, size = 0;
    for (int j = 0; j < s->per_stage; j++) diff = fmax(diff, grad_diff(a, s->grads[j], s->first_layer + j, &size));
    note_verbatim("Rank %d: %s: gradients of %s over %d micro-batches: max |PP - one device| = %.3g "
                  "(largest gradient %.3g, tolerance %.3g)", rank, SCHEDULE_NAMES[a->schedule], range, s->m, diff,
                  size, gradient_tolerance(c) * size);
    agrees("the pipeline's gradients", diff, gradient_tolerance(c) * size);
    report_timeline(s, a->schedule);

    for (int j = 0; j < s->per_stage; j++) {
        tensor_free(s->w[j]);
        tensor_free(s->grads[j]);
    }
    if (s->data) tensor_free(s->data);
    free(s);
}

/* ------------------------------------------------------------------ */
/* Summary and further reading                                         */
/* ------------------------------------------------------------------ */

static void summary(void) {
    progress("summary");
    note("## Summary");
    note("Everything above trades two costs against each other:");
    note("- memory: keep a copy here (replicate) and you need not fetch it\n"
         "- communication: keep it elsewhere (shard) and you must send it");
    note("| strategy | each rank holds | communicates | per step |\n|---|---|---|---|\n"
         "| DDP | whole model, slice of batch | gradients | all-reduce per layer, or per bucket of layers |\n"
         "| ZeRO-3 / FSDP | its piece of every layer's weights, gradients and AdamW state; slice of batch | weights and gradients | all-gather twice, reduce-scatter once, per layer |\n"
         "| tensor parallel, columns only | column slice of every layer, whole batch | activations | all-gather forward, all-reduce backward, per layer |\n"
         "| tensor parallel, Megatron | column slice, then row slice, of each pair of layers; whole batch | activations | one all-reduce forward, one backward, per pair |\n"
         "| pipeline parallel | some layers, micro-batches | activations at stage edges | send/recv per micro-batch |");
    note("- Hardware keeps getting faster, but it will stay a hierarchy: fast and small "
         "close by, big and slow far away.\n"
         "- There are many ways to parallelise (data, tensor, pipeline, and their mixes), "
         "and large runs combine them: tensor parallel inside a node, pipeline and data "
         "parallel across nodes.");
}

static void further_reading(void) {
    note("## Further reading");
    note("In this series, for depth on two of this lecture's sections: lecture_collectives "
         "(all-reduce built four ways, and the alpha-beta model fitted to each) and "
         "lecture_ddp (data parallelism step by step, and buckets measured).");
    see("https://github.com/stas00/ml-engineering/tree/master/training/model-parallelism",
        "Overview of parallelism strategies (ml-engineering)");
    see("https://arxiv.org/pdf/2304.11277.pdf", "Libraries and systems: PyTorch FSDP");
    see("https://www.microsoft.com/en-us/research/blog/zero-deepspeed-new-system-optimizations-enable-training-models-with-over-100-billion-parameters/",
        "Libraries and systems: DeepSpeed and ZeRO");
    see("https://github.com/NVIDIA/Megatron-LM", "Libraries and systems: Megatron-LM");
    see("https://github.com/EleutherAI/gpt-neox", "Libraries and systems: GPT-NeoX");
    see("https://github.com/stanford-crfm/levanter", "Libraries and systems: Levanter");
    see("https://developer.nvidia.com/blog/nvidia-tools-extension-api-nvtx-annotation-tool-for-profiling-code-in-python-and-c-c/",
        "Profiling with NVTX annotations");
    see("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/collectives.html",
        "Collective operations: NCCL's user guide");
    see("https://pytorch.org/tutorials/intermediate/dist_tuto.html", "Collective operations: PyTorch's tutorial");
    see("https://en.wikipedia.org/wiki/InfiniBand", "InfiniBand: Wikipedia");
    see("https://network.nvidia.com/pdf/whitepapers/IB_Intro_WP_190.pdf", "InfiniBand: an introduction (white paper)");
    see("https://www.youtube.com/watch?v=2gidd6lLiH8", "InfiniBand: an introduction to its networks (video)");
    see("https://www.youtube.com/watch?v=wecZb5lHkXk", "InfiniBand (video)");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_08); }
