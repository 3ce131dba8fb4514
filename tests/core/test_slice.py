"""fn.slice: positional (normalized or absolute) and named windows against numpy slicing,
axes/axis_names, the out-of-bounds policies with per-channel fill values, dtype, per-sample
argument inputs in a pipeline, and the argument errors DALI raises."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.errors import PipelineError
from dlpipe.operators.slice import Slice


def run(x, layout="HWC", inputs=(), args=None, **kw):
    op = Slice(**kw)
    assert op.output_layouts([layout]) == [layout]
    return op.run_sample((x, *inputs), args or {}, None)


def rnd(v: float) -> int:
    """llround: halves away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def image(h=6, w=8, c=3, dtype=np.uint8):
    return (np.arange(h * w * c) % 251).astype(dtype).reshape(h, w, c)


def test_positional_normalized_anchor_and_shape_are_x_y():
    x = image()
    a, s = np.array([0.25, 0.5], np.float32), np.array([0.5, 0.5], np.float32)
    out = run(x, inputs=(a, s))
    x0, x1 = rnd(0.25 * 8), rnd((0.25 + 0.5) * 8)
    y0, y1 = rnd(0.5 * 6), rnd((0.5 + 0.5) * 6)
    np.testing.assert_array_equal(out, x[y0:y1, x0:x1])
    assert out.dtype == np.uint8 and out.flags.c_contiguous


def test_both_normalized_round_the_end_once():
    # (0.3 + 0.3) * 5 = 3.0 -> 3 - llround(1.5)=2 -> 1 column; rounding anchor and shape
    # separately would give llround(1.5) = 2 columns
    x = np.arange(5 * 5, dtype=np.int32).reshape(5, 5)
    out = run(x, "HW", (np.float32([0.3, 0.0]), np.float32([0.3, 1.0])))
    lo = rnd(np.float32(0.3) * 5)
    hi = rnd((np.float32(0.3) + np.float32(0.3)) * 5)
    np.testing.assert_array_equal(out, x[:, lo:hi])


def test_integer_inputs_are_absolute_whatever_normalized_says():
    x = image()
    out = run(x, inputs=(np.int32([2, 1]), np.int32([3, 4])))
    np.testing.assert_array_equal(out, x[1:5, 2:5])
    out = run(x, inputs=(np.int64([2, 1]), np.int64([3, 4])), normalized_anchor=True)
    np.testing.assert_array_equal(out, x[1:5, 2:5])


def test_absolute_float_inputs():
    x = image()
    out = run(
        x,
        inputs=(np.float32([1.4, 2.6]), np.float32([2.5, 2.0])),
        normalized_anchor=False,
        normalized_shape=False,
    )
    np.testing.assert_array_equal(out, x[rnd(2.6) : rnd(4.6), rnd(1.4) : rnd(3.9)])
    # mixed: normalized anchor, absolute shape
    out = run(x, inputs=(np.float32([0.5, 0.5]), np.float32([2.0, 1.0])), normalized_shape=False)
    np.testing.assert_array_equal(out, x[3:4, 4:6])


@pytest.mark.parametrize(
    "kw, want",
    [
        (dict(start=[1, 2], end=[5, 4]), (slice(2, 4), slice(1, 5))),
        (dict(start=[1, 2], shape=[3, 3]), (slice(2, 5), slice(1, 4))),
        (dict(rel_start=[0.25, 0.5], rel_end=[1.0, 1.0]), (slice(3, 6), slice(2, 8))),
        (dict(rel_start=[0.1, 0.1], rel_shape=[0.5, 0.5]), (slice(1, 4), slice(1, 5))),
        (dict(start=[2, 0], rel_shape=[0.5, 0.5]), (slice(0, 3), slice(2, 6))),
        (dict(rel_start=[0.5, 0.5]), (slice(3, 6), slice(4, 8))),
        (dict(end=[3, 2]), (slice(0, 2), slice(0, 3))),
        (dict(start=[0, 1], end=[3, 2], axes=[1, 0]), (slice(1, 2), slice(0, 3))),
        (dict(start=[1, 0], end=[2, 3], axes=[0, 2]), (slice(1, 2), slice(None), slice(0, 3))),
        (dict(start=[1], end=[2], axis_names="C"), (slice(None), slice(None), slice(1, 2))),
        (dict(start=[1, 1], shape=[2, 2], axis_names="HW"), (slice(1, 3), slice(1, 3))),
    ],
)
def test_named_arguments(kw, want):
    x = image()
    np.testing.assert_array_equal(run(x, **kw), x[want])


