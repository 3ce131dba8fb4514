"""Affine warping shared by ``fn.warp_affine`` and ``fn.rotate``: DALI's sampling numerics on the
CPU, layouts, type pairs and border values. The GPU kernel (``kernels/warp.cu``) computes the
same float32 expressions in the same order, so both give identical results.

DALI's convention (``dali/kernels/imgproc/warp``, ``sampler.h``): an output pixel ``(x, y)`` is
mapped by its centre, ``src = M @ (x + 0.5, y + 0.5, 1)`` (``M`` maps destination to source,
``[0, 0]`` is the corner of the first pixel), summed as ``(M[0, 2] + M[0, 0] * x) + M[0, 1] * y``
in float32. Nearest neighbour takes the pixel ``floor(src)``. Linear interpolation moves to
pixel-centred coordinates (``src - 0.5``), takes the 4 (2-D) or 8 (3-D) neighbours at
``floor`` and ``floor + 1`` and blends them in float32::

    s0 = s00 * (1 - qx) + s01 * qx;  s1 = s10 * (1 - qx) + s11 * qx;  out = s0 + (s1 - s0) * qy

Outside the image, without ``fill_value`` the coordinates are clamped to the edge; with it the
border value is ``fill_value`` converted to the output type (and, where linear interpolation
reads it as a neighbour, then to the input type). The result is converted with ``ConvertSat``
(integers round half away from zero and saturate).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator
from ..kernels.warp import warp_batch
from ..types import DALIInterpType, to_interp_type
from .cast import convert_sat, parse_dtype

__all__ = [
    "WarpLayout",
    "WarpOp",
    "border_values",
    "check_types",
    "parse_interp",
    "parse_size",
    "warp_sample",
]

# DALI's Warp supports these (output, input) type pairs only.
_PAIRS = {
    (np.dtype(o), np.dtype(i))
    for t in (np.uint8, np.int16, np.int32)
    for o, i in ((t, t), (t, np.float32), (np.float32, t))
} | {(np.dtype(np.float32), np.dtype(np.float32))}


def check_types(who: str, in_dtype, out_dtype) -> None:
    """ArgumentError unless (output, input) is a type pair DALI's warp supports."""
    if (np.dtype(out_dtype), np.dtype(in_dtype)) not in _PAIRS:
        raise ArgumentError(
            f"{who}: unsupported input/output types {np.dtype(in_dtype)} -> "
            f"{np.dtype(out_dtype)}; supported: uint8, int16, int32 and float32, each to itself "
            "or to/from float32"
        )


def parse_interp(who: str, value: Any) -> DALIInterpType:
    """The interpolation: INTERP_NN or INTERP_LINEAR (DALI's warps support no other)."""
    try:
        interp = to_interp_type(value)
    except ValueError:
        raise ArgumentError(f"{who}: interp_type={value!r} is not an interpolation type") from None
    if interp not in (DALIInterpType.INTERP_NN, DALIInterpType.INTERP_LINEAR):
        raise ArgumentError(
            f"{who}: interp_type={interp.name} is not supported; only INTERP_NN and "
            "INTERP_LINEAR (nearest and linear interpolation) are"
        )
    return interp


def parse_size(who: str, value: Any, spatial_ndim: int | None = None) -> tuple[int, ...] | None:
    """``size`` (float values, rounded to nearest, at least 1); None or [] means not given."""
    if value is None:
        return None
    arr = np.asarray(value, np.float64).reshape(-1)
    if arr.size == 0:
        return None
    if not np.all(arr > 0):
        raise ArgumentError(f"{who}: size={np.asarray(value).tolist()} must be positive")
    if spatial_ndim is not None and arr.size != spatial_ndim:
        raise ArgumentError(
            f"{who}: size={arr.tolist()} must give {spatial_ndim} extents (the spatial "
            "dimensions, without channels)"
        )
    # C's roundf: halves away from zero
    return tuple(max(int(np.floor(v + 0.5)), 1) for v in arr.astype(np.float32))


def border_values(fill_value: float | None, in_dtype, out_dtype) -> tuple[Any, Any] | None:
    """(border as the output type, border as the input type), or None to clamp to the edge."""
    if fill_value is None:
        return None
    out_b = convert_sat(np.array([fill_value], np.float32), out_dtype)
    in_b = convert_sat(out_b, in_dtype)
    return out_b[0], in_b[0]


