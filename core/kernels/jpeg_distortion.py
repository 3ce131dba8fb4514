"""GPU ``fn.jpeg_compression_distortion`` (``jpeg_distortion.cu``): two launches per batch (the
8x8 block transforms per macroblock, then chroma upsampling and colour conversion), in
libjpeg-turbo's integer arithmetic, so the result is the CPU operator's bit for bit."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

JPEG_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "y_ptr", "c_ptr", "h", "w")]
    + [("quant", "<i4", (2, 64))]  # the luma and the chroma table, row-major
)


@functools.cache
def _get_jpeg_kernel(name: str, device_id: int):
    return get_function("jpeg_distortion.cu", name, device_id)


def plane_offsets(shapes) -> tuple[np.ndarray, np.ndarray, int]:
    """Byte offsets of each sample's Y plane (H x W) and chroma planes (2 x ceil(H/2) x
    ceil(W/2)) in one scratch buffer, 256-aligned; and its total size."""
    y_off, c_off, pos = [], [], 0
    for h, w, _ in shapes:
        y_off.append(pos)
        pos += (int(h) * int(w) + 255) // 256 * 256
        c_off.append(pos)
        pos += (2 * ((int(h) + 1) // 2) * ((int(w) + 1) // 2) + 255) // 256 * 256
    return np.array(y_off, np.int64), np.array(c_off, np.int64), max(pos, 1)


def jpeg_descriptors(in_ptrs, out_ptrs, scratch_ptr: int, shapes, tables) -> np.ndarray:
    """One ``JpegDesc`` per sample: pointers, size, its planes in the scratch buffer (see
    :func:`plane_offsets`) and its (luma, chroma) quantisation tables."""
    shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
    y_off, c_off, _ = plane_offsets(shapes)
    d = np.zeros(len(shapes), JPEG_DESC)
    d["in_ptr"] = np.asarray(in_ptrs).view(np.int64)
    d["out_ptr"] = np.asarray(out_ptrs).view(np.int64)
    d["y_ptr"], d["c_ptr"] = scratch_ptr + y_off, scratch_ptr + c_off
    d["h"], d["w"] = shapes[:, 0], shapes[:, 1]
    for i, (qy, qc) in enumerate(tables):
        d["quant"][i] = qy, qc
    return d


@stream_scoped
def jpeg_distortion_batch(inputs, tables, stream=None):
    """JPEG round trip (baseline, 4:2:0, libjpeg-turbo's islow arithmetic) of every RGB uint8
    HWC sample; ``tables`` per sample: the (luma, chroma) quantisation tables (64 values each,
    1..255, row-major)."""
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    if not all(a.flags.c_contiguous for a in s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    out = alloc_batch(s.shapes, np.uint8, s.device_id)
    total = plane_offsets(s.shapes)[2]
    scratch = cupy.empty(total, np.uint8)
    d = jpeg_descriptors(s.ptrs, out.ptrs, scratch.data.ptr, s.shapes, tables)
    dev = upload(d.view(np.uint8), stream)
    max_h, max_w = int(d["h"].max()), int(d["w"].max())
    if max_h == 0 or max_w == 0:
        return out
    blocks = _get_jpeg_kernel("jpeg_blocks", s.device_id)
    blocks(((max_w + 15) // 16, (max_h + 15) // 16, n), (256, 1, 1), (dev,), stream=stream)
    compose = _get_jpeg_kernel("jpeg_compose", s.device_id)
    compose(((max_w + 31) // 32, (max_h + 7) // 8, n), (32, 8, 1), (dev,), stream=stream)
    return out
