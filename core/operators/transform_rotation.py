"""``fn.transforms.rotation``: a rotation affine transform matrix (2-D, or 3-D about an axis)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._affine import TransformOp, as_vector, check_required, deg2rad

__all__ = ["TransformRotation", "rotation2d", "rotation3d"]


def rotation2d(angle_rad) -> np.ndarray:
    """DALI's ``rotation2D``: ``[[c, -s, 0], [s, c, 0], [0, 0, 1]]`` in float32. In image
    coordinates (y down) a positive angle turns points clockwise on screen; used as a
    destination-to-source map it turns the picture counter-clockwise."""
    a = np.float32(angle_rad)
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], np.float32)


def rotation3d(axis, angle_rad) -> np.ndarray:
    """DALI's ``rotation3D``: a right-handed rotation by ``angle_rad`` about ``axis`` (x, y, z;
    normalized here), as a 4x4 float32 matrix (Rodrigues' formula, DALI's term order)."""
    a = np.float32(angle_rad)
    if a == 0:
        return np.eye(4, dtype=np.float32)
    c, s = np.cos(a), np.sin(a)
    axis = np.asarray(axis, np.float32)
    u, v, w = axis / np.sqrt(np.float32(np.dot(axis, axis)))
    one_c = np.float32(1) - c
    m = np.eye(4, dtype=np.float32)
    m[:3, :3] = [
        [u * u + (v * v + w * w) * c, u * v * one_c - w * s, u * w * one_c + v * s],
        [u * v * one_c + w * s, v * v + (u * u + w * w) * c, v * w * one_c - u * s],
        [u * w * one_c - v * s, v * w * one_c + u * s, w * w + (u * u + v * v) * c],
    ]
    return m


def with_center(mat: np.ndarray, center: np.ndarray) -> np.ndarray:
    """Make ``center`` the fixed point of the linear map ``mat``: ``t = center - A @ center``."""
    ndim = mat.shape[0] - 1
    mat[:ndim, ndim] = mat[:ndim, :ndim] @ -center + center
    return mat


@register
class TransformRotation(TransformOp):
    """Produces a rotation affine transform matrix (float32, ``(2, 3)`` or ``(3, 4)``).

    The transform is 3-D when ``axis`` is given, else 2-D. With an input transform, the rotation
    is applied to it (see ``reverse_order``). As a source-to-destination map (``warp_affine``
    with ``inverse_map=False``) a positive 2-D angle turns an image clockwise on screen (y points
    down); ``fn.rotate``, which uses it as the destination-to-source map, turns it
    counter-clockwise.

    Args:
        angle: the angle in degrees (required); per-sample argument input allowed.
        axis: the axis of a 3-D rotation (x, y, z; need not be normalized, must be nonzero);
            argument input allowed.
        center: the center of the rotation (2 or 3 values); argument input allowed.
        reverse_order: apply the input transform after this one instead of before.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.rotation(angle=fn.random.uniform(range=(-30, 30)),
        ...                                 center=[112.0, 112.0])
    """

    schema = "transforms.rotation"
    arg_inputs = frozenset({"angle", "axis", "center"})

    def setup(self, *, angle=None, axis=None, center=None, reverse_order=False) -> None:
        self.angle = None if angle is None else self._angle(angle)
        self.axis = None if axis is None else self._axis(as_vector(self.schema, "axis", axis))
        self.center = None if center is None else as_vector(self.schema, "center", center)
        self._setup_order(reverse_order)

    def _angle(self, value) -> np.float32:
        v = as_vector(self.schema, "angle", value)
        if v.size != 1:
            raise ArgumentError(f"{self.schema}: angle={value!r} must be a single number")
        return v[0]

    def _axis(self, axis: np.ndarray) -> np.ndarray:
        if axis.size != 3 or not np.any(axis):
            raise ArgumentError(
                f"{self.schema}: axis={axis.tolist()} must be a nonzero vector of 3 elements"
            )
        return axis

    def after_call(self, outputs):
        check_required(self, outputs, {"angle": self.angle})
        return outputs

    def _matrix(self, args, in_ndim):
        angle = self._angle(args["angle"]) if "angle" in args else self.angle
        axis = self.axis
        if "axis" in args:
            axis = self._axis(as_vector(self.schema, "axis", args["axis"]))
        center = self.center
        if "center" in args:
            center = as_vector(self.schema, "center", args["center"])
        ndim = 2 if axis is None else 3
        rad = deg2rad(angle)
        mat = rotation2d(rad) if ndim == 2 else rotation3d(axis, rad)
        if center is not None:
            if center.size != ndim:
                raise ArgumentError(
                    f"{self.schema}: center={center.tolist()} must have {ndim} elements"
                )
            mat = with_center(mat, center)
        return mat
