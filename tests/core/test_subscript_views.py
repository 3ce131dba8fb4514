"""The GPU subscript's integer indices over whole batches (no GPU needed): the views worked out
with numpy over the batch equal the per-sample ones, and anything else is left to them."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.operators.subscript import TensorSubscript, resolve, subscript_view


class _Samples:  # the shape/stride arrays of a SampleList
    def __init__(self, shapes, strides):
        self.shapes = np.asarray(shapes, np.int64)
        self.strides = np.asarray(strides, np.int64)


def _op(nsub: int, **statics):
    return TensorSubscript(_items=(("sub", "at"),) * nsub, num_subscripts=nsub, **statics)


@pytest.mark.parametrize("nsub, statics", [(1, {}), (2, {}), (2, {"at_1": -1}), (3, {})])
def test_index_views_equal_per_sample_views(nsub, statics):
    rng = np.random.default_rng(0)
    n = 25
    shapes = rng.integers(1, 9, (n, 3))
    strides = np.stack([[s[1] * s[2] * 2, s[2] + 1, 1] for s in shapes])
    op = _op(nsub, **statics)
    args = {}
    for i in range(nsub):
        if f"at_{i}" not in statics:
            ext = shapes[:, i]
            args[f"at_{i}"] = [np.int32(rng.integers(-e, e)) for e in ext]
    offsets, out_shapes, out_strides = op._index_views(_Samples(shapes, strides), args, n)
    for j in range(n):
        index = resolve(op.items, op.statics, {k: v[j] for k, v in args.items()}, shapes[j])
        off, shp, st = subscript_view(tuple(shapes[j]), strides[j], index)
        assert (offsets[j], tuple(out_shapes[j]), tuple(out_strides[j])) == (off, shp, st)


def test_index_views_leave_other_subscripts_to_the_per_sample_path():
    s = _Samples([[4, 2], [5, 2]], [[2, 1], [2, 1]])
    op = _op(1)
    assert op._index_views(s, {"at_0": [np.int32(1), np.int32(5)]}, 2) is None  # out of range
    assert op._index_views(s, {"at_0": [np.int32(1), np.array([1, 2])]}, 2) is None
    assert op._index_views(s, {"at_0": [np.float32(1), np.float32(0)]}, 2) is None
    sl = TensorSubscript(_items=(("sub", "slice"),), num_subscripts=1, lo_0=1)
    assert sl._index_views(s, {}, 2) is None
