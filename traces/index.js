window.lecternIndex = {
 "version": 1,
 "lectures": [
  {
   "name": "lecture_00",
   "title": "How executable lectures work",
   "summary": "This lecture is a C program. Running it is giving the lecture: each note() it calls becomes one step of a trace, and the viewer replays the steps beside this very source file.",
   "start_time": "2026-11-24T21:40:05Z",
   "host": "vm",
   "gpus": 0,
   "backend": "none",
   "duration_s": 0.016,
   "steps": 32,
   "failed_run": false,
   "has_good": true,
   "state": "ok"
  },
  {
   "name": "lecture_08",
   "title": "Distributed training",
   "summary": "This lecture: training one model on many accelerators at once. The setting: arithmetic is spread over many devices, and moving data between them is slow compared with computing on it. This run found no GPU. Every example still runs for real: each rank is a CPU process, tensors …",
   "start_time": "2026-11-24T21:40:05Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 5.053,
   "steps": 613,
   "failed_run": false,
   "has_good": true,
   "state": "ok"
  },
  {
   "name": "lecture_collectives",
   "title": "Collectives from scratch",
   "summary": "Ranks that train one model together have to exchange numbers: gradients, parameters, activations. This lecture starts from the smallest exchange, one rank handing one tensor to another, and builds the all-reduce of data-parallel training out of it four different ways. Then it …",
   "start_time": "2026-11-25T00:05:24Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 16.48,
   "steps": 87,
   "failed_run": false,
   "has_good": true,
   "state": "ok"
  },
  {
   "name": "lecture_ddp",
   "title": "Distributed data parallel training",
   "summary": "Data parallelism is the most common way to train on many devices: every rank keeps a whole copy of the model and works on its own part of each batch. This lecture builds it up from plain SGD to the design of PyTorch's DistributedDataParallel (DDP), and runs every piece on real …",
   "start_time": "2026-11-24T21:40:14Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 1.576,
   "steps": 67,
   "failed_run": false,
   "has_good": true,
   "state": "ok"
  },
  {
   "name": "lecture_gpu",
   "title": "GPUs: one, then many",
   "summary": "A GPU is a processor built for throughput: tens of thousands of threads running the same small program on different data. This lecture looks at what that buys and what it costs: the chip and its memory, two kernels written by hand (a vector add and a tiled matrix multiply), the …",
   "start_time": "2026-11-24T23:42:53Z",
   "host": "vm",
   "gpus": 0,
   "backend": "mpi",
   "duration_s": 11.035,
   "steps": 73,
   "failed_run": false,
   "has_good": true,
   "state": "ok"
  }
 ]
};
