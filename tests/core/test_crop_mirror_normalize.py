"""fn.crop_mirror_normalize against a float64 numpy reference (pad, crop, mirror, normalize,
transpose, pad channels, convert) over layouts and dtypes; argument inputs through a real
pipeline; errors and their messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.crop_mirror_normalize import CropMirrorNormalize

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def ref_anchor(pos, n, c):
    v = float(np.float32(pos) * np.float32(n - c))
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def ref_cmn(
    x,
    layout,
    out_layout="CHW",
    crop=None,
    pos=(0.5, 0.5),
    mirror=False,
    mean=(0.0,),
    std=(1.0,),
    scale=1.0,
    shift=0.0,
    pad_output=False,
    fill=(0.0,),
    policy="error",
):
    """float64 reference in HWC: returns (values, fill mask) in ``out_layout``."""
    hwc = (
        np.moveaxis(x, layout.index("C"), -1).astype(np.float64)
        if layout == "CHW"
        else x.astype(np.float64)
    )
    h, w, c = hwc.shape
    ch, cw = crop if crop else (h, w)
    y0, x0 = ref_anchor(pos[1], h, ch), ref_anchor(pos[0], w, cw)
    if policy == "trim_to_shape":
        y1, x1 = min(y0 + ch, h), min(x0 + cw, w)
        y0, x0 = max(y0, 0), max(x0, 0)
        ch, cw = y1 - y0, x1 - x0
    norm = scale * (hwc - np.asarray(mean, np.float64)) / np.asarray(std, np.float64) + shift
    cout = 4 if pad_output and c == 3 else c
    fillv = np.asarray(fill, np.float64)
    fillv = (
        np.concatenate([fillv, np.zeros(cout - fillv.size)])
        if 1 < fillv.size < cout
        else np.broadcast_to(fillv, (cout,))
    )
    out = np.empty((ch, cw, cout))
    out[...] = fillv
    mask = np.ones((ch, cw, cout), bool)
    for yy in range(ch):
        for xx in range(cw):
            sy, sx = y0 + yy, x0 + xx
            if 0 <= sy < h and 0 <= sx < w:
                out[yy, xx, :c] = norm[sy, sx]
                mask[yy, xx, :c] = False
    if mirror:
        out, mask = out[:, ::-1], mask[:, ::-1]
    if out_layout == "CHW":
        out, mask = out.transpose(2, 0, 1), mask.transpose(2, 0, 1)
    return out, mask


def round_sat(v, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), info.min, info.max)


def check(out, ref, dtype):
    values, _ = ref
    assert out.dtype == dtype and out.shape == values.shape
    if np.dtype(dtype).kind == "f":
        tol = 1e-5 if dtype == np.float32 else 2e-3
        np.testing.assert_allclose(out.astype(np.float64), values, rtol=tol, atol=tol)
    else:
        # float32 arithmetic may land on the other side of a .5 only right at a tie
        near_tie = np.abs(np.abs(values - np.trunc(values)) - 0.5) < 1e-3
        expected = round_sat(values, dtype)
        assert (np.abs(out.astype(np.int64) - expected) <= 1).all()
        np.testing.assert_array_equal(out[~near_tie], expected[~near_tie])


def run_op(x, layout, args=None, **kwargs):
    op = CropMirrorNormalize(**kwargs)
    op.output_layouts([layout])
    return op.run_sample((x,), args or {}, None)


def image(shape=(10, 13, 3), dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0, 255, shape).astype(dtype)
    return rng.integers(0, 256, shape).astype(dtype)


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("out_layout", ["CHW", "HWC"])
@pytest.mark.parametrize("mirror", [False, True])
@pytest.mark.parametrize(
    "crop, pos",
    [(None, (0.5, 0.5)), ((6, 8), (0.5, 0.5)), ((6, 8), (0.0, 1.0)), ((7, 5), (0.8, 0.3))],
)
def test_matches_reference_float(layout, out_layout, mirror, crop, pos):
    hwc = image()
    x = hwc.transpose(2, 0, 1).copy() if layout == "CHW" else hwc
    out = run_op(
        x,
        layout,
        crop=crop,
        crop_pos_x=pos[0],
        crop_pos_y=pos[1],
        mirror=int(mirror),
        mean=MEAN,
        std=STD,
        output_layout=out_layout,
    )
    check(out, ref_cmn(x, layout, out_layout, crop, pos, mirror, MEAN, STD), np.float32)
    assert out.flags.c_contiguous


@pytest.mark.parametrize("in_dtype", [np.uint8, np.int16, np.float32, np.float16])
@pytest.mark.parametrize(
    "dtype, np_dtype",
    [
        (types.FLOAT16, np.float16),
        (types.UINT8, np.uint8),
        (types.INT8, np.int8),
        (types.FLOAT, np.float32),
    ],
)
def test_output_types_round_and_saturate(in_dtype, dtype, np_dtype):
    x = image(dtype=in_dtype, seed=1)
    kw = dict(mean=[100.0, 128.0, 90.0], std=[2.0, 0.7, 1.3], scale=1.5, shift=20.0)
    out = run_op(x, "HWC", crop=(5, 5), dtype=dtype, **kw)
    check(out, ref_cmn(x, "HWC", "CHW", (5, 5), **kw), np_dtype)


def test_scalar_mean_std_scale_shift_hwc_output():
    x = image(seed=2)
    out = run_op(x, "HWC", mean=128.0, std=64.0, scale=0.5, shift=3.0, output_layout="HWC")
    check(
        out, ref_cmn(x, "HWC", "HWC", mean=(128.0,), std=(64.0,), scale=0.5, shift=3.0), np.float32
    )


def test_no_normalization_is_a_plain_crop_and_transpose():
    x = image(seed=3)
    out = run_op(x, "HWC", crop=(4, 4), crop_pos_x=0, crop_pos_y=0, dtype=types.UINT8)
    np.testing.assert_array_equal(out, x[:4, :4].transpose(2, 0, 1))


@pytest.mark.parametrize("mirror", [False, True])
@pytest.mark.parametrize("out_layout", ["CHW", "HWC"])
def test_pad_output_and_out_of_bounds_pad(mirror, out_layout):
    x = image(seed=4)
    kw = dict(
        crop=(14, 9),
        pos=(0.9, 0.2),
        mirror=mirror,
        mean=MEAN,
        std=STD,
        pad_output=True,
        fill=(-1.0, -2.0, -3.0, -4.0),
        policy="pad",
    )
    out = run_op(
        x,
        "HWC",
        crop=kw["crop"],
        crop_pos_x=0.9,
        crop_pos_y=0.2,
        mirror=int(mirror),
        mean=MEAN,
        std=STD,
        pad_output=True,
        fill_values=kw["fill"],
        out_of_bounds_policy="pad",
        output_layout=out_layout,
    )
    ref = ref_cmn(x, "HWC", out_layout, **kw)
    check(out, ref, np.float32)
    assert out.shape[0 if out_layout == "CHW" else -1] == 4
    assert ref[1].any() and (~ref[1]).any()


def test_pad_output_default_fill_is_zero_and_trim_policy():
    x = image(seed=5)
    out = run_op(x, "HWC", pad_output=True, mean=MEAN, std=STD)
    assert out.shape == (4, 10, 13) and (out[3] == 0).all()
    trimmed = run_op(x, "HWC", crop=(20, 6), out_of_bounds_policy="trim_to_shape")
    check(trimmed, ref_cmn(x, "HWC", "CHW", (20, 6), policy="trim_to_shape"), np.float32)


def test_per_sample_mean_std_arguments():
    x = image(seed=6)
    args = {
        "mean": np.array([10.0, 20.0, 30.0], np.float32),
        "std": np.float32(4.0),
        "mirror": np.array(1, np.int32),
    }
    out = run_op(x, "HWC", args)
    check(out, ref_cmn(x, "HWC", mirror=True, mean=(10.0, 20.0, 30.0), std=(4.0,)), np.float32)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dtype=types.INT32), "dtype=.*INT32.* is not supported"),
        (dict(std=[1.0, 0.0, 1.0]), "std=.* must not contain 0"),
        (dict(mean=[1, 2], std=[1, 2, 3]), "same length"),
        (dict(mean=[]), "must not be empty"),
        (dict(scale=0.0), "scale=0.0"),
        (dict(mirror=0.5), "mirror=0.5"),
        (dict(output_layout=3), "output_layout=3"),
        (dict(crop_pos_x=2.0), "crop_pos_x=2.0"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        CropMirrorNormalize(**kwargs)


def test_layout_and_channel_errors():
    op = CropMirrorNormalize(output_layout="HWCX")
    with pytest.raises(ArgumentError, match="not a permutation of the input layout 'HWC'"):
        op.output_layouts(["HWC"])
    with pytest.raises(ArgumentError, match="has no channel axis"):
        CropMirrorNormalize(output_layout="WH").output_layouts(["HW"])
    with pytest.raises(ArgumentError, match="mean/std have 3 values but the input has 2"):
        run_op(image((4, 4, 2)), "HWC", mean=MEAN, std=STD)
    with pytest.raises(ArgumentError, match="does not fit"):
        run_op(image(), "HWC", crop=(20, 20))


def test_pipeline_resnet_style(image_root):
    pipe = Pipeline(batch_size=8, num_threads=3, seed=9)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        coin = fn.random.coin_flip()
        px = fn.random.uniform(range=(0.0, 1.0))
        out = fn.crop_mirror_normalize(
            images, crop=(32, 32), crop_pos_x=px, mirror=coin, mean=MEAN, std=STD, dtype=types.FLOAT
        )
        legacy = ops.CropMirrorNormalize(
            crop=(16, 16), mean=MEAN, std=STD, output_layout="HWC", dtype=types.FLOAT16
        )(images)
        pipe.set_outputs(images, coin, px, out, legacy)
    images, coin, px, out, legacy = pipe.run()
    assert out.layout() == "CHW" and legacy.layout() == "HWC"
    mirrored = set()
    for i in range(len(images)):
        m = bool(np.asarray(coin.at(i)))
        mirrored.add(m)
        pos = (float(np.asarray(px.at(i))), 0.5)
        check(
            out.at(i), ref_cmn(images.at(i), "HWC", "CHW", (32, 32), pos, m, MEAN, STD), np.float32
        )
        check(
            legacy.at(i),
            ref_cmn(images.at(i), "HWC", "HWC", (16, 16), mean=MEAN, std=STD),
            np.float16,
        )
    assert mirrored == {False, True}


def test_same_batches_for_one_and_three_threads(image_root):
    def run(nt):
        pipe = Pipeline(batch_size=8, num_threads=nt, seed=21)
        with pipe:
            jpegs, _ = fn.readers.file(file_root=image_root)
            images = fn.decoders.image(jpegs)
            out = fn.crop_mirror_normalize(
                images,
                crop=(24, 24),
                mirror=fn.random.coin_flip(),
                crop_pos_x=fn.random.uniform(range=(0, 1)),
                crop_pos_y=fn.random.uniform(range=(0, 1)),
            )
            pipe.set_outputs(out)
        return [np.stack([o.at(i) for i in range(len(o))]) for o in (pipe.run()[0], pipe.run()[0])]

    for a, b in zip(run(1), run(3), strict=True):
        np.testing.assert_array_equal(a, b)


def _gpu_vs_cpu(image_root, build, batch=6, seed=5):
    """build(images) -> node; the same graph on CPU images and on their .gpu() copy."""
    pytest.importorskip("cupy")
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=seed)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        pipe.set_outputs(build(images.gpu()), build(images))
    g, c = pipe.run()
    return g.as_cpu(), c


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [types.FLOAT, types.FLOAT16, types.UINT8, types.INT8])
@pytest.mark.parametrize("out_layout", ["CHW", "HWC"])
def test_gpu_matches_cpu(image_root, dtype, out_layout):
    def build(images):
        return fn.crop_mirror_normalize(
            images,
            crop=(48, 44),
            crop_pos_x=fn.random.uniform(range=(0, 1), seed=3),
            mirror=fn.random.coin_flip(seed=4),
            mean=MEAN,
            std=STD,
            scale=0.5,
            shift=1.0,
            dtype=dtype,
            output_layout=out_layout,
            pad_output=True,
            fill_values=[1, 2, 3, 4],
            out_of_bounds_policy="pad",
        )

    g, c = _gpu_vs_cpu(image_root, build)
    assert g.layout() == c.layout() == out_layout
    for i in range(len(c)):
        a, b = g.at(i).astype(np.float64), c.at(i).astype(np.float64)
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= (1.0 if np.issubdtype(c.at(i).dtype, np.integer) else 1e-2), i


@pytest.mark.gpu
def test_gpu_trim_policy_and_per_sample_mean(image_root):
    def build(images):
        return fn.crop_mirror_normalize(
            images,
            crop=(120, 30),
            out_of_bounds_policy="trim_to_shape",
            mean=fn.random.uniform(range=(0, 255), seed=2),
            std=50.0,
        )

    g, c = _gpu_vs_cpu(image_root, build)
    for i in range(len(c)):
        np.testing.assert_allclose(g.at(i), c.at(i), atol=1e-4)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("mirror", [0, 1])
def test_float16_chw_fast_path_matches_numpy_reference(channels, mirror):
    """uint8 HWC -> float16 CHW goes through OpenCV; it must agree with the float32 formula
    rounded to float16 within one float16 ulp."""
    rng = np.random.default_rng(channels + 10 * mirror)
    img = rng.integers(0, 256, (37, 53, channels), dtype=np.uint8)
    mean, std = rng.uniform(0, 255, channels), rng.uniform(10, 80, channels)
    op = CropMirrorNormalize(
        device="cpu",
        dtype=types.FLOAT16,
        output_layout="CHW",
        crop=(20, 30),
        crop_pos_x=0.3,
        crop_pos_y=0.7,
        mean=list(mean),
        std=list(std),
    )
    out = op.run_sample((img,), {"mirror": np.int32(mirror)}, None)
    y0, x0 = int(0.7 * 17 + 0.5), int(0.3 * 23 + 0.5)
    ref = img[y0 : y0 + 20, x0 : x0 + 30].astype(np.float32)
    ref = ref[:, ::-1] if mirror else ref
    ref = ((ref - mean.astype(np.float32)) / std.astype(np.float32)).transpose(2, 0, 1)
    ref16 = ref.astype(np.float16)
    assert out.dtype == np.float16 and out.shape == (channels, 20, 30)
    ulps = np.abs(out.astype(np.float32) - ref16) / np.spacing(ref16).astype(np.float32)
    assert ulps.max() <= 1


@pytest.mark.parametrize(
    "spelling, want", [(types.NCHW, "CHW"), (types.NHWC, "HWC"), ("NCHW", "CHW"), ("NHWC", "HWC")]
)
def test_legacy_output_layout_constants(spelling, want):
    # DALI: types.NCHW == "CHW" and types.NHWC == "HWC" (the batch axis is not in a layout)
    x = image()
    op = CropMirrorNormalize(output_layout=spelling)
    assert op.output_layouts(["HWC"]) == [want]
    out = op.run_sample((x,), {}, None)
    np.testing.assert_array_equal(out, x.transpose(2, 0, 1) if want == "CHW" else x)
