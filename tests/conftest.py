"""Shared fixtures: small synthetic datasets made once per session, and the GPU skip."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dlpipe import Pipeline, fn
from dlpipe.synthetic import make_dataset


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
    for item in items:
        marked = item.get_closest_marker("gpu") or item.get_closest_marker("multi_gpu")
        if marked and not HAS_GPU:  # markers, not keywords: "gpu" is also a folder name
            item.add_marker(skip)


@pytest.fixture(scope="session")
def image_root(tmp_path_factory) -> str:
    """4 classes x 8 JPEGs of 40-96 px (small, so tests are fast)."""
    root = str(tmp_path_factory.mktemp("images"))
    return make_dataset(root, num_classes=4, per_class=8, size_range=(40, 96), seed=1)


@pytest.fixture
def make_files(tmp_path):
    """Write N tiny files whose content is their index, returning (root, names)."""

    def make(n: int, classes: int = 1) -> tuple[str, list[str]]:
        names = []
        for i in range(n):
            sub = f"c{i % classes}"
            os.makedirs(tmp_path / sub, exist_ok=True)
            name = f"{sub}/f{i:05d}.jpg"
            (tmp_path / name).write_bytes(np.int32(i).tobytes())
            names.append(name)
        return str(tmp_path), names

    return make


def sample_ids(tl) -> list[int]:
    """Decode the sample ids written by ``make_files`` from a batch of raw bytes."""
    return [int(np.frombuffer(tl.at(i).tobytes(), np.int32)[0]) for i in range(len(tl))]


def ids_of(pipe, batches: int) -> list[int]:
    """The ids in the first output (one int per sample) of ``batches`` runs of ``pipe``."""
    out = []
    for _ in range(batches):
        ids = pipe.run()[0]
        out += [int(ids.at(i)[0]) for i in range(len(ids))]
    return out


def file_reader_pipe(batch_size=1, seed=7, num_threads=1, pipe_kw=None, **reader_args):
    """A CPU pipeline of ``fn.readers.file(name="Reader", **reader_args)``: (data, labels)."""
    pipe = Pipeline(
        batch_size=batch_size, num_threads=num_threads, device_id=None, seed=seed, **(pipe_kw or {})
    )
    with pipe:
        data, labels = fn.readers.file(name="Reader", **reader_args)
        pipe.set_outputs(data, labels)
    return pipe


def file_reader_ids(make_files, n, batch_size, batches, **kw):
    """The ids ``fn.readers.file`` (``**kw``) reads from ``n`` files of ``make_files`` in
    ``batches`` batches, and its reader_meta: the reference other readers' sharding matches."""
    root, _ = make_files(n)
    pipe = file_reader_pipe(batch_size, seed=3, file_root=root, **kw)
    out = []
    for _ in range(batches):
        data, _ = pipe.run()
        out += sample_ids(data)
    return out, pipe.reader_meta("Reader")


def batch_values(outputs) -> list:
    """A pipeline's outputs as plain nested lists (comparable across runs)."""
    return [[np.asarray(tl.as_cpu().at(i)).tolist() for i in range(len(tl))] for tl in outputs]


def check_checkpoint_resumes(make_pipe, stop: int, total: int) -> None:
    """The reusable checkpoint check: run ``stop`` batches, checkpoint, restore into a fresh
    pipeline and compare its next ``total - stop`` batches with an uninterrupted run.

    ``make_pipe(checkpoint=None)`` must build the same pipeline with
    ``enable_checkpointing=True`` (and ``checkpoint=`` passed through).
    """
    reference = make_pipe()
    want = [batch_values(reference.run()) for _ in range(total)]
    first = make_pipe()
    for _ in range(stop):
        first.run()
    data = first.checkpoint()
    first.close()
    restored = make_pipe(checkpoint=data)
    assert restored.is_restored_from_checkpoint
    got = [batch_values(restored.run()) for _ in range(total - stop)]
    assert got == want[stop:]
    restored.close()
    reference.close()


def iterate_with_epochs(it, steps: int) -> list:
    """``steps`` calls of next(it); an epoch end is recorded as "END" and the iterator reset."""
    out = []
    while len(out) < steps:
        try:
            batch = next(it)
        except StopIteration:
            out.append("END")
            it.reset()
            continue
        dicts = batch if isinstance(batch, list) else [batch]
        out.append([{k: np.asarray(v).tolist() for k, v in d.items()} for d in dicts])
    return out


def check_iterator_checkpoint_resumes(make_pipes, make_iter, stop: int, total: int) -> None:
    """The reusable check for iterators (every plugin): take ``stop`` steps (epoch ends
    included), checkpoint, restore into fresh pipelines and a fresh iterator, and compare the
    next ``total - stop`` steps with an uninterrupted run.

    ``make_pipes(checkpoints=None)`` returns the list of pipelines (built with
    ``enable_checkpointing=True``, pipeline i restored from ``checkpoints[i]`` when given);
    ``make_iter(pipes)`` wraps them in the iterator under test.
    """
    want = iterate_with_epochs(make_iter(make_pipes()), total)
    it = make_iter(make_pipes())
    head = iterate_with_epochs(it, stop)
    assert head == want[:stop]
    restored = make_iter(make_pipes(it.checkpoints()))
    assert iterate_with_epochs(restored, total - stop) == want[stop:]
