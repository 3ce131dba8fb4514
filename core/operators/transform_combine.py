"""``fn.transforms.combine``: the product of two or more affine transforms."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._affine import check_transform_input, homogeneous, to_output

__all__ = ["TransformCombine"]


@register
class TransformCombine(Operator):
    """Combines two or more affine transforms (float32 ``(ndim, ndim + 1)`` each, same shape).

    By default the result applies the inputs in the order listed: combining ``[T1, T2, T3]``
    gives ``T3 @ T2 @ T1`` (``T3(T2(T1(x)))``); with ``reverse_order=True``, ``T1 @ T2 @ T3``.

    Args:
        reverse_order: multiply in the listed order instead (default False).

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.combine(fn.transforms.scale(scale=[2, 2]),
        ...                                fn.transforms.rotation(angle=30))
    """

    schema = "transforms.combine"
    num_inputs = (2, 99)
    light = True

    def setup(self, *, reverse_order=False) -> None:
        self.reverse_order = bool(reverse_order)

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, param):
        mats = [np.asarray(x) for x in inputs]
        shape = mats[0].shape
        for i, m in enumerate(mats):
            check_transform_input(self.schema, m)
            if m.shape != shape:
                raise ArgumentError(
                    f"{self.schema}: all input transforms must have the same shape; input 0 "
                    f"is {shape} and input {i} is {m.shape}"
                )
        out = homogeneous(mats[0])
        for m in mats[1:]:
            out = out @ homogeneous(m) if self.reverse_order else homogeneous(m) @ out
        return to_output(out)