def test_rel_start_with_rel_shape_rounds_the_end_once():
    x = np.arange(10, dtype=np.int32).reshape(1, 10)
    out = run(x, "HW", rel_start=[0.25, 0.0], rel_shape=[0.25, 1.0])  # 2.5 .. 5.0
    np.testing.assert_array_equal(out, x[:, rnd(2.5) : 5])


def test_per_sample_argument_values_override_static_ones():
    x = image()
    out = run(x, args={"start": np.int32([3, 1]), "shape": np.int32([2, 2])}, start=[0, 0])
    np.testing.assert_array_equal(out, x[1:3, 3:5])


def test_default_layout_by_rank_for_axis_names():
    x = image()
    out = run(x, "", start=[1, 2], end=[3, 5])  # unset layout -> HWC: (x, y)
    np.testing.assert_array_equal(out, x[2:5, 1:3])
    with pytest.raises(ArgumentError, match="axis_names='WH'"):
        run(np.zeros(5), "", start=[1, 2], end=[3, 4])  # 1-D: no default layout


def ref_window(x, anchor, shape, fill, channel=-1):
    out = np.empty(shape, x.dtype)
    out[...] = (
        fill
        if np.ndim(fill) == 0
        else np.asarray(fill).reshape([-1 if d == channel else 1 for d in range(x.ndim)])
    )
    for pos in np.ndindex(*shape):
        src = tuple(a + p for a, p in zip(anchor, pos, strict=True))
        if all(0 <= c < e for c, e in zip(src, x.shape, strict=True)):
            out[pos] = x[src]
    return out


def test_pad_policy_fills_per_channel():
    x = image(4, 5, 3)
    out = run(
        x,
        start=[-2, 3],
        shape=[4, 3],
        out_of_bounds_policy="pad",
        fill_values=[10, 20, 30],
    )
    np.testing.assert_array_equal(out, ref_window(x, (3, -2, 0), (3, 4, 3), [10, 20, 30], 2))


def test_pad_policy_single_value_and_chw_channel_axis():
    x = image(3, 4, 5).transpose(2, 0, 1).copy()  # CHW, C=5
    out = run(x, "CHW", start=[2, -1], end=[6, 2], out_of_bounds_policy="pad", fill_values=9)
    np.testing.assert_array_equal(out, ref_window(x, (0, -1, 2), (5, 3, 4), 9))
    fills = [1, 2, 3, 4, 5]
    out = run(x, "CHW", start=[2, -1], end=[6, 2], out_of_bounds_policy="pad", fill_values=fills)
    np.testing.assert_array_equal(out, ref_window(x, (0, -1, 2), (5, 3, 4), fills, 0))


def test_trim_to_shape():
    x = image()
    out = run(x, start=[-3, 4], end=[5, 20], out_of_bounds_policy="trim_to_shape")
    np.testing.assert_array_equal(out, x[4:6, 0:5])
    empty = run(x, start=[10, 0], end=[12, 2], out_of_bounds_policy="trim_to_shape")
    assert empty.shape == (2, 0, 3)


def test_error_policy_names_the_window():
    x = image()
    with pytest.raises(ArgumentError, match=r"input_shape=\[6, 8, 3\].*slice_anchor=\[0, -1, 0\]"):
        run(x, start=[-1, 0], end=[2, 2])
    with pytest.raises(ArgumentError, match="out of bounds"):
        run(x, start=[8, 0], shape=[0, 2])  # an anchor at the extent is out of bounds in DALI
    run(x, start=[7, 0], shape=[1, 2])  # the last column is fine


