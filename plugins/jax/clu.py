"""A peekable JAX iterator, compatible with Google CLU's ``PeekableDatasetIterator``.

DALI's ``nvidia.dali.plugin.jax.clu``: :class:`PeekableIterator` (alias
``DALIGenericPeekableIterator``) adds ``peek()``, ``peek_async()``, a thread-safe ``next`` and
``element_spec`` to :class:`dlpipe.plugins.jax.GenericIterator`; ``@peekable_data_iterator`` is
``@data_iterator`` building it.

Example:
    >>> it = PeekableIterator(pipe, ["images", "labels"], reader_name="Reader")
    >>> it.element_spec["images"]          # ArraySpec(dtype=uint8, shape=(8, 32, 32, 3))
    >>> future = it.peek_async()           # the next batch, prepared on a background thread
    >>> batch = next(it)                   # the same batch as future.result()
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from dlpipe.errors import PipelineError
from dlpipe.iterator import LastBatchPolicy

from .iterator import GenericIterator, _iterator_decorator

try:  # CLU's own spec type where CLU is installed
    from clu.data.dataset_iterator import ArraySpec
except ImportError:

    class ArraySpec(NamedTuple):
        """Shape and dtype of one output (CLU's ``ArraySpec`` when CLU is not installed)."""

        dtype: np.dtype
        shape: tuple[int, ...]


__all__ = [
    "ArraySpec",
    "DALIGenericPeekableIterator",
    "PeekableIterator",
    "peekable_data_iterator",
]


class PeekableIterator(GenericIterator):
    """:class:`~dlpipe.plugins.jax.GenericIterator` with ``peek()``, ``peek_async()`` and
    ``element_spec`` (same arguments).

    * ``peek()`` returns the batch the next ``next()`` will return, without consuming it
      (StopIteration at the end of the epoch, and the following ``next()`` raises it too).
    * ``peek_async()`` does the same on a one-thread pool and returns its
      ``concurrent.futures.Future``.
    * ``next()``/``peek()`` are thread-safe (one lock).
    * ``element_spec``: ``{name: ArraySpec(dtype, shape)}`` of the batches (CLU's ArraySpec if
      ``clu`` is importable); taken from the first batch (peeked if none was prepared). A batch
      of another shape or dtype raises ValueError: with PARTIAL padding every batch has the same
      shape, so this only catches pipelines whose output shape varies.
    * ``checkpoints()`` raises PipelineError while a peeked batch has not been taken.
    * ``is_nonpadding`` is the mask of the batch last returned by ``next()``; ask for
      ``"is_nonpadding"`` in ``output_map`` to get it in each dict (the peeked ones too).
    """

    def __init__(self, *args, **kwargs):
        self._mutex = threading.RLock()
        self._pool: ThreadPoolExecutor | None = None
        # The batch (or epoch end) the base iterator holds came from peek(), not from
        # prepare_first_batch: checkpoints() refuses it.
        self._user_peeked = False
        self._element_spec: dict[str, ArraySpec] | None = None
        super().__init__(*args, **kwargs)
        if self._peeked is not None:
            self._element_spec = self._spec_of(self._peeked[0])

    @staticmethod
    def _spec_of(batch: dict[str, Any]) -> dict[str, ArraySpec]:
        return {
            name: ArraySpec(dtype=np.dtype(x.dtype), shape=tuple(x.shape))
            for name, x in batch.items()
        }

    def _check_spec(self, batch: dict[str, Any]) -> None:
        spec = self._spec_of(batch)
        if self._element_spec is None:
            self._element_spec = spec
            return
        for name, want in self._element_spec.items():
            got = spec[name]
            if got.shape != want.shape or got.dtype != want.dtype:
                raise ValueError(
                    f"output {name!r} changed from shape {want.shape} dtype {want.dtype} to "
                    f"shape {got.shape} dtype {got.dtype}: the peekable iterator needs the same "
                    "shape and dtype in every batch"
                )

    def __next__(self) -> dict[str, Any]:
        with self._mutex:
            self._user_peeked = False
            batch, mask = self._next_pair()
            self._check_spec(batch)
            self.is_nonpadding = mask
            return batch

    def peek(self) -> dict[str, Any]:
        """The next batch, left in place for the next ``next()``."""
        with self._mutex:
            self._user_peeked = True
            batch = self._peek()[0]
            if self._element_spec is None:
                self._element_spec = self._spec_of(batch)
            return batch

    def peek_async(self) -> Future:
        """``peek()`` on a background thread (one for the iterator); returns its Future."""
        with self._mutex:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="dlpipe-jax-peek")
            return self._pool.submit(self.peek)

    @property
    def element_spec(self) -> dict[str, ArraySpec]:
        """``{name: ArraySpec(dtype, shape)}`` of every batch."""
        with self._mutex:
            if self._element_spec is None:
                self.peek()
            return self._element_spec

    def checkpoints(self) -> list[bytes]:
        """As :meth:`GenericIterator.checkpoints`; raises while a peeked batch (or a peeked epoch
        end) has not been taken by ``next()``, as DALI does."""
        with self._mutex:
            if self._user_peeked and self._peeked is not None:
                raise PipelineError(
                    "checkpoints() after peek(): take the peeked batch with next() first (a "
                    "checkpoint now would skip it on resume)"
                )
            return super().checkpoints()

    def reset(self) -> None:
        with self._mutex:
            super().reset()

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


DALIGenericPeekableIterator = PeekableIterator


def peekable_data_iterator(
    pipeline_fn: Callable | None = None,
    output_map: Sequence[str] = (),
    size: int = -1,
    reader_name: str | None = None,
    auto_reset: bool | str | None = False,
    last_batch_padded: bool = False,
    last_batch_policy: LastBatchPolicy | int | str = LastBatchPolicy.FILL,
    prepare_first_batch: bool = True,
    sharding=None,
    devices: Sequence[Any] | None = None,
):
    """:func:`dlpipe.plugins.jax.data_iterator` making a :class:`PeekableIterator` (same
    arguments and rules)."""
    return _iterator_decorator(
        PeekableIterator,
        pipeline_fn,
        dict(
            output_map=output_map,
            size=size,
            reader_name=reader_name,
            auto_reset=auto_reset,
            last_batch_padded=last_batch_padded,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=prepare_first_batch,
        ),
        sharding,
        devices,
    )
