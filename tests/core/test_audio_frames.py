"""The GPU spectrogram's batch bookkeeping (``_audio/frames.py``) against brute-force references,
and the GPU operator's per-batch window counts against the CPU operator's per sample."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe._audio.frames import fft_rows, frame_offsets, signal_lengths, window_counts
from dlpipe.errors import ArgumentError
from dlpipe.operators.spectrogram import Spectrogram


def brute_windows(length: int, wl: int, step: int, centered: bool) -> int:
    """Windows whose start is a multiple of ``step``: centred, every start in [0, length]
    (window w covers [w * step - wl // 2, ...)); else every window inside the signal."""
    if centered:
        return sum(1 for start in range(0, length + 1) if start % step == 0)
    return sum(1 for start in range(0, length) if start % step == 0 and start + wl <= length)


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("wl, step", [(400, 160), (320, 160), (64, 16), (7, 3), (1, 1)])
def test_window_counts(wl, step, centered):
    lengths = [0, 1, 6, 7, 8, 63, 64, 65, 319, 320, 321, 399, 400, 401, 1000, 12345]
    got = window_counts(lengths, wl, step, centered)
    want = [brute_windows(n, wl, step, centered) for n in lengths]
    assert got.dtype == np.int64 and got.tolist() == want


def test_frame_offsets():
    nwins = np.array([3, 0, 7, 1, 12])
    first, total = frame_offsets(nwins)
    assert first.tolist() == [0, 3, 3, 10, 11] and total == 23
    first, total = frame_offsets(np.array([5]))
    assert first.tolist() == [0] and total == 5
    first, total = frame_offsets(np.zeros(0, np.int64))
    assert first.tolist() == [] and total == 0


def test_fft_rows_hold_the_frames_with_little_padding():
    sizes = set()
    for total in range(0, 70000):
        rows = fft_rows(total)
        assert rows >= total and rows >= 16
        if total > 16:
            assert (rows - total) * 4 < total, total  # padding below a quarter
        sizes.add(rows)
    # a few sizes per octave: 4 per doubling above 16, so the plans of a run stay few
    octaves = np.log2(70000 / 16)
    assert len(sizes) <= 4 * int(np.ceil(octaves)) + 1
    # the same size for every total between two sizes (a plan is reused)
    assert fft_rows(20481) == fft_rows(24576) == 24576 and fft_rows(24577) == 28672


def test_signal_lengths():
    shapes = np.array([[5, 1], [1, 9], [1, 1], [0, 1]])
    assert signal_lengths(shapes).tolist() == [5, 9, 1, 0]
    assert signal_lengths(np.array([[3], [8]])).tolist() == [3, 8]
    assert signal_lengths(np.zeros((2, 0), np.int64)).tolist() == [1, 1]
    assert signal_lengths(np.array([[5, 1], [2, 3]])) is None


@pytest.mark.parametrize(
    "kw",
    [
        dict(window_length=320, window_step=160),
        dict(window_length=300, window_step=128, center_windows=False),
        dict(window_length=64, window_step=16, reflect_padding=False),
    ],
)
def test_batch_windows_are_the_per_sample_ones(kw):
    op = Spectrogram(**kw)
    shapes = np.array([[300], [16000], [301], [12345], [364], [2000]])
    want = [op.nwindows(int(n)) for n in shapes[:, 0]]
    assert op.batch_windows(shapes).tolist() == want
    as_rows = np.stack([np.ones(len(shapes), np.int64), shapes[:, 0]], 1)  # (1, n) signals
    assert op.batch_windows(as_rows).tolist() == want


def test_batch_windows_errors_name_the_sample_problem():
    op = Spectrogram(window_length=300, window_step=128, center_windows=False)
    with pytest.raises(ArgumentError, match="too short"):
        op.batch_windows(np.array([[1000], [299], [500]]))
    with pytest.raises(ArgumentError, match="degenerate"):
        op.batch_windows(np.array([[1000, 1], [3, 400]]))
    with pytest.raises(ArgumentError, match="too short"):
        Spectrogram().batch_windows(np.array([[10], [0]]))
