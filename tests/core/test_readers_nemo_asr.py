"""``fn.readers.nemo_asr``: manifests, offsets/durations, filters, outputs, resampling, the
shared sharding (against readers.file), checkpoints, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from audio_data import ref_resample, speech_like, to_pcm, write_wav

from conftest import check_checkpoint_resumes, file_reader_ids
from dlpipe import Pipeline, fn, ops, types
from dlpipe.errors import ArgumentError, DataNotFoundError


@pytest.fixture(autouse=True)
def _read_in_process(monkeypatch):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")  # the file reader of the sharding check


def write_manifest(path, entries):
    with open(path, "w") as f:
        for e in entries:
            f.write((e if isinstance(e, str) else json.dumps(e)) + "\n")
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    """Three WAVs (16 kHz stereo, 8 kHz mono, 22.05 kHz mono) and their PCM."""
    specs = [("a.wav", 3000, 16000, 2), ("b.wav", 1000, 8000, 1), ("c.wav", 2205, 22050, 1)]
    pcm = {}
    for name, n, rate, ch in specs:
        x = np.stack([speech_like(n, rate, len(pcm) + c) for c in range(ch)], 1)
        pcm[name] = (to_pcm(x * 0.7, 16), rate)
        write_wav(str(tmp_path / name), pcm[name][0], rate)
    return tmp_path, pcm


def reader_pipe(batch_size=3, seed=3, checkpoint=None, **kw):
    pipe = Pipeline(
        batch_size=batch_size,
        num_threads=2,
        device_id=None,
        seed=seed,
        enable_checkpointing=checkpoint is not False,
        checkpoint=checkpoint or None,
    )
    with pipe:
        out = fn.readers.nemo_asr(name="Reader", **kw)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe


def floats(pcm):
    return (pcm / 32768).astype(np.float32)


def test_outputs_offsets_and_durations(corpus):
    root, pcm = corpus
    manifest = write_manifest(
        root / "m.json",
        [
            {"audio_filepath": str(root / "a.wav"), "duration": 0.1, "text": "first one"},
            {"audio_filepath": str(root / "b.wav"), "offset": 0.05, "duration": 0.02},
            {"audio_filepath": str(root / "c.wav"), "offset": 0.09, "text": "héllo"},
        ],
    )
    pipe = reader_pipe(manifest_filepaths=[manifest], read_idxs=True, checkpoint=False)
    audio, rate, text, idx = pipe.run()
    a, r = pcm["a.wav"]
    f = floats(a)
    mono = f[:, 0] * np.float32(0.5) + f[:, 1] * np.float32(0.5)
    np.testing.assert_array_equal(audio.at(0), mono[:1600])  # duration 0.1 s of 0.1875 s
    np.testing.assert_array_equal(audio.at(1), floats(pcm["b.wav"][0])[400:560, 0])
    np.testing.assert_array_equal(audio.at(2), floats(pcm["c.wav"][0])[1984:, 0])  # 0.09 * 22050
    assert [float(rate.at(i)) for i in range(3)] == [16000, 8000, 22050]
    assert rate.at(0).dtype == np.float32 and rate.at(0).shape == ()
    assert bytes(text.at(0)) == b"first one" and text.at(0).dtype == np.uint8
    assert bytes(text.at(1)) == b"" and bytes(text.at(2)).decode() == "héllo"
    assert [idx.at(i).tolist() for i in range(3)] == [[0], [1], [2]]
    assert idx.at(0).dtype == np.int64


def test_filters_invalid_lines_and_indices_per_manifest(corpus):
    root, _ = corpus
    a, b = str(root / "a.wav"), str(root / "b.wav")
    m1 = write_manifest(
        root / "m1.json",
        [
            {"audio_filepath": a, "duration": 0.5},
            "not json",
            {"duration": 1.0, "text": "no path"},
            {"audio_filepath": b, "duration": 3.0},  # too long
            {"audio_filepath": b},  # no duration: -1, dropped by min_duration
            {"audio_filepath": b, "duration": 0.1},
        ],
    )
    m2 = write_manifest(root / "m2.json", [{"audio_filepath": a, "duration": 0.2}])
    with pytest.warns(UserWarning, match="Skipping"):
        pipe = reader_pipe(
            batch_size=3,
            manifest_filepaths=[m1, m2],
            min_duration=0.05,
            max_duration=2.0,
            read_sample_rate=False,
            read_text=False,
            read_idxs=True,
            checkpoint=False,
        )
    audio, idx = pipe.run()
    assert pipe.reader_meta("Reader")["epoch_size"] == 3
    assert [idx.at(i).tolist() for i in range(3)] == [[0], [1], [0]]
    # 0.5 s and 0.2 s of a 0.1875 s file: all of it
    assert [audio.at(i).shape for i in range(3)] == [(3000,), (800,), (3000,)]


def test_durations_none_means_no_bound(corpus):
    """NeMo's DALI dataset passes ``max_duration=None`` / ``min_duration=None`` (its config's
    ``.get()`` default): None is "not given", as in DALI, so nothing is filtered."""
    root, _ = corpus
    a, b = str(root / "a.wav"), str(root / "b.wav")
    m = write_manifest(
        root / "m.json",
        [{"audio_filepath": a, "duration": 30.0}, {"audio_filepath": b, "duration": 0.01}],
    )
    pipe = reader_pipe(
        batch_size=2,
        manifest_filepaths=m,
        min_duration=None,
        max_duration=None,
        read_sample_rate=False,
        read_text=False,
        read_idxs=True,
        checkpoint=False,
    )
    _, idx = pipe.run()
    assert pipe.reader_meta("Reader")["epoch_size"] == 2
    assert [idx.at(i).tolist() for i in range(2)] == [[0], [1]]


def test_resampling_dtype_and_no_downmix(corpus):
    root, pcm = corpus
    manifest = write_manifest(
        root / "m.json",
        [{"audio_filepath": str(root / "a.wav")}, {"audio_filepath": str(root / "b.wav")}],
    )
    pipe = reader_pipe(
        batch_size=2,
        manifest_filepaths=manifest,
        sample_rate=11025,
        read_text=False,
        checkpoint=False,
    )
    audio, rate = pipe.run()
    for i, name in enumerate(("a.wav", "b.wav")):
        p, r = pcm[name]
        f = floats(p)
        mono = f[:, 0] * np.float32(0.5) + f[:, 1] * np.float32(0.5) if f.shape[1] == 2 else f[:, 0]
        np.testing.assert_allclose(audio.at(i), ref_resample(mono, r, 11025, 16), atol=2e-5)
        assert float(rate.at(i)) == r  # DALI reports the file's rate
    pipe = reader_pipe(
        batch_size=2,
        manifest_filepaths=manifest,
        dtype=types.INT16,
        downmix=False,
        read_sample_rate=False,
        read_text=False,
        checkpoint=False,
    )
    (audio,) = pipe.run()
    np.testing.assert_array_equal(audio.at(0), pcm["a.wav"][0])
    np.testing.assert_array_equal(audio.at(1), pcm["b.wav"][0])


@pytest.fixture
def numbered(tmp_path_factory):
    """A manifest of N tiny WAVs: the index output numbers them like conftest's make_files."""

    def make(n):
        root = tmp_path_factory.mktemp("nemo")
        entries = []
        for i in range(n):
            path = write_wav(str(root / f"f{i:05d}.wav"), np.full(4, i, np.int16), 8000)
            entries.append({"audio_filepath": path, "duration": 0.0005, "text": str(i)})
        return write_manifest(root / "numbered.json", entries)

    return make


