"""``fn.to_decibels``: magnitudes to decibels (DALI's ``ToDecibels``,
``dali/kernels/signal/decibel/``)::

    min_ratio = 10 ** (cutoff_db / multiplier)
    out = multiplier * log10(max(min_ratio, x / reference))

``reference`` defaults to the sample's maximum (1 when the maximum is not positive). The
arithmetic is DALI's, in float32: ``multiplier * log10(2) * log2(max(min_ratio, x * (1 /
reference)))``; a ``min_ratio`` that underflows to 0 becomes the smallest positive float.
float32 in and out, shape and layout kept.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels.audio import contiguous, to_decibels_batch
from ._audio_args import float_arg

__all__ = ["ToDecibels", "decibel_params"]

_LOG10_2 = np.float32(0.3010299956639812)


def decibel_params(multiplier: float, cutoff_db: float) -> tuple[np.float32, np.float32]:
    """(multiplier * log10(2), min_ratio) as DALI computes them, float32."""
    mul = np.float32(multiplier)
    min_ratio = np.float32(10.0) ** (np.float32(cutoff_db) / mul)
    if min_ratio == 0:
        min_ratio = np.nextafter(np.float32(0), np.float32(1))
    return np.float32(mul * _LOG10_2), np.float32(min_ratio)


@register(legacy=("ToDecibels",))
class ToDecibels(Operator):
    """Converts a magnitude (real, positive) to the decibel scale.

    Args:
        multiplier: factor of the logarithm (default 10.0; 20.0 for amplitudes).
        reference: the reference magnitude (default: the maximum of each sample).
        cutoff_db: the minimum ratio in dB (default -200.0); lower values saturate.

    Example:
        >>> db = fn.to_decibels(mel, multiplier=10.0, cutoff_db=-80)
    """

    process_safe = True  # see Operator; the sample processes may run it

    schema = "to_decibels"
    devices = ("cpu", "gpu")

    def setup(self, *, multiplier=10.0, reference=None, cutoff_db=-200.0) -> None:
        who = self.schema
        self.multiplier = float_arg(multiplier, "multiplier", who)
        if self.multiplier == 0:
            raise ArgumentError(f"{who}: multiplier={multiplier!r} can't be zero")
        self.reference = None if reference is None else float_arg(reference, "reference", who)
        if self.reference == 0:
            raise ArgumentError(f"{who}: reference={reference!r} can't be zero")
        self.cutoff_db = float_arg(cutoff_db, "cutoff_db", who)
        self.mul_log2, self.min_ratio = decibel_params(self.multiplier, self.cutoff_db)
        self._layout = ""

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]

    def inv_reference(self, x: np.ndarray) -> np.float32:
        """``1 / reference`` (1 exactly when the reference is 1), from the data when not given."""
        ref = self.reference
        if ref is None:
            ref = float(max(np.float32(0), x.max())) if x.size else 0.0
            if ref == 0:
                ref = 1.0
        ref = np.float32(ref)
        return np.float32(1) if ref == 1 else np.float32(np.float32(1) / ref)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {x.dtype}")
        inv = self.inv_reference(x)
        out = np.empty(x.shape, np.float32)  # an array even for 0-d input
        np.maximum(x * inv if inv != 1 else x, self.min_ratio, out=out)  # x * 1 is x
        with np.errstate(divide="ignore", invalid="ignore"):
            np.log2(out, out=out)
        out *= self.mul_log2
        return out

    def run_batch(self, inputs, args, params, stream):
        """GPU: per-sample maxima (when no reference) and the map, one launch each."""
        s = contiguous(inputs[0])
        if len(s) and s.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {s.dtype}")
        inv = None if self.reference is None else self.inv_reference(np.zeros(0, np.float32))
        return to_decibels_batch(s, inv, self.mul_log2, self.min_ratio, stream=stream)
