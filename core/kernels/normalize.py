"""The GPU side of ``fn.normalize``: the elementwise step (``normalize.cu``), one launch per
batch, after the statistics were reduced (``reduce.cu``) or uploaded (given ``mean``/``stddev``).
"""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import _ALIGN, alloc_batch, as_samples, ragged_layout, uniform_rows
from .one_hot import TYPE_NAMES
from .reduce import launch_reduce, reduce_descriptors

MAX_DIMS = 8
NORM_DESC = np.dtype(
    [
        (f, "<i8")
        for f in (
            "in_ptr",
            "out_ptr",
            "mean_ptr",
            "dev_ptr",
            "size",
            "ndim",
            "count",
            "dev_is_sumsq",
        )
    ]
    + [(f, "<i8", (MAX_DIMS,)) for f in ("shape", "in_strides", "mean_strides", "dev_strides")]
)
_BLOCK = 256
OUT_TYPES = frozenset(
    np.dtype(t)
    for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.uint32)
    + (np.float16, np.float32, np.float64)
)


@functools.cache
def _get_normalize_kernel(in_dtype, out_dtype, device_id: int):
    expr = f"normalize_apply<{TYPE_NAMES[in_dtype]}, {TYPE_NAMES[out_dtype]}>"
    return get_function("normalize.cu", expr, device_id)


def broadcast_strides(param_shapes: np.ndarray) -> np.ndarray:
    """C-order strides (elements) of parameter arrays of ``param_shapes`` (N, ndim), 0 along
    axes of extent 1 (broadcast over the data). A batch of one parameter shape (the reduced
    statistics of samples that differ only along the reduced axes, or one given tensor)
    computes one memoised row, repeated."""
    shapes = np.asarray(param_shapes, np.int64)
    rows = _strides_rows(shapes)
    return np.broadcast_to(rows, shapes.shape) if rows.ndim == 1 else rows


def _strides_rows(param_shapes: np.ndarray) -> np.ndarray:
    """:func:`broadcast_strides` as a value to assign to (N, ndim) rows: the memoised row
    itself for a batch of one parameter shape (the assignment repeats it), without
    ``np.broadcast_to``'s view (~5 us)."""
    shapes = np.asarray(param_shapes, np.int64)
    if len(shapes) > 1 and uniform_rows(shapes):
        return _broadcast_row(shapes[0].tobytes())
    return _broadcast_strides(shapes)


def _broadcast_strides(shapes: np.ndarray) -> np.ndarray:
    strides = np.ones_like(shapes)
    if shapes.shape[1] > 1:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    return np.where(shapes == 1, 0, strides)


@functools.lru_cache(maxsize=256)
def _broadcast_row(shape: bytes) -> np.ndarray:
    row = _broadcast_strides(np.frombuffer(shape, np.int64).reshape(1, -1))[0]
    row.flags.writeable = False
    return row


_WORDS = NORM_DESC.itemsize // 8  # int64 words per descriptor: 8 scalars, then 4 fields


def normalize_descriptors(
    in_ptrs,
    out_ptrs,
    shapes,
    in_strides,
    mean_ptrs,
    mean_shapes,
    dev_ptrs,
    dev_shapes,
    dev_is_sumsq: bool,
    counts,
) -> np.ndarray:
    """The ``NORM_DESC`` array: one per sample (see ``normalize.cu``), written as rows of
    int64 words (its layout: eight scalars, then four ``MAX_DIMS`` fields).

    Raises:
        ValueError: samples of more than ``MAX_DIMS`` dimensions.
    """
    shapes = np.asarray(shapes, np.int64)
    n, ndim = shapes.shape
    if ndim > MAX_DIMS:
        raise ValueError(f"GPU normalize handles up to {MAX_DIMS} dimensions, got {ndim}")
    words = np.zeros((n, _WORDS), np.int64)
    for i, ptrs in enumerate((in_ptrs, out_ptrs, mean_ptrs, dev_ptrs)):
        words[:, i] = np.asarray(ptrs, np.uint64).view(np.int64)
    words[:, 4] = shapes.prod(axis=1)  # size
    words[:, 5] = ndim
    words[:, 6] = counts
    words[:, 7] = int(bool(dev_is_sumsq))
    fields = words[:, 8:].reshape(n, 4, MAX_DIMS)  # a view: shape, in, mean and dev strides
    fields[:, 0, :ndim] = shapes
    fields[:, 1, :ndim] = in_strides
    fields[:, 2, :ndim] = mean_strides = _strides_rows(mean_shapes)
    # the statistics often share one shapes array (both reduced: the kept extents)
    fields[:, 3, :ndim] = mean_strides if dev_shapes is mean_shapes else _strides_rows(dev_shapes)
    return words.view(NORM_DESC).reshape(n)


