"""Host-side bookkeeping of ``fn.normalize`` on the GPU (``operators/_normalize_gpu.py``),
checkable without a GPU: statistics shapes and counts, and the per-sample parameters."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.errors import ArgumentError
from dlpipe.operators._normalize_gpu import _host_param, _host_params, kept_shapes
from dlpipe.operators.normalize import Normalize


@pytest.mark.parametrize("axes", [(1,), (0,), (0, 1), (), (0, 2)])
def test_kept_shapes(axes):
    shapes = np.array([[64, 113, 2], [64, 16, 1], [3, 0, 5]])
    keep, counts = kept_shapes(shapes, axes)
    for i, sh in enumerate(shapes):
        want = [1 if d in axes else int(e) for d, e in enumerate(sh)]
        assert keep[i].tolist() == want
        assert counts[i] == int(np.prod([sh[a] for a in axes])) if axes else counts[i] == 1
    assert keep.dtype == counts.dtype == np.int64
    keep, counts = kept_shapes(np.zeros((0, 2), np.int64), (1,))
    assert keep.shape == (0, 2) and counts.shape == (0,)


def per_sample(op, args, name, shapes):
    return [
        _host_param(op, {k: a[i] for k, a in args.items()}, name, shapes[i])
        for i in range(len(shapes))
    ]


@pytest.mark.parametrize(
    "kw, args",
    [
        (dict(axes=[1]), {}),
        (dict(mean=2.0, stddev=3.0), {}),
        (dict(mean=[[1.0], [2.0]]), {}),
        (dict(axes=[1]), {"mean": [np.float32(1), np.float32(-2)]}),
        (dict(stddev=4.0), {"mean": [np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32)]}),
    ],
)
def test_host_params_are_the_per_sample_ones(kw, args):
    op = Normalize(**kw)
    shapes = np.array([[2, 7], [2, 3]])
    for name in ("mean", "stddev"):
        got = _host_params(op, args, name, shapes)
        want = per_sample(op, args, name, shapes)
        assert len(got) == len(want) == 2
        for g, w in zip(got, want, strict=True):
            assert (g is None and w is None) or (g.dtype == w.dtype and np.array_equal(g, w))


def test_host_params_check_each_sample():
    op = Normalize(mean=[[1.0, 2.0, 3.0]])
    with pytest.raises(ArgumentError, match="does not broadcast"):
        _host_params(op, {}, "mean", np.array([[4, 3], [4, 5]]))
