"""``dlpipe make-tfrecord-index TFRECORD [INDEX]``: the index file ``fn.readers.tfrecord`` reads.

The format is DALI's ``tfrecord2idx``: one line per record, ``offset size``, where ``size``
counts the whole framed record (8-byte length, 4-byte length CRC, data, 4-byte data CRC).
Unlike ``tfrecord2idx``, the length CRC of every record is checked, so a file that is not a
TFRecord (or is cut short) fails here with its offset instead of later in the reader.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..readers.tfrecord import scan_records
from ._cli import run_index_tool


def make_tfrecord_index(tfrecord_path: str, index_path: str | None = None) -> str:
    """Write the index of ``tfrecord_path`` and return its path.

    Args:
        tfrecord_path: the TFRecord file.
        index_path: where to write; default: ``tfrecord_path`` with its extension replaced
            by ``.idx``.

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: a record with a bad length CRC or cut off by the end of the file (the
            message names the file and the offset); nothing is written then.
    """
    tfrecord_path = os.fspath(tfrecord_path)
    if index_path is None:
        index_path = os.path.splitext(tfrecord_path)[0] + ".idx"
        if os.path.abspath(index_path) == os.path.abspath(tfrecord_path):
            index_path = tfrecord_path + ".idx"
    entries = scan_records(tfrecord_path)
    tmp = f"{index_path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.writelines(f"{offset} {size}\n" for offset, size in entries)
    os.replace(tmp, index_path)
    return os.fspath(index_path)


def main(argv: Sequence[str] | None = None) -> int:
    return run_index_tool(
        argv,
        "dlpipe make-tfrecord-index",
        "Write the index file of a TFRecord file (DALI's tfrecord2idx format).",
        "tfrecord",
        "the TFRecord file",
        make_tfrecord_index,
    )


if __name__ == "__main__":
    sys.exit(main())
