"""``fn.transforms.scale``: a scaling affine transform matrix (DALI's ``transforms.Scale``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._affine import MAX_NDIM, TransformOp, as_vector, check_required

__all__ = ["TransformScale"]


@register
class TransformScale(TransformOp):
    """Produces a scale affine transform matrix (float32, shape ``(ndim, ndim + 1)``).

    With an input transform, the scaling is applied to it (see ``reverse_order``).

    Args:
        scale: the scale factor per dimension (required); its length sets the number of
            dimensions. A single value is repeated to ``ndim`` (or the input's dimensions).
            Per-sample argument input allowed.
        center: the point that stays fixed (``ndim`` values); argument input allowed.
        ndim: the number of dimensions when ``scale`` is a scalar and there is no input.
        reverse_order: apply the input transform after this one instead of before.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.scale(scale=[2.0, 0.5], center=[112.0, 112.0])
    """

    schema = "transforms.scale"
    arg_inputs = frozenset({"scale", "center"})

    def setup(self, *, scale=None, center=None, ndim=None, reverse_order=False) -> None:
        self.scale = None if scale is None else as_vector(self.schema, "scale", scale)
        self.center = None if center is None else as_vector(self.schema, "center", center)
        if ndim is not None and not (isinstance(ndim, int | np.integer) and 1 <= ndim <= MAX_NDIM):
            raise ArgumentError(f"{self.schema}: ndim={ndim!r} must be an integer in 1..{MAX_NDIM}")
        self.ndim = ndim
        if self.scale is not None and not 1 <= self.scale.size <= MAX_NDIM:
            raise ArgumentError(f"{self.schema}: scale={scale!r} must have 1..{MAX_NDIM} elements")
        self._setup_order(reverse_order)

    def after_call(self, outputs):
        check_required(self, outputs, {"scale": self.scale})
        return outputs

    def _matrix(self, args, in_ndim):
        scale = as_vector(self.schema, "scale", args["scale"]) if "scale" in args else self.scale
        center = self.center
        if "center" in args:
            center = as_vector(self.schema, "center", args["center"])
        if scale.size > 1:
            ndim = scale.size
        elif in_ndim is not None:
            ndim = in_ndim
        elif self.ndim is not None:
            ndim = self.ndim
        else:
            ndim = 1
        if scale.size not in (1, ndim) or scale.size > MAX_NDIM:
            raise ArgumentError(f"{self.schema}: scale={scale.tolist()} must have {ndim} elements")
        scale = np.broadcast_to(scale, (ndim,))
        mat = np.eye(ndim + 1, dtype=np.float32)
        mat[np.arange(ndim), np.arange(ndim)] = scale
        if center is not None:
            if center.size != ndim:
                raise ArgumentError(
                    f"{self.schema}: center={center.tolist()} must have {ndim} elements, as "
                    "many as the transform's dimensions"
                )
            mat[:ndim, ndim] = center * (np.float32(1) - scale)
        return mat
