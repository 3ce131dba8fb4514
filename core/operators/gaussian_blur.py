"""``fn.gaussian_blur``: separable Gaussian convolution over the spatial axes (DALI's
``GaussianBlur``).

DALI's numerics (``gaussian_blur_params.h``, ``convolution_cpu.h``):

* window: ``size = 2 * ceil(3 * sigma) + 1`` when only ``sigma`` is given; ``sigma = (radius -
  1) * 0.3 + 0.8`` (OpenCV's rule, radius = (size - 1) // 2) when only ``window_size`` is given.
  The taps are ``exp(-x**2 / (2 sigma**2))`` in float32, normalised so they sum to 1.
* the convolution runs along the innermost data axis first, then outwards, each pass
  accumulating ``acc += in[i - r + k] * w[k]`` for k = 0..size-1 in float32 (float64 for
  float64 data) into a float intermediate; the last pass converts to the output type (integers
  round half away from zero and saturate).
* outside the data the index is mirrored without repeating the edge (reflect-101: ``dcb|abcd|cba``).

Layouts: the data axes are every axis but a trailing channel ``C`` and leading ``F`` / ``C``
(sequences, channel-first data: each frame / channel plane is blurred on its own); an empty
layout means every axis is a data axis (at most 3).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from .cast import convert_sat, parse_dtype

__all__ = ["GaussianBlur", "blur_dims", "blur_windows", "gaussian_window", "reflect_101"]

_CPU_TYPES = tuple(
    np.dtype(t)
    for t in (
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
        np.float16,
        np.float32,
        np.float64,
    )
)


def gaussian_window(sigma: float, size: int) -> np.ndarray:
    """DALI's ``FillGaussian``: ``size`` float32 taps of a Gaussian of ``sigma``, summing to 1
    (the centre is ``1 / sum``, the halves mirrored)."""
    f32 = np.float32
    r = (size - 1) // 2
    exp_scale = f32(0.5) / (f32(sigma) * f32(sigma))
    x = np.arange(-r, 0)
    half = np.exp(-((x * x).astype(f32) * exp_scale)).astype(f32)
    total = f32(0)
    for v in half:  # float32, in order, as DALI sums
        total = f32(total + v)
    total = f32(f32(total * 2.0) + 1.0)
    scale = f32(1) / total
    half = half * scale
    return np.concatenate([half, [scale], half[::-1]]).astype(f32)


def reflect_101(idx: np.ndarray, n: int) -> np.ndarray:
    """Mirror indices into [0, n) without repeating the edge (any distance outside)."""
    if n < 2:
        return np.zeros_like(idx)
    period = 2 * (n - 1)
    m = np.mod(idx, period)
    return np.where(m >= n, period - m, m)


def blur_dims(who: str, layout: str, ndim: int) -> tuple[int, int, bool]:
    """(first data axis, number of data axes, trailing channels?) for a layout (DALI's
    ``ParseAndValidateDim``)."""
    if not layout:
        if ndim > 3:
            raise ArgumentError(
                f"{who}: input with an empty layout can have at most 3 dimensions, got {ndim}"
            )
        return 0, ndim, False
    if len(layout) != ndim:
        raise ArgumentError(f"{who}: a {ndim}-D sample does not match the layout {layout!r}")
    has_channels = layout[-1] == "C"
    start = 0
    rest = layout[:-1] if has_channels else layout
    while rest and rest[0] in "FC" and start < 2:
        start += 1
        rest = rest[1:]
    if "C" in rest or "F" in rest:
        raise ArgumentError(
            f"{who}: layout {layout!r} is not supported: channels must come first or last and "
            "frames first ('F' or 'CF' at the start)"
        )
    if not 1 <= len(rest) <= 3:
        raise ArgumentError(
            f"{who}: layout {layout!r} has {len(rest)} data axes; 1 to 3 are supported"
        )
    return start, len(rest), has_channels


def _per_axis(who: str, name: str, value, axes: int, kind) -> list:
    arr = np.asarray(value).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, axes)
    if arr.size != axes:
        raise ArgumentError(
            f"{who}: {name}={np.asarray(value).tolist()} must be one value or one per data axis "
            f"({axes})"
        )
    return [kind(v) for v in arr]


def blur_windows(who: str, sigma, window_size, axes: int) -> list[np.ndarray]:
    """The float32 window of each data axis (outermost first) from ``sigma`` and
    ``window_size`` (scalars or per-axis values; 0 means derive from the other)."""
    sigmas = _per_axis(who, "sigma", sigma, axes, float)
    sizes = _per_axis(who, "window_size", window_size, axes, lambda v: int(round(float(v))))
    out = []
    for a, (s, w) in enumerate(zip(sigmas, sizes, strict=True)):
        if s == 0 and w == 0:
            raise ArgumentError(
                f"{who}: sigma and window_size must not both be 0 (axis {a}); give either"
            )
        if s < 0:
            raise ArgumentError(f"{who}: sigma={s} must be non-negative (axis {a})")
        if w < 0:
            raise ArgumentError(f"{who}: window_size={w} must be non-negative (axis {a})")
        if w == 0:
            w = 2 * math.ceil(np.float32(s) * np.float32(3)) + 1
        elif s == 0:
            s = float(np.float32(((w - 1) // 2 - 1) * 0.3 + 0.8))
        if w % 2 == 0:
            raise ArgumentError(f"{who}: window_size={w} must be odd (axis {a})")
        out.append(gaussian_window(s, w))
    return out


def _convolve_axis(x: np.ndarray, axis: int, window: np.ndarray, acc_dtype) -> np.ndarray:
    """One pass: ``out[i] = sum_k x[reflect(i - r + k)] * w[k]`` along ``axis``, accumulated
    in order in ``acc_dtype`` (no fused multiply-add: numpy rounds every product)."""
    n = x.shape[axis]
    r = (window.size - 1) // 2
    idx = reflect_101(np.arange(-r, n + r), n)
    padded = np.take(x, idx, axis=axis)
    if padded.dtype != acc_dtype:
        padded = padded.astype(acc_dtype)
    w = window.astype(acc_dtype)
    index = [slice(None)] * x.ndim
    acc = np.zeros(x.shape, acc_dtype)
    tmp = np.empty(x.shape, acc_dtype)
    for k in range(window.size):
        index[axis] = slice(k, k + n)
        np.multiply(padded[tuple(index)], w[k], out=tmp)
        acc += tmp
    return acc


def blur_sample(x: np.ndarray, start: int, axes: int, windows, out_dtype) -> np.ndarray:
    """Blur one sample: data axes ``start .. start + axes - 1``, innermost first."""
    acc = np.float64 if x.dtype == np.float64 else np.float32
    y = x
    for a in reversed(range(axes)):
        y = _convolve_axis(y, start + a, windows[a], acc)
    if y.dtype == out_dtype:
        return y
    return convert_sat(y, out_dtype)


@register(legacy=("GaussianBlur",))
class GaussianBlur(Operator):
    """Blurs the input with a Gaussian kernel, axis by axis (separably), mirroring the edges
    (reflect-101).

    The data axes are the spatial ones: H, W for ``HWC``/``CHW``/``FHWC``, D, H, W for ``DHWC``
    and ``CDHW`` volumes; channel and frame axes are not blurred. ``sigma`` and
    ``window_size`` take one value for all data axes or one per axis (outermost first).

    Args:
        sigma: the standard deviation (default 0: derived from ``window_size``); per-sample
            argument input allowed.
        window_size: the kernel diameter, odd (default 0: ``2 * ceil(3 * sigma) + 1``);
            argument input allowed.
        dtype: output type: the input's (default) or FLOAT.

    Example:
        >>> with pipe:
        ...     blurred = fn.gaussian_blur(images, sigma=fn.random.uniform(range=(0.5, 1.5)))
    """

    schema = "gaussian_blur"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"sigma", "window_size"})

    def setup(self, *, sigma=0.0, window_size=0, dtype=None) -> None:
        self.sigma = self._vals("sigma", sigma, float)
        self.window_size = self._vals("window_size", window_size, float)
        self.dtype = parse_dtype(dtype, self.schema)
        self._layout = ""
        self._windows: dict[int, list[np.ndarray]] = {}
        self._plans: dict = {}  # data axes -> the GPU's WindowPlan without argument inputs

    def _vals(self, name: str, value, kind) -> np.ndarray:
        try:
            arr = np.asarray(value, np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ArgumentError(f"{self.schema}: {name}={value!r} must be numbers") from None
        if arr.size not in (1, 2, 3):
            raise ArgumentError(
                f"{self.schema}: {name}={np.asarray(value).tolist()} must be one value or one "
                "per data axis (at most 3)"
            )
        if (arr < 0).any():
            raise ArgumentError(f"{self.schema}: {name}={arr.tolist()} must be non-negative")
        return arr

    def after_call(self, outputs):
        nodes = outputs[0].source.arg_nodes
        given = nodes.keys() | {
            k for k, v in (("sigma", self.sigma), ("window_size", self.window_size)) if v.any()
        }
        if not given:
            raise ArgumentError(f"{self.schema}: give sigma or window_size (both are 0)")
        return outputs

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def out_dtype(self, in_dtype) -> np.dtype:
        in_dtype = np.dtype(in_dtype)
        out = self.dtype or in_dtype
        if out != in_dtype and out != np.float32:
            raise ArgumentError(
                f"{self.schema}: dtype={out} must be the input's type ({in_dtype}) or FLOAT"
            )
        return out

    def sample_windows(self, args: dict, axes: int) -> list[np.ndarray]:
        """The windows of one sample (cached when nothing comes from argument inputs)."""
        if not args:
            w = self._windows.get(axes)
            if w is None:
                w = self._windows[axes] = blur_windows(
                    self.schema, self.sigma, self.window_size, axes
                )
            return w
        sigma = args.get("sigma", self.sigma)
        size = args.get("window_size", self.window_size)
        return blur_windows(self.schema, sigma, size, axes)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype not in _CPU_TYPES:
            raise ArgumentError(f"{self.schema}: input type {x.dtype} is not supported")
        start, axes, _ = blur_dims(self.schema, self._layout, x.ndim)
        out_dtype = self.out_dtype(x.dtype)
        return blur_sample(x, start, axes, self.sample_windows(args, axes), out_dtype)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.gaussian_blur import blur_batch
        from ._blur_plan import batch_plan

        s = inputs[0]
        n = len(s)
        if n == 0:
            return s
        start, axes, channels = blur_dims(self.schema, self._layout, s.shapes.shape[1])
        out_dtype = self.out_dtype(s.dtype)
        plan, sets = batch_plan(self, args, n, axes)
        return blur_batch(s, start, axes, channels, plan, sets, out_dtype, stream=stream)
