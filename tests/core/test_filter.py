"""fn.filter / fn.experimental.filter: correlation against a numpy reference for every border
mode, anchors (static and per sample), "valid" mode, fill values, channels-first layouts,
per-frame filters, dtypes, errors, and the GPU descriptor packing."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, types
from dlpipe.kernels.filter import FILTER_DESC, filter_descs, spatial3
from dlpipe.operators.filter import Filter, filter_layout, resolve_anchor

NP_MODES = {
    "reflect_101": "reflect",
    "reflect_1001": "symmetric",
    "wrap": "wrap",
    "clamp": "edge",
    "constant": "constant",
}


def ref_correlate(img, kernel, anchor=None, border="reflect_101", fill=0, valid=False):
    """Plain correlation of an (H, W[, C]) image, in float64."""
    fh, fw = kernel.shape
    ay, ax = anchor if anchor is not None else (fh // 2, fw // 2)
    x = img.astype(np.float64)
    if valid:
        padded, (h, w) = x, (x.shape[0] - fh + 1, x.shape[1] - fw + 1)
    else:
        pad = ((ay, fh - ay - 1), (ax, fw - ax - 1)) + ((0, 0),) * (x.ndim - 2)
        kw = {"constant_values": fill} if border == "constant" else {}
        padded, (h, w) = np.pad(x, pad, mode=NP_MODES[border], **kw), x.shape[:2]
    out = np.zeros((h, w, *x.shape[2:]))
    for i in range(fh):
        for j in range(fw):
            out += kernel[i, j] * padded[i : i + h, j : j + w]
    return out


def to_type(values, dtype):
    if np.dtype(dtype).kind == "f":
        return values.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


def run_filter(samples, filters, layout, fills=None, **kw):
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: samples, layout=layout)
        f = fn.external_source(source=lambda: filters)
        extra = [fn.external_source(source=lambda: fills)] if fills is not None else []
        pipe.set_outputs(fn.filter(x, f, *extra, **kw))
    (out,) = pipe.run()
    return out


# Kernels with weights in 1/8ths: the sums are exact in float32, so the rounding agrees.
def eighths(rng, shape):
    return (rng.integers(-4, 9, shape) / 8).astype(np.float32)


@pytest.mark.parametrize("border", list(NP_MODES))
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.float32])
def test_borders_and_types(border, dtype):
    rng = np.random.default_rng(3)
    shapes = [(9, 11, 3), (6, 5, 3)]
    samples = [rng.integers(0, 200, s).astype(dtype) for s in shapes]
    filters = [eighths(rng, (3, 5)), eighths(rng, (4, 2))]
    fills = [np.array(v, dtype) for v in (7, 0)] if border == "constant" else None
    out = run_filter(samples, filters, "HWC", fills, border=border)
    assert out.layout() == "HWC"
    for i, (x, k) in enumerate(zip(samples, filters, strict=True)):
        got = np.asarray(out.at(i))
        assert got.dtype == dtype and got.shape == x.shape
        fill = 0 if fills is None else int(fills[i])
        want = to_type(ref_correlate(x, k, border=border, fill=fill), dtype)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-3)


def test_random_filters_float_output():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    k = rng.normal(size=(5, 5)).astype(np.float32)
    out = run_filter([x], [k], "HWC", dtype=types.FLOAT)
    got = np.asarray(out.at(0))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref_correlate(x, k), rtol=1e-4, atol=1e-3)


def test_anchor_static_and_per_sample():
    rng = np.random.default_rng(5)
    samples = [rng.integers(0, 255, (8, 9), dtype=np.uint8) for _ in range(2)]
    filters = [eighths(rng, (3, 4)), eighths(rng, (3, 4))]
    out = run_filter(samples, filters, "HW", anchor=[0, 3])
    for i in range(2):
        want = to_type(ref_correlate(samples[i], filters[i], anchor=(0, 3)), np.uint8)
        np.testing.assert_array_equal(out.at(i), want)
    anchors = [np.array([2, 0], np.int32), np.array([-1], np.int32)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: samples, layout="HW")
        f = fn.external_source(source=lambda: filters)
        a = fn.external_source(source=lambda: anchors)
        pipe.set_outputs(fn.filter(x, f, anchor=a, border="clamp"))
    (out,) = pipe.run()
    for i, anchor in enumerate([(2, 0), (1, 2)]):
        want = to_type(ref_correlate(samples[i], filters[i], anchor, "clamp"), np.uint8)
        np.testing.assert_array_equal(out.at(i), want)


def test_valid_mode_shrinks_and_ignores_anchor():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)
    k = eighths(rng, (3, 5))
    out = run_filter([x], [k], "HWC", mode="valid", anchor=[0, 0])
    got = np.asarray(out.at(0))
    assert got.shape == (8, 8, 3)
    np.testing.assert_array_equal(got, to_type(ref_correlate(x, k, valid=True), np.uint8))


def test_channels_first_and_per_frame_filters():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 255, (2, 3, 7, 6), dtype=np.uint8)  # FCHW
    ks = eighths(rng, (2, 3, 3))  # one filter per frame
    got = np.asarray(run_filter([x], [ks], "FCHW").at(0))
    for f in range(2):
        for c in range(3):
            want = to_type(ref_correlate(x[f, c], ks[f]), np.uint8)
            np.testing.assert_array_equal(got[f, c], want)
    video = rng.integers(0, 255, (3, 5, 6, 2), dtype=np.uint8)  # FHWC, one shared filter
    k = eighths(rng, (3, 3))
    got = np.asarray(
        run_filter([video], [k], "FHWC", [np.uint8([9, 1, 4])], border="constant").at(0)
    )
    for f, fill in enumerate((9, 1, 4)):
        want = to_type(ref_correlate(video[f], k, border="constant", fill=fill), np.uint8)
        np.testing.assert_array_equal(got[f], want)


def test_sharpness_kernel_like_pil():
    """The auto_aug sharpness kernel: identity blended with a smoothing 3x3 filter."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    blur = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13
    ident = np.zeros((3, 3), np.float32)
    ident[1, 1] = 1
    k = (-0.5 * blur + 1.5 * ident).astype(np.float32)
    got = np.asarray(run_filter([x], [k], "HWC").at(0)).astype(np.int64)
    want = to_type(ref_correlate(x, k), np.uint8).astype(np.int64)
    assert np.abs(got - want).max() <= 1  # float32 sums near .5 may round either way


