"""``fn.expand_dims``: insert axes of extent 1 (DALI's ``ExpandDims``). No copy.

``axes`` are positions in the output (sorted, non-negative, no repeats). With
``new_axis_names`` (one letter per new axis) the output layout is the input's with those
letters inserted, and the input must have a layout (or be a scalar); without it the output
layout is empty.
"""

from __future__ import annotations

from ..errors import ArgumentError
from ..graph import Operator, register
from ._tensor_args import int_list, layout_arg

__all__ = ["ExpandDims"]


@register(legacy=("ExpandDims",))
class ExpandDims(Operator):
    """Inserts axes of extent 1 at the output positions ``axes``.

    Args:
        axes: where the new axes go, as output indices (required).
        new_axis_names: the layout letters of the new axes (default: the layout is cleared).

    Example:
        >>> with pipe:
        ...     chw = fn.expand_dims(gray_hw, axes=0, new_axis_names="C")
    """

    schema = "expand_dims"
    devices = ("cpu", "gpu")

    def setup(self, *, axes=None, new_axis_names=None) -> None:
        who = self.schema
        axes = int_list(axes, who, "axes", allow_none=False)
        if any(a < 0 for a in axes):
            raise ArgumentError(f"{who}: axes={list(axes)}: an axis can't be negative")
        names = layout_arg(new_axis_names, who, "new_axis_names")
        if names and len(names) != len(axes):
            raise ArgumentError(
                f"{who}: specified {len(axes)} new dimensions, but new_axis_names="
                f"{new_axis_names!r} contains {len(names)} dimension names"
            )
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        self.axes = [axes[i] for i in order]
        if len(set(self.axes)) != len(self.axes):
            raise ArgumentError(f"{who}: axes={list(axes)}: duplicate axis index")
        self.names = "".join(names[i] for i in order) if names else None
        self._layout = ""

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        self._layout = layout
        if self.names is None:
            return [""]
        if not layout:
            return [self.names]  # a scalar input (checked per sample)
        return [self._merge(layout)]

    def _merge(self, layout: str) -> str:
        out, d, k = [], 0, 0
        for i in range(len(layout) + len(self.axes)):
            if k < len(self.axes) and self.axes[k] == i:
                out.append(self.names[k])
                k += 1
            else:
                if d >= len(layout):
                    raise ArgumentError(
                        f"{self.schema}: data has not enough dimensions to add new axes at "
                        f"axes={self.axes}"
                    )
                out.append(layout[d])
                d += 1
        if k < len(self.axes):
            raise ArgumentError(
                f"{self.schema}: axes={self.axes} are out of range for a {len(layout)}-D input"
            )
        return "".join(out)

    def out_shape(self, in_shape) -> list[int]:
        ndim = len(in_shape)
        if self.names is not None and not self._layout and ndim:
            raise ArgumentError(
                f"{self.schema}: specifying new_axis_names requires an input with a proper "
                f"layout (the {ndim}-D input has none)"
            )
        if self._layout and len(self._layout) != ndim:
            raise ArgumentError(
                f"{self.schema}: layout {self._layout!r} has {len(self._layout)} dimensions but "
                f"the data has {ndim}"
            )
        out, d, k = [], 0, 0
        for i in range(ndim + len(self.axes)):
            if k < len(self.axes) and self.axes[k] == i:
                out.append(1)
                k += 1
            else:
                if d >= ndim:
                    raise ArgumentError(
                        f"{self.schema}: data has not enough dimensions ({ndim}) to add new "
                        f"axes at axes={self.axes}"
                    )
                out.append(int(in_shape[d]))
                d += 1
        if k < len(self.axes):
            raise ArgumentError(
                f"{self.schema}: axes={self.axes} are out of range for a {ndim}-D input"
            )
        return out

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        return x.reshape(self.out_shape(x.shape))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.layout import view_batch

        s = as_samples(inputs[0])
        return view_batch(s, [self.out_shape(sh) for sh in s.shapes], stream=stream)
