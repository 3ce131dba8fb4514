"""types.Constant / ScalarConstant and fn.constant: which one DALI's rules give, dtypes, shapes,
broadcasting of a single value, layouts, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.graph import DataNode
from dlpipe.types import ScalarConstant


def run(build, batch_size=2):
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=1)
    with pipe:
        outs = build()
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return pipe.run()


def test_scalars_give_scalar_constants_with_dalis_types():
    assert types.Constant(3).dtype == types.INT32
    assert types.Constant(3.5).dtype == types.FLOAT
    assert types.Constant(True).dtype == types.BOOL
    assert types.Constant(np.uint16(7)).dtype == types.UINT16
    assert types.Constant(np.float64(1.0)).dtype == types.FLOAT64
    c = types.Constant(2.7, dtype=types.INT8)
    assert isinstance(c, ScalarConstant) and c.value == 2 and c.dtype == types.INT8
    assert types.Constant(5).uint8().dtype == types.UINT8
    assert types.Constant(5) == types.Constant(5) and types.Constant(5) != types.Constant(6)
    assert int(types.Constant(4)) == 4 and float(types.Constant(0.5)) == 0.5
    with pytest.raises(TypeError, match="explicitly before casting to builtin `int`"):
        int(types.Constant(0.5))
    with pytest.raises(TypeError, match="Expected scalar value"):
        types.ScalarConstant("x")


def test_lists_arrays_and_shapes_give_constant_nodes():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        for value, kw in [([1, 2], {}), (np.zeros((2, 2)), {}), (1, {"shape": [2]}),
                          (1.0, {"device": "cpu"}), (1, {"layout": "C", "shape": [1]})]:  # fmt: skip
            assert isinstance(types.Constant(value, **kw), DataNode)


def test_constant_node_values_dtypes_and_layout():
    arr64 = np.arange(6, dtype=np.float64).reshape(2, 3)
    outs = run(
        lambda: (
            types.Constant([1, 2, 3]),
            types.Constant([1, 2.5]),
            types.Constant([True, False]),
            types.Constant(arr64, layout="HW"),
            types.Constant(np.int64([5, -1])),
            types.Constant(7, shape=(2, 2), dtype=types.UINT8),
            types.Constant(300.6, dtype=types.UINT8, device="cpu"),
            types.Constant(2, device="cpu"),
        )
    )
    ints, floats, bools, arr, i64, filled, sat, scalar = outs
    assert ints.dtype == types.INT32 and ints.at(1).tolist() == [1, 2, 3]
    assert floats.dtype == types.FLOAT and floats.at(0).tolist() == [1.0, 2.5]
    assert bools.dtype == types.BOOL and bools.at(0).tolist() == [True, False]
    assert arr.dtype == types.FLOAT and arr.layout() == "HW"  # float64 narrowed as in DALI
    np.testing.assert_array_equal(arr.at(1), arr64.astype(np.float32))
    assert i64.dtype == types.INT32 and i64.at(0).tolist() == [5, -1]
    assert filled.dtype == types.UINT8 and filled.at(0).tolist() == [[7, 7], [7, 7]]
    assert sat.at(0).tolist() == 255  # converted with saturation
    assert scalar.at(0).shape == () and scalar.at(0) == 2


def test_fn_constant_and_ops_constant():
    outs = run(
        lambda: (
            fn.constant(idata=[1, 2, 3, 4], shape=[2, 2], dtype=types.INT16),
            fn.constant(fdata=0.5),
            ops.Constant(fdata=[1.0, 2.0], layout="W")(),
        )
    )
    assert outs[0].dtype == types.INT16 and outs[0].at(0).tolist() == [[1, 2], [3, 4]]
    assert outs[1].at(1).tolist() == [0.5]  # no shape: 1-D
    assert outs[2].layout() == "W" and outs[2].at(0).tolist() == [1.0, 2.0]


def test_fn_constant_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        with pytest.raises(ArgumentError, match="exactly one of fdata and idata"):
            fn.constant(fdata=[1.0], idata=[1])
        with pytest.raises(ArgumentError, match="has 3 elements but shape=\\[2, 2\\] holds 4"):
            fn.constant(idata=[1, 2, 3], shape=[2, 2])
        with pytest.raises(ArgumentError, match="layout='HWC' does not match the 2-D"):
            fn.constant(idata=[1], shape=[1, 1], layout="HWC")


def test_constant_samples_are_read_only_and_shared():
    (out,) = run(lambda: types.Constant([1, 2]), batch_size=3)
    assert out.at(0).tolist() == out.at(2).tolist() == [1, 2]
