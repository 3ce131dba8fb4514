"""Host-side logic of the audio GPU launchers (``kernels/audio.py``), checkable without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels import audio as kaudio
from dlpipe.operators.audio_resample import normalization, to_float_signal
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
