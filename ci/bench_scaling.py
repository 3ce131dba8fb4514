"""Multi-GPU scaling: the same GPU pipeline on 1 GPU, then on every GPU of the machine at
once, one process per GPU (as torchrun would run it), each reading its own shard.

    python ci/bench_scaling.py --data /tmp/dlpipe-bench/imagenet-like [--pipeline rn50]

Prints img/s for 1 GPU and for N GPUs (the sum of the processes, timed over the same window)
and the speed-up. Every process, the single-GPU one included, gets the same CPU share: the
machine's cores divided by its GPU count (what one GPU's process has when all of them train),
as its thread count and, unless ``--no-pin``, as its CPU affinity (process k runs on the k-th
slice of the cores, as a launcher binding each rank near its GPU would). Unpinned, the single
GPU's decoder and reader threads spread over the idle cores the other GPUs' processes would
use, so the ratio then measures a CPU share that shrinks as GPUs are added. ``--gpu-local``
takes each process's slice from the cores of its GPU's NUMA node instead (the PCI device's
``local_cpulist``), as ``numactl --cpunodebind`` near the GPU would.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_gpu import ensure_dataset  # noqa: E402

from dlpipe.cli import build_bench_pipeline  # noqa: E402


def core_slice(k: int, n: int) -> list[int]:
    """The k-th of n equal slices of the cores this process may run on."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // n)
    return cores[k * per : (k + 1) * per] or cores


def _cpulist(text: str) -> list[int]:
    """'0-15,32-47' -> [0, ..., 15, 32, ..., 47]."""
    cores = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return cores


def gpu_local_slice(k: int, n: int) -> list[int]:
    """Process k's cores near GPU k: the cores of its NUMA node (that we may run on), shared
    equally among the GPUs of that node; the k-th plain slice where the kernel does not say."""
    import cupy

    def local(g: int) -> list[int]:
        bus = cupy.cuda.runtime.deviceGetPCIBusId(g).lower()
        try:
            with open(f"/sys/bus/pci/devices/{bus}/local_cpulist") as f:
                cores = set(_cpulist(f.read())) & os.sched_getaffinity(0)
        except (OSError, ValueError):
            return []
        return sorted(cores)

    mine = local(k)
    if not mine:
        return core_slice(k, n)
    peers = [g for g in range(n) if local(g) == mine]  # the GPUs of the same node
    per = max(1, len(mine) // len(peers))
    i = peers.index(k)
    return mine[i * per : (i + 1) * per]


def worker(kind, root, batch, threads, gpu, shards, iters, warmup, barrier, queue, kw, cores):
    if cores:  # before any thread or the read process starts: they inherit it
        os.sched_setaffinity(0, cores)
    pipe = build_bench_pipeline(
        kind,
        root,
        "gpu",
        batch,
        threads,
        seed=gpu,
        device_id=gpu,
        shard_id=gpu,
        num_shards=shards,
        **kw,
    )
    for _ in range(warmup):
        pipe.run()[0].as_cpu()
    barrier.wait()
    start = time.perf_counter()
    for _ in range(iters):
        out = pipe.run()[0]
    out.as_cpu()  # the last batch is finished on the GPU
    queue.put((gpu, iters * batch, start, time.perf_counter()))
    pipe.close()


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(out)


def _spin(core: int) -> None:
    os.sched_setaffinity(0, [core])
    while True:
        pass


def run(
    kind, root, batch, gpus, iters, warmup, threads, kw, slices=0, busy=False, local=False
) -> float:
    """img/s of ``gpus`` processes; with ``slices``, process g is pinned to core slice g (of
    its GPU's node with ``local``); with ``busy``, a spinning process occupies every core of the
    slices no GPU process uses."""
    pick = gpu_local_slice if local else core_slice
    ctx = mp.get_context("spawn")
    spinners = [
        ctx.Process(target=_spin, args=(c,), daemon=True)
        for g in range(gpus, slices if busy else 0)
        for c in pick(g, slices)
    ]
    for p in spinners:
        p.start()
    barrier, queue = ctx.Barrier(gpus), ctx.Queue()
    procs = [
        ctx.Process(
            target=worker,
            args=(kind, root, batch, threads, g, gpus, iters, warmup, barrier, queue, kw)
            + (pick(g, slices) if slices else None,),
        )
        for g in range(gpus)
    ]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    for p in spinners:
        p.terminate()
        p.join()
    images = sum(r[1] for r in results)
    window = max(r[3] for r in results) - min(r[2] for r in results)
    return images / window


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/dlpipe-bench/imagenet-like")
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--pipeline", choices=("seed640", "rn50"), default="rn50")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-streams", type=int, default=-1, help="Pipeline(max_streams=)")
    ap.add_argument("--no-pin", action="store_true", help="no CPU affinity per process")
    ap.add_argument(
        "--gpu-local", action="store_true", help="pin each process near its GPU (NUMA node)"
    )
    ap.add_argument(
        "--busy",
        action="store_true",
        help="also time 1 GPU with the other GPUs' cores kept busy by spinning processes "
        "(do the processes contend for the host, not for the cores they were given?)",
    )
    args = ap.parse_args()
    kw = {"max_streams": args.max_streams}
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    threads = max(1, (os.cpu_count() or 2) // n)
    slices = 0 if args.no_pin else n
    ensure_dataset(args.data, args.images)
    loc = args.gpu_local
    if loc:
        print("cores per GPU:", {g: _ranges(gpu_local_slice(g, n)) for g in range(n)}, flush=True)

    def timed(gpus: int, busy: bool = False) -> float:
        return run(
            args.pipeline,
            args.data,
            args.batch,
            gpus,
            args.iters,
            args.warmup,
            threads,
            kw,
            slices,
            busy,
            loc,
        )

    one = timed(1)
    pin = "unpinned" if args.no_pin else f"pinned to 1/{n} of the cores"
    if loc and slices:
        pin += ", near the GPU"
    what = f"{args.pipeline}, max_streams={args.max_streams}, {pin}"
    print(f"{what}, 1 GPU, {threads} threads: {one:,.0f} img/s", flush=True)
    if args.busy and slices > 1:
        busy = timed(1, busy=True)
        print(f"{what}, 1 GPU, the other cores spinning: {busy:,.0f} img/s", flush=True)
    if n > 1:
        many = timed(n)
        print(
            f"{what}, {n} GPUs, {threads} threads each: {many:,.0f} img/s (x{many / one:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
