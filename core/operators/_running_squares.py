"""DALI's float32 running sums of squares (``nonsilent_region``'s short-term powers), interval by
interval, and the region they give, emulating only the intervals that decide it.

DALI's CPU kernel (``dali/kernels/signal/moving_mean_square.cc``, as DALI 2.4 computes it) keeps
one float32 running sum per interval of ``every`` samples: at the interval's first sample the
window's squares summed in order, then per sample the square that left the window subtracted
and the new one added, each rounded to float32. A row of those terms has serial prefix sums
(numpy's ``cumsum``, a running float32 sum) that are the kernel's sums value for value; numpy
scans them at ~4 ns a term, two terms per sample (~1.7 ms for an 8 s utterance, 5x DALI).

A region needs few of them: the first and the last interval that reach the threshold, and the
largest power (the default reference) only as far as it moves those two. Per interval, block
sums of the squares (``W / parts``-sample blocks; float32 sums, float64 prefix sums, a margin
for their rounding) bound the exact window sums from above (any window lies within ``parts + 1`` blocks) and below (the windows that end at a
block's end are whole blocks), and ``2 u (W + 2 every)`` times the largest bounds how far the
float32 running sum drifts from them (``u = 2**-24``: one rounding per term, each at most
``u`` of a partial sum no larger than the interval's largest window sum). Intervals that cannot
reach the threshold are skipped; the first and last that can are emulated; the largest power
is emulated only when its bounds leave the first or last sample undecided (BENCHMARKS.md,
"Speech: the CPU chain and the GIL").
"""

from __future__ import annotations

import numpy as np

__all__ = ["RunningSquares", "float_region"]

_U = 2.0**-24  # float32's unit roundoff
_ONES: dict[int, np.ndarray] = {}


def _ones(b: int) -> np.ndarray:
    """float32 ones of length ``b`` (made once): the block sums' BLAS operand."""
    if b not in _ONES:
        _ONES[b] = np.ones(b, np.float32)
    return _ONES[b]


