"""The speech operators on the GPU against the same operators on the CPU (random and generated
signals, variable lengths in a batch): values, dtypes, shapes, layouts."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def signals(lengths=(900, 1733, 2400, 640), seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        t = np.arange(n) / 16000
        x = 0.4 * np.sin(2 * np.pi * rng.uniform(100, 3000) * t) + rng.normal(0, 0.05, n)
        out.append(np.clip(x, -1, 1).astype(dtype))
    return out


def run_both(build, samples, layout=None, arg=None):
    """``build(node[, arg])`` on the GPU copy and on the CPU input: (gpu, cpu) TensorLists."""
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=0, seed=2)
    with pipe:
        x = fn.external_source(source=lambda: list(samples), layout=layout)
        extra = () if arg is None else (fn.external_source(source=lambda: list(arg)),)
        pipe.set_outputs(build(x.gpu(), *extra), build(x, *extra))
    g, c = pipe.run()
    pipe.close()
    return g, c


def check(g, c, atol=1e-5, rtol=1e-5, scale_by_max=False):
    assert g.layout() == c.layout()
    g = g.as_cpu()
    assert len(g) == len(c)
    for i in range(len(c)):
        a, b = g.at(i), c.at(i)
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        tol = atol * max(1.0, float(np.abs(b).max())) if scale_by_max else atol
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=rtol, atol=tol)


@pytest.mark.parametrize("border", ["zero", "clamp", "reflect"])
def test_preemphasis(border):
    xs = signals()
    g, c = run_both(lambda x: fn.preemphasis_filter(x, border=border), xs)
    check(g, c)
    i16 = [(x * 30000).astype(np.int16) for x in xs]
    coeffs = [np.float32(v) for v in (0.5, 0.0, 0.97, 0.9)]
    g, c = run_both(
        lambda x, k: fn.preemphasis_filter(x, preemph_coeff=k, dtype=types.INT16, border=border),
        i16,
        arg=coeffs,
    )
    check(g, c, atol=1, rtol=0)  # halves round to even on the GPU, away from zero on the CPU


@pytest.mark.parametrize(
    "kw",
    [
        dict(nfft=512, window_length=400, window_step=160),
        dict(nfft=256, window_length=256, window_step=100, layout="tf", power=1),
        dict(window_length=300, window_step=128, center_windows=False),
        dict(window_length=300, window_step=128, reflect_padding=False),
        dict(nfft=64, window_length=64, window_step=16, window_fn=list(np.hamming(64))),
    ],
)
def test_spectrogram(kw):
    g, c = run_both(lambda x: fn.spectrogram(x, **kw), signals())
    check(g, c, atol=1e-4, rtol=1e-3, scale_by_max=True)


def test_spectrogram_batches_of_varying_length_share_fft_plans(monkeypatch):
    """Batches of varying frame counts, small ones and ones of more than ``fft_chunk(512)``
    windows (run chunk by chunk): each equals the CPU's, and cuFFT plans are made per size
    (``kernels.audio.fft_rows``), not per batch."""
    from dlpipe.kernels import audio as kaudio

    monkeypatch.setattr(kaudio, "_PLANS", {})
    rng = np.random.default_rng(5)
    batches = [signals(rng.integers(4000, 5600, 4), seed=i) for i in range(16)]
    batches += [signals(rng.integers(400_000, 700_000, 4), seed=i) for i in range(3)]
    feed = iter(batches)
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=2)
    with pipe:
        x = fn.external_source(source=lambda: list(next(feed)))
        kw = dict(nfft=512, window_length=320, window_step=160)
        pipe.set_outputs(fn.spectrogram(x.gpu(), **kw), fn.spectrogram(x, **kw))
    totals = []
    for _ in batches:
        g, c = pipe.run()
        check(g, c, atol=1e-4, rtol=1e-3, scale_by_max=True)
        totals.append(sum(c.at(i).shape[1] for i in range(len(c))))
    pipe.close()
    assert min(totals[16:]) > 2 * kaudio.fft_chunk(512)  # chunked
    small = {kaudio.fft_rows(t, 512) for t in totals[:16]}
    assert len(set(totals[:16])) > len(small)  # the batches do need different row counts
    assert sorted(k[2] for k in kaudio._PLANS) == sorted({*small, kaudio.fft_chunk(512)})


@pytest.mark.parametrize(
    "kw,layout",
    [
        (dict(sample_rate=16000, nfilter=64), "ft"),
        (dict(sample_rate=16000, nfilter=40, normalize=False, mel_formula="htk"), "tf"),
        (dict(sample_rate=8000, nfilter=20, freq_low=100, freq_high=3000), None),
    ],
)
def test_mel_filter_bank(kw, layout):
    rng = np.random.default_rng(4)
    specs = [rng.random((257, t)).astype(np.float32) for t in (5, 17, 1, 40)]
    if layout == "tf":
        specs = [s.T.copy() for s in specs]
    g, c = run_both(lambda x: fn.mel_filter_bank(x, **kw), specs, layout=layout)
    check(g, c, atol=1e-5, rtol=1e-4, scale_by_max=True)


def test_to_decibels():
    rng = np.random.default_rng(5)
    xs = [rng.random((30, t)).astype(np.float32) * 7 for t in (3, 50, 11)] + [
        np.zeros((4, 4), np.float32)
    ]
    for kw in (dict(), dict(cutoff_db=-80), dict(multiplier=np.log(10), reference=1.0)):
        g, c = run_both(lambda x, kw=kw: fn.to_decibels(x, **kw), xs, layout="ft")
        check(g, c, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        dict(n_mfcc=13),
        dict(n_mfcc=20, dct_type=3, normalize=True, lifter=22.0),
        dict(n_mfcc=8, dct_type=1, axis=1),
        dict(n_mfcc=100, dct_type=4, normalize=True),
    ],
)
def test_mfcc(kw):
    rng = np.random.default_rng(6)
    xs = [rng.normal(size=(40, t)).astype(np.float32) for t in (7, 30, 2)]
    g, c = run_both(lambda x: fn.mfcc(x, **kw), xs, layout="ft")
    check(g, c, atol=1e-4, rtol=1e-4, scale_by_max=True)


@pytest.mark.parametrize(
    "kw,dtype",
    [
        (dict(scale=0.5), np.float32),
        (dict(in_rate=16000, out_rate=22050, quality=100), np.float32),
        (dict(out_length=1000, dtype=types.INT16), np.float32),
        (dict(scale=1.25, dtype=types.UINT8), np.float32),
        (dict(scale=0.75), np.int16),
        (dict(scale=0.75, dtype=types.FLOAT), np.uint8),
    ],
)
def test_audio_resample(kw, dtype):
    xs = signals()
    if dtype == np.int16:
        xs = [(x * 30000).astype(np.int16) for x in xs]
    elif dtype == np.uint8:
        xs = [((x + 1) * 127).astype(np.uint8) for x in xs]
    g, c = run_both(lambda x: fn.audio_resample(x, **kw), xs)
    out_int = np.dtype(c.at(0).dtype).kind in "iu"
    # the GPU's positions are the CPU's (float32 running sums per block of 256); only the order
    # of the sum over the taps and the CPU's per-phase window tables differ: a rounding flip
    # for integers, up to ~2.3e-6 for floats at quality=100 (H100, ninth session)
    check(g, c, atol=1 if out_int else 5e-6, rtol=0)


def test_audio_resample_channels_and_per_sample_scale():
    xs = [np.stack([x, -0.5 * x], 1) for x in signals((500, 800, 1200))]
    scales = [np.float32(v) for v in (0.5, 1.7, 1.0)]
    g, c = run_both(lambda x, s: fn.audio_resample(x, scale=s), xs, layout="TC", arg=scales)
    check(g, c, atol=2e-6, rtol=0)  # the CPU's positions: see test_audio_resample


def test_chain_like_jasper():
    """preemphasis -> spectrogram -> mel -> log, all on the GPU, against the CPU chain."""

    def chain(x):
        x = fn.preemphasis_filter(x, preemph_coeff=0.97)
        s = fn.spectrogram(x, nfft=512, window_length=320, window_step=160)
        m = fn.mel_filter_bank(s, sample_rate=16000, nfilter=64, normalize=True)
        return fn.to_decibels(m, multiplier=np.log(10), reference=1.0, cutoff_db=np.log(1e-20))

    g, c = run_both(chain, signals((16000, 9000, 12345)))
    check(g, c, atol=2e-3, rtol=1e-4)


def run_both_multi(build, samples, arg=None):
    """Like ``run_both`` for operators with several outputs: (gpu outputs, cpu outputs)."""
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=0, seed=2)
    with pipe:
        x = fn.external_source(source=lambda: list(samples))
        extra = () if arg is None else (fn.external_source(source=lambda: list(arg)),)
        g, c = build(x.gpu(), *extra), build(x, *extra)
        pipe.set_outputs(*g, *c)
    out = pipe.run()
    pipe.close()
    return out[: len(g)], out[len(g) :]


def float64_sums_region(x, window, cutoff_db=-60.0):
    """The GPU kernel's region: float64 running sums of float64 squares, each window's sum
    rounded to float32 and scaled by float32(1 / W), the windows that start at each sample.
    (The CPU follows DALI's CPU kernel, float32 running sums, so the two may end a region a
    sample apart where a window is within rounding of the threshold, as DALI's GPU and CPU
    operators may.)"""
    w = min(window, x.size)
    cs = np.cumsum(np.square(x.astype(np.float64)))
    sums = cs[w - 1 :] - np.concatenate([[0.0], cs[:-w]])
    mms = sums.astype(np.float32) * np.float32(1.0 / w)
    thr = mms.max() * np.float32(10) ** (np.float32(cutoff_db) * np.float32(0.1))
    loud = np.flatnonzero(mms >= thr)
    if loud.size == 0:
        return [0, 0]
    return [int(loud[0]), int(loud[-1] - loud[0] + w)]


def test_nonsilent_region():
    rng = np.random.default_rng(7)
    xs = []
    for n, lead, tail in ((3000, 700, 900), (5000, 0, 2500), (800, 300, 300), (400, 400, 0)):
        x = np.zeros(n, np.float32)
        x[lead : n - tail] = rng.normal(0, 0.3, n - lead - tail)
        xs.append(x)
    i16 = [(x * 20000).astype(np.int16) for x in xs]
    refs = [np.float32(v) for v in (1e5, 1e6, 1e4, 1e7)]
    cases = [
        (lambda x: fn.nonsilent_region(x, window_length=256), xs, None, (256, -60.0)),
        (
            lambda x: fn.nonsilent_region(x, window_length=64, cutoff_db=-20.0),
            xs,
            None,
            (64, -20.0),
        ),
        (
            lambda x, r: fn.nonsilent_region(x, window_length=128, reference_power=r),
            i16,
            refs,
            None,
        ),
    ]
    for build, data, arg, float_ref in cases:
        gs, cs = run_both_multi(build, data, arg)
        got = [[int(v.at(i)) for v in (gs[0].as_cpu(), gs[1].as_cpu())] for i in range(4)]
        assert gs[0].as_cpu().at(0).dtype == np.int32 and gs[0].as_cpu().at(0).shape == ()
        if float_ref is None:  # int16: exact int64 sums on both
            assert got == [[int(cs[0].at(i)), int(cs[1].at(i))] for i in range(4)]
        else:
            assert got == [float64_sums_region(x, *float_ref) for x in data]
