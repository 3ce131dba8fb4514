"""Shard boundaries, rotation, padding and shuffling of readers (DALI's LoaderBase semantics),
checked through real ``fn.readers.file`` pipelines over files whose bytes encode their id."""

from __future__ import annotations

import pytest

from conftest import file_reader_pipe, sample_ids
from dlpipe import ArgumentError, Pipeline, fn
from dlpipe.readers._sharding import padded_shard_size, shard_size, shard_start


def reader_pipe(root, batch_size=1, seed=7, num_threads=1, **reader_args):
    return file_reader_pipe(batch_size, seed, num_threads, file_root=root, **reader_args)


def stream(pipe, batches):
    out = []
    for _ in range(batches):
        data, _ = pipe.run()
        out.append(sample_ids(data))
    return out


def flat(batches):
    return [x for b in batches for x in b]


def test_shard_formula_matches_reference():
    for n in (1, 7, 10, 26, 1000, 1001):
        for s in range(1, min(n, 9) + 1):
            starts = [shard_start(n, i, s) for i in range(s + 1)]
            assert starts[0] == 0 and starts[-1] == n
            sizes = [shard_size(n, i, s) for i in range(s)]
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
            assert padded_shard_size(n, s) == -(-n // s) == max(sizes)


def test_shard_rotates_every_epoch(make_files):
    root, _ = make_files(10)
    # Shards of 10 over 3: [0,3) [3,6) [6,10). Reader 1 reads shard 1, then 2, then 0, ...
    got = flat(stream(reader_pipe(root, shard_id=1, num_shards=3), 10 + 3))
    assert got == [3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]


def test_stick_to_shard_repeats_the_shard(make_files):
    root, _ = make_files(10)
    got = flat(stream(reader_pipe(root, shard_id=2, num_shards=3, stick_to_shard=True), 9))
    assert got == [6, 7, 8, 9, 6, 7, 8, 9, 6]


def test_batch_straddles_epochs_without_padding(make_files):
    root, _ = make_files(10)
    got = stream(reader_pipe(root, batch_size=4, shard_id=0, num_shards=3), 3)
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


def test_pad_last_batch_uneven_shards(make_files):
    # DALI issue #3855's numbers: N=26, S=4, B=6 -> ceil(26/4)=7 -> 12 samples (2 batches)/shard.
    root, _ = make_files(26)
    pipe = reader_pipe(root, batch_size=6, shard_id=0, num_shards=4, pad_last_batch=True)
    assert pipe.reader_meta("Reader") == {
        "epoch_size": 26,
        "epoch_size_padded": 28,
        "number_of_shards": 4,
        "shard_id": 0,
        "pad_last_batch": 1,
        "stick_to_shard": 0,
    }
    assert pipe.epoch_size("Reader") == 28
    got = stream(pipe, 6)
    assert got == [
        [0, 1, 2, 3, 4, 5],
        [5, 5, 5, 5, 5, 5],  # shard 0: 6 real, 6 copies
        [6, 7, 8, 9, 10, 11],
        [12, 12, 12, 12, 12, 12],  # shard 1: 7 real
        [13, 14, 15, 16, 17, 18],
        [18, 18, 18, 18, 18, 18],
    ]


def test_pad_last_batch_every_shard_same_batch_count(make_files):
    n, s, b = 22, 3, 3  # shard sizes 7, 7, 8; 3 batches of 3 each
    root, _ = make_files(n)
    per_shard = -(-padded_shard_size(n, s) // b) * b
    seen = []
    for k in range(s):
        pipe = reader_pipe(
            root, batch_size=b, shard_id=k, num_shards=s, pad_last_batch=True, stick_to_shard=True
        )
        ids = flat(stream(pipe, per_shard // b))
        real = list(range(shard_start(n, k, s), shard_start(n, k + 1, s)))
        assert ids[: len(real)] == real
        assert ids[len(real) :] == [real[-1]] * (per_shard - len(real))  # copies of the last
        seen += real
        # the next epoch starts cleanly at the shard start again
        assert flat(stream(pipe, 1))[0] == real[0]
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("initial_fill", [1, 4, 100])
def test_random_shuffle_permutes_each_epoch_of_its_shard(make_files, initial_fill):
    n, s = 20, 3
    root, _ = make_files(n)
    covered = []
    for k in range(s):
        pipe = reader_pipe(
            root,
            shard_id=k,
            num_shards=s,
            random_shuffle=True,
            initial_fill=initial_fill,
            stick_to_shard=False,
        )
        ids = flat(stream(pipe, 40))
        pos = 0
        for e in range(3):  # epochs read shards k, k+1, k+2 (of the globally shuffled list)
            size = shard_size(n, (k + e) % s, s)
            epoch = ids[pos : pos + size]
            assert len(set(epoch)) == size, f"epoch {e} of shard {k} repeats a sample"
            if e == 0:
                covered += epoch
            pos += size
    # every shard sees the same global permutation, so the shards are disjoint and cover N
    assert sorted(covered) == list(range(n))


def test_seed_changes_the_buffer_shuffle_only(make_files):
    root, _ = make_files(30)
    a = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=8, seed=1), 30))
    b = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=8, seed=1), 30))
    c = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=8, seed=2), 30))
    assert a == b and a != c and sorted(a) == sorted(c) == list(range(30))
    # initial_fill=1: only the fixed global pre-shuffle is left, whatever the seed (DALI #1695)
    d = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=1, seed=1), 30))
    e = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=1, seed=2), 30))
    assert d == e and d != list(range(30))


