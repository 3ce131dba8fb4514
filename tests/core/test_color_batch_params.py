"""The GPU colour operators' host side over whole batches (no GPU needed): the batched matrices
and offsets equal, bit for bit, the per-sample ones (the GPU tests compare with the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import types
from dlpipe.operators.color_twist import ColorTwist, Hsv, Saturation, color_matrices, color_matrix


def test_color_matrices_equal_color_matrix():
    rng = np.random.default_rng(0)
    n = 300
    hue = rng.uniform(-400, 400, n)
    sat, val, bri, con = (rng.uniform(-2, 3, n) for _ in range(4))
    hue[:3], sat[:3] = 0, 1
    got = color_matrices(hue, sat, val, bri, con)
    want = np.stack([color_matrix(*p) for p in zip(hue, sat, val, bri, con, strict=True)])
    assert got.dtype == np.float32 and got.shape == (n, 3, 3)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "cls, names, kw",
    [
        (Saturation, ["saturation"], {}),
        (Hsv, ["hue", "value"], {"saturation": 0.7}),
        (ColorTwist, ["hue", "saturation", "contrast", "brightness"], {}),
        (ColorTwist, ["contrast"], {"hue": 11.0, "image_type": types.BGR}),
        (ColorTwist, [], {"hue": -7.0, "brightness": 1.2, "contrast": 0.6}),
    ],
)
@pytest.mark.parametrize("in_dt", [np.uint8, np.float32])
def test_batch_transforms_equal_per_sample(cls, names, kw, in_dt):
    rng = np.random.default_rng(1)
    n = 30
    op = cls(**kw)
    args = {}
    for k in names:
        v = rng.uniform(-50, 50, n) if k == "hue" else rng.uniform(0, 2, n)
        args[k] = [np.float32(x) for x in v] if k != "contrast" else [np.array([x]) for x in v]
    mats, offs = op._batch_transforms(args, n, np.dtype(in_dt))
    want_mats, want_offs = op._sample_transforms(args, n, np.dtype(in_dt))
    np.testing.assert_array_equal(mats, want_mats)
    np.testing.assert_array_equal(offs, want_offs)
    assert mats.shape == (n, 3, 3) and offs.shape == (n, 3)


def test_batch_transforms_leave_odd_values_to_the_per_sample_path():
    op = Saturation()
    args = {"saturation": [np.float32(0.5), np.array([1.5, 2.0], np.float32)]}
    mats, offs = op._batch_transforms(args, 2, np.dtype(np.uint8))
    np.testing.assert_array_equal(mats[0], color_matrix(saturation=0.5))
    np.testing.assert_array_equal(mats[1], color_matrix(saturation=1.5))
