"""The CPU audio chain operator by operator, DALI against dlpipe, on the same utterances.

    python3 ci/bench_audio_ops.py [--data /tmp/dlpipe-bench/speech] [--n 32] [--iters 3]
        [--libs dali,dlpipe] [--only spectrogram,mel_filter_bank] [--reps 3] [--threads 1]

Each operator of the Jasper / NeMo host pipelines runs alone in a pipeline of one CPU thread
(``num_threads=1``; ``--threads`` to change it; ``device_id=None``) fed by
``external_source`` with ``--n`` utterances (the WAVs that ``bench_dali_speech.py`` writes,
or generated speech-like tones when there are none),
its inputs computed once beforehand (by dlpipe: both libraries get the same arrays). The
reported cost is CPU microseconds per utterance (process time, so a library's helper threads
count), minus that of the same pipeline without the operator (``external_source`` only).
The reader (``readers.nemo_asr``) is timed whole, reading the manifest of the first ``--n``
files. ``jasper_val_chain`` / ``jasper_train_chain`` are the CPU part of DLE's Jasper pipeline
with ``--dali_device gpu`` (what the sample processes run): decode (train: resampled to a
rate of 0.85-1.15 x 16 kHz), ``nonsilent_region`` at -60 dB, ``slice``. Both libraries run in a child process each (one at a time) so they do not share cores.

Prints a table: operator, DALI us/utt, dlpipe us/utt, dlpipe / DALI; with ``--reps N`` the
children run N times each, alternating, and each pipeline's time is its minimum over them (a
shared machine's noise only ever adds time) before the two are subtracted.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dali import child_python  # noqa: E402

SR = 16000
OPS = [
    "jasper_val_chain",
    "jasper_train_chain",
    "decode",
    "decode+resample",
    "nemo_reader",
    "nonsilent_region",
    "slice",
    "dither",
    "preemphasis",
    "spectrogram",
    "spectrogram_window_fn",
    "mel_filter_bank",
    "to_decibels",
    "normalize_jasper",
    "normalize_nemo",
    "pad_jasper",
    "pad_nemo",
]


def _speech(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = np.arange(int(rng.uniform(1, 16) * SR)) / SR
        pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
        phase = 2 * np.pi * np.cumsum(pitch) / SR
        x = sum(np.sin(k * phase) / k for k in range(1, 8)) * (0.5 + 0.5 * np.sin(6 * t))
        x = 0.3 * x + 0.01 * rng.standard_normal(t.size)
        edge = int(0.3 * SR)
        x[:edge] *= 1e-4
        x[-edge:] *= 1e-4
        out.append(np.round(x * 32767 / max(1, np.abs(x).max())).astype(np.int16))
    return out


def _wav_bytes(pcm: np.ndarray) -> bytes:
    import struct

    data = pcm.astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, SR, SR * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data))
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


def _files(data: str, n: int) -> list[str]:
    files = sorted(glob.glob(os.path.join(data, "wav", "*.wav")))[:n]
    if len(files) < n:
        d = tempfile.mkdtemp(prefix="audio-ops-")
        files = []
        for i, pcm in enumerate(_speech(n)):
            path = os.path.join(d, f"{i:04d}.wav")
            with open(path, "wb") as f:
                f.write(_wav_bytes(pcm))
            files.append(path)
    return files


def _inputs(files: list[str]) -> dict:
    """Every stage's inputs, computed by dlpipe's functions (float32, as both chains see them)."""
    from dlpipe._audio.io import open_audio
    from dlpipe.operators.mel_filter_bank import mel_weights
    from dlpipe.operators.nonsilent_region import nonsilent_region

    enc = [np.fromfile(f, np.uint8) for f in files]
    audio = []
    for f in files:
        a = open_audio(f)
        audio.append(a.read(np.float32).reshape(-1))
        a.close()
    rng = np.random.default_rng(1)
    rates = [np.array(SR * rng.uniform(0.85, 1.15), np.float32) for _ in files]
    regions = [nonsilent_region(a, -60.0, 2048, None) for a in audio]
    begins = [np.array(b, np.int32) for b, _ in regions]
    lengths = [np.array(n, np.int32) for _, n in regions]
    spec = []
    for a in audio:
        x = np.pad(a, 160, mode="reflect")
        idx = np.arange(a.size // 160 + 1)[:, None] * 160 + np.arange(320)
        t = np.arange(320)
        w = 0.5 * (1 - np.cos(2 * np.pi * (t + 0.5) / 320))
        f = np.abs(np.fft.rfft(x[idx] * w, 512, axis=1)) ** 2
        spec.append(np.ascontiguousarray(f.T, np.float32))
    wm = mel_weights(64, 257, float(SR), 0.0, SR / 2, True, "slaney")
    mel = [np.ascontiguousarray(wm @ s) for s in spec]
    db = [np.log(np.maximum(m, 1e-20)).astype(np.float32) for m in mel]
    return dict(
        enc=enc, audio=audio, rates=rates, begins=begins, lengths=lengths, spec=spec, mel=mel, db=db
    )


def _pipelines(lib, op: str, inp: dict, n: int, threads: int = 1):
    """(pipeline with the operator, pipeline without it), both fed the same batch each run."""
    fn, types, pipeline_def = lib.fn, lib.types, lib.pipeline_def

    def src(key):
        batch = inp[key]
        return fn.external_source(source=lambda: batch, batch=True, no_copy=True)

    def build(with_op: bool):
        @pipeline_def(batch_size=n, num_threads=threads, device_id=None, prefetch_queue_depth=1)
        def pipe():
            if op == "nemo_reader":
                manifest = inp["manifest"]
                if not with_op:
                    return fn.random.uniform(range=[0, 1])
                audio, _ = fn.readers.nemo_asr(
                    manifest_filepaths=[manifest],
                    dtype=types.FLOAT,
                    downmix=True,
                    sample_rate=float(SR),
                    read_sample_rate=False,
                    read_text=False,
                    read_idxs=True,
                    random_shuffle=False,
                )
                return audio
            key = {
                "jasper_val_chain": "enc",
                "jasper_train_chain": "enc",
                "decode": "enc",
                "decode+resample": "enc",
                "spectrogram": "audio",
                "spectrogram_window_fn": "audio",
                "mel_filter_bank": "spec",
                "to_decibels": "mel",
                "normalize_jasper": "db",
                "normalize_nemo": "db",
                "pad_jasper": "db",
                "pad_nemo": "db",
            }.get(op, "audio")
            x = src(key)
            extra = {}
            if op in ("decode+resample", "jasper_train_chain"):
                extra["rate"] = src("rates")
            if op == "slice":
                extra["begin"], extra["length"] = src("begins"), src("lengths")
            if not with_op:
                return (x, *extra.values())
            if op.startswith("jasper_"):
                rate = extra.get("rate", SR)  # DLE: the rate, or 16 kHz without perturbation
                audio, _ = fn.decoders.audio(x, sample_rate=rate, dtype=types.FLOAT, downmix=True)
                b, ln = fn.nonsilent_region(audio, cutoff_db=-60)
                out = fn.slice(audio, b, ln, axes=[0])
            elif op == "decode":
                out, _ = fn.decoders.audio(x, dtype=types.FLOAT, downmix=True)
            elif op == "decode+resample":
                out, _ = fn.decoders.audio(
                    x, dtype=types.FLOAT, downmix=True, sample_rate=extra["rate"]
                )
            elif op == "nonsilent_region":
                b, ln = fn.nonsilent_region(x, cutoff_db=-60)
                return b, ln
            elif op == "slice":
                out = fn.slice(x, extra["begin"], extra["length"], axes=[0])
            elif op == "dither":
                out = x + fn.random.normal(x) * 1e-5
            elif op == "preemphasis":
                out = fn.preemphasis_filter(x, preemph_coeff=0.97)
            elif op == "spectrogram":
                out = fn.spectrogram(x, nfft=512, window_length=320, window_step=160)
            elif op == "spectrogram_window_fn":
                t = np.arange(320)
                w = (0.5 - 0.5 * np.cos(2 * np.pi * t / 319)).tolist()  # torch periodic=False
                out = fn.spectrogram(x, nfft=512, window_length=320, window_step=160, window_fn=w)
            elif op == "mel_filter_bank":
                out = fn.mel_filter_bank(x, sample_rate=SR, nfilter=64, normalize=True)
            elif op == "to_decibels":
                out = fn.to_decibels(
                    x, multiplier=np.log(10), reference=1.0, cutoff_db=math.log(1e-20)
                )
            elif op == "normalize_jasper":
                out = fn.normalize(x, axes=[1])
            elif op == "normalize_nemo":
                out = fn.normalize(x, axes=(1,), epsilon=1e-5**2, ddof=1)
            elif op == "pad_jasper":
                out = fn.pad(x, axes=[1], fill_value=0, align=16)
            elif op == "pad_nemo":
                out = fn.pad(x, fill_value=0, axes=(0, 1), align=(16, 1), shape=(1, -1))
            else:
                raise ValueError(op)
            return out

        p = pipe()
        p.build()
        return p

    return build(True), build(False)


def _cpu_per_run(p, iters: int) -> float:
    p.run()  # warm up (caches, first-run checks)
    best = math.inf
    for _ in range(iters):
        t0 = time.process_time()
        p.run()
        best = min(best, time.process_time() - t0)
    return best


def child(args) -> None:
    if args.lib == "dali":
        import nvidia.dali as lib
        import nvidia.dali.fn  # noqa: F401
    else:
        import dlpipe as lib
    files = _files(args.data, args.n)
    inp = _inputs(files)
    man = os.path.join(tempfile.mkdtemp(prefix="audio-ops-"), "manifest.json")
    with open(man, "w") as f:
        for path, a in zip(files, inp["audio"], strict=True):
            f.write(json.dumps({"audio_filepath": path, "duration": a.size / SR, "text": "a"}))
            f.write("\n")
    inp["manifest"] = man
    res = {}
    for op in args.only:
        with_op, without = _pipelines(lib, op, inp, args.n, args.threads)
        t1 = _cpu_per_run(with_op, args.iters) / args.n * 1e6
        t0 = _cpu_per_run(without, args.iters) / args.n * 1e6
        res[op] = t1 - t0
        print(json.dumps({"op": op, "lib": args.lib, "with": t1, "without": t0}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/tmp/dlpipe-bench/speech")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="the pipelines' num_threads")
    ap.add_argument("--libs", default="dali,dlpipe")
    ap.add_argument("--reps", type=int, default=1, help="child runs per library (alternating); min")
    ap.add_argument("--only", default=",".join(OPS))
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.only = args.only.split(",")
    if args.lib:
        child(args)
        return
    table: dict[str, dict[str, float]] = {}
    for _ in range(args.reps):
        for lib in args.libs.split(","):
            cmd = [*child_python(lib), __file__, "--lib", lib, "--data", args.data]
            cmd += ["--n", str(args.n), "--iters", str(args.iters), "--only", ",".join(args.only)]
            cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    row = table.setdefault(r["op"], {})
                    for k in ("with", "without"):
                        key = (r["lib"], k)
                        row[key] = min(row.get(key, math.inf), r[k])
    for row in table.values():
        for lib in args.libs.split(","):
            if (lib, "with") in row:
                row[lib] = row[lib, "with"] - row[lib, "without"]
    libs = args.libs.split(",")
    print("| operator | " + " | ".join(f"{lib} us/utt" for lib in libs) + " | ratio |")
    print("|---|" + "---:|" * (len(libs) + 1))
    for op in args.only:
        row = table.get(op, {})
        vals = [row.get(lib) for lib in libs]
        ratio = ""
        if len(libs) == 2 and all(v is not None and v > 0 for v in vals):
            ratio = f"{vals[1] / vals[0]:.2f}"
        cells = " | ".join("-" if v is None else f"{v:,.0f}" for v in vals)
        print(f"| {op} | {cells} | {ratio} |")


if __name__ == "__main__":
    main()
