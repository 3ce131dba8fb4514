"""Batch plumbing shared by the launchers: inputs as SampleLists, fresh output batches."""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

_ALIGN = 256


@functools.cache
def sample_list():
    """``tensors_gpu.SampleList``, imported on first use (that module imports CuPy, which
    ``import dlpipe`` must not) and then one cached call instead of a relative import
    statement per call (~1.5 us each; the GPU stage of the automatic augmentations ran ~140
    a batch)."""
    from ..tensors_gpu import SampleList

    return SampleList


def as_samples(x):
    return sample_list().coerce(x)


def hwc_view(samples):
    """(H, W, C, row stride, pixel stride) per sample of an HWC (or HW) batch, channel stride 1.

    Samples whose channels are not contiguous are copied first (returns the batch it used).
    """
    s = samples
    if s.shapes.shape[1] == 2:
        h, w = s.shapes[:, 0], s.shapes[:, 1]
        c = np.ones_like(h)
        sy, sx = s.strides[:, 0], s.strides[:, 1]
        return s, h, w, c, sy, sx
    if s.shapes.shape[1] != 3:
        raise ValueError(f"expected HWC samples (3 dimensions), got {s.shapes.shape[1]}")
    if len(s) and s.dense is None and not (s.strides[:, 2] == 1).all():  # (dense: C order)
        import cupy

        s = sample_list().from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    return s, s.shapes[:, 0], s.shapes[:, 1], s.shapes[:, 2], s.strides[:, 0], s.strides[:, 1]


def uniform_rows(a: np.ndarray) -> bool:
    """Whether every row of ``a`` (a non-empty 2-D integer array) equals the first: compared
    as bytes, a tenth of the cost of ``(a == a[0]).all()`` on the small arrays of a batch's
    shapes and strides (the GPU stage makes these checks for every operator and batch)."""
    return a.tobytes() == a[:1].tobytes() * len(a)


def uniform_row(s) -> tuple | None:
    """(shape, strides) of every sample of a batch (``shapes`` / ``strides`` arrays), as tuples
    of ints, when the samples all have the first one's; None when they differ or the batch is
    empty. Worked out once per batch and kept on it (``_row``; a SampleList's arrays are never
    changed): a dense batch knows it from the start (``SampleList.from_dense``), and
    ``SampleList.take`` and the branches' merge pass it on, so the launchers' paths for
    batches of one layout (``arithmetic.expression_batch``, ``warp.warp_batch``) skip
    comparing rows and reading them back (~3 us an input)."""
    row = getattr(s, "_row", False)
    if row is not False:
        return row
    row = None
    if len(s) and uniform_rows(s.shapes) and uniform_rows(s.strides):
        row = (tuple(s.shapes[0].tolist()), tuple(s.strides[0].tolist()))
    s._row = row
    return row


def c_contiguous(s) -> bool:
    """Whether every sample of a batch (``shapes`` / ``strides`` arrays) is C-contiguous:
    for a batch of one shape and strides, one memoised comparison instead of array work.

    A batch found so is marked (``_c_order``, as :func:`packed_batch` and
    ``SampleList.from_dense`` mark theirs): a SampleList's arrays are never changed, and the
    GPU stage asks again of the same batch (equalize, reductions, filter: ~4 us a call)."""
    if not len(s) or getattr(s, "_c_order", False):
        return True
    if uniform_rows(s.shapes) and uniform_rows(s.strides):
        found = s.strides[0].tolist() == _c_row(tuple(s.shapes[0].tolist()))
    else:
        found = bool((s.strides == c_strides(s.shapes)).all())
    if found:
        s._c_order = True
    return found


@functools.lru_cache(maxsize=1024)
def _c_row(shape: tuple) -> list:
    return c_strides(np.array([shape], np.int64).reshape(1, len(shape)))[0].tolist()


ROUND_FROM = 1 << 20  # bytes: smaller allocations keep CuPy's own 512-byte rounding


