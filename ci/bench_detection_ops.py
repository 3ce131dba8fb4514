"""Side by side with NVIDIA DALI, operator by operator: the CPU operators of the SSD training
pipelines (``ci/bench_dali_detection.py``'s programs), each in a pipeline of its own fed the
same inputs by ``fn.external_source`` (issue 21).

    python3 ci/bench_detection_ops.py --jpegs DIR [--only resize,decode_slice]
        [--threads 1,2] [--libs dali,dlpipe] [--rounds 2] [--check]

``DIR`` is a folder of JPEGs (searched recursively, e.g. the ``coco-like/train2017`` set that
``bench_dali_detection.py`` writes); the first ``--batch`` (16) of them, in name order, make
the batch. Every input is made by this script, the same for both libraries: the encoded files,
crop windows and boxes from numpy's ``default_rng(0)``, and the images the later operators take
(decoded, cropped, resized), made once by the first of ``--libs`` (its CPU decoder and
operators, in a first child) and loaded by every child, so that each cell sees what it sees in
the SSD graph. Per-sample arguments (flip coins, colour
parameters) come from ``external_source`` too.

A child process per (cell, library, threads), the libraries alternating and the order flipping
each round; ``DLPIPE_BENCH_DALI_PYTHON`` (``bench_dali.child_python``) is the interpreter of
DALI's children and ``DALI_ENV`` (``"VAR=value;VAR2=value"``) their extra environment, for a
DALI installed elsewhere. A child builds the cell's pipeline and a baseline one, the same external sources
returned as they are, and runs them in turn, ``BLOCK`` timed ``pipe.run()`` calls each after
``--warmup`` untimed ones, ``--iters`` timed calls in all per pipeline; the cell's time is
the difference of the medians, in microseconds of wall time (a throughput: prefetching overlaps
iterations) and of the process's CPU time per image.

``--check`` compares the first output of every cell between the libraries (largest absolute
difference) instead of timing.

What holds the GIL shows in the last columns, the speed-up from the first to the last
``--threads`` count: on a machine with free cores (the lent H100's 16), e.g.
``--batch 128 --threads 1,4,16`` (a batch of 16 gives 16 threads one sample each).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dali import child_python  # noqa: E402

# cell -> (what the table says, the input the cell takes)
CELLS = {
    "decode": ("decoders.image, RGB", "jpegs"),
    "decode_slice": ("decoders.image_slice, RGB, the bbox crop's window", "jpegs"),
    "slice": ("slice, the bbox crop's window (normalized)", "images"),
    "flip": ("flip(horizontal=coin)", "crops"),
    "resize": ("resize 300x300 (DLE: default filters)", "crops"),
    "resize_tri": ("resize 300x300, min_filter=INTERP_TRIANGULAR (DALI's example)", "crops"),
    "hsv": ("hsv(hue, saturation), dtype=FLOAT", "small"),
    "bc": ("brightness_contrast(contrast_center=128), dtype=UINT8, float input", "small_f"),
    "cmn": ("crop_mirror_normalize crop 300, FLOAT16, NCHW", "small"),
    "bbox_crop": ("random_bbox_crop as the SSD files give it", "boxes"),
    "bb_flip": ("bb_flip(ltrb=True, horizontal=coin)", "boxes"),
    "box_encoder": ("box_encoder(criteria=0.5), 8732 anchors", "boxes"),
}


def dboxes300_ltrb() -> np.ndarray:
    """DLE's ``dboxes300_coco()`` anchors, ltrb (its ``ssd/utils.py`` in numpy)."""
    fig, feats, steps = 300, [38, 19, 10, 5, 3, 1], [8, 16, 32, 64, 100, 300]
    scales, ratios = [21, 45, 99, 153, 207, 261, 315], [[2], [2, 3], [2, 3], [2, 3], [2], [2]]
    boxes = []
    for k, f in enumerate(feats):
        fk = fig / steps[k]
        s1, s2 = scales[k] / fig, scales[k + 1] / fig
        sizes = [(s1, s1), (math.sqrt(s1 * s2),) * 2]
        for a in ratios[k]:
            sizes += [
                (s1 * math.sqrt(a), s1 / math.sqrt(a)),
                (s1 / math.sqrt(a), s1 * math.sqrt(a)),
            ]
        for w, h in sizes:
            for i in range(f):
                for j in range(f):
                    boxes.append(((j + 0.5) / fk, (i + 0.5) / fk, w, h))
    b = np.clip(np.array(boxes, np.float32), 0, 1)
    return np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], 1)


