"""fn.one_hot: numpy one-hot references for every axis, the legacy scalar rule, dtypes and
on/off values, out-of-range classes, layouts, a pipeline and the errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.one_hot import OneHot


def ref(x, n, axis, on=1.0, off=0.0, dtype=np.float32):
    x = np.asarray(x)
    eye = np.where(np.arange(n)[None, :] == np.trunc(x.reshape(-1, 1)), on, off)
    out = eye.reshape(*x.shape, n)
    return np.moveaxis(out, -1, axis if axis >= 0 else x.ndim).astype(dtype)


def run_batch(batch, layout="", **kw):
    op = OneHot(**kw)
    lay = op.output_layouts([layout])[0]
    return op.run_batch_cpu([[np.asarray(x) for x in batch]], {}, None)[0], lay


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_axes_match_numpy(axis):
    rng = np.random.default_rng(axis + 5)
    x = rng.integers(-1, 6, (3, 4)).astype(np.int32)  # -1 and 5 are out of range for 5 classes
    out, lay = run_batch([x], num_classes=5, axis=axis)
    np.testing.assert_array_equal(out[0], ref(x, 5, axis))
    assert out[0].dtype == np.float32 and lay == ""


def test_legacy_scalars_without_axis():
    batch = [np.array([[2]], np.int64), np.array([0], np.int64), np.array(7, np.int64)]
    out, _ = run_batch(batch, num_classes=4)
    assert [o.shape for o in out] == [(4,)] * 3
    np.testing.assert_array_equal(out[0], [0, 0, 1, 0])
    np.testing.assert_array_equal(out[2], [0, 0, 0, 0])
    # the same batch with an explicit axis keeps the dimensions
    out, _ = run_batch([batch[0]], num_classes=4, axis=0)
    assert out[0].shape == (4, 1, 1)


def test_float_input_truncates_and_dtype_on_off():
    x = np.array([0.9, 1.5, -0.5, 2.99], np.float32)
    out, _ = run_batch([x], num_classes=3, dtype=types.INT16, on_value=7.9, off_value=-2.2)
    np.testing.assert_array_equal(out[0], ref(x, 3, -1, 7, -2, np.int16))
    assert out[0].dtype == np.int16


@pytest.mark.parametrize(
    "kw, layout, want",
    [
        (dict(axis_name="C"), "HW", "HWC"),
        (dict(axis_name="C", axis=0), "HW", "CHW"),
        (dict(), "HW", ""),
        (dict(axis_name="C"), "", "C"),
    ],
)
def test_layouts(kw, layout, want):
    assert OneHot(num_classes=2, **kw).output_layouts([layout]) == [want]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(num_classes=-1), "num_classes=-1"),
        (dict(num_classes=2.5), "num_classes=2.5"),
        (dict(dtype=types.FLOAT16), "FLOAT16"),
        (dict(dtype=types.BOOL), "BOOL"),
        (dict(axis_name="CH"), "single character"),
    ],
)
def test_build_errors(kw, match):
    with pytest.raises(ArgumentError, match=match):
        OneHot(**kw)


def test_run_errors():
    with pytest.raises(ArgumentError, match=r"axis=3 is outside of the allowed range \[-1, 2\]"):
        run_batch([np.zeros((2, 2))], num_classes=2, axis=3)
    with pytest.raises(ArgumentError, match="input has none"):
        run_batch([np.zeros((2, 2))], num_classes=2, axis_name="C")


def test_pipeline_per_sample_with_axis():
    labels = [np.array([1, 0, 2], np.int32), np.array([3], np.int32)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: labels, batch=True, layout="N")
        pipe.set_outputs(
            fn.one_hot(d, num_classes=4, axis=1, axis_name="K"),
            ops.OneHot(num_classes=4, dtype=types.UINT8)(d),
        )
    a, b = pipe.run()
    assert a.layout() == "NK" and b.layout() == ""
    for i, x in enumerate(labels):
        np.testing.assert_array_equal(a.at(i), ref(x, 4, 1))
        np.testing.assert_array_equal(b.at(i), ref(x, 4, -1, dtype=np.uint8))
