"""``fn.reshape``: view every sample with another shape and/or layout (DALI's ``Reshape``,
``dali/operators/generic/reshape.cc``). Nothing is copied: on the CPU the output is a view of
the (C-ordered) input, on the GPU the same device memory with new shapes and strides.

The new shape comes from one of (mutually exclusive):

* ``shape``: a list of ints, a per-sample argument input, or a second positional input (a CPU
  node of integers). One extent may be negative: it takes whatever makes the volume match.
  A zero extent in a static ``shape`` is an error.
* ``rel_shape``: fractions of the input's extents, ``round(rel[d] * in.shape[src_dims[d]])``
  (``src_dims[d]`` is ``d`` without ``src_dims``; a ``src_dims`` entry of -1 or a negative
  ``rel_shape`` entry multiplies 1: a negative extent is again the wildcard).
* ``src_dims`` alone: output axis ``d`` is input axis ``src_dims[d]`` (-1 inserts an axis of
  extent 1); axes left out must have extent 1, since the volume must not change.

Layout: ``layout`` when given (``""`` clears it), else the input's when the rank is unchanged,
else empty. A layout is fixed when the pipeline is built: when the rank depends on the data (a
shape input or argument input) the input layout is kept, and a sample of another rank raises
an error asking for ``layout=`` (DALI would clear the layout of that batch).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._tensor_args import int_list, layout_arg, llround

__all__ = ["Reshape", "view_as"]


def view_as(x: np.ndarray, shape, dtype=None) -> np.ndarray:
    """``x`` (made C-contiguous if it is not) viewed with ``shape`` (and ``dtype``)."""
    x = np.ascontiguousarray(x)
    if dtype is not None and np.dtype(dtype) != x.dtype:
        x = x.reshape(-1).view(dtype)
    return x.reshape(tuple(int(v) for v in shape))


@register(legacy=("Reshape",))
class Reshape(Operator):
    """Treats each sample as if it had another shape and/or layout (no copy).

    Inputs:
        data: the batch.
        shape_input (optional): a CPU node of integer shapes (same as ``shape``).

    Args:
        shape: the output shape; one extent may be -1 (inferred). Argument input allowed.
        rel_shape: the output shape relative to the input's extents. Argument input allowed.
        src_dims: the input axis of each output axis (-1 inserts an axis of extent 1).
        layout: the output layout ("" clears it).

    Example:
        >>> with pipe:
        ...     flat = fn.reshape(images, shape=[-1])          # 1-D
        ...     cdhw = fn.reshape(volume, src_dims=[-1, 0, 1, 2], layout="CDHW")
    """

    schema = "reshape"
    devices = ("cpu", "gpu")
    num_inputs = (1, 2)
    cpu_inputs = (1,)
    arg_inputs = frozenset({"shape", "rel_shape"})
    _can_change_type = False

    def setup(self, *, shape=None, rel_shape=None, src_dims=None, layout=None) -> None:
        self._setup(shape, rel_shape, src_dims, layout)

    def _setup(self, shape, rel_shape, src_dims, layout, dtype=None) -> None:
        who = self.schema
        self.shape = int_list(shape, who, "shape")
        self.rel_shape = None
        if rel_shape is not None:
            rel = np.atleast_1d(np.asarray(rel_shape, np.float64)).reshape(-1)
            if rel.size == 0:
                raise ArgumentError(f"{who}: rel_shape={rel_shape!r} is an empty list")
            if not np.all(np.isfinite(rel)) or (rel == 0).any():
                raise ArgumentError(f"{who}: rel_shape={rel_shape!r}: extent of 0 is illegal")
            self.rel_shape = rel
        for vals, name in ((self.shape, "shape"), (self.rel_shape, "rel_shape")):
            if vals is not None and sum(1 for v in vals if v < 0) > 1:
                raise ArgumentError(
                    f"{who}: {name}={list(vals)}: only one negative extent is allowed"
                )
        if self.shape is not None and 0 in self.shape:
            raise ArgumentError(f"{who}: shape={list(self.shape)}: extent of 0 is illegal")
        self.src_dims = int_list(src_dims, who, "src_dims")
        self.layout = layout_arg(layout, who, "layout")
        self.dtype = dtype
        self._dynamic = False
        self._out_layout = ""

    def after_call(self, outputs):
        node = outputs[0].source
        sources = [
            ("a shape input", len(node.inputs) == 2),
            ("shape", self.shape is not None or "shape" in node.arg_nodes),
            ("rel_shape", self.rel_shape is not None or "rel_shape" in node.arg_nodes),
        ]
        given = [name for name, on in sources if on]
        if len(given) > 1:
            raise ArgumentError(
                f"{self.schema}: shape input, `shape` argument and `rel_shape` argument are "
                f"mutually exclusive (got {', '.join(given)})"
            )
        self._dynamic = len(node.inputs) == 2 or bool(node.arg_nodes)
        if len(node.inputs) == 2 and node.inputs[1].device != "cpu":
            raise ArgumentError(f"{self.schema}: output shapes must be provided as a CPU input")
        if not given and self.layout is None and self.src_dims is None:
            if not self._can_change_type:
                raise ArgumentError(
                    f"{self.schema} is no-op: arguments specify neither new shape nor layout"
                )
            if self.dtype is None:
                raise ArgumentError(
                    f"{self.schema} is no-op: arguments specify neither new shape, layout nor type"
                )
        return outputs

    def _static_rank(self, dynamic: bool) -> int | None:
        """The output rank when the arguments fix it; None when it depends on the data (a
        shape input or argument input), or on the input's rank (-1)."""
        if dynamic:
            return None
        for vals in (self.shape, self.rel_shape, self.src_dims):
            if vals is not None:
                return len(vals)
        return -1

    def output_layouts(self, input_layouts):
        in_layout = input_layouts[0] if input_layouts else ""
        rank = self._static_rank(self._dynamic)
        if self.layout is not None:
            if self.layout and rank is not None and rank >= 0 and len(self.layout) != rank:
                raise ArgumentError(
                    f"{self.schema}: requested layout {self.layout!r} is not compatible with a "
                    f"{rank}D shape"
                )
            self._out_layout = self.layout
        elif rank is None or rank == -1:
            # A data-dependent rank keeps the input layout; a sample whose rank differs from
            # it fails (see layout_for), since a layout is fixed when the pipeline is built.
            self._out_layout = in_layout
        else:
            self._out_layout = in_layout if len(in_layout) == rank else ""
        return [self._out_layout]

    def layout_for(self, out_ndim: int) -> None:
        """Check that ``out_ndim``-D outputs fit the output layout chosen at build time."""
        lay = self._out_layout
        if lay and len(lay) != out_ndim:
            if self.layout is not None:
                raise ArgumentError(
                    f"{self.schema}: requested layout {lay!r} is not compatible with a "
                    f"{out_ndim}D shape"
                )
            raise ArgumentError(
                f"{self.schema}: the output has {out_ndim} dimensions but keeps the input layout "
                f'{lay!r} (its rank depends on the data); give layout= ("" clears it)'
            )

    # --- shapes ---------------------------------------------------------------------------------
    def _check_src_dims(self, ndim: int) -> None:
        for d, s in enumerate(self.src_dims or ()):
            if not -1 <= s < ndim:
                raise ArgumentError(
                    f"{self.schema}: `src_dims[{d}] == {s}` is out of bounds. The indices in "
                    f"`src_dims` should be either valid dimension indices in range "
                    f"[0..{ndim - 1}] or -1 to insert a new dimension"
                )

    def _relative(self, in_shape: np.ndarray, rel: np.ndarray) -> list[int]:
        ndim = len(in_shape)
        if self.src_dims is not None:
            if len(self.src_dims) != rel.size:
                raise ArgumentError(
                    f"{self.schema}: `src_dims` and `rel_shape` have different lengths: "
                    f"{len(self.src_dims)} vs {rel.size}"
                )
        elif rel.size > ndim + (rel[-1] < 0):
            raise ArgumentError(
                f"{self.schema}: `rel_shape` has more elements ({rel.size}) than there are "
                f"dimensions in the input ({ndim}). To add new dimensions, use `src_dims`"
            )
        out = []
        for d, r in enumerate(rel):
            src = self.src_dims[d] if self.src_dims is not None else (-1 if r < 0 else d)
            out.append(int(llround(r * (1 if src < 0 else in_shape[src]))))
        return out

    def sample_shape(self, in_shape, itemsize: int, out_itemsize: int, given=None, rel=None):
        """The output shape of one sample of ``in_shape``: ``given`` is the sample's shape
        input or argument input (ints), ``rel`` its ``rel_shape`` argument input."""
        in_shape = np.asarray(in_shape, np.int64)
        ndim = len(in_shape)
        self._check_src_dims(ndim)
        if given is not None:
            out = self._given_shape(given)
        elif rel is not None:
            out = self._relative(in_shape, np.asarray(rel, np.float64).reshape(-1))
        elif self.rel_shape is not None:
            out = self._relative(in_shape, self.rel_shape)
        elif self.shape is not None:
            out = list(self.shape)
        elif self.src_dims is not None:
            out = [1 if s < 0 else int(in_shape[s]) for s in self.src_dims]
            if int(np.prod(out)) != int(np.prod(in_shape)):
                raise ArgumentError(
                    f"{self.schema}: the volume of the new shape should match the one of the "
                    f"original shape. Requested a shape with {int(np.prod(out))} elements but "
                    f"the original shape {in_shape.tolist()} has {int(np.prod(in_shape))}"
                )
            return self._retype(out, itemsize, out_itemsize)
        else:  # layout (or type) only
            return self._retype(in_shape.tolist(), itemsize, out_itemsize)
        return self._infer(out, in_shape, itemsize, out_itemsize)

    def _given_shape(self, given) -> list[int]:
        arr = np.asarray(given)
        if arr.dtype.kind not in "iu":
            raise ArgumentError(
                f"{self.schema}: the shape input must have an integral type; got {arr.dtype}"
            )
        if arr.ndim > 1:
            raise ArgumentError(f"{self.schema}: the shape input must be a list of 1D tensors")
        return [int(v) for v in arr.reshape(-1)]

    def _infer(self, out: list[int], in_shape, itemsize: int, out_itemsize: int) -> list[int]:
        volume = int(np.prod(in_shape))
        wild = [d for d, e in enumerate(out) if e < 0]
        if len(wild) > 1:
            raise ArgumentError(
                f"{self.schema}: only one dimension can have negative extent; got {out}"
            )
        if wild:
            rest = [1 if d == wild[0] else e for d, e in enumerate(out)]
            other = int(np.prod(rest))
            if other == 0:
                raise ArgumentError(
                    f"{self.schema}: cannot infer the extent of dimension {wild[0]} when the "
                    f"volume of the remaining dimensions is 0 (input shape {in_shape.tolist()})"
                )
            out = list(rest)
            out[wild[0]] = volume * itemsize // (other * out_itemsize)
        requested = int(np.prod(out))
        if volume * itemsize != requested * out_itemsize:
            raise ArgumentError(
                f"{self.schema}: input and output samples must occupy the same size in bytes: "
                f"input shape {in_shape.tolist()} ({volume * itemsize} bytes), requested shape "
                f"{out} ({requested * out_itemsize} bytes)"
            )
        return out

    def _retype(self, out: list[int], itemsize: int, out_itemsize: int) -> list[int]:
        if itemsize == out_itemsize:
            return out
        if not out or (out[-1] * itemsize) % out_itemsize:
            raise ArgumentError(
                f"{self.schema}: the size, in bytes, of the innermost dimension is not "
                "divisible by the size of the requested output type"
            )
        out[-1] = out[-1] * itemsize // out_itemsize
        return out

    def _out_dtype(self, in_dtype) -> np.dtype:
        return np.dtype(self.dtype) if self.dtype is not None else np.dtype(in_dtype)

    def _shape_for(self, in_shape, in_dtype, extra: tuple, args: dict) -> list[int]:
        out_dt = self._out_dtype(in_dtype)
        given = extra[0] if extra else args.get("shape")
        return self.sample_shape(
            in_shape, np.dtype(in_dtype).itemsize, out_dt.itemsize, given, args.get("rel_shape")
        )

    # --- running --------------------------------------------------------------------------------
    def run_sample(self, inputs, args, param):
        x = inputs[0]
        out = self._shape_for(x.shape, x.dtype, inputs[1:], args)
        self.layout_for(len(out))
        return view_as(x, out, self._out_dtype(x.dtype))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels._batch import as_samples
        from ..kernels.layout import view_batch

        s = as_samples(inputs[0])
        n = len(s)
        shapes = [
            self._shape_for(
                s.shapes[i],
                s.dtype,
                tuple(inp[i] for inp in inputs[1:]),
                {k: v[i] for k, v in args.items()},
            )
            for i in range(n)
        ]
        if len({len(v) for v in shapes}) > 1:
            raise ArgumentError(f"{self.schema}: all samples must have the same number of dims")
        if n:
            self.layout_for(len(shapes[0]))
        return view_batch(s, shapes, self._out_dtype(s.dtype), stream=stream)
