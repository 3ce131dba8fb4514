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


def aligned_samples(samples, alignment: int):
    """The batch with every sample's address a multiple of ``alignment`` bytes (copies only
    the samples that are not; a copy is freshly allocated, so aligned)."""
    from ..tensors_gpu import SampleList

    s = samples
    if len(s) == 0 or not (s.ptrs % np.uint64(alignment)).any():
        return s
    arrays = [a.copy() if int(p) % alignment else a for a, p in zip(s, s.ptrs, strict=True)]
    return SampleList.from_arrays(arrays, s.device_id)


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


ENCODE_DESC = np.dtype(
    [(f, "<i8") for f in ("boxes", "labels", "out_boxes", "out_labels", "scratch", "n")]
)
ENCODER_THREADS = 256  # BOX_ENCODER_THREADS in bbox.cu


@functools.cache
def _get_box_encode_kernel(offset: bool, device_id: int):
    return get_function("bbox.cu", f"box_encode<{'true' if offset else 'false'}>", device_id)


def encoder_params(means, stds, scale, criteria) -> np.ndarray:
    """The float parameters of a box_encode launch: means[4], stds[4], scale, criteria."""
    return np.concatenate(
        [np.asarray(means, np.float32), np.asarray(stds, np.float32), [scale, criteria]]
    ).astype(np.float32)


def encode_descriptors(boxes, labels, out_boxes, out_labels, scratch, counts) -> np.ndarray:
    """One descriptor per sample: its boxes, labels, outputs and scratch rows."""
    d = np.zeros(len(counts), ENCODE_DESC)
    d["boxes"], d["labels"], d["n"] = boxes, labels, counts
    d["out_boxes"], d["out_labels"], d["scratch"] = out_boxes, out_labels, scratch
    return d


@stream_scoped
def box_encoder_batch(boxes, labels, anchors, criteria, offset, scale, means, stds, stream=None):
    """Encode a batch against ``anchors`` ((A, 4) ltrb, host float32) on the GPU: one block per
    sample. Returns dense (N, A, 4) float32 boxes and (N, A) int32 labels."""
    import cupy

    b = aligned_samples(contiguous_samples(boxes), 16)  # read as float4
    lab = contiguous_samples(labels)
    if b.dtype != np.float32:
        raise TypeError(f"box_encoder: bounding boxes must be float32, got {b.dtype}")
    if lab.dtype != np.int32:
        raise TypeError(f"box_encoder: labels must be int32 on the GPU, got {lab.dtype}")
    counts = box_counts(b.shapes, "box_encoder")
    label_counts = lab.shapes.prod(axis=1) if len(lab) else np.zeros(0, np.int64)
    if len(b) != len(lab) or (label_counts != counts).any():
        raise ValueError(
            f"box_encoder: the labels ({label_counts.tolist()}) do not match the boxes "
            f"({counts.tolist()}) sample by sample"
        )
    n, num = len(b), len(anchors)
    out_boxes = cupy.empty((n, num, 4), np.float32)
    out_labels = cupy.empty((n, num), np.int32)
    if n == 0 or num == 0:
        return out_boxes, out_labels
    anchors = np.ascontiguousarray(anchors, np.float32).reshape(-1, 4)
    cwh = np.empty_like(anchors)
    cwh[:, 0] = np.float32(0.5) * (anchors[:, 0] + anchors[:, 2])
    cwh[:, 1] = np.float32(0.5) * (anchors[:, 1] + anchors[:, 3])
    cwh[:, 2:] = anchors[:, 2:] - anchors[:, :2]
    dev_anchors = _device_anchors(anchors, cwh, b.device_id, stream)
    scratch = cupy.empty((n, 2 * num), np.int32)
    rows = np.arange(n, dtype=np.uint64)
    descs = encode_descriptors(
        b.ptrs,
        lab.ptrs,
        np.uint64(out_boxes.data.ptr) + rows * np.uint64(num * 16),
        np.uint64(out_labels.data.ptr) + rows * np.uint64(num * 4),
        np.uint64(scratch.data.ptr) + rows * np.uint64(num * 8),
        counts,
    )
    dev = upload(descs, stream)
    params = upload(encoder_params(means, stds, scale, criteria), stream)
    kernel = _get_box_encode_kernel(bool(offset), b.device_id)
    kernel(
        (n, 1, 1),
        (ENCODER_THREADS, 1, 1),
        (dev, dev_anchors[0], dev_anchors[1], params, np.int32(num)),
        stream=stream,
    )
    return out_boxes, out_labels


_ANCHORS: dict = {}  # (anchor bytes hash, device) -> (ltrb, cwh) on the device


def _device_anchors(anchors: np.ndarray, cwh: np.ndarray, device_id: int, stream):
    """The anchors on the device, uploaded once per set of anchors and device."""
    key = (hash(anchors.tobytes()), anchors.shape, device_id)
    hit = _ANCHORS.get(key)
    if hit is None:  # kept for other pipelines' streams too: wait for the copy once
        hit = (upload(anchors, stream), upload(cwh, stream))
        if stream is not None:
            stream.synchronize()
        _ANCHORS[key] = hit
    return hit
