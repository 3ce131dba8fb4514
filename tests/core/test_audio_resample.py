"""``fn.audio_resample`` against the resampling reference of ``audio_data``."""

from __future__ import annotations

import numpy as np
import pytest
from audio_data import ref_resample, run, speech_like, tone

from dlpipe import Pipeline, fn, types
from dlpipe._audio.resampling import resample
from dlpipe.errors import ArgumentError


def sat(x, dtype):
    info = np.iinfo(dtype)
    r = np.asarray(x, np.float64) * np.float32(info.max)
    return np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), info.min, info.max)


def test_rates_scale_and_out_length():
    x = speech_like(1200, 16000, 1).astype(np.float32)
    want = ref_resample(x, 16000, 22050, 16)
    for build in (
        lambda a: fn.audio_resample(a, in_rate=16000, out_rate=22050),
        lambda a: fn.experimental.audio_resample(a, in_rate=16000.0, out_rate=22050.0),
    ):
        (y,), _ = run(build, [x])
        assert y.dtype == np.float32 and y.shape == (1654,)
        np.testing.assert_allclose(y, want, atol=2e-5)
    (y,), _ = run(lambda a: fn.audio_resample(a, scale=0.5, quality=0), [x])
    np.testing.assert_allclose(y, ref_resample(x, 1.0, 0.5, 3), atol=2e-5)
    (y,), _ = run(lambda a: fn.audio_resample(a, out_length=1000, quality=100), [x])
    assert y.shape == (1000,)
    np.testing.assert_allclose(y, ref_resample(x, 1200, 1000, 64), atol=2e-5)


@pytest.mark.parametrize("lobes", [3, 16, 64])
@pytest.mark.parametrize("out_rate", [22050, 14100.7])
def test_resampler_is_within_float32_rounding_of_float64(lobes, out_rate):
    """The phase-table resampler against the float64 reference at float32 rounding (the
    former per-tap evaluation, DALI's arithmetic, was 2.5e-6 off with 64 lobes)."""
    x = speech_like(1733, 16000, 3).astype(np.float32)
    y = resample(x, 16000, out_rate, lobes)
    want = ref_resample(x, 16000, out_rate, lobes)
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=0, atol=6e-7)
    two = resample(np.stack([x, -x[::-1]], 1), 16000, out_rate, lobes)
    np.testing.assert_allclose(two[:, 0], y, rtol=0, atol=1e-7)
    np.testing.assert_allclose(two[:, 1], ref_resample(-x[::-1], 16000, out_rate, lobes), atol=6e-7)


@pytest.mark.parametrize("out_rate", [32000, 8000, 14100.7, 17777.0])
def test_resampler_chunks_and_phase_groups(out_rate):
    """Outputs grouped by phase (few phases for whole ratios, up to 33 otherwise), each group
    walked in chunks, give the float64 reference, whatever the chunk, mono and stereo."""
    x = speech_like(2999, 16000, 5).astype(np.float32)
    want = ref_resample(x, 16000, out_rate, 16)
    for chunk in (1, 37, 256, 1 << 20):
        y = resample(x, 16000, out_rate, 16, chunk=chunk)
        assert y.dtype == np.float32 and y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=0, atol=6e-7)
    two = resample(np.stack([x, 0.5 * x], 1), 16000, out_rate, 16, chunk=100)
    np.testing.assert_allclose(two[:, 0], want, rtol=0, atol=6e-7)
    np.testing.assert_allclose(two[:, 1], ref_resample(0.5 * x, 16000, out_rate, 16), atol=6e-7)


def test_per_sample_scale_and_channels_layout():
    xs = [np.stack([tone(400, 8000, 300), speech_like(400, 8000, 2)], 1).astype(np.float32)] * 2
    scales = [np.float32(1.5), np.float32(0.75)]
    out, layout = run(lambda a, s: fn.audio_resample(a, scale=s), xs, layout="TC", arg=scales)
    assert layout == "TC"
    for x, s, y in zip(xs, scales, out, strict=True):
        assert y.shape == (int(np.ceil(400 * float(s))), 2)
        for c in range(2):
            np.testing.assert_allclose(y[:, c], ref_resample(x[:, c], 1.0, float(s), 16), atol=2e-5)


def test_dtype_conversions():
    x = speech_like(600, 16000, 3)
    i16 = np.round(x * 32767).astype(np.int16)
    (y,), _ = run(lambda a: fn.audio_resample(a, scale=0.5), [i16])
    assert y.dtype == np.int16
    f = i16 * np.float32(1 / 32767)
    np.testing.assert_allclose(y, sat(ref_resample(f, 2, 1, 16), np.int16), atol=1)
    (y,), _ = run(lambda a: fn.audio_resample(a, scale=0.5, dtype=types.FLOAT), [i16])
    np.testing.assert_allclose(y, ref_resample(f, 2, 1, 16), atol=2e-5)
    # float -> uint8: -1..1 is squeezed to 0..1 first (0 -> 128)
    (y,), _ = run(
        lambda a: fn.audio_resample(a, scale=1.0, dtype=types.UINT8), [x.astype(np.float32)]
    )
    assert y.dtype == np.uint8
    np.testing.assert_allclose(y, sat((x + 1) / 2, np.uint8), atol=1)
    # uint8 -> int16: 0..255 becomes -1..1
    u8 = np.arange(0, 256, 5, dtype=np.uint8)
    (y,), _ = run(lambda a: fn.audio_resample(a, scale=1.0, dtype=types.INT16), [u8])
    np.testing.assert_allclose(y, sat(u8 / 255 * 2 - 1, np.int16), atol=2)


def test_argument_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(10, np.float32)])
        with pytest.raises(ArgumentError, match="together"):
            fn.audio_resample(x, in_rate=1.0)
        with pytest.raises(ArgumentError, match="cannot be used together"):
            fn.audio_resample(x, scale=2.0, out_length=5)
        with pytest.raises(ArgumentError, match="no resampling factor"):
            fn.audio_resample(x)
        with pytest.raises(ArgumentError, match="quality=101"):
            fn.audio_resample(x, scale=2.0, quality=101)
        with pytest.raises(ArgumentError, match="dtype"):
            fn.audio_resample(x, scale=2.0, dtype=types.FLOAT64)
    with pytest.raises(Exception, match="scale=-1"):
        run(lambda a: fn.audio_resample(a, scale=-1.0), [np.zeros(10, np.float32)])
