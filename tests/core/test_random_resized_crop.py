"""fn.random_resized_crop: shape, window, numerics (the window as resize ROI, checked against the
independent reference of test_resize), determinism across thread counts, errors."""

from __future__ import annotations

import numpy as np
import pytest
from test_resize import assert_close_u8, rand_img, ref_resize

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.random_resized_crop import RandomResizedCrop
from dlpipe.operators.resize import Resize


def make_op(seed=0, **kwargs):
    op = RandomResizedCrop(**kwargs)
    op.bind_rng(seed)
    assert op.output_layouts(["HWC"]) == ["HWC"]
    return op


def test_output_shape_dtype_and_window_inside():
    op = make_op(size=[24, 32])
    img = rand_img(60, 90)
    params = op.batch_params(50)
    for u in params:
        y, x, h, w = op.crop_window(60, 90, u)
        assert 0 <= y and 0 <= x and 1 <= h and 1 <= w and y + h <= 60 and x + w <= 90
        out = op.run_sample((img,), {}, u)
        assert out.shape == (24, 32, 3) and out.dtype == np.uint8


def test_single_size_means_square_and_float_dtype():
    op = make_op(size=16, dtype=types.FLOAT)
    out = op.run_sample((rand_img(40, 50),), {}, op.batch_params(1)[0])
    assert out.shape == (16, 16, 3) and out.dtype == np.float32


@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_NN, types.INTERP_CUBIC])
def test_equals_resize_with_the_window_as_roi(interp):
    op = make_op(seed=3, size=[20, 28], interp_type=interp)
    img = rand_img(50, 70, seed=4)
    for u in op.batch_params(10):
        y, x, h, w = op.crop_window(50, 70, u)
        out = op.run_sample((img,), {}, u)
        rz = Resize(size=(20, 28), roi_start=(y, x), roi_end=(y + h, x + w), interp_type=interp)
        rz.output_layouts(["HWC"])
        np.testing.assert_array_equal(out, rz.run_sample((img,), {}, None))


def test_matches_independent_reference():
    op = make_op(seed=1, size=[24, 24])
    img = rand_img(64, 48, seed=2)
    for u in op.batch_params(10):
        y, x, h, w = op.crop_window(64, 48, u)
        out = op.run_sample((img,), {}, u)
        assert_close_u8(out, ref_resize(img, 24, 24, roi=((y, x), (y + h, x + w))))


def test_whole_image_window_equals_resize_of_the_crop():
    # random_area [1, 1] with a ratio range around the image's: the window is the whole image
    op = make_op(size=[20, 30], random_area=[1.0, 1.0], random_aspect_ratio=[0.5, 2.0])
    img = rand_img(40, 60, seed=5)
    u = op.batch_params(1)[0]
    assert op.crop_window(40, 60, u) == (0, 0, 40, 60)
    out = op.run_sample((img,), {}, u)
    assert_close_u8(out, ref_resize(img, 20, 30))


def test_interior_equals_resize_of_the_crop():
    # Away from the window's edge, resampling the window in place == resizing a copy of it
    op = make_op(size=[30, 30], random_area=[0.3, 0.3], random_aspect_ratio=[1.0, 1.0])
    img = rand_img(80, 80, seed=6)
    u = op.batch_params(1)[0]
    y, x, h, w = op.crop_window(80, 80, u)
    out = op.run_sample((img,), {}, u).astype(int)
    crop = np.ascontiguousarray(img[y : y + h, x : x + w])
    rz = Resize(size=(30, 30))
    rz.output_layouts(["HWC"])
    ref = rz.run_sample((crop,), {}, None).astype(int)
    np.testing.assert_array_equal(out[3:-3, 3:-3], ref[3:-3, 3:-3])


def _pipeline(image_root, num_threads):
    pipe = Pipeline(batch_size=8, num_threads=num_threads, seed=42)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        rrc = fn.random_resized_crop(images, size=[32, 40], seed=7)
        legacy = ops.RandomResizedCrop(size=24)(images)
        pipe.set_outputs(rrc, legacy)
    pipe.build()
    return pipe


def test_same_seed_same_output_regardless_of_threads(image_root):
    runs = []
    for threads in (1, 4):
        pipe = _pipeline(image_root, threads)
        runs.append([pipe.run() for _ in range(2)])
    for (a, la), (b, lb) in zip(runs[0], runs[1], strict=True):
        assert a.layout() == "HWC"
        for i in range(len(a)):
            assert a.at(i).shape == (32, 40, 3) and la.at(i).shape == (24, 24, 3)
            np.testing.assert_array_equal(a.at(i), b.at(i))
            np.testing.assert_array_equal(la.at(i), lb.at(i))
    first, second = runs[0][0][0], runs[0][1][0]
    assert any(not np.array_equal(first.at(i), second.at(i)) for i in range(len(first)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(), "size is required"),
        (dict(size=[0, 10]), r"size=\[0, 10\]"),
        (dict(size=[10, 10, 3]), "size="),
        (dict(size="big"), "size='big'"),
        (dict(size=10, random_area=[0.5, 0.1]), "random_area"),
        (dict(size=10, random_aspect_ratio=[0, 1]), "random_aspect_ratio"),
        (dict(size=10, num_attempts=0), "num_attempts=0"),
        (dict(size=10, interp_type="nope"), "interp_type='nope'"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        RandomResizedCrop(**kwargs)


def test_layout_error():
    with pytest.raises(ArgumentError, match="CHW"):
        RandomResizedCrop(size=3).output_layouts(["CHW"])
