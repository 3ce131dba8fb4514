"""``fn.color_space_conversion``: converts uint8 images between RGB, BGR, YCbCr and GRAY.

DALI's formulas (``color_space_conversion_impl.h``; uint8 specialisations, float32 arithmetic,
results rounded half away from zero and saturated):

* YCbCr is ITU-R BT.601 with footroom and headroom (Y in 16..235):
  ``Y = 0.257 R + 0.504 G + 0.098 B + 16``, ``Cb = -0.148 R - 0.291 G + 0.439 B + 128``,
  ``Cr = 0.439 R - 0.368 G - 0.071 B + 128`` (Cb = Cr = 128 exactly for grey pixels), and back
  ``R = 1.164 (Y - 16) + 1.596 (Cr - 128)``, ``G = 1.164 (Y - 16) - 0.813 (Cr - 128) - 0.392
  (Cb - 128)``, ``B = 1.164 (Y - 16) + 2.017 (Cb - 128)``.
* YCbCr -> GRAY stretches Y to the full range, ``(Y - 16) / 0.859``; GRAY -> YCbCr is
  ``0.859 * gray + 0.0625`` (DALI's uint8 code adds 0.0625, not 16), with Cb = Cr = 128.
* RGB/BGR -> GRAY: on the CPU, OpenCV 4's ``cvtColor`` (DALI's CPU operator uses it:
  ``(4899 R + 9617 G + 1868 B + 8192) >> 14``, computed here in numpy: OpenCV 5 changed the
  weights); on the GPU, DALI's float ``0.299 R + 0.587 G + 0.114
  B``. The two differ by at most 1 on some pixels, as DALI's own CPU and GPU do.
* GRAY -> RGB/BGR repeats the value; RGB <-> BGR swaps the channels.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIImageType, to_image_type
from .cast import convert_sat

__all__ = ["ColorSpaceConversion", "convert_colors"]

_RGB, _BGR, _GRAY, _YCC = (
    DALIImageType.RGB,
    DALIImageType.BGR,
    DALIImageType.GRAY,
    DALIImageType.YCbCr,
)
_CHANNELS = {_RGB: 3, _BGR: 3, _YCC: 3, _GRAY: 1}
# the conversion codes the GPU kernel (color_space_conversion.cu) switches on
CODES = {
    (_RGB, _BGR): 0,
    (_BGR, _RGB): 0,
    (_RGB, _GRAY): 1,
    (_BGR, _GRAY): 2,
    (_GRAY, _RGB): 3,
    (_GRAY, _BGR): 3,
    (_RGB, _YCC): 4,
    (_BGR, _YCC): 5,
    (_YCC, _RGB): 6,
    (_YCC, _BGR): 7,
    (_GRAY, _YCC): 8,
    (_YCC, _GRAY): 9,
}
_f32 = np.float32


def _dot(coeffs, a, b, c):
    """``c0 * a + c1 * b + c2 * c`` in float32, in DALI's order (each product rounded)."""
    acc = _f32(coeffs[0]) * a
    acc += _f32(coeffs[1]) * b
    acc += _f32(coeffs[2]) * c
    return acc


def _rgb_to_ycbcr(r, g, b) -> list[np.ndarray]:
    y = _dot((0.257, 0.504, 0.098), r, g, b) + _f32(16)
    cb = _dot((-0.148, -0.291, 0.439), r, g, b) + _f32(128)
    cr = _dot((0.439, -0.368, -0.071), r, g, b) + _f32(128)
    grey = (r == g) & (r == b)
    cb[grey] = 128
    cr[grey] = 128
    return [y, cb, cr]


def _ycbcr_to_rgb(y, cb, cr) -> list[np.ndarray]:
    ty = _f32(1.164) * (y - _f32(16))
    tb = cb - _f32(128)
    tr = cr - _f32(128)
    r = ty + _f32(1.596) * tr
    g = ty - _f32(0.813) * tr
    g -= _f32(0.392) * tb
    b = ty + _f32(2.017) * tb
    return [r, g, b]


_GRAY_SCALE = _f32(_f32(_f32(0.257) + _f32(0.504)) + _f32(0.098))


