"""``dlpipe make-rec-index REC [INDEX]``: the index file ``fn.readers.mxnet`` reads.

The format is MXNet's (``im2rec``, DALI's ``rec2idx``): one line per record, ``key<TAB>offset``,
keys counting from 0, offsets of each record's first part in bytes. Unlike ``rec2idx`` it needs
no MXNet, and it checks every part's magic number and continuation flag, so a file that is not
RecordIO (or is cut short) fails here with its offset instead of later in the reader.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..readers.mxnet import scan_recordio
from ._cli import run_index_tool


def make_rec_index(rec_path: str, index_path: str | None = None) -> str:
    """Write the index of the RecordIO file ``rec_path`` and return its path.

    Args:
        rec_path: the ``.rec`` file.
        index_path: where to write; default: ``rec_path`` with its extension replaced by
            ``.idx``.

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: a part with a wrong magic number, a continuation flag out of order or cut
            off by the end of the file (the message names the file and the offset); nothing is
            written then.

    Example:
        >>> make_rec_index("train.rec")
        'train.idx'
    """
    rec_path = os.fspath(rec_path)
    if index_path is None:
        index_path = os.path.splitext(rec_path)[0] + ".idx"
        if os.path.abspath(index_path) == os.path.abspath(rec_path):
            index_path = rec_path + ".idx"
    offsets = scan_recordio(rec_path, "make-rec-index")
    tmp = f"{index_path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.writelines(f"{key}\t{offset}\n" for key, offset in enumerate(offsets))
    os.replace(tmp, index_path)
    return os.fspath(index_path)


def main(argv: Sequence[str] | None = None) -> int:
    return run_index_tool(
        argv,
        "dlpipe make-rec-index",
        "Write the index file of an MXNet RecordIO file (the im2rec / rec2idx format).",
        "record",
        "the .rec file",
        make_rec_index,
    )


if __name__ == "__main__":
    sys.exit(main())
