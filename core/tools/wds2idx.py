"""``dlpipe make-wds-index TAR [INDEX]``: the index file ``fn.readers.webdataset`` reads.

The format is DALI's ``wds2idx`` v1.2: a header line ``v1.2 <number of samples>``, then one line
per sample listing its components as ``<ext> <offset> <size> <member name>`` (offset of the
member's data, in bytes, a multiple of 512).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import DataNotFoundError, DecodeError
from ..readers.webdataset import scan_tar
from ._cli import run_index_tool


def default_index_path(tar_path: str) -> str:
    """``dir/shard-0.tar`` -> ``dir/shard-0.idx`` (cut at the first dot of the basename)."""
    head, base = os.path.split(os.fspath(tar_path))
    dot = base.find(".", 1)
    return os.path.join(head, (base[:dot] if dot > 0 else base) + ".idx")


def make_webdataset_index(tar_path: str, index_path: str | None = None) -> str:
    """Write the index of the WebDataset shard ``tar_path`` and return its path.

    Args:
        tar_path: a plain tar file.
        index_path: where to write; default :func:`default_index_path`.

    Raises:
        DataNotFoundError: the file does not exist or holds no samples.
        DecodeError: not a tar file, a truncated one (naming the offset), or a member name with
            whitespace (the format cannot store it).
    """
    tar_path = os.fspath(tar_path)
    index_path = os.fspath(index_path) if index_path is not None else default_index_path(tar_path)
    who = "make-wds-index"
    samples = scan_tar(tar_path, who)
    if not samples:
        raise DataNotFoundError(f"{who}: tar file {tar_path!r} holds no samples")
    lines = [f"v1.2 {len(samples)}\n"]
    for comps in samples:
        for _, offset, _, name in comps:
            if any(c.isspace() for c in name):
                raise DecodeError(
                    f"{who}: member {name!r} at offset {offset} of {tar_path!r} has whitespace "
                    "in its name, which the index format cannot store"
                )
        lines.append(" ".join(f"{e} {o} {s} {n}" for e, o, s, n in comps) + "\n")
    tmp = f"{index_path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(lines)
    os.replace(tmp, index_path)
    return index_path


def main(argv: Sequence[str] | None = None) -> int:
    return run_index_tool(
        argv,
        "dlpipe make-wds-index",
        "Write the index file of a WebDataset tar shard (DALI's wds2idx v1.2).",
        "archive",
        "the tar file",
        make_webdataset_index,
    )


if __name__ == "__main__":
    sys.exit(main())