def convert_colors(x: np.ndarray, src: DALIImageType, dst: DALIImageType) -> np.ndarray:
    """Convert one uint8 image (channels last, any leading axes) from ``src`` to ``dst``."""
    shape = x.shape[:-1]
    if (src, dst) in ((_RGB, _BGR), (_BGR, _RGB)):
        return np.ascontiguousarray(x[..., ::-1])
    if src == _GRAY and dst in (_RGB, _BGR):
        return np.ascontiguousarray(np.repeat(x, 3, axis=-1))
    if dst == _GRAY and src in (_RGB, _BGR):
        r, g, b = (x[..., i].astype(np.int32) for i in ((0, 1, 2) if src == _RGB else (2, 1, 0)))
        y = (r * 4899 + g * 9617 + b * 1868 + 8192) >> 14  # OpenCV 4's cvtColor, exactly
        return y.astype(np.uint8)[..., None]
    f = x.astype(_f32)
    if src == _GRAY and dst == _YCC:
        y = convert_sat(f[..., 0] * _GRAY_SCALE + _f32(0.0625), np.uint8)
        out = np.full((*shape, 3), 128, np.uint8)
        out[..., 0] = y
        return out
    if src == _YCC and dst == _GRAY:
        scale = _f32(1) / _GRAY_SCALE
        return convert_sat(scale * (f[..., :1] - _f32(16)), np.uint8)
    if dst == _YCC:
        r, g, b = (f[..., i] for i in ((0, 1, 2) if src == _RGB else (2, 1, 0)))
        planes = _rgb_to_ycbcr(r, g, b)
    else:  # YCbCr -> RGB / BGR
        planes = _ycbcr_to_rgb(f[..., 0], f[..., 1], f[..., 2])
        if dst == _BGR:
            planes = planes[::-1]
    return convert_sat(np.stack(planes, axis=-1), np.uint8)


@register(legacy=("ColorSpaceConversion",))
class ColorSpaceConversion(Operator):
    """Converts uint8 images (HWC, FHWC, DHWC, FDHWC) between the colour spaces RGB, BGR,
    YCbCr (ITU-R BT.601) and GRAY; the channel count changes with the colour space.

    Args:
        image_type: the input's colour space (required): ``types.RGB``, ``BGR``, ``YCbCr``,
            ``GRAY``.
        output_type: the output's colour space (required).

    Example:
        >>> with pipe:
        ...     gray = fn.color_space_conversion(images, image_type=types.RGB,
        ...                                      output_type=types.GRAY)
    """

    schema = "color_space_conversion"
    devices = ("cpu", "gpu")

    def setup(self, *, image_type=None, output_type=None) -> None:
        if image_type is None or output_type is None:
            raise ArgumentError(
                f"{self.schema}: the arguments image_type and output_type are required"
            )
        self.image_type = self._kind("image_type", image_type)
        self.output_type = self._kind("output_type", output_type)
        if (self.image_type, self.output_type) not in CODES:
            raise ArgumentError(
                f"{self.schema}: conversion from {self.image_type.name} to "
                f"{self.output_type.name} is not supported"
            )

    def _kind(self, name: str, value) -> DALIImageType:
        try:
            kind = to_image_type(value)
        except ValueError:
            kind = None
        if kind not in _CHANNELS:
            raise ArgumentError(
                f"{self.schema}: {name}={value!r} must be one of RGB, BGR, YCbCr, GRAY"
            )
        return kind

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        if layout and layout[-1] != "C":
            raise ArgumentError(
                f"{self.schema}: input layout {layout!r} is not supported; the channels must "
                "come last (HWC, FHWC, DHWC, FDHWC)"
            )
        return [layout]

    def check_input(self, dtype, shape) -> None:
        if np.dtype(dtype) != np.uint8:
            raise ArgumentError(f"{self.schema}: the input must be uint8, got {np.dtype(dtype)}")
        want = _CHANNELS[self.image_type]
        if len(shape) < 2 or shape[-1] != want:
            raise ArgumentError(
                f"{self.schema}: a {self.image_type.name} input needs {want} channel(s) in its "
                f"last axis; got shape {tuple(shape)}"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self.check_input(x.dtype, x.shape)
        return convert_colors(x, self.image_type, self.output_type)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.color_space import color_space_batch

        s = inputs[0]
        for shape in s.shapes:
            self.check_input(s.dtype, shape)
        code = CODES[(self.image_type, self.output_type)]
        return color_space_batch(s, code, _CHANNELS[self.output_type], stream=stream)
