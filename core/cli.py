"""The ``dlpipe`` command (also ``python -m dlpipe``).

dlpipe demo [--batch 32] [--threads N] [--iters 20] [--device auto|cpu|gpu] [--out DIR]
dlpipe bench DATA_DIR [--device cpu|gpu] [--batch 128] [--threads N] [--pipeline seed640|rn50]
             [--iters 30] [--out DIR] [--json FILE] [--trace FILE] [--on-error raise|skip]
             [--synthetic N]
dlpipe inspect DATA_DIR [--shards N] [--batch B] [--check] [--json FILE]
dlpipe make-tfrecord-index TFRECORD [INDEX]
dlpipe make-wds-index TAR [INDEX]
dlpipe make-rec-index REC [INDEX]
"""

from __future__ import annotations

import argparse
import json
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

    def __init__(
        self,
        total: int,
        label: str,
        width: int = 30,
        unit: str = "img/s",
        start: float | None = None,
    ):
        self.total, self.label, self.width, self.unit = total, label, width, unit
        self.start = time.perf_counter() if start is None else start
        self.tty = sys.stderr.isatty()

    def update(self, done: int, items: int) -> None:
        elapsed = time.perf_counter() - self.start
        rate = items / elapsed if elapsed > 0 else 0.0
        fill = int(self.width * done / self.total)
        line = f"{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total} {rate:,.0f} {self.unit}"
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
    classes = sum(os.path.isdir(os.path.join(root, d)) for d in os.listdir(root))
    print(f"dataset: {root} ({n} images, {classes} classes)")
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
        _sync(pipe.run())
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


def _sync(outputs) -> None:
    """Wait for the GPU work of a pipeline's outputs (a batch counts once it is usable)."""
    for out in outputs:
        if out.__dlpack_device__()[0] != 1 and len(out):  # a GPU batch
            out.at(0)  # waits for the batch's GPU work, without a copy


MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
PIPELINES = {
    "seed640": "file -> decode -> resize 640x640",
    "rn50": "file -> image_random_crop -> resize 224 -> crop_mirror_normalize (flip, fp16, CHW)",
    "decode": "file -> decode",
}


def build_bench_pipeline(
    name: str,
    root: str,
    device: str,
    batch: int,
    threads: int,
    seed: int = 42,
    on_error: str = "raise",
    *,
    size: int = 640,
    device_id: int = 0,
    shard_id: int = 0,
    num_shards: int = 1,
    hw_decoder_load: float | None = None,
    read_process: bool = True,
    decode_process: bool = True,
    **pipeline_kwargs,
):
    """The standard pipelines of ``dlpipe bench`` and ``ci/bench_*.py`` (see :data:`PIPELINES`).

    ``device="gpu"`` decodes with ``device="mixed"`` on GPU ``device_id``; the operators after
    it then run on the GPU. ``device="cpu"`` builds a CPU-only graph (``device_id=None``).
    ``on_error`` goes to the decoder (``"skip"`` replaces corrupt images); ``size`` is seed640's
    output size; ``shard_id``/``num_shards`` shard the reader (one pipeline per GPU); other
    keywords go to the Pipeline (``max_streams``, ``prefetch_queue_depth``, ...);
    ``hw_decoder_load`` to the mixed decoder (its default when None); ``read_process=False``
    reads the files in this process and ``decode_process=False`` decodes in it (the pipeline's
    ``RuntimeOptions``; the ``DLPIPE_*`` variables can turn them off too).
    """
    from . import fn, pipeline_def, types
    from .options import RuntimeOptions

    decode = "mixed" if device == "gpu" else "cpu"
    dec_kw = {"on_error": on_error}
    if hw_decoder_load is not None and device == "gpu":
        dec_kw["hw_decoder_load"] = hw_decoder_load

    @pipeline_def(
        batch_size=batch,
        num_threads=threads,
        device_id=device_id if device == "gpu" else None,
        seed=seed,
    )
    def bench_pipe():
        jpegs, labels = fn.readers.file(
            file_root=root,
            random_shuffle=True,
            shard_id=shard_id,
            num_shards=num_shards,
            name="Reader",
        )
        if name in ("seed640", "decode"):
            images = fn.decoders.image(jpegs, device=decode, **dec_kw)
            if name == "decode":
                return images, labels
            return fn.resize(images, size=(size, size)), labels
        images = fn.decoders.image_random_crop(jpegs, device=decode, **dec_kw)
        images = fn.resize(images, size=(224, 224))
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT16,
            output_layout="CHW",
            mean=MEAN,
            std=STD,
            mirror=fn.random.coin_flip(),
        )
        return images, labels

    runtime = RuntimeOptions.from_env()
    runtime = runtime.replace(
        read_process=runtime.read_process and read_process,
        decode_process=runtime.decode_process and decode_process,
    )
    return bench_pipe(runtime=runtime, **pipeline_kwargs)


