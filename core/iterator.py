"""The framework-neutral base iterator: epochs, sharding and the last batch, written once.

Readers stream forever (DALI-style); this module turns reader metadata
(``pipe.reader_meta(reader_name)``) into epochs: how many batches each epoch has, what the last
one holds, how shards rotate. The framework plugins (``dlpipe.plugins.pytorch``, ...) subclass
:class:`BaseIterator` and only override :meth:`BaseIterator._convert` (and, where a batch keeps
its shape, :meth:`BaseIterator._cut`).

Example:
    >>> from dlpipe import fn, pipeline_def
    >>> from dlpipe.iterator import BaseIterator, LastBatchPolicy
    >>> @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    ... def pipe(root):
    ...     return fn.readers.file(file_root=root, pad_last_batch=True, name="Reader")
    >>> it = BaseIterator(pipe(root), ["data", "label"], reader_name="Reader",
    ...                   last_batch_policy=LastBatchPolicy.PARTIAL)
    >>> for batch in it:            # batch: [{"data": ..., "label": ...}], one dict per pipeline
    ...     pass
"""

from __future__ import annotations

import enum
import logging
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import ArgumentError, PipelineError
from .readers._sharding import shard_size

logger = logging.getLogger(__name__)

__all__ = ["BaseIterator", "LastBatchPolicy"]


class LastBatchPolicy(enum.IntEnum):
    """What an iterator does with the last batch of an epoch when the shard does not fill it.

    * ``FILL`` (0): return full batches; the tail is padding copies of the shard's last sample
      (reader ``pad_last_batch=True``) or the first samples of the reader's next epoch.
    * ``DROP`` (1): return only batches made entirely of samples of this epoch.
    * ``PARTIAL`` (2): cut the last batch down to this epoch's real samples.

    ``LastBatchPolicy(3)`` (any other value) raises ``ValueError``.
    """

    FILL = 0
    DROP = 1
    PARTIAL = 2


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside dlpipe (plugins
    call the base constructor, so a fixed level would blame them)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("dlpipe"):
        frame, level = frame.f_back, level + 1
    return level


def _to_policy(value: Any) -> LastBatchPolicy:
    if isinstance(value, str):
        try:
            return LastBatchPolicy[value.upper()]
        except KeyError:
            pass
    elif isinstance(value, int | np.integer) and not isinstance(value, bool):
        try:
            return LastBatchPolicy(int(value))
        except ValueError:
            pass
    raise ArgumentError(
        f"last_batch_policy={value!r} must be LastBatchPolicy.FILL, DROP or PARTIAL (0, 1, 2)"
    )


def _to_auto_reset(value: Any) -> bool:
    if value is None or value is False or value == "no":
        return False
    if value is True or value == "yes":
        return True
    raise ArgumentError(f"auto_reset={value!r} must be True, False, None, 'yes' or 'no'")


_STOP = object()  # a peek that met the end of the epoch


