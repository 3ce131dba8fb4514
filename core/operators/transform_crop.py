"""``fn.transforms.crop``: the affine transform that maps one box onto another."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._affine import MAX_NDIM, TransformOp, as_vector

__all__ = ["TransformCrop"]

_NAMES = ("from_start", "from_end", "to_start", "to_end")
_DEFAULTS = {"from_start": 0.0, "from_end": 1.0, "to_start": 0.0, "to_end": 1.0}


@register
class TransformCrop(TransformOp):
    """Produces the affine transform mapping ``from_start -> to_start`` and
    ``from_end -> to_end`` (per dimension: a scale and a translation), float32
    ``(ndim, ndim + 1)``.

    Used to carry coordinates through a crop: ``from_*`` is the crop window in the original
    space, ``to_*`` the space after the crop (e.g. [0, 0]..[1, 1] for relative coordinates).
    The number of dimensions is the longest argument's length; single values are repeated.

    Args:
        from_start: lower bound of the original space (default [0.0]); argument input allowed.
        from_end: upper bound of the original space (default [1.0]); argument input allowed.
        to_start: lower bound of the destination space (default [0.0]); argument input allowed.
        to_end: upper bound of the destination space (default [1.0]); argument input allowed.
        absolute: swap start and end where start > end (default False).
        reverse_order: apply the input transform after this one instead of before.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.crop(from_start=anchor, from_end=anchor + shape,
        ...                             to_start=[0.0, 0.0], to_end=[1.0, 1.0])
    """

    schema = "transforms.crop"
    arg_inputs = frozenset(_NAMES)

    def setup(
        self,
        *,
        from_start=0.0,
        from_end=1.0,
        to_start=0.0,
        to_end=1.0,
        absolute=False,
        reverse_order=False,
    ) -> None:
        given = {"from_start": from_start, "from_end": from_end}
        given |= {"to_start": to_start, "to_end": to_end}
        self.values = {k: self._vec(k, v) for k, v in given.items()}
        self._ndim(self.values, None)  # check the sizes now
        self.absolute = bool(absolute)
        self._setup_order(reverse_order)

    def _vec(self, name: str, value) -> np.ndarray:
        v = as_vector(self.schema, name, value)
        if v.size == 0:
            v = np.full(1, _DEFAULTS[name], np.float32)
        if v.size > MAX_NDIM:
            raise ArgumentError(
                f"{self.schema}: {name}={v.tolist()} has more than {MAX_NDIM} elements"
            )
        return v

    def _ndim(self, values: dict, in_ndim: int | None) -> int:
        sizes = {k: v.size for k, v in values.items()}
        ndim = max(sizes.values())
        if ndim == 1 and in_ndim is not None:
            ndim = in_ndim
        bad = {k: s for k, s in sizes.items() if s not in (1, ndim)}
        if bad:
            raise ArgumentError(
                f"{self.schema}: from_start, from_end, to_start and to_end must have the same "
                f"number of elements or a single one; got sizes {sizes}"
            )
        return ndim

    def _matrix(self, args, in_ndim):
        values = dict(self.values)
        for k, v in args.items():
            values[k] = self._vec(k, v)
        ndim = self._ndim(values, in_ndim)
        fs, fe, ts, te = (np.broadcast_to(values[k], (ndim,)).copy() for k in _NAMES)
        if self.absolute:
            fs, fe = np.minimum(fs, fe), np.maximum(fs, fe)
            ts, te = np.minimum(ts, te), np.maximum(ts, te)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = (te - ts) / (fe - fs)
        mat = np.eye(ndim + 1, dtype=np.float32)
        mat[np.arange(ndim), np.arange(ndim)] = scale
        mat[:ndim, ndim] = ts - scale * fs
        return mat
