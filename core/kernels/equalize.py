"""The GPU side of ``fn.equalize`` (``equalize.cu``): histograms, lookup tables and the lookup,
one launch each per batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, c_contiguous
from .layout import copy_batch

EQ_DESC = np.dtype(
    [
        ("in_ptr", "<i8"),
        ("out_ptr", "<i8"),
        ("pixels", "<i8"),
        ("cdiv", "<i8"),
        ("frames", "<i4"),
        ("channels", "<i4"),
        ("plane0", "<i8"),
    ]
)
BINS = 256
_BLOCK = 256


def _get_equalize_kernel(name: str, device_id: int):
    return get_function("equalize.cu", name, device_id)


def equalize_descs(
    in_ptrs, out_ptrs, geometry: Sequence[tuple[int, int, int, int]]
) -> tuple[np.ndarray, int]:
    """The per-sample descriptors and the number of planes of a batch.

    Args:
        in_ptrs, out_ptrs: device addresses of the (contiguous) samples.
        geometry: per sample (frames, pixels per plane, channels, channel divisor), as
            ``operators.equalize.equalize_geometry`` gives it.

    Returns:
        (descriptors, total planes); the planes of sample ``k`` start at ``plane0[k]``.
    """
    n = len(geometry)
    g = np.asarray(geometry, np.int64).reshape(n, 4)
    planes = g[:, 0] * g[:, 2]
    plane0 = np.zeros(n, np.int64)
    np.cumsum(planes[:-1], out=plane0[1:])
    d = _descs(in_ptrs, out_ptrs, g[:, 1], g[:, 3], g[:, 0], g[:, 2], plane0)
    return d, int(planes.sum())


def _descs(in_ptrs, out_ptrs, pixels, cdiv, frames, channels, plane0) -> np.ndarray:
    """``EQ_DESC`` rows with every field written, as columns of word views (int64 words, and
    int32 halves for ``frames`` / ``channels``): a structured array's field assignments cost a
    few microseconds each."""
    n = len(in_ptrs)
    d = np.empty(n, EQ_DESC)
    words = d.view(np.int64).reshape(n, EQ_DESC.itemsize // 8)
    halves = d.view(np.int32).reshape(n, EQ_DESC.itemsize // 4)
    words[:, 0] = np.asarray(in_ptrs, np.uint64).view(np.int64)
    words[:, 1] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    words[:, 2], words[:, 3], words[:, 5] = pixels, cdiv, plane0
    halves[:, 8], halves[:, 9] = frames, channels  # (bytes 32-39)
    return d


def contiguous_in_new_out(inputs, stream):
    """(the uint8 batch ``inputs``, C-contiguous, copied if need be; a new batch of its
    shapes for the output)."""
    s = as_samples(inputs)
    if not c_contiguous(s):
        s = copy_batch(s, stream=stream)
    return s, alloc_batch(s.shapes, np.uint8, s.device_id)


@stream_scoped
def equalize_batch(inputs, geometry, stream=None):
    """Equalize every plane of a uint8 batch; ``geometry`` as in :func:`equalize_descs`."""
    import cupy

    s, out = contiguous_in_new_out(inputs, stream)
    n = len(s)
    if n == 0:
        return out
    d, planes = equalize_descs(s.ptrs, out.ptrs, geometry)
    sizes = d["pixels"] * d["channels"]
    if planes == 0 or int(sizes.max()) == 0:
        return out
    hist = cupy.zeros(planes * BINS, np.uint32)
    lut = cupy.empty(planes * BINS, np.uint8)
    descs = upload(d, stream)
    launch_hist(d, descs, hist, s.device_id, stream)
    _get_equalize_kernel("equalize_lut", s.device_id)(
        (planes, 1, 1), (BINS, 1, 1), (hist, lut), stream=stream
    )
    launch_apply(int((sizes * d["frames"]).max()), descs, lut, n, s.device_id, stream)
    return out


def launch_hist(d: np.ndarray, descs, hist, device_id: int, stream) -> None:
    """``equalize_hist``: the histograms of the planes of the samples of the ``EQ_DESC`` rows
    ``d`` (``descs`` their device copy) added into ``hist`` (zeroed, ``BINS`` per plane)."""
    blocks = max(1, min(1024, -(-int((d["pixels"] * d["channels"]).max()) // (_BLOCK * 8))))
    frames = max(1, min(65535, int(d["frames"].max())))
    _get_equalize_kernel("equalize_hist", device_id)(
        (blocks, frames, len(d)), (_BLOCK, 1, 1), (descs, hist), stream=stream
    )


def launch_apply(total: int, descs, lut, n: int, device_id: int, stream) -> None:
    """``equalize_apply``: ``out = lut[plane][in]`` over the ``n`` samples of the device
    descriptors ``descs``, the largest of ``total`` elements (more than 0)."""
    _get_equalize_kernel("equalize_apply", device_id)(
        (max(1, min(4096, -(-total // _BLOCK))), 1, n), (_BLOCK, 1, 1), (descs, lut), stream=stream
    )


@stream_scoped
def lookup_rows_batch(inputs, table_dev, rows, stream=None):
    """``out = table[rows[k], in]`` for each sample ``k`` of a uint8 batch: a 256-entry lookup
    table per sample, row ``rows[k]`` of ``table_dev`` (a device array of rows of 256 uint8),
    with ``equalize_apply`` (one plane per sample, the plane's table being its row)."""
    s, out = contiguous_in_new_out(inputs, stream)
    n = len(s)
    if n == 0:
        return out
    sizes = s.shapes.prod(axis=1)
    total = int(sizes.max())
    if total == 0:
        return out
    d = _descs(s.ptrs, out.ptrs, sizes, 1, 1, 1, rows)
    launch_apply(total, upload(d, stream), table_dev, n, s.device_id, stream)
    return out
