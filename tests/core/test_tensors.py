"""TensorListCPU: sample access, dense conversion, DLPack, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import PipelineError, TensorListCPU, types


def test_list_of_samples():
    samples = [np.full((2, 3), i, np.float32) for i in range(4)]
    tl = TensorListCPU(samples, layout="HW", source_info=["a", "b", "c", "d"])
    assert len(tl) == 4 and tl.layout() == "HW" and tl.ndim() == 2
    assert tl.dtype == types.FLOAT and tl.shape() == [(2, 3)] * 4
    np.testing.assert_array_equal(tl.at(2), samples[2])
    assert tl[-1].source_info() == "d" and tl[1].shape() == [2, 3]
    assert tl.is_dense_tensor()
    dense = tl.as_tensor()  # DALI's TensorCPU: shape() a list, dtype a DALIDataType
    assert dense.shape() == [4, 2, 3] and dense.dtype == types.FLOAT and dense.layout() == "NHW"
    assert np.asarray(dense)[3, 0, 0] == 3
    assert tl.as_cpu() is tl
    with pytest.raises(IndexError):
        tl[4]


def test_ragged_batch_is_not_dense():
    tl = TensorListCPU([np.zeros((2, 2), np.uint8), np.zeros((3, 2), np.uint8)])
    assert not tl.is_dense_tensor()
    with pytest.raises(PipelineError, match="same shape"):
        tl.as_array()


def test_from_array_shares_memory_and_dlpack():
    arr = np.arange(24, dtype=np.int32).reshape(4, 6)
    tl = TensorListCPU(arr, layout="W")
    assert tl.as_array() is arr and np.shares_memory(tl.at(1), arr)
    back = np.from_dlpack(tl)
    np.testing.assert_array_equal(back, arr)
    assert tl.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(tl[2]), arr[2])


def test_mixed_dtypes_and_zero_dim_are_errors():
    with pytest.raises(TypeError, match="mixed dtypes"):
        TensorListCPU([np.zeros(2, np.uint8), np.zeros(2, np.float32)])
    with pytest.raises(ValueError, match="0-dim"):
        TensorListCPU(np.float32(1.0))
