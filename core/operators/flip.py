"""``fn.flip``: mirror samples horizontally, vertically and/or along depth (DALI's ``Flip``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples, host_numbers
from ..kernels.slice import flip_batch
from ..kernels.window import window_batch

_DEFAULT_LAYOUTS = {2: "HW", 3: "HWC", 4: "FHWC", 5: "FDHWC"}
# OpenCV's flip code for the reversed axes of a 2-D or 3-D (rows, columns[, channels]) array
_CV2_CODES = {(0,): 0, (1,): 1, (0, 1): -1}
_CV2_DTYPES = frozenset(
    np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64)
)


def _flag(name: str, value: Any) -> int:
    """An int flag from a Python/numpy scalar or a 1-element per-sample array."""
    v = np.asarray(value)
    ok = v.size == 1 and (
        np.issubdtype(v.dtype, np.integer)
        or v.dtype == np.bool_
        or (np.issubdtype(v.dtype, np.floating) and float(v.reshape(())).is_integer())
    )
    if not ok:
        raise ArgumentError(f"flip: {name}={value!r} must be an integer flag (0 or 1)")
    return int(v.reshape(()))


def flags_of(name: str, values) -> np.ndarray:
    """:func:`_flag` of every sample of an argument input, as int64 (N,), with numpy over the
    batch; samples of another shape or type go through :func:`_flag` (which names a bad one)."""
    from ._small import stack

    v = stack(values)
    if v is not None and v.size == len(values) and v.dtype.kind in "biuf":
        v = v.reshape(len(values))
        if v.dtype.kind != "f" or (np.isfinite(v) & (v == np.floor(v))).all():
            return v.astype(np.int64)
    return np.array([_flag(name, x) for x in values], np.int64)


def flip_axes(layout: str, horizontal: int, vertical: int, depthwise: int) -> tuple[int, ...]:
    """Array axes to reverse for ``layout`` (axes the layout lacks are ignored, as in DALI)."""
    axes = []
    for flag, dim in ((horizontal, "W"), (vertical, "H"), (depthwise, "D")):
        if flag and dim in layout:
            axes.append(layout.index(dim))
    return tuple(sorted(axes))


@register(legacy=("Flip",))
class Flip(Operator):
    """Flips samples along the W (``horizontal``), H (``vertical``) and D (``depthwise``) axes.

    Works on any layout naming those axes: HWC, CHW, FHWC, DHWC, ... (an unset layout is taken
    as HW, HWC, FHWC or FDHWC by the number of dimensions).

    Args:
        horizontal: nonzero flips horizontally (default 1). Per-sample argument input allowed,
            e.g. ``horizontal=fn.random.coin_flip()``.
        vertical: nonzero flips vertically (default 0). Per-sample argument input allowed.
        depthwise: nonzero flips along depth (default 0). Per-sample argument input allowed.

    Example:
        >>> mirrored = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
    """

    process_safe = True  # on the CPU (see Operator): may join a part for the sample processes

    schema = "flip"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"horizontal", "vertical", "depthwise"})

    def setup(self, *, horizontal: int = 1, vertical: int = 0, depthwise: int = 0) -> None:
        self.flags = {
            "horizontal": _flag("horizontal", horizontal),
            "vertical": _flag("vertical", vertical),
            "depthwise": _flag("depthwise", depthwise),
        }
        self._layout = ""

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        flags = self.flags
        if args:
            flags = {**flags, **{k: _flag(k, v) for k, v in args.items()}}
        layout = self._layout or _DEFAULT_LAYOUTS.get(x.ndim, "")
        if len(layout) != x.ndim:
            raise ArgumentError(
                f"flip: a {x.ndim}-D sample does not match the input layout {layout!r}"
            )
        axes = flip_axes(layout, flags["horizontal"], flags["vertical"], flags["depthwise"])
        if not axes:
            return x
        code = _CV2_CODES.get(axes) if x.ndim in (2, 3) else None
        if code is not None and x.dtype in _CV2_DTYPES and (x.ndim == 2 or x.shape[2] <= 512):
            import cv2

            # rows/columns of an HW(C) image: OpenCV's flip writes the same bytes as numpy's
            # reversed copy, ~40x faster on uint8 (numpy copies a negative-stride view
            # element by element: ~0.8 ms for 300x400x3, 15% of an SSD pipeline's host time)
            return cv2.flip(np.ascontiguousarray(x), code).reshape(x.shape)  # (H, W, 1) too
        index = [slice(None)] * x.ndim
        for a in axes:
            index[a] = slice(None, None, -1)
        return np.ascontiguousarray(x[tuple(index)])

    def run_batch(self, inputs, args, params, stream):
        return flip_op_batch(self, inputs[0], args, stream)


def flip_op_batch(op, samples, args: dict, stream):
    """``fn.flip(device="gpu")``: one launch per batch; HWC/HW batches take the 2-D kernel,
    other layouts (DHWC, CDHW, FDHWC, ...) the N-D window kernel (``kernels/window.py``)."""
    s = as_samples(samples)
    n = len(s)
    flags = dict(op.flags)  # (ints: the launchers broadcast them)
    for k, vals in args.items():
        flags[k] = _nonzero_flags(k, vals)
    ndim = s.shapes.shape[1] if n else 0
    layout = op._layout or _DEFAULT_LAYOUTS.get(ndim, "")
    if layout in ("HWC", "HW") and len(layout) == ndim:
        return flip_batch(s, flags["horizontal"], flags["vertical"], stream=stream)
    if n and len(layout) != ndim:
        raise ArgumentError(f"flip: a {ndim}-D sample does not match the input layout {layout!r}")
    flips = np.zeros((n, ndim), np.int64)  # flip_axes(...) of every sample
    for name, dim in (("horizontal", "W"), ("vertical", "H"), ("depthwise", "D")):
        if dim in layout:
            flips[:, layout.index(dim)] = flags[name] != 0
    return window_batch(s, np.zeros((n, ndim), np.int64), s.shapes, flips, stream=stream)


def _nonzero_flags(name: str, values) -> np.ndarray:
    """Which samples an argument input's flags are set for (0/1 int64 (N,)), as
    ``flags_of(...) != 0``: numbers (a coin flip's draws) read at once (``host_numbers``)
    and checked as ``flags_of`` checks them; anything else, or a sample that is not an
    integral number, through ``flags_of`` (which names a bad one)."""
    v = host_numbers(values)
    if v is not None and (np.isfinite(v) & (v == np.floor(v))).all():
        return (v != 0).astype(np.int64)
    return (flags_of(name, values) != 0).astype(np.int64)
