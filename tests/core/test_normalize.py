"""fn.normalize against float64 numpy references: computed and given mean/stddev, axes and
axis_names, epsilon, ddof, scale/shift, integer outputs, zero variance, batch=True; argument
inputs through a pipeline; errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.normalize import Normalize


def ref_normalize(x, axes=None, mean=None, stddev=None, epsilon=0.0, ddof=0, scale=1.0, shift=0.0):
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim)) if axes is None else tuple(axes)
    m = x.mean(axis=axes, keepdims=True) if mean is None else np.asarray(mean, np.float64)
    if stddev is None:
        n = np.prod([x.shape[a] for a in axes])
        ss = ((x - m) ** 2).sum(axis=axes, keepdims=True)
        var = ss / (n - ddof) + epsilon if n > ddof else np.full_like(ss, epsilon)
    else:
        var = np.asarray(stddev, np.float64) ** 2 + epsilon
    with np.errstate(divide="ignore"):
        inv = np.where(var > 0, scale / np.sqrt(np.where(var > 0, var, 1)), 0.0)
    return (x - m) * inv + shift


def run_op(x, layout="", args=None, **kwargs):
    op = Normalize(**kwargs)
    op.output_layouts([layout])
    return op.run_sample((x,), args or {}, None)


def data(shape=(6, 7, 3), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.normal(5, 3, shape)).astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("axes", [None, (0, 1), (2,), (0,), (-1,)])
def test_computed_mean_and_stddev(dtype, axes):
    x = data(dtype=dtype)
    out = run_op(x, axes=axes)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref_normalize(x, axes), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "kw",
    [{}, dict(epsilon=1e-10, ddof=1), dict(shift=3.0, scale=0.5), dict(dtype=types.INT16)],
)
def test_float32_log_mel_features_over_time(kw):
    """The float32 path (``x - mean`` in float32, squares summed in float64) on Jasper/NeMo's
    (features, time) log-mel shapes, a far-from-zero mean and a constant row included."""
    rng = np.random.default_rng(7)
    x = (rng.normal(-20, 4, (64, 851)) + np.linspace(0, 3, 851)).astype(np.float32)
    x[5] = -46.0  # zero variance: shift
    out = run_op(x, axes=[1], **kw)
    want = ref_normalize(x, (1,), **{k: v for k, v in kw.items() if k != "dtype"})
    if "dtype" in kw:
        assert out.dtype == np.int16
        want = np.clip(np.sign(want) * np.floor(np.abs(want) + 0.5), -32768, 32767)
        np.testing.assert_allclose(out, want, atol=1)
        return
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-6)
    assert (out[5] == np.float32(kw.get("shift", 0.0))).all()


def test_axis_names_epsilon_ddof_scale_shift():
    x = data(seed=1)
    kw = dict(epsilon=0.5, ddof=1, scale=2.0, shift=10.0)
    out = run_op(x, "HWC", axis_names="HW", **kw)
    np.testing.assert_allclose(out, ref_normalize(x, (0, 1), **kw), rtol=1e-4, atol=1e-4)


def test_given_scalar_and_tensor_parameters():
    x = data(seed=2)
    np.testing.assert_allclose(run_op(x, mean=1.0, stddev=4.0), (x - 1.0) / 4.0, rtol=1e-6)
    m = np.array([[[1.0, 2.0, 3.0]]], np.float32)
    out = run_op(x, args={"mean": m})  # stddev computed over the axes where mean is 1 wide
    np.testing.assert_allclose(out, ref_normalize(x, (0, 1), mean=m), rtol=1e-4, atol=1e-4)
    s = np.full((1, 7, 1), 2.0, np.float32)
    out = run_op(x, args={"stddev": s}, epsilon=1.0)
    np.testing.assert_allclose(
        out, ref_normalize(x, (0, 2), stddev=s, epsilon=1.0), rtol=1e-4, atol=1e-4
    )


def test_zero_variance_gives_shift_and_zero_stddev_gives_shift():
    x = np.full((4, 4), 7.0, np.float32)
    np.testing.assert_array_equal(run_op(x, shift=3.0), np.full((4, 4), 3.0))
    np.testing.assert_array_equal(run_op(x, stddev=0.0, mean=1.0), np.zeros((4, 4)))
    np.testing.assert_array_equal(run_op(np.ones(1, np.float32), ddof=1), np.zeros(1))


@pytest.mark.parametrize(
    "dtype, np_dtype",
    [(types.UINT8, np.uint8), (types.INT16, np.int16), (types.FLOAT16, np.float16)],
)
def test_integer_outputs_round_and_saturate(dtype, np_dtype):
    x = data(seed=3)
    out = run_op(x, dtype=dtype, scale=64.0, shift=128.0)
    ref = ref_normalize(x, scale=64.0, shift=128.0)
    if np.dtype(np_dtype).kind == "f":
        np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-2)
        return
    info = np.iinfo(np_dtype)
    expected = np.clip(np.sign(ref) * np.floor(np.abs(ref) + 0.5), info.min, info.max)
    assert out.dtype == np_dtype and (np.abs(out.astype(np.int64) - expected) <= 1).all()
    assert (out == expected).mean() > 0.99  # off by one only at float32-vs-float64 ties
    if np_dtype == np.uint8:
        assert out.min() == 0 and out.max() == 255


def test_batch_mode_matches_reference():
    xs = [data((n, 4, 3), seed=n) for n in (5, 2, 7)]
    op = Normalize(batch=True, axes=(0, 1))
    assert op.batch_level
    op.output_layouts(["HWC"])
    (outs,) = op.run_batch_cpu([xs], {}, None)
    allx = np.concatenate([x.astype(np.float64) for x in xs])
    m = allx.mean(axis=(0, 1), keepdims=True)
    s = allx.std(axis=(0, 1), keepdims=True)
    for x, o in zip(xs, outs, strict=True):
        np.testing.assert_allclose(o, (x - m) / s, rtol=1e-4, atol=1e-4)


def test_batch_mode_in_pipeline_and_per_sample_mode_differ():
    batch = [data((3, 4), seed=s) * (s + 1) for s in range(4)]
    pipe = Pipeline(batch_size=4, num_threads=2, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: batch, layout="HW")
        pipe.set_outputs(
            fn.normalize(x, batch=True),
            ops.Normalize()(x),
            fn.normalize(x, mean=fn.random.uniform(range=(0, 1)), stddev=2.0),
        )
    b, s, given = pipe.run()
    allx = np.stack(batch).astype(np.float64)
    for i in range(4):
        np.testing.assert_allclose(
            b.at(i), (batch[i] - allx.mean()) / allx.std(), rtol=1e-4, atol=1e-4
        )
        np.testing.assert_allclose(s.at(i), ref_normalize(batch[i]), rtol=1e-4, atol=1e-4)
    assert b.layout() == "HW"
    assert np.asarray(given.at(0)).shape == (3, 4)


def test_batch_mode_needs_matching_kept_extents():
    op = Normalize(batch=True, axes=(0,))
    op.output_layouts([""])
    with pytest.raises(ArgumentError, match="equal extents in the non-reduced axes"):
        op.run_batch_cpu([[np.zeros((2, 3)), np.zeros((2, 4))]], {}, None)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(axes=[0], axis_names="H"), "cannot be given together"),
        (dict(axes="x"), "axes='x'"),
        (dict(ddof=-1), "ddof=-1"),
        (dict(epsilon=-1.0), "epsilon=-1.0"),
        (dict(batch=True, mean=[1.0, 2.0]), "non-scalar mean cannot be used with batch=True"),
        (dict(mean=float("nan")), "mean=nan"),
        (dict(dtype="bad"), "dtype='bad'"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        Normalize(**kwargs)


def test_run_time_errors():
    with pytest.raises(ArgumentError, match="names axes not in the input layout 'HW'"):
        Normalize(axis_names="C").output_layouts(["HW"])
    with pytest.raises(ArgumentError, match="axis 3 is out of range"):
        run_op(np.zeros((2, 2)), axes=[3])
    with pytest.raises(ArgumentError, match="does not broadcast"):
        run_op(np.zeros((2, 2)), args={"mean": np.zeros((3, 1), np.float32)})
