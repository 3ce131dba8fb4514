"""Argument helpers shared by the tensor-manipulation operators (slice, pad, transpose,
reshape, squeeze, expand_dims, stack, cat, reductions): axes and axis names, the layouts DALI
assumes when the input has none, and DALI's ``clamp`` conversion.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError

# DALI's slice/pad assume these layouts for inputs without one (``GetDefaultLayout``).
DEFAULT_LAYOUTS = {2: "HW", 3: "HWC", 4: "DHWC"}


def int_list(value, who: str, name: str, allow_none: bool = True) -> tuple[int, ...] | None:
    """A tuple of ints from an int or a list of ints (None stays None when allowed).

    Raises:
        ArgumentError: naming ``name`` and the value when it holds anything but whole numbers.
    """
    if value is None:
        if allow_none:
            return None
        raise ArgumentError(f"{who}: the argument {name} is required")
    arr = np.atleast_1d(np.asarray(value))
    ok = arr.ndim == 1 and (
        arr.size == 0
        or arr.dtype.kind in "iu"
        or (arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr) & (arr == np.round(arr)))))
    )
    if not ok or arr.dtype.kind == "b":
        raise ArgumentError(f"{who}: {name}={value!r} must be an int or a list of ints")
    return tuple(int(v) for v in arr)


def layout_arg(value, who: str, name: str) -> str | None:
    """A layout string argument (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"{who}: {name}={value!r} must be a layout string such as 'HWC'")
    return value


def exclusive(who: str, **given) -> None:
    """Raise when more than one of the keyword arguments is not None."""
    names = [k for k, v in given.items() if v is not None]
    if len(names) > 1:
        shown = ", ".join(f"{k}={given[k]!r}" for k in names)
        raise ArgumentError(f"{who}: {' and '.join(names)} are mutually exclusive (got {shown})")


def normalize_axes(axes: Sequence[int], ndim: int, who: str, name: str = "axes") -> list[int]:
    """Axis indices in [0, ndim) (negative ones count from the end).

    Raises:
        ArgumentError: an axis outside ``[-ndim, ndim)``.
    """
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ArgumentError(
                f"{who}: {name}={list(axes)!r}: axis {a} is out of range for {ndim}-D input"
            )
        out.append(a % ndim)
    return out


def axes_from_names(names: str, layout: str, who: str, name: str = "axis_names") -> list[int]:
    """The indices of the layout letters ``names`` in ``layout``.

    Raises:
        ArgumentError: the layout is empty or lacks one of the letters.
    """
    if not layout:
        raise ArgumentError(f"{who}: {name}={names!r} needs an input layout, but it has none")
    missing = [c for c in names if c not in layout]
    if missing:
        raise ArgumentError(
            f"{who}: {name}={names!r}: axis {missing[0]!r} is not in the input layout {layout!r}"
        )
    return [layout.index(c) for c in names]


def llround(x) -> np.ndarray:
    """C's ``llround``: to the nearest integer, halves away from zero, as int64."""
    x = np.asarray(x, np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


def clamp_cast(x: np.ndarray, dtype) -> np.ndarray:
    """DALI's ``clamp<T>`` conversion (what its slice and copy kernels write with): to a float
    type a plain cast; to float16 or an integer type, clamp to the type's range and convert,
    float -> integer truncating toward zero (NaN gives the range's lower bound)."""
    dt = np.dtype(dtype)
    x = np.asarray(x)
    if x.dtype == dt:
        return x
    if dt == np.bool_:
        return x != 0
    if dt.kind == "f" and dt != np.float16:
        return x.astype(dt)
    if dt == np.float16:
        lo, hi = -65504.0, 65504.0
    else:
        info = np.iinfo(dt)
        lo, hi = float(info.min), float(info.max)
    if x.dtype.kind in "iub" and dt.kind in "iu":
        info_in = np.iinfo(x.dtype) if x.dtype.kind != "b" else np.iinfo(np.uint8)
        if info_in.min >= lo and info_in.max <= hi:
            return x.astype(dt)
        return np.clip(x, max(int(lo), int(info_in.min)), min(int(hi), int(info_in.max))).astype(dt)
    y = np.fmax(np.asarray(x, np.float64), lo)  # fmax: NaN -> lo
    np.fmin(y, hi, out=y)
    return np.trunc(y).astype(dt) if dt.kind in "iu" else y.astype(dt)
