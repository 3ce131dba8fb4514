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
