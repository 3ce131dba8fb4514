"""Multi-GPU scaling: the same GPU pipeline on 1 GPU, then on every GPU of the machine at
once, one process per GPU (as torchrun would run it), each reading its own shard.

    python ci/bench_scaling.py --data /tmp/dlpipe-bench/imagenet-like [--pipeline rn50]

Prints img/s for 1 GPU and for N GPUs (the sum of the processes, timed over the same window)
and the speed-up. Every process, the single-GPU one included, gets the same CPU share: the
machine's cores divided by its GPU count (what one GPU's process has when all of them train),
as its thread count and, unless ``--no-pin``, as its CPU affinity (process k runs on the k-th
slice of the cores, as a launcher binding each rank near its GPU would). Unpinned, the single
GPU's decoder and reader threads spread over the idle cores the other GPUs' processes would
use, so the ratio then measures a CPU share that shrinks as GPUs are added.
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


def _spin(core: int) -> None:
    os.sched_setaffinity(0, [core])
    while True:
        pass


def run(kind, root, batch, gpus, iters, warmup, threads, kw, slices=0, busy=False) -> float:
    """img/s of ``gpus`` processes; with ``slices``, process g is pinned to core slice g; with
    ``busy``, a spinning process occupies every core of the slices no GPU process uses."""
    ctx = mp.get_context("spawn")
    spinners = [
        ctx.Process(target=_spin, args=(c,), daemon=True)
        for g in range(gpus, slices if busy else 0)
        for c in core_slice(g, slices)
    ]
    for p in spinners:
        p.start()
    barrier, queue = ctx.Barrier(gpus), ctx.Queue()
    procs = [
        ctx.Process(
            target=worker,
            args=(kind, root, batch, threads, g, gpus, iters, warmup, barrier, queue, kw)
            + (core_slice(g, slices) if slices else None,),
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
    one = run(args.pipeline, args.data, args.batch, 1, args.iters, args.warmup, threads, kw, slices)
    pin = "unpinned" if args.no_pin else f"pinned to 1/{n} of the cores"
    what = f"{args.pipeline}, max_streams={args.max_streams}, {pin}"
    print(f"{what}, 1 GPU, {threads} threads: {one:,.0f} img/s", flush=True)
    if args.busy and slices > 1:
        busy = run(
            args.pipeline,
            args.data,
            args.batch,
            1,
            args.iters,
            args.warmup,
            threads,
            kw,
            slices,
            True,
        )
        print(f"{what}, 1 GPU, the other cores spinning: {busy:,.0f} img/s", flush=True)
    if n > 1:
        many = run(
            args.pipeline, args.data, args.batch, n, args.iters, args.warmup, threads, kw, slices
        )
        print(
            f"{what}, {n} GPUs, {threads} threads each: {many:,.0f} img/s (x{many / one:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
