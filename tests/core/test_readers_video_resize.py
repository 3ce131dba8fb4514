"""``fn.readers.video_resize``: the video reader with every frame resized, on tiny videos encoded
here; checked against ``readers.video`` + ``resize``, against numpy resamplers written here, and
for the frame/sequence geometry the GPU resize uses."""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("av")

from conftest import batch_values, check_checkpoint_resumes  # noqa: E402
from dlpipe import ArgumentError, Pipeline, fn, ops, types  # noqa: E402
from dlpipe.readers._video_synth import write_video  # noqa: E402

H, W = 48, 64


@pytest.fixture(autouse=True)
def _free_pyav_objects():
    """Free each test's pipelines (and their PyAV containers) before the next test: freed later
    by the garbage collector in a forked child (another module's DataLoader workers), FFmpeg
    would wait there on threads the fork did not copy."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("vr")
    return [
        write_video(str(root / "a.mp4"), 14, gop=5, color=(200, 50, 100)),
        write_video(str(root / "b.mp4"), 10, gop=4, color=(20, 220, 40)),
    ]


def outputs_of(outs):
    return outs if isinstance(outs, tuple) else (outs,)


def resize_pipe(paths, batch=3, seed=5, checkpoint=None, checkpointing=False, **kw):
    pipe = Pipeline(
        batch_size=batch,
        num_threads=2,
        device_id=None,
        seed=seed,
        enable_checkpointing=checkpointing,
        checkpoint=checkpoint,
    )
    with pipe:
        pipe.set_outputs(*outputs_of(fn.readers.video_resize(filenames=paths, name="Reader", **kw)))
    return pipe


VIDEO_KW = dict(sequence_length=4, labels=[], enable_frame_num=True)


def video_then_resize(paths, batch=3, seed=5, resize_kw=None, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=None, seed=seed)
    with pipe:
        frames, *rest = outputs_of(fn.readers.video(filenames=paths, name="Reader", **kw))
        pipe.set_outputs(fn.resize(frames, **(resize_kw or {})), *rest)
    return pipe


def plain_frames(paths, batch, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=None, seed=5)
    with pipe:
        frames, *_ = outputs_of(fn.readers.video(filenames=paths, **kw))
        pipe.set_outputs(frames)
    return pipe.run()[0]


# --- values -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resize_kw",
    [
        dict(resize_x=40, resize_y=30),
        dict(resize_shorter=20, interp_type=types.INTERP_CUBIC),
        dict(size=(36, 100), mode="not_larger", antialias=False),
    ],
)
def test_equals_the_video_reader_then_resize(videos, resize_kw):
    kw = dict(VIDEO_KW, random_shuffle=True, initial_fill=3)
    got = resize_pipe(videos, **kw, **resize_kw)
    want = video_then_resize(videos, resize_kw=resize_kw, **kw)
    for _ in range(3):
        a, b = got.run(), want.run()
        assert batch_values(a) == batch_values(b)
    frames = a[0]
    assert frames.layout() == "FHWC" and frames.at(0).dtype == np.uint8
    assert [len(x) for x in a] == [3, 3, 3]  # frames, labels, frame numbers


def test_nearest_upscale_repeats_pixels(videos):
    got = resize_pipe(
        videos,
        batch=4,
        sequence_length=3,
        resize_x=2 * W,
        resize_y=2 * H,
        interp_type=types.INTERP_NN,
    ).run()[0]
    src = plain_frames(videos, 4, sequence_length=3)
    for i in range(4):
        want = np.repeat(np.repeat(src.at(i), 2, axis=1), 2, axis=2)
        assert got.at(i).shape == (3, 2 * H, 2 * W, 3)
        np.testing.assert_array_equal(got.at(i), want)


def bilinear(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Plain bilinear magnification, pixel centres at +0.5, edges clamped (DALI's LINEAR)."""

    def axis(n_in, n_out):
        x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        x0 = np.floor(x).astype(int)
        t = x - x0
        return np.clip(x0, 0, n_in - 1), np.clip(x0 + 1, 0, n_in - 1), t

    y0, y1, ty = axis(img.shape[0], out_h)
    x0, x1, tx = axis(img.shape[1], out_w)
    f = img.astype(np.float64)
    rows = f[y0] * (1 - ty)[:, None, None] + f[y1] * ty[:, None, None]
    return rows[:, x0] * (1 - tx)[None, :, None] + rows[:, x1] * tx[None, :, None]


