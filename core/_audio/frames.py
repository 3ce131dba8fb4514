"""Batch bookkeeping of the GPU spectrogram, in plain numpy (no CuPy: tested on the CPU).

The GPU spectrogram puts the windows of every sample of a batch into one (rows, nfft) buffer
and transforms it with one batched cuFFT. Sample ``i``'s windows are rows
``first[i] : first[i] + nwins[i]``; the buffer has :func:`fft_rows` rows, the total rounded up
to one of a few sizes per octave, so that consecutive batches of different lengths reuse a
handful of cuFFT plans instead of planning (and allocating a work area) for every batch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fft_rows", "frame_offsets", "signal_lengths", "window_counts"]

# Buffer sizes per octave (a power of two): at most 1 / FFT_ROWS_PER_OCTAVE of the rows are padding.
FFT_ROWS_PER_OCTAVE = 4
_MIN_FFT_ROWS = 16


def signal_lengths(shapes: np.ndarray) -> np.ndarray | None:
    """The length of every sample seen as a 1-D signal, or None when a sample has two
    dimensions of extent > 1 (not a signal).

    Args:
        shapes: (N, ndim) sample shapes (ndim 0 is a one-element signal).

    Returns:
        int64 (N,) element counts.
    """
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    if shapes.shape[1] == 0:
        return np.ones(len(shapes), np.int64)
    sizes = shapes.prod(axis=1)
    ok = ((shapes == 1) | (shapes == sizes[:, None])).all(axis=1)
    return sizes if ok.all() else None


def window_counts(lengths, window_length: int, step: int, centered: bool) -> np.ndarray:
    """Windows per signal: ``length // step + 1`` centred, else
    ``(length - window_length) // step + 1``, 0 when none fits; int64 (N,)."""
    n = np.asarray(lengths, np.int64)
    if not centered:
        n = n - window_length
    return np.where(n >= 0, n // step + 1, 0).astype(np.int64)


def frame_offsets(nwins) -> tuple[np.ndarray, int]:
    """(first row of every sample, total rows): the exclusive running sum of ``nwins``."""
    nwins = np.asarray(nwins, np.int64)
    first = np.zeros(len(nwins), np.int64)
    if len(nwins) > 1:
        np.cumsum(nwins[:-1], out=first[1:])
    return first, int(nwins.sum())


def fft_rows(total: int) -> int:
    """The rows of the FFT buffer for ``total`` windows, at least 16: the smallest multiple of
    ``2**(p - 1) / FFT_ROWS_PER_OCTAVE`` that holds them, where ``2**(p - 1) < total <= 2**p``
    (4 sizes per octave: at most 25% padding rows)."""
    total = int(total)
    if total <= _MIN_FFT_ROWS:
        return _MIN_FFT_ROWS
    p = (total - 1).bit_length()  # 2**(p - 1) < total <= 2**p
    step = (1 << (p - 1)) // FFT_ROWS_PER_OCTAVE
    return -(-total // step) * step