def make_inputs(jpeg_dir: str, batch: int) -> dict:
    """The per-sample data of every cell (numpy only: the same in both libraries' children)."""
    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(jpeg_dir) for f in fs if f.endswith(".jpg")
    )[:batch]
    rng = np.random.default_rng(0)
    jpegs = [np.fromfile(f, np.uint8) for f in files]
    # windows as the SSD crop gives them (sides of 0.3-1 of the image's, mostly 0.55-1):
    # what resize then shrinks to 300x300
    shapes = [rng.uniform(0.55, 1.0, 2).astype(np.float32) for _ in files]
    anchors = [(rng.uniform(0, 1, 2) * (1 - s)).astype(np.float32) for s in shapes]
    boxes, labels = [], []
    for _ in files:
        n = int(rng.integers(1, 9))
        lt = rng.uniform(0, 0.6, (n, 2))
        wh = rng.uniform(0.05, 0.4, (n, 2))
        boxes.append(np.concatenate([lt, lt + wh], 1).astype(np.float32))
        labels.append(rng.integers(1, 81, (n, 1)).astype(np.int32))
    return {
        "jpegs": jpegs,
        "anchors": anchors,
        "shapes": shapes,
        "boxes": boxes,
        "labels": labels,
        "coins": [np.int32(rng.integers(0, 2)) for _ in files],
        "hue": [np.float32(rng.uniform(-0.5, 0.5)) for _ in files],
        "sat": [np.float32(rng.uniform(0.5, 1.5)) for _ in files],
        "bright": [np.float32(rng.uniform(0.875, 1.125)) for _ in files],
        "contrast": [np.float32(rng.uniform(0.5, 1.5)) for _ in files],
    }


def lib_modules(lib: str):
    if lib == "dali":
        from nvidia.dali import fn, pipeline_def, types
    else:
        from dlpipe import fn, pipeline_def, types
    return fn, pipeline_def, types


def images_for(lib: str, data: dict, threads: int) -> dict:
    """Decoded images, their bbox-crop windows, and 300x300 resized ones (uint8 and the hsv's
    float output), made by ``lib`` itself."""
    fn, pipeline_def, types = lib_modules(lib)
    n = len(data["jpegs"])

    @pipeline_def(batch_size=n, num_threads=threads, device_id=None, seed=1)
    def prep():
        j = fn.external_source(source=lambda: data["jpegs"], batch=True)
        a = fn.external_source(source=lambda: data["anchors"], batch=True)
        s = fn.external_source(source=lambda: data["shapes"], batch=True)
        img = fn.decoders.image(j, device="cpu", output_type=types.RGB)
        crop = fn.slice(img, a, s)
        small = fn.resize(crop, resize_x=300, resize_y=300)
        hue = fn.external_source(source=lambda: data["hue"], batch=True)
        sat = fn.external_source(source=lambda: data["sat"], batch=True)
        small_f = fn.hsv(small, hue=hue, saturation=sat, dtype=types.FLOAT)
        return img, crop, small, small_f

    p = prep()
    p.build()
    outs = p.run()
    keys = ("images", "crops", "small", "small_f")
    return {k: [np.array(o[i]) for i in range(n)] for k, o in zip(keys, outs, strict=True)}


