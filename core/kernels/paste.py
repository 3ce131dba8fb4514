"""The launcher of ``paste.cu``: a batch of images pasted on their canvases in one launch."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch
from .bbox import contiguous_samples

PASTE_DESC = np.dtype(
    [("src", "<i8"), ("dst", "<i8")]
    + [(f, "<i4") for f in ("in_h", "in_w", "out_h", "out_w", "row", "col", "channels", "pad")]
)
_BLOCK = (128, 4, 1)
_MAX_ROW_BLOCKS = 64  # blocks along the rows; each strides over the rest


@functools.cache
def _get_paste_kernel(device_id: int):
    return get_function("paste.cu", "paste", device_id)


def paste_descriptors(src, dst, in_shapes, geometry) -> np.ndarray:
    """One descriptor per sample; ``geometry`` rows are (canvas H, canvas W, row, column)."""
    in_shapes = np.asarray(in_shapes, np.int64).reshape(-1, 3)
    geometry = np.asarray(geometry, np.int64).reshape(-1, 4)
    d = np.zeros(len(in_shapes), PASTE_DESC)
    d["src"], d["dst"] = src, dst
    d["in_h"], d["in_w"], d["channels"] = in_shapes[:, 0], in_shapes[:, 1], in_shapes[:, 2]
    d["out_h"], d["out_w"] = geometry[:, 0], geometry[:, 1]
    d["row"], d["col"] = geometry[:, 2], geometry[:, 3]
    return d


def paste_grid(geometry, channels) -> tuple[tuple, tuple]:
    geometry = np.asarray(geometry, np.int64).reshape(-1, 4)
    row_bytes = int((geometry[:, 1] * np.asarray(channels)).max(initial=1))
    rows = int(geometry[:, 0].max(initial=1))
    bx, by, _ = _BLOCK
    gx = max(1, -(-row_bytes // bx))
    gy = max(1, min(_MAX_ROW_BLOCKS, -(-rows // by)))
    return (gx, gy, len(geometry)), _BLOCK


@stream_scoped
def paste_batch(images, geometry, fill: np.ndarray, stream=None):
    """Paste a batch of HWC uint8 images: ``geometry`` is (N, 4) (canvas H, canvas W, row,
    column) per sample, ``fill`` the canvas colour (one byte per channel)."""
    s = contiguous_samples(images)
    geometry = np.asarray(geometry, np.int64).reshape(-1, 4)
    channels = s.shapes[:, 2] if len(s) else np.zeros(0, np.int64)
    out_shapes = np.stack([geometry[:, 0], geometry[:, 1], channels], axis=1)
    out = alloc_batch(out_shapes.reshape(-1, 3), np.uint8, s.device_id)
    if len(s) == 0:
        return out
    descs = paste_descriptors(s.ptrs, out.ptrs, s.shapes, geometry)
    dev = upload(descs, stream)
    dev_fill = upload(np.ascontiguousarray(fill, np.uint8), stream)
    grid, block = paste_grid(geometry, channels)
    _get_paste_kernel(s.device_id)(grid, block, (dev, dev_fill), stream=stream)
    return out
