"""fn.noise.gaussian / salt_and_pepper / shot: the counter-based generator against a pure-Python
splitmix64, the distributions (moments, Poisson probabilities), DALI's formulas (saturation,
salt and pepper values, per-channel draws, factor 0), determinism across thread counts,
argument inputs and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators import _noise
from dlpipe.operators.noise_gaussian import GaussianNoise
from dlpipe.operators.noise_salt_and_pepper import SaltAndPepperNoise
from dlpipe.operators.noise_shot import ShotNoise

MASK = (1 << 64) - 1


def splitmix(seed, i):
    """The i-th output of a splitmix64 generator seeded with ``seed`` (pure Python)."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def run(cls, x, seed=123, layout="", args=None, **kwargs):
    op = cls(**kwargs)
    op.output_layouts([layout])
    out = op.run_sample((x,), args or {}, seed)
    assert out.dtype == x.dtype and out.shape == x.shape
    return out


def test_generator_is_splitmix64():
    h = _noise.hash64(987654321, np.arange(5, dtype=np.uint64))
    assert h.tolist() == [splitmix(987654321, i) for i in range(5)]
    u = _noise.uniform(5, 4)
    assert u.tolist() == [(splitmix(5, i) >> 40) / 2**24 for i in range(4)]
    z = _noise.normal(7, 3)
    for i in range(3):
        hh = splitmix(7, i)
        u1, u2 = ((hh >> 32) + 0.5) / 2**32, (hh & 0xFFFFFFFF) / 2**32
        assert z[i] == pytest.approx(math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))