def test_experimental_name():
    x = np.arange(20, dtype=np.uint8).reshape(4, 5)
    k = np.ones((1, 1), np.float32) * 2
    out = np.asarray(_run_named(fn.experimental.filter, [x], [k], "HW").at(0))
    np.testing.assert_array_equal(out, x * 2)


def _run_named(op, samples, filters, layout):
    pipe = Pipeline(batch_size=len(samples), num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: samples, layout=layout)
        f = fn.external_source(source=lambda: filters)
        pipe.set_outputs(op(x, f))
    return pipe.run()[0]


def test_errors():
    x = [np.zeros((6, 6, 3), np.uint8)]
    k = [np.ones((3, 3), np.float32)]
    with pytest.raises(ArgumentError, match="Unknown ``border_type``"):
        Filter(border="mirror")
    with pytest.raises(ArgumentError, match="Unknown ``mode``"):
        Filter(mode="full")
    with pytest.raises(ArgumentError, match="Output data type must be same as input"):
        run_filter(x, k, "HWC", dtype=types.INT32)
    with pytest.raises(ArgumentError, match="does not support input type int8"):
        run_filter([np.zeros((6, 6), np.int8)], k, "HW")
    with pytest.raises(ArgumentError, match="Unsupported filter type"):
        run_filter(x, [np.ones((3, 3), np.float64)], "HWC")
    with pytest.raises(ArgumentError, match="Anchor must lie within the filter"):
        run_filter(x, k, "HWC", anchor=[3, 0])
    with pytest.raises(ArgumentError, match="bigger than the sample"):
        run_filter(x, [np.ones((7, 1), np.float32)], "HWC", mode="valid")
    with pytest.raises(ArgumentError, match="Filter dimensionality must match"):
        run_filter(x, [np.ones((3, 3, 3), np.float32)], "HWC")
    with pytest.raises(ArgumentError, match="only 2-dimensional convolutions"):
        run_filter([np.zeros((4, 4, 4), np.uint8)], [np.ones((3, 3, 3), np.float32)], "DHW")
    with pytest.raises(ArgumentError, match="same type as the input"):
        run_filter(x, k, "HWC", [np.float32(1)], border="constant")
    with pytest.raises(ArgumentError, match="frames must be an outermost"):
        filter_layout("filter", "HWF", 3)
    with pytest.raises(ArgumentError, match="unsupported layout"):
        filter_layout("filter", "HWCC", 4)


