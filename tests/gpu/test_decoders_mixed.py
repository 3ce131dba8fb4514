"""fn.decoders.image(device="mixed") and image_random_crop against the CPU decoder."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
pytest.importorskip("nvidia.nvimgcodec")

from dlpipe import DecodeError, Pipeline, fn, types  # noqa: E402
from dlpipe.synthetic import make_dataset  # noqa: E402


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    """ImageNet-like sizes (hardware decoder territory)."""
    root = str(tmp_path_factory.mktemp("big"))
    return make_dataset(root, num_classes=2, per_class=6, size_range=(200, 400), seed=4)


def _decode_pair(root, output_type=types.RGB, batch=6, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=5)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=root, name="r")
        g = fn.decoders.image(jpegs, device="mixed", output_type=output_type, **kw)
        c = fn.decoders.image(jpegs, device="cpu", output_type=output_type)
        pipe.set_outputs(g, c)
    return pipe


@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
@pytest.mark.parametrize("hw_load", [0.0, 0.9, 1.0])
def test_mixed_decode_matches_cpu(big_root, output_type, hw_load):
    pipe = _decode_pair(big_root, output_type, hw_decoder_load=hw_load)
    for _ in range(2):
        g, c = pipe.run()
        assert g.layout() == "HWC" and len(g) == len(c)
        host = g.as_cpu()
        for i in range(len(c)):
            a, b = host.at(i), c.at(i)
            assert a.shape == b.shape and a.dtype == np.uint8
            # nvJPEG upsamples chroma differently from libjpeg-turbo: a few levels at most
            assert np.abs(a.astype(int) - b).mean() < 2.0
    pipe.close()


def test_fallback_formats_decode_in_the_same_batch(tmp_path):
    rng = np.random.default_rng(0)
    os.makedirs(tmp_path / "a")
    imgs = {}
    for i, ext in enumerate([".jpg", ".png", ".bmp", ".jpg", ".webp", ".tiff"]):
        img = rng.integers(0, 256, (30 + i, 41, 3), dtype=np.uint8)
        img = cv2.GaussianBlur(img, (5, 5), 2)
        cv2.imwrite(str(tmp_path / "a" / f"{i}{ext}"), img)
        imgs[i] = img
    pipe = _decode_pair(str(tmp_path), batch=6)
    g, c = pipe.run()
    host = g.as_cpu()
    for i in range(6):
        assert host.at(i).shape == c.at(i).shape
        assert np.abs(host.at(i).astype(int) - c.at(i)).mean() < 2.0
    # lossless formats decoded on the CPU fallback: exact
    names = [g.source_info(i) for i in range(6)]
    for i, name in enumerate(names):
        if name.endswith((".png", ".bmp", ".tiff")):
            np.testing.assert_array_equal(host.at(i), c.at(i))


def test_corrupt_sample_names_the_file(tmp_path):
    os.makedirs(tmp_path / "a")
    ok, buf = cv2.imencode(".jpg", np.full((40, 40, 3), 100, np.uint8))
    buf.tofile(str(tmp_path / "a" / "0good.jpg"))
    (tmp_path / "a" / "1bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg \xff\xd9")
    buf[: len(buf) // 2].tofile(str(tmp_path / "a" / "2trunc.jpg"))
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=0)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=str(tmp_path))
        pipe.set_outputs(fn.decoders.image(jpegs, device="mixed"))
    with pytest.raises(DecodeError, match=r"1bad\.jpg|2trunc\.jpg"):
        pipe.run()


def _colour_files(root, bad: dict[int, str], n=8):
    """Files 0.jpg..{n-1}.jpg, each a solid colour of its own (``_colour(i)``); ``bad`` maps an
    index to "garbage" (JPEG markers around text) or "truncated" (a JPEG cut in half)."""
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        buf = cv2.imencode(".jpg", np.full((48 + 8 * i, 64, 3), _colour(i), np.uint8))[1]
        path = os.path.join(root, f"{i}.jpg")
        if bad.get(i) == "garbage":
            with open(path, "wb") as f:
                f.write(b"\xff\xd8\xff\xe0 this is not a jpeg \xff\xd9")
        elif bad.get(i) == "truncated":
            buf[: len(buf) // 2].tofile(path)
        else:
            buf.tofile(path)
    return [f"{i}.jpg" for i in range(n)]


def _colour(i):
    return (20 * i + 10, 200 - 20 * i, 100)  # BGR, as cv2 writes it


def _skip_pipe(root, files, batch, random_crop):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=3)
    with pipe:
        jpegs, labels = fn.readers.file(
            file_root=root, files=files, labels=[100 + i for i in range(len(files))]
        )
        if random_crop:
            images = fn.decoders.image_random_crop(jpegs, device="mixed", on_error="skip")
        else:
            images = fn.decoders.image(jpegs, device="mixed", on_error="skip")
        pipe.set_outputs(fn.resize(images, size=(16, 16)), labels)
    return pipe


@pytest.mark.parametrize("decode_process", ["1", "0"])
@pytest.mark.parametrize("random_crop", [False, True])
def test_skip_replaces_corrupt_samples_with_their_neighbours(
    tmp_path, monkeypatch, decode_process, random_crop
):
    """on_error="skip" on the mixed decoder: a corrupt and a truncated JPEG are each replaced by
    the nearest good sample of their batch, image and label; batches stay full, and
    pipe.skipped() names the files."""
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", decode_process)
    root = str(tmp_path)
    files = _colour_files(root, {2: "garbage", 5: "truncated"})
    pipe = _skip_pipe(root, files, 4, random_crop)
    for want in ([0, 1, 1, 3], [4, 4, 6, 7], [0, 1, 1, 3]):  # two epochs
        images, labels = pipe.run()
        assert labels.as_array().ravel().tolist() == [100 + j for j in want]
        host = images.as_cpu()
        for i, j in enumerate(want):
            img = host.at(i)
            assert img.shape == (16, 16, 3)
            rgb = np.array(_colour(j)[::-1])
            assert np.abs(img.reshape(-1, 3).mean(0) - rgb).max() < 4, (i, j)
            assert images.source_info(i) == files[j]
    skipped = pipe.skipped()
    assert [(s["file"], s["iteration"], s["sample"]) for s in skipped] == [
        ("2.jpg", 0, 2),
        ("5.jpg", 1, 1),
        ("2.jpg", 2, 2),
    ]
    assert "truncated JPEG" in skipped[1]["error"]
    pipe.close()


def test_skip_with_every_sample_of_a_batch_bad_takes_the_next_batch(tmp_path):
    # the mixed decoder drops both samples of iteration 0: the executor hands out iteration
    # 1 (files 2, 3) in its place, then iteration 2 (the next epoch: 0 and 1 bad again, so
    # dropped too) is replaced by iteration 3 (files 2, 3)
    root = str(tmp_path)
    files = _colour_files(root, {0: "garbage", 1: "truncated"}, n=4)
    pipe = _skip_pipe(root, files, 2, random_crop=False)
    for _ in range(2):
        _, labels = pipe.run()
        assert labels.as_array().ravel().tolist() == [102, 103]
    skipped = pipe.skipped()
    assert [(s["file"], s["iteration"]) for s in skipped] == [
        ("0.jpg", 0),
        ("1.jpg", 0),
        ("0.jpg", 2),
        ("1.jpg", 2),
    ]
    assert skipped.total == 4
    pipe.close()


def test_skip_with_every_sample_bad_is_an_error_after_an_epoch(tmp_path):
    root = str(tmp_path)
    files = _colour_files(root, {0: "garbage", 1: "truncated"}, n=2)
    pipe = _skip_pipe(root, files, 2, random_crop=False)
    with pytest.raises(DecodeError, match=r"every sample skipped .*'0\.jpg', '1\.jpg'"):
        pipe.run()
    pipe.close()


def test_image_random_crop_mixed_matches_cpu_windows(big_root):
    pipe = Pipeline(batch_size=6, num_threads=2, device_id=0, seed=9)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=big_root)
        g = fn.decoders.image_random_crop(jpegs, device="mixed", seed=3)
        c = fn.decoders.image_random_crop(jpegs, device="cpu", seed=3)
        pipe.set_outputs(g, c)
    for _ in range(3):
        g, c = pipe.run()
        host = g.as_cpu()
        assert host.shape() == c.shape()  # the same windows
        for i in range(len(c)):
            # ROI decode: the window's pixels, within nvJPEG's rounding (a bit more at the
            # window's edges, where chroma upsampling sees no neighbours)
            assert np.abs(host.at(i).astype(int) - c.at(i)).mean() < 3.0


def test_mixed_then_gpu_ops(big_root):
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=1)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=big_root)
        g = fn.resize(fn.decoders.image(jpegs, device="mixed"), size=(64, 80))
        c = fn.resize(fn.decoders.image(jpegs), size=(64, 80))
        pipe.set_outputs(g, c)
    g, c = pipe.run()
    assert g.is_dense_tensor() and g.as_tensor().shape() == [4, 64, 80, 3]
    d = np.abs(g.as_cpu().as_array().astype(int) - c.as_array())
    assert d.mean() < 2.0


def test_image_random_crop_roi_decode_path(big_root, monkeypatch):
    from dlpipe.decoders import _nvimgcodec

    init = _nvimgcodec.MixedDecoder.__init__

    def roi_init(self, op):
        init(self, op)
        self.roi_decode = True

    monkeypatch.setattr(_nvimgcodec.MixedDecoder, "__init__", roi_init)
    test_image_random_crop_mixed_matches_cpu_windows(big_root)


def _rn50_like(root, max_streams, seed=11, batch=8, checkpointing=False, checkpoint=None):
    pipe = Pipeline(
        batch_size=batch,
        num_threads=2,
        device_id=0,
        seed=seed,
        max_streams=max_streams,
        enable_checkpointing=checkpointing,
        checkpoint=checkpoint,
    )
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="mixed")
        images = fn.resize(images, size=(48, 48))
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip()
        )
        pipe.set_outputs(images, labels, fn.decoders.image(jpegs, device="mixed"))
    return pipe


@pytest.mark.parametrize("max_streams", [-1, 2, 4])
def test_decode_lanes_give_the_same_stream_as_one_stream(big_root, max_streams):
    """Decoding iterations side by side (lanes) changes nothing a user sees: the same batches,
    in the same order, as decoding one iteration at a time on the GPU stage's stream."""
    ref, lanes = _rn50_like(big_root, 1), _rn50_like(big_root, max_streams)
    ref.build()
    lanes.build()
    assert ref._executor.gpu_stage.lanes == 0
    # by default 2 lanes at 2 threads (each decoder would get fewer than 3 threads of 3 lanes)
    assert lanes._executor.gpu_stage.lanes == (2 if max_streams == -1 else max_streams - 1)
    for _ in range(7):
        a, b = ref.run(), lanes.run()
        for x, y in zip(a, b, strict=True):
            assert x.source_info(0) == y.source_info(0)
            hx, hy = x.as_cpu(), y.as_cpu()
            for i in range(len(hx)):
                np.testing.assert_array_equal(hx.at(i), hy.at(i))
    ref.close()
    lanes.close()


