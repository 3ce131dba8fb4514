"""fn.rotate: the canvas-size rule (bounding box with DALI's parity rule), keep_size and size,
the direction (counter-clockwise), exact 90-degree turns, a float64 reference with the rotation
about the canvas centres, 3-D rotations about an axis, argument inputs, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_warp_affine import close, image, ref_warp

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.rotate import Rotate, rotated_canvas


def run(x, layout="HWC", args=None, **kwargs):
    op = Rotate(**kwargs)
    op.output_layouts([layout])
    return op.run_sample((x,), args or {}, None)


def ref_rotate(x, angle, out_hw, **kw):
    """Destination-to-source map of a CCW rotation about both centres (y down)."""
    h, w = x.shape[:2]
    oh, ow = out_hw
    a = math.radians(angle)
    r = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    t = np.array([w / 2, h / 2]) - r @ [ow / 2, oh / 2]
    return ref_warp(x, np.c_[r, t], out_hw, **kw)


@pytest.mark.parametrize(
    "hw, angle, expect",
    [
        ((10, 20), 0, (10, 20)),
        ((10, 20), 90, (20, 10)),
        ((11, 20), 90, (20, 11)),
        ((10, 20), 180, (10, 20)),
        # w: ceil(.866 * 20 + .5 * 10 - .01) = 23 -> 24 (w even); h: 19 -> 20 (h even)
        ((10, 20), 30, (20, 24)),
        ((100, 100), 45, (142, 142)),
        # |sin| > |cos|: w: ceil(4.5 + 6.06 - .01) = 11 (h odd, keep); h: 12 -> 13 (w odd)
        ((7, 9), -60, (13, 11)),
    ],
)
def test_canvas_size(hw, angle, expect):
    assert rotated_canvas(hw, angle) == expect
    assert run(image((*hw, 1)), angle=angle).shape == (*expect, 1)


@pytest.mark.parametrize("angle", [12.5, -33.0, 71.0, 135.0])
@pytest.mark.parametrize("fill", [None, 0.0])
def test_matches_reference(angle, fill):
    x = image((14, 19, 3), seed=1)
    out = run(x, angle=angle, fill_value=fill)
    close(out, ref_rotate(x, angle, out.shape[:2], fill=fill), np.uint8)


def test_counter_clockwise_quarter_turns_are_exact():
    x = image((6, 9, 3), seed=2)
    np.testing.assert_array_equal(run(x, angle=90), np.rot90(x, 1))
    np.testing.assert_array_equal(run(x, angle=-90), np.rot90(x, -1))
    np.testing.assert_array_equal(run(x, angle=180), np.rot90(x, 2))
    np.testing.assert_array_equal(run(x, angle=90, interp_type=types.INTERP_NN), np.rot90(x))


def test_keep_size_and_size():
    x = image((12, 16, 3), seed=3)
    out = run(x, angle=20, keep_size=True, fill_value=0)
    assert out.shape == x.shape
    close(out, ref_rotate(x, 20, (12, 16), fill=0.0), np.uint8)
    out = run(x, angle=-10, size=(9, 21), fill_value=0)
    assert out.shape == (9, 21, 3)
    close(out, ref_rotate(x, -10, (9, 21), fill=0.0), np.uint8)


def test_float_output_and_nearest():
    x = image((10, 13, 2), seed=4)
    out = run(x, angle=25, dtype=types.FLOAT)
    assert out.dtype == np.float32
    close(out, ref_rotate(x, 25, out.shape[:2]), np.float32)
    nn = run(x, angle=25, interp_type=types.INTERP_NN, fill_value=7)
    close(nn, ref_rotate(x, 25, nn.shape[:2], interp="nn", fill=7.0), np.uint8)


def test_3d_about_z_is_a_2d_rotation_of_every_slice():
    vol = image((4, 8, 10, 2), seed=5)
    out = run(vol, layout="DHWC", angle=90, axis=[0, 0, 1])
    assert out.shape == (4, 10, 8, 2)
    # a right-handed turn about z (x right, y down) moves +x to +y: clockwise on screen
    for d in range(4):
        np.testing.assert_array_equal(out[d], np.rot90(vol[d], -1))


def test_3d_reference():
    vol = image((5, 6, 7, 1), seed=6)
    axis = np.array([0.3, -0.5, 0.8])
    angle = 33.0
    out = run(vol, layout="DHWC", angle=angle, axis=axis.tolist(), fill_value=0)
    k = axis / np.linalg.norm(axis)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    a = -math.radians(angle)  # destination -> source: the inverse rotation
    r = np.eye(3) + math.sin(a) * kx + (1 - math.cos(a)) * kx @ kx
    in_c = np.array([7, 6, 5]) / 2
    out_c = np.array(out.shape[:3][::-1]) / 2
    m = np.c_[r, in_c - r @ out_c]
    close(out, ref_warp(vol, m, out.shape[:3], fill=0.0), np.uint8)
    # the canvas holds the rotated box, parity kept per dominant axis
    absr = np.abs(r.T)
    size = np.ceil(absr @ [7, 6, 5] - 0.01).astype(int)
    assert all(s in (o, o - 1) for s, o in zip(size, out.shape[:3][::-1], strict=True))


def test_argument_inputs_in_a_pipeline():
    imgs = [image((9, 12, 3), seed=i) for i in range(3)]
    angles = [np.float32(a) for a in (0, 45, -30)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        a = fn.external_source(lambda: angles)
        pipe.set_outputs(
            fn.rotate(x, angle=a, fill_value=0), ops.Rotate(angle=a, keep_size=True)(x)
        )
    r, k = pipe.run()
    for i in range(3):
        close(r.at(i), ref_rotate(imgs[i], float(angles[i]), r.at(i).shape[:2], fill=0.0), np.uint8)
        assert k.at(i).shape == (9, 12, 3)
    np.testing.assert_array_equal(r.at(0), imgs[0])


def test_errors():
    with pytest.raises(ArgumentError, match="angle is required"):
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
        with pipe:
            fn.rotate(fn.external_source(lambda: [image()]))
    with pytest.raises(ArgumentError, match="INTERP_CUBIC"):
        Rotate(angle=1, interp_type=types.INTERP_CUBIC)
    with pytest.raises(ArgumentError, match="nonzero vector"):
        Rotate(angle=1, axis=[0, 0, 0])
    with pytest.raises(ArgumentError, match="axis is required"):
        run(image((3, 4, 5, 1)), layout="DHWC", angle=10)
    with pytest.raises(ArgumentError, match="single number"):
        Rotate(angle=[1, 2])
