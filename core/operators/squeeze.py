"""``fn.squeeze``: remove axes of extent 1 (DALI's ``Squeeze``). No copy: a view on the CPU,
new shapes over the same memory on the GPU.

The axes are given by index (``axes``; negative ones count from the end) or by layout letter
(``axis_names``), exactly one of the two. Removing an axis must not change the volume (its
extent is 1, or the sample is empty either way). The output layout is the input's without the
removed letters (empty when the input has none).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._tensor_args import axes_from_names, int_list, layout_arg, normalize_axes

__all__ = ["Squeeze"]


@register(legacy=("Squeeze",))
class Squeeze(Operator):
    """Removes the axes ``axes`` (or ``axis_names``), which must have extent 1.

    Args:
        axes: indices of the axes to remove.
        axis_names: layout letters of the axes to remove (exclusive with ``axes``).

    Example:
        >>> with pipe:
        ...     hw = fn.squeeze(mask, axis_names="C")  # HWC with C == 1 -> HW
    """

    schema = "squeeze"
    devices = ("cpu", "gpu")

    def setup(self, *, axes=None, axis_names=None) -> None:
        who = self.schema
        if (axes is None) == (axis_names is None):
            raise ArgumentError(
                f"{who}: provided both `axes` and `axis_names` arguments"
                if axes is not None
                else f"{who}: missing argument `axes` or `axis_names`"
            )
        self.axes = int_list(axes, who, "axes")
        self.axis_names = layout_arg(axis_names, who, "axis_names")
        self._named_axes: list[int] | None = None
        self._layout = ""

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        self._layout = layout
        if self.axis_names is not None:
            self._named_axes = axes_from_names(self.axis_names, layout, self.schema)
            removed = set(self._named_axes)
        elif layout:
            removed = set(normalize_axes(self.axes, len(layout), self.schema))
        else:
            return [""]
        if len(removed) != len(self._named_axes or self.axes):
            raise ArgumentError(f"{self.schema}: the same dimension is given twice to remove")
        return ["".join(c for d, c in enumerate(layout) if d not in removed)]

    def out_shape(self, in_shape) -> list[int]:
        """The shape after removing the axes; the volume must not change."""
        ndim = len(in_shape)
        if self._layout and len(self._layout) != ndim:
            raise ArgumentError(
                f"{self.schema}: layout {self._layout!r} has {len(self._layout)} dimensions but "
                f"the data has {ndim}"
            )
        axes = self._named_axes
        if axes is None:
            axes = normalize_axes(self.axes, ndim, self.schema)
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"{self.schema}: the same dimension is given twice to remove")
        out = [int(e) for d, e in enumerate(in_shape) if d not in axes]
        if int(np.prod(out)) != int(np.prod(in_shape)):
            raise ArgumentError(
                f"{self.schema}: cannot remove dimensions {sorted(axes)} of a sample of shape "
                f"{[int(e) for e in in_shape]}: their extents must be 1"
            )
        return out

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        return x.reshape(self.out_shape(x.shape))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.layout import view_batch

        s = as_samples(inputs[0])
        shapes = [self.out_shape(sh) for sh in s.shapes]
        return view_batch(s, shapes, stream=stream)
