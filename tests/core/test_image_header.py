"""``_image_header.claimed_size``: the size in an image's header, checked against Pillow's
reading of files Pillow and OpenCV wrote, and against hand-edited headers."""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from dlpipe._image_header import claimed_size

H, W = 37, 53


def _image(mode="RGB"):
    rng = np.random.default_rng(0)
    arr = (rng.random((H, W, 3)) * 255).astype(np.uint8)
    return Image.fromarray(arr).convert(mode)


def _pil(fmt, mode="RGB", **kw) -> bytes:
    out = io.BytesIO()
    _image(mode).save(out, fmt, **kw)
    return out.getvalue()


@pytest.mark.parametrize(
    "fmt, mode, kw, name",
    [
        ("JPEG", "RGB", {}, "JPEG"),
        ("JPEG", "RGB", {"progressive": True}, "JPEG"),
        ("JPEG", "CMYK", {}, "JPEG"),
        ("JPEG", "L", {"icc_profile": b"\0" * 70000}, "JPEG"),  # SOF after 70 KB of APP2
        ("PNG", "RGBA", {}, "PNG"),
        ("BMP", "RGB", {}, "BMP"),
        ("TIFF", "RGB", {}, "TIFF"),
        ("TIFF", "RGB", {"compression": "tiff_lzw"}, "TIFF"),
        ("TIFF", "RGB", {"big_tiff": True}, "BigTIFF"),
        ("WEBP", "RGB", {}, "WebP"),
        ("WEBP", "RGB", {"lossless": True}, "WebP"),
        ("WEBP", "RGBA", {"exif": b"Exif\0\0II*\0\x08\0\0\0\0\0"}, "WebP"),  # VP8X
        ("GIF", "P", {}, "GIF"),
        ("PPM", "RGB", {}, "PNM"),
        ("JPEG2000", "RGB", {}, "JPEG 2000"),
        ("JPEG2000", "RGB", {"no_jp2": True}, "JPEG 2000"),
    ],
)
def test_size_of_files_pillow_writes(fmt, mode, kw, name):
    try:
        data = _pil(fmt, mode, **kw)
    except (OSError, TypeError, KeyError) as e:  # a Pillow built without that writer
        pytest.skip(f"Pillow cannot write {fmt} {kw}: {e}")
    with Image.open(io.BytesIO(data)) as im:  # the independent reading
        assert im.size == (W, H)
    assert claimed_size(data) == (name, H, W)
    assert claimed_size(np.frombuffer(data, np.uint8)) == (name, H, W)


@pytest.mark.parametrize("ext", [".jpg", ".png", ".bmp", ".tif", ".webp", ".pgm", ".pbm"])
def test_size_of_files_opencv_writes(ext):
    img = (np.random.default_rng(1).random((H, W, 3)) * 255).astype(np.uint8)
    if ext in (".pgm", ".pbm"):
        img = img[:, :, 0]
    ok, enc = cv2.imencode(ext, img)
    assert ok
    assert claimed_size(enc)[1:] == (H, W)  # a 2-D (N, 1) array, as imencode gives


def _patch(data: bytes, offset: int, fmt: str, *values) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, *values)
    return bytes(b)


def test_edited_headers_claim_what_they_say():
    jpeg = _pil("JPEG")
    sof = jpeg.index(b"\xff\xc0")
    assert claimed_size(_patch(jpeg, sof + 5, ">HH", 60000, 60000)) == ("JPEG", 60000, 60000)
    bmp = _pil("BMP")
    assert claimed_size(_patch(bmp, 22, "<i", -(2**30))) == ("BMP", 2**30, W)  # top-down
    png = _pil("PNG")
    assert claimed_size(_patch(png, 16, ">II", 70000, 9)) == ("PNG", 9, 70000)
    gif = _pil("GIF", "P")
    assert claimed_size(_patch(gif, 6, "<HH", 65535, 65535)) == ("GIF", 65535, 65535)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xd8",
        b"\xff\xd8\xff\xe0\x00",  # a segment cut short
        b"\xff\xd8\xff\xda\x00\x08",  # a scan before any frame header
        b"\xff\xd8\x00\x00\x00\x00",  # not a marker where one belongs
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX",
        b"BM\x00\x00",
        b"II*\x00\xff\xff\xff\x7f",  # IFD past the end
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",
        b"P5\n# only a comment\n",
        b"not an image at all",
    ],
)
def test_unreadable_headers_give_none(data):
    assert claimed_size(data) is None


def test_jpeg_header_cut_after_sof_marker_gives_none():
    jpeg = _pil("JPEG")
    sof = jpeg.index(b"\xff\xc0")
    assert claimed_size(jpeg[: sof + 6]) is None
