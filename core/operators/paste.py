"""``fn.paste``: an image pasted on a larger canvas of a fill colour (DALI's ``Paste``).

DALI's paste is GPU-only in older versions and has a CPU side since 1.x; both are offered
here, with DALI's integer arithmetic: the canvas is ``int(ratio * H)`` x ``int(ratio * W)``
(float32 products, truncated), at least ``int(min_canvas_size)`` on each side, and the image
goes at row ``int(paste_y * (canvas_H - H))``, column ``int(paste_x * (canvas_W - W))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._boxes import scalar

WHO = "paste"
F = np.float32


def paste_geometry(
    h: int, w: int, ratio: float, paste_x: float, paste_y: float, min_canvas: float
) -> tuple[int, int, int, int]:
    """(canvas H, canvas W, paste row, paste column) of an ``h`` x ``w`` image, as DALI
    computes them (float32 products truncated to int).

    Raises:
        ArgumentError: ``ratio`` < 1, ``min_canvas_size`` < 0, or a paste position outside
            [0, 1].
    """
    if ratio < 1:
        raise ArgumentError(f"{WHO}: ratio={ratio!r} must be at least 1")
    if min_canvas < 0:
        raise ArgumentError(f"{WHO}: min_canvas_size={min_canvas!r} must be >= 0")
    for name, v in (("paste_x", paste_x), ("paste_y", paste_y)):
        if not 0 <= v <= 1:
            raise ArgumentError(f"{WHO}: {name}={v!r} must be in [0, 1]")
    out_h = max(int(F(ratio) * F(h)), int(F(min_canvas)))
    out_w = max(int(F(ratio) * F(w)), int(F(min_canvas)))
    row = int(F(paste_y) * F(out_h - h))
    col = int(F(paste_x) * F(out_w - w))
    return out_h, out_w, row, col


@register(legacy=("Paste",))
class Paste(Operator):
    """Pastes HWC uint8 images onto canvases ``ratio`` times larger, filled with
    ``fill_value``; the output layout is HWC.

    Args:
        ratio: canvas size / image size, >= 1 (required). Per-sample argument input allowed.
        fill_value: the canvas colour: one value, or one per channel (required).
        n_channels: channels of the images. Default 3.
        paste_x, paste_y: where the image goes, 0 (left/top) to 1 (right/bottom). Default
            0.5. Per-sample argument inputs allowed.
        min_canvas_size: the least canvas side. Default 0. Per-sample argument input allowed.

    Example:
        >>> ratio = fn.random.uniform(range=[1, 4])
        >>> images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=(0, 0, 0))
    """

    schema = "paste"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"ratio", "paste_x", "paste_y", "min_canvas_size"})

    def setup(
        self,
        *,
        ratio: float | None = None,
        fill_value: Sequence[int] | int | None = None,
        n_channels: int = 3,
        paste_x: float = 0.5,
        paste_y: float = 0.5,
        min_canvas_size: float = 0.0,
    ) -> None:
        if fill_value is None:
            raise ArgumentError(f"{WHO}: fill_value= is required (the canvas colour)")
        if not isinstance(n_channels, int | np.integer) or not 1 <= n_channels <= 1024:
            raise ArgumentError(f"{WHO}: n_channels={n_channels!r} must be in [1, 1024]")
        fill = np.asarray(fill_value).reshape(-1)
        if fill.size == 1:
            fill = np.repeat(fill, n_channels)
        if fill.size != n_channels:
            raise ArgumentError(
                f"{WHO}: fill_value={fill_value!r} must have 1 or n_channels={n_channels} values"
            )
        if not np.issubdtype(fill.dtype, np.integer) and not np.all(fill == np.round(fill)):
            raise ArgumentError(f"{WHO}: fill_value={fill_value!r} must hold integers")
        self.fill = fill.astype(np.int64).astype(np.uint8)  # DALI keeps the low byte
        self.n_channels = int(n_channels)
        self.ratio = None if ratio is None else scalar(ratio, "ratio", WHO)
        if self.ratio is not None and self.ratio < 1:
            raise ArgumentError(f"{WHO}: ratio={ratio!r} must be at least 1")
        self.paste_x = scalar(paste_x, "paste_x", WHO)
        self.paste_y = scalar(paste_y, "paste_y", WHO)
        self.min_canvas_size = scalar(min_canvas_size, "min_canvas_size", WHO)

    def output_layouts(self, input_layouts):
        return ["HWC"]

    def geometry(self, shape: tuple, args: dict) -> tuple[int, int, int, int]:
        """(canvas H, canvas W, paste row, paste column) of one sample."""
        if len(shape) != 3:
            raise ArgumentError(f"{WHO}: expects HWC images (3 dimensions), got shape {shape}")
        if shape[2] != self.n_channels:
            raise ArgumentError(
                f"{WHO}: the image has {shape[2]} channels but n_channels={self.n_channels}"
            )

        def get(name):
            return scalar(args[name], name, WHO) if name in args else getattr(self, name)

        ratio = get("ratio")
        if ratio is None:
            raise ArgumentError(f"{WHO}: ratio= is required")
        return paste_geometry(
            shape[0], shape[1], ratio, get("paste_x"), get("paste_y"), get("min_canvas_size")
        )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype != np.uint8:
            raise ArgumentError(f"{WHO}: only uint8 images are supported, got {x.dtype}")
        out_h, out_w, row, col = self.geometry(x.shape, args)
        out = np.empty((out_h, out_w, x.shape[2]), np.uint8)
        out[...] = self.fill
        h, w = x.shape[:2]
        out[row : row + h, col : col + w] = x
        return out

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.paste import paste_batch

        x = inputs[0]
        if x.dtype != np.uint8:
            raise ArgumentError(f"{WHO}: only uint8 images are supported, got {x.dtype}")
        n = len(x)
        geo = [
            self.geometry(tuple(int(v) for v in x.shapes[i]), {k: v[i] for k, v in args.items()})
            for i in range(n)
        ]
        return paste_batch(x, np.asarray(geo, np.int64).reshape(n, 4), self.fill, stream=stream)
