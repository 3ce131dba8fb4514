"""GPU ``fn.erase`` (``erase.cu``): copy-or-fill of every sample in one launch."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, c_contiguous

ERASE_DESC = np.dtype(
    [("in_ptr", "<i8"), ("out_ptr", "<i8"), ("n", "<i8"), ("ndim", "<i8"), ("shape", "<i8", (5,))]
    + [(f, "<i8") for f in ("region_off", "region_count", "fill_off", "fill_count", "cdim")]
)


@functools.cache
def _get_erase_kernel(dtype, device_id: int):
    return get_function("erase.cu", f"erase<{ctype(dtype)}>", device_id)


def erase_tables(shapes, regions, fills, cdim):
    """(descriptors without pointers, region rows (begin[5], end[5]) int64, fill values float64)
    for per-sample ``regions`` (lists of per-axis (begin, end)) and ``fills``."""
    n = len(shapes)
    d = np.zeros(n, ERASE_DESC)
    rows, vals = [], []
    for i, (shape, regs, fill) in enumerate(zip(shapes, regions, fills, strict=True)):
        nd = len(shape)
        d["n"][i], d["ndim"][i] = int(np.prod(shape)), nd
        d["shape"][i, :nd] = shape
        d["region_off"][i], d["region_count"][i] = len(rows), len(regs)
        for box in regs:
            row = np.zeros(10, np.int64)
            row[:nd] = [b for b, _ in box]
            row[5 : 5 + nd] = [e for _, e in box]
            rows.append(row)
        d["fill_off"][i], d["fill_count"][i] = len(vals), len(fill)
        vals.extend(float(v) for v in fill)
        d["cdim"][i] = -1 if cdim is None else cdim
    table = np.array(rows, np.int64).reshape(-1, 10) if rows else np.zeros((1, 10), np.int64)
    return d, table, np.array(vals or [0.0], np.float64)


def erase_tables_batch(shapes: np.ndarray, begins: np.ndarray, ends: np.ndarray, fill, cdim):
    """``erase_tables`` of a batch whose samples have the same number of regions, given as
    (N, regions, ndim) ``begins`` and ``ends``, and the same ``fill``: the same tables, built
    with array operations (no loop over samples and regions)."""
    n, ndim = shapes.shape
    nreg = begins.shape[1]
    fill = np.asarray(fill, np.float64).reshape(-1)
    d = np.zeros(n, ERASE_DESC)
    d["n"], d["ndim"] = shapes.prod(axis=1), ndim
    d["shape"][:, :ndim] = shapes
    d["region_off"], d["region_count"] = np.arange(n) * nreg, nreg
    d["fill_off"], d["fill_count"] = np.arange(n) * fill.size, fill.size
    d["cdim"] = -1 if cdim is None else cdim
    if n * nreg:
        table = np.zeros((n * nreg, 10), np.int64)
        table[:, :ndim] = begins.reshape(-1, ndim)
        table[:, 5 : 5 + ndim] = ends.reshape(-1, ndim)
    else:
        table = np.zeros((1, 10), np.int64)
    vals = np.tile(fill, n) if fill.size else np.zeros(1, np.float64)
    return d, table, vals


@stream_scoped
def erase_batch(inputs, regions, fills, cdim, stream=None):
    """Erase ``regions`` (per sample) with ``fills`` (per sample: 1 or C values of the input
    type); returns a new SampleList."""
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    # from the strides, not each sample's CuPy array (made on first access: a CuPy array and
    # its memory pointer per sample, every batch); stricter than CuPy's flag on extent-1 axes,
    # where the copy holds the same values
    if not c_contiguous(s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    out = alloc_batch(s.shapes, s.dtype, s.device_id)
    if isinstance(regions, tuple):  # (begins, ends) arrays, one fill for every sample
        d, table, vals = erase_tables_batch(s.shapes, *regions, fills[0], cdim)
    else:
        d, table, vals = erase_tables(s.shapes.tolist(), regions, fills, cdim)
    d["in_ptr"], d["out_ptr"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    block = 256
    grid = (max(1, min(int((d["n"].max() + block - 1) // block), 8192)), 1, n)
    k = _get_erase_kernel(s.dtype, s.device_id)
    k(
        grid,
        (block, 1, 1),
        (upload(d.view(np.uint8), stream), upload(table, stream), upload(vals, stream)),
        stream=stream,
    )
    return out
