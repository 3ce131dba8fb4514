"""Counter-based random numbers for the ``fn.noise.*`` operators, identical on the CPU (numpy,
here) and the GPU (``kernels/noise.cu``).

Each sample gets a 64-bit seed drawn in ``batch_params`` from the operator's generator (so the
batches depend on the seed only, not on the thread count or the device). The random bits of
element ``i`` of a sample are a hash of ``(seed, counter)``: splitmix64's output function of
``seed + (counter + 1) * 0x9E3779B97F4A7C15`` (wrapping), i.e. the ``counter``-th output of a
splitmix64 generator seeded with ``seed``. Each element's draws are therefore independent of
how the work is split, and the GPU reproduces them exactly.

* uniform (salt and pepper): ``(h >> 40) * 2**-24``, a float32 in [0, 1).
* normal (Gaussian noise): Box-Muller in float64 from the two 32-bit halves of ``h``:
  ``sqrt(-2 log((hi + 0.5) / 2**32)) * cos(2 pi lo / 2**32)``.
* Poisson (shot noise): inversion (sequential search) from one 53-bit uniform when
  lambda < 10; Hörmann's transformed rejection (PTRS, as numpy's generator) above, each try
  taking the hash of counter ``i * 64 + try``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator

__all__ = ["NoiseOp", "hash64", "normal", "poisson", "uniform"]

NOISE_TYPES = tuple(
    np.dtype(t)
    for t in (
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
        np.float32,
    )
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
POISSON_TRIES = 64  # counters per element for the rejection sampler
_INVERSION_LIMIT = 10.0


def hash64(seed: int, counter: np.ndarray) -> np.ndarray:
    """splitmix64 output ``counter`` (uint64 array) of a generator seeded with ``seed``."""
    z = (np.asarray(counter, np.uint64) + np.uint64(1)) * _GOLDEN
    z += np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def uniform(seed: int, n: int) -> np.ndarray:
    """``n`` float32 uniforms in [0, 1) (24 random bits each)."""
    h = hash64(seed, np.arange(n, dtype=np.uint64))
    return ((h >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)


def normal(seed: int, n: int) -> np.ndarray:
    """``n`` standard normal float64 values (Box-Muller, one per hash)."""
    h = hash64(seed, np.arange(n, dtype=np.uint64))
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * 2.0**-32
    u2 = (h & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


_LOGGAM_A = (
    8.333333333333333e-02,
    -2.777777777777778e-03,
    7.936507936507937e-04,
    -5.952380952380952e-04,
    8.417508417508418e-04,
    -1.917526917526918e-03,
    6.410256410256410e-03,
    -2.955065359477124e-02,
    1.796443723688307e-01,
    -1.39243221690590e00,
)


def loggam(x: np.ndarray) -> np.ndarray:
    """log(Gamma(x)) for x >= 1 (numpy's ``random_loggam``: Stirling's series, shifted up to
    x >= 7 and corrected back)."""
    x = np.asarray(x, np.float64)
    n = np.where(x <= 7, np.floor(7 - x), 0.0)
    x0 = x + n
    x2 = 1.0 / (x0 * x0)
    gl0 = np.full_like(x0, _LOGGAM_A[9])
    for a in _LOGGAM_A[8::-1]:
        gl0 = gl0 * x2 + a
    gl = gl0 / x0 + 0.5 * np.log(2 * np.pi) + (x0 - 0.5) * np.log(x0) - x0
    for k in range(1, 8):  # at most 6 shifts
        m = n >= k
        if not m.any():
            break
        gl = np.where(m, gl - np.log(x0 - k), gl)
    return np.where((x == 1.0) | (x == 2.0), 0.0, gl)


def poisson(seed: int, lam: np.ndarray) -> np.ndarray:
    """A Poisson draw (int64) per element of ``lam`` (float64, >= 0; flat)."""
    lam = np.asarray(lam, np.float64).reshape(-1)
    out = np.zeros(lam.size, np.int64)
    idx = np.arange(lam.size, dtype=np.uint64)
    small = (lam > 0) & (lam < _INVERSION_LIMIT)
    if small.any():
        i = np.nonzero(small)[0]
        h = hash64(seed, idx[i] * np.uint64(POISSON_TRIES))
        u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
        lm = lam[i]
        p = np.exp(-lm)
        cdf = p.copy()
        k = np.zeros(i.size, np.int64)
        active = u > cdf
        step = 0
        while active.any() and step < 1000:
            step += 1
            k[active] += 1
            p = np.where(active, p * lm / np.maximum(k, 1), p)
            cdf = np.where(active, cdf + p, cdf)
            active &= u > cdf
        out[i] = k
    large = lam >= _INVERSION_LIMIT
    if large.any():
        i = np.nonzero(large)[0]
        out[i] = _ptrs(seed, lam[i], idx[i])
    return out


def _ptrs(seed: int, lam: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Hörmann's PTRS, vectorised over the elements still rejecting."""
    slam = np.sqrt(lam)
    loglam = np.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    out = np.zeros(lam.size, np.int64)
    pending = np.arange(lam.size)
    for t in range(POISSON_TRIES):
        if pending.size == 0:
            break
        h = hash64(seed, idx[pending] * np.uint64(POISSON_TRIES) + np.uint64(t))
        uu = (h >> np.uint64(32)).astype(np.float64) * 2.0**-32 - 0.5
        v = (h & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
        A, B, L = a[pending], b[pending], lam[pending]  # noqa: N806
        us = 0.5 - np.abs(uu)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.floor((2 * A / us + B) * uu + L + 0.43)
            quick = (us >= 0.07) & (v <= vr[pending])
            reject = (k < 0) | ((us < 0.013) & (v > us))
            lhs = np.log(v) + np.log(invalpha[pending]) - np.log(A / (us * us) + B)
            rhs = -L + k * loglam[pending] - loggam(np.maximum(k, 0) + 1)
        accept = quick | (~reject & (lhs <= rhs))
        out[pending[accept]] = k[accept].astype(np.int64)
        pending = pending[~accept]
    if pending.size:  # ~1e-60 chance: fall back to the rounded mean
        out[pending] = np.round(lam[pending]).astype(np.int64)
    return out


class NoiseOp(Operator):
    """Base of the noise operators: one input, output of the input's type and shape; a 64-bit
    seed per sample drawn in ``batch_params`` (the CPU and GPU implementations both derive
    every random number from it, so they give the same noise)."""

    devices = ("cpu", "gpu")
    is_random = True
    types: tuple = ()

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def batch_params(self, n):
        return [int(s) for s in self.rng.integers(0, 2**63 - 1, n, dtype=np.int64)]

    def _check_type(self, dtype) -> np.dtype:
        dtype = np.dtype(dtype)
        if dtype not in self.types:
            names = ", ".join(str(t) for t in self.types)
            raise ArgumentError(f"{self.schema}: input type {dtype} is not supported; use {names}")
        return dtype

    def _scalar(self, args: dict, name: str) -> float:
        v = np.asarray(args[name] if name in args else getattr(self, name), np.float64)
        if v.size != 1:
            raise ArgumentError(f"{self.schema}: {name}={v.tolist()} must be a single number")
        return float(v.reshape(()))
