"""The host side of the GPU reductions and one_hot: descriptors run through numpy models of
``reduce.cu`` and ``one_hot.cu`` over a fake device memory, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels.one_hot import one_hot_descriptors
from dlpipe.kernels.reduce import MAX_DIMS, REDUCE_DESC, reduce_descriptors

BASE = 4096


def strided_sample(x):
    """A transposed view (strided input), its address and strides in elements."""
    mem = np.ascontiguousarray(x.T)
    view = mem.T
    strides = [s // x.itemsize for s in view.strides]
    return mem.reshape(-1), strides


def reduce_model(d, flat, op):
    """reduce_small/reduce_block: each output combines its reduced elements in float64."""
    kept = d["kept_shape"][: d["n_kept"]]
    ks = d["kept_strides"][: d["n_kept"]]
    red = d["red_shape"][: d["n_reduced"]]
    rs = d["red_strides"][: d["n_reduced"]]
    out = []
    for o in np.ndindex(*kept):
        base = int((np.array(o, dtype=np.int64) * ks).sum()) if len(kept) else 0
        vals = [
            flat[base + int((np.array(r, dtype=np.int64) * rs).sum())] for r in np.ndindex(*red)
        ]
        v = np.array(vals, np.float64)
        if op == "sum":
            out.append(v.sum())
        elif op == "max":
            out.append(v.max())
        else:
            out.append(v.sum() * d["norm"])
    return np.array(out).reshape(tuple(int(k) for k in kept))


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 2), (0, 1, 2), ()])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_reduce_descriptors(axes, op):
    rng = np.random.default_rng(len(axes))
    x = rng.integers(0, 50, (3, 4, 2)).astype(np.float64)
    flat, strides = strided_sample(x)
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    d = reduce_descriptors([BASE], [BASE], [x.shape], [strides], axes, [1.0 / count])
    assert d.dtype == REDUCE_DESC and REDUCE_DESC.itemsize == 8 * (7 + 4 * MAX_DIMS + 1)
    got = reduce_model(d[0], flat, op)
    ref = {"sum": np.sum, "max": np.max, "mean": np.mean}[op]
    want = ref(x, axis=axes) if axes else x
    np.testing.assert_allclose(got, want)
    assert int(d["n_out"][0]) == int(np.prod(np.shape(want)))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_one_hot_descriptors(axis):
    rng = np.random.default_rng(axis)
    x = rng.integers(-1, 5, (3, 2)).astype(np.int32)
    nc = 4
    out_shape = list(x.shape)
    out_shape.insert(axis, nc)
    d = one_hot_descriptors([0], [0], [out_shape], axis)[0]
    flat_in = x.reshape(-1)
    got = np.empty(int(d["size"]), np.float32)
    for i in range(int(d["size"])):  # what one_hot.cu does per output element
        j, rest = i % d["inner"], i // d["inner"]
        c, outer = rest % nc, rest // nc
        got[i] = 1.0 if flat_in[outer * d["inner"] + j] == c else 0.0
    want = np.moveaxis((x[..., None] == np.arange(nc)).astype(np.float32), -1, axis)
    np.testing.assert_array_equal(got.reshape(out_shape), want)
