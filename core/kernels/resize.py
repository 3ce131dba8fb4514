"""GPU resize: one launch per batch (``resize.cu``); the numerics of ``operators/resize.py``
(DALI's resampling): the per-axis filter and window come from that module's
``select_axis_filter``/``window_geometry``/``filter_table``, memoised here.

Used by ``fn.resize`` and ``fn.random_resized_crop`` on the GPU.
"""

from __future__ import annotations

import functools

import numpy as np

from .._geometry.resize_params import FilterType, _table_len
from . import ctype, get_function, grid_for, stream_scoped, upload
from ._batch import alloc_batch, as_samples, hwc_view

RESIZE_DESC = np.dtype(
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
            "kind_y",
            "kind_x",
            "taps_y",
            "taps_x",
            "tab_y",
            "tab_x",
            "tab_n_y",
            "tab_n_x",
            "flip_y",
            "flip_x",
        )
    ]
    + [
        (f, "<f8")
        for f in (
            "lo_y",
            "lo_x",
            "scale_y",
            "scale_x",
            "anchor_y",
            "anchor_x",
            "tscale_y",
            "tscale_x",
        )
    ]
)

# DALI's ResamplingFilterType (resize.FilterType)
NEAREST, LINEAR, TRIANGULAR, GAUSSIAN, CUBIC, LANCZOS3 = (
    int(FilterType.NEAREST),
    int(FilterType.LINEAR),
    int(FilterType.TRIANGULAR),
    int(FilterType.GAUSSIAN),
    int(FilterType.CUBIC),
    int(FilterType.LANCZOS3),
)


_WORDS = RESIZE_DESC.itemsize // 8  # 18 integers, then 8 float64 (lo, scale, anchor, tscale)

# output rows per thread (ROWS in resize.cu)
ROWS = 4
# register-kept tap counts the kernel is compiled for (MAXT in resize.cu); wider filters use
# the MAXT = 0 instance, which recomputes each weight per tap
MAX_TAPS = (2, 4, 8)


@functools.cache
def _get_resize_kernel(in_dtype, out_dtype, device_id: int, max_taps: int = 0, channels: int = 0):
    """The kernel instance for a batch whose filters have at most ``max_taps`` taps per axis
    (one of ``MAX_TAPS``, or 0: any) and ``channels`` channels (1, 3 or 4, or 0: any)."""
    return get_function(
        "resize.cu",
        f"resize_filter<{ctype(in_dtype)}, {ctype(out_dtype)}, {max_taps}, {channels}>",
        device_id,
    )


def _kernel_taps(taps: np.ndarray) -> int:
    """The smallest ``MAX_TAPS`` entry that holds every filter of the batch (0: none does)."""
    widest = int(taps.max()) if taps.size else 1
    return next((t for t in MAX_TAPS if widest <= t), 0)


@functools.cache
def _tables(device_id: int):
    """The coefficient tables of every filter type in one device array, and their offsets."""
    import cupy

    from .._geometry.resize_params import filter_table

    offsets, chunks, pos = {}, [], 0
    for t in FilterType:
        tab = np.asarray(filter_table(t), np.float32)
        offsets[int(t)] = (pos, len(tab))
        chunks.append(tab)
        pos += len(tab)
    with cupy.cuda.Device(device_id):
        return cupy.asarray(np.concatenate(chunks)), offsets


@functools.cache
def _table_columns(device_id: int):
    """The device tables, and each filter type's start and length in them (int64 (6,))."""
    tables, offsets = _tables(device_id)
    start = np.array([offsets[k][0] for k in range(6)], np.int64)
    length = np.array([offsets[k][1] for k in range(6)], np.int64)
    return tables, start, length


