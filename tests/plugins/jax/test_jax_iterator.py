"""``dlpipe.plugins.jax.GenericIterator``: global arrays, shards, policies and the padding mask.

Every sample is a 4-byte file holding its own id (``make_files``); the expected ids of each
pipeline come from :class:`dlpipe.iterator.BaseIterator` over identical pipelines.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from dlpipe import ArgumentError  # noqa: E402
from dlpipe.iterator import BaseIterator  # noqa: E402
from dlpipe.plugins.jax import (  # noqa: E402
    DALIGenericIterator,
    GenericIterator,
    LastBatchPolicy,
)

pytestmark = pytest.mark.jax


def ids(x) -> list[int]:
    """Sample ids of a batch of 4-byte samples (numpy or jax), in order."""
    return np.ascontiguousarray(np.asarray(x)).view(np.int32).reshape(-1).tolist()


FILL, DROP, PARTIAL = LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL


@pytest.fixture(scope="module")
def devices():
    devs = jax.devices("cpu")  # CPU devices even where JAX defaults to a GPU
    if len(devs) < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    return devs[:4]


@pytest.fixture(scope="module")
def sharding(devices):
    return NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))


def shard_ids(arr) -> dict[int, list[int]]:
    """Device index -> the sample ids of that device's shard."""
    return {s.device.id: ids(s.data) for s in arr.addressable_shards}


def shard_mask(arr) -> dict[int, list[bool]]:
    return {s.device.id: np.asarray(s.data).tolist() for s in arr.addressable_shards}


def test_single_pipeline_gives_the_plain_array(reader_pipe, make_files):
    root, _ = make_files(7, classes=2)
    it = GenericIterator(reader_pipe(root, 3), ["data", "label"], reader_name="Reader")
    assert DALIGenericIterator is GenericIterator
    batch = next(it)
    assert isinstance(batch, dict) and list(batch) == ["data", "label"]
    assert isinstance(batch["data"], jax.Array)
    assert batch["data"].shape == (3, 4) and batch["data"].dtype == np.uint8
    assert ids(batch["data"]) == [0, 2, 4]  # class folders c0 (even ids), c1 (odd)
    assert batch["label"].shape == (3, 1) and batch["label"].dtype == np.int32
    assert np.asarray(batch["label"]).ravel().tolist() == [0, 0, 0]
    assert not batch["data"].committed  # a CPU pipeline: JAX's default device, uncommitted
    assert np.asarray(it.is_nonpadding).tolist() == [True] * 3
    assert len(it) == 3 and len(list(it)) == 2


@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
def test_sharded_global_array_matches_the_base_iterator(make_files, pipes, sharding, policy, pad):
    # N=26 over 4 shards of 6, 7, 6, 7 (DALI issue #3855's numbers), B=3: uneven last batches,
    # shards that run out one step before others, and shard rotation between epochs.
    root, _ = make_files(26)
    kw = dict(reader_name="Reader", last_batch_policy=policy, auto_reset=True)
    it = GenericIterator(pipes(root, 3, pad=pad), ["data", "label"], sharding=sharding, **kw)
    ref = BaseIterator(pipes(root, 3, pad=pad), ["data", "label"], **kw)
    assert len(it) == len(ref)
    for _epoch in range(3):
        want_epoch = [[ids(d["data"]) for d in step] for step in ref]
        got_epoch = []
        for batch in it:
            data, mask = batch["data"], it.is_nonpadding
            assert data.shape == (12, 4) and data.sharding == sharding
            assert batch["label"].shape == (12, 1) and batch["label"].sharding == sharding
            assert mask.shape == (12,) and mask.dtype == np.bool_
            assert mask.sharding.is_equivalent_to(sharding, 1)
            per_dev, per_mask = shard_ids(data), shard_mask(mask)
            step = []
            for dev in sharding.mesh.devices.flat:
                got, real = per_dev[dev.id], per_mask[dev.id]
                n = sum(real)
                assert real == [True] * n + [False] * (3 - n)
                if policy != PARTIAL:
                    assert n == 3
                if n:
                    assert got[n:] == [got[n - 1]] * (3 - n)  # padding repeats the last real one
                    step.append(got[:n])
                else:
                    assert len(set(got)) == 1  # no real sample: copies of another shard's last
            got_epoch.append(step)
        assert got_epoch == want_epoch


