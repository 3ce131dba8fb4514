"""``fn.transforms.shear``: a shear affine transform matrix (2-D or 3-D)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from . import _small
from ._affine import TransformOp, as_vector, deg2rad
from .transform_rotation import with_center

__all__ = ["TransformShear", "shear_matrix"]


def shear_matrix(factors: np.ndarray) -> np.ndarray:
    """The homogeneous shear matrix of 2 factors ``(s_x, s_y)`` (2-D) or 6 factors
    ``(s_xy, s_xz, s_yx, s_yz, s_zx, s_zy)`` (3-D): ``s_ab`` is the offset along axis ``a`` per
    unit along axis ``b``."""
    f = np.asarray(factors, np.float32).reshape(-1)
    if f.size == 2:
        return np.array([[1, f[0], 0], [f[1], 1, 0], [0, 0, 1]], np.float32)
    m = np.eye(4, dtype=np.float32)
    m[0, 1], m[0, 2], m[1, 0], m[1, 2], m[2, 0], m[2, 1] = f
    return m


@register
class TransformShear(TransformOp):
    """Produces a shear affine transform matrix (float32, ``(2, 3)`` or ``(3, 4)``).

    Exactly one of ``shear`` and ``angles`` must be given; their size sets the number of
    dimensions (2 values: 2-D; 6 values or a 3x2 matrix: 3-D). With an input transform, the
    shear is applied to it (see ``reverse_order``).

    Args:
        shear: the shear factors: ``(shear_x, shear_y)`` in 2-D, ``(s_xy, s_xz, s_yx, s_yz,
            s_zx, s_zy)`` in 3-D; argument input allowed.
        angles: the shear angles in degrees, in [-90, 90] (``factor = tan(angle)``); argument
            input allowed.
        center: the center of the shear; argument input allowed.
        reverse_order: apply the input transform after this one instead of before.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.shear(angles=[10.0, 0.0], center=[112.0, 112.0])
    """

    schema = "transforms.shear"
    arg_inputs = frozenset({"shear", "angles", "center"})

    def setup(self, *, shear=None, angles=None, center=None, reverse_order=False) -> None:
        if shear is not None and angles is not None:
            self._one_of(True, True)
        self.shear = None if shear is None else self._factors("shear", shear)
        self.angles = None if angles is None else self._angles(angles)
        self.center = None if center is None else as_vector(self.schema, "center", center)
        self._setup_order(reverse_order)

    def _one_of(self, shear: bool, angles: bool) -> None:
        if shear == angles:
            raise ArgumentError(
                f"{self.schema}: give one and only one of the arguments shear and angles"
            )

    def after_call(self, outputs):
        nodes = outputs[0].source.arg_nodes
        self._one_of(
            self.shear is not None or "shear" in nodes, self.angles is not None or "angles" in nodes
        )
        return outputs

    def _factors(self, name: str, value) -> np.ndarray:
        v = as_vector(self.schema, name, value)
        if v.size not in (2, 6):
            raise ArgumentError(
                f"{self.schema}: {name}={np.asarray(value).tolist()!r} must have D*(D-1) "
                "elements: 2 (2-D) or 6 (3-D)"
            )
        return v

    def _angles(self, value) -> np.ndarray:
        v = self._factors("angles", value)
        if not np.all((v >= -90) & (v <= 90)):
            raise ArgumentError(
                f"{self.schema}: angles={v.tolist()} must be in the range [-90, 90] degrees"
            )
        return v

    def _batch_output(self, args, n):
        """2-D shears by per-sample factors, no center: ``[[1, s_x, 0], [s_y, 1, 0]]`` each."""
        if set(args) != {"shear"} or self.center is not None:
            return None
        f = _small.stack(args["shear"])
        if f is None or f.dtype.kind not in "iuf" or f.size != 2 * n:
            return None
        f = f.astype(np.float32, copy=False).reshape(n, 2)
        out = np.zeros((n, 2, 3), np.float32)
        out[:, 0, 0] = out[:, 1, 1] = 1
        out[:, 0, 1], out[:, 1, 0] = f[:, 0], f[:, 1]
        return out

    def _matrix(self, args, in_ndim):
        if "shear" in args:
            factors = self._factors("shear", args["shear"])
        elif "angles" in args:
            factors = np.tan(deg2rad(self._angles(args["angles"])))
        elif self.shear is not None:
            factors = self.shear
        else:
            factors = np.tan(deg2rad(self.angles))
        mat = shear_matrix(factors)
        center = self.center
        if "center" in args:
            center = as_vector(self.schema, "center", args["center"])
        if center is not None:
            ndim = mat.shape[0] - 1
            if center.size != ndim:
                raise ArgumentError(
                    f"{self.schema}: center={center.tolist()} must have {ndim} elements"
                )
            mat = with_center(mat, center)
        return mat