def test_decode_lanes_checkpoint_resumes_exactly(big_root):
    pipe = _rn50_like(big_root, -1, checkpointing=True)
    for _ in range(3):
        pipe.run()
    ckpt = pipe.checkpoint()
    rest = [pipe.run()[0].as_cpu().as_array() for _ in range(3)]
    pipe.close()
    again = _rn50_like(big_root, -1, checkpointing=True, checkpoint=ckpt)
    for want in rest:
        np.testing.assert_array_equal(again.run()[0].as_cpu().as_array(), want)
    again.close()


def test_decode_lanes_corrupt_file_is_named_and_close_does_not_hang(tmp_path):
    os.makedirs(tmp_path / "a")
    ok, buf = cv2.imencode(".jpg", np.full((40, 40, 3), 100, np.uint8))
    for i in range(9):
        buf.tofile(str(tmp_path / "a" / f"{i}good.jpg"))
    (tmp_path / "a" / "9bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg \xff\xd9")
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0, max_streams=3)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=str(tmp_path))
        pipe.set_outputs(fn.resize(fn.decoders.image(jpegs, device="mixed"), size=(8, 8)))
    pipe.build()
    assert pipe._executor.gpu_stage.lanes == 2
    with pytest.raises(DecodeError, match=r"9bad\.jpg"):
        for _ in range(5):  # the fifth batch holds the bad file; the first four are fine
            pipe.run()
    pipe.close()
    assert not any(t.is_alive() for t in pipe._executor._threads)


