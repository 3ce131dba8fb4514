"""Connected blobs of an N-D label map and their bounding boxes, in numpy (no SciPy needed).

DALI's ``LabelConnectedRegions`` (``dali/kernels/imgproc/structure/connected_components.h``):
elements are connected when they are neighbours along one axis (face connectivity: 4 in 2-D,
6 in 3-D) and hold the same label; ``background`` elements belong to no blob. Blobs are
numbered by their first element in C order (DALI's disjoint sets keep the lowest index as the
root), which is the order random_object_bbox picks from.

How: runs of equal labels along the last axis are the nodes (a mask has far fewer runs than
elements); runs that touch in neighbouring rows along any other axis are joined by a
vectorised union-find (hooking to the lower root, then pointer jumping); a blob's box is the
union of its runs' boxes.
"""

from __future__ import annotations

import numpy as np


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Root (the lowest member) of each of ``n`` nodes joined by the edges ``a[i] - b[i]``."""
    parent = np.arange(n, dtype=np.int64)
    while a.size:
        ra, rb = parent[a], parent[b]
        differ = ra != rb
        if not differ.any():
            break
        a, b, ra, rb = a[differ], b[differ], ra[differ], rb[differ]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while True:  # pointer jumping: every node points at its root again
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt
    return parent


def object_boxes(labels: np.ndarray, background) -> np.ndarray:
    """Bounding boxes of the connected blobs of equal, non-``background`` labels.

    Args:
        labels: an N-D array (N >= 1) of labels (any integer or bool type).
        background: the label that belongs to no blob.

    Returns:
        An int64 array of shape (blobs, 2, N): ``[k, 0]`` the first and ``[k, 1]`` the
        one-past-last coordinates of blob ``k``, blobs ordered by their first element in C order.
    """
    x = np.asarray(labels)
    ndim = x.ndim
    if ndim == 0:
        x = x.reshape(1)
        ndim = 1
    if x.size == 0:
        return np.zeros((0, 2, ndim), np.int64)
    length = x.shape[-1]
    flat = x.reshape(-1)
    fg = flat != background
    col = np.arange(flat.size, dtype=np.int64) % length
    prev_same = np.zeros(flat.size, bool)
    prev_same[1:] = flat[1:] == flat[:-1]
    starts = fg & ((col == 0) | ~prev_same)
    next_same = np.zeros(flat.size, bool)
    next_same[:-1] = prev_same[1:]
    ends = fg & ((col == length - 1) | ~next_same)
    run_start = np.flatnonzero(starts)
    run_end = np.flatnonzero(ends) + 1
    nruns = run_start.size
    if nruns == 0:
        return np.zeros((0, 2, ndim), np.int64)
    run_id = np.cumsum(starts, dtype=np.int64) - 1
    run_id = np.where(fg, run_id, -1).reshape(x.shape)
    # edges between runs that touch along the axes other than the last
    ea, eb = [], []
    for axis in range(ndim - 1):
        if x.shape[axis] < 2:
            continue
        lo = [slice(None)] * ndim
        hi = [slice(None)] * ndim
        lo[axis], hi[axis] = slice(0, -1), slice(1, None)
        lo, hi = tuple(lo), tuple(hi)
        touch = (x[lo] == x[hi]) & (run_id[lo] >= 0)
        a, b = run_id[lo][touch], run_id[hi][touch]
        if a.size:  # neighbouring elements of the same two runs repeat: keep one of each
            keep = np.ones(a.size, bool)
            keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
            ea.append(a[keep])
            eb.append(b[keep])
    a = np.concatenate(ea) if ea else np.zeros(0, np.int64)
    b = np.concatenate(eb) if eb else np.zeros(0, np.int64)
    root = _components(nruns, a, b)
    # the runs' boxes: the row's coordinates (one element thick), and [start, end) along the last
    rows = (
        np.stack(np.unravel_index(run_start // length, x.shape[:-1]), axis=1)
        if ndim > 1
        else (np.zeros((nruns, 0), np.int64))
    )
    lo = np.concatenate([rows, (run_start % length)[:, None]], axis=1)
    hi = np.concatenate([rows + 1, ((run_end - 1) % length + 1)[:, None]], axis=1)
    order = np.argsort(root, kind="stable")
    root_sorted = root[order]
    first = np.flatnonzero(np.r_[True, root_sorted[1:] != root_sorted[:-1]])
    box_lo = np.minimum.reduceat(lo[order], first, axis=0)
    box_hi = np.maximum.reduceat(hi[order], first, axis=0)
    return np.stack([box_lo, box_hi], axis=1).astype(np.int64)
