"""``@data_iterator``: one pipeline per device, shard ids, global batch, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from dlpipe import ArgumentError, fn  # noqa: E402
from dlpipe.plugins.jax import GenericIterator, data_iterator  # noqa: E402

pytestmark = pytest.mark.jax


def ids(x) -> list[int]:
    """Sample ids of a batch of 4-byte samples (numpy or jax), in order."""
    return np.ascontiguousarray(np.asarray(x)).view(np.int32).reshape(-1).tolist()


@pytest.fixture(scope="module")
def sharding():
    if len(jax.devices()) != 4:
        pytest.skip("needs exactly 4 JAX devices (XLA_FLAGS in this folder's conftest)")
    return NamedSharding(Mesh(jax.devices(), ("batch",)), PartitionSpec("batch"))


def sharded_reader(root, shard_id, num_shards):
    return fn.readers.file(file_root=root, shard_id=shard_id, num_shards=num_shards, name="Reader")


def test_sharding_makes_one_pipeline_per_device(make_files, sharding):
    root, _ = make_files(32)
    make = data_iterator(
        sharded_reader,
        output_map=["data", "label"],
        reader_name="Reader",
        sharding=sharding,
        auto_reset=True,
    )
    it = make(root, batch_size=8, num_threads=1, seed=3)
    assert isinstance(it, GenericIterator)
    assert [p.batch_size for p in it._pipes] == [2] * 4  # the global batch over 4 devices
    assert [p.device_id for p in it._pipes] == [None] * 4  # CPU devices: CPU pipelines
    assert len(it) == 4
    for epoch in range(2):
        seen = []
        for batch in it:
            assert batch["data"].shape == (8, 4) and batch["data"].sharding == sharding
            for s in batch["data"].addressable_shards:
                k = (jax.devices().index(s.device) + epoch) % 4  # shards rotate per epoch
                got = ids(s.data)
                assert all(8 * k <= x < 8 * (k + 1) for x in got), (s.device, got)
                seen += got
        assert sorted(seen) == list(range(32))


def test_no_sharding_gives_one_pipeline(make_files):
    root, _ = make_files(6)

    @data_iterator(output_map=["data", "label"], reader_name="Reader")
    def loader(root):
        return fn.readers.file(file_root=root, name="Reader")

    it = loader(root, batch_size=3, num_threads=1)
    assert len(it._pipes) == 1 and it._pipes[0].num_threads == 1
    assert [ids(b["data"]) for b in it] == [[0, 1, 2], [3, 4, 5]]
    assert loader.__name__ == "loader"


def test_devices_give_a_leading_device_axis(make_files):
    root, _ = make_files(8)
    cpus = jax.devices("cpu")[:2]  # also where JAX defaults to a GPU
    if len(cpus) < 2:
        pytest.skip("needs 2 CPU devices")

    @data_iterator(output_map=["data", "label"], reader_name="Reader", devices=cpus)
    def loader(root, shard_id, num_shards):
        return sharded_reader(root, shard_id, num_shards)

    it = loader(root, batch_size=4)
    assert [p.num_threads for p in it._pipes] == [4, 4]  # DALI's default
    batch = next(it)
    assert batch["data"].shape == (2, 2, 4)
    assert ids(batch["data"]) == [0, 1, 4, 5]
    assert batch["data"].devices() == set(cpus)


def test_argument_errors(make_files, sharding):
    root, _ = make_files(8)
    with pytest.raises(ValueError, match="exclude each other"):
        data_iterator(output_map=["data"], sharding=sharding, devices=jax.devices())
    with pytest.raises(ArgumentError, match="'plain' must accept shard_id and num_shards"):

        @data_iterator(output_map=["data", "label"], sharding=sharding)
        def plain(root):
            return fn.readers.file(file_root=root)

    make = data_iterator(sharded_reader, output_map=["data", "label"], sharding=sharding)
    with pytest.raises(ArgumentError, match="batch_size=6 .* multiple of the 4 devices"):
        make(root, batch_size=6)
    with pytest.raises(ArgumentError, match="batch_size= .* is required"):
        make(root)
    with pytest.raises(ArgumentError, match=r"\['shard_id'\] are set per device"):
        make(root, batch_size=8, shard_id=1)
