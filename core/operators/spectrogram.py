"""``fn.spectrogram``: the short-time Fourier transform of a 1-D signal (DALI's ``Spectrogram``,
``dali/operators/signal/fft/spectrogram.cc`` and ``dali/kernels/signal/window/``).

Windows of ``window_length`` samples every ``window_step`` samples are multiplied by
``window_fn`` (default: DALI's Hann, ``0.5 * (1 - cos(2 pi (t + 0.5) / N))``, symmetric with no
zero at either end), zero-padded at their end to ``nfft`` (default ``window_length``) and
transformed; the output keeps the ``nfft // 2 + 1`` non-negative frequencies as power
(``power=2``, |X|^2) or magnitude (``power=1``), float32.

With ``center_windows`` (default) window ``w`` covers ``[w * step - window_length // 2, ...)``:
there are ``length // step + 1`` windows and samples outside the signal are mirrored without
repeating the edge (``reflect_padding``, default) or zero. Without it, windows lie inside the
signal: ``(length - window_length) // step + 1`` of them (an error when there is none).

The output is (frequency, time) with ``layout="ft"`` (default) or (time, frequency) with
``"tf"``, and carries that layout. The input may be (n,), (n, 1) or (1, n).
"""

from __future__ import annotations

import numpy as np

from .._audio.fft import rfft_rows
from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels.audio import contiguous, spectrogram_batch
from ._audio_args import int_arg

__all__ = ["Spectrogram", "hann_window", "num_windows", "reflect_101", "signal_1d"]


def hann_window(n: int) -> np.ndarray:
    """DALI's Hann window (``HannWindow``): ``0.5 * (1 - cos(2 pi (t + 0.5) / n))``, float32."""
    t = np.arange(n, dtype=np.float64)
    return (0.5 * (1.0 - np.cos(2 * np.pi / n * (t + 0.5)))).astype(np.float32)


def num_windows(length: int, window_length: int, step: int, centered: bool) -> int:
    if not centered:
        length -= window_length
    return length // step + 1 if length >= 0 else 0


def reflect_101(idx: np.ndarray, size: int) -> np.ndarray:
    """Mirror out-of-range indices into [0, size) without repeating the edge (``abc|ba``),
    as many times as needed (DALI's ``idx_reflect_101``)."""
    if size < 2:
        return np.zeros_like(idx)
    period = 2 * (size - 1)
    idx = np.abs(idx) % period
    return np.where(idx >= size, period - idx, idx)


def signal_1d(x: np.ndarray, who: str) -> np.ndarray:
    """The sample as a 1-D signal: all but one dimension must have extent 1."""
    if x.ndim > 1 and any(e not in (1, x.size) for e in x.shape):
        raise ArgumentError(
            f"{who}: input data must be 1D or all but one dimensions must be degenerate "
            f"(extent 1); got shape {list(x.shape)}"
        )
    return x.reshape(-1)


