"""The GPU side of ``fn.one_hot`` (``one_hot.cu``): one launch per batch."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

ONE_HOT_DESC = np.dtype([(f, "<i8") for f in ("in_ptr", "out_ptr", "size", "inner")])
TYPE_NAMES = {  # every numeric type, as the kernels name them (bool as uint8)
    np.dtype(np.bool_): "uint8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.int16): "int16",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.int32): "int",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.int64): "int64",
    np.dtype(np.float16): "dl_half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}
_BLOCK = 256


@functools.cache
def _get_one_hot_kernel(in_dtype, out_dtype, device_id: int):
    return get_function(
        "one_hot.cu", f"one_hot<{TYPE_NAMES[in_dtype]}, {TYPE_NAMES[out_dtype]}>", device_id
    )


def one_hot_descriptors(in_ptrs, out_ptrs, out_shapes, axis: int) -> np.ndarray:
    """One descriptor per sample: the output's size and the volume after the new ``axis``."""
    out_shapes = np.asarray(out_shapes, np.int64)
    d = np.zeros(len(out_shapes), ONE_HOT_DESC)
    d["in_ptr"] = np.asarray(in_ptrs, np.uint64).view(np.int64)
    d["out_ptr"] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    d["size"] = out_shapes.prod(axis=1)
    d["inner"] = out_shapes[:, axis + 1 :].prod(axis=1)
    return d


@stream_scoped
def one_hot_batch(inputs, out_shapes, axis, num_classes, on, off, out_dtype, stream=None):
    """Write the one-hot encoding of every (C-ordered) sample: ``out_shapes`` are the outputs'
    shapes, the classes along ``axis``; ``on``/``off`` are already converted to the output type.
    """
    from .layout import c_strides, copy_batch

    s = as_samples(inputs)
    if len(s) and not (s.strides == c_strides(s.shapes)).all():
        s = copy_batch(s, stream=stream)
    out = alloc_batch(out_shapes, out_dtype, s.device_id)
    n = len(s)
    if n == 0:
        return out
    d = one_hot_descriptors(s.ptrs, out.ptrs, out.shapes, axis)
    size = int(d["size"].max())
    if size == 0:
        return out
    blocks = max(1, min(4096, -(-size // _BLOCK)))
    k = _get_one_hot_kernel(np.dtype(s.dtype), np.dtype(out_dtype), s.device_id)
    k(
        (blocks, 1, n),
        (_BLOCK, 1, 1),
        (upload(d, stream), np.int64(num_classes), np.float64(on), np.float64(off)),
        stream=stream,
    )
    return out
