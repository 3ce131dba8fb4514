"""Index makers for the container readers, also run as ``dlpipe make-tfrecord-index``,
``dlpipe make-wds-index`` and ``dlpipe make-rec-index`` (or ``python -m dlpipe.tools.<tool>``
with ``tfrecord2idx``, ``wds2idx``, ``rec2idx``).

    >>> from dlpipe.tools import make_rec_index, make_tfrecord_index, make_webdataset_index
    >>> make_tfrecord_index("train-0.tfrecord", "train-0.idx")
    >>> make_webdataset_index("shard-0.tar", "shard-0.idx")
    >>> make_rec_index("train.rec", "train.idx")
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "make_tfrecord_index": "tfrecord2idx",
    "make_webdataset_index": "wds2idx",
    "make_rec_index": "rec2idx",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # Lazy, so that ``python -m dlpipe.tools.<tool>`` does not import the tool twice.
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
