"""``fn.resize``: DALI's separable resampling on the CPU.

The size arithmetic and the filters are in ``_geometry/resize_params.py`` (the GPU kernel uses
them too). :func:`resample` picks the fastest backend that gives DALI's numbers: OpenCV
``INTER_LINEAR`` when every axis uses the plain bilinear filter on the whole image; Pillow
(``BILINEAR``/``BICUBIC``/``LANCZOS`` widen their support by the scale factor when shrinking,
exactly like DALI's antialiasing) for the rest of uint8/float32, with an edge-replicated border
so taps outside the image clamp as in DALI; a numpy gather for nearest neighbour; and a
separable numpy implementation for everything else (Gaussian, other dtypes).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import cv2
import numpy as np
from PIL import Image

from .._geometry.resize_params import (
    DEFAULT_RESIZE_LAYOUTS,
    RESIZE_LAYOUTS,
    AxisFilter,
    FilterType,
    ResizeMode,
    ResizeParams,
    _per_axis,
    axis_coeffs,
    filter_table,
    interp_to_filter,
    output_size,
    requested_size,
    resize_params,
    resize_params_2d,
    select_axis_filter,
    spatial_axes,
    to_resize_mode,
    window_geometry,
)
from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import to_interp_type, to_numpy_dtype
from .cast import convert_sat

cv2.setNumThreads(1)

_f32 = np.float32

# --- resampling -----------------------------------------------------------------------------

_PIL_FILTER = {
    FilterType.LINEAR: Image.BILINEAR,
    FilterType.TRIANGULAR: Image.BILINEAR,
    FilterType.CUBIC: Image.BICUBIC,
    FilterType.LANCZOS3: Image.LANCZOS,
}
_PIL_BASE_RADIUS = {Image.BILINEAR: 1.0, Image.BICUBIC: 2.0, Image.LANCZOS: 3.0}


_NEGATIVE_LOBES = (FilterType.CUBIC, FilterType.LANCZOS3)


def _pil_filter(flt: AxisFilter, in_extent: float, out_size: int) -> int | None:
    """The Pillow filter that gives exactly ``flt`` on this axis, or None."""
    pf = _PIL_FILTER.get(flt.type)
    if pf is None:
        return None
    want = _PIL_BASE_RADIUS[pf] * max(1.0, in_extent / out_size)
    return pf if abs(want - flt.radius) <= 1e-6 * want else None


def _to_pil(plane: np.ndarray) -> Image.Image:
    h, w = plane.shape[:2]
    if plane.dtype == np.float32:
        mode = "F"
    elif plane.ndim == 2:
        mode = "L"
    else:
        mode = {3: "RGB", 4: "CMYK"}[plane.shape[2]]
    return Image.frombuffer(mode, (w, h), np.ascontiguousarray(plane), "raw", mode, 0, 1)


def _pil_resample(img: np.ndarray, out_h: int, out_w: int, box, fy: int, fx: int) -> np.ndarray:
    """Pillow resize of ``img`` (uint8 with 1/3/4 channels, or 2-D float32) over ``box``."""
    squeeze = img.ndim == 3 and img.shape[2] == 1
    pim = _to_pil(img[:, :, 0] if squeeze else img)
    if fy == fx:
        pim = pim.resize((out_w, out_h), fx, box=box)
    else:  # different filters per axis: one pass each, horizontal first
        x0, y0, x1, y1 = box
        pim = pim.resize((out_w, pim.size[1]), fx, box=(x0, 0, x1, pim.size[1]))
        pim = pim.resize((out_w, out_h), fy, box=(0, y0, out_w, y1))
    out = np.asarray(pim)
    return out[:, :, None] if squeeze else out


def _np_resample_axis(
    x: np.ndarray, axis: int, flt: AxisFilter, out_size: int, lo: float, hi: float
) -> np.ndarray:
    first, coeffs = axis_coeffs(flt, out_size, lo, hi)
    n = x.shape[axis]
    shape = [1] * x.ndim
    shape[axis] = out_size
    acc = None
    for k in range(coeffs.shape[1]):
        idx = np.clip(first + k, 0, n - 1)
        term = np.take(x, idx, axis=axis)
        if flt.type != FilterType.NEAREST:
            term = term * coeffs[:, k].reshape(shape)
        acc = term if acc is None else acc + term
    return acc


def _finish(x: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    """``x`` in ``out_dtype``: integers round half away from zero and saturate (DALI's
    ``ConvertSat``)."""
    if x.dtype == out_dtype:
        return x
    return convert_sat(x, out_dtype)


def resample(
    img: np.ndarray,
    params: ResizeParams,
    min_filter: FilterType = FilterType.TRIANGULAR,
    mag_filter: FilterType = FilterType.LINEAR,
    antialias: bool = True,
    out_dtype: np.dtype | None = None,
) -> np.ndarray:
    """Resample an HWC image to ``params.dst_size`` from the ROI ``params.src_lo/src_hi``.

    Args:
        img: H x W x C array (any C; uint8 and float32 take the fast paths).
        params: from :func:`resize_params`, (H, W) order.
        min_filter, mag_filter, antialias: as DALI's resampling attributes (already promoted
            with :func:`interp_to_filter`).
        out_dtype: output type (default: the input's); float output is not rounded.

    Returns:
        A new out_h x out_w x C array.
    """
    out_dtype = img.dtype if out_dtype is None else np.dtype(out_dtype)
    H, W, C = img.shape
    out_h, out_w = params.dst_size
    (ly, lx), (hy, hx) = params.src_lo, params.src_hi
    flip_y, flip_x = hy < ly, hx < lx
    ly, hy = min(ly, hy), max(ly, hy)
    lx, hx = min(lx, hx), max(lx, hx)
    if out_h == 0 or out_w == 0 or H == 0 or W == 0:
        return np.zeros((out_h, out_w, C), out_dtype)
    fy = select_axis_filter(hy - ly, out_h, min_filter, mag_filter, antialias)
    fx = select_axis_filter(hx - lx, out_w, min_filter, mag_filter, antialias)
    out = _resample_unflipped(img, out_h, out_w, (ly, hy), (lx, hx), fy, fx, out_dtype)
    if flip_y:
        out = out[::-1]
    if flip_x:
        out = out[:, ::-1]
    return out if not (flip_x or flip_y) else np.ascontiguousarray(out)


def _resample_unflipped(img, out_h, out_w, ry, rx, fy, fx, out_dtype):
    H, W, C = img.shape
    full = ry == (0.0, float(H)) and rx == (0.0, float(W))
    nn = fy.type == FilterType.NEAREST and fx.type == FilterType.NEAREST
    if nn:
        iy, _ = axis_coeffs(fy, out_h, *ry)
        ix, _ = axis_coeffs(fx, out_w, *rx)
        out = img[np.clip(iy, 0, H - 1)][:, np.clip(ix, 0, W - 1)]
        return _finish(out, out_dtype)
    bilinear = all(
        f.type in (FilterType.LINEAR, FilterType.TRIANGULAR) and f.radius == 1.0 for f in (fy, fx)
    )
    fast_dtype = (img.dtype == np.uint8 and out_dtype == np.uint8) or (
        img.dtype in (np.uint8, np.float32) and out_dtype == np.float32
    )
    if bilinear and full and fast_dtype and C <= 4:
        src = img if img.dtype == out_dtype else img.astype(out_dtype)
        out = cv2.resize(src, (out_w, out_h), interpolation=cv2.INTER_LINEAR)
        return out.reshape(out_h, out_w, C)
    py = _pil_filter(fy, ry[1] - ry[0], out_h)
    px = _pil_filter(fx, rx[1] - rx[0], out_w)
    if py is not None and px is not None and fast_dtype:
        return _pil_path(img, out_h, out_w, ry, rx, fy, fx, py, px, out_dtype)
    # separable numpy: the reference implementation of DALI's CPU kernel
    x = img.astype(np.float32, copy=False)
    if fy.type == FilterType.NEAREST:
        x = _np_resample_axis(x, 0, fy, out_h, *ry)
        x = _np_resample_axis(x, 1, fx, out_w, *rx)
    else:
        x = _np_resample_axis(x, 1, fx, out_w, *rx)
        x = _np_resample_axis(x, 0, fy, out_h, *ry)
    return _finish(x, out_dtype)


def _source_range(n: int, lo: float, hi: float, flt: AxisFilter) -> tuple[int, int, int, int]:
    """Rows (or columns) [a, b) of the input that the taps of ROI [lo, hi] can reach, and the
    edge padding (before, after) that makes Pillow, which drops taps outside its image, clamp
    at the input's border like DALI."""
    reach = flt.radius + 1
    a, b = math.floor(lo - reach), math.ceil(hi + reach)
    a0 = min(max(a, 0), n - 1)
    b0 = max(min(b, n), a0 + 1)
    plain = flt.radius == 1.0 and flt.type in (FilterType.LINEAR, FilterType.TRIANGULAR)
    if plain and lo >= 0 and hi <= n:
        return a0, b0, 0, 0  # one in-range tap at the border: truncation == clamping
    return a0, b0, max(0, a0 - a), max(0, b - b0)


def _pil_path(img, out_h, out_w, ry, rx, fy, fx, py, px, out_dtype):
    C = img.shape[2]
    y0, y1, top, bottom = _source_range(img.shape[0], *ry, fy)
    x0, x1, left, right = _source_range(img.shape[1], *rx, fx)
    src = img[y0:y1, x0:x1]  # a view: only the reachable part is converted/padded
    if out_dtype == np.float32 and img.dtype != np.float32:
        src = src.astype(np.float32)
    if top or bottom or left or right:
        src = cv2.copyMakeBorder(src, top, bottom, left, right, cv2.BORDER_REPLICATE)
        if src.ndim == 2:
            src = src[:, :, None]
    ry = (ry[0] - y0 + top, ry[1] - y0 + top)
    rx = (rx[0] - x0 + left, rx[1] - x0 + left)
    box = (rx[0], ry[0], rx[1], ry[1])
    lobes = fy.type in _NEGATIVE_LOBES or fx.type in _NEGATIVE_LOBES
    if src.dtype == np.uint8 and C in (1, 3, 4) and not lobes:
        return _pil_resample(src, out_h, out_w, box, py, px)
    # Pillow keeps 8-bit images 8-bit between its two passes, clipping the overshoot of
    # cubic/Lanczos; DALI's intermediate is float, so go through float planes ("F").
    planes = [
        _pil_resample(
            np.ascontiguousarray(src[:, :, c], dtype=np.float32), out_h, out_w, box, py, px
        )
        for c in range(C)
    ]
    return _finish(np.stack(planes, axis=-1), out_dtype)


# --- the operator ---------------------------------------------------------------------------

_SIZE_ARGS = ("resize_x", "resize_y", "resize_z", "size", "resize_shorter", "resize_longer")


def _check_number(name: str, v: Any, negative_ok: bool) -> None:
    if v is None:
        return
    vals = np.atleast_1d(np.asarray(v, dtype=object)).tolist()
    for x in vals:
        if isinstance(x, bool) or not isinstance(x, Real | np.number) or not math.isfinite(x):
            raise ArgumentError(f"resize: {name}={v!r} must be a number (or numbers)")
        if not negative_ok and x < 0:
            raise ArgumentError(f"resize: {name}={v!r} must not be negative")


class ResamplingAttrs:
    """``interp_type``/``min_filter``/``mag_filter``/``antialias``/``dtype`` resolved once."""

    def __init__(
        self,
        who: str,
        interp_type=None,
        min_filter=None,
        mag_filter=None,
        antialias=True,
        dtype=None,
    ):
        def interp(name, v):
            if v is None:
                return None
            try:
                return to_interp_type(v)
            except ValueError:
                raise ArgumentError(
                    f"{who}: {name}={v!r} is not an interpolation type "
                    "(types.INTERP_NN, INTERP_LINEAR, ...)"
                ) from None

        it, mi, ma = (
            interp("interp_type", interp_type),
            interp("min_filter", min_filter),
            interp("mag_filter", mag_filter),
        )
        self.antialias = bool(antialias)
        src_min = mi if mi is not None else it
        src_mag = ma if ma is not None else it
        self.min_filter = (
            interp_to_filter(src_min, self.antialias)
            if src_min is not None
            else FilterType.TRIANGULAR
        )
        self.mag_filter = (
            interp_to_filter(src_mag, False) if src_mag is not None else FilterType.LINEAR
        )
        if dtype is None:
            self.dtype = None
        else:
            try:
                self.dtype = to_numpy_dtype(dtype)
            except (TypeError, ValueError, KeyError):
                raise ArgumentError(f"{who}: dtype={dtype!r} is not a data type") from None
        self.who = who

    def out_dtype(self, in_dtype: np.dtype) -> np.dtype:
        if self.dtype is None:
            return in_dtype
        if self.dtype not in (in_dtype, np.dtype(np.float32)):
            raise ArgumentError(
                f"{self.who}: dtype={self.dtype} must be the input type ({in_dtype}) or float"
            )
        return self.dtype


@register(legacy=("Resize",))
class Resize(Operator):
    """Resizes images (HWC, HW, CHW, FHWC) with DALI's size arguments and filters.

    Give the size in exactly one way: ``resize_x``/``resize_y``, ``size``, ``resize_shorter``
    or ``resize_longer``.

    Args:
        resize_x, resize_y: output width/height (0 = unspecified; negative flips). Per-sample
            argument inputs allowed.
        size: output extents in layout order, e.g. (H, W); one number means all axes.
        resize_shorter: shorter side (keeps the aspect ratio, like ``mode="not_smaller"``).
        resize_longer: longer side (keeps the aspect ratio, like ``mode="not_larger"``).
        mode: ``"default"`` (missing extents take the geometric mean of the given scales),
            ``"stretch"``, ``"not_larger"`` or ``"not_smaller"``; not with resize_shorter/longer.
        max_size: limit of the output size, one value or one per axis.
        subpixel_scale: fractional sizes keep the exact scale by moving the ROI (default True).
        roi_start, roi_end: input region in layout order (together); start > end flips.
        roi_relative: ROI in fractions of the input size (default False).
        interp_type: ``types.INTERP_LINEAR`` (default), ``INTERP_NN``, ``INTERP_CUBIC``,
            ``INTERP_LANCZOS3``, ``INTERP_TRIANGULAR``, ``INTERP_GAUSSIAN``.
        min_filter, mag_filter: filters used when shrinking / enlarging (default linear).
        antialias: widen the filter when shrinking (default True; never for NN).
        dtype: output type: None (input type, default) or ``types.FLOAT``.
        save_attrs: add a second output, the input's spatial extents in layout order (int32,
            e.g. (H, W) per sample), on the device of the first; what detection pipelines use
            to scale boxes back to the original image (default False).

    Example:
        >>> images = fn.resize(fn.decoders.image(jpegs), resize_shorter=256)
        >>> images, orig_hw = fn.resize(decoded, resize_x=800, resize_y=800, save_attrs=True)
    """

    process_safe = True  # on the CPU (see Operator): may join a part for the sample processes

    schema = "resize"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset(
        {"resize_x", "resize_y", "size", "resize_shorter", "resize_longer", "roi_start", "roi_end"}
    )

    def setup(
        self,
        *,
        resize_x=None,
        resize_y=None,
        resize_z=None,
        size=None,
        resize_shorter=None,
        resize_longer=None,
        mode=None,
        max_size=None,
        subpixel_scale=True,
        roi_start=None,
        roi_end=None,
        roi_relative=False,
        interp_type=None,
        min_filter=None,
        mag_filter=None,
        antialias=True,
        dtype=None,
        temp_buffer_hint=0,
        minibatch_size=32,
        image_type=None,
        save_attrs=False,
    ) -> None:
        self.save_attrs = bool(save_attrs)
        self.num_outputs = 2 if self.save_attrs else 1
        _check_number("resize_x", resize_x, True)
        _check_number("resize_y", resize_y, True)
        _check_number("resize_z", resize_z, True)
        _check_number("size", size, True)
        _check_number("resize_shorter", resize_shorter, False)
        _check_number("resize_longer", resize_longer, False)
        _check_number("max_size", max_size, False)
        _check_number("roi_start", roi_start, True)
        _check_number("roi_end", roi_end, True)
        self._static = {
            "resize_x": resize_x,
            "resize_y": resize_y,
            "resize_z": resize_z,
            "size": size,
            "resize_shorter": resize_shorter,
            "resize_longer": resize_longer,
            "roi_start": roi_start,
            "roi_end": roi_end,
        }
        given = [k for k in _SIZE_ARGS if self._static[k] is not None]
        self._checked = False
        if given:  # else the size may still come as an argument input: checked per sample
            self._check_size_args(given)
            self._checked = True
        self.mode = None if mode is None else to_resize_mode(mode)
        if mode is not None and (resize_shorter is not None or resize_longer is not None):
            raise ArgumentError(
                f"resize: mode={mode!r} cannot be combined with "
                "resize_shorter/resize_longer (they imply the mode)"
            )
        self.max_size = max_size
        self.subpixel_scale = bool(subpixel_scale)
        self.roi_relative = bool(roi_relative)
        self.attrs = ResamplingAttrs(
            self.schema, interp_type, min_filter, mag_filter, antialias, dtype
        )
        self._layout = "HWC"
        self._cache: dict[tuple[int, int], ResizeParams] = {}

    def _check_size_args(self, given: list[str], args: dict | None = None) -> None:
        ways = {("resize_x" if k in ("resize_x", "resize_y", "resize_z") else k) for k in given}
        if len(ways) != 1:
            desc = ", ".join(f"{k}={self._value_repr(k, args)}" for k in given) or "none"
            raise ArgumentError(
                "resize: give the output size in exactly one way (resize_x/resize_y/resize_z, size, "
                f"resize_shorter or resize_longer); got {desc}"
            )

    def _value_repr(self, k: str, args: dict | None) -> str:
        v = self._static.get(k)
        return repr(v) if v is not None else f"<argument input {np.asarray(args[k]).tolist()}>"

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if lay:
            spatial_axes(lay)  # raises for a layout resize does not take
        self._layout = lay
        return [lay, ""] if self.save_attrs else [lay]

    def layout_of(self, ndim: int) -> str:
        """The input layout (the graph's, or the default for ``ndim`` dimensions), checked."""
        lay = self._layout or DEFAULT_RESIZE_LAYOUTS.get(ndim, "")
        if len(lay) != ndim or lay not in RESIZE_LAYOUTS:
            raise ArgumentError(
                f"resize: cannot resize a {ndim}-D sample with layout {lay!r}; expected one of "
                f"{list(RESIZE_LAYOUTS)} (a 3-D input needs its layout, e.g. DHWC or CDHW)"
            )
        return lay

    def params_for(self, in_size: tuple[int, ...], args: dict | None = None) -> ResizeParams:
        """The geometry of one sample of spatial extents ``in_size`` (layout order; static
        arguments overridden by argument inputs)."""
        in_size = tuple(int(v) for v in in_size)
        if not args:
            cached = self._cache.get(in_size)
            if cached is not None:
                return cached
        p = self._params_for(in_size, args)
        if not args and len(self._cache) < 4096:  # same-size images are common: skip the math
            self._cache[in_size] = p
        return p

    def _params_for(self, in_size: tuple[int, ...], args: dict | None) -> ResizeParams:
        nd = len(in_size)
        vals = dict(self._static)
        if args:
            for k, v in args.items():
                vals[k] = np.asarray(v).tolist()
            for k in args:
                _check_number(k, vals[k], k not in ("resize_shorter", "resize_longer"))
            if not self._checked or any(k in _SIZE_ARGS for k in args):
                given = [k for k in _SIZE_ARGS if vals[k] is not None]
                self._check_size_args(given, args)
                if self.mode is not None and set(given) & {"resize_shorter", "resize_longer"}:
                    raise ArgumentError(
                        f"resize: mode={self.mode.value!r} cannot be combined with "
                        "resize_shorter/resize_longer (they imply the mode)"
                    )
        elif not self._checked:
            self._check_size_args([])
        if (vals["roi_start"] is None) != (vals["roi_end"] is None):
            raise ArgumentError(
                "resize: roi_start and roi_end must be given together; got "
                f"roi_start={vals['roi_start']!r}, roi_end={vals['roi_end']!r}"
            )
        req, implied = requested_size(nd, **{k: vals[k] for k in _SIZE_ARGS})
        roi_s = _per_axis(vals["roi_start"], nd, "roi_start")
        roi_e = _per_axis(vals["roi_end"], nd, "roi_end")
        return resize_params(
            in_size,
            req,
            mode=implied or self.mode or ResizeMode.DEFAULT,
            max_size=_per_axis(self.max_size, nd, "max_size"),
            roi_start=roi_s,
            roi_end=roi_e,
            roi_relative=self.roi_relative,
            subpixel_scale=self.subpixel_scale,
        )

    def run_sample(self, inputs, args, param):
        img = inputs[0]
        lay = self.layout_of(img.ndim)
        spatial, _ = spatial_axes(lay)
        in_size = tuple(img.shape[a] for a in spatial)
        p = self.params_for(in_size, args)
        out_dtype = self.attrs.out_dtype(img.dtype)
        out = resize_layout(img, lay, p, self.attrs, out_dtype)
        if self.save_attrs:
            return out, np.array(in_size, np.int32)
        return out

    def run_batch(self, inputs, args, params, stream):
        out = resize_op_batch(self, inputs[0], args, stream)
        if not self.save_attrs:
            return out
        import cupy

        from ..tensors_gpu import SampleList

        s = SampleList.coerce(inputs[0])
        spatial, _ = spatial_axes(self.layout_of(s.shapes.shape[1] if len(s) else 3))
        ext = np.asarray(s.shapes, np.int64).reshape(len(s), -1)[:, list(spatial)]
        attrs = cupy.empty((len(s), len(spatial)), np.int32)
        attrs.set(np.ascontiguousarray(ext, np.int32), stream=stream)  # one copy per batch
        return out, attrs


def _batch_geometry(op, hw: np.ndarray, args: dict):
    """Output sizes and source windows of a batch for the ``fn.resize`` operator ``op``.

    A fully given, positive output size (the common training case) is vectorised; anything else
    goes through ``op.params_for`` per sample, memoised per input size when no argument input
    changes the arguments.
    """
    n = len(hw)
    st = op._static
    fixed = None
    if (
        not args
        and st["roi_start"] is None
        and op.max_size is None
        and op.mode in (None, ResizeMode.DEFAULT, ResizeMode.STRETCH)
    ):
        if st["size"] is not None:
            v = np.atleast_1d(np.asarray(st["size"], np.float64))
            v = np.repeat(v, 2) if v.size == 1 else v
            fixed = v if v.size == 2 else None
        elif st["resize_x"] is not None and st["resize_y"] is not None:
            fixed = np.array([st["resize_y"], st["resize_x"]], np.float64)
        if fixed is not None and not ((fixed > 0).all() and (fixed == np.round(fixed)).all()):
            fixed = None
    if fixed is not None and (hw > 0).all():
        out = np.tile(fixed.astype(np.int64), (n, 1))
        return out, np.zeros((n, 2)), hw.astype(np.float64)
    if not args and st["roi_start"] is None and op.max_size is None and n and (hw > 0).all():
        # static arguments, varied input sizes (a validation resize_shorter): elementwise
        op.params_for(tuple(int(v) for v in hw[0]))  # checks the arguments once
        req, implied = requested_size(2, **{k: st[k] for k in _SIZE_ARGS})
        mode = implied or op.mode or ResizeMode.DEFAULT
        return resize_params_2d(hw, req, mode, op.subpixel_scale)
    out = np.empty((n, 2), np.int64)
    lo = np.empty((n, 2))
    hi = np.empty((n, 2))
    for i in range(n):
        key = (int(hw[i, 0]), int(hw[i, 1]))
        if args:
            p = op.params_for(key, {k: v[i] for k, v in args.items()})
        else:
            p = op.params_for(key)  # memoised per input size by the operator
        out[i], lo[i], hi[i] = p.dst_size, p.src_lo, p.src_hi
    return out, lo, hi


def resize_op_batch(op, samples, args: dict, stream):
    """``fn.resize(device="gpu")``: HWC/HW batches in one launch; other layouts (CHW, FHWC,
    3-D, ...) as planes, one launch per pass (``resize_planes.py``)."""
    from ..kernels._batch import as_samples
    from ..kernels.resize import resize_batch

    s = as_samples(samples)
    ndim = s.shapes.shape[1] if len(s) else 3
    lay = op.layout_of(ndim)
    if lay not in ("HW", "HWC"):
        from ..kernels.resize_planes import resize_any_layout

        return resize_any_layout(op, s, lay, args, stream)
    out, lo, hi = _batch_geometry(op, s.shapes[:, :2], args)
    out_dtype = op.attrs.out_dtype(s.dtype)
    return resize_batch(
        s,
        out,
        lo,
        hi,
        op.attrs.min_filter,
        op.attrs.mag_filter,
        op.attrs.antialias,
        out_dtype,
        stream=stream,
    )


def resize_layout(
    img: np.ndarray, layout: str, p: ResizeParams, attrs: ResamplingAttrs, out_dtype: np.dtype
) -> np.ndarray:
    """Resize a sample of any supported layout: the spatial axes (2 or 3) of every frame and
    channel-first plane, viewed as (spatial..., C) arrays."""
    spatial, c_axis = spatial_axes(layout)
    a = attrs

    def one(x: np.ndarray) -> np.ndarray:  # (spatial..., C)
        if len(spatial) == 2:
            return resample(x, p, a.min_filter, a.mag_filter, a.antialias, out_dtype)
        return resample_volume(x, p, a.min_filter, a.mag_filter, a.antialias, out_dtype)

    if layout == "HWC" or layout == "DHWC":
        return one(img)
    loops = [i for i in range(img.ndim) if i not in spatial and i != c_axis]
    perm = loops + list(spatial) + ([c_axis] if c_axis is not None else [])
    x = img.transpose(perm)
    if c_axis is None:
        x = x[..., None]
    lead = x.shape[: len(loops)]
    planes = x.reshape(-1, *x.shape[len(loops) :])
    out_plane = (*p.dst_size, x.shape[-1])
    out = np.empty((len(planes), *out_plane), out_dtype)
    for k, plane in enumerate(planes):
        out[k] = one(plane)
    out = out.reshape(*lead, *out_plane)
    if c_axis is None:
        out = out[..., 0]
    return np.ascontiguousarray(out.transpose(np.argsort(perm)))


def resample_volume(
    vol: np.ndarray,
    params: ResizeParams,
    min_filter: FilterType = FilterType.TRIANGULAR,
    mag_filter: FilterType = FilterType.LINEAR,
    antialias: bool = True,
    out_dtype: np.dtype | None = None,
) -> np.ndarray:
    """Resample a D x H x W x C volume: the H, W planes with :func:`resample` and the depth
    axis with the separable reference, in float32 between the passes (rounded once, at the
    end). Depth goes first when it shrinks (fewer planes to resample), else last.

    Args:
        vol: the volume.
        params: from :func:`resize_params`, (D, H, W) order.
        min_filter, mag_filter, antialias, out_dtype: as for :func:`resample`.
    """
    out_dtype = vol.dtype if out_dtype is None else np.dtype(out_dtype)
    out_d, out_h, out_w = params.dst_size
    lo_d, hi_d = params.src_lo[0], params.src_hi[0]
    plane = ResizeParams((out_h, out_w), params.src_lo[1:], params.src_hi[1:])
    if 0 in (out_d, out_h, out_w) or vol.size == 0:
        return np.zeros((out_d, out_h, out_w, vol.shape[3]), out_dtype)
    a, b = min(lo_d, hi_d), max(lo_d, hi_d)
    fd = select_axis_filter(b - a, out_d, min_filter, mag_filter, antialias)
    f32 = np.dtype(np.float32)

    def depth(x):
        y = _np_resample_axis(x.astype(np.float32, copy=False), 0, fd, out_d, a, b)
        return y[::-1] if hi_d < lo_d else y

    def planes(x):
        return np.stack([resample(s, plane, min_filter, mag_filter, antialias, f32) for s in x])

    x = planes(depth(vol)) if out_d < vol.shape[0] else depth(planes(vol))
    return _finish(np.ascontiguousarray(x), out_dtype)


__all__ = [
    "Resize",
    "ResizeMode",
    "ResizeParams",
    "FilterType",
    "AxisFilter",
    "resize_params",
    "output_size",
    "requested_size",
    "select_axis_filter",
    "axis_coeffs",
    "window_geometry",
    "filter_table",
    "resample",
    "resample_volume",
    "interp_to_filter",
    "ResamplingAttrs",
]
