"""Side by side with NVIDIA DALI, operator by operator: the GPU kernels of the heaviest
geometry and filter operators (gaussian_blur, warp_affine, rotate, slice, normalize), each in
a pipeline of its own on a batch that is already on the GPU (issue 20).

    python3 ci/bench_dali_ops.py [--rounds 2] [--only blur,rotate] [--json out.json]
    python3 ci/bench_dali_ops.py --cpu      # the same ops on the CPU, tiny data (no GPU needed)

Each cell is one pipeline, the same user code for both libraries (imports switched):
``fn.external_source(source=..., device="gpu", batch=True)`` fed the same fixed list of CuPy
arrays at every iteration (64 photo-like uint8 HWC images of 400-640 px a side: smooth
gradients and noise; float32 copies of them for ``normalize``), then the operator with the
arguments real pipelines give it (per-sample ones from ``fn.random.uniform``). A child process
per (cell, library), the libraries alternating, the order flipping each round (the parent's
loop and GPU memory sampling are ``bench_dali.run_cell``'s). A child runs ``--warmup``
iterations, then ``--epochs`` repeats of ``--iters`` ``pipe.run()`` calls, each repeat ended by
``cupy.cuda.runtime.deviceSynchronize()``; it reports the median ms per batch (a throughput:
with the default prefetching, iterations overlap), the input megapixels per second, and the
CPU time of its process tree per batch. Both libraries run with their default prefetch
settings and ``num_threads=4``.

Every cell pays the external source's device-to-device copy of the batch (DALI's and dlpipe's
GPU ``external_source`` both copy the source's arrays into the pipeline's memory): the
``source`` and ``source-f32`` cells time that copy alone, and the table's "op ms" columns
subtract them.

Before the timings (``--no-check`` skips it), one child per library runs every cell once with
the per-sample random arguments replaced by the same fixed values (an ``external_source``), and
the parent prints the largest absolute difference between DALI's and dlpipe's outputs per cell.

``--cpu`` runs the same cells with ``device="cpu"`` operators on numpy input (``device_id=None``,
batch 8 of 100-160 px): DALI runs CPU-only, so the whole script can be checked without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dali  # noqa: E402

# cell -> (operator, arguments as the table shows them, input dtype, baseline cell)
CELLS = {
    "source": ("external_source", "uint8 HWC (the source's copy alone)", "uint8", None),
    "source-f32": ("external_source", "float32 HWC (the source's copy alone)", "float32", None),
    "blur": ("gaussian_blur", "window_size=7, sigma=1.5", "uint8", "source"),
    "blur-rand": ("gaussian_blur", "window_size=7, sigma=uniform(0.5, 2)", "uint8", "source"),
    "warp-rot": (
        "warp_affine",
        "matrix=transforms.rotation(angle=uniform(-30, 30), center=(256, 256)), "
        "size=(512, 512), fill_value=0, inverse_map=False",
        "uint8",
        "source",
    ),
    "warp-fixed": ("warp_affine", "fixed matrix, size=input, border clamped", "uint8", "source"),
    "rotate": ("rotate", "angle=uniform(-30, 30), fill_value=0", "uint8", "source"),
    "slice-rel": ("slice", "rel_start=(0.1, 0.15), rel_end=(0.85, 0.9)", "uint8", "source"),
    "slice-rand": (
        "slice",
        "anchor=uniform(0, 0.3, shape=2), shape=uniform(0.5, 0.7, shape=2), axis_names=WH",
        "uint8",
        "source",
    ),
    "norm-axes": (
        "normalize",
        "axes=(0, 1) (per-sample, per-channel stats)",
        "float32",
        "source-f32",
    ),
    "norm-fixed": ("normalize", "mean=118, stddev=57", "float32", "source-f32"),
}
WARP_MATRIX = [0.9, 0.1, 20.0, -0.1, 0.9, 30.0]
THREADS = 4
IMAGES_DIR = "/tmp/dlpipe-bench/ops"


# --- the data ------------------------------------------------------------------------------------


def make_images(n: int, lo: int, hi: int, seed: int = 0) -> list:
    """``n`` photo-like uint8 HWC images of ``lo``..``hi`` px a side (numpy): a smooth colour
    gradient per image and channel, a few soft blobs, and noise, so no region is constant."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(lo, hi + 1, 2))
        y = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
        x = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :, None]
        a, b, base = (rng.uniform(-90, 90, 3).astype(np.float32) for _ in range(3))
        img = rng.standard_normal((h, w, 3), dtype=np.float32)
        img *= 12  # noise
        img += 128 + base * 0.4 + a * (x - 0.5) + b * (y - 0.5)  # the gradients
        for _ in range(4):  # soft blobs: object-like structure at several scales
            cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
            gy = np.exp(-((y - cy) ** 2) / (2 * r * r))  # separable: a Gaussian bump
            gx = np.exp(-((x - cx) ** 2) / (2 * r * r))
            img += (gy * gx) * rng.uniform(-60, 60, 3).astype(np.float32)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def load_images(n: int, lo: int, hi: int) -> list:
    """``make_images(n, lo, hi)``, kept in ``IMAGES_DIR`` after the first call (the children
    load them instead of making them again)."""
    import numpy as np

    path = os.path.join(IMAGES_DIR, f"images-{n}-{lo}-{hi}.npz")
    if not os.path.exists(path):
        images = make_images(n, lo, hi)
        os.makedirs(IMAGES_DIR, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.npz"
        np.savez(tmp, *images)
        os.replace(tmp, path)
        return images
    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(n)]


