"""Identical transformations on an image and its mask: the same random DataNodes drive crop,
flip, resize (and the same seed drives random_resized_crop), the mask resampled with
INTERP_NN. The image holds its own pixel coordinates (float) and the mask each pixel's index,
so after any transformation the mask must name the pixel the image's coordinates point at:
exactly for crop and flip, to within the interpolation (the nearest pixel) for resampling."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import Pipeline, fn, types
from dlpipe.graph import REGISTRY

SIZES = [(23, 31), (40, 18), (17, 17), (30, 44)]


def coords_and_ids(shape):
    """An HWC float32 image (x, y) of its pixel coordinates and an HWC int32 mask of ids."""
    h, w = shape
    y, x = np.mgrid[:h, :w].astype(np.float32)
    img = np.stack([x, y], axis=-1)
    mask = np.arange(h * w, dtype=np.int32).reshape(h, w)[..., None]
    return img, mask


def check_aligned(img, mask, width, exact):
    """The mask id's (x, y) against the image's coordinates at every output pixel."""
    mx, my = mask[..., 0] % width, mask[..., 0] // width
    if exact:
        np.testing.assert_array_equal(mx, img[..., 0])
        np.testing.assert_array_equal(my, img[..., 1])
    else:  # linear interpolation of a coordinate ramp: pos - 0.5; nearest: floor(pos)
        assert np.abs(mx - img[..., 0]).max() <= 0.5 + 1e-3
        assert np.abs(my - img[..., 1]).max() <= 0.5 + 1e-3


def _pipe(build):
    pairs = [coords_and_ids(s) for s in SIZES]
    pipe = Pipeline(batch_size=len(SIZES), num_threads=2, seed=17)
    with pipe:
        img = fn.external_source(lambda: [p[0] for p in pairs], layout="HWC")
        mask = fn.external_source(lambda: [p[1] for p in pairs], layout="HWC")
        pipe.set_outputs(*build(img, mask))
    pipe.build()
    return pipe


def _batches(pipe, iters=3):
    for _ in range(iters):
        outs = pipe.run()
        yield outs


def crop_flip(img, mask):
    px, py = fn.random.uniform(range=(0, 1)), fn.random.uniform(range=(0, 1))
    h, v = fn.random.coin_flip(), fn.random.coin_flip()
    ops = []
    for x in (img, mask):
        x = fn.crop(x, crop=(12, 15), crop_pos_x=px, crop_pos_y=py)
        ops.append(fn.flip(x, horizontal=h, vertical=v))
    return ops


def resize_same_size(img, mask):
    size = fn.random.uniform(range=(8, 50), shape=2)
    return (
        fn.resize(img, size=size, antialias=False),
        fn.resize(mask, size=size, interp_type=types.INTERP_NN),
    )


def resize_xy(img, mask):
    rx, ry = fn.random.uniform(range=(9, 60)), fn.random.uniform(range=(9, 60))
    return (
        fn.resize(img, resize_x=rx, resize_y=ry, antialias=False),
        fn.resize(mask, resize_x=rx, resize_y=ry, interp_type=types.INTERP_NN),
    )


def random_resized(img, mask):
    kw = dict(size=(20, 24), seed=99)
    return (
        fn.random_resized_crop(img, antialias=False, **kw),
        fn.random_resized_crop(mask, interp_type=types.INTERP_NN, **kw),
    )


CASES = [(crop_flip, True), (resize_same_size, False), (resize_xy, False), (random_resized, False)]


@pytest.mark.parametrize("build, exact", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_image_and_mask_stay_aligned(build, exact):
    seen_shapes = set()
    for img, mask in _batches(_pipe(build)):
        for i, (_, w) in enumerate(SIZES):
            a, m = img.at(i), mask.at(i)
            assert a.shape[:2] == m.shape[:2] and m.dtype == np.int32
            seen_shapes.add(a.shape[:2])
            check_aligned(a, m, w, exact)
    if build is not crop_flip:
        assert len(seen_shapes) > 1 or build is random_resized  # the draws vary


def test_crop_flip_draws_vary_and_are_shared():
    """Not a vacuous alignment: the windows and flips differ from sample to sample."""
    firsts = set()
    for img, _ in _batches(_pipe(crop_flip)):
        for i in range(len(SIZES)):
            firsts.add(tuple(img.at(i)[0, 0]))
    assert len(firsts) > 4


@pytest.mark.skipif("slice" not in REGISTRY, reason="fn.slice not built in this branch")
def test_slice_with_shared_anchor_keeps_alignment():
    def build(img, mask):
        anchor = fn.random.uniform(range=(0.0, 0.4), shape=2)
        shape = fn.random.uniform(range=(0.3, 0.6), shape=2)
        return fn.slice(img, anchor, shape), fn.slice(mask, anchor, shape)

    for img, mask in _batches(_pipe(build)):
        for i, (_, w) in enumerate(SIZES):
            check_aligned(img.at(i), mask.at(i), w, exact=True)


def test_volume_and_mask_stay_aligned_3d():
    rng = np.random.default_rng(0)
    shapes = [(9, 11, 13), (12, 10, 8), (7, 16, 9)]
    vols, masks = [], []
    for d, h, w in shapes:
        z, y, x = np.mgrid[:d, :h, :w].astype(np.float32)
        vols.append(np.stack([x, y, z], axis=-1))
        masks.append(np.arange(d * h * w, dtype=np.int32).reshape(d, h, w, 1))
    pipe = Pipeline(batch_size=3, num_threads=2, seed=rng.integers(100))
    with pipe:
        v = fn.external_source(lambda: vols, layout="DHWC")
        m = fn.external_source(lambda: masks, layout="DHWC")
        pz = fn.random.uniform(range=(0, 1))
        dflip = fn.random.coin_flip()
        size = fn.random.uniform(range=(4, 14), shape=3)
        outs = []
        for x, nn in ((v, False), (m, True)):
            x = fn.crop(x, crop=(6, 7, 7), crop_pos_z=pz, crop_pos_x=pz)
            x = fn.flip(x, depthwise=dflip, horizontal=0)
            kw = dict(interp_type=types.INTERP_NN) if nn else dict(antialias=False)
            outs.append(fn.resize(x, size=size, **kw))
        pipe.set_outputs(*outs)
    pipe.build()
    for _ in range(3):
        vo, mo = pipe.run()
        for i, (_, h, w) in enumerate(shapes):
            a, ids = vo.at(i), mo.at(i)[..., 0]
            assert a.shape[:3] == ids.shape
            mz, my, mx = ids // (h * w), (ids // w) % h, ids % w
            for k, mk in enumerate((mx, my, mz)):
                assert np.abs(mk - a[..., k]).max() <= 0.5 + 1e-3
