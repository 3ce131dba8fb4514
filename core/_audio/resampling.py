"""DALI's windowed-sinc audio resampler (``dali/kernels/signal/resampling*.h``), on the CPU.

Shared by ``decoders.audio`` (``sample_rate=``), ``readers.nemo_asr`` and ``audio_resample``.

The filter is a sinc of ``lobes`` zero crossings on each side under a Hann envelope, tabulated
once (``lobes * 64 + 1`` points, so 32 points per zero crossing, with a zero before and after)
and read with linear interpolation. ``quality`` (0..100) picks the lobes:
``round(0.007 q^2 - 0.09 q + 3)``: 3 at 0, 16 at 50 (the default), 64 at 100.

Output sample ``j`` sits at input position ``j * in_rate / out_rate`` (no half-sample shift);
its value is ``sum_i in[i] * w(i - pos)`` over the ``2 * lobes`` input samples ``i`` in
``[ceil(pos) - lobes, ceil(pos) + lobes)`` that exist: the signal is zero outside its ends.
The filter is not widened when downsampling (DALI does not either), so frequencies above the
new Nyquist rate alias. The output length is ``ceil(in_length * out_rate / in_rate)``.

Numerics follow DALI's CPU kernel: positions are computed in blocks of 256 outputs, the block's
start in float64 and the rest by adding the float32 step, then everything in float32. Two
things differ, so results agree to float32 rounding (~1e-6 of the signal's amplitude), not bit
for bit: the sum order (DALI sums 4 lanes at a time), and the table position's fraction, which
DALI rounds per tap (``(i - pos) * 32 + center`` in float32) and :func:`resample` once per
output (its phase tables; this is the closer of the two to float64).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ArgumentError

__all__ = ["ResamplingWindow", "lobes_from_quality", "resample", "resampled_length", "window"]

_BLOCK = 256  # DALI's CPU block of outputs sharing one float64 start position
# Input taps gathered at once (512 KiB of float32: in an L2 cache). Also under OpenBLAS's
# threading threshold (numpy's bundled OpenBLAS starts threads for a matrix-vector product
# from ~400k elements on): a threaded product was 10-50x slower per row on a busy 2-core box,
# and sample processes (one per core) would each start a thread per core (BENCHMARKS.md,
# "Jasper's CPU chain beside DALI's, on the CPU").
_GATHER = 131072


def lobes_from_quality(quality: float) -> int:
    """The sinc lobes for a quality in [0, 100] (``std::round``: halves away from zero)."""
    q = float(quality)
    return int(math.floor(0.007 * q * q - 0.09 * q + 3 + 0.5))


def resampled_length(in_length: int, in_rate: float, out_rate: float) -> int:
    """``ceil(in_length * out_rate / in_rate)`` in float64, as DALI computes it."""
    return int(math.ceil(in_length * float(out_rate) / float(in_rate)))


class ResamplingWindow:
    """The tabulated windowed sinc (DALI's ``windowed_sinc``).

    Attributes:
        lobes: zero crossings on each side.
        lookup: float32 table; ``lookup[0]`` and everything past the ``coeffs`` points are 0.
        center: the table index of x = 0 (``(coeffs - 1) // 2 + 1``).
        scale: table points per unit of x (32).
    """

    def __init__(self, lobes: int):
        coeffs = lobes * 64 + 1
        self.lobes = lobes
        self.coeffs = coeffs
        scale = np.float32(2.0 * lobes) / np.float32(coeffs - 1)
        scale_env = np.float32(2.0) / np.float32(coeffs)
        center = int(np.float32(coeffs - 1) * np.float32(0.5))
        k = np.arange(coeffs, dtype=np.int64) - center
        x = (k.astype(np.float32) * scale).astype(np.float32)
        y = (k.astype(np.float32) * scale_env).astype(np.float32).astype(np.float64)
        px = (x * np.float32(np.pi)).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            sinc = np.where(
                np.abs(px) < np.float32(1e-5),
                np.float32(1) - px * px * np.float32(1 / 6),
                np.sin(px) / px,
            ).astype(np.float32)
        hann = 0.5 * (1.0 + np.cos(y * np.pi))
        self.lookup = np.zeros(coeffs + 5, np.float32)
        self.lookup[1 : coeffs + 1] = (sinc.astype(np.float64) * hann).astype(np.float32)
        self.center = np.float32(center + 1)
        self.scale = np.float32(1.0) / scale
        self._diff = np.append(np.diff(self.lookup), np.float32(0))  # lookup[i + 1] - lookup[i]
        # The per-phase tables (see :func:`resample`): the window's ``2 * lobes`` taps at the
        # offsets ``d + k`` share ``floor(d * scale)``'s table points, so only ``scale + 1``
        # distinct rows of values (and of slopes to the next point) exist.
        step = int(self.scale)
        assert step == self.scale, "the table has a whole number of points per unit"
        k = np.arange(-lobes, lobes)
        idx = int(self.center) + step * k[None, :] + np.arange(step + 1)[:, None]
        self.values = np.ascontiguousarray(self.lookup[idx])  # (phases, taps)
        self.slopes = np.ascontiguousarray(self._diff[idx])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The window at float32 offsets ``x`` (|x| <= lobes), linearly interpolated: with
        ``fi = x * scale + center`` (>= 1), ``lookup[i] + (fi - i) * (lookup[i + 1] -
        lookup[i])`` for ``i = trunc(fi)``, all in float32 as DALI's vector path."""
        fi = x * self.scale
        fi += self.center
        fl = np.floor(fi)
        i = fl.astype(np.int64)  # int64: numpy gathers with it fastest
        fi -= fl  # the fraction
        fi *= self._diff.take(i)
        fi += self.lookup.take(i)
        return fi


@functools.cache
def window(lobes: int) -> ResamplingWindow:
    """The window of ``lobes`` lobes (made once per process)."""
    return ResamplingWindow(lobes)


def input_positions(n_out: int, in_rate: float, out_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """(base, frac) per output: the input position is ``base + frac``, ``base`` an int64 and
    ``frac`` a float32 offset that grows within each block of 256 outputs (DALI's CPU scheme)."""
    base, frac = _block_positions(n_out, in_rate, out_rate)
    return np.repeat(base.astype(np.int64), _BLOCK)[:n_out], frac.reshape(-1)[:n_out]


def _block_positions(n_out: int, in_rate: float, out_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """(base, frac) per whole block of 256 outputs (the last one filled up): the floor of the
    block's float64 start position, (blocks,) float64, and the float32 running offsets from
    it, (blocks, 256)."""
    scale = float(in_rate) / float(out_rate)
    nblocks = -(-n_out // _BLOCK)
    starts = np.arange(nblocks, dtype=np.float64) * _BLOCK * scale
    base = np.floor(starts)
    frac = np.empty((nblocks, _BLOCK), np.float32)
    frac[:, 0] = starts - base
    frac[:, 1:] = np.float32(scale)
    np.cumsum(frac, axis=1, out=frac)  # float32 running sums, as DALI's ``in_pos += step``
    return base, frac


def resample(
    x: np.ndarray,
    in_rate: float,
    out_rate: float,
    lobes: int,
    out_length: int | None = None,
    chunk: int | None = None,
) -> np.ndarray:
    """Resample float32 ``x`` of shape (time,) or (time, channels) to float32.

    How: output ``j``'s taps sit at offsets ``d + k`` from its first input sample
    (``d = ceil(pos) - pos`` in [0, 1), ``k`` in ``[-lobes, lobes)``), and the table has a whole
    number of points (``scale``, 32) per unit of offset, so all taps of one output read the
    table at the same fraction ``t = frac(d * scale)`` from rows ``ph = floor(d * scale)`` of
    :attr:`ResamplingWindow.values` and ``slopes``:
    ``out[j] = src_j . values[ph] + t * (src_j . slopes[ph])``.
    The outputs are sorted by phase once (numpy's stable sort of bytes: one counting pass),
    then each phase's outputs are walked ``chunk`` at a time: one gather of their input rows
    (up to 512 KiB, so BLAS reads them from the cache) and two BLAS matrix-vector products
    with the phase's values and slopes (5% faster in all than one product with a (taps, 2)
    table, and closer to float64: 1.3e-7 against 2.1e-7 on speech of amplitude 0.6); ``t``
    then combines the two for all outputs at once and one scatter puts them in order
    (BENCHMARKS.md, "Jasper's CPU chain beside DALI's, on the CPU"). An utterance costs a few
    numpy calls per phase and none per tap (GIL-free work: what sixteen executor threads
    sharing one GIL need; see BENCHMARKS.md, "Speech: the CPU chain and the GIL"). The
    fraction is rounded once per output instead of once per tap, a difference of float32
    rounding in the interpolation weight (results move by ~1e-7). Whole blocks of 256 outputs
    are computed (the last one's extra outputs read zeros past the signal and are dropped).

    Args:
        x: the signal, float32, time first.
        in_rate, out_rate: the sampling rates (only their ratio matters; both > 0).
        lobes: the filter's lobes (see :func:`lobes_from_quality`).
        out_length: the output length (default :func:`resampled_length`).
        chunk: outputs (times channels) gathered at once (default: 512 KiB of input rows,
            4096 outputs with 16 lobes).

    Returns:
        float32 array of ``out_length`` frames (and ``x``'s channels).
    """
    x = np.asarray(x, np.float32)
    n_in = x.shape[0]
    if out_length is None:
        out_length = resampled_length(n_in, in_rate, out_rate)
    if out_length == 0 or n_in == 0:
        return np.zeros((out_length, *x.shape[1:]), np.float32)
    win = window(lobes)
    ntaps = 2 * lobes
    base, frac = _block_positions(out_length, in_rate, out_rate)
    first = np.ceil(frac)
    t = np.subtract(first, frac, out=frac)
    t *= win.scale  # d * scale, float32 as DALI's offsets
    ph = t.astype(np.uint8)  # t >= 0: truncation is the floor
    t -= ph  # the fraction
    ph = ph.reshape(-1)  # 0..scale: one byte, one pass of the radix sort
    pad = lobes + 1  # zeros before the signal: the first taps start at ``pad - lobes`` >= 0
    start = first.astype(np.intp)
    del first  # big temporaries go as soon as they are used: malloc reuses them (no new pages)
    start += (base.astype(np.intp) + (pad - lobes))[:, None]
    start = start.reshape(-1)
    # Zeros around the signal stand for DALI's clamping of the taps to the signal; each
    # output's taps are then ``ntaps`` consecutive floats of its channel's padded row.
    flat = x.reshape(n_in, -1)
    nc = flat.shape[1]
    width = max(n_in + pad, int(start[-1]) + 1) + ntaps  # the last start is the largest
    padded = np.zeros((nc, width), np.float32)
    padded[:, pad : pad + n_in] = flat.T
    taps = _tap_rows(padded, ntaps)
    order = np.argsort(ph, kind="stable")
    counts = np.bincount(ph, minlength=win.values.shape[0])
    rows = start.take(order)
    del start, ph
    if nc > 1:  # channel c's rows start c * width floats further
        rows = rows[:, None] + np.arange(nc) * width
    dots = np.empty((2, order.size * nc), np.float32)
    step = max(1, (_GATHER // ntaps if chunk is None else chunk) // nc)
    lo = 0
    for p in np.flatnonzero(counts).tolist():
        hi = lo + int(counts[p])
        for g in range(lo, hi, step):
            e = min(g + step, hi)
            src = taps[rows[g:e]].view(np.float32).reshape(-1, ntaps)
            np.matmul(src, win.values[p], out=dots[0, g * nc : e * nc])
            np.matmul(src, win.slopes[p], out=dots[1, g * nc : e * nc])
        lo = hi
    del rows
    v, ts = dots[1], t.reshape(-1).take(order)
    if nc == 1:  # 1-D: numpy scatters a 1-D array ~1.8x faster than an (n, 1) one
        v *= ts
        v += dots[0]
        res = t.reshape(-1)  # the offsets' buffer, free now
    else:
        v = v.reshape(-1, nc)
        v *= ts[:, None]
        v += dots[0].reshape(-1, nc)
        res = np.empty((order.size, nc), np.float32)
    res[order] = v
    return res[:out_length].reshape(out_length, *x.shape[1:])


def _tap_rows(padded: np.ndarray, ntaps: int) -> np.ndarray:
    """A 1-D view of C-contiguous float32 ``padded`` whose element ``i`` is the ``ntaps``
    floats from flat position ``i`` on, as one opaque item (``np.void``): a gather of these
    rows copies whole items (~2x faster than fancy indexing a sliding window view, which
    copies them float by float). ``.view(np.float32)`` of a gathered array gives the floats."""
    return np.ndarray(
        (padded.size - ntaps + 1,),
        dtype=np.dtype((np.void, 4 * ntaps)),
        buffer=padded,
        strides=(4,),
    )


def check_quality(quality, who: str) -> float:
    """``quality`` as a float in [0, 100], or ArgumentError naming it."""
    try:
        q = float(quality)
    except (TypeError, ValueError):
        raise ArgumentError(f"{who}: quality={quality!r} must be a number in [0, 100]") from None
    if not 0 <= q <= 100:
        raise ArgumentError(f"{who}: quality={quality!r} must be in [0, 100]")
    return q
