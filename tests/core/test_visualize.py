"""show_images / make_grid: layouts, normalization undo, placement, PNG and matplotlib output."""

from __future__ import annotations

import sys
import types as pytypes

import cv2
import numpy as np
import pytest

import dlpipe
from dlpipe import fn, pipeline_def
from dlpipe import types as dtypes
from dlpipe.errors import ArgumentError
from dlpipe.tensors import TensorListCPU
from dlpipe.visualize import make_grid, show_images, to_display

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _images(n=3, h=8, w=8, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def test_hwc_uint8_is_placed_exactly():
    imgs = _images(3)
    grid = make_grid(TensorListCPU(imgs, "HWC"), columns=2, cell=8)
    assert grid.shape == (16, 16, 3) and grid.dtype == np.uint8
    np.testing.assert_array_equal(grid[0:8, 0:8], imgs[0])
    np.testing.assert_array_equal(grid[0:8, 8:16], imgs[1])
    np.testing.assert_array_equal(grid[8:16, 0:8], imgs[2])
    assert (grid[8:16, 8:16] == 255).all()  # the empty cell stays white


def test_chw_layout_and_guess_match_hwc():
    imgs = _images(2)
    chw = [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in imgs]
    want = make_grid(imgs, cell=8)
    np.testing.assert_array_equal(make_grid(TensorListCPU(chw, "CHW"), cell=8), want)
    np.testing.assert_array_equal(make_grid(np.stack(chw), cell=8, layout="NCHW"), want)
    # (3, 8, 8) is ambiguous-looking but a trailing 8 is no channel count: guessed CHW
    np.testing.assert_array_equal(make_grid(np.stack(chw), cell=8), want)


def test_undo_mean_std_gives_back_the_pixels():
    imgs = _images(2)
    norm = [((x.astype(np.float32) - MEAN) / STD).astype(np.float16) for x in imgs]
    grid = make_grid(norm, cell=8, mean=MEAN, std=STD)
    got = grid[0:8, 0:8].astype(int)
    assert np.abs(got - imgs[0]).max() <= 1  # float16 rounding only


def test_mean_in_unit_range_scales_by_255():
    img = np.full((4, 4, 3), 128, np.uint8)
    norm = (img / 255.0 - 0.5) / 0.25
    out = to_display(norm, "HWC", mean=[0.5, 0.5, 0.5], std=0.25)
    assert (out == 128).all()


def test_float_display_rules():
    unit = np.full((2, 2, 3), 0.5, np.float32)
    assert (to_display(unit) == 128).all()  # [0, 1] floats scale by 255
    pixels = np.full((2, 2, 3), 200.0, np.float32)
    assert (to_display(pixels) == 200).all()  # [0, 255] floats are pixels
    stretched = np.array([[[-2.0], [2.0]]], np.float32)  # normalized: min-max stretch
    assert to_display(stretched)[0, :, 0].tolist() == [0, 255]


def test_gray_hw_and_channel_counts():
    gray = np.arange(16, dtype=np.uint8).reshape(4, 4)
    out = to_display(gray)
    assert out.shape == (4, 4, 3) and (out[:, :, 0] == gray).all() and (out[:, :, 2] == gray).all()
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 3] = 255
    assert to_display(rgba, "HWC").max() == 0  # alpha dropped


def test_aspect_ratio_kept_and_centred():
    wide = np.zeros((4, 16, 3), np.uint8)
    grid = make_grid([wide], cell=8)
    assert grid.shape == (8, 8, 3)
    assert (grid[:3] == 255).all() and (grid[5:] == 255).all() and (grid[3:5] == 0).all()


def test_errors_name_the_argument():
    with pytest.raises(ArgumentError, match="columns=0"):
        make_grid(_images(1), columns=0)
    with pytest.raises(ArgumentError, match="empty"):
        make_grid([])
    with pytest.raises(ArgumentError, match="mean=.*2 values.*3 channels"):
        make_grid(_images(1), mean=[1, 2])
    with pytest.raises(ArgumentError, match="shape"):
        make_grid([np.zeros((2, 2, 2, 3), np.uint8)])
    with pytest.raises(ArgumentError, match="layout='HW'"):
        make_grid(_images(1), layout="HW")


def test_png_written_in_rgb(tmp_path):
    img = np.zeros((8, 8, 3), np.uint8)
    img[..., 0] = 255  # pure red
    path = tmp_path / "g.png"
    grid = show_images([img], str(path), columns=1, cell=8)
    back = cv2.imread(str(path))
    assert back.shape == (8, 8, 3) and (back[..., 2] == 255).all() and (back[..., 0] == 0).all()
    np.testing.assert_array_equal(grid, img)


def test_without_path_returns_a_figure_or_the_array(monkeypatch):
    calls = {}

    class Figure:
        def __init__(self, figsize, dpi):
            calls["figsize"] = figsize

        def add_axes(self, rect):
            class Axes:
                def imshow(self, grid):
                    calls["grid"] = grid

                def set_axis_off(self):
                    pass

            return Axes()

    mpl = pytypes.ModuleType("matplotlib")
    mpl_figure = pytypes.ModuleType("matplotlib.figure")
    mpl_figure.Figure = Figure
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", mpl_figure)
    fig = show_images(_images(2), columns=2, cell=8)
    assert isinstance(fig, Figure) and calls["grid"].shape == (8, 16, 3)
    assert calls["figsize"] == (0.16, 0.08)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # not importable
    grid = show_images(_images(2), columns=2, cell=8)
    assert isinstance(grid, np.ndarray) and grid.shape == (8, 16, 3)


def test_exported_and_pipeline_batch(image_root):
    assert getattr(dlpipe, "show_images", show_images) is show_images

    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=3)
    def pipe():
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.resize(fn.decoders.image(jpegs), size=(16, 16))
        norm = fn.crop_mirror_normalize(
            images, dtype=dtypes.FLOAT16, output_layout="CHW", mean=MEAN, std=STD
        )
        return images, norm

    p = pipe()
    images, norm = p.run()
    p.close()
    plain = make_grid(images, cell=16)
    undone = make_grid(norm, cell=16, mean=MEAN, std=STD)
    assert np.abs(plain.astype(int) - undone).max() <= 1
