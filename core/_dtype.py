"""The ``dtype`` argument of operators and decoders, checked the one way (it sits below both:
``decoders`` take it from here, not from ``operators.cast``)."""

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