# --- the user code (one script for both libraries) ------------------------------------------------


def build_pipeline(
    lib: str, cell: str, images: list, device: str, batch: int, fixed: bool, **pipe_kwargs
):
    """The cell's pipeline for ``lib``, fed ``images`` (CuPy arrays for ``device="gpu"``,
    numpy for "cpu") at every iteration. ``fixed``: the per-sample random arguments come from
    an ``external_source`` of fixed values instead of ``fn.random.uniform`` (the value check:
    both libraries then see the same arguments). ``pipe_kwargs`` go to the pipeline
    (``ci/gpu_host_model.py --graph ops`` runs the cells synchronously)."""
    import numpy as np

    if lib == "dali":
        from nvidia.dali import fn, pipeline_def
    else:
        from dlpipe import fn, pipeline_def

    draws = [0]

    def uniform(lo: float, hi: float, shape=None):
        """``fn.random.uniform(range=(lo, hi))``, or (``fixed``) the same per-sample values in
        both libraries."""
        if not fixed:
            return fn.random.uniform(range=(lo, hi), shape=shape)
        draws[0] += 1
        rng = np.random.default_rng(1000 + draws[0])
        size = () if shape is None else (shape,)
        values = [rng.uniform(lo, hi, size).astype(np.float32) for _ in range(batch)]
        return fn.external_source(source=lambda: values, batch=True)

    @pipeline_def
    def op_pipeline():
        x = fn.external_source(source=lambda: images, device=device, batch=True, layout="HWC")
        if cell in ("source", "source-f32"):
            return x
        if cell == "blur":
            return fn.gaussian_blur(x, window_size=7, sigma=1.5, device=device)
        if cell == "blur-rand":
            return fn.gaussian_blur(x, window_size=7, sigma=uniform(0.5, 2.0), device=device)
        if cell == "warp-rot":
            mt = fn.transforms.rotation(angle=uniform(-30.0, 30.0), center=(256.0, 256.0))
            return fn.warp_affine(
                x, matrix=mt, size=(512, 512), fill_value=0, inverse_map=False, device=device
            )
        if cell == "warp-fixed":
            return fn.warp_affine(x, matrix=WARP_MATRIX, device=device)
        if cell == "rotate":
            return fn.rotate(x, angle=uniform(-30.0, 30.0), fill_value=0, device=device)
        if cell == "slice-rel":
            return fn.slice(x, rel_start=(0.1, 0.15), rel_end=(0.85, 0.9), device=device)
        if cell == "slice-rand":
            anchor, shape = uniform(0.0, 0.3, shape=2), uniform(0.5, 0.7, shape=2)
            return fn.slice(x, anchor, shape, axis_names="WH", device=device)
        if cell == "norm-axes":
            return fn.normalize(x, axes=(0, 1), device=device)
        if cell == "norm-fixed":
            return fn.normalize(x, mean=118.0, stddev=57.0, device=device)
        raise ValueError(f"unknown cell {cell!r}")

    return op_pipeline(
        batch_size=batch,
        num_threads=THREADS,
        device_id=0 if device == "gpu" else None,
        seed=12,
        **pipe_kwargs,
    )


