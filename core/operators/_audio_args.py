"""Argument checks shared by the audio operators (spectrogram, mel_filter_bank, mfcc, ...)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

__all__ = ["float_arg", "int_arg", "per_sample_float"]


def int_arg(value, name: str, who: str, minimum: int | None = None) -> int:
    """An integer argument; integral floats are accepted (``window_length=0.02 * 16000``, as
    DALI's Python API converts them).

    Raises:
        ArgumentError: naming the argument and its value.
    """
    if isinstance(value, bool):
        raise ArgumentError(f"{who}: {name}={value!r} must be an integer")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"{who}: {name}={value!r} must be an integer") from None
    if not np.isfinite(f) or not f.is_integer():
        raise ArgumentError(f"{who}: {name}={value!r} must be an integer")
    v = int(f)
    if minimum is not None and v < minimum:
        raise ArgumentError(f"{who}: {name}={value!r} must be >= {minimum}")
    return v


def float_arg(value, name: str, who: str) -> float:
    """A finite number."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"{who}: {name}={value!r} must be a number") from None
    if not np.isfinite(f):
        raise ArgumentError(f"{who}: {name}={value!r} must be finite")
    return f


def per_sample_float(args: dict, name: str, default, who: str) -> float:
    """A per-sample argument-input value (a scalar or 1-element array) or the static default."""
    if name not in args:
        return default
    v = np.asarray(args[name])
    if v.size != 1:
        raise ArgumentError(
            f"{who}: argument input {name!r} must have one value per sample, got shape "
            f"{list(v.shape)}"
        )
    return float_arg(v.reshape(()), name, who)


def per_sample_floats(args: dict, name: str, default, n: int, who: str) -> np.ndarray:
    """The values of a per-sample argument input for a whole batch (GPU operators get the
    batch's argument values at once), or ``default`` repeated: float64 (n,)."""
    if name not in args:
        return np.full(n, default, np.float64)
    vals = list(args[name])
    return np.array([per_sample_float({name: v}, name, default, who) for v in vals], np.float64)
