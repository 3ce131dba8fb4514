"""``shuffle_after_epoch`` orders equal DALI 2.4's exactly: ``_stdshuffle`` (libstdc++'s
``std::shuffle`` with ``std::mt19937_64(seed + (epoch << 32))``) against orders recorded from
DALI 2.4, and through ``fn.readers.file`` pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import Pipeline, fn
from dlpipe.readers import _stdshuffle as ss
from dlpipe.readers._sharding import DATALOADER_SEED, file_order_shuffle, initial_order

# Recorded from DALI 2.4 (CPU, /tmp/dv): fn.readers.file(files=[f] * N, labels=list(range(N)),
# shuffle_after_epoch=True, num_shards=S, shard_id=k), the labels read in each epoch.
# (N, S, shuffle_after_epoch_seed or None) -> {shard_id: [epoch 1 labels, epoch 2 labels, ...]}.
DALI_ORDERS = {
    (1, 1, None): {0: [[0], [0], [0]]},
    (2, 1, None): {0: [[0, 1], [0, 1], [1, 0], [1, 0]]},
    (3, 1, None): {0: [[0, 2, 1], [1, 2, 0], [2, 0, 1], [2, 0, 1]]},
    (10, 1, None): {
        0: [
            [9, 6, 0, 5, 4, 2, 8, 1, 7, 3],
            [7, 1, 4, 5, 8, 6, 0, 2, 3, 9],
            [4, 5, 9, 8, 3, 1, 0, 6, 7, 2],
            [7, 8, 5, 2, 3, 4, 1, 9, 0, 6],
        ]
    },
    (17, 1, None): {
        0: [
            [8, 13, 7, 15, 3, 5, 9, 1, 10, 0, 4, 16, 11, 2, 6, 14, 12],
            [0, 13, 11, 15, 1, 9, 6, 14, 3, 7, 4, 12, 5, 2, 8, 10, 16],
            [6, 3, 10, 2, 7, 0, 12, 5, 4, 8, 11, 15, 14, 16, 9, 1, 13],
            [14, 2, 16, 11, 4, 12, 7, 1, 9, 5, 3, 13, 8, 10, 0, 6, 15],
        ]
    },
    (10, 3, None): {
        0: [[9, 6, 0], [7, 1, 4], [4, 5, 9]],
        1: [[5, 4, 2], [5, 8, 6], [8, 3, 1]],
        2: [[8, 1, 7, 3], [0, 2, 3, 9], [0, 6, 7, 2]],
    },
    (17, 4, None): {
        0: [[8, 13, 7, 15], [0, 13, 11, 15], [6, 3, 10, 2]],
        1: [[3, 5, 9, 1], [1, 9, 6, 14], [7, 0, 12, 5]],
        2: [[10, 0, 4, 16], [3, 7, 4, 12], [4, 8, 11, 15]],
        3: [[11, 2, 6, 14, 12], [5, 2, 8, 10, 16], [14, 16, 9, 1, 13]],
    },
    (10, 1, 7): {
        0: [
            [4, 5, 1, 8, 3, 0, 7, 6, 2, 9],
            [2, 0, 9, 6, 7, 1, 4, 5, 3, 8],
            [8, 9, 6, 4, 5, 7, 2, 1, 3, 0],
        ]
    },
}
# Recorded from DALI 2.4 as above, N = 70000, S = 3: the first 12 labels of each shard's first two
# epochs (the full 3 x 2 x ~23334 labels were compared when recording).
DALI_70000_PREFIXES = {
    0: [
        [64383, 59250, 1412, 57318, 26569, 55257, 5095, 31883, 32926, 7461, 49261, 63858],
        [23457, 59798, 62008, 34527, 57302, 20840, 62252, 18101, 5551, 54452, 45831, 50133],
    ],
    1: [
        [20277, 41514, 69274, 56790, 41708, 61631, 15181, 60102, 41090, 40927, 60370, 66420],
        [4753, 16800, 36609, 65876, 41026, 4665, 61096, 41951, 31940, 41360, 42953, 758],
    ],
    2: [
        [26238, 20133, 69425, 31908, 45742, 46788, 41603, 23767, 33211, 23726, 14813, 35550],
        [29428, 65908, 46880, 59029, 25186, 8514, 38814, 39815, 61005, 54788, 10284, 41609],
    ],
}


def emulated(n, num_shards, seed, epochs):
    """Each shard's list per epoch, shuffles applied cumulatively as DALI does."""
    order, out = np.arange(n), {k: [] for k in range(num_shards)}
    for e in range(1, epochs + 1):
        order = order[ss.std_shuffle(n, ss.epoch_seed(seed, e))]
        for k in range(num_shards):
            out[k].append(order[n * k // num_shards : n * (k + 1) // num_shards].tolist())
    return out


def test_mt19937_64_matches_the_standard():
    # [rand.predef]: the 10000th output of a default-constructed std::mt19937_64 (seed 5489).
    out = ss.MT19937_64(5489).peek(10000)
    assert int(out[0]) == 14514284786278117030
    assert int(out[9999]) == 9981545732273789042


@pytest.mark.parametrize("key", sorted(DALI_ORDERS, key=str))
def test_emulation_equals_dali_orders(key):
    n, s, seed = key
    expected = DALI_ORDERS[key]
    epochs = len(expected[0])
    got = emulated(n, s, DATALOADER_SEED if seed is None else seed, epochs)
    assert got == expected


def test_emulation_equals_dali_for_a_large_list():
    got = emulated(70000, 3, DATALOADER_SEED, 2)
    assert {k: [e[:12] for e in v] for k, v in got.items()} == DALI_70000_PREFIXES
    for k in range(3):
        assert sorted(got[k][0] + got[(k + 1) % 3][0] + got[(k + 2) % 3][0]) == list(range(70000))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 17, 64, 101, 1000, 4097])
