"""The box operators ``bb_flip``, ``bbox_paste`` and ``box_encoder`` against numpy references written here, on
their own and in pipelines fed by external sources (per-sample argument inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.bb_flip import BbFlip
from dlpipe.operators.bbox_paste import BBoxPaste
from dlpipe.operators.box_encoder import BoxEncoder

F = np.float32


def random_boxes(rng, n, ltrb):
    lo = rng.uniform(0, 0.6, (n, 2)).astype(F)
    size = rng.uniform(0.01, 0.4, (n, 2)).astype(F)
    return np.concatenate([lo, lo + size if ltrb else size], axis=1).astype(F)


def run_pipe(batches, build, batch_size=None):
    """Outputs (lists of samples) of a CPU pipeline whose external sources are ``batches``
    (name -> list of samples); ``build(**nodes)`` returns the outputs."""
    n = batch_size or len(next(iter(batches.values())))
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=None, seed=5)
    with pipe:
        nodes = {k: fn.external_source(source=[v], name=k) for k, v in batches.items()}
        outs = build(**nodes)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    res = pipe.run()
    pipe.close()
    return [[np.array(tl.at(i)) for i in range(len(tl))] for tl in res]


# --- bb_flip ------------------------------------------------------------------------------------


def ref_flip(boxes, ltrb, h, v):
    b = boxes.astype(np.float64)
    out = b.copy()
    if ltrb:
        if h:
            out[:, [0, 2]] = 1 - b[:, [2, 0]]
        if v:
            out[:, [1, 3]] = 1 - b[:, [3, 1]]
    else:
        if h:
            out[:, 0] = 1 - (b[:, 0] + b[:, 2])
        if v:
            out[:, 1] = 1 - (b[:, 1] + b[:, 3])
    return out


@pytest.mark.parametrize("ltrb", [False, True])
@pytest.mark.parametrize("h, v", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_bb_flip_matches_numpy(ltrb, h, v):
    boxes = random_boxes(np.random.default_rng(h + 2 * v), 7, ltrb)
    out = BbFlip(ltrb=ltrb, horizontal=h, vertical=v).run_sample((boxes,), {}, None)
    assert out.dtype == np.float32 and out.shape == boxes.shape
    np.testing.assert_allclose(out, ref_flip(boxes, ltrb, h, v), atol=1e-7)
    if not ltrb:  # sizes are kept exactly
        np.testing.assert_array_equal(out[:, 2:], boxes[:, 2:])


def test_bb_flip_defaults_flat_boxes_and_empty():
    boxes = F([[0.1, 0.2, 0.3, 0.4]])
    out = BbFlip().run_sample((boxes.reshape(-1),), {}, None)  # flat (4N,) input keeps its shape
    assert out.shape == (4,)
    np.testing.assert_allclose(out, [0.6, 0.2, 0.3, 0.4], atol=1e-7)
    empty = np.zeros((0, 4), F)
    assert BbFlip().run_sample((empty,), {}, None).shape == (0, 4)


def test_bb_flip_per_sample_flags_in_a_pipeline():
    rng = np.random.default_rng(1)
    boxes = [random_boxes(rng, k, True) for k in (3, 0, 5, 2)]
    horizontal = [np.int32(f) for f in (1, 0, 0, 1)]
    vertical = [np.int32(f) for f in (0, 1, 1, 1)]
    (got,) = run_pipe(
        dict(b=boxes, h=horizontal, v=vertical),
        lambda b, h, v: fn.bb_flip(b, ltrb=True, horizontal=h, vertical=v),
    )
    for g, b, h, v in zip(got, boxes, horizontal, vertical, strict=True):
        assert g.shape == b.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, ref_flip(b, True, h, v), atol=1e-7)
    (legacy,) = run_pipe(dict(b=boxes), lambda b: ops.BbFlip(vertical=1, horizontal=0)(b))
    np.testing.assert_allclose(legacy[2], ref_flip(boxes[2], False, 0, 1), atol=1e-7)


def test_bb_flip_errors():
    with pytest.raises(ArgumentError, match="float32"):
        BbFlip().run_sample((np.zeros((2, 4), np.float64),), {}, None)
    with pytest.raises(ArgumentError, match=r"shape \(N, 4\).*\(2, 3\)"):
        BbFlip().run_sample((np.zeros((2, 3), F),), {}, None)
    with pytest.raises(ArgumentError, match="horizontal=.*integer"):
        BbFlip(horizontal=0.5)
    with pytest.raises(ArgumentError, match="device='mixed'"):
        BbFlip(device="mixed")


# --- bbox_paste ---------------------------------------------------------------------------------


def ref_paste(boxes, ltrb, ratio, px, py):
    """DALI's formula in float32: corners x / ratio + paste_x * (ratio - 1) / ratio, sizes
    w / ratio; offsets lowered until a box in [0, 1] stays in [0, 1]."""
    scale = F(1) / F(ratio)
    ox = F(px) * ((F(ratio) - F(1)) / F(ratio))
    oy = F(py) * ((F(ratio) - F(1)) / F(ratio))
    while scale + ox > F(1):
        ox = np.nextafter(ox, F(-1))
    while scale + oy > F(1):
        oy = np.nextafter(oy, F(-1))
    out = boxes * scale
    out[:, 0] += ox
    out[:, 1] += oy
    if ltrb:
        out[:, 2] += ox
        out[:, 3] += oy
    return out


@pytest.mark.parametrize("ltrb", [False, True])
@pytest.mark.parametrize("ratio, px, py", [(1.0, 0.5, 0.5), (2.0, 0.0, 1.0), (3.7, 0.25, 0.9)])
def test_bbox_paste_matches_numpy(ltrb, ratio, px, py):
    boxes = random_boxes(np.random.default_rng(3), 6, ltrb)
    op = BBoxPaste(ratio=ratio, paste_x=px, paste_y=py, ltrb=ltrb)
    out = op.run_sample((boxes,), {}, None)
    assert out.dtype == np.float32 and out.shape == boxes.shape
    np.testing.assert_array_equal(out, ref_paste(boxes, ltrb, ratio, px, py))


def test_bbox_paste_keeps_unit_boxes_inside_at_the_far_corner():
    full = F([[0, 0, 1, 1]])
    for ratio in (1.1, 3.0, 7.3):
        out = BBoxPaste(ratio=ratio, paste_x=1.0, paste_y=1.0, ltrb=True).run_sample(
            (full,), {}, None
        )
        assert out.max() <= 1.0 and out[0, 2] > 0.99


def test_bbox_paste_per_sample_arguments_in_a_pipeline():
    rng = np.random.default_rng(2)
    boxes = [random_boxes(rng, k, False) for k in (2, 4, 0)]
    ratio = [F(r) for r in (1.5, 2.0, 3.0)]
    px = [F(p) for p in (0.0, 0.3, 1.0)]
    (got,) = run_pipe(
        dict(b=boxes, r=ratio, x=px),
        lambda b, r, x: fn.bbox_paste(b, ratio=r, paste_x=x, paste_y=0.2),
    )
    for g, b, r, x in zip(got, boxes, ratio, px, strict=True):
        np.testing.assert_array_equal(g, ref_paste(b, False, r, x, 0.2))


def test_bbox_paste_errors():
    with pytest.raises(ArgumentError, match="ratio=0.5 must be at least 1"):
        BBoxPaste(ratio=0.5)
    with pytest.raises(ArgumentError, match="ratio= is required"):
        BBoxPaste().run_sample((np.zeros((1, 4), F),), {}, None)
    with pytest.raises(ArgumentError, match="device='gpu'"):
        BBoxPaste(ratio=2, device="gpu")


# --- box_encoder --------------------------------------------------------------------------------


def ssd_like_anchors(grid=6, sizes=(0.15, 0.3)):
    """A small SSD-style anchor set: square boxes of two sizes centred on a grid, clipped."""
    out = []
    for s in sizes:
        for i in range(grid):
            for j in range(grid):
                cx, cy = (j + 0.5) / grid, (i + 0.5) / grid
                out.append(np.clip([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], 0, 1))
    return np.asarray(out, F)


def ref_encode(boxes, labels, anchors, criteria, offset=False, scale=1.0, means=0, stds=1):
    """DALI's CPU algorithm, loop by loop, in float32."""

    def iou(b, a):
        if not (b[0] < a[2] and b[2] > a[0] and b[1] < a[3] and b[3] > a[1]):
            return F(0)
        inter = F(min(b[2], a[2]) - max(b[0], a[0])) * F(min(b[3], a[3]) - max(b[1], a[1]))
        area_b = F(b[2] - b[0]) * F(b[3] - b[1])
        area_a = F(a[2] - a[0]) * F(a[3] - a[1])
        return F(inter / F(F(area_b + area_a) - inter))

    def cwh(b):
        return np.array(
            [F(0.5) * F(b[0] + b[2]), F(0.5) * F(b[1] + b[3]), b[2] - b[0], b[3] - b[1]], F
        )

    means = np.broadcast_to(np.asarray(means, F), 4)
    stds = np.broadcast_to(np.asarray(stds, F), 4)
    num = len(anchors)
    out = np.zeros((num, 4), F) if offset else np.array([cwh(a) for a in anchors], F)
    out_labels = np.zeros(num, np.int32)
    if len(boxes) == 0:
        return out, out_labels
    ious = np.array([[iou(b, a) for a in anchors] for b in boxes], F)
    for k in range(len(boxes)):
        best = 0
        for a in range(1, num):
            if ious[k, a] >= ious[k, best]:
                best = a
        ious[k, best] = 2
    for a in range(num):
        best = 0
        for k in range(1, len(boxes)):
            if ious[k, a] >= ious[best, a]:
                best = k
        if ious[best, a] > F(criteria):
            b, an = cwh(boxes[best]) * F(scale), cwh(anchors[a]) * F(scale)
            if offset:
                b = np.array(
                    [
                        ((b[0] - an[0]) / an[2] - means[0]) / stds[0],
                        ((b[1] - an[1]) / an[3] - means[1]) / stds[1],
                        (np.log(b[2] / an[2]) - means[2]) / stds[2],
                        (np.log(b[3] / an[3]) - means[3]) / stds[3],
                    ],
                    F,
                )
            out[a] = b
            out_labels[a] = labels[best]
    return out, out_labels


