"""Boxes and windows of ``fn.random_bbox_crop``: box layouts read and written, overlaps and
kept boxes, boxes mapped into a window, all in DALI's float32 order of operations; ``f32``
rounding of Python floats for the candidate windows drawn on floats."""

from __future__ import annotations

import math
import struct

import numpy as np

from ..errors import ArgumentError

WHO = "random_bbox_crop"
F = np.float32
START_END = {2: "xyXY", 3: "xyzXYZ"}
START_SHAPE = {2: "xyWH", 3: "xyzWHD"}
SHAPE_LAYOUT = {2: "WH", 3: "WHD"}
_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """``x`` rounded to the nearest float32, as a Python float (``float(np.float32(x))`` in a
    fifth of the time). A float32 ``+ - * /`` is the float64 operation rounded this way (float64
    has more than twice float32's precision, so the double rounding is exact)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond float32's range: what the cast gives
        return math.copysign(math.inf, x)


def is_permutation(layout: str, of: str) -> bool:
    return len(layout) == len(of) and sorted(layout) == sorted(of)


def parse_bbox_layout(layout: str, ndim: int) -> tuple[list[int], bool]:
    """(index of each canonical coordinate in the layout, whether it holds extents): canonical
    order is x, y, (z), then X, Y, (Z) or W, H, (D)."""
    for canon, shape in ((START_END[ndim], False), (START_SHAPE[ndim], True)):
        if is_permutation(layout, canon):
            return [layout.index(c) for c in canon], shape
    raise ArgumentError(
        f"{WHO}: bbox_layout={layout!r} should be a permutation of {START_END[ndim]!r} or "
        f"{START_SHAPE[ndim]!r} for boxes of {2 * ndim} coordinates"
    )


def read_boxes(rows: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) corners, (N, ndim) float32 each, of boxes in ``layout``; every box must lie in
    [0, 1] (DALI checks it)."""
    ndim = rows.shape[1] // 2
    perm, has_shape = parse_bbox_layout(layout, ndim)
    canon = rows[:, perm]
    lo, hi = canon[:, :ndim].copy(), canon[:, ndim:].copy()
    if has_shape:
        hi = (hi + lo).astype(F)
    bad = ~((lo >= 0) & (hi <= 1)).all(axis=1)
    if bad.any():
        i = int(np.nonzero(bad)[0][0])
        raise ArgumentError(
            f"{WHO}: box {i} {rows[i].tolist()} (bbox_layout={layout!r}) is out of bounds "
            f"[0, 1]: boxes must be relative coordinates"
        )
    return lo, hi


def write_boxes(lo: np.ndarray, hi: np.ndarray, layout: str) -> np.ndarray:
    ndim = lo.shape[1]
    perm, has_shape = parse_bbox_layout(layout, ndim)
    canon = np.concatenate([lo, (hi - lo).astype(F) if has_shape else hi], axis=1)
    out = np.empty_like(canon)
    out[:, perm] = canon
    return out.astype(F)


def volume(extent: np.ndarray) -> np.ndarray:
    """Product of the extents along the last axis, in float32, in order (DALI's volume); a
    new array."""
    v = extent[..., 0] * extent[..., 1]
    for d in range(2, extent.shape[-1]):
        v *= extent[..., d]
    return v.astype(F, copy=False)


def overlap_metrics(crop_lo, crop_hi, lo, hi, metric: str, box_vol=None) -> np.ndarray:
    """IoU of each box with the window, or (``"overlap"``) the share of its area inside it.

    All float32 (``lo``, ``hi``: (N, ndim); the window: (ndim,)); ``box_vol`` is
    ``volume(hi - lo)``, given when the caller has it."""
    ilo = np.maximum(lo, crop_lo)
    ihi = np.minimum(hi, crop_hi)
    ext = np.subtract(ihi, ilo, dtype=F)
    disjoint = (ext <= 0).any(axis=1)
    inter = volume(ext)
    inter[disjoint] = 0
    if box_vol is None:
        box_vol = volume(np.subtract(hi, lo, dtype=F))
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "overlap":
            return np.divide(inter, box_vol, dtype=F)
        crop_vol = volume(np.subtract(crop_hi, crop_lo, dtype=F)[None])[0]
        out = np.divide(inter, (crop_vol + box_vol) - inter, dtype=F)
    out[inter == 0] = 0
    return out


def keep_boxes(crop_lo, crop_hi, lo, hi, prune_threshold: float | None) -> np.ndarray:
    """Indices of the boxes the window keeps: centroid in [lo, hi) of the window, or, with a
    prune threshold, a nonzero intersection holding at least that share of the box's area."""
    if prune_threshold is None:
        centroid = ((lo + hi) * F(0.5)).astype(F)
        inside = ((centroid >= crop_lo) & (centroid < crop_hi)).all(axis=1)
        return np.nonzero(inside)[0]
    ratio = overlap_metrics(crop_lo, crop_hi, lo, hi, "overlap")
    ilo = np.maximum(lo, crop_lo)
    ihi = np.minimum(hi, crop_hi)
    nonzero = ~(ihi <= ilo).any(axis=1)
    return np.nonzero(nonzero & (ratio >= F(prune_threshold)))[0]


def remap_boxes(crop_lo, crop_hi, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Boxes in the window's coordinates, clamped to [0, 1] (DALI's ``RemapBox``)."""
    extent = (crop_hi - crop_lo).astype(F)
    start = ((np.maximum(crop_lo, lo) - crop_lo) / extent).astype(F)
    end = ((np.minimum(crop_hi, hi) - crop_lo) / extent).astype(F)
    return np.clip(start, 0, 1).astype(F), np.clip(end, 0, 1).astype(F)


def div32(a: float, b: float) -> float:
    """float32 ``a / b`` of two float32 values (inf or nan on a zero divisor, as numpy)."""
    if b == 0:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1, b)
    return f32(a / b)