def test_vectorised_swaps_equal_the_swap_loop(n):
    for seed in (0, 1, DATALOADER_SEED + (5 << 32)):
        assert ss.std_shuffle(n, seed).tolist() == ss.std_shuffle_loop(n, seed).tolist()


def lemire_reference(ranges, outputs):
    """Scalar Lemire downscaling with Python integers: (draws, outputs consumed)."""
    out, pos = [], 0
    for r in ranges:
        while True:
            prod = outputs[pos] * r
            pos += 1
            if prod % 2**64 >= (2**64) % r:
                break
        out.append(prod >> 64)
    return out, pos


def test_uniform_draws_reject_and_retry_like_libstdcxx():
    # Ranges just above 2**63 reject about half the outputs: every retry path runs.
    rng = np.random.default_rng(3)
    ranges = (np.uint64(2**63) + rng.integers(1, 1000, 5000).astype(np.uint64)).astype(np.uint64)
    outputs = [int(x) for x in ss.MT19937_64(11).peek(20000)]
    want, used = lemire_reference([int(r) for r in ranges], outputs)
    gen = ss.MT19937_64(11)
    got = ss.uniform_draws(ranges, gen)
    assert got.tolist() == want
    assert int(gen.peek(1)[0]) == outputs[used]  # the stream continues where libstdc++'s would


def test_file_reader_order_equals_dali(tmp_path):
    files = []
    for i in range(17):
        files.append(str(tmp_path / f"{i}.bin"))
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    for (n, s, seed), expected in DALI_ORDERS.items():
        if n != 17 and (n, s) != (10, 1):
            continue
        for k in range(s):
            size = n * (k + 1) // s - n * k // s
            pipe = Pipeline(batch_size=size, num_threads=1, device_id=None)
            kw = {} if seed is None else {"shuffle_after_epoch_seed": seed}
            with pipe:
                _, labels = fn.readers.file(
                    files=files[:n],
                    labels=list(range(n)),
                    shuffle_after_epoch=True,
                    num_shards=s,
                    shard_id=k,
                    **kw,
                )
                pipe.set_outputs(labels)
            pipe.build()
            got = [[int(np.asarray(x).item()) for x in pipe.run()[0]] for _ in expected[k]]
            assert got == expected[k], (n, s, seed, k)


