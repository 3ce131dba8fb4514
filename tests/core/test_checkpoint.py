"""Checkpoints: stop anywhere, restore, and the stream continues exactly (hypothesis picks
where), for readers, random operators and external sources; plus the error cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import check_checkpoint_resumes
from dlpipe import Pipeline, PipelineError, fn

SETTINGS = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def file_pipe(root, depth=2, **reader_args):
    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3,
            num_threads=2,
            seed=17,
            prefetch_queue_depth=depth,
            enable_checkpointing=True,
            checkpoint=checkpoint,
        )
        with pipe:
            data, label = fn.readers.file(file_root=root, name="Reader", **reader_args)
            pipe.set_outputs(data, label)
        return pipe

    return make


@SETTINGS
@given(stop=st.integers(0, 12), depth=st.integers(1, 3))
def test_file_reader_shuffle_buffer_and_padding(make_files, stop, depth):
    root, _ = make_files(11)
    make = file_pipe(
        root,
        depth,
        random_shuffle=True,
        initial_fill=5,
        num_shards=2,
        shard_id=1,
        pad_last_batch=True,
    )
    check_checkpoint_resumes(make, stop, 14)


@SETTINGS
@given(stop=st.integers(0, 12))
def test_file_reader_shuffle_after_epoch(make_files, stop):
    root, _ = make_files(10)
    check_checkpoint_resumes(file_pipe(root, shuffle_after_epoch=True, num_shards=3), stop, 14)


@SETTINGS
@given(stop=st.integers(0, 8))
def test_random_operators_and_decoder_crop(image_root, stop):
    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=4, num_threads=3, seed=5, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            jpegs, _ = fn.readers.file(file_root=image_root, random_shuffle=True)
            images = fn.decoders.image_random_crop(jpegs)
            images = fn.resize(images, size=(16, 16))
            flip = fn.random.coin_flip()
            pipe.set_outputs(images, flip, fn.random.uniform(range=(0, 10)))
        return pipe

    check_checkpoint_resumes(make, stop, 9)


@SETTINGS
@given(stop=st.integers(0, 6))
def test_external_source_callable(stop):
    def source(info):
        return np.full((2, 1), 10 * info.epoch_idx + info.iteration, np.int64)

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=2, num_threads=1, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            pipe.set_outputs(fn.external_source(source, batch_info=True))
        return pipe

    check_checkpoint_resumes(make, stop, 7)


def test_checkpoint_file_and_errors(make_files, tmp_path):
    root, _ = make_files(6)
    make = file_pipe(root, random_shuffle=True)
    pipe = make()
    pipe.run()
    path = str(tmp_path / "ckpt.json")
    data = pipe.checkpoint(path)
    with open(path, "rb") as f:
        assert f.read() == data
    restored = make(checkpoint=path)
    np.testing.assert_array_equal(restored.run()[0].at(0), pipe.run()[0].at(0))

    plain = Pipeline(batch_size=1, num_threads=1)
    with pytest.raises(PipelineError, match="enable_checkpointing"):
        plain.checkpoint()
    with pytest.raises(ValueError, match="enable_checkpointing=True"):
        Pipeline(batch_size=1, checkpoint=data)
    other = Pipeline(batch_size=3, num_threads=1, enable_checkpointing=True, checkpoint=data)
    with other:
        other.set_outputs(fn.random.coin_flip())
    with pytest.raises(PipelineError, match="another pipeline"):
        other.build()
    bad = Pipeline(batch_size=3, num_threads=1, enable_checkpointing=True, checkpoint=b"{}")
    with bad:
        bad.set_outputs(fn.random.coin_flip())
    with pytest.raises(PipelineError, match="not a dlpipe checkpoint"):
        bad.build()


def _steps(pipe, n: int, out: list | None = None) -> list:
    """``n`` runs; an epoch end is recorded as "END" and the pipeline reset."""
    out = [] if out is None else out
    while len(out) < n:
        try:
            out.append(int(pipe.run()[0].at(0)[0]))
        except StopIteration:
            out.append("END")
            pipe.reset()
    return out


@pytest.mark.parametrize("depth", [1, 3])
def test_external_source_checkpoint_across_epoch_ends(depth):
    # A checkpoint taken right after reset() resumes in the new epoch, not at the old end.
    def source(info):
        if info.iteration >= 3:
            raise StopIteration
        return np.full((2, 1), 10 * info.epoch_idx + info.iteration, np.int64)

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=2,
            num_threads=1,
            prefetch_queue_depth=depth,
            enable_checkpointing=True,
            checkpoint=checkpoint,
        )
        with pipe:
            pipe.set_outputs(fn.external_source(source, batch_info=True))
        return pipe

    want = _steps(make(), 14)
    assert want[:5] == [0, 1, 2, "END", 10]
    for stop in range(12):
        first = make()
        assert _steps(first, stop) == want[:stop]
        data = first.checkpoint()
        first.close()
        restored = make(checkpoint=data)
        assert _steps(restored, 14 - stop) == want[stop:], stop
        restored.close()


@pytest.mark.parametrize("kind", ["no_argument", "iterable"])
def test_sources_that_cannot_be_restored_warn_and_start_over(kind):
    # DALI restores only single-argument callables; the others warn and start over.
    def make(checkpoint=None):
        counter = iter(range(100))
        source = (lambda: np.full((2, 1), next(counter))) if kind == "no_argument" else None
        if source is None:
            source = [np.full((2, 1), i) for i in range(100)]
        pipe = Pipeline(
            batch_size=2, num_threads=1, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            pipe.set_outputs(fn.external_source(source))
        return pipe

    first = make()
    first.run()
    first.run()
    data = first.checkpoint()
    with pytest.warns(UserWarning, match="starts over"):
        restored = make(checkpoint=data)
        restored.build()
    assert restored.run()[0].at(0).tolist() == [0]
