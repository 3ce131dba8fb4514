"""GPU benchmark: dlpipe's GPU pipelines against nvImageCodec's own batched decode and
torchvision's GPU decode, on one ImageNet-like synthetic set, in one run.

    python ci/bench_gpu.py --data /tmp/dlpipe-bench/imagenet-like [--batch 128 --threads 16]

(a) file -> mixed decode -> resize 640x640; (b) the ResNet-50 training pipeline:
image_random_crop (mixed) -> resize 224 -> crop_mirror_normalize (coin-flip mirror, float16,
CHW); (c) file -> mixed decode alone, and nvImageCodec decoding the same files (already in
memory) with the same backends; (d) torchvision.io.decode_jpeg(device="cuda") batched + resize
640x640 (bytes already in memory). Each line: warm-up batches, then ``--iters`` timed batches;
a batch counts once its CUDA event has passed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from dlpipe.cli import build_bench_pipeline
from dlpipe.synthetic import make_dataset


def _make_class(job):
    root, c, per_class = job
    tmp = os.path.join(root, f".part{c}")
    make_dataset(
        tmp, num_classes=1, per_class=per_class, size_range=(400, 640), seed=1000 + c, num_threads=1
    )
    dst = os.path.join(root, f"class_{c:03d}")
    if not os.path.exists(dst):
        os.rename(os.path.join(tmp, "class_000"), dst)
    shutil.rmtree(tmp, ignore_errors=True)


def ensure_dataset(root: str, images: int) -> None:
    """20 class folders of ImageNet-like JPEGs, one process per class (all cores)."""
    if os.path.exists(os.path.join(root, ".complete")):
        return
    os.makedirs(root, exist_ok=True)
    per_class = images // 20
    with ProcessPoolExecutor(min(20, os.cpu_count() or 1)) as pool:
        list(pool.map(_make_class, [(root, c, per_class) for c in range(20)]))
    open(os.path.join(root, ".complete"), "w").close()


def list_files(root: str) -> list[str]:
    out = []
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d)
        if os.path.isdir(p) and not d.startswith("."):
            out += [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith(".jpg")]
    return out


def _gpu_used() -> int:
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return total - free


MEM: dict = {}
SHOW_STATS = False  # --stats
# (pipeline keywords, description) measured beside each default line; the default decodes 3
# iterations at once (max_streams=-1), each in a decode process, with hw_decoder_load=0.9
VARIANTS = (
    ({"read_process": False}, "files read in the pipeline's process (DLPIPE_READ_PROCESS=0)"),
    ({"decode_process": False}, "decoded in the pipeline's process (DLPIPE_DECODE_PROCESS=0)"),
    ({"max_streams": 1}, "decoding one iteration at a time (max_streams=1)"),
    ({"max_streams": 3}, "2 decode lanes (max_streams=3)"),
)


def time_pipe(pipe, batch: int, iters: int, warmup: int, mem_key: str | None = None) -> float:
    """img/s over ``iters`` batches after ``warmup``; with ``mem_key``, also the device memory
    in use (all allocators) at the start, its peak, and its value over the last batches."""
    used = []

    def step():
        outs = pipe.run()
        ev = getattr(outs[0], "_event", None)
        if ev is not None:
            ev.synchronize()  # the consumer gets the batch only once it is ready
        if mem_key:
            used.append(_gpu_used())
        return outs

    base = _gpu_used()
    for _ in range(warmup):
        outs = step()
    start = time.perf_counter()
    for _ in range(iters):
        outs = step()
    rate = iters * batch / (time.perf_counter() - start)
    if SHOW_STATS:  # host ms per batch: each operator, each stage
        st = pipe.stats()
        ops = ", ".join(
            f"{k} {v['total_s'] * 1e3 / max(1, st['batches']):.2f}"
            for k, v in st["operators"].items()
        )
        stages = ", ".join(f"{k} {v['per_iteration_ms']:.2f}" for k, v in st["stages"].items())
        print(f"    host ms/batch: operators: {ops}; stages: {stages}", flush=True)
    if mem_key and mem_key not in MEM:  # the first run, before other pipelines' leftovers
        out_bytes = (
            sum(int(np.prod(s)) for s in outs[0].shape())
            * np.dtype(str(outs[0].as_cpu().at(0).dtype)).itemsize
        )
        k = max(1, len(used) // 5)
        MEM[mem_key] = {
            "before_pipeline_MB": base >> 20,
            "peak_MB": max(used) >> 20,
            "first_fifth_max_MB": max(used[:k]) >> 20,
            "last_fifth_max_MB": max(used[-k:]) >> 20,
            "output_batch_MB": out_bytes >> 20,
        }
    pipe.close()
    return rate


def seed_pipe(root, batch, threads, size, decode_only=False, **kw):
    name = "decode" if decode_only else "seed640"
    return build_bench_pipeline(name, root, "gpu", batch, threads, seed=0, size=size, **kw)


def rn50_pipe(root, batch, threads, **kw):
    return build_bench_pipeline("rn50", root, "gpu", batch, threads, seed=0, **kw)


def time_nvimgcodec(files, batch, iters, warmup, hw_load=0.9, threads=0, start=None):
    """nvImageCodec's own batched decode loop (``threads`` CPU threads, 0 for its default of
    every core); with ``start`` (a barrier), the timing starts when every party is ready."""
    import cupy
    from nvidia import nvimgcodec as nvi

    blobs = [np.fromfile(f, np.uint8) for f in files]
    kinds = [] if hw_load <= 0 else [(nvi.BackendKind.HW_GPU_ONLY, min(hw_load, 1.0))]
    if hw_load < 1:  # 1: the hardware engines alone
        kinds += [(nvi.BackendKind.HYBRID_CPU_GPU, 1.0), (nvi.BackendKind.GPU_ONLY, 1.0)]
    dec = nvi.Decoder(
        device_id=0,
        max_num_cpu_threads=threads,
        backends=[nvi.Backend(k, load_hint=h) for k, h in kinds],
    )
    params = nvi.DecodeParams(
        apply_exif_orientation=True,
        color_spec=nvi.ColorSpec.SRGB,
        sample_format=nvi.SampleFormat.I_RGB,
    )
    stream = cupy.cuda.Stream(non_blocking=True)
    pos = 0

    def step():
        nonlocal pos
        if pos + batch > len(blobs):
            pos = 0
        chunk = blobs[pos : pos + batch]
        pos += batch
        imgs = dec.decode([nvi.CodeStream(b) for b in chunk], params=params, cuda_stream=stream.ptr)
        stream.synchronize()
        return imgs

    for _ in range(warmup):
        step()
    if start is not None:
        start.wait()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    return iters * batch / (time.perf_counter() - t0)


def time_torchvision(files, batch, iters, warmup, size):
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg
    except ImportError:
        return None
    del torchvision
    blobs = [torch.from_numpy(np.fromfile(f, np.uint8)) for f in files]
    pos = 0

    def step():
        nonlocal pos
        if pos + batch > len(blobs):
            pos = 0
        chunk = blobs[pos : pos + batch]
        pos += batch
        imgs = decode_jpeg(chunk, device="cuda")
        out = torch.stack(
            [
                torch.nn.functional.interpolate(
                    im[None].float(), size=(size, size), mode="bilinear", antialias=True
                )[0]
                for im in imgs
            ]
        ).to(torch.uint8)
        torch.cuda.synchronize()
        return out

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return iters * batch / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/dlpipe-bench/imagenet-like")
    ap.add_argument("--images", type=int, default=20000, help="dataset size (20 classes)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--only", default="a,b,c,d")
    ap.add_argument(
        "--profile",
        choices=("ceiling",),
        help="nvImageCodec's own loop by hardware share, in 2 threads and in 2 processes, "
        "then (a) and (b) at each hw_decoder_load",
    )
    ap.add_argument(
        "--json",
        default=os.environ.get("OUT", "") and os.path.join(os.environ["OUT"], "bench_gpu.json"),
    )
    ap.add_argument("--stats", action="store_true", help="print host time per operator/stage")
    ap.add_argument("--repeat", type=int, default=3, help="runs per line (median reported)")
    ap.add_argument(
        "--no-variants", action="store_true", help="only the main lines of (a), (b) and (c)"
    )
    ap.add_argument(
        "--switch-interval",
        type=float,
        help="also time (a) and (b) with this sys.setswitchinterval (a GIL diagnostic)",
    )
    args = ap.parse_args()
    global SHOW_STATS
    SHOW_STATS = args.stats
    import cupy

    t0 = time.perf_counter()
    ensure_dataset(args.data, args.images)
    files = list_files(args.data)
    print(f"dataset {args.data}: {len(files)} JPEGs ({time.perf_counter() - t0:.0f} s)", flush=True)
    b, th, it = args.batch, args.threads, args.iters
    if args.profile == "ceiling":
        return profile_ceiling(args.data, files, b, th, it)
    only = set(args.only.split(","))
    measured: dict[str, dict] = {}  # name -> {"rates": [...], "target": ...}, in order

    def add(name, rate, target=None):
        row = measured.setdefault(name, {"rates": [], "target": target})
        row["rates"].append(rate)
        print(f"  {name}: {'n/a' if rate is None else f'{rate:,.0f} img/s'}", flush=True)

    # Every line --repeat times, the whole set in turn (a slow spell of a shared machine then
    # spreads over all lines instead of sinking one); the tables give the median.
    for _ in range(args.repeat):
        measure_once(args, only, files, add)
    rows = []
    for name, row in measured.items():
        rates = [r for r in row["rates"] if r is not None]
        rows.append(
            {
                "pipeline": name,
                "img_s": round(float(np.median(rates))) if rates else None,
                "runs": [round(r) for r in rates],
                "target": row["target"],
            }
        )
    nv = next((r["img_s"] for r in rows if r["pipeline"].startswith("(c) nvImageCodec")), None)
    for r in rows:
        if nv and r["img_s"] and r["pipeline"].startswith(("(c) dlpipe", "(c) the")):
            r["share_of_nvimgcodec"] = round(r["img_s"] / nv, 3)
    dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    machine = f"{dev}, {os.cpu_count()} cores, {platform.node()}"
    print(
        f"\nGPU benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}, "
        f"batch {b}, {th} threads, {it} timed batches, {args.repeat} runs per line"
    )
    print("| pipeline | img/s (median) | runs | target |\n|---|---|---|---|")
    for r in rows:
        rate = "n/a" if r["img_s"] is None else f"{r['img_s']:,}"
        if "share_of_nvimgcodec" in r:
            rate += f" ({r['share_of_nvimgcodec']:.0%} of nvImageCodec)"
        tgt = f">= {r['target']:,}" if r["target"] else ""
        runs = " / ".join(f"{v:,}" for v in r["runs"])
        print(f"| {r['pipeline']} | {rate} | {runs} | {tgt} |")
    for k, v in MEM.items():
        print(f"device memory during ({k}), all allocators: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": machine, "batch": b, "threads": th, "rows": rows, "memory": MEM},
                f,
                indent=1,
            )


def measure_once(args, only: set, files: list[str], add) -> None:
    """One run of every selected line, each reported through ``add(name, rate, target)``."""
    b, th, it, wu = args.batch, args.threads, args.iters, args.warmup
    variants = () if args.no_variants else VARIANTS
    if "a" in only:
        add(
            f"(a) dlpipe file -> mixed decode -> resize 640x640, {th} threads",
            time_pipe(seed_pipe(args.data, b, th, 640), b, it, wu, "a"),
            20000,
        )
        for kw, what in variants:
            add(
                f"(a) the same, {what}",
                time_pipe(seed_pipe(args.data, b, th, 640, **kw), b, it, wu, f"a, {what}"),
            )
    if "b" in only:
        add(
            "(b) dlpipe ResNet-50 train: random-crop decode -> resize 224 -> CMN fp16 CHW",
            time_pipe(rn50_pipe(args.data, b, th), b, it, wu),
            17000,
        )
        for kw, what in variants:
            add(f"(b) the same, {what}", time_pipe(rn50_pipe(args.data, b, th, **kw), b, it, wu))
    if "c" in only:
        add(
            f"(c) dlpipe file -> mixed decode, {th} threads",
            time_pipe(seed_pipe(args.data, b, th, 0, decode_only=True), b, it, wu),
        )
        for kw, what in variants:
            add(
                f"(c) the same, {what}",
                time_pipe(seed_pipe(args.data, b, th, 0, True, **kw), b, it, wu),
            )
        add(
            "(c) nvImageCodec batched decode (HW + hybrid, bytes in memory)",
            time_nvimgcodec(files, b, it, wu),
        )
    if args.switch_interval:
        import sys

        default = sys.getswitchinterval()
        sys.setswitchinterval(args.switch_interval)
        si = f"GIL switch interval {args.switch_interval * 1e3:g} ms (diagnostic)"
        add(f"(a) the same, {si}", time_pipe(seed_pipe(args.data, b, th, 640), b, it, wu))
        add(f"(b) the same, {si}", time_pipe(rn50_pipe(args.data, b, th), b, it, wu))
        sys.setswitchinterval(default)
    if "d" in only:
        add(
            "(d) torchvision.io.decode_jpeg(cuda) batched + resize 640x640 (bytes in memory)",
            time_torchvision(files, b, it, wu, 640),
        )


def _ceiling_worker(job):
    files, batch, iters, hw_load, threads, start = job
    return time_nvimgcodec(files, batch, iters, 5, hw_load, threads, start)


def profile_ceiling(root: str, files: list[str], batch: int, threads: int, iters: int) -> None:
    """Where the decode ceiling is: nvImageCodec's own loop (bytes in memory) with each share
    of the batch on the hardware engines; two loops at once in two threads of one process and
    in two processes (does the GPU have room that one host loop leaves?); then (a) and (b)
    with each ``hw_decoder_load``."""
    import multiprocessing as mp
    import threading

    sub = files[: batch * 16]
    for hw, th in (
        (1.0, 0),
        (0.0, threads),
        (0.9, threads),
        (0.8, threads),
        (0.7, threads),
        (0.6, threads),
        (0.9, threads // 2),
    ):
        rate = time_nvimgcodec(sub, batch, iters // 2, 5, hw, th)
        print(f"  own loop, hw share {hw:.1f}, {th} threads: {rate:,.0f} img/s", flush=True)
    for hw in (0.9, 0.7):
        half = threads // 2
        bar = threading.Barrier(2)
        rates = [0.0, 0.0]

        def run(k, hw=hw, bar=bar, rates=rates, half=half):
            rates[k] = time_nvimgcodec(sub[k::2], batch, iters // 2, 5, hw, half, bar)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        print(
            f"  two loops in 2 threads, hw share {hw}, {half} threads each: "
            f"{rates[0]:,.0f} + {rates[1]:,.0f} = {sum(rates):,.0f} img/s",
            flush=True,
        )
        ctx = mp.get_context("spawn")
        with ctx.Manager() as m:
            bar = m.Barrier(2)
            with ctx.Pool(2) as pool:
                rates = pool.map(
                    _ceiling_worker,
                    [(sub[k::2], batch, iters // 2, hw, half, bar) for k in range(2)],
                )
        print(
            f"  two loops in 2 processes, hw share {hw}, {half} threads each: "
            f"{rates[0]:,.0f} + {rates[1]:,.0f} = {sum(rates):,.0f} img/s",
            flush=True,
        )
    for hw in (0.9, 0.8, 0.7, 0.6):
        a = time_pipe(seed_pipe(root, batch, threads, 640, hw_decoder_load=hw), batch, iters, 10)
        b = time_pipe(rn50_pipe(root, batch, threads, hw_decoder_load=hw), batch, iters, 10)
        print(f"  hw_decoder_load={hw}: (a) {a:,.0f} img/s, (b) {b:,.0f} img/s", flush=True)


if __name__ == "__main__":
    main()
