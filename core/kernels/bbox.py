"""Launchers of the bounding-box kernels (``bbox.cu``): one launch per batch, the per-sample
descriptors uploaded in one copy."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

FLIP_DESC = np.dtype(
    [("src", "<i8"), ("dst", "<i8"), ("n", "<i8"), ("horizontal", "<i4"), ("vertical", "<i4")]
)
_THREADS = 256
_MAX_BLOCKS = 64  # per sample; threads stride over the rest


@functools.cache
def _get_bb_flip_kernel(ltrb: bool, device_id: int):
    return get_function("bbox.cu", f"bb_flip<{'true' if ltrb else 'false'}>", device_id)


def contiguous_samples(samples):
    """The batch with every sample C-contiguous (copies only the samples that are not)."""
    from ..tensors_gpu import SampleList

    s = as_samples(samples)
    if len(s) == 0:
        return s
    want = np.ones_like(s.strides)
    if s.shapes.shape[1] > 1:
        want[:, :-1] = np.cumprod(s.shapes[:, :0:-1], axis=1)[:, ::-1]
    bad = (s.strides != want) & (s.shapes > 1)
    if not bad.any():
        return s
    import cupy

    return SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)


def box_counts(shapes: np.ndarray, who: str) -> np.ndarray:
    """Boxes per sample of a batch of (N, 4) or flat (4N,) float samples."""
    shapes = np.asarray(shapes, np.int64)
    if shapes.ndim != 2 or shapes.shape[1] not in (1, 2):
        raise ValueError(f"{who}: bounding boxes must be (N, 4) or flat, got shapes {shapes}")
    if shapes.shape[1] == 2 and len(shapes) and (shapes[:, 1] != 4).any():
        raise ValueError(f"{who}: bounding boxes must have 4 coordinates, got shapes {shapes}")
    total = shapes.prod(axis=1)
    if (total % 4).any():
        raise ValueError(f"{who}: flat bounding boxes must hold a multiple of 4 values")
    return total // 4


def flip_descriptors(src, dst, counts, flags) -> np.ndarray:
    """The descriptors of a bb_flip launch: one per sample, ``flags`` (horizontal, vertical)."""
    d = np.zeros(len(counts), FLIP_DESC)
    d["src"], d["dst"], d["n"] = src, dst, counts
    f = np.asarray(flags, np.int64).reshape(-1, 2)
    d["horizontal"], d["vertical"] = f[:, 0] != 0, f[:, 1] != 0
    return d


def blocks_for(max_items: int) -> int:
    return int(min(_MAX_BLOCKS, max(1, -(-int(max_items) // _THREADS))))


@stream_scoped
def bb_flip_batch(boxes, flags, ltrb: bool, stream=None):
    """Flip a batch of float32 boxes on the GPU; ``flags`` holds (horizontal, vertical) per
    sample. Returns a SampleList with the input's shapes."""
    s = contiguous_samples(boxes)
    counts = box_counts(s.shapes, "bb_flip")
    out = alloc_batch(s.shapes, np.float32, s.device_id)
    if len(s) == 0 or counts.max(initial=0) == 0:
        return out
    descs = flip_descriptors(s.ptrs, out.ptrs, counts, flags)
    dev = upload(descs, stream)
    grid = (blocks_for(counts.max()), len(s), 1)
    _get_bb_flip_kernel(bool(ltrb), s.device_id)(grid, (_THREADS, 1, 1), (dev,), stream=stream)
    return out
