"""fn.pad: the examples of DALI's own documentation, random batches against numpy padding,
argument inputs, layouts and errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.pad import Pad


def run(batch, layout="", args=None, **kw):
    op = Pad(**kw)
    assert op.output_layouts([layout]) == [layout]
    return op.run_batch_cpu([[np.asarray(x) for x in batch]], args or {}, None)[0]


ONE_D = [[3, 4, 2, 5, 4], [2, 2], [3, 199, 5]]


@pytest.mark.parametrize(
    "batch, kw, want",
    [
        (
            ONE_D,
            dict(fill_value=-1, axes=(0,)),
            [[3, 4, 2, 5, 4], [2, 2, -1, -1, -1], [3, 199, 5, -1, -1]],
        ),
        (
            ONE_D + [[1, 2, 3, 4, 5, 6, 7, 8]],
            dict(fill_value=-1, axes=(0,), shape=(7,)),
            [
                [3, 4, 2, 5, 4, -1, -1],
                [2, 2, -1, -1, -1, -1, -1],
                [3, 199, 5, -1, -1, -1, -1],
                [1, 2, 3, 4, 5, 6, 7, 8],
            ],
        ),
        (
            ONE_D,
            dict(fill_value=-1, axes=(0,), align=(4,)),
            [[3, 4, 2, 5, 4, -1, -1, -1], [2, 2, -1, -1, -1, -1, -1, -1], [3, 199, 5] + [-1] * 5],
        ),
        (
            ONE_D,
            dict(fill_value=-1, axes=(0,), shape=(1,), align=(2,)),
            [[3, 4, 2, 5, 4, -1], [2, 2], [3, 199, 5, -1]],
        ),
        (
            [[[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2], [4, 5]]],
            dict(fill_value=42, axes=(1,)),
            [[[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 42, 42], [4, 5, 42, 42]]],
        ),
        (
            [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], [[1, 2], [4, 5]]],
            dict(fill_value=0, axes=(0, 1), align=(4, 5)),
            [
                [[1, 2, 3, 4, 0], [5, 6, 7, 8, 0], [9, 10, 11, 12, 0], [0] * 5],
                [[1, 2, 0, 0, 0], [4, 5, 0, 0, 0], [0] * 5, [0] * 5],
            ],
        ),
        (
            [[[1, 2, 3], [4, 5, 6]], [[1, 2], [4, 5], [6, 7]]],
            dict(fill_value=0, axes=(0, 1), align=(1, 2), shape=(4, -1)),
            [
                [[1, 2, 3, 0], [4, 5, 6, 0], [0] * 4, [0] * 4],
                [[1, 2, 0, 0], [4, 5, 0, 0], [6, 7, 0, 0], [0] * 4],
            ],
        ),
    ],
)
def test_dali_documentation_examples(batch, kw, want):
    out = run([np.array(x, np.int32) for x in batch], **kw)
    assert len(out) == len(want)
    for o, w in zip(out, want, strict=True):
        np.testing.assert_array_equal(o, np.array(w, np.int32))
        assert o.dtype == np.int32


def test_random_batches_default_axes_and_axis_names():
    rng = np.random.default_rng(0)
    batch = [
        rng.integers(0, 255, (int(h), int(w), 3), dtype=np.uint8)
        for h, w in rng.integers(1, 9, (4, 2))
    ]
    out = run(batch)
    mh = max(x.shape[0] for x in batch)
    mw = max(x.shape[1] for x in batch)
    for x, o in zip(batch, out, strict=True):
        want = np.pad(x, ((0, mh - x.shape[0]), (0, mw - x.shape[1]), (0, 0)))
        np.testing.assert_array_equal(o, want)
    out = run(batch, "HWC", axis_names="W", fill_value=300.0)  # saturates to 255 for uint8
    for x, o in zip(batch, out, strict=True):
        want = np.pad(x, ((0, 0), (0, mw - x.shape[1]), (0, 0)), constant_values=255)
        np.testing.assert_array_equal(o, want)


def test_per_sample_shape_and_align_arguments():
    batch = [np.ones(3, np.float32), np.ones(5, np.float32)]
    out = run(batch, args={"shape": [np.int32([6]), np.int32([-1])]}, fill_value=0.5)
    assert [o.shape for o in out] == [(6,), (5,)]
    assert out[0][3:].tolist() == [0.5] * 3
    out = run(batch, args={"align": [np.int32([4]), np.int32([3])]}, shape=[1])
    assert [o.shape for o in out] == [(4,), (6,)]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(axes=[0], axis_names="H"), "mutually exclusive"),
        (dict(align=[0]), "must be positive"),
        (dict(fill_value=float("nan")), "fill_value"),
    ],
)
def test_build_errors(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Pad(**kw)


def test_run_errors():
    batch = [np.ones((2, 2)), np.ones((3, 3))]
    with pytest.raises(ArgumentError, match="axis=2, ndim=2"):
        run(batch, axes=[2])
    with pytest.raises(ArgumentError, match="expected 2 values for shape, got 1"):
        run(batch, shape=[4])
    with pytest.raises(ArgumentError, match="'C' is not in the input layout"):
        run(batch, "HW", axis_names="C")


def test_pipeline_keeps_layout():
    batch = [np.ones((2, 4), np.int16), np.ones((5, 4), np.int16)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="NX")
        pipe.set_outputs(ops.Pad(fill_value=-1, axes=[0])(d))
    (out,) = pipe.run()
    assert out.layout() == "NX" and out.shape() == [(5, 4), (5, 4)]
    np.testing.assert_array_equal(out.at(0)[2:], -np.ones((3, 4)))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_equal_padded_shapes_come_as_one_array(ndim):
    """Samples padded to one shape come back as one (N, *shape) array, its rows the per-sample
    padding (numpy's), whatever the axes, alignment and fill; in a pipeline the output batch is
    that array (the samples are its rows: nothing is stacked when it is taken whole)."""
    from dlpipe.operators.slice import fill_as, pad_window

    rng = np.random.default_rng(ndim)
    for dtype, fill, kw in (
        (np.float32, 0.0, {}),
        (np.int16, -3.0, dict(axes=[0], align=[4])),
        (np.uint8, 7.0, dict(axes=list(range(ndim)), align=[3] * ndim)),
    ):
        batch = [rng.integers(0, 100, rng.integers(1, 6, ndim)).astype(dtype) for _ in range(5)]
        if kw.get("axes") == [0]:  # the other axes must agree
            batch = [np.resize(x, (x.shape[0], *batch[0].shape[1:])) for x in batch]
        out = run(batch, fill_value=fill, **kw)
        assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape[0] == 5
        f = fill_as(fill, np.dtype(dtype))
        for x, o in zip(batch, out, strict=True):
            want = pad_window(x, np.zeros(ndim, np.int64), o.shape, f, -1, np.dtype(dtype))
            np.testing.assert_array_equal(o, want)
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None)
    feed = [np.full((k, 2), k, np.float32) for k in (1, 4, 2)]
    with pipe:
        x = fn.external_source(source=lambda: feed, batch=True)
        pipe.set_outputs(fn.pad(x, axes=[0], fill_value=-1))
    (got,) = pipe.run()
    arr = got.as_array()
    assert arr.shape == (3, 4, 2) and got.as_array() is arr
    assert np.shares_memory(arr, np.asarray(got.at(1)))
    np.testing.assert_array_equal(arr[0], [[1, 1], [-1, -1], [-1, -1], [-1, -1]])


def test_uniform_arguments_match_the_per_sample_rules():
    # the array arithmetic of one shape/align for every sample (the GPU path's out_shapes)
    # against the sample-by-sample loop, repeated axes and per-axis alignments included
    from dlpipe.operators.pad import _padded_shapes_loop, _padded_shapes_uniform

    rng = np.random.default_rng(3)
    for _ in range(200):
        ndim = int(rng.integers(1, 4))
        in_shapes = rng.integers(0, 40, (int(rng.integers(1, 6)), ndim)).astype(np.int64)
        axes = [int(a) for a in rng.integers(0, ndim, int(rng.integers(0, 4)))]
        req = [int(v) for v in rng.integers(-1, 50, len(axes))] if rng.random() < 0.5 else None
        al = None
        if rng.random() < 0.7:
            al = [int(v) for v in rng.integers(1, 9, 1 if rng.random() < 0.5 else len(axes))]
        if al is not None and not al:
            al = None
        n = len(in_shapes)
        shapes = None if req is None else [req] * n
        aligns = None if al is None else [al] * n
        largest = in_shapes.max(axis=0)
        want = _padded_shapes_loop(
            in_shapes, in_shapes.copy(), largest, axes, shapes, aligns, "pad"
        )
        got = _padded_shapes_uniform(
            in_shapes, in_shapes.copy(), largest, axes, shapes, aligns, "pad"
        )
        np.testing.assert_array_equal(got, want)
