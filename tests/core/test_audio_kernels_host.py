"""Host-side logic of the audio GPU launchers (``kernels/audio.py``), checkable without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import types
from dlpipe._audio.io import to_output_type
from dlpipe._audio.resampling import input_positions, window
from dlpipe.kernels import audio as kaudio
from dlpipe.operators.audio_resample import AudioResample, normalization, to_float_signal
from dlpipe.operators.mel_filter_bank import mel_weights
from dlpipe.operators.to_decibels import ToDecibels


@pytest.mark.parametrize(
    "src", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float32]
)
@pytest.mark.parametrize("dst", [np.int16, np.uint8, np.float32])
def test_gpu_input_normalization_is_the_cpu_one(src, dst):
    rng = np.random.default_rng(0)
    if np.dtype(src).kind == "f":
        x = rng.uniform(-1, 1, 50).astype(src)
    else:
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, 50, dtype=np.int64, endpoint=True).astype(src)
    scale, mul, add = normalization(src, dst)
    gpu = x.astype(np.float32) * np.float32(scale) * np.float32(mul) + np.float32(add)
    np.testing.assert_allclose(gpu, to_float_signal(x, np.dtype(dst)), rtol=0, atol=1e-6)


def test_mel_rows_are_nonzero_over_one_range():
    w = mel_weights(40, 257, 16000.0, 0.0, 8000.0, True, "slaney")
    k0, k1 = kaudio._nonzero_ranges(w)
    for m in range(40):
        nz = np.flatnonzero(w[m])
        assert (k0[m], k1[m]) == (nz[0], nz[-1] + 1)
        assert (w[m, k0[m] : k1[m]] > 0).all()  # a triangle: no zero inside its range
    k0, k1 = kaudio._nonzero_ranges(np.zeros((2, 5), np.float32))
    assert (k0 == k1).all()


def test_split_axis():
    shapes = np.array([[3, 4, 5], [2, 7, 1]])
    outer, n, inner = kaudio._split_axis(shapes, 1)
    assert outer.tolist() == [3, 2] and n.tolist() == [4, 7] and inner.tolist() == [5, 1]
    outer, n, inner = kaudio._split_axis(shapes, 0)
    assert outer.tolist() == [1, 1] and n.tolist() == [3, 2] and inner.tolist() == [20, 7]
    outer, n, inner = kaudio._split_axis(shapes, 2)
    assert outer.tolist() == [12, 14] and n.tolist() == [5, 1] and inner.tolist() == [1, 1]


def test_descriptor_layouts_match_the_cuda_structs():
    # audio.cu: every field 8 bytes, in this order
    assert kaudio.PREEMPH_DESC.itemsize == 32 and kaudio.FRAMES_DESC.itemsize == 32
    assert kaudio.AXIS_DESC.itemsize == 56 and kaudio.RESAMPLE_DESC.itemsize == 48
    assert kaudio.RESAMPLE_DESC.names[-1] == "scale" and kaudio.FLAT_DESC.itemsize == 24
    assert kaudio.NS_DESC.itemsize == 32


# --- to_decibels: CuPy compiles with -ftz=true ---------------------------------------------------

FLT_MIN = np.float32(2.0**-126)


def ftz(a):
    """What -ftz=true does to a float32 operand or result: subnormals become zero."""
    a = np.asarray(a, np.float32)
    return np.where(np.abs(a) < FLT_MIN, np.float32(0), a).astype(np.float32)


def decibels_kernel_model(x, inv, mul_log2, log2_min):
    """audio.cu ``to_decibels`` under -ftz=true: the clamp in the log domain; products below
    FLT_MIN redone in double from the bits (``log2_of_tiny_product``)."""
    v = ftz(ftz(x) * ftz(inv))
    with np.errstate(divide="ignore", invalid="ignore"):
        normal = np.log2(np.where(v >= FLT_MIN, v, np.float32(1))).astype(np.float32)
        p = x.astype(np.float64) * np.float64(inv)
        units = np.rint(p * 2.0**149)
        tiny = np.where(
            p >= 2.0**-126,
            np.log2(p.astype(np.float32)).astype(np.float64),
            np.log2(units) - 149.0,
        )
        tiny = np.where(p > 0, tiny, -np.inf).astype(np.float32)
    lg = np.where(v >= FLT_MIN, normal, np.where(np.isnan(v), v, tiny))
    return (np.float32(mul_log2) * np.where(lg < log2_min, log2_min, lg)).astype(np.float32)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(cutoff_db=-80),
        dict(multiplier=np.log(10), reference=1.0),  # min_ratio subnormal (1e-45)
        dict(multiplier=2.0, reference=0.5, cutoff_db=-300),  # subnormal, inv_ref = 2
    ],
)
def test_decibels_kernel_under_flush_to_zero_is_the_cpu_result(kw):
    op = ToDecibels(**kw)
    op.output_layouts(["ft"])
    rng = np.random.default_rng(0)
    subnormal = np.float32([1e-45, 3e-45, 1e-42, 1.1e-38, 1.17e-38, 1.2e-38, -1e-40])
    x = np.concatenate(
        [np.float32([0, -0.0, 1e-30, -3, np.inf, np.nan]), subnormal, rng.random(40) * 7]
    ).astype(np.float32)
    want = op.run_sample((x,), {}, None)
    inv = op.inv_reference(x)
    got = decibels_kernel_model(x, inv, op.mul_log2, kaudio.log2_floor(op.min_ratio))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)
    if op.min_ratio < FLT_MIN:
        # the former kernel, mul_log2 * log2f(fmaxf(min_ratio, x * inv)), flushed min_ratio: -inf
        with np.errstate(divide="ignore"):
            old = op.mul_log2 * np.log2(np.maximum(ftz(op.min_ratio), ftz(ftz(x[:1]) * inv)))
        assert np.isneginf(old).all() and np.isfinite(want[:1]).all()


def test_log2_floor():
    assert kaudio.log2_floor(np.float32(2.0**-149)) == -149.0
    assert kaudio.log2_floor(np.float32(1e-20)) == np.log2(np.float32(1e-20))
    assert kaudio.log2_floor(np.float32(1e-20)).dtype == np.float32


# --- resample: the kernel's positions and arithmetic, modelled -----------------------------------


def resample_positions_model(n_out, scale):
    """audio.cu ``resample``: per output j, the block start j0 * scale in float64, then j - j0
    float32 additions of float32(scale), one at a time."""
    j = np.arange(n_out)
    j0 = j - j % 256
    start = j0.astype(np.float64) * scale
    base = np.floor(start)
    frac = (start - base).astype(np.float32)
    fscale = np.float32(scale)
    for k in range(255):
        frac = np.where(k < j % 256, frac + fscale, frac)
    return base.astype(np.int64), frac


def resample_kernel_model(x, scale, n_out, lobes):
    """audio.cu ``resample`` on a normalised float32 signal: float32 steps rounded one by one,
    the taps summed in order with fused multiply-adds (exact products in float64)."""
    win = window(lobes)
    x2 = x.reshape(x.shape[0], -1)
    base, frac = resample_positions_model(n_out, scale)
    first = np.ceil(frac)
    off0, xc = first - frac, first.astype(np.int64)
    acc = np.zeros((n_out, x2.shape[1]), np.float32)
    for t in range(-lobes, lobes):
        i = base + xc + t
        inside = (i >= 0) & (i < x2.shape[0])
        fi = (off0 + np.float32(t)) * win.scale
        fi = fi + win.center
        fl = np.floor(fi)
        k = fl.astype(np.int64)
        w = (fi - fl) * (win.lookup[k + 1] - win.lookup[k])
        w = w + win.lookup[k]
        xv = np.where(inside[:, None], x2[np.clip(i, 0, x2.shape[0] - 1)], np.float32(0))
        acc = (w[:, None].astype(np.float64) * xv + acc).astype(np.float32)
    return acc.reshape((n_out, *x.shape[1:]))


@pytest.mark.parametrize(
    "n_out,in_rate,out_rate",
    [(1000, 900, 1000), (2934, 1.0, 0.75), (3308, 16000, 22050), (1800, 1.0, 1.25), (700, 3.7, 1)],
)
def test_resample_positions_are_the_cpu_ones(n_out, in_rate, out_rate):
    base, frac = resample_positions_model(n_out, in_rate / out_rate)
    want_base, want_frac = input_positions(n_out, in_rate, out_rate)
    np.testing.assert_array_equal(base, want_base)
    np.testing.assert_array_equal(frac, want_frac)
    # the former kernel's positions, j * scale in float64, are not the CPU's: the float32 sum
    # drifts by up to ~1e-4 within a block of 256 (8 levels of int16 on the GPU test's signals)
    pos = np.arange(n_out) * (in_rate / out_rate)
    assert np.abs((want_base + want_frac.astype(np.float64)) - pos).max() > 1e-6


def _signals(dtype):
    rng = np.random.default_rng(0)
    out = []
    for n in (900, 1733, 640):
        t = np.arange(n) / 16000
        x = 0.4 * np.sin(2 * np.pi * rng.uniform(100, 3000) * t) + rng.normal(0, 0.05, n)
        x = np.clip(x, -1, 1)
        if dtype == np.int16:
            x = x * 30000
        elif dtype == np.uint8:
            x = (x + 1) * 127
        out.append(x.astype(dtype))
    out.append(np.stack([out[0], out[0][::-1]], 1))  # two channels
    return out


@pytest.mark.parametrize(
    "kw,dtype",
    [
        (dict(in_rate=16000, out_rate=22050, quality=100), np.float32),
        (dict(out_length=1000, dtype=types.INT16), np.float32),
        (dict(scale=1.25, dtype=types.UINT8), np.float32),
        (dict(scale=0.75), np.int16),
        (dict(scale=0.75, dtype=types.FLOAT), np.uint8),
    ],
)
def test_resample_kernel_model_against_the_cpu(kw, dtype):
    """The GPU test's tolerance: the positions are the CPU's; the kernel rounds each tap's
    table position in float32 (as DALI), the CPU rounds the fraction once per output (its
    phase tables), and the sums run in another order: 1 level for integer outputs (a rounding
    flip), 2e-6 for floats (~0.5), 4e-6 with 64 lobes (table positions up to 4097 there, so
    the kernel's per-tap rounding is 8x coarser; the CPU is the closer to float64, see
    test_audio_resample.py::test_resampler_is_within_float32_rounding_of_float64)."""
    op = AudioResample(**kw)
    op.output_layouts([""])
    for x in _signals(dtype):
        want = op.run_sample((x,), {}, None)
        (in_rate, out_rate, n_out), out_dtype = op.sample_params(x, {})
        sc, mul, add = normalization(x.dtype, out_dtype)
        f = x.astype(np.float32) * np.float32(sc) * np.float32(mul) + np.float32(add)
        got = to_output_type(
            resample_kernel_model(f, in_rate / out_rate, n_out, op.lobes), out_dtype
        )
        assert got.shape == want.shape and got.dtype == want.dtype
        tol = 1 if out_dtype.kind in "iu" else (2e-6 if op.lobes <= 16 else 4e-6)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol)


def test_fft_rows_small_batches_round_by_an_eighth_large_ones_by_chunks():
    chunk = kaudio.fft_chunk(512)
    small = np.arange(1, chunk + 1)
    rows = np.array([kaudio.fft_rows(t, 512) for t in small])
    assert (rows >= small).all() and (rows - small <= small // 8).all()
    assert [kaudio.fft_rows(t, 512) for t in (1, 15, 16, 17, 1000, 1025)] == [
        1,
        15,
        16,
        18,
        1024,
        1152,
    ]
    for t in (chunk + 1, 3 * chunk, 27_000):
        r = kaudio.fft_rows(t, 512)
        assert r % chunk == 0 and t <= r < t + chunk


def test_fft_chunks_hold_the_same_bytes_whatever_the_fft_size():
    assert [kaudio.fft_chunk(n) for n in (64, 512, 4096)] == [32768, 4096, 512]
    assert kaudio.fft_rows(513, 4096) == 1024 and kaudio.fft_rows(513, 512) == 576
