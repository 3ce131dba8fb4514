"""dlpipe.auto_aug: each augmentation against a numpy reference at several magnitudes and
signs (per sample), select / policies picking per sample, determinism per seed, the suites'
contents (DALI's), the decorator and the errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, pipeline_def, types
from dlpipe.auto_aug import augmentations as a
from dlpipe.auto_aug import auto_augment, rand_augment, trivial_augment
from dlpipe.auto_aug.core import Policy, augmentation, select, signed_bin

BINS = 11

# --- references ------------------------------------------------------------------------------


def magnitude(lo, hi, b, sign=0, n=BINS):
    m = np.linspace(lo, hi, n, dtype=np.float32)[b]
    return float(-m if sign else m)


def ref_warp(img, inverse, fill=128.0):
    """Bilinear sampling of an HWC image: out(p) = img(inverse(p)), pixel centres at +0.5,
    neighbours outside the image read ``fill``."""
    h, w, _ = img.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    sx, sy = inverse(xs, ys)
    vx, vy = sx - 0.5, sy - 0.5
    x0, y0 = np.floor(vx).astype(int), np.floor(vy).astype(int)
    qx, qy = (vx - x0)[..., None], (vy - y0)[..., None]
    src = img.astype(np.float64)

    def at(yy, xx):
        inside = ((yy >= 0) & (yy < h) & (xx >= 0) & (xx < w))[..., None]
        return np.where(inside, src[yy.clip(0, h - 1), xx.clip(0, w - 1)], fill)

    top = at(y0, x0) * (1 - qx) + at(y0, x0 + 1) * qx
    bottom = at(y0 + 1, x0) * (1 - qx) + at(y0 + 1, x0 + 1) * qx
    return top * (1 - qy) + bottom * qy


def ref_rotate(img, angle_deg):
    h, w, _ = img.shape
    t = np.deg2rad(angle_deg)
    c, s = np.cos(t), np.sin(t)
    cx, cy = w / 2, h / 2
    return ref_warp(
        img, lambda x, y: (cx + c * (x - cx) - s * (y - cy), cy + s * (x - cx) + c * (y - cy))
    )


RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
YIQ2RGB = np.linalg.inv(RGB2YIQ)  # DALI 2.4 composes the exact inverse


def ref_color(img, sat):
    m = YIQ2RGB @ np.diag([1.0, sat, sat]) @ RGB2YIQ
    return img.astype(np.float64) @ m.T


def ref_contrast(img, factor):
    x = img.astype(np.float64)
    center = (x.mean(axis=(0, 1)) * [0.299, 0.587, 0.114]).sum()
    return center + (x - center) * factor


def ref_sharpness(img, m):
    blur = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13
    ident = np.zeros((3, 3))
    ident[1, 1] = 1
    k = -m * blur + (1 + m) * ident
    h, w, _ = img.shape
    pad = np.pad(img.astype(np.float64), ((1, 1), (1, 1), (0, 0)), mode="reflect")
    return sum(k[i, j] * pad[i : i + h, j : j + w] for i in range(3) for j in range(3))


def ref_posterize(img, mag):
    keep = int(min(max(round(mag), 1), 8))
    return img & np.uint8(0xFF ^ ((1 << (8 - keep)) - 1))


def ref_equalize(img):
    out = np.empty_like(img)
    for c in range(img.shape[-1]):
        plane = img[..., c]
        hist = np.bincount(plane.ravel(), minlength=256)
        cdf = np.cumsum(hist)
        first = cdf[np.flatnonzero(hist)[0]]
        if first == cdf[-1]:
            out[..., c] = plane
            continue
        scale = np.float32(255) / np.float32(cdf[-1] - first)
        lut = np.rint(np.maximum(cdf - first, 0).astype(np.float32) * scale)
        out[..., c] = lut.clip(0, 255).astype(np.uint8)[plane]
    return out


def ref_auto_contrast(img):
    x = img.astype(np.float64)
    lo, hi = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    scale = np.where(hi > lo, 255 / np.where(hi > lo, hi - lo, 1), 1.0)
    return np.where(hi > lo, (x - lo) * scale, x)


# --- running an augmentation with per-sample bins and signs ------------------------------------


def images(n=4, shape=(12, 15, 3), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


def run_aug(aug, imgs, bins=None, signs=None, num_bins=BINS, layout="HWC", **kwargs):
    """The augmentation on ``imgs`` with bin ``bins[i]`` and sign ``signs[i]`` for sample i."""
    pipe = Pipeline(batch_size=len(imgs), num_threads=2, device_id=None, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout=layout)
        mag = None
        if bins is not None:
            mag = fn.external_source(source=lambda: [np.int32(b) for b in bins])
            if aug.randomly_negate:
                sign = fn.external_source(source=lambda: [np.int32(s) for s in signs])
                mag = signed_bin(mag, random_sign=sign)
        pipe.set_outputs(aug(x, magnitude_bin=mag, num_magnitude_bins=num_bins, **kwargs))
    (out,) = pipe.run()
    return [np.asarray(out.at(i)) for i in range(len(imgs))]


def assert_close(got, want, tol=1.0):
    assert got.dtype == np.uint8 and got.shape == want.shape
    d = np.abs(got.astype(np.float64) - np.clip(want, 0, 255))
    assert d.max(initial=0) <= tol, d.max()


BINS_SIGNS = ([0, 4, 7, 10], [1, 0, 1, 0])


@pytest.mark.parametrize(
    "aug, inverse",
    [
        (a.shear_x, lambda s: lambda x, y: (x - s * y, y)),
        (a.shear_y, lambda s: lambda x, y: (x, y - s * x)),
    ],
)
def test_shears(aug, inverse):
    imgs = images()
    bins, signs = BINS_SIGNS
    for i, got in enumerate(run_aug(aug, imgs, bins, signs)):
        s = magnitude(0, 0.3, bins[i], signs[i])
        assert_close(got, ref_warp(imgs[i], inverse(s)))


def test_translations_relative_absolute_and_per_sample_shape():
    imgs = images()
    bins, signs = BINS_SIGNS
    h, w = imgs[0].shape[:2]
    got = run_aug(a.translate_x, imgs, bins, signs, shape=[h, w])
    for i in range(4):
        off = magnitude(0, 1, bins[i], signs[i]) * w
        assert_close(got[i], ref_warp(imgs[i], lambda x, y, o=off: (x - o, y)))
    got = run_aug(a.translate_y_no_shape, imgs, bins, signs)
    for i in range(4):
        off = magnitude(0, 250, bins[i], signs[i])
        assert_close(got[i], ref_warp(imgs[i], lambda x, y, o=off: (x, y - o)))
    # shape from the data itself: images of different sizes
    mixed = [images(1, (9 + 3 * i, 10 + i, 3), seed=i)[0] for i in range(4)]
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: mixed, layout="HWC")
        b = fn.external_source(source=lambda: [np.int32(v) for v in bins])
        s = fn.external_source(source=lambda: [np.int32(v) for v in signs])
        pipe.set_outputs(
            a.translate_y(
                x, magnitude_bin=signed_bin(b, s), num_magnitude_bins=BINS, shape=x.shape()
            )
        )
    (out,) = pipe.run()
    for i, img in enumerate(mixed):
        off = magnitude(0, 1, bins[i], signs[i]) * img.shape[0]
        assert_close(np.asarray(out.at(i)), ref_warp(img, lambda x, y, o=off: (x, y - o)))


def test_rotate_and_fill_value():
    imgs = images()
    bins, signs = BINS_SIGNS
    for i, got in enumerate(run_aug(a.rotate, imgs, bins, signs)):
        assert_close(got, ref_rotate(imgs[i], magnitude(0, 30, bins[i], signs[i])))
    got = run_aug(a.shear_x, imgs, [10] * 4, [0] * 4, fill_value=0)
    assert_close(got[0], ref_warp(imgs[0], lambda x, y: (x - 0.3 * y, y), fill=0.0))


@pytest.mark.parametrize(
    "aug, ref",
    [
        (a.brightness, lambda img, p: img.astype(np.float64) * p),
        (a.contrast, ref_contrast),
        (a.color, ref_color),
        (a.sharpness, lambda img, p: ref_sharpness(img, p - 1)),
    ],
)
def test_enhance_operations(aug, ref):
    imgs = images()
    bins, signs = BINS_SIGNS
    for i, got in enumerate(run_aug(aug, imgs, bins, signs)):
        param = 1 + magnitude(0, 0.9, bins[i], signs[i])
        assert_close(got, ref(imgs[i], param))


def test_posterize_solarize_solarize_add():
    imgs = images()
    bins = [0, 3, 8, 10]
    for i, got in enumerate(run_aug(a.posterize, imgs, bins)):
        np.testing.assert_array_equal(got, ref_posterize(imgs[i], magnitude(0, 4, bins[i])))
    for i, got in enumerate(run_aug(a.solarize, imgs, bins)):
        thr = magnitude(256, 0, bins[i])
        want = np.where(imgs[i] < thr, imgs[i], 255 - imgs[i])
        np.testing.assert_array_equal(got, want)
    for i, got in enumerate(run_aug(a.solarize_add, imgs, bins)):
        shift = int(magnitude(0, 110, bins[i]))
        want = np.where(imgs[i] < 128, imgs[i].astype(int) + shift, imgs[i])
        np.testing.assert_array_equal(got, want)


def test_parameterless_augmentations():
    imgs = images()
    low = [(img // 4 + 60).astype(np.uint8) for img in imgs]
    low[1][..., 2] = 7  # a channel of one value
    np.testing.assert_array_equal(run_aug(a.invert, imgs)[0], 255 - imgs[0])
    for got, img in zip(run_aug(a.equalize, low), low, strict=True):
        np.testing.assert_array_equal(got, ref_equalize(img))
    for got, img in zip(run_aug(a.auto_contrast, low), low, strict=True):
        assert_close(got, ref_auto_contrast(img))
    np.testing.assert_array_equal(run_aug(a.identity, imgs)[3], imgs[3])


@pytest.mark.parametrize(
    "aug", [a.shear_y, a.rotate, a.contrast, a.color, a.sharpness, a.equalize, a.auto_contrast]
)
def test_videos_are_augmented_frame_by_frame(aug):
    """FHWC videos: every frame gets the sample's parameter, and per-image statistics (the
    contrast centre, histograms, ranges) are the frame's."""
    rng = np.random.default_rng(9)
    videos = [rng.integers(30, 200, (3, 9, 11, 3), dtype=np.uint8) for _ in range(2)]
    bins, signs = [3, 8], [1, 0]
    got = run_aug(aug, videos, bins, signs, layout="FHWC")
    for i, video in enumerate(videos):
        frames = run_aug(aug, list(video), [bins[i]] * 3, [signs[i]] * 3)
        np.testing.assert_array_equal(got[i], np.stack(frames))


