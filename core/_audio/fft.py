"""Real FFTs of many rows at once (the spectrogram's frames), on the calling thread.

``scipy.fft`` (pocketfft vectorised across rows) when scipy is installed: ~7x faster than
``numpy.fft`` (the same pocketfft, one row at a time) on a spectrogram's 512-point frames.
Both keep float32 input in single precision (complex64 out); the two differ only by float32
rounding of the butterflies. scipy is optional: without it numpy's FFT is used.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rfft_rows"]

_SCIPY_FFT = None  # the module once imported; False when unavailable


def _scipy_fft():
    global _SCIPY_FFT
    if _SCIPY_FFT is None:
        try:
            import scipy.fft

            _SCIPY_FFT = scipy.fft
        except ImportError:
            _SCIPY_FFT = False
    return _SCIPY_FFT


def rfft_rows(frames: np.ndarray) -> np.ndarray:
    """The real FFT of each row of float32 ``frames`` (rows, n): complex64 (rows, n // 2 + 1).

    Example:
        >>> rfft_rows(np.ones((2, 4), np.float32))[:, 0]
        array([4.+0.j, 4.+0.j], dtype=complex64)
    """
    sfft = _scipy_fft()
    if sfft:
        return sfft.rfft(frames, axis=1, workers=1, overwrite_x=True)
    return np.fft.rfft(frames, axis=1)