@register(legacy=("Spectrogram",))
class Spectrogram(Operator):
    """Produces a spectrogram (power or magnitude of the STFT) of a 1-D float32 signal.

    Args:
        nfft: FFT size (default ``window_length``); ``nfft // 2 + 1`` frequency bins out.
        window_length: window size in samples (default 512).
        window_step: step between windows in samples (default 256).
        window_fn: window samples, ``window_length`` floats (default: Hann).
        power: 2 for power (default), 1 for magnitude.
        center_windows: pad so windows are centred at multiples of ``window_step`` (default).
        reflect_padding: mirror (default) rather than zero-pad outside the signal (only with
            ``center_windows``).
        layout: "ft" (frequency-major, default) or "tf" (time-major).

    Example:
        >>> spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160)
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "spectrogram"
    devices = ("cpu", "gpu")

    def setup(
        self,
        *,
        nfft=None,
        window_length=512,
        window_step=256,
        window_fn=None,
        power=2,
        center_windows: bool = True,
        reflect_padding: bool = True,
        layout: str = "ft",
    ) -> None:
        who = self.schema
        self.window_length = int_arg(window_length, "window_length", who, 1)
        self.window_step = int_arg(window_step, "window_step", who, 1)
        self.nfft = self.window_length if nfft is None else int_arg(nfft, "nfft", who, 1)
        if self.window_length > self.nfft:
            raise ArgumentError(
                f"{who}: window_length={self.window_length} can't be bigger than the FFT size "
                f"nfft={self.nfft}"
            )
        self.power = int_arg(power, "power", who)
        if self.power not in (1, 2):
            raise ArgumentError(f"{who}: power={power!r} must be 1 (magnitude) or 2 (power)")
        if layout not in ("ft", "tf"):
            raise ArgumentError(f"{who}: layout={layout!r} must be 'ft' or 'tf'")
        self.layout = layout
        if window_fn is None or len(window_fn) == 0:
            self.window = hann_window(self.window_length)
        else:
            self.window = np.asarray(window_fn, np.float32).reshape(-1)
            if self.window.size != self.window_length:
                raise ArgumentError(
                    f"{who}: window_fn has {self.window.size} values; it should match "
                    f"window_length={self.window_length}"
                )
        # the operator's own read-only copy: the GPU launcher finds its device copy by identity
        # (``kernels.audio.const_table``) instead of hashing its bytes every batch
        self.window = np.array(self.window, np.float32, copy=True)
        self.window.flags.writeable = False
        self.centered = bool(center_windows)
        self.reflect = bool(reflect_padding) and self.centered

    def output_layouts(self, input_layouts):
        return [self.layout]

    def nwindows(self, length: int) -> int:
        """The number of windows of a signal of ``length`` samples (ArgumentError for none)."""
        nwin = num_windows(length, self.window_length, self.window_step, self.centered)
        if nwin <= 0 or length == 0:
            raise ArgumentError(
                f"{self.schema}: signal is too short ({length} samples) for window_length="
                f"{self.window_length}" + ("" if self.centered else " without center_windows")
            )
        return nwin

    def _batch_nwindows(self, shapes: np.ndarray) -> np.ndarray:
        """The windows of every sample of ``shapes`` (N, ndim), int64: array arithmetic when
        every sample is a 1-D signal long enough, else the per-sample checks raise the error."""
        if shapes.shape[1] == 1:  # 1-D signals (the usual audio batch): no shape checks
            lengths = shapes[:, 0]
            is_1d = True
        else:
            lengths = shapes.prod(axis=1)
            is_1d = ((shapes == 1) | (shapes == lengths[:, None])).all()
        span = lengths if self.centered else lengths - self.window_length
        nwins = np.where(span >= 0, span // self.window_step + 1, 0)
        if len(shapes) and is_1d and min(nwins.min(), lengths.min()) > 0:
            return nwins
        for shape in shapes.tolist():  # raises for the first sample that fails
            self.nwindows(signal_1d(np.empty(shape, np.bool_), self.schema).size)
        return nwins

    def frame_indices(self, length: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(indices, valid) of every window's samples, (windows, window_length); ``valid`` is
        None when every index is inside the signal (or reflected into it)."""
        nwin = self.nwindows(length)
        start = np.arange(nwin, dtype=np.int64) * self.window_step
        if self.centered:
            start -= self.window_length // 2
        idx = start[:, None] + np.arange(self.window_length, dtype=np.int64)
        if self.reflect:
            return reflect_101(idx, length), None
        valid = (idx >= 0) & (idx < length)
        return np.clip(idx, 0, max(length - 1, 0)), None if valid.all() else valid

    def padded_signal(self, sig: np.ndarray) -> tuple[np.ndarray, int]:
        """(signal, windows): the signal padded so that window ``w`` is
        ``padded[w * step : w * step + window_length]`` (mirrored as :func:`reflect_101`, or
        zeros, outside it)."""
        length = sig.size
        nwin = self.nwindows(length)
        left = self.window_length // 2 if self.centered else 0
        right = max(0, (nwin - 1) * self.window_step - left + self.window_length - length)
        if not left and not right:
            return sig, nwin
        if not self.reflect:
            return np.pad(sig, (left, right)), nwin
        if max(left, right) < length:  # mirrored once: slices (np.pad is slower)
            out = np.empty(length + left + right, sig.dtype)
            out[left : left + length] = sig
            out[:left] = sig[left:0:-1]
            out[left + length :] = sig[length - 1 - right : length - 1][::-1]
            return out, nwin
        return sig[reflect_101(np.arange(-left, length + right), length)], nwin

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {x.dtype}")
        sig, nwin = self.padded_signal(signal_1d(x, self.schema))
        # the windows are strided views of the padded signal, windowed straight into the
        # zero-padded FFT buffer: no index arrays, one pass over the frames
        views = np.lib.stride_tricks.sliding_window_view(sig, self.window_length)
        views = views[: (nwin - 1) * self.window_step + 1 : self.window_step]
        frames = np.empty((nwin, self.nfft), np.float32)
        np.multiply(views, self.window, out=frames[:, : self.window_length])
        frames[:, self.window_length :] = 0
        spec = rfft_rows(frames)  # complex64 from float32 input
        ri = spec.view(np.float32).reshape(nwin, -1, 2)
        out = np.square(ri[..., 0])
        out += np.square(ri[..., 1])
        if self.power == 1:
            np.sqrt(out, out=out)
        return np.ascontiguousarray(out.T) if self.layout == "ft" else out

    def run_batch(self, inputs, args, params, stream):
        """GPU: frames of the whole batch, batched cuFFT plans made once per size
        (``kernels.audio.rfft_rows``), one launch writing the spectra."""
        s = contiguous(inputs[0])
        if len(s) and s.dtype != np.float32:
            raise ArgumentError(f"{self.schema}: the input must be float32, got {s.dtype}")
        nwins = self._batch_nwindows(s.shapes)
        return spectrogram_batch(
            s,
            nwins,
            self.window,
            self.nfft,
            self.window_step,
            self.window_length // 2 if self.centered else 0,
            "reflect" if self.reflect else ("zero" if self.centered else "none"),
            self.power,
            self.layout == "tf",
            stream=stream,
        )
