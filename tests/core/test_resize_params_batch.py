"""The batched 2-D resize geometry equals the per-sample port of DALI's arithmetic bit for bit,
for every mode, partial and fractional sizes, flips and sizes that need the subpixel ROI."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe._geometry.resize_params import ResizeMode, resize_params, resize_params_2d

REQUESTS = [
    (256.0, 256.0),
    (256.0, 0.0),
    (0.0, 224.0),
    (0.0, 0.0),
    (224.5, 333.3),
    (-300.0, 200.0),
    (0.0, -97.25),
    (1.0, 1.0),
    (4096.0, 17.0),
]


@pytest.mark.parametrize("subpixel", [True, False])
@pytest.mark.parametrize("mode", list(ResizeMode))
@pytest.mark.parametrize("req", REQUESTS)
def test_batched_geometry_equals_the_per_sample_function(req, mode, subpixel):
    rng = np.random.default_rng(7)
    hw = np.concatenate(
        [rng.integers(1, 2000, (60, 2)), [[1, 1], [1, 5000], [375, 500], [480, 640]]]
    )
    dst, lo, hi = resize_params_2d(hw, req, mode, subpixel)
    assert dst.dtype == np.int64 and dst.shape == lo.shape == hi.shape == (len(hw), 2)
    for i, (h, w) in enumerate(hw):
        p = resize_params((int(h), int(w)), req, mode=mode, subpixel_scale=subpixel)
        assert tuple(int(v) for v in dst[i]) == p.dst_size, (i, h, w)
        assert tuple(float(v) for v in lo[i]) == p.src_lo, (i, h, w)
        assert tuple(float(v) for v in hi[i]) == p.src_hi, (i, h, w)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"resize_shorter": 256},
        {"resize_longer": 300.5},
        {"resize_x": 320},
        {"size": (224, 0), "mode": "not_larger"},
        {"resize_x": 200, "resize_y": 100, "mode": "not_smaller", "subpixel_scale": False},
    ],
)
def test_the_gpu_launch_geometry_of_fn_resize_is_the_per_sample_one(kwargs):
    from dlpipe.operators.resize import Resize, _batch_geometry

    rng = np.random.default_rng(3)
    hw = rng.integers(50, 900, (40, 2))
    out, lo, hi = _batch_geometry(Resize(**kwargs), hw, {})
    ref = Resize(**kwargs)
    for i, (h, w) in enumerate(hw):
        p = ref.params_for((int(h), int(w)))
        assert (tuple(out[i]), tuple(lo[i]), tuple(hi[i])) == (p.dst_size, p.src_lo, p.src_hi)
