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


# --- 3-D resize ----------------------------------------------------------------------------


def _tri_matrix(n_in, n_out, lo=0.0, hi=None, antialias=True):
    """(n_out x n_in) linear resampling: triangle widened by the scale when shrinking
    (antialias), pixel centres at +0.5, clamped borders, weights normalised."""
    hi = n_in if hi is None else hi
    scale = (hi - lo) / n_out
    radius = max(1.0, abs(scale)) if antialias else 1.0
    c = lo + (np.arange(n_out) + 0.5) * scale
    j = np.floor(c - radius)[:, None] - 1 + np.arange(math.ceil(2 * radius) + 3)[None, :]
    w = np.clip(1 - np.abs((j + 0.5 - c[:, None]) / radius), 0, None)
    m = np.zeros((n_out, n_in))
    rows = np.repeat(np.arange(n_out), j.shape[1])
    np.add.at(m, (rows, np.clip(j, 0, n_in - 1).astype(int).ravel()), w.ravel())
    return m / m.sum(axis=1, keepdims=True)


def ref_resize3d(vol, out_dhw):
    """DHWC volume, linear with antialias, in float64."""
    md, mh, mw = (_tri_matrix(n, o) for n, o in zip(vol.shape[:3], out_dhw, strict=True))
    return np.einsum("ad,bh,cw,dhwk->abck", md, mh, mw, vol.astype(np.float64), optimize=True)


def _resize(x, layout, args=None, **kwargs):
    from dlpipe.operators.resize import Resize

    op = Resize(**kwargs)
    op.output_layouts([layout])
    return op.run_sample((x,), args or {}, None)


@pytest.mark.parametrize(
    "in_dhw, out_dhw",
    [((8, 10, 12), (4, 5, 6)), ((5, 6, 7), (9, 11, 13)), ((9, 8, 7), (3, 16, 7))],
)
def test_resize_3d_linear_matches_reference(in_dhw, out_dhw):
    rng = np.random.default_rng(4)
    vol = rng.random((*in_dhw, 2), dtype=np.float32) * 255
    out = _resize(vol, "DHWC", size=out_dhw)
    assert out.shape == (*out_dhw, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref_resize3d(vol, out_dhw), atol=0.02)
    u8 = np.rint(vol).astype(np.uint8)
    out8 = _resize(u8, "DHWC", resize_x=out_dhw[2], resize_y=out_dhw[1], resize_z=out_dhw[0])
    assert out8.dtype == np.uint8
    ref8 = np.clip(np.rint(ref_resize3d(u8, out_dhw)), 0, 255)
    assert np.abs(out8.astype(int) - ref8).max() <= 1


@pytest.mark.parametrize("layout", ["CDHW", "FDHWC", "FCDHW", "CFDHW", "DHW"])
def test_resize_3d_layouts(layout):
    rng = np.random.default_rng(5)
    dims = {"F": 2, "C": 3, "D": 6, "H": 7, "W": 8}
    x = rng.random(tuple(dims[c] for c in layout), dtype=np.float32)
    out = _resize(x, layout, size=(3, 9, 4))
    # the reference: move to (frames, D, H, W, C), resize each, move back
    lead = [i for i, c in enumerate(layout) if c == "F"]
    sp = [layout.index(c) for c in "DHW"]
    ch = [layout.index("C")] if "C" in layout else []
    t = x.transpose(lead + sp + ch)
    t = t.reshape(-1, *t.shape[len(lead) : len(lead) + 3], len(ch) and dims["C"] or 1)
    ref = np.stack([ref_resize3d(v, (3, 9, 4)) for v in t])
    expected_shape = tuple({"D": 3, "H": 9, "W": 4}.get(c, dims[c]) for c in layout)
    assert out.shape == expected_shape
    ref = ref.reshape(*[dims["F"]] * len(lead), 3, 9, 4, *(dims["C"],) * len(ch))
    np.testing.assert_allclose(out, ref.transpose(np.argsort(lead + sp + ch)), atol=1e-4)


def test_resize_3d_nearest_mode_roi_and_save_attrs():
    vol = np.arange(4 * 6 * 8, dtype=np.int16).reshape(4, 6, 8, 1)
    out, attrs = _resize(vol, "DHWC", size=(8, 3, 4), interp_type=0, save_attrs=True)
    # nearest neighbour: floor((i + 0.5) * in / out)
    iz = np.floor((np.arange(8) + 0.5) * 4 / 8).astype(int)
    iy = np.floor((np.arange(3) + 0.5) * 6 / 3).astype(int)
    ix = np.floor((np.arange(4) + 0.5) * 8 / 4).astype(int)
    np.testing.assert_array_equal(out, vol[iz][:, iy][:, :, ix])
    np.testing.assert_array_equal(attrs, [4, 6, 8])
    assert attrs.dtype == np.int32
    # resize_z alone keeps the aspect ratio (default mode): every axis scales by 2
    assert _resize(vol, "DHWC", resize_z=8).shape == (8, 12, 16, 1)
    assert _resize(vol, "DHWC", resize_shorter=8).shape == (8, 12, 16, 1)
    # a flipped depth ROI mirrors the depth axis
    flipped = _resize(vol.astype(np.float32), "DHWC", size=(4, 6, 8), roi_start=(4, 0, 0),
                      roi_end=(0, 6, 8))  # fmt: skip
    np.testing.assert_allclose(flipped, vol[::-1].astype(np.float32), atol=1e-4)
    # per-sample size as an argument input
    got = _resize(vol, "DHWC", {"size": np.array([2, 3, 4], np.float32)})
    assert got.shape == (2, 3, 4, 1)


