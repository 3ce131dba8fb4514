"""GPU colour-matrix kernel (``color.cu``): ``out = M @ in + offset`` per pixel, with a 3x3
matrix and offset per sample; color_twist and hsv build their matrices on the host."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, grid_for, stream_scoped, upload
from ._batch import alloc_batch, as_samples, hwc_view

COLOR_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "h", "w", "in_sy", "in_sx")]
    + [("m", "<f8", (9,)), ("off", "<f8", (3,))]
)

_WORDS = COLOR_DESC.itemsize // 8  # 6 integers, then the float64 matrix (9) and offset (3)


@functools.cache
def _get_color_kernel(in_dtype, out_dtype, device_id: int):
    return get_function(
        "color.cu", f"color_matrix<{ctype(in_dtype)}, {ctype(out_dtype)}>", device_id
    )


@stream_scoped
def color_matrix_batch(inputs, matrices, offsets, out_dtype=None, stream=None):
    """Apply a per-sample 3x3 colour matrix and offset to HWC 3-channel samples.

    Args:
        inputs: the batch (HWC, C = 3).
        matrices: (N, 3, 3) or (3, 3).
        offsets: (N, 3) or (3,).
        out_dtype: output type (default: the input's); integers round and saturate.
        stream: the CUDA stream.
    """
    s, h, w, c, sy, sx = hwc_view(as_samples(inputs))
    n = len(s)
    if n and not (c == 3).all():
        raise ValueError("colour operators need 3-channel HWC samples")
    out_dtype = np.dtype(out_dtype or s.dtype)
    out = alloc_batch(s.shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    # every field written, as columns of word views (a structured array's field assignments
    # cost a few microseconds each); the matrix / offset assignments broadcast one to all
    d = np.empty(n, COLOR_DESC)
    ints = d.view(np.int64).reshape(n, _WORDS)
    floats = d.view(np.float64).reshape(n, _WORDS)
    ints[:, 0], ints[:, 1] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    ints[:, 2], ints[:, 3], ints[:, 4], ints[:, 5] = h, w, sy, sx
    floats[:, 6:15] = np.asarray(matrices, np.float64).reshape(-1, 9)
    floats[:, 15:18] = np.asarray(offsets, np.float64).reshape(-1, 3)
    dev = upload(d.view(np.uint8), stream)
    grid, block = grid_for(int(h.max()), int(w.max()), n)
    _get_color_kernel(s.dtype, out_dtype, s.device_id)(grid, block, (dev,), stream=stream)
    return out
