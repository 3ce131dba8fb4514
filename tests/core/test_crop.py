"""fn.crop and the shared window arithmetic: a numpy reference (np.pad + slicing) over layouts,
dtypes, positions and out-of-bounds policies; argument inputs; errors and their messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.crop import (
    Crop,
    OutOfBoundsPolicy,
    apply_out_of_bounds_policy,
    crop_anchor,
    crop_window,
    pad_copy_extents,
)


def ref_anchor(pos, n, c):
    v = float(np.float32(pos) * np.float32(n - c))
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def ref_crop(x, layout, hw, pos_xy, policy="error", fill=(0,), dtype=None):
    """Pads the input generously, then slices the window out of it."""
    anchors, sizes = [0] * x.ndim, list(x.shape)
    for letter, size, pos in (("H", hw[0], pos_xy[1]), ("W", hw[1], pos_xy[0])):
        ax = layout.index(letter)
        anchors[ax] = ref_anchor(pos, x.shape[ax], size)
        sizes[ax] = size
    if policy == "trim_to_shape":
        ends = [min(a + s, n) for a, s, n in zip(anchors, sizes, x.shape, strict=True)]
        anchors = [min(max(a, 0), n) for a, n in zip(anchors, x.shape, strict=True)]
        sizes = [max(e - a, 0) for a, e in zip(anchors, ends, strict=True)]
    dtype = dtype or x.dtype
    pad = max(x.shape) + max(hw) + 2
    c_ax = layout.find("C")
    fill = np.asarray(fill, np.float64)
    planes = []
    for c in range(x.shape[c_ax] if c_ax >= 0 else 1):
        plane = np.take(x, c, axis=c_ax) if c_ax >= 0 else x
        f = fill[c] if fill.size > 1 else fill[0]
        planes.append(np.pad(plane.astype(np.float64), pad, constant_values=f))
    big = np.stack(planes, axis=c_ax) if c_ax >= 0 else planes[0]
    sl = []
    for d in range(x.ndim):
        off = 0 if d == c_ax else pad
        sl.append(slice(anchors[d] + off, anchors[d] + off + sizes[d]))
    out = big[tuple(sl)]
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        out = np.clip(np.sign(out) * np.floor(np.abs(out) + 0.5), info.min, info.max)
    return out.astype(dtype)


def run_op(x, layout, args=None, **kwargs):
    op = Crop(**kwargs)
    assert op.output_layouts([layout]) == [layout]
    return op.run_sample((x,), args or {}, None)


def make(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-10, 300, shape).astype(dtype)
    return rng.integers(0, 120, shape).astype(dtype)


@pytest.mark.parametrize(
    "layout, shape", [("HWC", (9, 12, 3)), ("CHW", (2, 9, 12)), ("HW", (9, 12))]
)
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32])
@pytest.mark.parametrize("pos", [(0.0, 0.0), (0.5, 0.5), (1.0, 0.25), (0.3, 0.7)])
def test_crop_matches_numpy(layout, shape, dtype, pos):
    x = make(shape, dtype)
    out = run_op(x, layout, crop=(5, 7), crop_pos_x=pos[0], crop_pos_y=pos[1])
    np.testing.assert_array_equal(out, ref_crop(x, layout, (5, 7), pos))
    assert out.dtype == dtype and out.flags.c_contiguous


@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
@pytest.mark.parametrize(
    "hw, pos",
    [((15, 20), (0.5, 0.5)), ((4, 20), (0.0, 1.0)), ((15, 3), (1.0, 0.2)), ((11, 15), (0.1, 0.9))],
)
def test_out_of_bounds_policies(policy, hw, pos):
    x = make((9, 12, 3), np.uint8, seed=1)
    fill = (7, 8, 9)
    out = run_op(
        x,
        "HWC",
        crop=hw,
        crop_pos_x=pos[0],
        crop_pos_y=pos[1],
        out_of_bounds_policy=policy,
        fill_values=fill,
    )
    np.testing.assert_array_equal(out, ref_crop(x, "HWC", hw, pos, policy, fill))


def test_pad_single_fill_value_and_dtype_conversion():
    x = make((6, 6, 2), np.float32, seed=2)
    out = run_op(
        x,
        "HWC",
        crop_h=10,
        crop_w=4,
        out_of_bounds_policy="pad",
        fill_values=300.0,
        dtype=types.UINT8,
    )
    np.testing.assert_array_equal(
        out, ref_crop(x, "HWC", (10, 4), (0.5, 0.5), "pad", (300,), np.uint8)
    )


def test_volumetric_crop_d():
    x = make((6, 7, 8, 2), np.uint8, seed=3)
    out = run_op(x, "DHWC", crop=(2, 3, 4), crop_pos_z=1.0, crop_pos_y=0.0, crop_pos_x=0.5)
    np.testing.assert_array_equal(out, x[4:6, 0:3, 2:6])
    frames = run_op(x, "FHWC", crop_d=3, crop_h=7, crop_w=8, crop_pos_z=0.0)
    np.testing.assert_array_equal(frames, x[0:3])


def test_no_crop_arguments_is_the_whole_input_and_zero_extent_keeps_axis():
    x = make((5, 6, 3), np.uint8)
    np.testing.assert_array_equal(run_op(x, "HWC"), x)
    np.testing.assert_array_equal(run_op(x, "HWC", crop=(0, 2), crop_pos_x=0.0), x[:, :2])


def test_unknown_layout_is_guessed_from_rank():
    x = make((5, 6, 3), np.uint8)
    np.testing.assert_array_equal(run_op(x, "", crop=(2, 2), crop_pos_x=0, crop_pos_y=0), x[:2, :2])


def test_window_helpers():
    assert crop_anchor(0.5, 10, 5) == 3  # 2.5 -> 3, half away from zero
    assert crop_anchor(0.5, 10, 15) == -3  # -2.5 -> -3
    assert crop_window((10, 20, 3), "HWC", {"H": 4, "W": 0}, {"H": 1.0}) == ([6, 0, 0], [4, 20, 3])
    assert pad_copy_extents(-2, 5, 10) == (2, 5, 3)
    assert pad_copy_extents(3, 5, 2) == (0, 2, 0)
    assert apply_out_of_bounds_policy(OutOfBoundsPolicy.TRIM_TO_SHAPE, (5, 5), [-2, 3], [4, 4]) == (
        [0, 3],
        [2, 2],
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(crop=(2, 2), crop_h=2), "cannot be combined"),
        (dict(crop=(1,)), r"crop=\(1,\)"),
        (dict(crop_pos_x=1.5), "crop_pos_x=1.5"),
        (dict(crop_pos_y=-0.1), "crop_pos_y=-0.1"),
        (dict(out_of_bounds_policy="wrap"), "out_of_bounds_policy='wrap'"),
        (dict(fill_values=[]), "fill_values"),
        (dict(dtype="nope"), "dtype='nope'"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        Crop(**kwargs)


def test_run_time_errors():
    x = make((5, 6, 3), np.uint8)
    with pytest.raises(ArgumentError, match=r"does not fit the input of shape \[5, 6, 3\]"):
        run_op(x, "HWC", crop=(8, 2))
    with pytest.raises(ArgumentError, match="crop_h and crop_w must be given together"):
        run_op(x, "HWC", {"crop_h": np.float32(2)})
    with pytest.raises(ArgumentError, match="crop_pos_x=2.0 is out of range"):
        run_op(x, "HWC", {"crop_pos_x": np.float32(2)}, crop=(2, 2))
    with pytest.raises(ArgumentError, match="fill_values"):
        run_op(x, "HWC", crop=(8, 2), out_of_bounds_policy="pad", fill_values=[1, 2])
    with pytest.raises(ArgumentError, match="2 dimensions but its layout is 'HWC'"):
        run_op(np.zeros((2, 3)), "HWC", crop=(1, 1))


def test_pipeline_argument_inputs(image_root):
    pipe = Pipeline(batch_size=6, num_threads=3, seed=4)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        px = fn.random.uniform(range=(0.0, 1.0))
        py = fn.random.uniform(range=(0.0, 1.0))
        size = fn.random.uniform(values=[8.0, 16.0, 30.0])
        cropped = fn.crop(images, crop_h=size, crop_w=20, crop_pos_x=px, crop_pos_y=py)
        legacy = ops.Crop(crop=(10, 10), crop_pos_x=0.0, crop_pos_y=0.0)(images)
        pipe.set_outputs(images, px, py, size, cropped, legacy)
    images, px, py, size, cropped, legacy = pipe.run()
    assert cropped.layout() == "HWC"
    for i in range(len(images)):
        img = images.at(i)
        h = int(np.asarray(size.at(i)))
        pos = (float(np.asarray(px.at(i))), float(np.asarray(py.at(i))))
        np.testing.assert_array_equal(cropped.at(i), ref_crop(img, "HWC", (h, 20), pos))
        np.testing.assert_array_equal(legacy.at(i), img[:10, :10])


def test_argument_inputs_as_one_element_arrays():
    x = make((5, 6, 3), np.uint8)
    args = {
        "crop_h": np.array([2.0], np.float32),
        "crop_w": np.array([3], np.int32),
        "crop_pos_x": np.array([0.0], np.float32),
        "crop_pos_y": np.float32(1.0),
    }
    np.testing.assert_array_equal(run_op(x, "HWC", args), x[3:5, 0:3])
    np.testing.assert_array_equal(run_op(x, "HWC", {"crop": np.array([1.0, 2.0])}), x[2:3, 2:4])


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
def test_gpu_matches_cpu(image_root, policy):
    pytest.importorskip("cupy")
    pipe = Pipeline(batch_size=6, num_threads=2, device_id=0, seed=5)

    def build(images):
        return fn.crop(
            images,
            crop=(70, 50),
            crop_pos_x=fn.random.uniform(range=(0, 1), seed=1),
            crop_pos_y=fn.random.uniform(range=(0, 1), seed=2),
            out_of_bounds_policy=policy,
            fill_values=[5, 6, 7],
            dtype=types.FLOAT,
        )

    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        pipe.set_outputs(build(images.gpu()), build(images))
    g, c = pipe.run()
    g = g.as_cpu()
    for i in range(len(c)):
        np.testing.assert_array_equal(g.at(i), c.at(i))


@pytest.mark.parametrize(
    "kwargs, args",
    [
        (dict(crop_h=2, crop_w=2), {"crop": np.array([3.0, 3.0])}),
        (dict(crop=(3, 3)), {"crop_h": np.float32(2), "crop_w": np.float32(2)}),
    ],
)
def test_crop_with_crop_hw_through_argument_inputs_is_refused(kwargs, args):
    # one of the two sizes was silently ignored
    x = np.zeros((6, 6, 3), np.uint8)
    with pytest.raises(ArgumentError, match="cannot be combined"):
        run_op(x, "HWC", args, **kwargs)
