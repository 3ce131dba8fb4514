"""The GPU side of ``fn.lookup_table`` (``lookup_table.cu``): one launch per batch."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples
from .one_hot import TYPE_NAMES

LUT_DESC = np.dtype([(f, "<i8") for f in ("in_ptr", "out_ptr", "size")])
_BLOCK = 256


@functools.cache
def _get_lut_kernel(in_dtype, out_dtype, device_id: int):
    expr = f"lookup_table<{TYPE_NAMES[in_dtype]}, {TYPE_NAMES[out_dtype]}>"
    return get_function("lookup_table.cu", expr, device_id)


@stream_scoped
def lookup_batch(inputs, table_dev, stream=None):
    """``out = table[in]`` (keys outside [0, 65535] read ``table[65536]``, the default), every
    sample in one launch. ``table_dev`` is the device table (65537 values of the output type).
    """
    from .layout import c_strides, copy_batch

    s = as_samples(inputs)
    if len(s) and not (s.strides == c_strides(s.shapes)).all():
        s = copy_batch(s, stream=stream)
    out = alloc_batch(s.shapes, table_dev.dtype, s.device_id)
    n = len(s)
    if n == 0:
        return out
    d = np.zeros(n, LUT_DESC)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    d["size"] = s.shapes.prod(axis=1)
    size = int(d["size"].max())
    if size == 0:
        return out
    k = _get_lut_kernel(np.dtype(s.dtype), np.dtype(table_dev.dtype), s.device_id)
    k(
        (max(1, min(4096, -(-size // _BLOCK))), 1, n),
        (_BLOCK, 1, 1),
        (upload(d, stream), table_dev),
        stream=stream,
    )
    return out
