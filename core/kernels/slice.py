"""GPU crop / mirror / normalize / cast / transpose / pad (``slice.cu``), one launch per batch.

``slice_normalize_batch`` is the fused kernel behind crop_mirror_normalize; crop, flip, cast and
brightness_contrast are the same kernel with some of the steps set to identity.
"""

from __future__ import annotations

import functools

import numpy as np

from . import acc_ctype, ctype, get_function, grid_for, stream_scoped, upload
from ._batch import (
    alloc_batch,
    as_samples,
    c_contiguous,
    c_strides,
    hwc_view,
    per_sample,
    sample_list,
    uniform_rows,
)

SLICE_DESC = np.dtype(
    [
        (f, "<i8")
        for f in (
            "in_ptr",
            "out_ptr",
            "in_h",
            "in_w",
            "in_sy",
            "in_sx",
            "out_h",
            "out_w",
            "y0",
            "x0",
            "flip_x",
            "flip_y",
        )
    ]
    + [("mean", "<f8", (4,)), ("mul", "<f8", (4,)), ("fill", "<f8", (4,)), ("shift", "<f8")]
)


@functools.cache
def _get_slice_kernel(in_dtype, out_dtype, device_id: int):
    expr = (
        f"slice_normalize<{ctype(in_dtype)}, {ctype(out_dtype)}, {acc_ctype(in_dtype, out_dtype)}>"
    )
    return get_function("slice.cu", expr, device_id)


