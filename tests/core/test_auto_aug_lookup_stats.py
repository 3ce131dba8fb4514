"""``select``'s fused value-wise maps with statistics (``_lookup_stats``): brightness, contrast,
auto_contrast and equalize with the static tables (posterize, solarize, solarize_add, invert)
in one operator, equal to each augmentation's own operators (the fusion turned off) on images
of varied content: constant images and channels (auto_contrast's and equalize's no-range
case), narrow ranges (rounding ties), gradients, noise, videos. Exact, but contrast within 1
at rare rounding boundaries."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, pipeline_def
from dlpipe.auto_aug import augmentations as a
from dlpipe.auto_aug import auto_augment, rand_augment, trivial_augment
from dlpipe.auto_aug.core import _select, select, signed_bin
from dlpipe.graph import _call_operator

BINS = 11
VALUE_WISE = [
    a.brightness,
    a.contrast,
    a.auto_contrast,
    a.equalize,
    a.posterize,
    a.solarize,
    a.solarize_add,
    a.invert,
    a.identity,
]
# the ops of the value-wise augmentations that the fusion replaces
REPLACED = {
    "brightness",
    "experimental.equalize",
    "reductions.mean",
    "reductions.sum",
    "reductions.min",
    "reductions.max",
    "cast_like",
    "_lookup_rows",
}


def varied(n: int, shape: tuple, seed: int = 0) -> list[np.ndarray]:
    """``n`` uint8 samples of ``shape`` (channels last), of many kinds of content."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = i % 9
        if k == 0:
            x = rng.integers(0, 256, shape)
        elif k == 1:  # constant
            x = np.full(shape, int(rng.integers(0, 256)))
        elif k == 2:  # one constant channel
            x = rng.integers(0, 256, shape)
            x[..., 1] = int(rng.integers(0, 256))
        elif k == 3:  # a narrow range: auto_contrast's and contrast's rounding ties
            lo = int(rng.integers(0, 250))
            x = rng.integers(lo, lo + int(rng.integers(2, 7)), shape)
        elif k == 4:  # a gradient
            x = np.broadcast_to(np.linspace(0, 255, shape[-2])[:, None], shape).round()
        elif k == 5:  # black and white
            x = rng.integers(0, 2, shape) * 255
        elif k == 6:  # dark
            x = rng.integers(0, 12, shape)
        elif k == 7:  # bright, one channel a single value
            x = rng.integers(230, 256, shape)
            x[..., -1] = 255
        else:  # a few values per channel
            x = rng.choice([3, 64, 128, 200], shape)
        out.append(np.ascontiguousarray(x).astype(np.uint8))
    return out


def _run_select(imgs, idx, bins, signs, layout, fused: bool, monkeypatch, ops=VALUE_WISE):
    @pipeline_def(enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: imgs, layout=layout)
        i = fn.external_source(source=lambda: [np.int32(v) for v in idx])
        b = fn.external_source(source=lambda: [np.int32(v) for v in bins])
        s = fn.external_source(source=lambda: [np.int32(v) for v in signs])
        mag = signed_bin(b, random_sign=s)
        return select(ops, i, x, magnitude_bin=mag, num_magnitude_bins=BINS)

    with monkeypatch.context() as m:
        if not fused:
            m.setattr(_select, "_groups", lambda ops, kwargs: [])
        p = pipe(batch_size=len(imgs), num_threads=2, device_id=None, seed=1)
        p.build()
        schemas = [n.op.schema for n in p._ops]
        outs = [[np.asarray(o.at(j)) for j in range(len(imgs))] for o in (p.run()[0],)]
    return schemas, outs[0]


