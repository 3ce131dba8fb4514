"""``fn.nonsilent_region`` against loops written here: DALI's moving-mean-square kernel sample
by sample (float32 running sums, restarts, the order of its additions), and plain float64
windows where rounding cannot matter."""

from __future__ import annotations

import numpy as np
import pytest
from audio_data import run, speech_like

from dlpipe import Pipeline, fn
from dlpipe.errors import ArgumentError


def ref_mms(x, window, reset=8192):
    """DALI's CPU kernel, one sample at a time: per sample the mean square of the window that
    ends there (cut at 0), a float32 running sum restarted every ``reset`` samples for float
    input (int64, never restarted, for integers of up to 16 bits; float32, never restarted,
    for wider integers), each step first removing the square that left, then adding the new."""
    n, w = len(x), min(window, len(x))
    exact = x.dtype.kind in "iu" and x.dtype.itemsize <= 2
    if exact:
        sq = [int(v) * int(v) for v in x]
        zero = 0
    else:
        xf = x.astype(np.float32)
        sq = [np.float32(v * v) for v in xf]
        zero = np.float32(0)
    every = n if reset == -1 or x.dtype.kind != "f" else reset
    mean = np.float32(1.0 / w)
    out = np.empty(n, np.float32)
    p = 0
    while p < n:
        s = zero
        for q in range(max(p - w + 1, 0), p + 1):
            s = s + sq[q]
        out[p] = np.float32(s) * mean
        end = min(n, p + every)
        while p + 1 < end:
            p += 1
            if p - w >= 0:
                s = s - sq[p - w]
            s = s + sq[p]
            out[p] = np.float32(s) * mean
        p += 1
    return out


def ref_region(x, cutoff_db=-60.0, window=2048, reference=None, reset=8192):
    x = np.asarray(x)
    w = min(window, len(x))
    power = ref_mms(x, window, reset)
    ref = power.max() if reference is None else np.float32(reference)
    loud = np.flatnonzero(
        power >= ref * np.float32(10) ** (np.float32(cutoff_db) * np.float32(0.1))
    )
    if loud.size == 0:
        return 0, 0
    begin = max(int(loud[0]) - w + 1, 0)
    return begin, int(loud[-1]) - begin + 1


def float64_region(x, cutoff_db, window):
    """The region of exact window powers (windows that start at each sample)."""
    x = np.asarray(x, np.float64)
    w = min(window, len(x))
    power = np.array([np.mean(x[i : i + w] ** 2) for i in range(len(x) - w + 1)])
    loud = np.flatnonzero(power >= power.max() * 10 ** (cutoff_db / 10))
    return int(loud[0]), int(loud[-1] - loud[0] + w)


def test_silence_at_both_ends():
    xs = [
        speech_like(3000, 16000, 1, silence=2000).astype(np.float32),
        np.concatenate([np.zeros(500), speech_like(1000, 8000, 2), np.zeros(3000)]).astype(
            np.float32
        ),
        (speech_like(2500, 16000, 3, silence=700) * 30000).astype(np.int16),
    ]
    for kw in (dict(window_length=256), dict(window_length=128, cutoff_db=-20.0)):
        (begin, length), _ = run(lambda a, kw=kw: fn.nonsilent_region(a, **kw), xs)
        for x, b, n in zip(xs, begin, length, strict=True):
            assert b.dtype == np.int32 and b.shape == () and n.shape == ()
            assert (int(b), int(n)) == ref_region(
                x, kw.get("cutoff_db", -60.0), kw["window_length"]
            )
    # the default window (2048) is longer than the 2000-sample silence: the region starts at 0
    (begin, length), _ = run(lambda a: fn.nonsilent_region(a), xs[:1])
    assert (int(begin[0]), int(length[0])) == ref_region(xs[0]) == (0, 7000)


def test_reference_power_and_per_sample_cutoff():
    x = speech_like(2000, 16000, 4, silence=1000).astype(np.float32)
    x[1000:1200] *= 0.001  # a quiet start of the sound
    cut = [np.float32(-30.0), np.float32(-80.0)]
    (begin, length), _ = run(
        lambda a, c: fn.nonsilent_region(a, cutoff_db=c, window_length=64), [x, x], arg=cut
    )
    for c, b, n in zip(cut, begin, length, strict=True):
        assert (int(b), int(n)) == ref_region(x, float(c), 64)
    assert int(begin[0]) > int(begin[1])
    (begin, length), _ = run(
        lambda a: fn.nonsilent_region(a, window_length=64, reference_power=0.01, cutoff_db=-10), [x]
    )
    assert (int(begin[0]), int(length[0])) == ref_region(x, -10, 64, reference=0.01)


def test_all_silent_and_short():
    zeros = np.zeros(300, np.float32)
    (begin, length), _ = run(lambda a: fn.nonsilent_region(a, reference_power=1.0), [zeros])
    assert (int(begin[0]), int(length[0])) == (0, 0)
    short = np.array([0, 0.5, 0], np.float32)  # shorter than the window: one window of 3
    (begin, length), _ = run(lambda a: fn.nonsilent_region(a), [short])
    assert (int(begin[0]), int(length[0])) == (0, 3)


