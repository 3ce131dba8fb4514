"""GPU resize of any layout (CHW, FHWC, CFHW, DHWC, CDHW, FDHWC, ...) with the HWC kernel of
``resize.py``, by viewing samples as batches of planes (no copies).

* The H, W pass: every (H, W[, C]) plane of every sample (over frames, depth and leading
  channels) is one "sample" of one launch, read in place through its strides and written in
  place into the output. The H and W axes are the innermost axes of every resize layout but for
  a trailing C, so a plane of a C-contiguous output is contiguous.
* 3-D layouts add a depth pass: the H, W pass writes a float32 intermediate; then each block
  from D to the last axis of it is a (D, rest) image, resized along D only (the x axis is
  sampled with the nearest filter at scale 1: a copy) into the output, in one more launch.

Rounding happens once, at the end; between the passes values are float32, as in DALI's
separable resampling. Host-side tables (:func:`plane_table`) are plain numpy and tested on the
CPU.
"""

from __future__ import annotations

import numpy as np

from .._geometry.resize_params import spatial_axes
from ._batch import alloc_batch
from .resize import resize_batch


def c_strides(shape) -> np.ndarray:
    """Element strides of a C-contiguous array of ``shape``."""
    shape = np.asarray(shape, np.int64)
    st = np.ones(len(shape), np.int64)
    if len(shape) > 1:
        st[:-1] = np.cumprod(shape[:0:-1])[::-1]
    return st


def plane_table(shape, strides, n_inner: int) -> np.ndarray:
    """Element offsets of the planes of one sample: one per index of the leading axes (all but
    the ``n_inner`` innermost), in C order."""
    lead = [int(v) for v in shape[: len(shape) - n_inner]]
    if not lead:
        return np.zeros(1, np.int64)
    idx = np.indices(lead).reshape(len(lead), -1)
    return (np.asarray(strides[: len(lead)], np.int64)[:, None] * idx).sum(axis=0)


def plane_views(ptrs, itemsize: int, shapes, strides, n_inner: int, h_ax: int, w_ax: int):
    """The (H, W, C) planes of a batch, as HWC "samples" read in place: (ptrs, shapes (P, 3),
    strides (P, 3), owning sample (P,)). ``n_inner`` is 3 when the layout ends in C (planes of
    C channels), else 2 (planes of one channel); ``h_ax``/``w_ax`` are absolute axes."""
    out_p, out_sh, out_st, owner = [], [], [], []
    for i in range(len(ptrs)):
        sh = np.asarray(shapes[i], np.int64)
        st = np.asarray(strides[i], np.int64)
        offs = plane_table(sh, st, n_inner)
        c = int(sh[-1]) if n_inner == 3 else 1
        out_p.append(np.uint64(ptrs[i]) + (offs * itemsize).astype(np.uint64))
        out_sh.append(np.tile([sh[h_ax], sh[w_ax], c], (len(offs), 1)))
        out_st.append(np.tile([st[h_ax], st[w_ax], 1], (len(offs), 1)))
        owner.append(np.full(len(offs), i, np.int64))
    return _cat(out_p, out_sh, out_st, owner)


def depth_views(ptrs, itemsize: int, shapes, d_ax: int):
    """The (D, rest, 1) images of a C-contiguous batch, one per index of the axes before D
    (``rest`` = the product of the axes after D): (ptrs, shapes, strides, owning sample)."""
    out_p, out_sh, out_st, owner = [], [], [], []
    for i in range(len(ptrs)):
        sh = np.asarray(shapes[i], np.int64)
        offs = plane_table(sh, c_strides(sh), len(sh) - d_ax)
        rest = int(np.prod(sh[d_ax + 1 :]))
        out_p.append(np.uint64(ptrs[i]) + (offs * itemsize).astype(np.uint64))
        out_sh.append(np.tile([sh[d_ax], rest, 1], (len(offs), 1)))
        out_st.append(np.tile([rest, 1, 1], (len(offs), 1)))
        owner.append(np.full(len(offs), i, np.int64))
    return _cat(out_p, out_sh, out_st, owner)


def _cat(p, sh, st, owner):
    if not p:
        return (np.zeros(0, np.uint64), np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64),
                np.zeros(0, np.int64))  # fmt: skip
    return np.concatenate(p), np.concatenate(sh), np.concatenate(st), np.concatenate(owner)


class Pass:
    """One launch of the HWC kernel: the planes of ``src`` ("in" or "mid") resized into those
    of ``dst`` ("mid" or "out"), viewed by ``views(ptrs, itemsize, shapes, strides)``."""

    def __init__(self, src, dst, views, sizes, lo, hi, dtype, x_nearest):
        self.src, self.dst, self.views = src, dst, views
        self.sizes, self.lo, self.hi = sizes, lo, hi
        self.dtype, self.x_nearest = np.dtype(dtype), x_nearest


