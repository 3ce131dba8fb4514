"""Bad data under ``on_error``: any decoder failure is a skip (OpenCV's own errors too), a
batch of bad samples only is replaced by the next batch of the stream (deterministic,
checkpointable, epochs keep their length), images over ``max_pixels`` are refused from their
header, the default ``"raise"`` names file, operator and reason, and ``pipe.skipped()`` is
bounded."""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from conftest import batch_values, check_checkpoint_resumes
from dlpipe import ArgumentError, DecodeError, Pipeline, fn
from dlpipe.iterator import BaseIterator
from dlpipe.options import RuntimeOptions

_BAD = b"\xff\xd8\xff\xe0 corrupt"
_NO_PROCESS = RuntimeOptions(read_process=False)


def _jpeg(i: int, h: int = 12, w: int = 16) -> bytes:
    """A small JPEG whose colour encodes ``i`` (checked through the label instead)."""
    img = np.full((h, w, 3), (10 * i) % 250, np.uint8)
    return cv2.imencode(".jpg", img)[1].tobytes()


def _files(tmp_path, n: int, bad: dict[int, bytes] | set[int]) -> list[str]:
    bad = dict.fromkeys(bad, _BAD) if isinstance(bad, set) else bad
    names = []
    for i in range(n):
        path = tmp_path / f"{i:03d}.jpg"
        path.write_bytes(bad.get(i, _jpeg(i)))
        names.append(str(path))
    return names


def _pipe(files, batch_size=4, on_error="skip", runtime=_NO_PROCESS, decoder=None, **kw):
    pipe = Pipeline(
        batch_size=batch_size, num_threads=kw.pop("num_threads", 2), seed=1, runtime=runtime, **kw
    )
    with pipe:
        data, labels = fn.readers.file(files=files, name="Reader")
        images = (decoder or fn.decoders.image)(data, on_error=on_error)
        pipe.set_outputs(images, labels)
    return pipe


def _labels(out) -> list[int]:
    return out[1].as_array().ravel().tolist()


# --- on_error="raise": the error names file, operator and reason ------------------------------


def test_raise_names_the_file_the_operator_and_the_reason(tmp_path):
    files = _files(tmp_path, 4, {2})
    pipe = _pipe(files, on_error="raise")
    with pytest.raises(DecodeError) as info:
        pipe.run()
    text = str(info.value)
    assert "/002.jpg" in text  # the file
    assert "'decoders.image'" in text  # the operator
    assert "truncated JPEG (12 bytes, no end-of-image marker)" in text  # the reason
    pipe.close()


# --- any backend error is a skip --------------------------------------------------------------


def _bmp_claiming(height: int, width: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, "BMP")
    b = bytearray(out.getvalue())
    struct.pack_into("<ii", b, 18, width, height)
    return bytes(b)


def test_opencv_own_errors_are_skipped_and_named(tmp_path):
    # 40000 x 40000 passes a raised max_pixels but trips OpenCV's own limit (2**30 pixels):
    # cv2.error from validateInputImageSize, not a DecodeError
    bomb = _bmp_claiming(40000, 40000)
    with pytest.raises(cv2.error, match="validateInputImageSize"):
        cv2.imdecode(np.frombuffer(bomb, np.uint8), cv2.IMREAD_COLOR)
    files = _files(tmp_path, 4, {1: bomb})
    decoder = lambda x, on_error: fn.decoders.image(x, on_error=on_error, max_pixels=2**40)  # noqa: E731
    pipe = _pipe(files, decoder=decoder)
    assert _labels(pipe.run()) == [0, 0, 2, 3]
    (rec,) = pipe.skipped()
    assert rec["file"].endswith("001.jpg") and "validateInputImageSize" in rec["error"]
    pipe.close()
    pipe = _pipe(files, decoder=decoder, on_error="raise")
    with pytest.raises(DecodeError, match=r"decoders\.image: error: .*validateInputImageSize.*001"):
        pipe.run()
    pipe.close()


# --- max_pixels -------------------------------------------------------------------------------


def _jpeg_claiming(height: int, width: int) -> bytes:
    b = bytearray(_jpeg(0))
    struct.pack_into(">HH", b, b.index(b"\xff\xc0") + 5, height, width)
    return bytes(b)