class BaseIterator:
    """Drives one or more pipelines in lockstep and splits their stream into epochs.

    DALI's ``_DaliBaseIterator`` semantics (same arguments, defaults and results), with the
    changes listed under *Differences from DALI*. Each ``next()`` returns a list with one dict
    ``{name: converted output}`` per pipeline; subclasses override :meth:`_convert` (and, for a
    different structure, :meth:`_assemble`).

    Args:
        pipelines: one Pipeline or a list (normally one per GPU or shard). All must have the
            same ``max_batch_size`` B. They are built here, under the "iterator" API type.
        output_map: one distinct name per pipeline output, in order.
        size: samples per epoch, summed over all pipelines; only without ``reader_name``
            (deprecated style: prefer ``reader_name``). -1: run until a pipeline raises
            StopIteration (one pipeline only; readers never do, so such an iterator over a
            reader is endless and has no ``len()``).
        reader_name: the ``name=`` of the reader to size epochs from. Its
            ``reader_meta`` (N samples, S shards, shard id, ``pad_last_batch``,
            ``stick_to_shard``) must agree across pipelines (shard ids aside).
        auto_reset: ``False``/``None``/``"no"``: at the end of an epoch raise StopIteration and
            wait for ``reset()`` (or a new ``iter()``); ``True``/``"yes"``: reset first, then
            raise StopIteration.
        fill_last_batch: deprecated; True means FILL, False means PARTIAL (warns).
        last_batch_padded: without ``reader_name``, whether the reader pads its last batch. It
            changes nothing here (see below) and is kept for DALI scripts.
        last_batch_policy: a :class:`LastBatchPolicy` (or its name or value). Default FILL.
        prepare_first_batch: run the pipelines and convert the first batch in the constructor.

    Epochs with ``reader_name`` (per pipeline; N, S, B as above, s = the real size of the
    shard this pipeline reads this epoch, P = ceil(N/S) = the largest shard):

    * ``len()`` is ``ceil(P/B)`` for FILL and PARTIAL, ``floor(floor(N/S)/B)`` for DROP, in
      every epoch.
    * Reader with ``pad_last_batch=True``: the iterator's epochs are the reader's epochs
      (``ceil(P/B)`` batches each, aligned on batch boundaries). FILL returns all of them,
      padding copies included. PARTIAL cuts them to the first s samples. DROP returns the
      first ``len()`` batches and skips the rest of the reader's epoch, so every epoch starts at
      the start of its shard.
    * Reader without padding: the reader's stream runs on from one shard into the next
      (``start(k), start(k)+1, ...``, wrapping at N), and epoch e of a pipeline is the window
      of ``len()*B`` samples of that stream starting at ``e*len()*B`` (DROP: see below). FILL
      returns the window as it is: full batches, the tail taken from the next shard, and the
      next epoch goes on where this one stopped. With one shard every epoch thus holds every
      sample at least once (``len()*B >= N``); with several, an epoch does not line up with
      shard boundaries: use ``pad_last_batch=True`` when each epoch must cover every sample
      exactly once across shards. PARTIAL keeps the first s samples of the window. DROP
      returns ``len()`` batches and, when ``len()*B < floor(N/S)``, reads one more batch and
      throws it away (as DALI).
    * Data set [1..7], B=2 (DALI's table):

      ========  =====================  ======================
      policy    pad_last_batch=True    pad_last_batch=False
      ========  =====================  ======================
      PARTIAL   [7], next starts [1,2] [7], next starts [2,3]
      FILL      [7,7], next [1,2]      [7,1], next [2,3]
      DROP      [5,6], next [1,2]      [5,6], next [2,3]
      ========  =====================  ======================

    * Shards rotate: without ``stick_to_shard``, the pipeline of shard k reads shard
      ``(k + epoch) % S``.

    Without ``reader_name`` and with ``size`` (the sum over all pipelines), every step takes
    one batch from each pipeline; ``len()`` is ``ceil(size/(n*B))`` (``floor`` for DROP) for n
    pipelines; the PARTIAL tail keeps the pipelines holding the first ``size`` samples of the
    epoch (the last one cut); DROP reads and throws away one extra step when ``size`` is not
    a multiple of ``n*B``.

    Differences from DALI (deliberate):

    * ``reader_name`` with ``size`` or ``last_batch_padded`` is an :class:`ArgumentError` (a
      ValueError), not an assertion; so are the other argument checks.
    * ``len()`` never changes between epochs, and every epoch yields exactly ``len()``
      batches (PARTIAL aside, below). DALI recomputes the size at each ``reset()`` under FILL
      without padding, so its ``len()`` changes after epoch 1 (DALI issue #4440).
      ``last_batch_padded`` therefore changes nothing.
    * A PARTIAL batch is never empty. When s is a multiple of B smaller than P (for example
      N=26, S=4, B=6: shards of 6 and 7 samples), DALI returns a 0-length batch
      (issue #3855). Here the epoch ends one batch early instead (the pipeline's batch is read
      and thrown away), so such epochs have ``len() - 1`` batches. With several pipelines in
      one iterator, a pipeline without samples left is left out of the list; the epoch ends
      when none has any. With one pipeline per process (torchrun), ranks can then make
      different numbers of steps: use FILL or DROP for DistributedDataParallel.
    * DROP with ``pad_last_batch`` skips the whole padded tail of the reader's epoch. DALI
      reads at most one batch past ``len()`` and so can start the next epoch on a padding
      batch (when S does not divide N and ``ceil(N/S) - 1`` is a multiple of B).
    * ``reset()`` in the middle of an epoch logs a warning and is ignored (as DALI);
      ``reset()`` before anything was taken from the epoch is a silent no-op.

    Raises:
        ArgumentError: bad arguments (named with their values), pipelines that disagree.
        PipelineError: a batch of the wrong size, or no data at all for the first batch.
    """

    def __init__(
        self,
        pipelines,
        output_map: Sequence[str],
        size: int = -1,
        reader_name: str | None = None,
        auto_reset: bool | str | None = False,
        fill_last_batch: bool | None = None,
        last_batch_padded: bool = False,
        last_batch_policy: LastBatchPolicy | int | str = LastBatchPolicy.FILL,
        prepare_first_batch: bool = True,
    ):
        if pipelines is None:
            raise ArgumentError("pipelines=None: give one Pipeline or a list of them")
        pipes = list(pipelines) if isinstance(pipelines, list | tuple) else [pipelines]
        if not pipes:
            raise ArgumentError("pipelines=[]: give at least one Pipeline")
        batch_sizes = [p.max_batch_size for p in pipes]
        if len(set(batch_sizes)) != 1:
            raise ArgumentError(f"all pipelines must have the same batch_size, got {batch_sizes}")
        self.batch_size: int = batch_sizes[0]
        self._pipes = pipes
        if isinstance(output_map, str):
            output_map = [output_map]
        self.output_map = list(output_map)
        if len(set(self.output_map)) != len(self.output_map):
            raise ArgumentError(f"output_map={self.output_map!r}: names must be distinct")

        if fill_last_batch is not None:
            warnings.warn(
                "fill_last_batch is deprecated: use last_batch_policy=LastBatchPolicy.FILL "
                "(fill_last_batch=True) or PARTIAL (False)",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
            policy = LastBatchPolicy.FILL if fill_last_batch else LastBatchPolicy.PARTIAL
        else:
            policy = _to_policy(last_batch_policy)
        self._auto_reset = _to_auto_reset(auto_reset)
        if isinstance(size, bool) or not isinstance(size, int | np.integer):
            raise ArgumentError(f"size={size!r} must be an integer (-1: unknown)")
        size = int(size)
        if size == 0:
            raise ArgumentError("size=0: the epoch would be empty (use -1 for an unknown size)")
        if reader_name is not None:
            if size > 0:
                raise ArgumentError(
                    f"size={size} cannot go with reader_name={reader_name!r}: the reader sets "
                    "the epoch size"
                )
            if last_batch_padded:
                raise ArgumentError(
                    f"last_batch_padded=True cannot go with reader_name={reader_name!r}: it "
                    "comes from the reader's pad_last_batch"
                )
        elif size < 0:
            if len(pipes) > 1:
                raise ArgumentError(
                    f"size={size} (unknown) works with one pipeline only, got {len(pipes)}; "
                    "give reader_name"
                )
            policy = LastBatchPolicy.FILL
        else:
            warnings.warn(
                "set reader_name rather than size and last_batch_padded whenever possible: "
                "a wrong size can skip or repeat samples",
                UserWarning,
                stacklevel=_user_stacklevel(),
            )
        self._policy = policy
        self._reader_name = reader_name
        self._last_batch_padded = bool(last_batch_padded)

        for p in pipes:
            p._set_api("iterator")
            p.build()
        for i, p in enumerate(pipes):
            n_out = len(p._outputs)
            if n_out != len(self.output_map):
                raise ArgumentError(
                    f"output_map={self.output_map!r} names {len(self.output_map)} outputs, but "
                    f"pipeline {i} has {n_out}"
                )

        n_pipes, b = len(pipes), self.batch_size
        self._shard_sizes: np.ndarray | None = None
        self._shards_id: np.ndarray | None = None
        if reader_name is not None:
            self._init_from_reader(reader_name)
            n, s = self._epoch_size, self._num_shards
            largest = -(-n // s)
            if policy == LastBatchPolicy.DROP:
                self._size = n // s
                self._len = self._size // b
            else:
                self._size = largest if self._last_batch_padded else math.ceil(largest / b) * b
                self._len = math.ceil(largest / b)
            if self._last_batch_padded:
                self._stream_batches = math.ceil(largest / b)
            elif policy == LastBatchPolicy.DROP:
                self._stream_batches = self._len + (self._len * b < n // s)
            else:
                self._stream_batches = self._len
            if self._len == 0:
                raise ArgumentError(
                    f"last_batch_policy=DROP with batch_size={b} larger than the smallest shard "
                    f"({n // s} samples of {n} in {s} shards): no batch would ever be returned"
                )
        elif size > 0:
            self._size = size
            if policy == LastBatchPolicy.DROP:
                self._len = size // (n_pipes * b)
                if self._len == 0:
                    raise ArgumentError(
                        f"last_batch_policy=DROP with size={size} smaller than one step of "
                        f"{n_pipes} x batch_size={b}: no batch would ever be returned"
                    )
                self._stream_batches = self._len + (self._len * n_pipes * b < size)
            else:
                self._len = math.ceil(size / (n_pipes * b))
                self._stream_batches = self._len
        else:
            self._size = -1
            self._len = None
            self._stream_batches = None

        self._epoch = 0
        self._fetched = 0  # batches taken from the pipelines in this epoch
        self._delivered = 0  # batches handed to the user in this epoch
        self._ended = False
        self._scheduled = False
        # A batch fetched before next() asked for it (see _peek), or _STOP; and the pipelines'
        # checkpoints from before it was fetched: until it is delivered, checkpoints() must not
        # count it.
        self._peeked: Any = None
        self._pre_peek: list[bytes] | None = None
        self._checkpointing = self._check_checkpointing()
        self._restore_state()
        limit = self._epoch_batches()
        # Restored in the middle of an endless epoch: the source may stop at the next batch,
        # which next() must report as the epoch's end, so nothing is prepared.
        endless_mid_epoch = limit is None and self._delivered > 0
        if (
            prepare_first_batch
            and not self._ended
            and not endless_mid_epoch
            and (limit is None or self._fetched < limit)
        ):
            try:
                self._peek()
            except StopIteration:
                raise PipelineError(
                    "there is no data in the pipeline for the first batch (an external source "
                    "stopped at once?)"
                ) from None

    # --- checkpoints -------------------------------------------------------------------------
    def _check_checkpointing(self) -> bool:
        flags = {p._enable_checkpointing for p in self._pipes}
        if len(flags) > 1:
            raise ArgumentError(
                "the pipelines disagree on enable_checkpointing: all or none must have it"
            )
        return flags.pop()

    def _state(self) -> dict:
        return {
            "epoch": self._epoch,
            "fetched": self._fetched,
            "delivered": self._delivered,
            "ended": self._ended,
            "shards_id": None if self._shards_id is None else self._shards_id.tolist(),
        }

    def _pipeline_checkpoints(self) -> list[bytes]:
        state = self._state()
        return [p.checkpoint(iterator_data=state) for p in self._pipes]

    def checkpoints(self) -> list[bytes]:
        """One checkpoint per pipeline, each holding this iterator's position too.

        To resume, build pipeline i with ``checkpoint=cps[i]`` (and ``enable_checkpointing=True``)
        and make the iterator over them with the same arguments: it continues with exactly the
        batches this one would have returned next, epoch boundaries included.
        """
        if not self._checkpointing:
            raise PipelineError("checkpoints() needs pipelines with enable_checkpointing=True")
        if self._peeked is not None and self._pre_peek is not None:
            return list(self._pre_peek)
        return self._pipeline_checkpoints()

    def _restore_state(self) -> None:
        restored = [p.is_restored_from_checkpoint for p in self._pipes]
        if not any(restored):
            return
        if not all(restored):
            warnings.warn(
                "only some pipelines were restored from a checkpoint; the iterator "
                "starts from its beginning",
                UserWarning,
                stacklevel=_user_stacklevel(),
            )
            return
        datas = [p.iterator_data for p in self._pipes]
        if any(d is None for d in datas) or any(d != datas[0] for d in datas):
            warnings.warn(
                "the pipelines' checkpoints hold no or different iterator states; the "
                "iterator starts from its beginning",
                UserWarning,
                stacklevel=_user_stacklevel(),
            )
            return
        state = datas[0]
        self._epoch, self._fetched = state["epoch"], state["fetched"]
        self._delivered, self._ended = state["delivered"], state["ended"]
        if state["shards_id"] is not None:
            self._shards_id = np.array(state["shards_id"], dtype=np.int64)

    # --- metadata -------------------------------------------------------------------------
    def _init_from_reader(self, name: str) -> None:
        metas = [p.reader_meta(name) for p in self._pipes]

        def same(key: str, what: str):
            values = [m[key] for m in metas]
            if len(set(values)) != 1:
                raise ArgumentError(
                    f"reader {name!r}: {what} differs between pipelines: {key}={values}"
                )
            return values[0]

        self._epoch_size = int(same("epoch_size", "the data set size"))
        self._num_shards = int(same("number_of_shards", "num_shards"))
        self._last_batch_padded = bool(same("pad_last_batch", "pad_last_batch"))
        self._stick_to_shard = bool(same("stick_to_shard", "stick_to_shard"))
        self._shards_id = np.array([int(m["shard_id"]) for m in metas], dtype=np.int64)
        self._shard_sizes = np.array(
            [shard_size(self._epoch_size, i, self._num_shards) for i in range(self._num_shards)],
            dtype=np.int64,
        )

    @property
    def last_batch_policy(self) -> LastBatchPolicy:
        """The policy in force (``fill_last_batch`` and ``size=-1`` resolved)."""
        return self._policy

    @property
    def size(self) -> int:
        """DALI's ``size``: samples per shard per epoch with ``reader_name`` (FILL: rounded up
        to whole batches, unless padded; DROP: ``floor(N/S)``), the given total otherwise."""
        return self._size

    def __len__(self) -> int:
        if self._len is None:
            raise TypeError(
                "len() of an iterator without reader_name or size is unknown: it runs until the "
                "pipeline stops"
            )
        return self._len

    def _lefts(self, step: int) -> list[int]:
        """Samples of this epoch in each pipeline's batch number ``step`` (0-based)."""
        b = self.batch_size
        if self._reader_name is not None:
            sizes = self._shard_sizes[self._shards_id]
            return [int(min(max(s - step * b, 0), b)) for s in sizes]
        n = len(self._pipes)
        return [min(max(self._size - (step * n + i) * b, 0), b) for i in range(n)]

    def _epoch_batches(self) -> int | None:
        """Batches handed out in this epoch: ``len()``, one fewer when PARTIAL would return an
        empty last batch."""
        if self._len is None:
            return None
        if self._policy == LastBatchPolicy.PARTIAL and not any(self._lefts(self._len - 1)):
            return self._len - 1
        return self._len

    # --- iteration ------------------------------------------------------------------------
    def __iter__(self):
        if self._delivered > 0 or self._ended:
            self.reset()
        return self

    def __next__(self):
        if self._peeked is None:
            batch = self._next_batch()
        else:
            batch, self._peeked = self._peeked, None
            if batch is _STOP:
                raise StopIteration
        self._delivered += 1
        return batch

    def _peek(self) -> Any:
        """The batch the next ``next()`` returns, fetched now unless one is held already.

        The held batch is not delivered yet: ``reset()`` and ``iter()`` do not count it, and
        ``checkpoints()`` returns the pipelines' checkpoints from before it was fetched. An
        epoch end met here is held too: StopIteration now, and from the next ``next()`` (or
        until ``reset()``).
        """
        if self._peeked is None:
            self._pre_peek = self._pipeline_checkpoints() if self._checkpointing else None
            try:
                self._peeked = self._next_batch()
            except StopIteration:
                self._peeked = _STOP
        if self._peeked is _STOP:
            raise StopIteration
        return self._peeked

    def next(self):
        """The next batch (same as ``next(it)``)."""
        return self.__next__()

    def _schedule_all(self) -> None:
        self._scheduled = True
        for p in self._pipes:
            p.schedule_run()

    def _stop(self):
        self._finish_epoch()
        if self._auto_reset:
            self.reset()
        raise StopIteration

    def _next_batch(self):
        if not self._scheduled:
            self._schedule_all()
        if self._ended:
            self._stop()
        limit = self._epoch_batches()
        if limit is not None and self._fetched >= limit:
            self._stop()
        outputs = []
        try:
            for p in self._pipes:
                outputs.append(p.share_outputs())
        except StopIteration:
            self._ended = True
            if self._auto_reset:
                self.reset()
            raise
        if self._len is not None:
            for i, outs in enumerate(outputs):
                for name, tl in zip(self.output_map, outs, strict=True):
                    if len(tl) != self.batch_size:
                        raise PipelineError(
                            f"pipeline {i}, output {name!r}: a batch of {len(tl)} samples, but "
                            f"the iterator needs full batches of {self.batch_size} when "
                            "reader_name or size is given"
                        )
        lefts = self._lefts(self._fetched) if self._policy == LastBatchPolicy.PARTIAL else None
        dicts = []
        for i, (p, outs) in enumerate(zip(self._pipes, outputs, strict=True)):
            if lefts is not None and lefts[i] == 0:
                continue
            d = {
                name: self._convert_output(name, tl, p)
                for name, tl in zip(self.output_map, outs, strict=True)
            }
            if lefts is not None and lefts[i] < self.batch_size:
                d = self._cut(d, lefts[i])
            dicts.append(d)
        self._advance()
        return self._assemble(dicts)

    def _advance(self) -> None:
        """Give every pipeline's outputs back and queue its next iteration."""
        for p in self._pipes:
            p.release_outputs()
            p.schedule_run()
        self._fetched += 1

    def _discard(self, count: int) -> None:
        if count > 0 and not self._scheduled:  # an iterator restored from a checkpoint
            self._schedule_all()
        for _ in range(count):
            for p in self._pipes:
                p.share_outputs()
            self._advance()

    def _finish_epoch(self) -> None:
        """Read and throw away what the epoch still owes the stream, once."""
        if self._ended:
            return
        if self._stream_batches is not None:
            self._discard(self._stream_batches - self._fetched)
        self._ended = True

    def reset(self) -> None:
        """Start the next epoch. Ignored, with a warning, in the middle of an epoch."""
        if self._peeked is _STOP:  # a peeked epoch end is dropped either way
            self._peeked = None
        if not self._ended:
            if self._delivered == 0:
                return
            if self._len is not None and self._delivered < self._epoch_batches():
                logger.warning(
                    "dlpipe iterator does not support resetting while epoch is not finished "
                    "(%d of %d batches taken). Ignoring...",
                    self._delivered,
                    self._epoch_batches(),
                )
                return
        self._finish_epoch()
        self._epoch += 1
        self._fetched = 0
        self._delivered = 0
        self._ended = False
        if self._shards_id is not None and not self._stick_to_shard:
            self._shards_id = (self._shards_id + 1) % self._num_shards
        for p in self._pipes:
            p.reset()
            if self._scheduled and p.empty():
                p.schedule_run()

    # --- conversion (what plugins override) ------------------------------------------------
    def _convert(self, tensorlist, pipeline) -> Any:
        """Turn one output batch into the framework's type. The default: the dense batch as a
        numpy array (CPU) or a CuPy array (GPU, after the batch is ready)."""
        return tensorlist.as_array()

    def _convert_output(self, name: str, tensorlist, pipeline) -> Any:
        """Convert the output ``name``: :meth:`_convert` unless a plugin converts outputs by
        name (the PyTorch ragged iterator's per-output types)."""
        return self._convert(tensorlist, pipeline)

    def _cut(self, batch: dict[str, Any], rows: int) -> dict[str, Any]:
        """One pipeline's converted PARTIAL last batch, cut to its first ``rows`` real samples
        (``0 < rows < batch_size``). The default slices every output to ``t[:rows]``."""
        return {name: t[:rows] for name, t in batch.items()}

    def _assemble(self, dicts: list[dict[str, Any]]) -> Any:
        """The value ``next()`` returns, from one dict per pipeline (left-out pipelines aside)."""
        return dicts