# --- the GPU resize of other layouts: its passes, run by a numpy stand-in for the kernel -------


def _host_batch(shapes, dtype, samples=None):
    """A flat host buffer holding C-contiguous samples at 256-byte aligned offsets, like
    alloc_batch: (buffer, byte offsets as 'pointers', element strides)."""
    from dlpipe.kernels.resize_planes import c_strides

    dtype = np.dtype(dtype)
    sizes = [int(np.prod(s)) * dtype.itemsize for s in shapes]
    offs = np.cumsum([0] + [(z + 255) // 256 * 256 for z in sizes])
    buf = np.zeros(int(offs[-1]) + 256, np.uint8)
    if samples is not None:
        for o, x in zip(offs, samples, strict=False):
            buf[o : o + x.nbytes] = np.frombuffer(np.ascontiguousarray(x).tobytes(), np.uint8)
    strides = np.array([c_strides(s) for s in shapes], np.int64)
    return buf, offs[:-1].astype(np.uint64), strides


def _emulate_kernel(buf_in, dt_in, views_in, buf_out, dt_out, views_out, ps, attrs):
    """What resize_batch computes for each (H, W, C) plane, with the CPU resampler."""
    from dlpipe.operators._resize_params import ResizeParams, select_axis_filter
    from dlpipe.operators.resize import _np_resample_axis, resample

    p_in, sh_in, st_in, _ = views_in
    p_out, sh_out, _, _ = views_out
    for k in range(len(p_in)):
        src = np.lib.stride_tricks.as_strided(
            buf_in[int(p_in[k]) :].view(dt_in), tuple(sh_in[k]), tuple(st_in[k] * dt_in.itemsize)
        )
        h, w = (int(v) for v in ps.sizes[k])
        if ps.x_nearest:
            lo, hi = ps.lo[k, 0], ps.hi[k, 0]
            a, b = min(lo, hi), max(lo, hi)
            f = select_axis_filter(b - a, h, attrs.min_filter, attrs.mag_filter, attrs.antialias)
            res = _np_resample_axis(src.astype(np.float32), 0, f, h, a, b)
            res = (res[::-1] if hi < lo else res).astype(dt_out)
        else:
            p = ResizeParams((h, w), tuple(ps.lo[k]), tuple(ps.hi[k]))
            res = resample(src, p, attrs.min_filter, attrs.mag_filter, attrs.antialias, dt_out)
        dst = buf_out[int(p_out[k]) : int(p_out[k]) + res.nbytes].view(dt_out)
        dst[:] = res.reshape(-1)
        assert tuple(sh_out[k]) == res.shape


@pytest.mark.parametrize(
    "layout, size",
    [("CDHW", (3, 9, 4)), ("FDHWC", (5, 4, 6)), ("CFDHW", (6, 3, 3)), ("DHWC", (2, 8, 8)),
     ("CHW", (5, 9)), ("FHWC", (4, 3)), ("CFHW", (9, 2))],
)  # fmt: skip
def test_gpu_resize_passes_reproduce_the_cpu_resize(layout, size):
    from dlpipe.kernels.resize_planes import plan
    from dlpipe.operators.resize import Resize

    rng = np.random.default_rng(6)
    dims = {"F": 2, "C": 3, "D": 6, "H": 7, "W": 8}
    samples = []
    for i in range(3):
        shape = tuple(dims[c] + (i if c in "DHW" else 0) for c in layout)
        samples.append(rng.random(shape, dtype=np.float32) * 100)
    op = Resize(size=size)
    op.output_layouts([layout])
    in_shapes = np.array([x.shape for x in samples], np.int64)
    final_shapes, mid_shapes, passes = plan(op, layout, in_shapes, {}, np.float32)
    bufs = {
        "in": _host_batch(in_shapes, np.float32, samples),
        "out": _host_batch(final_shapes, np.float32),
    }
    shapes = {"in": in_shapes, "out": final_shapes, "mid": mid_shapes}
    if mid_shapes is not None:
        bufs["mid"] = _host_batch(mid_shapes, np.float32)
    f32 = np.dtype(np.float32)
    assert len(passes) == (2 if "D" in layout else 1)
    for ps in passes:
        (bi, pi, si), (bo, po, so) = bufs[ps.src], bufs[ps.dst]
        vi = ps.views(pi, 4, shapes[ps.src], si)
        vo = ps.views(po, 4, shapes[ps.dst], so)
        _emulate_kernel(bi, f32, vi, bo, f32, vo, ps, op.attrs)
    buf, offs, _ = bufs["out"]
    for i, x in enumerate(samples):
        got = buf[int(offs[i]) :].view(np.float32)[: int(np.prod(final_shapes[i]))]
        want = op.run_sample((x,), {}, None)
        np.testing.assert_allclose(got.reshape(final_shapes[i]), want, atol=2e-3)
