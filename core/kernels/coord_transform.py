"""GPU ``fn.coord_transform`` (``coord_transform.cu``): every sample's points in one launch."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

COORD_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "npts", "in_dim", "out_dim")]
    + [("m", "<f4", (36,)), ("t", "<f4", (6,))]
)


@functools.cache
def _get_coord_transform_kernel(in_dtype, out_dtype, device_id: int):
    expr = f"coord_transform<{ctype(in_dtype)}, {ctype(out_dtype)}>"
    return get_function("coord_transform.cu", expr, device_id)


def coord_descriptors(in_ptrs, out_ptrs, npts, mts) -> np.ndarray:
    """One ``CoordDesc`` per sample: pointers, point count, and M (row-major, in_dim columns)
    and T of that sample."""
    n = len(mts)
    d = np.zeros(n, COORD_DESC)
    d["in_ptr"], d["out_ptr"], d["npts"] = in_ptrs, out_ptrs, npts
    for i, (m, t) in enumerate(mts):
        d["in_dim"][i], d["out_dim"][i] = m.shape[1], m.shape[0]
        d["m"][i, : m.size] = m.reshape(-1)
        d["t"][i, : t.size] = t
    return d


@stream_scoped
def coord_transform_batch(inputs, mts, out_dtype, stream=None):
    """``out[..., i] = sum_j M[i, j] * in[..., j] + T[i]`` per sample.

    Args:
        inputs: the batch (SampleList or CuPy arrays), points along the last axis.
        mts: per sample, ``(M, T)`` float32 (``M`` of shape (out_dim, in_dim)).
        out_dtype: the output type.
        stream: the CUDA stream.

    Returns:
        A SampleList with the last axis of each sample replaced by ``out_dim``.
    """
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    if not all(a.flags.c_contiguous for a in s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    shapes = s.shapes.copy()
    shapes[:, -1] = [m.shape[0] for m, _ in mts]
    out = alloc_batch(shapes, out_dtype, s.device_id)
    npts = s.shapes[:, :-1].prod(axis=1)
    d = coord_descriptors(s.ptrs.view(np.int64), out.ptrs.view(np.int64), npts, mts)
    block = 256
    grid = (max(1, min(int((npts.max() + block - 1) // block), 4096)), 1, n)
    k = _get_coord_transform_kernel(s.dtype, np.dtype(out_dtype), s.device_id)
    k(grid, (block, 1, 1), (upload(d.view(np.uint8), stream),), stream=stream)
    return out
