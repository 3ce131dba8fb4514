"""CMYK and YCCK JPEGs decode as DALI's CPU decoder converts them (nvImageCodec's
libjpeg-turbo backend: ``R = (255 - C) * (255 - K) // 255`` on the ink values), not as
OpenCV does (one grey level higher on most pixels)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from dlpipe import Pipeline, fn
from dlpipe.decoders.image import decode_cpu
from dlpipe.options import RuntimeOptions
from dlpipe.types import DALIImageType


def _cmyk_jpeg(cmyk: np.ndarray, quality=95, exif=None) -> bytes:
    out = io.BytesIO()
    kw = {} if exif is None else {"exif": exif}
    Image.fromarray(cmyk, "CMYK").save(out, "JPEG", quality=quality, **kw)
    return out.getvalue()


def _decode(data: bytes, output_type=DALIImageType.RGB, **kw) -> np.ndarray:
    return decode_cpu(np.frombuffer(data, np.uint8), output_type, **kw)


def _dali_rgb(cmyk: np.ndarray) -> np.ndarray:
    """DALI's conversion of decoded ink values (C, M, Y, K), written out."""
    c, m, y, k = (cmyk[:, :, j].astype(np.int64) for j in range(4))
    r = (255 - c) * (255 - k) // 255
    g = (255 - m) * (255 - k) // 255
    b = (255 - y) * (255 - k) // 255
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def _ink(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "CMYK"
        return np.asarray(im)


def test_flat_colour_matches_the_formula_by_hand():
    cmyk = np.zeros((16, 16, 4), np.uint8)
    cmyk[...] = (93, 186, 248, 37)
    data = _cmyk_jpeg(cmyk, quality=100)  # flat blocks at quality 100 decode exactly
    assert (_ink(data) == (93, 186, 248, 37)).all()
    # (255 - 93) * 218 // 255 = 138, (255 - 186) * 218 // 255 = 58, 7 * 218 // 255 = 5
    rgb = _decode(data)
    assert rgb.dtype == np.uint8 and rgb.shape == (16, 16, 3)
    assert (rgb == (138, 58, 5)).all()
    assert (_decode(data, DALIImageType.BGR) == (5, 58, 138)).all()
    # gray as DALI: 0.299 * 138 + 0.587 * 58 + 0.114 * 5 = 75.85 -> 75 (rounded down)
    gray = _decode(data, DALIImageType.GRAY)
    assert gray.shape == (16, 16, 1) and (gray == 75).all()
    # OpenCV's own conversion (BGR) is one or two levels higher
    assert (cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) == (7, 60, 139)).all()


def test_cmyk_from_rgb_matches_pillow_and_not_opencv():
    # Pillow's RGB -> CMYK has K = 0; there Pillow's CMYK -> RGB and DALI's agree exactly
    rng = np.random.default_rng(0)
    rgb = (rng.random((32, 48, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(out, "JPEG", quality=90)
    data = out.getvalue()
    with Image.open(io.BytesIO(data)) as im:
        pillow = np.asarray(im.convert("RGB"))
    got = _decode(data)
    np.testing.assert_array_equal(got, pillow)
    opencv = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    assert (opencv.astype(int) - pillow).mean() > 0.9  # the bug this replaces


def test_cmyk_with_black_matches_dali_formula():
    rng = np.random.default_rng(1)
    cmyk = (rng.random((24, 40, 4)) * 255).astype(np.uint8)
    data = _cmyk_jpeg(cmyk)
    want = _dali_rgb(_ink(data))
    np.testing.assert_array_equal(_decode(data), want)
    with Image.open(io.BytesIO(data)) as im:  # Pillow rounds where DALI rounds down
        pillow = np.asarray(im.convert("RGB")).astype(int)
    assert np.abs(pillow - want).max() <= 1


def test_ycck_jpeg():
    # A CMYK JPEG whose Adobe marker says "transform 2" is a YCCK JPEG: libjpeg converts its
    # planes from YCC before the CMYK -> RGB step
    rng = np.random.default_rng(2)
    cmyk = (rng.random((16, 24, 4)) * 255).astype(np.uint8)
    data = bytearray(_cmyk_jpeg(cmyk))
    at = data.index(b"Adobe") + 11
    assert data[at] == 0
    data[at] = 2
    data = bytes(data)
    ink = _ink(data)
    assert not np.array_equal(ink, _ink(_cmyk_jpeg(cmyk)))  # it did read as YCCK
    np.testing.assert_array_equal(_decode(data), _dali_rgb(ink))


def test_cmyk_exif_orientation_and_output_types():
    cmyk = np.zeros((8, 16, 4), np.uint8)
    cmyk[:, :8] = (0, 255, 255, 0)  # left half red, right half white
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed turned 90 degrees clockwise
    data = _cmyk_jpeg(cmyk, quality=100, exif=exif.tobytes())
    turned = _decode(data)
    assert turned.shape == (16, 8, 3)
    assert (turned[0, 0] == (255, 0, 0)).all() and (turned[-1, 0] == (255, 255, 255)).all()
    assert _decode(data, adjust_orientation=False).shape == (8, 16, 3)
    ycbcr = _decode(data, DALIImageType.YCbCr)
    assert ycbcr.shape == (16, 8, 3)
    assert abs(int(ycbcr[-1, 0, 0]) - 255) <= 1  # white: Y = 255
    assert _decode(data, DALIImageType.ANY_DATA, file_channels=True).shape == (16, 8, 3)
    as_float = _decode(data, dtype=np.float32)
    assert as_float.dtype == np.float32 and as_float.max() == pytest.approx(1.0)


def test_cmyk_through_the_pipeline(tmp_path):
    cmyk = np.zeros((16, 16, 4), np.uint8)
    cmyk[...] = (93, 186, 248, 37)
    path = tmp_path / "cmyk.jpg"
    path.write_bytes(_cmyk_jpeg(cmyk, quality=100))
    pipe = Pipeline(batch_size=1, num_threads=1, runtime=RuntimeOptions(read_process=False))
    with pipe:
        data, _ = fn.readers.file(files=[str(path)])
        pipe.set_outputs(fn.decoders.image(data))
    (images,) = pipe.run()
    assert (images.as_array()[0] == (138, 58, 5)).all()
    pipe.close()
