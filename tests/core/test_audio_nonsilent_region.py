"""``fn.nonsilent_region`` against a loop over windows written here."""

from __future__ import annotations

import numpy as np
import pytest
from audio_data import run, speech_like

from dlpipe import Pipeline, fn
from dlpipe.errors import ArgumentError


def ref_region(x, cutoff_db=-60.0, window=2048, reference=None):
    x = np.asarray(x, np.float64)
    w = min(window, len(x))
    power = np.array([np.mean(x[i : i + w] ** 2) for i in range(len(x) - w + 1)])
    ref = power.max() if reference is None else reference
    loud = np.flatnonzero(power >= ref * 10 ** (cutoff_db / 10))
    if loud.size == 0:
        return 0, 0
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
def test_moving_mean_square_against_float64_windows(dtype, window):
    """The differenced running sum against each window's float64 mean (int16 exactly)."""
    from dlpipe.operators.nonsilent_region import moving_mean_square

    rng = np.random.default_rng(window)
    if dtype == np.float32:
        x = speech_like(500, 16000, 4).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -30000), min(info.max, 30000), 500).astype(dtype)
    got = moving_mean_square(x, window)
    xd = x.astype(np.float64)
    want = np.array([np.mean(xd[i : i + window] ** 2) for i in range(500 - window + 1)])
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-12)
    for cutoff in (-60.0, -20.0, -3.0):
        got_region = nonsilent(x, cutoff, window)
        assert got_region == ref_region(x, cutoff, window)


def nonsilent(x, cutoff, window):
    from dlpipe.operators.nonsilent_region import nonsilent_region

    return nonsilent_region(x, cutoff, window, None)


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
