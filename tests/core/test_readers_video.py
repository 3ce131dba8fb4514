"""fn.readers.video on the CPU (PyAV): sequences, order, stride/step, labels, file_list ranges,
sharding, padding, metadata and errors, on tiny videos the tests encode themselves.

Every synthetic frame encodes its index (a flat grey on the left half) and each video has its
own flat colour on the right half, so frame order and the source file can be checked through
lossy compression.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

pytest.importorskip("av")

from conftest import batch_values, check_checkpoint_resumes  # noqa: E402
from dlpipe import (  # noqa: E402
    ArgumentError,
    DataNotFoundError,
    DecodeError,
    MissingExtraError,
    Pipeline,
    fn,
    ops,
    types,
)
from dlpipe.readers._video_gpu import plan_units  # noqa: E402
from dlpipe.readers._video_synth import frame_index_of, index_level, write_video  # noqa: E402

COLORS = [(200, 50, 100), (20, 220, 40), (60, 60, 240)]
LENGTHS = [40, 33, 30]


@pytest.fixture(autouse=True)
def _free_pyav_objects():
    """Free each test's pipelines (and their PyAV containers) before the next test: freed later
    by the garbage collector in a forked child (another module's DataLoader workers), FFmpeg
    would wait there on threads the fork did not copy."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Three videos: 40 frames (gop 8, MP4), 33 frames (gop 10, MP4), 30 frames (HEVC, MKV)."""
    root = tmp_path_factory.mktemp("videos")
    os.makedirs(root / "a")
    os.makedirs(root / "b")
    paths = [
        write_video(str(root / "a" / "v0.mp4"), LENGTHS[0], gop=8, color=COLORS[0]),
        write_video(str(root / "b" / "v1.mp4"), LENGTHS[1], gop=10, color=COLORS[1]),
        write_video(str(root / "b" / "v2.mkv"), LENGTHS[2], codec="libx265", color=COLORS[2]),
    ]
    return str(root), paths


def _pipe(batch=4, threads=2, seed=3, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=threads, seed=seed)
    with pipe:
        outs = fn.readers.video(name="Reader", **kw)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return pipe


def _frames(seq: np.ndarray) -> list[int]:
    return [frame_index_of(f) for f in seq]


def _color(seq: np.ndarray) -> int:
    """Which video (by its right-half colour) a sequence came from."""
    right = seq[:, :, seq.shape[2] // 2 + 2 :].reshape(-1, 3).astype(np.float32).mean(0)
    return int(np.argmin([np.abs(right - c).sum() for c in COLORS]))


def _collect(pipe, iters, first_video=0, check_color=True):
    """(file, first frame, frames) of every sample of ``iters`` batches (frame_num output)."""
    got = []
    for _ in range(iters):
        video, label, frame_num = pipe.run()[:3]
        for i in range(len(video)):
            seq = video.at(i)
            got.append((int(label.at(i)[0]), int(frame_num.at(i)[0]), _frames(seq)))
            assert not check_color or _color(seq) == first_video + int(label.at(i)[0])
    return got


def test_sequences_cover_every_video_in_order(videos):
    _, paths = videos
    pipe = _pipe(filenames=paths, labels=[], sequence_length=4, enable_frame_num=True)
    n = sum(length // 4 for length in LENGTHS)  # step = sequence_length: 10 + 8 + 7
    assert pipe.reader_meta("Reader")["epoch_size"] == n == 25
    got = _collect(pipe, 7)[:n]
    want = [
        (f, s, list(range(s, s + 4)))
        for f, length in enumerate(LENGTHS)
        for s in range(0, length - 3, 4)
    ]
    assert got == want
    video = pipe.run()[0]
    assert video.layout() == "FHWC"
    assert video.at(0).shape == (4, 48, 64, 3) and video.at(0).dtype == np.uint8


def test_stride_and_step(videos):
    _, paths = videos
    pipe = _pipe(
        batch=3,
        filenames=paths[:1],
        labels=[],
        sequence_length=3,
        stride=4,
        step=5,
        enable_frame_num=True,
    )
    # span = (3-1)*4 + 1 = 9: starts 0, 5, ... while s + 9 <= 40 -> 0..30
    starts = list(range(0, 32, 5))
    assert pipe.reader_meta("Reader")["epoch_size"] == len(starts)
    got = _collect(pipe, 3)[: len(starts)]
    assert got == [(0, s, [s, s + 4, s + 8]) for s in starts]


def test_single_frame_sequences_read_every_frame_after_random_seeks(videos):
    _, paths = videos
    pipe = _pipe(
        batch=33,
        filenames=paths[1:2],
        labels=[],
        sequence_length=1,
        random_shuffle=True,
        enable_frame_num=True,
    )
    got = _collect(pipe, 1, first_video=1)
    assert sorted(g[1] for g in got) == list(range(33))  # one epoch: a permutation
    assert [g[1] for g in got] != list(range(33))
    assert all(g[2] == [g[1]] for g in got)


def test_pixels_match_the_encoded_frames(videos):
    _, paths = videos
    (video,) = _pipe(batch=2, filenames=paths[:1], sequence_length=5).run()
    seq = video.at(1).astype(np.int32)
    for k in range(5):
        assert np.abs(seq[k, :, :30] - index_level(5 + k)).max() <= 3
        assert np.abs(seq[k, :, 34:] - np.array(COLORS[0])).max() <= 6


def test_labels_variants(videos):
    root, paths = videos
    # labels=None with filenames: no label output
    (video,) = _pipe(filenames=paths[:2], sequence_length=8).run()
    assert len(video) == 4
    video, label = _pipe(filenames=paths[:2], labels=[7, 9], sequence_length=8).run()
    assert [int(label.at(i)[0]) for i in range(4)] == [7, 7, 7, 7]
    assert label.at(0).dtype == np.int32 and label.at(0).shape == (1,)
    # file_root: sorted subdirectories are the classes (a -> 0, b -> 1)
    pipe = _pipe(batch=10, file_root=root, sequence_length=10, enable_frame_num=True)
    got = _collect(pipe, 1, check_color=False)
    assert [(g[0], g[1]) for g in got][:10] == [
        (0, 0),
        (0, 10),
        (0, 20),
        (0, 30),
        (1, 0),
        (1, 10),
        (1, 20),
        (1, 0),
        (1, 10),
        (1, 20),
    ]


def test_file_list_frames_and_seconds(videos, tmp_path):
    root, _ = videos
    lst = tmp_path / "list.txt"
    lst.write_text(
        f"{root}/a/v0.mp4 0 10 20\n"  # frames 10..19
        f"{root}/b/v1.mp4 1 -9\n"  # the last 9 frames: 24..32
        f"{root}/b/v2.mkv 2 0 -20\n"  # frames 0..9
    )
    pipe = _pipe(
        batch=8,
        file_list=str(lst),
        file_list_frame_num=True,
        sequence_length=3,
        step=3,
        enable_frame_num=True,
    )
    assert pipe.reader_meta("Reader")["epoch_size"] == 3 + 3 + 3
    got = [(g[0], g[1]) for g in _collect(pipe, 2)[:9]]
    assert got == [(0, 10), (0, 13), (0, 16), (1, 24), (1, 27), (1, 30), (2, 0), (2, 3), (2, 6)]
    # seconds (30 fps): [0.5 s, 1.0 s) -> frames 15..29; a missing end is the end of the video
    rel = tmp_path / "sub"
    rel.mkdir()
    os.symlink(f"{root}/a/v0.mp4", rel / "v.mp4")
    (rel / "list.txt").write_text("v.mp4 4 0.5 1.0\nv.mp4 5 1.1\n")
    pipe = _pipe(batch=4, file_list=str(rel / "list.txt"), sequence_length=5, enable_frame_num=True)
    assert pipe.reader_meta("Reader")["epoch_size"] == 3 + 1
    video, label, frame_num = pipe.run()
    assert [int(frame_num.at(i)[0]) for i in range(4)] == [15, 20, 25, 33]
    assert [int(label.at(i)[0]) for i in range(4)] == [4, 4, 4, 5]


def test_frame_num_timestamps_and_pad_sequences(videos):
    _, paths = videos
    pipe = _pipe(
        batch=4,
        filenames=paths[2:],
        sequence_length=8,
        step=8,
        pad_sequences=True,
        enable_frame_num=True,
        enable_timestamps=True,
    )
    assert pipe.reader_meta("Reader")["epoch_size"] == 4  # starts 0, 8, 16, 24 (30 frames)
    video, frame_num, ts = pipe.run()
    assert [int(frame_num.at(i)[0]) for i in range(4)] == [0, 8, 16, 24]
    np.testing.assert_allclose(ts.at(1), np.arange(8, 16) / 30, atol=1e-3)  # MKV: ms
    assert ts.at(1).dtype == np.float32
    last = video.at(3)
    assert _frames(last[:6]) == list(range(24, 30))
    assert not last[6:].any()  # padded frames are zero
    np.testing.assert_allclose(ts.at(3)[6:], [-1, -1])


def test_dtype_normalized_and_ycbcr(videos):
    _, paths = videos
    (u8,) = _pipe(batch=1, filenames=paths[:1], sequence_length=2).run()
    (f32,) = _pipe(batch=1, filenames=paths[:1], sequence_length=2, dtype=types.FLOAT).run()
    (nrm,) = _pipe(batch=1, filenames=paths[:1], sequence_length=2, normalized=True).run()
    assert f32.at(0).dtype == np.float32 and nrm.at(0).dtype == np.float32
    np.testing.assert_array_equal(f32.at(0), u8.at(0).astype(np.float32))
    np.testing.assert_allclose(nrm.at(0), u8.at(0) / 255.0, atol=1e-6)
    (ycc,) = _pipe(batch=1, filenames=paths[:1], sequence_length=2, image_type=types.YCbCr).run()
    y = ycc.at(0)[1, :, :30, 0].astype(np.float32)
    # limited-range luma of grey level 4 (frame 1); chroma neutral on the grey half
    assert abs(y.mean() - (16 + index_level(1) * 219 / 255)) < 2
    assert np.abs(ycc.at(0)[1, :, :28, 1:].astype(int) - 128).max() <= 3


@pytest.mark.parametrize("pad", [False, True])
def test_sharding_partitions_the_sequences(videos, pad):
    _, paths = videos
    seen = []
    for shard in range(3):
        pipe = _pipe(
            batch=3,
            filenames=paths,
            labels=[],
            sequence_length=4,
            num_shards=3,
            shard_id=shard,
            pad_last_batch=pad,
            enable_frame_num=True,
        )
        meta = pipe.reader_meta("Reader")
        assert meta["epoch_size"] == 25 and meta["number_of_shards"] == 3
        assert meta["epoch_size_padded"] == (27 if pad else 25)
        size = 25 * (shard + 1) // 3 - 25 * shard // 3  # 8, 8, 9
        got = [(g[0], g[1]) for g in _collect(pipe, 3)]
        seen += got[:size]
        if pad and size < 9:
            assert got[size] == got[size - 1]  # the last sequence repeats to fill the shard
    assert sorted(seen) == sorted(
        (f, s) for f, length in enumerate(LENGTHS) for s in range(0, length - 3, 4)
    )


def test_shuffle_is_seeded_and_checkpoints_resume(videos):
    _, paths = videos

    def make(checkpoint=None, seed=3):
        pipe = Pipeline(
            batch_size=3,
            num_threads=2,
            seed=seed,
            enable_checkpointing=True,
            checkpoint=checkpoint,
        )
        with pipe:
            _, label, frame_num = fn.readers.video(
                filenames=paths,
                labels=[],
                sequence_length=4,
                random_shuffle=True,
                initial_fill=8,
                enable_frame_num=True,
                name="Reader",
            )
            pipe.set_outputs(label, frame_num)
        return pipe

    run = make()
    first = [batch_values(run.run()) for _ in range(9)]
    assert [batch_values(b) for b in [make().run()]] == first[:1]
    assert [batch_values(make(seed=4).run()) for _ in range(3)] != first[:3]
    samples = [
        (lab[0], num[0]) for labels, nums in first for lab, num in zip(labels, nums, strict=True)
    ]
    everything = [(f, s) for f, length in enumerate(LENGTHS) for s in range(0, length - 3, 4)]
    assert sorted(samples[:25]) == everything  # an epoch is a permutation of the sequences
    assert samples[:25] != everything
    check_checkpoint_resumes(make, stop=4, total=9)


def test_plan_units_groups_sequences_that_decode_on(videos):
    _, paths = videos
    pipe = _pipe(filenames=paths, sequence_length=4, step=4)
    pipe.build()
    reader = pipe._readers["Reader"]
    # sequences 0..9 are v0 (gop 8: keyframes 0, 8, 16, ...), 10..17 are v1
    units = plan_units(reader, [0, 1, 2, 10, 11], num_decoders=1)
    # 0 -> 1 continues (frames 0..3 then 4..7, no keyframe between); 2 starts at the
    # keyframe 8 <= 7 + 1: still on; a new file starts a new unit
    assert [[i for i, _ in u] for u in units] == [[0, 1, 2], [3, 4]]
    assert units[0][2][1].tolist() == [8, 9, 10, 11]
    # capped so a batch of 5 spreads over 3 decoders (at most 2 sequences a unit)
    units = plan_units(reader, [0, 1, 2, 3, 4], num_decoders=3)
    assert [[i for i, _ in u] for u in units] == [[0, 1], [2, 3], [4]]
    # going backwards always starts a new unit
    units = plan_units(reader, [3, 1], num_decoders=1)
    assert len(units) == 2


def _vfr_video(path):
    import av

    with av.open(path, "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for i, pts in enumerate([0, 1, 2, 5, 6, 9, 10, 11]):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), i * 20, np.uint8), "rgb24")
            frame.pts = pts
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_data_errors_name_the_file(videos, tmp_path):
    _, paths = videos
    missing = str(tmp_path / "nope.mp4")
    with pytest.raises(DataNotFoundError, match="nope.mp4"):
        _pipe(filenames=[paths[0], missing], sequence_length=2)
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(os.urandom(3000))
    with pytest.raises(DecodeError, match="corrupt.mp4"):
        _pipe(filenames=[str(corrupt)], sequence_length=2)
    vfr = _vfr_video(str(tmp_path / "vfr.mp4"))
    with pytest.raises(DecodeError, match="vfr.mp4.*variable frame rate"):
        _pipe(filenames=[vfr], sequence_length=2)
    (video,) = _pipe(batch=2, filenames=[vfr], sequence_length=2, skip_vfr_check=True).run()
    assert video.at(0).shape == (2, 32, 32, 3)
    # removed after the reader indexed it: the run names it
    gone = tmp_path / "gone.mp4"
    gone.write_bytes(open(paths[0], "rb").read())
    pipe = _pipe(filenames=[str(gone)], sequence_length=2)
    pipe.build()
    os.remove(gone)
    with pytest.raises(DataNotFoundError, match="gone.mp4"):
        pipe.run()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "sequence_length is required"),
        ({"sequence_length": 0}, "sequence_length=0"),
        ({"sequence_length": 2, "stride": 0}, "stride=0"),
        ({"sequence_length": 2, "step": 0}, "step=0"),
        ({"sequence_length": 2, "channels": 1}, "channels=1"),
        ({"sequence_length": 2, "image_type": types.GRAY}, "image_type="),
        ({"sequence_length": 2, "dtype": types.INT32}, "dtype="),
        ({"sequence_length": 41}, "no sequence fits: sequence_length=41"),
        ({"sequence_length": 2, "num_shards": 30}, "num_shards=30"),
        ({"sequence_length": 2, "shard_id": 2, "num_shards": 2}, "shard_id=2"),
        ({"sequence_length": 2, "labels": [1, 2]}, "labels has 2 entries"),
    ],
)
def test_bad_arguments(videos, kwargs, message):
    _, paths = videos
    with pytest.raises(ArgumentError, match=message):
        _pipe(filenames=paths[:1], **kwargs)


def test_source_arguments_and_file_list_errors(videos, tmp_path):
    root, paths = videos
    with pytest.raises(ArgumentError, match="exactly one of"):
        _pipe(filenames=paths, file_root=root, sequence_length=2)
    with pytest.raises(ArgumentError, match="labels= needs filenames="):
        _pipe(file_root=root, labels=[0], sequence_length=2)
    with pytest.raises(DataNotFoundError, match="file_root="):
        _pipe(file_root=str(tmp_path / "none"), sequence_length=2)
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{paths[0]} x\n")
    with pytest.raises(ArgumentError, match="bad.txt:1"):
        _pipe(file_list=str(bad), sequence_length=2)
    empty_range = tmp_path / "empty.txt"
    empty_range.write_text(f"{paths[0]} 0 30 20\n")
    with pytest.raises(ArgumentError, match="empty.txt:1: start=30.0 end=20.0"):
        _pipe(file_list=str(empty_range), file_list_frame_num=True, sequence_length=2)


def test_missing_pyav_names_the_extra(videos, monkeypatch):
    _, paths = videos
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(MissingExtraError, match=r"dlpipe\[video\]"):
        _pipe(filenames=paths, sequence_length=2)


def test_gpu_without_pynvvideocodec_names_the_extra(videos):
    import importlib.util

    if importlib.util.find_spec("PyNvVideoCodec") is not None:
        pytest.skip("PyNvVideoCodec is installed")
    _, paths = videos
    with pytest.raises(MissingExtraError, match=r"dlpipe\[video-gpu\]"):
        _pipe(device="gpu", filenames=paths, sequence_length=2)


def test_legacy_ops_and_threads_agree(videos):
    _, paths = videos
    pipe = Pipeline(batch_size=5, num_threads=1, seed=2)
    with pipe:
        reader = ops.readers.Video(filenames=paths, sequence_length=6, random_shuffle=True, seed=9)
        pipe.set_outputs(reader())
    assert ops.VideoReader is not None
    one = [batch_values(pipe.run()) for _ in range(2)]
    pipe4 = Pipeline(batch_size=5, num_threads=4, seed=2)
    with pipe4:
        pipe4.set_outputs(
            fn.readers.video(filenames=paths, sequence_length=6, random_shuffle=True, seed=9)
        )
    assert [batch_values(pipe4.run()) for _ in range(2)] == one


# --- the GPU decode path, run on the host: numpy stands in for CuPy and a PyAV-backed fake
# for PyNvVideoCodec, so the batching, unit planning, frame mapping and output assembly of
# _video_gpu.py are checked without a GPU (tests/gpu/test_video_gpu.py runs the real thing).


class _Ctx:
    def __init__(self, *args, **kwargs):
        self.ptr = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_event(self, event):
        pass

    def record(self, stream=None):
        pass


def _fake_cupy():
    import types as pytypes

    cuda = pytypes.SimpleNamespace(
        Device=_Ctx,
        Stream=_Ctx,
        Event=_Ctx,
        runtime=pytypes.SimpleNamespace(getDevice=lambda: 0),
    )
    return pytypes.SimpleNamespace(
        cuda=cuda,
        zeros=np.zeros,
        empty=np.empty,
        uint8=np.uint8,
        float32=np.float32,
        from_dlpack=np.from_dlpack,
        asarray=np.asarray,
        repeat=np.repeat,
    )


def _fake_nvc(calls):
    import types as pytypes

    import av

    class SimpleDecoder:
        def __init__(self, path, output_color_type="RGB", **kwargs):
            self.fmt = "nv12" if output_color_type == "NATIVE" else "rgb24"
            self.reconfigure_decoder(path)
            calls.append(("new", os.path.basename(path)))

        def reconfigure_decoder(self, path):
            with av.open(path) as c:
                self.frames = [f.to_ndarray(format=self.fmt) for f in c.decode(video=0)]
            self.pos = 0
            calls.append(("open", os.path.basename(path)))

        def __len__(self):
            return len(self.frames)

        def get_batch_frames_by_index(self, indices):
            calls.append(("index", tuple(indices)))
            return [self.frames[i] for i in indices if i < len(self.frames)]

        def seek_to_index(self, i):
            self.pos = i

        def get_batch_frames(self, n):
            out = self.frames[self.pos : self.pos + n]
            self.pos += len(out)
            return out

    return pytypes.SimpleNamespace(
        SimpleDecoder=SimpleDecoder,
        OutputColorType=pytypes.SimpleNamespace(RGB="RGB", NATIVE="NATIVE"),
    )


@pytest.fixture
def fake_gpu(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", _fake_nvc(calls))
    return calls


def _reader(paths, **kw):
    pipe = _pipe(batch=1, filenames=paths, **kw)
    pipe.build()
    return pipe._readers["Reader"]


@pytest.mark.parametrize("mode", ["index", "seek"])
def test_gpu_batch_assembly_matches_cpu_decode(videos, fake_gpu, monkeypatch, mode):
    from dlpipe.readers._video_gpu import NvdecBatchDecoder

    monkeypatch.setenv("DLPIPE_NVDEC_MODE", mode)
    _, paths = videos
    kw = dict(
        labels=[],
        sequence_length=5,
        step=7,
        stride=2,
        pad_sequences=True,
        enable_frame_num=True,
        enable_timestamps=True,
        num_decoders=3,
    )
    reader = _reader(paths, **kw)
    seqs = [0, 1, 2, len(reader.seq_file) - 1, 6, 9]  # the last one is padded
    outs = NvdecBatchDecoder(reader).decode(seqs, stream=_Ctx())
    assert len(outs) == 4
    video, label, frame_num, ts = outs
    assert video.shape == (6, 5, 48, 64, 3) and video.dtype == np.uint8
    for i, seq in enumerate(seqs):
        want = reader.run_sample((), {}, seq)
        np.testing.assert_array_equal(video[i], want[0])
        np.testing.assert_array_equal(label[i], want[1])
        np.testing.assert_array_equal(frame_num[i], want[2])
        np.testing.assert_array_equal(ts[i], want[3])
    if mode == "index":
        # sequences 0 (frames 0..8) and 1 (7..15) of v0 decode in one pass: no keyframe between
        assert ("index", (0, 2, 4, 6, 7, 8, 9, 11, 13, 15)) in fake_gpu


def test_gpu_float_normalized_and_ycbcr(videos, fake_gpu):
    from dlpipe.readers._video_gpu import NvdecBatchDecoder

    _, paths = videos
    reader = _reader(paths[:1], sequence_length=3, normalized=True, num_decoders=2)
    (video,) = NvdecBatchDecoder(reader).decode([0, 3], stream=_Ctx())
    assert video.dtype == np.float32
    np.testing.assert_allclose(video[1], reader.run_sample((), {}, 3), atol=1e-6)
    reader = _reader(paths[:1], sequence_length=3, image_type=types.YCbCr)
    (video,) = NvdecBatchDecoder(reader).decode([2], stream=_Ctx())
    cpu = reader.run_sample((), {}, 2)
    # NV12 upsampled by repetition vs FFmpeg's yuv444p scaler: flat areas agree
    assert np.abs(video[0].astype(int) - cpu).mean() < 1.5


def test_gpu_reader_graph_is_a_cpu_reader_and_a_mixed_decoder(videos, fake_gpu):
    _, paths = videos
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        outs = fn.readers.video(
            device="gpu",
            filenames=paths,
            labels=[],
            sequence_length=4,
            enable_timestamps=True,
            name="Reader",
        )
    assert [o.device for o in outs] == ["gpu", "gpu", "gpu"]
    decode = outs[0].source
    assert decode.op.schema == "_video_decode_gpu" and decode.device == "mixed"
    reader = decode.inputs[0].source
    assert reader.op.schema == "readers.video" and reader.device == "cpu"
    assert [x.device for x in reader.outputs] == ["cpu"]
    assert reader.op.run_sample((), {}, 5).tolist() == [5]  # the sequence index travels
    assert reader.op.reader_meta()["epoch_size"] == 25


def test_gpu_decoders_stay_on_their_files(videos, fake_gpu):
    from dlpipe.readers._video_gpu import NvdecBatchDecoder

    _, paths = videos
    reader = _reader(paths[:2], sequence_length=4, num_decoders=2)
    dec = NvdecBatchDecoder(reader)
    dec.decode([0, 12], stream=_Ctx())  # v0 and v1: one session each
    opened = [c for c in fake_gpu if c[0] == "open"]
    dec.decode([13, 1], stream=_Ctx())  # the same files again: no session reopens a file
    dec.decode([2], stream=_Ctx())
    assert [c for c in fake_gpu if c[0] == "open"] == opened
