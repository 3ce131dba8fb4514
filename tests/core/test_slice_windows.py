"""fn.slice's batch windows (``_slice_windows.batch_windows``, what the GPU operator uses)
against the per-sample rules (``Slice.sample_windows``) on random shapes and arguments; the
irregular cases defer to the per-sample rules (None) so that they raise as before."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError
from dlpipe.graph import Rows
from dlpipe.operators._slice_windows import batch_windows
from dlpipe.operators.slice import Slice


def _op(layout="HWC", **kw):
    op = Slice(**kw)
    op.output_layouts([layout])
    return op


def _shapes(rng, n):
    """``n`` random HWC shapes."""
    return np.stack([rng.integers(1, 40, n), rng.integers(1, 40, n), rng.integers(1, 4, n)], 1)


def _check(op, shapes, inputs=(), args=None):
    args = args or {}
    got = batch_windows(op, shapes, inputs, args)
    assert got is not None
    anchors, out_shapes, _ = op.sample_windows(shapes, inputs, args)
    np.testing.assert_array_equal(got[0], anchors)
    np.testing.assert_array_equal(got[1], out_shapes)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
@pytest.mark.parametrize(
    "named",
    [
        ("rel_start", "rel_end"),
        ("rel_start", "rel_shape"),
        ("start", "shape"),
        ("start", "end"),
        ("rel_start",),
        ("end",),
        ("rel_shape",),
    ],
)
def test_named_windows_equal_the_per_sample_ones(seed, policy, named):
    rng = np.random.default_rng(seed)
    n = 9
    shapes = _shapes(rng, n)

    def value(name, size):
        if name.startswith("rel_"):
            return rng.uniform(-0.3, 1.3, size).round(3)
        return rng.integers(-10, 50, size).astype(np.float32)

    static = {k: value(k, 2).tolist() for k in named[:1]}
    per_sample = {k: [value(k, 2) for _ in range(n)] for k in named[1:]}
    if "shape" in per_sample or "rel_shape" in per_sample:
        per_sample = {k: [np.abs(v) for v in vs] for k, vs in per_sample.items()}
    if "rel_shape" in static:
        static = {"rel_shape": [abs(v) for v in static["rel_shape"]]}
    op = _op(out_of_bounds_policy=policy, **static)
    try:
        op.sample_windows(shapes, (), per_sample)
    except ArgumentError:  # an end before its start: the batch path defers
        assert batch_windows(op, shapes, (), per_sample) is None
        return
    _check(op, shapes, (), per_sample)
    # the same values as graph.Rows (a dense batch of parameters)
    rows = {k: Rows(v, np.stack(v)) for k, v in per_sample.items()}
    _check(op, shapes, (), rows)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["float", "int"])
@pytest.mark.parametrize("normalized", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("axes", [{"axis_names": "WH"}, {"axes": [0]}, {"axes": [2, 0, 1]}])
def test_positional_windows_equal_the_per_sample_ones(seed, kind, normalized, axes):
    rng = np.random.default_rng(seed)
    n = 7
    shapes = _shapes(rng, n)
    op = _op(
        normalized_anchor=normalized[0],
        normalized_shape=normalized[1],
        out_of_bounds_policy="pad",
        **axes,
    )
    k = len(op._axes(3))
    if kind == "float":
        anchors = [rng.uniform(-0.2, 0.8, k).astype(np.float32) for _ in range(n)]
        sizes = [rng.uniform(0, 1.2, k).astype(np.float32) for _ in range(n)]
    else:
        anchors = [rng.integers(-5, 30, k) for _ in range(n)]
        sizes = [rng.integers(0, 30, k) for _ in range(n)]
    _check(op, shapes, (anchors, sizes))


def test_error_policy_inside_and_outside():
    shapes = np.array([[10, 12, 3], [20, 8, 3]])
    op = _op(rel_start=(0.1, 0.2), rel_end=(0.9, 0.8))
    _check(op, shapes)
    op = _op(start=(0, 0), end=(9, 9))  # outside the second sample
    assert batch_windows(op, shapes, (), {}) is None
    with pytest.raises(ArgumentError, match="out of bounds"):
        op.sample_windows(shapes, (), {})


@pytest.mark.parametrize(
    "inputs, args",
    [
        ((), {"start": [np.array([1.0, 2.0]), np.array([1.0])]}),  # ragged values
        ((), {"start": [np.array([1.5, 2.0]), np.array([1.0, 2.0])]}),  # not integers
        ((), {"rel_start": [np.array([0.1, np.nan])] * 2}),  # not finite
        ((), {"shape": [np.array([-1.0, 2.0])] * 2}),  # negative shape
        ((), {"start": [np.array([1.0, 2.0, 3.0])] * 2}),  # one value too many
        (([np.array([0.1, 0.1])] * 2, [np.array([1, 1])] * 2), {}),  # mixed kinds
        (([np.float32(0.1)] * 2, [np.array([0.5], np.float32)] * 2), {}),  # shapes differ
    ],
)
def test_irregular_arguments_defer_to_the_per_sample_rules(inputs, args):
    shapes = np.array([[10, 12, 3], [20, 8, 3]])
    op = _op(
        out_of_bounds_policy="pad", axes=[0] if inputs and np.ndim(inputs[0][0]) == 0 else None
    )
    assert batch_windows(op, shapes, inputs, args) is None
    with pytest.raises(ArgumentError):
        op.sample_windows(shapes, inputs, args)