def test_gpu_memory_flat_over_50_epochs_with_lanes(big_root):
    """The ResNet-50 style pipeline (mixed decode in two lanes, decoding into spare images)
    holds no more device memory after 50 epochs than after the first few iterations, counted
    over every allocator (CuPy's pool, nvImageCodec's, the driver's)."""
    pipe = _rn50_like(big_root, -1, batch=4)
    for _ in range(12):
        pipe.run()
    cupy.cuda.runtime.deviceSynchronize()
    free, total = cupy.cuda.runtime.memGetInfo()
    used = total - free
    for _ in range(50 * 3):  # 12 images, batches of 4
        pipe.run()
    cupy.cuda.runtime.deviceSynchronize()
    free, total = cupy.cuda.runtime.memGetInfo()
    assert total - free <= used + (32 << 20)
    pipe.close()


def test_trailing_data_decodes_and_truncation_is_caught_as_on_the_cpu(tmp_path):
    # Data appended after the end-of-image marker (motion photos) decodes as on the CPU; a
    # JPEG cut short is an error naming the file, not a partly grey image.
    os.makedirs(tmp_path / "a")
    rng = np.random.default_rng(3)
    img = cv2.GaussianBlur(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8), (7, 7), 3)
    buf = cv2.imencode(".jpg", img)[1]
    trailer = np.frombuffer(b"ftypmp42" + bytes(range(256)) * 40, np.uint8)
    np.concatenate([buf, trailer]).tofile(str(tmp_path / "a" / "0motion.jpg"))
    buf.tofile(str(tmp_path / "a" / "1plain.jpg"))
    pipe = _decode_pair(str(tmp_path), batch=2)
    g, c = pipe.run()
    host = g.as_cpu()
    for i in range(2):
        assert host.at(i).shape == c.at(i).shape == (240, 320, 3)
        assert np.abs(host.at(i).astype(int) - c.at(i)).mean() < 2.0
    pipe.close()
    buf[: len(buf) - 2000].tofile(str(tmp_path / "a" / "0motion.jpg"))
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=str(tmp_path))
        pipe.set_outputs(fn.decoders.image(jpegs, device="mixed"))
    with pytest.raises(DecodeError) as err:
        pipe.run()
    assert "0motion.jpg" in str(err.value) and "truncated JPEG" in str(err.value)
    pipe.close()