def assert_equal_but_contrast(got, want, idx, contrast: int = 1):
    """Every sample equal, but those of contrast (``idx == contrast``) within 1, rarely."""
    differing = total = 0
    for g, w, i in zip(got, want, idx, strict=True):
        assert g.dtype == w.dtype == np.uint8 and g.shape == w.shape
        if i == contrast:
            d = np.abs(g.astype(int) - w.astype(int))
            assert d.max(initial=0) <= 1
            differing += int((d > 0).sum())
            total += d.size
        else:
            np.testing.assert_array_equal(g, w)
    assert differing <= max(1, total // 1000), (differing, total)


@pytest.mark.parametrize(
    "layout, shapes",
    [
        ("HWC", [(13, 17, 3)]),
        ("HWC", [(1, 1, 3), (7, 40, 3), (31, 9, 3)]),  # ragged, a single pixel
        ("FHWC", [(3, 6, 5, 3), (2, 9, 4, 3)]),
    ],
)
def test_fused_value_wise_equal_each_augmentation(layout, shapes, monkeypatch):
    """Every value-wise augmentation at every bin and sign, on varied content: one
    ``_lookup_stats`` (and no op of the replaced ones) giving the unfused outputs."""
    n_ops = len(VALUE_WISE)
    cases = [(i, b, s) for i in range(n_ops) for b in range(BINS) for s in (0, 1)]
    imgs = [varied(9, shapes[k % len(shapes)], seed=k)[k % 9] for k in range(len(cases))]
    idx, bins, signs = (list(c) for c in zip(*cases, strict=True))
    schemas, got = _run_select(imgs, idx, bins, signs, layout, True, monkeypatch)
    ref_schemas, want = _run_select(imgs, idx, bins, signs, layout, False, monkeypatch)
    assert schemas.count("_lookup_stats") == 1 and not REPLACED & set(schemas)
    assert "_lookup_stats" not in ref_schemas and "reductions.mean" in ref_schemas
    assert_equal_but_contrast(got, want, idx)
    changed = sum(not np.array_equal(g, x) for g, x in zip(got, imgs, strict=True))
    assert changed > len(imgs) // 2


@pytest.mark.parametrize("shape", [(3, 11, 13), (2, 6, 7)])
def test_fused_value_wise_channels_first(shape, monkeypatch):
    """CHW samples (and 2 channels: the per-plane path), every value-wise augmentation but
    contrast (whose luma weights need the channels last): equal to the unfused ops."""
    ops = [op for op in VALUE_WISE if op is not a.contrast]
    cases = [(i, b, s) for i in range(len(ops)) for b in range(0, BINS, 2) for s in (0, 1)]
    imgs = [
        np.moveaxis(varied(9, shape[1:] + shape[:1], seed=k)[k % 9], -1, 0)
        for k in range(len(cases))
    ]
    imgs = [np.ascontiguousarray(x) for x in imgs]
    idx, bins, signs = (list(c) for c in zip(*cases, strict=True))
    schemas, got = _run_select(imgs, idx, bins, signs, "CHW", True, monkeypatch, ops)
    _, want = _run_select(imgs, idx, bins, signs, "CHW", False, monkeypatch, ops)
    assert schemas.count("_lookup_stats") == 1
    assert_equal_but_contrast(got, want, idx, contrast=-1)


def test_lookup_stats_cpu_against_numpy():
    """The operator itself, one kind a sample, against numpy formulas (PIL's: brightness
    scales, auto_contrast stretches each channel to [0, 255], a constant channel unchanged;
    equalize is OpenCV's; contrast blends with the luma mean)."""
    rng = np.random.default_rng(3)
    imgs = [rng.integers(40, 200, (9, 11, 3)).astype(np.uint8) for _ in range(5)]
    imgs[3][..., 0] = 90  # a constant channel
    table = rng.integers(0, 256, (5, 256)).astype(np.uint8)
    kind = np.arange(5, dtype=np.int32)  # table, brightness, contrast, auto_contrast, equalize
    param = np.array([0, 1.5, 0.4, 0, 0], np.float32)

    pipe = Pipeline(batch_size=5, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        r = fn.external_source(source=lambda: [np.int32(v) for v in range(5)])
        kw = {"kind": kind, "param": param, "table": table, "row": r}
        pipe.set_outputs(_call_operator("_lookup_stats", (x,), kw)[0])
    (out,) = pipe.run()
    got = [np.asarray(out.at(i)) for i in range(5)]
    f = [im.astype(np.float64) for im in imgs]
    np.testing.assert_array_equal(got[0], table[0][imgs[0]])
    assert np.abs(got[1] - np.clip(f[1] * 1.5, 0, 255)).max() <= 0.5
    center = (f[2].mean(axis=(0, 1)) * [0.299, 0.587, 0.114]).sum()
    assert np.abs(got[2] - np.clip(center + (f[2] - center) * 0.4, 0, 255)).max() <= 0.5 + 1e-3
    lo, hi = f[3].min(axis=(0, 1)), f[3].max(axis=(0, 1))
    stretched = np.where(hi > lo, (f[3] - lo) * 255 / np.maximum(hi - lo, 1), f[3])
    assert np.abs(got[3] - stretched).max() <= 0.5
    np.testing.assert_array_equal(got[3][..., 0], 90)
    assert got[4].min() == 0 and got[4].max() == 255  # equalized: the full range


def test_lookup_stats_rejects_contrast_without_three_channels():
    imgs = [np.zeros((4, 4, 2), np.uint8)]
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        kw = {"kind": [2], "param": [0.5], "table": np.zeros((1, 256), np.uint8)}
        pipe.set_outputs(_call_operator("_lookup_stats", (x,), kw)[0])
    with pytest.raises(ArgumentError, match="contrast takes 1 or 3 channels"):
        pipe.run()


def _suite(kind, imgs):
    x = fn.external_source(source=lambda: imgs, layout="HWC")
    h, w = imgs[0].shape[:2]
    if kind == "auto_augment":
        return auto_augment.auto_augment(x, shape=[h, w])
    if kind == "rand_augment":
        return rand_augment.rand_augment(x, n=3, m=15)
    return trivial_augment.trivial_augment_wide(x, shape=x.shape())


@pytest.mark.parametrize("kind", ["auto_augment", "rand_augment", "trivial_augment"])
def test_fused_suites_equal_unfused_on_varied_content(kind, monkeypatch):
    """The suites on varied content: the fused graph (one value-wise operator a step, none of
    the replaced ones) gives the unfused outputs, contrast aside within 1. (Two batches of the
    suites on plainer images: tests/core/test_auto_aug.py.)"""
    imgs = varied(36, (8, 10, 3), seed=4)

    def run():
        p = pipeline_def(enable_conditionals=True)(_suite)(
            kind, imgs, batch_size=36, num_threads=2, device_id=None, seed=9
        )
        p.build()
        schemas = [n.op.schema for n in p._ops]
        return schemas, [np.asarray(p.run()[0].at(i)) for i in range(36)]

    schemas, got = run()
    with monkeypatch.context() as m:
        m.setattr(_select, "_groups", lambda ops, kwargs: [])
        _, want = run()
    assert schemas.count("_lookup_stats") == {"rand_augment": 3}.get(
        kind, 1 + (kind == "auto_augment")
    )
    assert not REPLACED & set(schemas)
    differing = 0
    for g, w in zip(got, want, strict=True):
        d = np.abs(g.astype(int) - w.astype(int))
        assert d.max(initial=0) <= 1
        differing += int((d > 0).sum())
    assert differing <= max(1, 36 * 8 * 10 * 3 // 1000), differing


def test_rows_picked_without_conditionals_equal_the_bisection(monkeypatch):
    """The fused lookup's rows come from a few arithmetic nodes indexed by the sample's op
    (``_select._picked_rows``), not from a split and merge per member: the same outputs as the
    bisection gives, every bin and sign, with len(members) - 1 merges fewer."""
    cases = [(i, b, s) for i in range(len(VALUE_WISE)) for b in range(BINS) for s in (0, 1)]
    imgs = [varied(9, (9, 11, 3), seed=k)[k % 9] for k in range(len(cases))]
    idx, bins, signs = (list(c) for c in zip(*cases, strict=True))
    schemas, got = _run_select(imgs, idx, bins, signs, "HWC", True, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(_select, "_picked_rows", lambda *a, **k: None)
        ref_schemas, want = _run_select(imgs, idx, bins, signs, "HWC", True, monkeypatch)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    merges = schemas.count("_conditional_merge")
    members = len(VALUE_WISE) - 1  # identity is a leaf of its own
    assert ref_schemas.count("_conditional_merge") - merges == members - 1, (merges, members)