@pytest.mark.parametrize(
    "layout, ndim, want",
    [
        ("HWC", 3, (0, 2, True)),
        ("CHW", 3, (1, 2, False)),
        ("FCHW", 4, (2, 2, False)),
        ("FHWC", 4, (1, 2, True)),
        ("DHWC", 4, (0, 3, True)),
        ("", 3, (0, 3, False)),
        ("", 2, (0, 2, False)),
    ],
)
def test_layouts(layout, ndim, want):
    assert filter_layout("filter", layout, ndim) == want


def test_resolve_anchor():
    assert resolve_anchor("filter", [-1], (3, 4), 0) == (1, 2)
    assert resolve_anchor("filter", [0, -1], (5, 5), 0) == (0, 2)
    with pytest.raises(ArgumentError, match="1 or 2 values"):
        resolve_anchor("filter", [0, 0, 0], (3, 3), 0)


def test_descriptor_packing():
    op = Filter(mode="same")
    op._layout = "FCHW"
    plan = op.sample_plan((2, 3, 7, 6), (2, 3, 5), None, 0)
    assert plan["per_frame"] and plan["planes_per_frame"] == 3
    op2 = Filter(mode="valid")
    op2._layout = "DHWC"
    plan2 = op2.sample_plan((4, 6, 8, 2), (3, 3, 3), 1, 1)
    assert plan2["out_shape"] == (2, 4, 6, 2)
    d = filter_descs([(2, 3, 7, 6), (4, 6, 8, 2)], [plan, plan2], [(1, 2), (0, 0, 0)])
    assert FILTER_DESC.itemsize == 112  # the C struct: 6 int64, 15 int32, padding
    assert d["planes"].tolist() == [6, 1]
    assert [d[k][0] for k in ("in_d", "in_h", "in_w", "fd", "fh", "fw", "ad", "ah", "aw")] == [
        1, 7, 6, 1, 3, 5, 0, 1, 2,
    ]  # fmt: skip
    assert d["filt_frame_stride"].tolist() == [15, 0]
    assert [d[k][1] for k in ("out_d", "out_h", "out_w", "channels")] == [2, 4, 6, 2]
    assert spatial3((5, 6)) == (1, 5, 6)


@pytest.mark.parametrize("layout, shape, fshape", [("HWC", (9, 11, 3), (3, 3)),
                                                   ("FCHW", (2, 3, 7, 6), (2, 3, 5))])  # fmt: skip
def test_one_plan_for_a_batch_packs_as_the_per_sample_plans(layout, shape, fshape):
    import copy

    op = Filter(mode="same")
    op._layout = layout
    n = 5
    plan = op.sample_plan(shape, fshape, None, 0)
    anchor = resolve_anchor("filter", [-1], plan["filter_shape"], 0)
    shared = filter_descs([shape] * n, [plan] * n, [anchor] * n)  # one row for all
    separate = filter_descs([shape] * n, [copy.deepcopy(plan) for _ in range(n)], [anchor] * n)
    assert shared.tobytes() == separate.tobytes()
