"""CPU image decoding: formats, colour types, and corrupt data named by file."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest

from dlpipe import DecodeError, Pipeline, PipelineError, fn, types
from dlpipe.decoders.image import decode_cpu
from dlpipe.synthetic import synthetic_image


@pytest.fixture(scope="module")
def rgb():
    return synthetic_image(np.random.default_rng(3), 37, 53)  # odd sizes: chroma edge cases


def encode(img_rgb, ext, *params):
    ok, buf = cv2.imencode(ext, cv2.cvtColor(img_rgb, cv2.COLOR_RGB2BGR), list(params))
    assert ok
    return buf.ravel()


@pytest.mark.parametrize("ext", [".png", ".bmp", ".tiff", ".ppm"])
def test_lossless_formats_round_trip_exactly(rgb, ext):
    out = decode_cpu(encode(rgb, ext), types.RGB)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, rgb)


@pytest.mark.parametrize(
    "ext, params",
    [(".jpg", (cv2.IMWRITE_JPEG_QUALITY, 85)), (".webp", (cv2.IMWRITE_WEBP_QUALITY, 80))],
)
def test_lossy_formats_match_libjpeg_turbo_decode(rgb, ext, params):
    data = encode(rgb, ext, *params)
    want = cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(decode_cpu(data, types.RGB), want)
    assert np.abs(decode_cpu(data, types.RGB).astype(int) - rgb).mean() < 12


def test_output_types(rgb):
    data = encode(rgb, ".png")
    np.testing.assert_array_equal(decode_cpu(data, types.BGR), rgb[:, :, ::-1])
    gray = decode_cpu(data, types.GRAY)
    assert gray.shape == (37, 53, 1)
    want = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    assert np.abs(gray[:, :, 0].astype(int) - want).max() <= 1
    ycbcr = decode_cpu(data, types.YCbCr).astype(float)
    y = 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]
    assert np.abs(ycbcr[..., 0] - y).max() <= 1
    assert np.abs(ycbcr[..., 1] - (128 + 0.564 * (rgb[..., 2] - y))).max() <= 1.5  # Cb


def test_sixteen_bit_png_scales_to_uint8(rgb):
    img16 = rgb.astype(np.uint16) * 257
    ok, buf = cv2.imencode(".png", img16[:, :, ::-1])
    out = decode_cpu(buf.ravel(), types.RGB)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, rgb)


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "empty"),
        (b"this is not an image at all", "cannot decode"),
        (None, "truncated JPEG"),
    ],
)
def test_bad_data(rgb, payload, message):
    if payload is None:
        payload = encode(rgb, ".jpg").tobytes()[:-200]
    with pytest.raises(DecodeError, match=message):
        decode_cpu(np.frombuffer(payload, np.uint8), types.RGB)


def _decode_pipe(root, batch_size=4, num_threads=2, **kwargs):
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, seed=1, **kwargs)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, name="Reader")
        pipe.set_outputs(fn.decoders.image(jpegs, device="cpu"), labels)
    return pipe


def test_pipeline_decodes_dataset(image_root):
    pipe = _decode_pipe(image_root)
    images, _ = pipe.run()
    assert images.layout() == "HWC"
    path = os.path.join(image_root, images.source_info(0))
    want = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(images.at(0), want)


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("exec_async", [True, False])
def test_corrupt_file_error_names_the_file_and_operator(tmp_path, rgb, num_threads, exec_async):
    os.makedirs(tmp_path / "c")
    for i in range(6):
        (tmp_path / "c" / f"{i}.jpg").write_bytes(encode(rgb, ".jpg").tobytes())
    (tmp_path / "c" / "4.jpg").write_bytes(b"\xff\xd8garbage")
    pipe = _decode_pipe(str(tmp_path), batch_size=6, num_threads=num_threads, exec_async=exec_async)
    with pytest.raises(DecodeError) as info:
        pipe.run()
    msg = str(info.value)
    assert "c/4.jpg" in msg and "decoders.image" in msg and "sample 4" in msg
    with pytest.raises(PipelineError, match="no longer valid"):
        pipe.run()


def _exif_rotated_jpeg(rgb, orientation=6):
    from io import BytesIO

    from PIL import Image

    im = Image.fromarray(rgb)
    exif = im.getexif()
    exif[0x0112] = orientation  # 6: the stored picture must be turned 90 degrees clockwise
    buf = BytesIO()
    im.save(buf, format="JPEG", exif=exif, quality=95)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _decode_one(data, **kwargs):
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, seed=1)
    with pipe:
        enc = fn.external_source(source=lambda: [data], batch=True)
        pipe.set_outputs(fn.decoders.image(enc, **kwargs))
    return pipe.run()[0].at(0)


def test_adjust_orientation_false_keeps_the_stored_orientation(rgb):
    data = _exif_rotated_jpeg(rgb)
    stored = cv2.cvtColor(
        cv2.imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION), cv2.COLOR_BGR2RGB
    )
    assert stored.shape == rgb.shape
    turned = _decode_one(data)
    np.testing.assert_array_equal(turned, np.rot90(stored, -1))
    np.testing.assert_array_equal(_decode_one(data, adjust_orientation=False), stored)
    np.testing.assert_array_equal(decode_cpu(data, types.RGB, adjust_orientation=False), stored)


@pytest.mark.parametrize(
    "dtype, np_dtype, scale", [(types.FLOAT, np.float32, 1 / 255), (types.UINT16, np.uint16, 257)]
)
def test_dtype_scales_to_the_type_range(rgb, dtype, np_dtype, scale):
    data = encode(rgb, ".png")
    out = _decode_one(data, dtype=dtype)
    assert out.dtype == np_dtype
    np.testing.assert_allclose(out, (rgb * np.float64(scale)).astype(np_dtype), rtol=1e-6)
    np.testing.assert_array_equal(_decode_one(data, dtype=types.UINT8), rgb)


def test_dtype_keeps_sixteen_bit_precision(rgb):
    img16 = rgb.astype(np.uint16) * 250 + 7
    ok, buf = cv2.imencode(".png", img16[:, :, ::-1])
    np.testing.assert_array_equal(decode_cpu(buf.ravel(), types.RGB, dtype=np.uint16), img16)
    f = decode_cpu(buf.ravel(), types.RGB, dtype=np.float32)
    np.testing.assert_allclose(f, img16 / 65535.0, rtol=1e-6)


def test_unsupported_decoder_arguments_are_refused():
    from dlpipe import ArgumentError
    from dlpipe.decoders.image import ImageDecoder, ImageDecoderRandomCrop

    with pytest.raises(ArgumentError, match="dtype=.*INT32"):
        ImageDecoder(dtype=types.INT32)
    for cls in (ImageDecoder, ImageDecoderRandomCrop):
        with pytest.raises(ArgumentError, match="adjust_orientation=False"):
            cls(device="mixed", adjust_orientation=False)
        with pytest.raises(ArgumentError, match="dtype="):
            cls(device="mixed", dtype=types.FLOAT)


def test_jpeg_with_trailing_data_decodes(rgb):
    # Motion photos and some cameras append data (an MP4, maker notes) after the end-of-image
    # marker; a decoder must not take such a file for a truncated one.
    data = encode(rgb, ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90)
    want = decode_cpu(data, types.RGB)
    trailer = np.frombuffer(b"ftypmp42" + bytes(range(256)) * 40, np.uint8)
    np.testing.assert_array_equal(decode_cpu(np.concatenate([data, trailer]), types.RGB), want)


def test_truncated_jpeg_with_exif_thumbnail_is_still_an_error(rgb):
    from io import BytesIO

    from PIL import Image

    im = Image.fromarray(rgb)
    thumb = BytesIO()
    im.resize((8, 6)).save(thumb, format="JPEG")
    exif = im.getexif()
    exif[0x0112] = 1
    buf = BytesIO()
    im.save(buf, format="JPEG", exif=exif.tobytes() + thumb.getvalue(), quality=95)
    data = np.frombuffer(buf.getvalue(), np.uint8)
    assert bytes(data[: len(data) // 2]).find(b"\xff\xd9") > 0  # the thumbnail's end marker
    with pytest.raises(DecodeError, match="truncated JPEG"):
        decode_cpu(data[: len(data) - 300], types.RGB)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_any_data_keeps_the_channel_count_and_applies_orientation(rgb, orientation):
    data = _exif_rotated_jpeg(rgb, orientation)
    any_data = dict(file_channels=True)
    np.testing.assert_array_equal(
        decode_cpu(data, types.ANY_DATA, **any_data), decode_cpu(data, types.RGB)
    )
    np.testing.assert_array_equal(
        decode_cpu(data, types.ANY_DATA, adjust_orientation=False, **any_data),
        decode_cpu(data, types.RGB, adjust_orientation=False),
    )


def test_any_data_gray_and_alpha_files(rgb):
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    ok, png = cv2.imencode(".png", gray)
    out = _decode_one(png.ravel(), output_type=types.ANY_DATA)  # the operator keeps 1 channel
    assert out.shape == (*gray.shape, 1)
    np.testing.assert_array_equal(out[:, :, 0], gray)
    rgba = np.dstack([rgb, gray])
    ok, png = cv2.imencode(".png", cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
    np.testing.assert_array_equal(_decode_one(png.ravel(), output_type=types.ANY_DATA), rgba)
    np.testing.assert_array_equal(decode_cpu(png.ravel(), types.RGB), rgb)
    # without the flag (the mixed decoder's CPU fallback): RGB, as the mixed decoder writes
    np.testing.assert_array_equal(decode_cpu(png.ravel(), types.ANY_DATA), rgb)


def _pil_encoded(rgb, fmt, mode="RGB", **kwargs):
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).convert(mode).save(buf, fmt, **kwargs)
    return np.frombuffer(buf.getvalue(), np.uint8)


@pytest.mark.parametrize(
    "fmt, mode, kwargs",
    [
        ("JPEG", "RGB", {"subsampling": 0}),  # 4:4:4
        ("JPEG", "RGB", {"subsampling": 1}),  # 4:2:2
        ("JPEG", "RGB", {"subsampling": 2}),  # 4:2:0
        ("JPEG", "RGB", {"progressive": True}),
        ("JPEG", "L", {}),
        (
            "JPEG",
            "RGB",
            {
                "exif": b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03"
                b"\x00\x00\x00\x01\x00\x06\x00\x00\x00\x00\x00\x00"
            },
        ),
        ("PNG", "RGBA", {}),
        ("PNG", "P", {}),
        ("PNG", "LA", {}),
        ("WEBP", "RGB", {"quality": 70}),
    ],
)
@pytest.mark.parametrize("adjust_orientation", [True, False])
def test_rgb_is_the_bgr_decode_reversed(rgb, fmt, mode, kwargs, adjust_orientation):
    """RGB is decoded straight to RGB (``IMREAD_COLOR_RGB``), BGR the way OpenCV always does:
    the same pixels, channels reversed, whatever the format, subsampling or orientation."""
    data = _pil_encoded(rgb, fmt, mode, **kwargs)
    out = decode_cpu(data, types.RGB, adjust_orientation)
    bgr = decode_cpu(data, types.BGR, adjust_orientation)
    assert out.shape == bgr.shape and out.shape[2] == 3
    np.testing.assert_array_equal(out, bgr[:, :, ::-1])
    if "exif" in kwargs:  # orientation 6: the stored picture turned a quarter
        assert out.shape[:2] == (rgb.shape[:2][::-1] if adjust_orientation else rgb.shape[:2])


def test_rgb_sixteen_bit_png_is_the_bgr_decode_reversed(rgb):
    data = encode(rgb.astype(np.uint16) * 257 + 3, ".png")
    for dtype in (np.uint8, np.uint16):
        out = decode_cpu(data, types.RGB, dtype=dtype)
        np.testing.assert_array_equal(out, decode_cpu(data, types.BGR, dtype=dtype)[:, :, ::-1])