def _stats_report(stats) -> tuple[list[tuple[str, str]], list[str], dict[str, float]]:
    """``pipe.stats()`` as (rows for the main table, lines of the operator table, stage ms per
    batch). A structure other than the profiler's is dumped as it is."""
    if not isinstance(stats, dict) or "stages" not in stats or "operators" not in stats:
        return [], ["pipe.stats():"] + ["  " + x for x in _format_stats(stats)], {}
    rows, stage_ms = [], {}
    for stage, v in stats["stages"].items():
        label = f"{stage.upper() if stage in ('cpu', 'gpu') else stage} stage"
        stage_ms[label] = ms = float(v.get("per_iteration_ms", 0.0))
        rows.append((label, f"{ms:,.1f} ms per batch (stages overlap)"))
    if "consumer_wait_ms_per_batch" in stats:
        rows.append(("consumer wait (stats)", f"{stats['consumer_wait_ms_per_batch']:,.1f} ms"))
    lines = []
    ops = stats["operators"]
    if ops:
        total = sum(float(o.get("total_s", 0.0)) for o in ops.values()) or 1.0
        width = max(12, *(len(name) for name in ops))
        lines.append(
            f"{'operator':<{width}}  {'schema':<28} {'device':<6} {'us/sample':>10} {'share':>6}"
        )
        for name, o in ops.items():
            lines.append(
                f"{name:<{width}}  {str(o.get('schema', '')):<28} {str(o.get('device', '')):<6} "
                f"{float(o.get('per_sample_us', 0.0)):>10,.1f} "
                f"{100 * float(o.get('total_s', 0.0)) / total:>5.0f}%"
            )
        lines.append("(operator time is summed over the worker threads)")
    if stats.get("verdict"):
        lines.append(f"verdict: {stats['verdict']}")
    return rows, lines, stage_ms


def _format_stats(stats) -> list[str]:
    """``pipe.stats()`` as lines: a string as is, a mapping as ``key: value`` (nested ones
    indented), anything else through ``str``."""
    if isinstance(stats, str):
        return stats.splitlines()
    if hasattr(stats, "items"):
        lines = []
        for k, v in stats.items():
            if hasattr(v, "items"):
                lines.append(f"{k}:")
                lines += ["  " + x for x in _format_stats(v)]
            elif isinstance(v, float):
                lines.append(f"{k}: {v:,.3f}")
            else:
                lines.append(f"{k}: {v}")
        return lines
    return str(stats).splitlines()


def bench(args: argparse.Namespace) -> int:
    from .errors import DlpipeError

    try:
        return _bench(args)
    except DlpipeError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        if "decod" in str(e):
            print(
                "hint: `dlpipe inspect DATA_DIR --check` lists every corrupt file; "
                "`--on-error skip` benchmarks around them",
                file=sys.stderr,
            )
        return 1


