"""fn.coord_transform against a float64 numpy reference: M, T, MT (lists, scalars, argument
inputs), non-square matrices, integer dtypes (rounding and saturation), shapes, the pipeline
with fn.transforms matrices, and errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.coord_transform import CoordTransform


def run(x, args=None, **kwargs):
    op = CoordTransform(**kwargs)
    op.output_layouts([""])
    return op.run_sample((x,), args or {}, None)


def ref(x, m, t):
    x = np.asarray(x, np.float64)
    return x @ np.asarray(m, np.float64).T + np.asarray(t, np.float64)


def pts(n=17, d=2, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-50, 50, (n, d)).astype(dtype)
    return rng.integers(0, 200, (n, d)).astype(dtype)


def test_m_and_t():
    x = pts()
    m = [[1.5, -2.0], [0.25, 3.0]]
    out = run(x, M=np.ravel(m).tolist(), T=[5, -7])
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, ref(x, m, [5, -7]), rtol=1e-5, atol=1e-4)


def test_defaults_identity_and_scalars():
    x = pts(d=3)
    np.testing.assert_array_equal(run(x), x)
    np.testing.assert_allclose(run(x, M=2.0, T=1.0), 2 * x + 1, rtol=1e-6)
    np.testing.assert_allclose(run(x, MT=3.0), 3 * x, rtol=1e-6)


def test_non_square_projection():
    x = pts(d=3)
    m = [[1, 0, 0], [0, 0, 1]]
    out = run(x, M=np.ravel(m).tolist())
    assert out.shape == (17, 2)
    np.testing.assert_array_equal(out, x[:, [0, 2]])
    mt = [[1, 1, 1, 10]]
    out = run(x, MT=np.ravel(mt).tolist())
    np.testing.assert_allclose(out[:, 0], x.sum(1) + 10, rtol=1e-5, atol=1e-4)


def test_higher_rank_inputs_transform_the_last_axis():
    rng = np.random.default_rng(1)
    img = rng.integers(0, 255, (4, 5, 3)).astype(np.uint8)
    gray = [[0.299, 0.587, 0.114]]
    out = run(img, M=np.ravel(gray).tolist())
    assert out.shape == (4, 5, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref(img, gray, [0]), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32])
def test_integer_outputs_round_and_saturate(dtype):
    x = pts(d=2, dtype=dtype)
    m = [[1.5, 0.0], [0.0, -1.0]]
    out = run(x, M=np.ravel(m).tolist(), T=[0.25, 3.5], dtype=dtype)
    assert out.dtype == dtype
    r = ref(x, m, [0.25, 3.5])
    info = np.iinfo(dtype)
    expect = np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), info.min, info.max)
    np.testing.assert_array_equal(out, expect.astype(dtype))
    # float output from an integer input
    f = run(x, M=np.ravel(m).tolist())
    assert f.dtype == np.float32


def test_argument_inputs():
    x = pts()
    mt = np.array([[0, -1, 3], [1, 0, 4]], np.float32)
    out = run(x, args={"MT": mt})
    np.testing.assert_allclose(out, ref(x, mt[:, :2], mt[:, 2]), rtol=1e-5, atol=1e-4)
    out = run(x, args={"M": np.float32(2.0), "T": np.array([1, 2], np.float32)})
    np.testing.assert_allclose(out, 2 * x + [1, 2], rtol=1e-6)
    out = run(x, args={"T": np.float32(-1)}, M=[0, 1, 1, 0])
    np.testing.assert_allclose(out, x[:, ::-1] - 1, rtol=1e-6)


def test_pipeline_with_transform_matrices():
    boxes = [pts(5, seed=i) for i in range(3)]
    angles = [np.float32(a) for a in (10, 20, 30)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=1)
    with pipe:
        p = fn.external_source(lambda: boxes)
        a = fn.external_source(lambda: angles)
        mt = fn.transforms.rotation(angle=a, center=[1.0, 2.0])
        pipe.set_outputs(fn.coord_transform(p, MT=mt), ops.CoordTransform(M=[2.0])(p), mt)
    out, scaled, mts = pipe.run()
    for i in range(3):
        m = mts.at(i)
        np.testing.assert_allclose(out.at(i), ref(boxes[i], m[:, :2], m[:, 2]), atol=1e-4)
        np.testing.assert_allclose(scaled.at(i), 2 * boxes[i], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(MT=[1, 2, 3], M=[1]), "cannot be used together"),
        (dict(M=[]), "must not be an empty list"),
        (dict(dtype="not a type"), "dtype"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        CoordTransform(**kwargs)


def test_run_time_errors():
    x = pts()
    with pytest.raises(ArgumentError, match="5 elements and 2 columns"):
        run(x, M=[1, 2, 3, 4, 5])
    with pytest.raises(ArgumentError, match="T=\\[1.0, 2.0, 3.0\\] must have 2"):
        run(x, T=[1, 2, 3])
    with pytest.raises(ArgumentError, match="FLOAT"):
        run(pts(dtype=np.uint8), dtype=types.INT32)
    with pytest.raises(ArgumentError, match="at least 2 dimensions"):
        run(np.zeros(3, np.float32))
    with pytest.raises(ArgumentError, match="not supported"):
        run(np.zeros((3, 2), np.float64))
    with pytest.raises(ArgumentError, match="need 3 columns"):
        run(x, args={"MT": np.zeros((2, 2), np.float32)})


def test_gpu_descriptors_on_the_host():
    from dlpipe.kernels.coord_transform import COORD_DESC, coord_descriptors

    m = np.arange(6, dtype=np.float32).reshape(3, 2)
    t = np.array([7, 8, 9], np.float32)
    d = coord_descriptors([16, 32], [48, 64], [5, 0], [(m, t), (m[:1, :1], t[:1])])
    assert d.dtype == COORD_DESC and d.itemsize == 5 * 8 + 42 * 4
    assert d["in_dim"].tolist() == [2, 1] and d["out_dim"].tolist() == [3, 1]
    np.testing.assert_array_equal(d["m"][0, :6], m.ravel())
    np.testing.assert_array_equal(d["t"][0, :3], t)
    assert d["npts"].tolist() == [5, 0] and d["in_ptr"].tolist() == [16, 32]
