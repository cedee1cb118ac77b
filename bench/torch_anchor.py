"""PyTorch on the same machine, in the same run, as the anchor for lectern's
figures (scripts/gpu-check.sh runs it right after lectern's own benchmarks and
hands it their outputs, so every ratio below is ours against torch measured in
one call):

  spawn       torch.multiprocessing.spawn of 4 processes running an empty
              function, against lectern's spawn() of 4 ranks (bench_spawn)
  all_reduce  torch.distributed on gloo, CPU tensors, busbw at 1-256 MiB on 2
              and 4 processes, against lectern on Open MPI (bench_allreduce);
              busbw = bytes / time x 2(n-1)/n, the slowest process's time,
              median of runs (the definitions of docs/benchmarks.md). With a
              GPU, also gloo on cuda:0 tensors (torch's way of running several
              processes on one GPU) against lectern's ranks sharing cuda:0
              (bench_allreduce's figures there are on device tensors)
  matmul      float32 (TF32 off) n x n on cuda:0, torch.matmul against
              lectern's matmul (bench_gpu)
  reference   the reference lecture_08.py run end to end with its helpers
              replaced by the do-nothing ones of bench/reference_util/util.py,
              against lectern's lecture_08, both on the CPU (the reference's
              multi-rank examples cannot share one GPU: NCCL refuses two ranks
              on one device); lectern's GPU run is timed by gpu-check itself

  torch_anchor.py [--ours-spawn FILE] [--ours-allreduce FILE] [--ours-gpu FILE]
                  [--reference lecture_08.py --ours-lecture BINARY]

Where PyTorch cannot be imported it says so and exits 0. Prints markdown tables.
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES_MIB = [1, 4, 16, 64, 256]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def empty(rank):
    pass


def allreduce_worker(rank, world, port, out_path, device="cpu"):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows = []
    for mib in SIZES_MIB:
        n = mib * 1024 * 1024 // 4
        n -= n % world
        x = torch.ones(n, dtype=torch.float32, device=device)
        runs = 21 if mib <= 4 else 11 if mib <= 16 else 7 if mib <= 64 else 5
        dist.all_reduce(x)  # warm-up: connections, first touch of the pages
        sync()
        times = []
        for _ in range(runs):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            sync()  # on cuda:0 the result is back on the device
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest process's time
            times.append(dt.item())
        t = statistics.median(times)
        rows.append((mib, t, n * 4 / t * 2 * (world - 1) / world / 1e9))
    if rank == 0:
        with open(out_path, "w") as f:
            for mib, t, bus in rows:
                f.write("%d %.6f %.4f\n" % (mib, t, bus))
    dist.destroy_process_group()


def torch_spawn(runs=3):
    import torch.multiprocessing as mp
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        mp.spawn(empty, nprocs=4, join=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def torch_allreduce(world, device="cpu"):
    import torch.multiprocessing as mp
    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as f:
        path = f.name
    try:
        mp.spawn(allreduce_worker, args=(world, free_port(), path, device), nprocs=world, join=True)
        with open(path) as f:
            return {int(a): (float(b), float(c)) for a, b, c in (l.split() for l in f if l.strip())}
    finally:
        os.unlink(path)


def torch_matmul(sizes=(1024, 2048, 4096), samples=7):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {}
    for n in sizes:
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        reps = 50 if n <= 1024 else 10 if n <= 2048 else 3
        torch.matmul(a, b)
        torch.cuda.synchronize()
        ms = []
        for _ in range(samples):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            ms.append(start.elapsed_time(stop) / reps)
        out[n] = statistics.median(ms)
    return out


# ---- lectern's figures, from its benchmarks' outputs ----

def ours_spawn(path):
    """bench_spawn: its first spawn of 4 ranks (which starts the pool of
    processes, as torch.multiprocessing.spawn starts its processes), in s;
    the older format's median line for 4 ranks where that is what it has."""
    for line in open(path):
        m = re.match(r"first spawn \(4 ranks.*?([0-9.]+) s\s*$", line) or re.match(r"\s*4\s+([0-9.]+)\s", line)
        if m:
            return float(m.group(1))
    return None


