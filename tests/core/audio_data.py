"""Test audio made on the fly: tones, noise, silence at both ends, written as WAV by hand (the
RIFF layout, independent of the code under test), FLAC/OGG through soundfile when installed."""

from __future__ import annotations

import os
import struct

import numpy as np

from dlpipe import Pipeline, fn

try:
    import soundfile
except (ImportError, OSError):  # pragma: no cover - the fallback is tested with it present
    soundfile = None


def tone(n: int, rate: float, freq: float = 440.0, amp: float = 0.5, phase: float = 0.0):
    """A float64 sine of ``n`` samples."""
    t = np.arange(n) / rate
    return amp * np.sin(2 * np.pi * freq * t + phase)


def speech_like(n: int, rate: float, seed: int = 0, silence: int = 0) -> np.ndarray:
    """A float64 signal in [-1, 1]: tones plus noise, with ``silence`` zero samples at each end."""
    rng = np.random.default_rng(seed)
    core = tone(n, rate, 300, 0.3) + tone(n, rate, 1234, 0.2, 1.0) + rng.normal(0, 0.05, n)
    core = np.clip(core, -0.99, 0.99)
    return np.concatenate([np.zeros(silence), core, np.zeros(silence)])


def to_pcm(x: np.ndarray, bits: int) -> np.ndarray:
    """Float in [-1, 1] -> integer PCM samples of ``bits`` bits (8-bit is unsigned)."""
    peak = 2 ** (bits - 1) - 1
    v = np.round(np.asarray(x) * peak).astype(np.int64)
    return v + 128 if bits == 8 else v


def write_wav(path: str, samples: np.ndarray, rate: int, bits: int = 16, fmt: str = "pcm") -> str:
    """Write ``samples`` ((time,) or (time, channels)) as a WAV file.

    ``fmt="pcm"``: integer samples (as from :func:`to_pcm`), 8/16/24/32 bits.
    ``fmt="float"``: float samples, 32-bit IEEE float (format tag 3, with a fact chunk).
    """
    s = np.asarray(samples)
    if s.ndim == 1:
        s = s[:, None]
    frames, channels = s.shape
    if fmt == "float":
        payload = s.astype("<f4").tobytes()
        tag, bits = 3, 32
    elif bits == 24:
        v = s.astype(np.int64).reshape(-1) & 0xFFFFFF
        payload = np.stack([v & 0xFF, (v >> 8) & 0xFF, v >> 16], 1).astype(np.uint8).tobytes()
        tag = 1
    else:
        payload = s.astype({8: "u1", 16: "<i2", 32: "<i4"}[bits]).tobytes()
        tag = 1
    block = channels * bits // 8
    fmt_chunk = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk
    if tag == 3:
        chunks += b"fact" + struct.pack("<II", 4, frames)
    chunks += b"LIST" + struct.pack("<I", 5) + b"INFOx\x00"  # an odd-sized chunk, padded
    chunks += b"data" + struct.pack("<I", len(payload)) + payload
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks)
    return path


def write_sf(path: str, x: np.ndarray, rate: int, fmt: str) -> str:
    """FLAC (16-bit, from int16 ``x`` as is) or OGG/Vorbis (float ``x``) through soundfile."""
    subtype = {"FLAC": "PCM_16", "OGG": "VORBIS"}[fmt]
    soundfile.write(path, np.asarray(x), rate, format=fmt, subtype=subtype)
    return path


def make_dataset(root: str, specs) -> list[str]:
    """Write 16-bit WAV files: ``specs`` is a list of (name, seconds, rate, channels, seed);
    returns the paths. Each file is speech-like with 0.1 s of silence at both ends."""
    paths = []
    for name, seconds, rate, channels, seed in specs:
        n = int(seconds * rate)
        x = speech_like(n, rate, seed, silence=rate // 10)
        data = np.stack([x * (0.8**c) for c in range(channels)], 1)
        paths.append(write_wav(os.path.join(root, name), to_pcm(data, 16), rate))
    return paths


def dali_positions(n_out: int, in_rate: float, out_rate: float) -> np.ndarray:
    """The input positions of DALI's CPU resampler: per block of 256 outputs, the first in
    float64, then a float32 offset growing by the float32 step (so they drift slightly)."""
    scale = in_rate / out_rate
    pos = np.zeros(n_out)
    for b in range(0, n_out, 256):
        start = b * scale
        base = np.floor(start)
        off = np.float32(start - base)
        for j in range(b, min(b + 256, n_out)):
            pos[j] = base + float(off)
            off = np.float32(off + np.float32(scale))
    return pos


def ref_resample(
    x: np.ndarray, in_rate: float, out_rate: float, lobes: int, exact_positions: bool = False
) -> np.ndarray:
    """DALI's resampling, written from its description in float64: output j at input position
    ``j * in_rate / out_rate`` (as DALI's CPU kernel computes it, unless ``exact_positions``);
    taps i in [ceil(pos) - lobes, ceil(pos) + lobes) inside the signal; weights from a table of
    ``64 * lobes + 1`` points of sinc(x) * Hann envelope (the envelope's argument is the table
    index over ``coeffs / 2``), linearly interpolated."""
    x = np.asarray(x, np.float64)
    n = len(x)
    coeffs = 64 * lobes + 1
    center = (coeffs - 1) // 2
    k = np.arange(coeffs) - center
    table = np.sinc(k * 2 * lobes / (coeffs - 1)) * 0.5 * (1 + np.cos(np.pi * k * 2 / coeffs))
    grid = k * 2 * lobes / (coeffs - 1)
    n_out = int(np.ceil(n * out_rate / in_rate))
    out = np.zeros(n_out)
    positions = dali_positions(n_out, in_rate, out_rate)
    for j in range(n_out):
        pos = j * in_rate / out_rate if exact_positions else positions[j]
        c = int(np.ceil(pos))
        i = np.arange(max(c - lobes, 0), min(c + lobes, n))
        w = np.interp(i - pos, grid, table, left=0.0, right=0.0)
        out[j] = np.dot(w, x[i])
    return out


def run(build, samples, layout=None, arg=None):
    """Feed ``samples`` (one batch) through ``build(node[, arg_node])``: list of outputs (one
    array per sample, or a tuple of lists for several outputs) and the first output's layout."""
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=None, seed=5)
    with pipe:
        x = fn.external_source(source=lambda: list(samples), layout=layout)
        if arg is not None:
            a = fn.external_source(source=lambda: list(arg))
            out = build(x, a)
        else:
            out = build(x)
        outs = out if isinstance(out, tuple) else (out,)
        pipe.set_outputs(*outs)
    res = pipe.run()
    pipe.close()
    values = [[tl.at(i) for i in range(len(tl))] for tl in res]
    return (values[0] if len(values) == 1 else tuple(values)), res[0].layout()
