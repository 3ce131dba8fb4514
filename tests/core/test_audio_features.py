"""The speech feature chain on the CPU: preemphasis_filter, spectrogram, mel_filter_bank,
to_decibels, mfcc, each against a numpy/scipy reference written here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from audio_data import run, speech_like, tone

from dlpipe import Pipeline, fn, ops, types
from dlpipe.errors import ArgumentError
from dlpipe.operators.mel_filter_bank import SparseFilters, mel_weights


def signals(lengths=(1000, 1733, 2400), seed=0):
    return [speech_like(n, 16000, seed + i).astype(np.float32) for i, n in enumerate(lengths)]


# --- preemphasis ------------------------------------------------------------------------------


def ref_preemph(x, coeff, border):
    x = np.asarray(x, np.float64).reshape(-1)
    prev = {"zero": 0.0, "clamp": x[0], "reflect": x[1]}[border]
    return np.concatenate([[x[0] - coeff * prev], x[1:] - coeff * x[:-1]])


@pytest.mark.parametrize("border", ["zero", "clamp", "reflect"])
def test_preemphasis_borders(border):
    xs = signals()
    out, _ = run(lambda x: fn.preemphasis_filter(x, preemph_coeff=0.9, border=border), xs)
    for x, y in zip(xs, out, strict=True):
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, ref_preemph(x, 0.9, border), rtol=0, atol=1e-6)


def test_preemphasis_default_and_per_sample_coeff():
    xs = signals()
    coeffs = [np.float32(0.5), np.float32(0.0), np.float32(0.97)]
    out, _ = run(lambda x, c: fn.preemphasis_filter(x, preemph_coeff=c), xs, arg=coeffs)
    for x, c, y in zip(xs, coeffs, out, strict=True):
        np.testing.assert_allclose(y, ref_preemph(x, float(c), "clamp"), rtol=0, atol=1e-6)
    (y,), _ = run(lambda x: fn.preemphasis_filter(x), xs[:1])
    np.testing.assert_allclose(y, ref_preemph(xs[0], 0.97, "clamp"), rtol=0, atol=1e-6)


def test_preemphasis_int16_in_and_out():
    x = (speech_like(500, 8000, 3) * 20000).astype(np.int16)
    (y,), _ = run(lambda a: fn.preemphasis_filter(a, dtype=types.INT16, border="zero"), [x])
    ref = ref_preemph(x, 0.97, "zero")
    assert y.dtype == np.int16
    np.testing.assert_array_equal(
        y, np.clip(np.sign(ref) * np.floor(np.abs(ref) + 0.5), -32768, 32767)
    )
    (f,), _ = run(lambda a: fn.preemphasis_filter(a), [x])
    np.testing.assert_allclose(f, ref_preemph(x, 0.97, "clamp"), rtol=1e-6, atol=1e-3)


def test_preemphasis_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(3, np.float32)])
        with pytest.raises(ArgumentError, match="border='edge'"):
            fn.preemphasis_filter(x, border="edge")


# --- spectrogram ------------------------------------------------------------------------------


def dali_hann(n):
    return 0.5 * (1 - np.cos(2 * np.pi * (np.arange(n) + 0.5) / n))


def ref_spectrogram(x, nfft, wl, step, window=None, center=True, reflect=True, power=2):
    x = np.asarray(x, np.float64)
    window = dali_hann(wl) if window is None else np.asarray(window, np.float64)
    if center:
        pad = wl // 2
        xp = np.pad(x, (pad, wl), mode="reflect" if reflect else "constant")
        nwin = len(x) // step + 1
    else:
        xp = x
        nwin = (len(x) - wl) // step + 1
    cols = []
    for w in range(nwin):
        frame = np.zeros(nfft)
        frame[:wl] = xp[w * step : w * step + wl] * window
        spec = np.fft.rfft(frame)
        cols.append(np.abs(spec) ** 2 if power == 2 else np.abs(spec))
    return np.array(cols).T  # (freq, time)


def test_spectrogram_defaults_centered_reflect():
    xs = signals()
    out, layout = run(lambda x: fn.spectrogram(x, nfft=512, window_length=400, window_step=160), xs)
    assert layout == "ft"
    for x, y in zip(xs, out, strict=True):
        want = ref_spectrogram(x, 512, 400, 160)
        assert y.dtype == np.float32 and y.shape == (257, len(x) // 160 + 1)
        np.testing.assert_allclose(y, want, rtol=2e-4, atol=1e-4 * want.max())


@pytest.mark.parametrize(
    "kw",
    [
        dict(power=1, layout="tf"),
        dict(center_windows=False),
        dict(reflect_padding=False),
        dict(window_fn=list(np.hamming(256))),
        dict(nfft=None),
    ],
)
def test_spectrogram_options(kw):
    xs = signals((900, 1500))
    args = {"nfft": 300, "window_length": 256, "window_step": 100, **kw}
    out, layout = run(lambda x: fn.spectrogram(x, **args), xs)
    nfft = args["nfft"] or 256
    for x, y in zip(xs, out, strict=True):
        want = ref_spectrogram(
            x,
            nfft,
            256,
            100,
            window=kw.get("window_fn"),
            center=kw.get("center_windows", True),
            reflect=kw.get("reflect_padding", True),
            power=kw.get("power", 2),
        )
        if kw.get("layout") == "tf":
            want = want.T
        assert y.shape == want.shape and layout == kw.get("layout", "ft")
        np.testing.assert_allclose(y, want, rtol=2e-4, atol=1e-4 * want.max())


def test_spectrogram_short_signal_reflects_repeatedly_and_accepts_2d():
    x = np.array([0.5, -0.25, 1.0], np.float32)
    (y,), _ = run(lambda a: fn.spectrogram(a, nfft=8, window_length=8, window_step=4), [x[:, None]])
    idx = np.abs(np.arange(-4, 4)) % 4
    idx = np.where(idx >= 3, 4 - idx, idx)  # mirrored as often as needed: ..0 1 2 1 0 1 2..
    frame = x[idx] * dali_hann(8)
    np.testing.assert_allclose(y[:, 0], np.abs(np.fft.rfft(frame)) ** 2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [5, 6, 7, 9, 12, 13])
def test_spectrogram_mirrored_edges_near_the_window(length):
    """Signals from just longer than half a window: the edges mirrored by slicing (once) or
    by index (more than once) as the float64 reference."""
    x = speech_like(length, 16000, length).astype(np.float32)
    (y,), _ = run(lambda a: fn.spectrogram(a, nfft=16, window_length=10, window_step=3), [x])
    want = ref_spectrogram(x, 16, 10, 3)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=2e-4, atol=1e-5 * want.max())


@pytest.mark.parametrize("scipy_fft", [True, False])
def test_rfft_rows_with_and_without_scipy(monkeypatch, scipy_fft):
    from dlpipe._audio import fft as _fft

    if scipy_fft:
        pytest.importorskip("scipy")
    else:
        monkeypatch.setattr(_fft, "_SCIPY_FFT", False)
    frames = np.random.default_rng(3).standard_normal((37, 512)).astype(np.float32)
    want = np.fft.rfft(frames.astype(np.float64), axis=1)
    got = _fft.rfft_rows(frames.copy())
    assert got.dtype == np.complex64 and got.shape == (37, 257)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


def test_spectrogram_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(100, np.float32)])
        with pytest.raises(ArgumentError, match="nfft=256"):
            fn.spectrogram(x, nfft=256, window_length=512)
        with pytest.raises(ArgumentError, match="power=3"):
            fn.spectrogram(x, power=3)
        with pytest.raises(ArgumentError, match="layout='tt'"):
            fn.spectrogram(x, layout="tt")
        with pytest.raises(ArgumentError, match="window_fn has 3 values"):
            fn.spectrogram(x, window_length=4, window_fn=[1, 2, 3])
        fn.spectrogram(x, window_length=128, center_windows=False)
    with pytest.raises(Exception, match="too short"):
        run(
            lambda a: fn.spectrogram(a, window_length=128, center_windows=False),
            [np.zeros(100, np.float32)],
        )


# --- mel filter bank --------------------------------------------------------------------------


def slaney_hz_to_mel(f):
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    return np.where(f >= 1000, 15.0 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27), lin)


def slaney_mel_to_hz(m):
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000 * np.exp(np.log(6.4) / 27 * (m - 15.0)), m * 200.0 / 3)


def ref_mel_filters(nfilter, nfft, sr, fmin, fmax, normalize=True, htk=False):
    """librosa's ``filters.mel`` written out (triangles between evenly spaced mel points),
    restricted to the bins in [fmin, fmax] as DALI does."""
    if htk:
        to_mel = lambda f: 2595 * np.log10(1 + np.asarray(f) / 700)  # noqa: E731
        to_hz = lambda m: 700 * (10 ** (np.asarray(m) / 2595) - 1)  # noqa: E731
    else:
        to_mel, to_hz = slaney_hz_to_mel, slaney_mel_to_hz
    freqs = np.arange(nfft // 2 + 1) * sr / nfft
    pts = to_hz(np.linspace(to_mel(fmin), to_mel(fmax), nfilter + 2))
    w = np.zeros((nfilter, len(freqs)))
    for m in range(nfilter):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        w[m] = np.maximum(0, np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)))
        if normalize:
            w[m] *= 2 / (hi - lo)
    w[:, (freqs < fmin) | (freqs > fmax)] = 0
    return w


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(normalize=False),
        dict(mel_formula="htk"),
        dict(freq_low=300.0, freq_high=5000.0, nfilter=20),
    ],
)
def test_mel_filter_bank_against_librosa_formulas(kw):
    rng = np.random.default_rng(1)
    specs = [rng.random((257, t)).astype(np.float32) for t in (5, 9)]
    args = {"sample_rate": 16000, "nfilter": 40, **kw}
    out, layout = run(lambda s: fn.mel_filter_bank(s, **args), specs, layout="ft")
    w = ref_mel_filters(
        args["nfilter"],
        512,
        16000,
        kw.get("freq_low", 0.0),
        kw.get("freq_high", 8000.0),
        kw.get("normalize", True),
        kw.get("mel_formula") == "htk",
    )
    assert layout == "ft"
    for s, y in zip(specs, out, strict=True):
        want = w @ s
        assert y.dtype == np.float32 and y.shape == (args["nfilter"], s.shape[1])
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_mel_filter_bank_layouts():
    rng = np.random.default_rng(2)
    spec = rng.random((129, 7)).astype(np.float32)
    w = ref_mel_filters(16, 256, 8000, 0, 4000)
    (tf,), layout = run(
        lambda s: fn.mel_filter_bank(s, nfilter=16, sample_rate=8000), [spec.T.copy()], layout="tf"
    )
    assert layout == "tf" and tf.shape == (7, 16)
    np.testing.assert_allclose(tf, (w @ spec).T, rtol=1e-4, atol=1e-5)
    (nolayout,), _ = run(lambda s: fn.mel_filter_bank(s, nfilter=16, sample_rate=8000), [spec])
    np.testing.assert_allclose(nolayout, w @ spec, rtol=1e-4, atol=1e-5)
    (one,), _ = run(
        lambda s: fn.mel_filter_bank(s, nfilter=16, sample_rate=8000), [spec[:, 0].copy()]
    )
    np.testing.assert_allclose(one, w @ spec[:, 0], rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="'f' axis"):
        run(lambda s: fn.mel_filter_bank(s, nfilter=16), [spec], layout="ab")


def test_mel_filter_bank_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros((5, 5), np.float32)])
        with pytest.raises(ArgumentError, match="mel_formula='bark'"):
            fn.mel_filter_bank(x, mel_formula="bark")
        with pytest.raises(ArgumentError, match="freq_high=100"):
            fn.mel_filter_bank(x, freq_low=200, freq_high=100)
        with pytest.raises(ArgumentError, match="nfilter=0"):
            fn.mel_filter_bank(x, nfilter=0)


@pytest.mark.parametrize(
    "nfilter,nbins,sr,low,norm,formula",
    [
        (64, 257, 16000.0, 0.0, True, "slaney"),
        (128, 513, 44100.0, 300.0, False, "htk"),
        (40, 9, 8000.0, 0.0, True, "slaney"),
        (3, 129, 16000.0, 100.0, True, "htk"),
    ],
)
def test_mel_sparse_filters_are_the_dense_product(nfilter, nbins, sr, low, norm, formula):
    """The per-filter sums equal the dense filter product (float64) on 1-D, 2-D, 3-D input,
    empty filters (more filters than bins) included."""
    w = mel_weights(nfilter, nbins, sr, low, sr / 2, norm, formula)
    sparse = SparseFilters(w)
    rng = np.random.default_rng(3)
    for shape in [(nbins,), (nbins, 31), (nbins, 2, 7)]:
        x = rng.random(shape).astype(np.float32)
        got = sparse.apply(x)
        want = np.tensordot(w.astype(np.float64), x.astype(np.float64), axes=([1], [0]))
        assert got.dtype == np.float32 and got.shape == (nfilter, *shape[1:])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    tf = rng.random((31, nbins)).astype(np.float32).T  # a "tf" spectrogram seen as (f, t)
    np.testing.assert_allclose(sparse.apply(tf), w.astype(np.float64) @ tf, rtol=1e-5, atol=1e-6)


def test_mel_sparse_filters_refuse_overlapping_rows():
    w = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]], np.float32)  # rows 0 and 2 overlap
    with pytest.raises(ValueError, match="overlap"):
        SparseFilters(w)


# --- to_decibels ------------------------------------------------------------------------------


def test_to_decibels():
    rng = np.random.default_rng(3)
    xs = [rng.random((8, 6)).astype(np.float32) * 5, np.zeros((4, 2), np.float32)]
    xs[0][0, 0] = 0
    out, layout = run(lambda x: fn.to_decibels(x, cutoff_db=-80), xs, layout="ft")
    assert layout == "ft"
    for x, y in zip(xs, out, strict=True):
        ref = x.max() if x.max() > 0 else 1.0
        want = 10 * np.log10(np.maximum(1e-8, x / ref))
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    out, _ = run(lambda x: fn.to_decibels(x, multiplier=20.0, reference=2.0), xs[:1])
    want = 20 * np.log10(np.maximum(1e-10, xs[0] / 2.0))
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-3)
    # Jasper's natural log: multiplier ln(10), reference 1
    out, _ = run(
        lambda x: fn.to_decibels(x, multiplier=np.log(10), reference=1.0, cutoff_db=np.log(1e-20)),
        xs[:1],
    )
    np.testing.assert_allclose(out[0], np.log(np.maximum(xs[0], 1e-20)), rtol=1e-5, atol=1e-4)


def test_to_decibels_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros(3, np.float32)])
        with pytest.raises(ArgumentError, match="reference=0"):
            fn.to_decibels(x, reference=0)


# --- mfcc -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dct_type,normalize",
    [(1, False), (2, False), (2, True), (3, False), (3, True), (4, False), (4, True)],
)
def test_mfcc_dct_types(dct_type, normalize):
    scipy_fft = pytest.importorskip("scipy.fft")
    rng = np.random.default_rng(dct_type)
    xs = [rng.normal(size=(24, t)).astype(np.float32) for t in (3, 10)]
    out, layout = run(
        lambda x: fn.mfcc(x, n_mfcc=13, dct_type=dct_type, normalize=normalize), xs, layout="ft"
    )
    assert layout == "ft"
    for x, y in zip(xs, out, strict=True):
        if normalize:
            want = scipy_fft.dct(x.astype(np.float64), type=dct_type, axis=0, norm="ortho")
        else:
            want = scipy_fft.dct(x.astype(np.float64), type=dct_type, axis=0) / 2
        assert y.dtype == np.float32 and y.shape == (13, x.shape[1])
        np.testing.assert_allclose(y, want[:13], rtol=1e-4, atol=1e-4)


def test_mfcc_axis_lifter_and_clamped_n():
    scipy_fft = pytest.importorskip("scipy.fft")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(6, 10)).astype(np.float32)
    (y,), _ = run(lambda a: fn.mfcc(a, axis=1, n_mfcc=4, lifter=22.0), [x])
    want = scipy_fft.dct(x.astype(np.float64), type=2, axis=1)[:, :4] / 2
    want *= 1 + 11 * np.sin(np.pi * np.arange(1, 5) / 22)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    (z,), _ = run(lambda a: fn.mfcc(a, n_mfcc=50), [x])
    assert z.shape == (6, 10)  # n_mfcc clamped to the axis' extent


def test_mfcc_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros((4, 4), np.float32)])
        with pytest.raises(ArgumentError, match="dct_type=5"):
            fn.mfcc(x, dct_type=5)
        with pytest.raises(ArgumentError, match="dct_type=1"):
            fn.mfcc(x, dct_type=1, normalize=True)
    with pytest.raises(Exception, match="dimensions"):
        run(lambda a: fn.mfcc(a), [np.zeros(5, np.float32)])


def test_chain_through_ops_api():
    x = tone(3200, 16000, 440).astype(np.float32)
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        a = fn.external_source(source=lambda: [x])
        s = ops.Spectrogram(nfft=512, window_length=400, window_step=160)(
            ops.PreemphasisFilter()(a)
        )
        m = ops.MelFilterBank(sample_rate=16000, nfilter=64)(s)
        c = ops.MFCC(n_mfcc=13)(ops.ToDecibels()(m))
        pipe.set_outputs(c)
    (c,) = pipe.run()
    assert c.at(0).shape == (13, 21) and c.layout() == "ft"


@pytest.mark.parametrize("centered", [True, False])
def test_spectrogram_batch_window_counts(centered):
    """The GPU operator's window counts of a whole batch (array arithmetic) equal the
    per-sample ones, and a batch with a too short or not 1-D sample raises their errors."""
    from dlpipe.operators.spectrogram import Spectrogram, signal_1d

    op = Spectrogram(window_length=40, window_step=7, center_windows=centered)
    rng = np.random.default_rng(0)
    for _ in range(200):
        ndim = int(rng.integers(1, 4))
        shapes = np.ones((int(rng.integers(1, 6)), ndim), np.int64)
        shapes[:, int(rng.integers(ndim))] = rng.integers(
            0 if rng.integers(4) else 41, 400, len(shapes)
        )
        if rng.integers(6) == 0 and ndim > 1:
            shapes[0] = 3  # not a 1-D signal
        try:
            want = [
                op.nwindows(signal_1d(np.empty(s, np.bool_), op.schema).size)
                for s in shapes.tolist()
            ]
        except ArgumentError as e:
            with pytest.raises(ArgumentError, match=re.escape(str(e))):
                op._batch_nwindows(shapes)
            continue
        got = op._batch_nwindows(shapes)
        assert got.dtype == np.int64 and got.tolist() == want
