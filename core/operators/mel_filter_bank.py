"""``fn.mel_filter_bank``: a spectrogram to a mel spectrogram by triangular filters (DALI's
``MelFilterBank``, ``dali/kernels/audio/mel_scale/``).

``nfilter`` triangles are spread evenly on the mel scale between ``freq_low`` and ``freq_high``
(default ``sample_rate / 2``): filter m rises from mel point m to m + 1 and falls to m + 2 of
``nfilter + 2`` evenly spaced points. FFT bin k is at ``k * sample_rate / nfft`` Hz, with
``nfft = 2 * (bins - 1)`` from the input; only the bins in [freq_low, freq_high] contribute.
With ``normalize`` (default) each filter is scaled by ``2 / (f(m + 2) - f(m))`` (unit area, as
librosa's ``norm="slaney"``), else its peak is 1. ``mel_formula``: "slaney" (default; linear
below 1 kHz, logarithmic above, librosa's default) or "htk" (``2595 log10(1 + f / 700)``).

The frequency axis is the layout's "f" (the input layout is kept); without a layout it is the
second-to-last axis (the only one for a 1-D input). Mel points are computed as DALI does (the
mel formulas in float32, the grid in float64), so filter edges fall on the same bins.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels.audio import axis_matmul_batch, contiguous
from ._audio_args import float_arg, int_arg

__all__ = ["MelFilterBank", "SparseFilters", "mel_weights"]

_F = np.float32


def _slaney():
    fsp = _F(200.0 / 3.0)
    min_log_hz = _F(1000.0)
    min_log_mel = _F(min_log_hz / fsp)
    step_log = _F(0.068751777)

    def hz_to_mel(hz):
        hz = _F(hz)
        if hz >= min_log_hz:
            return _F(min_log_mel + _F(np.log(_F(hz / min_log_hz))) / step_log)
        return _F(hz / fsp)

    def mel_to_hz(mel):
        mel = _F(mel)
        if mel >= min_log_mel:
            return _F(min_log_hz * _F(np.exp(_F(step_log * _F(mel - min_log_mel)))))
        return _F(mel * fsp)

    return hz_to_mel, mel_to_hz


def _htk():
    def hz_to_mel(hz):
        return _F(_F(1127) * _F(np.log(_F(_F(1) + _F(hz) / _F(700)))))

    def mel_to_hz(mel):
        return _F(_F(700) * _F(_F(np.exp(_F(_F(mel) / _F(1127)))) - _F(1)))

    return hz_to_mel, mel_to_hz


@functools.cache
def mel_weights(
    nfilter: int,
    nbins: int,
    sample_rate: float,
    freq_low: float,
    freq_high: float,
    normalize: bool,
    formula: str,
) -> np.ndarray:
    """The (nfilter, nbins) float32 filter matrix DALI's kernel applies (``mel_scale.h``)."""
    hz_to_mel, mel_to_hz = _slaney() if formula == "slaney" else _htk()
    nfft = 2 * (nbins - 1)
    mel_low = float(hz_to_mel(freq_low))
    mel_high = float(hz_to_mel(freq_high))
    hz_step = float(_F(sample_rate)) / nfft
    mel_delta = (mel_high - mel_low) / (nfilter + 1)
    inv_step = 1.0 / hz_step
    start = math.ceil(float(_F(freq_low)) * inv_step)
    end = min(math.floor(float(_F(freq_high)) * inv_step), nbins - 1)
    weights_down = np.zeros(nbins, np.float32)
    intervals = np.full(nbins, -1, np.int64)
    norm = np.ones(nfilter, np.float32)
    mel0, mel1 = mel_low, mel_low + mel_delta
    b = start
    for interval in range(nfilter + 1):
        if interval == nfilter:
            mel1 = mel_high
        f0, f1 = float(mel_to_hz(mel0)), float(mel_to_hz(mel1))
        if normalize and interval < nfilter:
            f2 = float(mel_to_hz(mel1 + mel_delta))
            norm[interval] = 2.0 / (f2 - f0)
        slope = 1.0 / (f1 - f0)
        f = b * hz_step
        while b <= end and f < f1:
            weights_down[b] = (f1 - f) * slope
            intervals[b] = interval
            b += 1
            f = b * hz_step
        mel0, mel1 = mel1, mel1 + mel_delta
    w = np.zeros((nfilter, nbins), np.float32)
    for k in range(start, end + 1):
        up = intervals[k]
        if up < 0:
            continue
        if up < nfilter:
            w[up, k] += (_F(1) - weights_down[k]) * norm[up]
        if up >= 1:
            w[up - 1, k] += weights_down[k] * norm[up - 1]
    w.setflags(write=False)  # memoised and shared; the GPU launcher memoises its device copy
    return w


