"""``fn.decoders.audio``: WAV (8/16/24/32-bit PCM, float), FLAC and OGG, dtype conversions,
downmix, resampling to a (per-sample) rate, the soundfile-less WAV fallback, errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
from audio_data import (
    make_dataset,
    ref_resample,
    soundfile,
    speech_like,
    to_pcm,
    tone,
    write_sf,
    write_wav,
)

from dlpipe import Pipeline, fn, ops, types
from dlpipe._audio import io as _audio_io
from dlpipe.errors import ArgumentError, DlpipeError, MissingExtraError

needs_sf = pytest.mark.skipif(soundfile is None, reason="soundfile (libsndfile) not installed")


@pytest.fixture(autouse=True)
def _read_in_process(monkeypatch):
    """Small files: reading them in this process is faster than starting the read process."""
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")


def decode(paths, batch_size=None, **kw):
    """Run readers.file + decoders.audio once over ``paths``: (audio list, rate list)."""
    batch_size = batch_size or len(paths)
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=1)
    with pipe:
        enc, _ = fn.readers.file(files=list(paths))
        audio, rate = fn.decoders.audio(enc, **kw)
        pipe.set_outputs(audio, rate)
    a, r = pipe.run()
    pipe.close()
    return [a.at(i) for i in range(len(a))], [r.at(i) for i in range(len(r))]


@pytest.fixture(params=["soundfile", "fallback"])
def backend(request, monkeypatch):
    """Decode through libsndfile, and again through the WAV parser of ``_audio_io``."""
    if request.param == "soundfile":
        if soundfile is None:
            pytest.skip("soundfile (libsndfile) not installed")
    else:
        monkeypatch.setattr(_audio_io, "_SOUNDFILE", False)
    return request.param


def test_pcm16_stereo_dtypes(tmp_path, backend):
    x = np.stack([tone(999, 16000), speech_like(999, 16000, 3)], 1)
    pcm = to_pcm(x, 16)
    path = write_wav(str(tmp_path / "a.wav"), pcm, 16000)
    (f,), (rate,) = decode([path])
    assert f.dtype == np.float32 and f.shape == (999, 2)
    np.testing.assert_array_equal(f, (pcm / 32768).astype(np.float32))
    assert rate.dtype == np.float32 and rate.shape == () and rate == 16000
    (i16,), _ = decode([path], dtype=types.INT16)
    assert i16.dtype == np.int16
    np.testing.assert_array_equal(i16, pcm)
    (i32,), _ = decode([path], dtype=types.INT32)
    assert i32.dtype == np.int32
    np.testing.assert_array_equal(i32, pcm.astype(np.int64) << 16)


@pytest.mark.parametrize("bits", [8, 24, 32])
def test_pcm_widths_to_float(tmp_path, backend, bits):
    x = speech_like(500, 8000, bits)
    pcm = to_pcm(x, bits)
    path = write_wav(str(tmp_path / "a.wav"), pcm, 8000, bits=bits)
    (f,), _ = decode([path])
    zero = 128 if bits == 8 else 0
    np.testing.assert_allclose(f[:, 0], (pcm - zero) / 2.0 ** (bits - 1), rtol=0, atol=1e-7)
    (i16,), _ = decode([path], dtype=types.INT16)
    want = (pcm - zero) << 8 if bits == 8 else (pcm - zero) >> (bits - 16)
    np.testing.assert_array_equal(i16[:, 0], want)


def test_float_wav(tmp_path, backend):
    x = speech_like(700, 22050, 5).astype(np.float32)
    path = write_wav(str(tmp_path / "f.wav"), x, 22050, fmt="float")
    (f,), (rate,) = decode([path])
    np.testing.assert_array_equal(f[:, 0], x)
    assert rate == 22050
    # libsndfile's default reads float data as integers unscaled (rounded), 0.5 -> 0
    (i16,), _ = decode([path], dtype=types.INT16)
    np.testing.assert_array_equal(i16[:, 0], np.rint(x).astype(np.int16))


def test_downmix_and_mono_shapes(tmp_path, backend):
    x = np.stack([tone(640, 16000), speech_like(640, 16000, 1), tone(640, 16000, 50)], 1)
    pcm = to_pcm(x * 0.9, 16)
    stereo = write_wav(str(tmp_path / "s.wav"), pcm, 16000)
    mono = write_wav(str(tmp_path / "m.wav"), pcm[:, 0], 16000)
    (s, m), _ = decode([stereo, mono], downmix=True)
    w = np.float32(1 / 3)
    f = (pcm / 32768).astype(np.float32)
    want = f[:, 0] * w + f[:, 1] * w + f[:, 2] * w
    assert s.shape == (640,) and m.shape == (640,)
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(m, f[:, 0])
    (s16, m16), _ = decode([stereo, mono], downmix=True, dtype=types.INT16)
    r = want.astype(np.float64) * np.float32(32767)
    np.testing.assert_array_equal(
        s16, np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), -32768, 32767)
    )
    np.testing.assert_array_equal(m16, pcm[:, 0])  # one channel: straight from the file
    (s2, m2), _ = decode([stereo, mono])
    assert s2.shape == (640, 3) and m2.shape == (640, 1)


@needs_sf
@pytest.mark.parametrize("bits", [8, 16, 24])
def test_integer_pcm_wav_parsed_as_libsndfile_reads_it(tmp_path, bits):
    """8/16/24-bit PCM WAV is parsed without libsndfile even when it is installed: the same
    samples as libsndfile's, every dtype, from bytes and from a path; other WAVs (32-bit,
    float) still open through libsndfile."""
    x = np.stack([speech_like(777, 16000, bits), tone(777, 16000)], 1)
    path = write_wav(str(tmp_path / "a.wav"), to_pcm(x, bits), 16000, bits=bits)
    with open(path, "rb") as fh:
        raw = np.frombuffer(fh.read(), np.uint8)
    for data in (path, raw):
        f = _audio_io.open_audio(data)
        assert f._sf is None and (f.frames, f.channels, f.sample_rate) == (777, 2, 16000)
        for dtype in ("float32", "int16", "int32"):
            want = soundfile.read(path, dtype=dtype, always_2d=True)[0]
            got = f.read(np.dtype(dtype))
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(
            f.read(np.float32, 100, 50), soundfile.read(path, 50, 100, dtype="float32")[0]
        )
    for bits, fmt in ((32, "pcm"), (32, "float")):
        wav = speech_like(300, 8000, 1).astype(np.float32)
        pcm = wav if fmt == "float" else to_pcm(wav, bits)
        other = write_wav(str(tmp_path / f"{fmt}.wav"), pcm, 8000, bits=bits, fmt=fmt)
        assert _audio_io.open_audio(other)._sf is not None


@needs_sf
def test_flac_and_ogg(tmp_path):
    x = speech_like(4000, 16000, 2)
    flac = write_sf(str(tmp_path / "a.flac"), to_pcm(x, 16).astype(np.int16), 16000, "FLAC")
    ogg = write_sf(str(tmp_path / "b.ogg"), x, 16000, "OGG")
    (fl, og), (r1, r2) = decode([flac, ogg], downmix=True)
    np.testing.assert_array_equal(fl, (to_pcm(x, 16) / 32768).astype(np.float32))
    assert og.shape == (4000,) and r1 == 16000 and r2 == 16000
    # Vorbis is lossy: the same waveform to within its coding noise
    assert np.corrcoef(og, x)[0, 1] > 0.99


def test_fallback_rejects_flac_naming_the_extra(tmp_path, monkeypatch):
    path = str(tmp_path / "a.flac")
    with open(path, "wb") as f:
        f.write(b"fLaC" + b"\0" * 60)
    monkeypatch.setattr(_audio_io, "_SOUNDFILE", False)
    with pytest.raises(MissingExtraError, match=r"dlpipe\[audio\]"):
        decode([path])


def test_resample_matches_reference(tmp_path, backend):
    x = speech_like(1500, 16000, 7)
    pcm = to_pcm(x, 16)
    path = write_wav(str(tmp_path / "a.wav"), pcm, 16000)
    f = pcm / 32768.0
    for rate, quality, lobes in ((11025, 50, 16), (24000, 0, 3), (8000, 100, 64)):
        (out,), (r,) = decode([path], downmix=True, sample_rate=rate, quality=quality)
        want = ref_resample(f, 16000, rate, lobes)
        assert out.dtype == np.float32 and out.shape == (int(np.ceil(1500 * rate / 16000)),)
        assert r == rate
        np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)


def test_resample_sanity_against_scipy(tmp_path):
    scipy_signal = pytest.importorskip("scipy.signal")
    x = tone(4000, 16000, 200, 0.5)
    path = write_wav(str(tmp_path / "a.wav"), x.astype(np.float32), 16000, fmt="float")
    (out,), _ = decode([path], downmix=True, sample_rate=8000)
    ref = scipy_signal.resample_poly(x, 1, 2)
    # away from the ends, both are the same low tone
    np.testing.assert_allclose(out[100:-100], ref[100:-100], atol=2e-3)


def test_resample_multichannel_int16(tmp_path):
    x = np.stack([speech_like(900, 16000, 1), tone(900, 16000, 100)], 1)
    pcm = to_pcm(x, 16)
    path = write_wav(str(tmp_path / "a.wav"), pcm, 16000)
    (out,), _ = decode([path], sample_rate=12000, dtype=types.INT16)
    assert out.shape == (675, 2) and out.dtype == np.int16
    for c in range(2):
        want = ref_resample(pcm[:, c] / 32768, 16000, 12000, 16) * 32767
        np.testing.assert_allclose(out[:, c], np.round(want), atol=1)


def test_same_rate_is_not_resampled(tmp_path):
    pcm = to_pcm(speech_like(300, 16000, 4), 16)
    path = write_wav(str(tmp_path / "a.wav"), pcm, 16000)
    (out,), (r,) = decode([path], sample_rate=16000.0, dtype=types.INT16)
    np.testing.assert_array_equal(out[:, 0], pcm)
    assert r == 16000


def test_per_sample_rate_argument_input(tmp_path):
    paths = make_dataset(str(tmp_path), [("a.wav", 0.2, 16000, 1, 1), ("b.wav", 0.3, 8000, 2, 2)])
    pipe = Pipeline(batch_size=2, num_threads=2, device_id=None, seed=3)
    with pipe:
        enc, _ = fn.readers.file(files=paths)
        rate = fn.random.uniform(values=[6000.0, 11025.0, 22050.0])
        audio, out_rate = fn.decoders.audio(enc, sample_rate=rate, downmix=True)
        pipe.set_outputs(audio, out_rate, rate)
    for _ in range(3):
        audio, out_rate, rate = pipe.run()
        for i, n_in, sr in ((0, 6400, 16000), (1, 4000, 8000)):  # 0.1 s silence each end
            r = float(rate.at(i))
            assert float(out_rate.at(i)) == r
            assert audio.at(i).shape == (int(np.ceil(n_in * r / sr)),)


def test_legacy_and_ops_spellings(tmp_path):
    path = write_wav(str(tmp_path / "a.wav"), to_pcm(tone(100, 8000), 16), 8000)
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        enc, _ = ops.FileReader(files=[path])()
        a, r = ops.AudioDecoder(downmix=True)(enc)
        b, _ = ops.decoders.Audio(dtype=types.INT16)(enc)
        pipe.set_outputs(a, r, b)
    a, r, b = pipe.run()
    assert a.at(0).shape == (100,) and b.at(0).shape == (100, 1) and float(r.at(0)) == 8000


def test_argument_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        enc = fn.external_source(source=lambda: [np.zeros(4, np.uint8)])
        with pytest.raises(ArgumentError, match="dtype"):
            fn.decoders.audio(enc, dtype=types.UINT8)
        with pytest.raises(ArgumentError, match="quality=150"):
            fn.decoders.audio(enc, sample_rate=8000, quality=150)
        with pytest.raises(ArgumentError, match="sample_rate=0"):
            fn.decoders.audio(enc, sample_rate=0)


def test_corrupt_file_names_the_file(tmp_path):
    path = str(tmp_path / "bad.wav")
    with open(path, "wb") as f:
        f.write(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk")
    with pytest.raises(DlpipeError, match="bad.wav"):
        decode([path])


def test_file_reader_default_filters_list_audio(tmp_path):
    os.makedirs(tmp_path / "speaker")
    for name in ("a.wav", "b.flac", "c.ogg", "d.txt", "E.WAV"):
        (tmp_path / "speaker" / name).write_bytes(b"x")
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        data, _ = fn.readers.file(file_root=str(tmp_path), name="Reader")
        pipe.set_outputs(data)
    assert pipe.reader_meta("Reader")["epoch_size"] == 4
