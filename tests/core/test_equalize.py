"""fn.equalize / fn.experimental.equalize: per-channel histogram equalization (numpy reference
of OpenCV's formula), layouts, frames, errors, GPU descriptor packing."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn
from dlpipe.kernels.equalize import EQ_DESC, equalize_descs
from dlpipe.operators.equalize import equalize_geometry


def ref_equalize_plane(plane: np.ndarray) -> np.ndarray:
    """lut[v] = round((cdf[v] - cdf[first]) * 255 / (total - cdf[first])); one value: as is."""
    hist = np.bincount(plane.reshape(-1), minlength=256).astype(np.int64)
    cdf = np.cumsum(hist)
    first = cdf[np.flatnonzero(hist)[0]]
    total = cdf[-1]
    if first == total:
        return plane.copy()
    scale = np.float32(255.0) / np.float32(total - first)
    lut = np.rint(np.maximum(cdf - first, 0).astype(np.float32) * scale)
    return np.clip(lut, 0, 255).astype(np.uint8)[plane]


def ref_equalize(x: np.ndarray, layout: str) -> np.ndarray:
    out = np.empty_like(x)
    frames = x if layout[0] == "F" else x[None]
    res = out if layout[0] == "F" else out[None]
    inner = layout.lstrip("F")
    for f in range(frames.shape[0]):
        if inner == "HW":
            res[f] = ref_equalize_plane(frames[f])
        elif inner == "HWC":
            for c in range(frames.shape[-1]):
                res[f, ..., c] = ref_equalize_plane(frames[f, ..., c])
        else:
            for c in range(frames.shape[1]):
                res[f, c] = ref_equalize_plane(frames[f, c])
    return out


def _run(samples, layout, schema="equalize"):
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=None)
    op = fn.equalize if schema == "equalize" else fn.experimental.equalize
    with pipe:
        x = fn.external_source(source=lambda: samples, layout=layout)
        pipe.set_outputs(op(x))
    (out,) = pipe.run()
    return out


def _low_contrast(rng, shape):
    """Values in a narrow band, so equalization changes them a lot."""
    return rng.integers(60, 120, shape, dtype=np.uint8)


@pytest.mark.parametrize(
    "layout, shapes",
    [
        ("HWC", [(17, 23, 3), (9, 31, 3), (8, 8, 1)]),
        ("HW", [(20, 13), (5, 40)]),
        ("CHW", [(3, 11, 19), (2, 7, 7)]),
        ("FHWC", [(3, 10, 12, 3), (2, 6, 9, 3)]),
        ("FHW", [(2, 12, 12)]),
        ("FCHW", [(2, 3, 8, 10)]),
    ],
)
def test_matches_reference(layout, shapes):
    rng = np.random.default_rng(len(layout))
    samples = [_low_contrast(rng, s) for s in shapes]
    out = _run(samples, layout)
    assert out.layout() == layout
    for i, x in enumerate(samples):
        got = np.asarray(out.at(i))
        assert got.dtype == np.uint8 and got.shape == x.shape
        np.testing.assert_array_equal(got, ref_equalize(x, layout))


def test_experimental_name_and_full_range():
    rng = np.random.default_rng(1)
    x = _low_contrast(rng, (32, 32, 3))
    got = np.asarray(_run([x], "HWC", "experimental.equalize").at(0))
    for c in range(3):  # each channel spans the whole range afterwards
        assert got[..., c].min() == 0 and got[..., c].max() == 255


def test_single_value_and_two_value_planes():
    flat = np.full((6, 6, 3), 77, np.uint8)
    two = np.where(np.arange(36).reshape(6, 6) % 2, 10, 200).astype(np.uint8)
    out = _run([flat, np.stack([two] * 3, -1)], "HWC")
    np.testing.assert_array_equal(out.at(0), flat)  # nothing to equalize
    got = np.asarray(out.at(1))[..., 0]
    np.testing.assert_array_equal(got, np.where(two == 10, 0, 255))


def test_frames_are_equalized_separately():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 50, (8, 8, 1), dtype=np.uint8)
    b = rng.integers(200, 256, (8, 8, 1), dtype=np.uint8)
    video = np.stack([a, b])
    got = np.asarray(_run([video], "FHWC").at(0))
    np.testing.assert_array_equal(got[0], ref_equalize_plane(a[..., 0])[..., None])
    np.testing.assert_array_equal(got[1], ref_equalize_plane(b[..., 0])[..., None])


def test_errors():
    with pytest.raises(ArgumentError, match="only uint8"):
        _run([np.zeros((4, 4, 3), np.float32)], "HWC")
    with pytest.raises(ArgumentError, match="layout 'DHWC' is not supported"):
        _run([np.zeros((2, 4, 4, 3), np.uint8)], "DHWC")
    with pytest.raises(ArgumentError, match="does not match the layout"):
        equalize_geometry("equalize", "HWC", (4, 4))


@pytest.mark.parametrize(
    "layout, shape, want",
    [
        ("HWC", (5, 7, 3), (1, 35, 3, 1)),
        ("CHW", (3, 5, 7), (1, 35, 3, 35)),
        ("FHWC", (4, 5, 7, 2), (4, 35, 2, 1)),
        ("FCHW", (4, 2, 5, 7), (4, 35, 2, 35)),
        ("", (6, 9), (1, 54, 1, 1)),
        ("FHW", (3, 2, 2), (3, 4, 1, 1)),
    ],
)
def test_geometry(layout, shape, want):
    assert equalize_geometry("equalize", layout, shape) == want


def test_descriptor_packing():
    geometry = [(1, 35, 3, 1), (4, 35, 2, 35), (2, 10, 1, 1)]
    d, planes = equalize_descs([16, 32, 48], [64, 80, 96], geometry)
    assert d.dtype == EQ_DESC and EQ_DESC.itemsize == 48  # the C struct's size
    assert planes == 3 + 8 + 2
    np.testing.assert_array_equal(d["plane0"], [0, 3, 11])
    np.testing.assert_array_equal(d["cdiv"], [1, 35, 1])
    np.testing.assert_array_equal(d["frames"], [1, 4, 2])
    np.testing.assert_array_equal(d["in_ptr"], [16, 32, 48])


@pytest.mark.parametrize("layout", ["", "HW", "HWC", "CHW", "FHW", "FHWC", "FCHW"])
def test_geometries_of_a_batch_equal_the_per_sample_ones(layout):
    from dlpipe.operators.equalize import equalize_geometries

    rng = np.random.default_rng(0)
    shapes = rng.integers(1, 50, (20, len(layout) or 3))
    got = equalize_geometries("equalize", layout, shapes)
    assert got.dtype == np.int64
    assert [tuple(g) for g in got.tolist()] == [
        equalize_geometry("equalize", layout, s) for s in shapes
    ]
    with pytest.raises(ArgumentError):
        equalize_geometries("equalize", "HWC", shapes[:, :2])
