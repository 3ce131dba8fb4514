"""``fn.normalize``: ``out = scale * (in - mean) / stddev + shift``.

DALI (``dali/operators/math/normalize/``): ``mean`` and ``stddev`` are given (scalars, or
per-sample tensors through argument inputs, broadcast numpy-style) or computed over the reduced
``axes`` (default: all), per sample or, with ``batch=True``, over the whole batch. The computed
deviation is ``sqrt(sum((x - mean)**2) / (N - ddof) + epsilon)``; a zero deviation (with
``epsilon`` = 0) makes the output ``shift`` rather than inf, and so does ``N <= ddof``. A given
``stddev`` is used as ``sqrt(stddev**2 + epsilon)`` when ``epsilon`` is set (a zero one again
gives ``shift``). The arithmetic is float32 (sums in float64); integer outputs round half away
from zero and saturate.

On the GPU (``device="gpu"``) the same arithmetic runs batched: the statistics in one reduction
launch each, the output in one elementwise launch (``_normalize_gpu.py``); float results agree
with the CPU's to float32 rounding of the (differently ordered) sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIDataType
from ._normalize_gpu import normalize_gpu
from .cast import convert_sat, parse_dtype

__all__ = ["Normalize"]


@register(legacy=("Normalize",))
class Normalize(Operator):
    """Normalizes the input: ``out = scale * (in - mean) / stddev + shift``.

    Args:
        mean: mean to subtract; a scalar or (argument input) a per-sample tensor broadcastable
            to the input. Default: computed from the data.
        stddev: standard deviation; like ``mean``. Default: computed from the data.
        axes: indices of the axes to reduce when computing mean/stddev (default: all; with a
            tensor ``mean``/``stddev``, the axes where it has extent 1).
        axis_names: the same by layout letters (e.g. ``"HW"``); exclusive with ``axes``.
        batch: compute mean/stddev over the whole batch instead of per sample (default False;
            the non-reduced extents must then match across samples).
        epsilon: added to the variance (default 0.0).
        ddof: delta degrees of freedom of the computed variance (default 0).
        shift: added to the result (default 0.0). scale: multiplies it (default 1.0).
        dtype: FLOAT (default) or another numeric type (integers round and saturate).

    Example:
        >>> with pipe:
        ...     out = fn.normalize(images, axes=[0, 1])  # per channel, per sample (HWC)
    """

    schema = "normalize"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"mean", "stddev"})

    def setup(
        self,
        *,
        mean=None,
        stddev=None,
        axes=None,
        axis_names=None,
        batch=False,
        epsilon=0.0,
        ddof=0,
        shift=0.0,
        scale=1.0,
        dtype=DALIDataType.FLOAT,
    ) -> None:
        if axes is not None and axis_names is not None:
            raise ArgumentError(
                f"{self.schema}: axes={axes!r} and axis_names={axis_names!r} cannot be given "
                "together"
            )
        self.axes = None if axes is None else self._axes_tuple(axes)
        if axis_names is not None and not isinstance(axis_names, str):
            raise ArgumentError(f"{self.schema}: axis_names={axis_names!r} must be a str")
        self.axis_names = axis_names
        self.mean = self._param(mean, "mean")
        self.stddev = self._param(stddev, "stddev")
        self.batch = bool(batch)
        self.batch_level = self.batch  # whole batches through run_batch_cpu
        if self.batch:
            for name, v in (("mean", self.mean), ("stddev", self.stddev)):
                if v is not None and v.ndim:
                    raise ArgumentError(
                        f"{self.schema}: a non-scalar {name} cannot be used with batch=True"
                    )
        self.epsilon = float(epsilon)
        if not self.epsilon >= 0:
            raise ArgumentError(f"{self.schema}: epsilon={epsilon!r} must be >= 0")
        if isinstance(ddof, bool) or not isinstance(ddof, int | np.integer) or ddof < 0:
            raise ArgumentError(f"{self.schema}: ddof={ddof!r} must be an int >= 0")
        self.ddof = int(ddof)
        self.shift = float(shift)
        self.scale = float(scale)
        self.dtype = parse_dtype(dtype, self.schema)
        self._layout = ""

    def _axes_tuple(self, axes) -> tuple[int, ...]:
        arr = np.atleast_1d(np.asarray(axes))
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ArgumentError(f"{self.schema}: axes={axes!r} must be a list of ints")
        return tuple(int(a) for a in arr)

    def _param(self, v, name: str) -> np.ndarray | None:
        if v is None:
            return None
        arr = np.asarray(v, dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            raise ArgumentError(f"{self.schema}: {name}={v!r} must be finite")
        return arr

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        if self.axis_names and self._layout:
            self._axes_from_names(self._layout)
        return [self._layout]

    def _axes_from_names(self, layout: str) -> tuple[int, ...]:
        missing = [a for a in self.axis_names if a not in layout]
        if missing:
            raise ArgumentError(
                f"{self.schema}: axis_names={self.axis_names!r} names axes not in the input "
                f"layout {layout!r}"
            )
        return tuple(layout.index(a) for a in self.axis_names)

    # --- per sample ---------------------------------------------------------------------------
    def _reduced_axes(self, ndim: int, params: Sequence[np.ndarray | None]) -> tuple[int, ...]:
        if self.axis_names:
            if not self._layout:
                raise ArgumentError(
                    f"{self.schema}: axis_names={self.axis_names!r} needs an input layout"
                )
            axes = self._axes_from_names(self._layout)
        elif self.axes is not None:
            axes = self.axes
        else:
            tensors = [p for p in params if p is not None and p.ndim]
            if tensors:
                p = tensors[0]
                if p.ndim != ndim:
                    raise ArgumentError(
                        f"{self.schema}: mean/stddev of shape {list(p.shape)} must have the "
                        f"input's {ndim} dimensions"
                    )
                return tuple(d for d in range(ndim) if p.shape[d] == 1)
            return tuple(range(ndim))
        out = []
        for a in axes:
            if not -ndim <= a < ndim:
                raise ArgumentError(f"{self.schema}: axis {a} is out of range for a {ndim}-D input")
            out.append(a % ndim)
        return tuple(sorted(set(out)))

    def _given(self, args: dict, name: str, x: np.ndarray) -> np.ndarray | None:
        v = args.get(name)
        v = getattr(self, name) if v is None else np.asarray(v, dtype=np.float32)
        if v is None or v.ndim == 0:
            return v
        if v.ndim != x.ndim or any(p not in (1, s) for p, s in zip(v.shape, x.shape, strict=True)):
            raise ArgumentError(
                f"{self.schema}: {name} of shape {list(v.shape)} does not broadcast to the "
                f"input of shape {list(x.shape)} (each extent must be 1 or match)"
            )
        return v

    def _inv_from_given(self, std: np.ndarray) -> np.ndarray:
        std = std.astype(np.float32)
        scale = np.float32(self.scale)
        if self.epsilon:
            return (scale / np.sqrt(std * std + np.float32(self.epsilon))).astype(np.float32)
        with np.errstate(divide="ignore"):
            return np.where(std != 0, scale / std, np.float32(0)).astype(np.float32)

    def _inv_from_sumsq(self, sumsq: np.ndarray, n: int) -> np.ndarray:
        scale = np.float32(self.scale)
        eps = np.float32(self.epsilon)
        if n > self.ddof:
            var = (sumsq / (n - self.ddof)).astype(np.float32)
        elif self.epsilon:
            var = np.zeros_like(sumsq, dtype=np.float32)
        else:
            return np.zeros_like(sumsq, dtype=np.float32)
        var = var + eps
        with np.errstate(divide="ignore"):
            return np.where(var != 0, scale / np.sqrt(var), np.float32(0)).astype(np.float32)

    def _apply(self, x: np.ndarray, mean, inv) -> np.ndarray:
        y = np.subtract(x, mean, dtype=np.float32)
        y *= inv
        if self.shift:
            y += np.float32(self.shift)
        return y if self.dtype == np.float32 else convert_sat(y, self.dtype)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        mean = self._given(args, "mean", x)
        std = self._given(args, "stddev", x)
        axes = self._reduced_axes(x.ndim, (mean, std))
        n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        if mean is None:
            mean = (x.sum(axis=axes, keepdims=True, dtype=np.float64) / max(n, 1)).astype(
                np.float32
            )
            if std is None and x.dtype == np.float32 and x.ndim:
                # both computed from float32 data: ``x - mean`` once in float32, its squares
                # summed in float64, the same array scaled in place to the output
                d = np.subtract(x, mean)
                sumsq = np.square(d).sum(axis=axes, keepdims=True, dtype=np.float64)
                d *= self._inv_from_sumsq(sumsq, n)
                if self.shift:
                    d += np.float32(self.shift)
                return d if self.dtype == np.float32 else convert_sat(d, self.dtype)
        if std is None:
            d = np.subtract(x, mean, dtype=np.float64)
            inv = self._inv_from_sumsq((d * d).sum(axis=axes, keepdims=True), n)
        else:
            inv = self._inv_from_given(std)
        return self._apply(x, mean, inv)

    # --- batch=True ---------------------------------------------------------------------------
    def run_batch_cpu(self, inputs, args, params):
        xs = [np.asarray(x) for x in inputs[0]]
        if not xs:
            return [[]]
        ndim = xs[0].ndim
        if any(x.ndim != ndim for x in xs):
            raise ArgumentError(f"{self.schema}: batch=True needs samples of equal rank")
        axes = self._reduced_axes(ndim, ())
        kept = [d for d in range(ndim) if d not in axes]
        if len({tuple(x.shape[d] for d in kept) for x in xs}) > 1:
            raise ArgumentError(
                f"{self.schema}: batch=True needs equal extents in the non-reduced axes "
                f"{kept}; got shapes {[list(x.shape) for x in xs]}"
            )
        means = [
            self._given({k: v[i] for k, v in args.items()}, "mean", x) for i, x in enumerate(xs)
        ]
        stds = [
            self._given({k: v[i] for k, v in args.items()}, "stddev", x) for i, x in enumerate(xs)
        ]
        n = sum(int(np.prod([x.shape[a] for a in axes])) for x in xs)
        if means[0] is None:
            total = sum(x.sum(axis=axes, keepdims=True, dtype=np.float64) for x in xs)
            batch_mean = (total / max(n, 1)).astype(np.float32)
            means = [batch_mean] * len(xs)
        if stds[0] is None:
            sumsq = 0.0
            for x, m in zip(xs, means, strict=True):
                d = np.subtract(x, m, dtype=np.float64)
                sumsq = sumsq + (d * d).sum(axis=axes, keepdims=True)
            invs = [self._inv_from_sumsq(np.asarray(sumsq), n)] * len(xs)
        else:
            invs = [self._inv_from_given(s) for s in stds]
        return [[self._apply(x, m, v) for x, m, v in zip(xs, means, invs, strict=True)]]

    # --- GPU ----------------------------------------------------------------------------------
    def run_batch(self, inputs, args, params, stream):
        """GPU: the statistics reduced in one launch each, the output in one more (see
        ``_normalize_gpu.py``); per-sample and ``batch=True`` alike."""
        return normalize_gpu(self, inputs[0], args, stream)
