"""``fn.reductions.*``: min, max, sum, mean, mean_square, rms, std_dev, variance (DALI's
``dali/operators/generic/reduce/``), per sample, over ``axes`` / ``axis_names`` (default: all).

Output shape: the reduced axes removed (a full reduction gives a 0-D scalar), or kept with
extent 1 (``keep_dims``); the layout loses the reduced letters (all of them kept with
``keep_dims``). An explicit empty ``axes=[]`` reduces nothing.

Output types (DALI's): min/max the input's; sum widens integers to INT64/UINT64 (floats stay);
mean, mean_square and rms give FLOAT; ``dtype`` overrides those (sum, mean, mean_square, rms).
std_dev and variance take the mean as a second input (FLOAT, of the reduced shape, with or
without the unit axes; e.g. ``fn.reductions.mean`` with the same axes) and give FLOAT:
``variance = sum((x - mean)**2) / (n - ddof)``; with ``axes=[]`` they give zeros, as DALI does.

Accumulation is in float64 here (DALI accumulates in the output type), so sums that overflow a
narrow ``dtype`` in DALI saturate here instead; an integer ``dtype`` for mean-like outputs
truncates toward zero, as DALI's conversion does. Reducing an empty set gives 0 for sums, the
type's largest (min) or lowest (max) value, and NaN for float means, as DALI's neutral values.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import alloc_batch, as_samples, uniform_rows
from ..kernels.reduce import reduce_batch
from ._tensor_args import axes_from_names, clamp_cast, int_list, layout_arg, normalize_axes
from .cast import parse_dtype

__all__ = ["Max", "Mean", "MeanSquare", "Min", "RMS", "StdDev", "Sum", "Variance"]


def _extreme(dtype, biggest: bool) -> float:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        info = np.finfo(dt)
        return float(info.max if biggest else info.min)
    if dt.kind == "b":
        return 1.0 if biggest else 0.0
    info = np.iinfo(dt)
    return float(info.max if biggest else info.min)


class _Reduce(Operator):
    """The arguments, shapes and layouts every reduction shares; ``op`` names the kernel."""

    devices = ("cpu", "gpu")
    op = ""
    has_dtype = False

    def setup(self, *, axes=None, axis_names=None, keep_dims=False, dtype=None) -> None:
        self._setup(axes, axis_names, keep_dims)
        if dtype is not None and not self.has_dtype:
            raise ArgumentError(f"{self.schema}: unknown argument(s) ['dtype']")
        self.dtype = parse_dtype(dtype, self.schema)

    def _setup(self, axes, axis_names, keep_dims) -> None:
        who = self.schema
        if axes is not None and axis_names is not None:
            raise ArgumentError(f"{who}: arguments axes and axis_names are mutually exclusive")
        self.axes = int_list(axes, who, "axes")
        self.axis_names = layout_arg(axis_names, who, "axis_names")
        self.keep_dims = bool(keep_dims)
        self._layout = ""

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        self._layout = layout
        if self.axis_names:
            axes_from_names(self.axis_names, layout, self.schema)  # the letters must exist
        if not layout or self.keep_dims:
            return [layout]
        if self.axis_names is not None:
            red = set(self.reduced_axes(len(layout)))
        elif self.axes is not None:
            red = set(normalize_axes(self.axes, len(layout), self.schema))
        else:
            red = set(range(len(layout)))
        return ["".join(c for d, c in enumerate(layout) if d not in red)]

    def reduced_axes(self, ndim: int) -> list[int]:
        if self.axis_names is not None:
            if not self.axis_names:
                return []
            return axes_from_names(self.axis_names, self._layout, self.schema)
        if self.axes is None:
            return list(range(ndim))
        axes = normalize_axes(self.axes, ndim, self.schema)
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"{self.schema}: axes={list(self.axes)}: duplicate axis index")
        return sorted(axes)

    def out_shape(self, in_shape, axes) -> tuple[int, ...]:
        if self.keep_dims:
            return tuple(1 if d in axes else int(e) for d, e in enumerate(in_shape))
        return tuple(int(e) for d, e in enumerate(in_shape) if d not in axes)

    def out_dtype(self, in_dtype) -> np.dtype:
        return np.dtype(in_dtype)

    def neutral(self, out_dtype) -> float:
        if self.op == "min":
            return _extreme(out_dtype, True)
        if self.op == "max":
            return _extreme(out_dtype, False)
        return 0.0

    def norm(self, count: int) -> float:
        if self.op in ("mean", "mean_square", "rms"):
            return 1.0 / count if count else float("inf")
        return 1.0

    # --- CPU ----------------------------------------------------------------------------------
    def _reduce(self, x: np.ndarray, axes: tuple, mean=None) -> np.ndarray:
        """The float64 (or exact integer, for min/max/sum of ints) reduction, axes dropped."""
        x = np.asarray(x)
        if self.op in ("min", "max"):
            if x.size == 0 or any(x.shape[a] == 0 for a in axes):
                out = np.full(self.out_shape(x.shape, axes), self.neutral(x.dtype))
                return out.reshape(tuple(e for d, e in enumerate(x.shape) if d not in axes))
            return (np.min if self.op == "min" else np.max)(x, axis=axes)
        if self.op == "sum":
            acc = np.int64 if x.dtype.kind in "ib" else np.uint64 if x.dtype.kind == "u" else None
            return np.sum(x, axis=axes, dtype=acc or np.float64)
        v = x.astype(np.float64)
        if self.op in ("mean_square", "rms"):
            v = v * v
        elif mean is not None:
            v = (v - mean) ** 2
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sum(v, axis=axes) * self.norm_for(count)
            return np.sqrt(s) if self.op in ("rms", "std_dev") else s

    def norm_for(self, count: int) -> float:
        return self.norm(count)

    def _finish(self, r, x_shape, axes, out_dt) -> np.ndarray:
        r = np.asarray(r).reshape(self.out_shape(x_shape, axes))
        if r.dtype.kind in "iu" and out_dt.kind in "iu":
            return clamp_cast(r, out_dt)
        return clamp_cast(np.asarray(r, np.float64), out_dt) if out_dt != r.dtype else r

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        axes = tuple(self.reduced_axes(x.ndim))
        out_dt = self.out_dtype(x.dtype)
        return self._finish(self._reduce(x, axes), x.shape, axes, out_dt)

    # --- GPU ----------------------------------------------------------------------------------
    def _gpu_plan(self, s):
        n = len(s)
        ndim = s.shapes.shape[1] if n else 0
        if n and uniform_rows(s.shapes):  # one shape: one sample's plan for every sample
            axes, out_row, norm = self._gpu_row_plan(s.shapes[0].tobytes())
            return axes, np.repeat(out_row, n, axis=0), np.repeat(norm, n)
        axes = self.reduced_axes(ndim)
        out_shapes = np.array([self.out_shape(sh, axes) for sh in s.shapes], np.int64)
        counts = [int(np.prod(sh[axes])) if axes else 1 for sh in s.shapes]
        norms = np.array([self.norm_for(c) for c in counts], np.float64)
        return axes, out_shapes.reshape(n, -1), norms

    def _gpu_row_plan(self, shape: bytes):
        """(reduced axes, (1, out_ndim) output shape, (1,) norm) of a sample of ``shape``
        (int64 bytes), memoised per shape: a batch of one shape plans once."""
        memo = self.__dict__.setdefault("_row_plans", {})
        plan = memo.get(shape)
        if plan is None:
            sh = np.frombuffer(shape, np.int64)
            axes = self.reduced_axes(len(sh))
            count = int(np.prod(sh[axes])) if axes else 1
            out_row = np.array([self.out_shape(sh, axes)], np.int64).reshape(1, -1)
            norm = np.array([self.norm_for(count)], np.float64)
            if len(memo) >= 64:
                memo.clear()
            plan = memo[shape] = (axes, out_row, norm)
        return plan

    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        axes, out_shapes, norms = self._gpu_plan(s)
        out_dt = self.out_dtype(s.dtype)
        return reduce_batch(
            s, axes, self.op, out_dt, out_shapes, norms, self.neutral(out_dt), stream=stream
        )


class _WithType(_Reduce):
    has_dtype = True

    def out_dtype(self, in_dtype) -> np.dtype:
        if self.dtype is not None:
            return self.dtype
        return np.dtype(np.float32)


@register(legacy=())
class Min(_Reduce):
    """The smallest element along ``axes`` (default: all); the input's type.

    Args:
        axes: the reduced axes. axis_names: the same by layout letter.
        keep_dims: keep the reduced axes with extent 1 (default False).

    Example:
        >>> with pipe:
        ...     lo = fn.reductions.min(images, axis_names="HW")  # per channel
    """

    schema = "reductions.min"
    op = "min"

    def setup(self, *, axes=None, axis_names=None, keep_dims=False) -> None:
        self._setup(axes, axis_names, keep_dims)
        self.dtype = None


@register(legacy=())
class Max(Min):
    """The largest element along ``axes`` (default: all); the input's type.

    Args:
        axes: the reduced axes. axis_names: the same by layout letter.
        keep_dims: keep the reduced axes with extent 1 (default False).
    """

    schema = "reductions.max"
    op = "max"


@register(legacy=())
class Sum(_Reduce):
    """The sum along ``axes``: INT64/UINT64 for integer inputs, else the input's type.

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        dtype: the output (and accumulation) type.
    """

    schema = "reductions.sum"
    op = "sum"
    has_dtype = True

    def out_dtype(self, in_dtype) -> np.dtype:
        if self.dtype is not None:
            return self.dtype
        dt = np.dtype(in_dtype)
        if dt.kind == "u":
            return np.dtype(np.uint64)
        if dt.kind in "ib":
            return np.dtype(np.int64)
        return dt


@register(legacy=())
class Mean(_WithType):
    """The mean along ``axes`` (FLOAT unless ``dtype``).

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        dtype: the output type.
    """

    schema = "reductions.mean"
    op = "mean"


@register(legacy=())
class MeanSquare(_WithType):
    """The mean of the squares along ``axes`` (FLOAT unless ``dtype``).

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        dtype: the output type.
    """

    schema = "reductions.mean_square"
    op = "mean_square"


@register(legacy=())
class RMS(_WithType):
    """The root mean square along ``axes`` (FLOAT unless ``dtype``).

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        dtype: the output type.
    """

    schema = "reductions.rms"
    ops_name = "RMS"
    op = "rms"


class _WithMean(_Reduce):
    """std_dev and variance: the mean is the second input; ``ddof`` adjusts the divisor."""

    num_inputs = (2, 2)

    def setup(self, *, axes=None, axis_names=None, keep_dims=False, ddof=0) -> None:
        self._setup(axes, axis_names, keep_dims)
        if isinstance(ddof, bool) or not isinstance(ddof, int | np.integer):
            raise ArgumentError(f"{self.schema}: ddof={ddof!r} must be an int")
        self.ddof = int(ddof)
        self.dtype = None
        self.empty_axes = (self.axes is not None and len(self.axes) == 0) or self.axis_names == ""

    def out_dtype(self, in_dtype) -> np.dtype:
        return np.dtype(np.float32)

    def norm_for(self, count: int) -> float:
        d = count - self.ddof
        return 1.0 / d if d else float("inf")

    def _mean_for(self, mean, x_shape, axes) -> np.ndarray:
        m = np.asarray(mean)
        if m.dtype.kind != "f":
            raise ArgumentError(
                f"{self.schema}: the mean input must be FLOAT, got {m.dtype} (e.g. the output of "
                "fn.reductions.mean with the same axes)"
            )
        kept = tuple(1 if d in axes else int(e) for d, e in enumerate(x_shape))
        if m.size != int(np.prod(kept)):
            raise ArgumentError(
                f"{self.schema}: the mean of shape {list(m.shape)} does not match the reduced "
                f"shape {[e for d, e in enumerate(x_shape) if d not in axes]}"
            )
        return m.astype(np.float32).astype(np.float64).reshape(kept)

    def run_sample(self, inputs, args, param):
        x, mean = inputs
        axes = tuple(self.reduced_axes(x.ndim))
        shape = self.out_shape(x.shape, axes)
        m = self._mean_for(mean, x.shape, axes)
        if self.empty_axes:
            return np.zeros(shape, np.float32)
        r = self._reduce(x, axes, m)
        return np.asarray(r, np.float64).reshape(shape).astype(np.float32)

    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        means = as_samples(inputs[1])
        axes, out_shapes, norms = self._gpu_plan(s)
        for i in range(len(s)):
            if means.dtype != np.float32:
                raise ArgumentError(
                    f"{self.schema}: the mean input must be FLOAT, got {means.dtype}"
                )
            if int(np.prod(means.shapes[i])) != int(np.prod(out_shapes[i])):
                raise ArgumentError(
                    f"{self.schema}: the mean of shape {means.shapes[i].tolist()} does not match "
                    f"the reduced shape {out_shapes[i].tolist()} (sample {i})"
                )
        if self.empty_axes:
            out = alloc_batch(out_shapes, np.float32, s.device_id)
            with stream:
                for i in range(len(out)):
                    out[i].fill(0)
            return out
        return reduce_batch(
            s, axes, self.op, np.float32, out_shapes, norms, 0.0, means, stream=stream
        )


@register(legacy=())
class StdDev(_WithMean):
    """The standard deviation along ``axes``, given the mean (second input); FLOAT.

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        ddof: delta degrees of freedom: the divisor is ``n - ddof`` (default 0).

    Example:
        >>> with pipe:
        ...     mean = fn.reductions.mean(x, axes=[0, 1])
        ...     std = fn.reductions.std_dev(x, mean, axes=[0, 1])
    """

    schema = "reductions.std_dev"
    op = "std_dev"


@register(legacy=())
class Variance(_WithMean):
    """The variance along ``axes``, given the mean (second input); FLOAT.

    Args:
        axes, axis_names, keep_dims: as in ``reductions.min``.
        ddof: delta degrees of freedom: the divisor is ``n - ddof`` (default 0).
    """

    schema = "reductions.variance"
    op = "variance"
