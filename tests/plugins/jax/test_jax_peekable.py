"""The CLU-compatible peekable iterator: peek, peek_async, thread-safe next, element_spec."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from dlpipe import fn  # noqa: E402
from dlpipe.plugins.jax import (  # noqa: E402
    DALIGenericPeekableIterator,
    PeekableIterator,
    peekable_data_iterator,
)
from dlpipe.plugins.jax.clu import ArraySpec  # noqa: E402

pytestmark = pytest.mark.jax


def ids(x) -> list[int]:
    """Sample ids of a batch of 4-byte samples (numpy or jax), in order."""
    return np.ascontiguousarray(np.asarray(x)).view(np.int32).reshape(-1).tolist()


def test_peek_returns_the_next_batch(reader_pipe, make_files):
    root, _ = make_files(6)
    it = PeekableIterator(reader_pipe(root, 2), ["data", "label"], reader_name="Reader")
    assert DALIGenericPeekableIterator is PeekableIterator
    assert ids(it.peek()["data"]) == [0, 1]
    assert ids(it.peek()["data"]) == [0, 1]  # peeking twice does not advance
    assert ids(next(it)["data"]) == [0, 1]
    future = it.peek_async()
    assert ids(future.result(timeout=30)["data"]) == [2, 3]
    assert ids(next(it)["data"]) == [2, 3]
    assert ids(next(it)["data"]) == [4, 5]
    with pytest.raises(StopIteration):
        it.peek()
    with pytest.raises(StopIteration):
        next(it)
    it.reset()
    assert ids(it.peek()["data"]) == [0, 1]
    assert [ids(b["data"]) for b in it] == [[0, 1], [2, 3], [4, 5]]


def test_element_spec(reader_pipe, make_files):
    root, _ = make_files(8)
    it = PeekableIterator(
        reader_pipe(root, 4),
        ["data", "label", "is_nonpadding"],
        reader_name="Reader",
        prepare_first_batch=False,
    )
    spec = it.element_spec  # peeks: no batch was prepared
    assert spec == {
        "data": ArraySpec(dtype=np.dtype(np.uint8), shape=(4, 4)),
        "label": ArraySpec(dtype=np.dtype(np.int32), shape=(4, 1)),
        "is_nonpadding": ArraySpec(dtype=np.dtype(np.bool_), shape=(4,)),
    }
    assert ids(next(it)["data"]) == [0, 1, 2, 3]


def test_sharded_partial_keeps_the_spec(make_files):
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices")
    root, _ = make_files(10)
    mesh = Mesh(jax.devices()[:4], ("b",))

    @peekable_data_iterator(
        output_map=["data", "label"],
        reader_name="Reader",
        last_batch_policy="PARTIAL",
        sharding=NamedSharding(mesh, PartitionSpec("b")),
    )
    def loader(root, shard_id, num_shards):
        return fn.readers.file(
            file_root=root, shard_id=shard_id, num_shards=num_shards, name="Reader"
        )

    it = loader(root, batch_size=8, num_threads=1)
    assert isinstance(it, PeekableIterator)
    assert it.element_spec["data"].shape == (8, 4)
    batches = list(it)  # shards of 2, 3, 2, 3: the last batch is padded, the spec unchanged
    assert len(batches) == 2
    assert np.asarray(it.is_nonpadding).tolist() == [False, False, True, False] * 2


def test_shape_change_raises(reader_pipe, tmp_path):
    os.makedirs(tmp_path / "c0")
    for i in range(4):  # batch 0: 4-byte files, batch 1: 8-byte files
        (tmp_path / "c0" / f"f{i}.jpg").write_bytes(b"\0" * (4 if i < 2 else 8))
    it = PeekableIterator(reader_pipe(str(tmp_path), 2), ["data", "label"], reader_name="Reader")
    next(it)
    with pytest.raises(ValueError, match=r"'data' changed from shape \(2, 4\).* to shape \(2, 8\)"):
        next(it)


def test_next_is_thread_safe(reader_pipe, make_files):
    root, _ = make_files(40)
    it = PeekableIterator(reader_pipe(root, 2), ["data", "label"], reader_name="Reader")
    got: list[int] = []
    errors: list[BaseException] = []

    def drain():
        try:
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    return
                it.peek_async()
                got.extend(ids(batch["data"]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=drain) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert sorted(got) == list(range(40))


@pytest.mark.parametrize("n", [4, 6])
def test_peek_before_a_loop_neither_warns_nor_mixes_epochs(reader_pipe, make_files, caplog, n):
    """CLU code reads ``element_spec`` (a peek) and then loops: the peeked batch is the loop's
    first, nothing is logged, and every epoch is exactly the shard (also with one batch per
    epoch, where the peek took the whole epoch)."""
    root, _ = make_files(n)
    it = PeekableIterator(
        reader_pipe(root, n if n == 4 else 2),
        ["data", "label"],
        reader_name="Reader",
        prepare_first_batch=False,
    )
    with caplog.at_level("WARNING"):
        assert it.element_spec["data"].shape[0] == (n if n == 4 else 2)
        epoch = [ids(b["data"]) for b in it]
        assert sorted(sum(epoch, [])) == list(range(n))
        it.reset()
        it.peek()
        assert [ids(b["data"]) for b in it] == epoch
    assert not caplog.records
