"""The arithmetic of DALI's resize, shared by the CPU operator and the GPU kernel.

* :func:`resize_params` / :func:`output_size` — a port of DALI's ``CalculateSampleParams`` and
  ``AdjustOutputSize`` (``resize_attr.cc``): output extents and the input ROI of one sample.
* :class:`AxisFilter`, :func:`select_axis_filter`, :func:`axis_coeffs` — the per-axis filter
  (DALI's ``FilterDesc`` -> ``ResamplingFilter``) and its taps: output pixel ``x`` is centred
  at ``lo + (x + 0.5) * (hi - lo) / out`` in input coordinates (pixel ``j`` spans [j, j+1)),
  each input pixel ``j`` weighs ``w((j + 0.5 - centre) / radius)``, weights are normalised to
  sum 1 and indices are clamped to the image (border replication).

Filters (DALI's defaults): ``interp_type`` = INTERP_LINEAR, i.e. ``min_filter`` = triangular
widened by ``in/out`` when ``antialias`` (default True) and ``mag_filter`` = bilinear. Cubic,
Lanczos3 and Gaussian are widened the same way (checked against DALI 2.4's CPU output). Nearest
neighbour samples ``floor(lo + (x + 0.5) * scale)`` and never antialiases.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..types import DALIInterpType

_f32 = np.float32


class ResizeMode(enum.Enum):
    """How a partially given or aspect-ratio-conflicting size is resolved (DALI ``mode``)."""

    DEFAULT = "default"
    STRETCH = "stretch"
    NOT_LARGER = "not_larger"
    NOT_SMALLER = "not_smaller"


def to_resize_mode(value: Any) -> ResizeMode:
    if isinstance(value, ResizeMode):
        return value
    try:
        return ResizeMode(str(value).lower())
    except ValueError:
        raise ArgumentError(
            f"resize: mode={value!r} is not one of {[m.value for m in ResizeMode]}"
        ) from None


# --- output size ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResizeParams:
    """Per-sample resize geometry, spatial axes in layout order (e.g. (H, W)).

    ``src_lo > src_hi`` on an axis means that axis is flipped.
    """

    dst_size: tuple[int, ...]
    src_lo: tuple[float, ...]
    src_hi: tuple[float, ...]


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def _adjust_output_size(out: list, in_size: list, mode: ResizeMode, max_size) -> None:
    """DALI's ``AdjustOutputSize``, float32 where DALI stores floats (in place on ``out``)."""
    nd = len(out)
    mask = [out[d] != 0 and in_size[d] != 0 for d in range(nd)]
    scale = [float(_f32(out[d]) / _f32(in_size[d])) if in_size[d] else 1.0 for d in range(nd)]
    provided = sum(mask)
    if provided == 0:
        out[:] = [_f32(s) for s in in_size]
        return
    if mode in (ResizeMode.DEFAULT, ResizeMode.STRETCH):
        if provided < nd:
            if mode == ResizeMode.DEFAULT:
                avg = 1.0
                for d in range(nd):
                    if mask[d]:
                        avg *= abs(scale[d])
                if provided > 1:
                    avg = avg ** (1.0 / provided)
            else:
                avg = 1.0
            for d in range(nd):
                if not mask[d]:
                    scale[d] = avg
                    out[d] = _f32(in_size[d] * avg)
        if max_size is not None:
            for d in range(nd):
                if max_size[d] > 0 and abs(out[d]) > max_size[d]:
                    out[d] = _f32(math.copysign(max_size[d], out[d]))
        return
    final = 0.0
    first = True
    for d in range(nd):
        if mask[d]:
            s = float(_f32(abs(scale[d])))
            if (
                first
                or (mode == ResizeMode.NOT_SMALLER and s > final)
                or (mode == ResizeMode.NOT_LARGER and s < final)
            ):
                final = s
            first = False
    if max_size is not None:
        for d in range(nd):
            if max_size[d] > 0:
                s = float(max_size[d]) / in_size[d]
                final = min(final, s)
    for d in range(nd):
        if not mask[d] or abs(scale[d]) != final:
            scale[d] = math.copysign(final, scale[d])
            out[d] = _f32(in_size[d] * scale[d])


