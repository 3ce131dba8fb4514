"""fn.reshape and fn.reinterpret: shape / rel_shape / src_dims / shape input / argument inputs
against numpy reshapes, wildcard extents, layouts, the no-copy views, and DALI's errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.reinterpret import Reinterpret
from dlpipe.operators.reshape import Reshape


def run(x, in_layout="HWC", inputs=(), args=None, cls=Reshape, **kw):
    op = cls(**kw)
    op._dynamic = bool(inputs or args)
    out_layout = op.output_layouts([in_layout])[0]
    return op.run_sample((x, *inputs), args or {}, None), out_layout


X = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)


@pytest.mark.parametrize(
    "kw, shape, layout",
    [
        (dict(shape=[12, 6]), (12, 6), ""),
        (dict(shape=[6, -1]), (6, 12), ""),
        (dict(shape=[2, 2, 18]), (2, 2, 18), "HWC"),
        (dict(shape=[-1]), (72,), ""),
        (dict(rel_shape=[0.5, 2, 1]), (2, 12, 3), "HWC"),
        (dict(rel_shape=[1, -1]), (4, 18), ""),
        (dict(src_dims=[-1, 0, 1, 2]), (1, 4, 6, 3), ""),
        (dict(src_dims=[-1, 0, 1, 2], layout="FHWC"), (1, 4, 6, 3), "FHWC"),
        (dict(src_dims=[1, 0, 2]), (6, 4, 3), "HWC"),
        (dict(src_dims=[0, 1, -1, 2], rel_shape=[0.5, 2, 1, 1]), (2, 12, 1, 3), ""),
        (dict(layout="ABC"), (4, 6, 3), "ABC"),
        (dict(shape=[72], layout=""), (72,), ""),
    ],
)
def test_shapes_and_layouts(kw, shape, layout):
    out, lay = run(X, **kw)
    np.testing.assert_array_equal(out, X.reshape(shape))
    assert lay == layout
    assert np.shares_memory(out, X)  # a view, no copy


def test_src_dims_drops_unit_axes_only():
    x = np.arange(6, dtype=np.int32).reshape(2, 3, 1)
    out, lay = run(x, src_dims=[1, 0])
    assert out.shape == (3, 2) and lay == ""
    with pytest.raises(ArgumentError, match="volume of the new shape"):
        run(x, src_dims=[0, 2])
    with pytest.raises(ArgumentError, match=r"`src_dims\[1\] == 3` is out of bounds"):
        run(x, src_dims=[0, 3])


def test_shape_input_and_argument_input():
    out, lay = run(X, inputs=(np.array([3, -1, 6], np.int64),))
    np.testing.assert_array_equal(out, X.reshape(3, 4, 6))
    assert lay == "HWC"  # data-dependent rank keeps the layout
    out, _ = run(X, args={"rel_shape": np.float32([2, 0.5, 1])})
    assert out.shape == (8, 3, 3)
    with pytest.raises(ArgumentError, match="keeps the input layout 'HWC'"):
        run(X, args={"shape": np.int32([72])})
    out, lay = run(X, args={"shape": np.int32([72])}, layout="")
    assert out.shape == (72,) and lay == ""


@pytest.mark.parametrize(
    "kw, inputs, match",
    [
        (dict(shape=[5, -1]), (), "same size in bytes"),
        (dict(shape=[7, 7]), (), "same size in bytes"),
        (dict(layout="AB"), (), "'AB' is not compatible with a 3D shape"),
        (dict(rel_shape=[1, 1, 1, 1]), (), "rel_shape` has more elements"),
        (dict(src_dims=[0, 1], rel_shape=[1, 1, 1]), (), "different lengths"),
        (dict(layout="XY"), (np.int32([72]),), "'XY' is not compatible"),
        (dict(layout=""), (np.float32([72]),), "integral type"),
        (dict(layout=""), (np.int32([-1, -1]),), "only one dimension"),
    ],
)
def test_run_errors(kw, inputs, match):
    with pytest.raises(ArgumentError, match=match):
        run(X, inputs=inputs, **kw)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(shape=[-1, -1]), "only one negative extent"),
        (dict(shape=[0, 3]), "extent of 0 is illegal"),
        (dict(rel_shape=[]), "empty list"),
        (dict(rel_shape=[0.5, 0]), "extent of 0"),
        (dict(shape="12"), "shape='12'"),
    ],
)
def test_build_errors(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Reshape(**kw)


def _pipe(build, batch=(X, X[:2])):
    pipe = Pipeline(batch_size=len(batch), num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: list(batch), batch=True, layout="HWC")
        pipe.set_outputs(*build(d))
    return pipe


def test_graph_errors_and_pipeline():
    with pytest.raises(ArgumentError, match="no-op"):
        _pipe(lambda d: [fn.reshape(d)])
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        _pipe(lambda d: [fn.reshape(d, shape=[-1], rel_shape=[1])])
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        _pipe(lambda d: [fn.reshape(d, d, shape=[-1])])
    flat, cdhw = _pipe(
        lambda d: [fn.reshape(d, shape=[-1]), ops.Reshape(src_dims=[2, -1, 0, 1], layout="CDHW")(d)]
    ).run()
    assert flat.layout() == "" and cdhw.layout() == "CDHW"
    assert flat.shape() == [(72,), (36,)]
    np.testing.assert_array_equal(flat.at(1), X[:2].reshape(-1))
    assert cdhw.shape() == [(3, 1, 4, 6), (3, 1, 2, 6)]
    np.testing.assert_array_equal(cdhw.at(0), X.reshape(3, 1, 4, 6))


def test_reinterpret():
    x = np.arange(8, dtype=np.uint8).reshape(2, 4)
    out, lay = run(x, "HW", cls=Reinterpret, dtype=types.INT32)
    np.testing.assert_array_equal(out, x.reshape(-1).view(np.int32).reshape(2, 1))
    assert lay == "HW"
    out, _ = run(x, "HW", cls=Reinterpret, dtype=types.UINT16, shape=[-1])
    np.testing.assert_array_equal(out, x.reshape(-1).view(np.uint16))
    with pytest.raises(ArgumentError, match="innermost dimension is not divisible"):
        run(x[:, :3].copy(), "HW", cls=Reinterpret, dtype=types.INT16)
    with pytest.raises(ArgumentError, match="same size in bytes"):
        run(x, "HW", cls=Reinterpret, dtype=types.INT32, shape=[4])
    with pytest.raises(ArgumentError, match="neither new shape, layout nor type"):
        _pipe(lambda d: [fn.reinterpret(d)])
