"""Random numbers shaped by a GPU input, made on the device (``kernels/rng.cu``): the kernel
against a numpy model of its generator, and the operators' shapes, types, determinism,
parameters and statistics (DeepLearningExamples' Jasper dither among them)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402

MASK = (1 << 64) - 1


def splitmix(seed: int, n: int) -> np.ndarray:
    """Outputs 0..n-1 of splitmix64 seeded with ``seed`` (Python integers: no numpy wrap)."""
    out = []
    for i in range(n):
        z = ((i + 1) * 0x9E3779B97F4A7C15 + seed) & MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return np.array(out, np.uint64)


def model(mode: str, seed: int, n: int, a: float, b: float, values=None) -> np.ndarray:
    """What rng.cu computes for one sample, in float64."""
    h = splitmix(seed, n)
    if mode == "normal":
        u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * 2.0**-32
        u2 = (h & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
        return a + b * (np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2))
    u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    if mode == "uniform":
        return a + u * (b - a)
    if mode == "values":
        return np.asarray(values, np.float64)[
            np.minimum((u * len(values)).astype(int), len(values) - 1)
        ]
    return (u < a).astype(np.float64)


@pytest.mark.parametrize(
    "mode, dtype, a, b, values",
    [
        ("normal", np.float32, 0.0, 1.0, None),
        ("normal", np.float32, [2.0, -1.0, 0.0], [3.0, 0.5, 1e-5], None),
        ("normal", np.int16, 0.0, 50.0, None),
        ("uniform", np.float32, [-2.0, 0.0, 5.0], [5.0, 1.0, 5.0], None),
        ("uniform", np.uint8, 0.0, 255.0, None),
        ("values", np.float32, 0.0, 0.0, [[1.0, 7.0, 9.0], [4.0], [-1.0, 1.0]]),
        ("coin_flip", np.int32, [0.3, 0.0, 1.0], 0.0, None),
        ("coin_flip", np.uint8, 0.5, 0.0, None),
    ],
)
def test_kernel_is_the_model(mode, dtype, a, b, values):
    from dlpipe.kernels.rng import random_fill_batch

    shapes = np.array(
        [[7, 33], [1, 1], [0, 5]] if mode == "values" else [[7, 33], [1, 1], [300, 2]]
    )
    seeds = np.array([0, 2**63 - 2, 123456789], np.int64)
    aa, bb = np.broadcast_to(a, 3).astype(np.float64), np.broadcast_to(b, 3).astype(np.float64)
    out = random_fill_batch(shapes, dtype, mode, seeds, aa, bb, values, device_id=0)
    cupy.cuda.Device(0).synchronize()
    assert out.dtype == np.dtype(dtype) and out.shapes.tolist() == shapes.tolist()
    for i in range(3):
        got = cupy.asnumpy(out[i])
        n = int(np.prod(shapes[i]))
        want = model(mode, int(seeds[i]), n, aa[i], bb[i], values[i] if values else None)
        want = want.reshape(shapes[i])
        assert got.shape == tuple(shapes[i])
        if np.dtype(dtype).kind == "f":
            want = want.astype(dtype)
            if mode == "uniform" and bb[i] > aa[i]:  # stays below max, as on the CPU
                want = np.minimum(want, np.nextafter(np.float32(bb[i]), np.float32(aa[i])))
            # double log/cos on the device are within an ulp or two of the host's
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
        else:
            info = np.iinfo(dtype)
            want = np.clip(np.rint(want), info.min, info.max)
            assert np.abs(got.astype(np.int64) - want).max(initial=0) <= 1  # rounding flips


def gpu_pipe(build, batch, seed=7):
    pipe = Pipeline(batch_size=len(batch), num_threads=2, device_id=0, seed=seed)
    with pipe:
        x = fn.external_source(source=lambda: list(batch))
        pipe.set_outputs(*build(x.gpu()))
    return pipe


def audio(lengths=(16000, 3, 120000, 800), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in lengths]


def test_normal_shaped_by_gpu_audio_is_deterministic_and_standard():
    xs = audio()
    runs = []
    for _ in range(2):
        pipe = gpu_pipe(lambda x: (fn.random.normal(x, seed=3),), xs)
        runs.append([pipe.run()[0].as_cpu() for _ in range(2)])
        pipe.close()
    (a0, a1), (b0, b1) = runs
    for i, x in enumerate(xs):
        assert a0.at(i).shape == x.shape and a0.at(i).dtype == np.float32
        np.testing.assert_array_equal(a0.at(i), b0.at(i))  # the same seed, the same numbers
        np.testing.assert_array_equal(a1.at(i), b1.at(i))
    assert not np.array_equal(a0.at(0), a1.at(0))  # a new draw every iteration
    assert not np.array_equal(a0.at(0)[:3], a0.at(1))  # samples differ
    z = np.concatenate([a0.at(i) for i in range(len(xs))])
    assert abs(z.mean()) < 5 / np.sqrt(z.size) and abs(z.std() - 1) < 0.01
    frac = np.mean(np.abs(z) < 1)  # 68.27% within one sigma
    assert abs(frac - 0.6827) < 0.01


def test_normal_parameters_and_types_on_the_gpu():
    xs = audio((50000, 60000))
    means = [np.float32(3.0), np.float32(-2.0)]
    stds = [np.float32(0.5), np.float32(4.0)]
    pipe = Pipeline(batch_size=2, num_threads=2, device_id=0, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: list(xs)).gpu()
        m = fn.external_source(source=lambda: list(means))
        s = fn.external_source(source=lambda: list(stds))
        pipe.set_outputs(
            fn.random.normal(x, mean=m, stddev=s),
            fn.random.normal(x, stddev=40.0, dtype=types.INT16),
        )
    f, i16 = (o.as_cpu() for o in pipe.run())
    for k in range(2):
        v = f.at(k)
        assert v.dtype == np.float32 and v.shape == xs[k].shape
        assert abs(v.mean() - means[k]) < 5 * stds[k] / np.sqrt(v.size)
        assert abs(v.std() / stds[k] - 1) < 0.02
        w = i16.at(k)
        assert (
            w.dtype == np.int16 and np.array_equal(w, np.rint(w)) and abs(w.std() / 40 - 1) < 0.02
        )


def test_uniform_and_coin_flip_shaped_by_a_gpu_input():
    xs = audio((40000, 30000))

    def build(x):
        return (
            fn.random.uniform(x, range=(-3.0, 2.0)),
            fn.random.uniform(x, values=[1, 7, 9], dtype=types.INT32),
            fn.random.coin_flip(x, probability=0.3),
            fn.random.coin_flip(x, probability=0.3, dtype=types.BOOL),  # the host path
        )

    pipe = gpu_pipe(build, xs)
    u, v, c, cb = (o.as_cpu() for o in pipe.run())
    for k, x in enumerate(xs):
        a = u.at(k)
        assert a.shape == x.shape and a.dtype == np.float32
        assert a.min() >= -3 and a.max() < 2 and abs(a.mean() + 0.5) < 0.05
        b = v.at(k)
        assert b.dtype == np.int32 and set(np.unique(b).tolist()) == {1, 7, 9}
        assert max(abs(np.mean(b == t) - 1 / 3) for t in (1, 7, 9)) < 0.02
        f = c.at(k)
        assert f.dtype == np.int32 and set(np.unique(f).tolist()) == {0, 1}
        assert abs(f.mean() - 0.3) < 0.02
        g = cb.at(k)
        assert g.dtype == np.bool_ and g.shape == x.shape and abs(g.mean() - 0.3) < 0.02


def test_jasper_dither_on_the_gpu():
    """DeepLearningExamples' Jasper: ``audio + fn.random.normal(audio) * dither`` after
    ``.gpu()``; the noise is N(0, dither) and the audio is kept."""
    xs = audio((16000, 130000, 5))
    dither = 1e-5
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=0, seed=5)
    with pipe:
        a = fn.external_source(source=lambda: list(xs)).gpu()
        pipe.set_outputs(a + fn.random.normal(a) * dither)
    (out,) = pipe.run()
    out = out.as_cpu()
    noise = np.concatenate([(out.at(i).astype(np.float64) - xs[i]) / dither for i in range(3)])
    assert out.at(1).shape == xs[1].shape and out.at(1).dtype == np.float32
    # float32 rounding of audio + 1e-5 noise: ~3e-8 absolute, 3e-3 of the noise
    assert abs(noise.std() - 1) < 0.02 and abs(noise.mean()) < 0.02