def _bench(args: argparse.Namespace) -> int:
    from .readers.file import KNOWN_EXTENSIONS, list_file_root
    from .synthetic import make_dataset
    from .visualize import show_images

    root = args.data_dir
    if args.synthetic:
        make_dataset(root, num_classes=8, per_class=-(-args.synthetic // 8), seed=0)
    if not os.path.isdir(root):
        print(
            f"error: DATA_DIR={root!r} is not a directory (give a folder of class subfolders, "
            "or --synthetic N to write N synthetic JPEGs there first)",
            file=sys.stderr,
        )
        return 2
    if args.device == "gpu" and not gpu_available():
        print(
            "error: --device gpu needs a CUDA GPU with CuPy and nvImageCodec: "
            'pip install "dlpipe[cuda12]" (or [cuda13])',
            file=sys.stderr,
        )
        return 2
    files, _ = list_file_root(root, list(KNOWN_EXTENSIONS), None, False)
    sizes = {f: os.path.getsize(os.path.join(root, f)) for f in files}
    threads = args.threads or os.cpu_count() or 1
    pipe = build_bench_pipeline(
        args.pipeline, root, args.device, args.batch, threads, on_error=args.on_error
    )
    pipe.build()
    print(f"dataset: {root} ({len(files):,} files, {sum(sizes.values()) / 1e6:,.1f} MB)")
    print(
        f"pipeline {args.pipeline}: {PIPELINES[args.pipeline]}; device {args.device}, "
        f"batch {args.batch}, {threads} threads"
    )

    t0 = time.perf_counter()
    first = pipe.run()  # warm-up: thread pool, allocator, decoder; its batch is drawn
    _sync(first)
    for _ in range(max(0, args.warmup - 1)):
        _sync(pipe.run())
    warmup_s = time.perf_counter() - t0
    has_stats = callable(getattr(pipe, "stats", None))
    if has_stats:
        try:
            pipe.stats(reset=True)  # leave the warm-up out
        except TypeError:
            pass
    bar = Progress(args.iters, "bench")
    in_run = 0.0
    encoded = 0
    start = time.perf_counter()
    for i in range(args.iters):
        t = time.perf_counter()
        outputs = pipe.run()
        _sync(outputs)
        in_run += time.perf_counter() - t
        labels = outputs[1]
        encoded += sum(sizes.get(labels.source_info(k), 0) for k in range(len(labels)))
        bar.update(i + 1, (i + 1) * args.batch)
    total = time.perf_counter() - start
    n = args.iters * args.batch

    rows = [
        ("images/s", f"{n / total:,.0f}"),
        ("encoded MB/s", f"{encoded / total / 1e6:,.1f}"),
        ("batches", f"{args.iters} x {args.batch} (after {args.warmup} warm-up, {warmup_s:.2f} s)"),
        ("wall time per batch", f"{1000 * total / args.iters:,.1f} ms"),
        (
            "waiting in run()",
            f"{1000 * in_run / args.iters:,.1f} ms per batch ({100 * in_run / total:.0f}% of "
            "the time)",
        ),
    ]
    stats = pipe.stats() if has_stats else None
    extra_rows, op_lines, stage_ms = _stats_report(stats) if has_stats else ([], [], {})
    rows += extra_rows
    width = max(len(k) for k, _ in rows)
    print(f"\n{'metric':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if op_lines:
        print()
        print("\n".join(op_lines))
    if args.trace and callable(getattr(pipe, "trace", None)):
        pipe.trace(args.trace)
        print(f"trace written to {args.trace} (open it at https://ui.perfetto.dev)")
    result = {
        "pipeline": args.pipeline,
        "device": args.device,
        "batch": args.batch,
        "threads": threads,
        "iters": args.iters,
        "img_s": n / total,
        "encoded_bytes": encoded,
        "encoded_mb_s": encoded / total / 1e6,
        "ms_per_batch": 1000 * total / args.iters,
        "wait_in_run_ms_per_batch": 1000 * in_run / args.iters,
        "stages_ms_per_batch": stage_ms,
        "stats": stats,
    }
    pipe.close()
    os.makedirs(args.out, exist_ok=True)
    grid = os.path.join(args.out, f"bench_{args.pipeline}.png")
    images = first[0]
    if args.pipeline == "rn50":
        show_images(images, grid, columns=8, max_images=32, mean=MEAN, std=STD)
    else:
        show_images(images, grid, columns=8, max_images=32)
    print(f"\nfirst batch drawn to {grid}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def inspect_cmd(args: argparse.Namespace) -> int:
    from .errors import DlpipeError
    from .inspect_data import format_report, inspect_dataset

    bar = None
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            label = "decoding" if args.check else "reading headers"
            bar = Progress(total, label, unit="files/s", start=start)
        bar.update(done, done)

    try:
        report = inspect_dataset(
            args.data_dir,
            shards=args.shards,
            batch=args.batch,
            check=args.check,
            threads=args.threads or None,
            progress=progress,
        )
    except DlpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if args.check and report["corrupt"] else 0


_TOOLS = {
    "make-tfrecord-index": ("tfrecord2idx", "write a TFRecord index (DALI's tfrecord2idx)"),
    "make-wds-index": ("wds2idx", "write a WebDataset tar index (DALI's wds2idx)"),
    "make-rec-index": ("rec2idx", "write an MXNet RecordIO index (DALI's rec2idx)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _TOOLS:  # the tools parse their own arguments
        import importlib

        module = importlib.import_module(f".tools.{_TOOLS[argv[0]][0]}", __package__)
        return module.main(argv[1:])
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

    p = sub.add_parser("bench", help="time a standard pipeline on a folder of class subfolders")
    p.add_argument("data_dir", metavar="DATA_DIR", help="a folder of class subfolders")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--pipeline", choices=tuple(PIPELINES), default="seed640")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.add_argument("--iters", type=int, default=30, help="timed batches")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches first")
    p.add_argument("--out", default=".", help="where to write bench_<pipeline>.png")
    p.add_argument("--json", help="also write the results there")
    p.add_argument("--trace", help="also write a Chrome/Perfetto trace there (pipe.trace)")
    p.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="corrupt images: stop (default) or skip them (decoder on_error)",
    )
    p.add_argument(
        "--synthetic", type=int, default=0, metavar="N", help="first write N synthetic JPEGs"
    )

    p = sub.add_parser("inspect", help="files, classes, formats, sizes, corrupt files, shards")
    p.add_argument("data_dir", metavar="DATA_DIR", help="a folder of class subfolders")
    p.add_argument("--shards", type=int, default=1, help="number of ranks (num_shards)")
    p.add_argument("--batch", type=int, default=256, help="batch size per rank")
    p.add_argument("--check", action="store_true", help="decode every file (exit 1 if any fail)")
    p.add_argument("--threads", type=int, default=0, help="threads (default: all cores)")
    p.add_argument("--json", help="also write the report there")

    for name, (_, help_) in _TOOLS.items():
        sub.add_parser(name, help=help_, add_help=False)
    args = parser.parse_args(argv)
    for name in ("batch", "iters", "threads", "shards", "synthetic", "warmup"):
        value = getattr(args, name, None)
        low = 0 if name in ("threads", "synthetic", "warmup") else 1
        if value is not None and value < low:
            parser.error(f"--{name}={value} must be >= {low}")
    if args.command == "bench":
        return bench(args)
    if args.command == "inspect":
        return inspect_cmd(args)
    return demo(args)


if __name__ == "__main__":
    raise SystemExit(main())
