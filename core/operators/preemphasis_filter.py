"""``fn.preemphasis_filter``: ``y[t] = x[t] - coeff * x[t-1]`` (DALI's ``PreemphasisFilter``).

The sample is treated as one flat signal (its elements in memory order), whatever its shape,
as in DALI. ``x[-1]`` is 0 (``border="zero"``), ``x[0]`` ("clamp", the default) or ``x[1]``
("reflect"). The arithmetic is float32 (float64 for a float64 input); the result is written to
``dtype`` (FLOAT by default) rounding half away from zero and saturating. A coefficient of 0
copies the input (converted).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels.audio import preemphasis_batch
from ..types import DALIDataType
from ._audio_args import float_arg, per_sample_float, per_sample_floats
from .cast import convert_sat, parse_dtype

__all__ = ["PreemphasisFilter", "preemphasis"]

BORDERS = ("zero", "clamp", "reflect")


def preemphasis(x: np.ndarray, coeff: float, border: str, dtype) -> np.ndarray:
    """The filter on one sample (any shape, filtered flat), written as ``dtype``."""
    flat = np.ascontiguousarray(x).reshape(-1)
    work = np.float64 if flat.dtype == np.float64 else np.float32
    if coeff == 0.0 or flat.size == 0:
        return convert_sat(flat, dtype).reshape(x.shape)
    c = work(coeff)
    f = flat.astype(work, copy=False)
    out = np.empty_like(f)
    np.multiply(f[:-1], -c, out=out[1:])  # x[t] - c * x[t-1], rounded as written
    out[1:] += f[1:]
    if border == "zero":
        out[0] = f[0]
    else:
        prev = f[1] if border == "reflect" and f.size > 1 else f[0]
        out[0] = f[0] - c * prev
    return convert_sat(out, dtype).reshape(x.shape)


@register(legacy=("PreemphasisFilter",))
class PreemphasisFilter(Operator):
    """Applies a preemphasis filter: ``Y[t] = X[t] - coeff * X[t-1]``.

    Args:
        preemph_coeff: the coefficient (default 0.97); per-sample argument input allowed.
        border: the value of ``X[-1]``: "zero" (0), "clamp" (``X[0]``, default) or "reflect"
            (``X[1]``).
        dtype: output type (default FLOAT).

    Example:
        >>> audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
    """

    process_safe = True  # see Operator; the sample processes may run it

    schema = "preemphasis_filter"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"preemph_coeff"})

    def setup(self, *, preemph_coeff=0.97, border: str = "clamp", dtype=DALIDataType.FLOAT):
        self.coeff = float_arg(preemph_coeff, "preemph_coeff", self.schema)
        if border not in BORDERS:
            raise ArgumentError(
                f"{self.schema}: border={border!r} is not supported; use one of {BORDERS}"
            )
        self.border = border
        self.dtype = parse_dtype(dtype, self.schema)
        if self.dtype is None:
            raise ArgumentError(f"{self.schema}: dtype={dtype!r} is not supported")

    def run_sample(self, inputs, args, param):
        coeff = per_sample_float(args, "preemph_coeff", self.coeff, self.schema)
        return preemphasis(inputs[0], coeff, self.border, self.dtype)

    def run_batch(self, inputs, args, params, stream):
        n = len(inputs[0])
        coeffs = per_sample_floats(args, "preemph_coeff", self.coeff, n, self.schema)
        return preemphasis_batch(inputs[0], coeffs, self.border, self.dtype, stream=stream)
