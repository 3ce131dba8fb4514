"""Sequences (F, ...) as batches of frames, and back, without copying: per-frame kernels (the
resize of ``FHWC`` video) then run one launch over every frame of the batch.

A sequence sample with shape (F, *frame) and strides (sF, *fs) (in elements) is the F frames
at ``ptr + f * sF * itemsize``, each of shape ``frame`` and strides ``fs``. Going back, the
frames of each sequence must lie at one constant spacing (they do in the batches
``alloc_batch`` makes: equal-size frames at equal padded offsets), which becomes the sequence
stride. The arithmetic is on host numpy arrays only (``frame_geometry``,
``sequence_geometry``), so it is tested without a GPU.
"""

from __future__ import annotations

import numpy as np


def frame_geometry(ptrs, shapes, strides, itemsize: int):
    """Split sequences into frames.

    Args:
        ptrs: (N,) uint64 sample addresses.
        shapes, strides: (N, 1 + k) int64 sequence shapes and element strides.
        itemsize: bytes per element.

    Returns:
        (frame ptrs (T,) uint64, frame shapes (T, k), frame strides (T, k), owner (T,) int64:
        the sequence of each frame, counts (N,) int64: frames per sequence), T = sum(counts).
    """
    ptrs = np.asarray(ptrs, np.uint64)
    shapes = np.asarray(shapes, np.int64)
    strides = np.asarray(strides, np.int64)
    counts = shapes[:, 0].copy()
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    index = np.arange(int(counts.sum()), dtype=np.int64) - first
    step = (strides[owner, 0] * itemsize).astype(np.uint64)
    frame_ptrs = ptrs[owner] + index.astype(np.uint64) * step
    return frame_ptrs, shapes[owner, 1:], strides[owner, 1:], owner, counts


def sequence_geometry(frame_ptrs, frame_shapes, frame_strides, counts, itemsize: int):
    """Join frames back into sequences: ``counts[i]`` consecutive frames per sequence.

    Args:
        frame_ptrs: (T,) uint64; frame_shapes, frame_strides: (T, k) int64.
        counts: (N,) frames per sequence (a sequence of 0 frames gets a null pointer and the
            shape (0, 0, ...); the caller fixes its frame shape if it knows it).
        itemsize: bytes per element.

    Returns:
        (ptrs (N,) uint64, shapes (N, 1 + k), strides (N, 1 + k)).

    Raises:
        ValueError: the frames of a sequence differ in shape or strides, or do not lie at one
            spacing that is a whole number of elements.
    """
    frame_ptrs = np.asarray(frame_ptrs, np.uint64)
    frame_shapes = np.asarray(frame_shapes, np.int64)
    frame_strides = np.asarray(frame_strides, np.int64)
    counts = np.asarray(counts, np.int64)
    n, k = len(counts), frame_shapes.shape[1] if frame_shapes.ndim == 2 else 0
    ptrs = np.zeros(n, np.uint64)
    shapes = np.zeros((n, 1 + k), np.int64)
    strides = np.zeros((n, 1 + k), np.int64)
    start = 0
    for i, c in enumerate(counts.tolist()):
        shapes[i, 0] = c
        if c == 0:
            strides[i, 0] = 1
            continue
        sl = slice(start, start + c)
        fs, st, fp = frame_shapes[sl], frame_strides[sl], frame_ptrs[sl].astype(np.int64)
        if not ((fs == fs[0]).all() and (st == st[0]).all()):
            raise ValueError(f"sequence {i}: its frames differ in shape or strides")
        if c > 1:
            gaps = np.diff(fp)
            if not (gaps == gaps[0]).all() or gaps[0] <= 0 or gaps[0] % itemsize:
                raise ValueError(f"sequence {i}: its frames are not evenly spaced")
            step = int(gaps[0]) // itemsize
        else:
            step = int(np.prod(fs[0])) or 1
        ptrs[i] = frame_ptrs[start]
        shapes[i, 1:] = fs[0]
        strides[i, 0] = step
        strides[i, 1:] = st[0]
        start += c
    return ptrs, shapes, strides


def as_frames(samples):
    """A SampleList of sequences -> (SampleList of all their frames, owner, counts)."""
    from ..tensors_gpu import SampleList

    s = samples
    fptrs, fshapes, fstrides, owner, counts = frame_geometry(
        s.ptrs, s.shapes, s.strides, s.dtype.itemsize
    )
    owners = [s.owners[i] for i in owner.tolist()] if isinstance(s.owners, list) else s.owners
    frames = SampleList(s.dtype, fptrs, fshapes, fstrides, owners, s.device_id)
    return frames, owner, counts


def as_sequences(frames, counts, empty_frame_shapes=None):
    """A SampleList of frames -> the SampleList of sequences of ``counts`` frames each; views of
    the same memory (dense when the frames were dense and every sequence has the same length).

    Args:
        frames: the frames, sequence after sequence.
        counts: frames per sequence.
        empty_frame_shapes: (N, k) frame shapes to give sequences of 0 frames (optional).
    """
    from ..tensors_gpu import SampleList

    counts = np.asarray(counts, np.int64)
    n = len(counts)
    if frames.dense is not None and n and (counts == counts[0]).all() and counts[0] > 0:
        dense = frames.dense.reshape(n, int(counts[0]), *frames.dense.shape[1:])
        return SampleList.from_dense(dense)
    ptrs, shapes, strides = sequence_geometry(
        frames.ptrs, frames.shapes, frames.strides, counts, frames.dtype.itemsize
    )
    if empty_frame_shapes is not None:
        empty = counts == 0
        shapes[empty, 1:] = np.asarray(empty_frame_shapes, np.int64)[empty]
    owners = frames.owners
    if isinstance(owners, list):
        starts = np.cumsum(counts) - counts
        owners = [owners[int(a)] if c else None for a, c in zip(starts, counts, strict=True)]
    elif frames.dense is not None:
        owners = frames.dense
    return SampleList(frames.dtype, ptrs, shapes, strides, owners, frames.device_id)
