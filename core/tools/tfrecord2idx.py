"""``dlpipe make-tfrecord-index TFRECORD [INDEX]``: the index file ``fn.readers.tfrecord`` reads.

The format is DALI's ``tfrecord2idx``: one line per record, ``offset size``, where ``size``
counts the whole framed record (8-byte length, 4-byte length CRC, data, 4-byte data CRC).
Unlike ``tfrecord2idx``, the length CRC of every record is checked, so a file that is not a
TFRecord (or is cut short) fails here with its offset instead of later in the reader.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import DlpipeError
from ..readers.tfrecord import scan_records


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
    parser = argparse.ArgumentParser(
        prog="dlpipe make-tfrecord-index",
        description="Write the index file of a TFRecord file (DALI's tfrecord2idx format).",
    )
    parser.add_argument("tfrecord", help="the TFRecord file")
    parser.add_argument("index", nargs="?", help="the index file (default: TFRECORD's .idx)")
    args = parser.parse_args(argv)
    try:
        path = make_tfrecord_index(args.tfrecord, args.index)
    except DlpipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
