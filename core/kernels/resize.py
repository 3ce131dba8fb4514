"""GPU resize: one launch per batch (``resize.cu``); the numerics of ``operators/resize.py``
(DALI's resampling): the per-axis filter and window come from that module's
``select_axis_filter``/``window_geometry``/``filter_table``, memoised here.

Used by ``fn.resize`` and ``fn.random_resized_crop`` on the GPU.
"""

from __future__ import annotations

import functools

import numpy as np

from ..operators._resize_params import FilterType
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

    from ..operators._resize_params import filter_table

    offsets, chunks, pos = {}, [], 0
    for t in FilterType:
        tab = np.asarray(filter_table(t), np.float32)
        offsets[int(t)] = (pos, len(tab))
        chunks.append(tab)
        pos += len(tab)
    with cupy.cuda.Device(device_id):
        return cupy.asarray(np.concatenate(chunks)), offsets


@functools.lru_cache(maxsize=1 << 16)
def _axis(extent: float, out_size: int, min_filter: int, mag_filter: int, antialias: bool):
    """(kind, anchor, table scale, taps) of one axis: ``resize.select_axis_filter`` and
    ``resize.window_geometry``, memoised."""
    from ..operators._resize_params import select_axis_filter, window_geometry

    flt = select_axis_filter(
        extent, out_size, FilterType(min_filter), FilterType(mag_filter), antialias
    )
    if flt.type == FilterType.NEAREST:
        return 0, 0.0, 1.0, 1
    anchor, tab_scale, taps = window_geometry(flt)
    return int(flt.type), float(anchor), float(tab_scale), int(taps)


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
        stream: the CUDA stream.

    Returns:
        A SampleList, dense when every output has the same size.
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
    tables, offsets = _tables(s.device_id)
    d = np.empty(n, RESIZE_DESC)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    d["in_h"], d["in_w"], d["in_sy"], d["in_sx"] = h, w, sy, sx
    d["out_h"], d["out_w"] = out_sizes[:, 0], out_sizes[:, 1]
    mn, mg, aa = int(min_filter), int(mag_filter), bool(antialias)
    for ax, sfx in enumerate(("_y", "_x")):
        ext = (b[:, ax] - a[:, ax]).astype(np.float32)
        osz = out_sizes[:, ax]
        geo = np.array(
            [
                _axis(float(e), int(o), mn, mg, aa)
                for e, o in zip(ext.tolist(), osz.tolist(), strict=True)
            ],
            np.float64,
        ).reshape(n, 4)
        kind = geo[:, 0].astype(np.int64)
        d["kind" + sfx] = kind
        d["anchor" + sfx], d["tscale" + sfx], d["taps" + sfx] = geo[:, 1], geo[:, 2], geo[:, 3]
        d["tab" + sfx] = [offsets[k][0] for k in kind.tolist()]
        d["tab_n" + sfx] = [offsets[k][1] for k in kind.tolist()]
        d["lo" + sfx] = a[:, ax]
        d["scale" + sfx] = (b[:, ax] - a[:, ax]) / osz.astype(np.float32)
        d["flip" + sfx] = hi32[:, ax] < lo32[:, ax]
    dev = upload(d.view(np.uint8), stream)
    rows = -(-int(out_sizes[:, 0].max()) // ROWS)
    grid, block = grid_for(rows, int(out_sizes[:, 1].max()), n)
    taps = np.where(d["kind_y"] > 0, d["taps_y"], 1), np.where(d["kind_x"] > 0, d["taps_x"], 1)
    kernel = _get_resize_kernel(
        s.dtype,
        out_dtype,
        s.device_id,
        _kernel_taps(np.concatenate(taps)),
        channels if channels in (1, 3, 4) else 0,
    )
    kernel(grid, block, (dev, tables, np.int32(channels)), stream=stream)
    return out


def _geometry(op, hw: np.ndarray, args: dict):
    """Output sizes and source windows of a batch for the ``fn.resize`` operator ``op``.

    A fully given, positive output size (the common training case) is vectorised; anything else
    goes through ``op.params_for`` per sample, memoised per input size when no argument input
    changes the arguments.
    """
    from ..operators._resize_params import ResizeMode

    n = len(hw)
    st = op._static
    fixed = None
    if (
        not args
        and st["roi_start"] is None
        and op.max_size is None
        and op.mode in (None, ResizeMode.DEFAULT, ResizeMode.STRETCH)
    ):
        if st["size"] is not None:
            v = np.atleast_1d(np.asarray(st["size"], np.float64))
            v = np.repeat(v, 2) if v.size == 1 else v
            fixed = v if v.size == 2 else None
        elif st["resize_x"] is not None and st["resize_y"] is not None:
            fixed = np.array([st["resize_y"], st["resize_x"]], np.float64)
        if fixed is not None and not ((fixed > 0).all() and (fixed == np.round(fixed)).all()):
            fixed = None
    if fixed is not None and (hw > 0).all():
        out = np.tile(fixed.astype(np.int64), (n, 1))
        return out, np.zeros((n, 2)), hw.astype(np.float64)
    out = np.empty((n, 2), np.int64)
    lo = np.empty((n, 2))
    hi = np.empty((n, 2))
    for i in range(n):
        key = (int(hw[i, 0]), int(hw[i, 1]))
        if args:
            p = op.params_for(*key, {k: v[i] for k, v in args.items()})
        else:
            p = op.params_for(*key)  # memoised per input size by the operator
        out[i], lo[i], hi[i] = p.dst_size, p.src_lo, p.src_hi
    return out, lo, hi


def resize_op_batch(op, samples, args: dict, stream):
    """``fn.resize(device="gpu")``: the whole batch in one launch (HWC or HW samples, or
    FHWC / FHW sequences, whose frames all go into that one launch)."""
    from ..errors import ArgumentError

    s = as_samples(samples)
    ndim = s.shapes.shape[1] if len(s) else 3
    lay = op._layout or {2: "HW", 3: "HWC"}.get(ndim, "")
    if lay in ("FHWC", "FHW") and len(lay) == ndim:
        return _resize_sequences(op, s, args, stream)
    if lay not in ("HW", "HWC") or len(lay) != ndim:
        raise ArgumentError(
            "resize: device='gpu' resizes HWC or HW samples and FHWC or FHW sequences; got "
            f"layout {lay!r} ({ndim}-D)"
        )
    return _resize_images(op, s, args, stream)


def _resize_sequences(op, s, args: dict, stream):
    """Every frame of every sequence in one launch; a sequence's frames share its geometry
    (and its argument inputs)."""
    from ..tensors_gpu import SampleList
    from ._sequences import as_frames, as_sequences

    frames, owner, counts = as_frames(s)
    empty = np.zeros((len(s), s.shapes.shape[1] - 1), np.int64)
    if (counts == 0).any():  # the frame size of an empty sequence still follows its arguments
        for i in np.flatnonzero(counts == 0).tolist():
            sample_args = {k: v[i] for k, v in args.items()} if args else None
            empty[i, :2] = op.params_for(*(int(v) for v in s.shapes[i, 1:3]), sample_args).dst_size
            empty[i, 2:] = s.shapes[i, 3:]
    if not counts.any():
        shapes = np.concatenate([counts[:, None], empty], axis=1)
        return SampleList(
            s.dtype, np.zeros(len(s)), shapes, np.ones_like(shapes), None, s.device_id
        )
    frame_args = {k: [v[i] for i in owner.tolist()] for k, v in args.items()}
    return as_sequences(_resize_images(op, frames, frame_args, stream), counts, empty)


def _resize_images(op, s, args: dict, stream):
    out, lo, hi = _geometry(op, s.shapes[:, :2], args)
    out_dtype = op.attrs.out_dtype(s.dtype)
    return resize_batch(
        s,
        out,
        lo,
        hi,
        op.attrs.min_filter,
        op.attrs.mag_filter,
        op.attrs.antialias,
        out_dtype,
        stream=stream,
    )


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
