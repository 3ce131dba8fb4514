"""Host memory stays flat over many epochs, and prefetching never runs ahead of the depth."""

from __future__ import annotations

import gc
import os
import time

import pytest

from dlpipe import Pipeline, fn


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def decode_pipe(root, depth=2):
    pipe = Pipeline(batch_size=8, num_threads=2, seed=0, prefetch_queue_depth=depth)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.resize(fn.decoders.image(jpegs), size=(64, 64))
        pipe.set_outputs(images, labels)
    return pipe


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_host_memory_is_flat_over_50_epochs(image_root):
    pipe = decode_pipe(image_root)
    per_epoch = pipe.epoch_size("Reader") // 8
    for _ in range(5 * per_epoch):  # warm-up: allocator pools, thread stacks
        pipe.run()
    gc.collect()
    start = rss_mb()
    for _ in range(50 * per_epoch):
        images, _ = pipe.run()
        images.as_tensor()
    gc.collect()
    growth = rss_mb() - start
    assert growth < 25, f"RSS grew by {growth:.1f} MB over 50 epochs"


def test_prefetch_is_bounded_by_the_queue_depth(image_root):
    pipe = decode_pipe(image_root, depth=3)
    pipe.run()  # schedules the depth (3 iterations) and takes one
    ex = pipe._executor
    deadline = time.monotonic() + 30
    while ex._done.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # time to run further ahead, if it could
    assert ex.pending() == 2 and ex._done.qsize() == 2
    assert ex.profiler.stats()["stages"]["cpu"]["iterations"] == 3
