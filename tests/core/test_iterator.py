"""``dlpipe.iterator.BaseIterator``: epochs, shards and last batches over real file readers.

Every sample is a 4-byte file holding its own index (``make_files``), so each batch is checked
by the exact sample ids it holds, epoch by epoch.
"""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, PipelineError, fn
from dlpipe.iterator import BaseIterator, LastBatchPolicy

FILL, DROP, PARTIAL = LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL


def reader_pipe(root, batch_size, shard_id=0, num_shards=1, pad=False, stick=False, **reader):
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=7)
    with pipe:
        data, label = fn.readers.file(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            pad_last_batch=pad,
            stick_to_shard=stick,
            name="Reader",
            **reader,
        )
        pipe.set_outputs(data, label)
    return pipe


def ids(arr) -> list[int]:
    return np.ascontiguousarray(arr).view(np.int32).reshape(-1).tolist()


def epoch_ids(it) -> list[list[list[int]]]:
    """One epoch: per step, the ids of each returned pipeline dict."""
    return [[ids(d["data"]) for d in step] for step in it]


def single(epoch):
    return [step[0] for step in epoch]


# --- an independent model of the documented behaviour -------------------------------------------


def reader_stream(n, s, b, shard, pad, stick):
    """The reader's stream, one reader epoch at a time."""
    padded = -(-n // s)
    e = 0
    while True:
        k = shard if stick else (shard + e) % s
        part = list(range(n * k // s, n * (k + 1) // s))
        if pad:
            part += [part[-1]] * (math.ceil(padded / b) * b - len(part))
        yield part
        e += 1


def expected_epochs(n, s, b, policy, pad, shards, epochs, stick=False):
    padded = -(-n // s)
    if policy == DROP:
        length = (n // s) // b
        per_epoch = math.ceil(padded / b) if pad else length + (length * b < n // s)
    else:
        length = per_epoch = math.ceil(padded / b)
    streams = [reader_stream(n, s, b, k, pad, stick) for k in shards]
    buffers = [[] for _ in shards]
    out = []
    for e in range(epochs):
        windows = []
        for i in range(len(shards)):
            while len(buffers[i]) < per_epoch * b:
                buffers[i] += next(streams[i])
            windows.append(buffers[i][: per_epoch * b])
            buffers[i] = buffers[i][per_epoch * b :]
        if policy == PARTIAL:  # keep the real samples of the shard read in this epoch
            read = [k if stick else (k + e) % s for k in shards]
            real = [n * (k + 1) // s - n * k // s for k in read]
            windows = [w[:r] for w, r in zip(windows, real, strict=True)]
        steps = []
        for j in range(length):
            step = [w[j * b : (j + 1) * b] for w in windows]
            step = [x for x in step if x]
            if not step:
                break
            steps.append(step)
        out.append(steps)
    return out


# --- DALI's docstring table: data [1..7], batch 2 -------------------------------------------


@pytest.mark.parametrize(
    "policy, pad, last, next_first",
    [
        (PARTIAL, True, [7], [1, 2]),
        (PARTIAL, False, [7], [2, 3]),
        (FILL, True, [7, 7], [1, 2]),
        (FILL, False, [7, 1], [2, 3]),
        (DROP, True, [5, 6], [1, 2]),
        (DROP, False, [5, 6], [2, 3]),
    ],
)
def test_dali_docstring_table(make_files, policy, pad, last, next_first):
    root, _ = make_files(8)  # ids 0..7; the reader lists only 1..7
    pipe = reader_pipe(root, 2, pad=pad, files=[f"{root}/c0/f{i:05d}.jpg" for i in range(1, 8)])
    it = BaseIterator(pipe, ["data", "label"], reader_name="Reader", last_batch_policy=policy)
    first = single(epoch_ids(it))
    assert first[-1] == last
    assert first[0] == [1, 2]
    it.reset()
    assert ids(next(it)[0]["data"]) == next_first


def test_dali_table_full_epochs(make_files):
    root, _ = make_files(7)
    cases = {
        (FILL, False): [
            [[0, 1], [2, 3], [4, 5], [6, 0]],
            [[1, 2], [3, 4], [5, 6], [0, 1]],
            [[2, 3], [4, 5], [6, 0], [1, 2]],
        ],
        (PARTIAL, False): [
            [[0, 1], [2, 3], [4, 5], [6]],
            [[1, 2], [3, 4], [5, 6], [0]],
            [[2, 3], [4, 5], [6, 0], [1]],
        ],
        (DROP, False): [
            [[0, 1], [2, 3], [4, 5]],
            [[1, 2], [3, 4], [5, 6]],
            [[2, 3], [4, 5], [6, 0]],
        ],
        (FILL, True): [[[0, 1], [2, 3], [4, 5], [6, 6]]] * 3,
        (PARTIAL, True): [[[0, 1], [2, 3], [4, 5], [6]]] * 3,
        (DROP, True): [[[0, 1], [2, 3], [4, 5]]] * 3,
    }
    for (policy, pad), want in cases.items():
        it = BaseIterator(
            reader_pipe(root, 2, pad=pad),
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=policy,
            auto_reset=True,
        )
        got = [single(epoch_ids(it)) for _ in range(3)]
        assert got == want, (policy, pad)
        assert len(it) == (3 if policy == DROP else 4)


# --- N=26, S=4, B=6 (DALI issue #3855): shards of 6, 7, 6, 7 samples ----------------------------


def test_uneven_shards_padded_partial_never_empty(make_files):
    root, _ = make_files(26)
    it = BaseIterator(
        reader_pipe(root, 6, 0, 4, pad=True),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=PARTIAL,
        auto_reset=True,
    )
    assert len(it) == 2
    got = [single(epoch_ids(it)) for _ in range(4)]
    # Shard 0 (6 samples) needs one batch: the epoch ends instead of returning an empty one.
    assert got == [
        [list(range(0, 6))],
        [list(range(6, 12)), [12]],
        [list(range(13, 19))],
        [list(range(19, 25)), [25]],
    ]


def test_uneven_shards_padded_fill_and_drop(make_files):
    root, _ = make_files(26)
    fill = BaseIterator(
        reader_pipe(root, 6, 0, 4, pad=True),
        ["data", "label"],
        reader_name="Reader",
        auto_reset=True,
    )
    assert [single(epoch_ids(fill)) for _ in range(2)] == [
        [list(range(0, 6)), [5] * 6],
        [list(range(6, 12)), [12] * 6],
    ]
    drop = BaseIterator(
        reader_pipe(root, 6, 0, 4, pad=True),
        ["data", "label"],
        reader_name="Reader",
        auto_reset=True,
        last_batch_policy=DROP,
    )
    assert len(drop) == 1
    # The padded tail of each reader epoch is skipped: every epoch starts at its shard's start.
    assert [single(epoch_ids(drop)) for _ in range(4)] == [
        [list(range(0, 6))],
        [list(range(6, 12))],
        [list(range(13, 19))],
        [list(range(19, 25))],
    ]


def test_uneven_shards_all_pipelines_in_one_iterator(make_files):
    root, _ = make_files(26)
    pipes = [reader_pipe(root, 6, k, 4, pad=True) for k in range(4)]
    it = BaseIterator(
        pipes, ["data", "label"], reader_name="Reader", last_batch_policy=PARTIAL, auto_reset=True
    )
    e0, e1 = epoch_ids(it), epoch_ids(it)
    assert e0 == [
        [list(range(0, 6)), list(range(6, 12)), list(range(13, 19)), list(range(19, 25))],
        [[12], [25]],
    ]  # pipelines 0 and 2 have no sample left: left out, not empty
    assert e1[1] == [[12], [25]]  # shards rotated: now pipelines 0 and 2 read shards 1 and 3
    assert sorted(x for step in e0 for b in step for x in b) == list(range(26))


# --- the grid: policy x padding x shards, checked against the model -----------------------------

GRID = [(7, 1, 2), (26, 4, 6), (10, 3, 4), (9, 2, 3), (12, 3, 2)]


@pytest.mark.parametrize("n, s, b", GRID)
@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
def test_grid_one_iterator_per_shard(make_files, n, s, b, pad, policy):
    if policy == DROP and (n // s) < b:
        pytest.skip("no full batch")
    root, _ = make_files(n)
    for k in range(s):
        it = BaseIterator(
            reader_pipe(root, b, k, s, pad=pad),
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=policy,
            auto_reset=True,
        )
        lengths = []
        got = []
        for _ in range(3):
            epoch = epoch_ids(it)
            lengths.append(len(it))
            got.append(epoch)
        assert got == expected_epochs(n, s, b, policy, pad, [k], 3), (k, got)
        assert len(set(lengths)) == 1
        for epoch in got:
            if policy == PARTIAL:
                assert len(epoch) in (len(it), len(it) - 1)
                assert all(step[0] for step in epoch)
            else:
                assert len(epoch) == len(it)
                assert all(len(step[0]) == b for step in epoch)


@pytest.mark.parametrize("n, s, b", GRID[1:])
@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
def test_grid_all_shards_in_lockstep(make_files, n, s, b, pad, policy):
    if policy == DROP and (n // s) < b:
        pytest.skip("no full batch")
    root, _ = make_files(n)
    pipes = [reader_pipe(root, b, k, s, pad=pad) for k in range(s)]
    it = BaseIterator(pipes, ["data", "label"], reader_name="Reader", last_batch_policy=policy)
    got = []
    for _ in range(3):
        got.append(epoch_ids(it))  # iter() resets after the first epoch
    assert got == expected_epochs(n, s, b, policy, pad, list(range(s)), 3)
    for epoch in got:  # with padding, every sample exactly once, padding copies aside
        if pad and policy == FILL:
            real = []
            for i in range(s):
                seq = [x for step in epoch for x in step[i]]
                while len(seq) > 1 and seq[-1] == seq[-2]:
                    seq.pop()
                real += seq
            assert sorted(real) == list(range(n))
        elif pad and policy == PARTIAL:
            assert sorted(x for step in epoch for batch in step for x in batch) == list(range(n))


def test_stick_to_shard(make_files):
    root, _ = make_files(10)
    it = BaseIterator(
        reader_pipe(root, 2, 1, 3, pad=False, stick=True),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=PARTIAL,
        auto_reset=True,
    )
    got = [single(epoch_ids(it)) for _ in range(3)]
    assert got == [single(e) for e in expected_epochs(10, 3, 2, PARTIAL, False, [1], 3, stick=True)]
    assert got == [[[3, 4], [5]], [[4, 5], [3]], [[5, 3], [4]]]


def test_shuffled_epochs_are_permutations_of_the_shard(make_files):
    root, _ = make_files(20)
    it = BaseIterator(
        reader_pipe(root, 4, 1, 2, pad=True, random_shuffle=True, initial_fill=5),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=PARTIAL,
        auto_reset=True,
    )
    # random_shuffle also shuffles the global list once, so a shard is not a range of ids.
    e1, e0, e1_again = ([x for b in single(epoch_ids(it)) for x in b] for _ in range(3))
    assert len(e1) == len(e0) == 10
    assert sorted(e1 + e0) == list(range(20))
    assert sorted(e1) == sorted(e1_again) and e1 != e1_again


# --- reset, auto_reset, iter, prepare_first_batch ---------------------------------------------


def test_no_auto_reset_needs_reset(make_files):
    root, _ = make_files(7)
    it = BaseIterator(reader_pipe(root, 2, pad=True), ["data", "label"], reader_name="Reader")
    assert len(single(epoch_ids(it))) == 4
    with pytest.raises(StopIteration):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it.reset()
    assert ids(next(it)[0]["data"]) == [0, 1]


@pytest.mark.parametrize("auto_reset", [True, "yes"])
def test_auto_reset(make_files, auto_reset):
    root, _ = make_files(7)
    it = BaseIterator(
        reader_pipe(root, 2), ["data", "label"], reader_name="Reader", auto_reset=auto_reset
    )
    assert single(epoch_ids(it))[0] == [0, 1]
    assert single(epoch_ids(it))[0] == [1, 2]


@pytest.mark.parametrize("auto_reset", [False, None, "no"])
def test_iter_resets_after_an_epoch(make_files, auto_reset):
    root, _ = make_files(7)
    it = BaseIterator(
        reader_pipe(root, 2), ["data", "label"], reader_name="Reader", auto_reset=auto_reset
    )
    iter(it)  # nothing consumed yet: no reset
    assert [single(epoch_ids(it))[0] for _ in range(3)] == [[0, 1], [1, 2], [2, 3]]


def test_reset_mid_epoch_warns_and_is_ignored(make_files, caplog):
    root, _ = make_files(7)
    it = BaseIterator(reader_pipe(root, 2, pad=True), ["data", "label"], reader_name="Reader")
    it.reset()  # nothing taken yet: a silent no-op
    next(it)
    with caplog.at_level(logging.WARNING, logger="dlpipe.iterator"):
        it.reset()
    assert "does not support resetting while epoch is not finished" in caplog.text
    assert ids(next(it)[0]["data"]) == [2, 3]


@pytest.mark.parametrize(
    "policy, pad, want",
    [(DROP, False, [1, 2]), (DROP, True, [0, 1]), (PARTIAL, False, [1, 2]), (FILL, False, [1, 2])],
)
def test_reset_after_len_batches_without_stopiteration(make_files, policy, pad, want):
    # Loops bounded by len() (e.g. Lightning) never see StopIteration; reset() then finishes
    # the epoch (reading and throwing away what the epoch still owes the stream).
    root, _ = make_files(7)
    it = BaseIterator(
        reader_pipe(root, 2, pad=pad),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=policy,
    )
    for _ in range(len(it)):
        next(it)
    it.reset()
    assert ids(next(it)[0]["data"]) == want


def test_partial_early_end_counts_as_a_finished_epoch(make_files, caplog):
    root, _ = make_files(26)
    it = BaseIterator(
        reader_pipe(root, 6, 0, 4, pad=True),
        ["data", "label"],
        reader_name="Reader",
        last_batch_policy=PARTIAL,
    )
    next(it)  # shard 0 has a single batch: the epoch is over
    with caplog.at_level(logging.WARNING, logger="dlpipe.iterator"):
        it.reset()
    assert caplog.text == ""
    assert ids(next(it)[0]["data"]) == list(range(6, 12))


@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
@pytest.mark.parametrize("pad", [True, False])
def test_prepare_first_batch_does_not_change_results(make_files, policy, pad):
    root, _ = make_files(10)
    runs = []
    for prepare in (True, False):
        it = BaseIterator(
            reader_pipe(root, 3, 1, 2, pad=pad),
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=policy,
            auto_reset=True,
            prepare_first_batch=prepare,
        )
        runs.append([epoch_ids(it) for _ in range(3)])
    assert runs[0] == runs[1]


def test_prepare_first_batch_runs_the_pipeline_in_the_constructor(make_files):
    root, _ = make_files(7)
    pipe = reader_pipe(root, 2)
    BaseIterator(pipe, ["data", "label"], reader_name="Reader", prepare_first_batch=True)
    assert pipe._executor.pending() == pipe.cpu_queue_size  # one taken, one re-scheduled
    lazy = reader_pipe(root, 2)
    BaseIterator(lazy, ["data", "label"], reader_name="Reader", prepare_first_batch=False)
    assert lazy.empty()


# --- without reader_name ------------------------------------------------------------------------


def test_size_without_reader_two_pipelines(make_files):
    root, _ = make_files(8)
    pipes = [reader_pipe(root, 2, k, 2) for k in range(2)]
    with pytest.warns(UserWarning, match="reader_name"):
        it = BaseIterator(pipes, ["data", "label"], size=7, last_batch_policy=PARTIAL)
    assert len(it) == 2
    # Step 1 holds samples 4-7 of the epoch (pipeline 0's 2, then pipeline 1's): the 7th is
    # the first of pipeline 1's batch, so pipeline 1 is cut to one sample.
    assert epoch_ids(it) == [[[0, 1], [4, 5]], [[2, 3], [6]]]
    # The readers rotate shards on their own; the cut stays on the 7th sample of the step order.
    assert epoch_ids(it) == [[[4, 5], [0, 1]], [[6, 7], [2]]]


def test_size_without_reader_drop_and_fill(make_files):
    root, _ = make_files(7)
    with pytest.warns(UserWarning):
        drop = BaseIterator(
            reader_pipe(root, 2), ["data", "label"], size=7, last_batch_policy=DROP, auto_reset=True
        )
    assert len(drop) == 3
    assert [single(epoch_ids(drop)) for _ in range(2)] == [
        [[0, 1], [2, 3], [4, 5]],
        [[1, 2], [3, 4], [5, 6]],
    ]
    with pytest.warns(UserWarning):
        fill = BaseIterator(reader_pipe(root, 2), ["data", "label"], size=7, auto_reset=True)
    assert len(fill) == 4
    assert [len(epoch_ids(fill)) for _ in range(3)] == [4, 4, 4]


def test_unknown_size_runs_on_and_has_no_len(make_files):
    root, _ = make_files(3)
    it = BaseIterator(reader_pipe(root, 2), ["data", "label"])
    with pytest.raises(TypeError, match="len"):
        len(it)
    assert [ids(next(it)[0]["data"]) for _ in range(4)] == [[0, 1], [2, 0], [1, 2], [0, 1]]


# --- errors -----------------------------------------------------------------------------------


def test_last_batch_policy_values():
    assert [p.value for p in LastBatchPolicy] == [0, 1, 2]
    with pytest.raises(ValueError):
        LastBatchPolicy(3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(reader_name="Reader", size=7), "size=7"),
        (dict(reader_name="Reader", last_batch_padded=True), "last_batch_padded=True"),
        (dict(size=0), "size=0"),
        (dict(reader_name="Reader", auto_reset="maybe"), "auto_reset='maybe'"),
        (dict(reader_name="Reader", last_batch_policy=3), "last_batch_policy=3"),
        (dict(reader_name="Reader", last_batch_policy="bogus"), "last_batch_policy='bogus'"),
        (dict(reader_name="Nope"), "no reader named 'Nope'"),
    ],
)
def test_argument_errors(make_files, kwargs, match):
    root, _ = make_files(7)
    with pytest.raises(ValueError, match=match):
        BaseIterator(reader_pipe(root, 2), ["data", "label"], **kwargs)


def test_policy_given_by_name_or_value(make_files):
    root, _ = make_files(7)
    for policy in ("drop", 1, DROP):
        it = BaseIterator(
            reader_pipe(root, 2), ["data", "label"], reader_name="Reader", last_batch_policy=policy
        )
        assert len(it) == 3


def test_output_map_errors(make_files):
    root, _ = make_files(7)
    with pytest.raises(ArgumentError, match="distinct"):
        BaseIterator(reader_pipe(root, 2), ["data", "data"], reader_name="Reader")
    with pytest.raises(ArgumentError, match="pipeline 0 has 2"):
        BaseIterator(reader_pipe(root, 2), ["data"], reader_name="Reader")


def test_pipeline_errors(make_files):
    root, _ = make_files(8)
    with pytest.raises(ArgumentError, match=r"same batch_size, got \[2, 3\]"):
        BaseIterator([reader_pipe(root, 2), reader_pipe(root, 3)], ["d", "l"], reader_name="Reader")
    with pytest.raises(ArgumentError, match="one pipeline only"):
        BaseIterator([reader_pipe(root, 2), reader_pipe(root, 2)], ["d", "l"])
    with pytest.raises(ArgumentError, match=r"num_shards differs.*\[2, 4\]"):
        BaseIterator(
            [reader_pipe(root, 2, 0, 2), reader_pipe(root, 2, 1, 4)],
            ["d", "l"],
            reader_name="Reader",
        )
    with pytest.raises(ArgumentError, match="pad_last_batch differs"):
        BaseIterator(
            [reader_pipe(root, 2, 0, 2, pad=True), reader_pipe(root, 2, 1, 2)],
            ["d", "l"],
            reader_name="Reader",
        )
    with pytest.raises(ArgumentError, match="batch_size=5 larger than the smallest shard"):
        BaseIterator(
            reader_pipe(root, 5, 0, 2), ["d", "l"], reader_name="Reader", last_batch_policy=DROP
        )
    with pytest.raises(ArgumentError, match="pipelines="):
        BaseIterator([], ["d", "l"], reader_name="Reader")


def test_mixing_api_types(make_files):
    root, _ = make_files(4)
    pipe = reader_pipe(root, 2)
    pipe.run()
    with pytest.raises(PipelineError, match="Mixing pipeline API type"):
        BaseIterator(pipe, ["data", "label"], reader_name="Reader")


def test_fill_last_batch_is_deprecated(make_files):
    root, _ = make_files(7)
    with pytest.warns(DeprecationWarning, match="fill_last_batch"):
        it = BaseIterator(
            reader_pipe(root, 2, pad=True),
            ["data", "label"],
            reader_name="Reader",
            fill_last_batch=False,
        )
    assert single(epoch_ids(it))[-1] == [6]  # False means PARTIAL
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BaseIterator(reader_pipe(root, 2), ["data", "label"], reader_name="Reader")


def test_outputs_are_numpy_batches(make_files):
    root, _ = make_files(4)
    it = BaseIterator(reader_pipe(root, 2), ["data", "label"], reader_name="Reader")
    (batch,) = next(it)
    assert batch["data"].shape == (2, 4) and batch["data"].dtype == np.uint8
    assert batch["label"].tolist() == [[0], [0]]
