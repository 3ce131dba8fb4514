"""fn.flip: numpy flips for every layout and flag combination, per-sample argument inputs,
argument errors, and a real pipeline."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.graph import REGISTRY
from dlpipe.operators.flip import Flip, flip_axes


def run_op(x, layout, args=None, **kwargs):
    op = Flip(**kwargs)
    assert op.output_layouts([layout]) == [layout]
    return op.run_sample((x,), args or {}, None)


def ref_flip(x, layout, h, v, d):
    for flag, dim in ((h, "W"), (v, "H"), (d, "D")):
        if flag and dim in layout:
            x = np.flip(x, layout.index(dim))
    return x


SHAPES = {
    "HWC": (4, 5, 3),
    "CHW": (3, 4, 5),
    "FHWC": (2, 4, 5, 3),
    "DHWC": (3, 4, 5, 2),
    "HW": (4, 5),
    "FCHW": (2, 3, 4, 5),
}


@pytest.mark.parametrize("layout", sorted(SHAPES))
@pytest.mark.parametrize("h, v, d", list(itertools.product((0, 1), repeat=3)))
def test_flip_matches_numpy(layout, h, v, d):
    x = np.arange(np.prod(SHAPES[layout]), dtype=np.int32).reshape(SHAPES[layout])
    out = run_op(x, layout, horizontal=h, vertical=v, depthwise=d)
    np.testing.assert_array_equal(out, ref_flip(x, layout, h, v, d))
    assert out.flags.c_contiguous


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64, np.int64]
)
@pytest.mark.parametrize("shape", [(7, 9), (7, 9, 1), (6, 11, 3), (5, 8, 4), (5, 6, 7)])
def test_image_flips_through_opencv_match_numpy(dtype, shape):
    # HW(C) images of OpenCV's depths go through cv2.flip (int64 does not): the same values,
    # dtype and shape as numpy's reversed copy, for a strided input too
    rng = np.random.default_rng(3)
    base = (rng.random((shape[0], shape[1] * 2, *shape[2:])) * 200 - 50).astype(dtype)
    layout = "HW" if len(shape) == 2 else "HWC"
    for x in (base[:, : shape[1]].copy(), base[:, ::2]):  # contiguous, then strided
        for h, v in ((1, 0), (0, 1), (1, 1)):
            out = run_op(x, layout, horizontal=h, vertical=v)
            want = ref_flip(x, layout, h, v, 0)
            assert out.dtype == x.dtype and out.shape == x.shape and out.flags.c_contiguous
            np.testing.assert_array_equal(out, want)


def test_defaults_flip_horizontally_only():
    x = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    np.testing.assert_array_equal(run_op(x, "HWC"), x[:, ::-1])


def test_unset_layout_is_inferred_from_ndim():
    x = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    np.testing.assert_array_equal(run_op(x, "", vertical=1, horizontal=0), x[::-1])
    y = np.arange(48, dtype=np.uint8).reshape(2, 2, 4, 3)  # FHWC
    np.testing.assert_array_equal(run_op(y, ""), y[:, :, ::-1])


def test_flip_axes():
    assert flip_axes("HWC", 1, 1, 1) == (0, 1)
    assert flip_axes("DHWC", 1, 0, 1) == (0, 2)
    assert flip_axes("CHW", 1, 0, 0) == (2,)


def test_per_sample_argument_values_override():
    x = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    op_args = {"horizontal": np.int32(0), "vertical": np.array([1], np.int32)}
    np.testing.assert_array_equal(run_op(x, "HWC", op_args), x[::-1])
    np.testing.assert_array_equal(run_op(x, "HWC", {"horizontal": np.bool_(False)}), x)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(horizontal="yes"), "horizontal='yes'"),
        (dict(vertical=0.5), "vertical=0.5"),
        (dict(depthwise=[1, 0]), "depthwise"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        Flip(**kwargs)


def test_sample_rank_must_match_layout():
    with pytest.raises(ArgumentError, match="layout"):
        run_op(np.zeros((2, 3)), "HWC")


def test_pipeline_fixed_flags_and_legacy_op(image_root):
    pipe = Pipeline(batch_size=4, num_threads=2)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        both = fn.flip(images, horizontal=1, vertical=1)
        legacy = ops.Flip(horizontal=0, vertical=1)(images)
        pipe.set_outputs(images, both, legacy)
    pipe.build()
    images, both, legacy = pipe.run()
    assert both.layout() == "HWC"
    for i in range(len(images)):
        np.testing.assert_array_equal(both.at(i), images.at(i)[::-1, ::-1])
        np.testing.assert_array_equal(legacy.at(i), images.at(i)[::-1])


@pytest.mark.skipif("random.coin_flip" not in REGISTRY, reason="fn.random.coin_flip not built")
def test_pipeline_coin_flip_argument_input(image_root):
    pipe = Pipeline(batch_size=8, num_threads=2, seed=5)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        coin = fn.random.coin_flip(probability=0.5)
        flipped = fn.flip(images, horizontal=coin)
        pipe.set_outputs(images, coin, flipped)
    pipe.build()
    seen = set()
    for _ in range(3):
        images, coin, flipped = pipe.run()
        for i in range(len(images)):
            c = int(np.asarray(coin.at(i)))
            seen.add(c)
            expected = images.at(i)[:, ::-1] if c else images.at(i)
            np.testing.assert_array_equal(flipped.at(i), expected)
    assert seen == {0, 1}


def test_flags_of_a_batch_equal_the_per_sample_flags():
    from dlpipe.operators.flip import _flag, flags_of

    batches = [
        [np.int32(1), np.int32(0), np.int32(1)],
        [np.array([True]), np.array([False]), np.array([True])],
        [np.float32(1.0), np.float32(0.0), np.float32(-0.0)],
        [np.int64(0), np.array([1], np.uint8), np.float64(1.0)],  # mixed: per sample
    ]
    for vals in batches:
        got = flags_of("horizontal", vals)
        assert got.dtype == np.int64
        assert got.tolist() == [_flag("horizontal", v) for v in vals]
    for bad in ([np.float32(0.5), np.float32(1)], [np.float32(np.inf)], [np.array([1, 0])]):
        with pytest.raises(ArgumentError, match="must be an integer flag"):
            flags_of("horizontal", bad)
