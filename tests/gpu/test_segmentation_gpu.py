"""GPU forms of the segmentation and volume operators against their CPU forms: resize's
save_attrs output, 3-D crop / flip / resize, and images with their masks transformed alike."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _source(samples, layout):
    return fn.external_source(lambda: samples, layout=layout)


def test_resize_save_attrs_on_gpu():
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 255, s, dtype=np.uint8) for s in ((30, 40, 3), (17, 9, 3))]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        x = _source(imgs, "HWC")
        g_out, g_attrs = fn.resize(x.gpu(), resize_x=16, resize_y=12, save_attrs=True)
        c_out, c_attrs = fn.resize(x, resize_x=16, resize_y=12, save_attrs=True)
        pipe.set_outputs(g_out, g_attrs, c_out, c_attrs)
    pipe.build()
    g_out, g_attrs, c_out, c_attrs = pipe.run()
    assert g_attrs.dtype == types.INT32
    g_attrs = g_attrs.as_cpu()
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(g_attrs.at(i), img.shape[:2])
        np.testing.assert_array_equal(g_attrs.at(i), c_attrs.at(i))
        d = np.abs(g_out.as_cpu().at(i).astype(int) - c_out.at(i))
        assert d.max() <= 1
