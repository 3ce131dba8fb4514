"""``fn.nonsilent_region``: where the sound is, as (begin, length) of a 1-D signal (DALI's
``NonsilentRegion``, ``dali/operators/audio/nonsilence_op.h``).

The short-term power of a window is the mean of its squared samples (``W = min(window_length,
length)`` samples). With ``reference_power`` R (default: the largest power) the threshold is
``R * 10 ** (cutoff_db / 10)``; the region runs from the start of the first window whose power
reaches it to the end of the last such window. A silent signal gives (0, 0). Both outputs are
int32 scalars (on the GPU for ``device="gpu"``, as DALI's GPU operator since 1.16; the GPU sums
in float64, exact for integers, so for floating-point input its regions may end a sample apart
from the CPU's where a power is within rounding of the threshold, as DALI's GPU and CPU
operators' may).

The powers are DALI's CPU kernel's (``dali/kernels/signal/moving_mean_square.cc``), value for
value, so the regions are DALI's too, also where a power is within rounding of the threshold
(the trailing edge of speech over near-silence often is: float64 sums gave another length on
13 of 64 generated utterances, 23 of 264 signals in all). The
kernel gives one power per sample ``p``, of the window that ends there (``x[p - W + 1 : p + 1]``,
cut at 0 for the first ``W - 1``, still divided by ``W``); the region runs from the first loud
power's window start (at least 0) to the last loud power's sample:

* integers of up to 16 bits: the squares summed exactly (int64), each sum rounded to float32
  and multiplied by ``float32(1 / W)``;
* other types: converted to float32 and squared in float32. A running float32 sum starts
  afresh (the window's squares summed in order) at sample 0 and every ``reset_interval``
  samples after it (floating-point input; integers never restart), and in between subtracts
  the square that left the window and then adds the new one, one float32 rounding each
  (DALI 2.4 checked on 264 signals: any other order or restart period gives other regions).
  ``_running_squares.py`` computes these sums as rows of float32 prefix sums, and for a
  region only the rows that decide it.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._audio_args import float_arg, int_arg, per_sample_float
from ._running_squares import RunningSquares, float_region

__all__ = ["NonsilentRegion", "moving_mean_square", "nonsilent_region", "running_sum"]

_TYPES = tuple(
    np.dtype(t)
    for t in (
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
        np.float32,
    )
)


def running_sum(v: np.ndarray, group: int = 8) -> np.ndarray:
    """``np.cumsum(v)`` with a fraction of its serial additions: sums within groups of
    ``group`` elements column by column (vectorised across groups), then the groups' totals
    serially and added to the following groups. Exact for integers; floats are summed in
    another order (float64: ~1e-16 of the total apart). ``v`` is overwritten (returned)."""
    n = v.size
    m = n // group
    if m < 2:
        return np.cumsum(v, out=v)
    a = v[: m * group].reshape(m, group)
    for j in range(1, group):
        a[:, j] += a[:, j - 1]
    totals = np.cumsum(a[:, -1])
    a[1:] += totals[:-1, None]
    tail = v[m * group :]
    if tail.size:
        tail[0] += totals[-1]
        np.cumsum(tail, out=tail)
    return v


def moving_mean_square(x: np.ndarray, window: int, reset_interval: int = -1) -> np.ndarray:
    """DALI's float32 mean square of the ``window`` samples that end at each sample of 1-D
    ``x`` (``x.size`` values; the first ``window - 1`` windows are cut at 0); ``reset_interval``
    (-1: never) restarts the float32 running sum of floating-point ``x`` (see the module's
    docstring)."""
    n = x.size
    mean = np.float32(1.0 / window)
    if x.dtype.kind in "iu" and x.dtype.itemsize <= 2:  # exact: int64 running sums
        csum = running_sum(np.square(x, dtype=np.int64))
        sums = np.empty(n, csum.dtype)
        sums[:window] = csum[:window]
        np.subtract(csum[window:], csum[:-window], out=sums[window:])
        out = sums.astype(np.float32)
        out *= mean
        return out
    rs = RunningSquares(x, window, _interval(x, reset_interval))
    return rs.powers().reshape(-1)[:n]


def _interval(x: np.ndarray, reset_interval: int) -> int:
    """Samples per float32 running sum: ``reset_interval`` for floating-point ``x``, the whole
    signal otherwise (wider integers are summed in float32, never restarted) or for -1."""
    n = x.size
    if x.dtype.kind != "f" or reset_interval == -1 or reset_interval > n:
        return n
    return reset_interval


def nonsilent_region(
    x: np.ndarray,
    cutoff_db: float,
    window_length: int,
    reference_power: float | None,
    reset_interval: int = -1,
) -> tuple[int, int]:
    """(begin, length) of the non-silent region of 1-D ``x`` (``reset_interval``: the float32
    running sum's restart interval for floating-point ``x``; integers never restart)."""
    if x.size == 0:
        return 0, 0
    w = min(window_length, x.size)
    if x.dtype.kind in "iu" and x.dtype.itemsize <= 2:
        mms = moving_mean_square(x, w)
        ref = np.float32(mms.max()) if reference_power is None else np.float32(reference_power)
        threshold = ref * np.float32(10) ** (np.float32(cutoff_db) * np.float32(0.1))
        above = mms >= threshold
        first = int(above.argmax())
        if not above[first]:
            return 0, 0
        last = above.size - 1 - int(above[::-1].argmax())
    else:
        found = float_region(x, w, _interval(x, reset_interval), cutoff_db, reference_power)
        if found is None:
            return 0, 0
        first, last = found
    begin = max(first - w + 1, 0)
    return begin, last - begin + 1


@register(legacy=("NonsilentRegion",))
class NonsilentRegion(Operator):
    """Finds the leading and trailing silence of a 1-D audio signal.

    Args:
        cutoff_db: the threshold, dB below the reference, under which the signal is silent
            (default -60); per-sample argument input allowed.
        window_length: samples per short-term power window (default 2048).
        reference_power: the 0 dB power (default: the maximum short-term power of the
            sample); per-sample argument input allowed; must be > 0.
        reset_interval: DALI restarts its float running sum every this many samples (default
            8192; -1: never). Must be a multiple of ``window_length`` for float input.

    Returns:
        (begin, length): int32 scalars; slice the audio with them
        (``fn.slice(audio, begin, length, axes=[0])``).

    Example:
        >>> begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "nonsilent_region"
    devices = ("cpu", "gpu")
    num_outputs = 2
    arg_inputs = frozenset({"cutoff_db", "reference_power"})

    def setup(
        self, *, cutoff_db=-60.0, window_length=2048, reference_power=None, reset_interval=8192
    ):
        who = self.schema
        self.cutoff_db = float_arg(cutoff_db, "cutoff_db", who)
        self.window_length = int_arg(window_length, "window_length", who, 1)
        self.reference_power = (
            None if reference_power is None else self._check_ref(reference_power, who)
        )
        self.reset_interval = int_arg(reset_interval, "reset_interval", who)
        self._ref_given = reference_power is not None

    @staticmethod
    def _check_ref(value, who: str) -> float:
        v = float_arg(value, "reference_power", who)
        if v <= 0:
            raise ArgumentError(f"{who}: reference_power={value!r} has to be positive")
        return v

    def output_layouts(self, input_layouts):
        return ["", ""]

    def _check_input(self, ndim: int, dtype: np.dtype) -> None:
        who = self.schema
        if ndim != 1:
            raise ArgumentError(f"{who}: the input must be 1-D audio, got {ndim} dimensions")
        if dtype not in _TYPES:
            raise ArgumentError(f"{who}: unsupported input type {dtype}")
        if dtype.kind == "f" and self.reset_interval != -1:
            if self.reset_interval % self.window_length:
                raise ArgumentError(
                    f"{who}: reset_interval={self.reset_interval} shall be a multiple of "
                    f"window_length={self.window_length}"
                )

    def _sample_args(self, args: dict) -> tuple[float, float | None]:
        who = self.schema
        cutoff = per_sample_float(args, "cutoff_db", self.cutoff_db, who)
        ref = self.reference_power
        if "reference_power" in args:
            ref = self._check_ref(per_sample_float(args, "reference_power", 0.0, who), who)
        return cutoff, ref

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check_input(x.ndim, x.dtype)
        cutoff, ref = self._sample_args(args)
        begin, length = nonsilent_region(x, cutoff, self.window_length, ref, self.reset_interval)
        return np.array(begin, np.int32), np.array(length, np.int32)

    def run_batch(self, inputs, args, params, stream):
        """GPU (DALI has one since 1.16): the whole batch in four launches; outputs are
        int32 scalars on the GPU."""
        from ..kernels.audio import contiguous, nonsilent_region_batch

        s = contiguous(inputs[0])
        n = len(s)
        if n:
            self._check_input(s.shapes.shape[1], s.dtype)
        vals = {k: list(v) for k, v in args.items()}
        refs, factors = [], []
        for i in range(n):
            cutoff, ref = self._sample_args({k: v[i] for k, v in vals.items()})
            refs.append(-1.0 if ref is None else ref)
            factors.append(np.float32(10) ** (np.float32(cutoff) * np.float32(0.1)))
        lengths = s.shapes[:, 0] if n else np.zeros(0, np.int64)
        windows = np.maximum(np.minimum(self.window_length, lengths), 1)
        return nonsilent_region_batch(s, windows, refs, factors, stream=stream)
