window.lecternIndex = {
 "version": 1,
 "lectures": [
  {
   "name": "lecture_00",
   "title": "How executable lectures work",
   "summary": "This lecture is a C program. Running it is giving the lecture: each note() it calls becomes one step of a trace, and the viewer replays the steps beside this very source file.",
   "start_time": "2026-11-29T17:42:26Z",
   "host": "vm",
   "gpus": 0,
   "backend": "none",
   "duration_s": 0.006,
   "steps": 32,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 1,
   "sittings": [
    {
     "n": 1
    }
   ]
  },
  {
   "name": "lecture_gpu",
   "title": "GPUs: one, then many",
   "summary": "A GPU is a processor built for throughput: tens of thousands of threads running the same small program on different data. This lecture looks at what that buys and what it costs: the chip and its memory, two kernels written by hand (a vector add and a tiled matrix multiply), the …",
   "start_time": "2026-11-29T17:42:26Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 4.344,
   "steps": 75,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 2,
   "sittings": [
    {
     "n": 2
    }
   ]
  },
  {
   "name": "lecture_08",
   "title": "Distributed training",
   "summary": "This lecture: training one model on many accelerators at once. The setting: arithmetic is spread over many devices, and moving data between them is slow compared with computing on it. This run found no GPU. Every example still runs for real: each rank is a CPU process, tensors …",
   "start_time": "2026-11-29T17:42:30Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 55.072,
   "steps": 284,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 3,
   "sittings": [
    {
     "n": 3,
     "part": "Part 1"
    },
    {
     "n": 6,
     "part": "Part 2"
    }
   ]
  },
  {
   "name": "lecture_collectives",
   "title": "Collectives from scratch",
   "summary": "Ranks that train one model together have to exchange numbers: gradients, parameters, activations. This lecture starts from the smallest exchange, one rank handing one tensor to another, and builds the all-reduce of data-parallel training out of it four different ways. Then it …",
   "start_time": "2026-11-29T17:43:26Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 2.391,
   "steps": 135,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 4,
   "sittings": [
    {
     "n": 4
    }
   ]
  },
  {
   "name": "lecture_ddp",
   "title": "Distributed data parallel training",
   "summary": "Data parallelism is the most common way to train on many devices: every rank keeps a whole copy of the model and works on its own part of each batch. This lecture builds it up from plain SGD to the design of PyTorch's DistributedDataParallel (DDP), and runs every piece on real …",
   "start_time": "2026-11-29T17:43:28Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 29.64,
   "steps": 92,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 5,
   "sittings": [
    {
     "n": 5
    }
   ]
  },
  {
   "name": "lecture_scaling",
   "title": "After DDP, ZeRO, TP and PP",
   "summary": "lecture_08 split a stack of matrices four ways: the batch (DDP), the optimizer state, gradients and weights (ZeRO), each matrix (tensor parallelism) and the layers (pipelines). A transformer has more to cut: experts that each see only some tokens, a sequence whose positions are …",
   "start_time": "2026-11-29T19:06:35Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 14.662,
   "steps": 371,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 6,
   "sittings": [
    {
     "n": 7
    }
   ]
  },
  {
   "name": "lecture_pipelines",
   "title": "Pipeline schedules today",
   "summary": "lecture_08 runs GPipe and 1F1B: with p stages and m micro-batches a stage idles (p - 1) / (m + p - 1) of the time. Two schedules used in training now cut that bubble further: interleaved 1F1B (Narayanan et al. 2021, Megatron-LM) and zero-bubble (Qi et al. 2023). Here each order …",
   "start_time": "2026-11-29T17:44:16Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 9.948,
   "steps": 66,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 7,
   "sittings": [
    {
     "n": 8
    }
   ]
  },
  {
   "name": "lecture_precision",
   "title": "Mixed precision",
   "summary": "A model trained today computes in bf16, keeps fp32 master weights, may keep fp16 gradients behind a loss scale, runs its matrix products in FP8 on the newest GPUs and all-reduces its gradients in bf16. Each of those is a choice about where rounding happens. This lecture makes …",
   "start_time": "2026-11-29T17:44:26Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 1.423,
   "steps": 66,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 8,
   "sittings": [
    {
     "n": 9
    }
   ]
  },
  {
   "name": "lecture_checkpoints",
   "title": "Checkpoints and failures",
   "summary": "A job on thousands of GPUs loses one every few hours. It survives by saving its state often, in pieces, so that a restart loses only the steps since the last save; and a restart may come back with fewer or more GPUs. This lecture trains lecture_08's MLP with ZeRO-3 on 4 ranks, …",
   "start_time": "2026-11-29T17:44:28Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 3.672,
   "steps": 77,
   "failed_run": false,
   "has_good": true,
   "state": "ok",
   "order": 9,
   "sittings": [
    {
     "n": 10
    }
   ]
  }
 ]
};
