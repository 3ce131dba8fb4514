"""JAX plugin tests run on 4 virtual CPU devices: the XLA flag must be set before JAX loads."""

from __future__ import annotations

import os

_FLAG = "--xla_force_host_platform_device_count=4"
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} {_FLAG}".strip()

import pytest  # noqa: E402


def _reader_pipe(root, batch_size, shard_id=0, num_shards=1, pad=False, **reader):
    from dlpipe import Pipeline, fn

    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=7)
    with pipe:
        data, label = fn.readers.file(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            pad_last_batch=pad,
            name="Reader",
            **reader,
        )
        pipe.set_outputs(data, label)
    return pipe


@pytest.fixture
def reader_pipe():
    """``reader_pipe(root, batch_size, shard_id=0, num_shards=1, pad=False, **reader)``: a CPU
    pipeline of raw file bytes and labels (``make_files``: each file holds its id)."""
    return _reader_pipe


@pytest.fixture
def pipes():
    """``pipes(root, batch_size, n=4, pad=False, **reader)``: one reader pipeline per shard."""

    def make(root, batch_size, n=4, pad=False, **reader):
        return [_reader_pipe(root, batch_size, k, n, pad, **reader) for k in range(n)]

    return make