def test_decompression_bomb_is_refused_from_its_header(tmp_path):
    bomb = _jpeg_claiming(60000, 60000)  # ~700 bytes claiming 3.6 gigapixels
    files = _files(tmp_path, 4, {3: bomb})
    pipe = _pipe(files, on_error="raise")
    with pytest.raises(DecodeError) as info:
        pipe.run()
    text = str(info.value)
    assert "JPEG header claims 60000x60000 pixels (3,600,000,000)" in text
    assert "max_pixels=268,435,456" in text and "003.jpg" in text
    pipe.close()
    pipe = _pipe(files)
    assert _labels(pipe.run()) == [0, 1, 2, 2]
    assert [r["file"][-7:] for r in pipe.skipped()] == ["003.jpg"]
    pipe.close()


@pytest.mark.parametrize(
    "decoder",
    [
        fn.decoders.image,
        fn.decoders.image_random_crop,
        lambda x, **kw: fn.decoders.image_crop(x, crop=(4, 4), **kw),
        lambda x, **kw: fn.decoders.image_slice(x, rel_start=(0, 0), rel_shape=(0.5, 0.5), **kw),
    ],
)
def test_max_pixels_argument_and_pipeline_default(tmp_path, decoder):
    files = _files(tmp_path, 2, set())  # 12 x 16 = 192 pixels each
    # the pipeline-wide default (RuntimeOptions.max_pixels)
    pipe = _pipe(files, 2, "raise", RuntimeOptions(read_process=False, max_pixels=191), decoder)
    with pytest.raises(DecodeError, match=r"claims 16x12 pixels \(192\), over max_pixels=191"):
        pipe.run()
    pipe.close()
    # the operator's argument wins over the pipeline's
    d = lambda x, on_error: decoder(x, on_error=on_error, max_pixels=192)  # noqa: E731
    pipe = _pipe(files, 2, "raise", RuntimeOptions(read_process=False, max_pixels=191), d)
    assert _labels(pipe.run()) == [0, 1]
    pipe.close()


@pytest.mark.parametrize(
    "value, error, message",
    [
        (0, ArgumentError, r"decoders\.image: max_pixels=0 must be >= 1"),
        ("1000", TypeError, r"max_pixels='1000' is a str"),
        (1e6, TypeError, r"max_pixels=1000000\.0 is a float"),
    ],
)
def test_max_pixels_is_checked(value, error, message):
    with Pipeline(batch_size=1, num_threads=1), pytest.raises(error, match=message):
        fn.decoders.image(fn.readers.file(files=["x"])[0], max_pixels=value)


# --- a batch of bad samples only is refilled from the stream ----------------------------------


def test_all_bad_batch_is_replaced_by_the_next_batch(tmp_path):
    # 12 files, batches of 4, files 4..7 bad: iteration 1 is dropped and iteration 2 takes
    # its place; the stream goes on into the next epoch the same way
    files = _files(tmp_path, 12, {4, 5, 6, 7})
    pipe = _pipe(files)
    got = [_labels(pipe.run()) for _ in range(4)]
    assert got == [[0, 1, 2, 3], [8, 9, 10, 11], [0, 1, 2, 3], [8, 9, 10, 11]]
    skipped = pipe.skipped()
    assert [(r["file"][-7:], r["iteration"]) for r in skipped] == [
        *((f"{i:03d}.jpg", 1) for i in range(4, 8)),
        *((f"{i:03d}.jpg", 4) for i in range(4, 8)),
    ]
    assert skipped.total == 8
    pipe.close()


def _stream(files, batches, **kw) -> list:
    pipe = _pipe(files, **kw)
    out = [batch_values(pipe.run()) for _ in range(batches)]
    pipe.close()
    return out


def test_refill_is_deterministic_in_every_execution_mode(tmp_path):
    files = _files(tmp_path, 14, {2, 4, 5, 6, 7, 12})  # one partly bad, one all-bad batch
    want = _stream(files, 6, exec_async=False, exec_pipelined=False, num_threads=1)
    assert want == _stream(files, 6, num_threads=2)
    assert want == _stream(files, 6, prefetch_queue_depth=3)
    assert want == _stream(files, 6, runtime=RuntimeOptions())  # read processes


