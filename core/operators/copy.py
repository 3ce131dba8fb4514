"""``fn.copy``: a copy of the input (DALI's ``Copy``), on the CPU or the GPU, the layout kept.
On the GPU every sample is written contiguously by one launch of the strided-copy kernel."""

from __future__ import annotations

import numpy as np

from ..graph import Operator, register

__all__ = ["Copy"]


@register(legacy=("Copy",))
class Copy(Operator):
    """Copies the input (same shape, type and layout).

    Example:
        >>> with pipe:
        ...     images_copy = fn.copy(images)
    """

    schema = "copy"
    devices = ("cpu", "gpu")

    def run_sample(self, inputs, args, param):
        return np.array(inputs[0], copy=True, order="C")

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.layout import copy_batch

        return copy_batch(inputs[0], stream=stream)
