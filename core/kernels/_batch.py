"""Batch plumbing shared by the launchers: inputs as SampleLists, fresh output batches."""

from __future__ import annotations

import numpy as np

_ALIGN = 256


def as_samples(x):
    from ..tensors_gpu import SampleList

    return SampleList.coerce(x)


def hwc_view(samples):
    """(H, W, C, row stride, pixel stride) per sample of an HWC (or HW) batch, channel stride 1.

    Samples whose channels are not contiguous are copied first (returns the batch it used).
    """
    s = samples
    if s.shapes.shape[1] == 2:
        h, w = s.shapes[:, 0], s.shapes[:, 1]
        c = np.ones_like(h)
        sy, sx = s.strides[:, 0], s.strides[:, 1]
        return s, h, w, c, sy, sx
    if s.shapes.shape[1] != 3:
        raise ValueError(f"expected HWC samples (3 dimensions), got {s.shapes.shape[1]}")
    if len(s) and not (s.strides[:, 2] == 1).all():
        import cupy

        from ..tensors_gpu import SampleList

        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    return s, s.shapes[:, 0], s.shapes[:, 1], s.shapes[:, 2], s.strides[:, 0], s.strides[:, 1]


def alloc_batch(shapes: np.ndarray, dtype, device_id: int):
    """A fresh output batch: one dense array when every sample has the same shape, else one
    buffer with each sample at an aligned offset."""
    import cupy

    from ..tensors_gpu import SampleList

    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    dtype = np.dtype(dtype)
    if n == 0 or (shapes == shapes[0]).all():
        arr = cupy.empty((n, *(int(v) for v in shapes[0])) if n else (0,), dtype)
        return SampleList.from_dense(arr) if n else SampleList.from_arrays([], device_id)
    sizes = shapes.prod(axis=1) * dtype.itemsize
    padded = (sizes + _ALIGN - 1) // _ALIGN * _ALIGN
    offsets = np.zeros(n, np.int64)
    offsets[1:] = np.cumsum(padded)[:-1]
    flat = cupy.empty(int(offsets[-1] + padded[-1]) or 1, np.uint8)
    strides = np.ones_like(shapes)
    if shapes.shape[1] > 1:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    ptrs = np.uint64(flat.data.ptr) + offsets.astype(np.uint64)
    return SampleList(dtype, ptrs, shapes, strides, flat, device_id)


def per_sample(value, n: int, width: int | None = None, dtype=np.float64) -> np.ndarray:
    """Broadcast a scalar, a per-channel list or per-sample values to (n,) or (n, width)."""
    a = np.asarray(value, dtype)
    if width is None:
        return (
            np.broadcast_to(a.reshape(-1) if a.ndim else a, (n,)).copy()
            if a.ndim <= 1
            else a.reshape(n)
        )
    if a.ndim <= 1:
        a = a.reshape(1, -1)
    if a.shape[1] < width:  # repeat the last value (one value for every channel)
        a = np.concatenate([a, np.repeat(a[:, -1:], width - a.shape[1], axis=1)], axis=1)
    return np.broadcast_to(a[:, :width], (n, width)).copy()