def resize_params(
    in_size: Sequence[int],
    requested: Sequence[float],
    *,
    mode: ResizeMode | str = ResizeMode.DEFAULT,
    max_size: Sequence[float] | None = None,
    roi_start: Sequence[float] | None = None,
    roi_end: Sequence[float] | None = None,
    roi_relative: bool = False,
    subpixel_scale: bool = True,
) -> ResizeParams:
    """Output size and input ROI of one sample (DALI's ``CalculateSampleParams``).

    Args:
        in_size: spatial input extents in layout order, e.g. (H, W).
        requested: requested output extents in the same order; 0 = unspecified, negative
            flips that axis.
        mode: ``"default"``, ``"stretch"``, ``"not_larger"`` or ``"not_smaller"``.
        max_size: per-axis limit of the output (<= 0: no limit), or None.
        roi_start, roi_end: input region (layout order); start > end flips.
        roi_relative: ROI given as fractions of the input size.
        subpixel_scale: keep the exact scale for a fractional size by adjusting the ROI.

    Returns:
        :class:`ResizeParams` with integer output extents (each >= 1 for a non-empty input).
    """
    mode = to_resize_mode(mode)
    nd = len(in_size)
    lo: list[float] = []
    hi: list[float] = []
    for d in range(nd):
        if roi_start is not None and roi_end is not None and in_size[d] > 0:
            a, b = float(roi_start[d]), float(roi_end[d])
            if roi_relative:
                a, b = a * in_size[d], b * in_size[d]
            if abs(b - a) < 1e-3:
                off = 0.5e-3 if a <= b else -0.5e-3
                a, b = a - off, b + off
            lo.append(float(_f32(a)))
            hi.append(float(_f32(b)))
        else:
            lo.append(0.0)
            hi.append(float(in_size[d]))
    req = [_f32(r) for r in requested]
    ext: list[float] = []
    for d in range(nd):
        sz = float(_f32(hi[d] - lo[d]))
        if sz < 0:
            lo[d], hi[d] = hi[d], lo[d]
            req[d] = -req[d]
            sz = -sz
        ext.append(sz)
    _adjust_output_size(req, ext, mode, max_size)
    empty = math.prod(in_size) == 0
    for d in range(nd):
        if lo[d] == hi[d] and req[d] != 0:
            raise ArgumentError(
                f"resize: cannot produce a non-empty output from an empty input {tuple(in_size)}"
            )
    min_size = 0 if empty else 1
    dst: list[int] = []
    for d in range(nd):
        out_sz = float(req[d])
        n = max(min_size, _round_half_away(abs(out_sz)))
        dst.append(n)
        if out_sz < 0:
            lo[d], hi[d] = hi[d], lo[d]
        if subpixel_scale and n != abs(out_sz) and out_sz != 0:
            adj = min(max(n / abs(out_sz), -10.0), 10.0)
            centre = float(_f32(lo[d] + hi[d])) * 0.5
            lo[d] = float(_f32(min(max(centre + (lo[d] - centre) * adj, -1e9), 1e9)))
            hi[d] = float(_f32(min(max(centre + (hi[d] - centre) * adj, -1e9), 1e9)))
    return ResizeParams(tuple(dst), tuple(lo), tuple(hi))


