"""``fn.slice``'s windows for a whole GPU batch at once: the rules of ``Slice.window`` and
``apply_bounds_policy`` (see ``slice.py``) as numpy operations over (samples, sliced axes)
arrays instead of a Python loop over the samples (64 samples cost ~3 ms of host time per batch
that way; the kernel takes ~0.1 ms).

Only the regular case is handled here: every sample's argument values of one size, of one
kind, finite, and every window valid. Anything else returns None and the caller runs the
per-sample rules, which raise the error a sample deserves (with the same message and sample
order as before).
"""

from __future__ import annotations

import numpy as np

from ._tensor_args import llround

_I64 = float(2**63)


def _stack(values, n: int) -> np.ndarray | None:
    """Per-sample values (a list of arrays, or ``graph.Rows``) stacked: (n, *sample shape);
    None when they differ in shape or type, or a sample has more than one axis."""
    arr = getattr(values, "array", None)
    if arr is None:
        if len({np.asarray(v).dtype for v in values}) != 1:
            return None
        try:
            arr = np.asarray(values)
        except ValueError:  # ragged
            return None
    if arr.dtype == object or arr.ndim > 2 or len(arr) != n:
        return None
    return arr


class _Irregular(Exception):
    """A sample needs the per-sample rules (they raise the error it deserves)."""


def named_bounds(vals: dict, ext: np.ndarray, check_non_negative) -> tuple:
    """(lo, hi) float64 of the window from the named arguments ``vals`` (start/rel_start,
    end/rel_end/shape/rel_shape: DALI's precedence) on extents ``ext``: one sample's (k,) or a
    batch's rows. ``check_non_negative(name, values)`` is called on a shape before it is used.
    ``Slice._named`` (per sample, raising) and :func:`batch_windows` share it."""
    lo = np.zeros_like(ext)
    if "start" in vals:
        lo = vals["start"]
    elif "rel_start" in vals:
        lo = vals["rel_start"] * ext
    if "end" in vals:
        hi = vals["end"]
    elif "rel_end" in vals:
        hi = vals["rel_end"] * ext
    elif "shape" in vals:
        check_non_negative("shape", vals["shape"])
        hi = lo + vals["shape"]
    elif "rel_shape" in vals:
        check_non_negative("rel_shape", vals["rel_shape"])
        if "rel_start" in vals:
            hi = (vals["rel_start"] + vals["rel_shape"]) * ext
        else:
            hi = lo + vals["rel_shape"] * ext
    else:
        hi = ext.copy()
    return lo, hi


def positional_bounds(a, s, ext, rel_a: bool, rel_s: bool) -> tuple:
    """(lo, hi) float64 of the window from the anchor ``a`` and shape ``s`` inputs (float64,
    relative to ``ext`` where ``rel_a`` / ``rel_s``); shared as :func:`named_bounds` is."""
    if rel_a and rel_s:
        return a * ext, (a + s) * ext
    a = a * ext if rel_a else a
    s = s * ext if rel_s else s
    return a, a + s


def _refuse_negative(name: str, v: np.ndarray) -> None:
    if (v < 0).any():
        raise _Irregular


def _named(op, ext: np.ndarray, args: dict) -> tuple | None:
    """(lo, hi) float64 (n, k) from the named arguments, as ``Slice._named`` per sample."""
    n, k = ext.shape
    vals = {name: v.reshape(1, -1) for name, v in op.named.items()}
    for name, v in args.items():
        rows = _stack(v, n)
        if rows is None or rows.dtype.kind not in "iufb":
            return None
        rows = rows.reshape(n, -1).astype(np.float64)
        if not np.isfinite(rows).all():
            return None
        if not name.startswith("rel_") and not (rows == np.round(rows)).all():
            return None
        vals[name] = rows
    if any(v.shape[1] != k for v in vals.values()):
        return None
    try:
        lo, hi = named_bounds(vals, ext, _refuse_negative)
    except _Irregular:
        return None
    return np.broadcast_to(lo, (n, k)), np.broadcast_to(hi, (n, k))


def _positional(op, ext: np.ndarray, anchors, shapes) -> tuple | None:
    """(lo, hi) float64 (n, k) from the anchor and shape inputs, as ``Slice._positional``."""
    n, k = ext.shape
    a, s = _stack(anchors, n), _stack(shapes, n)
    if a is None or s is None or a.shape != s.shape:
        return None
    a, s = a.reshape(n, -1), s.reshape(n, -1)
    if a.shape[1] != k:
        return None
    if a.dtype.kind != s.dtype.kind or a.dtype.kind not in "iuf":
        return None
    is_float = a.dtype.kind == "f"
    rel_a = is_float and op.normalized_anchor
    rel_s = is_float and op.normalized_shape
    return positional_bounds(a.astype(np.float64), s.astype(np.float64), ext, rel_a, rel_s)


def batch_windows(op, in_shapes: np.ndarray, inputs: tuple, args: dict) -> tuple | None:
    """(anchors, shapes), int64 (n, ndim), of every sample's window after the out-of-bounds
    policy, as ``op.sample_window`` gives them one by one; None when a sample needs the
    per-sample rules (an irregular argument or an invalid window: they raise).

    Args:
        op: the ``Slice`` operator.
        in_shapes: (n, ndim) the samples' shapes.
        inputs: the anchor and shape inputs (per-sample values), or ().
        args: the named argument inputs (per-sample values).
    """
    in_shapes = np.asarray(in_shapes, np.int64)
    n, ndim = in_shapes.shape
    axes = op._axes(ndim)
    ext = in_shapes[:, axes].astype(np.float64)
    if inputs:
        got = _positional(op, ext, *inputs)
    else:
        got = _named(op, ext, args)
    if got is None:
        return None
    lo, hi = got
    if not ((np.abs(lo) < _I64).all() and (np.abs(hi) < _I64).all()) or (hi < lo).any():
        return None
    anchor = np.zeros((n, ndim), np.int64)
    shape = in_shapes.copy()
    a, e = llround(lo), llround(hi)
    anchor[:, axes] = a
    shape[:, axes] = e - a
    if op.policy == "trim_to_shape":
        start = np.clip(anchor, 0, in_shapes)
        return start, np.clip(anchor + shape, 0, in_shapes) - start
    if op.policy == "error":
        end = anchor + shape
        if ((anchor < 0) | (anchor >= in_shapes) | (end < 0) | (end > in_shapes)).any():
            return None
    return anchor, shape
