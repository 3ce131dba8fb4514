"""segmentation.random_object_bbox, segmentation.random_mask_pixel and roi_random_crop on the
CPU: blobs against a flood-fill reference written here, every output format and class rule
(classes, class_weights, background, k_largest, threshold, ignore_class, output_class,
foreground_prob, cache_objects), the ranges the random draws must respect and cover, and the
errors DALI raises."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators._blobs import object_boxes
from dlpipe.operators.random_mask_pixel import RandomMaskPixel
from dlpipe.operators.random_object_bbox import RandomObjectBBox
from dlpipe.operators.roi_random_crop import ROIRandomCrop


def flood_boxes(x, background):
    """Blobs of equal non-background labels, face-connected, by breadth-first search; ordered
    by their first element in C order. Returns [(label, lo, hi)]."""
    seen = np.zeros(x.shape, bool)
    out = []
    for start in itertools.product(*(range(n) for n in x.shape)):
        if seen[start] or x[start] == background:
            continue
        label = x[start]
        lo, hi = list(start), [s + 1 for s in start]
        queue = deque([start])
        seen[start] = True
        while queue:
            p = queue.popleft()
            for d in range(x.ndim):
                lo[d], hi[d] = min(lo[d], p[d]), max(hi[d], p[d] + 1)
                for step in (-1, 1):
                    q = list(p)
                    q[d] += step
                    q = tuple(q)
                    if 0 <= q[d] < x.shape[d] and not seen[q] and x[q] == label:
                        seen[q] = True
                        queue.append(q)
        out.append((label, lo, hi))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_object_boxes_match_flood_fill(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 7, rng.integers(1, 5)))
    x = rng.integers(0, 4, shape).astype(np.uint8) * (rng.random(shape) < 0.6)
    bg = int(rng.integers(0, 2))
    got = object_boxes(x, bg)
    ref = flood_boxes(x, bg)
    assert got.dtype == np.int64 and got.shape == (len(ref), 2, x.ndim)
    for (_, lo, hi), box in zip(ref, got, strict=True):
        assert box[0].tolist() == lo and box[1].tolist() == hi


def test_object_boxes_diagonal_neighbours_are_separate_blobs():
    x = np.array([[1, 0], [0, 1]], np.uint8)
    assert object_boxes(x, 0).tolist() == [[[0, 0], [1, 1]], [[1, 1], [2, 2]]]


# --- random_object_bbox ------------------------------------------------------------------------


def _mask():
    """Class 1: a 3x4 blob and a 1x1 blob; class 2: a 2x2 blob; class 3: a 1x5 bar."""
    m = np.zeros((10, 12), np.int32)
    m[1:4, 1:5] = 1
    m[8, 0] = 1
    m[5:7, 7:9] = 2
    m[9, 6:11] = 3
    return m


def _run(op, x, seed):
    op.output_layouts([""])
    op.rng = np.random.default_rng(seed)
    (param,) = op.batch_params(1)
    return op.run_sample((x,), {}, param)


def _blob_set(x, label=None, bg=0):
    return {
        (tuple(lo), tuple(hi))
        for lab, lo, hi in flood_boxes(x, bg)
        if label is None or lab == label
    }


def test_random_object_bbox_formats_and_types():
    m = _mask()
    blobs = _blob_set(m)
    for seed in range(30):
        anchor, shape = _run(RandomObjectBBox(seed=1), m, seed)
        start, end = _run(RandomObjectBBox(format="start_end"), m, seed)
        box = _run(RandomObjectBBox(format="box"), m, seed)
        for a in (anchor, shape, start, end, box):
            assert a.dtype == np.int32
        assert anchor.shape == (2,) and box.shape == (4,)
        assert (tuple(start), tuple(end)) in blobs
        np.testing.assert_array_equal(anchor, start)
        np.testing.assert_array_equal(shape, end - start)
        np.testing.assert_array_equal(box, np.concatenate([start, end]))


def test_random_object_bbox_covers_every_class_and_blob():
    m = _mask()
    seen_boxes, seen_classes = set(), set()
    op = RandomObjectBBox(format="start_end", output_class=True)
    for seed in range(300):
        start, end, cls = _run(op, m, seed)
        assert cls.shape == () and cls.dtype == np.int32
        assert (tuple(start), tuple(end)) in _blob_set(m, int(cls))
        seen_boxes.add((tuple(start), tuple(end)))
        seen_classes.add(int(cls))
    assert seen_boxes == _blob_set(m) and seen_classes == {1, 2, 3}


def test_k_largest_threshold_and_weights():
    m = _mask()
    for seed in range(50):
        s, e, c = _run(
            RandomObjectBBox(format="start_end", output_class=True, classes=[1], k_largest=1),
            m,
            seed,
        )
        assert (s.tolist(), e.tolist(), int(c)) == ([1, 1], [4, 5], 1)
        s, e = _run(RandomObjectBBox(format="start_end", threshold=[2, 2]), m, seed)
        assert (tuple(s), tuple(e)) in {((1, 1), (4, 5)), ((5, 7), (7, 9))}
        s, e, c = _run(
            RandomObjectBBox(format="start_end", output_class=True, class_weights=[0, 0, 1]),
            m,
            seed,
        )
        assert int(c) == 3 and (s.tolist(), e.tolist()) == ([9, 6], [10, 11])


def test_a_class_without_a_qualifying_blob_is_dropped_and_then_the_whole_input():
    m = _mask()
    for seed in range(20):
        # class 3's bar is 1 high: the threshold drops it; class 2's 2x2 blob qualifies
        s, e, c = _run(
            RandomObjectBBox(
                format="start_end", output_class=True, classes=[3, 2], threshold=[2, 2]
            ),
            m,
            seed,
        )
        assert int(c) == 2
        s, e, c = _run(
            RandomObjectBBox(format="start_end", output_class=True, threshold=[5, 5]), m, seed
        )
        assert (s.tolist(), e.tolist(), int(c)) == ([0, 0], [10, 12], 0)


def test_foreground_prob_and_empty_masks_give_the_whole_input():
    m = _mask()
    empty = np.zeros((4, 5, 6), np.uint8)
    for seed in range(10):
        s, e, c = _run(
            RandomObjectBBox(format="start_end", output_class=True, foreground_prob=0.0), m, seed
        )
        assert (s.tolist(), e.tolist(), int(c)) == ([0, 0], [10, 12], 0)
        a, sh = _run(RandomObjectBBox(), empty, seed)
        assert a.tolist() == [0, 0, 0] and sh.tolist() == [4, 5, 6]
    fg = [
        _run(RandomObjectBBox(format="box", foreground_prob=0.5), m, s).tolist() != [0, 0, 10, 12]
        for s in range(400)
    ]
    assert 0.4 < np.mean(fg) < 0.6


def test_background_rules():
    m = _mask()
    # classes containing 0 without an explicit background: the background becomes -1, so
    # label 0 (the empty area) is a class with one big blob
    s, e, c = _run(
        RandomObjectBBox(format="start_end", output_class=True, classes=[0], k_largest=1), m, 0
    )
    assert int(c) == 0 and (tuple(s), tuple(e)) in _blob_set(m, 0, bg=-1)
    with pytest.raises(ArgumentError, match="coincides with the background"):
        _run(RandomObjectBBox(classes=[0, 1], background=0), m, 0)
    # background 1: labels 0, 2, 3 are the classes
    for seed in range(30):
        s, e, c = _run(
            RandomObjectBBox(format="start_end", output_class=True, background=1), m, seed
        )
        assert int(c) in (0, 2, 3)


def test_ignore_class_picks_among_all_blobs():
    m = _mask()
    seen = set()
    for seed in range(200):
        s, e = _run(RandomObjectBBox(format="start_end", ignore_class=True), m, seed)
        seen.add((tuple(s), tuple(e)))
    assert seen == _blob_set(m)


def test_cache_objects_gives_the_same_boxes():
    m = _mask()
    op = RandomObjectBBox(format="box", cache_objects=True)
    for seed in range(20):
        cached = _run(op, m, seed)
        np.testing.assert_array_equal(cached, _run(RandomObjectBBox(format="box"), m, seed))
    assert len(op._cache) == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(format="xywh"), "format='xywh'"),
        (dict(ignore_class=True, output_class=True), "ignore_class"),
        (dict(ignore_class=True, classes=[1]), "ignore_class"),
        (dict(k_largest=0), "k_largest=0"),
        (dict(foreground_prob=1.5), "foreground_prob=1.5"),
        (dict(classes=[1, 2], class_weights=[1.0]), "same length"),
        (dict(class_weights=[1.0, -1.0]), "negative"),
    ],
)
def test_random_object_bbox_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        RandomObjectBBox(**kwargs)


def test_random_object_bbox_run_errors():
    with pytest.raises(ArgumentError, match="unsupported input type float32"):
        _run(RandomObjectBBox(), np.zeros((3, 3), np.float32), 0)
    with pytest.raises(ArgumentError, match="threshold"):
        _run(RandomObjectBBox(threshold=[1, 1, 1]), _mask(), 0)


def test_random_object_bbox_in_a_pipeline_3d_and_argument_inputs():
    rng = np.random.default_rng(0)
    vols = [(rng.random((6, 7, 8)) < 0.2).astype(np.uint8) for _ in range(4)]
    probs = [np.float32(p) for p in (0.0, 1.0, 1.0, 0.0)]

    def build(threads):
        pipe = Pipeline(batch_size=4, num_threads=threads, seed=3)
        with pipe:
            x = fn.external_source(lambda: vols, layout="DHW")
            p = fn.external_source(lambda: probs)
            start, end = fn.segmentation.random_object_bbox(
                x, format="start_end", foreground_prob=p
            )
            legacy = ops.segmentation.RandomObjectBBox(format="box", seed=5)(x)
            pipe.set_outputs(start, end, legacy)
        pipe.build()
        return pipe.run()

    start, end, legacy = build(1)
    for i, v in enumerate(vols):
        s, e = start.at(i).tolist(), end.at(i).tolist()
        if probs[i] == 0:
            assert (s, e) == ([0, 0, 0], [6, 7, 8])
        else:
            assert (tuple(s), tuple(e)) in _blob_set(v)
        assert legacy.at(i).shape == (6,)
    again = build(2)  # the same draws whatever the thread count
    for a, b in zip((start, end, legacy), again, strict=True):
        for i in range(4):
            np.testing.assert_array_equal(a.at(i), b.at(i))


# --- random_mask_pixel ---------------------------------------------------------------------------


def _pixel(op, x, seed, args=None):
    op.output_layouts([""])
    op.rng = np.random.default_rng(seed)
    (param,) = op.batch_params(1)
    return op.run_sample((x,), args or {}, param)


def test_random_mask_pixel_foreground_by_value_and_threshold():
    m = _mask()
    seen = set()
    for seed in range(200):
        p = _pixel(RandomMaskPixel(value=2, foreground=1), m, seed)
        assert p.dtype == np.int64 and p.shape == (2,)
        assert m[tuple(p)] == 2
        seen.add(tuple(p))
        q = _pixel(RandomMaskPixel(threshold=1.5, foreground=1), m, seed)
        assert m[tuple(q)] > 1.5
        r = _pixel(RandomMaskPixel(foreground=1), m, seed)
        assert m[tuple(r)] > 0
    assert seen == {(5, 7), (5, 8), (6, 7), (6, 8)}  # every foreground pixel, uniformly


def test_random_mask_pixel_anywhere():
    m = _mask()
    seen = set()
    for seed in range(400):
        # foreground=0, no foreground pixel, or a value the type cannot hold: any pixel
        for op, x in (
            (RandomMaskPixel(), m),
            (RandomMaskPixel(foreground=1, value=7), m),
            (RandomMaskPixel(foreground=1, value=300), m.astype(np.uint8)),
        ):
            p = _pixel(op, x, seed)
            assert all(0 <= p[d] < x.shape[d] for d in range(2))
            seen.add(p[0])
    assert seen == set(range(10))


def test_random_mask_pixel_argument_inputs_and_errors():
    m = _mask()
    p = _pixel(RandomMaskPixel(), m, 0, {"foreground": np.int32(1), "value": np.int32(3)})
    assert m[tuple(p)] == 3
    with pytest.raises(ArgumentError, match="value and threshold"):
        RandomMaskPixel(value=1, threshold=0.5)
    with pytest.raises(ArgumentError, match="value and threshold"):
        _pixel(RandomMaskPixel(value=1), m, 0, {"threshold": np.float32(0.5)})
    with pytest.raises(ArgumentError, match="unexpected input type float64"):
        _pixel(RandomMaskPixel(), m.astype(np.float64), 0)


# --- roi_random_crop -----------------------------------------------------------------------------


def _starts(seeds=200, inputs=(), **kwargs):
    op = ROIRandomCrop(**kwargs)
    op.output_layouts([""])
    op.rng = np.random.default_rng(0)
    return np.array([op.run_sample(inputs, {}, p) for p in op.batch_params(seeds)])


def test_roi_random_crop_ranges():
    # axis 0: ROI 10..30 (20) > crop 8: start in [10, 22]; axis 1: ROI 5..8 (3) < crop 6:
    # start in [2, 5]; axis 2: ROI extent == crop: the ROI start
    s = _starts(roi_start=[10, 5, 4], roi_end=[30, 8, 9], crop_shape=[8, 6, 5])
    assert s.dtype == np.int64 and s.shape == (200, 3)
    assert set(s[:, 0]) == set(range(10, 23))
    assert set(s[:, 1]) == set(range(2, 6))
    assert set(s[:, 2]) == {4}
    # with the input's shape: inside [0, in - crop]
    s = _starts(roi_start=[1, 0], roi_shape=[3, 20], crop_shape=[8, 6], in_shape=[9, 22])
    assert set(s[:, 0]) == {0, 1} and set(s[:, 1]) == set(range(0, 15))
    t = _starts(inputs=(np.zeros((9, 22), np.uint8),), roi_start=[1, 0], roi_shape=[3, 20],
                crop_shape=[8, 6])  # fmt: skip
    np.testing.assert_array_equal(s, t)


def test_roi_random_crop_errors():
    with pytest.raises(ArgumentError, match="not both"):
        ROIRandomCrop(crop_shape=[1], roi_start=[0], roi_end=[1], roi_shape=[1])
    with pytest.raises(ArgumentError, match="exactly one of roi_end and roi_shape"):
        _starts(1, crop_shape=[1], roi_start=[0])
    with pytest.raises(ArgumentError, match="bigger than the input"):
        _starts(1, crop_shape=[5], roi_start=[0], roi_end=[1], in_shape=[4])
    with pytest.raises(ArgumentError, match="out of bounds"):
        _starts(1, crop_shape=[2], roi_start=[3], roi_end=[6], in_shape=[5])
    with pytest.raises(ArgumentError, match="must have 2 values"):
        _starts(1, crop_shape=[2, 2], roi_start=[3], roi_end=[6, 6])
    with pytest.raises(ArgumentError, match="in_shape cannot be given"):
        _starts(1, inputs=(np.zeros(5),), crop_shape=[2], roi_start=[0], roi_end=[1],
                in_shape=[5])  # fmt: skip


def test_nnunet_biased_crop_in_a_pipeline():
    """random_object_bbox -> roi_random_crop -> crop of the label: the crop holds the object."""
    rng = np.random.default_rng(1)
    labels = []
    for _ in range(4):
        v = np.zeros((1, 12, 14, 16), np.uint8)
        z, y, x = rng.integers(0, 9), rng.integers(0, 11), rng.integers(0, 13)
        v[0, z : z + 3, y : y + 3, x : x + 3] = 1
        labels.append(v)
    pipe = Pipeline(batch_size=4, num_threads=2, seed=7)
    with pipe:
        lbl = fn.external_source(lambda: labels, layout="CDHW")
        roi_start, roi_end = fn.segmentation.random_object_bbox(
            lbl, background=0, format="start_end", cache_objects=True, foreground_prob=1.0
        )
        anchor = fn.roi_random_crop(lbl, roi_start=roi_start, roi_end=roi_end,
                                    crop_shape=[1, 6, 6, 6])  # fmt: skip
        pipe.set_outputs(roi_start, roi_end, anchor)
    pipe.build()
    starts, ends, anchors = pipe.run()
    for i, v in enumerate(labels):
        s, e, a = starts.at(i), ends.at(i), anchors.at(i)
        assert a.dtype == np.int64
        assert np.all(a <= s) and np.all(a + [1, 6, 6, 6] >= e)  # the window holds the object
        assert np.all(a >= 0) and np.all(a + [1, 6, 6, 6] <= v.shape)
