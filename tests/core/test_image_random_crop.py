"""The random crop window (``operators/_crop_window.py``) and ``fn.decoders.image_random_crop``:
bounds, area and aspect ranges, the fallbacks, determinism across thread counts."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn
from dlpipe.decoders.image import ImageDecoderRandomCrop, decode_cpu
from dlpipe.operators._crop_window import RandomCropWindow
from dlpipe.types import DALIImageType


def windows(win, shapes, n=200, seed=0):
    rng = np.random.default_rng(seed)
    for h_img, w_img in shapes:
        for u in win.draw(rng, n):
            yield (h_img, w_img), u, win.window(h_img, w_img, u)


SHAPES = [(1, 1), (1, 500), (500, 1), (7, 3), (40, 60), (375, 500), (1000, 10), (10, 1000)]


@pytest.mark.parametrize(
    "area, ratio",
    [
        ((0.08, 1.0), (3 / 4, 4 / 3)),
        ((0.5, 0.5), (1.0, 1.0)),
        ((0.01, 0.02), (0.2, 5.0)),
        ((1.0, 1.0), (2.0, 3.0)),
    ],
)
def test_window_always_inside(area, ratio):
    win = RandomCropWindow(area, ratio, 10)
    for (H, W), _, (y, x, h, w) in windows(win, SHAPES, n=100):
        assert 1 <= h <= H and 1 <= w <= W
        assert 0 <= y <= H - h and 0 <= x <= W - w


def test_successful_attempt_within_ranges():
    # max area 0.5 on a near-square image: an attempt fits unless rounding pushes the ratio out
    area, ratio = (0.1, 0.5), (3 / 4, 4 / 3)
    win = RandomCropWindow(area, ratio, 10)
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for (H, W), u, (_y, _x, h, w) in windows(win, [(300, 300), (257, 263)]):
        for a in range(10):  # the first attempt whose rounded window fits, as in DALI
            target = (area[0] + u[2 * a] * (area[1] - area[0])) * H * W
            r = math.exp(lo + u[2 * a + 1] * (hi - lo))
            cand = (round(math.sqrt(target / r)), round(math.sqrt(target * r)))
            if ratio[0] <= cand[1] / cand[0] <= ratio[1]:
                break
        assert (h, w) == cand
        assert ratio[0] <= w / h <= ratio[1]
        share = h * w / (H * W)
        tol = (h + w + 1) / (H * W)  # rounding each side by <= 0.5
        assert area[0] - tol <= share <= area[1] + tol


def test_anchor_is_uniform_over_the_free_range():
    win = RandomCropWindow((0.25, 0.25), (1.0, 1.0), 1)
    ys = {win.window(100, 100, u)[0] for u in win.draw(np.random.default_rng(1), 2000)}
    assert min(ys) == 0 and max(ys) == 50 and len(ys) > 45


def test_fallback_very_wide_image():
    # H * int(H * 4/3) = 10 * 13 < 0.08 * 10 * 1000: the widest allowed crop, full height
    win = RandomCropWindow()
    for _, _, (y, _x, h, w) in windows(win, [(10, 1000)], n=50):
        assert (y, h, w) == (0, 10, 13)


def test_fallback_very_tall_image():
    win = RandomCropWindow()
    for _, _, (_y, x, h, w) in windows(win, [(1000, 10)], n=50):
        assert (x, h, w) == (0, 13, 10)


def test_fallback_after_failed_attempts_clamps_ratio():
    # area >= 0.9 of a 100x200 image needs h > 100 for any ratio <= 4/3: every attempt
    # fails; W/H = 2 > 4/3 so the window is H x int(H * 4/3), area within max: not scaled
    win = RandomCropWindow((0.9, 1.0), (3 / 4, 4 / 3), 10)
    for _, _, (y, _x, h, w) in windows(win, [(100, 200)], n=50):
        assert (y, h, w) == (0, 100, 133)


def test_fallback_after_failed_attempts_scales_to_max_area():
    # ratios [1.2, 1.25] never survive rounding on 10x10 at area 0.5 (8x6 = 1.33); W/H = 1 < 1.2
    # so the window starts as int(10/1.2) x 10 = 8 x 10, then scales by sqrt(50/80):
    # int(8 * 0.79) = 6, int(10 * 0.79) = 7
    win = RandomCropWindow((0.5, 0.5), (1.2, 1.25), 10)
    for _, _, (_y, _x, h, w) in windows(win, [(10, 10)], n=50):
        assert (h, w) == (6, 7)


def test_whole_image_fallback():
    win = RandomCropWindow((1.0, 1.0), (0.5, 2.0), 3)
    assert all(win_ == (0, 0, 40, 60) for _, _, win_ in windows(win, [(40, 60)], n=50))


def test_draw_shape_and_determinism():
    win = RandomCropWindow(num_attempts=4)
    a = win.draw(np.random.default_rng(3), 5)
    assert a.shape == (5, 10)
    np.testing.assert_array_equal(a, win.draw(np.random.default_rng(3), 5))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(random_area=[0.5, 0.1]), "random_area"),
        (dict(random_area=[0, 1]), "random_area"),
        (dict(random_area=[0.1]), "random_area"),
        (dict(random_aspect_ratio=[2, 1]), "random_aspect_ratio"),
        (dict(random_aspect_ratio=[0, 1]), "random_aspect_ratio"),
        (dict(num_attempts=0), "num_attempts=0"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        RandomCropWindow(**kwargs)
    with pytest.raises(ArgumentError, match=match):
        ImageDecoderRandomCrop(**kwargs)


@pytest.mark.parametrize("value", ["big", [0.1, "x"], None])
def test_non_numeric_area_names_the_argument(value):
    with pytest.raises(ArgumentError, match="random_area"):
        RandomCropWindow(random_area=value)


# --- the decoder ----------------------------------------------------------------------------


def _files(root, n):
    out = []
    for d in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, d)):
            out += [os.path.join(root, d, f) for f in sorted(os.listdir(os.path.join(root, d)))]
    return out[:n]


def test_decoder_output_is_the_window_of_the_decoded_image(image_root):
    op = ImageDecoderRandomCrop(random_area=[0.1, 0.6])
    op.bind_rng(9)
    files = _files(image_root, 6)
    for path, u in zip(files, op.batch_params(len(files)), strict=True):
        data = np.fromfile(path, dtype=np.uint8)
        full = decode_cpu(data, DALIImageType.RGB)
        y, x, h, w = op.window.window(full.shape[0], full.shape[1], u)
        np.testing.assert_array_equal(op.run_sample((data,), {}, u), full[y : y + h, x : x + w])


def _pipeline(image_root, threads):
    pipe = Pipeline(batch_size=8, num_threads=threads, seed=11)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        full = fn.decoders.image(jpegs)
        crops = fn.decoders.image_random_crop(jpegs, seed=3)
        pipe.set_outputs(full, crops)
    pipe.build()
    return pipe


def test_decoder_same_seed_same_crops_regardless_of_threads(image_root):
    outs = [[_pipeline(image_root, t).run() for _ in range(1)] for t in (1, 4)]
    (full, a), (_, b) = outs[0][0], outs[1][0]
    assert a.layout() == "HWC"
    for i in range(len(a)):
        np.testing.assert_array_equal(a.at(i), b.at(i))
        H, W, _ = full.at(i).shape
        h, w, c = a.at(i).shape
        assert 1 <= h <= H and 1 <= w <= W and c == 3


def test_batch_windows_equal_the_per_sample_windows():
    # The mixed decoder and the GPU random_resized_crop take a whole batch's windows at once.
    rng = np.random.default_rng(5)
    for area, ratio in [
        ((0.08, 1.0), (3 / 4, 4 / 3)),
        ((0.01, 0.02), (0.2, 5.0)),
        ((1, 1), (2, 3)),
    ]:
        win = RandomCropWindow(area, ratio, 10)
        heights, widths = rng.integers(1, 900, 300), rng.integers(1, 900, 300)
        heights[:4], widths[:4] = [1, 500, 1000, 10], [500, 1, 10, 1000]
        u = win.draw(rng, 300)
        got = win.windows(heights, widths, u)
        assert got.shape == (300, 4) and got.dtype == np.int64
        for i in range(300):
            assert tuple(got[i]) == win.window(int(heights[i]), int(widths[i]), u[i])
