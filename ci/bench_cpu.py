"""CPU benchmark: the seed pipeline (file -> CPU decode -> resize 640x640), img/s per thread
count, and a torchvision DataLoader peer when torchvision is installed.

    python ci/bench_cpu.py --data /tmp/dlpipe-bench/imagenet-like [--threads 1,2,4,8,16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_gpu import ensure_dataset  # noqa: E402

from dlpipe.cli import build_bench_pipeline  # noqa: E402


def time_dlpipe(root: str, batch: int, threads: int, size: int, seconds: float) -> float:
    pipe = build_bench_pipeline("seed640", root, "cpu", batch, threads, seed=0, size=size)
    for _ in range(2):  # warm-up (thread pool, page cache, allocator)
        pipe.run()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n < 3:
        images, _ = pipe.run()
        images.as_tensor()  # what a training loop takes: one (N, H, W, C) array
        n += 1
    rate = n * batch / (time.perf_counter() - start)
    pipe.close()
    return rate


def time_torchvision(root: str, batch: int, workers: int, size: int, batches: int) -> float | None:
    try:
        import torch
        from torchvision import datasets, transforms
    except ImportError:
        return None
    tf = transforms.Compose([transforms.Resize((size, size)), transforms.PILToTensor()])
    loader = torch.utils.data.DataLoader(
        datasets.ImageFolder(root, tf),
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
    )
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/dlpipe-bench/imagenet-like")
    ap.add_argument("--images", type=int, default=20000, help="dataset size (20 classes)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--threads", default="")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed run per configuration")
    ap.add_argument("--peer", action="store_true", help="also time torchvision's DataLoader")
    ap.add_argument(
        "--json",
        default=os.environ.get("OUT", "") and os.path.join(os.environ["OUT"], "bench_cpu.json"),
    )
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    ensure_dataset(args.data, args.images)  # the same set as bench_gpu.py, whichever runs first
    print(f"dataset {args.data}: {args.images} JPEGs ready in {time.perf_counter() - t0:.0f} s")
    counts = (
        [int(t) for t in args.threads.split(",")]
        if args.threads
        else sorted({t for t in (1, 2, 4, 8, 16, cores) if t <= cores})
    )
    rows = []
    for t in counts:
        rate = time_dlpipe(args.data, args.batch, t, args.size, args.seconds)
        rows.append(
            {
                "pipeline": f"dlpipe CPU, file->decode->resize {args.size}",
                "threads": t,
                "img_s": round(rate),
            }
        )
        print(f"  threads={t:3d}  {rate:9,.0f} img/s", flush=True)
    if args.peer:
        rate = time_torchvision(args.data, args.batch, cores, args.size, 20)
        if rate is not None:
            rows.append(
                {
                    "pipeline": f"torchvision ImageFolder+PIL DataLoader, resize {args.size}",
                    "threads": cores,
                    "img_s": round(rate),
                }
            )
    machine = f"{platform.node()} ({cores} cores, {platform.processor() or platform.machine()})"
    print(f"\nCPU benchmark, {time.strftime('%Y-%m-%d')}, {machine}, batch {args.batch}")
    print("| pipeline | threads/workers | img/s |\n|---|---|---|")
    for r in rows:
        print(f"| {r['pipeline']} | {r['threads']} | {r['img_s']:,} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "batch": args.batch, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