def ours_allreduce(path):
    """bench_allreduce: {world: {MiB: busbw}} for all_reduce, the bare MPI
    call's on host buffers likewise, and the worlds whose tensors were on a
    GPU (ranks sharing it)."""
    out, bare, on_gpu, world, cols = {}, {}, set(), None, None
    with open(path) as lines:
        for line in lines:
            m = re.match(r"\s*(\d+) ranks \(", line)
            if m:
                world = int(m.group(1))
                if "tensors on cuda" in line:
                    on_gpu.add(world)
                continue
            f = line.split()
            if f and f[0] == "collective":   # the header names the columns
                cols = {name: i for i, name in enumerate(f)}
                continue
            if world and cols and f and f[0] == "all_reduce":
                size = int(f[cols["size_MB"]])
                out.setdefault(world, {})[size] = float(f[cols["lectern_bus"]])
                if f[cols["bare_bus"]] != "-":
                    bare.setdefault(world, {})[size] = float(f[cols["bare_bus"]])
    return out, bare, on_gpu


def ours_matmul(path):
    """bench_gpu: {n: ms} of lectern's matmul."""
    out = {}
    for line in open(path):
        m = re.match(r"\|\s*(\d+)\s*\|\s*([0-9.]+)\s*\|", line)
        if m and int(m.group(1)) in (1024, 2048, 4096, 8192):
            out[int(m.group(1))] = float(m.group(2))
    return out


