"""Shared fixtures: small synthetic datasets made once per session, and the GPU skip."""

from __future__ import annotations

import os

import numpy as np
import pytest

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
        if ("gpu" in item.keywords or "multi_gpu" in item.keywords) and not HAS_GPU:
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