def test_int_bin_random_sign_warns_and_is_one_of_two():
    imgs = images(8)
    pipe = Pipeline(batch_size=8, num_threads=1, device_id=None, seed=2)
    with pipe, pytest.warns(Warning, match="unsigned `magnitude_bin`"):
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        pipe.set_outputs(a.brightness(x, magnitude_bin=5, num_magnitude_bins=BINS))
    (out,) = pipe.run()
    seen = set()
    for i, img in enumerate(imgs):
        got = np.asarray(out.at(i))
        for sign in (0, 1):
            want = img.astype(np.float64) * (1 + magnitude(0, 0.9, 5, sign))
            if np.abs(got - np.clip(want, 0, 255)).max() <= 1:
                seen.add(sign)
                break
        else:
            raise AssertionError(f"sample {i} is neither sign")
    assert seen == {0, 1}


# --- select and the automatic augmentations ------------------------------------------------------


def test_select_applies_the_chosen_op_per_sample():
    imgs = images(6)
    idx = [2, 0, 1, 1, 0, 2]

    @pipeline_def(enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        i = fn.external_source(source=lambda: [np.int32(v) for v in idx])
        return select(
            [a.invert, a.identity, a.posterize], i, x, magnitude_bin=2, num_magnitude_bins=5
        )

    (out,) = pipe(batch_size=6, num_threads=2, device_id=None).run()
    refs = [
        lambda img: 255 - img,
        lambda img: img,
        lambda img: ref_posterize(img, magnitude(0, 4, 2, n=5)),
    ]
    for k, (img, i) in enumerate(zip(imgs, idx, strict=True)):
        np.testing.assert_array_equal(out.at(k), refs[i](img))


@pipeline_def(enable_conditionals=True)
def _policy_pipe(imgs, policy, aug_seed=None):
    x = fn.external_source(source=lambda: imgs, layout="HWC")
    return auto_augment.apply_auto_augment(policy, x, seed=aug_seed)


def test_policy_picks_sub_policies_per_sample_with_their_probabilities():
    imgs = images(16, (6, 7, 3))
    policy = Policy(
        "test",
        5,
        [
            [(a.invert, 1.0, None), (a.posterize, 1.0, 1)],
            [(a.identity, 1.0, None)],
            [(a.solarize, 1.0, 4)],
        ],
    )
    (out,) = _policy_pipe(imgs, policy, batch_size=16, num_threads=2, device_id=None, seed=3).run()
    choices = [
        lambda img: ref_posterize(255 - img, magnitude(0, 4, 1, n=5)),
        lambda img: img,
        lambda img: np.where(img < magnitude(256, 0, 4, n=5), img, 255 - img),
    ]
    picked = []
    for i, img in enumerate(imgs):
        got = np.asarray(out.at(i))
        hits = [k for k, ref in enumerate(choices) if np.array_equal(got, ref(img))]
        assert hits, f"sample {i} matches no sub-policy"
        picked.append(hits[0])
    assert set(picked) == {0, 1, 2}
    with pytest.warns(Warning, match="probability 0"):
        never = Policy("never", 3, [[(a.invert, 0.0, None)]])
    (out,) = _policy_pipe(imgs, never, batch_size=16, num_threads=1, device_id=None).run()
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(out.at(i), img)


@pipeline_def(enable_conditionals=True)
def _auto_pipe(kind, imgs, aug_seed):
    x = fn.external_source(source=lambda: imgs, layout="HWC")
    h, w = imgs[0].shape[:2]
    if kind == "auto_augment":
        return auto_augment.auto_augment(x, shape=[h, w], seed=aug_seed)
    if kind == "reduced_image_net":
        return auto_augment.auto_augment(x, "reduced_image_net", seed=aug_seed)
    if kind == "rand_augment":
        return rand_augment.rand_augment(x, n=3, m=15, seed=aug_seed)
    return trivial_augment.trivial_augment_wide(x, shape=x.shape(), seed=aug_seed)


@pytest.mark.parametrize(
    "kind", ["auto_augment", "reduced_image_net", "rand_augment", "trivial_augment"]
)
def test_deterministic_per_seed(kind):
    imgs = images(8, (10, 12, 3))

    def run(pipe_seed, seed=None):
        pipe = _auto_pipe(
            kind, imgs, seed, batch_size=8, num_threads=2, device_id=None, seed=pipe_seed
        )
        return [[np.asarray(o.at(i)) for i in range(8)] for o in (pipe.run()[0], pipe.run()[0])]

    first, again, other = run(7), run(7), run(8)
    for b in range(2):
        for i in range(8):
            np.testing.assert_array_equal(first[b][i], again[b][i])
            assert first[b][i].shape == imgs[i].shape and first[b][i].dtype == np.uint8
    assert any(not np.array_equal(x, y) for x, y in zip(first[0], other[0], strict=True))
    assert any(not np.array_equal(x, img) for x, img in zip(first[0], imgs, strict=True))


def test_rand_augment_applies_n_ops_and_n0_warns():
    imgs = images(12, (5, 6, 3))

    @pipeline_def(enable_conditionals=True)
    def pipe(n):
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        return rand_augment.apply_rand_augment([a.invert, a.identity], x, n=n, m=0)

    for n in (1, 3):  # one op: scalar draws; several: one draw per level
        (out,) = pipe(n, batch_size=12, num_threads=1, device_id=None, seed=4).run()
        kinds = set()
        for i, img in enumerate(imgs):
            got = np.asarray(out.at(i))
            assert np.array_equal(got, img) or np.array_equal(got, 255 - img)
            kinds.add(np.array_equal(got, img))
        assert kinds == {True, False}
    with pytest.warns(Warning, match="n=0"):
        p = pipe(0, batch_size=12, num_threads=1, device_id=None)
    np.testing.assert_array_equal(p.run()[0].at(0), imgs[0])


def test_trivial_augment_draws_a_bin_per_sample():
    imgs = images(16, (4, 4, 3))

    @pipeline_def(enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        return trivial_augment.apply_trivial_augment([a.posterize], x, num_magnitude_bins=9)

    (out,) = pipe(batch_size=16, num_threads=1, device_id=None, seed=5).run()
    used = set()
    for i, img in enumerate(imgs):
        got = np.asarray(out.at(i))
        hits = [
            b for b in range(9) if np.array_equal(got, ref_posterize(img, magnitude(0, 4, b, n=9)))
        ]
        assert hits
        used.add(ref_posterize(np.uint8([255]), magnitude(0, 4, hits[0], n=9))[0])
    assert len(used) > 2


# --- suites: DALI's contents ------------------------------------------------------------------


def _describe(aug):
    to_param = aug.mag_to_param.__name__ if aug._mag_to_param is not None else None
    mag = aug.mag_range if aug.mag_range is None else tuple(float(v) for v in aug.mag_range)
    return (aug.name, mag, aug.randomly_negate, to_param)


SHIFT, KERNEL, POSTER = "shift_enhance_range", "sharpness_kernel", "poster_mask_uint8"


def test_rand_augment_suite_is_dalis():
    want = [
        ("translate_x", (0.0, 100.0), True, "warp_x_param"),
        ("translate_y", (0.0, 100.0), True, "warp_y_param"),
        ("shear_x", (0.0, 0.3), True, "warp_x_param"),
        ("shear_y", (0.0, 0.3), True, "warp_y_param"),
        ("rotate", (0.0, 30.0), True, None),
        ("brightness", (0.0, 0.9), True, SHIFT),
        ("contrast", (0.0, 0.9), True, SHIFT),
        ("color", (0.0, 0.9), True, SHIFT),
        ("sharpness", (0.0, 0.9), True, KERNEL),
        ("posterize", (8.0, 4.0), False, POSTER),
        ("solarize", (256.0, 0.0), False, None),
        ("equalize", None, False, None),
        ("auto_contrast", None, False, None),
        ("identity", None, False, None),
    ]
    assert [_describe(x) for x in rand_augment.get_rand_augment_suite()] == want
    rel = rand_augment.get_rand_augment_suite(use_shape=True)
    assert _describe(rel[0])[1] == (0.0, 100 / 224)
    non_mono = [_describe(x) for x in rand_augment.get_rand_augment_non_monotonic_suite()]
    assert non_mono[5] == ("brightness", (0.1, 1.9), False, None)
    assert non_mono[8] == ("sharpness", (0.1, 1.9), False, "sharpness_kernel_shifted")
    assert non_mono[9] == ("posterize", (0.0, 4.0), False, POSTER)
    assert non_mono[10] == ("solarize", (0.0, 256.0), False, None)


def test_trivial_augment_suite_is_dalis():
    want = [
        ("translate_x", (0.0, 32.0), True, "warp_x_param"),
        ("translate_y", (0.0, 32.0), True, "warp_y_param"),
        ("shear_x", (0.0, 0.99), True, "warp_x_param"),
        ("shear_y", (0.0, 0.99), True, "warp_y_param"),
        ("rotate", (0.0, 135.0), True, None),
        ("brightness", (0.01, 0.99), True, SHIFT),
        ("contrast", (0.01, 0.99), True, SHIFT),
        ("color", (0.01, 0.99), True, SHIFT),
        ("sharpness", (0.01, 0.99), True, KERNEL),
        ("posterize", (8.0, 2.0), False, POSTER),
        ("solarize", (256.0, 0.0), False, None),
        ("equalize", None, False, None),
        ("auto_contrast", None, False, None),
        ("identity", None, False, None),
    ]
    assert [_describe(x) for x in trivial_augment.get_trivial_augment_wide_suite()] == want
    rel = trivial_augment.get_trivial_augment_wide_suite(
        use_shape=True, max_translate_rel=(0.2, 0.5)
    )
    assert [_describe(x)[1] for x in rel[:2]] == [(0.0, 0.5), (0.0, 0.2)]  # x: width, y: height


def test_image_net_policy_is_dalis():
    policy = auto_augment.get_image_net_policy()
    assert policy.name == "ImageNetPolicy" and policy.num_magnitude_bins == 11
    subs = [[(aug.name, p, mag) for aug, p, mag in sub] for sub in policy.sub_policies]
    assert len(subs) == 25
    assert subs[0] == [("equalize", 0.8, None), ("shear_y", 0.8, 4)]
    assert subs[15] == [("rotate", 1.0, 7), ("translate_y", 0.8, 9)]
    assert subs[16] == [("solarize", 0.8, 4)]
    assert subs[24] == [("color", 0.8, 6), ("rotate", 0.4, 5)]
    augs = {name: _describe(aug) for name, aug in policy.augmentations.items()}
    assert augs["color"] == ("color", (0.1, 1.9), False, None)
    assert augs["solarize"] == ("solarize", (0.0, 256.0), False, None)
    assert augs["solarize_add"] == ("solarize_add", (0.0, 110.0), False, "solarize_add_shift")
    assert augs["translate_y"] == ("translate_y", (0.0, 250.0), True, "warp_y_param")
    assert sorted(augs) == sorted(
        ["equalize", "shear_y", "color", "rotate", "solarize", "solarize_add", "shear_x",
         "invert", "posterize", "auto_contrast", "translate_y"]
    )  # fmt: skip
    for getter, name, n in [
        (auto_augment.get_reduced_cifar10_policy, "ReducedCifar10Policy", 25),
        (auto_augment.get_svhn_policy, "SvhnPolicy", 25),
        (auto_augment.get_reduced_image_net_policy, "ReducedImageNetPolicy", 25),
    ]:
        p = getter()
        assert p.name == name and len(p.sub_policies) == n and p.num_magnitude_bins == 11
    cifar = auto_augment.get_reduced_cifar10_policy()
    assert [(x.name, q, m) for x, q, m in cifar.sub_policies[2]] == [
        ("sharpness", 0.8, 1),
        ("sharpness", 0.9, 3),
    ]


def test_augmentation_map_of_a_policy():
    policy = Policy("p", 3, [[(a.invert, 0.5, None), (a.rotate, 0.5, 1)], [(a.rotate, 0.5, 2)]])
    m, augs = auto_augment._sub_policy_to_augmentation_matrix_map(policy)
    assert [[x.name for x in stage] for stage in augs] == [
        ["invert", "rotate", "identity"],
        ["rotate", "identity"],
    ]
    assert m.tolist() == [[0, 0], [1, 1]]


# --- the decorator and errors -------------------------------------------------------------------


def test_decorator_and_custom_augmentation_with_conditionals():
    @augmentation(mag_range=(0, 100), mag_to_param=lambda m: np.float32(m))
    def brighten_dark(data, amount):
        # an `if` on a DataNode inside a user augmentation is converted, as DALI does
        if fn.reductions.mean(data) < 128:
            data = fn.cast_like(data + amount, data)
        return data

    assert brighten_dark.name == "brighten_dark" and brighten_dark.mag_range == (0, 100)
    dark = np.full((3, 3, 3), 10, np.uint8)
    bright = np.full((3, 3, 3), 200, np.uint8)

    @pipeline_def(enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: [dark, bright], layout="HWC")
        return brighten_dark(x, magnitude_bin=1, num_magnitude_bins=2)

    (out,) = pipe(batch_size=2, num_threads=1, device_id=None).run()
    np.testing.assert_array_equal(out.at(0), dark + 100)
    np.testing.assert_array_equal(out.at(1), bright)
    renamed = brighten_dark.augmentation(name="other", mag_range=(0, 1))
    assert renamed.name == "other" and renamed.op is brighten_dark.op
    assert "Augmentation(" in repr(renamed)
    with pytest.raises(ArgumentError, match="already decorated"):
        augmentation(brighten_dark)
    with pytest.raises(ArgumentError, match="at least two positional arguments"):
        augmentation(lambda data: data)
    with pytest.raises(ArgumentError, match="not callable"):
        augmentation(5)


def _build(fun):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: images(2), layout="HWC")
        fun(x)


def test_errors():
    with pytest.raises(ArgumentError, match="requires `shape` argument"):
        _build(lambda x: trivial_augment.apply_trivial_augment(
            trivial_augment.get_trivial_augment_wide_suite(use_shape=True), x))  # fmt: skip
    with pytest.raises(ArgumentError, match="`foo` is not used by any"):
        _build(lambda x: rand_augment.apply_rand_augment([a.invert], x, 1, 0, foo=1))
    with pytest.raises(ArgumentError, match="`blur` was specified in `excluded`"):
        _build(lambda x: rand_augment.rand_augment(x, 1, 1, excluded=["blur"]))
    with pytest.raises(ArgumentError, match="`m` must be an integer"):
        _build(lambda x: rand_augment.rand_augment(x, 1, 31))
    with pytest.raises(ArgumentError, match="`policy_name` must be"):
        _build(lambda x: auto_augment.auto_augment(x, "cifar"))
    with pytest.raises(ArgumentError, match="must not be specified"):
        _build(lambda x: auto_augment.auto_augment(x, "reduced_image_net", shape=[4, 4]))
    with pytest.raises(ArgumentError, match="`max_translate_rel` cannot be used without"):
        trivial_augment.get_trivial_augment_wide_suite(max_translate_rel=0.5)
    with pytest.raises(ArgumentError, match="`num_magnitude_bins` argument is missing"):
        _build(lambda x: a.rotate(x, magnitude_bin=1))
    with pytest.raises(ArgumentError, match="requires `magnitude_bin`"):
        _build(lambda x: a.posterize(x, num_magnitude_bins=3))
    bad = a.rotate.augmentation(mag_to_param=lambda m: np.zeros(1 if m < 15 else 2))
    with pytest.raises(ArgumentError, match="same type and shape"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _build(lambda x: bad(x, magnitude_bin=signed_bin(fn.random.uniform(
            values=[0, 1], dtype=types.INT32)), num_magnitude_bins=4))  # fmt: skip
    node_param = a.posterize.augmentation(mag_to_param=lambda m: fn.random.uniform())
    with pytest.raises(ArgumentError, match="returned `DataNode`"):
        _build(lambda x: node_param(x, magnitude_bin=1, num_magnitude_bins=3))
    with pytest.raises(ArgumentError, match="must be an int or _DataNode"):
        signed_bin(1.5)
    with pytest.raises(ArgumentError, match="Magnitude of the augmentation must be"):
        Policy("p", 3, [[(a.rotate, 0.5, 3)]])
    with pytest.raises(ArgumentError, match="magnitude bin is required"):
        Policy("p", 3, [[(a.rotate, 0.5, None)]])
    with pytest.raises(ArgumentError, match=r"from `\[0, 1\]` range"):
        Policy("p", 3, [[(a.invert, 1.5, None)]])
    with pytest.raises(ArgumentError, match="@augmentation"):
        Policy("p", 3, [[(lambda x, y: x, 0.5, None)]])
    with pytest.warns(Warning, match="will be ignored"):
        Policy("p", 3, [[(a.invert, 0.5, 1)]])


def test_parameters_reach_the_op_as_computed():
    """The op gets exactly ``mag_to_param(magnitudes[bin] * (-1) ** sign)``, per sample, with
    the parameter's dtype; explicit magnitude arrays; no range: None."""

    @augmentation(mag_range=np.array([1, 1, 2, 3, 5, 8]))
    def explicit(data, param):
        return param

    @augmentation(
        mag_range=(201, 211),
        randomly_negate=True,
        mag_to_param=lambda m: np.array([m, m + 2, 42], dtype=np.int16),
    )
    def vector(data, param):
        return param

    @augmentation
    def no_range(data, param):
        assert param is None
        return data

    data = types.Constant(42)
    assert no_range(data, magnitude_bin=3) is data  # works outside a pipeline too
    pipe = Pipeline(batch_size=6, num_threads=1, device_id=None)
    with pipe:
        bins = fn.external_source(source=lambda: [np.int32(i) for i in range(6)])
        signs = fn.external_source(source=lambda: [np.int32(i % 2) for i in range(6)])
        pipe.set_outputs(
            explicit(data, magnitude_bin=bins),
            explicit(data, magnitude_bin=4),
            vector(data, magnitude_bin=signed_bin(bins, signs), num_magnitude_bins=11),
        )
    per_sample, const, vec = pipe.run()
    np.testing.assert_array_equal(
        [np.asarray(per_sample.at(i)) for i in range(6)], [1, 1, 2, 3, 5, 8]
    )
    np.testing.assert_array_equal([np.asarray(const.at(i)) for i in range(6)], [5] * 6)
    for i in range(6):
        m = (201 + i) * (-1) ** (i % 2)
        got = np.asarray(vec.at(i))
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, [m, m + 2, 42])


def test_augmentation_reset_to_defaults():
    @augmentation(
        mag_range=(0, 10), randomly_negate=True, mag_to_param=abs, param_device="gpu", name="x"
    )
    def dummy(data, _):
        return data

    reset = dummy.augmentation(
        mag_range=None, randomly_negate=None, mag_to_param=None, param_device=None, name=None
    )
    assert reset.mag_range is None and reset.randomly_negate is False
    assert reset.param_device == "cpu" and reset.name == "dummy"
    assert reset.mag_to_param(3.0) == np.array(3.0)
    kept = dummy.augmentation(name="y")
    assert (kept.mag_range, kept.randomly_negate, kept.param_device) == ((0, 10), True, "gpu")


# --- the warps select fuses ----------------------------------------------------------------------


def _svhn_pipe(imgs, aug_seed=None):
    x = fn.external_source(source=lambda: imgs, layout="HWC")
    h, w = imgs[0].shape[:2]
    return auto_augment.auto_augment(x, "svhn", shape=[h, w], seed=aug_seed)


@pytest.mark.parametrize(
    "kind, warps_each, expected_lookups",
    [
        ("auto_augment", (6, 2), 2),  # ImageNet: shear_x, shear_y, rotate; the same + translate_y
        ("svhn", (5, 2), 2),
        ("rand_augment", (15, 3), 3),  # 2 translations, 2 shears, rotate at each of 3 steps
        ("trivial_augment", (5, 1), 1),
    ],
)
def test_fused_warps_and_lookups_equal_one_op_per_augmentation(
    kind, warps_each, expected_lookups, monkeypatch
):
    """``select`` warps the samples of the shears, translations and rotation with one
    operator and maps those of posterize, solarize, solarize_add, invert, brightness,
    contrast, auto_contrast and equalize with one lookup per step (``_lookup_stats``): the
    outputs equal those of each augmentation's own operators (the fusion turned off), batch
    after batch."""
    from dlpipe.auto_aug.core import _select

    imgs = images(48, (10, 12, 3))

    def run():
        make = pipeline_def(enable_conditionals=True)(_svhn_pipe) if kind == "svhn" else None
        kw = dict(batch_size=48, num_threads=2, device_id=None, seed=5)
        pipe = make(imgs, **kw) if make else _auto_pipe(kind, imgs, None, **kw)
        pipe.build()
        warps = sum(n.op.schema in ("warp_affine", "rotate", "_warp_fused") for n in pipe._ops)
        lookups = sum(n.op.schema in ("_lookup_rows", "_lookup_stats") for n in pipe._ops)
        outs = [[pipe.run()[0].at(i) for i in range(48)] for _ in range(2)]
        return warps, lookups, outs

    warps, lookups, out = run()
    with monkeypatch.context() as m:
        m.setattr(_select, "_groups", lambda ops, kwargs: [])
        ref_warps, ref_lookups, ref = run()
    assert (ref_warps, warps) == warps_each
    assert lookups == expected_lookups and ref_lookups == 0, (lookups, ref_lookups)
    changed = 0
    for b in range(2):
        for i in range(48):
            assert out[b][i].dtype == ref[b][i].dtype == np.uint8
            np.testing.assert_array_equal(out[b][i], ref[b][i])
            changed += not np.array_equal(out[b][i], imgs[i])
    assert changed > 48


def test_fused_warps_keep_each_samples_settings_and_data_keyword():
    """A select over warps, the rotation and other ops, the samples given by keyword: the three
    geometric ones are one operator, and each sample gets its own augmentation (numpy
    references)."""
    imgs = images(8)
    idx = [0, 1, 2, 3, 1, 0, 4, 4]
    shear_x = a.shear_x.augmentation((0, 0.3), True)
    translate = a.translate_x_no_shape.augmentation((0, 4), True)
    signs = [0, 0, 1, 0, 0, 1, 0, 1]

    @pipeline_def(enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        i = fn.external_source(source=lambda: [np.int32(v) for v in idx])
        sign = fn.external_source(source=lambda: [np.int32(v) for v in signs])
        return select(
            [shear_x, a.invert, translate, a.identity, a.rotate],
            i,
            data=x,
            magnitude_bin=signed_bin(5, sign),
            num_magnitude_bins=BINS,
        )

    p = pipe(batch_size=8, num_threads=2, device_id=None)
    p.build()
    schemas = [n.op.schema for n in p._ops]
    assert schemas.count("_warp_fused") == 1 and "warp_affine" not in schemas
    assert "rotate" not in schemas
    (out,) = p.run()
    s, t, r = magnitude(0, 0.3, 5), magnitude(0, 4, 5), magnitude(0, 30, 5)
    refs = [
        lambda img, sg: ref_warp(img, lambda x, y: (x - (-s if sg else s) * y, y)),
        lambda img, sg: 255 - img,
        lambda img, sg: ref_warp(img, lambda x, y: (x - (-t if sg else t), y)),
        lambda img, sg: img,
        lambda img, sg: ref_rotate(img, -r if sg else r),
    ]
    for k, (img, i) in enumerate(zip(imgs, idx, strict=True)):
        np.testing.assert_allclose(out.at(k), refs[i](img, signs[k]), atol=1)


def _point_augmentations():
    """The value-wise augmentations of the suites, as the suites configure them."""
    augs = list(rand_augment.get_rand_augment_suite(use_shape=True))
    augs += trivial_augment.get_trivial_augment_wide_suite(use_shape=True)
    for get in (auto_augment.get_image_net_policy, auto_augment.get_svhn_policy):
        augs += get(use_shape=True).augmentations.values()
    augs.append(a.posterize)
    seen, out = set(), []
    for aug in augs:
        key = (aug.op, repr(aug))
        if getattr(aug.op, "point_table", None) is not None and key not in seen:
            seen.add(key)
            out.append(aug)
    return out


@pytest.mark.parametrize("num_bins", [11, 31])
@pytest.mark.parametrize("aug", _point_augmentations(), ids=lambda g: f"{g.name}{g.mag_range}")
def test_lookup_tables_equal_the_arithmetic(aug, num_bins):
    """Every row of a value-wise augmentation's tables (each bin, each sign) maps all 256
    values as the augmentation's own arithmetic does."""
    values = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    with Pipeline(batch_size=1, num_threads=1, device_id=None):
        per_sample_bin = fn.external_source(source=lambda: [np.int32(0)])
        table = aug.lookup_table(per_sample_bin, num_bins)
    if aug.mag_range is None:
        bins, signs = [0], [0]
    elif aug.randomly_negate:
        bins, signs = [k // 2 for k in range(2 * num_bins)], [k % 2 for k in range(2 * num_bins)]
    else:
        bins, signs = list(range(num_bins)), [0] * num_bins
    assert table.dtype == np.uint8 and table.shape == (len(bins), 256)
    outs = run_aug(aug, [values] * len(bins), bins, signs, num_bins=num_bins)
    for row, out in zip(table, outs, strict=True):
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(row[values], out)


@pytest.mark.parametrize("kind", ["auto_augment", "rand_augment", "trivial_augment"])
def test_fused_branches_on_videos_with_border_and_nearest_equal_unfused(kind, monkeypatch):
    """The fused warps and lookups on FHWC videos, with the border repeated (``fill_value=None``)
    and nearest-neighbour interpolation: the outputs of the unfused branches."""
    from dlpipe.auto_aug.core import _select

    rng = np.random.default_rng(4)
    vids = [rng.integers(0, 256, (3, 10, 12, 3), dtype=np.uint8) for _ in range(24)]
    kw = dict(fill_value=None, interp_type=types.INTERP_NN)

    def run():
        @pipeline_def(enable_conditionals=True)
        def pipe():
            x = fn.external_source(source=lambda: vids, layout="FHWC")
            if kind == "auto_augment":
                return auto_augment.auto_augment_image_net(x, shape=[10, 12], **kw)
            if kind == "rand_augment":
                return rand_augment.rand_augment(x, n=2, m=20, **kw)
            return trivial_augment.trivial_augment_wide(x, shape=[10, 12], **kw)

        p = pipe(batch_size=24, num_threads=2, device_id=None, seed=9)
        return [[np.asarray(o.at(i)) for i in range(24)] for o in (p.run()[0], p.run()[0])]

    out = run()
    monkeypatch.setattr(_select, "_groups", lambda ops, kwargs: [])
    ref = run()
    for b in range(2):
        for x, y in zip(out[b], ref[b], strict=True):
            assert x.dtype == y.dtype == np.uint8 and x.shape == (3, 10, 12, 3)
            np.testing.assert_array_equal(x, y)