def test_normal_and_uniform_moments():
    z = _noise.normal(1, 200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    u = _noise.uniform(2, 200_000)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005


@pytest.mark.parametrize("lam", [0.7, 3.0, 9.5, 10.0, 37.0, 400.0])
def test_poisson_matches_the_distribution(lam):
    k = _noise.poisson(11, np.full(60_000, lam))
    assert abs(k.mean() - lam) < 4 * math.sqrt(lam / 60_000) + 1e-9
    assert abs(k.var() / lam - 1) < 0.05
    # probabilities near the mode
    for v in range(max(0, int(lam) - 2), int(lam) + 3):
        pmf = math.exp(-lam + v * math.log(lam) - math.lgamma(v + 1))
        assert abs((k == v).mean() - pmf) < 5 * math.sqrt(pmf / 60_000) + 1e-4


def test_loggam():
    x = np.array([1, 2, 2.5, 3, 6.9, 7, 8.5, 30, 1e4])
    np.testing.assert_allclose(
        _noise.loggam(x), [math.lgamma(v) for v in x], rtol=1e-12, atol=1e-12
    )


def test_gaussian_formula_and_saturation():
    x = np.random.default_rng(0).integers(0, 256, (40, 50, 3)).astype(np.uint8)
    out = run(GaussianNoise, x, seed=42, mean=2.0, stddev=15.0)
    z = _noise.normal(42, x.size).reshape(x.shape)
    ref = np.clip(x + (2.0 + 15.0 * z), 0, 255)
    assert np.abs(out - ref).max() <= 0.5 + 1e-3
    noise = out.astype(float) - x
    inner = (x > 60) & (x < 195)  # no saturation there
    assert abs(noise[inner].mean() - 2) < 0.3 and abs(noise[inner].std() - 15) < 0.3
    f = np.zeros(1000, np.float32)
    g = run(GaussianNoise, f, seed=3, stddev=0.5)
    np.testing.assert_allclose(g, 0.5 * _noise.normal(3, 1000).astype(np.float32), rtol=1e-6)


def test_salt_and_pepper():
    x = np.full((200, 300, 3), 100, np.uint8)
    out = run(SaltAndPepperNoise, x, layout="HWC", prob=0.2, salt_vs_pepper=0.25)
    pix = out[..., 0]
    assert np.isin(pix, [0, 100, 255]).all()
    assert (out == out[..., :1]).all()  # one draw per pixel: all channels alike
    assert abs((pix != 100).mean() - 0.2) < 0.01
    assert abs((pix == 255).mean() / (pix != 100).mean() - 0.25) < 0.02
    u = _noise.uniform(123, 200 * 300).reshape(200, 300)
    np.testing.assert_array_equal(pix == 255, u < np.float32(0.2) * np.float32(0.25))
    per = run(SaltAndPepperNoise, x, layout="HWC", prob=0.2, per_channel=True)
    assert not (per == per[..., :1]).all()
    f = run(SaltAndPepperNoise, np.zeros((50, 50), np.float32), prob=0.5)
    assert set(np.unique(f).tolist()) == {-1.0, 0.0, 1.0}
    v = run(SaltAndPepperNoise, x, prob=1.0, salt_vs_pepper=1.0, salt_val=300.0)
    assert (v == 255).all()  # converted to the input type (saturated)
    chw = run(SaltAndPepperNoise, np.full((3, 20, 30), 9, np.int16), layout="CHW", prob=0.3)
    assert (chw == chw[:1]).all()


def test_shot():
    x = np.full((300, 400), 60, np.uint8)
    out = run(ShotNoise, x, factor=4.0)
    assert (out % 4 == 0).all()  # multiples of the factor
    assert abs(out.mean() - 60) < 0.5 and abs(out.var() / (4 * 60) - 1) < 0.05
    np.testing.assert_array_equal(run(ShotNoise, x, factor=0.0), x)
    f = np.linspace(0, 3, 1000, dtype=np.float32)
    lam = f * (np.float32(1) / np.float32(0.5))
    ref = _noise.poisson(9, lam.astype(np.float64)).astype(np.float32) * np.float32(0.5)
    np.testing.assert_array_equal(run(ShotNoise, f, seed=9, factor=0.5), ref)
    big = run(ShotNoise, np.full(100, 250, np.uint8), factor=100.0)
    assert np.isin(big, [0, 100, 200, 255]).all()  # 300 saturates


def test_same_batches_whatever_the_threads():
    imgs = [
        np.random.default_rng(i).integers(0, 256, (20, 30, 3)).astype(np.uint8) for i in range(4)
    ]

    def once(threads):
        pipe = Pipeline(batch_size=4, num_threads=threads, device_id=None, seed=77)
        with pipe:
            x = fn.external_source(lambda: imgs, layout="HWC")
            std = fn.random.uniform(range=(1, 20))
            pipe.set_outputs(
                fn.noise.gaussian(x, stddev=std),
                fn.noise.salt_and_pepper(x),
                ops.noise.Shot(factor=3.0)(x),
            )
        return [[np.array(o.at(i)) for i in range(4)] for o in pipe.run()]

    a, b = once(1), once(2)
    for oa, ob in zip(a, b, strict=True):
        for sa, sb in zip(oa, ob, strict=True):
            np.testing.assert_array_equal(sa, sb)
    assert not np.array_equal(a[0][0], a[0][1])  # samples get different noise


def test_errors():
    with pytest.raises(ArgumentError, match="stddev=-1.0 must be >= 0"):
        GaussianNoise(stddev=-1.0)
    with pytest.raises(ArgumentError, match="prob=1.5"):
        SaltAndPepperNoise(prob=1.5)
    with pytest.raises(ArgumentError, match="salt_vs_pepper"):
        SaltAndPepperNoise(salt_vs_pepper=-0.1)
    with pytest.raises(ArgumentError, match="single number"):
        ShotNoise(factor=[1, 2])
    with pytest.raises(ArgumentError, match="not supported"):
        run(GaussianNoise, np.zeros(3, np.float64))
    with pytest.raises(ArgumentError, match="prob=2.0"):
        run(SaltAndPepperNoise, np.zeros(3, np.uint8), args={"prob": np.float32(2)})


def test_gpu_descriptors_on_the_host():
    from dlpipe.kernels.noise import NOISE_DESC, noise_descriptors

    d = noise_descriptors(
        [1, 2],
        [3, 4],
        [(4, 5, 3), (2, 2, 3)],
        [-1, 7],
        "salt_and_pepper",
        [(0.3, 0.5, 255, 0), (0.1, 1.0, 9, 1)],
        axis=2,
    )
    assert d.dtype == NOISE_DESC and d["n"].tolist() == [60, 12]
    assert d["seed"].tolist() == [2**64 - 1, 7]  # the int64 seed's bits
    assert d["inner"].tolist() == [1, 1] and d["channels"].tolist() == [3, 3]
    assert d["p"][0].tolist() == [np.float32(0.3), np.float32(0.15), 255, 0]
    d = noise_descriptors([1], [3], [(3, 4, 5)], [1], "salt_and_pepper", [(0.3, 0.5, 1, 0)], 0)
    assert d["inner"].tolist() == [20] and d["channels"].tolist() == [3]
    g = noise_descriptors([1], [3], [(3, 4)], [1], "gaussian", [(1.5, 2.0)])
    assert g["p"][0, :2].tolist() == [1.5, 2.0] and g["channels"].tolist() == [1]
