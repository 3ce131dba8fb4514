"""fn.cast and convert_sat: DALI's ConvertSat (round half away from zero, saturate) against a
float64 numpy reference, for many dtype pairs; argument errors; a real pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.cast import Cast, convert_sat, round_half_away

INT_TYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64]


def ref_convert(x, dt):
    """Independent reference: exact rounding in float64 / Python ints, then clamping."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.asarray(x) != 0
    if dt.kind == "f":
        return np.asarray(x).astype(dt)
    info = np.iinfo(dt)
    out = []
    for v in np.asarray(x).reshape(-1).tolist():
        if isinstance(v, float):
            if v != v:
                v = 0 if info.min == 0 else info.min
            elif v in (float("inf"), float("-inf")):
                v = info.max if v > 0 else info.min
            else:
                frac = abs(v) - int(abs(v))
                r = int(abs(v)) + (1 if frac >= 0.5 else 0)
                v = r if v >= 0 else -r
        out.append(min(max(int(v), int(info.min)), int(info.max)))
    return np.array(out, dtype=dt).reshape(np.shape(x))


def random_floats(rng, dtype, n=400):
    x = rng.uniform(-70000, 70000, n)
    x[: n // 4] = np.round(x[: n // 4]) + 0.5  # exact ties
    x[n // 4 : n // 2] = rng.uniform(-300, 300, n // 4)
    x[-6:] = [0.5, -0.5, 2.5, -2.5, 0.49999997, 1e12]
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("dst", INT_TYPES)
def test_float_to_int_rounds_half_away_and_saturates(src, dst):
    x = random_floats(np.random.default_rng(0), src)
    if src == np.float16:
        x = x[np.isfinite(x)]
    np.testing.assert_array_equal(convert_sat(x, dst), ref_convert(x, dst))


def test_known_values():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 254.5, 300.7, -3.2], np.float32)
    np.testing.assert_array_equal(convert_sat(x, np.uint8), [0, 0, 0, 1, 2, 3, 255, 255, 0])
    np.testing.assert_array_equal(convert_sat(x, np.int8), [-3, -2, -1, 1, 2, 3, 127, 127, -3])
    assert convert_sat(np.float32(0.49999997), np.int32) == 0
    assert convert_sat(np.float32(np.nan), np.uint8) == 0
    assert convert_sat(np.array(np.inf), np.int32) == 2**31 - 1
    assert convert_sat(np.array(-1e300), np.int64) == -(2**63)
    assert convert_sat(np.array(1e300), np.uint64) == 2**64 - 1


@pytest.mark.parametrize("src", INT_TYPES)
@pytest.mark.parametrize("dst", INT_TYPES)
def test_int_to_int_saturates(src, dst):
    info = np.iinfo(src)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max, 200, dtype=src, endpoint=True)
    x[:2] = [info.min, info.max]
    np.testing.assert_array_equal(convert_sat(x, dst), ref_convert(x.astype(object), dst))


def test_bool_and_float_targets():
    x = np.array([0.0, -0.2, 3.0, np.nan], np.float32)
    np.testing.assert_array_equal(convert_sat(x, np.bool_), [False, True, True, True])
    np.testing.assert_array_equal(convert_sat(np.array([True, False]), np.int32), [1, 0])
    assert np.isinf(convert_sat(np.array([1e6], np.float32), np.float16)[0])
    assert convert_sat(np.array(5, np.int32), np.float32).dtype == np.float32


def test_round_half_away_dense_sweep_near_small_halves():
    lo, hi = np.float32(0.25).view(np.int32), np.float32(8.0).view(np.int32)
    x = np.arange(lo, hi, 61, dtype=np.int32).view(np.float32)
    x = np.concatenate(
        [
            x,
            np.nextafter(np.arange(0.5, 64, 1, dtype=np.float32), 0),
            np.nextafter(np.arange(0.5, 64, 1, dtype=np.float32), 99),
        ]
    )
    x = np.concatenate([x, -x, np.arange(-20, 20, 0.5, dtype=np.float32)])
    ref = np.sign(x.astype(np.float64)) * np.floor(np.abs(x.astype(np.float64)) + 0.5)
    np.testing.assert_array_equal(round_half_away(x), ref)


def test_out_parameter_writes_strided_view():
    out = np.zeros((3, 4), np.uint8)
    convert_sat(np.full((4, 3), 7.5, np.float32), np.uint8, out=out.T)
    assert (out == 8).all()


def test_cast_op_sample_and_passthrough():
    op = Cast(dtype=types.UINT8)
    x = np.array([[1.5, -1.0], [256.0, 3.49]], np.float32)
    np.testing.assert_array_equal(op.run_sample((x,), {}, None), [[2, 0], [255, 3]])
    y = np.arange(4, dtype=np.uint8)
    assert op.run_sample((y,), {}, None) is y


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "dtype is required"),
        (dict(dtype="nope"), "dtype='nope'"),
        (dict(dtype=np.complex64), "not a numeric"),
    ],
)
def test_cast_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        Cast(**kwargs)


def test_cast_in_pipeline_keeps_layout(image_root):
    pipe = Pipeline(batch_size=3, num_threads=2, seed=1)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        f = fn.cast(images, dtype=types.FLOAT)
        back = ops.Cast(dtype=types.INT16)(f)
        pipe.set_outputs(images, f, back)
    images, f, back = pipe.run()
    assert f.layout() == "HWC" and back.layout() == "HWC"
    for i in range(len(images)):
        assert f.at(i).dtype == np.float32 and back.at(i).dtype == np.int16
        np.testing.assert_array_equal(back.at(i), images.at(i).astype(np.int16))


@pytest.mark.gpu
def test_gpu_matches_cpu_away_from_ties(image_root):
    pytest.importorskip("cupy")
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=5)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.cast(fn.decoders.image(jpegs), dtype=types.FLOAT)
        scaled = fn.brightness(images, brightness_shift=0.3)  # x + 0.3: never a .5 tie
        pipe.set_outputs(
            fn.cast(scaled.gpu(), dtype=types.UINT8), fn.cast(scaled, dtype=types.UINT8)
        )
    g, c = pipe.run()
    g = g.as_cpu()
    for i in range(len(c)):
        np.testing.assert_array_equal(g.at(i), c.at(i))