class WarpLayout:
    """How a sample's axes map to frames, space and channels.

    Accepts DALI's ``HWC``, ``DHWC``, ``FHWC``, ``FDHWC``; without a layout a sample of 2, 3
    or 4 dimensions is HW, HWC or DHWC. A missing channel axis (``HW``, ``DHW``, ``FHW``) is
    treated as one channel (DALI's AutoExpandDims) and the output keeps the input's rank.
    """

    def __init__(self, who: str, layout: str, ndim: int):
        if not layout:
            layout = {2: "HW", 3: "HWC", 4: "DHWC"}.get(ndim, "")
        ok = ("HWC", "DHWC", "FHWC", "FDHWC", "HW", "DHW", "FHW", "FDHW")
        if layout not in ok or len(layout) != ndim:
            raise ArgumentError(
                f"{who}: input layout {layout!r} ({ndim}-D samples) is not supported; use HWC, "
                "DHWC, FHWC or FDHWC (channels last)"
            )
        self.layout = layout
        self.frames = layout[0] == "F"
        self.channels = layout[-1] == "C"
        self.spatial_ndim = 3 if "D" in layout else 2

    def split(self, x: np.ndarray) -> np.ndarray:
        """The sample as (frames, *spatial, channels)."""
        if not self.channels:
            x = x[..., None]
        if not self.frames:
            x = x[None]
        return x

    def spatial_shape(self, shape) -> tuple[int, ...]:
        start = 1 if self.frames else 0
        return tuple(int(v) for v in shape[start : start + self.spatial_ndim])

    def out_shape(self, in_shape, out_spatial) -> tuple[int, ...]:
        shape = tuple(out_spatial)
        if self.frames:
            shape = (int(in_shape[0]), *shape)
        if self.channels:
            shape = (*shape, int(in_shape[-1]))
        return shape


def _coords(m: np.ndarray, out_spatial: tuple[int, ...]) -> list[np.ndarray]:
    """Source coordinates (x, y[, z]) of every output pixel centre, float32, DALI's order."""
    f32 = np.float32
    if len(out_spatial) == 2:
        oh, ow = out_spatial
        xs = np.arange(ow, dtype=f32) + f32(0.5)
        ys = (np.arange(oh, dtype=f32) + f32(0.5))[:, None]
        return [(m[i, 2] + m[i, 0] * xs) + m[i, 1] * ys for i in range(2)]
    od, oh, ow = out_spatial
    xs = np.arange(ow, dtype=f32) + f32(0.5)
    ys = (np.arange(oh, dtype=f32) + f32(0.5))[:, None]
    zs = (np.arange(od, dtype=f32) + f32(0.5))[:, None, None]
    return [((m[i, 3] + m[i, 0] * xs) + m[i, 1] * ys) + m[i, 2] * zs for i in range(3)]


