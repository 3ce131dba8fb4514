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
        H, W = int(height), int(width)
        min_r, max_r = self.ratio
        min_area = W * H * self.area[0]
        max_w = max(1, int(H * max_r))
        max_h = max(1, int(W / min_r))
        if H * max_w < min_area:  # too wide for any allowed crop
            h, w = H, max_w
        elif W * max_h < min_area:  # too tall
            h, w = max_h, W
        else:
            lo, hi = math.log(min_r), math.log(max_r)
            for a in range(self.attempts):
                target = (self.area[0] + u[2 * a] * (self.area[1] - self.area[0])) * W * H
                r = math.exp(lo + u[2 * a + 1] * (hi - lo))
                w = max(1, int(math.sqrt(target * r) + 0.5))  # roundf: half away from 0
                h = max(1, int(math.sqrt(target / r) + 0.5))
                if w <= W and h <= H and min_r <= w / h <= max_r:
                    break
            else:
                if W / H > max_r:
                    h, w = H, max_w
                elif W / H < min_r:
                    h, w = max_h, W
                else:
                    h, w = H, W
                scale = min(1.0, self.area[1] * W * H / (h * w))
                h = max(1, int(h * math.sqrt(scale)))
                w = max(1, int(w * math.sqrt(scale)))
        h, w = min(h, H), min(w, W)
        y = min(int(u[-2] * (H - h + 1)), H - h)
        x = min(int(u[-1] * (W - w + 1)), W - w)
        return y, x, h, w


def _pair(v, name: str, who: str) -> tuple[float, float]:
    items = v if isinstance(v, Sequence | np.ndarray) and not isinstance(v, str) else [v, v]
    try:
        vals = [float(x) for x in items]
    except (TypeError, ValueError):
        vals = []
    if len(vals) != 2:
        raise ArgumentError(f"{who}: {name}={v!r} must be two numbers [min, max]")
    return vals[0], vals[1]