def round_up_eighth(n: int) -> int:
    """``n`` rounded up to one of 8 values per octave (at most 1/8 more).

    >>> [round_up_eighth(n) for n in (1, 8, 9, 17, 1000, 1024, 1025)]
    [1, 8, 9, 18, 1024, 1024, 1152]
    """
    n = int(n)
    step = 1 << max(0, n.bit_length() - 4)
    return -(-n // step) * step


def device_empty(shape, dtype):
    """``cupy.empty(shape, dtype)`` whose memory, from 1 MiB, is a size class of CuPy's pool
    (:func:`round_up_eighth` bytes): batches of varying lengths (speech) then free and take
    the same few block sizes again, where exact sizes left the pool holding ~1 GB of split
    blocks for ~100 MB in use (BENCHMARKS.md, "Speech: the pool's size classes")."""
    import cupy

    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < ROUND_FROM:
        return cupy.empty(shape, dtype)
    return cupy.ndarray(shape, dtype, memptr=cupy.cuda.alloc(round_up_eighth(nbytes)))


def alloc_batch(shapes: np.ndarray, dtype, device_id: int):
    """A fresh output batch: one dense array when every sample has the same shape, else one
    buffer with each sample at an aligned offset (the layout memoised per shapes)."""

    SampleList = sample_list()
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    dtype = np.dtype(dtype)
    if n == 0 or uniform_rows(shapes):
        if not n:
            return SampleList.from_arrays([], device_id)
        return SampleList.from_dense(device_empty((n, *shapes[0].tolist()), dtype))
    layout = ragged_layout(shapes, dtype.itemsize)
    return packed_batch(device_empty((layout[1],), np.uint8), shapes, dtype, device_id, layout)


def packed_batch(flat, shapes: np.ndarray, dtype, device_id: int, layout: tuple | None = None):
    """The SampleList of samples of ``shapes`` (N, ndim) int64 laid out in the device buffer
    ``flat`` (uint8, at least ``ragged_layout``'s total bytes) as :func:`ragged_layout` places
    them: what :func:`alloc_batch` allocates, and what ``_copy_to_gpu`` uploads into.
    ``layout``: ``ragged_layout``'s result for these shapes, when the caller has it."""
    dtype = np.dtype(dtype)
    offsets, _, strides = layout or ragged_layout(shapes, dtype.itemsize)
    ptrs = offsets + np.uint64(flat.data.ptr)
    out = sample_list().of_arrays(dtype, ptrs, shapes, strides.copy(), flat, device_id)
    out._c_order = True  # C strides by construction: ``audio.contiguous`` skips its check
    return out


_LAYOUTS: dict = {}  # (shapes' bytes, ndim, itemsize) -> ragged_layout's result
_LAYOUTS_LOCK = threading.Lock()
_MAX_LAYOUTS = 64


def ragged_layout(shapes: np.ndarray, itemsize: int) -> tuple[np.ndarray, int, np.ndarray]:
    """(uint64 byte offsets, total bytes (at least 1), int64 C strides in elements) of samples
    of ``shapes`` (N, ndim) int64 packed in one buffer at ``_ALIGN``-byte aligned offsets.

    Memoised for the last ``_MAX_LAYOUTS`` batches of shapes (a pipeline fed the same sizes
    computes it once; ~80 us of numpy a batch otherwise). The arrays are shared between
    callers: read only."""
    key = (shapes.tobytes(), shapes.shape[1], itemsize)
    hit = _LAYOUTS.get(key)
    if hit is not None:
        return hit
    n, ndim = shapes.shape
    # (1-D and 2-D samples, the speech batches', without the general reductions: a new set
    # of utterance lengths misses this memo every batch, ~20 calls a NeMo batch)
    if ndim == 1:
        sizes = shapes[:, 0] * itemsize
    elif ndim == 2:
        sizes = shapes[:, 0] * shapes[:, 1] * itemsize
    else:
        sizes = shapes.prod(axis=1) * itemsize
    padded = (sizes + (_ALIGN - 1)) & -_ALIGN
    offsets = np.empty(n, np.int64)
    offsets[0] = 0
    np.cumsum(padded[:-1], out=offsets[1:])
    total = int(offsets[-1] + padded[-1]) or 1
    strides = np.ones_like(shapes)
    if ndim == 2:
        strides[:, 0] = shapes[:, 1]
    elif ndim > 2:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    offsets = offsets.view(np.uint64)  # (offsets are not negative)
    offsets.flags.writeable = False
    strides.flags.writeable = False
    hit = (offsets, total, strides)
    with _LAYOUTS_LOCK:
        while len(_LAYOUTS) >= _MAX_LAYOUTS:
            del _LAYOUTS[next(iter(_LAYOUTS))]
        _LAYOUTS[key] = hit
    return hit


def per_sample(value, n: int, width: int | None = None, dtype=np.float64) -> np.ndarray:
    """Broadcast a scalar, a per-channel list or per-sample values to (n,) or (n, width)."""
    a = np.asarray(value, dtype)
    if width is None:
        return (
            np.broadcast_to(a.reshape(-1) if a.ndim else a, (n,)).copy()
            if a.ndim <= 1
            else a.reshape(n)
        )
    if a.ndim <= 1:
        a = a.reshape(1, -1)
    if a.shape[1] < width:  # repeat the last value (one value for every channel)
        a = np.concatenate([a, np.repeat(a[:, -1:], width - a.shape[1], axis=1)], axis=1)
    return np.broadcast_to(a[:, :width], (n, width)).copy()


def fold_rows(samples, ndim: int):
    """The batch viewed with ``ndim`` dimensions per sample, the leading ones folded into the
    first (its rows), so that a launcher of (H, W[, C]) samples takes any sample: an FHWC or
    DHWC sample becomes (F * H, W, C), frames or slices stacked as rows; a sample with fewer
    dimensions gets leading dimensions of 1. Only for operations that treat every row alike
    (per-sample scalars, per-pixel colour transforms).

    Samples whose leading dimensions cannot be folded without a copy (a strided view) are made
    contiguous first. :func:`unfold_rows` gives the folded output its samples' shapes back.

    Args:
        samples: a SampleList.
        ndim: the number of dimensions of the view (2: HW, 3: HWC).

    Returns:
        (the folded SampleList, the original shapes (N, sample ndim)).
    """
    SampleList = sample_list()
    s = samples
    if len(s) == 0 or s.shapes.shape[1] == ndim:
        return s, s.shapes
    view = fold_layout(s.shapes, s.strides, ndim)
    if view is None:
        import cupy

        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
        view = fold_layout(s.shapes, s.strides, ndim)
    shapes, strides = view
    return SampleList(s.dtype, s.ptrs, shapes, strides, s.owners, s.device_id), samples.shapes


def fold_layout(shapes: np.ndarray, strides: np.ndarray, ndim: int):
    """The (shapes, strides), in elements, of :func:`fold_rows`'s view of samples of
    ``shapes`` / ``strides`` (N, sample ndim); None when a sample's leading dimensions do not
    fold without a copy (dimension j's stride is not dimension j + 1's extent in elements)."""
    shapes = np.asarray(shapes, np.int64)
    strides = np.asarray(strides, np.int64)
    n, nd = shapes.shape
    if nd <= ndim:  # leading dimensions of 1 (their strides are never used)
        ones = np.ones((n, ndim - nd), np.int64)
        return np.concatenate([ones, shapes], axis=1), np.concatenate([ones, strides], axis=1)
    k = nd - ndim  # dimensions 0..k fold into one, whose stride is dimension k's
    if not (strides[:, :k] == shapes[:, 1 : k + 1] * strides[:, 1 : k + 1]).all():
        return None
    rows = shapes[:, : k + 1].prod(axis=1, keepdims=True)
    return np.concatenate([rows, shapes[:, k + 1 :]], axis=1), strides[:, k:].copy()


def unfold_rows(out, shapes: np.ndarray):
    """A C-contiguous output batch of folded samples (:func:`fold_rows`) with the samples'
    own ``shapes``."""
    SampleList = sample_list()
    shapes = np.asarray(shapes, np.int64)
    n = len(shapes)
    if n == 0 or (out.shapes.shape == shapes.shape and (out.shapes == shapes).all()):
        return out
    dense = None
    if out.dense is not None and n and uniform_rows(shapes):
        dense = out.dense.reshape((n, *(int(v) for v in shapes[0])))
    return SampleList(
        out.dtype, out.ptrs, shapes, c_strides(shapes), out.owners, out.device_id, dense=dense
    )


def c_strides(shapes: np.ndarray) -> np.ndarray:
    """The strides, in elements, of C-contiguous samples of ``shapes`` (N, ndim)."""
    shapes = np.asarray(shapes, np.int64)
    strides = np.ones_like(shapes)
    if shapes.shape[1] > 1:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    return strides


def host_numbers(samples, dtype=np.float64, kinds: str = "biuf") -> np.ndarray | None:
    """A plain list of per-sample numbers (numpy values of one dtype, of a kind in
    ``kinds``, one element each: draws, flags, magnitudes) as a 1-D ``dtype`` array, read by
    ``np.fromiter`` at a third of the cost of stacking them (``operators/_small.stack``);
    None for anything else (the caller stacks it as before)."""
    if type(samples) is not list or not samples:
        return None
    dtypes = {getattr(a, "dtype", None) for a in samples}
    if len(dtypes) != 1:
        return None
    dt = dtypes.pop()
    if dt is None or dt.kind not in kinds:
        return None
    try:
        return np.fromiter(samples, dtype, len(samples))
    except (TypeError, ValueError):  # (a sample of several numbers)
        return None
