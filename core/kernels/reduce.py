"""The GPU side of ``fn.reductions.*`` (``reduce.cu``): one launch per batch.

Per sample, the descriptor splits the input's axes into kept ones (they index the output, in
order) and reduced ones. A batch whose outputs each reduce few elements runs ``reduce_small``
(a thread per output); otherwise ``reduce_block`` (a block of 256 threads per output).
"""

from __future__ import annotations

import functools

import numpy as np

from . import get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, c_contiguous, uniform_rows
from .layout import copy_batch
from .one_hot import TYPE_NAMES

MAX_DIMS = 8
OPS = {
    "sum": 0,
    "min": 1,
    "max": 2,
    "mean": 3,
    "mean_square": 4,
    "rms": 5,
    "variance": 6,
    "std_dev": 7,
}
REDUCE_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "mean_ptr", "n_out", "n_red", "n_kept", "n_reduced")]
    + [(f, "<i8", (MAX_DIMS,)) for f in ("kept_shape", "kept_strides", "red_shape", "red_strides")]
    + [("norm", "<f8")]
)
_BLOCK = 256
_SMALL = 64  # elements per output up to which one thread computes an output


@functools.cache
def _get_reduce_kernel(kind: str, in_dtype, out_dtype, op: int, device_id: int):
    expr = f"reduce_{kind}<{TYPE_NAMES[in_dtype]}, {TYPE_NAMES[out_dtype]}, {op}>"
    return get_function("reduce.cu", expr, device_id)


