"""fn.readers.video(device="gpu") (NVDEC through PyNvVideoCodec) against the CPU reader (PyAV).

Both readers draw the same sequences for the same seed (the sequence list and the shard/shuffle
logic are shared), so their batches are compared sample by sample: frame order exactly (the
synthetic frames encode their index), pixels within a small mean difference (NVDEC's and
FFmpeg's YUV -> RGB conversions round differently), labels, frame numbers and timestamps equal.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
pytest.importorskip("av")
try:
    import PyNvVideoCodec  # noqa: F401
except Exception as e:  # not installed, or no driver with NVDEC
    pytest.skip(f"PyNvVideoCodec unusable: {e}", allow_module_level=True)

from dlpipe import Pipeline, fn, types  # noqa: E402
from dlpipe.readers._video_synth import frame_index_of, write_video  # noqa: E402


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_videos")
    for d in ("a", "b"):
        os.makedirs(root / d)
    paths = [
        write_video(str(root / "a" / "idx.mp4"), 60, width=320, height=240, gop=12),
        write_video(
            str(root / "a" / "nat.mp4"), 50, width=320, height=240, gop=25, pattern="natural"
        ),
        write_video(
            str(root / "b" / "hevc.mkv"),
            45,
            width=320,
            height=240,
            gop=15,
            codec="libx265",
            color=(30, 200, 60),
        ),
        write_video(
            str(root / "b" / "small.mp4"), 40, width=256, height=144, gop=10, pattern="natural"
        ),
    ]
    return str(root), paths


def _pair(batch=6, seed=11, **kw):
    pipes = []
    for device in ("gpu", "cpu"):
        pipe = Pipeline(batch_size=batch, num_threads=4, device_id=0, seed=seed)
        with pipe:
            outs = fn.readers.video(device=device, name="Reader", **kw)
            pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
        pipes.append(pipe)
    return pipes


def _compare(gpu_pipe, cpu_pipe, iters, tol=3.0, check_index=True):
    for _ in range(iters):
        g_outs, c_outs = gpu_pipe.run(), cpu_pipe.run()
        assert len(g_outs) == len(c_outs)
        video = g_outs[0]
        assert video.layout() == "FHWC"
        host = video.as_cpu()
        for i in range(len(c_outs[0])):
            a, b = np.asarray(host.at(i)), c_outs[0].at(i)
            assert a.shape == b.shape and a.dtype == b.dtype
            diff = np.abs(a.astype(np.float32) - b.astype(np.float32))
            assert diff.mean() < tol, f"sample {i}: mean abs diff {diff.mean():.2f}"
            src = c_outs[0].source_info(i) if hasattr(c_outs[0], "source_info") else ""
            if check_index and "idx" in str(src):
                assert [frame_index_of(f) for f in a] == [frame_index_of(f) for f in b]
        for g, c in zip(g_outs[1:], c_outs[1:], strict=True):
            gh = g.as_cpu()
            for i in range(len(c)):
                np.testing.assert_allclose(np.asarray(gh.at(i)), c.at(i), atol=1e-6)


@pytest.mark.parametrize("mode", ["index", "seek"])
def test_gpu_frames_match_cpu(videos, monkeypatch, mode):
    monkeypatch.setenv("DLPIPE_NVDEC_MODE", mode)
    _, paths = videos
    g, c = _pair(
        filenames=paths,
        labels=[],
        sequence_length=8,
        stride=2,
        step=5,
        random_shuffle=True,
        initial_fill=16,
        enable_frame_num=True,
        enable_timestamps=True,
    )
    _compare(g, c, iters=4)


def test_gpu_file_root_sequential_and_padded(videos):
    root, _ = videos
    g, c = _pair(batch=8, file_root=root, sequence_length=16, pad_sequences=True)
    meta = g.reader_meta("Reader")
    assert meta == c.reader_meta("Reader")
    _compare(g, c, iters=int(np.ceil(meta["epoch_size"] / 8)) + 1)


def test_gpu_float_and_dense_dlpack(videos):
    _, paths = videos
    g, c = _pair(batch=4, filenames=paths[:2], sequence_length=4, normalized=True)
    _compare(g, c, iters=2, tol=3.0 / 255)
    (video,) = g.run()
    dense = cupy.from_dlpack(video.as_tensor())
    assert dense.shape == (4, 4, 240, 320, 3) and dense.dtype == cupy.float32


def test_gpu_ycbcr(videos):
    _, paths = videos
    g, c = _pair(batch=4, filenames=paths[:1], sequence_length=4, image_type=types.YCbCr)
    _compare(g, c, iters=2, tol=2.0, check_index=False)


def test_gpu_multi_resolution_batch(videos):
    _, paths = videos
    g, c = _pair(batch=5, filenames=[paths[0], paths[3]], sequence_length=40, step=10)
    _compare(g, c, iters=2)
