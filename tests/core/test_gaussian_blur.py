"""fn.gaussian_blur against scipy's correlate1d (mode "mirror" is reflect-101) with float64
Gaussian windows: the sigma / window_size rules, per-axis values, 1-3 data axes, channel-last,
channel-first and sequence layouts, dtypes, argument inputs, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.ndimage import correlate1d

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.gaussian_blur import GaussianBlur, gaussian_window, reflect_101


def run(x, layout, args=None, **kwargs):
    op = GaussianBlur(**kwargs)
    assert op.output_layouts([layout]) == [layout]
    return op.run_sample((x,), args or {}, None)


def window64(sigma=0.0, size=0):
    if size == 0:
        size = 2 * math.ceil(3 * sigma) + 1
    if sigma == 0:
        sigma = ((size - 1) // 2 - 1) * 0.3 + 0.8
    x = np.arange(size) - (size - 1) // 2
    w = np.exp(-(x**2) / (2 * sigma**2))
    return w / w.sum()


def ref_blur(x, axes, windows):
    y = np.asarray(x, np.float64)
    for a, w in zip(axes, windows, strict=True):
        y = correlate1d(y, w, axis=a, mode="mirror")
    return y


def close(out, ref, dtype):
    assert out.dtype == dtype and out.shape == ref.shape
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
    else:
        info = np.iinfo(dtype)
        d = np.abs(out.astype(np.float64) - np.clip(ref, info.min, info.max))
        assert d.max(initial=0) <= 0.5 + 1e-3, d.max()


def data(shape, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-50, 300, shape).astype(dtype)
    return rng.integers(0, 120 if dtype == np.int8 else 256, shape).astype(dtype)


@pytest.mark.parametrize("sigma, size", [(1.0, 0), (0.3, 0), (2.5, 0), (0, 5), (0, 3), (1.5, 5)])
def test_window(sigma, size):
    want = window64(sigma, size)
    if size == 0:
        assert want.size == 2 * math.ceil(3 * sigma) + 1
    s = sigma or ((size - 1) // 2 - 1) * 0.3 + 0.8
    w = gaussian_window(s, want.size)
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, want, rtol=1e-6, atol=1e-7)


def test_reflect_101():
    assert reflect_101(np.arange(-5, 9), 4).tolist() == [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]
    assert reflect_101(np.arange(-2, 3), 1).tolist() == [0] * 5


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64, np.int8])
def test_hwc(dtype):
    x = data((17, 23, 3), dtype)
    out = run(x, "HWC", sigma=1.3)
    w = window64(1.3)
    close(out, ref_blur(x, (0, 1), (w, w)), dtype)


def test_per_axis_sigma_and_window_size():
    x = data((15, 20, 2))
    out = run(x, "HWC", sigma=[2.0, 0.7], window_size=[0, 7])
    close(out, ref_blur(x, (0, 1), (window64(2.0), window64(0.7, 7))), np.uint8)
    out = run(x, "HWC", window_size=[3, 9])
    close(out, ref_blur(x, (0, 1), (window64(0, 3), window64(0, 9))), np.uint8)


def test_window_larger_than_the_image_mirrors_repeatedly():
    x = data((3, 4, 1), np.float32)
    out = run(x, "HWC", sigma=3.0)  # 19 taps over 3 and 4 pixels
    w = window64(3.0)
    close(out, ref_blur(x, (0, 1), (w, w)), np.float32)


@pytest.mark.parametrize(
    "layout, shape, axes",
    [
        ("HW", (12, 14), (0, 1)),
        ("", (12, 14), (0, 1)),
        ("", (9,), (0,)),
        ("CHW", (2, 12, 14), (1, 2)),
        ("FHWC", (3, 10, 11, 2), (1, 2)),
        ("DHWC", (6, 7, 8, 2), (0, 1, 2)),
        ("CDHW", (2, 6, 7, 8), (1, 2, 3)),
        ("FCHW", (2, 3, 9, 10), (2, 3)),
        ("", (5, 6, 7), (0, 1, 2)),
    ],
)
def test_layouts(layout, shape, axes):
    x = data(shape, np.float32, seed=len(shape))
    out = run(x, layout, sigma=0.9)
    w = window64(0.9)
    close(out, ref_blur(x, axes, [w] * len(axes)), np.float32)


def test_float_output():
    x = data((10, 12, 3))
    out = run(x, "HWC", sigma=1.0, dtype=types.FLOAT)
    w = window64(1.0)
    close(out, ref_blur(x, (0, 1), (w, w)), np.float32)


def test_argument_inputs_in_a_pipeline():
    imgs = [data((11, 13, 3), seed=i) for i in range(3)]
    sigmas = [np.float32(s) for s in (0.5, 1.0, 2.0)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        s = fn.external_source(lambda: sigmas)
        pipe.set_outputs(fn.gaussian_blur(x, sigma=s), ops.GaussianBlur(window_size=5)(x))
    a, b = pipe.run()
    assert a.layout() == "HWC"
    for i in range(3):
        w = window64(float(sigmas[i]))
        close(a.at(i), ref_blur(imgs[i], (0, 1), (w, w)), np.uint8)
        w5 = window64(0, 5)
        close(b.at(i), ref_blur(imgs[i], (0, 1), (w5, w5)), np.uint8)


def test_errors():
    with pytest.raises(ArgumentError, match="give sigma or window_size"):
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
        with pipe:
            fn.gaussian_blur(fn.external_source(lambda: [data((4, 4))]))
    with pytest.raises(ArgumentError, match="non-negative"):
        GaussianBlur(sigma=-1.0)
    with pytest.raises(ArgumentError, match="one per data axis"):
        GaussianBlur(sigma=[1, 2, 3, 4])
    with pytest.raises(ArgumentError, match="must be odd"):
        run(data((5, 5)), "HW", window_size=4)
    with pytest.raises(ArgumentError, match="one value or one per data axis \\(2\\)"):
        run(data((5, 5, 3)), "HWC", sigma=[1, 2, 3])
    with pytest.raises(ArgumentError, match="FLOAT"):
        run(data((5, 5)), "HW", sigma=1.0, dtype=types.INT32)
    with pytest.raises(ArgumentError, match="channels must come first or last"):
        run(data((5, 3, 5)), "HCW", sigma=1.0)
    with pytest.raises(ArgumentError, match="at most 3 dimensions"):
        run(data((2, 3, 4, 5)), "", sigma=1.0)
    with pytest.raises(ArgumentError, match="not both be 0"):
        run(data((5, 5)), "HW", args={"sigma": np.float32(0)})


def test_gpu_descriptors_on_the_host():
    """Elements: one per frame / channel plane; data extents as (d, h, w) with 1 padding."""
    from dlpipe.kernels.gaussian_blur import BLUR_DESC, blur_elements, blur_pass_descriptors

    shapes = np.array([[2, 5, 6, 3], [1, 4, 7, 3]])  # FHWC
    strides = np.array([[90, 18, 3, 1], [84, 21, 3, 1]])
    el = blur_elements(shapes, strides, 1, 2, True)
    assert el["sample"].tolist() == [0, 0, 1] and el["offset"].tolist() == [0, 90, 0]
    assert el["index"].tolist() == [0, 1, 0]
    assert el["size"][0].tolist() == [1, 5, 6] and el["stride"][0].tolist() == [0, 18, 3]
    assert el["channels"].tolist() == [3, 3]
    wins = np.array([[(0, 1), (0, 5), (5, 7)], [(0, 1), (12, 3), (15, 3)]])
    d = blur_pass_descriptors(el, [10, 20], 1, [40, 60], 1, [1000], 4, 2, wins)
    assert d.dtype == BLUR_DESC and BLUR_DESC.itemsize == 14 * 8 and len(d) == 6
    w = d[:3]  # the first pass: along w, from the samples into the intermediate
    assert w["win_off"].tolist() == [5, 5, 15] and w["win_size"].tolist() == [7, 7, 3]
    assert w["out_stride"][2].tolist() == [84, 21, 3] and w["size"][2].tolist() == [1, 4, 7]
    assert w["in_ptr"].tolist() == [10, 100, 20] and w["channels"].tolist() == [3, 3, 3]
    assert w["out_ptr"].tolist() == [1000, 1000 + 90 * 4, 1000 + 180 * 4]
    h = d[3:]  # then along h, into the output (the second frame one frame volume on)
    assert h["in_ptr"].tolist() == w["out_ptr"].tolist() and h["out_ptr"].tolist() == [40, 130, 60]
    assert (
        h["win_off"].tolist() == [0, 0, 12] and h["in_stride"].tolist() == w["out_stride"].tolist()
    )
    # channel-first: each plane an element
    el = blur_elements([[2, 3, 4]], [[12, 4, 1]], 1, 2, False)
    assert el["offset"].tolist() == [0, 12] and el["index"].tolist() == [0, 1]
    assert el["size"][0].tolist() == [1, 3, 4] and el["stride"][0].tolist() == [0, 4, 1]
