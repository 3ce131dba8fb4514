"""``_warp_fused``: ``warp_affine`` (``inverse_map=False``) on some samples and ``rotate``
(``keep_size=True``) on the others, in one operator: the automatic augmentations' geometric
operations of one ``select`` (shears, translations, rotation) as one warp (BENCHMARKS.md,
"Automatic augmentation: fused warps and lookup tables").

Each sample's destination-to-source matrix and output size are those the operator of its
kind makes (a ``warp_affine`` and a ``rotate`` with the same fill value and interpolation do
the rest alike), so its output is that operator's.
"""

from __future__ import annotations

import numpy as np

from ..graph import register
from ..kernels._batch import host_numbers
from . import _small
from ._warp import WarpOp
from .rotate import Rotate
from .warp_affine import WarpAffine

__all__ = ["WarpFused"]

AFFINE, ROTATE = 0, 1


@register
class WarpFused(WarpOp):
    """Per sample, ``kind`` 0: ``warp_affine(matrix=matrix, inverse_map=False)``; 1:
    ``rotate(angle=angle, keep_size=True)``; both with ``fill_value`` and ``interp_type``.

    Args:
        matrix: per sample, the forward matrix of a kind-0 sample (any matrix for the others).
        angle: per sample, the angle of a kind-1 sample (any number for the others).
        kind: per sample, 0 or 1.
        fill_value, interp_type: as in ``warp_affine`` and ``rotate``.
    """

    schema = "_warp_fused"
    arg_inputs = frozenset({"matrix", "angle", "kind"})

    def setup(self, *, fill_value=None, interp_type=None) -> None:
        from ..types import DALIInterpType

        if interp_type is None:
            interp_type = DALIInterpType.INTERP_LINEAR
        warp = dict(device=self.device, fill_value=fill_value, interp_type=interp_type)
        self._by_kind = (WarpAffine(inverse_map=False, **warp), Rotate(keep_size=True, **warp))
        self._args = ("matrix", "angle")
        self._setup_warp(None, fill_value, interp_type, None, None)

    def output_layouts(self, input_layouts):
        layouts = super().output_layouts(input_layouts)
        for op in self._by_kind:
            op.output_layouts(input_layouts)
        return layouts

    def _sample_params(self, inputs, args, shape):
        k = int(args["kind"])
        return self._by_kind[k]._sample_params(inputs, {self._args[k]: args[self._args[k]]}, shape)

    def _batch_params(self, inputs, args, shapes, stream):
        kinds = _kinds(args["kind"])
        n = len(shapes)
        mats = sizes = None
        for k, op in enumerate(self._by_kind):
            sel = np.flatnonzero(kinds == k)
            if not len(sel):
                continue
            sub = {self._args[k]: [args[self._args[k]][i] for i in sel.tolist()]}
            m, size = op._batch_params(inputs, sub, shapes[sel], stream)
            m = np.asarray(m, np.float32).reshape(len(sel), -1)
            size = np.asarray(size, np.int64).reshape(len(sel), -1)
            if mats is None:
                mats = np.zeros((n, m.shape[1]), np.float32)
                sizes = np.zeros((n, size.shape[1]), np.int64)
            mats[sel], sizes[sel] = m, size
        return mats, sizes


def _kinds(samples) -> np.ndarray:
    """The ``kind`` of every sample as a 1-D array: numbers (the automatic augmentations'
    0-d samples) read at once (``host_numbers``) as float64, whose comparisons with 0 and 1 are
    those of the samples' own type; anything else stacked (or one ``int`` per sample)."""
    kinds = host_numbers(samples)
    if kinds is not None:
        return kinds
    kinds = _small.stack(samples)
    return np.array([int(k) for k in samples]) if kinds is None else kinds.reshape(-1)