def build(lib: str, cell: str, data: dict, threads: int, sources_only: bool = False, **kw):
    """The cell's pipeline; with ``sources_only``, the same external sources returned as they
    are (the baseline the cell's time is taken against); ``kw``: more pipeline arguments."""
    fn, pipeline_def, types = lib_modules(lib)
    n = len(data["jpegs"])
    sources = []

    def src(key):
        sources.append(fn.external_source(source=lambda: data[key], batch=True))
        return sources[-1]

    @pipeline_def(batch_size=n, num_threads=threads, device_id=None, seed=7, **kw)
    def pipe():
        out = graph()
        return tuple(sources) if sources_only else out

    def graph():
        kind = CELLS[cell][1]
        if cell == "decode":
            return fn.decoders.image(src("jpegs"), device="cpu", output_type=types.RGB)
        if cell == "decode_slice":
            return fn.decoders.image_slice(
                src("jpegs"), src("anchors"), src("shapes"), device="cpu", output_type=types.RGB
            )
        if cell == "slice":
            return fn.slice(src("images"), src("anchors"), src("shapes"))
        if cell == "flip":
            return fn.flip(src("crops"), horizontal=src("coins"))
        if cell == "resize":
            return fn.resize(src("crops"), resize_x=300, resize_y=300)
        if cell == "resize_tri":
            return fn.resize(
                src("crops"),
                resize_x=300,
                resize_y=300,
                min_filter=types.DALIInterpType.INTERP_TRIANGULAR,
            )
        if cell == "hsv":
            return fn.hsv(src(kind), hue=src("hue"), saturation=src("sat"), dtype=types.FLOAT)
        if cell == "bc":
            return fn.brightness_contrast(
                src(kind),
                brightness=src("bright"),
                contrast=src("contrast"),
                contrast_center=128,
                dtype=types.UINT8,
            )
        if cell == "cmn":
            return fn.crop_mirror_normalize(
                src(kind),
                crop=(300, 300),
                mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                mirror=0,
                dtype=types.FLOAT16,
                output_layout=types.NCHW,
            )
        boxes, labels = src("boxes"), src("labels")
        if cell == "bbox_crop":
            return tuple(
                fn.random_bbox_crop(
                    boxes,
                    labels,
                    aspect_ratio=[0.5, 2.0],
                    thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                    scaling=[0.3, 1.0],
                    bbox_layout="xyXY",
                    allow_no_crop=True,
                    num_attempts=1,
                )
            )
        if cell == "bb_flip":
            return fn.bb_flip(boxes, ltrb=True, horizontal=src("coins"))
        if cell == "box_encoder":
            anchors = dboxes300_ltrb().reshape(-1).tolist()
            return tuple(fn.box_encoder(boxes, labels, criteria=0.5, anchors=anchors))
        raise ValueError(cell)

    p = pipe()
    p.build()
    return p


IMAGE_KEYS = ("images", "crops", "small", "small_f")
BLOCK = 5  # timed runs per block