def _axes(ext: np.ndarray, out_size: np.ndarray, min_filter: int, mag_filter: int, antialias):
    """(kind, anchor, table scale, taps) of each axis of a batch: the CPU resampler's
    ``select_axis_filter`` and ``window_geometry`` (``_geometry/resize_params.py``), in the
    same float32 arithmetic, elementwise (numpy's float32 operations round as its float32
    scalars do), so each row equals what those functions give for that axis, bit for bit
    (``tests/core/test_resize_launch_params.py``). Calling them per sample and axis cost
    ~30 us of Python each, and a random crop gives every sample new extents.

    A filter whose geometry does not depend on the scale (nearest, linear, and any filter
    without antialiasing: the example's training resize) gives every axis it applies to the
    same row, computed once (:func:`_fixed_axis`); then only the shrink mask is per axis."""
    ext = np.asarray(ext, np.float32)
    osz = np.asarray(out_size, np.int64)
    n = len(ext)
    rows = [_fixed_axis(min_filter, antialias), _fixed_axis(mag_filter, False)]
    if rows[0] is not None and rows[0] == rows[1]:  # one row whichever filter applies
        return tuple(np.full(n, v, dt) for v, dt in zip(rows[0], _AXIS_TYPES, strict=True))
    kind, anchor = np.zeros(n, np.int64), np.zeros(n)
    tscale, taps = np.ones(n), np.ones(n, np.int64)
    shrink = osz < ext
    for ftype, mask, aa, row in (
        (min_filter, shrink, antialias, rows[0]),
        (mag_filter, ~shrink, False, rows[1]),
    ):
        if ftype == NEAREST or not mask.any():
            continue
        if row is not None:
            kind[mask], anchor[mask], tscale[mask], taps[mask] = row
            continue
        kind[mask], anchor[mask], tscale[mask], taps[mask] = _scaled_axes(
            ext[mask], osz[mask], ftype, aa
        )
    return kind, anchor, tscale, taps


_AXIS_TYPES = (np.int64, np.float64, np.float64, np.int64)


@functools.cache
def _fixed_axis(ftype: int, antialias: bool):
    """:func:`_axes`'s row for filter ``ftype`` when it does not depend on the axis' scale
    (nearest; linear; any filter without antialiasing), as Python numbers computed by
    :func:`_scaled_axes` itself (the same float32 operations); None when it does."""
    if ftype == NEAREST:
        return (0, 0.0, 1.0, 1)
    if antialias and ftype != LINEAR:
        return None
    row = _scaled_axes(np.ones(1, np.float32), np.ones(1, np.int64), ftype, antialias)
    return tuple(a[0].item() for a in row)


def _scaled_axes(e: np.ndarray, osz: np.ndarray, ftype: int, aa: bool):
    """(kind, anchor, table scale, taps) of axes of extents ``e`` (float32) resampled to
    ``osz`` with the (not nearest) filter ``ftype``."""
    f32 = np.float32
    o = osz.astype(f32)
    ratio = np.where(o != 0, e / np.where(o != 0, o, f32(1)), f32(1)).astype(np.float64)
    if ftype == LINEAR:
        radius = np.ones(len(e))
    elif ftype in (TRIANGULAR, GAUSSIAN):
        radius = np.maximum(0.5, ratio) if aa else np.ones(len(e))
    else:  # CUBIC (2 lobes) or LANCZOS3 (3)
        lobes = 2.0 if ftype == CUBIC else 3.0
        radius = np.maximum(lobes, (lobes * ratio).astype(f32)) if aa else np.full(len(e), lobes)
    r = radius.astype(f32)
    if ftype == GAUSSIAN:
        sigma = ((r * f32(0.5)).astype(np.float64) / np.sqrt(2)).astype(f32)
        width = np.maximum(f32(1), f32(4 * np.sqrt(2)) * sigma)
    else:
        width = np.maximum(f32(1), f32(2) * r)
    n1 = f32(_table_len(FilterType(int(ftype))) - 1)
    ts = (n1 / width.astype(f32)).astype(f32)
    anchor = (f32(1) * (n1 * f32(0.5)) / ts).astype(f32)
    return (
        np.full(len(e), int(ftype), np.int64),
        anchor.astype(np.float64),
        ts.astype(np.float64),
        np.ceil(n1 / ts).astype(np.int64),
    )


