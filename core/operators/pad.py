"""``fn.pad``: pad the samples of a batch at the end of the chosen axes (DALI's ``Pad``,
``dali/operators/generic/pad.h``).

Per padded axis ``axes[i]`` the output extent is, for each sample: ``shape[i]`` when it is
positive, else the largest extent of that axis in the batch; never less than the sample's own;
then rounded up to a multiple of ``align[i]`` (one ``align`` value applies to every axis). Axes
default to all of them; ``axis_names`` picks them by layout letter. The input data is placed at
the start; the rest is ``fill_value`` (converted to the input type). ``shape`` and ``align``
accept per-sample argument inputs. The layout and type are the input's.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples
from ..kernels.layout import slice_batch
from ._tensor_args import axes_from_names, int_list, layout_arg
from .slice import fill_as, pad_window

__all__ = ["Pad", "padded_shapes"]


def _aligned(extent: int, align: int) -> int:
    rem = extent % align
    return extent + (align - rem if rem else 0)


def padded_shapes(in_shapes, axes, shapes, aligns, who: str = "pad") -> np.ndarray:
    """The (N, ndim) output shapes: see the module docstring.

    Args:
        in_shapes: (N, ndim) input shapes.
        axes: the padded axes.
        shapes: per sample, the requested extent per padded axis (<= 0: the batch's largest),
            or None; a list of one entry stands for every sample (the static argument).
        aligns: per sample, one alignment or one per padded axis, or None (one entry: every
            sample's).
        who: the operator name for errors.
    """
    in_shapes = np.asarray(in_shapes, np.int64)
    out = in_shapes.copy()
    if not len(in_shapes):
        return out
    largest = in_shapes.max(axis=0)
    if _same_for_all(shapes) and _same_for_all(aligns):
        return _padded_shapes_uniform(in_shapes, out, largest, axes, shapes, aligns, who)
    return _padded_shapes_loop(in_shapes, out, largest, axes, shapes, aligns, who)


def _padded_shapes_loop(in_shapes, out, largest, axes, shapes, aligns, who) -> np.ndarray:
    """``padded_shapes`` sample by sample (per-sample ``shape``/``align`` argument inputs)."""
    for i in range(len(in_shapes)):
        req = shapes[i] if shapes is not None else None
        al = aligns[i] if aligns is not None else None
        _check_args(req, al, len(axes), who)
        for k, axis in enumerate(axes):
            extent = int(in_shapes[i, axis])
            target = int(req[k]) if req is not None and req[k] > 0 else int(largest[axis])
            extent = max(extent, target)
            if al is not None and len(al):
                extent = _aligned(extent, int(al[0] if len(al) == 1 else al[k]))
            out[i, axis] = extent
    return out


def _check_args(req, al, naxes: int, who: str) -> None:
    """A sample's requested extents ``req`` and alignments ``al`` (or None): one extent per
    padded axis, positive alignments, one or one per axis."""
    if req is not None and len(req) != naxes:
        raise ArgumentError(
            f"{who}: if explicit shape is provided, there should be a value per axis to be "
            f"padded: expected {naxes} values for shape, got {len(req)} ({list(req)})"
        )
    if al is not None:
        if any(a <= 0 for a in al):
            raise ArgumentError(f"{who}: values of align={list(al)} must be positive")
        if len(al) not in (1, naxes):
            raise ArgumentError(
                f"{who}: align={list(al)} needs one value or one per padded axis ({naxes})"
            )


def _same_for_all(per_sample) -> bool:
    """Whether ``per_sample`` (a list, or None) holds one object for every sample: the
    operator's static ``shape``/``align``, as ``Pad._per_sample`` repeats them."""
    return per_sample is None or all(v is per_sample[0] for v in per_sample)


def _padded_shapes_uniform(in_shapes, out, largest, axes, shapes, aligns, who) -> np.ndarray:
    """``padded_shapes`` when every sample has the same ``shape`` and ``align`` (or none):
    the same checks, once, and the extents as array arithmetic rather than a loop over the
    samples (Jasper's pad of 32 spectrograms, every batch, on the GPU stage's thread)."""
    req = shapes[0] if shapes is not None else None
    al = aligns[0] if aligns is not None else None
    _check_args(req, al, len(axes), who)  # the loop's checks (every sample has these arguments)
    if not axes:
        return out
    targets = [
        int(req[k]) if req is not None and req[k] > 0 else int(largest[axis])
        for k, axis in enumerate(axes)
    ]
    if len(set(axes)) < len(axes):  # an axis named twice: the loop's order (the last wins)
        for k, axis in enumerate(axes):
            out[:, axis] = _align(np.maximum(in_shapes[:, axis], targets[k]), al, k)
        return out
    # every padded axis at once: (-extent) % a is what rounds extent up to a multiple of a
    cols = axes
    if axes == list(range(axes[0], axes[-1] + 1)):  # consecutive axes: a view, no fancy index
        cols = slice(axes[0], axes[-1] + 1)
    extent = np.maximum(in_shapes[:, cols], targets)
    if al is not None and len(al):
        extent += (-extent) % np.array(al if len(al) > 1 else [al[0]] * len(axes), np.int64)
    out[:, cols] = extent
    return out


def _align(extent: np.ndarray, al, k: int) -> np.ndarray:
    if al is None or not len(al):
        return extent
    a = int(al[0] if len(al) == 1 else al[k])
    return extent + (-extent) % a


@register(legacy=("Pad",))
class Pad(Operator):
    """Pads every sample to the batch's largest extents (or ``shape``) along ``axes``.

    Args:
        fill_value: the padding value (default 0).
        axes: the padded axes (default: all); exclusive with ``axis_names``.
        axis_names: the padded axes by layout letter.
        shape: the extent per padded axis (-1: the batch's largest); argument input allowed.
        align: round each padded extent up to a multiple of it (one value or one per axis);
            argument input allowed.

    Example:
        >>> with pipe:
        ...     boxes = fn.pad(boxes, fill_value=-1)  # (N, 4) -> (max N in batch, 4)
    """

    schema = "pad"
    devices = ("cpu", "gpu")
    batch_level = True
    arg_inputs = frozenset({"shape", "align"})

    def setup(self, *, fill_value=0.0, axes=None, axis_names=None, shape=None, align=None):
        who = self.schema
        if axes is not None and axis_names is not None:
            raise ArgumentError(f"{who}: arguments axis_names and axes are mutually exclusive")
        self.fill_value = float(fill_value)
        if not np.isfinite(self.fill_value):
            raise ArgumentError(f"{who}: fill_value={fill_value!r} must be finite")
        self.axes = int_list(axes, who, "axes")
        self.axis_names = layout_arg(axis_names, who, "axis_names") or None
        self.shape = int_list(shape, who, "shape")
        self.align = int_list(align, who, "align")
        if self.align is not None and any(a <= 0 for a in self.align):
            raise ArgumentError(f"{who}: values of align={list(self.align)} must be positive")
        self._layout = ""
        self._fills: dict = {}  # dtype -> fill_as(fill_value, dtype), for the GPU launcher

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        if self.axis_names:
            axes_from_names(self.axis_names, self._layout, self.schema)
        return [self._layout]

    def _axes(self, ndim: int) -> list[int]:
        if self.axis_names:
            return axes_from_names(self.axis_names, self._layout, self.schema)
        if not self.axes:
            return list(range(ndim))
        for a in self.axes:
            if not 0 <= a < ndim:
                raise ArgumentError(
                    f"{self.schema}: specified axis is out of bounds: axis={a}, ndim={ndim}"
                )
        return list(self.axes)

    def _per_sample(self, name: str, args: dict, n: int):
        if name in args:
            return [int_list(v, self.schema, name) for v in args[name]]
        static = getattr(self, name)
        return None if static is None else [static] * n

    def out_shapes(self, in_shapes, args: dict) -> tuple[np.ndarray, list[int]]:
        in_shapes = np.asarray(in_shapes, np.int64)
        n = len(in_shapes)
        ndim = in_shapes.shape[1] if n else 0
        axes = self._axes(ndim)
        if not args:  # the static arguments: the same for every sample, one list entry each
            shapes = None if self.shape is None else [self.shape]
            aligns = None if self.align is None else [self.align]
            return padded_shapes(in_shapes, axes, shapes, aligns, self.schema), axes
        shapes = self._per_sample("shape", args, n)
        aligns = self._per_sample("align", args, n)
        return padded_shapes(in_shapes, axes, shapes, aligns, self.schema), axes

    def _check_rank(self, shapes: list) -> None:
        if len({len(s) for s in shapes}) > 1:
            raise ArgumentError(f"{self.schema}: the samples must have the same number of dims")

    def run_batch_cpu(self, inputs, args, params):
        xs = [np.asarray(x) for x in inputs[0]]
        if not xs:
            return [[]]
        self._check_rank([x.shape for x in xs])
        out_shapes, _ = self.out_shapes([x.shape for x in xs], args)
        if len({x.dtype for x in xs}) == 1 and (out_shapes == out_shapes[0]).all():
            return [self._dense_batch(xs, tuple(int(v) for v in out_shapes[0]))]
        outs = []
        for x, shape in zip(xs, out_shapes, strict=True):
            fill = fill_as(self.fill_value, x.dtype)
            outs.append(pad_window(x, np.zeros(x.ndim, np.int64), shape, fill, -1, x.dtype))
        return [outs]

    def _dense_batch(self, xs: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        """Samples padded to one ``shape`` (the usual case: to the batch's largest extent) as
        one (N, *shape) array, which the executor hands on as the batch: a framework's
        iterator then takes it without stacking the padded samples on the training loop's
        thread (1.6 ms per Jasper batch of 32 x 64 x ~1,600 features). Each sample is copied
        at the origin and the rest of its row filled, one slab per axis."""
        dtype = xs[0].dtype
        fill = fill_as(self.fill_value, dtype).reshape(())
        out = np.empty((len(xs), *shape), dtype)
        for dst, x in zip(out, xs, strict=True):
            inside = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape, strict=True))
            dst[inside] = x[inside]
            for k, part in enumerate(inside):  # beyond x along axis k, within it before k
                if part.stop < shape[k]:
                    dst[inside[:k] + (slice(part.stop, None),)] = fill
        return out

    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        out_shapes, _ = self.out_shapes(s.shapes, args)
        fill = self._fills.get(s.dtype)
        if fill is None:  # the fill value as the type: once per type, not every batch
            fill = self._fills[s.dtype] = fill_as(self.fill_value, s.dtype)
        anchors = np.zeros(out_shapes.shape, np.int64)
        return slice_batch(s, anchors, out_shapes, s.dtype, fill, stream=stream)
