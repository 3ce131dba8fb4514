"""The crop windows of a whole batch (static arguments, varied shapes: the GPU side's path)
equal each sample's own window: anchors rounded the same way, every out-of-bounds policy."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError
from dlpipe.operators.crop import Crop
from dlpipe.operators.crop_mirror_normalize import CropMirrorNormalize

CASES = [
    ("HWC", {"crop": (224, 224)}),
    ("HWC", {"crop": (224, 200), "crop_pos_x": 0.3, "crop_pos_y": 0.9}),
    ("HWC", {"crop_h": 100, "crop_w": 333, "crop_pos_x": 0.0, "crop_pos_y": 1.0}),
    ("CHW", {"crop": (64, 48), "crop_pos_x": 0.77}),
    ("FHWC", {"crop": (5, 40, 30), "crop_pos_z": 0.25}),
    ("DHWC", {"crop": (7, 33, 31), "crop_pos_x": 0.1, "crop_pos_z": 0.6}),
]


def _shapes(layout, rng, n=50):
    spatial = rng.integers(20, 500, (n, len(layout) - 1))
    if layout == "CHW":
        return np.concatenate([np.full((n, 1), 3), spatial], 1)
    return np.concatenate([spatial, np.full((n, 1), 3)], 1)


@pytest.mark.parametrize("cls", [Crop, CropMirrorNormalize])
@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
@pytest.mark.parametrize("layout,kwargs", CASES)
def test_batch_windows_equal_each_samples_window(cls, policy, layout, kwargs):
    op = cls(out_of_bounds_policy=policy, **kwargs)
    shapes = _shapes(layout, np.random.default_rng(len(layout) + len(kwargs)))
    wins = op.static_windows(shapes, layout)
    assert wins.shape == (len(shapes), 2, len(layout)) and wins.dtype == np.int64
    for i, shape in enumerate(shapes):
        anchor, size = op.sample_window(tuple(int(v) for v in shape), layout, {})
        assert wins[i, 0].tolist() == list(anchor) and wins[i, 1].tolist() == list(size), i


def test_a_window_outside_the_input_is_an_error_under_the_error_policy():
    op = Crop(crop=(300, 300), out_of_bounds_policy="error")
    fits = np.array([[400, 500, 3], [300, 300, 3]])
    assert op.static_windows(fits, "HWC")[:, 0].tolist() == [[50, 100, 0], [0, 0, 0]]
    with pytest.raises(ArgumentError, match=r"does not fit the input of shape \[299, 500, 3\]"):
        op.static_windows(np.array([[400, 500, 3], [299, 500, 3]]), "HWC")


def test_memoised_windows_are_a_fresh_copy_per_call():
    op = CropMirrorNormalize(crop=(224, 224), out_of_bounds_policy="pad")
    shapes = _shapes("HWC", np.random.default_rng(3))
    first = op.static_windows(shapes, "HWC")
    expected = first.copy()
    first[:] = -1  # a caller writing into its windows does not change the next call's
    again = op.static_windows(shapes, "HWC")
    assert np.array_equal(again, expected)
    other = op.static_windows(shapes[::-1].copy(), "HWC")  # other shapes: their own windows
    assert np.array_equal(other, expected[::-1])
