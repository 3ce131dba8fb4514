"""``fn.cast``, and :func:`convert_sat`, DALI's saturating conversion that every operator with
a ``dtype`` argument uses to write its output.

DALI converts with ``ConvertSat`` (``dali/core/convert.h``): float -> integer rounds half away
from zero (``std::round`` on the CPU) and then clamps to the target's range; integer -> integer
clamps; anything -> bool is ``value != 0``; float -> float is a plain cast (float16 overflows to
inf). NaN -> integer is undefined in DALI; here it gives 0 or the type's minimum.
"""

from __future__ import annotations

from .._dtype import convert_sat, parse_dtype, round_half_away
from ..errors import ArgumentError
from ..graph import Operator, register

__all__ = ["Cast", "convert_sat", "parse_dtype", "round_half_away"]


@register(legacy=("Cast",))
class Cast(Operator):
    """Converts the input to ``dtype``, rounding half away from zero and saturating.

    DALI's ``ConvertSat``: a float -> integer conversion rounds to the nearest integer (halves
    away from zero) and clamps to the target range (``300.7 -> 255`` for UINT8,
    ``-2.5 -> -3``); integer -> integer clamps; conversion to BOOL tests ``!= 0``.

    Args:
        dtype: the output data type (required), e.g. ``types.FLOAT`` or ``types.UINT8``.

    Example:
        >>> with pipe:
        ...     f = fn.cast(images, dtype=types.FLOAT)
    """

    schema = "cast"
    devices = ("cpu", "gpu")
    num_inputs = (1, 1)

    def setup(self, *, dtype=None) -> None:
        if dtype is None:
            raise ArgumentError(f"{self.schema}: the argument dtype is required")
        self.dtype = parse_dtype(dtype, self.schema)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype == self.dtype:
            return x
        return convert_sat(x, self.dtype)

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch; integer outputs round half to even there (CUDA's ``rint``)."""
        from ..kernels.slice import cast_batch

        return cast_batch(inputs[0], self.dtype, stream=stream)
