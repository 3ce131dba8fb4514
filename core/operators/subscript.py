"""Tensor subscripts: ``x[0]``, ``x[-1]``, ``x[1:3]``, ``x[:, ::2]``, ``x[..., 0]``,
``x[dlpipe.newaxis]``, with bounds that may be DataNodes (``x[:, :h, :w]``), as DALI's
``TensorSubscript`` (``fn.tensor_subscript``; ``data_node.py`` ``__getitem__``).

The batch dimension is implicit: a subscript applies to every sample. An integer index removes
its dimension (and its layout letter); a slice keeps it, with numpy's semantics (negative
bounds count from the end, bounds are clamped, any nonzero step); trailing dimensions without
a subscript are kept whole; ``...`` stands for as many whole dimensions as needed;
``dlpipe.newaxis`` (or ``dlpipe.newaxis("F")``, naming it in the layout) inserts a dimension of
size 1. As in DALI, ``None`` is a whole-dimension slice, not a new axis. A run-time index or
bound is a CPU DataNode holding one integer scalar per sample.

Errors name the index and the sample's shape: an index out of range, more indices than
dimensions, or a non-integer run-time index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import DataNode, Operator, _call_operator, register, small_host_inputs
from ..kernels.arithmetic import gather_view_arrays, gather_views
from . import _small

__all__ = ["TensorSubscript", "newaxis", "subscript", "subscript_view"]

MAX_SUBSCRIPTS = 32
_KINDS = ("at", "lo", "hi", "step")
_ARG_NAMES = frozenset(f"{k}_{i}" for k in _KINDS for i in range(MAX_SUBSCRIPTS))


class _NewAxis:
    """``dlpipe.newaxis``: a new dimension of size 1; call it with a one-letter name to name
    the dimension in the layout (``x[dlpipe.newaxis("F")]``)."""

    def __init__(self, name: str | None = None):
        if name is not None:
            if not isinstance(name, str):
                raise TypeError("Axis name must be a single-character string")
            if len(name) != 1:
                raise ValueError("Axis name must be a single-character string")
        self._name = name

    @property
    def name(self) -> str | None:
        return self._name

    def __call__(self, name: str | None = None) -> _NewAxis:
        return _NewAxis(name)

    def __repr__(self) -> str:
        return f"newaxis({self._name!r})" if self._name else "newaxis"


newaxis = _NewAxis()

_NEW = "new"  # an item of the parsed subscript list: a new axis
_ELLIPSIS = "..."


def subscript(node: DataNode, index) -> DataNode:
    """``node[index]``: parse the index and add a ``tensor_subscript`` operator.

    Raises:
        TypeError: an index of an unsupported type (float, str, ...).
        ValueError: several ``...``, or new axes where only some are named.
    """
    items = index if isinstance(index, tuple) else (index,)
    kwargs: dict = {}
    layout_items: list = []  # per item: "sub" (a subscript) | (_NEW, name) | _ELLIPSIS
    nsub = 0
    names = []
    for item in items:
        if isinstance(item, _NewAxis):
            layout_items.append((_NEW, item.name))
            names.append(item.name)
            continue
        if item is Ellipsis:
            if _ELLIPSIS in layout_items:
                raise ValueError("an index can only have a single ellipsis ('...')")
            layout_items.append(_ELLIPSIS)
            continue
        if item is None:  # DALI: a whole-dimension slice (use dlpipe.newaxis for a new axis)
            item = slice(None)
        if isinstance(item, slice):
            for kind, value in (("lo", item.start), ("hi", item.stop), ("step", item.step)):
                if value is not None:
                    kwargs[f"{kind}_{nsub}"] = _index_value(value, f"{kind}_{nsub}")
            layout_items.append(("sub", "slice"))
        else:
            kwargs[f"at_{nsub}"] = _index_value(item, f"at_{nsub}")
            layout_items.append(("sub", "at"))
        nsub += 1
    if nsub > MAX_SUBSCRIPTS:
        raise ValueError(f"too many subscripts ({nsub}); at most {MAX_SUBSCRIPTS} are supported")
    named = [n for n in names if n is not None]
    if named and len(named) != len(names):
        raise ValueError("New axis name must be specified for all axes or none.")
    return _call_operator(
        "tensor_subscript",
        (node,),
        {**kwargs, "num_subscripts": nsub, "_items": tuple(layout_items)},
    )[0]


def _index_value(value, name: str):
    if isinstance(value, DataNode):
        return value
    if isinstance(value, bool) or isinstance(value, float | str | bytes):
        raise TypeError(f"Invalid type for an index: {type(value).__name__} ({name}={value!r})")
    if isinstance(value, np.integer) or isinstance(value, int):
        return int(value)
    if hasattr(value, "__index__"):
        return int(value.__index__())
    raise TypeError(f"Invalid type for an index: {type(value).__name__} ({name}={value!r})")


# --- per-sample index arithmetic -------------------------------------------------------------------


def _scalar_index(value, name: str) -> int:
    """A run-time index value (a per-sample 0-d integer array) as an int."""
    a = np.asarray(value)
    if a.ndim != 0:
        raise ValueError(
            f"Array indices must be scalar (0D). Got {a.ndim}D tensor for {name} (shape {a.shape})."
        )
    if a.dtype.kind not in "iu":
        raise TypeError(f"Array index must be of integral type. Got: {a.dtype} for {name}.")
    return int(a)


def resolve(items: Sequence, statics: dict, args: dict, shape: Sequence[int]) -> tuple:
    """The numpy index of one sample (ints, slices, ``np.newaxis``, ``Ellipsis``), checked.

    Raises:
        IndexError: an index out of range, more subscripts than dimensions.
        ValueError, TypeError: a zero step, a run-time index that is not an integer scalar.
    """
    ndim = len(shape)
    nsub = sum(1 for it in items if isinstance(it, tuple) and it[0] == "sub")
    if nsub and ndim == 0:
        raise IndexError("Cannot apply an index to a scalar.")
    if nsub > ndim:
        raise IndexError(f"Too many indices ({nsub}) for a {ndim}D tensor.")

    def value(name):
        if name in args:
            return _scalar_index(args[name], name)
        return statics.get(name)

    after = 0  # subscripts after the ellipsis bind to the trailing dimensions
    seen_ellipsis = False
    for it in items:
        if it == _ELLIPSIS:
            seen_ellipsis = True
        elif seen_ellipsis and it[0] == "sub":
            after += 1
    index: list = []
    i = 0  # subscript number (the suffix of at_i / lo_i ...)
    dim = 0
    for it in items:
        if it == _ELLIPSIS:
            index.append(Ellipsis)
            dim = ndim - after
            continue
        if it[0] == _NEW:
            index.append(np.newaxis)
            continue
        extent = shape[dim]
        if it[1] == "at":
            at = value(f"at_{i}")
            idx = at + extent if at < 0 else at
            if not 0 <= idx < extent:
                raise IndexError(
                    f"Index {at} is out of range for axis {dim} of length {extent} "
                    f"(subscript at_{i} of a sample of shape {tuple(shape)})"
                )
            index.append(idx)
        else:
            lo, hi, step = value(f"lo_{i}"), value(f"hi_{i}"), value(f"step_{i}")
            if step == 0:
                raise ValueError(f"step_{i}: a slice step cannot be zero")
            index.append(slice(lo, hi, step))
        i += 1
        dim += 1
    return tuple(index)


def subscript_view(shape: Sequence[int], strides: Sequence[int], index: tuple) -> tuple:
    """Apply a resolved index to a strided sample without copying.

    Args:
        shape, strides: the sample's shape and strides (in elements).
        index: what :func:`resolve` returned.

    Returns:
        ``(offset, out_shape, out_strides)``, in elements: the result is the ``out_shape``
        array at ``offset`` with ``out_strides`` (0 for new axes, negative for reversed
        slices), numpy's ``x[index]``.
    """
    ndim = len(shape)
    consumed = sum(1 for it in index if it is not None and it is not Ellipsis)
    offset = 0
    out_shape: list[int] = []
    out_strides: list[int] = []
    dim = 0
    for it in index:
        if it is Ellipsis:
            for _ in range(ndim - consumed):
                out_shape.append(int(shape[dim]))
                out_strides.append(int(strides[dim]))
                dim += 1
        elif it is None:
            out_shape.append(1)
            out_strides.append(0)
        elif isinstance(it, slice):
            start, stop, step = it.indices(int(shape[dim]))
            n = len(range(start, stop, step))
            offset += start * int(strides[dim]) if n else 0
            out_shape.append(n)
            out_strides.append(step * int(strides[dim]))
            dim += 1
        else:
            offset += int(it) * int(strides[dim])
            dim += 1
    while dim < ndim:  # trailing dimensions without a subscript
        out_shape.append(int(shape[dim]))
        out_strides.append(int(strides[dim]))
        dim += 1
    return offset, tuple(out_shape), tuple(out_strides)


def output_layout(items: Sequence, layout: str) -> str:
    """The layout after the subscript: the letters of the kept dimensions, new axes' names
    inserted (an unnamed new axis clears the layout, as DALI's ``expand_dims``)."""
    if not layout:
        return ""
    ndim = len(layout)
    nsub = sum(1 for it in items if isinstance(it, tuple) and it[0] == "sub")
    after = 0
    seen = False
    for it in items:
        if it == _ELLIPSIS:
            seen = True
        elif seen and it[0] == "sub":
            after += 1
    out = []
    dim = 0
    for it in items:
        if it == _ELLIPSIS:
            out += layout[dim : ndim - after]
            dim = ndim - after
        elif it[0] == _NEW:
            if it[1] is None:
                return ""
            out.append(it[1])
        else:
            if dim >= ndim:
                return ""  # too many indices: reported when the data arrives
            if it[1] == "slice":
                out.append(layout[dim])
            dim += 1
    if nsub <= ndim:
        out += layout[dim:]
    return "".join(out)


@register(legacy=("TensorSubscript",))
class TensorSubscript(Operator):
    """Applies a subscript to every sample (what ``node[...]`` builds).

    Args:
        at_<i>: the index of subscript ``i`` (an int, or a CPU DataNode of per-sample
            integer scalars); removes the dimension.
        lo_<i>, hi_<i>, step_<i>: the slice of subscript ``i`` (ints or DataNodes).
        num_subscripts: how many subscripts were given, whole-dimension ones included.

    Example:
        >>> first = labels[0]              # a scalar per sample
        >>> crop = images[:, :h, :w]       # h, w: DataNodes with a scalar per sample
        >>> video = image[dlpipe.newaxis("F")]
    """

    schema = "tensor_subscript"
    devices = ("cpu", "gpu")
    arg_inputs = _ARG_NAMES
    reads_batch_arrays = True  # (run_batch_cpu: len, stack, per_sample)

    @classmethod
    def accepted_args(cls) -> set[str]:
        return set(_ARG_NAMES) | {"num_subscripts", "_items"}

    def setup(self, **kwargs) -> None:
        self.statics = {k: v for k, v in kwargs.items() if k in _ARG_NAMES}
        for k, v in self.statics.items():
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise ArgumentError(f"{self.schema}: {k}={v!r} must be an integer")
        self.statics = {k: int(v) for k, v in self.statics.items()}
        self._nsub = kwargs.get("num_subscripts")
        items = kwargs.get("_items")
        self._direct = items is None  # fn.tensor_subscript(x, at_0=...): see after_call
        if self._direct:
            self.items = self._items_from_names(set(self.statics))
        else:
            self.items = tuple(items)
        self._layout = ""

    def _items_from_names(self, names: set[str]) -> tuple:
        """The subscript list of a direct ``fn.tensor_subscript`` call, from its argument
        names (static and DataNode ones)."""
        used = {int(k.split("_")[1]) for k in names}
        count = max([*used, -1]) + 1
        if self._nsub is not None:
            if int(self._nsub) < count:
                raise ArgumentError(
                    f"{self.schema}: num_subscripts={self._nsub} declares fewer subscripts "
                    f"than given ({count})"
                )
            count = int(self._nsub)
        items = []
        for i in range(count):
            has_at = f"at_{i}" in names
            if has_at and any(f"{k}_{i}" in names for k in ("lo", "hi", "step")):
                raise ArgumentError(
                    f"{self.schema}: The subscript for dimension {i} must not be specified "
                    "both as an index and as a range."
                )
            items.append(("sub", "at" if has_at else "slice"))
        return tuple(items)

    def after_call(self, outputs):
        node = outputs[0].source
        if self._direct and node is not None and node.arg_nodes:
            self.items = self._items_from_names(set(self.statics) | set(node.arg_nodes))
        return outputs

    def output_layouts(self, input_layouts):
        self._layout = output_layout(self.items, input_layouts[0] if input_layouts else "")
        return [self._layout]

    def run_sample(self, inputs, args, param):
        x = np.asarray(inputs[0])
        index = resolve(self.items, self.statics, args, x.shape)
        return np.array(x[index], order="C")  # a copy (0-d for a full index), as DALI's

    # Over small host inputs (a constant table indexed by a random number, ...) the subscript
    # is one gather over the stacked batch (operators/_small.py).
    def small_output_in(self, node) -> bool:
        return small_host_inputs(node)

    def batch_level_in(self, node) -> bool:
        return small_host_inputs(node)

    def run_batch_cpu(self, inputs, args, params):
        n = len(inputs[0])
        out = self._gather(inputs[0], args, n) if n else None
        if out is not None:
            return (out,)
        return (_small.per_sample(self.run_sample, inputs, args, params, n),)

    def _gather(self, samples, args: dict, n: int) -> np.ndarray | None:
        """Integer subscripts only (``table[i]``, ``x[0, j]``) on samples of one shape: one
        fancy index over the stacked batch; None for anything else (slices, new axes, an index
        out of range or not an integer scalar: the per-sample path handles and names those).
        numpy's fancy index counts negative indices from the end and refuses those out of
        range (IndexError), as the per-sample subscript does."""
        items = self.items
        if not all(isinstance(it, tuple) and it == ("sub", "at") for it in items):
            return None
        x = _small.stack(samples)
        if x is None or len(items) > x.ndim - 1:
            return None
        index: list = [np.arange(n)]
        for i in range(len(items)):
            name = f"at_{i}"
            if name in args:
                at = _small.stack(args[name])
                if at is None or at.ndim != 1 or at.dtype.kind not in "iu":
                    return None
                index.append(at.astype(np.int64, copy=False))
            else:  # (a scalar broadcasts over the batch)
                index.append(int(self.statics[name]))
        try:
            out = x[tuple(index)]
        except IndexError:
            return None
        return np.ascontiguousarray(out)

    def run_batch(self, inputs, args, params, stream):
        """GPU: the subscripts become per-sample strided views, gathered in one launch;
        integer subscripts (``table[i]``) worked out with numpy over the batch
        (:meth:`_index_views`)."""
        samples = inputs[0]
        n = len(samples)
        views = self._index_views(samples, args, n) if n else None
        if views is not None:
            return gather_view_arrays(samples, *views, stream=stream)
        views = []
        for i in range(n):
            shape = tuple(int(s) for s in samples.shapes[i])
            sample_args = {k: v[i] for k, v in args.items()}
            index = resolve(self.items, self.statics, sample_args, shape)
            views.append(subscript_view(shape, samples.strides[i], index))
        return gather_views(samples, views, stream=stream)

    def _index_views(self, samples, args: dict, n: int) -> tuple | None:
        """(offsets (N,), shapes, strides (N, ndim)) of integer subscripts only, over the
        batch's shape and stride arrays; None for anything else (slices, new axes, an index
        out of range or not an integer scalar: the per-sample path handles and names those)."""
        k = len(self.items)
        shapes, strides = samples.shapes, samples.strides
        if not all(it == ("sub", "at") for it in self.items) or not 0 < k <= shapes.shape[1]:
            return None
        offsets = np.zeros(n, np.int64)
        for i in range(k):
            name = f"at_{i}"
            if name in args:
                at = _small.stack(args[name])
                if at is None or at.ndim != 1 or at.dtype.kind not in "iu" or at.dtype == np.uint64:
                    return None
                at = at.astype(np.int64)
            else:
                at = np.full(n, self.statics[name], np.int64)
            extent = shapes[:, i]
            at = np.where(at < 0, at + extent, at)
            if ((at < 0) | (at >= extent)).any():
                return None
            offsets += at * strides[:, i]
        return offsets, shapes[:, k:], strides[:, k:]
