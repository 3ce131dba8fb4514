"""The JAX iterators resume exactly from their checkpoints (the reusable check), also through
``@data_iterator(...)(checkpoints=...)`` over 4 devices."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from conftest import (  # noqa: E402
    check_iterator_checkpoint_resumes,
    file_reader_pipe,
    iterate_with_epochs,
)
from dlpipe import ArgumentError, fn  # noqa: E402
from dlpipe.plugins.jax import GenericIterator, LastBatchPolicy, data_iterator  # noqa: E402

pytestmark = pytest.mark.jax


def checkpointed_pipe(batch_size, root, checkpoints):
    """A shuffling file reader with checkpointing, restored from ``checkpoints[0]`` if given."""
    checkpoint = None if checkpoints is None else checkpoints[0]
    return file_reader_pipe(
        batch_size,
        seed=2,
        pipe_kw={"enable_checkpointing": True, "checkpoint": checkpoint},
        file_root=root,
        random_shuffle=True,
    )


@pytest.mark.parametrize("stop", [0, 3, 7])
def test_generic_iterator_resumes_exactly(make_files, stop):
    root, _ = make_files(13)

    def make_pipes(checkpoints=None):
        return [checkpointed_pipe(4, root, checkpoints)]

    def make_iter(pipes):
        return GenericIterator(
            pipes,
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
        )

    check_iterator_checkpoint_resumes(make_pipes, make_iter, stop, 10)


def test_data_iterator_restores_one_checkpoint_per_device(make_files):
    if len(jax.devices()) != 4:
        pytest.skip("needs the 4 virtual CPU devices of this folder's conftest")
    root, _ = make_files(40)
    sharding = NamedSharding(Mesh(jax.devices(), ("batch",)), PartitionSpec("batch"))

    @data_iterator(output_map=["data"], reader_name="Reader", sharding=sharding)
    def loader(shard_id, num_shards):
        data, _ = fn.readers.file(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=True,
            initial_fill=4,
            name="Reader",
        )
        return data

    want = iterate_with_epochs(loader(batch_size=8, seed=1, enable_checkpointing=True), 9)
    it = loader(batch_size=8, seed=1, enable_checkpointing=True)
    assert iterate_with_epochs(it, 4) == want[:4]
    cps = it.checkpoints()
    assert len(cps) == 4
    assert iterate_with_epochs(loader(batch_size=8, seed=1, checkpoints=cps), 5) == want[4:]
    with pytest.raises(ArgumentError, match="one per device"):
        loader(batch_size=8, checkpoints=cps[:2])


def test_peekable_checkpoints_refuse_a_peeked_batch(make_files):
    """A peeked batch is not consumed yet: a checkpoint then would skip it on resume, so
    checkpoints() raises until next() takes it; afterwards the resume is exact."""
    from dlpipe import PipelineError
    from dlpipe.plugins.jax import PeekableIterator

    root, _ = make_files(9)

    def make_pipes(checkpoints=None):
        return [checkpointed_pipe(2, root, checkpoints)]

    def make_iter(pipes):
        return PeekableIterator(pipes, ["data", "label"], reader_name="Reader")

    want = iterate_with_epochs(make_iter(make_pipes()), 8)
    it = make_iter(make_pipes())
    next(it)
    it.peek()
    with pytest.raises(PipelineError, match="peek"):
        it.checkpoints()
    next(it)
    restored = make_iter(make_pipes(it.checkpoints()))
    assert iterate_with_epochs(restored, 6) == want[2:]
