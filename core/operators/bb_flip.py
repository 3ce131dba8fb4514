"""``fn.bb_flip``: mirror bounding boxes in relative coordinates (DALI's ``BbFlip``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._boxes import box_rows, scalar

WHO = "bb_flip"


def flip_boxes(boxes: np.ndarray, ltrb: bool, horizontal: bool, vertical: bool) -> np.ndarray:
    """Mirror (N, 4) float32 boxes in [0, 1] coordinates: ``x -> 1 - x`` (and y).

    [l, t, r, b] boxes swap their edges (``l' = 1 - r``, ``r' = 1 - l``); [x, y, w, h] boxes
    move their corner (``x' = 1 - (x + w)``) and keep their size exactly, as DALI's GPU kernel
    computes them (its CPU side goes through [lo, hi] corners, so w and h may differ from it in
    the last bit).
    """
    if ltrb and horizontal and vertical:  # every coordinate: one subtraction
        return np.float32(1) - boxes[:, [2, 3, 0, 1]]
    out = boxes.copy()
    for flag, lo, hi in ((horizontal, 0, 2), (vertical, 1, 3)):
        if not flag:
            continue
        if ltrb:
            out[:, lo] = np.float32(1) - boxes[:, hi]
            out[:, hi] = np.float32(1) - boxes[:, lo]
        else:
            out[:, lo] = np.float32(1) - (boxes[:, lo] + boxes[:, hi])
    return out


@register(legacy=("BbFlip",))
class BbFlip(Operator):
    """Flips bounding boxes horizontally and/or vertically, in relative [0, 1] coordinates.

    Input: float32 boxes, (N, 4) or flat (4N,), [x, y, w, h] or [l, t, r, b] (``ltrb``). The
    output has the input's shape, dtype and layout.

    Args:
        ltrb: boxes are [l, t, r, b] (else [x, y, w, h]). Default False.
        horizontal: nonzero flips horizontally. Default 1. Per-sample argument input allowed.
        vertical: nonzero flips vertically. Default 0. Per-sample argument input allowed.

    Example:
        >>> flip = fn.random.coin_flip(probability=0.5)
        >>> images = fn.flip(images, horizontal=flip)
        >>> bboxes = fn.bb_flip(bboxes, ltrb=True, horizontal=flip)
    """

    schema = "bb_flip"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"horizontal", "vertical"})

    def setup(self, *, ltrb: bool = False, horizontal: int = 1, vertical: int = 0) -> None:
        self.ltrb = bool(ltrb)
        self.horizontal = scalar(horizontal, "horizontal", WHO, int)
        self.vertical = scalar(vertical, "vertical", WHO, int)

    def flags(self, args: dict) -> tuple[int, int]:
        h = scalar(args["horizontal"], "horizontal", WHO, int) if "horizontal" in args else None
        v = scalar(args["vertical"], "vertical", WHO, int) if "vertical" in args else None
        return (self.horizontal if h is None else h), (self.vertical if v is None else v)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        rows = box_rows(x, WHO)
        h, v = self.flags(args)
        return flip_boxes(rows, self.ltrb, bool(h), bool(v)).reshape(x.shape)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.bbox import bb_flip_batch

        n = len(inputs[0])
        per = [self.flags({k: vals[i] for k, vals in args.items()}) for i in range(n)]
        if inputs[0].dtype != np.float32:
            raise ArgumentError(f"{WHO}: bounding boxes must be float32, got {inputs[0].dtype}")
        return bb_flip_batch(inputs[0], per, self.ltrb, stream=stream)
