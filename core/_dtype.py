"""The ``dtype`` argument of operators and decoders, checked the one way, and
:func:`convert_sat`, DALI's saturating conversion (``operators/cast.py`` says how it rounds).
Both sit below operators and decoders, which take them from here."""

from __future__ import annotations

import numpy as np

from .errors import ArgumentError
from .types import DALIDataType, to_dali_dtype, to_numpy_dtype


def parse_dtype(dtype, who: str, name: str = "dtype", allowed=None) -> np.dtype | None:
    """Convert a DALI/numpy/str data type to a numpy dtype (``None`` stays ``None``).

    Raises:
        ArgumentError: naming ``name`` and the value if it is not a data type, or not one of
            ``allowed`` (numpy dtypes) when given.
    """
    if dtype is None or (isinstance(dtype, DALIDataType) and dtype == DALIDataType.NO_TYPE):
        return None
    try:
        dt = to_numpy_dtype(dtype)
    except (TypeError, ValueError, KeyError):
        raise ArgumentError(f"{who}: {name}={dtype!r} is not a data type") from None
    if dt.kind not in "biuf":
        raise ArgumentError(f"{who}: {name}={dtype!r} is not a numeric data type")
    if allowed is not None and dt not in [np.dtype(a) for a in allowed]:
        names = ", ".join(to_dali_dtype(np.dtype(a)).name for a in allowed)
        raise ArgumentError(f"{who}: {name}={dtype!r} is not supported; use one of {names}")
    return dt


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