class SparseFilters:
    """A filter matrix applied as sums over each filter's support, without BLAS.

    Triangular mel filters overlap only their neighbours, so the even filters' supports are
    disjoint, and so are the odd ones'. For each parity, the rows collapse into one weight per
    bin; ``out[f]`` is then the sum of ``weight * x`` over ``f``'s support: one multiply per
    parity and one short sum per filter. That is ~2 * nbins * frames multiply-adds (a dense
    product does nfilter times more) and runs on the calling thread: a multithreaded BLAS
    product per sample, on the executor's threads, oversubscribes the cores (its idle threads
    spin), which made this operator ~8x slower in a pipeline than on its own.

    Attributes:
        groups: per parity, (bin weights (nbins,), [(filter, first bin, end bin), ...]).
    """

    def __init__(self, w: np.ndarray):
        nfilter, nbins = w.shape
        self.shape = (nfilter, nbins)
        self.groups = []
        for parity in (0, 1):
            spans = []
            weights = np.zeros(nbins, np.float32)
            for f in range(parity, nfilter, 2):
                nz = np.flatnonzero(w[f])
                if nz.size == 0:
                    continue  # an empty filter: its output row stays zero
                lo, hi = int(nz[0]), int(nz[-1]) + 1
                if np.any(weights[lo:hi]):
                    raise ValueError("the filters of one parity overlap")
                weights[lo:hi] = w[f, lo:hi]
                spans.append((f, lo, hi))
            if spans:
                self.groups.append((weights, spans))

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The filters applied to axis 0 of float32 ``x`` (bins, ...): (nfilter, ...)."""
        x = np.ascontiguousarray(x)  # each filter's bins as whole rows ("tf" input: a copy)
        out = np.zeros((self.shape[0], *x.shape[1:]), np.float32)
        bshape = (-1,) + (1,) * (x.ndim - 1)
        add = np.add.reduce  # the ufunc's method: np.sum's Python wrapper costs ~1 us a call
        for weights, spans in self.groups:
            y = x * weights.reshape(bshape)
            for f, lo, hi in spans:
                add(y[lo:hi], axis=0, keepdims=True, out=out[f : f + 1])
        return out


@functools.cache
def sparse_mel(*key) -> SparseFilters | None:
    """:class:`SparseFilters` of :func:`mel_weights` ``(*key)`` (None if they do not fit)."""
    try:
        return SparseFilters(mel_weights(*key))
    except ValueError:
        return None


@register(legacy=("MelFilterBank",))
class MelFilterBank(Operator):
    """Converts a spectrogram to a mel spectrogram with a bank of triangular filters.

    Args:
        nfilter: number of mel filters (default 128).
        sample_rate: the audio's sampling rate (default 44100).
        freq_low: lowest frequency, Hz (default 0).
        freq_high: highest frequency, Hz (default ``sample_rate / 2``).
        normalize: scale each filter to unit area (default True) rather than unit peak.
        mel_formula: "slaney" (default) or "htk".

    Example:
        >>> mel = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=64)
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "mel_filter_bank"
    devices = ("cpu", "gpu")

    def setup(
        self,
        *,
        nfilter=128,
        sample_rate=44100.0,
        freq_low=0.0,
        freq_high=0.0,
        normalize: bool = True,
        mel_formula: str = "slaney",
    ) -> None:
        who = self.schema
        self.nfilter = int_arg(nfilter, "nfilter", who, 1)
        self.sample_rate = float_arg(sample_rate, "sample_rate", who)
        if self.sample_rate <= 0:
            raise ArgumentError(f"{who}: sample_rate={sample_rate!r} must be > 0")
        self.freq_low = float_arg(freq_low, "freq_low", who)
        if self.freq_low < 0:
            raise ArgumentError(f"{who}: freq_low={freq_low!r} must be >= 0")
        high = float_arg(freq_high, "freq_high", who)
        self.freq_high = high if high > 0 else 0.5 * self.sample_rate
        if not self.freq_low < self.freq_high <= self.sample_rate:
            raise ArgumentError(
                f"{who}: freq_high={freq_high!r} should be within the range "
                f"(freq_low={self.freq_low}, sample_rate/2={self.sample_rate / 2}]"
            )
        if mel_formula not in ("slaney", "htk"):
            raise ArgumentError(
                f'{who}: mel_formula={mel_formula!r} is not supported; use "slaney" or "htk"'
            )
        self.mel_formula = mel_formula
        self.normalize = bool(normalize)
        self._layout = ""

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def freq_axis(self, ndim: int) -> int:
        if not self._layout:
            return max(0, ndim - 2)
        axis = self._layout.find("f")
        if axis < 0 or axis >= ndim:
            raise ArgumentError(
                f"{self.schema}: 'f' axis not present in the input layout {self._layout!r}"
            )
        return axis

    def weights(self, nbins: int) -> np.ndarray:
        if nbins < 2:
            raise ArgumentError(
                f"{self.schema}: the frequency axis has {nbins} bins; at least 2 are needed"
            )
        return mel_weights(
            self.nfilter,
            nbins,
            self.sample_rate,
            self.freq_low,
            self.freq_high,
            self.normalize,
            self.mel_formula,
        )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {x.dtype}")
        axis = self.freq_axis(x.ndim)
        w = self.weights(x.shape[axis])
        sparse = sparse_mel(
            self.nfilter,
            x.shape[axis],
            self.sample_rate,
            self.freq_low,
            self.freq_high,
            self.normalize,
            self.mel_formula,
        )
        if sparse is not None:
            out = sparse.apply(np.moveaxis(x, axis, 0))
        else:
            out = np.tensordot(w, x, axes=([1], [axis]))  # filters first
        return np.ascontiguousarray(np.moveaxis(out, 0, axis), dtype=np.float32)

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch; each output sums only its filter's nonzero bins."""
        s = contiguous(inputs[0])
        if not len(s):
            return s
        if s.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {s.dtype}")
        axis = self.freq_axis(s.shapes.shape[1])
        nbins = s.shapes[:, axis]
        if (nbins != nbins[0]).any():
            raise ArgumentError(
                f"{self.schema}: the GPU operator needs one frequency extent per batch, got "
                f"{sorted(set(nbins.tolist()))}"
            )
        w = self.weights(int(nbins[0]))
        return axis_matmul_batch(s, axis, w, sparse=True, stream=stream)
