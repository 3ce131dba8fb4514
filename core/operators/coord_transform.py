"""``fn.coord_transform``: ``out = M @ in + T`` for every point (DALI's ``CoordTransform``).

The input holds points (or vectors) along its last axis: (N, 2) 2-D points, (N, 3) 3-D points,
(H, W, 3) colours... ``M`` is an ``m x n`` matrix (n = the input's point size), ``T`` an
m-vector; the output has m components per point. The arithmetic is float32, summed in DALI's
order (``M[i, 0] * p[0] + M[i, 1] * p[1] + ...`` then ``+ T[i]``); integer outputs round half
away from zero and saturate.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype

__all__ = ["CoordTransform", "apply_mt", "resolve_mt"]

_INPUT_TYPES = tuple(np.dtype(t) for t in (np.uint8, np.int16, np.uint16, np.int32, np.float32))
_MAX_DIM = 6


def _flat(who: str, name: str, value) -> np.ndarray:
    try:
        return np.asarray(value, np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise ArgumentError(f"{who}: {name}={value!r} must be numbers") from None


def resolve_mt(who: str, static: dict, args: dict, in_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The matrix ``M`` (out_dim x in_dim) and translation ``T`` (out_dim) of one sample.

    ``static`` holds the constant arguments (``M``, ``T``, ``MT``: flat float32 vectors or None),
    ``args`` the sample's argument-input values, which take precedence. Follows DALI's
    ``MTTransformAttr``: a single value of ``M``/``MT`` is a diagonal square matrix; otherwise
    the number of columns is ``in_dim`` (``in_dim + 1`` for ``MT``) and sets the rows; a single
    ``T`` value is repeated to every row. Without any, ``M`` is the identity and ``T`` zero.
    """
    fused = static.get("MT") is not None or "MT" in args
    name = "MT" if fused else "M"
    cols = in_dim + (1 if fused else 0)
    t = None
    if name in args:
        raw = np.asarray(args[name], np.float32)
        if raw.ndim not in (0, 2) and raw.size != 1:
            raise ArgumentError(
                f"{who}: the argument input {name} must hold scalars or 2D matrices; got a "
                f"tensor of shape {raw.shape}"
            )
        value = raw.reshape(-1) if raw.ndim != 2 else raw
    else:
        value = static.get(name)
    if value is None:
        m = np.eye(in_dim, dtype=np.float32)
    elif value.size == 1:
        m = np.eye(in_dim, dtype=np.float32) * value.reshape(())
        if fused:
            t = np.zeros(in_dim, np.float32)
    else:
        if value.ndim == 2 and value.shape[1] != cols:
            raise ArgumentError(
                f"{who}: the argument {name} has shape {value.shape} but the input's points "
                f"need {cols} columns"
            )
        if value.size % cols:
            raise ArgumentError(
                f"{who}: cannot form a matrix {name} with {value.size} elements and {cols} "
                f"columns (the input points have {in_dim} components)"
            )
        full = value.reshape(-1, cols)
        m = full[:, :in_dim]
        if fused:
            t = full[:, in_dim]
    out_dim = m.shape[0]
    if not 1 <= out_dim <= _MAX_DIM:
        raise ArgumentError(f"{who}: {name} gives {out_dim} output components; 1..6 supported")
    if not fused:
        tv = _flat(who, "T", args["T"]) if "T" in args else static.get("T")
        if tv is None:
            t = np.zeros(out_dim, np.float32)
        elif tv.size == 1:
            t = np.full(out_dim, tv[0], np.float32)
        elif tv.size == out_dim:
            t = tv
        else:
            raise ArgumentError(
                f"{who}: T={tv.tolist()} must have {out_dim} elements (the rows of M) or one"
            )
    return np.ascontiguousarray(m, np.float32), np.ascontiguousarray(t, np.float32)


