"""``fn.warp_affine``: an affine transform of images and volumes (DALI's ``WarpAffine``).

The sampling numerics are in ``_warp.py`` (shared with ``fn.rotate`` and the GPU kernel).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from . import _small
from ._warp import WarpOp

__all__ = ["WarpAffine", "invert_affine", "invert_affines"]


def invert_affine(m: np.ndarray) -> np.ndarray:
    """The inverse of an affine ``(nd, nd + 1)`` matrix (computed in float64), as float32."""
    m = np.asarray(m, np.float64)
    nd = m.shape[0]
    h = np.eye(nd + 1)
    h[:nd] = m
    try:
        inv = np.linalg.inv(h)
    except np.linalg.LinAlgError:
        raise ArgumentError(f"warp_affine: the matrix {m.tolist()} cannot be inverted") from None
    return inv[:nd].astype(np.float32)


def invert_affines(m: np.ndarray) -> np.ndarray:
    """:func:`invert_affine` of a stack of ``(N, nd, nd + 1)`` matrices at once (the same float64
    inversion of each, LAPACK's, so the same float32 results).

    Raises:
        numpy.linalg.LinAlgError: a matrix cannot be inverted (the caller names it).
    """
    m = np.asarray(m, np.float64)
    n, nd = m.shape[:2]
    h = np.zeros((n, nd + 1, nd + 1))
    h[:, :nd] = m
    h[:, nd, nd] = 1
    return np.linalg.inv(h)[:, :nd].astype(np.float32)


@register(legacy=("WarpAffine",))
class WarpAffine(WarpOp):
    """Applies an affine transform to images (HWC, FHWC) or volumes (DHWC, FDHWC).

    Each output pixel ``(x, y)`` takes the input at ``M @ (x, y, 1)`` (measured from the corner
    of the first pixel, sampled at pixel centres), as OpenCV's ``warpAffine`` with
    ``WARP_INVERSE_MAP`` does. ``M`` maps destination to source; with ``inverse_map=False`` it
    is taken as source-to-destination and inverted first.

    Args:
        mtx (second input, optional): the matrices, one float32 ``(2, 3)`` (2-D) or ``(3, 4)``
            (3-D) per sample, e.g. from ``fn.transforms.*``; on the GPU for ``device="gpu"``.
        matrix: the matrix, 6 or 12 values row-major, or a per-sample argument input.
        inverse_map: True (default) if ``matrix`` maps destination to source.
        size: the output (H, W) or (D, H, W) (default: the input's); rounded to integers.
            Per-sample argument input allowed.
        fill_value: the value of pixels mapped outside the input; without it the edge pixels
            are repeated.
        interp_type: INTERP_LINEAR (default) or INTERP_NN.
        dtype: output type (default: the input's); uint8, int16, int32 or float32, to or from
            float32.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.rotation(angle=fn.random.uniform(range=(-15, 15)),
        ...                                 center=[112.0, 112.0])
        ...     images = fn.warp_affine(images, matrix=mt, inverse_map=False, fill_value=0)
    """

    schema = "warp_affine"
    num_inputs = (1, 2)
    arg_inputs = frozenset({"matrix", "size"})

    def setup(
        self,
        *,
        matrix=None,
        inverse_map=True,
        size=None,
        fill_value=None,
        interp_type=None,
        dtype=None,
        output_dtype=None,
    ) -> None:
        from ..types import DALIInterpType

        self.matrix = None
        if matrix is not None:
            flat = np.asarray(matrix, np.float32).reshape(-1)
            if flat.size not in (0, 6, 12):
                raise ArgumentError(
                    f"{self.schema}: matrix={np.asarray(matrix).tolist()} must have 6 (2-D) or "
                    "12 (3-D) elements"
                )
            self.matrix = flat if flat.size else None
        self.inverse_map = bool(inverse_map)
        self._static: dict = {}  # spatial ndim -> the matrix argument, checked and inverted
        if interp_type is None:
            interp_type = DALIInterpType.INTERP_LINEAR
        self._setup_warp(size, fill_value, interp_type, dtype, output_dtype)

    def after_call(self, outputs):
        node = outputs[0].source
        if self.matrix is None and len(node.inputs) < 2 and "matrix" not in node.arg_nodes:
            raise ArgumentError(
                f"{self.schema}: the argument matrix must be provided when the transforms are "
                "not passed as the second input"
            )
        return outputs

    def _matrix_of(self, value, nd: int) -> np.ndarray:
        m = np.asarray(value)
        if m.dtype != np.float32:
            if m.dtype.kind not in "iuf":
                raise ArgumentError(f"{self.schema}: the matrix must be FLOAT, got {m.dtype}")
            m = m.astype(np.float32)
        if m.size != nd * (nd + 1) or m.ndim not in (1, 2) or (m.ndim == 2 and m.shape[0] != nd):
            raise ArgumentError(
                f"{self.schema}: the matrix of a {nd}-D warp must be a ({nd}, {nd + 1}) tensor "
                f"(or {nd * (nd + 1)} values); got shape {m.shape}"
            )
        m = m.reshape(nd, nd + 1)
        return m if self.inverse_map else invert_affine(m)

    def _sample_params(self, inputs, args, shape):
        lay = self._layout_of(len(shape))
        nd = lay.spatial_ndim
        if len(inputs) > 1:
            m = self._matrix_of(inputs[1], nd)
        elif "matrix" in args:
            m = self._matrix_of(args["matrix"], nd)
        else:
            m = self._matrix_of(self.matrix, nd)
        size = self._size_of(args, lay) or lay.spatial_shape(shape)
        return m, tuple(size)

    def _batch_params(self, inputs, args, shapes, stream):
        n = len(shapes)
        lay = self._layout_of(shapes.shape[1])
        if len(inputs) < 2:
            sizes = self._batch_sizes(args, shapes, lay)
            mats = self._batch_matrices(args, n, lay.spatial_ndim)
            if sizes is None or mats is None:  # per sample: checked and named there
                return super()._batch_params(inputs, args, shapes, stream)
            return mats, sizes
        # the matrices are on the GPU: no copy to the host; inverted there if needed
        from ..kernels.warp import device_matrices

        sizes = self._batch_sizes(args, shapes, lay)
        if sizes is None:
            sizes = [
                tuple(self._size_of({"size": args["size"][i]}, lay) or lay.spatial_shape(sh))
                for i, sh in enumerate(shapes)
            ]
        mats = device_matrices(
            self.schema, inputs[1], n, lay.spatial_ndim, not self.inverse_map, stream=stream
        )
        return mats, sizes

    def _batch_matrices(self, args, n: int, nd: int) -> np.ndarray | None:
        """The (N, nd * (nd + 1)) float32 destination-to-source matrices of a batch, with
        numpy over the batch: the ``matrix`` argument (checked and inverted once), or the
        per-sample matrices of its argument input stacked and inverted at once. None when
        the per-sample path must tell what is wrong (a sample of another shape or type, a
        matrix that cannot be inverted)."""
        nm = nd * (nd + 1)
        if "matrix" not in args:
            m = self._static.get(nd)
            if m is None:
                m = self._static[nd] = self._matrix_of(self.matrix, nd).reshape(1, nm)
            return np.broadcast_to(m, (n, nm))
        m = _small.stack(args["matrix"])
        if (
            m is None
            or m.dtype.kind not in "iuf"
            or m[0].size != nm
            or m.ndim not in (2, 3)
            or (m.ndim == 3 and m.shape[1] != nd)
        ):
            return None
        m = m.astype(np.float32, copy=False).reshape(n, nd, nd + 1)
        if not self.inverse_map:
            try:
                m = invert_affines(m)
            except np.linalg.LinAlgError:
                return None
        return m.reshape(n, nm)
