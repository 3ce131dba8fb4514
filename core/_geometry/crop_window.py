"""DALI's random crop window (``dali/util/random_crop_generator.cc``, newer version), shared by
``decoders.image_random_crop`` and ``random_resized_crop`` on CPU and GPU.

The random numbers are drawn up front, sequentially per batch (``draw``), so the window of a
sample does not depend on which thread decodes it; ``window`` is then a pure function of the
image shape and those numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError


class RandomCropWindow:
    """``random_area`` (share of the area), ``random_aspect_ratio`` (w/h), ``num_attempts``."""

    def __init__(
        self,
        random_area: Sequence[float] = (0.08, 1.0),
        random_aspect_ratio: Sequence[float] = (3 / 4, 4 / 3),
        num_attempts: int = 10,
        who: str = "random crop",
    ):
        area = _pair(random_area, "random_area", who)
        ratio = _pair(random_aspect_ratio, "random_aspect_ratio", who)
        if not 0 < area[0] <= area[1]:
            raise ArgumentError(
                f"{who}: random_area={list(random_area)} must satisfy 0 < min <= max"
            )
        if not 0 < ratio[0] <= ratio[1]:
            raise ArgumentError(
                f"{who}: random_aspect_ratio={list(random_aspect_ratio)} must satisfy 0 < min <= max"
            )
        if int(num_attempts) < 1:
            raise ArgumentError(f"{who}: num_attempts={num_attempts} must be >= 1")
        self.area = area
        self.ratio = ratio
        self.attempts = int(num_attempts)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Uniform numbers for ``n`` samples: 2 per attempt, then 2 for the anchor."""
        return rng.random((n, 2 * self.attempts + 2))

    def window(self, height: int, width: int, u: np.ndarray) -> tuple[int, int, int, int]:
        """(y, x, h, w) of the crop for an image of ``height`` x ``width``."""
        y, x, h, w = self.windows([height], [width], np.asarray(u).reshape(1, -1))[0].tolist()
        return y, x, h, w

    # Attempts tried for every sample before the rest are tried for those that found none: a
    # window usually fits within the first few, and all 100 of DALI's default cost the GPU
    # stage ~0.5 ms per batch of 128 (BENCHMARKS.md, "Where the host time goes").
    FIRST_ATTEMPTS = 8

    def _first_fit(self, u, H, W):
        """(found, h, w) per sample: the first fitting attempt's window, as evaluating all
        attempts at once would give (each attempt's arithmetic is independent)."""
        n = len(H)
        found = np.zeros(n, bool)
        h = np.zeros(n, np.int64)
        w = np.zeros(n, np.int64)
        rows = np.arange(n)
        start = 0
        while start < self.attempts and len(rows):
            stop = self.attempts if start else min(self.attempts, self.FIRST_ATTEMPTS)
            fits, ah, aw = _attempts(u[rows], H[rows], W[rows], self.ratio, self.area, start, stop)
            first = fits.argmax(axis=1)
            hit = fits[np.arange(len(rows)), first]
            done = rows[hit]
            found[done] = True
            h[done] = ah[hit, first[hit]]
            w[done] = aw[hit, first[hit]]
            rows = rows[~hit]
            start = stop
        return found, h, w

    def windows(self, heights, widths, u: np.ndarray) -> np.ndarray:
        """The windows of a batch at once: an (N, 4) int64 array of (y, x, h, w), row ``i`` for
        an image of ``heights[i]`` x ``widths[i]`` and the draws ``u[i]``. Each value is
        computed in DALI's float order, as a loop over the samples would."""
        H = np.asarray(heights, np.int64)
        W = np.asarray(widths, np.int64)
        u = np.asarray(u, np.float64).reshape(len(H), -1)
        Hf, Wf = H.astype(np.float64), W.astype(np.float64)
        min_r, max_r = self.ratio
        a0, a1 = self.area
        min_area = W * H * a0
        max_w = np.maximum(1, (Hf * max_r).astype(np.int64))
        max_h = np.maximum(1, (Wf / min_r).astype(np.int64))
        too_wide = H * max_w < min_area  # no allowed crop is wide enough
        too_tall = ~too_wide & (W * max_h < min_area)
        # The first attempt whose rounded window fits wins.
        found, h, w = self._first_fit(u, H, W)
        # No attempt fits: the whole image, clamped to the ratio range, then to the max area.
        aspect = Wf / np.maximum(Hf, 1)
        fh = np.where(aspect > max_r, H, np.where(aspect < min_r, max_h, H))
        fw = np.where(aspect > max_r, max_w, np.where(aspect < min_r, W, W))
        scale = np.minimum(1.0, a1 * Wf * Hf / (fh * fw))
        fh = np.maximum(1, (fh * np.sqrt(scale)).astype(np.int64))
        fw = np.maximum(1, (fw * np.sqrt(scale)).astype(np.int64))
        h = np.where(too_wide, H, np.where(too_tall, max_h, np.where(found, h, fh)))
        w = np.where(too_wide, max_w, np.where(too_tall, W, np.where(found, w, fw)))
        h, w = np.minimum(h, H), np.minimum(w, W)
        y = np.minimum((u[:, -2] * (H - h + 1)).astype(np.int64), H - h)
        x = np.minimum((u[:, -1] * (W - w + 1)).astype(np.int64), W - w)
        return np.stack([y, x, h, w], axis=1)


def _attempts(u, H, W, ratio, area, start: int, stop: int):
    """(fits, h, w) of attempts ``start:stop`` of each row: (N, stop - start) arrays."""
    (min_r, max_r), (a0, a1) = ratio, area
    lo, hi = math.log(min_r), math.log(max_r)
    Hf, Wf = H.astype(np.float64), W.astype(np.float64)
    target = (a0 + u[:, 2 * start : 2 * stop : 2] * (a1 - a0)) * Wf[:, None] * Hf[:, None]
    r = np.exp(lo + u[:, 2 * start + 1 : 2 * stop : 2] * (hi - lo))
    aw = np.maximum(1, (np.sqrt(target * r) + 0.5).astype(np.int64))  # roundf: half up
    ah = np.maximum(1, (np.sqrt(target / r) + 0.5).astype(np.int64))
    rat = aw / ah
    fits = (aw <= W[:, None]) & (ah <= H[:, None]) & (min_r <= rat) & (rat <= max_r)
    return fits, ah, aw


def _pair(v, name: str, who: str) -> tuple[float, float]:
    items = v if isinstance(v, Sequence | np.ndarray) and not isinstance(v, str) else [v, v]
    try:
        vals = [float(x) for x in items]
    except (TypeError, ValueError):
        vals = []
    if len(vals) != 2:
        raise ArgumentError(f"{who}: {name}={v!r} must be two numbers [min, max]")
    return vals[0], vals[1]
