"""What ``fn.cat`` and ``fn.stack`` share (DALI's ``TensorJoin``, ``join.cc``): argument checks,
the joined layout, the shape checks, and the CPU and GPU runs.

Every input must have the same element type and rank. ``cat`` joins along an existing axis
(the other extents must match; inputs whose whole batch is empty are skipped); ``stack`` inserts
a new axis (all extents must match; ``axis`` may equal the rank: the inputs interleave).
Layouts: the non-empty input layouts must agree. ``cat`` keeps that layout; ``stack`` inserts
``axis_name`` into it, and without ``axis_name`` its output has no layout.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator


class Join(Operator):
    """Base of Cat and Stack; ``new_axis`` tells which."""

    devices = ("cpu", "gpu")
    num_inputs = (1, 999)
    batch_level = True  # cat skips inputs whose whole batch is empty
    new_axis = False

    def setup(self, *, axis=None, axis_name=None) -> None:
        who = self.schema
        if not self.new_axis and axis is not None and axis_name is not None:
            raise ArgumentError(f"{who}: arguments axis and axis_name cannot be used together")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int | np.integer)):
            raise ArgumentError(f"{who}: axis={axis!r} must be an int")
        self.axis_arg = 0 if axis is None else int(axis)
        if axis_name is not None and (not isinstance(axis_name, str) or len(axis_name) != 1):
            raise ArgumentError(f"{who}: axis_name must be a single character; got {axis_name!r}")
        self.axis_name = axis_name
        self._in_layout = ""
        self._axis: int | None = None  # known at build when given by name (cat)

    def output_layouts(self, input_layouts):
        layouts = {lay for lay in input_layouts if lay}
        if len(layouts) > 1:
            raise ArgumentError(
                f"{self.schema}: all non-empty input layouts must match; got {sorted(layouts)}"
            )
        layout = layouts.pop() if layouts else ""
        self._in_layout = layout
        if self.new_axis:
            if self.axis_name is None:
                return [""]
            if not layout:
                return [self.axis_name]  # scalar inputs (checked when run)
            axis = self._norm_axis(self.axis_arg, len(layout) + 1)
            return [layout[:axis] + self.axis_name + layout[axis:]]
        if self.axis_name is not None:
            if self.axis_name not in layout:
                raise ArgumentError(
                    f"{self.schema}: axis_name specifies an undefined axis "
                    f"{self.axis_name!r} for layout {layout!r}"
                )
            self._axis = layout.index(self.axis_name)
        return [layout]

    def _norm_axis(self, axis: int, limit: int) -> int:
        if not -limit <= axis < limit:
            raise ArgumentError(
                f"{self.schema}: invalid axis index axis={axis} for {limit}-D output"
            )
        return axis % limit

    def axis_for(self, ndim: int) -> int:
        """The join axis for inputs of rank ``ndim`` (an output axis for stack)."""
        if self.new_axis and self.axis_name is not None and not self._in_layout and ndim:
            raise ArgumentError(
                f"{self.schema}: specifying the new axis name with axis_name with non-scalar "
                "input requires a non-empty input layout"
            )
        if self._axis is not None:
            return self._axis
        return self._norm_axis(self.axis_arg, ndim + 1 if self.new_axis else ndim)

    def check_shapes(self, shapes: list, axis: int, sample: int) -> None:
        """``shapes`` are the inputs' shapes of one sample."""
        ranks = {len(s) for s in shapes}
        if len(ranks) > 1:
            raise ArgumentError(
                f"{self.schema}: all inputs must have the same number of dimensions; sample "
                f"{sample} has shapes {[list(s) for s in shapes]}"
            )
        ref = list(shapes[0])
        for k, s in enumerate(shapes[1:], 1):
            a, b = list(s), list(ref)
            if not self.new_axis:
                a.pop(axis)
                b.pop(axis)
            if a != b:
                what = "all extents" if self.new_axis else f"all extents but axis {axis}"
                raise ArgumentError(
                    f"{self.schema}: the inputs must match in {what}; sample {sample}: input 0 "
                    f"has shape {ref}, input {k} has shape {list(s)}"
                )

    def _check_types(self, dtypes) -> None:
        dts = [np.dtype(d) for d in dtypes]
        for k, dt in enumerate(dts[1:], 1):
            if dt != dts[0]:
                raise ArgumentError(
                    f"{self.schema}: all inputs must have the same type; input 0 is {dts[0]}, "
                    f"input {k} is {dt}"
                )

    def _used(self, sizes: list[int]) -> list[int]:
        """Indices of the inputs that take part: cat skips inputs empty in the whole batch."""
        if self.new_axis:
            return list(range(len(sizes)))
        used = [k for k, size in enumerate(sizes) if size > 0]
        return used or [0]

    def run_batch_cpu(self, inputs, args, params):
        batches = [[np.asarray(x) for x in b] for b in inputs]
        if not batches[0]:
            return [[]]
        self._check_types([b[0].dtype for b in batches])
        used = self._used([sum(x.size for x in b) for b in batches])
        batches = [batches[k] for k in used]
        ndim = batches[0][0].ndim
        axis = self.axis_for(ndim)
        outs = []
        for i in range(len(batches[0])):
            parts = [b[i] for b in batches]
            self.check_shapes([p.shape for p in parts], axis, i)
            outs.append(np.stack(parts, axis) if self.new_axis else np.concatenate(parts, axis))
        return [outs]

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.layout import join_batch

        batches = [as_samples(b) for b in inputs]
        n = len(batches[0])
        if n == 0:
            return batches[0]
        self._check_types([b.dtype for b in batches])
        used = self._used([int(b.shapes.prod(axis=1).sum()) for b in batches])
        batches = [batches[k] for k in used]
        axis = self.axis_for(batches[0].shapes.shape[1])
        for i in range(n):
            self.check_shapes([b.shapes[i] for b in batches], axis, i)
        return join_batch(batches, axis, self.new_axis, stream=stream)
