"""The pipeline's threads' CPU per batch of DLE Jasper validation, without a GPU: the pipeline of
``ci/bench_dali_speech.py``'s ``jasper-val`` cell (read, decode, trim and slice in the sample
processes, ``.gpu()``, the features on the GPU) run asynchronously, with lanes, against the
stand-in CuPy of ``ci/fake_cupy`` (GPU work only counted, host work real).

    python3 ci/speech_threads_model.py [--data /tmp/dlpipe-bench/speech] [--procs 16]
        [--iters 60] [--rounds 1]

Prints, per round, the CPU ms per batch of each of the pipeline's threads (from /proc, as the
harness's ``threads_cpu_ms``): the CPU stage's front (``dlpipe-cpu-stage``) and back
(``dlpipe-cpu-back``), the lanes (``dlpipe-mixed``: the ``.gpu()`` copy) and the GPU stage's
host work. The stand-in's pinned buffers are plain numpy arrays and its copies cost nothing,
so the lanes and the GPU stage take less than with a real CuPy; the front and the back (the
requests to the sample processes and their replies) do the same work. ``--procs`` sets the
number of sample processes (the H100's 16 on a smaller machine). Needs the data of
``bench_dali_speech.py prepare`` (its ``val-manifest-host.json``: 320 utterances).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cupy"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from bench_dali import thread_cpu_seconds as thread_cpu  # noqa: E402

from dlpipe import fn, pipeline_def, types  # noqa: E402
from dlpipe import pipeline as _pipeline  # noqa: E402


def build(data: str, list_file: str, batch: int, threads: int):
    """DLE's ``DaliPipeline`` for validation as the harness configures it."""

    @pipeline_def
    def jasper_val():
        encoded, label = fn.readers.file(file_root=data, file_list=list_file, name="file_reader")
        audio, _ = fn.decoders.audio(encoded, sample_rate=16000, dtype=types.FLOAT, downmix=True)
        begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
        audio = fn.slice(audio, begin, length, axes=[0]).gpu()
        audio = audio + fn.random.normal(audio) * 0.00001  # the dither
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160)
        mel = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=64, normalize=True)
        log = fn.to_decibels(mel, multiplier=np.log(10), reference=1.0, cutoff_db=math.log(1e-20))
        length = fn.shapes(log)
        log = fn.normalize(log, axes=[1])
        log = fn.pad(log, axes=[1], fill_value=0, align=16)
        return log.gpu(), label.gpu(), length.gpu()

    pipe = jasper_val(batch_size=batch, num_threads=threads, device_id=0, seed=7)
    pipe.build()
    return pipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/dlpipe-bench/speech")
    ap.add_argument("--procs", type=int, default=0, help="sample processes (0: the pipeline's)")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    with open(os.path.join(args.data, "val-manifest-host.json")) as f:
        files = [m["files"][-1]["fname"] for m in json.load(f)]
    if args.procs:
        _pipeline.Pipeline._sample_process_count = lambda self: args.procs
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as list_file:
        list_file.write("".join(f"{name} {i}\n" for i, name in enumerate(files)))
        list_file.flush()
        pipe = build(args.data, list_file.name, args.batch, args.threads)
        for _ in range(10):  # warm-up: processes started, pools filled
            pipe.run()
        for _ in range(args.rounds):
            before, start = thread_cpu(), time.perf_counter()
            for _ in range(args.iters):
                pipe.run()
            wall, after = time.perf_counter() - start, thread_cpu()
            per: dict[str, float] = {}
            for tid, (name, sec) in after.items():
                name = name.rsplit("_", 1)[0] if name[-1:].isdigit() else name
                per[name] = per.get(name, 0.0) + sec - before.get(tid, (name, 0.0))[1]
            ms = {k: round(1e3 * v / args.iters, 2) for k, v in per.items() if v > 0}
            ms = dict(sorted(ms.items(), key=lambda kv: -kv[1]))
            print(json.dumps({"batch_ms": round(1e3 * wall / args.iters, 2), "threads_cpu_ms": ms}))
        pipe.close()


if __name__ == "__main__":
    main()