def run_reference(script, ours_lecture, timeout=300):
    """Seconds for the reference lecture and for lectern's lecture_08, both
    with no GPU visible (CUDA_VISIBLE_DEVICES=''), or (None, why)."""
    work = tempfile.mkdtemp(prefix="lectern-reference-")
    try:
        shutil.copy(script, os.path.join(work, "lecture_08.py"))
        shutil.copy(os.path.join(HERE, "reference_util", "util.py"), work)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "lecture_08.py"], cwd=work, env=env, capture_output=True,
                           text=True, timeout=timeout)
        ref = time.perf_counter() - t0
        if p.returncode != 0:
            return None, None, "the reference stopped (status %d): %s" % (p.returncode, p.stderr.strip()[-600:])
        # lectern's libraries (scripts/gpu-check.sh keeps them off torch's path)
        ours_env = dict(env, LD_LIBRARY_PATH=os.environ.get("LECTERN_LD_LIBRARY_PATH",
                                                            os.environ.get("LD_LIBRARY_PATH", "")))
        t0 = time.perf_counter()
        q = subprocess.run([ours_lecture, "--quiet", "--out", work], env=ours_env, capture_output=True, text=True,
                           timeout=timeout)
        ours = time.perf_counter() - t0
        if q.returncode != 0:
            return ref, None, "lecture_08 failed (status %d): %s" % (q.returncode, q.stderr.strip()[-600:])
        return ref, ours, None
    except subprocess.TimeoutExpired as e:
        return None, None, "timed out after %d s: %s" % (timeout, e.cmd)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours-spawn")
    ap.add_argument("--ours-allreduce")
    ap.add_argument("--ours-gpu")
    ap.add_argument("--reference", help="the reference lecture_08.py")
    ap.add_argument("--ours-lecture", help="lectern's lecture_08 binary, timed beside the reference")
    a = ap.parse_args()
    try:
        import torch
    except (ImportError, OSError) as e:
        print("torch_anchor: skipped: PyTorch cannot be imported here (%s)" % e)
        return 0
    print("PyTorch %s (CUDA %s), %d GPU(s) visible, %d CPUs" % (
        torch.__version__, torch.version.cuda, torch.cuda.device_count() if torch.cuda.is_available() else 0,
        os.cpu_count()))
    failed = 0

    med, runs = torch_spawn()
    ours = ours_spawn(a.ours_spawn) if a.ours_spawn else None
    print("\n### spawn of 4 processes running nothing\n")
    print("| | lectern spawn() | torch.multiprocessing.spawn | torch / lectern |\n|---|---:|---:|---:|")
    print("| median s | %s | %.3f (runs %s) | %s |" % (
        "%.3f" % ours if ours else "-", med, ", ".join("%.2f" % t for t in runs), ratio(med, ours)))
    sys.stdout.flush()

    ours_ar, bare_ar, on_gpu = ours_allreduce(a.ours_allreduce) if a.ours_allreduce else ({}, {}, set())
    for world in (2, 4):
        got = torch_allreduce(world)
        # Where lectern's ranks shared a GPU, its host-memory figure is the
        # bare MPI call bench_allreduce ran beside it.
        host = bare_ar if world in on_gpu else ours_ar
        print("\n### all_reduce busbw GB/s, %d processes, CPU memory (lectern: Open MPI%s; torch: gloo)\n" % (
            world, ", the bare call" if world in on_gpu else ""))
        print("| MiB | lectern | torch gloo | lectern / gloo |\n|---:|---:|---:|---:|")
        for mib in SIZES_MIB:
            o = host.get(world, {}).get(mib)
            g = got[mib][1]
            print("| %d | %s | %.3f | %s |" % (mib, "%.3f" % o if o else "-", g, ratio(o, g)))
        sys.stdout.flush()
    if torch.cuda.is_available():
        for world in (2, 4):
            got = torch_allreduce(world, "cuda:0")
            print("\n### all_reduce busbw GB/s, %d processes sharing cuda:0 (lectern: device tensors staged "
                  "through Open MPI; torch: gloo on cuda:0 tensors)\n" % world)
            print("| MiB | lectern | torch gloo cuda:0 | lectern / gloo |\n|---:|---:|---:|---:|")
            for mib in SIZES_MIB:
                o = ours_ar.get(world, {}).get(mib) if world in on_gpu else None
                g = got[mib][1]
                print("| %d | %s | %.3f | %s |" % (mib, "%.3f" % o if o else "-", g, ratio(o, g)))
            sys.stdout.flush()

    if torch.cuda.is_available():
        mm = torch_matmul()
        ours_mm = ours_matmul(a.ours_gpu) if a.ours_gpu else {}
        print("\n### matmul float32 (TF32 off) on cuda:0, ms per product\n")
        print("| n | lectern ms | torch ms | lectern TFLOP/s | torch TFLOP/s | lectern / torch time |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n, t in mm.items():
            o = ours_mm.get(n)
            fl = 2.0 * n ** 3 / 1e12
            print("| %d | %s | %.3f | %s | %.1f | %s |" % (
                n, "%.3f" % o if o else "-", t, "%.1f" % (fl / (o * 1e-3)) if o else "-", fl / (t * 1e-3),
                ratio(o, t)))
    else:
        print("\nmatmul: skipped: torch sees no GPU")
    sys.stdout.flush()

    if a.reference:
        if not (a.ours_lecture and os.path.exists(a.reference)):
            print("\nreference lecture: skipped: %s" % ("no --ours-lecture" if not a.ours_lecture else
                                                      "%s is not there" % a.reference))
        else:
            ref, ours, why = run_reference(a.reference, a.ours_lecture)
            print("\n### the whole lecture, CPU only (CUDA_VISIBLE_DEVICES=''), seconds\n")
            print("| lectern lecture_08 | reference lecture_08.py (torch, gloo) | reference / lectern |")
            print("|---:|---:|---:|")
            print("| %s | %s | %s |" % ("%.1f" % ours if ours else "-", "%.1f" % ref if ref else "-",
                                       ratio(ref, ours)))
            if why:
                print("\nreference lecture: %s" % why)
                failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