def apply_mt(points: np.ndarray, m: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``M @ p + T`` over the last axis of ``points`` in float32, in DALI's summation order."""
    x = points.astype(np.float32, copy=False)
    out = np.empty((*x.shape[:-1], m.shape[0]), np.float32)
    for i in range(m.shape[0]):
        acc = m[i, 0] * x[..., 0]
        for j in range(1, m.shape[1]):
            acc += m[i, j] * x[..., j]
        acc += t[i]
        out[..., i] = acc
    return out


@register(legacy=("CoordTransform",))
class CoordTransform(Operator):
    """Applies a linear (affine) transform to points or vectors: ``out = M @ in + T``.

    The input's last axis holds the point components (1..6); the output has as many components
    as ``M`` has rows. Useful for affine transforms of point clouds and boxes (with the
    matrices of ``fn.transforms.*``), projections, and linear colour operations.

    Args:
        M: the matrix, row-major (default: identity). A single value is a diagonal matrix.
            Per-sample argument input allowed (scalars or 2D matrices).
        T: the translation (default: zero); a single value is repeated. Argument input allowed.
        MT: the block matrix ``[M T]`` (``n + 1`` columns), exclusive with ``M`` and ``T``;
            argument input allowed (e.g. the output of ``fn.transforms.rotation``).
        dtype: output type, FLOAT (default) or the input's type (then rounded and saturated).
            Inputs may be UINT8, INT16, UINT16, INT32 or FLOAT.

    Example:
        >>> with pipe:
        ...     mt = fn.transforms.rotation(angle=30.0)
        ...     pts = fn.coord_transform(points, MT=mt)
    """

    schema = "coord_transform"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"M", "T", "MT"})

    def setup(self, *, M=None, T=None, MT=None, dtype=DALIDataType.FLOAT) -> None:  # noqa: N803
        self.static = {
            "M": None if M is None else _flat(self.schema, "M", M),
            "T": None if T is None else _flat(self.schema, "T", T),
            "MT": None if MT is None else _flat(self.schema, "MT", MT),
        }
        if MT is not None and (M is not None or T is not None):
            raise ArgumentError(
                f"{self.schema}: the combined MT argument cannot be used together with M or T"
            )
        for k, v in self.static.items():
            if v is not None and v.size == 0:
                raise ArgumentError(f"{self.schema}: the argument {k} must not be an empty list")
        self.dtype = parse_dtype(dtype, self.schema)

    def check_args(self, arg_names) -> None:
        """MT as an argument input cannot be combined with M or T (either kind)."""
        names = set(arg_names) | {k for k, v in self.static.items() if v is not None}
        if "MT" in names and names & {"M", "T"}:
            raise ArgumentError(
                f"{self.schema}: the combined MT argument cannot be used together with M or T"
            )

    def after_call(self, outputs):
        self.check_args(outputs[0].source.arg_nodes)
        return outputs

    def _check_input(self, dtype: np.dtype, shape: tuple) -> int:
        if dtype not in _INPUT_TYPES:
            raise ArgumentError(
                f"{self.schema}: input type {dtype} is not supported; use uint8, int16, "
                "uint16, int32 or float32"
            )
        if self.dtype != dtype and self.dtype != np.float32:
            raise ArgumentError(
                f"{self.schema}: dtype={self.dtype} must be the input's type ({dtype}) or FLOAT"
            )
        if len(shape) < 2:
            raise ArgumentError(
                f"{self.schema}: the input must have at least 2 dimensions (points along the "
                f"last one); got shape {shape}"
            )
        in_dim = shape[-1]
        if not 1 <= in_dim <= _MAX_DIM and int(np.prod(shape)) > 0:
            raise ArgumentError(f"{self.schema}: points of {in_dim} components; 1..6 supported")
        return in_dim

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        in_dim = self._check_input(x.dtype, x.shape)
        self.check_args(args)
        m, t = resolve_mt(self.schema, self.static, args, max(in_dim, 1))
        out = apply_mt(x, m, t)
        return out if self.dtype == np.float32 else convert_sat(out, self.dtype)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.coord_transform import coord_transform_batch

        s = inputs[0]
        n = len(s)
        shapes = [tuple(int(v) for v in s.shapes[i]) for i in range(n)]
        in_dim = self._check_input(s.dtype, shapes[0]) if n else 1
        if any(sh[-1] != in_dim for sh in shapes if int(np.prod(sh)) > 0):
            raise ArgumentError(
                f"{self.schema}: every sample's points must have {in_dim} components"
            )
        self.check_args(args)
        mts = [
            resolve_mt(self.schema, self.static, {k: v[i] for k, v in args.items()}, in_dim)
            for i in range(n)
        ]
        return coord_transform_batch(s, mts, self.dtype, stream=stream)