def upload_params(arrays: list[np.ndarray], dtype, stream) -> tuple:
    """Per-sample parameter arrays as one device buffer: (buffer, per-sample addresses)."""
    dtype = np.dtype(dtype)
    flat = [np.ascontiguousarray(a, dtype).reshape(-1) for a in arrays]
    sizes = np.array([f.size for f in flat], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(flat) else sizes
    host = np.concatenate(flat) if flat else np.zeros(1, dtype)
    dev = upload(host if host.size else np.zeros(1, dtype), stream)
    ptrs = np.uint64(dev.data.ptr) + (offsets * dtype.itemsize).astype(np.uint64)
    return dev, ptrs


@stream_scoped
def normalize_apply_batch(
    inputs, out_dtype, descs_args: dict, scale, shift, eps, ddof, stream=None
):
    """``out = (x - mean) * inv + shift`` for every sample; ``descs_args`` are the keyword
    arguments of ``normalize_descriptors`` but the input/output addresses and shapes."""
    s = as_samples(inputs)
    out = alloc_batch(s.shapes, out_dtype, s.device_id)
    n = len(s)
    if n == 0:
        return out
    d = normalize_descriptors(s.ptrs, out.ptrs, s.shapes, s.strides, **descs_args)
    if int(d["size"].max()):
        _apply(s, out, d, upload(d, stream), (scale, shift, eps, ddof), stream)
    return out


def _apply(s, out, d: np.ndarray, table, args: tuple, stream) -> None:
    """Launch the normalize kernel over ``s`` into ``out``: ``d`` its descriptors (for the
    grid), ``table`` their device copy, ``args`` (scale, shift, eps, ddof)."""
    scale, shift, eps, ddof = args
    size = int(d["size"].max())
    k = _get_normalize_kernel(np.dtype(s.dtype), np.dtype(out.dtype), s.device_id)
    k(
        (max(1, min(4096, -(-size // _BLOCK))), 1, len(s)),
        (_BLOCK, 1, 1),
        (table, np.float32(scale), np.float32(shift), np.float32(eps), np.int64(ddof)),
        stream=stream,
    )


@stream_scoped
def normalize_reduced_batch(inputs, out_dtype, axes, keep, counts, scale, shift, eps, ddof,
                            stream=None):  # fmt: skip
    """``normalize_apply_batch`` with both statistics reduced from the data over ``axes``:
    what ``reduce_batch`` "mean" (float32), ``reduce_batch`` "variance" (float64 sums of
    squared deviations from that mean) and ``normalize_apply_batch`` launch, with the same
    descriptors and kernels, but their three descriptor tables go up in one copy (one
    allocation and copy instead of three), the two statistics share one allocation
    (:func:`_statistics`), and the second reduction's table is the first's with its output,
    its mean and its scale changed (both reduce the same samples).

    Args:
        inputs: the batch (C-contiguous or not: the descriptors carry its strides).
        out_dtype: the output type.
        axes: the reduced axes.
        keep: (N, ndim) int64, the statistics' shapes (the reduced axes of extent 1).
        counts: (N,) the number of elements each statistic reduces.
        scale, shift, eps, ddof: the operator's arguments.
        stream: the CUDA stream.
    """
    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return alloc_batch(s.shapes, out_dtype, s.device_id)
    stats, mean_ptrs, sumsq_ptrs = _statistics(keep)  # (kept alive until the launches)
    out = alloc_batch(s.shapes, out_dtype, s.device_id)
    norms = 1.0 / np.maximum(counts, 1)
    d_mean = reduce_descriptors(s.ptrs, mean_ptrs, s.shapes, s.strides, axes, norms)
    d_var = d_mean.copy()
    d_var["out_ptr"] = sumsq_ptrs.view(np.int64)
    d_var["mean_ptr"] = mean_ptrs.view(np.int64)
    d_var["norm"] = 1.0
    d = normalize_descriptors(s.ptrs, out.ptrs, s.shapes, s.strides, mean_ptrs, keep,
                              sumsq_ptrs, keep, True, counts)  # fmt: skip
    tables = (d_mean, d_var, d)  # REDUCE_DESC and NORM_DESC rows: 320 bytes, aligned
    dev = upload(np.concatenate([t.view(np.uint8) for t in tables]), stream)
    at = [np.uint64(dev.data.ptr + sum(t.nbytes for t in tables[:i])) for i in range(3)]
    if int(d_mean["n_out"].max()):
        for i, (op, dtype) in enumerate((("mean", np.float32), ("variance", np.float64))):
            launch_reduce(d_mean, at[i], s.dtype, dtype, op, 0.0, s.device_id, stream)
    if int(d["size"].max()):
        _apply(s, out, d, at[2], (scale, shift, eps, ddof), stream)
    return out


def _statistics(keep: np.ndarray) -> tuple:
    """(one device buffer, the float32 means' and the float64 sums of squares' addresses) of
    statistics of shapes ``keep`` (N, ndim): both temporaries of ``normalize_reduced_batch`` in
    one allocation (one CuPy pool call instead of two, ~5-18 us each on the H100), each sample's
    at a 256-byte aligned offset (``ragged_layout``'s, memoised per shapes), the sums after the
    means."""
    import cupy

    mean_offsets, mean_bytes, _ = ragged_layout(keep, 4)
    sumsq_offsets, sumsq_bytes, _ = ragged_layout(keep, 8)
    head = -(-mean_bytes // _ALIGN) * _ALIGN
    buf = cupy.empty(head + sumsq_bytes, np.uint8)
    base = np.uint64(buf.data.ptr)
    return buf, mean_offsets + base, sumsq_offsets + (base + np.uint64(head))
