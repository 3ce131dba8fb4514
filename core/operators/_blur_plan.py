"""The windows of a GPU ``fn.gaussian_blur`` batch, made once per distinct (sigma, window_size)
set rather than once per sample (``WindowPlan``), and many sets' windows computed together
with numpy (``window_sets``), with the arithmetic of ``gaussian_window`` / ``blur_windows``
(``gaussian_blur.py``) so that the taps are bit for bit the same.

Without argument inputs the plan is the operator's (made at the first batch); with per-sample
sigmas it is made per batch, from the batch's distinct rows. Making each sample's windows in
Python cost ~30 us a sample (2 ms for 64 samples).
"""

from __future__ import annotations

import numpy as np

__all__ = ["WindowPlan", "batch_plan", "gaussian_windows", "window_sets"]


class WindowPlan:
    """Distinct sets of windows (one float32 window per data axis each), end to end in one
    array for the kernel.

    Attributes:
        flat: float32, every set's windows, outermost axis first.
        offs: int64 (sets, 3, 2): per set and axis (d, h, w), the window's (offset in
            ``flat``, size); (0, 1) for the axes the data lacks.
    """

    __slots__ = ("flat", "offs")

    def __init__(self, flat: np.ndarray, offs: np.ndarray):
        self.flat = flat
        self.offs = offs

    @classmethod
    def of_sets(cls, sets: list[list[np.ndarray]], axes: int) -> WindowPlan:
        """The plan of ``sets``: per set, its windows, outermost data axis first."""
        offs = np.zeros((len(sets), 3, 2), np.int64)
        offs[:, :, 1] = 1
        flat, pos = [], 0
        for k, windows in enumerate(sets):
            for a, w in enumerate(windows):
                offs[k, 3 - axes + a] = (pos, w.size)
                flat.append(w)
                pos += w.size
        return cls(np.concatenate(flat).astype(np.float32), offs)


def gaussian_windows(sigmas: np.ndarray, size: int) -> np.ndarray:
    """``gaussian_window(sigma, size)`` for every value of ``sigmas`` at once: (m, size)
    float32, the same float32 operations in the same order (the sum of the half taps
    sequential, as DALI sums)."""
    f32 = np.float32
    sig = np.asarray(sigmas, np.float64).astype(f32).reshape(-1, 1)
    r = (size - 1) // 2
    exp_scale = f32(0.5) / (sig * sig)
    x = np.arange(-r, 0)
    half = np.exp(-((x * x).astype(f32) * exp_scale)).astype(f32)
    total = np.zeros(len(sig), f32)
    for k in range(r):
        total = (total + half[:, k]).astype(f32)
    total = ((total * f32(2.0)).astype(f32) + f32(1.0)).astype(f32)
    scale = (f32(1) / total).astype(f32)[:, None]
    half = half * scale
    return np.concatenate([half, scale, half[:, ::-1]], axis=1).astype(f32)


def _per_axis(values: np.ndarray, axes: int) -> np.ndarray | None:
    """(m, k) values as (m, axes): one value repeated, or one per axis; None otherwise."""
    if values.shape[1] == 1:
        return np.repeat(values, axes, axis=1)
    return values if values.shape[1] == axes else None


def window_sets(sigmas: np.ndarray, sizes: np.ndarray, axes: int) -> tuple:
    """The plan of ``blur_windows(who, sigmas[k], sizes[k], axes)`` for every row ``k`` (set
    ``k``), computed together: (the plan, -1), or (None, the first row that ``blur_windows``
    refuses: the caller has it raise its error).

    Args:
        sigmas, sizes: (m, 1 or axes) float64 values, as the operator holds them.
        axes: the number of data axes.
    """
    s, w = _per_axis(sigmas, axes), _per_axis(sizes, axes)
    if s is None or w is None:
        return None, 0
    w = np.round(w)
    bad = ~np.isfinite(s) | ~np.isfinite(w) | (s < 0) | (w < 0) | ((s == 0) & (w == 0))
    if not bad.any():
        w = w.astype(np.int64)
        s = s.copy()
        derive_w = w == 0
        w[derive_w] = 2 * np.ceil(s[derive_w].astype(np.float32) * np.float32(3)) + 1
        derive_s = (s == 0) & ~derive_w
        s[derive_s] = (((w[derive_s] - 1) // 2 - 1) * 0.3 + 0.8).astype(np.float32)
        bad = w % 2 == 0
    if bad.any():
        return None, int(np.flatnonzero(bad.any(axis=1))[0])
    offs = np.zeros((len(s), 3, 2), np.int64)
    offs[:, :, 1] = 1
    flat, pos = [], 0
    for size in np.unique(w):  # the windows of one size together, end to end
        rows, cols = np.nonzero(w == size)
        flat.append(gaussian_windows(s[rows, cols], int(size)).reshape(-1))
        offs[rows, 3 - axes + cols, 0] = pos + np.arange(len(rows)) * size
        offs[rows, 3 - axes + cols, 1] = size
        pos += len(rows) * int(size)
    return WindowPlan(np.concatenate(flat), offs), -1


def _stacked(values, n: int) -> np.ndarray | None:
    """Per-sample argument values as (n, k) float64; None when they differ in size."""
    arr = getattr(values, "array", None)
    try:
        arr = np.asarray(values if arr is None else arr, np.float64)
    except (TypeError, ValueError):
        return None
    return arr.reshape(n, -1) if arr.size and arr.ndim <= 2 and len(arr) == n else None


def batch_plan(op, args: dict, n: int, axes: int) -> tuple[WindowPlan, np.ndarray]:
    """(the plan, each sample's set in it) of a batch of ``n`` samples with ``axes`` data
    axes; ``args`` are the operator's per-sample argument inputs (sigma, window_size)."""
    if not args:
        plan = op._plans.get(axes)
        if plan is None:
            plan = op._plans[axes] = WindowPlan.of_sets([op.sample_windows({}, axes)], axes)
        return plan, np.zeros(n, np.int64)
    cols = []
    for name in ("sigma", "window_size"):
        v = _stacked(args[name], n) if name in args else getattr(op, name).reshape(1, -1)
        if v is None:  # values of different sizes: each sample's own windows
            sets = [op.sample_windows({k: v[i] for k, v in args.items()}, axes) for i in range(n)]
            return WindowPlan.of_sets(sets, axes), np.arange(n)
        cols.append(np.broadcast_to(v, (n, v.shape[1])))
    keys = np.concatenate(cols, axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # the distinct rows in the batch's order (errors as before)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rows = keys[first[order]]
    nsig = cols[0].shape[1]
    plan, bad = window_sets(rows[:, :nsig], rows[:, nsig:], axes)
    if plan is None:  # the first sample of that row raises, as it would alone
        i = int(first[order[bad]])
        op.sample_windows({k: v[i] for k, v in args.items()}, axes)
        raise AssertionError(f"{op.schema}: sample {i}'s windows were expected to fail")
    return plan, rank[inverse.reshape(-1)]