def cell_data(cell: str, device: str, images: list) -> list:
    """The batch a cell's source gives: the images, float32 for the float cells, on the GPU
    (CuPy) for device "gpu"."""
    import numpy as np

    if CELLS[cell][2] == "float32":
        images = [np.asarray(im, np.float32) for im in images]
    if device == "gpu":
        import cupy

        images = [cupy.asarray(im) for im in images]
    return images


def sizes(cpu: bool) -> tuple[int, int, int]:
    """(batch, smallest side, largest side) of the input images."""
    return (8, 100, 160) if cpu else (64, 400, 640)


# --- the children ---------------------------------------------------------------------------------


def _sync(device: str) -> None:
    if device == "gpu":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


def child(args) -> None:
    """One cell on one library: warm-up, then ``args.epochs`` timed repeats of ``args.iters``
    iterations; prints the RESULT line ``bench_dali.run_cell`` reads."""
    cpu = args.cell.startswith("cpu:")
    cell = args.cell.removeprefix("cpu:")
    device = "cpu" if cpu else "gpu"
    batch, lo, hi = sizes(cpu)
    host = load_images(batch, lo, hi)
    mpix = sum(im.shape[0] * im.shape[1] for im in host) / 1e6
    images = cell_data(cell, device, host)
    pipe = build_pipeline(args.lib, cell, images, device, batch, fixed=False)
    pipe.build()
    for _ in range(args.warmup):
        out = pipe.run()
    _sync(device)
    per_batch, cpu_start = [], bench_dali._tree_cpu_seconds()
    profile = os.environ.get("DLPIPE_BENCH_PROFILE")  # a folder: where the host time goes
    if profile:
        import yappi

        yappi.set_clock_type("cpu")
        yappi.start(profile_threads=True)
    for _ in range(args.epochs):
        start = time.perf_counter()
        for _ in range(args.iters):
            out = pipe.run()
        _sync(device)
        per_batch.append((time.perf_counter() - start) / args.iters)
    cpu_s = bench_dali._tree_cpu_seconds() - cpu_start
    if profile:
        bench_dali._write_profile(profile, f"{args.lib}-{args.cell}", args.epochs * args.iters)
    del out
    ms = 1e3 * statistics.median(per_batch)
    batches = args.epochs * args.iters
    print(
        "RESULT "
        + json.dumps(
            {
                "cell": args.cell,
                "lib": args.lib,
                "rank": 0,
                "ms_per_batch": ms,
                "mpix_s": mpix / (ms / 1e3),
                "img_s": batch / (ms / 1e3),
                "repeats_ms": [round(1e3 * t, 3) for t in per_batch],
                "cpu_ms_per_batch": 1e3 * cpu_s / batches,
                "cpu_us_per_image": 1e6 * cpu_s / (batches * batch),
                "batch": batch,
                "mpix_per_batch": mpix,
            }
        ),
        flush=True,
    )
    if hasattr(pipe, "close"):
        pipe.close()


def check_child(args) -> None:
    """Every cell of ``args.only`` once on ``args.lib``, with fixed per-sample arguments; the
    outputs go to ``args.out`` (an .npz, ``cell/i`` per sample; ``cell!`` holds an error)."""
    import numpy as np

    cpu = args.cpu
    device = "cpu" if cpu else "gpu"
    batch, lo, hi = sizes(cpu)
    host = load_images(batch, lo, hi)
    saved = {}
    for cell in args.only.split(","):
        try:
            pipe = build_pipeline(
                args.lib, cell, cell_data(cell, device, host), device, batch, fixed=True
            )
            pipe.build()
            (out,) = pipe.run()
            out = out.as_cpu() if hasattr(out, "as_cpu") else out
            for i in range(len(out)):
                saved[f"{cell}/{i}"] = np.array(out.at(i))
            if hasattr(pipe, "close"):
                pipe.close()
            del pipe, out
        except Exception as e:  # reported by the parent, the other cells still run
            saved[f"{cell}!"] = np.array(f"{type(e).__name__}: {e}"[-2000:])
    np.savez(args.out, **saved)


# --- the parent -----------------------------------------------------------------------------------