def test_refill_resumes_from_a_checkpoint(tmp_path):
    files = _files(tmp_path, 14, {4, 5, 6, 7, 12})

    def make(checkpoint=None):
        return _pipe(files, enable_checkpointing=True, checkpoint=checkpoint)

    check_checkpoint_resumes(make, stop=1, total=5)  # checkpoint right after the refill
    check_checkpoint_resumes(make, stop=3, total=6)


def test_epoch_length_is_unchanged(tmp_path):
    files = _files(tmp_path, 10, {4, 5, 6, 7})
    pipe = _pipe(files)
    it = BaseIterator(pipe, ["images", "labels"], reader_name="Reader")
    assert len(it) == 3
    for _ in range(2):
        assert sum(1 for _ in it) == 3
        it.reset()
    pipe.close()


def test_sharded_refill_stays_in_its_shard(tmp_path):
    files = _files(tmp_path, 16, {0, 1})  # shard 0: files 0..7; batch 0 all bad

    def shard(k):
        pipe = Pipeline(batch_size=2, num_threads=1, seed=1, runtime=_NO_PROCESS)
        with pipe:
            data, labels = fn.readers.file(files=files, shard_id=k, num_shards=2)
            pipe.set_outputs(fn.decoders.image(data, on_error="skip"), labels)
        out = [_labels(pipe.run()) for _ in range(4)]
        pipe.close()
        return out

    assert shard(0) == [[2, 3], [4, 5], [6, 7], [8, 9]]  # then shard 1 (epoch 1, no stick)
    assert shard(1) == [[8, 9], [10, 11], [12, 13], [14, 15]]


# --- pipe.skipped() is bounded ------------------------------------------------------------------


def test_skipped_keeps_counts_and_the_last_records(tmp_path):
    files = _files(tmp_path, 8, {1, 6})  # one skip in each batch
    runtime = RuntimeOptions(read_process=False, skipped_history=3)
    pipe = _pipe(files, runtime=runtime)
    assert pipe.skipped() == [] and pipe.skipped().total == 0
    for _ in range(10):
        pipe.run()
    skipped = pipe.skipped()
    assert skipped.total == 10 and len(skipped) == 3 and skipped.dropped == 7
    assert [r["iteration"] for r in skipped] == [7, 8, 9]  # the most recent
    assert [r["file"][-7:] for r in skipped] == ["006.jpg", "001.jpg", "006.jpg"]
    (name,) = skipped.by_operator
    assert skipped.by_operator[name] == 10 and "ImageDecoder" in name
    pipe.close()
    pipe = _pipe(files, runtime=RuntimeOptions(read_process=False, skipped_history=0))
    pipe.run()
    assert pipe.skipped() == [] and pipe.skipped().total == 1
    pipe.close()


def test_skipped_history_is_checked():
    with pytest.raises(ValueError, match="skipped_history=-1"):
        RuntimeOptions(skipped_history=-1)


# --- a PNG chunk longer than the file ---------------------------------------------------------


def test_png_chunk_longer_than_the_file_is_refused_from_its_header(tmp_path):
    # OpenCV 5 reads a chunk into a buffer of its claimed length first (8 s and GBs for a
    # 2 KB file claiming a 3.6 GB IDAT): refused from the chunk headers instead
    png = bytearray(cv2.imencode(".png", np.zeros((12, 16, 3), np.uint8))[1].tobytes())
    at = png.index(b"IDAT") - 4
    struct.pack_into(">I", png, at, 3_674_212_643)
    files = _files(tmp_path, 2, {1: bytes(png)})
    pipe = _pipe(files, 2, on_error="raise")
    with pytest.raises(DecodeError, match=r"corrupt PNG: chunk b'IDAT' at byte \d+ claims 3,674"):
        pipe.run()
    pipe.close()
    truncated = cv2.imencode(".png", np.zeros((12, 16, 3), np.uint8))[1].tobytes()[:-20]
    pipe = _pipe(_files(tmp_path, 2, {0: truncated}), 2)
    assert _labels(pipe.run()) == [1, 1]
    assert "PNG" in pipe.skipped()[0]["error"]
    pipe.close()
