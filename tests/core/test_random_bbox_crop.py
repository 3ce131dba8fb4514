"""``fn.random_bbox_crop``: every window and its boxes checked against a numpy reference written
here (filtering, remapping, overlap thresholds, aspect ratios, fixed windows), determinism
across thread counts, and argument errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops

F = np.float32
THRESHOLDS = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9]


def random_ltrb(rng, n, ndim=2):
    lo = rng.uniform(0, 0.7, (n, ndim))
    hi = lo + rng.uniform(0.05, 0.3, (n, ndim))
    return np.concatenate([lo, np.minimum(hi, 1)], axis=1).astype(F)


def batches(seed=0, batch=8, ndim=2):
    rng = np.random.default_rng(seed)
    boxes = [random_ltrb(rng, int(k), ndim) for k in rng.integers(1, 6, batch)]
    labels = [np.arange(len(b), dtype=np.int32) + 10 for b in boxes]
    return boxes, labels


def run_crop(boxes, labels=None, iters=1, num_threads=2, seed=9, arg_sources=None, **kw):
    """Per output, the samples of ``iters`` runs of random_bbox_crop over the same inputs."""
    pipe = Pipeline(batch_size=len(boxes), num_threads=num_threads, device_id=None, seed=seed)
    with pipe:
        b = fn.external_source(source=lambda: boxes)
        ins = [b] if labels is None else [b, fn.external_source(source=lambda: labels)]
        args = {k: fn.external_source(source=lambda v=v: v) for k, v in (arg_sources or {}).items()}
        outs = fn.random_bbox_crop(*ins, **kw, **args)
        pipe.set_outputs(*outs)
    got = None
    for _ in range(iters):
        tls = pipe.run()
        got = got or [[] for _ in tls]
        for g, tl in zip(got, tls, strict=True):
            g += [np.array(tl.at(i)) for i in range(len(tl))]
    pipe.close()
    return got


# --- the reference -----------------------------------------------------------------------------


def ref_iou(crop_lo, crop_hi, box):
    ndim = len(crop_lo)
    lo = np.maximum(crop_lo, box[:ndim].astype(np.float64))
    hi = np.minimum(crop_hi, box[ndim:].astype(np.float64))
    if (hi <= lo).any():
        return 0.0
    inter = np.prod(hi - lo)
    area_box = np.prod(box[ndim:].astype(np.float64) - box[:ndim])
    return inter / (np.prod(crop_hi - crop_lo) + area_box - inter)


def ref_kept(crop_lo, crop_hi, boxes, prune=None):
    ndim = len(crop_lo)
    keep = []
    for i, b in enumerate(boxes.astype(np.float64)):
        if prune is None:
            c = (b[:ndim] + b[ndim:]) / 2
            ok = (c >= crop_lo).all() and (c < crop_hi).all()
        else:
            lo, hi = np.maximum(crop_lo, b[:ndim]), np.minimum(crop_hi, b[ndim:])
            inter = 0.0 if (hi <= lo).any() else np.prod(hi - lo)
            ok = inter != 0 and inter / np.prod(b[ndim:] - b[:ndim]) >= prune - 1e-6
        if ok:
            keep.append(i)
    return keep


def ref_remap(crop_lo, crop_hi, box):
    ndim = len(crop_lo)
    ext = crop_hi - crop_lo
    start = (np.maximum(crop_lo, box[:ndim]) - crop_lo) / ext
    end = (np.minimum(crop_hi, box[ndim:]) - crop_lo) / ext
    return np.clip(np.concatenate([start, end]), 0, 1)


def check_sample(anchor, shape, boxes_in, boxes_out, scaling, ar, prune=None, indices=None):
    crop_lo = anchor.astype(np.float64)
    crop_hi = crop_lo + shape
    assert anchor.dtype == F and shape.dtype == F and anchor.shape == shape.shape == (2,)
    whole = np.allclose(anchor, 0) and np.allclose(shape, 1)
    if not whole:
        assert scaling[0] - 1e-6 <= shape.min() and shape.max() <= scaling[1] + 1e-6
        assert ar[0] - 1e-5 <= shape[0] / shape[1] <= ar[1] + 1e-5
        assert (crop_lo >= 0).all() and (crop_hi <= 1 + 1e-6).all()
    keep = list(range(len(boxes_in))) if whole else ref_kept(crop_lo, crop_hi, boxes_in, prune)
    if indices is not None:
        assert indices.dtype == np.int32 and indices.tolist() == keep
    assert boxes_out.dtype == F and boxes_out.shape == (len(keep), 4)
    for i, k in enumerate(keep):
        want = boxes_in[k] if whole else ref_remap(crop_lo, crop_hi, boxes_in[k])
        np.testing.assert_allclose(boxes_out[i], want, atol=2e-6)
    return keep, whole


@pytest.mark.parametrize("prune", [None, 0.0, 0.4])
def test_windows_and_boxes_match_the_reference(prune):
    boxes, labels = batches(1)
    scaling, ar = [0.3, 1.0], [0.5, 2.0]
    anchor, shape, out, lab, idx = run_crop(
        boxes,
        labels,
        iters=3,
        aspect_ratio=ar,
        thresholds=THRESHOLDS,
        scaling=scaling,
        bbox_layout="xyXY",
        num_attempts=10,
        output_bbox_indices=True,
        bbox_prune_threshold=prune,
    )
    cropped = 0
    for s in range(len(anchor)):
        b = boxes[s % len(boxes)]
        keep, whole = check_sample(anchor[s], shape[s], b, out[s], scaling, ar, prune, idx[s])
        assert lab[s].dtype == np.int32 and lab[s].tolist() == [10 + k for k in keep]
        cropped += not whole
    assert cropped > 0  # some windows are real crops


def test_every_box_meets_a_threshold():
    rng = np.random.default_rng(2)
    lo = rng.uniform(0, 0.4, (10, 2))
    boxes = [np.concatenate([x, x + rng.uniform(0.4, 0.6, 2)])[None].astype(F) for x in lo]
    anchor, shape, out = run_crop(
        boxes, iters=3, thresholds=[0.3, 0.5], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2],
        allow_no_crop=False, num_attempts=20, total_num_attempts=20000,
    )  # fmt: skip
    for s in range(len(anchor)):
        lo = anchor[s].astype(np.float64)
        assert ref_iou(lo, lo + shape[s], boxes[s % 10][0]) >= 0.3 - 1e-6
        assert len(out[s]) == 1


def test_overlap_threshold_keeps_one_box_whole():
    boxes, labels = batches(3)
    anchor, shape, _, _ = run_crop(
        boxes,
        labels,
        thresholds=[1.0],
        threshold_type="overlap",
        all_boxes_above_threshold=False,
        scaling=[0.3, 1.0],
        aspect_ratio=[0.5, 2],
        allow_no_crop=False,
        num_attempts=100,
    )
    for s, b in enumerate(boxes):
        lo, hi = anchor[s], anchor[s] + shape[s]
        inside = [(box[:2] >= lo).all() and (box[2:] <= hi + 1e-6).all() for box in b]
        assert any(inside)


def test_fixed_crop_shape_per_sample_and_empty_samples():
    boxes, labels = batches(4, batch=4)
    boxes[1] = np.zeros((0, 4), F)
    labels[1] = np.zeros(0, np.int32)
    input_shape = [
        np.int32([400, 300]),
        np.int32([600, 400]),
        np.int32([640, 480]),
        np.int32([80, 90]),
    ]
    crop = [200, 100]
    anchor, shape, out, lab = run_crop(
        boxes,
        labels,
        iters=2,
        thresholds=[0.0, 0.1],
        crop_shape=crop,
        arg_sources={"input_shape": input_shape},
    )
    for s in range(len(anchor)):
        ins = input_shape[s % 4].astype(np.float64)
        assert shape[s].tolist() == crop  # absolute, float32
        lo_rng = sorted((0.0, ins[0] - crop[0])), sorted((0.0, ins[1] - crop[1]))
        for d in range(2):
            assert lo_rng[d][0] <= anchor[s][d] <= lo_rng[d][1]
            assert anchor[s][d] == int(anchor[s][d])
        rel_lo = anchor[s] / ins
        rel_hi = rel_lo + np.asarray(crop) / ins
        keep = ref_kept(rel_lo, rel_hi, boxes[s % 4])
        assert out[s].shape == (len(keep), 4)
        for i, k in enumerate(keep):
            np.testing.assert_allclose(out[s][i], ref_remap(rel_lo, rel_hi, boxes[s % 4][k]), 2e-6)
    assert out[1].shape == (0, 4) and lab[1].shape == (0,)


def test_fixed_aspect_ratio_in_pixels_with_input_shape():
    boxes, _ = batches(5, batch=4)
    ins = [np.int32([400 + 50 * i, 600 - 30 * i]) for i in range(4)]
    for use_input in (False, True):
        _, shape, _ = run_crop(
            boxes,
            aspect_ratio=(1.0, 1.0),
            scaling=(0.5, 0.8),
            thresholds=[0.0],
            total_num_attempts=100,
            allow_no_crop=False,
            arg_sources={"input_shape": ins} if use_input else None,
        )
        for s, sh in enumerate(shape):
            if use_input:
                np.testing.assert_allclose(ins[s][0] * sh[0], ins[s][1] * sh[1], rtol=1e-6)
            else:
                np.testing.assert_allclose(sh[0], sh[1], rtol=1e-6)


def test_xywh_and_3d_boxes():
    boxes, _ = batches(6, batch=5)
    xywh = [np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], axis=1).astype(F) for b in boxes]
    kw = dict(thresholds=[0.1], scaling=[0.5, 1.0], aspect_ratio=[0.5, 2], num_attempts=20)
    anchor, shape, out = run_crop(xywh, bbox_layout="xyWH", **kw)
    for s, b in enumerate(boxes):
        keep, whole = check_sample(
            anchor[s], shape[s], b, _to_ltrb(out[s]), [0.5, 1.0], [0.5, 2], None
        )
    anchor, shape, out = run_crop(xywh, ltrb=False, **kw)  # the deprecated spelling
    assert all(o.shape[1] == 4 for o in out)
    boxes3, _ = batches(7, batch=4, ndim=3)
    anchor, shape, out = run_crop(
        boxes3, thresholds=[0.0], scaling=[0.5, 1.0], aspect_ratio=[0.5, 2.0], bbox_layout="xyzXYZ"
    )
    for s, b in enumerate(boxes3):
        assert anchor[s].shape == (3,) and out[s].shape[1] == 6
        lo, hi = anchor[s].astype(np.float64), anchor[s] + shape[s].astype(np.float64)
        keep = list(range(len(b))) if np.allclose(shape[s], 1) else ref_kept(lo, hi, b)
        assert len(out[s]) == len(keep)


def _to_ltrb(xywh):
    return np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)


def test_same_seed_same_windows_whatever_the_thread_count():
    boxes, labels = batches(8, batch=12)
    kw = dict(thresholds=THRESHOLDS, scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0], num_attempts=5)
    one = run_crop(boxes, labels, iters=2, num_threads=1, **kw)
    four = run_crop(boxes, labels, iters=2, num_threads=4, **kw)
    for a, b in zip(one, four, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    other = run_crop(boxes, labels, iters=2, seed=10, **kw)
    assert any(not np.array_equal(x, y) for x, y in zip(one[0], other[0], strict=True))


def test_impossible_threshold_warns_and_uses_the_best_window(caplog):
    boxes = [np.array([[0.0, 0.0, 1.0, 1.0], [0.2, 0.2, 0.4, 0.4]], F)]
    with caplog.at_level(logging.WARNING, logger="dlpipe.operators.random_bbox_crop"):
        anchor, shape, out = run_crop(
            boxes, thresholds=[1.0], allow_no_crop=False, total_num_attempts=7, scaling=[0.3, 0.9]
        )
    assert "attempted 7 times" in caplog.text
    assert shape[0].max() <= 0.9 + 1e-6


def test_legacy_class_and_argument_errors():
    boxes, labels = batches(9, batch=2)
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1)
    with pipe:
        b = fn.external_source(source=lambda: boxes)
        outs = ops.RandomBBoxCrop(thresholds=[0.5], scaling=[0.5, 1])(b)
        pipe.set_outputs(*outs)
    assert len(pipe.run()) == 3
    bad = [
        (dict(ltrb=True, bbox_layout="xyXY"), "cannot be given together"),
        (dict(crop_shape=[10, 10]), "crop_shape= needs input_shape="),
        (dict(crop_shape=[1, 1], input_shape=[4, 4], allow_no_crop=True), "allow_no_crop=True"),
        (dict(crop_shape=[1, 1], input_shape=[4, 4], scaling=[0.5, 1]), "scaling= is incompat"),
        (dict(thresholds=[1.5]), r"1.5 is not in \[0, 1\]"),
        (dict(aspect_ratio=[1, 2, 3]), "must have 2 values"),
        (dict(scaling=[0.8, 0.2]), "0 <= min <= max"),
        (dict(threshold_type="area"), "threshold_type='area'"),
        (dict(num_attempts=0), "num_attempts=0"),
        (dict(bbox_layout="xyXW"), "bbox_layout='xyXW' should be a permutation"),
    ]
    for kw, match in bad:
        with pytest.raises(ArgumentError, match=match):
            run_crop(boxes, **kw)
    with pytest.raises(ArgumentError, match=r"box 0 .* out of bounds"):
        run_crop([np.array([[0.5, 0.5, 1.2, 0.9]], F)])
    with pytest.raises(ArgumentError, match=r"shape \(N, 4\) or \(N, 6\)"):
        run_crop([np.zeros((2, 5), F)])
    with pytest.raises(ArgumentError, match="2 labels for 3 bounding boxes"):
        run_crop([random_ltrb(np.random.default_rng(0), 3)], [np.zeros(2, np.int32)])


# --- the chunked search against the one-candidate-at-a-time search ---------------------------


def crop_op(**kw):
    from dlpipe.operators.random_bbox_crop import RandomBBoxCrop

    return RandomBBoxCrop(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(aspect_ratio=[0.5, 2.0], thresholds=THRESHOLDS, scaling=[0.3, 1.0], num_attempts=1),
        dict(aspect_ratio=[0.5, 2.0], thresholds=[0.3, 0.9], scaling=[0.3, 1.0], num_attempts=3),
        dict(thresholds=[0.95], scaling=[0.1, 0.4], total_num_attempts=7, allow_no_crop=False),
        dict(thresholds=[0.2, 0.6], threshold_type="overlap", scaling=[0.2, 0.9], num_attempts=2),
        dict(thresholds=[0.3], all_boxes_above_threshold=False, bbox_prune_threshold=0.3),
        dict(aspect_ratio=[1.0, 1.0], thresholds=[0.1], scaling=[0.2, 0.8], input_shape=[640, 480]),
        dict(crop_shape=[120, 100], input_shape=[300, 200], thresholds=[0.1], total_num_attempts=9),
        dict(aspect_ratio=[0.5, 2.0, 0.5, 2.0, 1.0, 1.0], thresholds=[0.3], scaling=[0.3, 1.0]),
    ],
)
def test_chunked_search_is_the_reference_search(kw, caplog):
    """find_crop scores several options' candidates at once: its windows, kept boxes and
    warnings are those of find_crop_reference, draw for draw, seed for seed."""
    ndim = 3 if len(kw.get("aspect_ratio", [])) == 6 else 2
    op = crop_op(**kw)
    rng = np.random.default_rng(21)
    crop = None if "crop_shape" not in kw else np.asarray(kw["crop_shape"], np.int64)
    inp = None if "input_shape" not in kw else np.asarray(kw["input_shape"], np.int64)
    for i in range(40):
        boxes = random_ltrb(rng, int(rng.integers(0, 7)), ndim)
        lo, hi = boxes[:, :ndim].copy(), boxes[:, ndim:].copy()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            got = op.find_crop(lo, hi, np.random.default_rng(i), crop, inp)
        got_log = [r.getMessage() for r in caplog.records]
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            want = op.find_crop_reference(lo, hi, np.random.default_rng(i), crop, inp)
        assert got_log == [r.getMessage() for r in caplog.records]
        for g, w in zip(got, want, strict=True):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape and np.array_equal(g, w), (i, g, w)
            assert g.dtype == w.dtype or g.dtype.kind == w.dtype.kind == "i"


def test_fast_uniform_draws_are_numpys():
    from dlpipe.operators.random_bbox_crop import RandomBBoxCrop

    a, b = np.random.default_rng(4), np.random.default_rng(4)
    for lo, hi in [(0.3, 1.0), (F(0.1), F(0.9)), (0.0, 0.0), (0.25, 0.5)]:
        want = a.uniform(lo, hi, 3)
        got = RandomBBoxCrop._uniform(b, lo, hi, 3)
        assert np.array_equal(got, want) and got.dtype == want.dtype


@pytest.mark.parametrize(
    "kw",
    [
        dict(aspect_ratio=[0.5, 2.0], thresholds=THRESHOLDS, scaling=[0.3, 1.0]),
        dict(thresholds=[0.2, 0.6], threshold_type="overlap", num_attempts=3, scaling=[0.2, 0.9]),
        dict(thresholds=[0.95], scaling=[0.1, 0.4], total_num_attempts=5, allow_no_crop=False),
        dict(thresholds=[0.3], all_boxes_above_threshold=False, bbox_prune_threshold=0.3),
        dict(
            aspect_ratio=[0.5, 2.0], thresholds=[0.1, 0.5], scaling=[0.2, 1.0], bbox_layout="xyWH"
        ),
        dict(aspect_ratio=[1.0, 1.0], thresholds=[0.1], scaling=[0.2, 0.8]),
        dict(aspect_ratio=[0.5, 2.0, 0.5, 2.0, 0.5, 2.0], thresholds=THRESHOLDS, scaling=[0.3, 1]),
        dict(aspect_ratio=[1.0, 1.0, 0.5, 2.0, 1.5, 1.5], thresholds=THRESHOLDS, scaling=[0.3, 1]),
    ],
)
def test_batch_search_is_each_samples_search(kw, caplog):
    """run_batch_cpu (the pipeline's path) gives every sample the outputs of run_sample with
    the same seed: windows, boxes, labels, indices, dtypes, shapes and warnings; samples
    without boxes included."""
    ndim = 3 if len(kw.get("aspect_ratio", [])) == 6 else 2
    op = crop_op(**kw, output_bbox_indices=True)
    op.has_labels, op.num_outputs = True, 5
    rng = np.random.default_rng(5)
    boxes = [random_ltrb(rng, int(k), ndim) for k in rng.integers(0, 9, 48)]
    if kw.get("bbox_layout") == "xyWH":
        boxes = [np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], axis=1) for b in boxes]
    labels = [np.arange(len(b), dtype=np.int32) * 3 + 1 for b in boxes]
    params = [int(s) for s in rng.integers(0, 2**62, len(boxes))]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got = op.run_batch_cpu([boxes, labels], {}, params)
    got_log = sorted(r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        want = [
            op.run_sample((b, lab), {}, p) for b, lab, p in zip(boxes, labels, params, strict=True)
        ]
    assert got_log == sorted(r.getMessage() for r in caplog.records)
    for i, w in enumerate(want):
        for k, wk in enumerate(w):
            g = np.asarray(got[k][i])
            assert g.dtype == wk.dtype and g.shape == wk.shape, (i, k, g, wk)
            assert np.array_equal(g, wk), (i, k, g, wk)


def test_batch_search_input_shape_and_errors():
    """Per-sample input_shape argument inputs in the batch path; a box out of [0, 1] names
    its sample."""
    op = crop_op(aspect_ratio=[0.5, 2.0], thresholds=[0.0, 0.5], scaling=[0.3, 1.0])
    op._configure(shape_node=True)
    rng = np.random.default_rng(8)
    boxes = [random_ltrb(rng, int(k)) for k in rng.integers(0, 6, 40)]
    shapes = [np.asarray([w, h], np.int64) for w, h in rng.integers(50, 900, (40, 2))]
    params = list(range(100, 140))
    got = op.run_batch_cpu([boxes], {"input_shape": shapes}, params)
    for i, b in enumerate(boxes):
        want = op.run_sample((b,), {"input_shape": shapes[i]}, params[i])
        for k in range(3):
            assert np.array_equal(np.asarray(got[k][i]), want[k]), (i, k)
    bad = [b.copy() for b in boxes]
    assert len(bad[4])
    bad[4][0, 2] = 1.5
    with pytest.raises(ArgumentError, match="out of bounds") as err:
        op.run_batch_cpu([bad], {"input_shape": shapes}, params)
    assert err.value.sample_index == 4


def test_seeded_generators_are_default_rngs():
    """The batch's generators (SeedSequence hashing on numpy arrays, PCG64 seeding on Python
    integers) are np.random.default_rng(seed), state for state and draw for draw."""
    from dlpipe.operators._seeded_generators import GeneratorPool, pcg64_states

    rng = np.random.default_rng(3)
    seeds = [0, 1, 2**32 - 1, 2**32, 2**63 - 2, 2**64 - 1, 2**64, 2**100 + 7, 2**128 - 1]
    seeds += [int(s) for s in rng.integers(0, 2**63 - 1, 300)] + [int(rng.integers(2**40))]
    for seed, got in zip(seeds, pcg64_states(seeds), strict=True):
        want = np.random.default_rng(seed).bit_generator.state["state"]
        assert got == (want["state"], want["inc"]), seed
    assert pcg64_states([-1, 2**128, 1.5]) == [None, None, None]
    pool = GeneratorPool()
    for batch in (seeds[:40], seeds[40:50] + [-3 + 3, 2**130]):
        for seed, gen in zip(batch, pool.seeded(batch), strict=True):
            ref = np.random.default_rng(seed)
            assert np.array_equal(gen.random(3), ref.random(3)), seed
            assert gen.integers(7) == ref.integers(7) and gen.integers(2**40) == ref.integers(2**40)


class _RawStub:
    """A generator stand-in whose raw stream is given (lockstep reads only random_raw)."""

    def __init__(self, values):
        self.values = list(values)
        self.bit_generator = self

    def random_raw(self, k):
        out, self.values = self.values[:k], self.values[k:]
        return np.asarray(out + [0] * (k - len(out)), np.uint64)


def test_lockstep_hands_back_rejected_integer_draws():
    """A raw value Lemire's method rejects for integers(len(options)) (numpy draws again) makes
    lockstep hand the sample back (None) for the ordinary search; other samples are kept."""
    from dlpipe.operators._bbox_crop_lockstep import lockstep
    from dlpipe.operators._bbox_crop_search import Boxes

    op = crop_op(aspect_ratio=[0.5, 2.0], thresholds=THRESHOLDS, scaling=[0.3, 1.0])
    n = 40  # lockstep ends when only n // 16 samples are left
    boxes = random_ltrb(np.random.default_rng(1), 6)
    lo, hi = np.tile(boxes[:, :2], (n, 1)), np.tile(boxes[:, 2:], (n, 1))
    b = Boxes(lo, hi, [6] * n, np.ones(6 * n, F))
    # 0 * 7 = 0 falls under 2**32 % 7 = 4: rejected
    gens = [_RawStub([0] * 8)] + [np.random.default_rng(s) for s in range(1, n)]
    got = lockstep(op, b, gens, list(range(n)), 2, list(range(n)))
    assert not got.done[0] and (0, None) in got.rest
    assert all(st is not None for k, st in got.rest if k != 0)


def test_batch_search_redoes_what_lockstep_hands_back(monkeypatch):
    """Samples handed back by lockstep get the ordinary search from their first draw: the
    outputs stay those of run_sample."""
    import dlpipe.operators.random_bbox_crop as mod

    real = mod.lockstep

    def every_other(op, boxes, gens, samples, ndim, params, shapes):
        found = real(op, boxes, gens, samples, ndim, params, shapes)
        for k in range(1, len(samples), 2):
            if found.done[k]:
                found.done[k] = False
                found.rest.append((k, None))
        return found

    monkeypatch.setattr(mod, "lockstep", every_other)
    op = crop_op(aspect_ratio=[0.5, 2.0], thresholds=THRESHOLDS, scaling=[0.3, 1.0])
    op.has_labels, op.num_outputs = True, 4
    boxes, labels = batches(seed=3, batch=12)
    params = list(range(500, 512))
    got = op.run_batch_cpu([boxes, labels], {}, params)
    for i in range(12):
        want = op.run_sample((boxes[i], labels[i]), {}, params[i])
        for k in range(4):
            assert np.array_equal(np.asarray(got[k][i]), want[k]), (i, k)


def test_window_larger_than_the_image_fails_as_numpy_does():
    """scaling above 1 can make 1 - extent negative; the anchor's uniform(0, negative) raises
    in both paths (the lockstep search hands such a sample to the ordinary one)."""
    op = crop_op(thresholds=[0.5], scaling=[1.2, 1.5], aspect_ratio=[0.1, 10.0])
    boxes, _ = batches(seed=2, batch=4)
    with pytest.raises(ValueError, match="high - low < 0"):
        op.run_batch_cpu([boxes], {}, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="high - low < 0"):
        op.run_sample((boxes[0],), {}, 1)


def test_batch_search_fixed_windows():
    """Fixed windows (crop_shape, input_shape per sample; crops larger than the image and of
    its size included) in the batch path: run_sample's outputs, sample for sample."""
    op = crop_op(thresholds=[0.0, 0.3, 0.6], total_num_attempts=12, output_bbox_indices=True)
    op._configure(True, True)
    op.has_labels, op.num_outputs = True, 5
    rng = np.random.default_rng(12)
    boxes = [random_ltrb(rng, int(k)) for k in rng.integers(0, 7, 40)]
    labels = [np.arange(len(b), dtype=np.int32) for b in boxes]
    inp = [np.asarray(v, np.int64) for v in rng.integers(20, 900, (40, 2))]
    crop = [np.asarray(v, np.int64) for v in rng.integers(10, 900, (40, 2))]
    crop[3] = inp[3].copy()
    args = {"crop_shape": crop, "input_shape": inp}
    params = [int(s) for s in rng.integers(0, 2**62, 40)]
    got = op.run_batch_cpu([boxes, labels], args, params)
    for i in range(40):
        sample_args = {"crop_shape": crop[i], "input_shape": inp[i]}
        want = op.run_sample((boxes[i], labels[i]), sample_args, params[i])
        for k in range(5):
            g = np.asarray(got[k][i])
            assert g.dtype == want[k].dtype and np.array_equal(g, want[k]), (i, k, g, want[k])
