"""Bad data and faults: on_error="skip" keeps batches full and epochs whole, the decoder
survives random and mutated bytes, and a failed pipeline still closes cleanly."""

from __future__ import annotations

import os
import threading
import time

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlpipe import ArgumentError, DecodeError, Pipeline, fn, types
from dlpipe.decoders.image import decode_cpu
from dlpipe.synthetic import synthetic_image

_JPEG = cv2.imencode(".jpg", synthetic_image(np.random.default_rng(0), 24, 32))[1].tobytes()


def dataset(tmp_path, n, bad):
    for i in range(n):
        os.makedirs(tmp_path / f"c{i % 2}", exist_ok=True)
        payload = b"\xff\xd8 corrupt" if i in bad else _JPEG
        (tmp_path / f"c{i % 2}" / f"{i:03d}.jpg").write_bytes(payload)
    return str(tmp_path)


def skip_pipe(root, batch_size):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, seed=1)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, name="Reader")
        images = fn.decoders.image(jpegs, on_error="skip")
        pipe.set_outputs(images, labels)
    return pipe


def test_skip_replaces_the_whole_sample_and_keeps_batches_full(tmp_path):
    # listing order: c0/000, c0/002, c0/004, c0/006, c1/001, c1/003, ...
    root = dataset(tmp_path, 8, bad={2, 3})
    pipe = skip_pipe(root, 4)
    images, labels = pipe.run()
    assert len(images) == 4 and images.is_dense_tensor()
    # c0/002 (sample 1) is replaced by its nearest good neighbour c0/000 (sample 0), label 0
    assert labels.as_array().ravel().tolist() == [0, 0, 0, 0]
    assert images.source_info(1) == "c0/000.jpg"
    images, labels = pipe.run()  # c1/001, c1/003 (bad), c1/005, c1/007
    assert labels.as_array().ravel().tolist() == [1, 1, 1, 1]
    assert [(s["file"], s["sample"]) for s in pipe.skipped()] == [
        ("c0/002.jpg", 1),
        ("c1/003.jpg", 1),
    ]
    assert all("ImageDecoder" in s["operator"] and "decode" in s["error"] for s in pipe.skipped())
    assert pipe.epoch_size("Reader") == 8  # epochs keep their length


def test_skip_keeps_data_and_label_paired(tmp_path):
    # Every file its own label: the replaced sample takes its neighbour's label with its image.
    root = dataset(tmp_path, 4, bad={1})
    files = [f"c{i % 2}/{i:03d}.jpg" for i in range(4)]
    pipe = Pipeline(batch_size=4, num_threads=2, seed=1)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, files=files, labels=[10, 11, 12, 13])
        pipe.set_outputs(fn.decoders.image(jpegs, on_error="skip"), labels)
    images, labels = pipe.run()
    assert labels.as_array().ravel().tolist() == [10, 10, 12, 13]
    assert [images.source_info(i) for i in range(4)] == [files[0], files[0], files[2], files[3]]


def test_skipped_lists_only_batches_handed_out(tmp_path):
    # A prefetched iteration that skips a sample is not reported before run() returns it.
    root = dataset(tmp_path, 8, bad={2})
    pipe = skip_pipe(root, 4)  # depth 2: while batch 1 is consumed, batch 2 is made
    pipe.run()
    pipe.run()
    for _ in range(500):  # until the background iteration 2 (c0/002 again) is done
        if pipe._executor._done.qsize():
            break
        time.sleep(0.01)
    assert [(s["file"], s["iteration"]) for s in pipe.skipped()] == [("c0/002.jpg", 0)]
    pipe.run()
    assert [s["iteration"] for s in pipe.skipped()] == [0, 2]
    pipe.close()


def test_skip_with_every_sample_bad_is_an_error_after_an_epoch(tmp_path):
    # a batch of bad samples only is replaced by the next batch (test_bad_data.py); when a
    # whole epoch is bad, nothing will get better: an error naming the files
    root = dataset(tmp_path, 4, bad={0, 1, 2, 3})
    with pytest.raises(DecodeError, match=r"3 iterations in a row had every sample skipped"):
        skip_pipe(root, 2).run()


def test_on_error_is_checked():
    pipe = Pipeline(batch_size=1, num_threads=1)
    with pytest.raises(ArgumentError, match="on_error='ignore'"):
        with pipe:
            fn.decoders.image(fn.readers.file(files=["x"])[0], on_error="ignore")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=600))
def test_decoder_on_random_bytes_raises_or_decodes(data):
    try:
        out = decode_cpu(np.frombuffer(data, np.uint8), types.RGB)
    except DecodeError:
        return
    assert out.ndim == 3 and out.dtype == np.uint8


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(_JPEG) - 1), st.integers(0, 255)), max_size=12),
    st.integers(16, len(_JPEG)),
)
def test_decoder_on_mutated_jpeg_raises_or_decodes(edits, length):
    data = bytearray(_JPEG[:length])
    for pos, value in edits:
        if pos < len(data):
            data[pos] = value
    try:
        out = decode_cpu(np.frombuffer(bytes(data), np.uint8), types.RGB)
    except DecodeError:
        return
    assert out.ndim == 3


def test_failed_pipeline_closes_and_frees_its_threads(tmp_path):
    root = dataset(tmp_path, 4, bad={1})
    before = set(threading.enumerate())
    pipe = Pipeline(batch_size=4, num_threads=3, seed=1)
    with pipe:
        pipe.set_outputs(fn.decoders.image(fn.readers.file(file_root=root)[0]))
    with pytest.raises(DecodeError, match="c1/001.jpg"):
        pipe.run()
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("dlpipe")]
    pipe.close()
    assert started and not any(t.is_alive() for t in started)


_CTRL_C_SCRIPT = """
import sys, time
import numpy as np
from dlpipe import Pipeline, fn

def slow(info):
    time.sleep(0.05)
    return np.zeros((4, 64, 64, 3), np.uint8)

pipe = Pipeline(batch_size=4, num_threads=3, prefetch_queue_depth=3)
with pipe:
    pipe.set_outputs(fn.cast(fn.external_source(slow, batch_info=True), dtype=np.float32))
print("started", flush=True)
while True:
    pipe.run()
"""


def test_ctrl_c_during_iteration_exits_promptly(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.5)  # iterating, with prefetched batches and busy workers
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err


def test_garbage_collection_stops_the_threads(tmp_path):
    import gc

    root = dataset(tmp_path, 4, bad=set())
    before = set(threading.enumerate())
    pipe = Pipeline(batch_size=4, num_threads=3, seed=1)
    with pipe:
        pipe.set_outputs(fn.decoders.image(fn.readers.file(file_root=root)[0]))
    pipe.run()
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("dlpipe")]
    del pipe
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started and not any(t.is_alive() for t in started)


_EXIT_SCRIPT = """
import sys
from dlpipe.cli import build_bench_pipeline

p = build_bench_pipeline("decode", sys.argv[1], "cpu", batch=4, threads=1, seed=0)
p.run()
p.run()  # exits with prefetched iterations still decoding, without close()
"""


def test_exit_without_close_is_clean(image_root):
    import subprocess
    import sys

    for _ in range(12):  # the abort this guards against hit one exit in three to eight
        out = subprocess.run(
            [sys.executable, "-c", _EXIT_SCRIPT, image_root],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr[-2000:]