@stream_scoped
def resize_batch(
    inputs,
    out_sizes,
    src_lo=None,
    src_hi=None,
    min_filter: int = TRIANGULAR,
    mag_filter: int = LINEAR,
    antialias: bool = True,
    out_dtype=None,
    out=None,
    x_nearest: bool = False,
    stream=None,
):
    """Resize every HWC (or HW) sample of a batch in one launch.

    Args:
        inputs: the batch (SampleList or list of CuPy arrays).
        out_sizes: (N, 2) output (height, width).
        src_lo, src_hi: (N, 2) source window (y, x) per sample, as ``ResizeParams.src_lo/hi``
            (hi < lo flips that axis); the whole image when None.
        min_filter, mag_filter: ``FilterType`` values (already promoted by
            ``interp_to_filter``) used when an axis shrinks / does not shrink.
        antialias: widen the shrinking filter by the scale factor.
        out_dtype: output type (default: the input's); integers round to nearest and saturate.
        out: where to write (a SampleList of C-contiguous HWC samples of ``out_sizes``, e.g.
            planes of a larger output, ``resize_planes.py``); a fresh batch when None.
        x_nearest: sample the x axis with the nearest filter whatever the filters (with an
            unchanged width: a copy; the depth pass of a 3-D resize).
        stream: the CUDA stream.

    Returns:
        A SampleList (``out`` when given), dense when every output has the same size.
    """
    s, h, w, c, sy, sx = hwc_view(as_samples(inputs))
    n = len(s)
    out_sizes = np.asarray(out_sizes, np.int64).reshape(n, 2)
    out_dtype = np.dtype(out_dtype or s.dtype)
    channels = int(c[0]) if n else 1
    if n and not (c == channels).all():
        raise ValueError("resize: every sample of a GPU batch must have the same channel count")
    if s.shapes.shape[1] == 2:
        shapes = out_sizes
    else:
        shapes = np.concatenate([out_sizes, np.full((n, 1), channels)], axis=1)
    if out is None:
        out = alloc_batch(shapes, out_dtype, s.device_id)
    if n == 0 or not out_sizes.all():
        return out
    lo = np.zeros((n, 2)) if src_lo is None else np.asarray(src_lo, np.float64).reshape(n, 2)
    hi = (
        np.stack([h, w], 1).astype(np.float64)
        if src_hi is None
        else np.asarray(src_hi, np.float64).reshape(n, 2)
    )
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    a, b = np.minimum(lo32, hi32), np.maximum(lo32, hi32)
    tables, tab_start, tab_len = _table_columns(s.device_id)
    # RESIZE_DESC's fields as columns of word views of one array, (y, x) pairs side by side:
    # a structured array's field assignments cost a few microseconds each, 32 of them a batch
    d = np.empty(n, RESIZE_DESC)
    ints = d.view(np.int64).reshape(n, _WORDS)
    floats = d.view(np.float64).reshape(n, _WORDS)
    ints[:, 0] = s.ptrs.view(np.int64)
    ints[:, 1] = out.ptrs.view(np.int64)
    ints[:, 2], ints[:, 3], ints[:, 4], ints[:, 5] = h, w, sy, sx
    ints[:, 6:8] = out_sizes
    ext = (b - a).reshape(-1)  # float32, (y, x) of each sample
    kind, anchor, tscale, taps = _axes(ext, out_sizes.reshape(-1), int(min_filter),
                                       int(mag_filter), bool(antialias))  # fmt: skip
    kind, anchor, tscale, taps = (v.reshape(n, 2) for v in (kind, anchor, tscale, taps))
    if x_nearest:  # the depth pass of a 3-D resize (see resize_planes.py)
        kind[:, 1], anchor[:, 1], tscale[:, 1], taps[:, 1] = 0, 0.0, 1.0, 1
    ints[:, 8:10], ints[:, 10:12] = kind, taps
    ints[:, 12:14], ints[:, 14:16] = tab_start[kind], tab_len[kind]
    ints[:, 16:18] = hi32 < lo32
    floats[:, 18:20] = a
    floats[:, 20:22] = (b - a) / out_sizes.astype(np.float32)
    floats[:, 22:24], floats[:, 24:26] = anchor, tscale
    dev = upload(d.view(np.uint8), stream)
    rows = -(-int(out_sizes[:, 0].max()) // ROWS)
    grid, block = grid_for(rows, int(out_sizes[:, 1].max()), n)
    widest = np.where(kind > 0, taps, 1)
    kernel = _get_resize_kernel(
        s.dtype,
        out_dtype,
        s.device_id,
        _kernel_taps(widest),
        channels if channels in (1, 3, 4) else 0,
    )
    kernel(grid, block, (dev, tables, np.int32(channels)), stream=stream)
    return out


def crop_resize_batch(samples, windows, size, attrs, stream):
    """random_resized_crop on the GPU: resize each window (y, x, h, w) to ``size`` (H, W), fused
    (the crop is the resize's source window; nothing is copied)."""
    s = as_samples(samples)
    win = np.asarray(windows, np.float64).reshape(len(s), 4)
    out = np.tile(np.asarray(size, np.int64).reshape(1, 2), (len(s), 1))
    return resize_batch(
        s,
        out,
        win[:, :2],
        win[:, :2] + win[:, 2:],
        attrs.min_filter,
        attrs.mag_filter,
        attrs.antialias,
        attrs.out_dtype(s.dtype),
        stream=stream,
    )
