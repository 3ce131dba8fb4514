"""decoders.image_crop / image_slice with device="mixed" against the CPU decoders: the same
windows (shapes equal), pixels within nvJPEG's rounding, through the view path and through
nvImageCodec's ROI decode."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
pytest.importorskip("nvidia.nvimgcodec")

from dlpipe import ArgumentError, Pipeline, fn  # noqa: E402
from dlpipe.synthetic import make_dataset  # noqa: E402


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("big"))
    return make_dataset(root, num_classes=2, per_class=6, size_range=(200, 400), seed=4)


def _pair(root, build, batch=6):
    """build(jpegs, device, uniform) for "mixed" and "cpu", fed the same random numbers."""
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=9)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=root)
        u = fn.random.uniform(range=(0.0, 1.0))
        pipe.set_outputs(build(jpegs, "mixed", u), build(jpegs, "cpu", u))
    return pipe


def _check(pipe, iters=2):
    for _ in range(iters):
        g, c = pipe.run()
        assert g.layout() == "HWC"
        host = g.as_cpu()
        assert host.shape() == c.shape()
        for i in range(len(c)):
            assert host.at(i).dtype == np.uint8
            assert np.abs(host.at(i).astype(int) - c.at(i)).mean() < 3.0
    pipe.close()


def _crop(jpegs, device, u):
    return fn.decoders.image_crop(jpegs, device=device, crop=(150, 120), crop_pos_x=u)


def _slice_positional(jpegs, device, u):
    rng = np.random.default_rng(0)
    anchors = [rng.uniform(0, 0.5, 2).astype(np.float32) for _ in range(6)]
    shapes = [np.array([0.5, 0.4], np.float32)] * 6
    a = fn.external_source(lambda: anchors)
    s = fn.external_source(lambda: shapes)
    return fn.decoders.image_slice(jpegs, a, s, device=device)


def _slice_named(jpegs, device, u):
    return fn.decoders.image_slice(
        jpegs, device=device, rel_start=[0.1, 0.25], rel_shape=[0.6, 0.5]
    )


def _slice_absolute(jpegs, device, u):
    return fn.decoders.image_slice(jpegs, device=device, start=[17, 33], shape=[101, 80])


@pytest.mark.parametrize("build", [_crop, _slice_named, _slice_absolute, _slice_positional])
@pytest.mark.parametrize("roi_decode", [False, True])
def test_window_decoders_mixed_match_cpu(big_root, monkeypatch, build, roi_decode):
    if roi_decode:
        from dlpipe.decoders import _nvimgcodec

        init = _nvimgcodec.MixedDecoder.__init__

        def roi_init(self, op):
            init(self, op)
            self.roi_decode = True

        monkeypatch.setattr(_nvimgcodec.MixedDecoder, "__init__", roi_init)
    _check(_pair(big_root, build))


def test_window_outside_the_image_is_an_error_on_the_gpu(big_root):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=big_root)
        pipe.set_outputs(fn.decoders.image_crop(jpegs, device="mixed", crop=(1000, 1000)))
    with pytest.raises(ArgumentError, match="not valid for image dimensions"):
        pipe.run()
    pipe.close()
