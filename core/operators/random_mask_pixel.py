"""``fn.segmentation.random_mask_pixel``: a random pixel of a mask, from its foreground or from
anywhere (DALI's ``RandomMaskPixel``, ``dali/operators/segmentation/random_mask_pixel.cc``).

Foreground is ``x == value`` when ``value`` is given, else ``x > threshold`` (default 0, compared
in float32). With ``foreground`` nonzero the pixel is drawn uniformly among the foreground
pixels; without foreground pixels (or a ``value`` the input type cannot hold), or with
``foreground`` = 0, each coordinate is drawn uniformly. The output is the pixel's coordinates,
int64, one per axis. Per-sample generators are seeded in ``batch_params``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register

_TYPES = tuple(
    np.dtype(t)
    for t in (
        np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
        np.float32, np.bool_,
    )
)  # fmt: skip


def _scalar(name: str, v, kind: str, who: str):
    a = np.asarray(v).reshape(-1)
    if a.size != 1:
        raise ArgumentError(f"{who}: {name}={np.asarray(v).tolist()!r} must be one number")
    x = a[0]
    if kind == "int":
        if not float(x).is_integer():
            raise ArgumentError(f"{who}: {name}={x!r} must be an integer")
        return int(x)
    return float(np.float32(x))


@register
class RandomMaskPixel(Operator):
    """Selects a random pixel of a mask (CPU only, as DALI).

    Args:
        value: pixels equal to it are foreground (integer; not with ``threshold``); argument
            input allowed.
        threshold: pixels above it are foreground (default 0.0); argument input allowed.
        foreground: nonzero: draw among foreground pixels; 0 (default): among all pixels.
            Argument input allowed, e.g. ``fn.random.coin_flip(probability=0.7)``.

    Example:
        >>> center = fn.segmentation.random_mask_pixel(label, foreground=fn.random.coin_flip())
    """

    schema = "segmentation.random_mask_pixel"
    is_random = True
    light = True
    arg_inputs = frozenset({"value", "threshold", "foreground"})

    def setup(self, *, value=None, threshold=None, foreground=0) -> None:
        who = self.schema
        if value is not None and threshold is not None:
            raise ArgumentError(f"{who}: value and threshold cannot be given together")
        self.value = None if value is None else _scalar("value", value, "int", who)
        self.threshold = 0.0 if threshold is None else _scalar("threshold", threshold, "f", who)
        self.foreground = _scalar("foreground", foreground, "int", who)
        self._has_threshold = threshold is not None

    def output_layouts(self, input_layouts):
        return [""]

    def batch_params(self, n):
        return list(self.rng.integers(0, 2**63 - 1, n))

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        who = self.schema
        if x.dtype not in _TYPES:
            raise ArgumentError(f"{who}: unexpected input type {x.dtype}")
        if x.ndim < 1:
            raise ArgumentError(f"{who}: the mask must have at least one dimension")
        value = self.value
        if "value" in args:
            value = _scalar("value", args["value"], "int", who)
        if value is not None and ("threshold" in args or self._has_threshold):
            raise ArgumentError(f"{who}: value and threshold cannot be given together")
        threshold = _scalar("threshold", args.get("threshold", self.threshold), "f", who)
        fg = _scalar("foreground", args.get("foreground", self.foreground), "int", who)
        rng = np.random.default_rng(param)
        if fg and x.size:
            mask = None
            if value is not None:
                v = np.asarray(value).astype(x.dtype) if x.dtype != np.bool_ else bool(value)
                if int(v) == value:  # the type can hold it; else any pixel, as DALI
                    mask = x == v
            else:
                mask = x.astype(np.float32) > np.float32(threshold)
            if mask is not None:
                where = np.flatnonzero(mask)
                if where.size:
                    flat = int(where[rng.integers(where.size)])
                    return np.array(np.unravel_index(flat, x.shape), np.int64)
        return np.array([rng.integers(0, max(n, 1)) for n in x.shape], np.int64)
