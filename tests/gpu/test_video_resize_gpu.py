"""The GPU resize of sequences (FHWC / FHW: every frame of the batch in one launch) against the
CPU resize on random inputs, and ``fn.readers.video_resize(device="gpu")`` against the CPU
reader."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _sequences(seed: int, dtype=np.uint8, channels: int | None = 3):
    """A batch of sequences: different frame counts and frame sizes (a non-dense batch)."""
    rng = np.random.default_rng(seed)
    out = []
    for f, h, w in [(3, 20, 30), (1, 33, 17), (4, 20, 30), (2, 41, 52)]:
        shape = (f, h, w) if channels is None else (f, h, w, channels)
        x = rng.integers(0, 256, shape)
        out.append(x.astype(dtype) if dtype == np.uint8 else (x / 7.0).astype(dtype))
    return out


def _run(build, samples, layout, batch=4):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=5)
    with pipe:
        x = fn.external_source(lambda: samples, layout=layout)
        pipe.set_outputs(build(x.gpu()), build(x))
    g, c = pipe.run()
    return g.as_cpu(), c


@pytest.mark.parametrize(
    "kw",
    [
        dict(size=(16, 24)),
        dict(resize_shorter=40),
        dict(resize_x=23, resize_y=31, interp_type=types.INTERP_NN),
        dict(size=(10, 9), interp_type=types.INTERP_CUBIC, antialias=False),
    ],
)
@pytest.mark.parametrize("dtype, channels", [(np.uint8, 3), (np.float32, 1), (np.uint8, None)])
def test_resize_sequences_gpu_matches_cpu(kw, dtype, channels):
    layout = "FHW" if channels is None else "FHWC"
    samples = _sequences(len(kw), dtype, channels)
    g, c = _run(lambda x: fn.resize(x, **kw), samples, layout)
    assert g.layout() == c.layout() == layout
    tol = 1.0 + 1e-3 if dtype == np.uint8 else 2e-3 * max(float(s.max()) for s in samples)
    for i in range(len(samples)):
        assert g.at(i).shape == c.at(i).shape and g.at(i).dtype == c.at(i).dtype
        d = np.abs(g.at(i).astype(np.float64) - c.at(i))
        assert d.max() <= tol, (kw, i, d.max())


def test_resize_sequences_per_sample_argument():
    samples = _sequences(9)
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=5)
    with pipe:
        x = fn.external_source(lambda: samples, layout="FHWC")
        rx = fn.random.uniform(range=(8, 40))
        pipe.set_outputs(
            fn.resize(x.gpu(), resize_x=rx, resize_y=12), fn.resize(x, resize_x=rx, resize_y=12)
        )
    g, c = pipe.run()
    for i in range(4):
        assert g.as_cpu().at(i).shape == c.at(i).shape
        assert np.abs(g.as_cpu().at(i).astype(int) - c.at(i)).max() <= 1


def test_video_resize_gpu_matches_cpu(tmp_path):
    pytest.importorskip("av")
    try:
        import PyNvVideoCodec  # noqa: F401
    except Exception as e:
        pytest.skip(f"PyNvVideoCodec unusable: {e}")
    from dlpipe.readers._video_synth import frame_index_of, write_video

    paths = [
        write_video(str(tmp_path / "a.mp4"), 40, width=320, height=240, gop=12),
        write_video(str(tmp_path / "b.mp4"), 30, width=256, height=144, gop=10),
    ]
    outs = []
    for device in ("gpu", "cpu"):
        pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=7)
        with pipe:
            frames, labels = fn.readers.video_resize(
                device=device,
                filenames=paths,
                labels=[],
                sequence_length=5,
                random_shuffle=True,
                resize_shorter=96,
                name="Reader",
            )
            pipe.set_outputs(frames, labels)
        outs.append([pipe.run() for _ in range(3)])
    for (gf, gl), (cf, cl) in zip(*outs, strict=True):
        assert gf.layout() == "FHWC"
        gf = gf.as_cpu()
        for i in range(len(cf)):
            a, b = gf.at(i), cf.at(i)
            assert a.shape == b.shape and a.shape[1] == 96
            assert [frame_index_of(f) for f in a] == [frame_index_of(f) for f in b]
            assert np.abs(a.astype(float) - b).mean() < 3.0  # NVDEC vs FFmpeg colour rounding
        assert gl.as_cpu().as_array().tolist() == cl.as_array().tolist()
