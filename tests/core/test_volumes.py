"""3-D forms of crop and flip (DHWC, CDHW, FDHWC): numpy references for windows, positions,
padding and per-sample argument inputs, and the GPU window kernel's descriptors emulated on
the host."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn
from dlpipe.kernels.window import MAX_DIMS, pack_window_descs
from dlpipe.operators.crop import Crop
from dlpipe.operators.flip import Flip


def ref_anchor(pos, n, c):
    v = float(np.float32(pos) * np.float32(n - c))
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def ref_crop3d(x, layout, dhw, pos_xyz, fill=0):
    """Pad generously with ``fill``, then slice the (D, H, W) window out."""
    pad = max(x.shape) + max(dhw) + 1
    widths = [(0, 0) if a == "C" else (pad, pad) for a in layout]
    big = np.pad(x, widths, constant_values=fill)
    index = []
    for ax, letter in enumerate(layout):
        if letter in "DHW":
            k = "DHW".index(letter)
            size, pos = dhw[k], pos_xyz[2 - k]
            a = ref_anchor(pos, x.shape[ax], size) + pad
            index.append(slice(a, a + size))
        else:
            index.append(slice(widths[ax][0], widths[ax][0] + x.shape[ax]))
    return big[tuple(index)]


def emulate_window(x, desc, ndim, fill=0):
    """What window.cu computes for one sample, from its packed descriptor."""
    out_shape = desc["out_shape"][:ndim]
    out = np.empty(out_shape, x.dtype)
    for o in itertools.product(*(range(int(n)) for n in out_shape)):
        src = []
        for a in range(ndim):
            n = int(desc["out_shape"][a])
            src.append(int(desc["anchor"][a]) + (n - 1 - o[a] if desc["flip"][a] else o[a]))
        inside = all(0 <= s < x.shape[a] for a, s in enumerate(src))
        out[o] = x[tuple(src)] if inside else fill
    return out


SHAPES = {"DHWC": (6, 7, 8, 2), "CDHW": (2, 6, 7, 8), "FDHWC": (2, 6, 7, 8, 1)}


@pytest.mark.parametrize("layout", sorted(SHAPES))
@pytest.mark.parametrize("pos", [(0.5, 0.5, 0.5), (0.0, 1.0, 0.25), (0.8, 0.1, 1.0)])
def test_crop_3d_matches_numpy(layout, pos):
    x = np.random.default_rng(0).integers(0, 255, SHAPES[layout], dtype=np.uint8)
    op = Crop(crop=(3, 4, 5), crop_pos_x=pos[0], crop_pos_y=pos[1], crop_pos_z=pos[2])
    assert op.output_layouts([layout]) == [layout]
    out = op.run_sample((x,), {}, None)
    np.testing.assert_array_equal(out, ref_crop3d(x, layout, (3, 4, 5), pos))
    op2 = Crop(crop_d=3, crop_h=4, crop_w=5, crop_pos_x=pos[0], crop_pos_y=pos[1])
    op2.output_layouts([layout])
    out2 = op2.run_sample((x,), {"crop_pos_z": np.float32(pos[2])}, None)
    np.testing.assert_array_equal(out2, out)


def test_crop_3d_pad_and_trim():
    x = np.random.default_rng(1).integers(1, 255, (4, 5, 6, 3), dtype=np.uint8)
    op = Crop(crop=(6, 5, 8), out_of_bounds_policy="pad", fill_values=7)
    op.output_layouts(["DHWC"])
    out = op.run_sample((x,), {}, None)
    np.testing.assert_array_equal(out, ref_crop3d(x, "DHWC", (6, 5, 8), (0.5, 0.5, 0.5), 7))
    trim = Crop(crop=(6, 5, 8), out_of_bounds_policy="trim_to_shape")
    trim.output_layouts(["DHWC"])
    assert trim.run_sample((x,), {}, None).shape == (4, 5, 6, 3)
    err = Crop(crop=(6, 5, 8))
    err.output_layouts(["DHWC"])
    with pytest.raises(ArgumentError, match="does not fit"):
        err.run_sample((x,), {}, None)


def test_crop_d_needs_h_and_w():
    op = Crop(crop_d=2)
    op.output_layouts(["DHWC"])
    with pytest.raises(ArgumentError, match="crop_d needs crop_h and crop_w"):
        op.run_sample((np.zeros((3, 3, 3, 1), np.uint8),), {}, None)


@pytest.mark.parametrize("layout", sorted(SHAPES))
@pytest.mark.parametrize("h, v, d", list(itertools.product((0, 1), repeat=3)))
def test_flip_3d_matches_numpy(layout, h, v, d):
    x = np.arange(np.prod(SHAPES[layout]), dtype=np.int32).reshape(SHAPES[layout])
    op = Flip(horizontal=h, vertical=v, depthwise=d)
    op.output_layouts([layout])
    ref = x
    for flag, letter in ((h, "W"), (v, "H"), (d, "D")):
        if flag:
            ref = np.flip(ref, layout.index(letter))
    np.testing.assert_array_equal(op.run_sample((x,), {}, None), ref)


def test_flip_depthwise_argument_input_in_a_pipeline():
    rng = np.random.default_rng(2)
    vols = [rng.integers(0, 255, (3 + i, 4, 5, 1), dtype=np.uint8) for i in range(4)]
    flags = [np.int32(i % 2) for i in range(4)]
    pipe = Pipeline(batch_size=4, num_threads=2)
    with pipe:
        x = fn.external_source(lambda: vols, layout="DHWC")
        f = fn.external_source(lambda: flags)
        pipe.set_outputs(fn.flip(x, horizontal=0, depthwise=f))
    pipe.build()
    (out,) = pipe.run()
    assert out.layout() == "DHWC"
    for i, v in enumerate(vols):
        np.testing.assert_array_equal(out.at(i), v[::-1] if i % 2 else v)


# --- the GPU window kernel's descriptors, emulated on the host ------------------------------


@pytest.mark.parametrize("layout", sorted(SHAPES))
def test_window_descriptors_reproduce_crop_and_flip(layout):
    rng = np.random.default_rng(3)
    x = rng.integers(1, 255, SHAPES[layout], dtype=np.uint8)
    op = Crop(crop=(5, 9, 4), crop_pos_x=0.3, crop_pos_z=0.9, out_of_bounds_policy="pad")
    op.output_layouts([layout])
    anchor, shape = op.sample_window(x.shape, layout, {})
    strides = np.array(x.strides) // x.itemsize
    d = pack_window_descs([x.shape], [strides], [anchor], [shape])[0]
    assert d["numel"] == np.prod(shape)
    np.testing.assert_array_equal(emulate_window(x, d, x.ndim), op.run_sample((x,), {}, None))
    flips = [[1 if a in "DW" else 0 for a in layout]]
    d = pack_window_descs([x.shape], [strides], [[0] * x.ndim], [x.shape], flips)[0]
    ref = np.flip(np.flip(x, layout.index("D")), layout.index("W"))
    np.testing.assert_array_equal(emulate_window(x, d, x.ndim), ref)


def test_window_descriptors_reject_too_many_dims():
    shape = [[2] * (MAX_DIMS + 1)]
    with pytest.raises(ValueError, match="up to 6 dimensions"):
        pack_window_descs(shape, shape, shape, shape)
