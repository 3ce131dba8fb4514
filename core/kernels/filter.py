"""The GPU side of ``fn.filter`` (``filter.cu``): one launch per batch.

Filters and fill values may come from CPU nodes (uploaded in one copy each) or GPU nodes (read
where they are)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, c_contiguous, uniform_rows
from .layout import copy_batch

BORDER_CODES = {"reflect_101": 0, "reflect_1001": 1, "wrap": 2, "clamp": 3, "constant": 4}
FILTER_DESC = np.dtype(
    [
        ("in_ptr", "<i8"),
        ("out_ptr", "<i8"),
        ("filt_ptr", "<i8"),
        ("fill_ptr", "<i8"),
        ("planes", "<i8"),
        ("filt_frame_stride", "<i8"),
    ]
    + [(f, "<i4") for f in ("in_d", "in_h", "in_w", "out_d", "out_h", "out_w", "channels")]
    + [(f, "<i4") for f in ("fd", "fh", "fw", "ad", "ah", "aw", "planes_per_frame")]
    + [("fill_per_frame", "<i4"), ("_pad", "<i4")]
)
_BLOCK = 256


@functools.cache
def _get_filter_kernel(in_dtype, out_dtype, border: str, device_id: int):
    expr = f"filter_nd<{ctype(in_dtype)}, {ctype(out_dtype)}, {BORDER_CODES[border]}>"
    return get_function("filter.cu", expr, device_id)


def spatial3(values: Sequence[int]) -> tuple[int, int, int]:
    """Spatial extents (or anchors) as (d, h, w): images get d = 1 (anchor 0)."""
    values = tuple(int(v) for v in values)
    return values if len(values) == 3 else (1 if len(values) == 2 else 0, *values)


def filter_descs(in_shapes, plans: Sequence[dict], anchors: Sequence[tuple]) -> np.ndarray:
    """Per-sample descriptors (pointers left 0): geometry, filter extents and anchors.

    Args:
        in_shapes: (N, ndim) input shapes.
        plans: per sample, what ``Filter.sample_plan`` returns.
        anchors: per sample, the resolved anchor of each spatial axis (zeros for "valid").
    """
    n = len(plans)
    if n > 1 and all(p is plans[0] for p in plans) and all(a == anchors[0] for a in anchors):
        if uniform_rows(np.asarray(in_shapes, np.int64)):  # one plan: one row for every sample
            d = np.empty(n, FILTER_DESC)
            d[:] = filter_descs(in_shapes[:1], plans[:1], anchors[:1])[0]
            return d
    d = np.zeros(n, FILTER_DESC)
    for i, (shape, plan, anchor) in enumerate(zip(in_shapes, plans, anchors, strict=True)):
        seq, axes = plan["seq"], plan["axes"]
        shape = [int(v) for v in shape]
        d["planes"][i] = int(np.prod(shape[:seq])) if seq else 1
        d["in_d"][i], d["in_h"][i], d["in_w"][i] = spatial3(shape[seq : seq + axes])
        out = plan["out_shape"]
        d["out_d"][i], d["out_h"][i], d["out_w"][i] = spatial3(out[seq : seq + axes])
        d["channels"][i] = shape[-1] if plan["channels"] else 1
        d["fd"][i], d["fh"][i], d["fw"][i] = spatial3(plan["filter_shape"])
        a = spatial3(anchor)
        d["ad"][i], d["ah"][i], d["aw"][i] = (0, a[1], a[2]) if axes == 2 else a
        d["planes_per_frame"][i] = plan["planes_per_frame"]
        d["filt_frame_stride"][i] = int(np.prod(plan["filter_shape"])) if plan["per_frame"] else 0
    return d


def _device_floats(batch, stream):
    """(pointers, keep-alive) of per-sample float32 filters: uploaded from the host in one copy,
    or taken where they are on the device (made contiguous first)."""
    if hasattr(batch, "ptrs"):  # a GPU batch
        s = as_samples(batch)
        if not c_contiguous(s):
            s = copy_batch(s, stream=stream)
        return s.ptrs, s
    arrays = [np.ascontiguousarray(x, np.float32).reshape(-1) for x in batch]
    sizes = np.array([a.size for a in arrays], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = upload(np.concatenate(arrays) if arrays else np.zeros(1, np.float32), stream)
    ptrs = np.uint64(flat.data.ptr) + offsets.astype(np.uint64) * np.uint64(4)
    return ptrs, flat


def _device_fills(batch, dtype, stream):
    """(pointers, keep-alive) of the per-sample fill values, as for the filters."""
    if hasattr(batch, "ptrs"):
        s = as_samples(batch)
        return s.ptrs, s
    arrays = [np.asarray(x, dtype).reshape(-1) for x in batch]
    sizes = np.array([a.size for a in arrays], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = upload(np.concatenate(arrays), stream)
    ptrs = np.uint64(flat.data.ptr) + offsets.astype(np.uint64) * np.uint64(flat.itemsize)
    return ptrs, flat


@stream_scoped
def filter_batch(inputs, filters, fills, plans, anchors, border, out_dtype, stream=None):
    """Correlate every sample of ``inputs`` with its filter.

    Args:
        inputs: the GPU batch.
        filters: per-sample float32 filters (a list of numpy arrays, or a GPU batch).
        fills: per-sample fill values of the input type (list or GPU batch), or None.
        plans: per sample, ``Filter.sample_plan``'s result.
        anchors: per sample, the resolved anchors (zeros for "valid").
        border: one of ``BORDER_CODES``.
        out_dtype: the output type (the input's or float32).
    """
    s = as_samples(inputs)
    if not c_contiguous(s):
        s = copy_batch(s, stream=stream)
    n = len(s)
    out_shapes = np.array([p["out_shape"] for p in plans], np.int64).reshape(n, -1)
    out = alloc_batch(out_shapes if n else s.shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    d = filter_descs(s.shapes, plans, anchors)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    filt_ptrs, keep_filters = _device_floats(filters, stream)
    d["filt_ptr"] = np.asarray(filt_ptrs, np.uint64).view(np.int64)
    keep_fills = None
    if fills is not None and border == "constant":
        fill_ptrs, keep_fills = _device_fills(fills, s.dtype, stream)
        d["fill_ptr"] = np.asarray(fill_ptrs, np.uint64).view(np.int64)
        d["fill_per_frame"] = [1 if int(np.prod(shp)) > 1 else 0 for shp in _shapes_of(fills)]
    plane = (d["out_d"].astype(np.int64) * d["out_h"] * d["out_w"] * d["channels"]).max()
    if int(plane) == 0:
        return out
    k = _get_filter_kernel(np.dtype(s.dtype), np.dtype(out_dtype), border, s.device_id)
    k(
        (
            max(1, min(4096, -(-int(plane) // _BLOCK))),
            max(1, min(65535, int(d["planes"].max()))),
            n,
        ),
        (_BLOCK, 1, 1),
        (upload(d, stream),),
        stream=stream,
    )
    del keep_filters, keep_fills  # freed in stream order after the launch (CuPy's pool)
    return out


def _shapes_of(batch):
    if hasattr(batch, "shapes"):
        return [tuple(int(v) for v in shp) for shp in batch.shapes]
    return [np.shape(x) for x in batch]