def reduce_descriptors(in_ptrs, out_ptrs, in_shapes, in_strides, axes, norms, mean_ptrs=None):
    """The ``REDUCE_DESC`` array: per sample, the kept and reduced axes' extents and strides.

    A batch of one shape, one strides and one norm (a dense batch) repeats one memoised row
    (:func:`_uniform_row`: the same bytes as each of its rows below) and writes only its
    pointers: ~15 numpy calls fewer per launch, and the automatic augmentations reduce four
    times a batch.

    Args:
        in_ptrs, out_ptrs: (N,) device addresses.
        in_shapes, in_strides: (N, ndim) input shapes and strides (elements).
        axes: the reduced axes (the same for every sample).
        norms: (N,) the final scale (see ``reduce.cu``).
        mean_ptrs: (N,) addresses of float32 means per output, or None.

    Raises:
        ValueError: more than ``MAX_DIMS`` kept or reduced axes.
    """
    in_shapes = np.asarray(in_shapes, np.int64)
    in_strides = np.asarray(in_strides, np.int64)
    norms = np.asarray(norms, np.float64)
    if norms.shape != (len(in_shapes),):  # (np.broadcast_to costs ~5 us even when a no-op)
        norms = np.broadcast_to(norms, (len(in_shapes),))
    n, ndim = in_shapes.shape
    red = tuple(sorted(set(int(a) for a in axes)))
    if n > 1 and uniform_rows(in_shapes) and uniform_rows(in_strides) and uniform_rows(norms):
        row = _uniform_row(in_shapes[0].tobytes(), in_strides[0].tobytes(), red,
                           norms[0].tobytes())  # fmt: skip
        d = np.repeat(row, n)
    else:
        d = _ragged_rows(n, ndim, in_shapes, in_strides, red, norms)
    words = d.view(np.int64).reshape(n, REDUCE_DESC.itemsize // 8)
    words[:, 0] = np.asarray(in_ptrs, np.uint64).view(np.int64)
    words[:, 1] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    if mean_ptrs is not None:
        words[:, 2] = np.asarray(mean_ptrs, np.uint64).view(np.int64)
    return d


@functools.lru_cache(maxsize=256)
def _uniform_row(shape: bytes, strides: bytes, red: tuple, norm: bytes) -> np.ndarray:
    """The (1,) ``REDUCE_DESC`` row, pointers zero, of a sample of ``shape`` / ``strides``
    (int64 bytes) reduced over ``red`` with the scale ``norm`` (float64 bytes); read only."""
    shapes = np.frombuffer(shape, np.int64).reshape(1, -1)
    row = _descriptors(1, shapes.shape[1], shapes, np.frombuffer(strides, np.int64).reshape(1, -1),
                       red, np.frombuffer(norm, np.float64))  # fmt: skip
    row.flags.writeable = False
    return row


_LAST_RAGGED: list = [None]  # [(key, rows with zero pointers and norms)]: the last ragged batch


def _ragged_rows(n: int, ndim: int, in_shapes, in_strides, red: tuple, norms) -> np.ndarray:
    """:func:`_descriptors` of a ragged batch, its rows without norms remembered for the next
    call: normalize reduces the same batch twice (mean, then squared deviations), so the
    second reduction copies the rows and writes its norms (~20 us fewer per speech batch)."""
    key = (in_shapes.tobytes(), in_strides.tobytes(), ndim, red)
    last = _LAST_RAGGED[0]
    if last is not None and last[0] == key:
        d = last[1].copy()
        d["norm"] = norms
        return d
    d = _descriptors(n, ndim, in_shapes, in_strides, red, 0.0)
    _LAST_RAGGED[0] = (key, d.copy())
    d["norm"] = norms
    return d


def _descriptors(n: int, ndim: int, in_shapes, in_strides, red: tuple, norms) -> np.ndarray:
    """:func:`reduce_descriptors`'s rows without their pointers (zero)."""
    kept = [a for a in range(ndim) if a not in red]
    red = list(red)
    if len(red) > MAX_DIMS or len(kept) > MAX_DIMS:
        raise ValueError(f"GPU reductions handle up to {MAX_DIMS} kept and reduced axes")
    d = np.zeros(n, REDUCE_DESC)
    d["n_kept"], d["n_reduced"] = len(kept), len(red)
    d["kept_shape"][:, : len(kept)] = in_shapes[:, kept]
    d["kept_strides"][:, : len(kept)] = in_strides[:, kept]
    d["red_shape"][:, : len(red)] = in_shapes[:, red]
    d["red_strides"][:, : len(red)] = in_strides[:, red]
    d["n_out"] = in_shapes[:, kept].prod(axis=1)
    d["n_red"] = in_shapes[:, red].prod(axis=1)
    d["norm"] = norms
    return d


@stream_scoped
def reduce_batch(
    inputs, axes, op: str, out_dtype, out_shapes, norms, neutral, means=None, stream=None
):
    """Reduce every sample over ``axes`` (see ``reduce.cu``).

    Args:
        inputs: the batch.
        axes: the reduced axes.
        op: a key of ``OPS``.
        out_dtype: the output type.
        out_shapes: (N, out_ndim) output shapes (with or without the kept unit axes).
        norms: (N,) final scales.
        neutral: the reduction's start value (0, or the type's max/min for min/max).
        means: for variance/std_dev, a batch of float32 means, one per output element.
        stream: the CUDA stream.
    """
    s = as_samples(inputs)
    out = alloc_batch(out_shapes, out_dtype, s.device_id)
    n = len(s)
    if n == 0:
        return out
    mean_ptrs = None
    if means is not None:
        m = as_samples(means)
        if not c_contiguous(m):
            m = copy_batch(m, stream=stream)
        mean_ptrs = m.ptrs
    d = reduce_descriptors(s.ptrs, out.ptrs, s.shapes, s.strides, axes, norms, mean_ptrs)
    if int(d["n_out"].max()):
        launch_reduce(d, upload(d, stream), s.dtype, out_dtype, op, neutral, s.device_id, stream)
    return out


def launch_reduce(d: np.ndarray, table, in_dtype, out_dtype, op: str, neutral, device_id: int,
                  stream) -> None:  # fmt: skip
    """Launch the reduction kernel of ``op`` over the samples of the ``REDUCE_DESC`` rows
    ``d`` (at least one output element): ``table`` their device copy; the small kernel (a
    thread per output element) when every sample reduces at most ``_SMALL`` elements, else
    a block per output element."""
    n_out = int(d["n_out"].max())
    small = int(d["n_red"].max()) <= _SMALL
    kind = "small" if small else "block"
    k = _get_reduce_kernel(kind, np.dtype(in_dtype), np.dtype(out_dtype), OPS[op], device_id)
    blocks = -(-n_out // _BLOCK) if small else n_out
    k(
        (max(1, min(4096, blocks)), 1, len(d)),
        (_BLOCK, 1, 1),
        (table, np.float64(neutral)),
        stream=stream,
    )