def _floor_int(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """floor(v) as int64, clipped to [lo, hi] (done in float first: no overflow for huge v)."""
    return np.clip(np.floor(v), lo, hi).astype(np.int64)


def _warp_nn(img, coords, border):
    spatial = img.shape[:-1]
    nd = len(spatial)
    idx = [_floor_int(c, -1, size) for c, size in zip(coords, spatial[::-1], strict=True)]
    inside = None
    if border is not None:
        for i, size in zip(idx, spatial[::-1], strict=True):
            ok = (i >= 0) & (i < size)
            inside = ok if inside is None else inside & ok
    flat = 0
    stride = 1
    for a in range(nd):  # x, y, z -> flat index into (..., W) row-major
        size = spatial[nd - 1 - a]
        flat = flat + np.clip(idx[a], 0, size - 1) * stride
        stride *= size
    out = np.take(img.reshape(-1, img.shape[-1]), flat.reshape(-1), axis=0)
    return out.reshape(*flat.shape, img.shape[-1]), inside


def _lerp(a: np.ndarray, b: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``a * p + b * q`` in float32 (a new array)."""
    out = a * p
    out += b * q
    return out


def _warp_linear(img, coords, border_in):
    """Linear interpolation, channel by channel on the planes of the 2-pixel padded image
    (taps beyond the edge read the padding: the border value, or the edge with clamping).
    Returns float32 (*out_spatial, C)."""
    f32 = np.float32
    spatial = img.shape[:-1]
    nd = len(spatial)
    channels = img.shape[-1]
    pad = [(2, 2)] * nd + [(0, 0)]
    if border_in is None:
        padded = np.pad(img, pad, mode="edge")
    else:
        padded = np.pad(img, pad, mode="constant", constant_values=border_in)
    # float32 planes: the taps are converted once, as DALI converts each read to float
    planes = np.moveaxis(padded, -1, 0).astype(f32, order="C").reshape(channels, -1)
    pshape = padded.shape[:-1]
    out_shape = coords[0].shape
    base = np.zeros(coords[0].size, np.int64)
    frac = []
    stride = 1
    strides = []
    for c, size, a in zip(coords, spatial[::-1], range(nd), strict=True):  # x, y, z
        v = c.reshape(-1) - f32(0.5)
        i0 = np.floor(v)
        frac.append(v - i0)
        base += (np.clip(i0, -2, size).astype(np.int64) + 2) * stride
        strides.append(stride)
        stride *= pshape[nd - 1 - a]
    qx, qy = frac[0], frac[1]
    px = f32(1) - qx
    sx, sy = strides[0], strides[1]
    offsets = [0, sx, sy, sy + sx]  # (x0, y0), (x0 + 1, y0), (x0, y0 + 1), (x0 + 1, y0 + 1)
    if nd == 3:
        py = f32(1) - qy
        qz = frac[2]
        sz = strides[2]
        offsets += [o + sz for o in offsets]
    idx = [base + o if o else base for o in offsets]
    out = np.empty((channels, base.size), f32)
    for ch in range(channels):
        plane = planes[ch]
        t = [plane.take(i) for i in idx]
        if nd == 2:
            s0 = _lerp(t[0], t[1], px, qx)
            s1 = _lerp(t[2], t[3], px, qx)
            qz_, res = qy, s1
        else:
            s0 = _lerp(_lerp(t[0], t[1], px, qx), _lerp(t[2], t[3], px, qx), py, qy)
            s1 = _lerp(_lerp(t[4], t[5], px, qx), _lerp(t[6], t[7], px, qx), py, qy)
            qz_, res = qz, s1
        res -= s0  # s0 + (s1 - s0) * q
        res *= qz_
        res += s0
        out[ch] = res
    return np.moveaxis(out.reshape(channels, *out_shape), 0, -1)


def warp_sample(
    x: np.ndarray,
    lay: WarpLayout,
    m: np.ndarray,
    out_spatial: tuple[int, ...],
    interp: DALIInterpType,
    border: tuple | None,
    out_dtype,
) -> np.ndarray:
    """Warp one sample (every frame with the same matrix).

    Args:
        x: the sample, laid out as ``lay`` says.
        lay: its layout.
        m: the destination-to-source matrix, float32 (2, 3) or (3, 4).
        out_spatial: the output's (H, W) or (D, H, W).
        interp: INTERP_NN or INTERP_LINEAR.
        border: from :func:`border_values` (None: clamp to the edge).
        out_dtype: the output type.

    Returns:
        The warped sample, C-contiguous.
    """
    out_dtype = np.dtype(out_dtype)
    frames = lay.split(x)
    m = np.asarray(m, np.float32)
    coords = _coords(m, tuple(out_spatial))
    out = np.empty((frames.shape[0], *out_spatial, frames.shape[-1]), out_dtype)
    for f in range(frames.shape[0]):
        img = frames[f]
        if interp == DALIInterpType.INTERP_NN:
            vals, inside = _warp_nn(img, coords, border)
            if vals.dtype == out_dtype:
                out[f] = vals
            else:
                convert_sat(vals, out_dtype, out=out[f])
            if inside is not None:
                out[f][~inside] = border[0]
        else:
            vals = _warp_linear(img, coords, None if border is None else border[1])
            if out_dtype == np.float32:
                out[f] = vals
            else:
                convert_sat(vals, out_dtype, out=out[f])
    if not lay.frames:
        out = out[0]
    if not lay.channels:
        out = out[..., 0]
    return out


class WarpOp(Operator):
    """Base of ``warp_affine`` and ``rotate``: the common arguments (``size``, ``fill_value``,
    ``interp_type``, ``dtype``), the layout, and running a sample given its matrix."""

    devices = ("cpu", "gpu")

    def _setup_warp(self, size, fill_value, interp_type, dtype, output_dtype) -> None:
        self.size = parse_size(self.schema, size)
        if self.size is not None and len(self.size) not in (2, 3):
            raise ArgumentError(f"{self.schema}: size={size!r} must give 2 or 3 extents")
        if fill_value is not None:
            fv = np.asarray(fill_value, np.float64).reshape(-1)
            if fv.size != 1:
                raise ArgumentError(f"{self.schema}: fill_value={fill_value!r} must be a number")
            fill_value = float(fv[0])
        self.fill_value = fill_value
        self.interp = parse_interp(self.schema, interp_type)
        if dtype is not None and output_dtype is not None:
            raise ArgumentError(f"{self.schema}: give dtype or output_dtype, not both")
        self.dtype = parse_dtype(dtype if dtype is not None else output_dtype, self.schema)
        self._layout = ""
        self._borders: dict = {}  # (input dtype, output dtype) -> border_values(...)

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def _out_dtype(self, in_dtype) -> np.dtype:
        out = self.dtype or np.dtype(in_dtype)
        check_types(self.schema, in_dtype, out)
        return out

    def _size_of(self, args: dict, lay: WarpLayout) -> tuple[int, ...] | None:
        size = parse_size(self.schema, args["size"]) if "size" in args else self.size
        if size is not None and len(size) != lay.spatial_ndim:
            raise ArgumentError(
                f"{self.schema}: size={list(size)} must give {lay.spatial_ndim} extents for "
                f"{lay.layout!r} input (no channels)"
            )
        return size

    def _layout_of(self, ndim: int) -> WarpLayout:
        return WarpLayout(self.schema, self._layout, ndim)

    def _sample_params(self, inputs, args, shape) -> tuple[np.ndarray, tuple[int, ...]]:
        """(destination-to-source matrix, output spatial shape) of one sample."""
        raise NotImplementedError

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        lay = self._layout_of(x.ndim)
        out_dtype = self._out_dtype(x.dtype)
        m, out_spatial = self._sample_params(inputs, args, x.shape)
        border = border_values(self.fill_value, x.dtype, out_dtype)
        return warp_sample(x, lay, m, out_spatial, self.interp, border, out_dtype)

    def run_batch(self, inputs, args, params, stream):
        s = inputs[0]
        n = len(s)
        if n == 0:
            return s
        lay = self._layout_of(s.shapes.shape[1])
        out_dtype = self._out_dtype(s.dtype)
        mats, sizes = self._batch_params(inputs, args, s.shapes, stream)
        key = (s.dtype, out_dtype)
        border = self._borders.get(key, False)
        if border is False:
            border = self._borders[key] = border_values(self.fill_value, s.dtype, out_dtype)
        return warp_batch(
            s,
            lay.frames,
            lay.channels,
            lay.spatial_ndim,
            mats,
            sizes,
            int(self.interp),
            border,
            out_dtype,
            stream=stream,
        )

    def _batch_params(self, inputs, args, shapes, stream):
        """(matrices: float32 (N, nd * (nd + 1)) numpy, or a device array; output spatial
        shapes (N, nd)) of a batch of samples of ``shapes`` (N, ndim). This one works sample
        by sample (:meth:`_sample_params`); the subclasses build the common cases with numpy
        over the batch and come here for the others."""
        mats, sizes = [], []
        for i, shape in enumerate(shapes):
            m, size = self._sample_params((None,), {k: v[i] for k, v in args.items()}, shape)
            mats.append(m)
            sizes.append(size)
        return np.asarray(mats, np.float32).reshape(len(shapes), -1), sizes

    def _batch_sizes(self, args, shapes: np.ndarray, lay: WarpLayout) -> np.ndarray | None:
        """The output spatial shapes (N, nd) when no ``size`` argument input is given: the
        ``size`` argument, else the input's; None with a ``size`` argument input."""
        if "size" in args:
            return None
        size = self._size_of({}, lay)
        if size is not None:
            return np.broadcast_to(np.array(size, np.int64), (len(shapes), len(size)))
        start = 1 if lay.frames else 0
        return shapes[:, start : start + lay.spatial_ndim]
