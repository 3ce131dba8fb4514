"""The machinery shared by the ``fn.transforms.*`` operators: argument vectors, the optional input
transform, and the output matrix.

An affine transform of ``ndim`` dimensions is handed around as DALI does: a float32 tensor of
shape ``(ndim, ndim + 1)``, the linear part followed by the translation column, mapping a point
``p`` to ``M[:, :ndim] @ p + M[:, ndim]``. Inside, the operators work on the homogeneous
``(ndim + 1, ndim + 1)`` form, in float32 as DALI's ``mat`` does.

Chaining (DALI's ``TransformBaseOp``): with an input transform ``I``, the output is
``T @ I`` (this operator's transform applied after the input's) or, with
``reverse_order=True``, ``I @ T``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, small_host_inputs
from . import _small

__all__ = [
    "TransformOp",
    "as_vector",
    "check_required",
    "deg2rad",
    "homogeneous",
    "to_output",
]

MAX_NDIM = 6  # DALI's transforms handle 1..6 dimensions


def as_vector(who: str, name: str, value: Any) -> np.ndarray:
    """A 1-D float32 vector from a scalar, a list or a per-sample array (any shape, flattened).

    Raises:
        ArgumentError: naming ``name`` when the value is not numeric.
    """
    try:
        v = np.asarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise ArgumentError(
            f"{who}: {name}={value!r} must be a number or a list of numbers"
        ) from None
    return v


def deg2rad(deg: np.ndarray | float) -> np.ndarray:
    """DALI's ``deg2rad`` in float32: ``deg * float(pi / 180)``."""
    return np.float32(deg) * np.float32(np.pi / 180)


def homogeneous(mat: np.ndarray) -> np.ndarray:
    """``(ndim, ndim + 1)`` -> ``(ndim + 1, ndim + 1)`` float32, with the last row ``0 .. 0 1``."""
    ndim = mat.shape[0]
    out = np.eye(ndim + 1, dtype=np.float32)
    out[:ndim] = mat
    return out


def to_output(mat: np.ndarray) -> np.ndarray:
    """The homogeneous matrix's top ``ndim`` rows, as a fresh C-contiguous float32 array."""
    return np.ascontiguousarray(mat[:-1], dtype=np.float32)


def check_required(op: Operator, outputs: list, required: dict[str, object]) -> None:
    """Build-time check (from ``after_call``) that each required argument was given, as a value
    (``required[name]`` not None) or as an argument input (a node of the call)."""
    arg_nodes = outputs[0].source.arg_nodes if outputs and outputs[0].source else {}
    for name, value in required.items():
        if value is None and name not in arg_nodes:
            raise ArgumentError(f"{op.schema}: the argument {name} is required")


def check_transform_input(who: str, x: np.ndarray) -> int:
    """The number of dimensions of an input transform; ArgumentError unless it is a float32
    ``(ndim, ndim + 1)`` matrix."""
    if x.dtype != np.float32:
        raise ArgumentError(f"{who}: the input transform must be FLOAT (float32), got {x.dtype}")
    if x.ndim != 2 or x.shape[1] != x.shape[0] + 1 or not 1 <= x.shape[0] <= MAX_NDIM:
        raise ArgumentError(
            f"{who}: the input, if provided, must be a 2D tensor of shape (ndim, ndim+1) "
            f"representing an affine transform; got shape {x.shape}"
        )
    return x.shape[0]


class TransformOp(Operator):
    """Base of the transform generators: 0 or 1 input (a transform to chain onto), CPU only.

    Subclasses implement ``_matrix(args, in_ndim)``, returning the homogeneous float32 matrix of
    one sample (``args`` holds that sample's argument-input values; ``in_ndim`` is the input
    transform's dimensionality or None). When no argument is an argument input, the matrix is
    the same for every sample and is computed once.
    """

    devices = ("cpu",)
    reads_batch_arrays = True  # (run_batch_cpu, _batch_output: len, stack, per_sample)
    num_inputs = (0, 1)
    light = True  # a few microseconds of numpy per sample

    def _setup_order(self, reverse_order: bool) -> None:
        self.reverse_order = bool(reverse_order)
        self._const: dict[int | None, np.ndarray] = {}

    def output_layouts(self, input_layouts):
        return [""]

    def _matrix(self, args: dict, in_ndim: int | None) -> np.ndarray:
        raise NotImplementedError

    def _sample_matrix(self, args: dict, in_ndim: int | None) -> np.ndarray:
        if args:
            return self._matrix(args, in_ndim)
        mat = self._const.get(in_ndim)
        if mat is None:
            mat = self._const[in_ndim] = self._matrix({}, in_ndim)
        return mat

    def batch_level_in(self, node) -> bool:
        """Batch-wise (``run_batch_cpu``) when there is no input transform and the argument
        inputs are small host arrays (automatic augmentation's per-sample shears and
        offsets): one numpy step per batch instead of a call per sample."""
        return not node.inputs and small_host_inputs(node)

    def run_batch_cpu(self, inputs, args, params):
        n = len(next(iter(args.values())))
        out = self._batch_output(args, n) if n else None
        if out is not None:
            return (out,)
        return (_small.per_sample(self.run_sample, inputs, args, params, n),)

    def _batch_output(self, args: dict, n: int) -> np.ndarray | None:
        """The ``(n, ndim, ndim + 1)`` float32 outputs of a batch without an input transform,
        equal to :meth:`run_sample`'s; None where the per-sample path must run (the default:
        it checks and names what is wrong)."""
        return None

    def run_sample(self, inputs, args, param):
        if not inputs:
            return to_output(self._sample_matrix(args, None))
        x = np.asarray(inputs[0])
        in_ndim = check_transform_input(self.schema, x)
        mat = self._sample_matrix(args, in_ndim)
        ndim = mat.shape[0] - 1
        if ndim != in_ndim:
            raise ArgumentError(
                f"{self.schema}: the input describes a {in_ndim}D transform but the arguments "
                f"describe a {ndim}D transform"
            )
        inp = homogeneous(x)
        out = inp @ mat if self.reverse_order else mat @ inp
        return to_output(out)