def check_values(cells: list[str], libs: list[str], args) -> dict:
    """Runs ``check_child`` for the first and last library and compares their outputs: per
    cell, the largest absolute difference (or why there is none)."""
    import numpy as np

    ref, other = libs[0].partition("+")[0], libs[-1].partition("+")[0]
    outs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for lib in dict.fromkeys((ref, other)):
            path = os.path.join(tmp, f"{lib}.npz")
            cmd = [sys.executable, __file__, "--check-child", "--lib", lib, "--out", path]
            cmd += ["--only", ",".join(cells)] + (["--cpu"] if args.cpu else [])
            try:  # every cell's pipeline once, the kernels compiled the first time
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=2 * args.cell_timeout
                )
            except subprocess.TimeoutExpired:
                print(f"value check: {lib} took over {2 * args.cell_timeout} s", flush=True)
                return {}
            if proc.returncode != 0 or not os.path.exists(path):
                print(f"value check: {lib} failed:\n{proc.stderr[-3000:]}", flush=True)
                return {}
            with np.load(path) as f:
                outs[lib] = {k: f[k] for k in f.files}
    report = {}
    for cell in cells:
        a, b = outs[ref], outs[other]
        err = [f"{lib}: {o[cell + '!']}" for lib, o in ((ref, a), (other, b)) if cell + "!" in o]
        if err:
            report[cell] = {"error": " | ".join(err)}
            continue
        n = sum(1 for k in a if k.startswith(cell + "/"))
        diffs, notes = [], set()
        for i in range(n):
            x, y = a[f"{cell}/{i}"], b.get(f"{cell}/{i}")
            if y is None:
                notes.add(f"{other} has no sample {i}")
            elif x.shape != y.shape:
                notes.add(f"sample {i}: shape {x.shape} vs {y.shape}")
            else:
                if x.dtype != y.dtype:
                    notes.add(f"dtype {x.dtype} vs {y.dtype}")
                d = np.abs(x.astype(np.float64) - y.astype(np.float64))
                diffs.append((float(d.max()) if d.size else 0.0, float((d > 0).mean())))
        report[cell] = {
            "max_abs_diff": max((d for d, _ in diffs), default=None),
            "frac_differing": max((f for _, f in diffs), default=None),
            "dtype": str(a[f"{cell}/0"].dtype) if n else None,
            "notes": sorted(notes),
        }
    return report


def print_check(report: dict, libs: list[str]) -> None:
    print(f"\nValues, {libs[0]} vs {libs[-1]} (same input, same per-sample arguments):")
    print("| cell | dtype | max abs diff | elements differing (worst sample) | notes |")
    print("|---|---|---|---|---|")
    for cell, r in report.items():
        if "error" in r:
            print(f"| {cell} | - | - | - | failed: {r['error'][:300]} |")
            continue
        d, f = r["max_abs_diff"], r["frac_differing"]
        d = "-" if d is None else f"{d:.6g}"
        f = "-" if f is None else f"{100 * f:.3f}%"
        print(f"| {cell} | {r['dtype']} | {d} | {f} | {'; '.join(r['notes'])} |")


