"""Batched image copies (``copy.cu``): many images, each contiguous or with pitched rows, into
packed places of one buffer, in one launch. The decode server copies a batch's decoded images
into the pipeline's slot with it: one call per image cost about 20 us of host time each
(BENCHMARKS.md, sixth session)."""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, upload

COPY_DESC = np.dtype([(f, "<i8") for f in ("src", "dst", "src_pitch", "row_bytes", "total")])
CHUNK = 16384  # a contiguous image is copied as rows of this many bytes
_BLOCK = (32, 8, 1)  # a warp per row
_MAX_BLOCKS = 16  # per image, along the rows


@functools.cache
def _get_copy_kernel(device_id: int):
    return get_function("copy.cu", "copy_rows", device_id)


def copy_descriptors(src, dst, src_pitch, row_bytes, rows) -> np.ndarray:
    """The descriptors of copies of ``rows`` rows of ``row_bytes`` from ``src`` (rows
    ``src_pitch`` apart) to ``dst`` (rows packed); one value per image in each argument. A
    contiguous image is copied in rows of ``CHUNK`` bytes, whatever its own rows."""
    d = np.empty(len(src), COPY_DESC)
    d["src"], d["dst"] = src, dst
    row_bytes = np.asarray(row_bytes, np.int64)
    src_pitch = np.asarray(src_pitch, np.int64)
    d["total"] = row_bytes * np.asarray(rows, np.int64)
    packed = src_pitch == row_bytes
    d["row_bytes"] = np.where(packed, CHUNK, row_bytes)
    d["src_pitch"] = np.where(packed, CHUNK, src_pitch)
    return d


def copy_batch(descs: np.ndarray, device_id: int, stream) -> None:
    """Run the copies ``descs`` (``COPY_DESC``, see ``copy_descriptors``) on ``stream`` (a
    CuPy stream; the descriptors are allocated on it)."""
    if len(descs) == 0:
        return
    rows = -(-descs["total"] // descs["row_bytes"])
    blocks = int(min(_MAX_BLOCKS, max(1, -(-int(rows.max()) // _BLOCK[1]))))
    with stream:
        dev = upload(descs, stream)
        _get_copy_kernel(device_id)((blocks, len(descs), 1), _BLOCK, (dev,), stream=stream)
