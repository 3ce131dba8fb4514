"""The ``dlpipe`` command (also ``python -m dlpipe``).

dlpipe demo [--batch 32] [--threads N] [--iters 20] [--device auto|cpu|gpu] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _cache_dir() -> str:
    base = os.environ.get("DLPIPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dlpipe"
    )
    os.makedirs(base, exist_ok=True)
    return base


def gpu_available() -> bool:
    """True when CuPy sees a GPU and nvImageCodec imports (without importing them eagerly)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False
        from nvidia import nvimgcodec  # noqa: F401
    except Exception:
        return False
    return True


class Progress:
    """A one-line progress bar on stderr (no dependency)."""

    def __init__(self, total: int, label: str, width: int = 30):
        self.total, self.label, self.width = total, label, width
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, done: int, items: int) -> None:
        elapsed = time.perf_counter() - self.start
        rate = items / elapsed if elapsed > 0 else 0.0
        fill = int(self.width * done / self.total)
        line = f"{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total} {rate:,.0f} img/s"
        if self.tty:
            print("\r" + line, end="" if done < self.total else "\n", file=sys.stderr, flush=True)
        elif done == self.total:
            print(line, file=sys.stderr, flush=True)


def demo(args: argparse.Namespace) -> int:
    from . import fn, pipeline_def
    from .synthetic import make_dataset
    from .visualize import show_images

    root = args.data or make_dataset(
        os.path.join(_cache_dir(), "demo-v1"),
        num_classes=8,
        per_class=64,
        size_range=(240, 480),
        seed=0,
    )
    device = args.device
    if device == "auto":
        device = "gpu" if gpu_available() else "cpu"
    threads = args.threads or os.cpu_count() or 1

    @pipeline_def(batch_size=args.batch, num_threads=threads, device_id=0, seed=42)
    def demo_pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
        return fn.resize(images, size=(args.size, args.size)), labels

    pipe = demo_pipe()
    pipe.build()
    n = pipe.epoch_size("Reader")
    print(f"dataset: {root} ({n} images, {len(os.listdir(root)) - 1} classes)")
    print(
        f"pipeline: file -> decode ({device}) -> resize {args.size}x{args.size}, "
        f"batch {args.batch}, {threads} threads"
    )
    images, labels = pipe.run()  # warm-up; its batch is the one drawn
    os.makedirs(args.out, exist_ok=True)
    grid = os.path.join(args.out, "demo_batch.png")
    show_images(images, grid, columns=8)
    bar = Progress(args.iters, "running")
    start = time.perf_counter()
    for i in range(args.iters):
        out, _ = pipe.run()
        if device == "gpu":
            out.as_cpu()  # wait for the GPU work of this batch
        bar.update(i + 1, (i + 1) * args.batch)
    elapsed = time.perf_counter() - start
    pipe.close()
    print(
        f"{args.iters * args.batch / elapsed:,.0f} img/s over {args.iters} batches "
        f"of {args.batch} ({device})"
    )
    print(
        f"first batch: {len(images)} images of {images.shape()[0]}, labels "
        f"{labels.as_array().ravel()[:8].tolist()}...; grid written to {grid}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dlpipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run file -> decode -> resize on a built-in synthetic dataset")
    p.add_argument("--data", help="a folder of class subfolders (default: a synthetic set)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--out", default=".", help="where to write demo_batch.png")
    args = parser.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    raise SystemExit(main())
