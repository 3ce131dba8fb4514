"""``fn.bbox_paste``: boxes of an image pasted onto a larger canvas (DALI's ``BBoxPaste``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._boxes import box_rows, scalar

WHO = "bbox_paste"


def paste_offsets(ratio: float, paste_x: float, paste_y: float) -> tuple:
    """(scale, offset x, offset y) in float32, as DALI computes them: ``scale = 1 / ratio``,
    ``offset = paste * (ratio - 1) / ratio``, lowered (one float step at a time) until
    ``scale + offset <= 1``, so boxes inside [0, 1] stay inside."""
    f = np.float32
    ratio = f(ratio)
    scale = f(1) / ratio
    mul = (ratio - f(1)) / ratio
    offsets = []
    for p in (f(paste_x), f(paste_y)):
        ofs = p * mul
        if scale + ofs > f(1):
            ofs = f(1) - scale
            while scale + ofs > f(1):
                ofs = np.nextafter(ofs, f(-1))
        offsets.append(ofs)
    return scale, offsets[0], offsets[1]


@register(legacy=("BBoxPaste",))
class BBoxPaste(Operator):
    """Moves relative boxes to where they land when their image is pasted on a canvas
    ``ratio`` times larger at (``paste_x``, ``paste_y``), as ``fn.paste`` does.

    Corners map as ``x' = x / ratio + paste_x * (ratio - 1) / ratio`` (y alike); [x, y, w, h]
    sizes as ``w' = w / ratio``. (0, 0) puts the image at the canvas's top-left corner, (1, 1)
    at its bottom-right one.

    Args:
        ratio: canvas size / image size, >= 1 (required). Per-sample argument input allowed.
        ltrb: boxes are [l, t, r, b] (else [x, y, w, h]). Default False.
        paste_x, paste_y: the paste position in [0, 1]. Default 0.5. Per-sample argument
            inputs allowed.

    Example:
        >>> ratio = fn.random.uniform(range=[1, 4])
        >>> px, py = fn.random.uniform(range=[0, 1]), fn.random.uniform(range=[0, 1])
        >>> images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=0)
        >>> bboxes = fn.bbox_paste(bboxes, ratio=ratio, paste_x=px, paste_y=py, ltrb=True)
    """

    schema = "bbox_paste"
    arg_inputs = frozenset({"ratio", "paste_x", "paste_y"})

    def setup(
        self,
        *,
        ratio: float | None = None,
        ltrb: bool = False,
        paste_x: float = 0.5,
        paste_y: float = 0.5,
    ) -> None:
        self.ltrb = bool(ltrb)
        self.ratio = None if ratio is None else scalar(ratio, "ratio", WHO)
        self.paste_x = scalar(paste_x, "paste_x", WHO)
        self.paste_y = scalar(paste_y, "paste_y", WHO)
        if self.ratio is not None and self.ratio < 1:
            raise ArgumentError(f"{WHO}: ratio={ratio!r} must be at least 1")

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        rows = box_rows(x, WHO)
        ratio = scalar(args["ratio"], "ratio", WHO) if "ratio" in args else self.ratio
        if ratio is None:
            raise ArgumentError(f"{WHO}: ratio= is required")
        if ratio < 1:
            raise ArgumentError(f"{WHO}: ratio={ratio!r} must be at least 1")
        px = scalar(args["paste_x"], "paste_x", WHO) if "paste_x" in args else self.paste_x
        py = scalar(args["paste_y"], "paste_y", WHO) if "paste_y" in args else self.paste_y
        scale, ox, oy = paste_offsets(ratio, px, py)
        out = rows * scale
        out[:, 0] += ox
        out[:, 1] += oy
        if self.ltrb:
            out[:, 2] += ox
            out[:, 3] += oy
        return out.astype(np.float32).reshape(x.shape)
