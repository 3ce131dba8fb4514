"""``fn.cast_like``: convert the first input to the element type of the second (DALI's
``CastLike``), with ``fn.cast``'s conversion rules (see ``cast.py``)."""

from __future__ import annotations

from ..graph import Operator, register
from ..kernels._batch import as_samples
from ..kernels.slice import cast_batch
from .cast import convert_sat

__all__ = ["CastLike"]


@register(legacy=("CastLike",))
class CastLike(Operator):
    """Casts ``data`` to the type of ``like``; only ``like``'s type is used, not its values.

    Inputs:
        data: the batch to convert.
        like: any batch of the wanted type (same device as ``data``).

    Example:
        >>> with pipe:
        ...     f = fn.cast_like(images, weights)  # images as weights' dtype
    """

    schema = "cast_like"
    devices = ("cpu", "gpu")
    num_inputs = (2, 2)

    def run_sample(self, inputs, args, param):
        x, like = inputs
        return x if x.dtype == like.dtype else convert_sat(x, like.dtype)

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch; integer outputs round half to even there (as ``fn.cast`` does)."""
        x, like = as_samples(inputs[0]), as_samples(inputs[1])
        if x.dtype == like.dtype:
            return x
        return cast_batch(x, like.dtype, stream=stream)
