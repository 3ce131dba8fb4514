"""fn.peek_image_shape: header shapes of JPEG/PNG/BMP/WebP files against the images written,
channels by image_type, EXIF orientation, dtypes, and errors."""

from __future__ import annotations

from io import BytesIO

import numpy as np
import pytest
from PIL import Image

from dlpipe import ArgumentError, DecodeError, Pipeline, fn, types
from dlpipe.operators.peek_image_shape import PeekImageShape


def encode(img: Image.Image, fmt: str, **kw) -> np.ndarray:
    buf = BytesIO()
    img.save(buf, format=fmt, **kw)
    return np.frombuffer(buf.getvalue(), np.uint8)


def peek(data, **kw):
    return PeekImageShape(**kw).run_sample((data,), {}, None)


RGB = Image.fromarray(np.zeros((37, 53, 3), np.uint8))
RGBA = Image.fromarray(np.zeros((20, 11, 4), np.uint8))
GRAY = Image.fromarray(np.zeros((9, 14), np.uint8))


@pytest.mark.parametrize(
    "img, fmt, native",
    [
        (RGB, "JPEG", 3),
        (RGB, "PNG", 3),
        (RGBA, "PNG", 4),
        (GRAY, "PNG", 1),
        (GRAY, "JPEG", 1),
        (RGB, "BMP", 3),
        (RGB, "WEBP", 3),
        (RGB, "TIFF", 3),
    ],
)
def test_shapes_and_channels(img, fmt, native):
    data = encode(img, fmt)
    w, h = img.size
    out = peek(data)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [h, w, 3])
    np.testing.assert_array_equal(peek(data, image_type=types.GRAY), [h, w, 1])
    np.testing.assert_array_equal(peek(data, image_type=types.ANY_DATA), [h, w, native])


def test_palette_png_channels():
    pal = RGB.convert("P")
    np.testing.assert_array_equal(peek(encode(pal, "PNG"), image_type=types.ANY_DATA), [37, 53, 3])
    data = encode(pal, "PNG", transparency=0)
    np.testing.assert_array_equal(peek(data, image_type=types.ANY_DATA), [37, 53, 4])


def test_exif_orientation_swaps_height_and_width():
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees
    data = encode(RGB, "JPEG", exif=exif.tobytes())
    np.testing.assert_array_equal(peek(data), [53, 37, 3])
    np.testing.assert_array_equal(peek(data, adjust_orientation=False), [37, 53, 3])
    exif[0x0112] = 3  # 180 degrees: no swap
    np.testing.assert_array_equal(peek(encode(RGB, "JPEG", exif=exif.tobytes())), [37, 53, 3])


@pytest.mark.parametrize("dtype", [types.INT32, types.UINT64, types.FLOAT, types.FLOAT64])
def test_dtypes(dtype):
    out = peek(encode(GRAY, "PNG"), dtype=dtype)
    np.testing.assert_array_equal(out, [9, 14, 3])
    assert out.dtype == types.to_numpy_dtype(dtype)


def test_errors():
    with pytest.raises(ArgumentError, match="dtype"):
        PeekImageShape(dtype=types.UINT8)
    with pytest.raises(ArgumentError, match="image_type"):
        PeekImageShape(image_type="HSV")
    with pytest.raises(DecodeError, match="not a recognised image"):
        peek(np.frombuffer(b"not an image at all", np.uint8))
    with pytest.raises(ArgumentError, match="flat uint8"):
        peek(np.zeros((2, 2), np.uint8))


def test_pipeline_with_file_reader(image_root):
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        pipe.set_outputs(fn.peek_image_shape(jpegs), fn.decoders.image(jpegs))
    shapes, images = pipe.run()
    for i in range(4):
        assert tuple(shapes.at(i)) == images.at(i).shape
