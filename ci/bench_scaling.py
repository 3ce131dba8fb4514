"""Multi-GPU scaling: the same GPU pipeline on 1 GPU, then on every GPU of the machine at
once, one process per GPU (as torchrun would run it), each reading its own shard.

    python ci/bench_scaling.py --data /tmp/dlpipe-bench/imagenet-like [--pipeline rn50]

Prints img/s for 1 GPU and for N GPUs (the sum of the processes, timed over the same window)
and the speed-up. Every process, the single-GPU one included, gets the same CPU threads: the
machine's cores divided by its GPU count (what one GPU's process has when all of them train),
so the ratio measures the GPUs, not a CPU share that shrinks as GPUs are added.
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


def worker(kind, root, batch, threads, gpu, shards, iters, warmup, barrier, queue, kw):
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


def run(kind, root, batch, gpus, iters, warmup, threads, kw) -> float:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(gpus), ctx.Queue()
    procs = [
        ctx.Process(
            target=worker,
            args=(kind, root, batch, threads, g, gpus, iters, warmup, barrier, queue, kw),
        )
        for g in range(gpus)
    ]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
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
    args = ap.parse_args()
    kw = {"max_streams": args.max_streams}
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    threads = max(1, (os.cpu_count() or 2) // n)
    ensure_dataset(args.data, args.images)
    one = run(args.pipeline, args.data, args.batch, 1, args.iters, args.warmup, threads, kw)
    what = f"{args.pipeline}, max_streams={args.max_streams}"
    print(f"{what}, 1 GPU, {threads} threads: {one:,.0f} img/s", flush=True)
    if n > 1:
        many = run(args.pipeline, args.data, args.batch, n, args.iters, args.warmup, threads, kw)
        print(
            f"{what}, {n} GPUs, {threads} threads each: {many:,.0f} img/s (x{many / one:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
