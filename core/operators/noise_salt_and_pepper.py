"""``fn.noise.salt_and_pepper``: replaces random values with "salt" or "pepper"."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import register
from ._noise import NOISE_TYPES, NoiseOp, uniform
from .cast import convert_sat

__all__ = ["SaltAndPepperNoise", "channel_axis", "salt_and_pepper"]


def channel_axis(layout: str, ndim: int) -> int | None:
    """The axis whose values share one draw when ``per_channel=False``: the layout's ``C``
    (channels last when the layout is empty, as DALI assumes), None when there is none."""
    if not layout:
        return ndim - 1 if ndim else None
    return layout.index("C") if "C" in layout else None


def salt_and_pepper(
    x: np.ndarray, seed: int, prob: float, salt_vs_pepper: float, salt, pepper, axis
) -> np.ndarray:
    """Draw one uniform ``u`` per element (per pixel: ``axis`` collapsed); ``u < prob *
    salt_vs_pepper`` gives ``salt``, else ``u < prob`` gives ``pepper``, else the input."""
    shape = list(x.shape)
    if axis is not None:
        shape[axis] = 1
    u = uniform(seed, int(np.prod(shape))).reshape(shape)
    p = np.float32(prob)
    salt_p = np.float32(p * np.float32(salt_vs_pepper))
    out = x.copy()
    noisy = np.broadcast_to(u < p, x.shape)
    is_salt = np.broadcast_to(u < salt_p, x.shape)
    out[noisy & is_salt] = salt
    out[noisy & ~is_salt] = pepper
    return out


@register
class SaltAndPepperNoise(NoiseOp):
    """Applies salt-and-pepper noise: each value (or pixel) is, with probability ``prob``,
    replaced by ``salt_val`` (a ``salt_vs_pepper`` share of those) or ``pepper_val``.

    Args:
        prob: probability of a value being replaced (default 0.05); argument input allowed.
        salt_vs_pepper: probability of a replaced value being salt (default 0.5); argument
            input allowed.
        salt_val: the salt value (default: 1.0 for floats, the type's maximum for integers),
            converted to the input type; argument input allowed.
        pepper_val: the pepper value (default: -1.0 for floats, the type's minimum); argument
            input allowed.
        per_channel: draw for every channel independently (default False: one draw per
            pixel, all its channels replaced alike). The channels are the layout's ``C``,
            the last axis for an empty layout.
        seed: the operator's own seed. The same seed gives the same noise on the CPU and GPU.

    Example:
        >>> with pipe:
        ...     noisy = fn.noise.salt_and_pepper(images, prob=0.1)
    """

    schema = "noise.salt_and_pepper"
    arg_inputs = frozenset({"prob", "salt_vs_pepper", "salt_val", "pepper_val"})
    types = NOISE_TYPES

    def setup(
        self, *, prob=0.05, salt_vs_pepper=0.5, salt_val=None, pepper_val=None, per_channel=False
    ) -> None:
        self.prob = prob
        self.salt_vs_pepper = salt_vs_pepper
        self.salt_val = salt_val
        self.pepper_val = pepper_val
        self.per_channel = bool(per_channel)
        self._layout = ""
        self._probs({})

    def _probs(self, args: dict) -> tuple[float, float]:
        prob, svp = self._scalar(args, "prob"), self._scalar(args, "salt_vs_pepper")
        if not 0.0 <= prob <= 1.0:
            raise ArgumentError(f"{self.schema}: prob={prob} must be within [0, 1]")
        if not 0.0 <= svp <= 1.0:
            raise ArgumentError(f"{self.schema}: salt_vs_pepper={svp} must be within [0, 1]")
        return prob, svp

    def _values(self, args: dict, dtype) -> tuple:
        dt = np.dtype(dtype)
        vals = []
        for name, default in (("salt_val", 1.0), ("pepper_val", -1.0)):
            given = name in args or getattr(self, name) is not None
            if given:
                v = np.float32(self._scalar(args, name))
                vals.append(convert_sat(np.array([v]), dt)[0])
            elif dt.kind == "f":
                vals.append(dt.type(default))
            else:
                info = np.iinfo(dt)
                vals.append(dt.type(info.max if default > 0 else info.min))
        return tuple(vals)

    def _axis(self, ndim: int) -> int | None:
        return None if self.per_channel else channel_axis(self._layout, ndim)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check_type(x.dtype)
        prob, svp = self._probs(args)
        salt, pepper = self._values(args, x.dtype)
        return salt_and_pepper(x, param, prob, svp, salt, pepper, self._axis(x.ndim))

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.noise import noise_batch

        s = inputs[0]
        self._check_type(s.dtype)
        ndim = s.shapes.shape[1] if len(s) else 1
        p = []
        for i in range(len(s)):
            a = {k: v[i] for k, v in args.items()}
            p.append((*self._probs(a), *self._values(a, s.dtype)))
        return noise_batch(s, "salt_and_pepper", params, p, axis=self._axis(ndim), stream=stream)
