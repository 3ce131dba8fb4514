"""Host side of the random-number kernel (``kernels/rng.py``): the descriptor layout and the
per-sample parameters each random operator hands it (checkable without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.errors import ArgumentError
from dlpipe.kernels import rng
from dlpipe.operators.random import CoinFlip, Normal, Uniform


def test_descriptor_layout_matches_the_cuda_struct():
    # rng.cu RandDesc: out_ptr, n, seed, a, b, values_ptr, nvalues; 8 bytes each
    assert rng.RAND_DESC.names == ("out_ptr", "n", "seed", "a", "b", "values_ptr", "nvalues")
    assert rng.RAND_DESC.itemsize == 56
    assert [rng.RAND_DESC.fields[f][1] for f in rng.RAND_DESC.names] == list(range(0, 56, 8))


def test_descriptors():
    d = rng.rand_descriptors(
        np.array([2**63 + 16, 4096], np.uint64),
        np.array([10, 0]),
        np.array([2**63 - 2, 0], np.int64),
        np.array([0.5, -1.0]),
        np.array([2.0, 3.0]),
        np.array([1024, 2048], np.uint64),
        np.array([3, 1]),
    )
    assert d["out_ptr"].view(np.uint64).tolist() == [2**63 + 16, 4096]
    assert d["n"].tolist() == [10, 0] and d["seed"].tolist() == [2**63 - 2, 0]
    assert d["a"].tolist() == [0.5, -1.0] and d["b"].tolist() == [2.0, 3.0]
    assert d["values_ptr"].tolist() == [1024, 2048] and d["nvalues"].tolist() == [3, 1]
    d = rng.rand_descriptors(np.zeros(2, np.uint64), [1, 2], [1, 2], 0.0, 1.0)
    assert d["values_ptr"].tolist() == [0, 0] and d["nvalues"].tolist() == [0, 0]


def test_normal_parameters():
    op = Normal(mean=1.5, stddev=2.0)
    mode, a, b, values = op._device_params({}, 3)
    assert mode == "normal" and a.tolist() == [1.5] * 3 and b.tolist() == [2.0] * 3
    assert values is None
    args = {"mean": [np.float32(0), np.float32(-1)], "stddev": [np.float32(3), np.float32(4)]}
    mode, a, b, _ = op._device_params(args, 2)
    assert a.tolist() == [0, -1] and b.tolist() == [3, 4]
    with pytest.raises(ArgumentError, match="stddev"):
        op._device_params({"stddev": [np.float32(-1)]}, 1)


def test_uniform_parameters():
    mode, a, b, values = Uniform(range=(-2, 5))._device_params({}, 2)
    assert mode == "uniform" and a.tolist() == [-2, -2] and b.tolist() == [5, 5]
    args = {"range": [np.array([0, 1], np.float32), np.array([3, 9], np.float32)]}
    mode, a, b, _ = Uniform()._device_params(args, 2)
    assert a.tolist() == [0, 3] and b.tolist() == [1, 9]
    mode, _, _, values = Uniform(values=[1, 7, 9])._device_params({}, 2)
    assert mode == "values" and [v.tolist() for v in values] == [[1, 7, 9]] * 2
    args = {"values": [np.array([4.0]), np.array([1.0, 2.0])]}
    mode, _, _, values = Uniform()._device_params(args, 2)
    assert mode == "values" and [v.tolist() for v in values] == [[4], [1, 2]]
    with pytest.raises(ArgumentError, match="range and values"):
        Uniform(range=(0, 1))._device_params(args, 2)
    with pytest.raises(ArgumentError, match="min <= max"):
        Uniform()._device_params({"range": [np.array([2, 1], np.float32)]}, 1)


def test_coin_flip_parameters():
    mode, a, _, _ = CoinFlip(probability=0.25)._device_params({}, 2)
    assert mode == "coin_flip" and a.tolist() == [0.25, 0.25]
    mode, a, _, _ = CoinFlip()._device_params({"probability": [np.float32(1.0)]}, 1)
    assert a.tolist() == [1.0]
    with pytest.raises(ArgumentError, match="probability"):
        CoinFlip()._device_params({"probability": [np.float32(1.5)]}, 1)


def test_output_types_are_the_kernels():
    assert np.dtype(np.float32) in rng.OUT_TYPES and np.dtype(np.int16) in rng.OUT_TYPES
    assert np.dtype(np.bool_) not in rng.OUT_TYPES and np.dtype(np.int64) not in rng.OUT_TYPES
