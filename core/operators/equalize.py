"""``fn.equalize`` (and ``fn.experimental.equalize``): per-channel histogram equalization of
uint8 images and videos (DALI's ``experimental__Equalize``).

Every channel of every image (every frame of a video) is equalized on its own, as OpenCV's
``equalizeHist`` does: with ``cdf`` the cumulative histogram and ``first`` the count of the
lowest value present, value ``v`` maps to ``round((cdf[v] - first) * 255 / (total - first))``;
an image of a single value is left unchanged. The CPU side calls ``cv2.equalizeHist`` per
channel, as DALI's CPU operator does; the GPU side builds the same table in double precision
(DALI's ``PrepareLookupTable``), so the two agree but for a rounding tie now and then (OpenCV
scales in float32).

Layouts: ``HW``, ``HWC``, ``CHW``, ``FHW``, ``FHWC``, ``FCHW``; without a layout a 2-D sample
is ``HW``, a 3-D one ``HWC`` and a 4-D one ``FHWC``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples
from ..kernels.equalize import equalize_batch

__all__ = ["Equalize", "ExperimentalEqualize", "equalize_geometries", "equalize_geometry"]

LAYOUTS = ("HW", "HWC", "CHW", "FHW", "FHWC", "FCHW")
_DEFAULT = {2: "HW", 3: "HWC", 4: "FHWC"}


def equalize_geometry(who: str, layout: str, shape) -> tuple[int, int, int, int]:
    """(frames, pixels per plane, channels, channel divisor) of one sample.

    The sample's element ``i`` (C order) is in frame ``i // (pixels * channels)`` and channel
    ``(i // divisor) % channels``: the divisor is 1 for channels-last data and the plane size
    for channels-first data.

    Raises:
        ArgumentError: a layout equalize does not take, or one that does not fit the shape.
    """
    shape = tuple(int(v) for v in shape)
    layout = layout or _DEFAULT.get(len(shape), "")
    if layout not in LAYOUTS:
        raise ArgumentError(
            f"{who}: input layout {layout!r} is not supported; use one of {list(LAYOUTS)}"
        )
    if len(layout) != len(shape):
        raise ArgumentError(f"{who}: a {len(shape)}-D sample does not match the layout {layout!r}")
    dims = dict(zip(layout, shape, strict=True))
    frames = dims.get("F", 1)
    channels = dims.get("C", 1)
    pixels = dims["H"] * dims["W"]
    divisor = pixels if layout.endswith("CHW") else 1
    return frames, pixels, channels, divisor


def equalize_geometries(who: str, layout: str, shapes: np.ndarray) -> np.ndarray:
    """:func:`equalize_geometry` of every sample of a batch (shapes (N, ndim), one rank), as
    an int64 (N, 4) array, with numpy over the batch (the layout is checked once)."""
    shapes = np.asarray(shapes, np.int64)
    n, ndim = shapes.shape
    if n == 0:
        return np.zeros((0, 4), np.int64)
    equalize_geometry(who, layout, shapes[0])  # the checks, which depend on the rank only
    layout = layout or _DEFAULT[ndim]
    g = np.ones((n, 4), np.int64)
    for col, dim in ((0, "F"), (2, "C")):
        if dim in layout:
            g[:, col] = shapes[:, layout.index(dim)]
    g[:, 1] = shapes[:, layout.index("H")] * shapes[:, layout.index("W")]
    if layout.endswith("CHW"):
        g[:, 3] = g[:, 1]
    return g


def _equalize_plane(plane: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.equalizeHist(np.ascontiguousarray(plane))


@register
class Equalize(Operator):
    """Equalizes the histogram of each channel of uint8 images (each frame of a video).

    Example:
        >>> with pipe:
        ...     images = fn.equalize(fn.decoders.image(jpegs))
    """

    schema = "equalize"
    devices = ("cpu", "gpu")

    def setup(self) -> None:
        self._layout = ""

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def _check(self, dtype) -> None:
        if np.dtype(dtype) != np.uint8:
            raise ArgumentError(
                f"{self.schema}: input type {np.dtype(dtype)} is not supported; only uint8"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check(x.dtype)
        layout = self._layout or _DEFAULT.get(x.ndim, "")
        equalize_geometry(self.schema, layout, x.shape)
        frames = x if layout[0] == "F" else x[None]
        out = np.empty_like(frames)
        for f, frame in enumerate(frames):
            if frame.ndim == 2:
                out[f] = _equalize_plane(frame)
            elif layout.endswith("CHW"):
                for c in range(frame.shape[0]):
                    out[f, c] = _equalize_plane(frame[c])
            else:
                for c in range(frame.shape[-1]):
                    out[f, ..., c] = _equalize_plane(frame[..., c])
        return out.reshape(x.shape)

    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        self._check(s.dtype)
        geometry = equalize_geometries(self.schema, self._layout, s.shapes)
        return equalize_batch(s, geometry, stream=stream)


@register
class ExperimentalEqualize(Equalize):
    """The name DALI gave :func:`equalize` before it left ``experimental``."""

    schema = "experimental.equalize"
    ops_name = "Equalize"
