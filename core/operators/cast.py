"""``fn.cast``, and :func:`convert_sat`, DALI's saturating conversion that every operator with
a ``dtype`` argument uses to write its output.

DALI converts with ``ConvertSat`` (``dali/core/convert.h``): float -> integer rounds half away
from zero (``std::round`` on the CPU) and then clamps to the target's range; integer -> integer
clamps; anything -> bool is ``value != 0``; float -> float is a plain cast (float16 overflows to
inf). NaN -> integer is undefined in DALI; here it gives 0 or the type's minimum.
"""

from __future__ import annotations

import numpy as np

from .._dtype import parse_dtype
from ..errors import ArgumentError
from ..graph import Operator, register

__all__ = ["Cast", "convert_sat", "parse_dtype", "round_half_away"]


def _below_half(dt: np.dtype):
    return np.nextafter(np.array(0.5, dt), np.array(0.0, dt))


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, halves away from zero (C's ``round``), exactly.

    ``trunc(x + copysign(h, x))`` with ``h`` the largest float below 0.5, in ``x``'s own
    precision: an exact ``k + 0.5`` sums to just under ``k + 1`` and rounds up to it, anything
    below the half stays below ``k + 1`` (0.49999997 + 0.5 would round to 1.0; + h does not).
    Returns a new float array of ``x``'s dtype.
    """
    x = np.asarray(x)
    y = np.copysign(_below_half(x.dtype), x)
    y += x
    return np.trunc(y, out=y)


def convert_sat(x, dtype, out: np.ndarray | None = None) -> np.ndarray:
    """``ConvertSat``: convert ``x`` to ``dtype``, rounding half away from zero and saturating.

    Args:
        x: a numpy array (or scalar).
        dtype: the target numpy dtype.
        out: optional array (any strides) of that dtype to write into.

    Returns:
        The converted array (``out`` when given).
    """
    x = np.asarray(x)
    dt = np.dtype(dtype)
    if x.ndim == 0 and out is None:  # ufuncs give scalars for 0-d arrays
        return convert_sat(x.reshape(1), dt).reshape(())
    src = x.dtype
    if dt == np.bool_:
        res = x != 0
    elif dt.kind == "f" or src == np.bool_:
        with np.errstate(over="ignore"):  # float16 overflows to inf, as in DALI
            res = x.astype(dt, copy=False)
    elif src.kind == "f":
        res = _float_to_int(x, dt)
    elif src.kind in "iu":
        res = _int_to_int(x, dt)
    else:
        raise TypeError(f"cannot convert {src} to {dt}")
    if out is not None:
        np.copyto(out, res, casting="unsafe")
        return out
    return res


def _int_to_int(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    src = np.iinfo(x.dtype)
    info = np.iinfo(dt)
    if src.min >= info.min and src.max <= info.max:
        return x.astype(dt, copy=False)
    lo = max(int(info.min), int(src.min))
    hi = min(int(info.max), int(src.max))
    return np.clip(x, np.array(lo, x.dtype), np.array(hi, x.dtype)).astype(dt)


def _float_to_int(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    info = np.iinfo(dt)
    if dt.itemsize <= 2:  # float32 holds the bounds of 8/16-bit integers exactly
        work_dt = np.float64 if x.dtype == np.float64 else np.float32
    else:
        work_dt = np.float64
    if dt.itemsize < 8:
        # fmax/fmin (not clip) so that NaN -> the lower bound rather than undefined
        y = np.fmax(x, np.array(info.min, work_dt), dtype=work_dt)
        np.fmin(y, np.array(info.max, work_dt), out=y)
        if info.min < 0:
            y += np.copysign(_below_half(y.dtype), y)
        else:
            y += _below_half(y.dtype)
        return y.astype(dt)  # truncation toward zero completes the rounding
    y = round_half_away(x.astype(work_dt, copy=False))
    hi = y >= float(info.max)  # 2**63 or 2**64: not representable in the target
    lo = y <= float(info.min)
    bad = hi | lo | np.isnan(y)
    y[bad] = 0
    res = y.astype(dt)
    res[hi] = info.max
    res[lo] = info.min
    return res


@register(legacy=("Cast",))
class Cast(Operator):
    """Converts the input to ``dtype``, rounding half away from zero and saturating.

    DALI's ``ConvertSat``: a float -> integer conversion rounds to the nearest integer (halves
    away from zero) and clamps to the target range (``300.7 -> 255`` for UINT8,
    ``-2.5 -> -3``); integer -> integer clamps; conversion to BOOL tests ``!= 0``.

    Args:
        dtype: the output data type (required), e.g. ``types.FLOAT`` or ``types.UINT8``.

    Example:
        >>> with pipe:
        ...     f = fn.cast(images, dtype=types.FLOAT)
    """

    schema = "cast"
    devices = ("cpu", "gpu")
    num_inputs = (1, 1)

    def setup(self, *, dtype=None) -> None:
        if dtype is None:
            raise ArgumentError(f"{self.schema}: the argument dtype is required")
        self.dtype = parse_dtype(dtype, self.schema)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype == self.dtype:
            return x
        return convert_sat(x, self.dtype)

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch; integer outputs round half to even there (CUDA's ``rint``)."""
        from ..kernels.slice import cast_batch

        return cast_batch(inputs[0], self.dtype, stream=stream)