def resize_params_2d(
    in_hw: np.ndarray,
    requested: Sequence[float],
    mode: ResizeMode | str = ResizeMode.DEFAULT,
    subpixel_scale: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`resize_params` for a batch of non-empty 2-D samples without ROI or ``max_size``,
    elementwise: ``(dst_size, src_lo, src_hi)`` as (n, 2) arrays whose row ``i`` equals
    ``resize_params(in_hw[i], requested, mode=mode, subpixel_scale=subpixel_scale)`` bit for
    bit (the same float32 roundings at the same steps; ``tests/core/test_resize_params_batch.py``
    checks every mode). A validation batch of photos has a new size in nearly every sample,
    and the per-sample function costs ~30 us of Python each.

    Args:
        in_hw: (n, 2) input extents, every one > 0.
        requested: the two requested extents (0 = unspecified, negative flips).
        mode, subpixel_scale: as :func:`resize_params`.
    """
    mode = to_resize_mode(mode)
    ext = np.asarray(in_hw, np.float64)
    n = len(ext)
    req32 = np.array([_f32(r) for r in requested], np.float32)
    out = np.tile(req32.astype(np.float64), (n, 1))  # float32 values, as _adjust_output_size
    scale = (req32[None, :] / ext.astype(np.float32)).astype(np.float64)
    mask = req32 != 0  # the same for every row: the extents are > 0
    provided = int(mask.sum())
    if provided == 0:
        out = ext.copy()
    elif mode in (ResizeMode.DEFAULT, ResizeMode.STRETCH):
        if provided < 2:
            d = int(np.flatnonzero(mask)[0])
            avg = np.abs(scale[:, d]) if mode == ResizeMode.DEFAULT else np.ones(n)
            u = 1 - d
            out[:, u] = (ext[:, u] * avg).astype(np.float32)
    else:
        s = np.abs(scale[:, mask])
        final = s.max(1) if mode == ResizeMode.NOT_SMALLER else s.min(1)
        for d in range(2):
            change = np.abs(scale[:, d]) != final if mask[d] else np.ones(n, bool)
            new = (ext[:, d] * np.copysign(final, scale[:, d])).astype(np.float32)
            out[:, d] = np.where(change, new, out[:, d])
    dst = np.maximum(1, np.floor(np.abs(out) + 0.5)).astype(np.int64)
    lo = np.where(out < 0, ext, 0.0)
    hi = np.where(out < 0, 0.0, ext)
    if subpixel_scale:
        a = np.abs(out)
        adjust = (dst != a) & (out != 0)
        adj = np.clip(dst / np.where(adjust, a, 1.0), -10.0, 10.0)
        centre = (lo + hi).astype(np.float32).astype(np.float64) * 0.5
        new_lo = np.clip(centre + (lo - centre) * adj, -1e9, 1e9).astype(np.float32)
        new_hi = np.clip(centre + (hi - centre) * adj, -1e9, 1e9).astype(np.float32)
        lo = np.where(adjust, new_lo, lo)
        hi = np.where(adjust, new_hi, hi)
    return dst, lo, hi


def requested_size(
    ndim: int,
    *,
    resize_x=None,
    resize_y=None,
    resize_z=None,
    size=None,
    resize_shorter=None,
    resize_longer=None,
) -> tuple[list[float], ResizeMode | None]:
    """The requested extents in layout order, and the mode that ``resize_shorter``/
    ``resize_longer`` imply (None otherwise). ``resize_z`` is the depth of a 3-D input (ignored
    for 2-D, as in DALI)."""
    if resize_shorter is not None:
        return [float(resize_shorter)] * ndim, ResizeMode.NOT_SMALLER
    if resize_longer is not None:
        return [float(resize_longer)] * ndim, ResizeMode.NOT_LARGER
    if size is not None:
        vals = np.atleast_1d(np.asarray(size, dtype=np.float64)).tolist()
        if len(vals) == 1:
            vals = vals * ndim
        if len(vals) != ndim:
            raise ArgumentError(
                f"resize: size={list(vals)} must have {ndim} extents (one per "
                "spatial axis, in layout order) or be a single number"
            )
        return vals, None
    req = [0.0] * ndim
    req[-1] = float(resize_x or 0)
    if ndim >= 2:
        req[-2] = float(resize_y or 0)
    if ndim >= 3:
        req[-3] = float(resize_z or 0)
    return req, None


def output_size(
    in_h: int,
    in_w: int,
    *,
    resize_x=None,
    resize_y=None,
    size=None,
    resize_shorter=None,
    resize_longer=None,
    mode="default",
    max_size=None,
    subpixel_scale=True,
    roi_start=None,
    roi_end=None,
    roi_relative=False,
) -> tuple[int, int]:
    """(out_h, out_w) that ``fn.resize`` with these arguments gives an ``in_h`` x ``in_w`` image.

    Example:
        >>> output_size(375, 500, resize_shorter=256)
        (256, 341)
    """
    req, implied = requested_size(
        2,
        resize_x=resize_x,
        resize_y=resize_y,
        size=size,
        resize_shorter=resize_shorter,
        resize_longer=resize_longer,
    )
    p = resize_params(
        (in_h, in_w),
        req,
        mode=implied or mode,
        max_size=_per_axis(max_size, 2, "max_size"),
        roi_start=roi_start,
        roi_end=roi_end,
        roi_relative=roi_relative,
        subpixel_scale=subpixel_scale,
    )
    return p.dst_size[0], p.dst_size[1]


def _per_axis(v, ndim: int, name: str) -> list[float] | None:
    if v is None:
        return None
    vals = np.atleast_1d(np.asarray(v, dtype=np.float64)).tolist()
    if len(vals) == 1:
        vals = vals * ndim
    if len(vals) != ndim:
        raise ArgumentError(f"resize: {name}={v!r} must have 1 or {ndim} values")
    return vals


# --- filters --------------------------------------------------------------------------------


class FilterType(enum.IntEnum):
    """DALI's ``ResamplingFilterType``."""

    NEAREST = 0
    LINEAR = 1
    TRIANGULAR = 2
    GAUSSIAN = 3
    CUBIC = 4
    LANCZOS3 = 5


_INTERP_TO_FILTER = {
    DALIInterpType.INTERP_NN: FilterType.NEAREST,
    DALIInterpType.INTERP_LINEAR: FilterType.LINEAR,
    DALIInterpType.INTERP_CUBIC: FilterType.CUBIC,
    DALIInterpType.INTERP_LANCZOS3: FilterType.LANCZOS3,
    DALIInterpType.INTERP_GAUSSIAN: FilterType.GAUSSIAN,
    DALIInterpType.INTERP_TRIANGULAR: FilterType.TRIANGULAR,
}


def interp_to_filter(interp: DALIInterpType, antialias: bool) -> FilterType:
    """DALI's promotion: linear + antialias -> triangular; triangular without it -> linear."""
    if antialias and interp == DALIInterpType.INTERP_LINEAR:
        interp = DALIInterpType.INTERP_TRIANGULAR
    elif not antialias and interp == DALIInterpType.INTERP_TRIANGULAR:
        interp = DALIInterpType.INTERP_LINEAR
    return _INTERP_TO_FILTER[interp]


@dataclass(frozen=True)
class AxisFilter:
    """One axis' resampling window: ``type`` and half-width ``radius`` in input pixels.

    The window spans ``2 * radius`` input pixels; ``support`` taps are evaluated per output.
    """

    type: FilterType
    radius: float

    @property
    def support(self) -> int:
        """Taps evaluated per output pixel."""
        return 1 if self.type == FilterType.NEAREST else window_geometry(self)[2]

    def weight(self, t: np.ndarray) -> np.ndarray:
        """Window value at signed ``t`` = distance / radius (0 outside the window).

        Evaluated as DALI does: linear interpolation in a coefficient table spanning
        t in [-1, 1] (``resampling_filters.cu``), so the left edge is included (it matters
        for the Gaussian, whose edge value is exp(-4)).
        """
        table = filter_table(self.type)
        n = len(table)
        x = (np.asarray(t, dtype=np.float64) + 1) * ((n - 1) / 2)
        x0 = np.floor(x).astype(np.int64)
        frac = x - x0
        padded = np.concatenate(([0.0], table, [0.0]))  # index -1 and n read 0
        f0 = padded[np.clip(x0, -1, n) + 1]
        f1 = padded[np.clip(x0 + 1, -1, n) + 1]
        return np.where((x > -1) & (x < n), f0 + frac * (f1 - f0), 0.0)


@functools.cache
@functools.cache
def _table_len(ftype: FilterType) -> int:
    """Entries of ``filter_table(ftype)`` (the GPU launcher asks per sample and axis)."""
    return len(filter_table(ftype))


def filter_table(ftype: FilterType) -> np.ndarray:
    """DALI's coefficient tables: triangle 3, Gaussian 65, cubic 129, Lanczos3 193 entries."""
    if ftype in (FilterType.LINEAR, FilterType.TRIANGULAR):
        return np.array([0.0, 1.0, 0.0])
    if ftype == FilterType.GAUSSIAN:
        x = np.linspace(-2, 2, 65, dtype=np.float32)
        return np.exp(-x * x).astype(np.float32).astype(np.float64)
    if ftype == FilterType.CUBIC:
        x = np.abs(np.linspace(-2, 2, 129, dtype=np.float32)).astype(np.float64)
        w = np.where(x > 1, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, (1.5 * x - 2.5) * x * x + 1)
        return np.where(x >= 2, 0.0, w)
    if ftype == FilterType.LANCZOS3:
        x = np.linspace(-3, 3, 2 * 3 * 32 + 1, dtype=np.float32).astype(np.float64)
        return np.where(np.abs(x) >= 3, 0.0, np.sinc(x) * np.sinc(x / 3))
    return np.array([1.0])


def select_axis_filter(
    in_extent: float, out_size: int, min_filter: FilterType, mag_filter: FilterType, antialias: bool
) -> AxisFilter:
    """The filter DALI uses on one axis (``SetFilters`` + ``DefaultFilterRadius``).

    ``min_filter`` applies when the axis shrinks (``out_size < in_extent``), with the
    antialias flag; ``mag_filter`` otherwise, never antialiased.
    """
    shrink = out_size < in_extent
    ftype = min_filter if shrink else mag_filter
    aa = antialias and shrink
    ratio = float(_f32(in_extent) / _f32(out_size)) if out_size else 1.0  # float, as DALI
    if ftype == FilterType.NEAREST:
        return AxisFilter(ftype, 0.5)
    if ftype == FilterType.LINEAR:
        return AxisFilter(ftype, 1.0)
    if ftype in (FilterType.TRIANGULAR, FilterType.GAUSSIAN):
        return AxisFilter(ftype, max(0.5, ratio if aa else 1.0))
    if ftype == FilterType.CUBIC:
        return AxisFilter(ftype, max(2.0, float(_f32(2 * ratio)) if aa else 2.0))
    return AxisFilter(ftype, max(3.0, float(_f32(3 * ratio)) if aa else 3.0))


def window_geometry(flt: AxisFilter) -> tuple[np.float32, np.float32, int]:
    """DALI's float32 window: (anchor, table steps per input pixel, taps).

    ``ResamplingFilter::rescale(width)`` on the coefficient table: the window is ``width``
    input pixels wide (2 * radius, computed in float32 the way each filter does it), its
    anchor is half of that; the rounding decides ties exactly as DALI does (e.g. which
    neighbour gets the Gaussian's edge weight when output and input pixels align).
    """
    n1 = _f32(_table_len(flt.type) - 1)
    r = _f32(flt.radius)
    if flt.type == FilterType.GAUSSIAN:
        sigma = _f32(float(r * _f32(0.5)) / math.sqrt(2))
        width = max(_f32(1), _f32(4 * math.sqrt(2)) * sigma)
    else:
        width = max(_f32(1), _f32(2) * r)
    tab_scale = n1 / width
    anchor = _f32(1) * (n1 * _f32(0.5)) / tab_scale
    taps = int(math.ceil(n1 / tab_scale))
    return anchor, tab_scale, taps


def axis_coeffs(
    flt: AxisFilter, out_size: int, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Taps of one axis: ``first`` (int32, out_size) input index of tap 0 and ``coeffs``
    (float32, out_size x taps), normalised; indices are not clamped (the caller clamps).

    A port of DALI's ``InitializeResamplingFilter`` (float32 arithmetic throughout). For
    nearest neighbour, ``first`` is ``floor(lo + (x + 0.5) * scale)`` and ``coeffs`` ones.
    """
    scale = _f32(_f32(hi) - _f32(lo)) / _f32(out_size)
    x = np.arange(out_size, dtype=np.float32)
    if flt.type == FilterType.NEAREST:
        centre = _f32(lo) + (x + _f32(0.5)) * scale
        return np.floor(centre).astype(np.int32), np.ones((out_size, 1), np.float32)
    anchor, tab_scale, taps = window_geometry(flt)
    src0 = _f32(lo) + _f32(0.5) * scale - _f32(0.5) - anchor
    sx0f = x * scale + src0
    first = np.ceil(sx0f)
    f0 = first - sx0f
    idx = (f0[:, None] + np.arange(taps, dtype=np.float32)[None, :]) * tab_scale
    n = len(filter_table(flt.type))
    w = flt.weight(idx.astype(np.float64) * (2 / (n - 1)) - 1)  # table index -> t
    tot = w.sum(axis=1, keepdims=True)
    w = np.divide(w, tot, out=np.zeros_like(w), where=tot != 0)
    return first.astype(np.int32), w.astype(np.float32)


# --- layouts ----------------------------------------------------------------------------------

# DALI's resize input layouts (``resize.cc``), plus HW/FHW/DHW/FDHW (no channel axis).
RESIZE_LAYOUTS = (
    "HW", "HWC", "CHW", "FHW", "FHWC", "FCHW", "CFHW",
    "DHW", "DHWC", "CDHW", "FDHW", "FDHWC", "FCDHW", "CFDHW",
)  # fmt: skip
DEFAULT_RESIZE_LAYOUTS = {2: "HW", 3: "HWC", 4: "FHWC"}


def spatial_axes(layout: str, who: str = "resize") -> tuple[tuple[int, ...], int | None]:
    """The spatial axes (D, H, W or H, W, in layout order) and the channel axis (or None) of a
    resize input layout.

    Raises:
        ArgumentError: a layout resize does not take (spatial axes not adjacent, ...).
    """
    if layout not in RESIZE_LAYOUTS:
        raise ArgumentError(
            f"{who}: input layout {layout!r} is not supported; use one of {list(RESIZE_LAYOUTS)} "
            "(spatial dimensions adjacent)"
        )
    spatial = tuple(i for i, c in enumerate(layout) if c in "DHW")
    c = layout.find("C")
    return spatial, (c if c >= 0 else None)