@pytest.mark.parametrize("max_streams, threads", [(-1, 3), (1, 6), (4, 2), (3, 3)])
def test_decoders_share_the_pipeline_threads(big_root, max_streams, threads):
    # Each decoder running at once gets num_threads // lanes CPU threads, not every core (by
    # default two lanes at 6 threads: three would leave each decoder 2).
    pipe = Pipeline(batch_size=4, num_threads=6, device_id=0, max_streams=max_streams)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=big_root, name="r")
        pipe.set_outputs(fn.decoders.image(jpegs, device="mixed"))
    pipe.run()
    (dec,) = [n.op for n in pipe._ops if n.op.schema == "decoders.image"]
    assert dec.gpu_impl()._threads == threads
    pipe.close()


@pytest.mark.parametrize("decode_process", ["1", "0"])
def test_mixed_max_pixels_refuses_a_bomb_from_its_header(tmp_path, monkeypatch, decode_process):
    # a JPEG claiming 60000 x 60000: refused before nvImageCodec sees it, named; under
    # on_error="skip" replaced like any bad sample
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", decode_process)
    root = str(tmp_path)
    files = _colour_files(root, {}, n=4)
    bomb = bytearray(open(os.path.join(root, "1.jpg"), "rb").read())
    sof = bomb.index(b"\xff\xc0")
    bomb[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    with open(os.path.join(root, "1.jpg"), "wb") as f:
        f.write(bomb)
    pipe = _skip_pipe(root, files, 4, random_crop=False)
    _, labels = pipe.run()
    assert labels.as_array().ravel().tolist() == [100, 100, 102, 103]
    (rec,) = pipe.skipped()
    assert rec["file"] == "1.jpg" and "claims 60000x60000" in rec["error"]
    pipe.close()
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=0)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=root, files=files)
        pipe.set_outputs(fn.decoders.image(jpegs, device="mixed"))
    with pytest.raises(DecodeError, match=r"claims 60000x60000 .*1\.jpg"):
        pipe.run()
    pipe.close()


def test_mixed_cmyk_matches_cpu(tmp_path):
    # nvImageCodec may decode CMYK on the GPU or hand it to the CPU fallback: either way the
    # values are DALI's conversion, as the CPU decoder gives them (within JPEG's IDCT noise)
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(2):
        out = io.BytesIO()
        cmyk = (rng.random((32, 48, 4)) * 255).astype(np.uint8)
        Image.fromarray(cmyk, "CMYK").save(out, "JPEG", quality=95)
        (tmp_path / f"{i}.jpg").write_bytes(out.getvalue())
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        jpegs, _ = fn.readers.file(files=[str(tmp_path / f"{i}.jpg") for i in range(2)])
        pipe.set_outputs(fn.decoders.image(jpegs, device="mixed"), fn.decoders.image(jpegs))
    g, c = pipe.run()
    host = g.as_cpu()
    for i in range(2):
        assert host.at(i).shape == c.at(i).shape == (32, 48, 3)
        assert np.abs(host.at(i).astype(int) - c.at(i)).mean() < 1.5
    pipe.close()
