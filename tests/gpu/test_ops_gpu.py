"""GPU operators inside pipelines against the same operators on the CPU (random inputs)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _run_both(image_root, build, batch=8, iters=2, seed=3):
    """build(images_node) -> output node; run on CPU images and on their .gpu() copy."""
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=seed)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root, random_shuffle=True, seed=1)
        img = fn.decoders.image(jpegs)
        pipe.set_outputs(build(img.gpu()), build(img))
    for _ in range(iters):
        g, c = pipe.run()
        yield g.as_cpu(), c


@pytest.mark.parametrize(
    "kw",
    [
        dict(size=(40, 56)),
        dict(resize_shorter=50),
        dict(resize_x=23, resize_y=31, interp_type=types.INTERP_NN),
        dict(size=(200, 150)),  # enlarge
        dict(resize_longer=30, antialias=False),
        dict(size=(33, 44), interp_type=types.INTERP_CUBIC),
        dict(size=(33, 44), dtype=types.FLOAT),
    ],
)
def test_resize(image_root, kw):
    for g, c in _run_both(image_root, lambda x: fn.resize(x, **kw)):
        assert g.shape() == c.shape() and g.dtype == c.dtype
        for i in range(len(c)):
            d = np.abs(g.at(i).astype(np.float64) - c.at(i))
            assert d.max() <= 1.0 + 1e-3, (kw, i, d.max())


def test_resize_per_sample_argument(image_root):
    if not hasattr(fn, "random") or not hasattr(fn.random, "uniform"):
        pytest.skip("fn.random.uniform not available")
    pipe = Pipeline(batch_size=6, num_threads=2, device_id=0, seed=3)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        img = fn.decoders.image(jpegs)
        rx = fn.random.uniform(range=(10, 40))
        pipe.set_outputs(
            fn.resize(img.gpu(), resize_x=rx, resize_y=20), fn.resize(img, resize_x=rx, resize_y=20)
        )
    g, c = pipe.run()
    assert g.shape() == c.shape()
    for i in range(len(c)):
        assert np.abs(g.as_cpu().at(i).astype(int) - c.at(i)).max() <= 1


@pytest.mark.parametrize(
    "kw", [dict(), dict(horizontal=0, vertical=1), dict(horizontal=1, vertical=1)]
)
def test_flip(image_root, kw):
    for g, c in _run_both(image_root, lambda x: fn.flip(x, **kw)):
        for i in range(len(c)):
            np.testing.assert_array_equal(g.at(i), c.at(i))


@pytest.mark.parametrize("kw", [dict(size=(24, 32)), dict(size=120, dtype=types.FLOAT)])
def test_random_resized_crop_same_windows_as_cpu(image_root, kw):
    pipe = Pipeline(batch_size=8, num_threads=2, device_id=0, seed=3)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        img = fn.decoders.image(jpegs)
        g = fn.random_resized_crop(img.gpu(), seed=11, **kw)
        c = fn.random_resized_crop(img, seed=11, **kw)
        pipe.set_outputs(g, c)
    for _ in range(2):
        g, c = pipe.run()
        g = g.as_cpu()
        assert g.shape() == c.shape()
        for i in range(len(c)):
            assert np.abs(g.at(i).astype(np.float64) - c.at(i)).max() <= 1.0 + 1e-3
