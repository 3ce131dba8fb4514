"""GPU ``fn.noise.*`` (``noise.cu``): one launch per batch, the same random numbers as the CPU
implementation (``operators/_noise.py``) for the same per-sample seeds."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

NOISE_DESC = np.dtype(
    [
        ("in_ptr", "<i8"),
        ("out_ptr", "<i8"),
        ("n", "<i8"),
        ("seed", "<u8"),
        ("inner", "<i8"),
        ("channels", "<i8"),
        ("p", "<f8", (4,)),
    ]
)
_MODES = {"gaussian": 0, "salt_and_pepper": 1, "shot": 2}


@functools.cache
def _get_noise_kernel(dtype, mode: int, device_id: int):
    return get_function("noise.cu", f"noise<{ctype(dtype)}, {mode}>", device_id)


def noise_descriptors(in_ptrs, out_ptrs, shapes, seeds, kind: str, params, axis=None):
    """One ``NoiseDesc`` per sample. ``params`` per sample: (mean, stddev) for gaussian;
    (prob, salt_vs_pepper, salt, pepper) for salt_and_pepper; (factor,) for shot. ``axis``:
    the channel axis sharing one draw (salt and pepper), or None."""
    n = len(seeds)
    d = np.zeros(n, NOISE_DESC)
    d["in_ptr"], d["out_ptr"] = in_ptrs, out_ptrs
    d["seed"] = np.asarray(seeds, np.int64).view(np.uint64)
    d["inner"], d["channels"] = 1, 1
    for i in range(n):
        shape = [int(v) for v in shapes[i]]
        d["n"][i] = int(np.prod(shape))
        p = params[i]
        if kind == "salt_and_pepper":
            prob = np.float32(p[0])
            salt_p = np.float32(prob * np.float32(p[1]))  # as the CPU compares, in float32
            d["p"][i] = [float(prob), float(salt_p), float(p[2]), float(p[3])]
            if axis is not None and shape:
                d["inner"][i] = int(np.prod(shape[axis + 1 :]))
                d["channels"][i] = shape[axis]
        else:
            d["p"][i, : len(p)] = p
    return d


@stream_scoped
def noise_batch(inputs, kind: str, seeds, params, axis=None, stream=None):
    """Apply noise ``kind`` to every sample (see :func:`noise_descriptors`); returns a
    SampleList of the input's type and shapes."""
    import cupy

    from ..errors import ArgumentError
    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    if n == 0:
        return s
    try:
        k = _get_noise_kernel(s.dtype, _MODES[kind], s.device_id)
    except TypeError as e:
        raise ArgumentError(f"noise.{kind} on the GPU: {e}") from None
    if not all(a.flags.c_contiguous for a in s):
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    out = alloc_batch(s.shapes, s.dtype, s.device_id)
    d = noise_descriptors(
        s.ptrs.view(np.int64), out.ptrs.view(np.int64), s.shapes, seeds, kind, params, axis
    )
    block = 256
    grid = (max(1, min(int((d["n"].max() + block - 1) // block), 8192)), 1, n)
    k(grid, (block, 1, 1), (upload(d.view(np.uint8), stream),), stream=stream)
    return out