def test_linear_upscale_matches_numpy_bilinear(videos):
    out_h, out_w = 72, 100
    src = plain_frames(videos, 2, sequence_length=2, dtype=types.FLOAT)
    for dtype in (types.FLOAT, types.UINT8):
        pipe = resize_pipe(videos, batch=2, sequence_length=2, size=(out_h, out_w), dtype=dtype)
        got = pipe.run()[0]
        for i in range(2):
            seq = got.at(i)
            assert seq.shape == (2, out_h, out_w, 3)
            assert seq.dtype == (np.float32 if dtype == types.FLOAT else np.uint8)
            for f in range(2):
                want = bilinear(src.at(i)[f], out_h, out_w)
                err = np.abs(seq[f].astype(np.float64) - want)
                if dtype == types.FLOAT:
                    assert err.max() < 2e-3
                else:  # rounded to uint8 (OpenCV's fixed-point weights: one level at most)
                    assert err.max() <= 1 and err.mean() < 0.3


def test_per_sample_size_argument(videos):
    def make(reader):
        pipe = Pipeline(batch_size=4, num_threads=2, device_id=None, seed=11)
        with pipe:
            short = fn.random.uniform(range=(12.0, 40.0), seed=4)
            if reader:
                frames = fn.readers.video_resize(
                    filenames=videos, sequence_length=2, resize_shorter=short
                )
            else:
                frames = fn.resize(
                    fn.readers.video(filenames=videos, sequence_length=2), resize_shorter=short
                )
            pipe.set_outputs(frames, short)
        return pipe

    got, want = make(True).run(), make(False).run()
    assert batch_values(got) == batch_values(want)
    for i in range(4):
        short = float(got[1].at(i))
        assert got[0].at(i).shape[1] == round(short)
    assert len({got[0].at(i).shape for i in range(4)}) > 1


# --- the reader part --------------------------------------------------------------------------


def test_metadata_and_sharding_are_the_video_readers(videos):
    kw = dict(sequence_length=3, num_shards=2, shard_id=1, pad_last_batch=True)
    got = resize_pipe(videos, resize_x=16, resize_y=12, **kw)
    want = video_then_resize(videos, resize_kw=dict(resize_x=16, resize_y=12), **kw)
    assert got.reader_meta("Reader") == want.reader_meta("Reader")
    assert got.reader_meta("Reader")["epoch_size"] == 4 + 3  # sequences of 3 in 14 and 10 frames
    for _ in range(3):
        assert batch_values(got.run()) == batch_values(want.run())


@pytest.mark.parametrize("stop", [0, 2])
def test_checkpoint_resumes(videos, stop):
    def make(checkpoint=None):
        return resize_pipe(
            videos,
            checkpoint=checkpoint,
            checkpointing=True,
            sequence_length=2,
            random_shuffle=True,
            initial_fill=4,
            resize_x=20,
            resize_y=10,
            labels=[],
        )

    check_checkpoint_resumes(make, stop, 5)


def test_legacy_ops_classes(videos):
    for cls in (ops.readers.VideoResize, ops.VideoReaderResize):
        pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
        reader = cls(filenames=videos, sequence_length=2, resize_x=8, resize_y=6, resize_z=0)
        with pipe:
            pipe.set_outputs(reader())
        assert pipe.run()[0].at(0).shape == (2, 6, 8, 3)


def test_argument_errors_name_the_reader(videos):
    with pytest.raises(ArgumentError, match=r"readers\.video_resize: give the output size"):
        resize_pipe(videos, sequence_length=2)
    with pytest.raises(ArgumentError, match=r"readers\.video_resize: .*mode='bogus'"):
        resize_pipe(videos, sequence_length=2, resize_x=4, mode="bogus")
    with pytest.raises(ArgumentError, match=r"readers\.video_resize: sequence_length is required"):
        resize_pipe(videos, resize_x=4)
    with pytest.raises(ArgumentError, match=r"readers\.video_resize: .*exactly one way"):
        resize_pipe(videos, sequence_length=2, resize_x=4, resize_shorter=5)
    with pytest.raises(ArgumentError, match="unknown argument"):
        resize_pipe(videos, sequence_length=2, resize_x=4, crop=3)


def test_gpu_graph_is_reader_decoder_and_batched_resize(videos, monkeypatch):
    """device="gpu": the reader draws on the CPU, NVDEC decodes (mixed), one GPU resize."""
    import sys
    import types as pytypes

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", pytypes.ModuleType("PyNvVideoCodec"))
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        frames, labels = fn.readers.video_resize(
            device="gpu",
            filenames=videos,
            sequence_length=2,
            labels=[],
            resize_x=8,
            resize_y=6,
            name="Reader",
        )
        pipe.set_outputs(frames, labels)
    chain = [(n.op.schema, n.device) for n in pipe._ops]
    assert chain == [
        ("readers.video_resize", "cpu"),
        ("_video_decode_gpu", "mixed"),
        ("resize", "gpu"),
    ]
    assert frames.device == labels.device == "gpu"
    assert pipe._ops[2].inputs[0] is pipe._ops[1].outputs[0]