class RunningSquares:
    """The float32 squares of 1-D ``x``, laid out for DALI's running sums over intervals of
    ``every`` samples with windows of ``window`` samples (``window <= min(x.size, every)``)."""

    def __init__(self, x: np.ndarray, window: int, every: int):
        n = x.size
        self.n, self.window, self.every = n, window, every
        self.rows = rows = -(-n // every)
        self.mean = np.float32(1.0 / window)
        # sq[p] at padded[p + window]: zeros before the signal (the cut first windows, nothing
        # to subtract yet) and after it (the last row's samples that do not exist)
        self.padded = padded = np.zeros(rows * every + window + 1, np.float32)
        np.square(x, out=padded[window : window + n], dtype=np.float32)
        # row r: padded[1 + r * every :][: window + every - 1], the window ending at the row's
        # first sample, then the squares that enter (the ones that leave start the row too)
        self._terms = np.lib.stride_tricks.as_strided(
            padded[1:], (rows, window + every - 1), (every * 4, 4)
        )

    def powers(self, rows=None) -> np.ndarray:
        """The kernel's float32 mean squares of ``rows`` (a list of row indices; all when None),
        shape (len(rows), every); past the signal's end the values are meaningless."""
        w, every = self.window, self.every
        src = self._terms if rows is None else self._terms[rows]
        terms = np.empty((src.shape[0], w + 2 * (every - 1)), np.float32)
        terms[:, :w] = src[:, :w]  # the fresh window, summed in order
        np.negative(src[:, : every - 1], out=terms[:, w::2])  # - the square that leaves,
        terms[:, w + 1 :: 2] = src[:, w:]  # then + the one that enters
        terms.cumsum(axis=1, out=terms)  # methods, not np.* wrappers: fewer Python calls
        out = terms[:, w - 1 :: 2]
        out *= self.mean
        return out

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per row, float64 (lo, hi): every kernel power of the row is <= hi, and one of them
        (inside the signal) is >= lo; None when no block size tiles both the window and the
        intervals (then every row is emulated)."""
        w, every, rows, n = self.window, self.every, self.rows, self.n
        fits = (k for k in (256, 64, 16) if w % k == 0 and w // k >= 4 and every % (w // k) == 0)
        parts = next(fits, 0)
        if not parts:
            return None
        b = w // parts
        sq = self.padded[w : w + rows * every].reshape(-1, b)
        cs = np.zeros(sq.shape[0] + parts + 1)
        # float32 block sums (one BLAS product: ~7x numpy's reduce over short rows), within
        # b * u of exact; then float64 prefix sums
        (sq @ _ones(b)).cumsum(out=cs[parts + 1 :], dtype=np.float64)
        # windows ending in block j lie within blocks j - parts .. j; the window ending at
        # block j's last sample is blocks j - parts + 1 .. j (j >= parts - 1, inside x)
        upper = cs[parts + 1 :] - cs[: -parts - 1]
        lower = cs[parts + 1 :] - cs[1:-parts]
        lower[: parts - 1] = 0.0
        lower[n // b :] = 0.0
        upper = upper.reshape(rows, -1).max(axis=1) * (1 + 1e-5)
        lower = lower.reshape(rows, -1).max(axis=1) * (1 - 1e-5)
        drift = 2 * _U * (w + 2 * every) * upper
        scale = float(self.mean)
        return (lower - drift) * scale * (1 - 4 * _U), (upper + drift) * scale * (1 + 4 * _U)


def float_region(
    x: np.ndarray, window: int, every: int, cutoff_db: float, reference: float | None
) -> tuple[int, int] | None:
    """(first, last) sample whose kernel power reaches the threshold (the reference, or the
    largest power, times ``10 ** (cutoff_db / 10)``, in float32), or None when none does."""
    rs = RunningSquares(x, window, every)
    n, every = rs.n, rs.every
    factor = np.float32(10) ** (np.float32(cutoff_db) * np.float32(0.1))
    bounds = rs.bounds() if rs.rows >= 3 else None
    if bounds is None:
        mms = rs.powers().reshape(-1)[:n]
        ref = mms.max() if reference is None else np.float32(reference)
        above = np.flatnonzero(mms >= np.float32(ref) * factor)
        return (int(above[0]), int(above[-1])) if above.size else None
    lo, hi = bounds
    rows = _Rows(rs)
    exact = [None if reference is None else np.float32(reference) * factor]

    def threshold():
        if exact[0] is None:
            exact[0] = rows.largest((hi >= lo.max()).nonzero()[0]) * factor
        return exact[0]

    # the threshold lies within [t_lo, t_hi] (the largest power's bounds, float32 products)
    if exact[0] is None:
        f = float(factor)
        t_lo, t_hi = lo.max() * f * (1 - 2 * _U), hi.max() * f * (1 + 2 * _U)
    else:
        t_lo = t_hi = float(exact[0])

    def find(order, pick) -> int | None:
        for r in order:
            vals = rows.get(int(r))
            if exact[0] is None:
                (maybe,) = (vals >= t_lo).nonzero()
                if not maybe.size:
                    continue
                (sure,) = (vals >= t_hi).nonzero()
                if sure.size and pick(maybe) == pick(sure):
                    return int(r) * every + int(pick(sure))
            (hits,) = (vals >= threshold()).nonzero()
            if hits.size:
                return int(r) * every + int(pick(hits))
        return None

    (loud,) = (hi >= t_lo).nonzero()  # the others stay below the threshold throughout
    first = find(loud, lambda h: h[0])
    if first is None:
        return None
    return first, find(loud[::-1], lambda h: h[-1])


class _Rows:
    """The rows of a :class:`RunningSquares` emulated so far (each once), cut at the signal."""

    def __init__(self, rs: RunningSquares):
        self.rs, self.done = rs, {}

    def get(self, r: int) -> np.ndarray:
        if r not in self.done:
            self._emulate([r])
        return self.done[r]

    def largest(self, candidates) -> np.float32:
        """The largest power of ``candidates``, the rows that may hold the signal's largest."""
        self._emulate([int(r) for r in candidates if int(r) not in self.done])
        return max(self.done[int(r)].max() for r in candidates)

    def _emulate(self, which: list[int]) -> None:
        if which:
            rs = self.rs
            for r, vals in zip(which, rs.powers(which), strict=True):
                self.done[r] = vals[: rs.n - r * rs.every]  # the last row ends with the signal
