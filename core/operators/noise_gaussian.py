"""``fn.noise.gaussian``: adds normally distributed noise (DALI's ``noise.Gaussian``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._noise import NOISE_TYPES, NoiseOp, normal
from .cast import convert_sat

__all__ = ["GaussianNoise", "add_gaussian"]


def float_type(dtype) -> type:
    """DALI's arithmetic type: float64 for 32/64-bit integers, float32 otherwise."""
    dt = np.dtype(dtype)
    return np.float64 if dt.kind in "iu" and dt.itemsize >= 4 else np.float32


def add_gaussian(x: np.ndarray, seed: int, mean: float, stddev: float) -> np.ndarray:
    """``ConvertSat(x + (mean + stddev * z))`` with ``z`` the standard normals of ``seed``."""
    ft = float_type(x.dtype)
    z = normal(seed, x.size).astype(ft).reshape(x.shape)
    noise = ft(mean) + ft(stddev) * z
    out = x.astype(ft) + noise
    return out if out.dtype == x.dtype else convert_sat(out, x.dtype)


@register
class GaussianNoise(NoiseOp):
    """Adds Gaussian noise to the input: ``out = in + N(mean, stddev)``, in the input's type
    (integers round half away from zero and saturate).

    Args:
        mean: mean of the noise (default 0.0); per-sample argument input allowed.
        stddev: standard deviation (default 1.0, >= 0); argument input allowed.
        seed: the operator's own seed. The same seed gives the same noise on the CPU and GPU.

    Example:
        >>> with pipe:
        ...     noisy = fn.noise.gaussian(images, stddev=fn.random.uniform(range=(0, 10)))
    """

    schema = "noise.gaussian"
    arg_inputs = frozenset({"mean", "stddev"})
    types = NOISE_TYPES

    def setup(self, *, mean=0.0, stddev=1.0) -> None:
        self.mean = mean
        self.stddev = stddev
        self._params({})

    def _params(self, args: dict) -> tuple[float, float]:
        mean, std = self._scalar(args, "mean"), self._scalar(args, "stddev")
        if not std >= 0:
            raise ArgumentError(f"{self.schema}: stddev={std} must be >= 0")
        return mean, std

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check_type(x.dtype)
        mean, std = self._params(args)
        return add_gaussian(x, param, mean, std)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.noise import noise_batch

        s = inputs[0]
        self._check_type(s.dtype)
        p = [self._params({k: v[i] for k, v in args.items()}) for i in range(len(s))]
        return noise_batch(s, "gaussian", params, p, stream=stream)