def print_table(results: list[dict], cells: list[str], libs: list[str]) -> None:
    """ms per batch, MPix/s, the op's own ms (the source's copy subtracted) and the ratio
    (last library's throughput over the first's: > 1 means faster), medians over rounds."""

    def med(cell, lib, key):
        vals = [r[key] for r in results if (r["cell"], r["lib"]) == (cell, lib) and key in r]
        return statistics.median(vals) if vals else None

    def fmt(xs, f):
        return " / ".join("-" if x is None else f.format(x) for x in xs)

    names = " / ".join(libs)
    print(
        f"\n| cell | op | arguments | ms/batch ({names}) | op ms, copy subtracted ({names}) | "
        f"MPix/s ({names}) | ratio | GPU MiB ({names}) | CPU ms/batch ({names}) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        name = cell.removeprefix("cpu:")
        op, text, _, base = CELLS[name]
        prefix = cell[: len(cell) - len(name)]
        ms = [med(cell, lib, "ms_per_batch") for lib in libs]
        base_ms = [med(prefix + base, lib, "ms_per_batch") if base else None for lib in libs]
        own = [
            m - b if m is not None and b is not None else None
            for m, b in zip(ms, base_ms, strict=True)
        ]
        mpix = [med(cell, lib, "mpix_s") for lib in libs]
        ratio = f"{ms[0] / ms[-1]:.2f}" if ms[0] and ms[-1] else "-"
        print(
            f"| {cell} | {op} | {text} | {fmt(ms, '{:.3f}')} | {fmt(own, '{:.3f}')} | "
            f"{fmt(mpix, '{:,.0f}')} | {ratio} | "
            f"{fmt([med(cell, lib, 'gpu_mib') for lib in libs], '{:,.0f}')} | "
            f"{fmt([med(cell, lib, 'cpu_ms_per_batch') for lib in libs], '{:.2f}')} |"
        )
    for r in results:
        if r.get("error"):
            print(f"\n{r['cell']} / {r['lib']} failed:\n{r['error']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="CPU operators, tiny data, no GPU")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3, help="timed repeats per child")
    p.add_argument(
        "--iters", type=int, default=0, help="iterations per repeat (default 30; 3 --cpu)"
    )
    p.add_argument("--warmup", type=int, default=0, help="iterations (default 10; 2 --cpu)")
    p.add_argument("--only", default="", help="comma-separated cells (default: all)")
    p.add_argument("--libs", default="dali,dlpipe", help="comma-separated; the first is the base")
    p.add_argument("--json", default="", help="write the results (and the value check) here")
    p.add_argument("--no-check", action="store_true", help="skip the value check")
    p.add_argument("--cell-timeout", type=int, default=120)
    p.add_argument(
        "--max-seconds",
        type=float,
        default=480,
        help="start no timed run after this long (the tables then hold what ran)",
    )
    # what bench_dali.run_cell passes to a child
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--check-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    p.add_argument("--lib", default="dlpipe", help=argparse.SUPPRESS)
    p.add_argument("--cell", default="", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--gpus", default="1", help=argparse.SUPPRESS)
    for k in ("--data", "--cpu-data", "--examples", "--trace"):
        p.add_argument(k, default="", help=argparse.SUPPRESS)
    p.add_argument("--stats", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    cpu = args.cpu or args.cell.startswith("cpu:")
    # run_cell passes only its own arguments to a child: these travel in the environment
    passed = json.loads(os.environ.get("DLPIPE_BENCH_OPS", "{}"))
    args.iters = args.iters or passed.get("iters") or (3 if cpu else 30)
    args.warmup = args.warmup or passed.get("warmup") or (2 if cpu else 10)
    if args.child:
        return child(args)
    if args.check_child:
        return check_child(args)

    cells = [c for c in (args.only.split(",") if args.only else CELLS) if c]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        raise SystemExit(f"unknown cells {unknown}; known: {', '.join(CELLS)}")
    libs = args.libs.split(",")
    os.environ["DLPIPE_BENCH_OPS"] = json.dumps({"iters": args.iters, "warmup": args.warmup})
    load_images(*sizes(args.cpu))  # made once, here
    start = time.perf_counter()
    report = {}
    if not args.no_check:
        try:
            report = check_values(cells, libs, args)
        except Exception as e:  # the timings still run
            print(f"value check failed: {type(e).__name__}: {e}", flush=True)
    if report:
        print_check(report, libs)
    # the baselines the table subtracts run too
    timed = list(dict.fromkeys([b for c in cells if (b := CELLS[c][3])] + cells))
    timed = [("cpu:" + c) if args.cpu else c for c in timed]
    results = []
    runs = [
        (r, cell, lib)
        for r in range(args.rounds)
        for cell in timed
        for lib in (libs if r % 2 == 0 else libs[::-1])
    ]
    for i, (r, cell, lib) in enumerate(runs):
        if time.perf_counter() - start > args.max_seconds:
            print(f"--max-seconds reached: {len(runs) - i} runs left out", flush=True)
            break
        res = bench_dali.run_cell(cell, lib, args, 1, os.path.abspath(__file__))
        res["round"] = r
        results.append(res)
        print(json.dumps(res), flush=True)
        if args.json:  # after every run: a run cut short still leaves its results
            with open(args.json, "w") as f:
                json.dump({"results": results, "values": report}, f, indent=1)
    if report:
        print_check(report, libs)
    print_table(results, timed, libs)


if __name__ == "__main__":
    main()