@stream_scoped
def slice_normalize_batch(
    inputs,
    out_h,
    out_w,
    y0=0,
    x0=0,
    flip_x=0,
    flip_y=0,
    mean=0.0,
    mul=1.0,
    shift=0.0,
    fill=0.0,
    out_dtype=None,
    out_channels=None,
    planar: bool = False,
    stream=None,
):
    """Crop, mirror, normalize, cast and lay out every HWC sample of a batch in one launch.

    ``out = (in[y0 + y, x0 + x] - mean[c]) * mul[c] + shift`` (mirrored source coordinates when
    ``flip_x``/``flip_y``), converted to ``out_dtype`` (integers round to nearest and saturate).
    Pixels outside the input and channels beyond the input's (``out_channels`` > C pads) get
    ``fill[c]``, written as is.

    Args:
        inputs: the batch (SampleList or list of CuPy arrays), HWC or HW.
        out_h, out_w, y0, x0, flip_x, flip_y: per sample (arrays of N) or one value for all.
        mean, mul, fill: per channel (up to 4 values; the last repeats), or (N, C) per sample.
        shift: one value, or per sample.
        out_dtype: output type (default: the input's).
        out_channels: output channels (default: the input's).
        planar: write CHW instead of HWC.
        stream: the CUDA stream.

    Returns:
        A SampleList of (H, W, C) or (C, H, W) samples (HW when the input was HW and C is 1).
    """
    s, h, w, c, sy, sx = hwc_view(as_samples(inputs))
    n = len(s)
    in_c = int(c[0]) if n else 1
    if n and s.dense is None and not (c == in_c).all():  # (a dense batch has one shape)
        raise ValueError("every sample of a GPU batch must have the same channel count")
    out_c = int(out_channels or in_c)
    out_dtype = np.dtype(out_dtype or s.dtype)
    oh, ow = _sizes(out_h, n), _sizes(out_w, n)
    # the output shapes, written column by column (np.stack costs several times more)
    if s.shapes.shape[1] == 2 and out_c == 1:
        shapes = np.empty((n, 2), np.int64)
        shapes[:, 0], shapes[:, 1] = oh, ow
    else:
        shapes = np.empty((n, 3), np.int64)
        if planar:
            shapes[:, 0], shapes[:, 1], shapes[:, 2] = out_c, oh, ow
        else:
            shapes[:, 0], shapes[:, 1], shapes[:, 2] = oh, ow, out_c
    out = alloc_batch(shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    d = slice_descriptors(s, out, h, w, sy, sx, oh, ow, y0, x0, flip_x, flip_y, mean, mul, fill,
                          shift)  # fmt: skip
    dev = upload(d.view(np.uint8), stream)
    grid, block = grid_for(_largest(out_h, oh), _largest(out_w, ow), n)
    k = _get_slice_kernel(s.dtype, out_dtype, s.device_id)
    k(grid, block, (dev, np.int32(in_c), np.int32(out_c), np.int32(bool(planar))), stream=stream)
    return out


def _sizes(value, n: int) -> np.ndarray:
    """``per_sample(value, n, dtype=np.int64)``, read only: an int64 (N,) array as it is, an
    integer filled in; anything else through ``per_sample``."""
    if isinstance(value, np.ndarray) and value.dtype == np.int64 and value.shape == (n,):
        return value
    if isinstance(value, int | np.integer):
        return np.full(n, value, np.int64)
    return per_sample(value, n, dtype=np.int64)


def _largest(value, sizes: np.ndarray) -> int:
    """The largest of ``sizes`` (``value`` per sample): ``value`` itself when it is one
    integer."""
    return int(value) if isinstance(value, int | np.integer) else int(sizes.max())


# SLICE_DESC's fields as columns of one (N, 25) row of 8-byte words: 12 integers, then the
# float64 mean (4), mul (4), fill (4) and shift
_INT_COLS = 12
_MEAN, _MUL, _FILL, _SHIFT = 12, 16, 20, 24


def slice_descriptors(s, out, h, w, sy, sx, oh, ow, y0, x0, flip_x, flip_y, mean, mul, fill, shift):
    """The SLICE_DESC rows of a batch: the same bytes as a field-by-field fill with
    :func:`per_sample` of each argument (``tests/core/test_slice_descriptors.py``), written as
    columns of two word views of one array (a structured array's field assignments cost a few
    microseconds each; 13 a launch, and a batch has three of these launches: flip,
    crop_mirror_normalize, cast)."""
    n = len(s)
    d = np.zeros(n, SLICE_DESC)
    ints = d.view(np.int64).reshape(n, SLICE_DESC.itemsize // 8)
    floats = d.view(np.float64).reshape(n, SLICE_DESC.itemsize // 8)
    ints[:, 0] = s.ptrs.view(np.int64)
    ints[:, 1] = out.ptrs.view(np.int64)
    ints[:, 2], ints[:, 3], ints[:, 4], ints[:, 5] = h, w, sy, sx
    ints[:, 6], ints[:, 7] = oh, ow
    ints[:, 8], ints[:, 9] = _column(y0, n, np.int64), _column(x0, n, np.int64)
    _flag(ints[:, 10], flip_x, n)
    _flag(ints[:, 11], flip_y, n)
    _channels(floats[:, _MEAN:_MUL], mean)
    _channels(floats[:, _MUL:_FILL], mul)
    _channels(floats[:, _FILL:_SHIFT], fill)
    floats[:, _SHIFT] = _column(shift, n, np.float64)
    return d


def _column(value, n: int, dtype):
    """``per_sample(value, n, dtype=dtype)`` as a view to broadcast (no copy); a Python or
    numpy integer as it is (assigned to a column of ``dtype``, it converts the same)."""
    if isinstance(value, int | np.integer):
        return value
    a = np.asarray(value, dtype)
    return a.reshape(-1) if a.ndim <= 1 else a.reshape(n)


def _flag(dst: np.ndarray, value, n: int) -> None:
    """``dst[:] = per_sample(value, n, dtype=np.int64) != 0`` into a zeroed column (an integer
    0, the usual value, leaves it as it is)."""
    if isinstance(value, int | np.integer):
        if value:
            dst[:] = 1
        return
    dst[:] = _column(value, n, np.int64) != 0


def _channels(dst: np.ndarray, value) -> None:
    """``dst[:] = per_sample(value, n, 4)``: up to 4 values per channel, the last repeated
    (one for every channel), one row for the batch or one per sample; one number fills
    every channel of every row."""
    if isinstance(value, float | int | np.floating | np.integer):
        dst[:] = value
        return
    a = np.asarray(value, np.float64)
    if a.ndim <= 1:
        a = a.reshape(1, -1)
    c = min(a.shape[1], dst.shape[1])
    dst[:, :c] = a[:, :c]
    if c < dst.shape[1]:
        dst[:, c:] = a[:, c - 1 : c]


def crop_batch(inputs, out_h, out_w, y0, x0, fill=0.0, out_dtype=None, stream=None):
    """Crop windows (anchor may be outside: those pixels get ``fill``), HWC in and out."""
    return slice_normalize_batch(
        inputs, out_h, out_w, y0, x0, fill=fill, out_dtype=out_dtype, stream=stream
    )


def flip_batch(inputs, horizontal, vertical, stream=None):
    """Flip HWC samples horizontally and/or vertically (per-sample flags)."""
    s = as_samples(inputs)
    h, w = (s.shapes[:, 0], s.shapes[:, 1]) if len(s) else (0, 0)
    return slice_normalize_batch(s, h, w, 0, 0, flip_x=horizontal, flip_y=vertical, stream=stream)


def affine_batch(inputs, mul, add, out_dtype=None, stream=None):
    """``out = in * mul + add`` per sample (and per channel), HWC in and out (brightness_contrast:
    ``mul = brightness * contrast``, ``add = brightness_shift * R + brightness * center *
    (1 - contrast)``)."""
    s = as_samples(inputs)
    h, w = (s.shapes[:, 0], s.shapes[:, 1]) if len(s) else (0, 0)
    return slice_normalize_batch(
        s, h, w, 0, 0, mean=0.0, mul=mul, shift=add, out_dtype=out_dtype, stream=stream
    )


@stream_scoped
def cast_batch(inputs, out_dtype, stream=None):
    """Convert every sample (any shape, contiguous) to ``out_dtype``; integers round to nearest
    (ties to even) and saturate."""
    import cupy

    SampleList = sample_list()
    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return alloc_batch(np.zeros((0, s.shapes.shape[1])), out_dtype, s.device_id)
    if c_contiguous(s):
        strides = s.strides.copy()  # (equal to c_strides(s.shapes): what the check compares)
    else:
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
        strides = c_strides(s.shapes)
    numel = s.shapes.prod(axis=1)
    # each sample as one (1, numel, 1) row
    flat_shapes, flat_strides = np.ones((n, 3), np.int64), np.ones((n, 3), np.int64)
    flat_shapes[:, 1] = numel
    flat_strides[:, 0] = numel
    flat = SampleList.of_arrays(s.dtype, s.ptrs, flat_shapes, flat_strides, s.owners, s.device_id)
    out = slice_normalize_batch(flat, 1, numel, out_dtype=out_dtype, stream=stream)
    dense = None  # (samples of one size but of different shapes are not one dense array)
    if out.dense is not None and (s.dense is not None or uniform_rows(s.shapes)):
        dense = out.dense.reshape((n, *s.shapes[0].tolist()))
    # view the flat outputs with the input shapes
    return SampleList.of_arrays(
        out.dtype, out.ptrs, s.shapes, strides, out.owners, out.device_id, dense=dense
    )