def gt_boxes(rng, n):
    lo = rng.uniform(0, 0.7, (n, 2))
    return np.concatenate([lo, lo + rng.uniform(0.05, 0.3, (n, 2))], axis=1).clip(0, 1).astype(F)


@pytest.mark.parametrize("criteria", [0.0, 0.3, 0.5])
def test_box_encoder_matches_the_reference(criteria):
    rng = np.random.default_rng(int(criteria * 10))
    anchors = ssd_like_anchors()
    for n in (0, 1, 4, 9):
        boxes = gt_boxes(rng, n)
        labels = rng.integers(1, 80, n).astype(np.int32)
        op = BoxEncoder(anchors=anchors.reshape(-1).tolist(), criteria=criteria)
        got_boxes, got_labels = op.run_sample((boxes, labels), {}, None)
        want_boxes, want_labels = ref_encode(boxes, labels, anchors, criteria)
        assert got_boxes.dtype == np.float32 and got_boxes.shape == (len(anchors), 4)
        assert got_labels.dtype == np.int32 and got_labels.shape == (len(anchors),)
        np.testing.assert_array_equal(got_labels, want_labels)
        np.testing.assert_array_equal(got_boxes, want_boxes)


def test_box_encoder_offsets_and_ties():
    rng = np.random.default_rng(7)
    anchors = ssd_like_anchors(grid=5)
    boxes = gt_boxes(rng, 6)
    boxes[3] = boxes[1]  # identical boxes: the later one wins the anchors they tie on
    labels = np.arange(1, 7, dtype=np.int32)
    kw = dict(criteria=0.4, offset=True, scale=300.0, means=[0.1, 0.2, 0.0, 0.0])
    kw["stds"] = [0.1, 0.1, 0.2, 0.2]
    op = BoxEncoder(anchors=anchors.reshape(-1), **kw)
    got_boxes, got_labels = op.run_sample((boxes, labels), {}, None)
    want_boxes, want_labels = ref_encode(boxes, labels, anchors, **kw)
    np.testing.assert_array_equal(got_labels, want_labels)
    assert 2 not in got_labels  # box 1 ties its copy (box 3) everywhere: the later one wins
    np.testing.assert_allclose(got_boxes, want_boxes, rtol=2e-6, atol=2e-6)
    assert not got_boxes[got_labels == 0].any()  # unmatched anchors are zeros with offset


