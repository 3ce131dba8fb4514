"""fn.color_space_conversion against float64 references of DALI's BT.601 formulas, OpenCV's
fixed-point grey, known values, layouts and errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.color_space_conversion import ColorSpaceConversion

RGB, BGR, GRAY, YCC = types.RGB, types.BGR, types.GRAY, types.YCbCr


def run(x, src, dst, layout="HWC"):
    op = ColorSpaceConversion(image_type=src, output_type=dst)
    op.output_layouts([layout])
    return op.run_sample((x,), {}, None)


def img(shape=(9, 11, 3), seed=0):
    x = np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)
    if len(shape) == 3 and shape[-1] == 3:
        x[0, :4] = [[0, 0, 0], [255, 255, 255], [77, 77, 77], [255, 0, 0]]
    return x


def ycc64(rgb):
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.257 * r + 0.504 * g + 0.098 * b + 16
    cb = -0.148 * r - 0.291 * g + 0.439 * b + 128
    cr = 0.439 * r - 0.368 * g - 0.071 * b + 128
    grey = (r == g) & (r == b)
    cb[grey] = cr[grey] = 128
    return np.stack([y, cb, cr], -1)


def rgb64(ycc):
    y, cb, cr = (ycc[..., i].astype(np.float64) for i in range(3))
    ty = 1.164 * (y - 16)
    return np.stack(
        [
            ty + 1.596 * (cr - 128),
            ty - 0.813 * (cr - 128) - 0.392 * (cb - 128),
            ty + 2.017 * (cb - 128),
        ],
        -1,
    )


def near(out, ref):
    assert out.dtype == np.uint8 and out.shape == ref.shape
    assert np.abs(out - np.clip(ref, 0, 255)).max() <= 0.5 + 1e-3


def test_known_values():
    x = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0]]], np.uint8)
    out = run(x, RGB, YCC)
    assert out[0, 0].tolist() == [16, 128, 128] and out[0, 1].tolist() == [235, 128, 128]
    assert out[0, 2, 0] == 82  # 0.257 * 255 + 16 = 81.5 -> 82 (half away from zero)


def test_rgb_bgr_ycbcr():
    x = img()
    near(run(x, RGB, YCC), ycc64(x))
    near(run(x, BGR, YCC), ycc64(x[..., ::-1]))
    np.testing.assert_array_equal(run(x, RGB, BGR), x[..., ::-1])
    np.testing.assert_array_equal(run(x, BGR, RGB), x[..., ::-1])
    near(run(x, YCC, RGB), rgb64(x))
    near(run(x, YCC, BGR), rgb64(x)[..., ::-1])


def test_gray():
    x = img()
    r, g, b = (x[..., i].astype(np.int64) for i in range(3))
    fixed = (r * 4899 + g * 9617 + b * 1868 + 8192) >> 14  # OpenCV 4's 14-bit weights
    np.testing.assert_array_equal(run(x, RGB, GRAY)[..., 0], fixed)
    np.testing.assert_array_equal(run(x[..., ::-1], BGR, GRAY)[..., 0], fixed)
    gray = img((6, 7, 1))
    np.testing.assert_array_equal(run(gray, GRAY, RGB), np.repeat(gray, 3, -1))
    np.testing.assert_array_equal(run(gray, GRAY, BGR), np.repeat(gray, 3, -1))
    scale = 0.257 + 0.504 + 0.098
    y = run(gray, GRAY, YCC)
    near(y[..., :1], gray * scale + 0.0625)
    assert (y[..., 1:] == 128).all()
    near(run(x, YCC, GRAY), (x[..., :1].astype(np.float64) - 16) / scale)


@pytest.mark.parametrize("layout, shape", [("FHWC", (2, 5, 6, 3)), ("DHWC", (3, 4, 5, 3))])
def test_sequences_and_volumes(layout, shape):
    x = img(shape)
    near(run(x, RGB, YCC, layout), ycc64(x))
    assert run(x, RGB, GRAY, layout).shape == (*shape[:-1], 1)


def test_pipeline_and_ops():
    imgs = [img(seed=i) for i in range(2)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        pipe.set_outputs(ops.ColorSpaceConversion(image_type=RGB, output_type=YCC)(x))
    (out,) = pipe.run()
    assert out.layout() == "HWC"
    for i in range(2):
        near(out.at(i), ycc64(imgs[i]))


@pytest.mark.parametrize("src, dst", [(RGB, RGB), (GRAY, GRAY), (YCC, YCC), (BGR, BGR)])
def test_identity_is_not_a_conversion(src, dst):
    with pytest.raises(ArgumentError, match="not supported"):
        ColorSpaceConversion(image_type=src, output_type=dst)


def test_errors():
    with pytest.raises(ArgumentError, match="required"):
        ColorSpaceConversion(image_type=RGB)
    with pytest.raises(ArgumentError, match="ANY_DATA"):
        ColorSpaceConversion(image_type=types.ANY_DATA, output_type=RGB)
    with pytest.raises(ArgumentError, match="uint8"):
        run(np.zeros((2, 2, 3), np.float32), RGB, GRAY)
    with pytest.raises(ArgumentError, match="needs 3 channel"):
        run(np.zeros((2, 2, 4), np.uint8), RGB, GRAY)
    with pytest.raises(ArgumentError, match="channels must come last"):
        ColorSpaceConversion(image_type=RGB, output_type=BGR).output_layouts(["CHW"])


def test_every_supported_pair_runs():
    for src, dst in itertools.permutations((RGB, BGR, GRAY, YCC), 2):
        x = img((4, 5, 1 if src == GRAY else 3))
        out = run(x, src, dst)
        assert out.shape == (4, 5, 1 if dst == GRAY else 3)
