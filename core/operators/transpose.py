"""``fn.transpose``: reorder the axes of every sample (DALI's ``Transpose``).

Output axis ``i`` is input axis ``perm[i]``. The output layout is the input's permuted the same
way (``transpose_layout=True``, the default), or the input's unchanged (False), or
``output_layout`` when given (it overrides both). Any element type; on the GPU one launch of the
strided copy kernel per batch.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._tensor_args import int_list, layout_arg

__all__ = ["Transpose"]


@register(legacy=("Transpose",))
class Transpose(Operator):
    """Transposes every sample: ``out.shape[i] == in.shape[perm[i]]``.

    Args:
        perm: the permutation of the input's axes (required), e.g. ``[2, 0, 1]`` (HWC -> CHW).
        transpose_layout: permute the layout string too (default True); else copy it.
        output_layout: the output layout, overriding ``transpose_layout``.

    Example:
        >>> with pipe:
        ...     chw = fn.transpose(images, perm=[2, 0, 1])  # layout "CHW"
    """

    schema = "transpose"
    devices = ("cpu", "gpu")

    def setup(self, *, perm=None, transpose_layout=True, output_layout=None) -> None:
        who = self.schema
        self.perm = int_list(perm, who, "perm", allow_none=False)
        if sorted(self.perm) != list(range(len(self.perm))):
            raise ArgumentError(
                f"{who}: perm={list(self.perm)} is not a permutation: sorted perm is not equal "
                f"to [0, ..., {len(self.perm) - 1}]"
            )
        self.transpose_layout = bool(transpose_layout)
        self.output_layout = layout_arg(output_layout, who, "output_layout")
        if output_layout is not None and not output_layout:
            raise ArgumentError(f"{who}: providing an empty output_layout is not supported")
        if self.output_layout is not None and len(self.output_layout) != len(self.perm):
            raise ArgumentError(
                f"{who}: output_layout={output_layout!r} does not have {len(self.perm)} axes"
            )

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        if layout and len(layout) != len(self.perm):
            raise ArgumentError(
                f"{self.schema}: the input layout {layout!r} has {len(layout)} axes but "
                f"perm={list(self.perm)} has {len(self.perm)}"
            )
        if self.output_layout is not None:
            return [self.output_layout]
        if self.transpose_layout and layout:
            return ["".join(layout[p] for p in self.perm)]
        return [layout]

    def _check_ndim(self, ndim: int) -> None:
        if ndim != len(self.perm):
            raise ArgumentError(
                f"{self.schema}: the input has different dimensionality ({ndim}) than the "
                f"length of the permutation perm={list(self.perm)} ({len(self.perm)})"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check_ndim(x.ndim)
        return np.ascontiguousarray(x.transpose(self.perm))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.layout import transpose_batch

        s = as_samples(inputs[0])
        if len(s):
            self._check_ndim(s.shapes.shape[1])
        return transpose_batch(s, self.perm, stream=stream)
