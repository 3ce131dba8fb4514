"""GPU ``fn.color_space_conversion`` (``color_space.cu``): every sample in one launch."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

COLOR_DESC = np.dtype([("in_ptr", "<i8"), ("out_ptr", "<i8"), ("npixels", "<i8")])


@functools.cache
def _get_color_space_kernel(code: int, device_id: int):
    return get_function("color_space.cu", f"color_space_convert<{int(code)}>", device_id)


@stream_scoped
def color_space_batch(inputs, code: int, out_channels: int, stream=None):
    """Convert every uint8 sample (channels last) with conversion ``code``; the output has
    ``out_channels`` channels."""
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    if not all(a.flags.c_contiguous for a in s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    shapes = s.shapes.copy()
    shapes[:, -1] = out_channels
    out = alloc_batch(shapes, np.uint8, s.device_id)
    d = np.zeros(n, COLOR_DESC)
    d["in_ptr"], d["out_ptr"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    d["npixels"] = s.shapes[:, :-1].prod(axis=1)
    block = 256
    grid = (max(1, min(int((d["npixels"].max() + block - 1) // block), 8192)), 1, n)
    k = _get_color_space_kernel(code, s.device_id)
    k(grid, (block, 1, 1), (upload(d.view(np.uint8), stream),), stream=stream)
    return out
