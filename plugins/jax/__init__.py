"""dlpipe for JAX: batches as ``jax.Array``, sharded over devices (DALI's
``nvidia.dali.plugin.jax``).

Install with ``pip install "dlpipe[jax]"``. Importing this package imports JAX.

* :class:`GenericIterator` (alias ``DALIGenericIterator``): one dict ``{name: jax.Array}`` per
  step; several pipelines plus a ``NamedSharding`` give one global array.
* :func:`data_iterator`: a decorator that makes one pipeline per device and the iterator.
* :class:`PeekableIterator` (alias ``DALIGenericPeekableIterator``) and
  :func:`peekable_data_iterator`: CLU-compatible ``peek()``, ``peek_async()``,
  ``element_spec`` (also importable from ``dlpipe.plugins.jax.clu``, as in DALI).

Example:
    >>> from dlpipe.plugins.jax import GenericIterator, LastBatchPolicy
    >>> it = GenericIterator(pipe, ["images", "labels", "is_nonpadding"],
    ...                      reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL)
    >>> for batch in it:       # every batch has the full shape; padding rows are masked out
    ...     loss = (per_sample_loss(batch) * batch["is_nonpadding"]).sum()
"""

from __future__ import annotations

from dlpipe.iterator import LastBatchPolicy

from .clu import (
    ArraySpec,
    DALIGenericPeekableIterator,
    PeekableIterator,
    peekable_data_iterator,
)
from .iterator import NONPADDING, DALIGenericIterator, GenericIterator, data_iterator

__all__ = [
    "NONPADDING",
    "ArraySpec",
    "DALIGenericIterator",
    "DALIGenericPeekableIterator",
    "GenericIterator",
    "LastBatchPolicy",
    "PeekableIterator",
    "data_iterator",
    "peekable_data_iterator",
]
