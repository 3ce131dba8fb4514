"""fn.transpose: numpy transposes of every permutation up to 4-D, layouts (transpose_layout,
output_layout), dtypes, a pipeline, and the argument errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.transpose import Transpose


@pytest.mark.parametrize(
    "perm", [p for n in (1, 2, 3, 4) for p in itertools.permutations(range(n))][:20]
)
def test_matches_numpy(perm):
    rng = np.random.default_rng(len(perm))
    x = rng.integers(0, 100, rng.integers(1, 5, len(perm))).astype(np.int16)
    out = Transpose(perm=perm).run_sample((x,), {}, None)
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    assert out.flags.c_contiguous and out.dtype == np.int16


@pytest.mark.parametrize(
    "kw, layout, want",
    [
        (dict(perm=[2, 0, 1]), "HWC", "CHW"),
        (dict(perm=[2, 0, 1], transpose_layout=False), "HWC", "HWC"),
        (dict(perm=[2, 0, 1], output_layout="ABC"), "HWC", "ABC"),
        (dict(perm=[1, 0], transpose_layout=True), "", ""),
        (dict(perm=[0, 3, 1, 2]), "FHWC", "FCHW"),
    ],
)
def test_layouts(kw, layout, want):
    assert Transpose(**kw).output_layouts([layout]) == [want]


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int64, np.float16, np.float64])
def test_any_dtype(dtype):
    x = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        Transpose(perm=[1, 2, 0]).run_sample((x,), {}, None), x.transpose(1, 2, 0)
    )


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(), "perm is required"),
        (dict(perm=[0, 0, 1]), r"perm=\[0, 0, 1\] is not a permutation"),
        (dict(perm=[1, 2]), "not a permutation"),
        (dict(perm=[1, 0], output_layout=""), "empty output_layout"),
        (dict(perm=[1, 0], output_layout="HWC"), "output_layout='HWC'"),
        (dict(perm="ab"), "perm='ab'"),
    ],
)
def test_argument_errors(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Transpose(**kw)


def test_rank_mismatch():
    with pytest.raises(ArgumentError, match=r"dimensionality \(2\).*\(3\)"):
        Transpose(perm=[2, 0, 1]).run_sample((np.zeros((2, 2)),), {}, None)
    with pytest.raises(ArgumentError, match="layout 'HW' has 2 axes"):
        Transpose(perm=[2, 0, 1]).output_layouts(["HW"])


def test_pipeline_ragged_batch_and_ops_spelling():
    batch = [np.arange(24, dtype=np.uint8).reshape(2, 4, 3), np.ones((5, 1, 3), np.uint8)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        pipe.set_outputs(fn.transpose(d, perm=[2, 0, 1]), ops.Transpose(perm=[1, 0, 2])(d))
    chw, whc = pipe.run()
    assert chw.layout() == "CHW" and whc.layout() == "WHC"
    for i, x in enumerate(batch):
        np.testing.assert_array_equal(chw.at(i), x.transpose(2, 0, 1))
        np.testing.assert_array_equal(whc.at(i), x.transpose(1, 0, 2))
