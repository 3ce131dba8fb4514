"""fn.jpeg_compression_distortion: the CPU round trip against Pillow's JPEG codec (libjpeg with
the same settings: bit-identical), quality clamping and per-sample quality, libjpeg's table
scaling. The GPU kernel's model: test_jpeg_distortion_host.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.jpeg_compression_distortion import (
    CHROMA_TABLE,
    LUMA_TABLE,
    JpegCompressionDistortion,
    quant_table,
)


def run(x, args=None, **kwargs):
    op = JpegCompressionDistortion(**kwargs)
    op.output_layouts(["HWC"])
    out = op.run_sample((x,), args or {}, None)
    assert out.dtype == np.uint8 and out.shape == x.shape
    return out


def pil_roundtrip(x, q):
    buf = io.BytesIO()
    Image.fromarray(x).save(buf, format="JPEG", quality=min(max(q, 1), 100), subsampling=2)
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def smooth(h=45, w=61, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(xx / 7 + c) * 90 + np.cos(yy / 5 - c) * 60 + 128 for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("quality", [1, 10, 50, 75, 100])
def test_matches_libjpeg_through_pillow(quality):
    x = smooth()
    np.testing.assert_array_equal(run(x, quality=quality), pil_roundtrip(x, quality))


def test_default_quality_clamping_and_monotonic_error():
    x = smooth(seed=1)
    np.testing.assert_array_equal(run(x), pil_roundtrip(x, 50))
    np.testing.assert_array_equal(run(x, quality=-5), run(x, quality=1))
    np.testing.assert_array_equal(run(x, quality=250), run(x, quality=100))
    err = [np.abs(run(x, quality=q).astype(int) - x).mean() for q in (5, 30, 70, 100)]
    assert err == sorted(err, reverse=True) and err[-1] < err[0] / 3


def test_quant_tables():
    np.testing.assert_array_equal(quant_table(LUMA_TABLE, 50), LUMA_TABLE)
    assert quant_table(LUMA_TABLE, 100).tolist() == [1] * 64
    assert quant_table(CHROMA_TABLE, 75)[0] == (17 * 50 + 50) // 100
    assert quant_table(LUMA_TABLE, 1).max() == 255  # baseline tables stop at 255
    assert quant_table(LUMA_TABLE, 10)[0] == (16 * 500 + 50) // 100


def test_per_sample_quality_in_a_pipeline():
    imgs = [smooth(seed=i) for i in range(3)]
    qs = [np.int32(q) for q in (5, 50, 95)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        q = fn.external_source(lambda: qs)
        pipe.set_outputs(
            fn.jpeg_compression_distortion(x, quality=q),
            ops.JpegCompressionDistortion(quality=20)(x),
        )
    a, b = pipe.run()
    for i in range(3):
        np.testing.assert_array_equal(a.at(i), pil_roundtrip(imgs[i], int(qs[i])))
        np.testing.assert_array_equal(b.at(i), pil_roundtrip(imgs[i], 20))


def test_errors():
    with pytest.raises(ArgumentError, match="single number"):
        JpegCompressionDistortion(quality=[1, 2])
    with pytest.raises(ArgumentError, match="HWC"):
        run(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ArgumentError, match="uint8"):
        run(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ArgumentError, match="layout 'CHW'"):
        JpegCompressionDistortion().output_layouts(["CHW"])
