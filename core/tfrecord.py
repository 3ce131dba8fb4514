"""Feature specs for ``fn.readers.tfrecord``, spelled as DALI's ``nvidia.dali.tfrecord``.

    >>> import dlpipe.tfrecord as tfrec
    >>> features = {
    ...     "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
    ...     "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
    ...     "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0),
    ... }

Output types: ``int64`` -> numpy int64, ``float32`` -> float32, ``string`` -> the raw bytes as
1-D uint8 (one string per feature; DALI has no tensors of strings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ArgumentError

# DALI's TFUtil::FeatureType values.
int64 = 0
string = 1
float32 = 2

_NAMES = {int64: "int64", string: "string", float32: "float32"}
_NUMPY = {int64: np.dtype(np.int64), string: np.dtype(np.uint8), float32: np.dtype(np.float32)}


@dataclass(frozen=True)
class Feature:
    """One feature of a ``tf.train.Example``; made by :func:`FixedLenFeature` or
    :func:`VarLenFeature`, not directly.

    Attributes:
        dtype: ``int64``, ``float32`` or ``string``.
        default: the default value (an int, a float or bytes).
        shape: the fixed shape (``FixedLenFeature``), else None.
        partial_shape: the trailing dimensions of a ``VarLenFeature`` (may be empty).
    """

    dtype: int
    default: Any
    shape: tuple[int, ...] | None = None
    partial_shape: tuple[int, ...] = ()

    @property
    def fixed(self) -> bool:
        return self.shape is not None

    @property
    def numpy_dtype(self) -> np.dtype:
        return _NUMPY[self.dtype]

    def __repr__(self) -> str:
        kind = "FixedLenFeature" if self.fixed else "VarLenFeature"
        shape = f"{list(self.shape)}, " if self.fixed else ""
        if self.partial_shape:
            shape = f"{list(self.partial_shape)}, "
        return f"{kind}({shape}tfrec.{_NAMES[self.dtype]}, {self.default!r})"


def _check_dtype(dtype: Any, who: str) -> int:
    if isinstance(dtype, bool) or not isinstance(dtype, int | np.integer) or dtype not in _NAMES:
        raise ArgumentError(
            f"{who}: dtype={dtype!r} must be tfrec.int64, tfrec.float32 or tfrec.string"
        )
    return int(dtype)


def _check_shape(shape: Any, name: str, who: str) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise ArgumentError(f"{who}: {name}={shape!r} must be a sequence of integers") from None
    if any(d < 0 for d in dims):
        raise ArgumentError(f"{who}: {name}={shape!r} must not hold negative sizes")
    return dims


def _convert_default(dtype: int, value: Any, who: str) -> Any:
    if value is None:
        return {int64: 0, float32: 0.0, string: b""}[dtype]
    try:
        if dtype == string:
            return value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if dtype == int64:
            return int(value)
        return float(np.float32(value))
    except (TypeError, ValueError):
        raise ArgumentError(
            f"{who}: default_value={value!r} does not fit tfrec.{_NAMES[dtype]}"
        ) from None


def FixedLenFeature(shape: Sequence[int] | int, dtype: int, default_value: Any = None) -> Feature:
    """A feature with a fixed number of values, reshaped to ``shape``.

    ``shape=()`` (or ``[]``) gives shape ``(1,)``, as in DALI. A string feature must have at
    most one element (``()`` or ``[1]``) and is output as its bytes (1-D uint8).

    Args:
        shape: the output shape; the record must hold exactly ``prod(shape)`` values.
        dtype: ``tfrec.int64``, ``tfrec.float32`` or ``tfrec.string``.
        default_value: fills the output when the record lacks the feature (dlpipe follows
            TensorFlow here; DALI outputs an empty tensor instead). None means 0 / 0.0 / b"".
    """
    who = "tfrec.FixedLenFeature"
    dtype = _check_dtype(dtype, who)
    dims = _check_shape(shape, "shape", who)
    if dtype == string and int(np.prod(dims)) > 1:
        raise ArgumentError(
            f"{who}: shape={shape!r}: tensors of strings are not supported; a string feature "
            "holds one value (shape () or [1])"
        )
    return Feature(dtype, _convert_default(dtype, default_value, who), shape=dims)


def VarLenFeature(*args: Any) -> Feature:
    """A feature with any number of values: ``VarLenFeature(dtype, default_value)`` or
    ``VarLenFeature(partial_shape, dtype, default_value)``.

    The output is 1-D, or ``(n / prod(partial_shape), *partial_shape)`` with a partial shape.
    A record without the feature gives an empty output. A string feature outputs its one
    value's bytes (more than one value is an error: DALI has no tensors of strings).
    """
    who = "tfrec.VarLenFeature"
    if len(args) == 3:
        partial, dtype, default = args
        partial = _check_shape(partial, "partial_shape", who)
        if any(d == 0 for d in partial):
            raise ArgumentError(f"{who}: partial_shape={list(partial)} must not hold zeros")
    elif len(args) in (1, 2):
        partial, dtype, default = (), args[0], args[1] if len(args) == 2 else None
    else:
        raise ArgumentError(
            f"{who}: takes (dtype, default_value) or (partial_shape, dtype, default_value), "
            f"got {len(args)} arguments"
        )
    dtype = _check_dtype(dtype, who)
    if dtype == string and partial:
        raise ArgumentError(f"{who}: partial_shape is not supported for tfrec.string")
    return Feature(dtype, _convert_default(dtype, default, who), partial_shape=partial)


__all__ = ["Feature", "FixedLenFeature", "VarLenFeature", "float32", "int64", "string"]