def child(args) -> None:
    data = make_inputs(args.jpegs, args.batch)
    if args.cell == "prep":  # the images, made once by the first library, for every child
        made = images_for(args.lib, data, args.threads)
        np.savez(args.images, **{f"{k}{i}": a for k in IMAGE_KEYS for i, a in enumerate(made[k])})
        return
    if CELLS[args.cell][1] in IMAGE_KEYS:
        with np.load(args.images) as f:
            data.update({k: [f[f"{k}{i}"] for i in range(args.batch)] for k in IMAGE_KEYS})
    p = build(args.lib, args.cell, data, args.threads)
    if args.check:
        out = p.run()
        np.savez(args.check, *[np.array(o[i]) for o in out for i in range(args.batch)])
        return
    base = build(args.lib, args.cell, data, args.threads, sources_only=True)
    # blocks of the two pipelines in turn (the machine's load changes under both alike); the
    # first runs of a block take what the pipeline prefetched while the other ran: not timed
    per = 1e6 / (BLOCK * args.batch)
    times = {"op": [], "base": []}
    for _ in range(max(1, args.iters // BLOCK)):
        for key, q in (("op", p), ("base", base)):
            for _ in range(args.warmup):
                q.run()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(BLOCK):
                q.run()
            times[key].append(((time.perf_counter() - t0) * per, (time.process_time() - c0) * per))
    res = {}
    for key, xs in times.items():
        res[key + "_wall_us"] = statistics.median(x[0] for x in xs)
        res[key + "_cpu_us"] = statistics.median(x[1] for x in xs)
    res["wall_us"] = res["op_wall_us"] - res["base_wall_us"]
    res["cpu_us"] = res["op_cpu_us"] - res["base_cpu_us"]
    print("RESULT " + json.dumps(res), flush=True)


def run_child(cell: str, lib: str, threads: int, args, check: str = "") -> dict:
    cmd = [*child_python(lib), os.path.abspath(__file__), "--child", "--lib", lib, "--cell", cell]
    cmd += ["--threads", str(threads), "--jpegs", args.jpegs, "--batch", str(args.batch)]
    cmd += ["--iters", str(args.iters), "--warmup", str(args.warmup), "--images", args.images]
    if check:
        cmd += ["--check", check]
    env = dict(os.environ)
    if lib == "dali":  # "VAR=value;VAR2=value": DALI's environment only (not dlpipe's)
        env.update(kv.split("=", 1) for kv in os.environ.get("DALI_ENV", "").split(";") if kv)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    if (check or cell == "prep") and out.returncode == 0:
        return {}
    return {"error": (out.stderr or out.stdout)[-1500:]}


def check(cells: list[str], args) -> None:
    tmp = os.path.dirname(args.images)
    print("| cell | max abs diff | values |")
    print("|---|---|---|")
    for cell in cells:
        paths = {lib: os.path.join(tmp, f"{cell}-{lib}.npz") for lib in ("dali", "dlpipe")}
        errs = [run_child(cell, lib, 1, args, check=paths[lib]).get("error") for lib in paths]
        if any(errs):
            print(f"| {cell} | error: {[e for e in errs if e][0][-300:]!r} | |")
            continue
        a, b = (np.load(paths[lib]) for lib in ("dali", "dlpipe"))
        diff, count, shapes = 0.0, 0, True
        for k in a.files:
            x, y = a[k], b[k]
            if x.shape != y.shape:
                shapes = False
                continue
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            diff = max(diff, float(d.max()) if d.size else 0.0)
            count += int((d > 0).sum())
        note = "" if shapes else " (shapes differ)"
        print(f"| {cell} | {diff:g}{note} | {count} differ |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jpegs", default="/tmp/dlpipe-bench/coco-like/train2017")
    p.add_argument("--only", default="")
    p.add_argument("--libs", default="dali,dlpipe")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--check", default="", nargs="?", const="yes")
    p.add_argument("--json", default="")
    p.add_argument("--images", default="", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--lib", default="dlpipe", help=argparse.SUPPRESS)
    p.add_argument("--cell", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.threads = int(args.threads)
        return child(args)
    cells = [c for c in (args.only.split(",") if args.only else CELLS) if c]
    libs = args.libs.split(",")
    args.images = os.path.join(tempfile.mkdtemp(prefix="det-ops-"), "images.npz")
    made = run_child("prep", libs[0], 1, args)
    if made.get("error"):
        raise SystemExit(f"making the inputs with {libs[0]} failed:\n{made['error']}")
    if args.check:
        return check(cells, args)
    threads = [int(t) for t in args.threads.split(",")]
    results = []
    for r in range(args.rounds):
        for cell in cells:
            for t in threads:
                for lib in libs if r % 2 == 0 else libs[::-1]:
                    res = {"cell": cell, "lib": lib, "threads": t, "round": r}
                    res.update(run_child(cell, lib, t, args))
                    results.append(res)
                    print(json.dumps(res), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print_table(results, cells, libs, threads)


def print_table(results: list[dict], cells: list[str], libs: list[str], threads) -> None:
    def med(cell, lib, t, key):
        xs = [r[key] for r in results if (r["cell"], r["lib"], r["threads"]) == (cell, lib, t)]
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else float("nan")

    head = ["cell"]
    for t in threads:
        head += [f"{lib} op us/img {t}T" for lib in libs] + [f"time ratio {t}T"]
    head += [f"{lib} cpu us/img 1T" for lib in libs]
    head += [f"{lib} x{threads[-1]}/x{threads[0]}" for lib in libs] if len(threads) > 1 else []
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for cell in cells:
        row = [cell]
        op = {}
        for t in threads:
            for lib in libs:
                op[lib, t] = med(cell, lib, t, "wall_us")
                row.append(f"{op[lib, t]:.0f}")
            row.append(f"{op[libs[-1], t] / op[libs[0], t]:.2f}" if len(libs) > 1 else "")
        for lib in libs:
            row.append(f"{med(cell, lib, threads[0], 'cpu_us'):.0f}")
        if len(threads) > 1:
            row += [f"{op[lib, threads[0]] / op[lib, threads[-1]]:.2f}" for lib in libs]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
