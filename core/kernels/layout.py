"""The generic N-D strided copy (``nd_copy`` in ``slice.cu``) and the layout operations built on
it: slice (with padding), pad, transpose, stack, concatenate and copy, one launch per batch.

A *job* copies one region: a sample (slice, pad, transpose, copy) or one input of a stacked or
concatenated sample. Its descriptor gives, per output axis, the region's extent, the output and
input strides (elements), the input coordinate of the region's first element (``anchor``; it may
be negative or past the end: those elements get the fill value) and the input's extent there.
A transpose permutes the input's strides and extents into output order; a stack or cat points
each input's job at its place in the output. ``blockIdx.z`` is the job.

Before the launch, adjacent axes that are contiguous in both the input and the output (and not
cut by the window) are merged (``coalesce``), so a plain copy is a flat loop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from . import CTYPES, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, sample_list, uniform_rows

MAX_DIMS = 8
_BLOCK = 256
_MAX_BLOCKS = 4096  # per job along x; the kernel loops over the rest
_MAX_JOBS = 65535  # gridDim.z

COPY_DESC = np.dtype(
    [("in_ptr", "<i8"), ("out_ptr", "<i8"), ("size", "<i8"), ("ndim", "<i8")]
    + [
        (f, "<i8", (MAX_DIMS,))
        for f in ("shape", "out_strides", "in_strides", "anchor", "in_shape")
    ]
)
_FIELDS = ("shape", "out_strides", "in_strides", "anchor", "in_shape")

# Same-type copies move bits: any dtype of these sizes.
_BITS = {1: "uint8", 2: "uint16", 4: "unsigned int", 8: "uint64"}
_EXTRA_TYPES = {np.dtype(np.int64): "int64", np.dtype(np.uint64): "uint64", np.dtype(bool): "uint8"}
# Output types a converting copy can write (``clamp_cast`` in slice.cu).
CONVERT_TO = frozenset(
    np.dtype(t)
    for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.uint32)
    + (np.float16, np.float32, np.float64)
)


def _type_names(in_dtype, out_dtype) -> tuple[str, str]:
    din, dout = np.dtype(in_dtype), np.dtype(out_dtype)
    if din == dout:
        if din.itemsize not in _BITS:
            raise TypeError(f"GPU copies do not handle dtype {din}")
        return _BITS[din.itemsize], _BITS[din.itemsize]
    if dout not in CONVERT_TO:
        raise TypeError(f"GPU copies do not convert to {dout}")
    name_in = CTYPES.get(din) or _EXTRA_TYPES.get(din)
    if name_in is None:
        raise TypeError(f"GPU copies do not convert from {din}")
    return name_in, CTYPES[dout]


@functools.cache
def _get_nd_copy_kernel(in_dtype, out_dtype, device_id: int):
    tin, tout = _type_names(in_dtype, out_dtype)
    return get_function("slice.cu", f"nd_copy<{tin}, {tout}>", device_id)


def coalesce(fields: dict[str, np.ndarray], channel_dim: int = -1) -> tuple[dict, int]:
    """Merge adjacent axes where every job allows it: axis ``k + 1`` is contiguous under axis
    ``k`` in both the output and the input, and the window takes all of it. ``channel_dim``
    (an output axis whose index picks the fill value; -1 for none) is never merged.

    Args:
        fields: the ``_FIELDS`` arrays, each (jobs, ndim).
        channel_dim: the channel axis, or -1.

    Returns:
        (the merged fields, the channel axis' new index).
    """
    f, channel_dim = _coalesce(_stacked(fields), channel_dim)
    return dict(zip(_FIELDS, f, strict=True)), channel_dim


def _stacked(fields: dict) -> np.ndarray:
    """The ``_FIELDS`` of ``fields`` as one (5, jobs, ndim) int64 array (a copy)."""
    return np.array([fields[k] for k in _FIELDS], np.int64)


def _coalesce(f: np.ndarray, channel_dim: int) -> tuple[np.ndarray, int]:
    """:func:`coalesce` on the stacked fields ``f`` (5, jobs, ndim), merged in place where
    possible: one array, and one ``np.delete`` per merged axis rather than one per field."""
    for k in range(f.shape[2] - 2, -1, -1):
        if channel_dim in (k, k + 1):
            continue
        inner_shape, inner_out, inner_in, inner_anchor, inner_in_shape = f[:, :, k + 1]
        ok = (
            (f[1, :, k] == inner_shape * inner_out)
            & (f[2, :, k] == inner_in_shape * inner_in)
            & (inner_anchor == 0)
            & (inner_shape == inner_in_shape)
        )
        if not ok.all():
            continue
        f[3, :, k] *= inner_shape  # anchor
        f[0, :, k] *= inner_shape  # shape
        f[4, :, k] *= inner_in_shape
        f[1, :, k] = inner_out
        f[2, :, k] = inner_in
        f = np.delete(f, k + 1, axis=2)
        if channel_dim > k:
            channel_dim -= 1
    return f, channel_dim


_WORDS = COPY_DESC.itemsize // 8  # int64 words per descriptor: 4 scalars, then the fields
_MAX_TEMPLATES = 32


def job_descriptors(in_ptrs, out_ptrs, channel_dim: int = -1, **fields) -> tuple[np.ndarray, int]:
    """The ``COPY_DESC`` array of jobs (see the module docstring), axes coalesced.

    The descriptors but for their pointers depend only on the fields: they are memoised for
    the ``_MAX_TEMPLATES`` sets of fields last used, so a batch of shapes seen before (a slice of
    ``fn.shapes``' constant-shaped tensors, a pipeline fed one size) costs a copy and the
    pointers instead of the coalescing and ~15 numpy calls (~50 us).

    Args:
        in_ptrs, out_ptrs: (jobs,) device addresses of the input sample and of the region's
            first output element.
        channel_dim: output axis whose index picks the fill value (-1: the first value).
        **fields: ``shape``, ``out_strides``, ``in_strides``, ``anchor``, ``in_shape``, each
            (jobs, ndim) integers, in output axes.

    Returns:
        (descriptors, the channel axis after coalescing).

    Raises:
        ValueError: more than ``MAX_DIMS`` axes remain after coalescing.
    """
    f = _stacked(fields)
    template, channel_dim = _template(f.tobytes(), f.shape, channel_dim)
    words = template.copy()
    words[:, 0] = np.asarray(in_ptrs, np.uint64).view(np.int64)
    words[:, 1] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    return words.view(COPY_DESC).reshape(len(words)), channel_dim


@functools.lru_cache(maxsize=_MAX_TEMPLATES)
def _template(data: bytes, shape: tuple, channel_dim: int) -> tuple[np.ndarray, int]:
    """(the descriptors as (jobs, ``_WORDS``) int64 words, pointers zero, read only; the
    channel axis) of the stacked fields of ``shape`` (their int64 bytes ``data``), coalesced."""
    f = np.frombuffer(data, np.int64).reshape(shape).copy()  # (coalesced in place)
    f, channel_dim = _coalesce(f, channel_dim)
    _, jobs, ndim = f.shape
    if ndim > MAX_DIMS:
        raise ValueError(f"GPU copies handle up to {MAX_DIMS} dimensions, got {ndim}")
    words = np.zeros((jobs, _WORDS), np.int64)
    words[:, 2] = f[0].prod(axis=1) if ndim else 1  # size
    words[:, 3] = ndim
    # the five fields, MAX_DIMS words each (a view: the words' last axis split)
    words[:, 4:].reshape(jobs, len(_FIELDS), MAX_DIMS)[:, :, :ndim] = f.transpose(1, 0, 2)
    words.flags.writeable = False
    return words, channel_dim


def fill_array(fill, out_dtype) -> np.ndarray:
    """Fill values as the output type, converted as DALI's slice does (``static_cast``).

    Memoised for a numpy array of fill values (what slice and pad pass, every batch): the
    result is shared, read only."""
    if isinstance(fill, np.ndarray) and fill.dtype.kind in "biuf":
        return _fill_array(fill.dtype.str, fill.tobytes(), np.dtype(out_dtype).str)
    return _convert_fill(fill, out_dtype)


@functools.lru_cache(maxsize=256)
def _fill_array(dtype: str, data: bytes, out_dtype: str) -> np.ndarray:
    out = _convert_fill(np.frombuffer(data, dtype), np.dtype(out_dtype))
    out.flags.writeable = False
    return out


def _convert_fill(fill, out_dtype) -> np.ndarray:
    f = np.atleast_1d(np.asarray(fill if fill is not None else 0, np.float64)).reshape(-1)
    dt = np.dtype(out_dtype)
    if dt.kind in "iub":
        info = np.iinfo(dt) if dt.kind != "b" else None
        f = np.trunc(f) if info is None else np.clip(np.trunc(f), info.min, info.max)
    return (f if f.size else np.zeros(1)).astype(dt)


def run_jobs(
    descs: np.ndarray, in_dtype, out_dtype, device_id: int, stream, fill=None, channel_dim: int = -1
) -> None:
    """Launch ``nd_copy`` over ``descs``: descriptors and fill values go up in one copy."""
    if len(descs) == 0:
        return
    fills = fill_array(fill, out_dtype)
    head = descs.view(np.uint8)
    off = -(-head.size // 16) * 16
    host = np.zeros(off + fills.nbytes, np.uint8)
    host[: head.size] = head
    host[off:] = fills.view(np.uint8)
    dev = upload(host, stream)
    kernel = _get_nd_copy_kernel(np.dtype(in_dtype), np.dtype(out_dtype), device_id)
    size = int(descs["size"].max())
    blocks = max(1, min(_MAX_BLOCKS, -(-size // _BLOCK)))
    base = dev.data.ptr  # (addresses into the upload as integers: no device array views)
    fill_ptr = np.uint64(base + off)
    for start in range(0, len(descs), _MAX_JOBS):
        count = min(_MAX_JOBS, len(descs) - start)
        kernel(
            (blocks, 1, count),
            (_BLOCK, 1, 1),
            (
                np.uint64(base + start * COPY_DESC.itemsize),
                fill_ptr,
                np.int32(fills.size),
                np.int32(channel_dim),
            ),
            stream=stream,
        )


def window_fields(s, out, anchors, perm=None) -> dict[str, np.ndarray]:
    """The fields of one job per sample: output sample ``i`` is the window of input sample
    ``i`` at ``anchors[i]`` of ``out.shapes[i]``, the input's axes taken in ``perm`` order."""
    in_strides, in_shapes = s.strides, s.shapes
    if perm is not None:
        perm = np.asarray(perm)
        in_strides, in_shapes = in_strides[:, perm], in_shapes[:, perm]
    return {
        "shape": out.shapes,
        "out_strides": out.strides,
        "in_strides": in_strides,
        "anchor": np.asarray(anchors, np.int64).reshape(out.shapes.shape),
        "in_shape": in_shapes,
    }


@stream_scoped
def slice_batch(inputs, anchors, shapes, out_dtype=None, fill=0.0, channel_dim=-1, stream=None):
    """Windows of every sample: ``out[c] = in[anchor + c]``, ``fill`` outside the input.

    Args:
        inputs: the batch (SampleList or list of CuPy arrays), any rank up to ``MAX_DIMS``.
        anchors, shapes: (N, ndim) integers: each window's start (may be negative) and extent.
        out_dtype: output type (default the input's); converted as DALI's ``clamp``.
        fill: one value, or one per index of ``channel_dim``.
        channel_dim: the axis whose index picks the fill value (-1: the first value).
        stream: the CUDA stream.

    Returns:
        A SampleList of contiguous samples of the window shapes.
    """
    s = as_samples(inputs)
    n = len(s)
    out_dtype = np.dtype(out_dtype or s.dtype)
    shapes = np.asarray(shapes, np.int64).reshape(n, -1)
    out = alloc_batch(shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    descs, ch = job_descriptors(s.ptrs, out.ptrs, channel_dim, **window_fields(s, out, anchors))
    run_jobs(descs, s.dtype, out_dtype, s.device_id, stream, fill, ch)
    return out


@stream_scoped
def slice_known(host: np.ndarray, anchors, shapes, stream=None):
    """:func:`slice_batch` of a dense batch whose values the host holds (``host``, (N, ...),
    ``SampleList._host``: ``fn.shapes``' output) when every sample's window is the same and
    inside the sample: the windows cut on the host and uploaded (one allocation and copy)
    instead of an output allocation, a descriptor upload and a copy kernel; None for any
    other windows (the caller launches the kernel). The values are the same: an in-bounds
    window of the input's type is a copy.

    Args:
        host: the batch's values, (N, *sample shape), read only.
        anchors, shapes: (N, sample ndim) int64 windows, as ``slice_batch`` takes them.
        stream: the CUDA stream.
    """
    n, extents = len(host), host.shape[1:]
    if not n or anchors.shape != (n, len(extents)) or shapes.shape != anchors.shape:
        return None
    if not (uniform_rows(anchors) and uniform_rows(shapes)):
        return None
    a, w = anchors[0].tolist(), shapes[0].tolist()
    if any(x < 0 or k < 0 or x + k > e for x, k, e in zip(a, w, extents, strict=True)):
        return None
    window = (slice(None),) + tuple(slice(x, x + k) for x, k in zip(a, w, strict=True))
    values = np.ascontiguousarray(host[window])
    out = sample_list().from_dense(upload(values, stream))
    values.flags.writeable = False
    out._host = values
    return out


def copy_batch(inputs, stream=None):
    """Contiguous copies of every sample (a strided view becomes a C-order sample)."""
    s = as_samples(inputs)
    return slice_batch(s, np.zeros_like(s.shapes), s.shapes, stream=stream)


@stream_scoped
def transpose_batch(inputs, perm: Sequence[int], stream=None):
    """``out = in.transpose(perm)`` for every sample, contiguous."""
    s = as_samples(inputs)
    n = len(s)
    perm = np.asarray(perm, np.int64)
    shapes = s.shapes[:, perm] if n else np.zeros((0, len(perm)), np.int64)
    out = alloc_batch(shapes, s.dtype, s.device_id)
    if n == 0:
        return out
    descs, _ = job_descriptors(
        s.ptrs, out.ptrs, **window_fields(s, out, np.zeros_like(shapes), perm)
    )
    run_jobs(descs, s.dtype, s.dtype, s.device_id, stream)
    return out


def join_shapes(ins: Sequence, axis: int, new_axis: bool) -> np.ndarray:
    """The (N, ndim) output shapes of stacking (``new_axis``) or concatenating ``ins``."""
    if new_axis:
        return np.insert(ins[0].shapes, axis, len(ins), axis=1)
    shapes = ins[0].shapes.copy()
    shapes[:, axis] = sum(b.shapes[:, axis] for b in ins)
    return shapes


def join_jobs(ins: Sequence, out, axis: int, new_axis: bool) -> tuple:
    """(input addresses, output addresses, fields) of the jobs of a stack or cat: input ``j``
    of sample ``i`` is job ``j * N + i``, written at its offset along ``axis``.

    ``ins`` and ``out`` are batches with ``ptrs``, ``shapes``, ``strides`` (elements) and
    ``dtype`` (SampleLists, or anything shaped like them)."""
    n, k = len(ins[0].ptrs), len(ins)
    itemsize = np.dtype(out.dtype).itemsize
    if new_axis:
        extents = np.ones((k, n), np.int64)
        out_strides = np.delete(out.strides, axis, axis=1)
    else:
        extents = np.stack([b.shapes[:, axis] for b in ins])
        out_strides = out.strides
    starts = np.cumsum(extents, axis=0) - extents  # (k, n): offsets along the axis
    offsets = starts * out.strides[:, axis][None, :] * itemsize  # bytes
    out_ptrs = np.tile(np.asarray(out.ptrs, np.uint64), k) + offsets.reshape(-1).astype(np.uint64)
    in_shapes = np.concatenate([b.shapes for b in ins])
    fields = {
        "shape": in_shapes,
        "out_strides": np.tile(out_strides, (k, 1)),
        "in_strides": np.concatenate([b.strides for b in ins]),
        "anchor": np.zeros_like(in_shapes),
        "in_shape": in_shapes,
    }
    return np.concatenate([b.ptrs for b in ins]), out_ptrs, fields


@stream_scoped
def join_batch(batches: Sequence, axis: int, new_axis: bool, stream=None):
    """Stack (``new_axis``) or concatenate the i-th samples of several batches along ``axis``.

    Args:
        batches: the input batches (same length, dtype and rank; the other extents must agree,
            checked by the caller).
        axis: the output axis.
        new_axis: stack (insert an axis) rather than concatenate.
        stream: the CUDA stream.

    Returns:
        A SampleList of the joined samples.
    """
    ins = [as_samples(b) for b in batches]
    out = alloc_batch(join_shapes(ins, axis, new_axis), ins[0].dtype, ins[0].device_id)
    if len(ins[0]) == 0:
        return out
    in_ptrs, out_ptrs, fields = join_jobs(ins, out, axis, new_axis)
    descs, _ = job_descriptors(in_ptrs, out_ptrs, **fields)
    run_jobs(descs, out.dtype, out.dtype, out.device_id, stream)
    return out


def c_strides(shapes: np.ndarray) -> np.ndarray:
    """C-order strides (elements) of each row of ``shapes`` (N, ndim)."""
    shapes = np.asarray(shapes, np.int64)
    strides = np.ones_like(shapes)
    if shapes.ndim == 2 and shapes.shape[1] > 1:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    return strides


@stream_scoped
def view_batch(inputs, shapes, dtype=None, stream=None):
    """The samples with new shapes (and element type) over the same device memory: metadata
    only (reshape, squeeze, expand_dims, reinterpret). Samples that are not C-ordered are
    copied first. The caller checks that each new shape holds the sample's bytes."""
    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    dtype = np.dtype(dtype or s.dtype)
    shapes = np.asarray(shapes, np.int64).reshape(n, -1) if n else np.zeros((0, 0), np.int64)
    if n and not (s.strides == c_strides(s.shapes)).all():
        s = copy_batch(s, stream=stream)
    dense = None
    if s.dense is not None and s.dense.flags.c_contiguous and n and (shapes == shapes[0]).all():
        dense = s.dense.reshape(n, -1).view(dtype).reshape((n, *(int(v) for v in shapes[0])))
    return SampleList(dtype, s.ptrs, shapes, c_strides(shapes), s.owners, s.device_id, dense=dense)
