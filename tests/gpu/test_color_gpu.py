"""The colour operators on the GPU against the CPU, on every sample shape the CPU takes:
brightness / contrast / brightness_contrast (any shape: HW, HWC, FHWC, DHWC, 1-D) and
saturation / hue / hsv / color_twist (3 channels last: HWC, FHWC, DHWC, (W, 3)); per-sample
argument inputs, a strided (frame-subsampled) GPU input, float outputs."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _run(build, samples, layout, args=()):
    """``build(x, *args)`` on the GPU copy of ``samples`` and on the CPU samples."""
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=0, seed=3)
    with pipe:
        x = fn.external_source(source=lambda: samples, layout=layout)
        a = [fn.external_source(source=lambda v=v: v) for v in args]
        pipe.set_outputs(build(x.gpu(), *a), build(x, *a))
    g, c = pipe.run()
    assert g.layout() == c.layout() == layout
    return [np.asarray(g.as_cpu().at(i)) for i in range(len(g))], [
        np.asarray(c.at(i)) for i in range(len(c))
    ]


def _close(gs, cs, tol):
    for g, c in zip(gs, cs, strict=True):
        assert g.shape == c.shape and g.dtype == c.dtype, (g.shape, c.shape, g.dtype, c.dtype)
        assert np.abs(g.astype(np.float64) - c.astype(np.float64)).max(initial=0) <= tol


def _samples(shapes, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return [rng.uniform(0, 1, s).astype(dtype) for s in shapes]
    return [rng.integers(0, 256, s).astype(dtype) for s in shapes]


SHAPES = {
    "FHWC": [(3, 13, 14, 3), (2, 9, 14, 3), (4, 5, 6, 3)],
    "DHWC": [(5, 7, 6, 3), (2, 3, 4, 3), (1, 8, 8, 3)],
    "HWC": [(13, 14, 3), (9, 20, 3), (5, 6, 3)],
}

_PER_SAMPLE = [np.float32(v) for v in (0.5, 1.3, 2.0)]


@pytest.mark.parametrize("layout", list(SHAPES))
@pytest.mark.parametrize(
    "build",
    [
        lambda x, v: fn.brightness(x, brightness=v),
        lambda x, v: fn.contrast(x, contrast=v),
        lambda x, v: fn.brightness_contrast(x, brightness=v, contrast=1.2, brightness_shift=0.1),
        lambda x, v: fn.saturation(x, saturation=v),
        lambda x, v: fn.hue(x, hue=v * 40),
        lambda x, v: fn.hsv(x, hue=v * 10, saturation=v, value=0.9),
        lambda x, v: fn.color_twist(x, hue=v * 5, saturation=v, contrast=1.1, brightness=0.9),
    ],
    ids=["brightness", "contrast", "brightness_contrast", "saturation", "hue", "hsv", "twist"],
)
def test_colour_ops_on_frames_and_volumes_match_cpu(layout, build):
    gs, cs = _run(build, _samples(SHAPES[layout]), layout, [_PER_SAMPLE])
    _close(gs, cs, 1)  # the GPU rounds half to even, the CPU half away from zero


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_colour_ops_on_videos_other_types(dtype):
    samples = _samples(SHAPES["FHWC"], dtype, seed=1)
    # integers: the first op's rounding (half to even on the GPU, away from zero on the CPU)
    # may differ by 1, and the second op's gain (saturation up to 2) makes that up to 2
    tol = 1e-4 if dtype == np.float32 else 2

    def build(x, v):
        return fn.color_twist(fn.brightness_contrast(x, contrast=v), saturation=v, hue=15.0)

    gs, cs = _run(build, samples, "FHWC", [_PER_SAMPLE])
    _close(gs, cs, tol)
    gs, cs = _run(lambda x: fn.brightness(x, dtype=types.FLOAT), samples, "FHWC")
    _close(gs, cs, 1e-4)


def test_brightness_any_shape_and_a_frame_subsampled_input():
    # a video read every other frame: a strided view whose frames do not fold into rows
    samples = _samples([(6, 7, 8, 3), (4, 5, 9, 3)], seed=2)
    gs, cs = _run(lambda x: fn.brightness(x[::2], brightness=1.5), samples, "FHWC")
    _close(gs, cs, 1)
    gs, cs = _run(lambda x: fn.saturation(x[::2], saturation=0.3), samples, "FHWC")
    _close(gs, cs, 1)
    # HW, and 1-D samples
    gs, cs = _run(lambda x: fn.contrast(x, contrast=1.7), _samples([(9, 11), (3, 4)]), "HW")
    _close(gs, cs, 1)
    gs, cs = _run(lambda x: fn.brightness(x, brightness=0.7), _samples([(10,), (4,)]), "")
    _close(gs, cs, 1)


def test_saturation_on_rows_of_pixels_and_its_error():
    gs, cs = _run(lambda x: fn.saturation(x, saturation=0.2), _samples([(7, 3), (2, 3)]), "WC")
    _close(gs, cs, 1)
    with pytest.raises(Exception, match=r"3-channel images .* got shape \[2, 5, 6, 4\]"):
        _run(lambda x: fn.saturation(x, saturation=0.2), _samples([(2, 5, 6, 4)]), "FHWC")