def edge_case_boxes(rng, anchors):
    """Boxes that probe the fast matcher's shortcuts: zero width or height, -0.0 coordinates,
    copies of anchors (IoU exactly 1, ties between anchors), boxes that touch anchors' edges
    without overlapping, the whole image, and random ones."""
    rows = [
        [0.2, 0.2, 0.2, 0.5],  # zero width
        [0.1, 0.3, 0.4, 0.3],  # zero height
        [0.0, -0.0, -0.0, 0.3],  # -0.0 everywhere it can be
        [0.0, 0.0, 1.0, 1.0],
        anchors[3],
        anchors[len(anchors) // 2],
        [anchors[5][2], anchors[5][1], min(1.0, anchors[5][2] + 0.1), anchors[5][3]],  # touches
    ]
    return np.concatenate([np.asarray(rows, F), gt_boxes(rng, 5)]).astype(F)


@pytest.mark.parametrize("criteria", [0.0, 0.5])
def test_box_encoder_fast_matcher_edge_cases(criteria):
    rng = np.random.default_rng(11)
    anchors = ssd_like_anchors(grid=6)
    op = BoxEncoder(anchors=anchors.reshape(-1).tolist(), criteria=criteria)
    assert op.matcher.fast
    boxes = edge_case_boxes(rng, anchors)
    labels = np.arange(1, len(boxes) + 1, dtype=np.int32)
    for sel in (slice(None), slice(0, 3), slice(3, 7), [4, 4, 5], [2]):
        got_boxes, got_labels = op.run_sample((boxes[sel], labels[sel]), {}, None)
        want_boxes, want_labels = ref_encode(boxes[sel], labels[sel], anchors, criteria)
        np.testing.assert_array_equal(got_labels, want_labels)
        np.testing.assert_array_equal(got_boxes, want_boxes)


def test_box_encoder_malformed_boxes_and_anchors_take_the_exact_path():
    # boxes with r < l or NaNs, and anchors of zero area, are matched as DALI's loops do
    rng = np.random.default_rng(12)
    anchors = ssd_like_anchors(grid=4)
    boxes = gt_boxes(rng, 4)
    boxes[1] = [0.5, 0.2, 0.3, 0.6]  # r < l: overlaps anchors "strictly" with a negative width
    labels = np.arange(1, 5, dtype=np.int32)
    op = BoxEncoder(anchors=anchors.reshape(-1).tolist(), criteria=0.1)
    got = op.run_sample((boxes, labels), {}, None)
    want = ref_encode(boxes, labels, anchors, 0.1)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    flat = anchors.copy()
    flat[2, 2] = flat[2, 0]  # a zero-width anchor
    op = BoxEncoder(anchors=flat.reshape(-1).tolist(), criteria=0.1)
    assert not op.matcher.fast
    boxes = gt_boxes(rng, 3)
    got = op.run_sample((boxes, labels[:3]), {}, None)
    want = ref_encode(boxes, labels[:3], flat, 0.1)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_box_encoder_threads_and_growing_scratch():
    # two threads, samples of 0..40 boxes (the scratch grows past its first 16 rows)
    rng = np.random.default_rng(14)
    anchors = ssd_like_anchors(grid=5)
    boxes = [gt_boxes(rng, n) for n in (3, 40, 0, 17, 1, 25)]
    labels = [rng.integers(1, 9, len(b)).astype(np.int32) for b in boxes]
    got_b, got_l = run_pipe(
        dict(b=boxes, lab=labels),
        lambda b, lab: fn.box_encoder(b, lab, anchors=anchors.reshape(-1).tolist(), criteria=0.4),
    )
    for gb, gl, b, lab in zip(got_b, got_l, boxes, labels, strict=True):
        wb, wl = ref_encode(b, lab, anchors, 0.4)
        np.testing.assert_array_equal(gb, wb)
        np.testing.assert_array_equal(gl, wl)


def test_box_encoder_copies_and_pickles():
    # the matcher's per-thread scratch is not state: copies and pickles match afresh
    import copy
    import pickle

    rng = np.random.default_rng(13)
    anchors = ssd_like_anchors(grid=4)
    op = BoxEncoder(anchors=anchors.reshape(-1).tolist(), criteria=0.3)
    boxes, labels = gt_boxes(rng, 5), np.arange(1, 6, dtype=np.int32)
    want = ref_encode(boxes, labels, anchors, 0.3)
    op.run_sample((boxes, labels), {}, None)  # scratch made
    for clone in (copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
        got = clone.run_sample((boxes, labels), {}, None)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_box_encoder_in_a_pipeline_and_errors():
    rng = np.random.default_rng(3)
    anchors = ssd_like_anchors(grid=4)
    boxes = [gt_boxes(rng, n) for n in (3, 0, 5)]
    labels = [np.arange(len(b), dtype=np.int32) + 1 for b in boxes]
    got_b, got_l = run_pipe(
        dict(b=boxes, lab=labels),
        lambda b, lab: ops.BoxEncoder(anchors=anchors.reshape(-1).tolist(), criteria=0.5)(b, lab),
    )
    for gb, gl, b, lab in zip(got_b, got_l, boxes, labels, strict=True):
        wb, wl = ref_encode(b, lab, anchors, 0.5)
        np.testing.assert_array_equal(gb, wb)
        np.testing.assert_array_equal(gl, wl)
    with pytest.raises(ArgumentError, match="anchors= is required"):
        BoxEncoder()
    with pytest.raises(ArgumentError, match="anchors has 6 values"):
        BoxEncoder(anchors=[0.1] * 6)
    with pytest.raises(ArgumentError, match="criteria=1.5"):
        BoxEncoder(anchors=[0, 0, 1, 1], criteria=1.5)
    with pytest.raises(ArgumentError, match="stds=.*nonzero"):
        BoxEncoder(anchors=[0, 0, 1, 1], stds=[1, 0, 1, 1])
    with pytest.raises(ArgumentError, match="means=.*4 values"):
        BoxEncoder(anchors=[0, 0, 1, 1], means=[0, 0])
    with pytest.raises(ArgumentError, match="2 labels for 3 bounding boxes"):
        BoxEncoder(anchors=[0, 0, 1, 1]).run_sample(
            (gt_boxes(rng, 3), np.zeros(2, np.int32)), {}, None
        )


# --- the host side of the GPU launches (no GPU needed) ----------------------------------------


def test_gpu_descriptors_on_the_host():
    from dlpipe.kernels.bbox import (
        ENCODE_DESC,
        FLIP_DESC,
        box_counts,
        encode_descriptors,
        encoder_params,
        flip_descriptors,
    )

    assert box_counts(np.array([[3, 4], [0, 4]]), "x").tolist() == [3, 0]
    assert box_counts(np.array([[12], [0]]), "x").tolist() == [3, 0]  # flat (4N,) samples
    with pytest.raises(ValueError, match="4 coordinates"):
        box_counts(np.array([[3, 5]]), "x")
    with pytest.raises(ValueError, match="multiple of 4"):
        box_counts(np.array([[6]]), "x")
    d = flip_descriptors([10, 20], [30, 40], [3, 0], [(1, 0), (0, 5)])
    assert d.dtype == FLIP_DESC and d.itemsize == 32  # the struct in bbox.cu
    assert d["horizontal"].tolist() == [1, 0] and d["vertical"].tolist() == [0, 1]
    assert d["src"].tolist() == [10, 20] and d["n"].tolist() == [3, 0]
    e = encode_descriptors([1], [2], [3], [4], [5], [7])
    assert e.dtype == ENCODE_DESC and e.itemsize == 48 and e["scratch"][0] == 5
    p = encoder_params([0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4], 300.0, 0.5)
    assert p.dtype == np.float32 and p.tolist()[8:] == [300.0, 0.5] and p[4] == 1