def test_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(3, np.float32)])
        with pytest.raises(ArgumentError, match="reference_power=-1"):
            fn.nonsilent_region(x, reference_power=-1)
    with pytest.raises(Exception, match="reset_interval=1000"):
        run(
            lambda a: fn.nonsilent_region(a, window_length=300, reset_interval=1000),
            [np.ones(900, np.float32)],
        )
    with pytest.raises(Exception, match="1-D"):
        run(lambda a: fn.nonsilent_region(a), [np.ones((10, 2), np.float32)])


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8, np.int32])
@pytest.mark.parametrize("window", [1, 7, 64, 500])
def test_moving_mean_square_is_dalis_kernel(dtype, window):
    """The vectorised running sums equal the kernel's loop value for value (float32 too: the
    rows of prefix sums are its running sums), whatever the restart interval; and they are
    the float64 window means up to the float32 running sum's drift."""
    from dlpipe.operators.nonsilent_region import moving_mean_square

    rng = np.random.default_rng(window)
    n = 1500
    if dtype == np.float32:
        x = (speech_like(n, 16000, 4) * rng.uniform(0.1, 3)).astype(np.float32)
        x[n // 2 :] *= np.float32(1e-3)  # loud, then quiet: the sum's drift shows
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -30000), min(info.max, 30000), n).astype(dtype)
    for reset in (-1, 8192, 4 * window, window):
        got = moving_mean_square(x, window, reset)
        assert got.dtype == np.float32 and got.shape == (n,)
        np.testing.assert_array_equal(got, ref_mms(x, window, reset))
    xd = x.astype(np.float64)
    want = np.array([np.sum(xd[max(p - window + 1, 0) : p + 1] ** 2) / window for p in range(n)])
    got = moving_mean_square(x, window, 8192)
    exact = np.dtype(dtype).itemsize <= 2  # int64 sums; the others drift with float32 sums
    tol = 0 if exact or window == 1 else 1e-5 * want.max()
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=tol)
    for cutoff in (-60.0, -20.0, -3.0):
        assert nonsilent(x, cutoff, window) == ref_region(x, cutoff, window)


def test_regions_are_dalis_where_float64_differs():
    """Loud noise, then noise right at -60 dB, 2048-sample windows, one restart interval: the
    region follows DALI's float32 sums, also where the exact powers end it elsewhere (after
    the loud samples leave the window, the running sum's rounding is of the threshold's
    size; speech over near-silence meets this at its trailing edge)."""
    differs = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        parts = (rng.normal(0, s, n) for s, n in ((1e-5, 500), (0.3, 4000), (3e-4, 3500)))
        x = np.concatenate(list(parts)).astype(np.float32)
        want = ref_region(x)
        assert nonsilent(x, -60.0, 2048) == want
        differs += want != float64_region(x, -60.0, 2048)
    assert differs  # the loop does not merely reproduce float64 windows


def nonsilent(x, cutoff, window, reset=8192):
    from dlpipe.operators.nonsilent_region import nonsilent_region

    return nonsilent_region(x, cutoff, window, None, reset)


@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 100, 1003])
@pytest.mark.parametrize("group", [2, 8])
def test_running_sum_is_the_serial_prefix_sum(n, group):
    """Grouped prefix sums: integers exactly numpy's cumsum, float64 to 1e-14 of the total."""
    from dlpipe.operators.nonsilent_region import running_sum

    rng = np.random.default_rng(n)
    ints = rng.integers(0, 2**30, n).astype(np.int64)
    np.testing.assert_array_equal(running_sum(ints.copy(), group), np.cumsum(ints))
    floats = rng.random(n) ** 4
    want = np.cumsum(floats.astype(np.longdouble)).astype(np.float64)
    got = running_sum(floats.copy(), group)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14 * want[-1])


def test_region_from_the_deciding_rows_is_every_rows(monkeypatch):
    """``float_region`` emulates only the intervals that decide the region (bounds from block
    sums and the running sum's drift), yet finds the first and last loud sample of the
    kernel's powers of every interval: speech-like bursts (some of one loudness, so that the
    largest power must be emulated exactly), given references, several windows and intervals."""
    from dlpipe.operators import _running_squares as rsq

    counts = {"rows": 0, "emulated": 0, "largest": 0}
    powers, largest = rsq.RunningSquares.powers, rsq._Rows.largest

    def counting_powers(self, rows=None):
        counts["emulated"] += self.rows if rows is None else len(rows)
        return powers(self, rows)

    def counting_largest(self, candidates):
        counts["largest"] += 1
        return largest(self, candidates)

    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(3000, 60000))
        x = rng.normal(0, 10 ** rng.uniform(-6, -3), n)
        for _ in range(int(rng.integers(1, 6))):
            a = int(rng.integers(0, n))
            b = min(n, a + int(rng.integers(500, 20000)))
            t = np.arange(b - a)
            loud = 0.3 if rng.random() < 0.5 else 10 ** rng.uniform(-3, 0)
            x[a:b] += loud * np.sin(t * rng.uniform(0.01, 0.3)) * np.sin(np.pi * t / (b - a))
        x = x.astype(np.float32)
        window = int(rng.choice([256, 512, 2048]))
        every = window * int(rng.choice([1, 2, 4]))
        cutoff = float(rng.choice([-60.0, -30.0, -80.0]))
        reference = None if trial % 3 else float(10 ** rng.uniform(-4, -1))
        rs = rsq.RunningSquares(x, window, every)
        mms = rs.powers().reshape(-1)[:n]
        ref = mms.max() if reference is None else np.float32(reference)
        loud = np.flatnonzero(mms >= ref * np.float32(10) ** (np.float32(cutoff) * np.float32(0.1)))
        want = (int(loud[0]), int(loud[-1])) if loud.size else None
        with monkeypatch.context() as m:
            m.setattr(rsq.RunningSquares, "powers", counting_powers)
            m.setattr(rsq._Rows, "largest", counting_largest)
            got = rsq.float_region(x, window, every, cutoff, reference)
        assert got == want, (trial, window, every, cutoff, reference)
        counts["rows"] += rs.rows
    assert counts["emulated"] < counts["rows"] / 2  # most rows were never emulated
    assert counts["largest"] > 0  # and the exact largest power was needed at times
