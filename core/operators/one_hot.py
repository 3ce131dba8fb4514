"""``fn.one_hot``: one-hot encode class indices (DALI's ``OneHot``, ``one_hot.h``).

A new axis of ``num_classes`` extent goes at ``axis`` (default -1: last); output element
``[..., i, ...]`` is ``on_value`` where ``i == int(input[...])`` and ``off_value`` elsewhere
(input values are truncated toward zero; classes outside ``[0, num_classes)`` give all
``off_value``). Legacy rule kept from DALI: without an explicit ``axis``, a batch whose samples
all hold exactly one element (of any shape) is treated as scalars, and each output is 1-D.

The layout is ``axis_name`` inserted into the input layout at the new axis (only
``axis_name`` for scalar inputs), or empty without ``axis_name``. ``on_value``/``off_value``
convert to ``dtype`` (default FLOAT) as a C cast does (truncation toward zero).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIDataType
from .cast import parse_dtype
from .slice import fill_as

__all__ = ["OneHot"]

_OUT_TYPES = (
    np.uint8,
    np.int8,
    np.uint16,
    np.int16,
    np.uint32,
    np.int32,
    np.uint64,
    np.int64,
    np.float32,
    np.float64,
)


@register(legacy=("OneHot",))
class OneHot(Operator):
    """One-hot encodes the input: a new axis of ``num_classes`` elements.

    Args:
        num_classes: the number of classes (default 0).
        axis: where the new axis goes (default -1: appended); -1..ndim.
        dtype: output type (default FLOAT; not FLOAT16 or BOOL, as in DALI).
        on_value: the value at the class index (default 1.0).
        off_value: the value elsewhere (default 0.0).
        axis_name: the new axis' layout letter (default: the output has no layout).

    Example:
        >>> with pipe:
        ...     labels = fn.one_hot(labels, num_classes=1000)
    """

    schema = "one_hot"
    devices = ("cpu", "gpu")

    def setup(
        self,
        *,
        num_classes=0,
        axis=None,
        dtype=DALIDataType.FLOAT,
        on_value=1.0,
        off_value=0.0,
        axis_name=None,
    ) -> None:
        who = self.schema
        if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
            raise ArgumentError(f"{who}: num_classes={num_classes!r} must be an int")
        if num_classes < 0:
            raise ArgumentError(f"{who}: num_classes={num_classes!r} must be >= 0")
        self.num_classes = int(num_classes)
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int | np.integer)):
            raise ArgumentError(f"{who}: axis={axis!r} must be an int")
        self.axis_given = axis is not None
        self.axis = -1 if axis is None else int(axis)
        self.dtype = parse_dtype(dtype, who, allowed=_OUT_TYPES)
        self.on = fill_as(float(on_value), self.dtype)[0]
        self.off = fill_as(float(off_value), self.dtype)[0]
        if axis_name is not None and (not isinstance(axis_name, str) or len(axis_name) != 1):
            raise ArgumentError(
                f"{who}: unsupported axis_name value {axis_name!r}: it must be a single character"
            )
        self.axis_name = axis_name
        self._in_layout = ""

    def output_layouts(self, input_layouts):
        self._in_layout = input_layouts[0] if input_layouts else ""
        if self.axis_name is None:
            return [""]
        lay = self._in_layout
        if not lay:
            return [self.axis_name]  # scalar inputs (checked when run)
        self._check_axis(len(lay))
        at = len(lay) if self.axis < 0 else self.axis
        return [lay[:at] + self.axis_name + lay[at:]]

    def _check_axis(self, ndim: int) -> None:
        if not -1 <= self.axis <= ndim:
            raise ArgumentError(
                f"{self.schema}: axis={self.axis} is outside of the allowed range [-1, {ndim}]"
            )

    def batch_level_in(self, node) -> bool:
        # The legacy scalar rule looks at the whole batch; with an explicit axis it does not.
        return not self.axis_given

    def plan(self, shapes: list) -> tuple[list, int, bool]:
        """(output shapes, the new axis, legacy scalars) of a batch of input ``shapes``."""
        ndim = len(shapes[0]) if shapes else 0
        self._check_axis(ndim)
        scalars = not self.axis_given and bool(shapes) and all(int(np.prod(s)) == 1 for s in shapes)
        if scalars:
            if self.axis_name is not None and self._in_layout and ndim != 0:
                raise ArgumentError(
                    f"{self.schema}: every sample holds one element, so the output is 1-D "
                    f"(DALI's legacy scalar rule), but the input layout {self._in_layout!r} "
                    "was given an axis_name; pass axis= to keep the input's dimensions"
                )
            return [(self.num_classes,)] * len(shapes), 0, True
        if self.axis_name is not None and not self._in_layout and ndim:
            raise ArgumentError(
                f"{self.schema}: input layout mismatch: expected an input layout of size {ndim} "
                "for axis_name, but the input has none"
            )
        at = ndim if self.axis < 0 else self.axis
        outs = [(*s[:at], self.num_classes, *s[at:]) for s in (tuple(map(int, s)) for s in shapes)]
        return outs, at, False

    def _encode(self, x: np.ndarray, out_shape, at: int) -> np.ndarray:
        if x.dtype.kind == "f":
            cls = np.trunc(x.astype(np.float64))
        else:
            cls = x.astype(np.int64)
        hit = cls.reshape(-1)[:, None] == np.arange(self.num_classes)[None, :]
        inner = int(np.prod(out_shape[at + 1 :]))
        outer = int(np.prod(out_shape[:at]))
        hit = hit.reshape(outer, inner, self.num_classes).transpose(0, 2, 1)
        out = np.where(hit, self.on, self.off).astype(self.dtype)
        return out.reshape(out_shape)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        shapes, at, _ = self.plan([x.shape])
        return self._encode(x, shapes[0], at)

    def run_batch_cpu(self, inputs, args, params):
        xs = [np.asarray(x) for x in inputs[0]]
        if not xs:
            return [[]]
        shapes, at, _ = self.plan([x.shape for x in xs])
        return [[self._encode(x, s, at) for x, s in zip(xs, shapes, strict=True)]]

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.one_hot import one_hot_batch

        s = as_samples(inputs[0])
        shapes, at, _ = self.plan([tuple(sh) for sh in s.shapes])
        out_shapes = np.array(shapes, np.int64).reshape(len(s), -1)
        return one_hot_batch(
            s, out_shapes, at, self.num_classes, self.on, self.off, self.dtype, stream=stream
        )
