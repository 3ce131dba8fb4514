"""GPU N-D windows (``window.cu``): crop, pad, flip and cast samples of any layout, one launch
per batch. The 3-D (DHWC, CDHW, FDHWC, ...) side of ``fn.crop`` and ``fn.flip``; HWC batches
use the 2-D kernel of ``slice.py``, which is faster for images.

Invariants: a sample has at most ``MAX_DIMS`` dimensions; the output is C-contiguous; an
output element whose source lies outside the input gets the fill value (one value, or one per
channel along ``c_axis``).
"""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

MAX_DIMS = 6  # WINDOW_MAXD in window.cu
BLOCK = 256
MAX_BLOCKS = 4096  # per sample along x; each thread then walks the rest with a grid stride

WINDOW_DESC = np.dtype(
    [("in_ptr", "<i8"), ("out_ptr", "<i8"), ("numel", "<i8")]
    + [(f, "<i8", (MAX_DIMS,)) for f in ("out_shape", "in_shape", "in_stride", "anchor", "flip")]
)


@functools.cache
def _get_window_kernel(in_dtype, out_dtype, device_id: int):
    return get_function(
        "window.cu", f"window_copy<{ctype(in_dtype)}, {ctype(out_dtype)}>", device_id
    )


def pack_window_descs(
    in_shapes: np.ndarray,
    in_strides: np.ndarray,
    anchors: np.ndarray,
    out_shapes: np.ndarray,
    flips: np.ndarray | None = None,
) -> np.ndarray:
    """The kernel's per-sample descriptors (pointers left 0), from (N, ndim) arrays.

    Raises:
        ValueError: more than ``MAX_DIMS`` dimensions, or arrays of different shapes.
    """
    in_shapes = np.asarray(in_shapes, np.int64)
    n, nd = in_shapes.shape
    if nd > MAX_DIMS:
        raise ValueError(f"GPU windows handle up to {MAX_DIMS} dimensions, got {nd}")
    parts = {
        "in_shape": in_shapes,
        "in_stride": np.asarray(in_strides, np.int64),
        "anchor": np.asarray(anchors, np.int64),
        "out_shape": np.asarray(out_shapes, np.int64),
        "flip": np.zeros((n, nd), np.int64) if flips is None else np.asarray(flips, np.int64),
    }
    d = np.zeros(n, WINDOW_DESC)
    for name, a in parts.items():
        if a.shape != (n, nd):
            raise ValueError(f"{name} has shape {a.shape}, expected {(n, nd)}")
        d[name][:, :nd] = a
    d["flip"] = d["flip"] != 0
    d["numel"] = parts["out_shape"].prod(axis=1)
    return d


@stream_scoped
def window_batch(
    inputs,
    anchors,
    out_shapes,
    flips=None,
    fill=0.0,
    c_axis: int = -1,
    out_dtype=None,
    stream=None,
):
    """Copy a window of every sample: ``out[i][o] = in[i][anchor + o]`` (reading backwards
    within the window on flipped axes), ``fill`` where that is outside the input.

    Args:
        inputs: the batch (SampleList or list of CuPy arrays), any layout, ``ndim`` <= 6.
        anchors, out_shapes: (N, ndim) window start and extent per sample.
        flips: (N, ndim) nonzero where an axis is mirrored; None: none.
        fill: one value, or one per channel along ``c_axis`` (already in ``out_dtype``'s range).
        c_axis: the channel axis for per-channel fill values (-1: none).
        out_dtype: output type (default: the input's); integers round and saturate.
        stream: the CUDA stream.

    Returns:
        A SampleList of C-contiguous samples of shape ``out_shapes[i]``.
    """
    s = as_samples(inputs)
    n = len(s)
    out_dtype = np.dtype(out_dtype or s.dtype)
    out_shapes = np.asarray(out_shapes, np.int64).reshape(n, -1)
    out = alloc_batch(out_shapes, out_dtype, s.device_id)
    if n == 0 or not out_shapes.prod(axis=1).any():
        return out
    d = pack_window_descs(s.shapes, s.strides, anchors, out_shapes, flips)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    fills = np.asarray(fill, np.float64).reshape(-1)
    dev = upload(d.view(np.uint8), stream)
    dev_fill = upload(fills if fills.size else np.zeros(1), stream)
    blocks = min(MAX_BLOCKS, -(-int(d["numel"].max()) // BLOCK))
    k = _get_window_kernel(s.dtype, out_dtype, s.device_id)
    k(
        (blocks, 1, n),
        (BLOCK, 1, 1),
        (
            dev,
            np.int32(s.shapes.shape[1]),
            dev_fill,
            np.int32(max(fills.size, 1)),
            np.int32(c_axis),
        ),
        stream=stream,
    )
    return out
