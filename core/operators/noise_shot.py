"""``fn.noise.shot``: Poisson (shot) noise (DALI's ``noise.Shot``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._noise import NOISE_TYPES, NoiseOp, poisson
from .cast import convert_sat

__all__ = ["ShotNoise", "shot_noise"]


def shot_noise(x: np.ndarray, seed: int, factor: float) -> np.ndarray:
    """``poisson(max(0, x / factor)) * factor`` per element (``x`` itself when factor is 0),
    in float32 as DALI (``in * (1 / factor)``), converted to the input type."""
    if factor == 0:
        return x.copy()
    f = np.float32(factor)
    lam = np.maximum(np.float32(0), x.astype(np.float32) * (np.float32(1) / f))
    k = poisson(seed, lam.astype(np.float64)).reshape(x.shape)
    out = k.astype(np.float32) * f
    return out if x.dtype == np.float32 else convert_sat(out, x.dtype)


@register
class ShotNoise(NoiseOp):
    """Applies shot noise: ``out = poisson(max(0, in / factor)) * factor``.

    Simulates a sensor counting events: the input holds the expected values, each event adds
    ``factor``. A larger factor gives more noise; 0 leaves the input unchanged.

    Args:
        factor: the value of one event (default 20.0); per-sample argument input allowed.
        seed: the operator's own seed. The same seed gives the same noise on the CPU and GPU.

    Example:
        >>> with pipe:
        ...     noisy = fn.noise.shot(images, factor=4.0)
    """

    schema = "noise.shot"
    arg_inputs = frozenset({"factor"})
    types = NOISE_TYPES

    def setup(self, *, factor=20.0) -> None:
        self.factor = factor
        self._factor({})

    def _factor(self, args: dict) -> float:
        f = self._scalar(args, "factor")
        if not np.isfinite(f):
            raise ArgumentError(f"{self.schema}: factor={f} must be a finite number")
        return f

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check_type(x.dtype)
        return shot_noise(x, param, self._factor(args))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.noise import noise_batch

        s = inputs[0]
        self._check_type(s.dtype)
        p = [(self._factor({k: v[i] for k, v in args.items()}),) for i in range(len(s))]
        return noise_batch(s, "shot", params, p, stream=stream)
