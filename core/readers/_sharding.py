"""Shard, shuffle-buffer, padding and epoch arithmetic shared by every reader.

This is DALI's ``LoaderBase`` behaviour (``dali/operators/reader/loader/loader.h``), written once:

* The dataset of N samples is cut into S shards; shard i is ``[floor(N*i/S), floor(N*(i+1)/S))``.
* The reader streams forever. Epoch e of reader k reads shard ``(k + e) % S``, or shard k every
  epoch with ``stick_to_shard``. Physically the read position runs on into the next shard and
  wraps to 0 at N.
* Shuffling is a sliding window of ``initial_fill`` samples; samples never mix across epochs, so
  every epoch is a permutation of its shard.
* ``pad_last_batch`` repeats the last returned sample until the epoch holds ``ceil(N/S)``
  samples and the batch is full: every shard then yields ``ceil(ceil(N/S)/B)`` full batches.

The loader hands out *dataset indices*; each reader maps them to its samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from ..errors import ArgumentError
from ._stdshuffle import MT19937, epoch_seed, std_shuffle

# DALI's fixed seed for the one-off global list shuffle (kDaliDataloaderSeed).
DATALOADER_SEED = 524287


def initial_order(n: int) -> np.ndarray:
    """The one-off shuffle of a reader's list of ``n`` samples (``random_shuffle=True``): the
    same permutation for every shard, DALI's ``std::shuffle`` with ``std::mt19937(524287)``
    (the 32-bit engine; reproduced exactly, so with ``initial_fill=1`` the order is DALI's)."""
    return std_shuffle(n, DATALOADER_SEED, MT19937)


def shard_start(n: int, shard_id: int, num_shards: int) -> int:
    return n * shard_id // num_shards


def shard_size(n: int, shard_id: int, num_shards: int) -> int:
    return shard_start(n, shard_id + 1, num_shards) - shard_start(n, shard_id, num_shards)


def padded_shard_size(n: int, num_shards: int) -> int:
    return -(-n // num_shards)


def check_shard_args(shard_id: int, num_shards: int, who: str) -> None:
    if not isinstance(num_shards, int | np.integer) or num_shards < 1:
        raise ArgumentError(f"{who}: num_shards={num_shards!r} must be an integer >= 1")
    if not isinstance(shard_id, int | np.integer) or not 0 <= shard_id < num_shards:
        raise ArgumentError(f"{who}: shard_id={shard_id!r} must be in [0, num_shards={num_shards})")


def file_order_shuffle(per_file: list[np.ndarray], seed: int) -> Callable[[int], np.ndarray]:
    """The ``reorder`` of the indexed container readers' ``shuffle_after_epoch`` (TFRecord,
    RecordIO): every epoch the order of the *files* is drawn afresh, the identity shuffled with
    ``std::mt19937_64(seed + (epoch << 32))`` (DALI's ``IndexedFileLoader::Reset``, reproduced
    exactly by ``_stdshuffle``); records keep their order inside a file.

    Args:
        per_file: the dataset indices of each file's records, in file order.
        seed: the base seed (``shuffle_after_epoch_seed``, default 524287).

    Returns:
        ``reorder(epoch) -> permutation`` for :class:`ShardedLoader`.
    """

    def reorder(epoch: int) -> np.ndarray:
        files = std_shuffle(len(per_file), epoch_seed(seed, epoch))
        return np.concatenate([per_file[i] for i in files])

    return reorder


class ShardedLoader:
    """Turns (N, sharding, shuffling, padding) into a stream of dataset indices.

    Args:
        size: N, the number of samples in the whole dataset.
        shard_id, num_shards, stick_to_shard, pad_last_batch: as in DALI's readers.
        initial_fill: shuffle-buffer size F; ignored (F = 1) unless ``random_shuffle``.
        random_shuffle: shuffle through the buffer with ``rng``.
        rng: the operator's generator (buffer shuffle only).
        reorder: optional ``reorder(epoch) -> permutation``, called when the read position
            enters epoch ``epoch`` (1-based), for ``shuffle_after_epoch``. The permutation maps
            physical positions to dataset indices.
        who: the reader's name for error messages.
    """

    def __init__(
        self,
        size: int,
        *,
        shard_id: int = 0,
        num_shards: int = 1,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        initial_fill: int = 1024,
        random_shuffle: bool = False,
        rng: np.random.Generator | None = None,
        reorder: Callable[[int], np.ndarray] | None = None,
        who: str = "reader",
    ):
        check_shard_args(shard_id, num_shards, who)
        if size < num_shards:
            raise ArgumentError(
                f"{who}: num_shards={num_shards} is larger than the dataset ({size} samples)"
            )
        if random_shuffle and (not isinstance(initial_fill, int | np.integer) or initial_fill < 1):
            raise ArgumentError(f"{who}: initial_fill={initial_fill!r} must be an integer >= 1")
        self.size = size
        self.shard_id = shard_id
        self.num_shards = num_shards
        self.stick_to_shard = stick_to_shard
        self.pad_last_batch = pad_last_batch
        self.fill = int(initial_fill) if random_shuffle else 1
        self.shuffle = random_shuffle
        self._reorder = reorder
        self.bind(rng if rng is not None else np.random.default_rng(0))

    def bind(self, rng: np.random.Generator) -> None:
        """Start the stream from the beginning, shuffling with ``rng`` (the operator's)."""
        self.rng = rng
        # The physical read position: epoch being read, next position in its shard (None:
        # not entered yet), and the order of the epoch being read (``reorder``).
        self._read_epoch = 0
        self._read_pos: int | None = None
        self._read_end = 0  # where the shard being read ends (set on entering an epoch)
        self._epoch_len = (-1, 0)  # (epoch, its length): next_batch's lookup
        self._read_order: np.ndarray | None = None
        # The shuffle buffer: a ring of F (epoch, dataset index) slots, oldest at _head.
        self._ring: list[tuple[int, int]] = []
        self._head = 0
        self._per_epoch: Counter[int] = Counter()  # buffered samples per epoch
        self._epoch = 0  # epoch of the samples being returned
        self._returned = 0  # samples returned in the current epoch (padding included)
        self._last: int | None = None
        self._filled = False

    # --- metadata ---------------------------------------------------------------------------
    def epoch_shard(self, epoch: int) -> int:
        return self.shard_id if self.stick_to_shard else (self.shard_id + epoch) % self.num_shards

    def epoch_length(self, epoch: int) -> int:
        """Real (unpadded) samples reader k reads in epoch ``epoch`` (0-based)."""
        return shard_size(self.size, self.epoch_shard(epoch), self.num_shards)

    def restore_order_each_epoch(self) -> None:
        """With checkpoints: nothing to change. ``reorder(epoch)`` already gives each epoch's
        order from the original one (the container readers' file order, as DALI)."""

    def meta(self) -> dict[str, int]:
        padded = (
            padded_shard_size(self.size, self.num_shards) * self.num_shards
            if self.pad_last_batch
            else self.size
        )
        return {
            "epoch_size": self.size,
            "epoch_size_padded": padded,
            "number_of_shards": self.num_shards,
            "shard_id": self.shard_id,
            "pad_last_batch": int(self.pad_last_batch),
            "stick_to_shard": int(self.stick_to_shard),
        }

    # --- the stream ---------------------------------------------------------------------------
    def _read(self) -> tuple[int, int]:
        """One physical read: (epoch, dataset index), shard after shard."""
        epoch = self._read_epoch
        if self._read_pos is None:  # entering the epoch
            shard = self.epoch_shard(epoch)
            if self._reorder is not None:
                self._read_order = self._reorder(epoch + 1)
            self._read_pos = shard_start(self.size, shard, self.num_shards)
            self._read_end = shard_start(self.size, shard + 1, self.num_shards)
        pos = self._read_pos
        index = int(self._read_order[pos]) if self._read_order is not None else pos
        self._read_pos += 1
        if self._read_pos == self._read_end:
            self._read_epoch += 1
            self._read_pos = None
        self._per_epoch[epoch] += 1
        return epoch, index

    # --- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The position in the stream (plain data; the RNG is the operator's)."""
        return {
            "ring": [list(x) for x in self._ring],
            "head": self._head,
            "per_epoch": {str(k): v for k, v in self._per_epoch.items() if v},
            "epoch": self._epoch,
            "returned": self._returned,
            "last": self._last,
            "filled": self._filled,
            "read_epoch": self._read_epoch,
            "read_pos": self._read_pos,
        }

    def load_state_dict(self, state: dict) -> None:
        self._ring = [tuple(x) for x in state["ring"]]
        self._head = state["head"]
        self._per_epoch = Counter({int(k): v for k, v in state["per_epoch"].items()})
        self._epoch, self._returned, self._last = state["epoch"], state["returned"], state["last"]
        self._filled = state["filled"]
        self._read_epoch, self._read_pos = state["read_epoch"], state["read_pos"]
        shard = self.epoch_shard(self._read_epoch)
        self._read_end = shard_start(self.size, shard + 1, self.num_shards)
        self._epoch_len = (-1, 0)
        if self._reorder is not None and self._read_pos is not None:
            self._read_order = self._reorder(self._read_epoch + 1)

    def next_batch(self, batch_size: int) -> list[int]:
        """The dataset indices of the next batch of ``batch_size`` samples."""
        # The current epoch's length, looked up once per batch rather than per sample (a
        # batch of 128 spent ~1 ms of GIL time in this arithmetic on the H100: BENCHMARKS.md,
        # "Where the host time goes").
        self._epoch_len = (self._epoch, self.epoch_length(self._epoch))
        # The shuffle's uniform draws, one call per batch (a Generator call per sample cost
        # ~3 us of GIL each); sample k picks slot floor(draws[k] * current) of the ring.
        draws = self.rng.random(batch_size).tolist() if self.shuffle else None
        return [self._next(i, draws) for i in range(batch_size)]

    def _next(self, pos_in_batch: int, draws: list[float] | None) -> int:
        if not self._filled:
            self._ring = [self._read() for _ in range(self.fill)]
            self._filled = True
        cached_epoch, length = self._epoch_len
        if cached_epoch != self._epoch:
            length = self.epoch_length(self._epoch)
            self._epoch_len = (self._epoch, length)
        if self._returned >= length:
            padded = padded_shard_size(self.size, self.num_shards)
            if self.pad_last_batch and (self._returned < padded or pos_in_batch != 0):
                self._returned += 1
                return self._last  # type: ignore[return-value]
            self._epoch += 1
            self._returned = 0
        # Current-epoch samples are the oldest slots of the ring (new reads go in as newest).
        current = self._per_epoch[self._epoch]
        ring, head, size = self._ring, self._head, self.fill
        j = int(draws[pos_in_batch] * current) if draws is not None and current > 1 else 0
        if j:
            other = (head + j) % size
            ring[head], ring[other] = ring[other], ring[head]
        epoch, index = ring[head]
        self._per_epoch[epoch] -= 1
        ring[head] = self._read()
        self._head = (head + 1) % size
        self._returned += 1
        self._last = index
        return index


class ListSharding:
    """The sharding of a *list of files*, as DALI's file readers (file, numpy) do it.

    ``random_shuffle`` shuffles the list once, with DALI's fixed seed, so every shard sees the
    same permutation (the buffer shuffle then uses the operator's RNG);
    ``shuffle_after_epoch`` reshuffles the whole list at every epoch start (epoch 1 included)
    with ``std::shuffle`` and ``std::mt19937_64(shuffle_after_epoch_seed + (epoch << 32))``
    (DALI 2.4's ``FileLabelLoader::Reset``, reproduced exactly by ``_stdshuffle``). Each
    shuffle is applied to the previous order, except in a pipeline with checkpointing, where
    DALI shuffles the original order every epoch (:meth:`restore_order_each_epoch`); so the
    orders differ, as DALI's docs warn. A restored checkpoint recomputes the epoch's order.

    It has the loader's interface (``next_batch`` giving list indices, ``meta``,
    ``state_dict``), so a reader keeps it as ``self.loader`` and checkpoints see it.
    """

    def __init__(
        self,
        size: int,
        *,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        stick_to_shard: bool | None = None,
        pad_last_batch: bool = False,
        who: str = "reader",
    ):
        if shuffle_after_epoch and random_shuffle:
            raise ArgumentError(
                f"{who}: shuffle_after_epoch=True cannot go with random_shuffle=True"
            )
        if shuffle_after_epoch and stick_to_shard:
            raise ArgumentError(
                f"{who}: shuffle_after_epoch=True cannot go with stick_to_shard=True"
            )
        self._order = np.arange(size)
        if random_shuffle:
            self._order = initial_order(size)
        self._seed = (
            DATALOADER_SEED if shuffle_after_epoch_seed is None else int(shuffle_after_epoch_seed)
        )
        self._reorder = self._epoch_order if shuffle_after_epoch else None
        self._from_original = False
        self._cache: tuple[int, np.ndarray] = (0, self._order)
        self._loader = ShardedLoader(
            size,
            shard_id=shard_id,
            num_shards=num_shards,
            stick_to_shard=bool(stick_to_shard) or shuffle_after_epoch,
            pad_last_batch=pad_last_batch,
            initial_fill=initial_fill,
            random_shuffle=random_shuffle,
            reorder=self._reorder,
            who=who,
        )

    def bind(self, rng: np.random.Generator) -> None:
        """Start streaming with the operator's RNG (the buffer shuffle)."""
        self._loader.bind(rng)

    def restore_order_each_epoch(self) -> None:
        """Shuffle the original order every epoch rather than the previous epoch's, as DALI's
        list readers do when the pipeline has checkpointing enabled (orders checked against
        DALI 2.4 in tests/core/test_stdshuffle.py). Called before the first read."""
        self._from_original = True
        self._cache = (0, self._order)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self._from_original:
            cached_epoch, order = self._cache
            if cached_epoch != epoch:
                order = self._order[std_shuffle(len(self._order), epoch_seed(self._seed, epoch))]
                self._cache = (epoch, order)
            return order
        cached_epoch, order = self._cache
        if epoch < cached_epoch:
            cached_epoch, order = 0, self._order
        for e in range(cached_epoch + 1, epoch + 1):
            order = order[std_shuffle(len(order), epoch_seed(self._seed, e))]
        self._cache = (epoch, order)
        return order

    def next_batch(self, batch_size: int) -> list[int]:
        """List indices of the next batch."""
        positions = self._loader.next_batch(batch_size)
        if self._reorder is not None:  # the loader applied the epoch's order already
            return positions
        return [int(self._order[i]) for i in positions]

    def meta(self) -> dict[str, int]:
        return self._loader.meta()

    def state_dict(self) -> dict:
        return self._loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._loader.load_state_dict(state)


class ShardedReader:
    """Mixin for a reader operator whose samples stream through ``self.loader`` (a
    :class:`ShardedLoader` or :class:`ListSharding`, made in ``setup``): ``bind_rng`` gives
    the loader the operator's RNG, ``reader_meta`` and ``batch_params`` come from it, and
    checkpoints see it as ``self.loader``. List it before ``Operator`` among the bases.
    """

    def bind_rng(self, seed: int) -> None:
        super().bind_rng(seed)
        self.loader.bind(self.rng)

    def checkpointing_enabled(self) -> None:
        """The pipeline keeps checkpoints: ``shuffle_after_epoch`` then shuffles the original
        list every epoch, as DALI does."""
        self.loader.restore_order_each_epoch()

    def reader_meta(self) -> dict[str, int]:
        return self.loader.meta()

    def batch_params(self, n: int) -> list[int]:
        return self.loader.next_batch(n)
