"""``fn.roi_random_crop``: the start of a fixed-size crop window placed at random so that it
holds as much of a region of interest as it can (DALI's ``ROIRandomCrop``,
``dali/operators/generic/roi_random_crop.cc``).

Per axis: a ROI larger than the window gives a window start inside the ROI; a smaller ROI, a
start that keeps the whole ROI inside the window; within ``[0, in_shape - crop_shape]`` when the
input's shape is known (``in_shape``, or the optional positional input). The start is int64,
one value per axis. Per-sample generators are seeded in ``batch_params``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register

_VEC_ARGS = ("crop_shape", "roi_start", "roi_end", "roi_shape", "in_shape")


def _ints(name: str, v, who: str) -> np.ndarray:
    a = np.atleast_1d(np.asarray(v)).reshape(-1)
    if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
        raise ArgumentError(f"{who}: {name}={np.asarray(v).tolist()!r} must be integers")
    return a.astype(np.int64)


def roi_crop_start(crop, roi_start, roi_extent, in_shape, rng) -> np.ndarray:
    """The window start per axis (DALI's RunImpl), drawing from ``rng``."""
    out = np.empty(len(crop), np.int64)
    triples = zip(crop.tolist(), roi_start.tolist(), roi_extent.tolist(), strict=True)
    for d, (c, s, e) in enumerate(triples):
        if e == c:
            out[d] = s
            continue
        lo, hi = sorted((s, s + e - c))
        if in_shape is not None:
            lo, hi = max(0, lo), min(int(in_shape[d]) - c, hi)
        out[d] = rng.integers(lo, hi + 1)
    return out


@register(legacy=("ROIRandomCrop",))
class ROIRandomCrop(Operator):
    """Random crop-window start around a region of interest (CPU only, as DALI).

    Args:
        crop_shape: the window's extents (required); argument input allowed.
        roi_start: the ROI's start (required); argument input allowed.
        roi_end, roi_shape: the ROI's end or its extents (exactly one); argument inputs allowed.
        in_shape: the input's shape, to keep the window inside it; or give the input itself as
            the positional input (not both). Argument input allowed.

    Example:
        >>> anchor = fn.roi_random_crop(label, roi_start=roi_start, roi_end=roi_end,
        ...                             crop_shape=[1, 128, 128, 128])
    """

    schema = "roi_random_crop"
    ops_name = "ROIRandomCrop"
    num_inputs = (0, 1)
    is_random = True
    light = True
    arg_inputs = frozenset(_VEC_ARGS)

    def setup(
        self, *, crop_shape=None, roi_start=None, roi_end=None, roi_shape=None, in_shape=None
    ):
        who = self.schema
        self._static = {
            "crop_shape": crop_shape,
            "roi_start": roi_start,
            "roi_end": roi_end,
            "roi_shape": roi_shape,
            "in_shape": in_shape,
        }
        for k, v in self._static.items():
            if v is not None:
                _ints(k, v, who)
        if roi_end is not None and roi_shape is not None:
            raise ArgumentError(f"{who}: give roi_end or roi_shape, not both")

    def output_layouts(self, input_layouts):
        return [""]

    def batch_params(self, n):
        return list(self.rng.integers(0, 2**63 - 1, n))

    def run_sample(self, inputs, args, param):
        who = self.schema
        v = {k: (args[k] if k in args else s) for k, s in self._static.items()}
        for name in ("crop_shape", "roi_start"):
            if v[name] is None:
                raise ArgumentError(f"{who}: {name} is required")
        if (v["roi_end"] is None) == (v["roi_shape"] is None):
            raise ArgumentError(f"{who}: give exactly one of roi_end and roi_shape")
        crop = _ints("crop_shape", v["crop_shape"], who)
        ndim = crop.size
        vals = {}
        for name in ("roi_start", "roi_end", "roi_shape", "in_shape"):
            if v[name] is not None:
                vals[name] = _ints(name, v[name], who)
                if vals[name].size != ndim:
                    raise ArgumentError(
                        f"{who}: {name}={vals[name].tolist()} must have {ndim} values, as "
                        f"crop_shape={crop.tolist()}"
                    )
        start = vals["roi_start"]
        extent = vals["roi_end"] - start if "roi_end" in vals else vals["roi_shape"]
        shape = vals.get("in_shape")
        if inputs:
            if shape is not None:
                raise ArgumentError(f"{who}: in_shape cannot be given with a positional input")
            shape = np.array(inputs[0].shape, np.int64)
            if shape.size != ndim:
                raise ArgumentError(
                    f"{who}: the input has {shape.size} dimensions but crop_shape has {ndim}"
                )
        if shape is not None:
            for d in range(ndim):
                if shape[d] < 0 or crop[d] < 0:
                    raise ArgumentError(f"{who}: shapes cannot be negative (axis {d})")
                if shape[d] < crop[d]:
                    raise ArgumentError(
                        f"{who}: cropping shape can't be bigger than the input shape; got "
                        f"crop_shape[{d}]={crop[d]} and input shape[{d}]={shape[d]}"
                    )
                if start[d] < 0 or start[d] + extent[d] > shape[d]:
                    raise ArgumentError(
                        f"{who}: the ROI can't be out of bounds; got roi_start[{d}]={start[d]}, "
                        f"roi_end[{d}]={start[d] + extent[d]}, input shape[{d}]={shape[d]}"
                    )
        return roi_crop_start(crop, start, extent, shape, np.random.default_rng(param))
