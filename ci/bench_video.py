"""Video benchmark (issue 8, item 3): dlpipe's GPU video reader (NVDEC through PyNvVideoCodec)
against a PyAV CPU loader with 16 workers, in one run, on the same clips.

    python ci/bench_video.py [--data /tmp/dlpipe-bench/video-1080p --clips 16 --frames 300]

The clips are 1080p H.264 (libx264, preset veryfast, CRF 23, a keyframe every ``--gop``
frames, B-frames on), moving smooth texture, generated once with PyAV's encoder. Each loader
reads random sequences of ``--seq`` (16) frames, batches of ``--batch`` (8) sequences, RGB
uint8, and is timed over ``--iters`` batches after ``--warmup``; frames/s = sequences *
seq / seconds. Lines:

* ``dlpipe gpu``: ``fn.readers.video(device="gpu", random_shuffle=True)``; a batch counts once
  its CUDA event has passed (the frames are in device memory).
* ``pyav cpu loader``: a thread pool of ``--workers`` (16) PyAV decoders, each sequence a task
  (seek to the keyframe, decode forward, ``to_ndarray("rgb24")``), frames stacked on the host
  (FFmpeg releases the GIL while decoding, so threads scale like worker processes without the
  cost of shipping 100 MB sequences between processes).
* ``dlpipe cpu``: ``fn.readers.video(device="cpu")`` with ``--workers`` threads (same decoder).

Prints one JSON object per line and a summary line saying which loader was faster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np


def _encode(job) -> str:
    import av

    path, frames, width, height, gop, seed = job
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(seed)
    import cv2

    base = rng.uniform(0, 255, (height // 24 + 2, width // 24 + 2, 3)).astype(np.float32)
    big = cv2.resize(base, (width + 256, height + 256), interpolation=cv2.INTER_CUBIC)
    noise = rng.normal(0, 6, (height + 256, width + 256, 3)).astype(np.float32)
    big = np.clip(big + noise, 0, 255).astype(np.uint8)
    tmp = path + ".part.mp4"
    with av.open(tmp, "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.gop_size = gop
        stream.options = {
            "preset": "veryfast",
            "crf": "23",
            "keyint_min": str(gop),
            "sc_threshold": "0",
            "threads": "2",
        }
        for i in range(frames):
            dx, dy = (3 * i) % 256, (2 * i) % 256
            img = np.ascontiguousarray(big[dy : dy + height, dx : dx + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path


def ensure_clips(root: str, clips: int, frames: int, width: int, height: int, gop: int):
    os.makedirs(root, exist_ok=True)
    jobs = [
        (
            os.path.join(root, f"clip_{i:03d}_{width}x{height}_{frames}f_g{gop}.mp4"),
            frames,
            width,
            height,
            gop,
            i,
        )
        for i in range(clips)
    ]
    with ProcessPoolExecutor(min(len(jobs), max(1, (os.cpu_count() or 2) // 2))) as pool:
        return list(pool.map(_encode, jobs))


def sequence_list(paths, seq: int):
    """(path, start) of every sequence, as the reader makes them (step = seq)."""
    import av

    out = []
    for p in paths:
        with av.open(p) as c:
            n = sum(1 for pk in c.demux(c.streams.video[0]) if pk.size)
        out += [(p, s) for s in range(0, n - seq + 1, seq)]
    return out


def time_dlpipe(paths, device, batch, seq, workers, iters, warmup, decoders):
    from dlpipe import Pipeline, fn

    pipe = Pipeline(
        batch_size=batch, num_threads=workers, device_id=0, seed=0, prefetch_queue_depth=2
    )
    kw = {"num_decoders": decoders} if device == "gpu" else {}
    with pipe:
        video = fn.readers.video(
            device=device,
            filenames=paths,
            sequence_length=seq,
            random_shuffle=True,
            initial_fill=256,
            name="Reader",
            **kw,
        )
        pipe.set_outputs(video)

    def step():
        (out,) = pipe.run()
        ev = getattr(out, "_event", None)
        if ev is not None:
            ev.synchronize()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    seconds = time.perf_counter() - start
    pipe.close()
    return iters * batch * seq / seconds


def time_pyav_loader(paths, batch, seq, workers, iters, warmup):
    """A plain PyAV loader: random sequences, one task each, on ``workers`` threads."""
    import threading

    import av

    seqs = sequence_list(paths, seq)
    rng = np.random.default_rng(0)
    local = threading.local()

    def index(path):
        cache = getattr(local, "index", None)
        if cache is None:
            cache = local.index = {}
        if path not in cache:
            with av.open(path) as c:
                s = c.streams.video[0]
                pk = [(p.pts, p.is_keyframe) for p in c.demux(s) if p.size]
            pts = sorted(p for p, _ in pk)
            keys = sorted(pts.index(p) for p, k in pk if k)
            cache[path] = (pts, keys)
        return cache[path]

    def load(job):
        path, start = job
        pts, keys = index(path)
        key = max(k for k in keys if k <= start)
        frames = []
        with av.open(path) as c:
            s = c.streams.video[0]
            c.seek(pts[key], stream=s, backward=True, any_frame=False)
            for frame in c.decode(s):
                if frame.pts < pts[start]:
                    continue
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == seq:
                    break
        return np.stack(frames)

    depth = max(2, -(-workers // batch))  # batches in flight: every worker busy

    def run(pool, batches: int) -> float:
        start = time.perf_counter()
        pending = []
        for _ in range(batches):
            jobs = [seqs[i] for i in rng.integers(0, len(seqs), batch)]
            pending.append([pool.submit(load, j) for j in jobs])
            if len(pending) >= depth:
                assert all(f.result().shape[0] == seq for f in pending.pop(0))
        for futures in pending:
            assert all(f.result().shape[0] == seq for f in futures)
        return time.perf_counter() - start

    with ThreadPoolExecutor(workers) as pool:
        run(pool, warmup)
        seconds = run(pool, iters)
    return iters * batch * seq / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/dlpipe-bench/video-1080p")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--gop", type=int, default=30)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--decoders", type=int, default=8, help="GPU reader num_decoders")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma list of: gpu,pyav,cpu")
    ap.add_argument(
        "--nvdec-modes",
        default="index,seek",
        help="GPU reader frame access, one line each: index (get_batch_frames_by_index), "
        "seek (seek_to_index + sequential get_batch_frames); sets DLPIPE_NVDEC_MODE",
    )
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    t0 = time.perf_counter()
    paths = ensure_clips(args.data, args.clips, args.frames, args.width, args.height, args.gop)
    common = {
        "clips": len(paths),
        "frames_per_clip": args.frames,
        "size": f"{args.width}x{args.height}",
        "gop": args.gop,
        "sequence_length": args.seq,
        "batch": args.batch,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    print(json.dumps({"setup_s": round(time.perf_counter() - t0, 1), **common}), flush=True)
    results = {}
    if "gpu" not in skip:
        best = 0.0
        for mode in filter(None, args.nvdec_modes.split(",")):
            os.environ["DLPIPE_NVDEC_MODE"] = mode
            rate = time_dlpipe(
                paths, "gpu", args.batch, args.seq, 4, args.iters, args.warmup, args.decoders
            )
            best = max(best, rate)
            line = {"loader": "dlpipe gpu", "nvdec_mode": mode, "decoders": args.decoders}
            print(json.dumps({**line, "frames_per_s": round(rate, 1)}), flush=True)
        results["dlpipe gpu"] = best
    if "pyav" not in skip:
        rate = time_pyav_loader(paths, args.batch, args.seq, args.workers, args.iters, args.warmup)
        results["pyav cpu loader"] = rate
        print(
            json.dumps(
                {
                    "loader": "pyav cpu loader",
                    "workers": args.workers,
                    "frames_per_s": round(rate, 1),
                }
            ),
            flush=True,
        )
    if "cpu" not in skip:
        rate = time_dlpipe(
            paths,
            "cpu",
            args.batch,
            args.seq,
            args.workers,
            max(5, args.iters // 2),
            2,
            args.decoders,
        )
        results["dlpipe cpu"] = rate
        print(
            json.dumps(
                {"loader": "dlpipe cpu", "workers": args.workers, "frames_per_s": round(rate, 1)}
            ),
            flush=True,
        )
    if "dlpipe gpu" in results and "pyav cpu loader" in results:
        g, c = results["dlpipe gpu"], results["pyav cpu loader"]
        print(
            json.dumps(
                {
                    "summary": "gpu faster" if g > c else "cpu loader faster",
                    "gpu_over_cpu": round(g / c, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
