"""The GPU side of ``fn.normalize`` (see ``normalize.py`` for the arithmetic it reproduces).

Per batch: the mean is given (a scalar, or per-sample tensors uploaded in one copy) or reduced
on the GPU (``reductions`` kernel, one launch); the deviation likewise, or reduced as sums of
squared differences from that mean (one launch); then one elementwise launch writes the output,
computing ``inv = scale / sqrt(var + epsilon)`` per element in float32 as the CPU side does.
When both statistics are reduced per sample (the speech features' normalize), the three
launches' descriptors go up in one copy (``kernels.normalize.normalize_reduced_batch``).
With ``batch=True`` the per-sample sums are added over the batch on the GPU (a few small
launches). The one case the reduction kernel cannot take, a given mean tensor that varies
along a reduced axis, falls back to CuPy array operations per sample.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import ArgumentError

# (this module is imported on the first GPU batch: the launchers once here rather than four
# import statements a batch)
from ..kernels._batch import alloc_batch, as_samples
from ..kernels.normalize import (
    OUT_TYPES,
    normalize_apply_batch,
    normalize_reduced_batch,
    upload_params,
)
from ..kernels.reduce import reduce_batch


def _host_param(op, args: dict, name: str, shape) -> np.ndarray | None:
    if getattr(op, name) is None and name not in args:  # computed from the data
        return None
    x = SimpleNamespace(ndim=len(shape), shape=tuple(int(v) for v in shape))
    v = op._given(args, name, x)
    if v is None:
        return None
    return np.asarray(v, np.float32).reshape(v.shape if v.ndim else (1,) * len(shape))


def normalize_gpu(op, samples, args: dict, stream):
    """``fn.normalize(device="gpu")`` on a batch (a SampleList); returns the output batch."""
    s = as_samples(samples)
    n = len(s)
    if op.dtype not in OUT_TYPES:
        raise ArgumentError(f"{op.schema}: dtype={op.dtype} is not supported on the GPU")
    if n == 0:
        return alloc_batch(np.zeros((0, 0), np.int64), op.dtype, s.device_id)
    ndim = s.shapes.shape[1]
    # No per-sample arguments, and one shape or parameters that are scalars (or computed):
    # the same parameters for every sample, checked and uploaded once.
    scalars = all(p is None or p.ndim == 0 for p in (op.mean, op.stddev))
    uniform = not args and (scalars or s.is_uniform())
    if uniform:
        means = [_host_param(op, {}, "mean", s.shapes[0])] * n
        devs = [_host_param(op, {}, "stddev", s.shapes[0])] * n
    else:
        per = [{k: v[i] for k, v in args.items()} for i in range(n)]
        means = [_host_param(op, per[i], "mean", s.shapes[i]) for i in range(n)]
        devs = [_host_param(op, per[i], "stddev", s.shapes[i]) for i in range(n)]
    if op.batch:
        axes = op._reduced_axes(ndim, ())
        kept = [d for d in range(ndim) if d not in axes]
        if (s.shapes[:, kept] != s.shapes[0, kept]).any():
            raise ArgumentError(
                f"{op.schema}: batch=True needs equal extents in the non-reduced axes {kept}; "
                f"got shapes {s.shape_list()}"
            )
    else:
        axes = op._reduced_axes(ndim, (means[0], devs[0]))
    keep, counts = _keep_and_counts(s.shapes, axes)
    if means[0] is None and devs[0] is None and not op.batch:  # both from each sample's data
        return normalize_reduced_batch(s, op.dtype, axes, keep, counts, op.scale, op.shift,
                                       op.epsilon, op.ddof, stream=stream)  # fmt: skip

    # the given statistics (mean, then deviation) go up in one copy
    given = iter(_upload([p for p in (means, devs) if p[0] is not None], uniform, n, stream))

    # --- the mean ------------------------------------------------------------------------------
    if means[0] is None:
        if op.batch:
            sums = reduce_batch(s, axes, "sum", np.float64, keep, np.ones(n), 0.0, stream=stream)
            with stream:
                total = sums.to_dense().sum(axis=0)
                mean_arr = (total / max(int(counts.sum()), 1)).astype(np.float32)
            mean_ptrs = np.full(n, mean_arr.data.ptr, np.uint64)
            mean_shapes = np.tile(keep[0], (n, 1))
            mean_batch = [mean_arr] * n
        else:
            norms = 1.0 / np.maximum(counts, 1)
            mean_batch = reduce_batch(s, axes, "mean", np.float32, keep, norms, 0.0, stream=stream)
            mean_ptrs, mean_shapes = mean_batch.ptrs, keep
    else:
        mean_buf, mean_ptrs, mean_shapes = next(given)
        mean_batch = None

    # --- the deviation ---------------------------------------------------------------------------
    if devs[0] is None:
        dev_is_sumsq = True
        dev_shapes = keep
        if mean_batch is None:  # a given mean: one value per statistic, if it fits
            fits = all(
                np.all((m.shape == k) | (np.asarray(m.shape) == 1))
                for m, k in zip(means, keep, strict=True)
            )
            if fits:
                expanded = [np.broadcast_to(m, tuple(k)) for m, k in zip(means, keep, strict=True)]
                mbuf, mptrs = upload_params(expanded, np.float32, stream)
                mean_batch = _views(mbuf, mptrs, keep, s.device_id)
        if mean_batch is None:
            sumsq = _sumsq_fallback(s, means, axes, stream)
        else:
            sumsq = reduce_batch(
                s, axes, "variance", np.float64, keep, np.ones(n), 0.0, mean_batch, stream=stream
            )
        if op.batch:
            with stream:
                total = sumsq.to_dense().sum(axis=0)
            dev_ptrs = np.full(n, total.data.ptr, np.uint64)
            dev_shapes = np.tile(keep[0], (n, 1))
            counts = np.full(n, int(counts.sum()), np.int64)
        else:
            dev_ptrs = sumsq.ptrs
    else:
        dev_is_sumsq = False
        dev_buf, dev_ptrs, dev_shapes = next(given)

    out = normalize_apply_batch(
        s,
        op.dtype,
        dict(
            mean_ptrs=mean_ptrs,
            mean_shapes=mean_shapes,
            dev_ptrs=dev_ptrs,
            dev_shapes=dev_shapes,
            dev_is_sumsq=dev_is_sumsq,
            counts=counts,
        ),
        op.scale,
        op.shift,
        op.epsilon,
        op.ddof,
        stream=stream,
    )
    # The statistics (mean_buf, dev_buf, ...) are freed when this returns, not before the
    # launch; CuPy's pool reuses their memory only for later work on this stream, so the
    # kernel has read them by then.
    return out


def _keep_and_counts(shapes: np.ndarray, axes) -> tuple[np.ndarray, np.ndarray]:
    """Per sample of ``shapes`` (N, ndim): the statistics' shape (the reduced ``axes`` of
    extent 1) and the number of elements each statistic reduces."""
    axes = list(axes)
    keep = np.array(shapes, np.int64)
    if len(axes) == 1:  # (one reduced axis, the speech features' time: its extents are the counts)
        counts = keep[:, axes[0]].copy()
        keep[:, axes[0]] = 1
        return keep, counts
    keep[:, axes] = 1
    return keep, np.prod(shapes[:, axes], axis=1, dtype=np.int64)


def _upload(groups: list[list], uniform: bool, n: int, stream) -> list[tuple]:
    """Per-sample float32 parameters (``groups``: lists of one array per sample) in one device
    buffer: per group (buffer, addresses, shapes). With ``uniform`` every sample has the same
    parameters: one copy each, pointed at by every sample."""
    if not groups:
        return []
    chosen = [g[:1] if uniform else g for g in groups]
    buf, ptrs = upload_params([p for g in chosen for p in g], np.float32, stream)
    out, k = [], 0
    for g in chosen:
        p, k = ptrs[k : k + len(g)], k + len(g)
        if uniform:
            out.append((buf, np.full(n, p[0], np.uint64), np.tile(g[0].shape, (n, 1))))
        else:
            out.append((buf, p, np.array([q.shape for q in g], np.int64)))
    return out


def _views(buf, ptrs, shapes, device_id):
    """A batch of float32 arrays at ``ptrs`` inside ``buf`` (one upload)."""
    from ..kernels.layout import c_strides
    from ..tensors_gpu import SampleList

    return SampleList(np.float32, ptrs, shapes, c_strides(shapes), buf, device_id)


def _sumsq_fallback(s, means, axes, stream):
    """Sums of squared differences from a given mean that varies along a reduced axis: CuPy
    array operations per sample (a rare configuration)."""
    import cupy

    from ..tensors_gpu import SampleList

    outs = []
    with stream:
        for i in range(len(s)):
            x = s[i].astype(cupy.float64)
            d = x - cupy.asarray(means[i], dtype=cupy.float32).astype(cupy.float64)
            outs.append((d * d).sum(axis=tuple(axes), keepdims=True))
    return SampleList.from_arrays(outs, s.device_id)
