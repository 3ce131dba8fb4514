"""``cupyx`` of the fake CuPy: pinned host buffers are plain numpy arrays."""

from __future__ import annotations

import numpy as np
from cupy import COUNTS


def empty_pinned(shape, dtype=np.float32):
    COUNTS["pinned"] += 1
    return np.empty(shape, dtype)
