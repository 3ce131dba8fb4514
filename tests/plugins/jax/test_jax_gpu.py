"""The GPU branch: batches of a GPU pipeline reach JAX zero-copy through DLPack.

Runs on the GPU machine (marker ``gpu``; needs CuPy and a CUDA-enabled JAX).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from dlpipe import Pipeline, fn  # noqa: E402
from dlpipe.plugins.jax import GenericIterator, data_iterator  # noqa: E402

pytestmark = [pytest.mark.jax, pytest.mark.gpu]


def ids(x) -> list[int]:
    """Sample ids of a batch of 4-byte samples (numpy or jax), in order."""
    return np.ascontiguousarray(np.asarray(x)).view(np.int32).reshape(-1).tolist()


@pytest.fixture(scope="module")
def gpus():
    devs = [d for d in jax.devices() if d.platform == "gpu"]
    if not devs:
        pytest.skip("JAX sees no GPU (install jax[cuda12])")
    return devs


def gpu_pipe(root, batch_size, device_id, shard_id=0, num_shards=1):
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=device_id, seed=7)
    with pipe:
        data, label = fn.readers.file(
            file_root=root, shard_id=shard_id, num_shards=num_shards, name="Reader"
        )
        pipe.set_outputs(data.gpu(), label)
    return pipe


def test_gpu_batches_land_on_the_pipeline_gpu(make_files, gpus):
    root, _ = make_files(8)
    it = GenericIterator(gpu_pipe(root, 4, 0), ["data", "label"], reader_name="Reader")
    batches = list(it)
    assert [ids(b["data"]) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batches[0]["data"].devices() == {jax.local_devices()[0]}
    assert batches[0]["label"].devices() == {jax.local_devices()[0]}  # CPU output, put there


def test_gpu_partial_padding_on_device(make_files, gpus):
    root, _ = make_files(6)
    mesh = Mesh(np.array(gpus[:1]), ("b",))
    it = GenericIterator(
        gpu_pipe(root, 4, 0),
        ["data", "label", "is_nonpadding"],
        reader_name="Reader",
        last_batch_policy="PARTIAL",
        sharding=NamedSharding(mesh, PartitionSpec("b")),
    )
    batches = list(it)
    assert ids(batches[1]["data"]) == [4, 5, 5, 5]
    assert np.asarray(batches[1]["is_nonpadding"]).tolist() == [True, True, False, False]


@pytest.mark.multi_gpu
def test_data_iterator_one_pipeline_per_gpu(make_files, gpus):
    if len(gpus) < 2:
        pytest.skip("needs 2 GPUs")
    root, _ = make_files(16)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("b",)), PartitionSpec("b"))

    @data_iterator(output_map=["data", "label"], reader_name="Reader", sharding=sharding)
    def loader(root, shard_id, num_shards):
        data, label = fn.readers.file(
            file_root=root, shard_id=shard_id, num_shards=num_shards, name="Reader"
        )
        return data.gpu(), label

    n = jax.device_count()
    it = loader(root, batch_size=2 * n, num_threads=1)
    assert [p.device_id for p in it._pipes] == list(range(n))
    batch = next(it)
    for s in batch["data"].addressable_shards:
        k = jax.devices().index(s.device)
        assert all(16 * k // n <= x < 16 * (k + 1) // n for x in ids(s.data))
