"""decoders.image_crop and decoders.image_slice on the CPU: lossless PNGs decoded and cut
against numpy windows computed here, for every way of giving the window (crop / crop_h+crop_w
/ positions as argument inputs; positional anchor+shape, normalized or not, int or float;
named start/end/shape and their relative forms; axes and axis_names), the legacy names, and
the errors DALI raises."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.decoders._windows import CropSpec, DecodeWindow, SliceSpec
from dlpipe.decoders.image_crop import ImageDecoderCrop
from dlpipe.decoders.image_slice import ImageDecoderSlice

SHAPES = [(37, 53), (64, 48), (21, 80), (50, 50)]


def _images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in SHAPES]


def _png(img):
    ok, buf = cv2.imencode(".png", img[:, :, ::-1])  # OpenCV writes BGR
    assert ok
    return np.frombuffer(buf.tobytes(), np.uint8)


def _round(v):  # llround / roundf: halves away from zero
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _run(build, images, extra=(), batch=None):
    """build(encoded_node, *extra_nodes) -> outputs; one iteration."""
    encoded = [_png(img) for img in images]
    pipe = Pipeline(batch_size=batch or len(images), num_threads=2)
    with pipe:
        data = fn.external_source(lambda: encoded)
        nodes = [fn.external_source(lambda e=e: e) for e in extra]
        outs = build(data, *nodes)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    pipe.build()
    return pipe.run()


# --- decoders.image_crop -------------------------------------------------------------------


def ref_crop(img, ch, cw, px=0.5, py=0.5):
    H, W = img.shape[:2]
    y = _round(float(np.float32(py) * np.float32(H - ch)))
    x = _round(float(np.float32(px) * np.float32(W - cw)))
    return img[y : y + ch, x : x + cw]


def test_image_crop_fixed_window_and_positions():
    imgs = _images()
    px = [np.float32(v) for v in (0.0, 0.25, 0.5, 1.0)]
    py = [np.float32(v) for v in (1.0, 0.7, 0.0, 0.33)]
    centred, moved, hw, legacy, alias = _run(
        lambda d, a, b: (
            fn.decoders.image_crop(d, crop=(20, 30)),
            fn.decoders.image_crop(d, crop=(20, 30), crop_pos_x=a, crop_pos_y=b),
            fn.decoders.image_crop(d, crop_h=11, crop_w=17, crop_pos_x=0.2),
            ops.ImageDecoderCrop(crop=(20, 30), crop_pos_y=0.1)(d),
            fn.image_decoder_crop(d, crop=(20, 30)),
        ),
        imgs,
        (px, py),
    )
    assert centred.layout() == "HWC"
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(centred.at(i), ref_crop(img, 20, 30))
        np.testing.assert_array_equal(moved.at(i), ref_crop(img, 20, 30, px[i], py[i]))
        np.testing.assert_array_equal(hw.at(i), ref_crop(img, 11, 17, px=0.2))
        np.testing.assert_array_equal(legacy.at(i), ref_crop(img, 20, 30, py=0.1))
        np.testing.assert_array_equal(alias.at(i), centred.at(i))


def test_image_crop_without_a_window_is_the_whole_image_and_gray_works():
    imgs = _images(1)
    whole, gray = _run(
        lambda d: (
            fn.decoders.image_crop(d),
            fn.decoders.image_crop(d, crop=(10, 12), output_type=types.GRAY),
        ),
        imgs,
    )
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(whole.at(i), img)
        assert gray.at(i).shape == (10, 12, 1)


def test_image_crop_per_sample_crop_size():
    imgs = _images(2)
    ch = [np.int32(v) for v in (5, 10, 15, 20)]
    cw = [np.float32(v) for v in (7, 8, 9, 10)]
    (out,) = _run(lambda d, h, w: fn.decoders.image_crop(d, crop_h=h, crop_w=w), imgs, (ch, cw))
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(out.at(i), ref_crop(img, int(ch[i]), int(cw[i])))


def test_image_crop_window_larger_than_the_image_is_an_error():
    with pytest.raises(
        ArgumentError, match=r"cropping window .* is not valid for image dimensions \[21, 80\]"
    ):
        _run(lambda d: fn.decoders.image_crop(d, crop=(30, 30)), _images())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(crop=(3, 4), crop_h=2), "cannot be combined"),
        (dict(crop=(1, 2, 3, 4)), "2 .* or 3"),
        (dict(crop_pos_x=1.5), "crop_pos_x=1.5"),
        (dict(crop_h="a"), "crop_h"),
    ],
)
def test_image_crop_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        ImageDecoderCrop(**kwargs)


def test_image_crop_h_without_w_is_an_error_per_sample():
    win = CropSpec()
    win.setup_crop("decoders.image_crop", None, 4, None, None, 0.5, 0.5, 0.5, "error", 0)
    with pytest.raises(ArgumentError, match="crop_h and crop_w must be given together"):
        win.spec({})


# --- decoders.image_slice ------------------------------------------------------------------


def ref_slice(img, y0, y1, x0, x1):
    y, x = _round(y0), _round(x0)
    return img[y : _round(y1), x : _round(x1)]


def test_image_slice_positional_normalized_float_inputs():
    imgs = _images(3)
    anchors = [np.array([0.1, 0.2], np.float32), np.array([0.0, 0.5], np.float32)] * 2
    shapes = [np.array([0.5, 0.3], np.float32), np.array([1.0, 0.5], np.float32)] * 2
    (out,) = _run(lambda d, a, s: fn.decoders.image_slice(d, a, s), imgs, (anchors, shapes))
    for i, img in enumerate(imgs):
        H, W = img.shape[:2]
        a, s = anchors[i].astype(np.float64), shapes[i].astype(np.float64)
        # default axis_names "WH": x first; normalized start and start + shape scaled in double
        ref = ref_slice(img, a[1] * H, (a[1] + s[1]) * H, a[0] * W, (a[0] + s[0]) * W)
        np.testing.assert_array_equal(out.at(i), ref)


def test_image_slice_positional_absolute_inputs():
    imgs = _images(4)
    a_int = [np.array([3, 2], np.int32)] * 4
    s_int = [np.array([10, 12], np.int32)] * 4
    a_f = [np.array([3.4, 2.5], np.float32)] * 4
    s_f = [np.array([10.2, 12.0], np.float32)] * 4
    ints, floats, hw = _run(
        lambda d, a, s, af, sf: (
            fn.decoders.image_slice(d, a, s),
            fn.decoders.image_slice(d, af, sf, normalized_anchor=False, normalized_shape=False),
            ops.ImageDecoderSlice(axis_names="HW")(d, a, s),
        ),
        imgs,
        (a_int, s_int, a_f, s_f),
    )
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(ints.at(i), img[2:14, 3:13])
        a, s = a_f[i].astype(np.float64), s_f[i].astype(np.float64)
        ref = ref_slice(img, a[1], a[1] + s[1], a[0], a[0] + s[0])
        np.testing.assert_array_equal(floats.at(i), ref)
        np.testing.assert_array_equal(hw.at(i), img[3:13, 2:14])


def test_image_slice_mixed_normalization():
    imgs = _images(5)
    a = [np.array([0.25, 0.5], np.float32)] * 4
    s = [np.array([9.0, 7.0], np.float32)] * 4
    anchor_rel, shape_rel = _run(
        lambda d, an, sh: (
            fn.decoders.image_slice(d, an, sh, normalized_shape=False),
            fn.decoders.image_slice(
                d, sh, an, normalized_anchor=False, normalized_shape=True, axes=[0, 1]
            ),
        ),
        imgs,
        (a, s),
    )
    for i, img in enumerate(imgs):
        H, W = img.shape[:2]
        y0, x0 = 0.5 * H, 0.25 * W
        np.testing.assert_array_equal(anchor_rel.at(i), ref_slice(img, y0, y0 + 7, x0, x0 + 9))
        # axes=[0, 1]: the values are (y, x); anchor absolute (9, 7), shape (0.25, 0.5) relative
        ref = ref_slice(img, 9, 9 + 0.25 * H, 7, 7 + 0.5 * W)
        np.testing.assert_array_equal(shape_rel.at(i), ref)


def _f32(v, n):
    return float(np.float32(v) * np.float32(n))


def test_image_slice_named_arguments():
    imgs = _images(6)
    starts = [np.array([i, 2 * i], np.int32) for i in range(4)]
    outs = _run(
        lambda d, st: (
            fn.decoders.image_slice(d, start=[4, 3], shape=[10, 8]),
            fn.decoders.image_slice(d, start=[4, 3], end=[20, 11]),
            fn.decoders.image_slice(d, rel_start=[0.1, 0.2], rel_end=[0.7, 0.9]),
            fn.decoders.image_slice(d, rel_start=[0.1, 0.2], rel_shape=[0.3, 0.35]),
            fn.decoders.image_slice(d, rel_shape=[0.5, 0.25]),
            fn.decoders.image_slice(d, start=[5, 1], rel_shape=[0.4, 0.6]),
            fn.decoders.image_slice(d, start=st, shape=[6, 6]),
            fn.decoders.image_slice(d, rel_start=[0.5], axis_names="H"),
        ),
        imgs,
        (starts,),
    )
    for i, img in enumerate(imgs):
        H, W = img.shape[:2]
        refs = [
            img[3:11, 4:14],
            img[3:11, 4:20],
            ref_slice(img, _f32(0.2, H), _f32(0.9, H), _f32(0.1, W), _f32(0.7, W)),
            ref_slice(
                img,
                _f32(0.2, H),
                (float(np.float32(0.2)) + float(np.float32(0.35))) * H,
                _f32(0.1, W),
                (float(np.float32(0.1)) + float(np.float32(0.3))) * W,
            ),
            ref_slice(img, 0, _f32(0.25, H), 0, _f32(0.5, W)),
            ref_slice(img, 1, 1 + _f32(0.6, H), 5, 5 + _f32(0.4, W)),
            img[2 * i : 2 * i + 6, i : i + 6],
            ref_slice(img, _f32(0.5, H), H, 0, W),
        ]
        for k, ref in enumerate(refs):
            np.testing.assert_array_equal(outs[k].at(i), ref, err_msg=f"case {k}")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(start=[1, 2], rel_start=[0.1, 0.2]), '"start" and "rel_start"'),
        (dict(start=[1, 2], end=[3, 4], shape=[1, 1]), "mutually exclusive"),
        (dict(axes=[0], axis_names="H"), '"axes" and "axis_names"'),
        (dict(axis_names="HC"), "axis_names='HC'"),
        (dict(axes=[2]), "axis 2 is out of range"),
    ],
)
def test_image_slice_build_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        ImageDecoderSlice(**kwargs)


def _spec(op_kwargs, args=None, positional=()):
    op = ImageDecoderSlice(**op_kwargs)
    spec = op.spec(args or {}, positional)
    return op.window.window(40, 50, spec)


def test_image_slice_run_errors():
    with pytest.raises(ArgumentError, match="one number per sliced axis"):
        _spec(dict(start=[1, 2, 3], shape=[1, 1, 1]))
    with pytest.raises(ArgumentError, match="expected named slice arguments"):
        _spec({})
    with pytest.raises(ArgumentError, match="not compatible with positional"):
        _spec(dict(start=[1, 1]), positional=(np.zeros(2, np.int32), np.ones(2, np.int32)))
    with pytest.raises(ArgumentError, match="same type"):
        _spec({}, positional=(np.zeros(2, np.int32), np.ones(2, np.float32)))
    with pytest.raises(ArgumentError, match="unsupported type"):
        _spec({}, positional=(np.zeros(2), np.ones(2)))
    with pytest.raises(ArgumentError, match="unexpected number"):
        _spec({}, positional=(np.zeros(3, np.int32), np.ones(3, np.int32)))
    with pytest.raises(ArgumentError, match="before start"):
        _spec(dict(start=[10, 10], end=[5, 20]))
    with pytest.raises(ArgumentError, match="negative shapes"):
        _spec(dict(rel_start=[0.1, 0.1], rel_shape=[-0.1, 0.2]))
    with pytest.raises(ArgumentError, match=r"not valid for image dimensions \[40, 50\]"):
        _spec(dict(start=[45, 0], shape=[10, 10]))
    with pytest.raises(ArgumentError, match="must be integers"):
        _spec(dict(start=[1.5, 2], shape=[1, 1]))
    # an argument input conflicting with a static argument
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        _spec(dict(start=[1, 1], end=[5, 5]), args={"shape": np.array([2, 2], np.int32)})


def test_decode_window_batch_form_matches_single():
    spec = SliceSpec()
    spec.setup_slice("s", {"rel_start": [0.1, 0.3], "rel_end": [0.6, 0.9]}, None, None, 1, 1)
    win = DecodeWindow(spec.resolve, "s")
    rows = np.stack([spec.spec({}, ())] * 3)
    got = win.windows([40, 41, 99], [50, 7, 10], rows)
    want = [win.window(h, w, rows[0]) for h, w in ((40, 50), (41, 7), (99, 10))]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64
