"""``fn.rotate``: rotates images (counter-clockwise) and volumes (about an axis).

DALI's ``rotate_params.h``: the output canvas is the requested ``size``, the input's size with
``keep_size=True``, or else the bounding box of the rotated input with a parity rule that keeps
the centre sharp; the destination-to-source matrix rotates about the centres of both.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ..kernels._batch import host_numbers
from . import _small
from ._affine import deg2rad
from ._warp import WarpOp
from .transform_rotation import rotation2d, rotation3d

__all__ = ["Rotate", "rotate_matrices_2d", "rotate_matrix", "rotated_canvas"]


def rotated_canvas(in_spatial: tuple[int, ...], angle_deg: float, axis=None) -> tuple[int, ...]:
    """DALI's ``RotatedCanvasSize``: the smallest canvas holding the rotated input.

    2-D: ``ceil(|cos| w + |sin| h - 0.01)`` by ``ceil(|cos| h + |sin| w - 0.01)``, then +1 where
    needed so each extent has the parity of the input extent it mostly comes from (the same
    axis under 45 degrees, the other one between 45 and 135). 3-D: the same with the absolute
    rotation matrix, each output extent taking the parity of its dominant input axis.
    """
    if len(in_spatial) == 2:
        h, w = in_spatial
        a = float(deg2rad(-angle_deg))
        abs_cos, abs_sin = abs(math.cos(a)), abs(math.sin(a))
        eps = 1e-2
        w_out = math.ceil(abs_cos * w + abs_sin * h - eps)
        h_out = math.ceil(abs_cos * h + abs_sin * w - eps)
        if abs_sin <= abs_cos:
            w_out += w_out % 2 != w % 2
            h_out += h_out % 2 != h % 2
        else:
            h_out += h_out % 2 != w % 2
            w_out += w_out % 2 != h % 2
        return int(h_out), int(w_out)
    d, h, w = in_spatial
    in_vec = np.array([w, h, d], np.float32)  # x, y, z
    m = np.abs(rotation3d(axis, deg2rad(angle_deg))[:3, :3])
    out = np.ceil(m @ in_vec - np.float32(1e-2)).astype(np.int64)
    # the largest |m[i, j]| of each row; ties keep the diagonal (DALI's scan starts there)
    dominant = [max(range(3), key=lambda j, i=i: (m[i, j], j == i)) for i in range(3)]
    out += (out % 2) != (in_vec[dominant].astype(np.int64) % 2)
    return int(out[2]), int(out[1]), int(out[0])


def rotate_matrix(in_spatial, out_spatial, angle_deg: float, axis=None) -> np.ndarray:
    """The destination-to-source matrix of a rotation about the centres of both canvases:
    ``translate(in / 2) @ R @ translate(-out / 2)`` in float32 (2-D: ``R`` = DALI's
    ``rotation2D(angle)``, counter-clockwise on screen; 3-D: ``rotation3D(axis, -angle)``)."""
    nd = len(in_spatial)
    in_c = np.array(in_spatial[::-1], np.float32) * np.float32(0.5)  # x, y[, z]
    out_c = np.array(out_spatial[::-1], np.float32) * np.float32(0.5)
    t_in = np.eye(nd + 1, dtype=np.float32)
    t_in[:nd, nd] = in_c
    t_out = np.eye(nd + 1, dtype=np.float32)
    t_out[:nd, nd] = -out_c
    if nd == 2:
        r = rotation2d(-deg2rad(-angle_deg))
    else:
        r = rotation3d(axis, -deg2rad(angle_deg))
    return (t_in @ r @ t_out)[:nd].astype(np.float32)


def rotate_matrices_2d(in_spatial: np.ndarray, out_spatial: np.ndarray, angles) -> np.ndarray:
    """:func:`rotate_matrix` of a batch of 2-D rotations at once, as (N, 6) float32: the same
    float32 operations elementwise and the same products (``numpy.matmul`` of each 3x3
    triple), so the same values.

    Args:
        in_spatial, out_spatial: (N, 2) (H, W) of the inputs and of the outputs.
        angles: (N,) angles in degrees (float32 values).
    """
    f32 = np.float32
    n = len(in_spatial)
    a = -(f32(-np.asarray(angles, f32)) * f32(np.pi / 180))  # -deg2rad(-angle)
    c, s = np.cos(a), np.sin(a)
    r = np.zeros((n, 3, 3), f32)
    r[:, 0, 0] = r[:, 1, 1] = c
    r[:, 0, 1] = -s
    r[:, 1, 0] = s
    r[:, 2, 2] = 1
    t_in = np.zeros((n, 3, 3), f32)
    t_in[:, (0, 1, 2), (0, 1, 2)] = 1
    t_out = t_in.copy()
    t_in[:, :2, 2] = np.asarray(in_spatial)[:, ::-1].astype(f32) * f32(0.5)
    t_out[:, :2, 2] = -(np.asarray(out_spatial)[:, ::-1].astype(f32) * f32(0.5))
    return (t_in @ r @ t_out)[:, :2].reshape(n, 6).astype(f32)


@register(legacy=("Rotate",))
class Rotate(WarpOp):
    """Rotates images (HWC, FHWC) counter-clockwise, or volumes (DHWC, FDHWC) about ``axis``.

    Args:
        angle: the angle in degrees (required); per-sample argument input allowed. Images turn
            counter-clockwise (the top-left corner is (0, 0)); volumes by a right-handed
            rotation about ``axis``.
        axis: the rotation axis of volumes (x, y, z; need not be normalized); argument input
            allowed.
        size: the output (H, W) or (D, H, W); argument input allowed.
        keep_size: keep the input's size (default False: without ``size``, the canvas grows to
            hold the whole rotated input).
        fill_value: the value of pixels outside the input (default: the edges are repeated).
        interp_type: INTERP_LINEAR (default) or INTERP_NN.
        dtype: output type (default: the input's); uint8, int16, int32 or float32, to or from
            float32.

    Example:
        >>> with pipe:
        ...     images = fn.rotate(images, angle=fn.random.uniform(range=(-10, 10)),
        ...                        fill_value=0)
    """

    schema = "rotate"
    arg_inputs = frozenset({"angle", "axis", "size"})

    def setup(
        self,
        *,
        angle=None,
        axis=None,
        size=None,
        keep_size=False,
        fill_value=None,
        interp_type=None,
        dtype=None,
        output_dtype=None,
    ) -> None:
        from ..types import DALIInterpType

        self.angle = None if angle is None else self._angle(angle)
        self.axis = None if axis is None else self._axis(axis)
        self.keep_size = bool(keep_size)
        if interp_type is None:
            interp_type = DALIInterpType.INTERP_LINEAR
        self._setup_warp(size, fill_value, interp_type, dtype, output_dtype)

    def after_call(self, outputs):
        if self.angle is None and "angle" not in outputs[0].source.arg_nodes:
            raise ArgumentError(f"{self.schema}: the argument angle is required")
        return outputs

    def _angle(self, value) -> float:
        v = np.asarray(value, np.float32).reshape(-1)
        if v.size != 1:
            raise ArgumentError(f"{self.schema}: angle={value!r} must be a single number")
        return float(v[0])

    def _axis(self, value) -> np.ndarray:
        v = np.asarray(value, np.float32).reshape(-1)
        if v.size != 3 or not np.any(v):
            raise ArgumentError(
                f"{self.schema}: axis={np.asarray(value).tolist()} must be a nonzero vector of 3 "
                "elements"
            )
        return v

    def _sample_params(self, inputs, args, shape):
        lay = self._layout_of(len(shape))
        angle = self._angle(args["angle"]) if "angle" in args else self.angle
        axis = self._axis(args["axis"]) if "axis" in args else self.axis
        if lay.spatial_ndim == 3 and axis is None:
            raise ArgumentError(f"{self.schema}: the argument axis is required for volumes")
        in_spatial = lay.spatial_shape(shape)
        size = self._size_of(args, lay)
        if size is None:
            size = in_spatial if self.keep_size else rotated_canvas(in_spatial, angle, axis)
        return rotate_matrix(in_spatial, size, angle, axis), tuple(size)

    def _batch_params(self, inputs, args, shapes, stream):
        """2-D rotations with numpy over the batch (:func:`rotate_matrices_2d`); volumes, a
        ``size`` or ``axis`` argument input and angles that are not one number per sample
        go sample by sample."""
        n = len(shapes)
        lay = self._layout_of(shapes.shape[1])
        if lay.spatial_ndim != 2 or "axis" in args or "size" in args:
            return super()._batch_params(inputs, args, shapes, stream)
        if "angle" in args:
            a = host_numbers(args["angle"], kinds="iuf")  # (0-d samples: read at once)
            if a is None:
                a = _small.stack(args["angle"])
            if a is None or a.size != n or a.dtype.kind not in "iuf":
                return super()._batch_params(inputs, args, shapes, stream)
            angles = a.astype(np.float32).reshape(n)
        else:
            angles = np.full(n, self.angle, np.float32)
        start = 1 if lay.frames else 0
        in_spatial = shapes[:, start : start + 2]
        size = self._size_of({}, lay)
        if size is not None:
            sizes = np.broadcast_to(np.array(size, np.int64), (n, 2))
        elif self.keep_size:
            sizes = in_spatial
        else:
            sizes = np.array(
                [
                    rotated_canvas(tuple(sp.tolist()), float(a))
                    for sp, a in zip(in_spatial, angles, strict=True)
                ],
                np.int64,
            ).reshape(n, 2)
        return rotate_matrices_2d(in_spatial, sizes, angles), sizes
