"""``fn.peek_image_shape``: the shape (H, W, C) of encoded images from their headers, without
decoding them (DALI's ``PeekImageShape``).

The header is read with Pillow (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000, GIF, ...: only the
first bytes of the file are parsed). ``C`` follows ``image_type`` as DALI's decoders do: 3 for
RGB, BGR and YCbCr, 1 for GRAY, and the file's own channel count for ANY_DATA. With
``adjust_orientation`` (default True) an EXIF orientation that turns the picture by 90 degrees
swaps H and W, as the decoders' outputs do.
"""

from __future__ import annotations

from io import BytesIO

import numpy as np

from ..errors import ArgumentError, DecodeError
from ..graph import Operator, register
from ..types import DALIDataType, DALIImageType, to_image_type
from .cast import parse_dtype

__all__ = ["PeekImageShape", "image_header_shape"]

_OUT_TYPES = (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64)
# Pillow modes -> the channels a decoder gives for ANY_DATA
_MODE_CHANNELS = {
    "1": 1, "L": 1, "I": 1, "F": 1, "I;16": 1, "I;16B": 1, "I;16L": 1,
    "LA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3,
    "RGBA": 4, "RGBa": 4, "RGBX": 4, "CMYK": 4,
}  # fmt: skip


def image_header_shape(data: bytes, image_type, adjust_orientation: bool = True):
    """(H, W, C) of the encoded image ``data`` from its header.

    Raises:
        DecodeError: the bytes are not an image Pillow can identify.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(BytesIO(data)) as im:
            width, height = im.size
            mode = im.mode
            native = _MODE_CHANNELS.get(mode)
            if mode == "P":  # palette: expanded to RGB, or RGBA with a transparent entry
                native = 4 if "transparency" in im.info else 3
            orientation = 1
            if adjust_orientation:
                try:
                    orientation = int(im.getexif().get(0x0112, 1))
                except Exception:  # unreadable EXIF: as if there were none
                    orientation = 1
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise DecodeError(f"peek_image_shape: not a recognised image ({e})") from None
    if orientation in (5, 6, 7, 8):  # turned by 90 or 270 degrees
        width, height = height, width
    itype = to_image_type(image_type)
    if itype == DALIImageType.GRAY:
        channels = 1
    elif itype == DALIImageType.ANY_DATA:
        channels = native or 3
    else:
        channels = 3
    return height, width, channels


@register(legacy=("PeekImageShape",))
class PeekImageShape(Operator):
    """The shape [H, W, C] of each encoded image, read from its header (no decoding).

    Args:
        dtype: the output type: INT64 (default), INT32, UINT32, UINT64, FLOAT or FLOAT64.
        image_type: the color format the image would be decoded to (default RGB), which sets C.
        adjust_orientation: apply the EXIF orientation (default True).

    Example:
        >>> with pipe:
        ...     jpegs, labels = fn.readers.file(file_root=root)
        ...     shapes = fn.peek_image_shape(jpegs)  # [[H, W, 3], ...] as INT64
    """

    schema = "peek_image_shape"
    light = True

    def setup(
        self, *, dtype=DALIDataType.INT64, image_type=DALIImageType.RGB, adjust_orientation=True
    ) -> None:
        who = self.schema
        self.dtype = parse_dtype(dtype, who, allowed=_OUT_TYPES)
        try:
            self.image_type = to_image_type(image_type)
        except (ValueError, KeyError, TypeError):
            raise ArgumentError(f"{who}: image_type={image_type!r} is not an image type") from None
        self.adjust_orientation = bool(adjust_orientation)

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, param):
        data = np.asarray(inputs[0])
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ArgumentError(
                f"{self.schema}: the input must be a raw, undecoded file stored as a flat uint8 "
                f"array; got {data.dtype} of shape {list(data.shape)}"
            )
        shape = image_header_shape(data.tobytes(), self.image_type, self.adjust_orientation)
        return np.array(shape, self.dtype)
