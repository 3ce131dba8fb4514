"""Index makers for the container readers, also run as ``dlpipe make-tfrecord-index`` and
``dlpipe make-wds-index``.

    >>> from dlpipe.tools import make_tfrecord_index, make_webdataset_index
    >>> make_tfrecord_index("train-0.tfrecord", "train-0.idx")
    >>> make_webdataset_index("shard-0.tar", "shard-0.idx")
"""

from __future__ import annotations

from .tfrecord2idx import make_tfrecord_index
from .wds2idx import make_webdataset_index

__all__ = ["make_tfrecord_index", "make_webdataset_index"]