def test_reader_seed_argument_overrides_pipeline_seed(make_files):
    root, _ = make_files(30)
    pipes = []
    for pseed in (1, 2):
        pipe = Pipeline(batch_size=30, num_threads=1, seed=pseed)
        with pipe:
            data, _ = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=8, seed=5)
            pipe.set_outputs(data)
        pipes.append(sample_ids(pipe.run()[0]))
    assert pipes[0] == pipes[1]


def test_shuffle_after_epoch_shards_share_one_permutation_per_epoch(make_files):
    n, s = 21, 3
    root, _ = make_files(n)
    per_reader = []
    for k in range(s):
        pipe = reader_pipe(root, shard_id=k, num_shards=s, shuffle_after_epoch=True)
        assert pipe.reader_meta("Reader")["stick_to_shard"] == 1
        per_reader.append(flat(stream(pipe, 3 * 7)))
    for e in range(3):
        epoch = [ids[7 * e : 7 * (e + 1)] for ids in per_reader]
        assert sorted(x for part in epoch for x in part) == list(range(n))
    assert per_reader[0][:7] != per_reader[0][7:14]  # reshuffled between epochs


def test_no_mixing_across_epochs_with_a_large_buffer(make_files):
    root, _ = make_files(7)
    ids = flat(stream(reader_pipe(root, random_shuffle=True, initial_fill=64), 7 * 4))
    for e in range(4):
        assert sorted(ids[7 * e : 7 * (e + 1)]) == list(range(7))


def test_same_stream_whatever_the_thread_count(make_files):
    root, _ = make_files(40)
    runs = [
        flat(
            stream(
                reader_pipe(
                    root, batch_size=8, num_threads=t, random_shuffle=True, initial_fill=16
                ),
                10,
            )
        )
        for t in (1, 2, 4)
    ]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize(
    "args, message",
    [
        (dict(shard_id=3, num_shards=3), "shard_id=3"),
        (dict(shard_id=-1, num_shards=2), "shard_id=-1"),
        (dict(num_shards=0), "num_shards=0"),
        (dict(num_shards=11), "num_shards=11"),
        (dict(random_shuffle=True, initial_fill=0), "initial_fill=0"),
        (dict(shuffle_after_epoch=True, random_shuffle=True), "shuffle_after_epoch"),
        (dict(shuffle_after_epoch=True, stick_to_shard=True), "shuffle_after_epoch"),
    ],
)
def test_bad_shard_arguments_fail_before_running(make_files, args, message):
    root, _ = make_files(10)
    with pytest.raises(ArgumentError, match=message):
        reader_pipe(root, **args)


def test_stream_matches_numpy_reference_model(make_files):
    """An independent model of the buffer shuffle gives the same sample *sets* per epoch and
    the exact sequential order without shuffling, for many shard/padding/batch combinations."""
    n = 17
    root, _ = make_files(n)
    for s in (1, 2, 5):
        for b in (1, 3, 4):
            for pad in (False, True):
                k = s - 1
                pipe = reader_pipe(root, batch_size=b, shard_id=k, num_shards=s, pad_last_batch=pad)
                got = flat(stream(pipe, 12))
                want = []
                e = 0
                while len(want) < len(got):
                    shard = (k + e) % s
                    real = list(range(shard_start(n, shard, s), shard_start(n, shard + 1, s)))
                    want += real
                    if pad:
                        total = -(-padded_shard_size(n, s) // b) * b
                        want += [real[-1]] * (total - len(real))
                    e += 1
                assert got == want[: len(got)], (s, b, pad)
