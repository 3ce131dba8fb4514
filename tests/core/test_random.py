"""fn.random.coin_flip / uniform / normal: shapes, dtypes, distributions (5-sigma bounds over
10k samples, so they cannot flake for a fixed seed), argument inputs, seed determinism across
thread counts, argument errors and the legacy names."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types


def run_graph(build, batch_size=8, num_threads=1, seed=7, iterations=1):
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, seed=seed)
    with pipe:
        outs = build()
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    results = [pipe.run() for _ in range(iterations)]
    return [
        [
            np.stack([np.asarray(tl.at(i)) for i in range(len(tl))])
            if _uniform(tl)
            else [np.asarray(tl.at(i)) for i in range(len(tl))]
            for tl in r
        ]
        for r in results
    ]


def _uniform(tl):
    return len({np.asarray(tl.at(i)).shape for i in range(len(tl))}) == 1


def many(build, n=10_000, batch_size=1000):
    """Concatenated values of the first output over n samples."""
    its = run_graph(build, batch_size=batch_size, iterations=n // batch_size)
    return np.concatenate([r[0].reshape(-1) for r in its])


def test_coin_flip_defaults_scalar_int32():
    ((out,),) = run_graph(lambda: fn.random.coin_flip())
    assert out.shape == (8,) and out.dtype == np.int32
    assert set(out.tolist()) <= {0, 1}


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_coin_flip_probability_within_5_sigma(p):
    v = many(lambda: fn.random.coin_flip(probability=p))
    sigma = np.sqrt(p * (1 - p) / v.size)
    assert abs(v.mean() - p) <= 5 * sigma + 1e-12


@pytest.mark.parametrize(
    "dtype, np_dtype", [(types.BOOL, np.bool_), (types.UINT8, np.uint8), (types.FLOAT, np.float32)]
)
def test_coin_flip_dtypes_and_shape(dtype, np_dtype):
    ((out,),) = run_graph(lambda: fn.random.coin_flip(shape=(2, 3), dtype=dtype))
    assert out.shape == (8, 2, 3) and out.dtype == np_dtype


def test_coin_flip_per_sample_probability():
    def build():
        p = fn.random.uniform(values=[0.0, 1.0])
        return p, fn.random.coin_flip(probability=p)

    ((p, c),) = run_graph(build, batch_size=32)
    np.testing.assert_array_equal(c, p.astype(np.int32))
    assert set(p.tolist()) == {0.0, 1.0}


def test_uniform_range_and_moments():
    v = many(lambda: fn.random.uniform(range=(2.0, 5.0)))
    assert v.dtype == np.float32 and v.min() >= 2.0 and v.max() < 5.0
    sigma = 3.0 / np.sqrt(12 * v.size)
    assert abs(v.mean() - 3.5) <= 5 * sigma
    default = many(lambda: fn.random.uniform(), n=2000)
    assert default.min() >= -1.0 and default.max() < 1.0


def test_uniform_never_reaches_max_after_float32_rounding():
    ((out,),) = run_graph(lambda: fn.random.uniform(range=(0.0, 1e-30), shape=(1000,)))
    assert out.max() < np.float32(1e-30)


def test_uniform_discrete_values_equally_likely():
    v = many(lambda: fn.random.uniform(values=[1, 5, 7], dtype=types.INT32))
    assert v.dtype == np.int32 and set(v.tolist()) == {1, 5, 7}
    for val in (1, 5, 7):
        share = (v == val).mean()
        assert abs(share - 1 / 3) <= 5 * np.sqrt(2 / 9 / v.size)


def test_uniform_integer_dtype_rounds_and_saturates():
    ((out,),) = run_graph(
        lambda: fn.random.uniform(range=(250, 300), dtype=types.UINT8, shape=(500,))
    )
    assert out.dtype == np.uint8 and out.min() >= 250 and out.max() == 255


def test_uniform_per_sample_range_and_values():
    ranges = [np.array([i, i + 0.5], np.float32) for i in range(4)]
    values = [np.array([10 * i], np.float32) for i in range(4)]

    def build():
        r = fn.external_source(source=lambda: ranges)
        v = fn.external_source(source=lambda: values)
        return fn.random.uniform(range=r), fn.random.uniform(values=v)

    ((u, d),) = run_graph(build, batch_size=4)
    assert ((u >= np.arange(4)) & (u < np.arange(4) + 0.5)).all()
    np.testing.assert_array_equal(d, [0, 10, 20, 30])


def test_normal_moments_and_argument_inputs():
    v = many(lambda: fn.random.normal(mean=3.0, stddev=2.0))
    assert v.dtype == np.float32
    assert abs(v.mean() - 3.0) <= 5 * 2.0 / np.sqrt(v.size)
    assert abs(v.std() - 2.0) <= 5 * 2.0 / np.sqrt(2 * v.size)

    def build():
        m = fn.random.uniform(values=[-100.0, 100.0])
        return m, fn.random.normal(mean=m, stddev=fn.random.uniform(range=(0.0, 1e-3)))

    ((m, z),) = run_graph(build, batch_size=16)
    np.testing.assert_allclose(z, m, atol=0.01)


def test_normal_integer_dtype():
    ((out,),) = run_graph(lambda: fn.random.normal(stddev=1000, dtype=types.INT8, shape=(400,)))
    assert out.dtype == np.int8 and out.min() == -128 and out.max() == 127


def test_shape_from_input_varies_per_sample():
    shapes = [(2, 3), (4,), (1, 1, 5)]
    batch = [np.zeros(s, np.uint8) for s in shapes]

    def build():
        x = fn.external_source(source=lambda: batch)
        return (fn.random.coin_flip(x), fn.random.uniform(x, range=(0, 1)), fn.random.normal(x))

    ((c, u, n),) = run_graph(build, batch_size=3)
    for outs in (c, u, n):
        assert [o.shape for o in outs] == shapes


def test_seed_determinism_across_thread_counts():
    batch = [np.zeros((i + 1, 2), np.uint8) for i in range(6)]

    def build():
        x = fn.external_source(source=lambda: batch)
        return (
            fn.random.coin_flip(),
            fn.random.uniform(shape=(3,)),
            fn.random.normal(x),
            fn.random.uniform(values=[1, 2, 3]),
        )

    def flat(results):
        return [np.concatenate([np.ravel(a) for a in out]) for r in results for out in r]

    one = flat(run_graph(build, batch_size=6, num_threads=1, seed=11, iterations=3))
    three = flat(run_graph(build, batch_size=6, num_threads=3, seed=11, iterations=3))
    other = flat(run_graph(build, batch_size=6, num_threads=1, seed=12, iterations=3))
    for a, b in zip(one, three, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(one, other, strict=True))


def test_operator_seed_overrides_pipeline_seed():
    a = many(lambda: fn.random.uniform(seed=5), n=100, batch_size=100)
    pipe = Pipeline(batch_size=100, num_threads=1, seed=999)
    with pipe:
        pipe.set_outputs(fn.random.uniform(seed=5))
    (b,) = pipe.run()
    np.testing.assert_array_equal(a, [np.asarray(b.at(i)) for i in range(100)])


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: fn.random.coin_flip(probability=1.5), "probability=1.5"),
        (lambda: fn.random.coin_flip(probability=[0.5, 0.5]), "probability"),
        (lambda: fn.random.uniform(range=(1, 0)), r"range=\(1, 0\)"),
        (lambda: fn.random.uniform(range=(1, 2, 3)), "range"),
        (lambda: fn.random.uniform(range=(0, 1), values=[1]), "range and values"),
        (lambda: fn.random.uniform(values=[]), "values"),
        (lambda: fn.random.normal(stddev=-1.0), "stddev=-1.0"),
        (lambda: fn.random.normal(shape=-2), "shape=-2"),
        (lambda: fn.random.normal(shape=(2.5,)), "shape"),
        (lambda: fn.random.normal(dtype="complex64"), "dtype"),
    ],
)
def test_argument_errors(build, match):
    with pytest.raises(ArgumentError, match=match):
        with Pipeline(batch_size=1, num_threads=1):
            build()


def test_shape_and_input_together_fails_at_build():
    pipe = Pipeline(batch_size=1, num_threads=1)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(2)])
        pipe.set_outputs(fn.random.uniform(x, shape=(2,)))
    with pytest.raises(ArgumentError, match="cannot be combined with an input"):
        pipe.build()


def test_per_sample_probability_out_of_range_fails_at_run():
    pipe = Pipeline(batch_size=2, num_threads=1, seed=1)
    with pipe:
        pipe.set_outputs(fn.random.coin_flip(probability=fn.random.uniform(range=(2, 3))))
    with pytest.raises(ArgumentError, match="probability="):
        pipe.run()


def test_legacy_names():
    def build():
        return (
            ops.CoinFlip(probability=1.0)(),
            ops.Uniform(range=(3, 3))(),
            ops.NormalDistribution(stddev=0.0, mean=2.0)(),
            ops.random.CoinFlip()(),
        )

    ((c, u, n, c2),) = run_graph(build, batch_size=4)
    assert (c == 1).all() and (u == 3).all() and (n == 2).all() and c2.dtype == np.int32


@pytest.mark.parametrize(
    "build",
    [
        lambda: fn.random.uniform(values=[1, 2], range=fn.random.uniform(range=(0, 1), shape=2)),
        lambda: fn.random.uniform(range=(0, 1), values=fn.random.uniform(range=(0, 1), shape=2)),
    ],
)
def test_range_and_values_as_argument_inputs_are_refused(build):
    # one of them was silently ignored
    with pytest.raises(ArgumentError, match="range and values"):
        run_graph(build, batch_size=2)


def test_shape_argument_input_and_input_together_are_refused():
    # the shape argument input was silently ignored in favour of the input's shape
    def build():
        like = fn.random.uniform(shape=(2, 3))
        return fn.random.normal(like, shape=fn.random.uniform(range=(1, 3), dtype=types.INT32))

    with pytest.raises(ArgumentError, match="shape"):
        run_graph(build, batch_size=2)


@pytest.mark.parametrize(
    "make",
    [
        lambda arg: fn.random.coin_flip(probability=arg(0.3), dtype=types.UINT8, seed=11),
        lambda arg: fn.random.uniform(range=arg([-2.0, 5.0]), shape=(2,), seed=11),
        lambda arg: fn.random.normal(stddev=arg(3.0), dtype=types.INT16, seed=11),
    ],
)
def test_batch_path_gives_the_per_sample_numbers(make):
    # With nothing per sample the op runs batch-wise; a constant argument input forces the
    # per-sample path. Same seed, same numbers, same dtype and shape.
    def const(v):
        return fn.external_source(lambda: [np.asarray(v, np.float64)] * 16, batch=True)

    batch = [r[0] for r in run_graph(lambda: make(lambda v: v), batch_size=16, iterations=2)]
    per_sample = [r[0] for r in run_graph(lambda: make(const), batch_size=16, iterations=2)]
    for a, b in zip(batch, per_sample, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
