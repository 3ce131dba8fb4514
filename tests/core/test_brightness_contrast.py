"""fn.brightness_contrast / fn.brightness / fn.contrast against DALI's formula in float64,
for several input and output types; argument inputs through a pipeline; errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.brightness_contrast import (
    Brightness,
    BrightnessContrast,
    Contrast,
    half_range,
)

HALF = {np.uint8: 128, np.int16: 16384, np.int32: 2**30, np.float32: 0.5}
FULL = {np.uint8: 255, np.int16: 32767, np.int32: 2**31 - 1, np.float32: 1.0}


def ref(x, out_dtype, brightness=1.0, shift=0.0, contrast=1.0, center=None):
    center = HALF[x.dtype.type] if center is None else center
    v = shift * FULL[out_dtype] + brightness * (center + contrast * (x.astype(np.float64) - center))
    return v


def check(out, values, dtype, mag=255.0):
    """Compare with the float64 ``values``; ``mag`` bounds the size of the float32 terms, whose
    rounding (relative 6e-8 each) is the only allowed difference besides .5 ties."""
    assert out.dtype == dtype
    slack = 4e-7 * mag
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(out, values, rtol=1e-6, atol=max(1e-5, slack))
        return
    info = np.iinfo(dtype)
    expected = np.clip(np.sign(values) * np.floor(np.abs(values) + 0.5), info.min, info.max)
    diff = np.abs(out.astype(np.float64) - expected)
    assert (diff <= 1 + slack).all()
    near_tie = np.abs(np.abs(values - np.trunc(values)) - 0.5) <= max(1e-3, slack)
    np.testing.assert_array_equal(out[~near_tie], expected[~near_tie])


def data(dtype, shape=(9, 11, 3), seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0, 1, shape).astype(dtype)
    hi = {np.uint8: 256, np.int16: 32768, np.int32: 2**31}[dtype]
    return rng.integers(0, hi, shape).astype(dtype)


def run_op(cls, x, args=None, **kwargs):
    op = cls(**kwargs)
    assert op.output_layouts(["HWC"]) == ["HWC"]
    return op.run_sample((x,), args or {}, None)


@pytest.mark.parametrize("in_dtype", [np.uint8, np.int16, np.int32, np.float32])
@pytest.mark.parametrize("out_dtype", [None, np.uint8, np.int16, np.float32])
@pytest.mark.parametrize(
    "b, s, c", [(1.0, 0.0, 1.0), (1.3, 0.1, 0.7), (0.5, -0.2, 2.5), (2.0, 0.0, 0.0)]
)
def test_matches_formula(in_dtype, out_dtype, b, s, c):
    x = data(in_dtype)
    dt = out_dtype or in_dtype
    out = run_op(
        BrightnessContrast, x, brightness=b, brightness_shift=s, contrast=c, dtype=out_dtype
    )
    mag = (float(np.abs(x.astype(np.float64)).max()) + HALF[in_dtype]) * max(1, abs(b * c)) + abs(
        s
    ) * FULL[dt]
    check(out, ref(x, dt, b, s, c), dt, mag)


def test_contrast_center_and_defaults():
    x = data(np.uint8, seed=1)
    out = run_op(BrightnessContrast, x, contrast=0.0, contrast_center=40)
    assert (out == 40).all()
    np.testing.assert_array_equal(run_op(BrightnessContrast, x), x)
    assert (run_op(Contrast, x, contrast=0.0) == 128).all()
    assert half_range(np.int8) == 64 and half_range(np.uint16) == 32768


def test_brightness_and_contrast_ops():
    x = data(np.float32, seed=2)
    check(
        run_op(Brightness, x, brightness=2.0, brightness_shift=0.25),
        2.0 * x.astype(np.float64) + 0.25,
        np.float32,
    )
    check(run_op(Contrast, x, contrast=3.0), 0.5 + 3.0 * (x.astype(np.float64) - 0.5), np.float32)
    y = data(np.uint8, seed=3)
    check(
        run_op(Brightness, y, brightness_shift=0.5, dtype=types.INT16),
        0.5 * 32767 + y.astype(np.float64),
        np.int16,
    )


def test_uint8_lookup_table_on_non_contiguous_input():
    x = data(np.uint8, seed=4)[:, ::-2]
    check(run_op(BrightnessContrast, x, brightness=1.7), ref(x, np.uint8, 1.7), np.uint8)


def test_argument_inputs_in_pipeline(image_root):
    pipe = Pipeline(batch_size=6, num_threads=3, seed=2)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        b = fn.random.uniform(range=(0.5, 1.5))
        c = fn.random.uniform(range=(0.5, 1.5))
        s = fn.random.uniform(range=(-0.1, 0.1))
        out = fn.brightness_contrast(images, brightness=b, contrast=c, brightness_shift=s)
        flt = ops.BrightnessContrast(brightness=b, dtype=types.FLOAT)(images)
        br = fn.brightness(images, brightness=b)
        co = fn.contrast(images, contrast=c)
        pipe.set_outputs(images, b, c, s, out, flt, br, co)
    images, b, c, s, out, flt, br, co = pipe.run()
    assert out.layout() == "HWC"
    for i in range(len(images)):
        x = images.at(i)
        bi, ci, si = (float(np.asarray(t.at(i))) for t in (b, c, s))
        check(out.at(i), ref(x, np.uint8, bi, si, ci), np.uint8)
        check(flt.at(i), ref(x, np.float32, bi), np.float32)
        check(br.at(i), ref(x, np.uint8, bi), np.uint8)
        check(co.at(i), ref(x, np.uint8, contrast=ci), np.uint8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(brightness="a"), "brightness='a'"),
        (dict(contrast=[1, 2]), "contrast=\\[1, 2\\]"),
        (dict(brightness_shift=float("inf")), "brightness_shift=inf"),
        (dict(contrast_center=[1.0]), "contrast_center"),
        (dict(dtype=types.BOOL), "dtype=.*BOOL.* is not supported"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        BrightnessContrast(**kwargs)


def test_unsupported_input_type():
    with pytest.raises(ArgumentError, match="input type bool"):
        run_op(BrightnessContrast, np.zeros((2, 2, 3), bool))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [None, types.FLOAT, types.INT16])
def test_gpu_matches_cpu(image_root, dtype):
    pytest.importorskip("cupy")
    pipe = Pipeline(batch_size=6, num_threads=2, device_id=0, seed=5)

    def build(images):
        b = fn.random.uniform(range=(0.5, 1.5), seed=1)
        return (
            fn.brightness_contrast(
                images, brightness=b, contrast=1.3, brightness_shift=0.05, dtype=dtype
            ),
            fn.contrast(images, contrast=b),
        )

    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        pipe.set_outputs(*build(images.gpu()), *build(images))
    g1, g2, c1, c2 = pipe.run()
    for g, c in ((g1, c1), (g2, c2)):
        g = g.as_cpu()
        for i in range(len(c)):
            assert np.abs(g.at(i).astype(np.float64) - c.at(i)).max() <= 1.0


@pytest.mark.parametrize("in_dt, out_dt", [(np.uint8, np.uint8), (np.float32, np.uint8),
                                           (np.int16, np.float32)])  # fmt: skip
def test_batch_factors_equal_the_per_sample_ones(in_dt, out_dt):
    rng = np.random.default_rng(0)
    n = 40
    for names, kw in [
        (["brightness"], {}),
        (["brightness", "contrast", "brightness_shift"], {"contrast_center": 77.5}),
        (["contrast"], {"brightness": 1.3, "brightness_shift": 0.1}),
        ([], {"brightness": 0.7}),
    ]:
        op = BrightnessContrast(**kw)
        args = {k: [np.float32(v) for v in rng.uniform(-1, 2, n)] for k in names}
        if "contrast" in args:
            args["contrast"] = [np.array([v], np.float64) for v in rng.uniform(-1, 2, n)]
        dts = (np.dtype(in_dt), np.dtype(out_dt))
        got = op._mul_adds(args, n, *dts)
        want = op._sample_mul_adds(args, n, *dts)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