def test_partial_last_batch_pads_and_masks(make_files, pipes, devices):
    root, _ = make_files(26)
    it = GenericIterator(
        pipes(root, 6, pad=True),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=PARTIAL,
        devices=devices,
    )
    # No sharding: a leading pipeline axis (what device_put_sharded gave, for pmap).
    first = next(it)
    assert first["data"].shape == (4, 6, 4)
    assert np.asarray(it.is_nonpadding).all()
    last = next(it)
    # a pipeline without a real sample repeats the nearest earlier pipeline's last one
    assert ids(last["data"]) == [12] * 18 + [25] * 6
    # shards 0..3 hold 6, 7, 6, 7 samples: only shards 1 and 3 have one left for batch 2
    assert np.asarray(it.is_nonpadding).astype(int).tolist() == [
        [0] * 6,
        [1] + [0] * 5,
        [0] * 6,
        [1] + [0] * 5,
    ]
    assert ids(last["data"][1]) == [12] * 6 and ids(last["data"][3]) == [25] * 6
    assert it.is_nonpadding.sharding == last["data"].sharding
    assert last["data"].devices() == set(devices)
    with pytest.raises(StopIteration):
        next(it)


def test_nonpadding_as_a_dict_entry(make_files, pipes, sharding):
    root, _ = make_files(26)
    it = GenericIterator(
        pipes(root, 6, pad=True),
        ["is_nonpadding", "data", "label"],
        reader_name="Reader",
        last_batch_policy="PARTIAL",
        sharding=sharding,
    )
    batches = list(it)
    assert [list(b) for b in batches] == [["is_nonpadding", "data", "label"]] * 2
    assert batches[1]["is_nonpadding"] is it.is_nonpadding
    assert np.asarray(batches[1]["is_nonpadding"]).reshape(4, 6)[:, 0].tolist() == [
        False,
        True,
        False,
        True,
    ]
    assert batches[0]["is_nonpadding"].sharding == sharding
    real = np.asarray(batches[1]["is_nonpadding"])
    assert sorted(ids(batches[0]["data"]) + list(np.array(ids(batches[1]["data"]))[real])) == (
        list(range(26))
    )


def test_size_without_reader_name(reader_pipe, make_files, devices):
    root, _ = make_files(10)
    with pytest.warns(UserWarning, match="reader_name"):
        it = GenericIterator(
            [reader_pipe(root, 2), reader_pipe(root, 2)],
            ["data", "label"],
            size=10,
            last_batch_policy=PARTIAL,
            devices=devices[:2],
        )
    steps = list(it)
    assert len(steps) == 3
    # Both pipelines read all 10 files; the epoch's 10 samples are steps 0-1 of both
    # pipelines and step 2 of pipeline 0: pipeline 1's last batch is all padding.
    assert np.asarray(it.is_nonpadding).tolist() == [[True, True], [False, False]]
    assert steps[-1]["data"].shape == (2, 2, 4)
    assert ids(steps[-1]["data"]) == [4, 5, 5, 5]
    assert steps[-1]["data"].devices() == set(devices[:2])


def test_pipelines_on_one_device_are_stacked(reader_pipe, make_files):
    root, _ = make_files(8)
    dev = jax.devices()[0]
    it = GenericIterator(
        [reader_pipe(root, 2, 0, 2), reader_pipe(root, 2, 1, 2)],
        ["data", "label"],
        reader_name="Reader",
        devices=[dev, dev],
    )
    batch = next(it)
    assert batch["data"].shape == (2, 2, 4) and batch["data"].devices() == {dev}
    assert ids(batch["data"]) == [0, 1, 4, 5]


def test_argument_errors(make_files, pipes, sharding, devices):
    root, _ = make_files(8)
    with pytest.raises(ArgumentError, match="sharding=.*NamedSharding"):
        GenericIterator(pipes(root, 2), ["data", "label"], reader_name="Reader", sharding="x")
    with pytest.raises(ArgumentError, match="4 devices in this process, but 2 pipelines"):
        GenericIterator(
            pipes(root, 2, n=2), ["data", "label"], reader_name="Reader", sharding=sharding
        )
    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    with pytest.raises(ArgumentError, match="must split the batch axis"):
        GenericIterator(
            pipes(root, 2), ["data", "label"], reader_name="Reader", sharding=replicated
        )
    with pytest.raises(ArgumentError, match="one device per pipeline"):
        GenericIterator(
            pipes(root, 2), ["data", "label"], reader_name="Reader", devices=devices[:3]
        )
    with pytest.raises(ArgumentError, match="output_map"):
        GenericIterator(pipes(root, 2, n=1), ["is_nonpadding"], reader_name="Reader")
    with pytest.raises(ArgumentError, match="last_batch_policy=7"):
        GenericIterator(
            pipes(root, 2, n=1), ["data", "label"], reader_name="Reader", last_batch_policy=7
        )


def test_epochs_reset_and_auto_reset(make_files, pipes, sharding):
    root, _ = make_files(16)
    it = GenericIterator(
        pipes(root, 2, pad=True, stick_to_shard=True),
        ["data", "label"],
        reader_name="Reader",
        sharding=sharding,
        prepare_first_batch=False,
    )
    first = [ids(b["data"]) for b in it]
    assert first == [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]]
    with pytest.raises(StopIteration):
        next(it)
    it.reset()
    assert [ids(b["data"]) for b in it] == first
    assert [ids(b["data"]) for b in it] == first  # a new for-loop resets too
