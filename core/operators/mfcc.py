"""``fn.mfcc``: mel-frequency cepstral coefficients, a DCT of a (log) mel spectrogram along
``axis`` (DALI's ``MFCC``, ``dali/kernels/signal/dct/``).

DCT types 1-4 without the factor 2 of some conventions (DALI's tables)::

    I:   X[k] = x[0] / 2 + (-1)^k x[N-1] / 2 + sum_{n=1}^{N-2} x[n] cos(pi k n / (N - 1))
    II:  X[k] = sum_n x[n] cos(pi k (n + 1/2) / N)
    III: X[k] = x[0] / 2 + sum_{n>=1} x[n] cos(pi n (k + 1/2) / N)
    IV:  X[k] = sum_n x[n] cos(pi (n + 1/2) (k + 1/2) / N)

``normalize`` makes II-IV orthonormal (II: row 0 times ``1/sqrt(N)``, the rest ``sqrt(2/N)``;
III: column 0 ``1/sqrt(N)``, the rest ``sqrt(2/N)``; IV: ``sqrt(2/N)``); type I has none. The
first ``min(n_mfcc, N)`` coefficients are kept. ``lifter`` L > 0 scales coefficient i by
``1 + (L / 2) sin(pi (i + 1) / L)``. float32, 2-4 dimensions, layout kept.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._audio_args import float_arg, int_arg

__all__ = ["MFCC", "dct_table", "lifter_coeffs"]


@functools.cache
def dct_table(n: int, ndct: int, dct_type: int, normalize: bool) -> np.ndarray:
    """The (ndct, n) float32 cosine table of DALI's ``FillCosineTable``."""
    k = np.arange(ndct, dtype=np.float64)[:, None]
    i = np.arange(n, dtype=np.float64)[None, :]
    if dct_type == 1:
        t = np.cos(np.pi / (n - 1) * k * i)
        t[:, 0] = 0.5
        t[:, n - 1] = np.where(np.arange(ndct) % 2 == 0, 0.5, -0.5)
    elif dct_type == 2:
        t = np.cos(np.pi / n * (i + 0.5) * k)
        if normalize:
            t *= np.sqrt(2.0 / n)
            t[0] = np.cos(0.0) / np.sqrt(n)
    elif dct_type == 3:
        t = np.cos(np.pi / n * i * (k + 0.5))
        t[:, 1:] *= np.sqrt(2.0 / n) if normalize else 1.0
        t[:, 0] = 1.0 / np.sqrt(n) if normalize else 0.5
    else:
        t = np.cos(np.pi / n * (i + 0.5) * (k + 0.5)) * (np.sqrt(2.0 / n) if normalize else 1.0)
    return t.astype(np.float32)


@functools.cache
def lifter_coeffs(n: int, lifter: float) -> np.ndarray:
    """``1 + (lifter / 2) * sin(pi / lifter * (i + 1))`` in float32, i < n."""
    ampl = np.float32(lifter / 2)
    phase = np.float32(np.float32(np.pi) / np.float32(lifter))
    i = np.arange(1, n + 1, dtype=np.float32)
    return (np.float32(1) + ampl * np.sin((phase * i).astype(np.float32))).astype(np.float32)


@register(legacy=("MFCC",))
class MFCC(Operator):
    """Computes mel-frequency cepstral coefficients (MFCC) from a mel spectrogram.

    Args:
        n_mfcc: number of coefficients (default 20; at most the axis' extent).
        dct_type: DCT type 1, 2 (default), 3 or 4.
        normalize: orthonormal DCT (default False; not with type 1).
        axis: the axis to transform (default 0).
        lifter: cepstral liftering coefficient (default 0: none).

    Example:
        >>> mfcc = fn.mfcc(fn.to_decibels(mel), n_mfcc=13)
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "mfcc"
    ops_name = "MFCC"
    devices = ("cpu", "gpu")

    def setup(self, *, n_mfcc=20, dct_type=2, normalize: bool = False, axis=0, lifter=0.0):
        who = self.schema
        self.n_mfcc = int_arg(n_mfcc, "n_mfcc", who, 1)
        self.dct_type = int_arg(dct_type, "dct_type", who)
        if self.dct_type not in (1, 2, 3, 4):
            raise ArgumentError(
                f"{who}: dct_type={dct_type!r} is not supported; supported types are 1, 2, 3, 4"
            )
        self.normalize = bool(normalize)
        if self.normalize and self.dct_type == 1:
            raise ArgumentError(
                f"{who}: normalize=True (ortho-normalization) is not supported for dct_type=1"
            )
        self.axis = int_arg(axis, "axis", who, 0)
        self.lifter = float_arg(lifter, "lifter", who)

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]

    def table_for(self, x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {x.dtype}")
        if not 2 <= x.ndim <= 4:
            raise ArgumentError(
                f"{self.schema}: unsupported number of dimensions {x.ndim} (2 to 4 are)"
            )
        if self.axis >= x.ndim:
            raise ArgumentError(
                f"{self.schema}: axis={self.axis} is out of bounds [0, {x.ndim}) for a "
                f"{x.ndim}-D input"
            )
        n = x.shape[self.axis]
        if self.dct_type == 1 and n < 2:
            raise ArgumentError(f"{self.schema}: DCT type I requires an input length > 1")
        return dct_table(n, min(self.n_mfcc, n), self.dct_type, self.normalize)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        table = self.table_for(x)
        out = np.tensordot(table, x, axes=([1], [self.axis])).astype(np.float32)
        if self.lifter != 0:
            coeffs = lifter_coeffs(table.shape[0], self.lifter)
            out *= coeffs.reshape((-1,) + (1,) * (x.ndim - 1))
        return np.ascontiguousarray(np.moveaxis(out, 0, self.axis))

    def run_batch(self, inputs, args, params, stream):
        """GPU: the DCT (and lifter) of the whole batch in one launch."""
        from ..kernels.audio import axis_matmul_batch, contiguous

        s = contiguous(inputs[0])
        if not len(s):
            return s
        tables = [self.table_for(np.empty(shape, s.dtype)) for shape in s.shape_list()]
        lifter = None
        if self.lifter != 0:
            lifter = lifter_coeffs(max(t.shape[0] for t in tables), self.lifter)
        return axis_matmul_batch(s, self.axis, tables, lifter=lifter, stream=stream)
