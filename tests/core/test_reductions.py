"""fn.reductions.*: numpy references over random axes with keep_dims, DALI's output types,
std_dev/variance with a mean input and ddof, layouts, empty axes, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.graph import REGISTRY

REFS = {
    "min": lambda x, a: np.min(x, axis=a),
    "max": lambda x, a: np.max(x, axis=a),
    "sum": lambda x, a: np.sum(x.astype(np.float64), axis=a),
    "mean": lambda x, a: np.mean(x.astype(np.float64), axis=a),
    "mean_square": lambda x, a: np.mean(x.astype(np.float64) ** 2, axis=a),
    "rms": lambda x, a: np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=a)),
}
DTYPES = {
    ("min", np.uint8): np.uint8,
    ("max", np.int16): np.int16,
    ("sum", np.uint8): np.uint64,
    ("sum", np.int32): np.int64,
    ("sum", np.float32): np.float32,
    ("mean", np.uint8): np.float32,
    ("mean_square", np.int16): np.float32,
    ("rms", np.float32): np.float32,
}


def run(name, x, layout="", inputs=(), **kw):
    op = REGISTRY[f"reductions.{name}"](**kw)
    lay = op.output_layouts([layout])[0]
    return op.run_sample((x, *inputs), {}, None), lay


@pytest.mark.parametrize("name, dtype", sorted(DTYPES, key=str))
@pytest.mark.parametrize("axes", [None, (0,), (1, 2), (0, 2), (-1,)])
@pytest.mark.parametrize("keep_dims", [False, True])
def test_matches_numpy(name, dtype, axes, keep_dims):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 100, (3, 4, 5)).astype(dtype)
    out, _ = run(name, x, axes=axes, keep_dims=keep_dims)
    a = tuple(range(3)) if axes is None else tuple(v % 3 for v in axes)
    want = REFS[name](x, a)
    if keep_dims:
        want = np.expand_dims(want, a)
    assert out.dtype == DTYPES[(name, dtype)]
    assert out.shape == np.shape(want)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-6)


def test_full_reduction_is_a_scalar_and_layouts():
    x = np.ones((2, 3, 4), np.float32)
    out, lay = run("sum", x, "HWC")
    assert out.shape == () and lay == ""
    out, lay = run("mean", x, "HWC", axis_names="HW")
    assert out.shape == (4,) and lay == "C"
    out, lay = run("max", x, "HWC", axis_names="W", keep_dims=True)
    assert out.shape == (2, 1, 4) and lay == "HWC"
    out, lay = run("min", x, "HWC", axes=[])
    np.testing.assert_array_equal(out, x)
    assert lay == "HWC"


def test_dtype_argument():
    x = np.array([[200, 100], [50, 7]], np.uint8)
    out, _ = run("sum", x, dtype=types.FLOAT)
    assert out.dtype == np.float32 and out == 357
    out, _ = run("mean", x, axes=[1], dtype=types.INT32)
    np.testing.assert_array_equal(out, [150, 28])  # 28.5 truncates
    assert out.dtype == np.int32


@pytest.mark.parametrize("name", ["std_dev", "variance"])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("keep_mean_dims", [False, True])
def test_std_dev_and_variance_with_a_mean_input(name, ddof, keep_mean_dims):
    rng = np.random.default_rng(ddof)
    x = rng.normal(5, 3, (4, 6, 3)).astype(np.float32)
    mean = x.mean(axis=(0, 1), keepdims=keep_mean_dims).astype(np.float32)
    out, lay = run(name, x, "HWC", inputs=(mean,), axis_names="HW", ddof=ddof)
    want = np.var(x.astype(np.float64), axis=(0, 1), ddof=ddof)
    if name == "std_dev":
        want = np.sqrt(want)
    assert out.dtype == np.float32 and out.shape == (3,) and lay == "C"
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_std_dev_empty_axes_gives_zeros_and_errors():
    x = np.ones((2, 3), np.uint8)
    out, _ = run("std_dev", x, inputs=(np.ones((2, 3), np.float32),), axes=[])
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))
    with pytest.raises(ArgumentError, match="must be FLOAT"):
        run("variance", x, inputs=(np.ones((), np.int32),))
    with pytest.raises(ArgumentError, match="does not match the reduced shape"):
        run("variance", x, inputs=(np.ones(4, np.float32),), axes=[0])


def test_empty_reductions_use_dali_neutral_values():
    x = np.zeros((0, 3), np.int16)
    out, _ = run("min", x, axes=[0])
    np.testing.assert_array_equal(out, [32767] * 3)
    out, _ = run("max", x, axes=[0])
    np.testing.assert_array_equal(out, [-32768] * 3)
    out, _ = run("sum", x, axes=[0])
    np.testing.assert_array_equal(out, [0, 0, 0])


@pytest.mark.parametrize(
    "name, kw, match",
    [
        ("sum", dict(axes=[0], axis_names="H"), "mutually exclusive"),
        ("min", dict(dtype=types.FLOAT), "dtype"),
        ("variance", dict(ddof=0.5), "ddof=0.5"),
    ],
)
def test_build_errors(name, kw, match):
    with pytest.raises(ArgumentError, match=match):
        REGISTRY[f"reductions.{name}"](**kw)


def test_run_errors():
    with pytest.raises(ArgumentError, match="out of range"):
        run("sum", np.ones((2, 2)), axes=[2])
    with pytest.raises(ArgumentError, match="duplicate"):
        run("sum", np.ones((2, 2)), axes=[0, -2])
    with pytest.raises(ArgumentError, match="'C' is not in the input layout"):
        run("sum", np.ones((2, 2)), "HW", axis_names="C")


def test_pipeline_and_ops_spellings():
    batch = [np.arange(24, dtype=np.float32).reshape(2, 4, 3), np.ones((5, 1, 3), np.float32)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        mean = fn.reductions.mean(d, axis_names="HW")
        std = ops.reductions.StdDev(axis_names="HW")(d, mean)
        pipe.set_outputs(mean, std, ops.reductions.RMS()(d))
    mean, std, rms = pipe.run()
    assert mean.layout() == "C" and std.layout() == "C" and rms.layout() == ""
    for i, x in enumerate(batch):
        np.testing.assert_allclose(mean.at(i), x.mean(axis=(0, 1)), rtol=1e-6)
        np.testing.assert_allclose(std.at(i), x.std(axis=(0, 1)), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rms.at(i), np.sqrt((x.astype(np.float64) ** 2).mean()))
