"""``fn.transforms.translation``: a translation affine transform matrix."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from . import _small
from ._affine import MAX_NDIM, TransformOp, as_vector, check_required

__all__ = ["TransformTranslation"]


@register
class TransformTranslation(TransformOp):
    """Produces a translation affine transform matrix (float32, shape ``(ndim, ndim + 1)``).

    With an input transform, the translation is applied to it (see ``reverse_order``).

    Args:
        offset: the translation vector (required); its length sets the number of dimensions.
            Per-sample argument input allowed.
        reverse_order: apply the input transform after this one instead of before.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.translation(offset=[10.0, -5.0])
    """

    schema = "transforms.translation"
    arg_inputs = frozenset({"offset"})

    def setup(self, *, offset=None, reverse_order=False) -> None:
        self.offset = None
        if offset is not None:
            self.offset = self._check(as_vector(self.schema, "offset", offset))
        self._setup_order(reverse_order)

    def _check(self, offset: np.ndarray) -> np.ndarray:
        if not 1 <= offset.size <= MAX_NDIM:
            raise ArgumentError(
                f"{self.schema}: offset={offset.tolist()} must have 1..{MAX_NDIM} elements"
            )
        return offset

    def after_call(self, outputs):
        check_required(self, outputs, {"offset": self.offset})
        return outputs

    def _batch_output(self, args, n):
        """Per-sample offsets of one length ``ndim``: the identity with each offset as its
        last column."""
        if set(args) != {"offset"}:
            return None
        v = _small.stack(args["offset"])
        if v is None or v.dtype.kind not in "iuf" or not v.size or v.size % n:
            return None
        v = v.astype(np.float32, copy=False).reshape(n, -1)
        ndim = v.shape[1]
        if ndim > MAX_NDIM:
            return None
        out = np.zeros((n, ndim, ndim + 1), np.float32)
        out[:, np.arange(ndim), np.arange(ndim)] = 1
        out[:, :, ndim] = v
        return out

    def _matrix(self, args, in_ndim):
        offset = self.offset
        if "offset" in args:
            offset = self._check(as_vector(self.schema, "offset", args["offset"]))
        ndim = offset.size
        mat = np.eye(ndim + 1, dtype=np.float32)
        mat[:ndim, ndim] = offset
        return mat
