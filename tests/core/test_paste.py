"""``fn.paste`` on the CPU against a numpy reference written here, its per-sample arguments, the
host side of its GPU launch (descriptors, grid), and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.kernels.paste import PASTE_DESC, paste_descriptors, paste_grid
from dlpipe.operators.paste import Paste

F = np.float32


def ref_paste(img, ratio, px, py, fill, min_canvas=0.0):
    h, w, c = img.shape
    out_h = max(int(np.float32(ratio) * np.float32(h)), int(min_canvas))
    out_w = max(int(np.float32(ratio) * np.float32(w)), int(min_canvas))
    y0 = int(np.float32(py) * np.float32(out_h - h))
    x0 = int(np.float32(px) * np.float32(out_w - w))
    out = np.zeros((out_h, out_w, c), np.uint8)
    for y in range(out_h):
        for x in range(out_w):
            inside = y0 <= y < y0 + h and x0 <= x < x0 + w
            out[y, x] = img[y - y0, x - x0] if inside else fill
    return out


def image(rng, h, w, c=3):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


@pytest.mark.parametrize(
    "ratio, px, py, fill, min_canvas",
    [
        (1.0, 0.5, 0.5, [0, 0, 0], 0),
        (2.0, 0.0, 1.0, [10, 20, 30], 0),
        (1.7, 0.3, 0.8, 255, 0),
        (1.2, 1.0, 0.0, [1, 2, 3], 40),  # min_canvas_size wins over ratio
    ],
)
def test_paste_matches_the_reference(ratio, px, py, fill, min_canvas):
    img = image(np.random.default_rng(0), 13, 17)
    op = Paste(ratio=ratio, paste_x=px, paste_y=py, fill_value=fill, min_canvas_size=min_canvas)
    assert op.output_layouts([""]) == ["HWC"]
    out = op.run_sample((img,), {}, None)
    want = ref_paste(img, ratio, px, py, np.broadcast_to(np.asarray(fill, np.uint8), 3), min_canvas)
    assert out.dtype == np.uint8 and out.shape == want.shape
    np.testing.assert_array_equal(out, want)


def test_paste_per_sample_arguments_in_a_pipeline():
    rng = np.random.default_rng(1)
    imgs = [image(rng, h, w, 1) for h, w in ((5, 7), (9, 4), (6, 6))]
    ratio = [F(r) for r in (1.5, 3.0, 1.0)]
    px = [F(p) for p in (0.0, 0.5, 1.0)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(source=[imgs], layout="HWC")
        r = fn.external_source(source=[ratio])
        p = fn.external_source(source=[px])
        out = ops.Paste(fill_value=7, n_channels=1, paste_y=0.25)(x, ratio=r, paste_x=p)
        pipe.set_outputs(out)
    (tl,) = pipe.run()
    assert tl.layout() == "HWC"
    for i in range(3):
        np.testing.assert_array_equal(tl.at(i), ref_paste(imgs[i], ratio[i], px[i], 0.25, 7))


def test_gpu_descriptors_and_grid_on_the_host():
    shapes = [[5, 7, 3], [9, 4, 3]]
    geometry = [[10, 14, 2, 3], [27, 12, 9, 4]]
    d = paste_descriptors([100, 200], [300, 400], shapes, geometry)
    assert d.dtype == PASTE_DESC and d.itemsize == 48  # two pointers and eight int32
    assert d["src"].tolist() == [100, 200] and d["dst"].tolist() == [300, 400]
    assert d["in_h"].tolist() == [5, 9] and d["in_w"].tolist() == [7, 4]
    assert d["out_h"].tolist() == [10, 27] and d["out_w"].tolist() == [14, 12]
    assert d["row"].tolist() == [2, 9] and d["col"].tolist() == [3, 4]
    assert d["channels"].tolist() == [3, 3]
    grid, block = paste_grid(geometry, [3, 3])
    assert grid[2] == 2  # one launch: z is the sample
    assert grid[0] * block[0] >= 14 * 3  # a thread per byte of the widest canvas row
    assert grid[1] * block[1] >= 1


def test_paste_errors():
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ArgumentError, match="fill_value= is required"):
        Paste(ratio=2)
    with pytest.raises(ArgumentError, match="fill_value=.*1 or n_channels=3 values"):
        Paste(ratio=2, fill_value=[1, 2])
    with pytest.raises(ArgumentError, match="ratio=0.5 must be at least 1"):
        Paste(ratio=0.5, fill_value=0)
    with pytest.raises(ArgumentError, match="ratio= is required"):
        Paste(fill_value=0).run_sample((img,), {}, None)
    with pytest.raises(ArgumentError, match=r"paste_x=1.5 must be in \[0, 1\]"):
        Paste(ratio=2, fill_value=0, paste_x=1.5).run_sample((img,), {}, None)
    with pytest.raises(ArgumentError, match="only uint8"):
        Paste(ratio=2, fill_value=0).run_sample((img.astype(np.float32),), {}, None)
    with pytest.raises(ArgumentError, match="1 channels but n_channels=3"):
        Paste(ratio=2, fill_value=0).run_sample((img[..., :1],), {}, None)
    with pytest.raises(ArgumentError, match="HWC images"):
        Paste(ratio=2, fill_value=0).run_sample((img[..., 0],), {}, None)
