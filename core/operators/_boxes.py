"""Helpers shared by the bounding-box operators (bb_flip, bbox_paste, random_bbox_crop,
box_encoder): reading box batches and per-sample scalar arguments."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError


def box_rows(x: np.ndarray, who: str, ndim: int = 2) -> np.ndarray:
    """``x`` as (N, 2*ndim) float32 rows: boxes come as (N, 2*ndim) or flat (2*ndim*N,).

    Raises:
        ArgumentError: not float32, or a shape that does not hold whole boxes.
    """
    size = 2 * ndim
    if x.dtype != np.float32:
        raise ArgumentError(f"{who}: bounding boxes must be float32, got {x.dtype}")
    if x.ndim == 2 and x.shape[1] == size:
        return x
    if x.ndim == 1 and x.shape[0] % size == 0:
        return x.reshape(-1, size)
    if x.ndim >= 2 and x.shape[-1] == size:
        return x.reshape(-1, size)
    raise ArgumentError(
        f"{who}: bounding boxes must have shape (N, {size}) (or be flat with a multiple of "
        f"{size} values), got {tuple(x.shape)}"
    )


def scalar(value: Any, name: str, who: str, kind: type = float) -> float | int:
    """A per-sample scalar argument (a Python number, or a 1-element array from an argument
    input) as a Python ``kind``."""
    if type(value) is np.ndarray and value.size == 1 and value.dtype.kind in "biuf":
        item = value.item()  # an argument input's sample: the common case, checked quickly
        if kind is not int:
            return kind(item)
        if float(item) == int(item):
            return int(item)
    v = np.asarray(value)
    if v.size != 1 or not (np.issubdtype(v.dtype, np.number) or v.dtype == np.bool_):
        raise ArgumentError(f"{who}: {name}={value!r} must be a scalar number")
    item = v.reshape(()).item()
    if kind is int:
        if float(item) != int(item):
            raise ArgumentError(f"{who}: {name}={value!r} must be an integer")
        return int(item)
    return kind(item)