def test_file_order_shuffle_is_the_same_shuffle_of_the_files():
    per_file = [np.arange(3 * i, 3 * i + 3) for i in range(10)]
    reorder = file_order_shuffle(per_file, DATALOADER_SEED)
    for epoch in (1, 2):
        files = ss.std_shuffle(10, ss.epoch_seed(DATALOADER_SEED, epoch))
        assert reorder(epoch).tolist() == np.concatenate([per_file[f] for f in files]).tolist()
    # DALI reshuffles the identity every epoch (IndexedFileLoader::Reset): epoch 1's first
    # files are those of DALI's epoch-1 shuffle of 10 items, as recorded above.
    assert [int(reorder(1)[3 * i]) // 3 for i in range(10)] == DALI_ORDERS[(10, 1, None)][0][0]


# Recorded from DALI 2.4 (CPU): fn.readers.file(files=[f] * N, labels=list(range(N)),
# random_shuffle=True, initial_fill=1), the first epoch's labels: the one-off list shuffle,
# std::shuffle with std::mt19937(524287) (32-bit engine). N = 1000 and 70000: first 12 labels
# (the whole lists were compared when recording; 70000 > 65535 takes libstdc++'s one draw per
# element path, the others two positions per draw; the pre-Lemire divide-and-reject
# downscaling gives other orders from N = 1000 on).
DALI_RANDOM_SHUFFLE = {
    2: [1, 0],
    3: [1, 0, 2],
    10: [5, 9, 1, 6, 7, 2, 0, 4, 8, 3],
    17: [10, 0, 14, 16, 7, 1, 15, 5, 3, 9, 13, 4, 12, 8, 2, 6, 11],
    1000: [30, 812, 788, 887, 165, 659, 376, 711, 318, 513, 613, 324],
    70000: [14022, 67989, 4767, 37944, 42924, 24812, 34586, 65034, 43369, 11806, 36280, 25885],
}


def test_mt19937_matches_the_standard():
    # [rand.predef]: the 10000th output of a default-constructed std::mt19937 (seed 5489).
    assert int(ss.MT19937(5489).peek(10000)[9999]) == 4123659995


@pytest.mark.parametrize("n", sorted(DALI_RANDOM_SHUFFLE))
def test_random_shuffle_initial_order_equals_dali(n):
    expected = DALI_RANDOM_SHUFFLE[n]
    got = initial_order(n)
    assert got[: len(expected)].tolist() == expected
    assert sorted(got.tolist()) == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 1000, 65535, 65536, 70001])
def test_vectorised_32bit_shuffle_equals_the_swap_loop(n):
    assert (
        ss.std_shuffle(n, 9, ss.MT19937).tolist() == ss.std_shuffle_loop(n, 9, ss.MT19937).tolist()
    )


def test_file_reader_random_shuffle_with_fill_1_equals_dali(tmp_path):
    files = []
    for i in range(17):
        files.append(str(tmp_path / f"{i}.bin"))
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    pipe = Pipeline(batch_size=17, num_threads=1, device_id=None, seed=5)
    with pipe:
        _, labels = fn.readers.file(
            files=files, labels=list(range(17)), random_shuffle=True, initial_fill=1
        )
        pipe.set_outputs(labels)
    pipe.build()
    got = [int(np.asarray(x).item()) for x in pipe.run()[0]]
    assert got == DALI_RANDOM_SHUFFLE[17]


# Recorded from DALI 2.4 (CPU): as DALI_ORDERS[(10, 1, None)] but in a pipeline with
# enable_checkpointing=True, where DALI shuffles the original list every epoch.
DALI_CHECKPOINTING_10 = [
    [9, 6, 0, 5, 4, 2, 8, 1, 7, 3],
    [8, 7, 4, 3, 6, 1, 2, 5, 9, 0],
    [2, 3, 9, 4, 8, 1, 6, 5, 0, 7],
    [8, 3, 1, 9, 4, 0, 5, 2, 6, 7],
]


def label_pipe(files, checkpoint=None, batch_size=10):
    pipe = Pipeline(
        batch_size=batch_size,
        num_threads=1,
        device_id=None,
        enable_checkpointing=True,
        checkpoint=checkpoint,
    )
    with pipe:
        _, labels = fn.readers.file(
            files=files, labels=list(range(len(files))), shuffle_after_epoch=True
        )
        pipe.set_outputs(labels)
    pipe.build()
    return pipe


def run_labels(pipe):
    return [int(np.asarray(x).item()) for x in pipe.run()[0]]


def test_checkpointing_pipeline_shuffles_the_original_order_like_dali(tmp_path):
    files = []
    for i in range(10):
        files.append(str(tmp_path / f"{i}.bin"))
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    pipe = label_pipe(files)
    assert [run_labels(pipe) for _ in range(4)] == DALI_CHECKPOINTING_10
    # A checkpoint taken mid-epoch 3 resumes the same stream.
    pipe = label_pipe(files, batch_size=4)
    stream = [run_labels(pipe) for _ in range(6)]  # 24 samples: epoch 3 has begun
    data = pipe.checkpoint()
    rest = [run_labels(pipe) for _ in range(4)]
    resumed = label_pipe(files, checkpoint=data, batch_size=4)
    assert [run_labels(resumed) for _ in range(4)] == rest
    flat = [x for b in stream + rest for x in b]
    assert flat == [x for e in DALI_CHECKPOINTING_10 for x in e]
