"""Iterator checkpoints: stop after any step (epoch ends too), restore, identical stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import check_iterator_checkpoint_resumes
from dlpipe import Pipeline, PipelineError, fn
from dlpipe.iterator import BaseIterator, LastBatchPolicy


def pipes_over(root, shards, **reader_args):
    def make(checkpoints=None):
        pipes = []
        for k in range(shards):
            pipe = Pipeline(
                batch_size=3,
                num_threads=1,
                seed=3,
                enable_checkpointing=True,
                checkpoint=None if checkpoints is None else checkpoints[k],
            )
            with pipe:
                data, label = fn.readers.file(
                    file_root=root, shard_id=k, num_shards=shards, name="R", **reader_args
                )
                pipe.set_outputs(data, label)
            pipes.append(pipe)
        return pipes

    return make


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stop=st.integers(0, 14),
    policy=st.sampled_from(list(LastBatchPolicy)),
    pad=st.booleans(),
    prepare=st.booleans(),
)
@example(stop=0, policy=LastBatchPolicy.FILL, pad=False, prepare=True)
@example(stop=4, policy=LastBatchPolicy.PARTIAL, pad=True, prepare=True)  # just after an END
def test_base_iterator_resumes_exactly(make_files, stop, policy, pad, prepare):
    root, _ = make_files(11)
    make_pipes = pipes_over(root, 2, random_shuffle=True, initial_fill=4, pad_last_batch=pad)

    def make_iter(pipes):
        return BaseIterator(
            pipes,
            ["data", "label"],
            reader_name="R",
            last_batch_policy=policy,
            prepare_first_batch=prepare,
        )

    check_iterator_checkpoint_resumes(make_pipes, make_iter, stop, 16)


def test_checkpoints_need_checkpointing(make_files):
    root, _ = make_files(4)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        pipe.set_outputs(*fn.readers.file(file_root=root, name="R"))
    it = BaseIterator(pipe, ["d", "l"], reader_name="R")
    with pytest.raises(PipelineError, match="enable_checkpointing"):
        it.checkpoints()


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("prepare", [False, True])
def test_restored_at_epoch_end_then_iterated_again_drop(make_files, pad, prepare):
    """A checkpoint taken after the last batch of a DROP epoch (before StopIteration), restored
    and iterated with ``for``: the next epochs are the ones the original iterator gives (the
    batch DROP throws away is still thrown away)."""
    root, _ = make_files(7)
    make_pipes = pipes_over(root, 1, pad_last_batch=pad)

    def make_iter(pipes):
        return BaseIterator(
            pipes,
            ["data", "label"],
            reader_name="R",
            last_batch_policy=LastBatchPolicy.DROP,
            prepare_first_batch=prepare,
        )

    def two_epochs(it):
        return [[b[0]["data"].tolist() for b in it] for _ in range(2)]

    it = make_iter(make_pipes())
    for _ in range(len(it)):
        next(it)
    cps = it.checkpoints()
    want = two_epochs(it)
    assert two_epochs(make_iter(make_pipes(cps))) == want


def _stopping_source(info):
    if info.iteration >= 3:
        raise StopIteration
    return [np.array([info.epoch_idx * 100 + info.iteration * 10 + i], np.int32) for i in range(2)]


@pytest.mark.parametrize("stop", [2, 3, 4, 5])
@pytest.mark.parametrize("prepare", [True, False])
def test_resumes_exactly_around_an_external_source_stop(stop, prepare):
    """Without reader_name the epoch ends when the source stops; a checkpoint taken just before
    that stop restores (prepare_first_batch too) and resumes exactly."""

    def make_pipes(checkpoints=None):
        pipe = Pipeline(
            batch_size=2,
            num_threads=1,
            enable_checkpointing=True,
            checkpoint=None if checkpoints is None else checkpoints[0],
        )
        with pipe:
            pipe.set_outputs(fn.external_source(source=_stopping_source, batch_info=True))
        return [pipe]

    def make_iter(pipes):
        return BaseIterator(pipes, ["x"], prepare_first_batch=prepare)

    check_iterator_checkpoint_resumes(make_pipes, make_iter, stop, 10)