@pytest.mark.parametrize(
    "dtype, want",
    [
        (types.FLOAT, lambda v: v.astype(np.float32)),
        (types.FLOAT16, lambda v: np.clip(v, -65504, 65504).astype(np.float16)),
        (types.UINT8, lambda v: np.trunc(np.clip(v, 0, 255)).astype(np.uint8)),
    ],
)
def test_dtype_converts_like_dali_clamp(dtype, want):
    x = np.array([[-3.7, 0.4, 254.9, 300.0], [1e6, -1e6, 2.5, 7.0]], np.float32)
    out = run(x, "HW", start=[1, 0], end=[4, 2], dtype=dtype)
    np.testing.assert_array_equal(out, want(x[:, 1:4].astype(np.float64)))


def test_dtype_outside_dali_set_fails_at_run():
    with pytest.raises(ArgumentError, match="dtype=int16"):
        run(image(), start=[0, 0], end=[1, 1], dtype=types.INT16)
    assert run(image(), start=[0, 0], end=[1, 1], dtype=types.UINT8).dtype == np.uint8


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(start=[0, 0], rel_start=[0, 0]), '"start" and "rel_start"'),
        (dict(end=[1, 1], shape=[1, 1]), "mutually exclusive"),
        (dict(axes=[0], axis_names="H"), "mutually exclusive"),
        (dict(out_of_bounds_policy="wrap"), "out_of_bounds_policy='wrap'"),
        (dict(start=[0.5, 1]), r"start=\[0.5, 1\] must hold integers"),
        (dict(fill_values=[]), "fill_values"),
        (dict(dtype="nope"), "dtype='nope'"),
    ],
)
def test_argument_errors_at_build(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Slice(**kw)


def test_argument_count_errors():
    with pytest.raises(ArgumentError, match="start has 3 value"):
        run(image(), start=[0, 0, 0], end=[1, 1])
    with pytest.raises(ArgumentError, match="anchor input has 1 value"):
        run(image(), inputs=(np.float32([0.1]), np.float32([0.2])))
    with pytest.raises(ArgumentError, match="same numeric type"):
        run(image(), inputs=(np.float32([0.1, 0]), np.int32([1, 1])))
    with pytest.raises(ArgumentError, match="can't be before start"):
        run(image(), start=[3, 0], end=[2, 1])
    with pytest.raises(ArgumentError, match="negative shapes"):
        run(image(), start=[3, 0], shape=[-1, 1])
    with pytest.raises(ArgumentError, match="multi-channel fill_values"):
        run(
            np.zeros((3, 3, 2, 2)),
            "FHWC"[:3] + "X",
            start=[0],
            end=[1],
            axes=[0],
            out_of_bounds_policy="pad",
            fill_values=[1, 2],
        )


def _pipe(batch, build, **pipe_kw):
    pipe = Pipeline(batch_size=len(batch), num_threads=1, device_id=None, **pipe_kw)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        pipe.set_outputs(*build(d))
    return pipe


def test_pipeline_positional_and_argument_inputs():
    batch = [image(6, 8), image(4, 10)]
    anchors = [np.float32([0.5, 0.5]), np.float32([0.0, 0.25])]
    shapes = [np.float32([0.5, 0.5]), np.float32([0.3, 0.5])]

    def build(d):
        a = fn.external_source(source=lambda: anchors, batch=True)
        s = fn.external_source(source=lambda: shapes, batch=True)
        starts = fn.external_source(source=lambda: [np.int32([1, 1]), np.int32([0, 2])], batch=True)
        return fn.slice(d, a, s), ops.Slice(shape=[2, 2])(d, start=starts)

    pos, named = _pipe(batch, build).run()
    assert pos.layout() == "HWC" and named.layout() == "HWC"
    for i, x in enumerate(batch):
        h, w = x.shape[:2]
        ax, ay = anchors[i]
        sx, sy = shapes[i]
        want = x[rnd(ay * h) : rnd((ay + sy) * h), rnd(ax * w) : rnd((ax + sx) * w)]
        np.testing.assert_array_equal(pos.at(i), want)
    np.testing.assert_array_equal(named.at(0), batch[0][1:3, 1:3])
    np.testing.assert_array_equal(named.at(1), batch[1][2:4, 0:2])


def test_pipeline_graph_errors():
    x = [image()]
    with pytest.raises(ArgumentError, match="expected named slice arguments"):
        _pipe(x, lambda d: [fn.slice(d)])
    with pytest.raises(ArgumentError, match="takes 1..3 inputs, got 4|expected named"):
        _pipe(x, lambda d: [fn.slice(d, d, d, d)])
    with pytest.raises(ArgumentError, match="not compatible with positional"):
        _pipe(x, lambda d: [fn.slice(d, d, d, start=[0, 0])])
    with pytest.raises((ArgumentError, PipelineError), match="expected named"):
        _pipe(x, lambda d: [fn.slice(d, d)])


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
)
def test_random_windows_pad(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    nd = len(shape)
    axes = data.draw(st.permutations(range(nd)))[: data.draw(st.integers(1, nd))]
    start = [data.draw(st.integers(-3, 6)) for _ in axes]
    size = [data.draw(st.integers(0, 6)) for _ in axes]
    out = run(x, "", start=start, shape=size, axes=axes, out_of_bounds_policy="pad", fill_values=-1)
    anchor, full = [0] * nd, list(shape)
    for a, s0, n in zip(axes, start, size, strict=True):
        anchor[a], full[a] = s0, n
    np.testing.assert_array_equal(out, ref_window(x, anchor, full, -1))


def test_integer_window_inside_takes_the_short_path_with_the_same_result():
    """One axis, integer anchor/shape inputs (scalars or 1-element, any integer type), the
    window inside the sample: the short path returns what the general one does (values, dtype,
    a view of the contiguous window); everything else still goes the general way."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        ndim = int(rng.integers(1, 4))
        x = rng.random(tuple(int(v) for v in rng.integers(1, 9, ndim))).astype(np.float32)
        axis = int(rng.integers(0, ndim))
        ext = x.shape[axis]
        a = int(rng.integers(-2, ext + 2))
        n = int(rng.integers(-1, ext + 2))
        dt = rng.choice([np.int32, np.int64, np.uint32]) if a >= 0 and n >= 0 else np.int32
        anchor = np.array(a if rng.random() < 0.5 else [a], dt)
        shape = np.array(n, dt).reshape(anchor.shape)
        op = Slice(axes=[axis], out_of_bounds_policy="pad")
        op.output_layouts([""])
        short = op._window_inside(x, anchor, shape)
        inside = 0 <= a and 0 <= n and a + n <= ext
        assert (short is not None) == inside
        if n < 0:
            with pytest.raises(ArgumentError, match="before start"):
                op.run_sample([x, anchor, shape], {}, None)
            continue
        full_anchor, full_shape = op.sample_window(x.shape, (anchor, shape), {})
        from dlpipe.operators.slice import fill_as, pad_window

        want = pad_window(x, full_anchor, full_shape, fill_as(0.0, x.dtype), -1, x.dtype)
        got = op.run_sample([x, anchor, shape], {}, None)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        if inside:
            np.testing.assert_array_equal(short, want)
    x = np.arange(10, dtype=np.float32)
    op = Slice(axes=[0])
    op.output_layouts([""])
    assert op._window_inside(x, np.float32(0.1), np.float32(0.5)) is None  # normalized floats
    assert op._window_inside(x, np.int32([1, 2]), np.int32([1, 2])) is None  # two axes
    assert np.shares_memory(op._window_inside(x, np.int32(2), np.int32(5)), x)