def ids(pipe, batches):
    out = []
    for _ in range(batches):
        idx = pipe.run()[-1]
        out += [int(idx.at(i)[0]) for i in range(len(idx))]
    return out


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4),
        dict(shard_id=0, num_shards=2, shuffle_after_epoch=True),
    ],
)
def test_sharding_matches_the_file_reader(numbered, make_files, kw):
    pipe = reader_pipe(
        manifest_filepaths=numbered(13), read_idxs=True, read_text=False, checkpoint=False, **kw
    )
    want, meta = file_reader_ids(make_files, 13, 3, 9, **kw)
    assert ids(pipe, 9) == want
    assert pipe.reader_meta("Reader") == meta


@pytest.mark.parametrize("stop", [2, 5])
def test_checkpoint_resumes(numbered, stop):
    manifest = numbered(11)

    def make(checkpoint=None):
        return reader_pipe(
            manifest_filepaths=manifest,
            read_idxs=True,
            random_shuffle=True,
            initial_fill=5,
            num_shards=2,
            shard_id=1,
            pad_last_batch=True,
            seed=17,
            checkpoint=checkpoint,
        )

    check_checkpoint_resumes(make, stop, 10)


def test_legacy_spelling_and_none_shards(numbered):
    manifest = numbered(4)
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        audio, text = ops.NemoAsrReader(
            manifest_filepaths=manifest.split(","),
            read_sample_rate=False,
            shard_id=None,
            num_shards=None,
        )()
        pipe.set_outputs(audio, text)
    audio, text = pipe.run()
    assert audio.at(1).tolist() == [1 / 32768] * 4 and bytes(text.at(1)) == b"1"


def test_errors(tmp_path, numbered):
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        with pytest.raises(ArgumentError, match="manifest_filepaths"):
            fn.readers.nemo_asr(manifest_filepaths=[])
        with pytest.raises(DataNotFoundError, match="nope.json"):
            fn.readers.nemo_asr(manifest_filepaths=[str(tmp_path / "nope.json")])
        empty = write_manifest(tmp_path / "empty.json", [])
        with pytest.raises(DataNotFoundError, match="no files"):
            fn.readers.nemo_asr(manifest_filepaths=[empty])
        with pytest.raises(ArgumentError, match="dtype"):
            fn.readers.nemo_asr(manifest_filepaths=[numbered(2)], dtype=types.UINT8)
        with pytest.raises(ArgumentError, match="quality"):
            fn.readers.nemo_asr(manifest_filepaths=[numbered(2)], quality=-1)
    missing = write_manifest(tmp_path / "m.json", [{"audio_filepath": str(tmp_path / "x.wav")}])
    pipe = reader_pipe(batch_size=1, manifest_filepaths=missing, checkpoint=False)
    with pytest.raises(DataNotFoundError, match="x.wav"):
        pipe.run()
