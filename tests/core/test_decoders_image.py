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
