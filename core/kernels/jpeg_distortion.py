"""GPU ``fn.jpeg_compression_distortion`` (``jpeg_distortion.cu``): two launches per batch (the
8x8 block transforms per macroblock, then chroma upsampling and colour conversion)."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

JPEG_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "y_ptr", "c_ptr", "h", "w")]
    + [("qy", "<f4", (64,)), ("qc", "<f4", (64,))]
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


@stream_scoped
def jpeg_distortion_batch(inputs, tables, stream=None):
    """Apply JPEG-like distortion to every RGB uint8 HWC sample; ``tables`` per sample: the
    (luma, chroma) quantisation tables (64 values each, row-major)."""
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    if not all(a.flags.c_contiguous for a in s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    out = alloc_batch(s.shapes, np.uint8, s.device_id)
    y_off, c_off, total = plane_offsets(s.shapes)
    scratch = cupy.empty(total, np.uint8)
    d = np.zeros(n, JPEG_DESC)
    d["in_ptr"], d["out_ptr"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    d["y_ptr"] = scratch.data.ptr + y_off
    d["c_ptr"] = scratch.data.ptr + c_off
    d["h"], d["w"] = s.shapes[:, 0], s.shapes[:, 1]
    for i, (qy, qc) in enumerate(tables):
        d["qy"][i], d["qc"][i] = qy, qc
    dev = upload(d.view(np.uint8), stream)
    max_h, max_w = int(d["h"].max()), int(d["w"].max())
    if max_h == 0 or max_w == 0:
        return out
    blocks = _get_jpeg_kernel("jpeg_blocks", s.device_id)
    blocks(((max_w + 15) // 16, (max_h + 15) // 16, n), (256, 1, 1), (dev,), stream=stream)
    compose = _get_jpeg_kernel("jpeg_compose", s.device_id)
    compose(((max_w + 31) // 32, (max_h + 7) // 8, n), (32, 8, 1), (dev,), stream=stream)
    return out