def plan(op, layout: str, in_shapes: np.ndarray, args: dict, in_dtype):
    """The passes of a resize of a batch of ``layout``: (output shapes, intermediate shapes or
    None, [Pass]). Host arithmetic only (the CPU tests run it against a numpy launcher)."""
    spatial, c_axis = spatial_axes(layout)
    n = len(in_shapes)
    nd = len(spatial)
    params = [
        op.params_for(tuple(in_shapes[i, list(spatial)]), {k: v[i] for k, v in args.items()})
        for i in range(n)
    ]
    out_dtype = op.attrs.out_dtype(np.dtype(in_dtype))
    n_inner = 3 if c_axis is not None and c_axis == len(layout) - 1 else 2
    h_ax, w_ax = spatial[-2], spatial[-1]
    dst = np.array([p.dst_size for p in params], np.int64).reshape(n, nd)
    lo = np.array([p.src_lo for p in params], np.float64).reshape(n, nd)
    hi = np.array([p.src_hi for p in params], np.float64).reshape(n, nd)
    final_shapes = in_shapes.copy()
    final_shapes[:, list(spatial)] = dst
    mid_shapes = in_shapes.copy()
    mid_shapes[:, [h_ax, w_ax]] = dst[:, -2:]

    def planes(ptrs, item, shapes, strides):
        return plane_views(ptrs, item, shapes, strides, n_inner, h_ax, w_ax)

    def depths(ptrs, item, shapes, strides):
        return depth_views(ptrs, item, shapes, spatial[0])

    owner = plane_views(np.zeros(n, np.uint64), 1, in_shapes, in_shapes, n_inner, h_ax, w_ax)[3]
    hw = Pass(
        "in",
        "out" if nd == 2 else "mid",
        planes,
        dst[owner][:, -2:],
        lo[owner][:, -2:],
        hi[owner][:, -2:],
        out_dtype if nd == 2 else np.float32,
        False,
    )
    if nd == 2:
        return final_shapes, None, [hw]
    owner = depth_views(np.zeros(n, np.uint64), 1, mid_shapes, spatial[0])[3]
    rest = np.prod(mid_shapes[:, spatial[0] + 1 :], axis=1)[owner]
    depth = Pass(
        "mid",
        "out",
        depths,
        np.stack([dst[owner, 0], rest], axis=1),
        np.stack([lo[owner, 0], np.zeros(len(owner))], axis=1),
        np.stack([hi[owner, 0], rest.astype(np.float64)], axis=1),
        out_dtype,
        True,
    )
    return final_shapes, mid_shapes, [hw, depth]


def resize_any_layout(op, samples, layout: str, args: dict, stream):
    """``fn.resize(device="gpu")`` for a batch of ``layout`` (not HWC/HW): one launch for the
    H, W pass and, for 3-D layouts, one for the depth pass."""
    import cupy

    from ..tensors_gpu import SampleList

    s = samples
    n = len(s)
    if n and not all((s.strides[i] == c_strides(s.shapes[i])).all() for i in range(n)):
        s = SampleList.from_arrays([cupy.ascontiguousarray(x) for x in s], s.device_id)
    in_shapes = np.asarray(s.shapes, np.int64).reshape(n, -1)
    final_shapes, mid_shapes, passes = plan(op, layout, in_shapes, args, s.dtype)
    out_dtype = passes[-1].dtype
    buffers = {"in": s, "out": alloc_batch(final_shapes, out_dtype, s.device_id)}
    shapes = {"in": in_shapes, "out": final_shapes, "mid": mid_shapes}
    if n == 0 or not final_shapes.prod(axis=1).any():
        return buffers["out"]
    if mid_shapes is not None:
        buffers["mid"] = alloc_batch(mid_shapes, np.float32, s.device_id)
    a = op.attrs
    for ps in passes:
        views = []
        for name in (ps.src, ps.dst):
            b = buffers[name]
            p, sh, st, _ = ps.views(b.ptrs, b.dtype.itemsize, shapes[name], b.strides)
            views.append(SampleList(b.dtype, p, sh, st, b, b.device_id))
        resize_batch(
            views[0],
            ps.sizes,
            ps.lo,
            ps.hi,
            a.min_filter,
            a.mag_filter,
            a.antialias,
            ps.dtype,
            out=views[1],
            x_nearest=ps.x_nearest,
            stream=stream,
        )
    return buffers["out"]
