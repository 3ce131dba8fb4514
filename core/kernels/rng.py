"""GPU launcher of the random-number operators shaped by a GPU input (``rng.cu``): one launch
per batch, the numbers made on the device from per-sample seeds (see ``rng.cu`` for the
generator and the transforms)."""

from __future__ import annotations

import numpy as np

from . import CTYPES, ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch

RAND_DESC = np.dtype(
    [("out_ptr", "<i8"), ("n", "<i8"), ("seed", "<u8"), ("a", "<f8"), ("b", "<f8")]
    + [("values_ptr", "<i8"), ("nvalues", "<i8")]
)
MODES = {"normal": 0, "uniform": 1, "values": 2, "coin_flip": 3}
OUT_TYPES = frozenset(CTYPES)
_BLOCK = 256
_MAX_BLOCKS = 1024


def rand_descriptors(out_ptrs, sizes, seeds, a, b, values_ptrs=None, nvalues=None) -> np.ndarray:
    """The ``RAND_DESC`` array, one per sample (per-sample ``a``/``b``: see ``rng.cu``)."""
    n = len(sizes)
    d = np.zeros(n, RAND_DESC)
    d["out_ptr"] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    d["n"] = sizes
    d["seed"] = np.asarray(seeds, np.int64).astype(np.uint64)
    d["a"], d["b"] = a, b
    if values_ptrs is not None:
        d["values_ptr"] = np.asarray(values_ptrs, np.uint64).view(np.int64)
        d["nvalues"] = nvalues
    return d


@stream_scoped
def random_fill_batch(
    shapes, dtype, mode: str, seeds, a, b, values=None, *, device_id: int, stream=None
):
    """A batch of random numbers of ``shapes`` (N, ndim) and ``dtype``.

    Args:
        shapes: the output shapes.
        dtype: the output type (one of ``OUT_TYPES``).
        mode: a key of ``MODES``.
        seeds: (N,) non-negative int64 seeds, one per sample.
        a, b: (N,) float64 parameters: mean and stddev (normal), the range (uniform), the
            probability in ``a`` (coin_flip).
        values: for "values", one float64 array of values per sample.
        device_id: the device.
    """
    shapes = np.asarray(shapes, np.int64)
    n = len(shapes)
    out = alloc_batch(shapes, dtype, device_id)
    if n == 0:
        return out
    sizes = shapes.prod(axis=1) if shapes.shape[1] else np.ones(n, np.int64)
    vptrs = counts = None
    if mode == "values":
        counts = np.array([len(v) for v in values], np.int64)
        table = upload(np.concatenate([np.asarray(v, np.float64) for v in values]), stream)
        offsets = np.zeros(n, np.int64)
        offsets[1:] = np.cumsum(counts)[:-1]
        vptrs = np.uint64(table.data.ptr) + (offsets * 8).astype(np.uint64)
    d = rand_descriptors(out.ptrs, sizes, seeds, a, b, vptrs, counts)
    if int(sizes.max()) == 0:
        return out
    k = get_function("rng.cu", f"random_fill<{ctype(dtype)}, {MODES[mode]}>", device_id)
    blocks = int(min(_MAX_BLOCKS, -(-int(sizes.max()) // _BLOCK)))
    k((blocks, 1, n), (_BLOCK, 1, 1), (upload(d, stream),), stream=stream)
    # the values table is freed when this returns: CuPy's pool reuses it only for later work
    # on this stream, after the kernel read it
    return out
